package target

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// The I/O fence: waiting for the namespace data commands that queues admitted to a
// namespace before a change of what they admit.
//
// Commands cannot be taken back from a backend once submitted. A change that stops a
// queue's commands reaching a namespace — a Preempt and Abort unregistering its host
// (reservation.go), an ANA state that serves no I/O on its port for the namespace's group,
// a namespace moved into such a group (ana.go) — is therefore complete only once every
// command to that namespace admitted under the old rule has completed. All three wait
// with this one mechanism, and each only for the namespaces it changes: another
// namespace's backend may be slow or hung, and its commands cannot reach this one.
//
// Every namespace data command (Read, Write, Compare, Flush, Write Zeroes, Dataset
// Management) counts itself, from Begin until its completion, in its queue's nsFence of
// the command's NSID, in one of two counters chosen by the parity of that nsFence's
// epoch, before it reads the namespace's ANA group, the port's state of that group or
// the namespace's reservation state (fenceEnter). A queue's nsFence of a namespace is
// created on the queue's first command to it and kept in an immutable table sorted by
// NSID, so that the I/O path allocates only once per namespace a queue reaches (the table
// is bounded by the NSIDs the subsystem has had). Reservation commands do not count: they
// reach no storage, and a Preempt and Abort waiting for the victim's queues would
// otherwise wait for the victim's own Preempt and Abort, which may be waiting for it.
//
// A change publishes the new state, then for every queue and NSID it concerns waits until
// each of the two counters of the queue's nsFence of that NSID has read zero at some
// moment after the publication (drain): a command that read the old state had counted
// itself before, so it has completed by then. A queue without an nsFence of the NSID had
// no command to it before the publication (a command creates its nsFence before reading
// the state): nothing to wait for. Before waiting on a counter the drain flips the
// epoch, so that commands beginning meanwhile count in the other one and cannot keep it
// from draining; both counters are drained because a command may have counted itself in
// the other one just before an earlier flip. Drains of one nsFence run one at a time
// (its sem); those of different queues run concurrently, and those of one queue's
// NSIDs one after another. Counting is keyed by NSID, not by namespace object, so that
// commands still in a backend that a reopen gave up on are waited for too.
//
// Every atomic the fence has a command touch is its own queue's (the table pointer and
// the counters of its NSID), which only that queue's poll group and backend completions
// share; a fence's drains and the changes' lists of queues take no lock a command takes.

// nsFence counts one queue's namespace data commands in flight to one namespace (by
// NSID), by the parity of its epoch when they began.
type nsFence struct {
	nsid  uint32
	epoch atomic.Uint32
	n     [2]atomic.Int64
	// A drain holds sem (one at a time) and sets waiting; fenceLeave then signals wake
	// when a count reaches zero.
	waiting atomic.Bool
	wake    chan struct{} // capacity 1
	sem     chan struct{} // capacity 1
}

// fenceEnter counts a namespace data command to namespace nsid in its queue's current
// fence epoch of that namespace (undone by fenceLeave, in finish). It must precede the
// command's reads of the states a fence protects.
func (q *Queue) fenceEnter(r *Request, nsid uint32) {
	in := q.nsFenceOf(nsid)
	e := in.epoch.Load() & 1
	in.n[e].Add(1)
	r.fenceIn, r.fencePar = in, uint8(e)
}

// fenceLeave undoes fenceEnter as the command completes, waking a drain waiting for its
// counter.
func fenceLeave(r *Request) {
	in := r.fenceIn
	if in == nil {
		return
	}
	r.fenceIn = nil
	if in.n[r.fencePar].Add(-1) == 0 && in.waiting.Load() {
		select {
		case in.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// isResvOpcode reports whether op is a reservation command (not counted by the fence).
func isResvOpcode(op uint8) bool {
	switch op {
	case nvmeproto.OpReservationRegister, nvmeproto.OpReservationAcquire, nvmeproto.OpReservationRelease,
		nvmeproto.OpReservationReport:
		return true
	}
	return false
}

// nsFenceOf returns the queue's nsFence of namespace nsid, creating it on the queue's
// first command to the namespace.
func (q *Queue) nsFenceOf(nsid uint32) *nsFence {
	if in := q.findNSFence(nsid); in != nil {
		return in
	}
	q.fenceMu.Lock()
	defer q.fenceMu.Unlock()
	var tab []*nsFence
	if p := q.fenceNS.Load(); p != nil {
		tab = *p
	}
	i := nsFenceIndex(tab, nsid)
	if i < len(tab) && tab[i].nsid == nsid {
		return tab[i]
	}
	in := &nsFence{nsid: nsid, wake: make(chan struct{}, 1), sem: make(chan struct{}, 1)}
	tab = slices.Insert(slices.Clone(tab), i, in)
	q.fenceNS.Store(&tab)
	return in
}

// findNSFence returns the queue's nsFence of namespace nsid, or nil if no command of the
// queue has reached it.
func (q *Queue) findNSFence(nsid uint32) *nsFence {
	p := q.fenceNS.Load()
	if p == nil {
		return nil
	}
	tab := *p
	if i := nsFenceIndex(tab, nsid); i < len(tab) && tab[i].nsid == nsid {
		return tab[i]
	}
	return nil
}

// nsFenceIndex returns where nsid is, or belongs, in tab (sorted by NSID).
func nsFenceIndex(tab []*nsFence, nsid uint32) int {
	i, j := 0, len(tab)
	for i < j {
		h := int(uint(i+j) >> 1)
		if tab[h].nsid < nsid {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

// drain waits until each of the two epoch counters has read zero, or until expired is
// closed: then it reports false and left, the commands of the counter it was waiting on
// (both counters' while it waited for another drain of the nsFence). Both counters
// reading zero, one after the other, is drained already: no flip is needed then, nor the
// turn of another drain.
func (in *nsFence) drain(expired <-chan struct{}) (ok bool, left int64) {
	if in.n[0].Load() == 0 && in.n[1].Load() == 0 {
		return true, 0
	}
	select {
	case in.sem <- struct{}{}:
	case <-expired:
		if left = in.n[0].Load() + in.n[1].Load(); left == 0 {
			return true, 0
		}
		return false, left
	}
	defer func() { <-in.sem }()
	in.waiting.Store(true)
	defer in.waiting.Store(false)
	for range 2 {
		old := (in.epoch.Add(1) - 1) & 1
		for in.n[old].Load() != 0 {
			select {
			case <-in.wake:
			case <-expired:
				if n := in.n[old].Load(); n != 0 {
					return false, n
				}
			}
		}
	}
	return true, 0
}

// fenceWait is what a fence waits for on one queue: its commands to the namespaces nsids
// (shared between the fenceWaits of one change; not modified).
type fenceWait struct {
	q     *Queue
	nsids []uint32
}

// fencedQueue is a queue whose commands a fence did not see complete in time.
type fencedQueue struct {
	q        *Queue
	commands int64 // still counted, over the namespaces waited for
}

// fenceQueues drains, for every fenceWait of ws, the queue's nsFence of each of its
// NSIDs (the queues concurrently: each waits at most until ctx is done) and returns the
// queues that did not drain in time, with the commands still counted.
func fenceQueues(ctx context.Context, ws []fenceWait) []fencedQueue {
	switch len(ws) {
	case 0:
		return nil
	case 1:
		if ok, n := ws[0].drain(ctx.Done()); !ok {
			return []fencedQueue{{ws[0].q, n}}
		}
		return nil
	}
	var (
		mu    sync.Mutex
		stuck []fencedQueue
		wg    sync.WaitGroup
	)
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, n := w.drain(ctx.Done()); !ok {
				mu.Lock()
				stuck = append(stuck, fencedQueue{w.q, n})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return stuck
}

// drain drains the queue's nsFence of each NSID, one after another, and reports whether
// all drained before expired was closed; if not, left counts the commands still counted
// in those that did not.
func (w fenceWait) drain(expired <-chan struct{}) (ok bool, left int64) {
	ok = true
	for _, nsid := range w.nsids {
		in := w.q.findNSFence(nsid)
		if in == nil {
			continue // none of its commands has reached the namespace
		}
		if done, n := in.drain(expired); !done {
			ok = false
			left += n
		}
	}
	return ok, left
}

// fenceContext bounds ctx by the queue-close timeout when it has no deadline of its own.
func (t *Target) fenceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, t.closeTimeout)
}

// since is time.Since rounded for messages.
func since(start time.Time) time.Duration { return time.Since(start).Round(time.Millisecond) }
