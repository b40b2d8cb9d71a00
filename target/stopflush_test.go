package target_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// TestStopFlushBounded: the target's stop with two namespaces whose backend hangs (their
// writes and flushes never return, as on an NFS server that went away) between them a
// working one, and a write stuck in the first. Flush returns after one close timeout
// with an error wrapping ErrFlushUnfinished that names the hung namespaces and only
// them, having flushed the working one; an Error line for each hung namespace gives its
// subsystem, NSID, backend, path and how long Flush waited. The closes after it do not
// wait for the hung backends again: the queue with the stuck write closes at once, and
// Close returns at once (ErrNamespaceBusy) with the working namespace's backend closed.
// The old code flushed the namespaces one after another without a limit: Flush never
// returned, and the working namespace, after the first hung one, was never flushed.
func TestStopFlushBounded(t *testing.T) {
	const closeTimeout = time.Second
	hb := newHungBackends(hungNSSize, true)
	logs := &logBuffer{}
	e := newEnv(t, baseConfig(memNS(1, hungNSSize), memNS(2, okNSSize), memNS(3, hungNSSize)),
		target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	t.Cleanup(func() { hb.release(nil) }) // before the harness's Close, which then has nothing to do
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	io.submit(&w, pattern(512, 3))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })

	e.tgt.Quiesce()
	start := time.Now()
	flushed := make(chan error, 1)
	go func() { flushed <- e.tgt.Flush() }()
	var err error
	select {
	case err = <-flushed:
	case <-time.After(closeTimeout + 10*time.Second):
		t.Fatalf("Flush did not return %v after it began, with two namespaces' flushes hung (close timeout %v); flushed: %d of the working namespace",
			time.Since(start).Round(time.Millisecond), closeTimeout, hb.okFlushes.Load())
	}
	took := time.Since(start)
	t.Logf("Flush returned after %v: %v", took.Round(time.Millisecond), err)
	if took < closeTimeout || took > 2*closeTimeout {
		t.Errorf("Flush returned after %v, want the close timeout (%v): the hung flushes are waited for together, once", took, closeTimeout)
	}
	if !errors.Is(err, target.ErrFlushUnfinished) {
		t.Errorf("Flush: %v, want an error wrapping ErrFlushUnfinished", err)
	}
	for nsid, hung := range map[uint32]bool{1: true, 2: false, 3: true} {
		named := err != nil && strings.Contains(err.Error(), fmt.Sprintf("namespace %d (memory -)", nsid))
		if named != hung {
			t.Errorf("Flush's error names namespace %d: %v, want %v: %v", nsid, named, hung, err)
		}
		line := logs.lineWith("flush did not finish within the close timeout", fmt.Sprintf(" nsid=%d ", nsid))
		logged := strings.Contains(line, "level=ERROR")
		if logged != hung {
			t.Errorf("Error line for namespace %d: %v, want %v: %q", nsid, logged, hung, line)
		}
		if hung {
			for _, attr := range []string{"subsystem=" + subNQN, "backend=memory", "path=-", "waited="} {
				if !strings.Contains(line, attr) {
					t.Errorf("the line for namespace %d lacks %s: %q", nsid, attr, line)
				}
			}
		}
	}
	if n := hb.okFlushes.Load(); n != 1 {
		t.Errorf("the working namespace was flushed %d times, want 1", n)
	}
	if n := hb.flushes.Load(); n != 2 {
		t.Errorf("%d flushes reached the hung backends, want 2", n)
	}

	start = time.Now()
	io.conn.Close() // Queue.Close: the stuck write's wait ended with the flushes'
	if d := time.Since(start); d > closeTimeout/2 {
		t.Errorf("the queue with the stuck write closed %v after the stop's flush, want at once: it waited for the hung backend again", d)
	}
	start = time.Now()
	err = e.tgt.Close()
	if d := time.Since(start); d > closeTimeout/2 {
		t.Errorf("Close took %v after the stop's flush, want at once: it waited for the hung backends again", d)
	}
	if !errors.Is(err, target.ErrNamespaceBusy) {
		t.Errorf("Close: %v, want ErrNamespaceBusy for the hung namespaces", err)
	}
	if n := hb.okCloses.Load(); n != 1 {
		t.Errorf("the working namespace's backend was closed %d times by Close, want 1", n)
	}
}

// stopFlushed starts a target with a hung namespace 1 (its writes and flushes never
// return) and a working namespace 2, close timeout closeTimeout, connects a controller
// with I/O queue 1 and runs the stop's first step: Quiesce and a Flush, which leaves
// namespace 1's flush executing.
func stopFlushed(t *testing.T, closeTimeout time.Duration) (e *env, hb *hungBackends, logs *logBuffer, admin, io *hostQueue) {
	t.Helper()
	hb = newHungBackends(hungNSSize, true)
	logs = &logBuffer{}
	e = newEnv(t, baseConfig(memNS(1, hungNSSize), memNS(2, okNSSize)),
		target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	t.Cleanup(func() { hb.release(nil) })
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io = e.ioConnect(1, cntlid, 8)
	e.tgt.Quiesce()
	err := e.tgt.Flush()
	if !errors.Is(err, target.ErrFlushUnfinished) || !strings.Contains(err.Error(), "namespace 1 (memory -)") {
		t.Fatalf("Flush: %v, want an error wrapping ErrFlushUnfinished for namespace 1", err)
	}
	return e, hb, logs, admin, io
}

// TestStopCloseWaitsForWorkingNamespaces: after the stop's Flush left a hung namespace's
// flush executing, Close still waits the whole close timeout for what a working namespace
// has in flight — a write on an I/O queue, a host's shutdown flush holding the namespace
// — and closes it cleanly: its queue drains (no Error line for commands left executing),
// its backend is closed when Close returns, and Close's ErrNamespaceBusy concerns the hung
// namespace only. The old code ended every wait after the stop's Flush by the close
// timeout after Flush began, long past: the queue with the working namespace's write gave
// up at once, and so did the working namespace's close while the host's flush held it
// (ErrNamespaceBusy, its backend left to close later).
func TestStopCloseWaitsForWorkingNamespaces(t *testing.T) {
	const closeTimeout, okDelay = time.Second, 300 * time.Millisecond
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	for _, inFlight := range []string{"write", "shutdown flush"} {
		t.Run(inFlight, func(t *testing.T) {
			e, hb, logs, admin, io := stopFlushed(t, closeTimeout)
			hb.okDelay.Store(int64(okDelay))
			switch inFlight {
			case "write":
				w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
				io.submit(&w, pattern(512, 5))
			case "shutdown flush":
				expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal))))
			}
			waitFor(t, func() bool { return hb.okBusy.Load() == 1 })

			start := time.Now()
			err := e.tgt.Close()
			took := time.Since(start)
			t.Logf("Close took %v: %v", took.Round(time.Millisecond), err)
			if took > closeTimeout+5*time.Second {
				t.Errorf("Close took %v, want about the working namespace's %v", took, okDelay)
			}
			if !errors.Is(err, target.ErrNamespaceBusy) || !strings.Contains(err.Error(), "namespace 1 of") {
				t.Errorf("Close: %v, want ErrNamespaceBusy for the hung namespace 1", err)
			}
			if err != nil && strings.Contains(err.Error(), "namespace 2 of") {
				t.Errorf("Close gave up on the working namespace 2, whose %s takes %v: %v", inFlight, okDelay, err)
			}
			if n := hb.okCloses.Load(); n != 1 {
				t.Errorf("the working namespace's backend was closed %d times when Close returned, want 1", n)
			}
			if l := logs.lineWith("commands still executing after the queue closed"); l != "" {
				t.Errorf("a queue gave up waiting for the working namespace's %s: %q", inFlight, l)
			}
			if l := logs.lineWith("closing namespace: gave up", " nsid=2 "); l != "" {
				t.Errorf("the working namespace's close gave up: %q", l)
			}
		})
	}
}

// TestStopFlushTwice: a second Flush after the first left a hung namespace's flush
// executing waits its own close timeout: it flushes the working namespace, whose flush
// takes a while, and reports only the hung one unfinished. The old code bounded every
// Flush by the close timeout after the first began: the second waited for nothing and
// reported the working namespace unfinished too (Error line, ErrFlushUnfinished).
func TestStopFlushTwice(t *testing.T) {
	const closeTimeout = time.Second
	e, hb, logs, _, _ := stopFlushed(t, closeTimeout)
	hb.okDelay.Store(int64(100 * time.Millisecond))
	err := e.tgt.Flush()
	t.Logf("second Flush: %v", err)
	if !errors.Is(err, target.ErrFlushUnfinished) || !strings.Contains(err.Error(), "namespace 1 (memory -)") {
		t.Errorf("second Flush: %v, want ErrFlushUnfinished for the hung namespace 1", err)
	}
	if err != nil && strings.Contains(err.Error(), "namespace 2 (memory -)") {
		t.Errorf("second Flush reported the working namespace 2 unfinished: %v", err)
	}
	if l := logs.lineWith("flush did not finish within the close timeout", " nsid=2 "); l != "" {
		t.Errorf("Error line for the working namespace: %q", l)
	}
	if n := hb.okFlushes.Load(); n != 2 {
		t.Errorf("the working namespace was flushed %d times by the two Flushes, want 2", n)
	}
	if err := e.tgt.Close(); err != nil && !strings.Contains(err.Error(), "namespace 1 of") {
		t.Errorf("Close: %v, want at most ErrNamespaceBusy for the hung namespace 1", err)
	}
}

// lineWith returns the first line of the log that contains every one of parts, or "".
func (b *logBuffer) lineWith(parts ...string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range strings.Lines(b.buf.String()) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			return l
		}
	}
	return ""
}
