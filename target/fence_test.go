package target_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// TestFenceNSIDReuse: namespace 1, in memory, is removed while a host's write to it is
// stuck in its backend, and another store is added as namespace 1. The stuck write cannot
// reach the new namespace, nor a store another target serves, so a Preempt and Abort of
// that host on the new namespace 1 and an ANA change of its group complete at once (see
// TestFenceRemovedNamespaceStore for a store that is not the process's own). The old code counted commands by NSID alone: both
// waited for the old namespace's write and failed after the close timeout (Internal
// Error; an ANAInFlightError).
func TestFenceNSIDReuse(t *testing.T) {
	const closeTimeout = 1500 * time.Millisecond
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 2<<20)), target.WithLogger(testLogger(t)),
		gatedNamespace(g, 2<<20), target.WithQueueCloseTimeout(closeTimeout))
	defer g.open() // before the cleanups, which wait for the gated write
	a, b := e.connectHost(1), e.connectHost(2)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	stuck := a.io.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)
	if err := e.tgt.RemoveNamespace(subNQN, 1); err != nil {
		t.Fatalf("RemoveNamespace(1) with a write stuck in its backend: %v", err)
	}
	if err := e.tgt.AddNamespace(subNQN, memNS(1, 1<<20)); err != nil {
		t.Fatalf("AddNamespace(1), another store: %v", err)
	}
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "a acquires", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	expectOK(t, "a writes to the new namespace 1", a.ioOp("write"))

	start := time.Now()
	expectStatus(t, "preempt and abort of a on the new namespace 1", wait(t, b.preemptAbort(0xB, 0xA)), nvmeproto.StatusSuccess)
	if d := time.Since(start); d >= closeTimeout/2 {
		t.Errorf("preempt and abort took %v, held up by a's write to the removed namespace", d)
	}
	start = time.Now()
	if err := e.port.Target().SetANAState(context.Background(), 1, conf.ANAInaccessible); err != nil {
		t.Errorf("SetANAState(group 1, inaccessible): %v", err)
	}
	if d := time.Since(start); d >= closeTimeout/2 {
		t.Errorf("SetANAState took %v, held up by a's write to the removed namespace", d)
	}
	select {
	case c := <-stuck:
		t.Fatalf("the write to the removed namespace completed (%v) before the gate opened", c.Status)
	default:
	}
	if g.blocked.Load() != 1 {
		t.Errorf("%d backend calls blocked, want a's write to the removed namespace", g.blocked.Load())
	}
}

// TestFenceReopenKeepsWaiting: a write stuck in a backend that a reopen gave up waiting
// for is the reopened namespace's: a Preempt and Abort of its host waits for it.
func TestFenceReopenKeepsWaiting(t *testing.T) {
	const closeTimeout = 1500 * time.Millisecond // the reopen's wait, and the Preempt and Abort's
	g := newGate()
	ns := conf.Namespace{NSID: 1, Backend: conf.BackendNull, Size: 2 << 20} // a memory one is not reopened
	e := newEnv(t, baseConfig(ns), target.WithLogger(testLogger(t)), gatedNamespace(g, 2<<20),
		target.WithQueueCloseTimeout(closeTimeout))
	defer g.open()
	a, b := e.connectHost(1), e.connectHost(2)
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	stuck := a.io.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)
	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatalf("ReopenNamespace(1) with a write stuck in its backend: %v", err)
	}
	pa := b.preemptAbort(0xB, 0xA)
	expectPending(t, "preempt and abort after the reopen", pa, 100*time.Millisecond)
	g.open()
	wait(t, stuck)
	expectOK(t, "preempt and abort, a's write completed", wait(t, pa))
}

// TestFenceMemory: what the I/O fence keeps for every namespace a queue has sent a data
// command to — a Linux host sends I/O on every queue, so a target keeps hosts × queues ×
// namespaces of them. The live heap it adds stays within 64 bytes per (queue, namespace),
// and a removed namespace's are dropped: removing the namespaces and adding them again
// leaves nothing of them behind. The old code kept about 290 bytes each (a struct and two
// channels), for every NSID a queue had ever reached.
func TestFenceMemory(t *testing.T) {
	const nss, queues = 512, 8
	var list []conf.Namespace
	for id := uint32(1); id <= nss; id++ {
		list = append(list, conf.Namespace{NSID: id, Backend: conf.BackendNull, Size: 1 << 20})
	}
	cfg := baseConfig(list...)
	cfg.Transport.MaxIOQueues = queues
	e := newEnv(t, cfg, target.WithLogger(slog.New(slog.DiscardHandler)))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	var qs []*hostQueue
	for qid := uint16(1); qid <= queues; qid++ {
		q := e.ioConnect(qid, cntlid, 16)
		flush := sglCmd(nvmeproto.OpFlush, 1, 0) // the queue's first command: what it allocates once
		expectOK(t, "flush namespace 1", q.do(&flush, nil))
		qs = append(qs, q)
	}
	touchAll := func() {
		for _, q := range qs {
			for id := uint32(2); id <= nss; id++ {
				flush := sglCmd(nvmeproto.OpFlush, id, 0)
				expectOK(t, "flush", q.do(&flush, nil))
			}
		}
	}
	readd := func() {
		for id := uint32(2); id <= nss; id++ {
			if err := e.tgt.RemoveNamespace(subNQN, id); err != nil {
				t.Fatalf("RemoveNamespace(%d): %v", id, err)
			}
		}
		for _, ns := range list[1:] {
			if err := e.tgt.AddNamespace(subNQN, ns); err != nil {
				t.Fatalf("AddNamespace(%d): %v", ns.NSID, err)
			}
		}
	}
	const pairs = queues * (nss - 1)
	perPair := func(from, to int64) float64 { return float64(to-from) / pairs }

	readd() // the namespaces below are all AddNamespace's
	before := liveHeap()
	touchAll()
	touched := liveHeap()
	t.Logf("first commands of %d queues to %d namespaces: %.1f bytes live per (queue, namespace)", queues, nss-1, perPair(before, touched))
	if per := perPair(before, touched); per > 64 {
		t.Errorf("the first command of a queue to a namespace keeps %.1f bytes live, want at most 64", per)
	}
	readd()
	readded := liveHeap()
	t.Logf("removed and added again: %.1f bytes live per (queue, namespace) more than before the first commands", perPair(before, readded))
	if per := perPair(before, readded); per > 16 {
		t.Errorf("namespaces removed and added again keep %.1f bytes live per (queue, namespace) of the removed ones, want at most 16", per)
	}
	touchAll()              // the added namespaces are served
	runtime.KeepAlive(list) // live throughout: not counted as freed
}

// liveHeap returns the bytes of live heap objects.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// anaFenceCheck checks ANA changes made on port p while one write (stuck, what it was
// for) is still in a backend: fenced expects the change to fail within 100 ms with an
// ANAInFlightError for that one command; unfenced expects it to succeed in less than
// limit (a fenced change would wait for the close timeout, then fail).
type anaFenceCheck struct {
	t     *testing.T
	p     *target.Port
	stuck string
	limit time.Duration
}

func (c anaFenceCheck) fenced(what string, change func(context.Context) error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var ie *target.ANAInFlightError
	if err := change(ctx); !errors.As(err, &ie) || ie.Commands() != 1 {
		c.t.Errorf("%s, %s stuck in its backend: %v; want an ANAInFlightError for 1 command", what, c.stuck, err)
	}
}

func (c anaFenceCheck) unfenced(what string, change func(context.Context) error) {
	c.t.Helper()
	start := time.Now()
	if err := change(context.Background()); err != nil {
		c.t.Errorf("%s: %v", what, err)
	}
	if d := time.Since(start); d >= c.limit {
		c.t.Errorf("%s took %v", what, d)
	}
}

// setState is a change of group g's ANA state to st on the checked port.
func (c anaFenceCheck) setState(g uint32, st conf.ANAState) func(context.Context) error {
	return func(ctx context.Context) error { return c.p.SetANAState(ctx, g, st) }
}

// TestFenceRemovedNamespaceStore: namespace 1, a shared file, is removed while a host's
// write to it is stuck in its backend (RemoveNamespace gives up after the close timeout,
// the backend stays open). Until the write completes it may still land on the file, which
// another target may serve, and which namespace 1 added again on it (a reload that
// changes its identity) uses: every fence that concerns the file waits for it, with the
// change standing. A change of its last group (1) waits; after namespace 1 is added again
// on the file, so does a change of group 1 again, the move of namespace 1 into group 3
// (inaccessible), and then a change of group 3, its group now. A change of group 2,
// another namespace's, does not wait; a reset's log names namespace 1 among those its
// stuck commands are for. Once the write has completed, no fence waits. The old code
// dropped the removed namespace's fences at the removal: every change returned at once,
// and the reset's log named no namespace.
func TestFenceRemovedNamespaceStore(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	hb := newHungBackends(hungNSSize, false)
	logs := &logBuffer{}
	ns1 := fileNS(t, 1, hungNSSize)
	ns1.Shared = true
	ns2 := memNS(2, okNSSize)
	ns2.ANAGroup = 2
	e := newEnv(t, baseConfig(ns1, ns2), target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	t.Cleanup(func() { hb.release(nil) }) // before the env's cleanups, which wait for the write
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	done := io.submit(&w, pattern(512, 4))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })
	if err := e.tgt.RemoveNamespace(subNQN, 1); err != nil {
		t.Fatalf("RemoveNamespace(1) with a write stuck in its backend: %v", err)
	}

	p := e.port.Target()
	chk := anaFenceCheck{t: t, p: p, stuck: "a write of the removed namespace 1", limit: closeTimeout}
	fenced, unfenced, setState := chk.fenced, chk.unfenced, chk.setState

	fenced("group 1 (namespace 1's last) set inaccessible", setState(1, conf.ANAInaccessible))
	unfenced("group 1 set optimized", setState(1, ""))
	if err := e.tgt.AddNamespace(subNQN, ns1); err != nil {
		t.Fatalf("AddNamespace(1) on the same shared file: %v", err)
	}
	fenced("group 1 set inaccessible, namespace 1 added again", setState(1, conf.ANAInaccessible))
	unfenced("group 1 set optimized", setState(1, ""))
	unfenced("group 3 (no namespace) set inaccessible", setState(3, conf.ANAInaccessible))
	fenced("namespace 1 moved into group 3 (inaccessible)", func(ctx context.Context) error {
		return e.tgt.SetNamespaceANAGroup(ctx, subNQN, 1, 3)
	})
	fenced("group 3 (namespace 1's now) set inaccessible again", setState(3, conf.ANAInaccessible))
	unfenced("group 2 (namespace 2's) set inaccessible", setState(2, conf.ANAInaccessible))

	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(base)))
	pollCSTS(t, admin, time.Now(), closeTimeout+5*time.Second, "reset", func(s nvmeproto.CSTS) bool { return !s.RDY() })
	const resetLine = "controller reset: commands of its I/O queues still executing"
	if l := logs.line(resetLine); !strings.Contains(l, "nsids=[1]") {
		t.Errorf("the reset's log line %q does not name namespace 1 (nsids=[1])", l)
	}

	hb.release(nil)
	wait(t, done)
	waitFor(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return p.SetANAState(ctx, 1, conf.ANAInaccessible) == nil && p.SetANAState(ctx, 3, conf.ANAInaccessible) == nil
	})
}

// TestFenceRemovedNamespacePreempt: host a's write to namespace 1, a shared file, is stuck
// in its backend when namespace 1 is removed and added again on the file. A Preempt and
// Abort of a on the new namespace 1 waits for that write, which may still land on the
// file, and fails with Internal Error (the preemption standing) when the close timeout
// ends the wait, as for a's commands to the namespace itself. Once the write has
// completed, a Preempt and Abort succeeds at once. The old code did not wait: the first
// Preempt and Abort succeeded at once with the write still in the backend.
func TestFenceRemovedNamespacePreempt(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	hb := newHungBackends(hungNSSize, false)
	ns1 := fileNS(t, 1, hungNSSize)
	ns1.Shared = true
	e := newEnv(t, baseConfig(ns1), target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(testLogger(t)))
	t.Cleanup(func() { hb.release(nil) }) // before the env's cleanups, which wait for the write
	a, b := e.connectHost(1), e.connectHost(2)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	stuck := a.io.submit(&w, make([]byte, 512))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })
	if err := e.tgt.RemoveNamespace(subNQN, 1); err != nil {
		t.Fatalf("RemoveNamespace(1) with a write stuck in its backend: %v", err)
	}
	if err := e.tgt.AddNamespace(subNQN, ns1); err != nil {
		t.Fatalf("AddNamespace(1) on the same shared file: %v", err)
	}
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "a acquires", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))

	start := time.Now()
	expectStatus(t, "preempt and abort of a, its write to the removed namespace 1 stuck", wait(t, b.preemptAbort(0xB, 0xA)),
		nvmeproto.StatusInternalError)
	if d := time.Since(start); d < closeTimeout {
		t.Errorf("preempt and abort ended after %v, before the close timeout %v, with a's write in the backend", d, closeTimeout)
	}
	hb.release(nil)
	wait(t, stuck)
	waitFor(t, func() bool { // the removal forgets the namespace once its backend has closed
		expectOK(t, "register a again", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
		start = time.Now()
		c := wait(t, b.preemptAbort(0xB, 0xA))
		if c.Status.Code() != nvmeproto.StatusSuccess.Code() {
			t.Fatalf("preempt and abort of a, its write completed: %v", c.Status)
		}
		return time.Since(start) < closeTimeout/2
	})
}

// TestFenceReopenedRemovedStore: a host's write to namespace 1, a shared file, is stuck in
// its backend when namespace 1 is reopened (the reopen gives up on the old backend after
// the close timeout), then removed — the new backend closes at once — and added again on
// the file. An ANA change of its group and a move into an inaccessible group wait for the
// write, which may still land on the file, until their contexts end; once the write has
// completed, nothing waits. The old code waited for the new backend alone: the removal
// forgot the namespace as soon as it closed, and both changes returned at once with the
// write still in the old backend.
func TestFenceReopenedRemovedStore(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	hb := newHungBackends(hungNSSize, false)
	ns1 := fileNS(t, 1, hungNSSize)
	ns1.Shared = true
	e := newEnv(t, baseConfig(ns1), target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(testLogger(t)))
	t.Cleanup(func() { hb.release(nil) }) // before the env's cleanups, which wait for the write
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	done := io.submit(&w, pattern(512, 4))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })
	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatalf("ReopenNamespace(1) with a write stuck in its backend: %v", err)
	}
	if err := e.tgt.RemoveNamespace(subNQN, 1); err != nil {
		t.Fatalf("RemoveNamespace(1), reopened: %v", err)
	}
	if err := e.tgt.AddNamespace(subNQN, ns1); err != nil {
		t.Fatalf("AddNamespace(1) on the same shared file: %v", err)
	}

	p := e.port.Target()
	fenced := anaFenceCheck{t: t, p: p, stuck: "a write namespace 1 had before a reopen and its removal"}.fenced
	fenced("group 1 set inaccessible, namespace 1 added again", func(ctx context.Context) error {
		return p.SetANAState(ctx, 1, conf.ANAInaccessible)
	})
	if err := p.SetANAState(context.Background(), 1, ""); err != nil {
		t.Fatalf("group 1 set optimized: %v", err)
	}
	if err := p.SetANAState(context.Background(), 3, conf.ANAInaccessible); err != nil {
		t.Fatalf("group 3 (no namespace) set inaccessible: %v", err)
	}
	fenced("namespace 1 moved into group 3 (inaccessible)", func(ctx context.Context) error {
		return e.tgt.SetNamespaceANAGroup(ctx, subNQN, 1, 3)
	})
	select {
	case c := <-done:
		t.Fatalf("the stuck write completed (%v) before the backend let it go", c.Status)
	default:
	}

	hb.release(nil)
	wait(t, done)
	waitFor(t, func() bool { // the removal forgets the namespace once its backends have closed
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return p.SetANAState(ctx, 1, conf.ANAInaccessible) == nil && p.SetANAState(ctx, 3, conf.ANAInaccessible) == nil
	})
}

// TestFenceRemovedSubsystemStore: the subsystem is removed while host a's write to its
// namespace 1, a shared file, is stuck in the backend (RemoveSubsystem gives up on it
// after the close timeout; the backend stays open), then added again on the same file (as
// a reload's undo of the removal does). Until the write completes it may still land on
// the file, which another target may serve and which the new namespace 1 uses: a change
// of group 1 (namespace 1's) waits for it, before and after the subsystem is back, so do
// the move of the new namespace 1 into group 3 (inaccessible) and then a change of group
// 3, and a Preempt and Abort of a on the new namespace 1 fails with Internal Error after
// the close timeout. A change of group 2 (namespace 2's) does not wait. Once the write
// has completed, no fence waits. The old code took the subsystem's queues and namespaces
// out of every fence's sight at the removal: every change returned nil at once and the
// Preempt and Abort succeeded.
func TestFenceRemovedSubsystemStore(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	hb := newHungBackends(hungNSSize, false)
	ns1 := fileNS(t, 1, hungNSSize)
	ns1.Shared = true
	ns2 := memNS(2, okNSSize)
	ns2.ANAGroup = 2
	e := newEnv(t, baseConfig(ns1, ns2), target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(testLogger(t)))
	t.Cleanup(func() { hb.release(nil) }) // before the env's cleanups, which wait for the write
	a := e.connectHost(1)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	a.io.submit(&w, pattern(512, 4))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })
	cs := e.tgt.Config().Subsystems[0]
	if err := e.tgt.RemoveSubsystem(subNQN); err != nil {
		t.Fatalf("RemoveSubsystem with a write stuck in its namespace 1: %v", err)
	}

	p := e.port.Target()
	chk := anaFenceCheck{t: t, p: p, stuck: "a write of the removed subsystem's namespace 1", limit: closeTimeout / 2}
	fenced, unfenced, setState := chk.fenced, chk.unfenced, chk.setState

	fenced("group 1 set inaccessible, the subsystem removed", setState(1, conf.ANAInaccessible))
	unfenced("group 1 set optimized", setState(1, ""))
	unfenced("group 2 (namespace 2's, in memory) set inaccessible", setState(2, conf.ANAInaccessible))
	unfenced("group 2 set optimized", setState(2, ""))
	if err := e.tgt.AddSubsystem(cs); err != nil {
		t.Fatalf("AddSubsystem again, namespace 1 on the same shared file: %v", err)
	}
	fenced("group 1 set inaccessible, the subsystem added again", setState(1, conf.ANAInaccessible))
	unfenced("group 1 set optimized", setState(1, ""))
	unfenced("group 3 (no namespace) set inaccessible", setState(3, conf.ANAInaccessible))
	fenced("the new namespace 1 moved into group 3 (inaccessible)", func(ctx context.Context) error {
		return e.tgt.SetNamespaceANAGroup(ctx, subNQN, 1, 3)
	})
	fenced("group 3 (namespace 1's now) set inaccessible again", setState(3, conf.ANAInaccessible))
	unfenced("group 3 set optimized", setState(3, ""))
	unfenced("group 2 (namespace 2's) set inaccessible", setState(2, conf.ANAInaccessible))
	unfenced("group 2 set optimized", setState(2, ""))

	a2, b := e.connectHost(1), e.connectHost(2) // host a again, on the new subsystem
	expectOK(t, "register a", a2.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "a acquires", a2.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	start := time.Now()
	expectStatus(t, "preempt and abort of a, its write to the removed subsystem's namespace 1 stuck",
		wait(t, b.preemptAbort(0xB, 0xA)), nvmeproto.StatusInternalError)
	if d := time.Since(start); d < closeTimeout {
		t.Errorf("preempt and abort ended after %v, before the close timeout %v, with a's write in the backend", d, closeTimeout)
	}

	hb.release(nil)
	waitFor(t, func() bool { // the removal forgets the subsystem once its backends have closed
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return p.SetANAState(ctx, 1, conf.ANAInaccessible) == nil && p.SetANAState(ctx, 3, conf.ANAInaccessible) == nil &&
			e.tgt.SetNamespaceANAGroup(ctx, subNQN, 1, 3) == nil
	})
	unfenced("group 1 set optimized", setState(1, ""))
	unfenced("group 3 set optimized", setState(3, ""))
	expectOK(t, "register a again", a2.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	start = time.Now()
	expectStatus(t, "preempt and abort of a, its write completed", wait(t, b.preemptAbort(0xB, 0xA)), nvmeproto.StatusSuccess)
	if d := time.Since(start); d >= closeTimeout/2 {
		t.Errorf("preempt and abort of a took %v with its write completed", d)
	}
}

// TestFenceSubsystemBeingRemoved: an ANA change of group 1 made while RemoveSubsystem
// waits for a write to namespace 1, a shared file, still in its backend (the subsystem
// is already out of the target's table) waits for that write, which the port admitted
// before the change: it returns only once the write has completed. The old code listed
// only the subsystems in the table: the change returned nil at once with the write still
// to land.
func TestFenceSubsystemBeingRemoved(t *testing.T) {
	const closeTimeout = 5 * time.Second // the removal still waits while the change is made
	hb := newHungBackends(hungNSSize, false)
	ns1 := fileNS(t, 1, hungNSSize)
	ns1.Shared = true
	e := newEnv(t, baseConfig(ns1), target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(testLogger(t)))
	t.Cleanup(func() { hb.release(nil) }) // before the env's cleanups, which wait for the write
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	io.submit(&w, pattern(512, 4))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })
	removed := make(chan error, 1)
	go func() { removed <- e.tgt.RemoveSubsystem(subNQN) }()
	waitFor(t, func() bool { return len(e.tgt.Subsystems()) == 1 }) // discovery's alone

	f, err := e.port.Target().ChangeANAState(1, conf.ANAInaccessible)
	if err != nil {
		t.Fatalf("ChangeANAState(group 1, inaccessible): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var ie *target.ANAInFlightError
	if err := f.Wait(ctx); !errors.As(err, &ie) || ie.Commands() != 1 {
		t.Errorf("the change's Wait, a write admitted before it still in the backend of the subsystem being removed: %v; "+
			"want an ANAInFlightError for 1 command", err)
	}
	select {
	case err := <-removed:
		t.Fatalf("RemoveSubsystem returned (%v) with the write still in the backend", err)
	default:
	}
	waited := make(chan error, 1)
	go func() { waited <- f.Wait(context.Background()) }()
	select {
	case err := <-waited:
		t.Fatalf("the change's second Wait returned (%v) before the write completed", err)
	case <-time.After(100 * time.Millisecond):
	}
	hb.release(nil)
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("the change's Wait, the write completed: %v", err)
		}
	case <-time.After(closeTimeout / 2):
		t.Fatal("the change's Wait did not return once the write completed")
	}
	if err := <-removed; err != nil {
		t.Errorf("RemoveSubsystem: %v", err)
	}
}

// TestFenceRemovedSubsystemControllerNamed: host a's write to namespace 1, a shared file,
// is stuck when the subsystem is removed; the subsystem is added again on the file, host
// a connects again, getting the same controller ID (the new subsystem hands IDs out from
// the start of its range), and writes again, stuck as well. An ANA change of group 1 then
// fails with an ANAInFlightError naming two controllers with 1 command each: the removed
// subsystem's, marked Removed and "(removed subsystem)", and the live one; a Preempt and
// Abort of a logs its two stuck queues, removed_subsystem true for one and false for the
// other. The old code counted stuck commands by NQN and controller ID: the error named one
// controller with 2 commands, the live one, as if both were its own, and the log gave no
// way to tell the two queues apart.
func TestFenceRemovedSubsystemControllerNamed(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	hb := newHungBackends(hungNSSize, false)
	logs := &logBuffer{}
	ns1 := fileNS(t, 1, hungNSSize)
	ns1.Shared = true
	e := newEnv(t, baseConfig(ns1), target.WithBackendOpener(hb.open), target.WithQueueCloseTimeout(closeTimeout),
		target.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	t.Cleanup(func() { hb.release(nil) }) // before the env's cleanups, which wait for the writes

	const hostA = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001" // connectHost(1)'s
	a := e.connectHost(1)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	a.io.submit(&w, pattern(512, 4))
	waitFor(t, func() bool { return hb.writes.Load() == 1 })
	cs := e.tgt.Config().Subsystems[0]
	if err := e.tgt.RemoveSubsystem(subNQN); err != nil {
		t.Fatalf("RemoveSubsystem with a write stuck in its namespace 1: %v", err)
	}
	if err := e.tgt.AddSubsystem(cs); err != nil {
		t.Fatalf("AddSubsystem again, namespace 1 on the same shared file: %v", err)
	}
	a2, b := e.connectHost(1), e.connectHost(2)
	if a2.cntlid != a.cntlid {
		t.Fatalf("host a's controller of the subsystem added again has ID %d, its removed one %d; the test needs them equal", a2.cntlid, a.cntlid)
	}
	a2.io.submit(&w, pattern(512, 5))
	waitFor(t, func() bool { return hb.writes.Load() == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var ie *target.ANAInFlightError
	err := e.port.Target().SetANAState(ctx, 1, conf.ANAInaccessible)
	if !errors.As(err, &ie) {
		t.Fatalf("SetANAState(group 1, inaccessible), a write stuck on each of two controllers: %v; want an ANAInFlightError", err)
	}
	want := []target.ControllerInFlight{
		{Subsystem: subNQN, ID: a.cntlid, HostNQN: hostA, Commands: 1},
		{Subsystem: subNQN, ID: a.cntlid, HostNQN: hostA, Removed: true, Commands: 1},
	}
	if !slices.Equal(ie.Controllers, want) {
		t.Errorf("SetANAState's error names controllers %+v; want %+v", ie.Controllers, want)
	}
	for _, s := range []string{
		fmt.Sprintf("1 on controller %d of %s (host %s)", a.cntlid, subNQN, hostA),
		fmt.Sprintf("1 on controller %d of %s (removed subsystem) (host %s)", a.cntlid, subNQN, hostA),
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("SetANAState's error %q does not say %q", err, s)
		}
	}
	if err := e.port.Target().SetANAState(context.Background(), 1, ""); err != nil {
		t.Fatalf("SetANAState(group 1, optimized): %v", err)
	}

	expectOK(t, "register a", a2.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectStatus(t, "preempt and abort of a, a write of its stuck on each of its controllers",
		wait(t, b.preemptAbort(0xB, 0xA)), nvmeproto.StatusInternalError)
	const failed = "preempt and abort failed"
	if n := logs.count(failed); n != 2 {
		t.Errorf("%d log lines say %q; want one for each of a's stuck queues", n, failed)
	}
	for _, removed := range []string{"removed_subsystem=true", "removed_subsystem=false"} {
		if n := logs.count(removed); n != 1 {
			t.Errorf("%d log lines say %q; want 1 of the preempt and abort's 2", n, removed)
		}
	}
}
