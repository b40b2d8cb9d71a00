package target

import (
	"cmp"
	"slices"
	"time"
)

// RemoteAddresser is implemented by TransportQueues that know the address of the host at
// the other end (the RDMA transport: the host's IP address and port). Controllers reports
// it for each queue.
type RemoteAddresser interface {
	RemoteAddr() string
}

// ControllerInfo describes a connected controller, for inspection (gonvmf ctl ctrl ls).
type ControllerInfo struct {
	Subsystem string // subsystem NQN (the discovery NQN for discovery controllers)
	ID        uint16 // CNTLID
	Discovery bool
	HostNQN   string
	HostID    [16]byte
	// Port is the port the admin queue connected through (its listener's address).
	Port PortConfig
	// RemoteAddr is the host's address as the transport knows it ("" if it does not).
	RemoteAddr string
	// KeepAlive is the keep-alive timeout in force (0: none).
	KeepAlive time.Duration
	// Connected is when the admin queue's Connect created the controller.
	Connected time.Time
	// Ready reports CSTS.RDY: the host enabled the controller.
	Ready bool
	// Authenticated reports that the host authenticated the admin queue with
	// DH-HMAC-CHAP (in-band authentication) and has not failed a re-authentication
	// since; false for a host that connected without authenticating.
	Authenticated bool
	// Queues are the connected queues, admin queue (ID 0) first.
	Queues []QueueInfo
}

// QueueInfo describes one connected queue of a controller.
type QueueInfo struct {
	ID         uint16 // QID
	Size       int    // entries (the Connect command's SQSIZE+1)
	InFlight   int    // commands begun and not yet completed
	RemoteAddr string
}

// Controllers returns the connected controllers, discovery controllers included, sorted
// by subsystem (in configuration order, discovery last) and controller ID. It is a
// snapshot; it allocates and takes each controller's lock briefly.
func (t *Target) Controllers() []ControllerInfo {
	t.mu.Lock()
	subs := append(slices.Clone(t.order), t.disc)
	t.mu.Unlock()
	var out []ControllerInfo
	for _, s := range subs {
		cs := s.controllers()
		slices.SortFunc(cs, func(a, b *controller) int { return cmp.Compare(a.cntlid, b.cntlid) })
		for _, c := range cs {
			out = append(out, c.info())
		}
	}
	return out
}

func (c *controller) info() ControllerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	ci := ControllerInfo{
		Subsystem: c.subsys.nqn, ID: c.cntlid, Discovery: c.disc,
		HostNQN: c.hostNQN, HostID: c.hostID, Port: c.port.cfg,
		KeepAlive: c.kato, Connected: c.created, Ready: c.csts.RDY(),
	}
	for _, q := range c.queues {
		if q == nil {
			continue
		}
		qi := QueueInfo{ID: uint16(q.QID()), Size: q.Size(), InFlight: q.inFlight()}
		if ra, ok := q.tq.(RemoteAddresser); ok {
			qi.RemoteAddr = ra.RemoteAddr()
		}
		ci.Queues = append(ci.Queues, qi)
		if qi.ID == 0 && c.auth != nil {
			if b := q.bind.Load(); b != nil && b.auth != nil {
				ci.Authenticated = b.auth.ok.Load()
			}
		}
	}
	if len(ci.Queues) > 0 && ci.Queues[0].ID == 0 {
		ci.RemoteAddr = ci.Queues[0].RemoteAddr
	}
	return ci
}

// inFlight returns the number of commands between Begin and Complete.
func (q *Queue) inFlight() int { return q.users.Users() }

// NamespaceInfo describes a running namespace and counts its I/O since it was added.
type NamespaceInfo struct {
	Subsystem string
	NSID      uint32
	Backend   string
	Path      string
	Blocks    uint64 // capacity in logical blocks (Identify NSZE)
	LBASize   uint32
	ReadOnly  bool
	// Failure is why the namespace refuses writes and flushes (a sync of its backend
	// failed: see ReopenNamespace), nil while it is healthy.
	Failure error
	// Inactive: the namespace's backend is closed: commands get Namespace Not Ready while
	// ReopenNamespace opens it again, Invalid Namespace once it is being removed or
	// ReopenNamespace could not open its backend again.
	Inactive bool
	// Successful commands and the bytes they moved (the SMART log's counters).
	ReadCommands, WriteCommands uint64
	ReadBytes, WriteBytes       uint64
	// IO counts every I/O command by class (IORead...IOOther): commands completed, errors,
	// bytes, latency; Errors the error completions by class and status.
	IO     [NumIOClasses]IOCounters
	Errors []ErrorCount
}

// Namespaces returns every namespace being served, by subsystem (in configuration order)
// and NSID. The counters are summed from the per-queue shards the I/O path counts into
// (a metrics collector calls this at scrape time; the I/O path itself never allocates or
// takes a lock for them).
func (t *Target) Namespaces() []NamespaceInfo {
	t.mu.Lock()
	subs := slices.Clone(t.order)
	t.mu.Unlock()
	var out []NamespaceInfo
	for _, s := range subs {
		for _, ns := range s.namespaces() {
			rc, wc, ru, wu := ns.totals()
			io, errs := ns.counters()
			out = append(out, NamespaceInfo{
				Subsystem: s.nqn, NSID: ns.nsid, Backend: ns.cfg.Backend, Path: ns.cfg.Path,
				Blocks: ns.blocks.Load(), LBASize: ns.lbaSize(), ReadOnly: ns.readOnly.Load(), Failure: ns.failureReason(), Inactive: ns.closing(),
				ReadCommands: rc, WriteCommands: wc, ReadBytes: ru * dataUnitBytes, WriteBytes: wu * dataUnitBytes,
				IO: io, Errors: errs,
			})
		}
	}
	return out
}

// SubsystemInfo describes a subsystem's connections and the failed commands no namespace
// counted.
type SubsystemInfo struct {
	NQN       string
	Discovery bool
	// Controllers connected, and their queues (admin and I/O).
	Controllers, AdminQueues, IOQueues int
	// IOErrors counts the commands on its I/O queues that failed before reaching a
	// namespace (Invalid Namespace, a malformed command, Command Aborted due to SQ
	// Deletion while the queue went away), by class and status.
	IOErrors []ErrorCount
}

// Subsystems returns every subsystem being served, in configuration order, then the
// discovery subsystem. It is a snapshot; it allocates and takes each controller's lock
// briefly.
func (t *Target) Subsystems() []SubsystemInfo {
	t.mu.Lock()
	subs := append(slices.Clone(t.order), t.disc)
	t.mu.Unlock()
	out := make([]SubsystemInfo, 0, len(subs))
	for _, s := range subs {
		si := SubsystemInfo{NQN: s.nqn, Discovery: s.disc, IOErrors: s.ioErrs.snapshot()}
		for _, c := range s.controllers() {
			si.Controllers++
			c.mu.Lock()
			for qid, q := range c.queues { // by qid
				switch {
				case q == nil:
				case qid == 0:
					si.AdminQueues++
				default:
					si.IOQueues++
				}
			}
			c.mu.Unlock()
		}
		out = append(out, si)
	}
	return out
}
