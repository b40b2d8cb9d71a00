package target

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
)

// An automatic reopen follows the running configuration's conf.AutoReopen: it closes a
// namespace whose backend reports that it serves nothing more until it is reopened
// (backend.ErrNeedsReopen: an rbd image whose RADOS client the cluster blocklisted) at
// once and opens its backend again, as ReopenNamespace does: commands meanwhile get
// Namespace Not Ready without DNR, which hosts retry, and a command the backend failed
// with ErrNeedsReopen answers the same. An open that fails is tried again after the
// policy's backoff; after Attempts opens the namespace stays inactive (Invalid Namespace
// with DNR), as after a failed ReopenNamespace, until an operator reopens it. A failure of
// the namespace (writes reported complete may be lost: the backend's report wraps
// backend.ErrSync) survives an automatic reopen: writes and flushes keep failing, reads
// are served, until an operator's ReopenNamespace. The policy is read afresh before every
// open, so that a changed one (SetAutoReopen, a reload) applies to reopens under way.
//
// A namespace has one reopen at a time. An operator's reopen (ReopenNamespace, new open
// settings: SetNamespaceOpenSettings, a reload) begun during an automatic one takes it
// over: the automatic reopen installs nothing more, opens nothing more and leaves the
// namespace alone, and the operator's outcome is the namespace's — reopened, or, if its
// open fails, inactive until the operator reopens it again, not brought back later by
// the automatic reopen under the hosts, which removed it on Invalid Namespace.

// SetAutoReopen changes how namespaces are reopened when their backend asks for it
// (validated as the configuration's auto_reopen would be; zero fields take the defaults).
// Reopens under way follow the new policy from their next open on.
func (t *Target) SetAutoReopen(p conf.AutoReopen) error {
	what := fmt.Sprintf("auto_reopen: attempts %d, backoff %v, max_backoff %v, settle %v", p.Attempts, p.Backoff, p.MaxBackoff, p.Settle)
	return t.change(what, true, func(c *conf.Config) error {
		c.AutoReopen = p
		return nil
	}, func(*conf.Config) error { return nil })
}

// reopenPolicy is the running configuration's auto_reopen.
func (t *Target) reopenPolicy() conf.AutoReopen {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg.AutoReopen
}

// reopenBackoff is the wait before open number attempt+1 of p, after attempt opens.
func reopenBackoff(p conf.AutoReopen, attempt int) time.Duration {
	d := p.Backoff
	for i := 1; i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// retryDelayLong is Identify Controller CRDT2 (100 ms units) under the auto_reopen
// policy p: the waits between p.Attempts opens divided by longRetries, rounded up, at
// least CRDT1 and at most what the field holds. At the defaults 151 s of waits make 504
// (50.4 s).
func retryDelayLong(p conf.AutoReopen) uint16 {
	var span time.Duration
	for a := 1; a < p.Attempts; a++ {
		span += reopenBackoff(p, a)
	}
	const unit = 100 * time.Millisecond
	d := (span + longRetries*unit - 1) / (longRetries * unit)
	return uint16(min(max(d, crdtReopen), math.MaxUint16))
}

// needsReopen handles the backend's report that it serves nothing more until it is
// reopened (a command's error, or Spec.OnNeedsReopen): one that says writes may be lost
// (backend.ErrSync) fails the namespace, and the first report starts autoReopen, unless
// the namespace is closing already (removed, or being reopened) or a memory one.
func (ns *namespace) needsReopen(err error) {
	if errors.Is(err, backend.ErrSync) {
		ns.fail(err)
	}
	if ns.cfg.Backend == conf.BackendMemory { // its data lives in its backend: never reopened
		return
	}
	if ns.closing() || !ns.reopenAsked.CompareAndSwap(false, true) {
		return
	}
	t, s := ns.t, ns.s
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.bg.Add(1) // under t.mu, before Close's Wait
	t.mu.Unlock()
	go func() {
		defer t.bg.Done()
		s.autoReopen(ns, err)
	}()
}

// autoReopen closes old, whose backend asked to be reopened (cause), and opens its
// backend again in its place, following the running configuration's auto_reopen. It
// holds the configuration lock (cfgMu) to close old, to read the configuration before an
// open and to install what it opened, never across an open or a backoff: an open may
// take minutes (an rbd cluster that does not answer), and control calls and reloads must
// not wait for it. A backend opened for a namespace that was removed or replaced
// meanwhile (a reload, an operator's reopen) is closed unused, one opened from a
// configuration that changed meanwhile is closed and opened again. It gives up without a
// word if old is removed, another reopen takes it over (see namespace.reopenGen), or the
// target closes.
func (s *subsystem) autoReopen(old *namespace, cause error) {
	t, p := s.t, s.t.reopenPolicy()
	log := t.log.With("subsystem", s.nqn, "nsid", old.nsid)
	attempt := 0 // opens so far
	if old.autoReopens > 0 && time.Since(old.opened) < p.Settle {
		attempt = old.autoReopens
	}
	t.cfgMu.Lock()
	// Closed meanwhile (needsReopen saw it open; the lock is taken since): reopened by
	// another, successfully or not, or being removed. That reopen's outcome stands.
	if !s.holds(old) || old.closing() {
		t.cfgMu.Unlock()
		return
	}
	log.Warn("namespace: its backend must be reopened: reopening it; its commands get Namespace Not Ready meanwhile",
		"err", cause, "opens_before", attempt)
	gen := s.closeToReopen(old)
	t.cfgMu.Unlock()
	// owns reports, under t.cfgMu, whether this reopen still owns old: it was neither
	// removed nor taken over by another reopen (see namespace.reopenGen).
	owns := func() bool { return old.reopenGen == gen && s.holds(old) }
	// last is what this reopen's last open came to, when it did not put the namespace
	// back: its error, or errReopenOutdated; nil before the first.
	var last error
	lowered := false // auto_reopen.attempts was lowered below the opens made
	again := false   // open again at once: the configuration changed during the last open
	for attempt < p.Attempts {
		if attempt > 0 && !again && !t.sleep(reopenBackoff(p, attempt)) {
			return
		}
		again = false
		attempt++
		t.cfgMu.Lock()
		if !owns() {
			t.cfgMu.Unlock()
			return
		}
		if p = t.cfg.AutoReopen; attempt > p.Attempts {
			t.cfgMu.Unlock()
			attempt--
			lowered = true
			break
		}
		// From the running configuration, as ReopenNamespace does; it lists the subsystem
		// already while New adds it, when t.subsystem does not yet.
		cn, ok := runningNamespace(t.cfg, s.nqn, old.nsid)
		t.cfgMu.Unlock()
		if !ok { // removed
			return
		}
		// The open runs without the configuration lock (an rbd open can take its connect
		// timeout): control calls and reloads go on meanwhile, and what they did is
		// checked before the result is installed under the lock.
		ns, err := openNamespace(s, cn, reopenReadOnly(old, cn))
		if err == nil {
			t.cfgMu.Lock()
			cur, ok := runningNamespace(t.cfg, s.nqn, old.nsid)
			switch {
			case !ok || !owns():
				// Removed, taken over by another reopen (an operator's, a reload's open
				// settings) whatever came of it, or the target closed: the namespace needs
				// no backend from this reopen.
				t.cfgMu.Unlock()
				s.discard(ns, "the namespace was removed, or another reopen took it over, while it was being reopened")
				return
			case cur != cn:
				// Its configuration changed (a resize, write protection, the ANA group,
				// create_size): open it again, from the new one, at once. Only a change by
				// an operator does that, so it does not count as an attempt.
				t.cfgMu.Unlock()
				s.discard(ns, "the namespace's configuration changed while it was being reopened: opening it again")
				attempt--
				again = true
				last = errReopenOutdated
				continue
			}
			err = s.installReopened(old, ns, true, attempt)
			t.cfgMu.Unlock()
		}
		if err == nil || errors.Is(err, ErrNoSuchNamespace) {
			return
		}
		last = err
		old.reopenLongAt.Store(time.Now().UnixNano()) // it waits for a backoff, at least
		if attempt < p.Attempts {
			log.Warn("reopening namespace failed: trying again", "attempt", attempt, "attempts", p.Attempts,
				"retry_in", reopenBackoff(p, attempt), "err", err)
		}
	}
	err := last
	switch {
	case lowered && last == nil: // no open of its own: those it counts were earlier reopens'
		err = fmt.Errorf("auto_reopen.attempts was lowered to %d while the namespace was being reopened, and its backend had asked to be reopened again within %s of each of the %d reopens before",
			p.Attempts, p.Settle, attempt)
	case lowered:
		err = fmt.Errorf("auto_reopen.attempts was lowered to %d while the namespace was being reopened, after %d attempts; the last open: %w",
			p.Attempts, attempt, last)
	case last == nil: // it came back and was fenced again, Attempts times in a row
		err = fmt.Errorf("its backend asked to be reopened again within %s of each of %d reopens", p.Settle, attempt)
	}
	t.cfgMu.Lock()
	defer t.cfgMu.Unlock()
	if !owns() {
		return
	}
	old.reopening.Store(false)
	log.Error("reopening namespace failed: it stays inactive (Invalid Namespace) until an operator reopens it",
		"attempts", attempt, "err", err, "reopen", fmt.Sprintf("gonvmf ctl ns reopen %s %d", s.nqn, old.nsid))
	s.notifyNamespaceChanged(old.nsid) // it left the active list: hosts rescan and see it gone
}

// errReopenOutdated is why an automatic reopen's open did not put the namespace back
// when its configuration changed during the open (see autoReopen).
var errReopenOutdated = errors.New("its backend opened, but was closed unused: the namespace's configuration changed during the open")

// discard closes ns, opened by a reopen that does not install it (why); it was never
// published, so nothing but its backend and executor knew it.
func (s *subsystem) discard(ns *namespace, why string) {
	s.t.log.Info("reopened namespace discarded: "+why, "subsystem", s.nqn, "nsid", ns.nsid)
	if err := ns.close(); err != nil {
		s.t.log.Warn("closing a discarded namespace", "subsystem", s.nqn, "nsid", ns.nsid, "err", err)
	}
}

// runningNamespace returns namespace nsid of subsystem nqn in c.
func runningNamespace(c *conf.Config, nqn string, nsid uint32) (conf.Namespace, bool) {
	if si := subsystemIndex(c, nqn); si >= 0 {
		nss := c.Subsystems[si].Namespaces
		if ni := slices.IndexFunc(nss, func(n conf.Namespace) bool { return n.NSID == nsid }); ni >= 0 {
			return nss[ni], true
		}
	}
	return conf.Namespace{}, false
}

// holds reports whether ns is still in the subsystem's namespace table, and the
// subsystem and target are open.
func (s *subsystem) holds(ns *namespace) bool {
	s.t.mu.Lock()
	closed := s.t.closed
	s.t.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return !closed && !s.closed && slices.Contains(*s.ns.Load(), ns)
}

// sleep waits for d, or until the target closes (it then reports false).
func (t *Target) sleep(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-t.done:
		return false
	}
}
