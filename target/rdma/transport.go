package rdma

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/ratelog"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/target"
)

// Option configures a Transport.
type Option func(*options)

type options struct {
	log   *slog.Logger
	spin  int
	msdbd int
	ring  bool
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithSpin sets how many empty polls an idle poll group makes before it sleeps on its
// completion channel (event mode; default DefaultSpin). Busy polling is the
// configuration's transport.busy_poll.
func WithSpin(polls int) Option { return func(o *options) { o.spin = polls } }

// WithAsyncIO sets whether each poll group runs the reads and writes of file and block
// namespaces opened with O_DIRECT as Linux asynchronous I/O itself (backend.Ring; the
// default), or hands them to the namespace's worker goroutines.
func WithAsyncIO(on bool) Option { return func(o *options) { o.ring = on } }

// WithMaxSGLDescriptors sets MSDBD, the keyed descriptors one command may carry in an
// in-capsule list (default target.MaxSGLDescriptors).
func WithMaxSGLDescriptors(n int) Option { return func(o *options) { o.msdbd = n } }

// DefaultSpin is how many empty polls an idle poll group makes before it arms its
// completion queue and sleeps: ~100 µs where a poll (a cgo call and an empty
// ibv_poll_cq) costs ~100 ns, a few milliseconds in an emulated guest. Long enough to
// bridge the gap between a response and the host's next command at low queue depths, so
// that the group does not sleep and get woken (a completion event, two context switches
// and the wait for a CPU) once per I/O; short enough that an idle group soon stops
// spinning. Chosen by measurement in the Soft-RoCE guest (the commit that set it has the
// numbers): 16 left 4k QD1 at half the IOPS, 4096 gained nothing over 1024. Sleeping
// part of the spin instead (a 10 µs nanosleep, which the default 50 µs timer slack
// lengthens, between polls once 64 or 256 polls found nothing) took 4k QD1 from 2,563
// to 1,402 and 1,825 IOPS (medians of 3, one guest boot) and gained no IOPS at QD32
// beyond the boot's spread; the CPU it saves is the spin's, which at 4k QD32 writes is
// most of gonvmf's user time. Linux 6.12's Soft-RoCE runs a post's packets in a
// workqueue that the spin competes with for a CPU; a shorter spin lost 4k QD1 there too
// (null, medians of 3, one boot each): 128 and 256 polls took it from 1,474 to 1,200 and
// from 1,638 to 1,340 IOPS, and went both ways at QD8 (3,463 → 4,793 and 4,885 → 4,418,
// each boot's repetitions spreading as widely); sleeping at once (0) lost every row (QD1
// 706, QD8 2,844, QD32 4,929 against 1,474, 3,463 and 6,693).
const DefaultSpin = 1024

// listenBacklog is the rdma_listen backlog of every listener.
const listenBacklog = 128

// Errors of the transport.
var (
	// ErrClosed: the transport was closed.
	ErrClosed = errors.New("rdma: transport closed")
	// ErrAddressInUse: another process (or the kernel target) listens on the address.
	ErrAddressInUse = errors.New("address already in use")
	// ErrNotRDMAAddress: the address belongs to no RDMA device.
	ErrNotRDMAAddress = errors.New("address is not on an RDMA device")
)

// Transport is the target's RDMA transport: it listens with rdma_cm, accepts queue pairs
// for a target.Target, and moves commands, data and responses for them.
type Transport struct {
	t    *target.Target // its TransportConfig sizes the pools and poll groups
	opts options
	log  *slog.Logger
	ch   *rdmacm.EventChannel

	cmCtx    context.Context
	cmCancel context.CancelFunc
	cmDone   chan struct{}

	mu        sync.Mutex
	devices   map[string]*device         // by name: the device new connections on that name use
	retired   []*device                  // removed (or replaced) devices not yet released
	lis       map[*Listener]bool         // open listeners, also those waiting for their address
	listeners map[*rdmacm.CMID]*Listener // open listeners by their bound ID
	conns     map[*rdmacm.CMID]*conn
	perAddr   map[netip.Addr]int // connections (in conns) by the host's address
	live      sync.WaitGroup     // connections not yet released
	bg        sync.WaitGroup     // relistening listeners and releasing removed devices
	quit      chan struct{}      // closed by Close: background work stops
	closed    bool
	draining  bool // Drain started: no new connections

	m transportMetrics

	refusals ratelog.Limiter // rejected connection requests: a line per address and interval
}

// Listener is one address the transport accepts connections on. When the RDMA device
// under its address is removed, the listener waits for an RDMA device to carry the
// address again (a device added back, or the address moved to another) and listens there;
// its port stays in the discovery log meanwhile.
type Listener struct {
	tr   *Transport
	addr netip.AddrPort
	port *target.Port
	// tr.mu guards the rest.
	id   *rdmacm.CMID // nil while the listener waits for its address to come back
	dev  string
	open bool
}

// Addr returns the address the listener is bound to (the port filled in when it was 0).
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Device names the RDMA device the listener is bound to ("" for a wildcard address, and
// while the listener waits for its address to be on an RDMA device again).
func (l *Listener) Device() string {
	l.tr.mu.Lock()
	defer l.tr.mu.Unlock()
	return l.dev
}

// Port returns the target port the listener serves (its discovery log entry).
func (l *Listener) Port() *target.Port { return l.port }

// New starts an RDMA transport for t, with t's transport settings (t.TransportConfig:
// buffer pool, poll groups, busy polling; in-capsule data and the largest transfer are the
// core's, so the two can never disagree). It opens the rdma_cm event channel and checks
// that the buffer pool can be locked; Listen adds listeners.
func New(t *target.Target, opts ...Option) (*Transport, error) {
	o := options{log: slog.Default(), spin: DefaultSpin, msdbd: target.MaxSGLDescriptors, ring: true}
	for _, f := range opts {
		f(&o)
	}
	pool := t.TransportConfig().BufferPoolSize
	if err := rdmacm.CheckMemlock(uint64(pool)); err != nil {
		return nil, fmt.Errorf("rdma: the %s buffer pool cannot be locked in memory: %w", pool.Human(), err)
	}
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		return nil, noDeviceError(err)
	}
	tr := &Transport{
		t: t, opts: o, log: o.log.With("component", "rdma"), ch: ch,
		cmDone:    make(chan struct{}),
		devices:   make(map[string]*device),
		lis:       make(map[*Listener]bool),
		listeners: make(map[*rdmacm.CMID]*Listener),
		quit:      make(chan struct{}),
		conns:     make(map[*rdmacm.CMID]*conn),
		perAddr:   make(map[netip.Addr]int),
	}
	tr.cmCtx, tr.cmCancel = context.WithCancel(context.Background())
	go tr.cmLoop()
	tr.bg.Add(1)
	go tr.watchDevices()
	return tr, nil
}

// noDeviceError explains a missing RDMA device.
func noDeviceError(err error) error {
	if errors.Is(err, rdmacm.ErrNoDevice) {
		return fmt.Errorf("rdma transport: %w", err) // the error says how to get a device
	}
	if errors.Is(err, rdmacm.ErrNotSupported) {
		return fmt.Errorf("rdma: %w", err)
	}
	return fmt.Errorf("rdma: opening the rdma_cm event channel: %w", err)
}

// Listen starts accepting connections on a listener of the resolved configuration (one of
// Target.Config().Listeners) and registers it with the target as a port (listed in the
// discovery log). Port 0 listens on a port the system chooses (Listener.Addr has it).
func (tr *Transport) Listen(l conf.Listener) (*Listener, error) {
	if l.Transport != "rdma" {
		return nil, fmt.Errorf("rdma: listener transport %q is not rdma", l.Transport)
	}
	ip, err := netip.ParseAddr(l.Address)
	if err != nil {
		return nil, fmt.Errorf("rdma: listener address %q: %w", l.Address, err)
	}
	ap := netip.AddrPortFrom(ip, l.Port)
	tr.mu.Lock()
	closed := tr.closed || tr.draining // shutting down: no new listeners
	tr.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	id, err := tr.ch.Listen(ap, listenBacklog)
	if err != nil {
		return nil, tr.listenError(ap, err)
	}
	lis := &Listener{tr: tr, addr: id.LocalAddr(), id: id, dev: id.DeviceName(), open: true}
	if !lis.addr.IsValid() || lis.addr.Port() == 0 {
		lis.addr = ap
	}
	if lis.dev != "" {
		// Set the device up now, so that a buffer pool that cannot be locked is an
		// error at start-up rather than a rejected host later.
		if err := tr.setUp(id); err != nil {
			id.Close()
			return nil, fmt.Errorf("rdma: listener %v on %s: %w", ap, lis.dev, err)
		}
	}
	adrfam := uint8(target.AdrFamIPv4)
	if ip.Is6() && !ip.Is4In6() {
		adrfam = target.AdrFamIPv6
	}
	tp, err := tr.t.AddPort(target.PortConfig{
		TrType: target.TrTypeRDMA, AdrFam: adrfam,
		TrAddr: ip.WithZone("").String(), TrSvcID: strconv.Itoa(int(lis.addr.Port())),
		Advertise: true, Keyed: true, InCapsuleDataSize: tr.t.TransportConfig().InCapsuleDataSize, MaxSGLDescriptors: tr.opts.msdbd,
		RDMAQPType: 1, RDMAProviderType: 1, RDMACMS: 1,
		ANAStates: l.ANAStates,
	})
	if err != nil {
		id.Close()
		return nil, fmt.Errorf("rdma: listener %v: %w", ap, err)
	}
	lis.port = tp
	tr.mu.Lock()
	if tr.closed {
		tr.mu.Unlock()
		id.Close()
		tp.Close()
		return nil, ErrClosed
	}
	tr.listeners[id] = lis
	tr.lis[lis] = true
	tr.mu.Unlock()
	tr.log.Debug("listening", "addr", lis.addr, "device", id.DeviceName(), "port_id", tp.ID())
	return lis, nil
}

// listenError explains a failed bind or listen.
func (tr *Transport) listenError(ap netip.AddrPort, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("rdma: listener %v: %w: another gonvmf or the kernel target (nvmet-rdma) listens there; stop it or choose another port: %v",
			ap, ErrAddressInUse, err)
	case errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("rdma: listener %v: %w (%s); give an address of one of those, or add an RDMA link on the interface "+
			"that has it: `rdma link add rxe0 type rxe netdev IF`: %v", ap, ErrNotRDMAAddress, describeDevices(), err)
	}
	return fmt.Errorf("rdma: listener %v: %w", ap, err)
}

// describeDevices lists the RDMA devices and their addresses, for error messages.
func describeDevices() string {
	devs, err := rdmacm.Devices()
	if err != nil || len(devs) == 0 {
		return "this machine has no RDMA device"
	}
	var parts []string
	for _, d := range devs {
		var as []string
		for _, a := range d.Addrs() {
			as = append(as, a.String())
		}
		if len(as) == 0 {
			parts = append(parts, d.Name+" (no address)")
		} else {
			parts = append(parts, d.Name+" ("+strings.Join(as, ", ")+")")
		}
	}
	return "RDMA devices: " + strings.Join(parts, "; ")
}

// Drain is the first step of an orderly shutdown: it stops listening (new connection
// requests are rejected), stops starting commands — capsules that arrive stay in their
// receive buffers unanswered, so hosts resend them after they reconnect, to this target
// once it is back or to another path — and waits until every command already begun has
// completed and its response was sent, or until ctx is done. It then returns, leaving
// every host connected: flush the target (target.Target.Flush) and Close the transport.
// The target is told (target.Target.Quiesce), so keep-alive does not fail controllers
// whose hosts now look silent. A Drain that ran out of time returns an error saying how
// many commands were still in flight; Close then disconnects their queues, and their
// responses are lost.
func (tr *Transport) Drain(ctx context.Context) error {
	tr.mu.Lock()
	if tr.closed {
		tr.mu.Unlock()
		return ErrClosed
	}
	tr.draining = true
	ids := make([]*rdmacm.CMID, 0, len(tr.listeners))
	for id := range tr.listeners {
		ids = append(ids, id)
	}
	devs := tr.allDevices()
	tr.mu.Unlock()
	for _, id := range ids {
		id.Close() // Close closes it again: a no-op
	}
	tr.t.Quiesce()
	var groups []*group
	for _, d := range devs {
		groups = append(groups, d.groups...)
	}
	return drainGroups(ctx, groups, tr.log)
}

// drainGroups quiesces the groups and waits until none owes a response (or ctx is done).
func drainGroups(ctx context.Context, groups []*group, log *slog.Logger) error {
	for _, g := range groups {
		g.quiesce.Store(true)
		g.kick()
	}
	start := time.Now()
	first := -1
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		busy, counted := 0, true
		for _, g := range groups {
			if n := g.busy.Load(); n < 0 || !g.counted.Load() {
				counted = false
			} else {
				busy += int(n)
			}
		}
		if counted {
			if first < 0 {
				first = busy
				log.Info("draining: no new connections or commands; waiting for the commands in flight", "commands", busy)
			}
			if busy == 0 {
				log.Info("drained: every command begun has completed and been answered", "commands", first, "took", time.Since(start).Round(time.Millisecond))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if !counted {
				busy = -1
			}
			log.Warn("drain ended with commands still in flight: their queues are disconnected without their responses",
				"commands", busy, "took", time.Since(start).Round(time.Millisecond))
			return fmt.Errorf("rdma: drain: %d commands still in flight: %w", busy, ctx.Err())
		case <-tick.C:
		}
	}
}

// Close stops listening, disconnects every host, waits (bounded) for their queues to be
// torn down and releases every RDMA resource. Memory a request may still touch — a
// connection not yet released, a pool buffer not yet given back (a backend call that
// never returned) — is never unmapped: then the device and its memory are left for the
// process's exit, and Close says so. The target itself stays open.
func (tr *Transport) Close() error {
	tr.mu.Lock()
	if tr.closed {
		tr.mu.Unlock()
		return nil
	}
	tr.closed = true
	close(tr.quit)
	var lis []*Listener
	var ids []*rdmacm.CMID
	for l := range tr.lis {
		lis = append(lis, l)
		ids = append(ids, l.id) // nil while waiting: Close is a no-op
	}
	var conns []*conn
	for _, c := range tr.conns {
		conns = append(conns, c)
	}
	tr.mu.Unlock()
	for i, l := range lis {
		ids[i].Close()
		l.port.Close() // disconnects the port's queues
	}
	for _, c := range conns {
		c.requestClose(target.ErrClosed)
	}
	done := make(chan struct{})
	go func() { tr.live.Wait(); close(done) }()
	open := 0
	select {
	case <-done:
	case <-time.After(closeWait):
		tr.mu.Lock()
		open = len(tr.conns)
		tr.mu.Unlock()
		tr.log.Error("connections still open after the transport started closing: their memory stays mapped",
			"connections", open, "waited", closeWait)
	}
	tr.bg.Wait() // relistening, device watching and releasing removed devices have ended
	tr.mu.Lock()
	devs := tr.allDevices()
	for _, d := range devs {
		d.closing = true
	}
	tr.mu.Unlock()
	var errs []error
	for _, d := range devs {
		errs = append(errs, d.close(open))
	}
	tr.cmCancel()
	errs = append(errs, tr.ch.Close())
	<-tr.cmDone
	return errors.Join(errs...)
}

// CloseListener stops accepting connections on l and takes it out of the discovery log;
// every queue that connected through it is disconnected. The transport and its other
// listeners keep running.
func (tr *Transport) CloseListener(l *Listener) error {
	tr.mu.Lock()
	if !tr.lis[l] {
		tr.mu.Unlock()
		return fmt.Errorf("rdma: listener %v is not open", l.addr)
	}
	delete(tr.lis, l)
	l.open = false
	id := l.id
	if id != nil {
		delete(tr.listeners, id)
	}
	tr.mu.Unlock()
	err := id.Close()
	l.port.Close() // disconnects the port's queues
	tr.log.Info("listener closed", "addr", l.addr, "port_id", l.port.ID())
	if err != nil {
		return fmt.Errorf("rdma: closing listener %v: %w", l.addr, err)
	}
	return nil
}

// Stats are counters of the transport, for logs and tests.
type Stats struct {
	Connections     int // queue pairs connected now
	PoolFreeBytes   int // free bytes in the buffer pools
	PoolTotalBytes  int
	PoolLowestBytes int // the least free since start
	BufferWaits     uint64
	ReadWaits       uint64
	SendWaits       uint64
	Completions     uint64
	Polls           uint64 // Poll calls of the poll groups
	Sleeps          uint64 // times a poll group slept on its completion channel
	Wakeups         uint64 // sleeps ended by a completion event (the rest: a wake-up or a timeout)
	SharedRecvBufs  int    // receive buffers of the poll groups' shared receive queues
	QueueMemSlabs   int    // registered slabs of connections' queue memory (kept for reuse)
	QueueMemPages   int    // pages of them that connections hold now
	AIOFallbacks    uint64 // reads and writes the rings handed to workers: EAGAIN under RWF_NOWAIT, or refused by io_submit
}

// Stats returns the transport's counters summed over devices and poll groups.
func (tr *Transport) Stats() Stats {
	var s Stats
	tr.mu.Lock()
	s.Connections = len(tr.conns)
	devs := tr.allDevices()
	tr.mu.Unlock()
	for _, d := range devs {
		free, total, low := d.pool.stats()
		s.PoolFreeBytes += free * pageSize
		s.PoolTotalBytes += total * pageSize
		s.PoolLowestBytes += low * pageSize
		slabs, used := d.qmem.stats()
		s.QueueMemSlabs += slabs
		s.QueueMemPages += used
		for _, g := range d.groups {
			s.BufferWaits += g.stats.bufWaits.Load()
			s.ReadWaits += g.stats.readWaits.Load()
			s.SendWaits += g.stats.sendWaits.Load()
			s.Completions += g.stats.completions.Load()
			s.Sleeps += g.stats.sleeps.Load()
			s.Polls += g.stats.polls.Load()
			s.Wakeups += g.stats.wakeups.Load()
			if g.srq != nil {
				s.SharedRecvBufs += int(g.srq.slots.Load())
			}
			if g.ring != nil {
				s.AIOFallbacks += g.ring.Fallbacks()
			}
		}
	}
	return s
}

// GroupStats are one poll group's counters and load. The poll group counts into its own
// memory; GroupStats reads the counters (atomically, one by one) when called, so a
// metrics collector that sums them at scrape time costs the I/O path nothing.
type GroupStats struct {
	Device      string // RDMA device
	Group       int    // poll group index on the device
	Connections int    // queue pairs it serves now
	Polls       uint64 // completion queue polls
	IdlePolls   uint64 // polling rounds that found nothing to do
	Completions uint64 // work completions processed
	Sleeps      uint64 // times it slept on its completion channel
	Wakeups     uint64 // sleeps ended by a completion event
	BufferWaits uint64 // commands that waited for buffer pool memory
	ReadWaits   uint64 // commands that waited for RDMA READ credits
	SendWaits   uint64 // responses that waited for send queue room
	// Queues the watchdog tore down: responses without progress for
	// limits.response_timeout, or a stall while over the queue's share of the pool when
	// others waited (share reclaim).
	ResponseTimeouts, ShareReclaims uint64
	// Probes counts the zero-length RDMA WRITEs the watchdog posted behind a quiet
	// queue's unsignaled responses (watchdog.go).
	Probes uint64
}

// PoolStats describe one device's registered buffer pool.
type PoolStats struct {
	Device      string
	TotalBytes  int
	FreeBytes   int
	LowestBytes int // the least free since the device was set up
	// ClosedHeldBytes are held by I/O queues whose queue pairs are gone: commands stuck
	// in a backend. They are out of the live queues' fair shares (share.go).
	ClosedHeldBytes int
}

// GroupStats returns the counters of every poll group, by device and group.
func (tr *Transport) GroupStats() []GroupStats {
	var out []GroupStats
	for _, d := range tr.devicesByName() {
		for _, g := range d.groups {
			out = append(out, GroupStats{
				Device: d.name, Group: g.id, Connections: int(g.nconns.Load()),
				Polls: g.stats.polls.Load(), IdlePolls: g.m.idlePolls.Load(), Completions: g.stats.completions.Load(),
				Sleeps: g.stats.sleeps.Load(), Wakeups: g.stats.wakeups.Load(),
				BufferWaits: g.stats.bufWaits.Load(), ReadWaits: g.stats.readWaits.Load(), SendWaits: g.stats.sendWaits.Load(),
				ResponseTimeouts: g.m.responseTimeouts.Load(), ShareReclaims: g.m.shareReclaims.Load(), Probes: g.m.probes.Load(),
			})
		}
	}
	return out
}

// PoolStats returns the buffer pool of every device set up so far, by device name.
func (tr *Transport) PoolStats() []PoolStats {
	var out []PoolStats
	for _, d := range tr.devicesByName() {
		free, total, low := d.pool.stats()
		out = append(out, PoolStats{Device: d.name, TotalBytes: total * pageSize, FreeBytes: free * pageSize, LowestBytes: low * pageSize,
			ClosedHeldBytes: int(d.pool.closedHeld.Load()) * pageSize})
	}
	return out
}

func (tr *Transport) devicesByName() []*device {
	tr.mu.Lock()
	devs := make([]*device, 0, len(tr.devices))
	for _, d := range tr.devices { // a retired device may share its name with a new one
		devs = append(devs, d)
	}
	tr.mu.Unlock()
	slices.SortFunc(devs, func(a, b *device) int { return strings.Compare(a.name, b.name) })
	return devs
}

// ---- devices ----

// device is the per-RDMA-device state: protection domain, buffer pool and poll groups.
type device struct {
	name   string
	dev    *rdmacm.Device
	pd     *rdmacm.PD
	attr   rdmacm.DeviceAttr
	maxMsg int
	arena  *rdmacm.Arena
	qmem   *qmem // connections' own queue memory
	pool   *pool
	groups []*group
	cqs    []*rdmacm.CQ
	srqs   []*rdmacm.SRQ // per poll group (transport.shared_receive_queue > 0)
	// release frees the buffer pool's memory, the protection domain (and with it every
	// connection's memory) and the device; tests replace it to see whether it is called.
	release func() error

	mu   sync.Mutex
	next int

	// tr.mu guards these.
	users   int  // connections on the device, and connection requests being set up on it
	retired bool // removed, or replaced by a device of the same name: no new connections
	closing bool // being closed: by the transport's Close, or once retired and unused
}

// closeWait bounds how long Close waits for connections to be released; groupStopWait how
// long a device's close waits for each poll group to stop. Variables for tests.
var (
	closeWait     = 30 * time.Second
	groupStopWait = 5 * time.Second
)

// maxCQE bounds each poll group's completion queue.
const maxCQE = 32768

// holdDevice returns the state of the device id is bound to, setting it up on first
// use, and counts a user of it, for putDevice. A device of the same name whose context
// is not id's was removed (and another added under its name): it is retired, and a new
// one set up.
func (tr *Transport) holdDevice(id *rdmacm.CMID) (*device, error) {
	name := id.DeviceName()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	d := tr.devices[name]
	if d != nil && !id.OnDevice(d.dev) {
		tr.log.Warn("RDMA device replaced: a device of the same name was removed and added again", "device", name)
		tr.retire(d)
		d = nil
	}
	if d == nil {
		if tr.closed {
			return nil, ErrClosed
		}
		var err error
		if d, err = tr.openDevice(name); err != nil {
			return nil, err
		}
		tr.devices[name] = d
	}
	d.users++
	return d, nil
}

// setUp sets up the device id is bound to, if it is not yet.
func (tr *Transport) setUp(id *rdmacm.CMID) error {
	d, err := tr.holdDevice(id)
	if err == nil {
		tr.putDevice(d)
	}
	return err
}

// putDevice ends a use holdDevice counted; the last use of a retired device releases it.
func (tr *Transport) putDevice(d *device) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if d.users--; d.users == 0 && d.retired {
		tr.releaseRetired(d)
	}
}

// deviceRemoved retires the device id was bound to, which rdma_cm said was removed.
func (tr *Transport) deviceRemoved(id *rdmacm.CMID) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, d := range tr.devices {
		if id.OnDevice(d.dev) {
			tr.retireRemoved(d)
			return
		}
	}
}

// retireRemoved retires d, which was removed. Called with tr.mu held.
func (tr *Transport) retireRemoved(d *device) {
	tr.log.Error("RDMA device removed: its connections are closed, and its memory released once they are",
		"device", d.name, "connections", d.users)
	tr.retire(d)
}

// deviceCheckEvery is how often the transport looks for devices removed without an
// rdma_cm event to say so (one without connections or listeners bound to it: a wildcard
// listener's), and has librdmacm look at the device list. Variable for tests.
var deviceCheckEvery = 2 * time.Second

// watchDevices, until Close, retires the devices that leave the system's device list and
// has librdmacm look at the list (rdmacm.Rescan): librdmacm holds a context on every
// device it has listed — also devices the transport never used — and closes that of a
// removed one, which the kernel's removal of a Soft-RoCE device waits for, only at such
// a look.
func (tr *Transport) watchDevices() {
	defer tr.bg.Done()
	tick := time.NewTicker(deviceCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-tr.quit:
			return
		case <-tick.C:
		}
		rdmacm.Rescan()
		tr.mu.Lock()
		devs := make([]*device, 0, len(tr.devices))
		for _, d := range tr.devices {
			devs = append(devs, d)
		}
		tr.mu.Unlock()
		for _, d := range devs {
			if !d.dev.Removed() {
				continue
			}
			tr.mu.Lock()
			if tr.devices[d.name] == d {
				tr.retireRemoved(d)
			}
			tr.mu.Unlock()
		}
	}
}

// retire takes d out of use: new connections on its name set up a new device, and d is
// released once nothing uses it — which lets the kernel finish removing it. Called with
// tr.mu held.
func (tr *Transport) retire(d *device) {
	if d.retired {
		return
	}
	d.retired = true
	if tr.devices[d.name] == d {
		delete(tr.devices, d.name)
	}
	tr.retired = append(tr.retired, d)
	if d.users == 0 {
		tr.releaseRetired(d)
	}
}

// releaseRetired closes the unused retired device d in the background, unless the
// transport's Close does. Called with tr.mu held.
func (tr *Transport) releaseRetired(d *device) {
	if d.closing || tr.closed {
		return
	}
	d.closing = true
	tr.bg.Add(1)
	go func() {
		defer tr.bg.Done()
		err := d.close(0)
		tr.mu.Lock()
		tr.retired = slices.DeleteFunc(tr.retired, func(r *device) bool { return r == d })
		tr.mu.Unlock()
		if err != nil {
			tr.log.Error("releasing a removed RDMA device", "device", d.name, "err", err)
			return
		}
		tr.log.Info("removed RDMA device released", "device", d.name)
		if rdmacm.Rescan() == 0 {
			tr.log.Warn("no RDMA device left: librdmacm cannot close the context of the last device removed "+
				"(it looks at the device list only when one is listed), so the kernel completes its removal "+
				"when an RDMA device is added or gonvmf stops", "device", d.name)
		}
	}()
}

// allDevices returns the devices not yet being closed, retired ones included. Called
// with tr.mu held.
func (tr *Transport) allDevices() []*device {
	devs := make([]*device, 0, len(tr.devices)+len(tr.retired))
	for _, d := range tr.devices {
		devs = append(devs, d)
	}
	for _, d := range tr.retired {
		if !d.closing {
			devs = append(devs, d)
		}
	}
	return devs
}

func (tr *Transport) openDevice(name string) (d *device, err error) {
	d = &device{name: name}
	d.release = func() error { return errors.Join(d.qmem.close(), d.arena.Close(), d.pd.Close(), d.dev.Close()) }
	defer func() {
		if err != nil {
			d.close(0)
		}
	}()
	if d.dev, err = rdmacm.OpenDevice(name); err != nil {
		return nil, err
	}
	if d.attr, err = d.dev.Query(); err != nil {
		return nil, err
	}
	d.maxMsg = 1 << 30
	if pa, err := d.dev.QueryPort(1); err == nil && pa.MaxMsgSize > 0 {
		d.maxMsg = int(min(pa.MaxMsgSize, 1<<30))
	}
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return nil, err
	}
	d.qmem = newQmem(d.pd)
	tc := tr.t.TransportConfig()
	if d.arena, err = d.pd.NewArena(int(tc.BufferPoolSize), 0); err != nil {
		return nil, fmt.Errorf("buffer pool of %s: %w", tc.BufferPoolSize.Human(), err)
	}
	reg := region{mem: d.arena.Bytes(), base: d.arena.Addr(0), lkey: d.arena.LKey()}
	if d.pool, err = newPool(reg, tr.t.MaxTransferSize()); err != nil {
		return nil, err
	}
	n := tc.NumPollGroups()
	cqe := maxCQE
	if d.attr.MaxCQE > 0 {
		cqe = min(cqe, d.attr.MaxCQE)
	}
	d.srqs = make([]*rdmacm.SRQ, n)
	for i := range n {
		cq, err := d.dev.NewCQ(cqe)
		if err != nil {
			return nil, fmt.Errorf("completion queue of poll group %d: %w", i, err)
		}
		d.cqs = append(d.cqs, cq)
		g := newGroup(i, d.pool, &threadCQ{CQ: cq}, groupConfig{busyPoll: tc.BusyPoll, spin: tr.opts.spin, cqeCap: cq.Entries(),
			respTimeout: tr.t.Limits().ResponseTimeout}, tr.log.With("device", name))
		g.m.shard = int(tr.m.groups.Add(1) - 1)
		if tc.SharedReceiveQueue > 0 {
			if err := d.addSRQ(g, tc.SharedReceiveQueue, tc.InCapsuleDataSize); err != nil {
				tr.log.Warn("no shared receive queue for the poll group: its I/O queues get their own receive buffers",
					"device", name, "poll_group", i, "err", err)
			}
		}
		if tr.opts.ring {
			rg, err := backend.NewRing(ringDepth, cq.WakeFD())
			if err != nil {
				tr.log.Warn("no asynchronous I/O for the poll group: file and block namespaces use worker goroutines",
					"device", name, "poll_group", i, "err", err)
			} else {
				g.ring = rg
			}
		}
		d.groups = append(d.groups, g)
		g.start()
	}
	tr.log.Info("RDMA device ready", "device", name, "buffer_pool", tc.BufferPoolSize.Human(),
		"poll_groups", n, "busy_poll", tc.BusyPoll, "cq_entries", cqe, "shared_receive_queue", tc.SharedReceiveQueue,
		"max_qp_wr", d.attr.MaxQPWR, "max_qp_init_rd_atom", d.attr.MaxQPInitRdAtom, "max_msg", d.maxMsg)
	return d, nil
}

// addSRQ gives poll group g a shared receive queue for its I/O queues: at most limit
// buffers of icd bytes of in-capsule data each, registered as connections need them.
func (d *device) addSRQ(g *group, limit, icd int) error {
	if d.attr.MaxSRQ == 0 {
		return errors.New("the device has no shared receive queues")
	}
	if d.attr.MaxSRQWR > 0 {
		limit = min(limit, d.attr.MaxSRQWR)
	}
	sge := 1
	if icd > 0 {
		sge = 2
	}
	srq, err := d.pd.NewSRQ(limit, sge)
	if err != nil {
		return err
	}
	d.srqs[g.id] = srq
	if srq.MaxWR() > 0 { // what the device made of limit: at least limit, or it says
		limit = min(limit, srq.MaxWR())
	}
	g.srq = newSharedRecv(srq, icd, limit, func(n int) (region, func() error, error) {
		a, err := d.pd.NewArena(n, 0)
		if err != nil {
			return region{}, nil, err
		}
		return region{mem: a.Bytes(), base: a.Addr(0), lkey: a.LKey()}, a.Close, nil
	})
	return nil
}

// ringDepth is how many reads and writes a poll group keeps in flight as asynchronous
// I/O; beyond that they go to the namespace's worker goroutines.
const ringDepth = 256

// pickGroup returns the poll group with the fewest connections that has room, or nil.
func (d *device) pickGroup(cqe int) *group {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	return pickFrom(d.groups, cqe, d.next)
}

// pickFrom returns the group of gs with the fewest connections that has room for cqe
// completion queue entries (ties go to the first from start on), or nil.
func pickFrom(gs []*group, cqe, start int) *group {
	var best *group
	bestN := 0
	for i := range gs {
		g := gs[(start+i)%len(gs)]
		fits, n := g.room(cqe)
		if fits && (best == nil || n < bestN) {
			best, bestN = g, n
		}
	}
	return best
}

// close stops the poll groups and releases the device's resources — unless memory of it
// may still be in use: connsOpen connections of the transport were not released (their
// memory belongs to the protection domain), or pool buffers are still held (by a
// request a backend worker or an asynchronous I/O may still write into, or the device
// read from). Then nothing is unmapped: the memory is left to the process's exit, and
// the error says why (unmapping it would turn that late write into a crash).
func (d *device) close(connsOpen int) error {
	for _, g := range d.groups {
		g.start() // groups start with their device; this keeps close from waiting on one that never ran
		g.stop()
	}
	var errs []error
	running := 0
	for _, g := range d.groups {
		select {
		case <-g.stopped:
			if g.ring != nil {
				errs = append(errs, g.ring.Close())
			}
		case <-time.After(groupStopWait):
			// Still running: its ring (if any) stays open rather than be pulled from under it.
			running++
		}
	}
	held := 0
	if d.pool != nil {
		free, total, _ := d.pool.stats()
		held = total - free
	}
	if connsOpen > 0 || held > 0 || running > 0 {
		return errors.Join(append(errs, fmt.Errorf("rdma: device %s: not releasing its memory: %d connections open, "+
			"%d buffer pool bytes held by requests that have not completed, %d poll groups running; "+
			"it is freed when the process exits", d.name, connsOpen, held*pageSize, running))...)
	}
	for i, srq := range d.srqs { // their QPs are gone: the connections are
		if srq == nil {
			continue
		}
		errs = append(errs, srq.Close())
		if i < len(d.groups) && d.groups[i].srq != nil {
			errs = append(errs, d.groups[i].srq.close())
		}
	}
	for _, cq := range d.cqs {
		errs = append(errs, cq.Close())
	}
	if d.release != nil {
		errs = append(errs, d.release())
	}
	return errors.Join(errs...)
}

// ---- connection manager ----

func (tr *Transport) cmLoop() {
	defer close(tr.cmDone)
	for {
		ev, err := tr.ch.GetEvent(tr.cmCtx)
		if err != nil {
			if errors.Is(err, rdmacm.ErrClosed) || tr.cmCtx.Err() != nil {
				return
			}
			tr.log.Error("reading rdma_cm events", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		tr.handleEvent(ev)
	}
}

func (tr *Transport) handleEvent(ev *rdmacm.Event) {
	if ev.Type == rdmacm.EventConnectRequest {
		tr.onConnectRequest(ev)
		return
	}
	tr.mu.Lock()
	c := tr.conns[ev.ID]
	lis := tr.listeners[ev.ID]
	tr.mu.Unlock()
	switch {
	case c != nil:
		switch ev.Type {
		case rdmacm.EventEstablished:
			c.log.Debug("queue pair established", "qid", c.cfg.qid)
		case rdmacm.EventDisconnected:
			c.requestClose(errHostDisconnect)
		case rdmacm.EventRejected, rdmacm.EventConnectError, rdmacm.EventUnreachable:
			c.log.Warn("connection failed after accept", "event", ev.Type.String(), "status", ev.Status)
			c.requestClose(fmt.Errorf("rdma: %v (status %d)", ev.Type, ev.Status))
		case rdmacm.EventDeviceRemoval:
			tr.deviceRemoved(ev.ID)
			c.requestClose(errors.New("rdma: device removed"))
		case rdmacm.EventTimewaitExit, rdmacm.EventAddrChange:
		default:
			c.log.Debug("rdma_cm event", "event", ev.Type.String(), "status", ev.Status)
		}
	case lis != nil:
		if ev.Type == rdmacm.EventDeviceRemoval {
			tr.listenerLost(lis, ev.ID)
		} else {
			tr.log.Debug("rdma_cm listener event", "addr", lis.addr, "event", ev.Type.String(), "status", ev.Status)
		}
	default:
		tr.log.Debug("rdma_cm event for an unknown id", "event", ev.Type.String(), "status", ev.Status)
	}
}

// Relistening: how long a listener whose device was removed waits before it first tries
// its address again, and at most between tries. Variables for tests.
var (
	relistenFirst = 250 * time.Millisecond
	relistenMax   = 5 * time.Second
)

// listenerLost handles the removal of the device under listener l (bound as id): rdma_cm
// has closed the kernel's side of id; the listener waits for its address to be on an
// RDMA device again and listens there.
func (tr *Transport) listenerLost(l *Listener, id *rdmacm.CMID) {
	tr.mu.Lock()
	if l.id != id {
		tr.mu.Unlock()
		return
	}
	delete(tr.listeners, id)
	l.id = nil
	dev := l.dev
	l.dev = ""
	run := l.open && !tr.closed && !tr.draining
	if run {
		tr.bg.Add(1)
	}
	tr.mu.Unlock()
	tr.deviceRemoved(id)
	id.Close() // its device reference goes with it
	if !run {
		return
	}
	tr.log.Error("the listener's RDMA device was removed: listening again once an RDMA device has the address",
		"addr", l.addr, "device", dev)
	go func() {
		defer tr.bg.Done()
		tr.relisten(l)
	}()
}

// relisten listens on l's address again once it can, backing off between tries, until it
// does or the listener or the transport closes.
func (tr *Transport) relisten(l *Listener) {
	wait, tries := relistenFirst, 0
	var lastErr error
	for {
		select {
		case <-tr.quit:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, relistenMax)
		tr.mu.Lock()
		stop := !l.open || tr.closed || tr.draining
		tr.mu.Unlock()
		if stop {
			return
		}
		tries++
		id, err := tr.ch.Listen(l.addr, listenBacklog)
		if err != nil {
			if lastErr == nil || err.Error() != lastErr.Error() { // each new reason once
				tr.log.Warn("cannot listen again yet", "addr", l.addr, "tries", tries, "err", err)
			}
			lastErr = err
			continue
		}
		// Registered at once, so that its connection requests and events find it.
		dev := id.DeviceName()
		tr.mu.Lock()
		if !l.open || tr.closed || tr.draining {
			tr.mu.Unlock()
			id.Close()
			return
		}
		l.id, l.dev = id, dev
		tr.listeners[id] = l
		tr.mu.Unlock()
		tr.log.Info("listening again", "addr", l.addr, "device", dev, "tries", tries)
		if dev != "" {
			if err := tr.setUp(id); err != nil { // the first connection tries again
				tr.log.Warn("cannot set up the RDMA device of a listener", "addr", l.addr, "device", dev, "err", err)
			}
		}
		return
	}
}

// qpEndpoint is a connection's real queue pair.
type qpEndpoint struct {
	id *rdmacm.CMID
	qp *rdmacm.QP
}

func (e *qpEndpoint) PostSend(wrs []rdmacm.SendWR) error { return e.qp.PostSend(wrs) }
func (e *qpEndpoint) PostRecv(wrs []rdmacm.RecvWR) error { return e.qp.PostRecv(wrs) }
func (e *qpEndpoint) Post(recvs []rdmacm.RecvWR, sends []rdmacm.SendWR) error {
	return e.qp.Post(recvs, sends)
}
func (e *qpEndpoint) Disconnect() error { return e.id.Disconnect() }
func (e *qpEndpoint) Destroy() error    { return e.qp.Close() }

// onConnectRequest checks a host's connection request and accepts or rejects it.
func (tr *Transport) onConnectRequest(ev *rdmacm.Event) {
	id := ev.ID
	remote := id.RemoteAddr()
	tr.mu.Lock()
	lis := tr.listeners[ev.Listener]
	closed := tr.closed || tr.draining // shutting down: no new connections
	rj := tr.admit(remote.Addr())
	tr.mu.Unlock()
	if lis == nil || closed {
		tr.rejectConn(id, remote, reject(nvmeproto.RDMARejectNoResources, "the listener is closing"), nil)
		return
	}
	if rj != nil {
		tr.rejectConn(id, remote, rj, ev)
		return
	}
	lim := lis.port.Limits()
	dev, err := tr.holdDevice(id)
	if err != nil {
		tr.log.Error("cannot set up the RDMA device for a connection", "device", id.DeviceName(), "err", err)
		tr.rejectConn(id, remote, reject(nvmeproto.RDMARejectNoResources, "device %s: %v", id.DeviceName(), err), nil)
		return
	}
	accepted := false
	defer func() {
		if !accepted { // an accepted connection's use ends when it is released
			tr.putDevice(dev)
		}
	}()
	p, rej := checkConnReq(ev.Param.PrivateData, int(ev.Param.InitiatorDepth), connLimits{
		maxIOQueues: lim.MaxIOQueues, adminDepth: lim.AdminQueueDepth, maxDepth: lim.MaxQueueDepth,
		deviceMaxIRD: dev.attr.MaxQPInitRdAtom, deviceMaxWR: dev.attr.MaxQPWR,
	})
	if rej != nil {
		tr.rejectConn(id, remote, rej, ev)
		return
	}
	cfg := connConfig{
		qid: p.req.QID, depth: p.depth, ird: p.ird, sqSize: sqDepth(p.depth),
		maxMsg: dev.maxMsg, admin: p.req.QID == 0, remote: remote.String(),
		sendInv: dev.attr.MemMgtExtensions(),
	}
	if dev.attr.MaxQPWR > 0 {
		cfg.sqSize = min(cfg.sqSize, dev.attr.MaxQPWR)
	}
	if !cfg.admin {
		cfg.icd = lim.InCapsuleDataSize
		cfg.window = tr.t.Limits().MaxQueueDataInFlight
	}
	log := tr.log.With("remote", remote.String(), "qid", p.req.QID)
	if err := tr.accept(ev, lis, dev, p, cfg, log); err != nil {
		var rj *rejectError
		if !errors.As(err, &rj) {
			rj = reject(nvmeproto.RDMARejectNoResources, "%v", err)
		}
		tr.rejectConn(id, remote, rj, ev)
		return
	}
	accepted = true
}

// accept creates the connection's queue pair and memory and accepts it. On error
// everything it created is released (the caller rejects and destroys the ID).
func (tr *Transport) accept(ev *rdmacm.Event, lis *Listener, dev *device, p connParams, cfg connConfig, log *slog.Logger) (err error) {
	id := ev.ID
	// What has been set up so far; on error it is released in reverse order. Until the
	// connection is published to its poll group nothing else refers to any of it.
	var (
		g   *group
		c   *conn
		mem *qmemBlock
		qp  *rdmacm.QP
		q   *target.Queue
	)
	defer func() {
		if err == nil {
			return
		}
		if q != nil {
			q.Close()
		}
		if qp != nil {
			qp.Close()
		}
		if c != nil {
			g.detach(c)
		}
		if mem != nil {
			mem.release()
		}
	}()
	if g = dev.pickGroup(cfg.depth + cfg.sqSize); g == nil {
		return reject(nvmeproto.RDMARejectNoResources, "every poll group's completion queue is full (%d groups)", len(dev.groups))
	}
	// I/O queues take their receive buffers from the group's shared receive queue, if it
	// has one for their in-capsule data size.
	cfg.srq = !cfg.admin && g.srq != nil && g.srq.icd == cfg.icd
	if cfg.srq {
		if err := g.srq.reserve(cfg.depth); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				g.srq.unreserve(cfg.depth)
			}
		}()
	}
	lay := layoutFor(&cfg)
	if mem, err = dev.qmem.alloc(lay.size); err != nil {
		return fmt.Errorf("queue memory of %d bytes: %w", lay.size, err)
	}
	ep := &qpEndpoint{id: id}
	nc := newConn(cfg, mem.region, ep, dev.pool, log)
	if err := g.attach(nc); err != nil {
		return reject(nvmeproto.RDMARejectNoResources, "%v", err)
	}
	c = nc
	recvSGE := 1
	if cfg.icd > 0 {
		recvSGE = 2
	}
	qc := rdmacm.QPConfig{
		SendCQ: dev.cqs[g.id], RecvCQ: dev.cqs[g.id],
		MaxSendWR: cfg.sqSize, MaxRecvWR: cfg.depth, MaxSendSGE: 1, MaxRecvSGE: recvSGE,
		MaxInlineData: nvmeproto.CQESize,
	}
	if cfg.srq {
		qc.SRQ = dev.srqs[g.id]
	}
	if qp, err = id.CreateQP(dev.pd, qc); err != nil {
		return err
	}
	ep.qp = qp
	c.qpn = qp.Num()
	if q, err = lis.port.NewQueue(c, cfg.depth); err != nil {
		return err
	}
	c.q = q
	q.SetRing(g.ring)
	q.SetCounterShard(g.m.shard)
	q.SetPeer(id.RemoteAddr().String())
	q.ExpectQID(p.req.QID)
	c.onDead = func(c *conn) { tr.connDead(c, id, mem, dev) }
	// Receives go up before the accept: the host may send as soon as it is established.
	if err = c.postInitialRecvs(); err != nil {
		return fmt.Errorf("posting %d receives: %w", cfg.depth, err)
	}
	tr.mu.Lock()
	if tr.closed {
		tr.mu.Unlock()
		return ErrClosed
	}
	tr.conns[id] = c
	c.peer = ep.id.RemoteAddr().Addr()
	tr.perAddr[c.peer]++
	tr.live.Add(1)
	tr.mu.Unlock()
	g.publish(c)
	// Published: from here on the connection is torn down like any other (requestClose,
	// then connDead releases what was set up above), never by the deferred cleanup.
	if aerr := id.Accept(&rdmacm.ConnParam{
		PrivateData:        acceptData(cfg.depth),
		InitiatorDepth:     uint8(min(cfg.ird, 255)),
		ResponderResources: 0,
		FlowControl:        1,
		RNRRetryCount:      7,
	}); aerr != nil {
		log.Warn("rdma_accept failed", "err", aerr)
		id.Reject(rejectData(nvmeproto.RDMARejectNoResources))
		c.requestClose(aerr)
		return nil
	}
	log.Debug("queue pair accepted", "depth", cfg.depth, "send_wr", cfg.sqSize, "in_capsule", cfg.icd,
		"initiator_depth", cfg.ird, "host_responder_resources", p.hostIRD,
		"hrqsize", p.req.HRQSize, "hsqsize", p.req.HSQSize, "poll_group", g.id, "device", dev.name)
	return nil
}

// admit checks a connection request from addr against the transport's share of the
// limits: queues in total (the core counts them too, for every transport) and per source
// address — before a Connect names the host, the address is all there is to go by.
// Called with tr.mu held.
func (tr *Transport) admit(addr netip.Addr) *rejectError {
	lim := tr.t.Limits()
	if n := len(tr.conns); n >= lim.MaxQueues {
		return reject(nvmeproto.RDMARejectNoResources, "the target holds %d queues, limits.max_queues (raise it for more hosts or queues)", n)
	}
	if n := tr.perAddr[addr]; n >= lim.MaxQueuesPerAddress {
		return reject(nvmeproto.RDMARejectNoResources, "%v holds %d queues, limits.max_queues_per_address (raise it if many hosts share that address)", addr, n)
	}
	return nil
}

// connDead releases what accept created once the connection is torn down, and ends
// the connection's use of its device.
func (tr *Transport) connDead(c *conn, id *rdmacm.CMID, mem *qmemBlock, dev *device) {
	if err := id.Close(); err != nil {
		c.log.Debug("rdma_destroy_id", "err", err)
	}
	if c.cfg.srq {
		c.g.srq.unreserve(c.cfg.depth)
	}
	if err := mem.release(); err != nil {
		c.log.Error("releasing queue memory", "err", err)
	}
	tr.mu.Lock()
	if tr.conns[id] == c {
		delete(tr.conns, id)
		if tr.perAddr[c.peer]--; tr.perAddr[c.peer] <= 0 {
			delete(tr.perAddr, c.peer)
		}
	}
	tr.mu.Unlock()
	tr.putDevice(dev)
	c.log.Debug("connection released", "reason", c.reason())
	tr.live.Done()
}

// RemoteAddr is the host's address and port (target.RemoteAddresser).
func (c *conn) RemoteAddr() string { return c.cfg.remote }

// rejectConn rejects a connection request with the nvme-rdma status and destroys its ID.
func (tr *Transport) rejectConn(id *rdmacm.CMID, remote netip.AddrPort, rj *rejectError, ev *rdmacm.Event) {
	attrs := []any{"remote", remote.String(), "status", uint16(rj.status), "status_name", rj.status.String(), "reason", rj.msg}
	if ev != nil {
		var r nvmeproto.RDMAConnReq
		if r.Unmarshal(ev.Param.PrivateData) == nil {
			attrs = append(attrs, "recfmt", r.RecFmt, "qid", r.QID, "hrqsize", r.HRQSize, "hsqsize", r.HSQSize, "cntlid", r.CNTLID)
		}
		attrs = append(attrs, "private_data_len", len(ev.Param.PrivateData), "host_responder_resources", ev.Param.InitiatorDepth)
	}
	// Once per address and interval: a host retrying in a loop does not flood the log.
	if ok, n := tr.refusals.Allow(remote.Addr().String()); ok {
		tr.log.Warn("connection request rejected", append(attrs, "suppressed", n)...)
	}
	tr.m.reject(rj.status)
	if err := id.Reject(rejectData(rj.status)); err != nil {
		tr.log.Debug("rdma_reject", "err", err)
	}
	id.Close()
}
