package rdma

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// gatedNS is a memory backend whose writes wait at a gate, on worker goroutines: a slow
// disk with writes in flight.
type gatedNS struct {
	backend.Backend
	gate    chan struct{}
	entered atomic.Int32
}

func (g *gatedNS) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	g.entered.Add(1)
	<-g.gate
	return g.Backend.WriteBlocks(buf, slba, fua)
}

func (g *gatedNS) Info() backend.Info {
	i := backend.Describe(g.Backend)
	i.Inline, i.Workers = false, 4
	return i
}

// gatedEngine is an engine whose namespace 1 is a gatedNS.
func gatedEngine(t *testing.T) (*engine, *gatedNS) {
	g := &gatedNS{gate: make(chan struct{})}
	opener := func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil {
			return nil, err
		}
		g.Backend = b
		return g, nil
	}
	e := newEngine(t, engineOpts{
		nss:        []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 16 << 20}},
		targetOpts: []target.Option{target.WithBackendOpener(opener)},
	})
	t.Cleanup(func() {
		select {
		case <-g.gate:
		default:
			close(g.gate)
		}
	})
	return e, g
}

// submitWrite sends a 4 KiB write (data fetched by RDMA READ) and returns the command.
func submitWrite(t *testing.T, h *hostQueue, slba uint64) *hostCmd {
	t.Helper()
	c := h.begin()
	copy(c.buf, pattern(4096, byte(slba)))
	cmd := rw(nvmeproto.OpWrite, 1, slba, 8)
	cmd.SGL = c.keyedAt(0, 4096)
	if err := c.submit(&cmd, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEngineDrainAnswersInFlight: a drain (what SIGTERM starts) lets the commands in
// flight finish and sends their responses — they are not lost to the disconnect that
// follows — while a command that arrives during the drain is not started (the host
// resends it after reconnecting) and an Asynchronous Event Request the core holds does not
// keep the drain waiting.
func TestEngineDrainAnswersInFlight(t *testing.T) {
	e, ns := gatedEngine(t)
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 8)

	aer := a.h.begin()
	aerCmd := nvmeproto.Command{Opcode: nvmeproto.OpAsyncEventRequest, SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}}
	if err := aer.submit(&aerCmd, nil); err != nil {
		t.Fatal(err)
	}
	inflight := []*hostCmd{submitWrite(t, io.h, 0), submitWrite(t, io.h, 8), submitWrite(t, io.h, 16)}
	waitCond(t, "3 writes in the backend", func() bool { return ns.entered.Load() == 3 })

	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { done <- drainGroups(ctx, []*group{e.g}, testLogger(t)) }()
	waitCond(t, "the group to count", func() bool { return e.g.counted.Load() })
	if n := e.g.busy.Load(); n != 3 {
		t.Errorf("%d commands owe a response, want 3 (the writes; not the AER)", n)
	}
	late := submitWrite(t, io.h, 24)
	time.Sleep(100 * time.Millisecond)
	if n := ns.entered.Load(); n != 3 {
		t.Fatalf("%d writes reached the backend: a command arriving during the drain was started", n)
	}
	select {
	case err := <-done:
		t.Fatalf("drain returned (%v) with 3 writes in flight", err)
	default:
	}

	close(ns.gate)
	for i, c := range inflight {
		cqe, ok := c.wait(10 * time.Second)
		if !ok {
			t.Fatalf("write %d in flight when the drain began got no response", i)
		}
		expectOK(t, "write in flight across the drain", cqe)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("drain did not end once the writes were answered (busy %d)", e.g.busy.Load())
	}
	if _, ok := late.wait(100 * time.Millisecond); ok {
		t.Error("the write that arrived during the drain was answered")
	}
	if n := ns.entered.Load(); n != 3 {
		t.Errorf("%d writes reached the backend, want 3", n)
	}
	e.closeAll(a, io) // the pool gets every buffer back
	if _, ok := late.wait(time.Second); ok {
		t.Error("the write that arrived during the drain was answered at the disconnect")
	}
}

// TestEngineDrainBounded: a drain whose commands never finish ends when its context does,
// saying how many were left.
func TestEngineDrainBounded(t *testing.T) {
	e, ns := gatedEngine(t)
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 8)
	submitWrite(t, io.h, 0)
	submitWrite(t, io.h, 8)
	waitCond(t, "2 writes in the backend", func() bool { return ns.entered.Load() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := drainGroups(ctx, []*group{e.g}, testLogger(t))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "2 commands still in flight") {
		t.Errorf("drain: %v, want 2 commands in flight and the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("drain took %v with a 300 ms bound", d)
	}
	close(ns.gate)
}

// TestDeviceCloseKeepsHeldPool: closing a device never unmaps its buffer pool while a
// request holds a buffer — here a write a backend worker still has (the SIGSEGV seen at
// shutdown once: the pool unmapped 30 s into the close while a worker wrote into it) —
// nor while connections are open; once every buffer is back it is released.
func TestDeviceCloseKeepsHeldPool(t *testing.T) {
	e, ns := gatedEngine(t)
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 8)
	w := submitWrite(t, io.h, 0)
	waitCond(t, "the write in the backend", func() bool { return ns.entered.Load() == 1 })
	var released atomic.Int32
	release := func() error { released.Add(1); return nil }

	d := &device{name: "fake0", pool: e.pool, release: release}
	err := d.close(0)
	if released.Load() != 0 {
		t.Fatal("the pool was released while a backend worker held one of its buffers")
	}
	if err == nil || !strings.Contains(err.Error(), "4096 buffer pool bytes held") {
		t.Errorf("close with a buffer held: %v", err)
	}

	close(ns.gate)
	cqe, ok := w.wait(10 * time.Second)
	if !ok {
		t.Fatal("no response for the write")
	}
	expectOK(t, "write", cqe)
	waitCond(t, "the buffer back in the pool", func() bool { free, total, _ := e.pool.stats(); return free == total })
	d = &device{name: "fake0", pool: e.pool, release: release}
	if err := d.close(1); err == nil || released.Load() != 0 {
		t.Errorf("close with a connection open: %v, released %d times", err, released.Load())
	}
	e.closeAll(a, io)
	d = &device{name: "fake0", pool: e.pool, release: release}
	if err := d.close(0); err != nil || released.Load() != 1 {
		t.Errorf("close with nothing held: %v, released %d times, want once", err, released.Load())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
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

// TestEngineTeardownLoggedAtInfo: why a queue was torn down is logged at Info (with the
// queue, controller and host), and rate limited: connection churn cannot flood the log,
// and the next line says how many were left out.
func TestEngineTeardownLoggedAtInfo(t *testing.T) {
	var buf syncBuffer
	// The transport's connection loggers carry the remote address and the qid.
	e := newEngine(t, engineOpts{connLog: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With("qid", 1)})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 8)
	e.closeAll(io)
	out := buf.String()
	if !strings.Contains(out, "level=INFO msg=\"queue torn down\" qid=1 cntlid="+strconv.Itoa(int(cntlid))) ||
		!strings.Contains(out, "host="+testHostNQN) || !strings.Contains(out, `reason="rdma: host disconnected"`) {
		t.Fatalf("log after a host disconnected an I/O queue:\n%s", out)
	}
	// Churn: far more teardowns in a second than lines.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // a fresh second
	var fcs []*fconn
	for range 40 {
		fcs = append(fcs, e.dial(2, 4))
	}
	e.closeAll(fcs...)
	lines := strings.Count(buf.String(), "queue torn down") - 1
	if lines >= 40 || lines > 2*logLinesPerSecond {
		t.Errorf("%d teardowns logged %d lines; want at most %d a second", 40, lines, logLinesPerSecond)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	e.closeAll(a)
	if last := buf.String()[strings.LastIndex(buf.String(), "queue torn down"):]; !strings.Contains(last, "suppressed=") {
		t.Errorf("the line after the churn does not say how many were left out: %s", last)
	}
}
