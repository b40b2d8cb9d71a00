package target

import (
	"cmp"
	"slices"
	"testing"
	"time"
)

// fenceFixture is a subsystem with one I/O queue, for the fence's bookkeeping.
type fenceFixture struct {
	t *testing.T
	s *subsystem
	q *Queue
}

func newFenceFixture(t *testing.T) *fenceFixture {
	s := newSubsystem(nil, "nqn.2024-01.io.gonvmf:fence", false)
	q := &Queue{}
	s.addIOQueue(q)
	return &fenceFixture{t: t, s: s, q: q}
}

// add publishes a namespace with the NSID and generation given.
func (f *fenceFixture) add(nsid uint32, gen uint64) *namespace {
	ns := &namespace{s: f.s, nsid: nsid, gen: gen}
	tab := slices.Clone(f.s.namespaces())
	i, _ := slices.BinarySearchFunc(tab, nsid, func(n *namespace, id uint32) int { return cmp.Compare(n.nsid, id) })
	tab = slices.Insert(tab, i, ns)
	f.s.ns.Store(&tab)
	return ns
}

// remove unpublishes ns as removeNamespace does; with drop, drops its nsFences too.
func (f *fenceFixture) remove(ns *namespace, drop bool) {
	var tab []*namespace
	for _, n := range f.s.namespaces() {
		if n != ns {
			tab = append(tab, n)
		}
	}
	f.s.ns.Store(&tab)
	if drop {
		f.s.dropFences(ns)
	}
}

// begin counts a command to ns on the queue.
func (f *fenceFixture) begin(ns *namespace) *Request {
	r := &Request{}
	f.q.fenceEnter(r, ns)
	return r
}

// drainWithin drains the queue's fence of ns, giving up after d.
func (f *fenceFixture) drainWithin(ns *namespace, d time.Duration) (bool, int64) {
	expired := make(chan struct{})
	tm := time.AfterFunc(d, func() { close(expired) })
	defer tm.Stop()
	return fenceWait{f.q, []fenceKey{ns.fenceKey()}}.drain(expired)
}

func (f *fenceFixture) tableLen() int { return len(f.q.fenceTable()) }

// TestFenceGenerations: a queue's commands to a namespace are waited for by a fence of that
// namespace — its NSID and generation — only. A removed namespace's commands, counted
// before or after its removal (a command that found it before), hold up no fence of a
// namespace added later with its NSID; a table entry of a removed namespace that the
// removal did not drop is replaced by the new namespace's. Removal leaves nothing in the
// queue's table.
func TestFenceGenerations(t *testing.T) {
	f := newFenceFixture(t)
	old := f.add(1, 1)
	other := f.add(2, 2)
	early := f.begin(old)
	f.begin(other)
	if n := f.tableLen(); n != 2 {
		t.Fatalf("%d nsFences after commands to 2 namespaces, want 2", n)
	}
	f.remove(old, true)
	if n := f.tableLen(); n != 1 {
		t.Fatalf("%d nsFences after a removal, want 1", n)
	}
	late := f.begin(old) // it found the namespace before the removal
	if n := f.tableLen(); n != 1 || late.fenceIn == nil || f.q.findNSFence(old.fenceKey()) != nil {
		t.Fatalf("a removed namespace's command counted in the queue's table (%d nsFences)", n)
	}

	cur := f.add(1, 3)
	if ok, n := f.drainWithin(cur, time.Second); !ok {
		t.Fatalf("new namespace 1, no command of its own: drain failed with %d commands", n)
	}
	r := f.begin(cur)
	if r.fenceIn == early.fenceIn || r.fenceIn == late.fenceIn {
		t.Fatal("the new namespace 1 counts in the removed one's nsFence")
	}
	if ok, n := f.drainWithin(cur, 50*time.Millisecond); ok || n != 1 {
		t.Fatalf("drain with the new namespace's command in flight: %v, %d commands; want it to expire with 1", ok, n)
	}
	fenceLeave(r)
	if ok, n := f.drainWithin(cur, time.Second); !ok {
		t.Fatalf("drain with only the removed namespace's commands in flight: failed with %d", n)
	}
	fenceLeave(early)
	fenceLeave(late)

	// A removal that did not drop its nsFence (the queue had not been listed): the next
	// namespace's first command replaces it, and the old command leaves its own.
	f.remove(cur, false)
	stuck := f.begin(cur) // counted in cur's nsFence, still in the table
	next := f.add(1, 4)
	r = f.begin(next)
	if n := f.tableLen(); n != 2 || f.q.findNSFence(next.fenceKey()) != r.fenceIn || r.fenceIn == stuck.fenceIn {
		t.Fatalf("the table after namespace 1 was replaced: %d nsFences; want 2, namespace 1's the new one", n)
	}
	fenceLeave(r)
	if ok, n := f.drainWithin(next, time.Second); !ok {
		t.Fatalf("drain of the replacing namespace, a command of the one it replaced in flight: failed with %d", n)
	}
	fenceLeave(stuck)
}

// TestFenceDrainConcurrent: drains of one nsFence take turns: both wait for the command
// counted before them and end when it completes; one that expires while waiting for the
// other's turn reports the commands still counted. No drain state outlives its drain.
func TestFenceDrainConcurrent(t *testing.T) {
	f := newFenceFixture(t)
	ns := f.add(1, 1)
	r := f.begin(ns)
	in := r.fenceIn
	done := make(chan bool, 2)
	for range 2 {
		go func() {
			ok, _ := f.drainWithin(ns, 10*time.Second)
			done <- ok
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for in.draining.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no drain under way after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if ok, n := f.drainWithin(ns, 50*time.Millisecond); ok || n != 1 {
		t.Fatalf("a third drain during the others: %v, %d commands; want it to expire with 1", ok, n)
	}
	select {
	case ok := <-done:
		t.Fatalf("a drain ended (%v) with the command in flight", ok)
	case <-time.After(50 * time.Millisecond):
	}
	fenceLeave(r)
	for range 2 {
		select {
		case ok := <-done:
			if !ok {
				t.Fatal("a drain failed after the command completed")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a drain still waits 5 s after the command completed")
		}
	}
	if in.draining.Load() != nil {
		t.Error("drain state left on the nsFence after the drains ended")
	}
	var rq Request
	if n := testing.AllocsPerRun(100, func() { f.q.fenceEnter(&rq, ns); fenceLeave(&rq) }); n != 0 {
		t.Errorf("a command's fenceEnter and fenceLeave allocate %.0f times, want none", n)
	}
}
