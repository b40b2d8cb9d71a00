package rdma

import (
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
