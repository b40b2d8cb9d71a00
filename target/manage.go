package target

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
)

// Errors of AllowHost and DenyHost.
var (
	// ErrAllowsAnyHost: the subsystem admits every host (allow_any_host), so a single
	// host can be neither added to nor taken off its list; set the list with
	// SetAllowedHosts instead.
	ErrAllowsAnyHost = errors.New("target: the subsystem allows any host")
	// ErrNoSuchHost: DenyHost of a host that is not on the subsystem's list.
	ErrNoSuchHost = errors.New("target: host is not on the subsystem's allowed hosts")
)

// ErrHostNotAllowed is the reason a controller is disconnected when its host is taken off
// the subsystem's allowed hosts (SetAllowedHosts).
var ErrHostNotAllowed = errors.New("target: host is no longer allowed to access the subsystem")

// findNamespace returns the running subsystem and namespace nqn/nsid and their indexes
// in c, or an error wrapping ErrNoSuchSubsystem or ErrNoSuchNamespace.
func (t *Target) findNamespace(c *conf.Config, nqn string, nsid uint32) (*subsystem, *namespace, int, int, error) {
	si := subsystemIndex(c, nqn)
	s := t.subsystem(nqn)
	if s == nil || s.disc || si < 0 {
		return nil, nil, 0, 0, fmt.Errorf("%w: %q", ErrNoSuchSubsystem, nqn)
	}
	ni := slices.IndexFunc(c.Subsystems[si].Namespaces, func(n conf.Namespace) bool { return n.NSID == nsid })
	ns := s.lookup(nsid)
	if ni < 0 || ns == nil {
		return nil, nil, 0, 0, fmt.Errorf("%w: nsid %d in %q", ErrNoSuchNamespace, nsid, nqn)
	}
	return s, ns, si, ni, nil
}

// ResizeNamespace grows a namespace while hosts use it. With size > 0 the namespace
// becomes size bytes (validated as the configuration's size would be): a file is
// extended, null and memory namespaces simply get larger. With size 0 it takes the size
// its backing store has now: a block device or a file that was grown outside gonvmf, or
// a backend that watches its store and reports a new size (such a backend's resize
// notification calls ResizeNamespace(nqn, nsid, 0)). A namespace never shrinks.
//
// When the capacity changes, every controller of the subsystem gets a Namespace Attribute
// Changed event and the NSID in its Changed Namespace List, and the Linux host resizes
// its block device without reconnecting. Commands already checked against the old
// capacity are unaffected. The configuration's size follows (unless the namespace takes
// its size from its store: a block device, or a file without a size).
func (t *Target) ResizeNamespace(subNQN string, nsid uint32, size conf.Size) error {
	what := fmt.Sprintf("subsystem %q: namespace %d: resize", subNQN, nsid)
	var s *subsystem
	var ns *namespace
	var si, ni int
	var changed bool
	err := t.change(what, true, func(c *conf.Config) (err error) {
		if s, ns, si, ni, err = t.findNamespace(c, subNQN, nsid); err != nil {
			return err
		}
		cn := &c.Subsystems[si].Namespaces[ni]
		if size != 0 {
			if cn.Backend == conf.BackendBlock {
				return fmt.Errorf("target: %s to %s: a block namespace has its device's size; grow the device, then resize without a size", what, size)
			}
			cn.Size = size
		}
		return nil
	}, func(c *conf.Config) error {
		old := ns.blocks.Load()
		blocks := ns.be.NumBlocks()
		if r, ok := ns.be.(backend.Resizer); ok {
			var err error
			if blocks, err = r.Resize(uint64(size)); err != nil {
				return fmt.Errorf("target: %s: %w", what, err)
			}
		} else if size != 0 && uint64(size)>>ns.shift != blocks {
			return fmt.Errorf("target: %s to %s: the %s backend cannot be resized", what, size, ns.cfg.Backend)
		}
		if blocks < old {
			return fmt.Errorf("target: %s: the backend reports %d blocks, fewer than the %d hosts were told; a namespace cannot shrink", what, blocks, old)
		}
		cn := &c.Subsystems[si].Namespaces[ni]
		if cn.Size != 0 {
			cn.Size = conf.Size(blocks << ns.shift)
		}
		changed = blocks != old
		ns.blocks.Store(blocks)
		return nil
	})
	if err != nil || !changed {
		return err
	}
	t.log.Info("namespace resized", "subsystem", subNQN, "nsid", nsid, "blocks", ns.blocks.Load(), "bytes", ns.blocks.Load()<<ns.shift)
	s.notifyNamespaceChanged(nsid)
	return nil
}

// SetNamespaceReadOnly changes a namespace's write protection while hosts use it: from
// then on writes, Write Zeroes and deallocating Dataset Management fail with Namespace is
// Write Protected (commands already accepted finish). Controllers get a Namespace
// Attribute Changed event (Identify Namespace NSATTR changes). The backend stays open for
// writing, and reopens (ReopenNamespace, new open settings, an automatic reopen) open it
// for writing again, so that the protection can be lifted later. A namespace whose
// backend was opened read-only (read_only when it was added or the target started)
// cannot be made writable this way: remove it and add it again without read_only.
func (t *Target) SetNamespaceReadOnly(subNQN string, nsid uint32, readOnly bool) error {
	what := fmt.Sprintf("subsystem %q: namespace %d: read_only %t", subNQN, nsid, readOnly)
	var s *subsystem
	var ns *namespace
	var changed bool
	err := t.change(what, true, func(c *conf.Config) (err error) {
		var si, ni int
		if s, ns, si, ni, err = t.findNamespace(c, subNQN, nsid); err != nil {
			return err
		}
		c.Subsystems[si].Namespaces[ni].ReadOnly = readOnly
		return nil
	}, func(*conf.Config) error {
		if !readOnly && ns.beReadOnly {
			return fmt.Errorf("target: %s: its backend was opened read-only and cannot take writes; remove the namespace and add it again without read_only", what)
		}
		changed = ns.readOnly.Swap(readOnly) != readOnly
		return nil
	})
	if err != nil || !changed {
		return err
	}
	t.log.Info("namespace write protection changed", "subsystem", subNQN, "nsid", nsid, "read_only", readOnly)
	s.notifyNamespaceChanged(nsid)
	return nil
}

// SetRBDCreateSize changes an rbd namespace's rbd.create_size (validated as the
// configuration's would be; 0: none): the size its image is created with should the
// namespace open (a reopen, a restart) and find no image. Nothing else changes: the image
// it has open is not touched, and hosts see nothing.
func (t *Target) SetRBDCreateSize(subNQN string, nsid uint32, size conf.Size) error {
	what := fmt.Sprintf("subsystem %q: namespace %d: rbd.create_size %s", subNQN, nsid, size)
	return t.change(what, true, func(c *conf.Config) error {
		_, _, si, ni, err := t.findNamespace(c, subNQN, nsid)
		if err != nil {
			return err
		}
		cn := &c.Subsystems[si].Namespaces[ni]
		if cn.Backend != conf.BackendRBD {
			return fmt.Errorf("target: %s: the namespace's backend is %s; only an rbd namespace creates its image", what, cn.Backend)
		}
		cn.RBD.CreateSize = size
		return nil
	}, func(*conf.Config) error { return nil })
}

// OpenSettings are the settings of a namespace that say how its backend opens its store,
// not which store it opens: SetNamespaceOpenSettings changes them in place.
type OpenSettings struct {
	Shared     bool   // conf.Namespace.Shared: a file or block device others may open too
	RBDUser    string // conf.RBD.User: the Ceph client an rbd namespace connects as
	RBDKeyring string // conf.RBD.Keyring: the keyring holding that client's key
}

// NamespaceOpenSettings returns the OpenSettings of the namespace cn describes.
func NamespaceOpenSettings(cn conf.Namespace) OpenSettings {
	return OpenSettings{Shared: cn.Shared, RBDUser: cn.RBD.User, RBDKeyring: cn.RBD.Keyring}
}

// SetNamespaceOpenSettings changes how a namespace's backend opens its store (validated
// as the configuration's fields would be). A change its backend uses — shared on a file
// or block namespace (the file's lock, the device's O_EXCL), rbd.user or rbd.keyring (the
// RADOS client the image is opened through) — reopens the backend in place, as
// ReopenNamespace does: the namespace keeps its NSID, identifiers, registrations,
// reservation, ANA group and a failure (ReopenNamespace clears one), the hosts keep their
// controllers and connections, their commands meanwhile get Namespace Not Ready without
// DNR, which they retry, and controllers get a Namespace Attribute Changed event; an
// automatic reopen under way is taken over, as by ReopenNamespace. A change
// the backend does not use (shared on a null, memory or rbd namespace) changes the
// running configuration only. rbd.user and rbd.keyring belong to rbd namespaces only.
//
// If the backend does not open with the new settings it is opened again with the old
// ones and the error says why the new ones failed; nothing has changed then but the
// reopen. If it does not open with the old ones either the namespace stays inactive
// (Invalid Namespace with DNR), with the old settings, until a reopen succeeds or it is
// removed.
func (t *Target) SetNamespaceOpenSettings(subNQN string, nsid uint32, o OpenSettings) error {
	what := fmt.Sprintf("subsystem %q: namespace %d: shared %t, rbd.user %q, rbd.keyring %q", subNQN, nsid, o.Shared, o.RBDUser, o.RBDKeyring)
	var s *subsystem
	var ns *namespace
	var si, ni int
	var prev conf.Namespace
	return t.change(what, true, func(c *conf.Config) (err error) {
		if s, ns, si, ni, err = t.findNamespace(c, subNQN, nsid); err != nil {
			return err
		}
		cn := &c.Subsystems[si].Namespaces[ni]
		if cn.Backend != conf.BackendRBD && (o.RBDUser != "" || o.RBDKeyring != "") {
			return fmt.Errorf("target: %s: the namespace's backend is %s; only an rbd namespace has rbd.user and rbd.keyring", what, cn.Backend)
		}
		prev = *cn
		cn.Shared, cn.RBD.User, cn.RBD.Keyring = o.Shared, o.RBDUser, o.RBDKeyring
		return nil
	}, func(c *conf.Config) error {
		next := c.Subsystems[si].Namespaces[ni]
		if !reopensFor(prev, next) {
			return nil
		}
		return s.reopenWith(ns, prev, next, what)
	})
}

// reopensFor reports whether a namespace's backend must be opened again to run as next
// instead of prev, which differ only in their OpenSettings: whether its backend uses
// what changed.
func reopensFor(prev, next conf.Namespace) bool {
	usesShared := next.Backend == conf.BackendFile || next.Backend == conf.BackendBlock
	return prev.Shared != next.Shared && usesShared ||
		prev.RBD.User != next.RBD.User || prev.RBD.Keyring != next.RBD.Keyring
}

// reopenWith closes old, which runs as prev, and opens its backend as next in its place,
// keeping a failure; if that open fails, as prev again (see SetNamespaceOpenSettings).
func (s *subsystem) reopenWith(old *namespace, prev, next conf.Namespace, what string) error {
	s.closeToReopen(old)
	err := s.openReopened(old, next, true, 0)
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNoSuchNamespace) {
		old.reopening.Store(false)
		return err
	}
	rerr := s.openReopened(old, prev, true, 0)
	if rerr == nil {
		s.t.log.Warn("namespace: its backend did not open with the new settings: it runs with its old ones again",
			"subsystem", s.nqn, "nsid", old.nsid, "err", err)
		return fmt.Errorf("target: %s: its backend did not open with them, so it was opened again with the old ones (shared %t, rbd.user %q, rbd.keyring %q); fix the settings and try again: %w",
			what, prev.Shared, prev.RBD.User, prev.RBD.Keyring, err)
	}
	old.reopening.Store(false)
	if errors.Is(rerr, ErrNoSuchNamespace) {
		return rerr
	}
	s.t.log.Error("namespace: its backend opened neither with the new settings nor with its old ones: it stays inactive until a reopen succeeds",
		"subsystem", s.nqn, "nsid", old.nsid, "err", err, "old_settings_err", rerr,
		"reopen", fmt.Sprintf("gonvmf ctl ns reopen %s %d", s.nqn, old.nsid))
	s.notifyNamespaceChanged(old.nsid) // it left the active list: hosts rescan and see it gone
	return fmt.Errorf("target: %s: its backend did not open with them (%w), nor with the old ones (%v): the namespace stays inactive, with the old settings, until a reopen succeeds or it is removed",
		what, err, rerr)
}

// AllowHost adds hostNQN to the hosts allowed to connect to a subsystem (validated as in
// the configuration file). Allowing a host that is already listed changes nothing. A
// subsystem that allows any host has no list (ErrAllowsAnyHost): give it one with
// SetAllowedHosts.
func (t *Target) AllowHost(nqn, hostNQN string) error {
	return t.changeHosts(fmt.Sprintf("subsystem %q: allowing host %q", nqn, hostNQN), nqn, func(cs *conf.Subsystem) error {
		if cs.AllowAnyHost {
			return fmt.Errorf("%w, so %q may connect already; to admit only listed hosts, set its hosts list instead", ErrAllowsAnyHost, hostNQN)
		}
		if !slices.Contains(cs.Hosts, hostNQN) {
			cs.Hosts = append(cs.Hosts, hostNQN)
		}
		return nil
	})
}

// DenyHost takes hostNQN off the hosts allowed to connect to a subsystem: its controllers
// on the subsystem are disconnected (ErrHostNotAllowed) and its reconnections refused.
// It returns once those controllers have left the subsystem (Controllers, Subsystems and
// the statistics no longer count them; see changeHosts for the bound on that wait). The
// last host cannot be taken off (a subsystem nobody may connect to is a configuration
// error): remove the subsystem instead.
func (t *Target) DenyHost(nqn, hostNQN string) error {
	return t.changeHosts(fmt.Sprintf("subsystem %q: denying host %q", nqn, hostNQN), nqn, func(cs *conf.Subsystem) error {
		if cs.AllowAnyHost {
			return fmt.Errorf("%w, so one host cannot be denied; list the hosts that may connect instead", ErrAllowsAnyHost)
		}
		i := slices.Index(cs.Hosts, hostNQN)
		if i < 0 {
			return ErrNoSuchHost
		}
		cs.Hosts = slices.Delete(cs.Hosts, i, i+1)
		return nil
	})
}

// changeHosts applies edit to the running configuration of subsystem nqn, validates the
// result, and makes the subsystem admit exactly the hosts it lists: the controllers of
// hosts no longer allowed are disconnected, and the discovery log changes. It returns
// once the disconnected controllers have left the subsystem: their transports close their
// admin queues, which takes them out at once (Queue.Close), so the wait is short; it is
// bounded by the queue-close timeout (WithQueueCloseTimeout) against a transport that does
// not close, after which the controllers still there are logged and the change stands.
func (t *Target) changeHosts(what, nqn string, edit func(*conf.Subsystem) error) error {
	var s *subsystem
	err := t.change(what, true, func(c *conf.Config) error {
		i := subsystemIndex(c, nqn)
		if s = t.subsystem(nqn); s == nil || s.disc || i < 0 {
			return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, nqn)
		}
		if err := edit(&c.Subsystems[i]); err != nil {
			return fmt.Errorf("target: %s: %w", what, err)
		}
		return nil
	}, func(c *conf.Config) error {
		cs := &c.Subsystems[subsystemIndex(c, nqn)]
		s.mu.Lock()
		s.allowAny = cs.AllowAnyHost
		s.hosts = make(map[string]bool, len(cs.Hosts))
		for _, h := range cs.Hosts {
			s.hosts[h] = true
		}
		s.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	if denied := s.disconnectDenied(); len(denied) > 0 {
		t.awaitGone(denied, nqn)
		t.log.Info("controllers of hosts no longer allowed disconnected", "subsystem", nqn, "controllers", len(denied))
	}
	t.discoveryChanged()
	return nil
}

// awaitGone waits until the controllers cs of subsystem nqn have left it, at most the
// queue-close timeout; then it logs those still there.
func (t *Target) awaitGone(cs []*controller, nqn string) {
	timer := time.NewTimer(t.closeTimeout)
	defer timer.Stop()
	for i, c := range cs {
		select {
		case <-c.gone:
			continue
		case <-timer.C:
		}
		var left []uint16
		for _, c := range cs[i:] {
			select {
			case <-c.gone:
			default:
				left = append(left, c.cntlid)
			}
		}
		t.log.Warn("controllers of hosts no longer allowed were disconnected but their transport has not closed their admin queues: they stay listed until it does",
			"subsystem", nqn, "cntlids", left, "waited", t.closeTimeout)
		return
	}
}

// notifyNamespaceChanged tells every controller of s that namespace nsid changed.
func (s *subsystem) notifyNamespaceChanged(nsid uint32) {
	for _, c := range s.controllers() {
		c.namespaceChanged(nsid)
	}
}

// disconnectDenied fails the controllers of hosts that may no longer connect and returns
// them.
func (s *subsystem) disconnectDenied() []*controller {
	var denied []*controller
	for _, c := range s.controllers() {
		if !s.allowed(c.hostNQN) {
			c.log.Info("host no longer allowed: disconnecting its controller")
			c.fail(ErrHostNotAllowed)
			denied = append(denied, c)
		}
	}
	return denied
}
