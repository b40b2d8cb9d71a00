package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// TestServeWithoutRDMA: on a machine without an RDMA device serve fails after loading
// the configuration and says how to get one.
func TestServeWithoutRDMA(t *testing.T) {
	if devs, err := rdmacm.Devices(); err == nil && len(devs) > 0 {
		t.Skip("this machine has an RDMA device; TestRDMAServe covers serve here")
	}
	code, _, errOut := gonvmf(t, "serve", "--config", "../../conf/examples/null.yaml")
	if code != 1 || !strings.Contains(errOut, `msg="configuration loaded"`) ||
		!strings.Contains(errOut, "no RDMA device") || !strings.Contains(errOut, "rdma link add rxe0 type rxe netdev") {
		t.Errorf("serve: exit %d\n%s", code, errOut)
	}
}

// TestServeBadConfig: an invalid configuration is reported as check reports it, before
// anything starts.
func TestServeBadConfig(t *testing.T) {
	f := writeFile(t, "bad.yaml", badConfig)
	code, _, errOut := gonvmf(t, "serve", "--config", f)
	if code != 1 || !strings.Contains(errOut, f+":11: subsystems[0].namespaces[0].lba_size") || strings.Contains(errOut, "rdma") {
		t.Errorf("serve with a bad config: exit %d\n%s", code, errOut)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader on different goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func serveConfig(t *testing.T, addr string, port int) string {
	return writeFile(t, "serve.yaml", fmt.Sprintf(`listeners: [{address: %s, port: %d}]
subsystems:
  - nqn: nqn.2024-01.io.gonvmf:serve-test
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: null, size: 1GiB}
      - {nsid: 2, backend: memory, size: 64MiB}
transport: {buffer_pool_size: 16MiB, poll_groups: 1}
`, addr, port))
}

// TestRDMAServe runs serve as a user would (in the guest): it listens, refuses a second
// instance on the same port and an address that is on no RDMA device with errors that
// say so, and exits 0 on a signal after an orderly shutdown.
func TestRDMAServe(t *testing.T) {
	ip := rdmatest.Require(t)
	port := 4500 + int(time.Now().UnixNano()%400)
	cfg := serveConfig(t, ip, port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"gonvmf", "serve", "-c", cfg}, &out, &errOut) }()
	want := fmt.Sprintf("serving 1 subsystem on rdma %s:%d", ip, port)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errOut.String(), want) {
		select {
		case code := <-exited:
			t.Fatalf("serve exited %d before listening:\n%s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 30 s:\n%s", want, errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	code, _, e := gonvmf(t, "serve", "-c", serveConfig(t, ip, port))
	if code != 1 || !strings.Contains(e, "address already in use") {
		t.Errorf("second serve on port %d: exit %d\n%s", port, code, e)
	}
	code, _, e = gonvmf(t, "serve", "-c", serveConfig(t, "127.0.0.1", port))
	if code != 1 || !strings.Contains(e, "not on an RDMA device") || !strings.Contains(e, ip) {
		t.Errorf("serve on 127.0.0.1: exit %d\n%s", code, e)
	}

	cancel() // as SIGTERM does
	select {
	case code := <-exited:
		if code != 0 || !strings.Contains(errOut.String(), `msg=stopped`) {
			t.Errorf("serve exited %d after the signal:\n%s", code, errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop within 60 s of the signal:\n%s", errOut.String())
	}
}
