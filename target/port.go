package target

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/conf"
)

// Transport types (discovery log TRTYPE).
const (
	TrTypeRDMA = 1
	TrTypeFC   = 2
	TrTypeTCP  = 3
	TrTypeLoop = 254 // intra-host, as Linux's nvme-loop
)

// Address families (discovery log ADRFAM).
const (
	AdrFamIPv4      = 1
	AdrFamIPv6      = 2
	AdrFamIB        = 3
	AdrFamFC        = 4
	AdrFamIntraHost = 254
)

// AdminQueueDepth is the largest admin queue (Connect SQSIZE+1 on queue 0) a controller
// accepts: the Linux host asks for exactly 32.
const AdminQueueDepth = 32

// PortConfig describes one listening endpoint of a transport: how hosts reach it (for the
// discovery log) and what its transport can do with SGLs (for command validation and
// Identify Controller).
type PortConfig struct {
	TrType  uint8  // TrTypeRDMA, TrTypeTCP, TrTypeLoop
	AdrFam  uint8  // AdrFamIPv4, AdrFamIPv6, AdrFamIntraHost
	TrAddr  string // address as hosts write it ("10.99.0.1")
	TrSvcID string // service, the port number as text ("4420")
	// Advertise lists the port in the discovery log (one entry per subsystem the host
	// may access).
	Advertise bool

	// Keyed: the transport moves data for keyed SGL descriptors (RDMA).
	Keyed bool
	// TransportData: the transport moves data for Transport Data Block descriptors (TCP).
	TransportData bool
	// InCapsuleDataSize is the in-capsule data the transport receives after the SQE on
	// I/O queues (Identify IOCCSZ = (64 + it)/16), in bytes; 0 means none. Transports set
	// it from Target.TransportConfig().InCapsuleDataSize.
	InCapsuleDataSize int
	// MaxSGLDescriptors is MSDBD: the most keyed descriptors one command may carry
	// (more than 1 only with in-capsule data, as a Last Segment list). 0 means 1.
	MaxSGLDescriptors int
	// RDMA transport specific address subtype fields of the discovery log entry.
	RDMAQPType, RDMAProviderType, RDMACMS uint8
	RDMAPKey                              uint16
	// ANAStates are the port's initial ANA group states (the listener's ana_states),
	// indexed by group ID; empty entries are optimized. Port.SetANAState changes them.
	ANAStates [conf.MaxANAGroup + 1]conf.ANAState
}

// Limits are the numbers a transport needs to size queues and buffers before any
// command arrives.
type Limits struct {
	// MaxQueueDepth is the largest I/O queue (CAP.MQES+1); a transport sizes a queue
	// asking for more to it (RDMA: the accept's crqsize says how large it is).
	MaxQueueDepth int
	// AdminQueueDepth is the largest admin queue.
	AdminQueueDepth int
	// MaxTransferSize is the largest data transfer of one command (MDTS), in bytes.
	MaxTransferSize uint32
	// InCapsuleDataSize is the in-capsule data size of this port.
	InCapsuleDataSize int
	// MaxIOQueues is the most I/O queues one controller may have.
	MaxIOQueues int
}

// Port is a transport endpoint registered with a Target. Transports create queues on it.
type Port struct {
	t    *Target
	id   uint16
	cfg  PortConfig
	caps SGLCaps

	mu     sync.Mutex
	queues map[*Queue]struct{}
	closed bool

	// ANA (see ana.go): ana[g] is group g's state as an nvmeproto.ANAState, loaded by
	// every I/O command; anaMu serializes changes and guards anaSet (states set by
	// configuration or SetANAState, listed in the log even without namespaces) and
	// anaChg (the ANA change count of each group's last state change).
	ana    [conf.MaxANAGroup + 1]atomic.Uint32
	anaMu  sync.Mutex
	anaSet [conf.MaxANAGroup + 1]bool
	anaChg [conf.MaxANAGroup + 1]uint64
}

// AddPort registers a transport endpoint. Advertised ports appear in the discovery log
// (its generation counter changes).
func (t *Target) AddPort(cfg PortConfig) (*Port, error) {
	if cfg.InCapsuleDataSize < 0 || cfg.InCapsuleDataSize > conf.MaxInCapsuleDataSize {
		return nil, fmt.Errorf("target: port %s:%s: in-capsule data size %d out of range 0..%d", cfg.TrAddr, cfg.TrSvcID, cfg.InCapsuleDataSize, conf.MaxInCapsuleDataSize)
	}
	if cfg.MaxSGLDescriptors <= 0 {
		cfg.MaxSGLDescriptors = 1
	}
	if cfg.MaxSGLDescriptors > MaxSGLDescriptors {
		return nil, fmt.Errorf("target: port %s:%s: %d SGL descriptors, at most %d are supported", cfg.TrAddr, cfg.TrSvcID, cfg.MaxSGLDescriptors, MaxSGLDescriptors)
	}
	if cfg.MaxSGLDescriptors > 255 {
		cfg.MaxSGLDescriptors = 255
	}
	if !cfg.Keyed && !cfg.TransportData && cfg.InCapsuleDataSize == 0 {
		return nil, fmt.Errorf("target: port %s:%s can move no data: set Keyed, TransportData or InCapsuleDataSize", cfg.TrAddr, cfg.TrSvcID)
	}
	if err := checkANAStates(&cfg.ANAStates); err != nil {
		return nil, fmt.Errorf("target: port %s:%s: %w", cfg.TrAddr, cfg.TrSvcID, err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	id, ok := t.allocPortID()
	if !ok {
		t.mu.Unlock()
		return nil, fmt.Errorf("target: port %s:%s: all 65,535 port IDs are in use; close a port first", cfg.TrAddr, cfg.TrSvcID)
	}
	p := &Port{
		t: t, id: id, cfg: cfg,
		caps: SGLCaps{
			Keyed:             cfg.Keyed,
			TransportData:     cfg.TransportData,
			InCapsuleDataSize: cfg.InCapsuleDataSize,
			MaxSGLDescriptors: cfg.MaxSGLDescriptors,
			MaxTransferSize:   t.mdtsBytes,
		},
		queues: make(map[*Queue]struct{}),
	}
	p.initANA()
	t.ports = append(t.ports, p)
	t.mu.Unlock()
	t.log.Info("port added", "port_id", p.id, "trtype", cfg.TrType, "traddr", cfg.TrAddr, "trsvcid", cfg.TrSvcID,
		"in_capsule_data_size", cfg.InCapsuleDataSize, "msdbd", cfg.MaxSGLDescriptors, "advertised", cfg.Advertise)
	if cfg.Advertise {
		t.discoveryChanged() // never with t.mu held: it completes AERs, which calls transports
	}
	return p, nil
}

// allocPortID returns the next port ID after the last one given that no open port has
// (1..65535, wrapping; never 0), so that an ID is not reused while any other is free —
// a host may still hold a discovery log entry of a closed port. Called with t.mu held.
func (t *Target) allocPortID() (uint16, bool) {
	if len(t.ports) >= 0xFFFF {
		return 0, false
	}
	for {
		id := t.nextPortID
		t.nextPortID++
		if t.nextPortID == 0 {
			t.nextPortID = 1
		}
		if id != 0 && !slices.ContainsFunc(t.ports, func(p *Port) bool { return p.id == id }) {
			return id, true
		}
	}
}

// ID returns the port ID reported in the discovery log (PORTID).
func (p *Port) ID() uint16 { return p.id }

// Config returns the port's configuration, defaults filled in.
func (p *Port) Config() PortConfig { return p.cfg }

// Limits returns the limits transports size queues and buffers by.
func (p *Port) Limits() Limits {
	return Limits{
		MaxQueueDepth:     p.t.tr.QueueDepth,
		AdminQueueDepth:   AdminQueueDepth,
		MaxTransferSize:   p.t.mdtsBytes,
		InCapsuleDataSize: p.cfg.InCapsuleDataSize,
		MaxIOQueues:       p.t.tr.MaxIOQueues,
	}
}

// SGLCaps returns the SGL capabilities commands on this port are checked against.
func (p *Port) SGLCaps() SGLCaps { return p.caps }

// Close unregisters the port: it leaves the discovery log and every queue on it is asked
// to disconnect. Close does not wait for the queues to close.
func (p *Port) Close() error {
	t := p.t
	t.mu.Lock()
	i := slices.Index(t.ports, p)
	if i >= 0 {
		t.ports = slices.Delete(t.ports, i, i+1)
	}
	t.mu.Unlock()
	p.closeQueues(ErrClosed)
	if i >= 0 && p.cfg.Advertise {
		t.discoveryChanged()
	}
	return nil
}

func (p *Port) closeQueues(reason error) {
	p.mu.Lock()
	p.closed = true
	qs := make([]*Queue, 0, len(p.queues))
	for q := range p.queues {
		qs = append(qs, q)
	}
	p.mu.Unlock()
	for _, q := range qs {
		q.disconnect(reason)
	}
}

// advertised returns the ports listed in the discovery log.
func (t *Target) advertised() []*Port {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Port
	for _, p := range t.ports {
		if p.cfg.Advertise {
			out = append(out, p)
		}
	}
	return out
}
