package conf

import "testing"

// TestPollGroupsReserve: poll_groups 0 is one group per CPU with one of them a reserve
// where there is more than one CPU; an explicit count has no reserve.
func TestPollGroupsReserve(t *testing.T) {
	defer func(f func() int) { numCPU = f }(numCPU)
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
		numCPU = func() int { return c.cpus }
		tr := Transport{PollGroups: c.groups}
		if n, r := tr.NumPollGroups(), tr.ReservePollGroups(); n != c.wantN || r != c.wantRsvd {
			t.Errorf("%d CPUs, poll_groups %d: %d groups, %d reserve; want %d, %d", c.cpus, c.groups, n, r, c.wantN, c.wantRsvd)
		}
	}
}
