package target_test

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// TestFenceNSIDReuse: namespace 1 is removed while a host's write to it is stuck in its
// backend, and another store is added as namespace 1. The stuck write cannot reach the
// new namespace, so a Preempt and Abort of that host on the new namespace 1 and an ANA
// change of its group complete at once. The old code counted commands by NSID alone: both
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
