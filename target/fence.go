package target

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/conf"
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
// the command's namespace, in one of two counters chosen by the parity of that nsFence's
// epoch, before it reads the namespace's ANA group, the port's state of that group or
// the namespace's reservation state (fenceEnter). Reservation commands do not count: they
// reach no storage, and a Preempt and Abort waiting for the victim's queues would
// otherwise wait for the victim's own Preempt and Abort, which may be waiting for it.
//
// A namespace is its NSID and its generation (namespace.gen, the fenceKey): each
// AddNamespace makes a new generation, and a reopen hands its generation on to the
// namespace object that replaces the old one. So commands still in a backend that a
// reopen gave up on are the reopened namespace's, and are waited for. A namespace's
// backends are those of its generation (genBackends): the one open now, and those a
// reopen gave up on that have not closed yet; they have closed when all of them have.
// The namespace objects of one generation share one count of its open backends, not a
// chain of one another: reopens that each give up on a stuck backend hold nothing but
// the stuck objects themselves, and no goroutine waits for them.
//
// A removed namespace's commands still in its backends — RemoveNamespace, or a reopen
// before it, gave up waiting for them, and a backend closes once they complete — may
// still reach its store, which another target may serve (a shared file or block device,
// an rbd image), or which the namespace added again with its NSID uses (a reload that
// changes a namespace's uuid, nguid or eui64 removes it and adds it again on the same
// store). Until its backends have closed, such a namespace stays in its subsystem's list
// of removed namespaces, and the fences of the changes that concern its store wait for
// its commands too (subsystem.fencedRemoved): a port's ANA change of a group waits for the removed
// namespaces whose last group it is and for those whose NSID a namespace in the group
// now has; a namespace's move to another group, and a Preempt and Abort on a namespace,
// wait for the removed namespaces with its NSID. A memory or null namespace's commands
// reach no store anyone else serves and are not waited for once it is removed.
//
// RemoveSubsystem removes every namespace of the subsystem in the same way (unpublish
// puts them on its removed list while the subsystem is still in the target's table), and
// the subsystem stays on the target's list of removed subsystems from the moment it
// leaves the table until no backend of those namespaces is open (Target.removedSubs): a
// subsystem with commands executing while it is being removed, or stuck after, is still
// one the fences see, with its I/O queues. A fence looks at a subsystem together with the
// removed subsystems with its NQN (fenceScope), which may have been added again on the
// same stores (a reload's undo of a failed reload re-adds a subsystem it removed): their
// removed namespaces count as the subsystem's own removed ones, and their queues are
// waited on with its queues.
//
// A queue's nsFence of a namespace is created by the queue's first command to it and kept
// in an immutable table sorted by NSID and generation, at most one per namespace (NSID
// and generation): a removed namespace's and that of the namespace added again with its
// NSID are two. A removed namespace's nsFence stays in the tables until its backends have
// closed; then no command of it executes any more, and the removal drops it from the
// table of every I/O queue of its subsystem (dropFences). A command of a removed namespace
// that creates its nsFence after the backends closed (it found the namespace before the
// removal; its submission fails) counts in one of its own, in no table. A queue thus holds
// one nsFence — 32 bytes, and 8 in its table — for each namespace of its subsystem it has
// sent a data command to, and for each removed one whose backends have not closed yet:
// queues × namespaces at most, removed ones not closed aside (64 hosts with 32 queues
// each, every queue reaching 256 namespaces: 20 MiB). The I/O path allocates only for a
// queue's first command to a namespace (the nsFence and the new table); what a drain
// waits with (a fenceDrain) exists only while it waits.
//
// A change publishes the new state, then for every queue and namespace it concerns waits
// until each of the two counters of the queue's nsFence of that namespace has read zero
// at some moment after the publication (drain): a command that read the old state had
// counted itself before, so it has completed by then. A queue without an nsFence of the
// namespace had no command to it before the publication (a command finds or creates its
// nsFence before reading the state): nothing to wait for. Before waiting on a counter the
// drain flips the epoch, so that commands beginning meanwhile count in the other one and
// cannot keep it from draining; both counters are drained because a command may have
// counted itself in the other one just before an earlier flip. Drains of one nsFence run
// one at a time (the one whose fenceDrain it holds); those of different queues run
// concurrently, and those of one queue's namespaces one after another.
//
// Every atomic the fence has a command touch is its own queue's (the table pointer and
// the nsFence of its namespace), which only that queue's poll group and backend
// completions share; a fence's drains and the changes' lists of queues take no lock a
// command takes, and a command takes its queue's fenceMu only to create an nsFence.

// fenceKey is the namespace a fence waits for: its NSID and generation (namespace.gen).
type fenceKey struct {
	nsid uint32
	gen  uint64
}

func (ns *namespace) fenceKey() fenceKey { return fenceKey{ns.nsid, ns.gen} }

// nsFence counts one queue's namespace data commands in flight to one namespace (by NSID
// and generation), by the parity of its epoch when they began. 32 bytes: a queue keeps one
// for every namespace it reaches.
type nsFence struct {
	nsid  uint32
	epoch atomic.Uint32
	n     [2]atomic.Int32 // at most the queue's depth each
	gen   uint64
	// draining is the drain under way, nil when there is none: fenceLeave wakes it when a
	// count reaches zero.
	draining atomic.Pointer[fenceDrain]
}

// fenceDrain is one drain of an nsFence, from when it takes the nsFence until it is done.
type fenceDrain struct {
	wake chan struct{} // capacity 1: a count reached zero
	done chan struct{} // closed when the drain ends, after it left the nsFence
}

// fenceEnter counts a namespace data command to namespace ns in its queue's current
// fence epoch of that namespace (undone by fenceLeave, in finish). It must precede the
// command's reads of the states a fence protects.
func (q *Queue) fenceEnter(r *Request, ns *namespace) {
	in := q.findNSFence(ns.fenceKey())
	if in == nil {
		in = q.addNSFence(ns)
	}
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
	if in.n[r.fencePar].Add(-1) == 0 {
		if d := in.draining.Load(); d != nil {
			select {
			case d.wake <- struct{}{}:
			default: // a wake-up is already pending
			}
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

// addNSFence returns the queue's nsFence of namespace ns for the queue's first command to
// it: a new one, in the queue's table while ns's generation is in its subsystem's or its
// backends have not closed (a removed namespace: see dropFences), in no table after that.
func (q *Queue) addNSFence(ns *namespace) *nsFence {
	q.fenceMu.Lock()
	defer q.fenceMu.Unlock()
	tab := q.fenceTable()
	k := ns.fenceKey()
	i := nsFenceIndex(tab, k)
	if i < len(tab) && tab[i].key() == k {
		return tab[i]
	}
	in := &nsFence{nsid: ns.nsid, gen: ns.gen}
	// Read under fenceMu, after the table: either the removal's dropFences, which runs
	// once the backends have closed, finds the new nsFence in the table, or this sees the
	// namespace gone and closed.
	if cur := ns.s.lookup(ns.nsid); (cur == nil || cur.gen != ns.gen) && isClosed(ns.backends.done) {
		return in
	}
	next := make([]*nsFence, len(tab)+1)
	copy(next, tab[:i])
	next[i] = in
	copy(next[i+1:], tab[i:])
	q.fenceNS.Store(&next)
	return in
}

// dropNSFence drops the queue's nsFence of the removed namespace k from its table.
func (q *Queue) dropNSFence(k fenceKey) {
	q.fenceMu.Lock()
	defer q.fenceMu.Unlock()
	tab := q.fenceTable()
	i := nsFenceIndex(tab, k)
	if i == len(tab) || tab[i].key() != k {
		return
	}
	next := slices.Delete(slices.Clone(tab), i, i+1)
	q.fenceNS.Store(&next)
}

// dropFences drops the nsFences of namespace ns, removed from the subsystem's table and
// its backends closed since, from every I/O queue's. Every queue that may have a command
// of ns between its lookup and fenceEnter is listed: an I/O queue is, from before its
// first command until its last has completed.
func (s *subsystem) dropFences(ns *namespace) {
	s.ioqMu.Lock()
	qs := make([]*Queue, 0, len(s.ioQueues))
	for q := range s.ioQueues {
		qs = append(qs, q)
	}
	s.ioqMu.Unlock()
	k := ns.fenceKey()
	for _, q := range qs {
		q.dropNSFence(k)
	}
}

// fencedRemoved returns the subsystem's namespace table and, read with it, the removed
// namespaces whose commands the fences still wait for: those whose backends (of their
// generation: genBackends) have not all closed, on a store another target may serve or
// the namespace added again with the NSID may use — every backend but memory (this
// process's own) and null (none).
func (s *subsystem) fencedRemoved() (tab, removed []*namespace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range s.removed {
		private := ns.cfg.Backend == conf.BackendMemory || ns.cfg.Backend == conf.BackendNull
		if !private && !isClosed(ns.backends.done) {
			removed = append(removed, ns)
		}
	}
	return *s.ns.Load(), removed
}

// fenceScope returns the subsystems a fence of s's namespaces looks at: s, and the
// removed subsystems with its NQN (Target.removedSubs), whose namespaces' backends may
// still execute commands on the stores s's namespaces use (a subsystem removed and added
// again: RemoveSubsystem, then AddSubsystem or a reload's undo of the removal).
func (t *Target) fenceScope(s *subsystem) []*subsystem {
	scope := []*subsystem{s}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.removedSubs {
		if r != s && r.nqn == s.nqn {
			scope = append(scope, r)
		}
	}
	return scope
}

// fenceKeys returns the namespaces a fence of namespace ns, of the first subsystem of
// scope (fenceScope), waits for: ns, and the removed namespaces with its NSID whose
// commands the fences still wait for (fencedRemoved) of every subsystem of scope.
func fenceKeys(scope []*subsystem, ns *namespace) []fenceKey {
	keys := []fenceKey{ns.fenceKey()}
	for _, s := range scope {
		_, removed := s.fencedRemoved()
		for _, r := range removed {
			if r.nsid == ns.nsid {
				keys = append(keys, r.fenceKey())
			}
		}
	}
	return keys
}

// scopeIOQueues returns the I/O queues of the subsystems of scope that may still have
// commands in flight (their ioQueues) for which keep reports true.
func scopeIOQueues(scope []*subsystem, keep func(*Queue) bool) []*Queue {
	var qs []*Queue
	for _, s := range scope {
		s.ioqMu.Lock()
		for q := range s.ioQueues {
			if keep(q) {
				qs = append(qs, q)
			}
		}
		s.ioqMu.Unlock()
	}
	return qs
}

// fenceTable returns the queue's table of nsFences (sorted by NSID and generation; do not
// modify).
func (q *Queue) fenceTable() []*nsFence {
	if p := q.fenceNS.Load(); p != nil {
		return *p
	}
	return nil
}

// findNSFence returns the queue's nsFence of namespace k, or nil if none is in its table:
// no command of the queue has reached the namespace, or the namespace was removed and
// its backends have closed.
func (q *Queue) findNSFence(k fenceKey) *nsFence {
	p := q.fenceNS.Load()
	if p == nil {
		return nil
	}
	tab := *p
	if i := nsFenceIndex(tab, k); i < len(tab) && tab[i].key() == k {
		return tab[i]
	}
	return nil
}

// busyNSIDs adds to nsids (sorted, each once) the namespaces the queue has namespace data
// commands in flight to, and returns it.
func (q *Queue) busyNSIDs(nsids []uint32) []uint32 {
	for k := range q.busyFences {
		if i, found := slices.BinarySearch(nsids, k.nsid); !found {
			nsids = slices.Insert(nsids, i, k.nsid)
		}
	}
	return nsids
}

// nsFenceIndex returns where namespace k is, or belongs, in tab (sorted by NSID and
// generation).
func nsFenceIndex(tab []*nsFence, k fenceKey) int {
	i, j := 0, len(tab)
	for i < j {
		h := int(uint(i+j) >> 1)
		if in := tab[h]; in.nsid < k.nsid || in.nsid == k.nsid && in.gen < k.gen {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

// key returns the namespace the nsFence counts commands of.
func (in *nsFence) key() fenceKey { return fenceKey{in.nsid, in.gen} }

// count returns the commands counted, in both counters.
func (in *nsFence) count() int64 { return int64(in.n[0].Load()) + int64(in.n[1].Load()) }

// drain waits until each of the two epoch counters has read zero, or until expired is
// closed: then it reports false and left, the commands of the counter it was waiting on
// (both counters' while it waited for another drain of the nsFence). Both counters
// reading zero, one after the other, is drained already: no flip is needed then, nor the
// turn of another drain.
func (in *nsFence) drain(expired <-chan struct{}) (ok bool, left int64) {
	var d *fenceDrain
	for {
		if in.n[0].Load() == 0 && in.n[1].Load() == 0 {
			return true, 0
		}
		if d == nil {
			d = &fenceDrain{wake: make(chan struct{}, 1), done: make(chan struct{})}
		}
		if in.draining.CompareAndSwap(nil, d) {
			break
		}
		other := in.draining.Load()
		if other == nil {
			continue // it has just ended
		}
		select {
		case <-other.done:
		case <-expired:
			if left = in.count(); left == 0 {
				return true, 0
			}
			return false, left
		}
	}
	defer func() {
		in.draining.Store(nil)
		close(d.done)
	}()
	for range 2 {
		old := (in.epoch.Add(1) - 1) & 1
		for in.n[old].Load() != 0 {
			select {
			case <-d.wake:
			case <-expired:
				if n := in.n[old].Load(); n != 0 {
					return false, int64(n)
				}
			}
		}
	}
	return true, 0
}

// fenceWait is what a fence waits for on one queue: its commands to the namespaces of
// keys (shared between the fenceWaits of one change; not modified).
type fenceWait struct {
	q    *Queue
	keys []fenceKey
}

// fencedQueue is a queue whose commands a fence did not see complete in time.
type fencedQueue struct {
	q        *Queue
	commands int64 // still counted, over the namespaces waited for
}

// fenceQueues drains, for every fenceWait of ws, the queue's nsFence of each of its
// namespaces (the queues concurrently: each waits at most until ctx is done) and returns the
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

// drain drains the queue's nsFence of each namespace, one after another, and reports
// whether all drained before expired was closed; if not, left counts the commands still
// counted in those that did not.
func (w fenceWait) drain(expired <-chan struct{}) (ok bool, left int64) {
	ok = true
	for _, k := range w.keys {
		in := w.q.findNSFence(k)
		if in == nil {
			continue // none of its commands has reached the namespace, or it was removed
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
