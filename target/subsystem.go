package target

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/usegate"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// subsystem is an NVM subsystem (or the discovery subsystem): namespaces, the hosts that
// may connect, and the controllers they created.
type subsystem struct {
	t      *Target
	nqn    string
	disc   bool
	serial string
	model  string

	mu           sync.Mutex
	allowAny     bool
	authRequired bool // only hosts with DH-HMAC-CHAP keys may connect
	hosts        map[string]bool
	ctrls        map[uint16]*controller
	cntlidMin    uint16 // controller IDs handed out: cntlidMin..cntlidMax
	cntlidMax    uint16
	nextCntlid   uint16
	closed       bool

	// ioQueues holds every I/O queue bound to one of the subsystem's controllers from its
	// Connect until its last command has completed (Queue.setDrained), whether or not its
	// controller still lists it: the queues a Preempt and Abort may have to wait for
	// (see reservation.go). ioqMu guards it and is taken last: nothing is locked under it.
	ioqMu    sync.Mutex
	ioQueues map[*Queue]struct{}

	// ns is the namespace table the command path reads without locking: an immutable
	// slice sorted by NSID, replaced under mu.
	ns atomic.Pointer[[]*namespace]
	// removed are the namespaces removeNamespace or unpublish took out of ns whose backends
	// (those of their generations: genBackends) have not all closed yet: commands still in
	// them may reach their stores, and the I/O fence waits for them (fencedRemoved).
	// Guarded by mu, changed with ns.
	removed []*namespace

	// ioErrs counts the commands on I/O queues that failed before reaching a namespace
	// (no such namespace, a malformed command, the queue going away).
	ioErrs errorCounts
}

func newSubsystem(t *Target, nqn string, disc bool) *subsystem {
	s := &subsystem{
		t: t, nqn: nqn, disc: disc,
		hosts:      make(map[string]bool),
		ctrls:      make(map[uint16]*controller),
		ioQueues:   make(map[*Queue]struct{}),
		cntlidMin:  nvmeproto.CNTLIDMin,
		cntlidMax:  nvmeproto.CNTLIDMax,
		nextCntlid: nvmeproto.CNTLIDMin,
	}
	s.ns.Store(&[]*namespace{})
	return s
}

// allowed reports whether hostNQN may connect.
func (s *subsystem) allowed(hostNQN string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allowedLocked(hostNQN)
}

// allowedLocked is allowed, called with s.mu held.
func (s *subsystem) allowedLocked(hostNQN string) bool { return s.allowAny || s.hosts[hostNQN] }

// namespaces returns the current namespace table (sorted by NSID; do not modify).
func (s *subsystem) namespaces() []*namespace { return *s.ns.Load() }

// activeNamespaces returns the namespaces hosts see as active, sorted by NSID (a copy):
// the table without those left inactive by a failed reopen, which Identify Namespace
// reports as not allocated. A namespace being reopened stays active: a host rescanning
// meanwhile (another namespace changed) removes the block device of every NSID the
// Active Namespace ID list leaves out, and this one comes back.
func (s *subsystem) activeNamespaces() []*namespace {
	return slices.DeleteFunc(slices.Clone(s.namespaces()), (*namespace).inactive)
}

// lookup finds an active namespace without taking a reference.
func (s *subsystem) lookup(nsid uint32) *namespace {
	tab := *s.ns.Load()
	i, j := 0, len(tab)
	for i < j {
		h := int(uint(i+j) >> 1)
		if tab[h].nsid < nsid {
			i = h + 1
		} else {
			j = h
		}
	}
	if i < len(tab) && tab[i].nsid == nsid {
		return tab[i]
	}
	return nil
}

// acquireNS finds a namespace and takes a reference that keeps its backend open until
// release; nil when there is no such namespace or it is being removed.
func (s *subsystem) acquireNS(nsid uint32) *namespace {
	ns := s.lookup(nsid)
	if ns == nil || !ns.acquire() {
		return nil
	}
	return ns
}

func (s *subsystem) controllers() []*controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*controller, 0, len(s.ctrls))
	for _, c := range s.ctrls {
		out = append(out, c)
	}
	return out
}

// controllerList returns the IDs of the subsystem's controllers from from up, in
// increasing order: the Controller List of Identify CNS 12h and 13h.
func (s *subsystem) controllerList(from uint16) nvmeproto.ControllerList {
	s.mu.Lock()
	l := make(nvmeproto.ControllerList, 0, len(s.ctrls))
	for id := range s.ctrls {
		if id >= from {
			l = append(l, id)
		}
	}
	s.mu.Unlock()
	slices.Sort(l)
	return l
}

// setCntlidRange limits the controller IDs handed out to min..max (a resolved
// configuration's cntlid_min and cntlid_max). Called before the subsystem is published.
func (s *subsystem) setCntlidRange(min, max uint16) {
	s.cntlidMin, s.cntlidMax, s.nextCntlid = min, max, min
}

// allocCntlid reserves a controller ID for c from the subsystem's range: the next unused
// one after the last assigned, so a departed controller's ID is not reused at once.
// Called with s.mu held.
func (s *subsystem) allocCntlid(c *controller) bool {
	for range int(s.cntlidMax-s.cntlidMin) + 1 {
		id := s.nextCntlid
		s.nextCntlid++
		if s.nextCntlid > s.cntlidMax || s.nextCntlid < s.cntlidMin {
			s.nextCntlid = s.cntlidMin
		}
		if s.ctrls[id] == nil {
			c.cntlid = id
			s.ctrls[id] = c
			return true
		}
	}
	return false
}

// removeController takes c out of the subsystem's table and closes c.gone, if it is there.
func (s *subsystem) removeController(c *controller) {
	s.mu.Lock()
	if s.ctrls[c.cntlid] == c {
		delete(s.ctrls, c.cntlid)
		close(c.gone)
	}
	s.mu.Unlock()
}

// addIOQueue lists an I/O queue bound to one of the subsystem's controllers; it stays
// listed until it has drained (dropIOQueue).
func (s *subsystem) addIOQueue(q *Queue) {
	s.ioqMu.Lock()
	s.ioQueues[q] = struct{}{}
	s.ioqMu.Unlock()
}

func (s *subsystem) dropIOQueue(q *Queue) {
	s.ioqMu.Lock()
	delete(s.ioQueues, q)
	s.ioqMu.Unlock()
}

// addNamespace opens the backend of cn and publishes the namespace; with notify the
// subsystem's controllers learn about it by asynchronous event.
func (s *subsystem) addNamespace(cn conf.Namespace, notify bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.lookup(cn.NSID) != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: nsid %d in %q", ErrNamespaceExists, cn.NSID, s.nqn)
	}
	s.mu.Unlock()

	ns, err := openNamespace(s, cn, cn.ReadOnly)
	if err != nil {
		return err
	}
	s.resvRestore(ns)

	s.mu.Lock()
	if s.closed || s.lookup(cn.NSID) != nil {
		closed := s.closed
		s.mu.Unlock()
		ns.close()
		if closed {
			return ErrClosed
		}
		return fmt.Errorf("%w: nsid %d in %q", ErrNamespaceExists, cn.NSID, s.nqn)
	}
	tab := slices.Clone(*s.ns.Load())
	i := sort.Search(len(tab), func(i int) bool { return tab[i].nsid > cn.NSID })
	tab = slices.Insert(tab, i, ns)
	s.ns.Store(&tab)
	s.mu.Unlock()
	ns.published()

	s.t.log.Info("namespace added", "subsystem", s.nqn, "nsid", cn.NSID, "backend", cn.Backend,
		"path", cn.Path, "blocks", ns.blocks.Load(), "lba_size", ns.lbaSize(), "read_only", ns.readOnly.Load())
	if notify {
		s.t.anaGroupChanged(ns.anaGroup.Load())
		s.notifyNamespaceChanged(cn.NSID)
	}
	return nil
}

// removeNamespace unpublishes a namespace, waits for its commands in flight and closes it.
func (s *subsystem) removeNamespace(nsid uint32) error {
	s.mu.Lock()
	tab := *s.ns.Load()
	i := slices.IndexFunc(tab, func(n *namespace) bool { return n.nsid == nsid })
	if i < 0 {
		s.mu.Unlock()
		return fmt.Errorf("%w: nsid %d in %q", ErrNoSuchNamespace, nsid, s.nqn)
	}
	ns := tab[i]
	tab = slices.Delete(slices.Clone(tab), i, i+1)
	s.ns.Store(&tab)
	s.removed = append(s.removed, ns)
	s.mu.Unlock()

	err := s.closeRemoved(ns)
	if errors.Is(err, ErrNamespaceBusy) {
		// Removed all the same: hosts no longer see it, no command reaches it, and its
		// backend closes when the stuck ones complete (close logged both). Failing the
		// removal would make a reload undo it and open the backend a second time.
		err = nil
	}
	s.t.anaGroupChanged(ns.anaGroup.Load())
	s.t.log.Info("namespace removed", "subsystem", s.nqn, "nsid", nsid)
	s.notifyNamespaceChanged(nsid)
	return err
}

// closeRemoved closes ns, which the caller took out of the table and put on the removed
// list in one step under mu (removeNamespace, unpublish), and returns the close's error (one
// wrapping ErrNamespaceBusy when commands are still executing in its backend after the
// close timeout). ns stays on the removed list, and the I/O fence waits for its commands,
// until the backends of its generation have closed (forgetRemoved: at once, or on its own
// goroutine when the close gave up).
func (s *subsystem) closeRemoved(ns *namespace) error {
	err := ns.close()
	if isClosed(ns.backends.done) {
		s.forgetRemoved(ns)
	} else {
		// Its backend, or one a reopen gave up on, still has commands executing.
		go s.forgetRemoved(ns)
	}
	return err
}

// forgetRemoved waits until the backends of ns's generation have closed — ns's, and
// those of the namespace objects a reopen replaced with it (see genBackends): none of its
// commands executes any more — then takes ns, which removeNamespace or unpublish took out
// of the table, off the removed list and drops its nsFences from the I/O queues' tables.
// The last one of a closed subsystem takes the subsystem off the target's removed
// subsystems (forgetIfRemoved).
func (s *subsystem) forgetRemoved(ns *namespace) {
	<-ns.backends.done
	s.mu.Lock()
	s.removed = slices.DeleteFunc(s.removed, func(n *namespace) bool { return n == ns })
	s.mu.Unlock()
	s.dropFences(ns)
	s.forgetIfRemoved()
}

// forgetIfRemoved takes s off the target's removed subsystems (Target.removedSubs) once
// it is closed and no backend of a namespace it had is open: nothing the fences wait for
// is left in it. Once true, that stays true: a closed subsystem's table is empty, so
// nothing joins its removed list.
func (s *subsystem) forgetIfRemoved() {
	s.mu.Lock()
	done := s.closed && len(s.removed) == 0
	s.mu.Unlock()
	if done {
		s.t.forgetSubsystem(s)
	}
}

// reopenNamespace closes the namespace old's backend and opens it again from cn, its
// running configuration: a fresh start of its backend that clears a failure (see
// namespace.fail); its reservations are kept.
// Commands that arrive meanwhile get Namespace Not Ready without DNR, so that hosts retry
// them (after CRDT1, or CRDT2 once it lasts, where they enabled ACRE: see notReady);
// controllers are told the namespace changed.
// If the backend cannot be opened the namespace stays inactive (listed in the
// configuration, refusing commands with Invalid Namespace and DNR) until a reopen
// succeeds or it is removed.
func (s *subsystem) reopenNamespace(old *namespace, cn conf.Namespace) error {
	s.closeToReopen(old)
	err := s.openReopened(old, cn, false, 0)
	if err == nil {
		return nil
	}
	old.reopening.Store(false)
	if errors.Is(err, ErrNoSuchNamespace) {
		return err
	}
	s.t.log.Error("reopening namespace failed: it stays inactive until a reopen succeeds", "subsystem", s.nqn, "nsid", old.nsid, "err", err)
	s.notifyNamespaceChanged(old.nsid) // it left the active list: hosts rescan and see it gone
	return fmt.Errorf("target: reopening namespace %d of %q (it stays inactive until a reopen succeeds or it is removed): %w", old.nsid, s.nqn, err)
}

// closeToReopen closes old's backend so that a new one takes its place: commands that
// meet old answer Namespace Not Ready from now on (see reopening). The caller holds
// t.cfgMu and owns the reopen of old from now on: it returns the reopen's generation
// (see reopenGen), which a reopen under way, if any, no longer has.
func (s *subsystem) closeToReopen(old *namespace) uint64 {
	if !old.reopening.Load() { // a reopen begins, not one that takes over from another
		old.reopenLongAt.Store(time.Now().Add(reopenLongAfter).UnixNano())
	}
	old.reopenGen++
	old.reopening.Store(true) // before close: whoever sees it closing sees why
	if err := old.close(); err != nil {
		s.t.log.Warn("closing namespace to reopen it", "subsystem", s.nqn, "nsid", old.nsid, "err", err)
	}
	return old.reopenGen
}

// openReopened opens cn's backend and puts the new namespace in the place of old, which
// closeToReopen has closed, and tells the controllers. A reopen an operator asked for
// (ReopenNamespace) clears a failure; one that keepFailure (an automatic reopen, a change
// of the open settings) keeps it, since no operator has dealt with the writes that may be
// lost. auto is the attempt of an automatic reopen (autoReopen), 0 for any other. The
// error wraps ErrNoSuchNamespace if old was removed meanwhile (the subsystem closed), and
// is the open's otherwise; old stays as it is then.
func (s *subsystem) openReopened(old *namespace, cn conf.Namespace, keepFailure bool, auto int) error {
	ns, err := openNamespace(s, cn, reopenReadOnly(old, cn))
	if err != nil {
		return err
	}
	return s.installReopened(old, ns, keepFailure, auto)
}

// installReopened is openReopened's second half: it puts ns, just opened and not yet
// published, in the place of old. If old is no longer in the table it closes ns and
// returns an error wrapping ErrNoSuchNamespace.
func (s *subsystem) installReopened(old, ns *namespace, keepFailure bool, auto int) error {
	nsid := old.nsid
	reason := old.failureReason()
	// A reopen is not a power loss: the new namespace takes over old's reservation state
	// itself, not a copy, so that a change made through old by a command that found it
	// before the swap (one whose reference outlived the close timeout, a Set Features that
	// takes none) is the new namespace's too. Its I/O counters start again, as after
	// RemoveNamespace and AddNamespace.
	ns.resv = old.resv
	ns.gen = old.gen // its commands in flight, and those still in old's backend, are waited for as one
	if keepFailure {
		ns.failure.Store(old.failure.Load())
	}
	ns.autoReopens = auto
	s.mu.Lock()
	tab := *s.ns.Load()
	i := slices.Index(tab, old)
	if s.closed || i < 0 {
		s.mu.Unlock()
		ns.close()
		return fmt.Errorf("%w: nsid %d in %q was removed while it was reopened", ErrNoSuchNamespace, nsid, s.nqn)
	}
	// ns counts among old's generation's open backends unless all of them have closed
	// (then its own count, from openNamespace, is the generation's): whatever waits for
	// ns's generation to close waits for the commands still in old's backend too.
	if old.backends.join() {
		ns.backends = old.backends
	}
	tab = slices.Clone(tab)
	tab[i] = ns
	s.ns.Store(&tab)
	s.mu.Unlock()
	ns.published()
	s.t.log.Info("namespace reopened", "subsystem", s.nqn, "nsid", nsid, "path", ns.cfg.Path, "was_failed", reason != nil,
		"still_failed", ns.failed(), "automatic", auto > 0, "blocks", ns.blocks.Load())
	s.notifyNamespaceChanged(nsid)
	return nil
}

// close fails every controller and closes every namespace, all at once (about one
// queue-close timeout at most, however many there are): unpublish, then closeUnpublished.
// Closing a closed subsystem does nothing.
func (s *subsystem) close() error {
	tab, ok := s.unpublish()
	if !ok {
		return nil
	}
	return errors.Join(s.closeUnpublished(tab)...)
}

// unpublish closes s — hosts can no longer connect to it — and takes its namespaces out
// of the table onto the removed list in one step, as removeNamespace takes one: from
// then on the I/O fence waits for their commands as for any removed namespace's, until
// their backends have closed (fencedRemoved). It returns them, or false when s was
// closed already.
func (s *subsystem) unpublish() ([]*namespace, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unpublishLocked()
}

// unpublishLocked is unpublish, called with s.mu held.
func (s *subsystem) unpublishLocked() ([]*namespace, bool) {
	if s.closed {
		return nil, false
	}
	s.closed = true
	tab := *s.ns.Load()
	s.ns.Store(&[]*namespace{})
	s.removed = append(s.removed, tab...)
	return tab, true
}

// closeForTarget is Target.Close's close of s, whether or not s is still published (a
// subsystem RemoveSubsystem took out of the target's table is not). It unpublishes s and
// closes the namespaces that takes out of the table (closeUnpublished), and at the same time
// waits for the namespaces others took out before — RemoveNamespace, or RemoveSubsystem's
// unpublish — whose backends have not all closed: the removal closes each (closeRemoved)
// and Close waits for that close (namespace.waitClosed), giving up after the close timeout
// as on its own, even on one whose removal's close has already given up (its stuck
// commands may have completed since, and its backend be closing). Both sets are taken in
// one step under s.mu, so a namespace is in one or the other, never both and never neither.
// All of them close or are waited for at once: about one queue-close timeout at most. It
// returns the errors of its own closes (closeUnpublished's, in namespace order), then one
// wrapping ErrNamespaceBusy for each removed namespace it gave up on, in the order of their
// removal; a removed namespace's backend close error is not repeated here: its removal
// reports it.
func (s *subsystem) closeForTarget() []error {
	s.mu.Lock()
	others := slices.Clone(s.removed)
	tab, ok := s.unpublishLocked()
	s.mu.Unlock()
	var own []error
	waited := make([]error, len(others))
	var wg sync.WaitGroup
	if ok {
		wg.Go(func() { own = s.closeUnpublished(tab) })
	}
	for i, ns := range others {
		wg.Go(func() {
			if err := ns.waitClosed(); errors.Is(err, ErrNamespaceBusy) {
				waited[i] = err
			}
		})
	}
	wg.Wait()
	return append(own, slices.DeleteFunc(waited, func(err error) bool { return err == nil })...)
}

// closeUnpublished fails every controller and closes the namespaces tab that unpublish
// took out of the table (closeRemoved: each leaves the removed list once its backends
// have closed), and returns the error of each namespace whose close failed (closeRemoved's:
// one wrapping ErrNamespaceBusy when commands still execute in its backend), in tab's
// order. The namespaces close at once, each on its own goroutine: it returns after about
// one queue-close timeout however many have commands stuck in their backends, not one
// timeout for each. A subsystem RemoveSubsystem took out of the target's table stays
// among its removed subsystems until the last has closed (forgetIfRemoved).
func (s *subsystem) closeUnpublished(tab []*namespace) []error {
	for _, c := range s.controllers() {
		c.fail(ErrClosed)
	}
	errs := make([]error, len(tab))
	var wg sync.WaitGroup
	for i, ns := range tab {
		wg.Go(func() { errs[i] = s.closeRemoved(ns) })
	}
	wg.Wait()
	s.forgetIfRemoved() // it had no namespace, or every backend has closed
	return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

// namespace is one namespace: its backend, the executor that runs commands on it, and
// the counters behind the SMART log.
type namespace struct {
	t      *Target
	s      *subsystem
	subNQN string
	nsid   uint32
	cfg    conf.Namespace
	be     backend.Backend
	exec   *backend.Executor
	info   backend.Info
	shift  uint8 // log2 of the LBA size
	// blocks is the capacity the command path checks against (Identify NSZE); it only
	// grows (ResizeNamespace), after the backend has grown.
	blocks atomic.Uint64
	// readOnly is write protection as hosts see it: the configuration's read_only, which
	// SetNamespaceReadOnly changes; beReadOnly is the backend's, fixed when it opened.
	readOnly   atomic.Bool
	beReadOnly bool
	// anaGroup is the ANA group, 1..conf.MaxANAGroup, which SetNamespaceANAGroup changes:
	// every reader loads it once per use (a command, a log page, an Identify).
	anaGroup atomic.Uint32

	// gen tells this namespace from others that had or will have its NSID: a new one
	// for every AddNamespace, handed on by a reopen to the namespace object that replaces
	// this one (installReopened). The I/O fence counts commands by NSID and gen (fence.go).
	gen uint64
	// backends counts the open backends of generation gen; shared, like gen, by the
	// namespace objects a reopen replaces one with another while one's backend is open
	// (installReopened). Set before the namespace is published, never changed after.
	backends *genBackends

	// resv is the namespace's registrations and reservation: one per NSID from
	// AddNamespace to RemoveNamespace, shared by the namespace objects a reopen replaces
	// one with another (openReopened).
	resv *nsResv

	// failure is why the namespace refuses writes and flushes (Write Fault, DNR): a sync
	// of its backend failed, so writes it reported complete may be lost. nil while
	// healthy; set once and never cleared: ReopenNamespace replaces the namespace.
	failure atomic.Pointer[error]

	// reopening is set before ReopenNamespace closes the namespace to put a fresh one in
	// its place, and cleared if that cannot happen (the backend does not open again, or
	// the namespace was removed meanwhile): while it is set a command that meets the
	// closed namespace answers Namespace Not Ready, which the host retries, instead of
	// Invalid Namespace with DNR (see controller.unavailable).
	reopening atomic.Bool
	// reopenGen counts the reopens of the namespace begun (closeToReopen), under t.cfgMu:
	// one reopen at a time owns it, the one begun last. An automatic reopen, which opens
	// its backend without the lock, checks that it still owns it before each open, before
	// it installs what it opened and before it gives up: an operator's reopen
	// (ReopenNamespace, new open settings) begun meanwhile took it over, whatever its
	// outcome, and the automatic one stops.
	reopenGen uint64
	// reopenLongAt is when the reopen under way counts as long (Unix nanoseconds):
	// reopenLongAfter after it began, or as soon as an automatic reopen's open failed.
	// Its Namespace Not Ready carries CRD 2 from then on (see crdReopenLong).
	reopenLongAt atomic.Int64
	// reopenAsked is set by the backend's first report that it must be reopened
	// (backend.ErrNeedsReopen), which starts autoReopen. opened is when the backend was
	// opened; autoReopens is the attempt of the automatic reopen that opened it (0: it
	// was not), which a report soon after continues from (see conf.AutoReopen.Settle).
	reopenAsked atomic.Bool
	opened      time.Time
	autoReopens int
	// published is called once the namespace is in its subsystem's table: from then on
	// the backend's reports that it must be reopened reach needsReopen.
	published func()

	// users counts the references admin commands hold (Identify, the shutdown flush);
	// close closes it. I/O commands take none: they reach the backend only through exec,
	// whose Close waits for them and fails later submissions with backend.ErrClosed.
	users   usegate.Gate
	drained chan struct{}
	// closed is closed once executor and backend are (closeErr: the backend's Close);
	// backends.done once those of every namespace object of its generation are.
	closed    chan struct{}
	closeErr  error
	lateClose atomic.Bool // a close gave up waiting: log when it is done
	// stopHung counts the stop's flushes of the namespace that Flush left executing and
	// that have not returned (Target.markStopHung): its close does not wait for them.
	stopHung atomic.Int32

	// I/O counters (iostats.go): by class, sharded by queue; errors by class and status.
	stats [statShards]ioShard
	errs  errorCounts
}

// closing reports whether the namespace is closed or closing: removed, being reopened
// (see reopening), or left inactive by a reopen that failed.
func (ns *namespace) closing() bool { return ns.users.Closed() }

// inactive reports whether hosts see the namespace as not there: closed or closing and
// not being reopened (removed, or left inactive by a reopen that failed). A namespace
// being reopened is active but not ready.
func (ns *namespace) inactive() bool { return ns.closing() && !ns.reopening.Load() }

// reopenLong reports whether the reopen under way has lasted long (see reopenLongAt).
func (ns *namespace) reopenLong() bool {
	at := ns.reopenLongAt.Load()
	return at != 0 && time.Now().UnixNano() >= at
}

// failed reports whether a sync failure made the namespace refuse writes and flushes.
func (ns *namespace) failed() bool { return ns.failure.Load() != nil }

// fail records a sync failure of the namespace's backend (an error wrapping
// backend.ErrSync): from now on it refuses writes, write zeroes, deallocate and flush
// with Write Fault and DNR, so that no later success covers data that may be lost. Reads
// still work, so that what is on stable storage can be salvaged. The first failure is
// logged at Error.
func (ns *namespace) fail(err error) {
	if ns.failure.CompareAndSwap(nil, &err) {
		ns.t.log.Error("namespace failed: syncing to stable storage failed and writes reported complete may be lost; "+
			"writes and flushes fail with Write Fault (DNR) until the namespace is reopened (restart gonvmf, or the control API: see reopen)",
			"subsystem", ns.subNQN, "nsid", ns.nsid, "path", ns.cfg.Path, "err", err,
			"reopen", fmt.Sprintf("gonvmf ctl ns reopen %s %d", ns.subNQN, ns.nsid))
	}
}

// flush makes the namespace's completed writes durable outside any command (controller
// shutdown, the target's drain). A namespace being removed is skipped (its close waits
// for its commands); one that failed returns its failure without syncing; a sync failure
// fails it.
func (ns *namespace) flush() error {
	if !ns.acquire() {
		return nil
	}
	defer ns.release()
	if err := ns.failureReason(); err != nil {
		return err
	}
	err := ns.be.Flush()
	if errors.Is(err, backend.ErrSync) {
		ns.fail(err)
	}
	if errors.Is(err, backend.ErrNeedsReopen) {
		ns.needsReopen(err)
	}
	if err != nil {
		return fmt.Errorf("namespace %d: %w", ns.nsid, err)
	}
	return nil
}

// flushOutcome is what flushAll found of one namespace's flush.
type flushOutcome struct {
	done bool  // it returned within the limit
	err  error // what it returned
}

// The states of one of flushAll's flushes.
const (
	flushRunning  int32 = iota // executing, waited for
	flushReturned              // returned within the wait
	flushLeft                  // executing when the wait ended
)

// flushAll flushes the namespaces nss concurrently, so that a backend that hangs holds up
// no other namespace's flush, and waits for them at most limit. out[i] is nss[i]'s
// outcome. A flush still executing at the limit is not done; it goes on until its backend
// returns, holding its namespace (whose close waits for it) until then. For the target's
// stop (stop: Target.Flush) such a flush also marks its namespace until it returns
// (Target.markStopHung).
func flushAll(nss []*namespace, limit time.Duration, stop bool) (out []flushOutcome) {
	errs := make([]error, len(nss))
	state := make([]atomic.Int32, len(nss))
	returned := make(chan struct{}, len(nss)) // a flush that returns after the limit does not block
	for i, ns := range nss {
		go func() {
			errs[i] = ns.flush()
			if state[i].CompareAndSwap(flushRunning, flushReturned) {
				returned <- struct{}{}
			} else if stop {
				ns.t.markStopHung(ns, -1) // flushAll marked it before it left it
			}
		}()
	}
	t := time.NewTimer(limit)
	defer t.Stop()
wait:
	for range nss {
		select {
		case <-returned:
		case <-t.C:
			break wait
		}
	}
	out = make([]flushOutcome, len(nss))
	for i, ns := range nss {
		if state[i].Load() != flushReturned {
			if stop {
				ns.t.markStopHung(ns, 1) // before the flush can see it left, which unmarks it
			}
			if state[i].CompareAndSwap(flushRunning, flushLeft) {
				continue
			}
			if stop {
				ns.t.markStopHung(ns, -1) // it returned meanwhile
			}
		}
		out[i] = flushOutcome{done: true, err: errs[i]} // written before its state
	}
	return out
}

// location is where the namespace's data lives, for log lines and errors: its file or
// block device, its rbd image (pool/[rados_namespace/]image), or "-" (null, memory).
func (ns *namespace) location() string {
	switch {
	case ns.cfg.Backend == conf.BackendRBD:
		return ns.cfg.RBD.Name()
	case ns.cfg.Path != "":
		return ns.cfg.Path
	}
	return "-"
}

// failureReason returns why the namespace failed, or nil.
func (ns *namespace) failureReason() error {
	if p := ns.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// reopenReadOnly is whether a reopen of old as cn opens its backend read-only: only if
// old's backend was (cn.ReadOnly when it was added or the target started, or a store that
// takes no writes) and cn is write-protected too. Write protection set while the
// namespace runs (SetNamespaceReadOnly) is what hosts see, not how the store is opened: a
// backend that took writes is opened for writing again, so that the protection can still
// be lifted after a reopen, as before it.
func reopenReadOnly(old *namespace, cn conf.Namespace) bool { return cn.ReadOnly && old.beReadOnly }

// openNamespace opens cn's backend, read-only if readOnly (cn.ReadOnly for a namespace
// being added, reopenReadOnly for a reopen), and returns the namespace, not yet
// published; hosts see it write-protected if cn or its backend is read-only.
func openNamespace(s *subsystem, cn conf.Namespace, readOnly bool) (*namespace, error) {
	t, nqn := s.t, s.nqn
	if cn.ANAGroup == 0 || cn.ANAGroup > conf.MaxANAGroup { // resolved configurations never have it
		return nil, fmt.Errorf("namespace %d: %w: ANA group %d out of range 1..%d", cn.NSID, ErrInvalidANA, cn.ANAGroup, conf.MaxANAGroup)
	}
	// The backend's report that it must be reopened goes to the namespace once it is in
	// its subsystem's table (see published); one made before waits in early until then.
	var self atomic.Pointer[namespace]
	var early atomic.Pointer[error]
	spec := backend.Spec{
		Kind:     backend.Kind(cn.Backend),
		Path:     cn.Path,
		Size:     uint64(cn.Size),
		LBASize:  cn.LBASize,
		ReadOnly: readOnly,
		Shared:   cn.Shared,
		Workers:  t.workers,
		Logger:   t.log,
		RBD: backend.RBDSpec{
			Pool: cn.RBD.Pool, Namespace: cn.RBD.RadosNamespace, Image: cn.RBD.Image,
			Conf: cn.RBD.CephConf, User: cn.RBD.User, Keyring: cn.RBD.Keyring, CreateSize: uint64(cn.RBD.CreateSize),
		},
		// The backend saw its store change size (an rbd image resized elsewhere): hosts
		// learn of it as of any resize (Namespace Attribute Changed). On its own goroutine:
		// the callback may come from the backend's threads, and the resize takes the
		// configuration lock.
		OnResize: func(blocks uint64) {
			go func() {
				err := t.ResizeNamespace(nqn, cn.NSID, 0)
				switch {
				case err == nil:
				case errors.Is(err, ErrNoSuchNamespace), errors.Is(err, ErrNoSuchSubsystem), errors.Is(err, ErrClosed):
				default:
					t.log.Warn("a namespace's backend changed size, and hosts cannot be told", "subsystem", nqn,
						"nsid", cn.NSID, "backend", cn.Backend, "blocks", blocks, "err", err)
				}
			}()
		},
		OnNeedsReopen: func(err error) {
			early.Store(&err)
			if ns := self.Load(); ns != nil {
				ns.needsReopen(err)
			}
		},
	}
	be, err := t.openBackend(spec)
	if err != nil {
		return nil, fmt.Errorf("namespace %d: %w", cn.NSID, err)
	}
	lba := be.LBASize()
	if lba < 512 || lba > 4096 || lba&(lba-1) != 0 {
		be.Close()
		return nil, fmt.Errorf("namespace %d: backend reports LBA size %d; want a power of two from 512 to 4096", cn.NSID, lba)
	}
	ns := &namespace{
		t:          t,
		s:          s,
		subNQN:     nqn,
		nsid:       cn.NSID,
		cfg:        cn,
		be:         be,
		info:       backend.Describe(be),
		shift:      uint8(bits.TrailingZeros32(lba)),
		beReadOnly: be.ReadOnly(),
		gen:        t.nsGens.Add(1),
		backends:   newGenBackends(),
		resv:       new(nsResv),
		drained:    make(chan struct{}),
		closed:     make(chan struct{}),
		opened:     time.Now(),
	}
	ns.anaGroup.Store(cn.ANAGroup)
	ns.blocks.Store(be.NumBlocks())
	ns.readOnly.Store(be.ReadOnly() || cn.ReadOnly)
	// Submit never blocks, however many commands wait for the workers: a transport's
	// event loop calls it for every host of the namespace.
	ns.exec = backend.NewExecutor(be, t.workers)
	// Either the report sees self, or this sees early (both: needsReopen acts once).
	ns.published = func() {
		self.Store(ns)
		if p := early.Load(); p != nil {
			ns.needsReopen(*p)
		}
	}
	return ns, nil
}

func (ns *namespace) lbaSize() uint32 { return 1 << ns.shift }

// genBackends counts the open backends of one namespace generation (namespace.gen): the
// namespace object AddNamespace opened, and each one a reopen put in the place of another
// whose backend had not closed yet. A backend still open may have commands of the
// generation executing, which may reach its store. done is closed when the count reaches
// zero, and the count never rises from zero: a reopen that finds every backend of the
// generation closed keeps its namespace object's own genBackends. One in use per
// generation, whatever the number of reopens: it holds no namespace object.
type genBackends struct {
	mu   sync.Mutex
	open int
	done chan struct{}
}

// newGenBackends returns the count of a namespace object just opened: its own backend.
func newGenBackends() *genBackends { return &genBackends{open: 1, done: make(chan struct{})} }

// join counts one more open backend of the generation, unless all of them have closed:
// then it reports false.
func (g *genBackends) join() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == 0 {
		return false
	}
	g.open++
	return true
}

// leave counts a backend of the generation closed.
func (g *genBackends) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open--; g.open == 0 {
		close(g.done)
	}
}

// acquire takes a reference unless the namespace is closing.
func (ns *namespace) acquire() bool { return ns.users.Enter() }

func (ns *namespace) release() {
	if ns.users.Leave() {
		close(ns.drained)
	}
}

// close stops new references and commands, waits for the references held and the
// commands submitted, then closes executor and backend. The wait is bounded (the
// target's queue-close timeout, WithQueueCloseTimeout): when a backend request never
// completes — a hung disk or network file system — close logs it and returns an error
// wrapping ErrNamespaceBusy, and executor and backend are closed later, once the
// commands complete (never before: their buffers stay valid). Removing, reopening or
// shutting down is then never stuck behind such a request. Safe to call more than once;
// later calls wait in the same way and report only a timeout.
func (ns *namespace) close() error {
	first, drained := ns.users.Close()
	if !first {
		if err := ns.waitClosed(); errors.Is(err, ErrNamespaceBusy) {
			return err
		}
		return nil
	}
	if drained {
		close(ns.drained)
	}
	go func() {
		<-ns.drained
		ns.exec.Close() // waits for every I/O command submitted; later ones fail with ErrClosed
		if err := ns.be.Close(); err != nil {
			ns.closeErr = fmt.Errorf("namespace %d: closing backend: %w", ns.nsid, err)
		}
		close(ns.closed)
		ns.backends.leave()
	}()
	return ns.waitClosed()
}

// waitClosed waits for close's goroutine, at most the target's queue-close timeout. A
// namespace whose references include a stop flush that Flush left executing (stopHung) is
// not waited for: that flush has had its close timeout, and its backend hangs.
func (ns *namespace) waitClosed() error {
	limit := ns.t.closeTimeout
	if ns.stopHung.Load() > 0 {
		select {
		case <-ns.drained: // the flush returned: executor and backend close now
		default:
			limit = 0
		}
	}
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		select {
		case <-ns.closed:
			return ns.closeErr
		case <-t.C:
		}
	}
	select {
	case <-ns.closed: // as the wait ended
		return ns.closeErr
	default:
	}
	ns.t.log.Error("closing namespace: gave up waiting for commands or a flush still executing in its backend (the close timeout ended, or the stop's flush had already waited it out); its backend is closed when they complete",
		"subsystem", ns.subNQN, "nsid", ns.nsid, "backend", ns.cfg.Backend, "path", ns.location(), "waited", limit)
	if ns.lateClose.CompareAndSwap(false, true) {
		go func() {
			<-ns.closed
			ns.t.log.Warn("namespace closed: its last commands completed", "subsystem", ns.subNQN, "nsid", ns.nsid, "err", ns.closeErr)
		}()
	}
	return fmt.Errorf("target: namespace %d of %q: %w: commands or a flush still executing %v after closing began; its backend is closed when they complete",
		ns.nsid, ns.subNQN, ErrNamespaceBusy, limit)
}
