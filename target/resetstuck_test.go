package target_test

import (
	"bytes"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// hungBackends opens backends normally; those of namespaces of size hungSize hang their
// writes (and, with hangFlush, their flushes) until release, as a file on an NFS server
// that went away does, and then fail them with the error release got (nil: they are
// carried out). Requests that come after release are carried out.
type hungBackends struct {
	hungSize  conf.Size
	hangFlush bool
	gate      chan struct{}
	once      sync.Once
	err       atomic.Pointer[error]
	writes    atomic.Int32           // writes that reached a hung backend
	flushes   atomic.Int32           // flushes that reached a hung backend
	okFlushes atomic.Int32           // flushes of the other backends
	okCloses  atomic.Int32           // closes of the other backends
	okDelay   atomic.Int64           // how long the other backends' writes and flushes take (ns)
	okBusy    atomic.Int32           // writes and flushes of the other backends taking okDelay now
	onFlush   atomic.Pointer[func()] // if set, runs at the start of every Flush
}

func newHungBackends(hungSize conf.Size, hangFlush bool) *hungBackends {
	return &hungBackends{hungSize: hungSize, hangFlush: hangFlush, gate: make(chan struct{})}
}

func (hb *hungBackends) open(s backend.Spec) (backend.Backend, error) {
	b, err := backend.Open(s)
	if err != nil {
		return nil, err
	}
	return &hungBackend{Backend: b, hb: hb, hung: s.Size == uint64(hb.hungSize)}, nil
}

// release lets the hung requests go on; they fail with err if it is not nil.
func (hb *hungBackends) release(err error) {
	hb.once.Do(func() {
		if err != nil {
			hb.err.Store(&err)
		}
		close(hb.gate)
	})
}

// wait holds a request until release; one it held fails with the error release got.
func (hb *hungBackends) wait() error {
	select {
	case <-hb.gate:
		return nil // released before it came: it is carried out
	default:
	}
	<-hb.gate
	if p := hb.err.Load(); p != nil {
		return *p
	}
	return nil
}

// hungBackend is a backend of a hungBackends.
type hungBackend struct {
	backend.Backend
	hb   *hungBackends
	hung bool
}

// slow makes a request of a working backend take okDelay.
func (hb *hungBackends) slow() {
	if d := time.Duration(hb.okDelay.Load()); d > 0 {
		hb.okBusy.Add(1)
		time.Sleep(d)
		hb.okBusy.Add(-1)
	}
}

func (b *hungBackend) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	if b.hung {
		b.hb.writes.Add(1)
		if err := b.hb.wait(); err != nil {
			return err
		}
	} else {
		b.hb.slow()
	}
	return b.Backend.WriteBlocks(buf, slba, fua)
}

func (b *hungBackend) Flush() error {
	if f := b.hb.onFlush.Load(); f != nil {
		(*f)()
	}
	switch {
	case !b.hung:
		b.hb.okFlushes.Add(1)
		b.hb.slow()
	case b.hb.hangFlush:
		b.hb.flushes.Add(1)
		if err := b.hb.wait(); err != nil {
			return err
		}
	}
	return b.Backend.Flush()
}

func (b *hungBackend) Close() error {
	if !b.hung {
		b.hb.okCloses.Add(1)
	}
	return b.Backend.Close()
}

func (b *hungBackend) Info() backend.Info {
	i := backend.Describe(b.Backend)
	i.Inline = false // through the executor's workers, as a file would
	return i
}

// pollCSTS polls CSTS until cond holds, for at most within; it returns the value and how
// long after since it held.
func pollCSTS(t *testing.T, admin *hostQueue, since time.Time, within time.Duration, what string, cond func(nvmeproto.CSTS) bool) (nvmeproto.CSTS, time.Duration) {
	t.Helper()
	deadline := since.Add(within)
	for {
		v, c := admin.propGet(nvmeproto.PropCSTS, false)
		expectOK(t, "property get CSTS", c)
		if st := nvmeproto.CSTS(v); cond(st) {
			return st, time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: CSTS still %v %v after the write of CC", what, nvmeproto.CSTS(v), within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Namespace sizes of the tests below: the first hangs, the second works.
const (
	hungNSSize conf.Size = 2 << 20
	okNSSize   conf.Size = 1 << 20
)

// stuckWrite starts a target with a hung namespace 1 and a working namespace 2, the
// given queue close timeout (0: the default) and options, connects and enables a
// controller with I/O queue 1, and leaves a write of namespace 1 stuck in its backend.
// The backends are released (without error) when the test ends, before its queues close.
func stuckWrite(t *testing.T, closeTimeout time.Duration, hangFlush bool, more ...target.Option) (e *env, hb *hungBackends, admin, io *hostQueue, cntlid uint16, done <-chan nvmeproto.Completion) {
	t.Helper()
	hb = newHungBackends(hungNSSize, hangFlush)
	opts := append([]target.Option{target.WithBackendOpener(hb.open)}, more...)
	if closeTimeout > 0 {
		opts = append(opts, target.WithQueueCloseTimeout(closeTimeout))
	}
	e = newEnv(t, baseConfig(memNS(1, hungNSSize), memNS(2, okNSSize)), opts...)
	admin, cntlid = e.adminConnect(subNQN, hostNQN, 0)
	io = e.ioConnect(1, cntlid, 8)
	t.Cleanup(func() { hb.release(nil) })
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	done = io.submit(&w, pattern(512, 4))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })
	return e, hb, admin, io, cntlid, done
}

// ioOnWorkingNamespace connects I/O queue 1 of cntlid again and writes and reads back
// namespace 2.
func (e *env) ioOnWorkingNamespace(t *testing.T, cntlid uint16, seed byte) *hostQueue {
	t.Helper()
	q := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 2, 8, 1, 512)
	expectOK(t, "write of namespace 2", q.do(&w, pattern(512, seed)))
	r := rw(nvmeproto.OpRead, 2, 8, 1, 512)
	got := make([]byte, 512)
	expectOK(t, "read of namespace 2", q.do(&r, got))
	if !bytes.Equal(got, pattern(512, seed)) {
		t.Error("namespace 2 read back something else than was written")
	}
	return q
}

// settled waits until the stuck write has completed and the queue it was on no longer
// counts against the limits: the host holds its admin queue and one I/O queue.
func (e *env) settled(t *testing.T, done <-chan nvmeproto.Completion) {
	t.Helper()
	wait(t, done)
	waitFor(t, func() bool {
		_, q := e.tgt.HostUsage(hostNQN)
		return e.tgt.StuckQueues() == 0 && q == 2 && e.tgt.QueueCount() == 2
	})
}

// TestResetWithWriteStuck: a host resets the controller (CC.EN 1→0) while a write is stuck
// in a hung backend: CSTS.RDY clears once the queue close timeout has passed, without
// CSTS.CFS, with the stuck queue still counted against the limits; the host enables the
// controller again and does I/O on another namespace; when the write finally fails, its
// completion changes nothing of the controller (still ready, no Error Information log
// entry for a queue it no longer has) and the limits settle. Also when the host closes
// its I/O queue itself before writing CC (the Linux host's order). The old code waited
// for the write without limit: CSTS.RDY stayed 1 and an enable was ignored.
func TestResetWithWriteStuck(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	for _, hostCloses := range []bool{false, true} {
		name := "queue connected"
		if hostCloses {
			name = "queue closed by the host first"
		}
		t.Run(name, func(t *testing.T) {
			e, hb, admin, io, cntlid, done := stuckWrite(t, closeTimeout, false)
			if hostCloses {
				go io.conn.Close() // Close waits for the stuck write, up to the close timeout
				<-io.conn.Done()
			}
			start := time.Now()
			expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(base)))
			st, took := pollCSTS(t, admin, start, closeTimeout+5*time.Second, "reset with a write stuck in a backend",
				func(s nvmeproto.CSTS) bool { return !s.RDY() })
			if took < closeTimeout && !hostCloses {
				t.Errorf("CSTS.RDY cleared %v after the reset, before the close timeout (%v): the reset did not wait for the write", took, closeTimeout)
			}
			if st.CFS() {
				t.Errorf("CSTS %v after a reset with a stuck write: want CFS clear", st)
			}
			waitFor(t, func() bool { return e.tgt.StuckQueues() == 1 })
			if _, q := e.tgt.HostUsage(hostNQN); q != 2 {
				t.Errorf("host holds %d queues after the reset, want 2 (the admin queue and the one with the stuck write)", q)
			}

			admin.enable()
			q := e.ioOnWorkingNamespace(t, cntlid, 5)

			hb.release(syscall.EIO) // the NFS server answers at last: the write fails
			e.settled(t, done)
			v, _ := admin.propGet(nvmeproto.PropCSTS, false)
			if st := nvmeproto.CSTS(v); !st.RDY() || st.CFS() {
				t.Errorf("CSTS %v after the stuck write failed, want RDY and no CFS", st)
			}
			b, c := admin.getLog(uint8(nvmeproto.LIDErrorInfo), 0, 0, nvmeproto.ErrorInfoEntrySize, 0, false)
			expectOK(t, "error log", c)
			var ei nvmeproto.ErrorInfoEntry
			if err := ei.Unmarshal(b); err != nil || ei.ErrorCount != 0 {
				t.Errorf("error log entry %+v (%v) after the write of a queue the reset took failed: want none (its SQID names the new queue 1)", ei, err)
			}
			// The new queue 1 is untouched; the hung namespace answers again.
			r := rw(nvmeproto.OpRead, 2, 8, 1, 512)
			expectOK(t, "read of namespace 2 after the stuck write failed", q.do(&r, make([]byte, 512)))
			w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
			expectOK(t, "write of namespace 1 once its backend answers", q.do(&w, pattern(512, 7)))
		})
	}
}

// TestResetWithinCAPTimeout: with the default queue close timeout (30 s, longer than
// CAP.TO), a reset with a write stuck in a backend still clears CSTS.RDY within CAP.TO
// (7.5 s; the Linux host gives up after 8 s): the reset waits at most 5 s. The old code
// never cleared it.
func TestResetWithinCAPTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 5 s")
	}
	e, hb, admin, _, cntlid, done := stuckWrite(t, 0, false)
	capv, c := admin.propGet(nvmeproto.PropCAP, true)
	expectOK(t, "CAP", c)
	capTO := time.Duration(nvmeproto.CAP(capv).Timeout()) * time.Millisecond
	start := time.Now()
	expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4))))
	_, took := pollCSTS(t, admin, start, capTO, "reset with a write stuck in a backend, default close timeout",
		func(s nvmeproto.CSTS) bool { return !s.RDY() })
	t.Logf("CSTS.RDY cleared %v after CC.EN=0 (CAP.TO %v)", took.Round(time.Millisecond), capTO)
	admin.enable()
	e.ioOnWorkingNamespace(t, cntlid, 8)
	hb.release(nil)
	e.settled(t, done)
}

// TestShutdownWithWriteStuck: a host shuts the controller down (CC.SHN) while a write is
// stuck in a hung backend — and, in the second case, that backend's flush hangs too:
// CSTS.SHST reads complete once the close timeout has passed (twice, with the flush:
// each wait is bounded), with CSTS.CFS set (commands still execute in a backend, and may
// reach the media after the shutdown), and the working namespace was flushed. The host
// then resets and enables the controller again and does I/O on the working namespace,
// and once the backend answers the limits settle. The old code waited for the write
// (and the flush) without limit: SHST never read complete.
func TestShutdownWithWriteStuck(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	for _, hangFlush := range []bool{false, true} {
		name, waits := "write stuck", 1
		if hangFlush {
			name, waits = "write and flush stuck", 2
		}
		t.Run(name, func(t *testing.T) {
			e, hb, admin, _, cntlid, done := stuckWrite(t, closeTimeout, hangFlush)
			start := time.Now()
			expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal))))
			st, took := pollCSTS(t, admin, start, time.Duration(waits)*closeTimeout+5*time.Second, "shutdown with a write stuck in a backend",
				func(s nvmeproto.CSTS) bool { return s.SHST() == nvmeproto.CSTSSHSTComplete })
			if took < time.Duration(waits)*closeTimeout {
				t.Errorf("SHST complete %v after the shutdown, before it waited %d × the close timeout (%v)", took, waits, closeTimeout)
			}
			if !st.CFS() {
				t.Errorf("CSTS %v after a shutdown that left a write executing: want CFS set", st)
			}
			if hb.okFlushes.Load() == 0 {
				t.Error("the working namespace was not flushed at the shutdown")
			}
			if hangFlush && hb.flushes.Load() != 1 {
				t.Errorf("%d flushes reached the hung backend, want 1", hb.flushes.Load())
			}

			expectOK(t, "CC.SHN=0, CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(base)))
			pollCSTS(t, admin, time.Now(), closeTimeout+5*time.Second, "reset after the shutdown",
				func(s nvmeproto.CSTS) bool { return !s.RDY() && s.SHST() == nvmeproto.CSTSSHSTNormal })
			admin.enable()
			q := e.ioOnWorkingNamespace(t, cntlid, 9)
			hb.release(nil)
			e.settled(t, done)
			v, _ := admin.propGet(nvmeproto.PropCSTS, false)
			if st := nvmeproto.CSTS(v); !st.RDY() || st.CFS() {
				t.Errorf("CSTS %v after the stuck write completed, want RDY and no CFS", st)
			}
			w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
			expectOK(t, "write of namespace 1 once its backend answers", q.do(&w, pattern(512, 10)))
		})
	}
}

// TestResetAfterResetGaveUp: once a reset has given up waiting for a write stuck in a
// backend, no later reset or shutdown of the controller waits for it again. The host
// enables the controller and resets it again without I/O queues: CSTS.RDY clears at once.
// It enables and shuts it down: SHST reads complete at once, with CSTS.CFS (the write
// may still land, and no flush covers it). It resets and enables it again and uses
// namespace 2; the first reset's Error line was logged once, and once the write
// completes the limits settle. The old code kept the queue among those every reset and
// shutdown waited for: each waited the close timeout for it again and logged it again.
func TestResetAfterResetGaveUp(t *testing.T) {
	const closeTimeout = time.Second
	const resetLine = "controller reset: commands of its I/O queues still executing"
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	logs := &logBuffer{}
	e, hb, admin, _, cntlid, done := stuckWrite(t, closeTimeout, false, target.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	reset := func(what string) (nvmeproto.CSTS, time.Duration) {
		t.Helper()
		start := time.Now()
		expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(base)))
		return pollCSTS(t, admin, start, closeTimeout+5*time.Second, what,
			func(s nvmeproto.CSTS) bool { return !s.RDY() && s.SHST() == nvmeproto.CSTSSHSTNormal })
	}

	if _, took := reset("first reset, a write stuck"); took < closeTimeout {
		t.Errorf("the first reset completed %v after CC.EN=0, before the close timeout (%v)", took, closeTimeout)
	}
	admin.enable()
	st, took := reset("second reset, no I/O queues")
	if took >= closeTimeout/2 {
		t.Errorf("the second reset completed %v after CC.EN=0: it waited again for the write the first one gave up on", took)
	}
	if st.CFS() {
		t.Errorf("CSTS %v after the second reset: want CFS clear", st)
	}

	admin.enable()
	start := time.Now()
	expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal))))
	st, took = pollCSTS(t, admin, start, closeTimeout+5*time.Second, "shutdown after the reset gave up",
		func(s nvmeproto.CSTS) bool { return s.SHST() == nvmeproto.CSTSSHSTComplete })
	if took >= closeTimeout/2 {
		t.Errorf("SHST complete %v after CC.SHN: the shutdown waited again for the write the reset gave up on", took)
	}
	if !st.CFS() {
		t.Errorf("CSTS %v after a shutdown with the write still executing: want CFS set (it may still land)", st)
	}

	if _, took := reset("reset after the shutdown"); took >= closeTimeout/2 {
		t.Errorf("the reset after the shutdown completed %v after CC.EN=0: it waited again for the stuck write", took)
	}
	admin.enable()
	q := e.ioOnWorkingNamespace(t, cntlid, 11)
	if n := logs.count(resetLine); n != 1 {
		t.Errorf("%d log lines %q, want 1 (the first reset's)", n, resetLine)
	}

	hb.release(nil)
	e.settled(t, done)
	v, _ := admin.propGet(nvmeproto.PropCSTS, false)
	if st := nvmeproto.CSTS(v); !st.RDY() || st.CFS() {
		t.Errorf("CSTS %v after the stuck write completed, want RDY and no CFS", st)
	}
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expectOK(t, "write of namespace 1 once its backend answers", q.do(&w, pattern(512, 12)))
}

// TestShutdownStuckWriteDoneDuringFlush: a write a reset gave up on that completes while
// the shutdown's flush runs — after the flush began, so the flush may not cover it — sets
// CSTS.CFS with SHST complete, as one still executing at the end does. The code before
// looked at such writes only after the flush and reported a clean shutdown.
func TestShutdownStuckWriteDoneDuringFlush(t *testing.T) {
	const closeTimeout = time.Second
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	e, hb, admin, _, _, done := stuckWrite(t, closeTimeout, false)
	start := time.Now()
	expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(base)))
	pollCSTS(t, admin, start, closeTimeout+5*time.Second, "reset, a write stuck",
		func(s nvmeproto.CSTS) bool { return !s.RDY() })
	admin.enable()

	var once sync.Once
	release := func() {
		once.Do(func() {
			hb.release(nil) // the write goes on, and completes before the flush returns
			for deadline := time.Now().Add(5 * time.Second); e.tgt.StuckQueues() != 0 && time.Now().Before(deadline); {
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	hb.onFlush.Store(&release)
	start = time.Now()
	expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal))))
	st, _ := pollCSTS(t, admin, start, closeTimeout+10*time.Second, "shutdown",
		func(s nvmeproto.CSTS) bool { return s.SHST() == nvmeproto.CSTSSHSTComplete })
	if e.tgt.StuckQueues() != 0 {
		t.Fatalf("the stuck write had not completed when the flush returned")
	}
	if !st.CFS() {
		t.Errorf("CSTS %v after a shutdown during whose flush a write a reset had left completed: want CFS set", st)
	}
	wait(t, done)
}
