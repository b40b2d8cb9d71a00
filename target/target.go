package target

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Errors a Target returns or passes to TransportQueue.Disconnect as the reason.
var (
	// ErrClosed: the Target (or Port) has been closed.
	ErrClosed = errors.New("target: closed")
	// ErrKeepAliveExpired: the host sent nothing for longer than its keep-alive timeout;
	// the controller failed (CSTS.CFS) and all its queues are torn down.
	ErrKeepAliveExpired = errors.New("target: keep alive timeout expired")
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
	ErrNamespaceExists  = errors.New("target: namespace already exists")
	ErrNoSuchNamespace  = errors.New("target: no such namespace")
	ErrNoSuchSubsystem  = errors.New("target: no such subsystem")
	ErrSubsystemExists  = errors.New("target: subsystem already exists")
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
type Target struct {
	log         *slog.Logger
	openBackend func(backend.Spec) (backend.Backend, error)
	workers     int
	tr          conf.Transport  // resolved transport settings
	listeners   []conf.Listener // from the configuration, for AddSubsystem's validation
	mdtsBytes   uint32          // largest transfer, a power of two
	mdts        uint8
	started     time.Time

	mu         sync.Mutex
	subsystems map[string]*subsystem // by NQN, excluding discovery
	order      []*subsystem          // configuration order, for the discovery log
	disc       *subsystem
	ports      []*Port
	nextPortID uint16
	closed     bool

	genctr atomic.Uint64 // discovery log generation counter
}

// New builds a target from a resolved configuration (conf.Load/Parse output, or a Config
// built in code, which New resolves): it opens every namespace's backend and starts its
// executor. Listeners are not opened here: a transport registers each listener it serves
// with AddPort. On error nothing is left open.
func New(cfg *conf.Config, opts ...Option) (*Target, error) {
	if cfg == nil {
		return nil, errors.New("target: nil configuration")
	}
	if err := cfg.Resolve(); err != nil {
		return nil, fmt.Errorf("target: configuration: %w", err)
	}
	t := &Target{
		log:         slog.Default(),
		openBackend: backend.Open,
		tr:          cfg.Transport,
		listeners:   slices.Clone(cfg.Listeners),
		started:     time.Now(),
		subsystems:  make(map[string]*subsystem),
		nextPortID:  1,
	}
	for _, o := range opts {
		o(t)
	}
	t.log = t.log.With("component", "target")
	io := uint32(t.tr.MaxIOSize)
	if io < 4096 {
		io = 4096
	}
	t.mdts = uint8(bits.Len32(io/4096) - 1)
	t.mdtsBytes = 4096 << t.mdts
	t.disc = newSubsystem(t, nvmeproto.DiscoveryNQN, true)
	t.disc.allowAny = true
	t.disc.serial = conf.DeriveSerial(nvmeproto.DiscoveryNQN)
	t.disc.model = conf.DefaultModel
	for i := range cfg.Subsystems {
		if err := t.addSubsystem(&cfg.Subsystems[i]); err != nil {
			t.Close()
			return nil, err
		}
	}
	t.genctr.Store(1)
	return t, nil
}

// AddSubsystem adds a subsystem at run time (its namespaces included). Hosts learn about
// it through the discovery log (its generation counter changes and discovery controllers
// that asked for it get a Discovery Log Page Change event).
func (t *Target) AddSubsystem(s conf.Subsystem) error {
	c := conf.Config{Listeners: t.listeners, Subsystems: []conf.Subsystem{s}, Transport: t.tr}
	if err := c.Resolve(); err != nil {
		return fmt.Errorf("target: subsystem %q: %w", s.NQN, err)
	}
	if err := t.addSubsystem(&c.Subsystems[0]); err != nil {
		return err
	}
	t.discoveryChanged()
	return nil
}

func (t *Target) addSubsystem(cs *conf.Subsystem) error {
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
	s.allowAny = cs.AllowAnyHost
	for _, h := range cs.Hosts {
		s.hosts[h] = true
	}
	t.subsystems[cs.NQN] = s
	t.order = append(t.order, s)
	t.mu.Unlock()
	for _, ns := range cs.Namespaces {
		if err := s.addNamespace(ns, false); err != nil {
			return fmt.Errorf("target: subsystem %q: %w", cs.NQN, err)
		}
	}
	t.log.Info("subsystem added", "nqn", cs.NQN, "namespaces", len(cs.Namespaces), "allow_any_host", cs.AllowAnyHost, "hosts", len(cs.Hosts))
	return nil
}

// RemoveSubsystem removes a subsystem: its controllers fail and their queues are torn
// down, its namespaces are closed once their in-flight commands finish.
func (t *Target) RemoveSubsystem(nqn string) error {
	t.mu.Lock()
	s := t.subsystems[nqn]
	if s == nil {
		t.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, nqn)
	}
	delete(t.subsystems, nqn)
	t.order = slices.DeleteFunc(t.order, func(x *subsystem) bool { return x == s })
	t.mu.Unlock()
	s.close()
	t.discoveryChanged()
	return nil
}

// SetAllowedHosts changes who may connect to a subsystem: allowAny, or the listed host
// NQNs. Existing controllers are not affected; the discovery log changes.
func (t *Target) SetAllowedHosts(nqn string, allowAny bool, hosts []string) error {
	s := t.subsystem(nqn)
	if s == nil {
		return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, nqn)
	}
	s.mu.Lock()
	s.allowAny = allowAny
	s.hosts = make(map[string]bool, len(hosts))
	for _, h := range hosts {
		s.hosts[h] = true
	}
	s.mu.Unlock()
	t.discoveryChanged()
	return nil
}

// AddNamespace adds a namespace to a subsystem at run time. Its backend is opened as New
// would; identifiers left zero are derived (conf.DeriveUUID etc). Every controller of the
// subsystem gets a Namespace Attribute Changed event (when enabled) and the NSID in its
// Changed Namespace List.
func (t *Target) AddNamespace(subNQN string, ns conf.Namespace) error {
	s := t.subsystem(subNQN)
	if s == nil {
		return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, subNQN)
	}
	if ns.NSID == 0 || ns.NSID > conf.MaxNSID {
		return fmt.Errorf("target: namespace nsid %d out of range 1..%d", ns.NSID, conf.MaxNSID)
	}
	if ns.LBASize == 0 {
		ns.LBASize = conf.DefaultLBASize
	}
	if ns.UUID == ([16]byte{}) {
		ns.UUID = conf.DeriveUUID(subNQN, ns.NSID)
	}
	if ns.NGUID == ([16]byte{}) {
		ns.NGUID = conf.DeriveNGUID(subNQN, ns.NSID)
	}
	if ns.EUI64 == ([8]byte{}) {
		ns.EUI64 = conf.DeriveEUI64(subNQN, ns.NSID)
	}
	return s.addNamespace(ns, true)
}

// RemoveNamespace removes a namespace: new commands for it fail with Invalid Namespace,
// commands in flight finish, then its backend is closed. Controllers are notified as for
// AddNamespace.
func (t *Target) RemoveNamespace(subNQN string, nsid uint32) error {
	s := t.subsystem(subNQN)
	if s == nil {
		return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, subNQN)
	}
	return s.removeNamespace(nsid)
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
// for commands in flight, and closes the namespaces' executors and backends. Ports stay
// registered but accept no new queues.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	subs := slices.Clone(t.order)
	t.subsystems = map[string]*subsystem{}
	t.order = nil
	ports := slices.Clone(t.ports)
	t.mu.Unlock()
	for _, p := range ports {
		p.closeQueues(ErrClosed)
	}
	var errs []error
	for _, s := range subs {
		if err := s.close(); err != nil {
			errs = append(errs, err)
		}
	}
	t.disc.close()
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
