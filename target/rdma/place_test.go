package rdma

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestPickGroupKeepsReserve: connections go to the active poll groups, spread by count,
// and reach the reserve only when no active group's completion queue has room.
func TestPickGroupKeepsReserve(t *testing.T) {
	p := testPool(t, 1<<20, 128<<10)
	newDev := func(groups, active int) *device {
		d := &device{name: "fake0", pool: p, active: active}
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
	var got []int
	d := newDev(2, 1) // one active group, one reserve
	for range 5 {
		got = append(got, take(d, 300))
	}
	if want := []int{0, 0, 0, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("one active group and a reserve: connections went to groups %v, want %v", got, want)
	}
	if g := take(d, 500); g != -1 {
		t.Errorf("a connection that fits no group went to group %d", g)
	}

	got = got[:0]
	d = newDev(3, 3) // no reserve: spread by count
	for range 6 {
		got = append(got, take(d, 100))
	}
	counts := make([]int, 3)
	for _, g := range got {
		counts[g]++
	}
	if !slices.Equal(counts, []int{2, 2, 2}) {
		t.Errorf("three active groups: connections per group %v (picks %v), want 2 each", counts, got)
	}
}

// TestReserveGroupNeverRun: a reserve group that never got a connection never ran; a
// drain counts it and a device's close stops it at once, not after groupStopWait.
func TestReserveGroupNeverRun(t *testing.T) {
	p := testPool(t, 1<<20, 128<<10)
	newReserve := func() *group { return newGroup(1, p, newFakeCQ(), groupConfig{cqeCap: 1000}, testLogger(t)) }

	g := newReserve()
	g.start() // as Transport.Drain does
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := drainGroups(ctx, []*group{g}, testLogger(t)); err != nil {
		t.Errorf("draining a reserve group that never ran: %v", err)
	}

	released := 0
	d := &device{name: "fake0", pool: p, groups: []*group{newReserve()}, active: 0,
		release: func() error { released++; return nil }}
	start := time.Now()
	if err := d.close(0); err != nil || released != 1 {
		t.Errorf("closing a device with a reserve group that never ran: %v, released %d times", err, released)
	}
	if took := time.Since(start); took >= groupStopWait {
		t.Errorf("the close took %v: it waited for a group that was never started", took)
	}
}
