package rdmacm_test

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// TestRDMADeviceRemoval deletes an RDMA device under a connection: every CM
// ID on it gets DEVICE_REMOVAL, and closing everything afterwards works (the
// asynchronous DEVICE_FATAL comes only from drivers that can disassociate
// user contexts, which Soft-RoCE cannot: it is logged if it comes). A second Soft-RoCE
// device (rxe1 on gonvmfrm0) carries the connection, in a child process:
// Soft-RoCE cannot detach a process from a removed device
// (no disassociate_ucontext), so the removal completes only when every
// process that has the device open has closed it, and the child keeps it
// open to the end. The parent never opens rxe1. Runs only in the VM
// harness's guest.
func TestRDMADeviceRemoval(t *testing.T) {
	if os.Getenv("RDMACM_REMOVAL_CHILD") == "1" {
		removalChild(t, netip.MustParseAddr(os.Getenv("RDMACM_REMOVAL_IP")))
		return
	}
	const dev, nd = "rxe1", "gonvmfrm0"
	ip := netip.MustParseAddr("10.99.201.1")
	rdmatest.SoftRoCE(t, dev, nd, ip)

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self, "-test.run", "^TestRDMADeviceRemoval$", "-test.v", "-test.count=1", "-test.timeout=5m")
	child.Env = append(os.Environ(), "RDMACM_REMOVAL_CHILD=1", "RDMACM_REMOVAL_IP="+ip.String())
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = child.Stdout
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	var out strings.Builder
	ready := make(chan bool, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "REMOVAL-CHILD-READY") {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-done
			t.Fatalf("the child ended before connecting:\n%s", out.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the child did not connect:\n%s", out.String())
	}
	delDone := rdmatest.DeleteRXE(dev, 4*time.Minute)
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		child.Process.Kill()
		<-done
		t.Errorf("the child did not finish after the removal")
	}
	child.Wait()
	t.Logf("child:\n%s", out.String())
	if !strings.Contains(out.String(), "--- PASS: TestRDMADeviceRemoval") {
		t.Errorf("the child failed")
	}
	if err := <-delDone; err != nil {
		t.Errorf("after the child exited: %v", err)
	}
}

func removalChild(t *testing.T, ip netip.Addr) {
	p := newPair(t, ip, pairOpts{})
	if p.srv.dev.Name() != "rxe1" {
		t.Fatalf("connected over %s, want rxe1", p.srv.dev.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	actx, acancel := context.WithCancel(ctx)
	asyncDone := make(chan struct{})
	go func() {
		defer close(asyncDone)
		for {
			ev, err := p.srv.dev.AsyncEvent(actx)
			if err != nil {
				return
			}
			t.Logf("async event %v", ev)
		}
	}()
	node, fds := uverbsFDs(t, "rxe1")
	if len(fds) == 0 {
		t.Fatalf("no file descriptor open on %s (rxe1's uverbs node) before the removal", node)
	}
	os.Stdout.WriteString("REMOVAL-CHILD-READY\n")
	removed := map[*rdmacm.CMID]bool{}
	for _, c := range []struct {
		ch  *rdmacm.EventChannel
		ids []*rdmacm.CMID
	}{{p.cch, []*rdmacm.CMID{p.cli.id}}, {p.lch, []*rdmacm.CMID{p.listener, p.srv.id}}} {
		for n := 0; n < len(c.ids); {
			ev, err := c.ch.GetEvent(ctx)
			if err != nil {
				t.Fatalf("waiting for DEVICE_REMOVAL: %v (so far %v)", err, removed)
			}
			t.Logf("event %v", ev)
			if ev.Type == rdmacm.EventDeviceRemoval {
				removed[ev.ID] = true
				n++
			}
		}
	}
	for _, id := range []*rdmacm.CMID{p.listener, p.srv.id, p.cli.id} {
		if !removed[id] {
			t.Errorf("no DEVICE_REMOVAL for %v", id)
		}
	}
	time.Sleep(time.Second) // let async events, if any, show in the log
	acancel()
	<-asyncDone
	// With its CM IDs gone, only the Devices reference rxe1 in librdmacm, which closes
	// a removed device's context once nothing does, at its next look at the device
	// list (OpenDevice's rdma_get_devices here): the PDs, CQs and memory regions still
	// open on it must keep it.
	for _, c := range []interface{ Close() error }{p.cli.qp, p.srv.qp, p.cli.id, p.srv.id, p.listener} {
		if err := c.Close(); err != nil {
			t.Logf("closing on a removed device: %v", err)
		}
	}
	if d, err := rdmacm.OpenDevice(""); err == nil {
		d.Close()
	}
	for fd := range fds {
		// the node itself is gone: the link reads "<node> (deleted)"
		if l, err := os.Readlink("/proc/self/fd/" + fd); err != nil || !strings.HasPrefix(l, node) {
			t.Errorf("fd %s, open on %s before the removal, is %q (%v) with rxe1's PDs, CQs and memory still open: "+
				"librdmacm closed the device context under them", fd, node, l, err)
		}
	}
	// Close everything on the dead device (errors are expected and fine).
	if err := p.close(); err != nil {
		t.Logf("closing on a removed device: %v", err)
	}
}

// uverbsFDs returns dev's uverbs device node and the process's file descriptors open on
// it (by number).
func uverbsFDs(t *testing.T, dev string) (string, map[string]bool) {
	t.Helper()
	ibdevs, _ := filepath.Glob("/sys/class/infiniband_verbs/uverbs*/ibdev")
	node := ""
	for _, f := range ibdevs {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == dev {
			node = "/dev/infiniband/" + filepath.Base(filepath.Dir(f))
		}
	}
	if node == "" {
		t.Fatalf("no uverbs node of %s in /sys/class/infiniband_verbs", dev)
	}
	fds := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == node {
			fds[e.Name()] = true
		}
	}
	return node, fds
}
