// Package server turns a gonvmf configuration into a running target: the core
// (target.Target) built from the resolved configuration, and the transport endpoints that
// let hosts reach it — the RDMA transport listening on every configured listener (gonvmf
// serve), or one in-process loop port (gonvmf perf -t loop). It is the one place that does
// so; the commands and the integration tests start targets through it.
//
//	s, err := server.New(cfg, server.Options{Logger: log}) // cfg: *conf.Config, not changed
//	...
//	s.Config()                                             // what is being served, as a resolved conf.Config
//	s.Shutdown(ctx)                                        // drain the commands in flight, flush, then Close
//	s.Close()                                              // listeners, hosts, then the target
//
// # Ownership and the running configuration
//
// A Server owns the target, the transport and the listeners it creates, and closes them in
// order (Close). The configuration it runs is kept by the target (target.Target.Config),
// resolved once by target.New from a copy of the caller's; transports take their settings
// from the target and resolve nothing themselves. Changes at run time go through the
// Server or its Target and are validated by the conf package against the running
// configuration before anything changes — subsystems, namespaces and hosts by the target's
// methods (AddSubsystem, AddNamespace, SetAllowedHosts, ...), listeners by AddListener,
// ANA states by SetANAState —
// so Config always describes exactly what is served and reads back through conf.Parse.
// The Server's own operations (manage.go: the target's, plus AddListener and
// RemoveListener) are serialized with one another and with Reload, which applies a new
// configuration's difference with them (SIGHUP); the control API (package target/control)
// calls them. An ANA change's wait for the I/O commands admitted before it (SetANAState,
// SetNamespaceANAGroup) runs after the change, outside that serialization.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
	"github.com/gonvmf/gonvmf/target/rdma"
)

// Options configure a Server. The zero value serves the configuration's listeners over
// RDMA and logs to slog.Default().
type Options struct {
	// Logger receives the target's and the transport's logs (default slog.Default()).
	Logger *slog.Logger
	// Loop serves hosts in this process only: the target gets one advertised loop port
	// (TRADDR "loop", see Loop) instead of the configuration's RDMA listeners, and nothing
	// RDMA is opened.
	Loop bool
	// Target and RDMA are further options of target.New and rdma.New (tests use them for
	// backend wrappers, spin counts, ...).
	Target []target.Option
	RDMA   []rdma.Option
}

// ErrClosed is returned by operations on a closed Server.
var ErrClosed = errors.New("server: closed")

// Server is a running target and the transports that serve it. It is safe for concurrent
// use.
type Server struct {
	log  *slog.Logger
	t    *target.Target
	tr   *rdma.Transport // nil with Options.Loop
	loop *loop.Port      // Options.Loop only

	chg       sync.Mutex // serializes changes: every operation of manage.go, and Reload
	mu        sync.Mutex
	listeners []served
	stopping  bool // Shutdown has begun: Reload applies no more steps (under mu)
	closed    bool
}

// served is a listener being served and its (resolved) configuration.
type served struct {
	cfg conf.Listener
	lis *rdma.Listener
}

// New builds the target described by cfg and starts serving it: every namespace's backend
// is opened (target.New, which resolves a copy of cfg; cfg is not changed) and either every
// listener is listening (RDMA) or the loop port is registered (Options.Loop). On error
// nothing is left open.
func New(cfg *conf.Config, o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	t, err := target.New(cfg, append([]target.Option{target.WithLogger(log)}, o.Target...)...)
	if err != nil {
		return nil, err
	}
	s := &Server{log: log, t: t}
	if err := s.start(o); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// start registers the loop port, or starts the RDMA transport and listens on every
// listener of the running configuration.
func (s *Server) start(o Options) error {
	var err error
	if o.Loop {
		s.loop, err = loop.New(s.t, loop.Options{Name: "loop", Advertise: true})
		return err
	}
	if s.tr, err = rdma.New(s.t, append([]rdma.Option{rdma.WithLogger(s.log)}, o.RDMA...)...); err != nil {
		return err
	}
	for _, l := range s.t.Config().Listeners {
		if _, err := s.listen(l); err != nil {
			return err
		}
	}
	return nil
}

// listen serves the resolved listener l.
func (s *Server) listen(l conf.Listener) (*rdma.Listener, error) {
	lis, err := s.tr.Listen(l)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.listeners = append(s.listeners, served{cfg: l, lis: lis})
	s.mu.Unlock()
	return lis, nil
}

// AddListener starts serving one more listener, validated as if it had been in the
// configuration file together with the running configuration (a listener that repeats or
// overlaps one being served is an error that says so). A Server that serves in-process
// only (Options.Loop) has no listeners.
func (s *Server) AddListener(l conf.Listener) (*rdma.Listener, error) {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.addListener(l)
}

func (s *Server) addListener(l conf.Listener) (*rdma.Listener, error) {
	s.mu.Lock()
	closed := s.closed
	c := s.configLocked()
	s.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case s.tr == nil:
		return nil, errors.New("server: serving in-process (loop) only: no listeners can be added")
	}
	c.Listeners = append(c.Listeners, l)
	if err := c.Resolve(); err != nil {
		return nil, fmt.Errorf("server: listener %s port %d: %w", l.Address, l.Port, err)
	}
	lis, err := s.listen(c.Listeners[len(c.Listeners)-1])
	if err == nil {
		s.log.Info("listener added", "addr", lis.Addr())
	}
	return lis, err
}

// RemoveListener stops serving a listener (the one with l's transport, address and port;
// a zero Transport or Port means the default): it leaves the discovery log, and every
// queue connected through it is disconnected. ErrNoSuchListener when none matches.
func (s *Server) RemoveListener(l conf.Listener) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.removeListener(l)
}

// ErrNoSuchListener: RemoveListener or SetANAState of a listener that is not being served.
var ErrNoSuchListener = errors.New("server: no such listener")

func (s *Server) removeListener(l conf.Listener) error {
	if l.Transport == "" {
		l.Transport = conf.DefaultTransport
	}
	if l.Port == 0 {
		l.Port = conf.DefaultPort
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	i := slices.IndexFunc(s.listeners, func(x served) bool { return sameListener(x.cfg, l) })
	if i < 0 {
		s.mu.Unlock()
		return fmt.Errorf("%w: %s %s port %d", ErrNoSuchListener, l.Transport, l.Address, l.Port)
	}
	lis := s.listeners[i]
	s.listeners = slices.Delete(s.listeners, i, i+1)
	s.mu.Unlock()
	if err := s.tr.CloseListener(lis.lis); err != nil {
		return fmt.Errorf("server: listener %s port %d: %w: %w", l.Address, l.Port, target.ErrRemovedUnclean, err)
	}
	return nil
}

// sameListener reports whether a and b name the same listener (addresses compared as
// IP addresses, so "::0" and "::" are one).
func sameListener(a, b conf.Listener) bool {
	if a.Transport != b.Transport || a.Port != b.Port {
		return false
	}
	x, errA := netip.ParseAddr(a.Address)
	y, errB := netip.ParseAddr(b.Address)
	if errA != nil || errB != nil {
		return a.Address == b.Address
	}
	return x.Unmap() == y.Unmap()
}

// portLocked finds the target port of the listener served at addr: the listener's
// configured address and port, or the address it listens on (for port 0). Called with
// s.mu held.
func (s *Server) portLocked(addr netip.AddrPort) *target.Port {
	for _, l := range s.listeners {
		ip, err := netip.ParseAddr(l.cfg.Address)
		if err == nil && netip.AddrPortFrom(ip.Unmap(), l.cfg.Port) == netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()) ||
			l.lis.Addr() == addr {
			return l.lis.Port()
		}
	}
	return nil
}

// SetANAState sets the ANA state of group (1..conf.MaxANAGroup) on the listener served at
// listener (its address and port as configured, e.g. 10.99.0.1:4420). Hosts connected
// through it get an ANA Change event and reread the ANA log; their I/O for the
// namespaces of that group is served or refused by the new state from the next command
// on. Config shows the new state; the empty state unsets the group (optimized, as one
// never set). ErrNoSuchListener when no listener is served there.
//
// A state that serves no I/O (inaccessible, persistent-loss, change) is complete, and
// SetANAState returns, once the I/O commands to the group's namespaces that the
// listener's queues admitted before it have completed (target.Port.SetANAState): then
// another target may serve the group.
// The wait ends with ctx (or after the target's queue-close timeout when ctx has no
// deadline) with the state changed all the same and an error that is target.ErrANAInFlight
// and says which controllers still have commands executing. It runs after the change, out
// of the serialization of changes: other changes, and SetANAState of other groups, go on
// meanwhile.
func (s *Server) SetANAState(ctx context.Context, listener netip.AddrPort, group uint32, state conf.ANAState) error {
	s.chg.Lock()
	f, err := s.setANAState(listener, group, state)
	s.chg.Unlock()
	if err != nil {
		return err
	}
	return f.Wait(ctx)
}

// setANAState changes the state and returns the fence the change is complete after.
func (s *Server) setANAState(listener netip.AddrPort, group uint32, state conf.ANAState) (*target.ANAFence, error) {
	s.mu.Lock()
	closed := s.closed
	p := s.portLocked(listener)
	s.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case p == nil:
		return nil, fmt.Errorf("%w: %v (served: %s)", ErrNoSuchListener, listener, s.listenerList())
	}
	return p.ChangeANAState(group, state)
}

// listenerList names the listeners being served, for error messages.
func (s *Server) listenerList() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for _, l := range s.listeners {
		names = append(names, fmt.Sprintf("%s:%d", l.cfg.Address, l.cfg.Port))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Target returns the running target: its subsystems, namespaces and hosts can be changed
// at run time (see target.Target), and those changes show in Config.
func (s *Server) Target() *target.Target { return s.t }

// Config returns a copy of the running configuration: the target's (target.Target.Config)
// with the listeners being served (with Options.Loop, the configuration's listeners,
// which are not served). Its String is YAML that gonvmf check and gonvmf serve read back
// to the same configuration.
func (s *Server) Config() *conf.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.configLocked()
}

// SettledConfig is Config between changes: it waits for a change in progress (a reload
// opening backends, say) to end, so that what it returns was committed — never the
// middle of a reload, which may yet be undone. What gonvmf ctl save writes.
func (s *Server) SettledConfig() *conf.Config {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.Config()
}

func (s *Server) configLocked() *conf.Config {
	c := s.t.Config()
	if s.tr != nil {
		c.Listeners = c.Listeners[:0]
		for _, l := range s.listeners {
			lc := l.cfg
			lc.ANAStates = l.lis.Port().ANAStates() // as changed since (SetANAState)
			c.Listeners = append(c.Listeners, lc)
		}
	}
	return c
}

// Listeners returns the RDMA listeners being served, in the order they were added.
func (s *Server) Listeners() []*rdma.Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*rdma.Listener, len(s.listeners))
	for i, l := range s.listeners {
		out[i] = l.lis
	}
	return out
}

// Loop returns the in-process port hosts dial (Options.Loop), or nil.
func (s *Server) Loop() *loop.Port { return s.loop }

// Stats returns the RDMA transport's counters (zero with Options.Loop).
func (s *Server) Stats() rdma.Stats {
	if s.tr == nil {
		return rdma.Stats{}
	}
	return s.tr.Stats()
}

// GroupStats returns the RDMA transport's per poll group counters (none with
// Options.Loop).
func (s *Server) GroupStats() []rdma.GroupStats {
	if s.tr == nil {
		return nil
	}
	return s.tr.GroupStats()
}

// PoolStats returns the RDMA transport's buffer pools, one per device in use (none with
// Options.Loop).
func (s *Server) PoolStats() []rdma.PoolStats {
	if s.tr == nil {
		return nil
	}
	return s.tr.PoolStats()
}

// Rejects returns how many connection requests the RDMA transport rejected, by nvme-rdma
// status (none with Options.Loop).
func (s *Server) Rejects() []rdma.RejectCount {
	if s.tr == nil {
		return nil
	}
	return s.tr.Rejects()
}

// Shutdown stops serving in order, as gonvmf serve does on SIGTERM: no new connections
// and no new commands (the RDMA transport's Drain: capsules that arrive stay unanswered,
// hosts resend them after reconnecting), the commands in flight finish and get their
// responses (bounded by ctx: the ones still running then are cut off by the disconnect),
// every namespace is flushed, then Close. The flushes run concurrently, each at most the
// target's queue close timeout (see target.Target.Flush): a sync that fails fails its
// namespace, and a flush still executing in a backend that hangs is logged and left
// behind, its error wrapping target.ErrFlushUnfinished; Close then does not wait for that
// backend again. It returns the errors of every step, joined.
//
// From its start, before the drain, a Reload applies no more steps (see Reload): what the
// stop drains and flushes is not changed under it by a reload, apart from the one step a
// reload may be in the middle of then.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.stopping = true
	s.mu.Unlock()
	if closed {
		return nil
	}
	var errs []error
	if s.tr != nil {
		if err := s.tr.Drain(ctx); err != nil {
			errs = append(errs, err)
		}
	} else {
		s.t.Quiesce()
	}
	if err := s.t.Flush(); err != nil {
		s.log.Error("flushing the namespaces before shutdown failed", "err", err)
		errs = append(errs, fmt.Errorf("server: flushing before shutdown: %w", err))
	}
	errs = append(errs, s.Close())
	return errors.Join(errs...)
}

// Close stops serving: no new connections, every host disconnected and its commands
// finished, the transport's resources released, then the target closed (its namespaces'
// backends with it). It returns the first errors of each step, joined. Commands in flight
// lose their responses: Shutdown drains them first.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	var errs []error
	if s.tr != nil {
		errs = append(errs, s.tr.Close())
	}
	if s.loop != nil {
		errs = append(errs, s.loop.Close())
	}
	errs = append(errs, s.t.Close())
	return errors.Join(errs...)
}
