package rdma

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/rdmacm"
	"golang.org/x/sys/unix"
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

// tidCQ is busyCQ that records the OS thread of every poll and passes through the Go
// scheduler at every offer to yield.
type tidCQ struct {
	busyCQ
	tids map[int]int
}

func (c *tidCQ) Poll(wc []rdmacm.Completion) (int, error) {
	c.tids[unix.Gettid()]++
	return c.busyCQ.Poll(wc)
}
func (c *tidCQ) maybeYield() { c.busyCQ.maybeYield(); runtime.Gosched() }

// TestGroupKeepsItsThread: a poll group's goroutine polls from one OS thread for its
// whole life, through its passes through the Go scheduler while other goroutines keep
// every P busy (an unlocked goroutine resumes on whichever thread picks it up).
func TestGroupKeepsItsThread(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(stop)
	cq := &tidCQ{busyCQ: busyCQ{limit: 20000}, tids: map[int]int{}}
	g := newGroup(0, testPool(t, 1<<20, 128<<10), cq, groupConfig{cqeCap: 100}, testLogger(t))
	done := make(chan struct{})
	go func() { g.run(); close(done) }()
	<-done
	if len(cq.tids) != 1 {
		t.Errorf("%d polls made from %d OS threads (polls by thread id: %v), want one", cq.polls, len(cq.tids), cq.tids)
	}
}

// TestGroupBusyPollYields: under transport.busy_poll an idle group never sleeps nor offers
// its CPU to the OS, and passes through the Go scheduler as a busy one does (maybeYield
// every busyYieldCheck rounds), not at every empty poll: its goroutine keeps its OS thread,
// and each pass hands the thread's P to another thread and back.
func TestGroupBusyPollYields(t *testing.T) {
	const polls = 40 * busyYieldCheck
	cq := &idleCQ{limit: polls}
	g := newGroup(0, testPool(t, 1<<20, 128<<10), cq, groupConfig{cqeCap: 100, spin: 8, busyPoll: true}, testLogger(t))
	g.run()
	if want := polls / busyYieldCheck; cq.busyYields != want {
		t.Errorf("%d empty polls: %d maybeYield calls, want %d (one every %d)", polls, cq.busyYields, want, busyYieldCheck)
	}
	if len(cq.pollsAtWait) != 0 || cq.spinYields != 0 || len(cq.pollsAtCPUYield) != 0 {
		t.Errorf("busy polling: %d sleeps, %d yieldOnHandoff and %d yieldCPU calls, want none", len(cq.pollsAtWait), cq.spinYields, len(cq.pollsAtCPUYield))
	}
}
