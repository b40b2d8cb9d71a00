package target

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/ratelog"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Errors a Target returns or passes to TransportQueue.Disconnect as the reason.
var (
	// ErrClosed: the Target (or Port) has been closed.
	ErrClosed = errors.New("target: closed")
	// ErrKeepAliveExpired: the host sent nothing for longer than its keep-alive timeout;
	// the controller failed (CSTS.CFS) and all its queues are torn down.
	ErrKeepAliveExpired = errors.New("target: keep alive timeout expired")
	// ErrShutdownIdle: the host sent nothing for a long time (4 × KATO, at least a
	// minute) after it shut the controller down; it is taken to be gone.
	ErrShutdownIdle = errors.New("target: no command for long after the controller's shutdown")
	// ErrControllerReset: the host cleared CC.EN; the controller's I/O queues go away.
	ErrControllerReset = errors.New("target: controller reset")
	// ErrControllerShutdown: the host requested a shutdown (CC.SHN); I/O queues go away.
	ErrControllerShutdown = errors.New("target: controller shutdown")
	// ErrAdminQueueGone: the controller's admin queue closed, which ends the association;
	// its I/O queues go away.
	ErrAdminQueueGone = errors.New("target: admin queue closed")
	// ErrDisconnectCommand: the host sent a Fabrics Disconnect on the queue.
	ErrDisconnectCommand = errors.New("target: host sent Disconnect")
	// ErrNamespaceExists / ErrNoSuchNamespace / ErrNoSuchSubsystem: runtime namespace
	// management errors.
	ErrNamespaceExists = errors.New("target: namespace already exists")
	ErrNoSuchNamespace = errors.New("target: no such namespace")
	ErrNoSuchSubsystem = errors.New("target: no such subsystem")
	ErrSubsystemExists = errors.New("target: subsystem already exists")
	// ErrNamespaceBusy: closing a namespace (remove, reopen, shutdown) gave up waiting
	// for its commands or a flush (WithQueueCloseTimeout, Flush); its backend closes when
	// they complete.
	ErrNamespaceBusy = errors.New("target: namespace still has commands executing")
	// ErrFlushUnfinished: Flush gave up waiting for a namespace's flush, still executing
	// in its backend at the close timeout (WithQueueCloseTimeout): writes the namespace
	// reported complete may not be durable.
	ErrFlushUnfinished = errors.New("target: namespace flush still executing in its backend at the close timeout")
	// ErrVolatileNamespace: a memory namespace's data lives only in its open backend;
	// ReopenNamespace refuses it rather than empty it under the hosts.
	ErrVolatileNamespace = errors.New("target: a memory namespace cannot be reopened: its data would be lost")
	// ErrRemovedUnclean: the removal took effect (the configuration no longer has the
	// object) but releasing what it held failed; the error says what. A caller that
	// undoes its changes on error must count this one as made.
	ErrRemovedUnclean   = errors.New("removed, but releasing it failed")
	errControllerFailed = errors.New("target: controller fatal error")
)

// Version strings reported to hosts.
const (
	// FirmwareRevision is Identify Controller FR and the firmware slot log's slot 1.
	FirmwareRevision = "0.1"
	// nvmeVersion is VS and Identify Controller VER.
	nvmeVersion = nvmeproto.VS1_4
)

// Option configures a Target.
type Option func(*Target)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(t *Target) { t.log = l } }

// WithBackendOpener replaces backend.Open for the target's namespaces; tests use it to
// wrap backends with spies or fault injection.
func WithBackendOpener(open func(backend.Spec) (backend.Backend, error)) Option {
	return func(t *Target) { t.openBackend = open }
}

// WithExecutorWorkers sets the number of I/O workers per file or block namespace
// (default: the backend's own choice, backend.DefaultWorkers).
func WithExecutorWorkers(n int) Option { return func(t *Target) { t.workers = n } }

// Target is an NVMe over Fabrics target: the subsystems and namespaces of a configuration,
// the discovery subsystem, the controllers hosts create, and the ports transports
// register. It is safe for concurrent use.
//
// A Target owns its configuration: New resolves a private copy of the one it is given
// (the caller's is never changed), and every change at run time (AddSubsystem,
// AddNamespace, ...) is validated by resolving a changed copy with the conf package before
// it is applied, so Config always describes exactly what is being served and nothing below
// the conf package fills in a default.
type Target struct {
	log          *slog.Logger
	openBackend  func(backend.Spec) (backend.Backend, error)
	workers      int
	authKeys     AuthKeys       // DH-HMAC-CHAP keys of the hosts: WithAuthKeys, or *configAuthKeys
	authSlots    *authSlots     // bounds the authentication steps running at once (auth.go)
	tr           conf.Transport // resolved transport settings; fixed for the Target's life
	lim          conf.Limits    // resolved limits; fixed for the Target's life
	adm          admission      // what hosts hold against lim
	refusals     ratelog.Limiter
	closeTimeout time.Duration // Queue.Close's wait for commands still executing
	mdtsBytes    uint32        // largest transfer: tr.MaxIOSize
	mdts         uint8         // log2(mdtsBytes / 4 KiB)
	started      time.Time
	resv         *resvStore     // the state file of persistent reservations; nil: no PTPL
	done         chan struct{}  // closed by Close
	bg           sync.WaitGroup // automatic reopens running (Close waits for them)

	// cfgMu serializes changes of the configuration; cfg is replaced (never modified)
	// under both cfgMu and mu, so either lock is enough to read it.
	cfgMu sync.Mutex
	cfg   *conf.Config // the running configuration, resolved

	mu         sync.Mutex
	subsystems map[string]*subsystem // by NQN, excluding discovery
	order      []*subsystem          // cfg.Subsystems' subsystems in its order, for the discovery log
	disc       *subsystem
	ports      []*Port
	nextPortID uint16
	closed     bool
	// removedSubs are the subsystems RemoveSubsystem took out of subsystems and order,
	// from then until no backend of a namespace they had is open
	// (subsystem.forgetIfRemoved): the I/O fence waits for their queues' commands still
	// executing (fenceScope, portGroupWaits), and Close for their namespaces' closes. Their
	// tables are empty: their namespaces went onto their removed lists
	// (subsystem.unpublish) before they left order.
	removedSubs []*subsystem

	genctr atomic.Uint64 // discovery log generation counter
	nsGens atomic.Uint64 // the last namespace generation handed out (namespace.gen)

	timing  atomic.Bool // measure I/O latency (MeasureLatency)
	rejects connectRejects

	quiesced atomic.Bool // shutting down: transports hold new commands back (Quiesce)
	// stopHung counts, by namespace (fence key), the stop's flushes (Flush) still
	// executing in their backend after Flush gave up waiting for them: the closes after
	// Flush do not wait again for such a namespace, nor for a queue's commands to it
	// (namespace.waitClosed, Queue.waitDrained). Guarded by stopHungMu; nil until the
	// first one.
	stopHungMu sync.Mutex
	stopHung   map[fenceKey]int

	anaChgcnt atomic.Uint64                       // ANA change count (ANA log CHGCNT), see ana.go
	anaGrpChg [conf.MaxANAGroup + 1]atomic.Uint64 // count of each group's last NSID list change
}

// New builds a target from a configuration: it resolves a copy of cfg (conf.Load output is
// resolved already and stays as it is; a Config built in code gets its defaults there, see
// conf.Config.Resolve), reads the hosts' secrets (each host's within SecretReadTimeout),
// opens every namespace's backend and starts its executor. cfg is not changed, and not
// kept. Listeners are not opened here: a transport registers each listener it serves
// with AddPort (package target/server does both). On error nothing is left open, but a
// secret file's read that did not answer within SecretReadTimeout goes on until the
// file system answers: one goroutine, and the thread blocked in the read, per such file
// and failed call (each target reads its files on its own; see secretReads). A program
// that retries New while a mount hangs adds one per retry.
func New(cfg *conf.Config, opts ...Option) (*Target, error) {
	if cfg == nil {
		return nil, errors.New("target: nil configuration")
	}
	rc := cfg.Clone()
	if err := rc.Resolve(); err != nil {
		return nil, fmt.Errorf("target: configuration: %w", err)
	}
	t := &Target{
		log:          slog.Default(),
		openBackend:  backend.Open,
		tr:           rc.Transport,
		lim:          rc.Limits,
		closeTimeout: DefaultQueueCloseTimeout,
		done:         make(chan struct{}),
		cfg:          rc,
		started:      time.Now(),
		subsystems:   make(map[string]*subsystem),
		nextPortID:   1,
		authSlots:    newAuthSlots(),
	}
	for _, o := range opts {
		o(t)
	}
	t.log = t.log.With("component", "target")
	if t.authKeys == nil {
		k, err := newConfigAuthKeys(t, rc)
		if err != nil {
			return nil, fmt.Errorf("target: configuration: %w", err)
		}
		t.authKeys = k
	}
	if rc.StateFile != "" && rc.StateFile != conf.StateFileNone {
		st, err := openResvStore(rc.StateFile)
		if err != nil {
			return nil, fmt.Errorf("target: %w", err)
		}
		t.resv = st
	}
	// Resolved: a power of two from 4 KiB to 8 MiB, so MDTS expresses it exactly.
	t.mdtsBytes = uint32(t.tr.MaxIOSize)
	t.mdts = uint8(bits.Len32(t.mdtsBytes/4096) - 1)
	t.disc = newSubsystem(t, nvmeproto.DiscoveryNQN, true)
	t.disc.allowAny = true
	t.disc.serial = conf.DeriveSerial(nvmeproto.DiscoveryNQN)
	t.disc.model = conf.DefaultModel
	for i := range rc.Subsystems {
		if err := t.addSubsystem(&rc.Subsystems[i], i); err != nil {
			t.Close()
			return nil, err
		}
	}
	t.genctr.Store(1)
	return t, nil
}

// Config returns a copy of the running configuration: the configuration New was given,
// resolved, with the changes made since (subsystems, namespaces and hosts added or
// removed). Its String is YAML that conf.Parse reads back to the same configuration.
func (t *Target) Config() *conf.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg.Clone()
}

// TransportConfig returns the resolved transport settings (the configuration's transport
// section), which transports size their queues, buffers and poll groups by. They do not
// change while the Target runs.
func (t *Target) TransportConfig() conf.Transport { return t.tr }

// MaxTransferSize is the largest data transfer of one command in bytes (Identify MDTS):
// the resolved transport.max_io_size. Transports size their data buffers by it.
func (t *Target) MaxTransferSize() int { return int(t.mdtsBytes) }

// change validates a change of the running configuration and applies it. edit changes a
// copy of the configuration; an addition is then resolved (defaults, derived identifiers,
// and every check conf makes of a file: unique NQNs, NSIDs, identifiers and paths; a
// removal needs none, and may leave no subsystem at all, which a file may not); then apply
// brings the running objects in line with the copy, which becomes the running
// configuration if apply succeeds. Changes are serialized; apply runs without t.mu held.
func (t *Target) change(what string, resolve bool, edit func(*conf.Config) error, apply func(*conf.Config) error) error {
	t.cfgMu.Lock()
	defer t.cfgMu.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	next := t.cfg.Clone()
	t.mu.Unlock()
	if err := edit(next); err != nil {
		return err
	}
	if resolve {
		if err := next.Resolve(); err != nil {
			// The fields are those of the running configuration, not of a file's lines.
			for _, fe := range conf.Errors(err) {
				fe.File, fe.Line, fe.Column = "", 0, 0
			}
			return fmt.Errorf("target: %s: %w", what, err)
		}
	}
	if err := apply(next); err != nil {
		return err
	}
	t.mu.Lock()
	t.cfg = next
	t.mu.Unlock()
	return nil
}

// SetMetricsPerNamespace changes the running configuration's metrics.per_namespace
// (conf.MetricsFull or conf.MetricsCounters, validated as the file's would be). The
// Target serves no metrics: it holds the setting for the metrics endpoint, which reads
// it at each scrape (MetricsPerNamespace), and for Config.
func (t *Target) SetMetricsPerNamespace(level string) error {
	return t.change("metrics.per_namespace: "+level, true, func(c *conf.Config) error {
		c.Metrics.PerNamespace = level
		return nil
	}, func(*conf.Config) error { return nil })
}

// MetricsPerNamespace returns the running configuration's metrics.per_namespace: what
// the metrics endpoint exports of each namespace ("" where no metrics.address is set).
// Unlike Config it copies nothing, so a scrape may call it.
func (t *Target) MetricsPerNamespace() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg.Metrics.PerNamespace
}

// subsystemIndex returns the index of the subsystem nqn in c, or -1.
func subsystemIndex(c *conf.Config, nqn string) int {
	return slices.IndexFunc(c.Subsystems, func(s conf.Subsystem) bool { return s.NQN == nqn })
}

// AddSubsystem adds a subsystem at run time (its namespaces included), validated as if it
// had been in the configuration file. Hosts learn about it through the discovery log (its
// generation counter changes and discovery controllers that asked for it get a Discovery
// Log Page Change event). If one of its namespaces cannot be opened nothing is added. It
// goes last in the subsystems' order (InsertSubsystem puts it elsewhere).
func (t *Target) AddSubsystem(s conf.Subsystem) error { return t.insertSubsystem(-1, s) }

// InsertSubsystem is AddSubsystem that puts the subsystem at index i (0 first, the number
// of subsystems last) of the subsystems' order: that of the running configuration's
// Subsystems, the discovery log's entries and Subsystems. Undoing a removal puts a
// subsystem back where it was with it.
func (t *Target) InsertSubsystem(i int, s conf.Subsystem) error {
	if i < 0 {
		return fmt.Errorf("target: subsystem %q: index %d: an index is 0 or more", s.NQN, i)
	}
	return t.insertSubsystem(i, s)
}

// insertSubsystem adds s at index at of the subsystems' order, last when at is -1.
func (t *Target) insertSubsystem(at int, s conf.Subsystem) error {
	err := t.change(fmt.Sprintf("subsystem %q", s.NQN), true, func(c *conf.Config) error {
		if s.NQN == nvmeproto.DiscoveryNQN || subsystemIndex(c, s.NQN) >= 0 {
			return fmt.Errorf("%w: %q", ErrSubsystemExists, s.NQN)
		}
		if at == -1 {
			at = len(c.Subsystems)
		}
		if at > len(c.Subsystems) {
			return fmt.Errorf("target: subsystem %q: index %d is past the end of the %d subsystems: give 0..%d", s.NQN, at, len(c.Subsystems), len(c.Subsystems))
		}
		c.Subsystems = slices.Insert(c.Subsystems, at, s)
		return nil
	}, func(c *conf.Config) error {
		return t.addSubsystem(&c.Subsystems[at], at)
	})
	if err != nil {
		return err
	}
	t.discoveryChanged()
	return nil
}

// addSubsystem builds a subsystem of the resolved cs and opens its namespaces, then puts
// it at index at of t.order (which lists the running configuration's subsystems in its
// order; at is cs's index there); on error nothing of it is left.
func (t *Target) addSubsystem(cs *conf.Subsystem, at int) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	if _, dup := t.subsystems[cs.NQN]; dup || cs.NQN == nvmeproto.DiscoveryNQN {
		t.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrSubsystemExists, cs.NQN)
	}
	s := newSubsystem(t, cs.NQN, false)
	s.serial, s.model = cs.Serial, cs.Model
	s.setCntlidRange(cs.CNTLIDMin, cs.CNTLIDMax)
	s.allowAny = cs.AllowAnyHost
	s.authRequired = cs.AuthRequired
	for _, h := range cs.Hosts {
		s.hosts[h] = true
	}
	t.mu.Unlock()
	// Every namespace is open before the subsystem is published: a host that connects
	// (an HA peer's, one retrying) finds all of them, never a part without the events
	// that would tell it of the rest, nor a subsystem that then vanishes if one fails.
	for _, ns := range cs.Namespaces {
		t.mu.Lock()
		closed := t.closed // Close cannot see s yet: stop opening for a closed target
		t.mu.Unlock()
		if closed {
			s.close()
			return ErrClosed
		}
		if err := s.addNamespace(ns, false); err != nil {
			s.close()
			return fmt.Errorf("target: subsystem %q: %w", cs.NQN, err)
		}
	}
	t.mu.Lock()
	if _, dup := t.subsystems[cs.NQN]; dup || t.closed {
		closed := t.closed
		t.mu.Unlock()
		s.close()
		if closed {
			return ErrClosed
		}
		return fmt.Errorf("%w: %q", ErrSubsystemExists, cs.NQN)
	}
	t.subsystems[cs.NQN] = s
	t.order = slices.Insert(t.order, at, s)
	t.mu.Unlock()
	t.log.Info("subsystem added", "nqn", cs.NQN, "namespaces", len(cs.Namespaces), "allow_any_host", cs.AllowAnyHost, "hosts", len(cs.Hosts))
	return nil
}

// unlink takes s, unpublished, out of the subsystem table and, in the same step, lists it
// among the removed subsystems, which the I/O fence looks at, until no backend of its
// namespaces is open (forgetSubsystem).
func (t *Target) unlink(s *subsystem) {
	t.mu.Lock()
	if t.subsystems[s.nqn] == s {
		delete(t.subsystems, s.nqn)
	}
	t.order = slices.DeleteFunc(t.order, func(x *subsystem) bool { return x == s })
	t.removedSubs = append(t.removedSubs, s)
	t.mu.Unlock()
}

// forgetSubsystem takes s, removed, off the removed subsystems: no backend of a namespace
// it had is open any more.
func (t *Target) forgetSubsystem(s *subsystem) {
	t.mu.Lock()
	t.removedSubs = slices.DeleteFunc(t.removedSubs, func(x *subsystem) bool { return x == s })
	t.mu.Unlock()
}

// RemoveSubsystem removes a subsystem: its controllers fail and their queues are torn
// down, its namespaces are closed once their in-flight commands finish (a backend with
// commands still executing at the queue-close timeout closes when they complete). They
// close at once, so the call waits about one queue-close timeout at most however many
// namespaces the subsystem has. Until its namespaces' backends have closed, the I/O
// fence of an ANA change or a Preempt and Abort waits for their commands as for those of
// a removed namespace (RemoveNamespace; see fence.go), also when a subsystem with its NQN
// is added again on the same stores. When a namespace's backend fails to close, the
// subsystem is removed all the same and the error wraps ErrRemovedUnclean, as
// RemoveNamespace's; a backend still executing commands at the close timeout is no error,
// as there. A Close meanwhile waits for these closes (see Close).
func (t *Target) RemoveSubsystem(nqn string) error {
	var s *subsystem
	var tab []*namespace
	var unpublished bool
	err := t.change(fmt.Sprintf("removing subsystem %q", nqn), false, func(c *conf.Config) error {
		i := subsystemIndex(c, nqn)
		if s = t.subsystem(nqn); s == nil || s.disc || i < 0 {
			return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, nqn)
		}
		c.Subsystems = slices.Delete(c.Subsystems, i, i+1)
		return nil
	}, func(*conf.Config) error {
		// Its namespaces become removed ones while it is still listed, then it leaves
		// the table for the removed subsystems: a fence sees them all along.
		tab, unpublished = s.unpublish()
		t.unlink(s)
		return nil
	})
	if err != nil {
		return err
	}
	var closeErrs []error
	if unpublished {
		for _, err := range s.closeUnpublished(tab) {
			// Removed all the same, as by RemoveNamespace: hosts no longer see it, and
			// its backend closes when the stuck commands complete (close logged both).
			if !errors.Is(err, ErrNamespaceBusy) {
				closeErrs = append(closeErrs, err)
			}
		}
	} else {
		s.forgetIfRemoved() // a Close meanwhile closes it, maybe before unlink listed it
	}
	t.discoveryChanged()
	if len(closeErrs) > 0 {
		return fmt.Errorf("target: subsystem %q: %w: %w", nqn, ErrRemovedUnclean, errors.Join(closeErrs...))
	}
	return nil
}

// SetAllowedHosts changes who may connect to a subsystem: allowAny, or the listed host
// NQNs (validated as in the configuration file). Controllers of hosts that are no longer
// allowed are disconnected (ErrHostNotAllowed), gone when it returns (as for DenyHost),
// and their hosts refused when they reconnect; the discovery log changes.
func (t *Target) SetAllowedHosts(nqn string, allowAny bool, hosts []string) error {
	return t.changeHosts(fmt.Sprintf("subsystem %q: hosts", nqn), nqn, func(cs *conf.Subsystem) error {
		cs.AllowAnyHost, cs.Hosts = allowAny, slices.Clone(hosts)
		return nil
	})
}

// AddNamespace adds a namespace to a subsystem at run time, validated as if it had been in
// the configuration file (zero fields take their defaults; identifiers left zero are
// derived, see conf.DeriveUUID). Its backend is opened as New would. Every controller of
// the subsystem gets a Namespace Attribute Changed event (when enabled) and the NSID in
// its Changed Namespace List. In the running configuration it takes its place in NSID
// order (at the end of a list that is not in NSID order; InsertNamespace puts it
// elsewhere).
func (t *Target) AddNamespace(subNQN string, ns conf.Namespace) error {
	return t.insertNamespace(subNQN, -1, ns)
}

// InsertNamespace is AddNamespace that puts the namespace at index i (0 first, the number
// of namespaces last) of the subsystem's namespaces in the running configuration (hosts
// see namespaces by NSID whatever the order). Undoing a removal puts a namespace back
// where it was with it.
func (t *Target) InsertNamespace(subNQN string, i int, ns conf.Namespace) error {
	if i < 0 {
		return fmt.Errorf("target: subsystem %q: namespace %d: index %d: an index is 0 or more", subNQN, ns.NSID, i)
	}
	return t.insertNamespace(subNQN, i, ns)
}

// insertNamespace adds ns at index at of the subsystem's namespaces; at -1: in NSID order
// when the list is (so a namespace removed and added again returns to its place), last
// otherwise.
func (t *Target) insertNamespace(subNQN string, at int, ns conf.Namespace) error {
	var s *subsystem
	var si int
	what := fmt.Sprintf("subsystem %q: namespace %d", subNQN, ns.NSID)
	return t.change(what, true, func(c *conf.Config) error {
		si = subsystemIndex(c, subNQN)
		if s = t.subsystem(subNQN); s == nil || s.disc || si < 0 {
			return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, subNQN)
		}
		cs := &c.Subsystems[si]
		if slices.ContainsFunc(cs.Namespaces, func(n conf.Namespace) bool { return n.NSID == ns.NSID }) {
			return fmt.Errorf("%w: nsid %d in %q", ErrNamespaceExists, ns.NSID, subNQN)
		}
		switch {
		case at > len(cs.Namespaces):
			return fmt.Errorf("target: %s: index %d is past the end of the subsystem's %d namespaces: give 0..%d", what, at, len(cs.Namespaces), len(cs.Namespaces))
		case at >= 0:
		case slices.IsSortedFunc(cs.Namespaces, func(a, b conf.Namespace) int { return cmp.Compare(a.NSID, b.NSID) }):
			at = slices.IndexFunc(cs.Namespaces, func(n conf.Namespace) bool { return n.NSID > ns.NSID })
			if at < 0 {
				at = len(cs.Namespaces)
			}
		default:
			at = len(cs.Namespaces)
		}
		cs.Namespaces = slices.Insert(cs.Namespaces, at, ns)
		return nil
	}, func(c *conf.Config) error {
		return s.addNamespace(c.Subsystems[si].Namespaces[at], true)
	})
}

// RemoveNamespace removes a namespace: new commands for it fail with Invalid Namespace,
// commands in flight finish, then its backend is closed. Controllers are notified as for
// AddNamespace. A Close meanwhile waits for that close (see Close).
func (t *Target) RemoveNamespace(subNQN string, nsid uint32) error {
	var s *subsystem
	var closeErr error
	err := t.change(fmt.Sprintf("subsystem %q: removing namespace %d", subNQN, nsid), false, func(c *conf.Config) error {
		si := subsystemIndex(c, subNQN)
		if s = t.subsystem(subNQN); s == nil || s.disc || si < 0 {
			return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, subNQN)
		}
		cs := &c.Subsystems[si]
		ni := slices.IndexFunc(cs.Namespaces, func(n conf.Namespace) bool { return n.NSID == nsid })
		if ni < 0 {
			return fmt.Errorf("%w: nsid %d in %q", ErrNoSuchNamespace, nsid, subNQN)
		}
		cs.Namespaces = slices.Delete(cs.Namespaces, ni, ni+1)
		return nil
	}, func(*conf.Config) error {
		closeErr = s.removeNamespace(nsid)
		if errors.Is(closeErr, ErrNoSuchNamespace) {
			return closeErr
		}
		return nil // it is gone: the configuration follows even if closing its backend failed
	})
	if err != nil {
		return err
	}
	if closeErr != nil {
		return fmt.Errorf("target: subsystem %q: namespace %d: %w: %w", subNQN, nsid, ErrRemovedUnclean, closeErr)
	}
	return nil
}

// Quiesce tells the target that it is shutting down and its transports have stopped
// starting new commands (the first step of an orderly shutdown, see
// target/rdma.Transport.Drain): hosts look silent meanwhile, so keep-alive timers no
// longer fail controllers, which would disconnect queues whose commands are still
// finishing. It cannot be undone; Close follows.
func (t *Target) Quiesce() { t.quiesced.Store(true) }

// ReopenNamespace closes a namespace's backend and opens it again from its configuration
// (the running configuration does not change; a backend that took writes is opened for
// writing again under write protection set while the namespace ran, see
// SetNamespaceReadOnly). It is how a namespace that failed — a
// sync of its backend failed, so it refuses writes and flushes with Write Fault (DNR)
// because writes it reported complete may be lost — is put back into service once the
// operator has dealt with the storage and the possible loss; a restart does the same.
// Commands that arrive during the reopen get Namespace Not Ready without DNR (with a CRD
// where the host enabled ACRE: 1, then 2 once the reopen lasts), which hosts retry, and
// the subsystem's controllers get a
// Namespace Attribute Changed event. If the backend cannot be opened the namespace stays
// inactive, its commands getting Invalid Namespace with DNR, until a later reopen
// succeeds or it is removed. A namespace whose backend asks to be reopened
// (backend.ErrNeedsReopen) is reopened without it (see conf.AutoReopen), keeping a failure;
// ReopenNamespace also puts one back whose automatic reopen gave up. One begun during an
// automatic reopen takes it over: the automatic reopen stops, installing nothing it
// opened, and this one's outcome is the namespace's; if its open fails the namespace
// stays inactive until the next ReopenNamespace, not brought back by the automatic one.
func (t *Target) ReopenNamespace(subNQN string, nsid uint32) error {
	t.cfgMu.Lock() // serialized with configuration changes (RemoveNamespace, ...)
	defer t.cfgMu.Unlock()
	t.mu.Lock()
	closed := t.closed
	c := t.cfg // replaced, never modified: safe to read after unlocking
	t.mu.Unlock()
	if closed {
		return ErrClosed
	}
	s, ns, si, ni, err := t.findNamespace(c, subNQN, nsid)
	if err != nil {
		return err
	}
	cn := c.Subsystems[si].Namespaces[ni]
	if cn.Backend == conf.BackendMemory {
		// It cannot have failed (nothing syncs), and a new backend starts empty.
		return fmt.Errorf("target: namespace %d of %q: %w (remove and add it for an empty one)", nsid, subNQN, ErrVolatileNamespace)
	}
	// The running configuration: a resize or a change of write protection since the
	// namespace was added is kept.
	return s.reopenNamespace(ns, cn)
}

// FailedNamespace is a namespace that refuses writes and flushes because a sync of its
// backend failed (see ReopenNamespace).
type FailedNamespace struct {
	SubNQN string
	NSID   uint32
	Reason error // the backend's error, wrapping backend.ErrSync
}

// FailedNamespaces lists the namespaces that failed, by subsystem in configuration order
// and NSID.
func (t *Target) FailedNamespaces() []FailedNamespace {
	t.mu.Lock()
	subs := slices.Clone(t.order)
	t.mu.Unlock()
	var out []FailedNamespace
	for _, s := range subs {
		for _, ns := range s.namespaces() {
			if err := ns.failureReason(); err != nil {
				out = append(out, FailedNamespace{SubNQN: s.nqn, NSID: ns.nsid, Reason: err})
			}
		}
	}
	return out
}

// Flush makes every namespace's completed writes durable (a backend Flush, as the Flush
// command does): the last step of an orderly stop, before Close. The namespaces are
// flushed concurrently, so that a backend that hangs (a file on an NFS server that went
// away, an rbd cluster gone) holds up no other namespace's flush, and Flush waits for
// them at most the queue close timeout (WithQueueCloseTimeout). A namespace whose sync
// fails is failed (see ReopenNamespace). One whose flush is still executing then is
// logged at Error — subsystem, NSID, backend, path, how long Flush waited — and its error
// wraps ErrFlushUnfinished: writes it reported complete may not be durable. That flush
// goes on until its backend returns, and holds the namespace open until then. The errors
// are returned joined.
//
// Each Flush waits its own close timeout. A flush it left executing marks its namespace
// until that flush returns: the closes after Flush (Close, RemoveNamespace,
// ReopenNamespace) do not wait again for the backend the flush hangs in — the namespace's
// close gives up at once (ErrNamespaceBusy), and so does a queue's close (Queue.Close)
// for its commands when one of them is to such a namespace — so a backend whose requests
// hang costs the stop one close timeout in all, not one for the flush and one more for
// each close. Every other namespace and queue gets the whole close timeout, whatever the
// flushes did.
func (t *Target) Flush() error {
	start := time.Now()
	t.mu.Lock()
	subs := slices.Clone(t.order)
	t.mu.Unlock()
	var nss []*namespace
	for _, s := range subs {
		nss = append(nss, s.namespaces()...)
	}
	var errs []error
	for i, o := range flushAll(nss, t.closeTimeout, true) {
		ns := nss[i]
		switch {
		case !o.done:
			waited := time.Since(start).Round(time.Millisecond)
			t.log.Error("stop: a namespace's flush did not finish within the close timeout; writes it reported complete may not be durable. "+
				"The stop goes on without it, and its backend stays open until the flush returns",
				"subsystem", ns.subNQN, "nsid", ns.nsid, "backend", ns.cfg.Backend, "path", ns.location(), "waited", waited)
			errs = append(errs, fmt.Errorf("subsystem %q: namespace %d (%s %s): %w: waited %v",
				ns.subNQN, ns.nsid, ns.cfg.Backend, ns.location(), ErrFlushUnfinished, waited))
		case o.err != nil:
			errs = append(errs, fmt.Errorf("subsystem %q: %w", ns.subNQN, o.err))
		}
	}
	return errors.Join(errs...)
}

// markStopHung counts (d 1) or uncounts (d -1) a stop flush of ns that Flush left
// executing in its backend (see stopHung).
func (t *Target) markStopHung(ns *namespace, d int) {
	ns.stopHung.Add(int32(d))
	k := ns.fenceKey()
	t.stopHungMu.Lock()
	defer t.stopHungMu.Unlock()
	if t.stopHung == nil {
		t.stopHung = map[fenceKey]int{}
	}
	if n := t.stopHung[k] + d; n > 0 {
		t.stopHung[k] = n
	} else {
		delete(t.stopHung, k)
	}
}

// stopHungIn reports whether a stop flush Flush left executing holds any of the
// namespaces keys reports (see stopHung); keys is called only if one holds some namespace.
func (t *Target) stopHungIn(keys iter.Seq[fenceKey]) bool {
	t.stopHungMu.Lock()
	defer t.stopHungMu.Unlock()
	if len(t.stopHung) == 0 {
		return false
	}
	for k := range keys {
		if t.stopHung[k] > 0 {
			return true
		}
	}
	return false
}

func (t *Target) subsystem(nqn string) *subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	if nqn == nvmeproto.DiscoveryNQN {
		return t.disc
	}
	return t.subsystems[nqn]
}

// Close tears down every controller (asking transports to disconnect every queue), waits
// for commands in flight, and closes the namespaces' executors and backends, then waits
// for an automatic reopen to stop (one opening a backend then closes it), then closes the
// reservation state file. Ports stay registered but accept no new queues. The wait for a
// namespace's commands is bounded (see WithQueueCloseTimeout); one whose flush Flush left
// executing is not waited for again (see Flush). Every subsystem's namespaces close at
// once, so the wait for them is about one queue-close timeout at most however many
// subsystems and namespaces there are; the errors come in the subsystems' order, each's in
// its namespaces' order.
//
// Close also waits, in the same bound, for the closes that removals began: a namespace
// RemoveNamespace or RemoveSubsystem took out (one running now, or one that returned
// before its backend had closed) is waited for until its backend has closed, as Close's
// own are, and given up on — logged with its subsystem and NSID, an error wrapping
// ErrNamespaceBusy after its subsystem's own errors (a removed subsystem's after those of
// the subsystems in the table) — when the close timeout ends first, also when its
// removal's close had already given up on it (its backend's close error, if any, is the
// removal's to report). So when Close returns, every backend the target opened for a
// namespace that was published has closed or had its close given up, and the reservation
// state file is closed after all of them.
//
// Lock order: Close takes t.mu, then each subsystem's mu, one at a time and never while
// waiting; it never takes cfgMu. A removal holds cfgMu while it closes (RemoveNamespace)
// or not at all (RemoveSubsystem's closes run after its change), and neither waits for
// anything Close holds, so Close waiting for them cannot deadlock. Close does not take
// cfgMu to wait for a change in progress, which may be opening a backend that hangs:
// that would make Close unbounded.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	// The subsystems in the table, then those RemoveSubsystem took out: a subsystem is in
	// one or the other (unlink moves it under t.mu), and one unlinked from now on was in
	// order. Their namespaces still closing by a removal are on their removed lists.
	subs := slices.Concat(t.order, t.removedSubs)
	t.subsystems = map[string]*subsystem{}
	t.order = nil
	ports := slices.Clone(t.ports)
	t.mu.Unlock()
	for _, p := range ports {
		p.closeQueues(ErrClosed)
	}
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() { errs[i] = errors.Join(s.closeForTarget()...) })
	}
	wg.Wait()
	t.disc.close()
	t.bg.Wait()
	if t.resv != nil {
		t.resv.close()
	}
	return errors.Join(errs...)
}

// discoveryChanged bumps the discovery log generation counter and notifies discovery
// controllers that enabled Discovery Log Page Change events.
func (t *Target) discoveryChanged() {
	t.genctr.Add(1)
	for _, c := range t.disc.controllers() {
		c.raiseEvent(eventDiscoveryChange)
	}
}

// GenerationCounter returns the discovery log's current GENCTR.
func (t *Target) GenerationCounter() uint64 { return t.genctr.Load() }
