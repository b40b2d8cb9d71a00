package target

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
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

// add publishes a namespace with the NSID and generation given (on a file, whose store
// another target may serve).
func (f *fenceFixture) add(nsid uint32, gen uint64) *namespace {
	ns := &namespace{s: f.s, nsid: nsid, gen: gen, cfg: conf.Namespace{NSID: nsid, Backend: conf.BackendFile},
		closed: make(chan struct{}), backends: newGenBackends()}
	tab := slices.Clone(f.s.namespaces())
	i, _ := slices.BinarySearchFunc(tab, nsid, func(n *namespace, id uint32) int { return cmp.Compare(n.nsid, id) })
	tab = slices.Insert(tab, i, ns)
	f.s.ns.Store(&tab)
	return ns
}

// remove unpublishes ns as removeNamespace does: its backend stays open (closeRemoved).
func (f *fenceFixture) remove(ns *namespace) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	var tab []*namespace
	for _, n := range f.s.namespaces() {
		if n != ns {
			tab = append(tab, n)
		}
	}
	f.s.ns.Store(&tab)
	f.s.removed = append(f.s.removed, ns)
}

// closeRemoved closes the backend of ns, removed, and lets its removal finish.
func (f *fenceFixture) closeRemoved(ns *namespace) {
	close(ns.closed)
	ns.backends.leave()
	f.s.forgetRemoved(ns)
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
// namespace — its NSID and generation — only. A removed namespace's nsFence stays in the
// queue's table until its backend has closed, counting its commands begun before or after
// the removal (one that found the namespace before); a namespace added again with its
// NSID has an nsFence of its own beside it, and the commands of neither hold up the
// other's fence. Once the removed namespace's backend has closed, its nsFence leaves the
// table, and a command that found the namespace before counts in one outside it.
func TestFenceGenerations(t *testing.T) {
	f := newFenceFixture(t)
	old := f.add(1, 1)
	other := f.add(2, 2)
	early := f.begin(old)
	fenceLeave(f.begin(other))
	if n := f.tableLen(); n != 2 {
		t.Fatalf("%d nsFences after commands to 2 namespaces, want 2", n)
	}
	f.remove(old)
	if n := f.tableLen(); n != 2 || f.q.findNSFence(old.fenceKey()) != early.fenceIn {
		t.Fatalf("%d nsFences after a removal, its backend open; want 2, the removed namespace's still found", n)
	}
	oldIn := early.fenceIn
	late := f.begin(old) // it found the namespace before the removal
	if late.fenceIn != oldIn {
		t.Fatal("a removed namespace's command, its backend open, counts apart from its earlier ones")
	}

	cur := f.add(1, 3)
	if ok, n := f.drainWithin(cur, time.Second); !ok {
		t.Fatalf("new namespace 1, no command of its own: drain failed with %d commands", n)
	}
	r := f.begin(cur)
	curIn := r.fenceIn
	if n := f.tableLen(); n != 3 || curIn == oldIn || f.q.findNSFence(cur.fenceKey()) != curIn ||
		f.q.findNSFence(old.fenceKey()) != oldIn {
		t.Fatalf("the table after namespace 1 was added again: %d nsFences; want 3, the removed and the new namespace 1's apart", n)
	}
	if ok, n := f.drainWithin(cur, 50*time.Millisecond); ok || n != 1 {
		t.Fatalf("drain with the new namespace's command in flight: %v, %d commands; want it to expire with 1", ok, n)
	}
	if ok, n := f.drainWithin(old, 50*time.Millisecond); ok || n != 2 {
		t.Fatalf("drain of the removed namespace with 2 of its commands in flight: %v, %d commands; want it to expire with 2", ok, n)
	}
	fenceLeave(r)
	if ok, n := f.drainWithin(cur, time.Second); !ok {
		t.Fatalf("drain with only the removed namespace's commands in flight: failed with %d", n)
	}
	fenceLeave(early)
	fenceLeave(late)
	if ok, n := f.drainWithin(old, time.Second); !ok {
		t.Fatalf("drain of the removed namespace, its commands completed: failed with %d", n)
	}

	f.closeRemoved(old)
	if n := f.tableLen(); n != 2 || f.q.findNSFence(old.fenceKey()) != nil || f.q.findNSFence(cur.fenceKey()) != curIn {
		t.Fatalf("%d nsFences once the removed namespace's backend closed; want 2, not the removed one's", n)
	}
	if _, removed := f.s.fencedRemoved(); len(removed) != 0 {
		t.Errorf("%d removed namespaces still fenced once the backend closed, want none", len(removed))
	}
	straggler := f.begin(old) // found the namespace before the removal; its submission fails
	if n := f.tableLen(); n != 2 || straggler.fenceIn == nil || straggler.fenceIn == oldIn || f.q.findNSFence(old.fenceKey()) != nil {
		t.Fatalf("a closed removed namespace's command counted in the queue's table (%d nsFences)", n)
	}
	fenceLeave(straggler)
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
