package conf

import (
	"runtime"
	"testing"
)

// TestPollGroupsDefault: poll_groups 0 is one group per P; an explicit count is taken as
// it is.
func TestPollGroupsDefault(t *testing.T) {
	defer func(f func() int) { numProcs = f }(numProcs)
	for _, c := range []struct{ cpus, groups, want int }{
		{1, 0, 1},
		{2, 0, 2},
		{16, 0, 16},
		{2, 3, 3},
		{16, 1, 1},
	} {
		numProcs = func() int { return c.cpus }
		tr := Transport{PollGroups: c.groups}
		if n := tr.NumPollGroups(); n != c.want {
			t.Errorf("%d Ps, poll_groups %d: %d groups; want %d", c.cpus, c.groups, n, c.want)
		}
	}
}

// TestPollGroupsFollowGOMAXPROCS: the default counts the Go scheduler's Ps, not the
// machine's CPUs, so that a container's CPU limit (or GOMAXPROCS set lower) does not give
// more polling threads than Ps.
func TestPollGroupsFollowGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		tr := Transport{}
		if n := tr.NumPollGroups(); n != procs {
			t.Errorf("GOMAXPROCS %d (%d CPUs): %d groups; want %d", procs, runtime.NumCPU(), n, procs)
		}
	}
}
