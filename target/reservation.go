package target

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Reservations (NVMe 2.0 8.19): every namespace keeps its registrants (host identifier →
// reservation key), the reservation held on it (type and holder), the generation
// counter and the Persist Through Power Loss state. Registrations belong to hosts, keyed
// by the 128-bit host identifier of Connect, not to controllers: all controllers of one
// host share them, and they outlive the controllers (and, with PTPL, the process: see
// resvStore).
//
// The I/O path reads a namespace's state with one atomic load of an immutable snapshot
// (nil when nobody is registered: nothing to check). Changes are serialized per
// namespace by nsResv.mu, persisted first when PTPL is on, then published.
//
// Preempt and Abort: commands cannot be taken back from a backend once submitted, so
// "abort" means the command completes only after every I/O command of the preempted
// hosts to the namespace that was checked against the old state has completed (as the
// Linux target does). A preempt-and-abort publishes the new state, then fences
// (fence.go) the namespace's NSID on every I/O queue of the preempted hosts that may still
// have commands in flight (the subsystem's ioQueues: also those of controllers being
// reset or torn down, and queues closed without draining); every namespace data command
// counted itself in its queue's fence of its NSID before it read the reservation state.
// Their commands to other namespaces are not waited for: another namespace's backend may
// be slow or hung, and its commands cannot reach this one.
//
// The wait is bounded by the target's queue-close timeout (a backend request that never
// completes): then the preemption stands (the state is published), but the command fails
// with Internal Error and DNR, so that the host is not told its victim is fenced while
// one of the victim's writes may still reach the namespace. Not Command Interrupted,
// which asks the host to retry: a retry finds the victims unregistered and would either
// fail with Reservation Conflict or, where it preempts no one (a preemptor whose key is
// the victims', PRKEY 0 of an All Registrants reservation), succeed without waiting. A
// command that never completes keeps its queue listed, and every later preempt-and-abort
// of its host on that namespace waits for it again and fails again: its write may still
// land. That listing pins nothing the stuck command does not already hold (its Request
// holds the queue), and ends when the command completes.

// resvRegistrant is one registered host.
type resvRegistrant struct {
	host [16]byte
	key  uint64
}

// resvState is one namespace's reservation state. Immutable once published.
type resvState struct {
	gen    uint32
	ptpl   bool
	rtype  nvmeproto.ResvType // ResvNone: no reservation
	holder [16]byte           // the holder (non All Registrants types), or who acquired
	regs   []resvRegistrant   // in registration order
}

func (s *resvState) clone() *resvState {
	if s == nil {
		return &resvState{}
	}
	n := *s
	n.regs = slices.Clone(s.regs)
	return &n
}

// empty reports whether the state is the default one (nothing to check or keep).
func (s *resvState) empty() bool {
	return s == nil || len(s.regs) == 0 && s.rtype == nvmeproto.ResvNone && !s.ptpl && s.gen == 0
}

// reg returns the index of host's registration, or -1.
func (s *resvState) reg(host *[16]byte) int {
	if s == nil {
		return -1
	}
	for i := range s.regs {
		if s.regs[i].host == *host {
			return i
		}
	}
	return -1
}

// holds reports whether host holds the reservation (every registrant does for the All
// Registrants types).
func (s *resvState) holds(host *[16]byte) bool {
	if s == nil || s.rtype == nvmeproto.ResvNone {
		return false
	}
	if s.rtype.AllRegistrants() {
		return s.reg(host) >= 0
	}
	return s.holder == *host
}

// allows reports whether host may run a command of the read group, or with write of the
// write group. It allocates nothing: it runs on the I/O path.
func (s *resvState) allows(host *[16]byte, write bool) bool {
	if s == nil || s.rtype == nvmeproto.ResvNone {
		return true
	}
	if !s.rtype.AllRegistrants() && s.holder == *host {
		return true
	}
	return s.rtype.Allows(write, false, s.reg(host) >= 0)
}

// remove unregisters the hosts in victims; returns whether the reservation went with
// them (the holder of a single-holder type, or the last registrant of an All
// Registrants type).
func (s *resvState) remove(victims [][16]byte) (released bool) {
	s.regs = slices.DeleteFunc(s.regs, func(r resvRegistrant) bool { return slices.Contains(victims, r.host) })
	if s.rtype == nvmeproto.ResvNone {
		return false
	}
	if s.rtype.AllRegistrants() {
		if len(s.regs) == 0 {
			s.rtype = nvmeproto.ResvNone
			return true
		}
		return false
	}
	if slices.Contains(victims, s.holder) {
		s.rtype = nvmeproto.ResvNone
		return true
	}
	return false
}

// others returns the registered hosts other than host.
func (s *resvState) others(host *[16]byte) [][16]byte {
	var out [][16]byte
	for _, r := range s.regs {
		if r.host != *host {
			out = append(out, r.host)
		}
	}
	return out
}

// nsResv is a namespace's reservation state and the lock that serializes its changes.
// A reopen hands it on to the new namespace object (see namespace.resv): a change
// through either object is the other's.
type nsResv struct {
	mu    sync.Mutex
	state atomic.Pointer[resvState] // nil: the default state
}

// resvNotice is a notification to the controllers of some hosts.
type resvNotice struct {
	hosts   [][16]byte
	logType uint8
}

// resvUpdate runs a reservation change of ns: fn gets the current state (nil for the
// default one) and returns the new state (nil: no change) and the notifications to send,
// or an error status. The new state is persisted before it is published when PTPL is on
// before or after the change; a failure to persist leaves the old state in place and
// fails the command with Internal Error. Notifications go out after publishing.
func (s *subsystem) resvUpdate(ns *namespace, fn func(old *resvState) (*resvState, []resvNotice, nvmeproto.Status)) nvmeproto.Status {
	ns.resv.mu.Lock()
	old := ns.resv.state.Load()
	next, notices, st := fn(old)
	if st != nvmeproto.StatusSuccess || next == nil {
		ns.resv.mu.Unlock()
		return st
	}
	if next.empty() {
		next = nil
	}
	if st := s.t.resvPersist(s.nqn, ns, old, next); st != nvmeproto.StatusSuccess {
		ns.resv.mu.Unlock()
		return st
	}
	ns.resv.state.Store(next)
	ns.resv.mu.Unlock()
	for _, n := range notices {
		s.resvNotify(ns.nsid, n)
	}
	return nvmeproto.StatusSuccess
}

// resvNotify queues a Reservation Notification log page on every controller of the
// notice's hosts, and raises the event.
func (s *subsystem) resvNotify(nsid uint32, n resvNotice) {
	if len(n.hosts) == 0 {
		return
	}
	for _, c := range s.controllers() {
		if slices.Contains(n.hosts, c.hostID) {
			c.resvNotify(nsid, n.logType)
		}
	}
}

// abortWait waits until every I/O command the given hosts began to namespace ns before
// the caller published its preemption has completed, at most the queue-close timeout. It
// reports whether they did; if not, it has logged the queues they are stuck on.
func (s *subsystem) abortWait(ns *namespace, hosts [][16]byte) bool {
	if len(hosts) == 0 {
		return true
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.t.closeTimeout)
	defer cancel()
	// Also a removed namespace's with its NSID, and a removed subsystem's with the NQN:
	// they may be on its store.
	scope := s.t.fenceScope(s)
	nsid, keys := ns.nsid, fenceKeys(scope, ns)
	var ws []fenceWait
	for _, q := range scopeIOQueues(scope, func(q *Queue) bool {
		b := q.bind.Load()
		return b != nil && slices.Contains(hosts, b.ctrl.hostID)
	}) {
		ws = append(ws, fenceWait{q, keys})
	}
	stuck := fenceQueues(ctx, ws)
	for _, f := range stuck {
		q := f.q
		// The queue may be one of a removed subsystem with s's NQN (scope), whose
		// controller IDs those of s's controllers may repeat: removed_subsystem says so.
		removed := false
		if b := q.bind.Load(); b != nil {
			removed = b.ctrl.subsysRemoved()
		}
		s.t.log.Error("preempt and abort failed: a preempted host's command to the namespace is still executing; "+
			"the preemption took effect, but the command fails with Internal Error because the host's "+
			"write may still reach the namespace (a backend request that does not complete: check the backend)",
			"subsystem", s.nqn, "nsid", nsid, "qid", q.QID(), "cntlid", q.ControllerID(), "removed_subsystem", removed,
			"host", q.HostNQN(), "commands", f.commands, "waited", since(start))
	}
	return len(stuck) == 0
}

// resvAccess checks a namespace I/O command of this controller against the namespace's
// reservation. The command has counted itself in its queue's fence of the namespace
// (fenceEnter) before.
func (c *controller) resvAccess(ns *namespace, write bool) nvmeproto.Status {
	if s := ns.resv.state.Load(); s != nil && !s.allows(&c.hostID, write) {
		return nvmeproto.StatusReservationConflict.WithDNR()
	}
	return nvmeproto.StatusSuccess
}

// execResv runs a Reservation Register, Acquire, Release or Report command. It runs on
// its own goroutine: it may write the state file, and a Preempt and Abort waits for
// other queues' commands.
func (q *Queue) execResv(r *Request, c *controller) {
	ns := r.ns
	if !ns.acquire() {
		q.reject(r, c.unavailable(ns), "reservation command failed")
		return
	}
	var st nvmeproto.Status
	var victims [][16]byte // Preempt and Abort: wait for their commands
	switch r.Cmd.Opcode {
	case nvmeproto.OpReservationRegister:
		st = c.resvRegister(r, ns)
	case nvmeproto.OpReservationAcquire:
		st, victims = c.resvAcquire(r, ns)
	case nvmeproto.OpReservationRelease:
		st = c.resvRelease(r, ns)
	case nvmeproto.OpReservationReport:
		st = c.resvReport(r, ns)
	}
	ns.release()
	if st == nvmeproto.StatusSuccess && !c.subsys.abortWait(ns, victims) {
		st = nvmeproto.StatusInternalError.WithDNR() // retried, it finds the victims unregistered
	}
	if st != nvmeproto.StatusSuccess {
		q.reject(r, st, "reservation command failed")
		return
	}
	q.finish(r, st)
}

func (c *controller) resvRegister(r *Request, ns *namespace) nvmeproto.Status {
	var cmd nvmeproto.ReservationCommand
	cmd.FromCommand(&r.Cmd)
	var k nvmeproto.ReservationKeys
	if k.Unmarshal(r.Data[:r.Length], nvmeproto.ResvRegisterDataSize) != nil {
		return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
	}
	switch cmd.CPTPL {
	case nvmeproto.CPTPLNoChange, nvmeproto.CPTPLClear:
	case nvmeproto.CPTPLSet:
		if c.t.resv == nil {
			return nvmeproto.StatusInvalidField.WithDNR() // no state file: RESCAP.PTPL is clear
		}
	default:
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	host := c.hostID
	return c.subsys.resvUpdate(ns, func(old *resvState) (*resvState, []resvNotice, nvmeproto.Status) {
		s := old.clone()
		i := s.reg(&host)
		var notices []resvNotice
		switch cmd.Action {
		case nvmeproto.ResvRegister:
			if i >= 0 {
				if s.regs[i].key != k.Second {
					return nil, nil, nvmeproto.StatusReservationConflict.WithDNR()
				}
			} else {
				s.regs = append(s.regs, resvRegistrant{host: host, key: k.Second})
			}
		case nvmeproto.ResvUnregister:
			if i < 0 || !cmd.IEKEY && s.regs[i].key != k.Current {
				return nil, nil, nvmeproto.StatusReservationConflict.WithDNR()
			}
			rtype := s.rtype
			if s.remove([][16]byte{host}) && rtype.RegistrantsOnly() {
				notices = append(notices, resvNotice{s.others(&host), nvmeproto.ResvLogReservationReleased})
			}
		case nvmeproto.ResvReplace:
			if i < 0 || !cmd.IEKEY && s.regs[i].key != k.Current {
				return nil, nil, nvmeproto.StatusReservationConflict.WithDNR()
			}
			s.regs[i].key = k.Second
		default:
			return nil, nil, nvmeproto.StatusInvalidField.WithDNR()
		}
		switch cmd.CPTPL {
		case nvmeproto.CPTPLClear:
			s.ptpl = false
		case nvmeproto.CPTPLSet:
			s.ptpl = true
		}
		s.gen++
		return s, notices, nvmeproto.StatusSuccess
	})
}

// resvAcquire runs Acquire, Preempt and Preempt and Abort; for the last it returns the
// preempted hosts, whose commands in flight the caller waits for.
func (c *controller) resvAcquire(r *Request, ns *namespace) (nvmeproto.Status, [][16]byte) {
	var cmd nvmeproto.ReservationCommand
	cmd.FromCommand(&r.Cmd)
	if cmd.IEKEY || !cmd.RType.Valid() || cmd.Action > nvmeproto.ResvPreemptAndAbort {
		return nvmeproto.StatusInvalidField.WithDNR(), nil
	}
	var k nvmeproto.ReservationKeys
	if k.Unmarshal(r.Data[:r.Length], nvmeproto.ResvAcquireDataSize) != nil {
		return nvmeproto.StatusDataSGLLengthInvalid.WithDNR(), nil
	}
	host := c.hostID
	var victims [][16]byte
	st := c.subsys.resvUpdate(ns, func(old *resvState) (*resvState, []resvNotice, nvmeproto.Status) {
		s := old.clone()
		i := s.reg(&host)
		if i < 0 || s.regs[i].key != k.Current {
			return nil, nil, nvmeproto.StatusReservationConflict.WithDNR()
		}
		if cmd.Action == nvmeproto.ResvAcquire {
			switch {
			case s.rtype == nvmeproto.ResvNone:
				s.rtype, s.holder = cmd.RType, host
				return s, nil, nvmeproto.StatusSuccess
			case s.holds(&host) && s.rtype == cmd.RType:
				return nil, nil, nvmeproto.StatusSuccess // already held: nothing changes
			default:
				return nil, nil, nvmeproto.StatusReservationConflict.WithDNR()
			}
		}
		// Preempt: the hosts registered with PRKEY, never the one preempting.
		prkey := k.Second
		matching := func() [][16]byte {
			var out [][16]byte
			for _, r := range s.regs {
				if r.key == prkey && r.host != host {
					out = append(out, r.host)
				}
			}
			return out
		}
		var newResv bool // the preempting host gets a new reservation of cmd.RType
		switch {
		case s.rtype == nvmeproto.ResvNone:
			victims = matching()
		case s.rtype.AllRegistrants() && prkey == 0:
			victims, newResv = s.others(&host), true
		case s.rtype.AllRegistrants():
			victims = matching()
		case s.reg(&s.holder) >= 0 && prkey == s.regs[s.reg(&s.holder)].key: // the holder is always registered
			victims, newResv = matching(), true
		case prkey != 0:
			victims = matching()
		default:
			return nil, nil, nvmeproto.StatusInvalidField.WithDNR() // PRKEY 0 and not the holder's key
		}
		if len(victims) == 0 && !newResv {
			return nil, nil, nvmeproto.StatusReservationConflict.WithDNR()
		}
		oldType := s.rtype
		s.remove(victims)
		notices := []resvNotice{{victims, nvmeproto.ResvLogRegistrationPreempt}}
		if newResv {
			s.rtype, s.holder = cmd.RType, host
			if oldType != cmd.RType {
				notices = append(notices, resvNotice{s.others(&host), nvmeproto.ResvLogReservationReleased})
			}
		}
		s.gen++
		return s, notices, nvmeproto.StatusSuccess
	})
	if st != nvmeproto.StatusSuccess || cmd.Action != nvmeproto.ResvPreemptAndAbort {
		return st, nil
	}
	return st, victims
}

func (c *controller) resvRelease(r *Request, ns *namespace) nvmeproto.Status {
	var cmd nvmeproto.ReservationCommand
	cmd.FromCommand(&r.Cmd)
	if cmd.IEKEY || cmd.Action > nvmeproto.ResvClear {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	var k nvmeproto.ReservationKeys
	if k.Unmarshal(r.Data[:r.Length], nvmeproto.ResvReleaseDataSize) != nil {
		return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
	}
	host := c.hostID
	return c.subsys.resvUpdate(ns, func(old *resvState) (*resvState, []resvNotice, nvmeproto.Status) {
		s := old.clone()
		i := s.reg(&host)
		if i < 0 || s.regs[i].key != k.Current {
			return nil, nil, nvmeproto.StatusReservationConflict.WithDNR()
		}
		if cmd.Action == nvmeproto.ResvClear {
			notices := []resvNotice{{s.others(&host), nvmeproto.ResvLogReservationPreempt}}
			s.regs, s.rtype, s.holder = nil, nvmeproto.ResvNone, [16]byte{}
			s.gen++
			return s, notices, nvmeproto.StatusSuccess
		}
		if !s.holds(&host) {
			return nil, nil, nvmeproto.StatusSuccess // no reservation, or another host's: no effect
		}
		if cmd.RType != s.rtype {
			return nil, nil, nvmeproto.StatusInvalidField.WithDNR()
		}
		var notices []resvNotice
		if s.rtype != nvmeproto.ResvWriteExclusive && s.rtype != nvmeproto.ResvExclusiveAccess {
			notices = append(notices, resvNotice{s.others(&host), nvmeproto.ResvLogReservationReleased})
		}
		s.rtype, s.holder = nvmeproto.ResvNone, [16]byte{}
		return s, notices, nvmeproto.StatusSuccess
	})
}

func (c *controller) resvReport(r *Request, ns *namespace) nvmeproto.Status {
	var cmd nvmeproto.ReservationReportCommand
	cmd.FromCommand(&r.Cmd)
	if !cmd.EDS {
		// Fabrics host identifiers are 128 bits: only the extended structure holds them.
		return nvmeproto.StatusHostIDInconsistentFormat.WithDNR()
	}
	s := ns.resv.state.Load()
	rs := nvmeproto.ReservationStatus{}
	if s != nil {
		rs.Gen, rs.RType, rs.PTPLS = s.gen, s.rtype, s.ptpl
		for _, reg := range s.regs {
			e := nvmeproto.ResvRegisteredController{CNTLID: nvmeproto.CNTLIDDynamic, HostID: reg.host, RKey: reg.key}
			if s.holds(&reg.host) {
				e.RCSTS = nvmeproto.RCSTSHolder
			}
			rs.Controllers = append(rs.Controllers, e)
		}
	}
	rs.Marshal(r.Data[:r.Length], true)
	return nvmeproto.StatusSuccess
}

// setResvPersist implements Set Features Reservation Persistence for one namespace.
func (c *controller) setResvPersist(ns *namespace, ptpl bool) nvmeproto.Status {
	if ptpl && c.t.resv == nil {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	return c.subsys.resvUpdate(ns, func(old *resvState) (*resvState, []resvNotice, nvmeproto.Status) {
		if (old != nil && old.ptpl) == ptpl {
			return nil, nil, nvmeproto.StatusSuccess
		}
		s := old.clone()
		s.ptpl = ptpl
		return s, nil, nvmeproto.StatusSuccess
	})
}

// resvLogMax is how many Reservation Notification log pages a controller keeps unread;
// later ones are lost (the host sees the gap in the log page count).
const resvLogMax = 64

// resvNotify queues a Reservation Notification log page unless the host masked its type
// for the namespace, and raises the Reservation Log Page Available event.
func (c *controller) resvNotify(nsid uint32, logType uint8) {
	c.mu.Lock()
	if c.dead || c.resvMaskOf(nsid)&nvmeproto.ResvMaskBit(logType) != 0 {
		c.mu.Unlock()
		return
	}
	c.resvCount++
	if c.resvCount == 0 {
		c.resvCount = 1
	}
	if len(c.resvLog) >= resvLogMax {
		c.mu.Unlock()
		c.log.Warn("reservation notification lost: the host has not read the log page", "nsid", nsid, "type", logType)
		return
	}
	c.resvLog = append(c.resvLog, nvmeproto.ResvNotifyLog{Count: c.resvCount, Type: logType, NSID: nsid})
	c.mu.Unlock()
	c.raiseEvent(eventResvLog)
}

// resvMaskOf returns the Reservation Notification Mask of a namespace. Called with mu held.
func (c *controller) resvMaskOf(nsid uint32) uint32 {
	if m, ok := c.resvMask[nsid]; ok {
		return m
	}
	return c.resvMaskAll
}
