package rdma

import (
	"testing"
	"time"

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
	done := make(chan struct{})
	go func() { g.run(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the group did not stop when its completion queue was closed")
	}
	if want := rounds / busyYieldCheck; cq.yields != want {
		t.Errorf("%d busy rounds: %d offers to yield, want %d (one every %d rounds)", rounds, cq.yields, want, busyYieldCheck)
	}
}

// TestThreadCQYield: maybeYield yields when yieldAfter has passed since the last yield,
// and not before.
func TestThreadCQYield(t *testing.T) {
	c := &threadCQ{}
	c.maybeYield()
	first := c.lastYield
	if first == 0 {
		t.Fatal("the first maybeYield did not yield")
	}
	c.maybeYield()
	if c.lastYield != first {
		t.Errorf("maybeYield yielded again %v after the last yield (yieldAfter %v)", time.Duration(c.lastYield-first), yieldAfter)
	}
	c.lastYield -= int64(yieldAfter)
	c.maybeYield()
	if c.lastYield == first-int64(yieldAfter) {
		t.Errorf("maybeYield did not yield %v after the last yield", yieldAfter)
	}
}
