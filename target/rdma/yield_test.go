package rdma

import (
	"slices"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/rdmacm"
)

// busyCQ has a completion at every poll (of a connection that is gone, which the group
// drops) until it has been polled limit times; then it is closed. It counts the group's
// maybeYield calls.
type busyCQ struct{ polls, limit, yields int }

func (c *busyCQ) Poll(wc []rdmacm.Completion) (int, error) {
	if c.polls == c.limit {
		return 0, rdmacm.ErrClosed
	}
	c.polls++
	wc[0] = rdmacm.Completion{ID: wrID(kindRecv, 0, 0, 7)}
	return 1, nil
}
func (c *busyCQ) Arm(bool) error                   { return nil }
func (c *busyCQ) Wait(time.Duration) (bool, error) { return false, nil }
func (c *busyCQ) Wake()                            {}
func (c *busyCQ) maybeYield()                      { c.yields++ }
func (c *busyCQ) yieldOnHandoff()                  { c.yields += 1 << 20 } // a busy group never spins
func (c *busyCQ) yieldCPU()                        { c.yields += 1 << 20 }

// TestGroupYieldsWhileBusy: a group that finds work in every round never sleeps, so it
// must offer to yield from its busy loop (every busyYieldCheck rounds): otherwise the Go
// runtime's monitor thread preempts it every 10 ms and takes its P, and from then on
// runs at its fastest rate (what threadCQ exists to avoid).
func TestGroupYieldsWhileBusy(t *testing.T) {
	const rounds = 1000
	cq := &busyCQ{limit: rounds}
	g := newGroup(0, testPool(t, 1<<20, 128<<10), cq, groupConfig{cqeCap: 100}, testLogger(t))
	g.run() // returns once the CQ reports it is closed, after limit busy rounds
	if want := rounds / busyYieldCheck; cq.yields != want {
		t.Errorf("%d busy rounds: %d offers to yield, want %d (one every %d rounds)", rounds, cq.yields, want, busyYieldCheck)
	}
}

// TestThreadCQYield: maybeYield yields when yieldAfter has passed since the last yield
// (or a backend worker was handed work), and not before.
func TestThreadCQYield(t *testing.T) {
	c := &threadCQ{}
	c.maybeYield()
	if c.lastYield == 0 {
		t.Fatal("the first maybeYield did not yield")
	}
	h := backend.Handoffs()
	last := nanotime()
	c.lastYield, c.handoffs = last, h
	c.maybeYield()
	// A yield is right here only if another test's backend worker was handed work, or
	// this goroutine was descheduled for yieldAfter between the two clock reads.
	if c.lastYield != last && c.handoffs == h && time.Duration(nanotime()-last) < yieldAfter {
		t.Errorf("maybeYield yielded %v after the last yield (yieldAfter %v)", time.Duration(c.lastYield-last), yieldAfter)
	}
	c.lastYield = nanotime() - int64(yieldAfter)
	last = c.lastYield
	c.maybeYield()
	if c.lastYield == last {
		t.Errorf("maybeYield did not yield %v after the last yield", yieldAfter)
	}
}

// idleCQ never has a completion; it is closed after limit polls. It records the polls
// made before each sleep and counts the group's yieldOnHandoff calls and the polls at its
// yieldCPU calls.
type idleCQ struct {
	polls, limit, spinYields, busyYields int
	pollsAtWait, pollsAtCPUYield         []int
}

func (c *idleCQ) Poll(wc []rdmacm.Completion) (int, error) {
	if c.polls == c.limit {
		return 0, rdmacm.ErrClosed
	}
	c.polls++
	return 0, nil
}
func (c *idleCQ) Arm(bool) error { return nil }
func (c *idleCQ) Wait(time.Duration) (bool, error) {
	c.pollsAtWait = append(c.pollsAtWait, c.polls)
	return false, nil
}
func (c *idleCQ) Wake()           {}
func (c *idleCQ) maybeYield()     { c.busyYields++ }
func (c *idleCQ) yieldOnHandoff() { c.spinYields++ }
func (c *idleCQ) yieldCPU()       { c.pollsAtCPUYield = append(c.pollsAtCPUYield, c.polls) }

// TestGroupSpinsBeforeSleeping: an idle group polls spin more times after its last empty
// round before it sleeps (and once more after arming), offering at each spinning poll to
// yield to a backend worker it handed work, without reading the clock, and its CPU to
// the OS every spinYieldPolls spinning polls.
func TestGroupSpinsBeforeSleeping(t *testing.T) {
	const spin, sleeps = 3*spinYieldPolls + spinYieldPolls/2, 4
	cq := &idleCQ{limit: sleeps * (spin + 2)}
	g := newGroup(0, testPool(t, 1<<20, 128<<10), cq, groupConfig{cqeCap: 100, spin: spin}, testLogger(t))
	g.run()
	if len(cq.pollsAtWait) != sleeps {
		t.Fatalf("%d polls: %d sleeps, want %d (one every %d polls)", cq.limit, len(cq.pollsAtWait), sleeps, spin+2)
	}
	for i, n := range cq.pollsAtWait {
		if want := (i + 1) * (spin + 2); n != want {
			t.Errorf("sleep %d after %d polls, want %d: an empty round, %d spinning polls, the poll after arming", i+1, n, want, spin)
		}
	}
	if want := sleeps * spin; cq.spinYields != want || cq.busyYields != 0 {
		t.Errorf("spinning: %d yieldOnHandoff and %d maybeYield calls, want %d and 0", cq.spinYields, cq.busyYields, want)
	}
	// The k-th offer of a sleep's spin follows its k×spinYieldPolls-th empty poll.
	var want []int
	for i := 0; i < sleeps; i++ {
		for k := 1; k <= spin/spinYieldPolls; k++ {
			want = append(want, i*(spin+2)+k*spinYieldPolls)
		}
	}
	if !slices.Equal(cq.pollsAtCPUYield, want) {
		t.Errorf("yieldCPU at polls %v, want %v (every %d spinning polls)", cq.pollsAtCPUYield, want, spinYieldPolls)
	}
}

// TestThreadCQYieldOnHandoff: yieldOnHandoff yields (takes note of the count) only when a
// backend worker was handed work since the last yield.
func TestThreadCQYieldOnHandoff(t *testing.T) {
	c := &threadCQ{}
	h := backend.Handoffs()
	c.handoffs = h - 1
	c.yieldOnHandoff()
	if c.handoffs < h {
		t.Errorf("a hand-off since the last yield: handoffs %d after yieldOnHandoff, want at least %d", c.handoffs, h)
	}
	if c.lastYield != 0 {
		t.Error("yieldOnHandoff read the clock")
	}
}
