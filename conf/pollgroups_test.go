package conf

import (
	"runtime"
	"testing"
)

// TestPollGroupsReserve: poll_groups 0 is one group per P with one of them a reserve
// where there is more than one P; an explicit count has no reserve.
func TestPollGroupsReserve(t *testing.T) {
	defer func(f func() int) { numProcs = f }(numProcs)
	for _, c := range []struct {
		cpus, groups    int
		wantN, wantRsvd int
	}{
		{1, 0, 1, 0},
		{2, 0, 2, 1},
		{16, 0, 16, 1},
		{2, 2, 2, 0},
		{16, 1, 1, 0},
	} {
		numProcs = func() int { return c.cpus }
		tr := Transport{PollGroups: c.groups}
		if n, r := tr.NumPollGroups(), tr.ReservePollGroups(); n != c.wantN || r != c.wantRsvd {
			t.Errorf("%d Ps, poll_groups %d: %d groups, %d reserve; want %d, %d", c.cpus, c.groups, n, r, c.wantN, c.wantRsvd)
		}
	}
}

// TestPollGroupsFollowGOMAXPROCS: the default counts the Go scheduler's Ps, not the
// machine's CPUs, so that a container's CPU limit (or GOMAXPROCS set lower) does not give
// more active groups than Ps.
func TestPollGroupsFollowGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		tr := Transport{}
		wantRsvd := 0
		if procs > 1 {
			wantRsvd = 1
		}
		if n, r := tr.NumPollGroups(), tr.ReservePollGroups(); n != procs || r != wantRsvd {
			t.Errorf("GOMAXPROCS %d (%d CPUs): %d groups, %d reserve; want %d, %d", procs, runtime.NumCPU(), n, r, procs, wantRsvd)
		}
	}
}
