package rdma

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestPickGroupSpreads: connections go to the poll group with the fewest connections
// that has room in its completion queue, so a host's queues spread over every group;
// one that fits no group gets none.
func TestPickGroupSpreads(t *testing.T) {
	p := testPool(t, 1<<20, 128<<10)
	newDev := func(groups int) *device {
		d := &device{name: "fake0", pool: p}
		for i := range groups {
			g := newGroup(i, p, newFakeCQ(), groupConfig{cqeCap: 1000}, testLogger(t))
			g.startOnce.Do(func() {}) // placement only: no goroutine
			d.groups = append(d.groups, g)
		}
		return d
	}
	take := func(d *device, cqe int) int {
		g := d.pickGroup(cqe)
		if g == nil {
			return -1
		}
		g.mu.Lock()
		g.cqeUsed += cqe
		g.mu.Unlock()
		g.nconns.Add(1)
		return g.id
	}
	d := newDev(3)
	var got []int
	for range 6 {
		got = append(got, take(d, 100))
	}
	counts := make([]int, 3)
	for _, g := range got {
		counts[g]++
	}
	if !slices.Equal(counts, []int{2, 2, 2}) {
		t.Errorf("three groups: connections per group %v (picks %v), want 2 each", counts, got)
	}

	d = newDev(2)
	got = got[:0]
	for _, cqe := range []int{300, 300, 600, 300} { // the third fits either; the fourth goes to the other
		got = append(got, take(d, cqe))
	}
	if got[0] == got[1] || got[2] == -1 || got[3] == -1 || got[2] == got[3] {
		t.Errorf("two groups of 1000 entries, connections of 300, 300, 600, 300: groups %v; want the first two apart, then both placed apart", got)
	}
	if g := take(d, 500); g != -1 {
		t.Errorf("a connection that fits no group went to group %d", g)
	}
}

// TestGroupNeverRunStops: a drain of a group with no connection finishes at once, and a
// device's close starts a group that never ran and then finishes at once, not after
// groupStopWait.
func TestGroupNeverRunStops(t *testing.T) {
	p := testPool(t, 1<<20, 128<<10)
	newIdle := func() *group { return newGroup(1, p, newFakeCQ(), groupConfig{cqeCap: 1000}, testLogger(t)) }

	g := newIdle()
	g.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := drainGroups(ctx, []*group{g}, testLogger(t)); err != nil {
		t.Errorf("draining a group that never ran: %v", err)
	}

	released := 0
	d := &device{name: "fake0", pool: p, groups: []*group{newIdle()}, release: func() error { released++; return nil }}
	start := time.Now()
	if err := d.close(0); err != nil || released != 1 {
		t.Errorf("closing a device with a group that never ran: %v, released %d times", err, released)
	}
	if took := time.Since(start); took >= groupStopWait {
		t.Errorf("the close took %v: it waited for a group that was never started", took)
	}
}
