package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// waitLog waits until the serve log holds s n times.
func waitLog(t *testing.T, log *syncBuffer, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(log.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("not %d × %q in the log within 30 s:\n%s", n, s, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRDMAServeANA: a listener's ANA state changes by gonvmf ctl ana set and by SIGHUP
// after the file's ana_states changed, and hosts read each state from the ANA log.
func TestRDMAServeANA(t *testing.T) {
	ip := rdmatest.Require(t)
	port := 4400 + int(time.Now().UnixNano()%90)
	cfg := serveConfig(t, ip, port)
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := string(text) + "control: {socket: " + sock + "}\n"
	rewrite := func(s string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(base)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"gonvmf", "serve", "-c", cfg}, &out, &errOut) }()
	waitLog(t, &errOut, fmt.Sprintf("serving 1 subsystem on rdma %s:%d", ip, port), 1)

	state := func() nvmeproto.ANAState {
		t.Helper()
		dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
		defer dcancel()
		c, err := initiator.Dial(dctx, initiator.Options{Transport: initiator.TransportRDMA, Addr: ip, Port: port,
			SubNQN: "nqn.2024-01.io.gonvmf:serve-test", Queues: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b := make([]byte, 4096)
		if err := c.GetLogPage(dctx, nvmeproto.LIDANA, nvmeproto.NSIDAll, 0, b); err != nil {
			t.Fatal(err)
		}
		var l nvmeproto.ANALog
		if err := l.Unmarshal(b); err != nil || len(l.Groups) != 1 {
			t.Fatalf("ANA log %+v: %v", l, err)
		}
		return l.Groups[0].State
	}
	if st := state(); st != nvmeproto.ANAOptimized {
		t.Errorf("state at start: %v", st)
	}

	code, o, e := gonvmf(t, "ctl", "--socket", sock, "ana", "set", ip, strconv.Itoa(port), "1", "change")
	if code != 0 || !strings.Contains(o, "ANA group 1 change") {
		t.Fatalf("ctl ana set: exit %d\n%s%s", code, o, e)
	}
	if st := state(); st != nvmeproto.ANAChange {
		t.Errorf("state after ctl ana set change: %v", st)
	}
	code, o, _ = gonvmf(t, "ctl", "--socket", sock, "ana", "ls")
	row := fmt.Sprintf("rdma %s %d 1 change", ip, port)
	found := false
	for _, l := range strings.Split(o, "\n") {
		found = found || strings.Join(strings.Fields(l), " ") == row
	}
	if code != 0 || !found {
		t.Errorf("ctl ana ls: exit %d, no row %q\n%s", code, row, o)
	}

	withANA := strings.Replace(base, fmt.Sprintf("port: %d}", port), fmt.Sprintf("port: %d, ana_states: {1: inaccessible}}", port), 1)
	rewrite(withANA)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(t, &errOut, "reload: 1 change applied", 1)
	if st := state(); st != nvmeproto.ANAInaccessible {
		t.Errorf("state after SIGHUP: %v", st)
	}

	rewrite("listeners: [")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(t, &errOut, "reload refused: nothing changed", 1)
	rewrite(strings.Replace(strings.Replace(withANA, "inaccessible", "optimized", 1), "size: 64MiB", "size: 128MiB", 1))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(t, &errOut, "reload: 2 changes applied", 1)
	if st := state(); st != nvmeproto.ANAOptimized {
		t.Errorf("state after the second SIGHUP: %v", st)
	}

	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("serve exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop:\n%s", errOut.String())
	}
}
