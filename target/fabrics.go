package target

import (
	"errors"
	"fmt"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// beginUnbound validates a command on a queue that has no controller yet: only Connect.
func (q *Queue) beginUnbound(r *Request) nvmeproto.Status {
	cmd := &r.Cmd
	if cmd.Opcode != nvmeproto.OpFabrics || cmd.FabricsType() != nvmeproto.FabricsConnect {
		return nvmeproto.StatusCommandSequenceError.WithDNR()
	}
	if st := checkFlags(cmd); st != nvmeproto.StatusSuccess {
		return st
	}
	if st := ParseSGL(r, &q.port.caps); st != nvmeproto.StatusSuccess {
		return st
	}
	if r.Length != nvmeproto.ConnectDataSize {
		return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
	}
	return nvmeproto.StatusSuccess
}

// connectError is a refused Connect: the status and, for Invalid Parameters and Invalid
// Host, the offending field.
type connectError struct {
	st    nvmeproto.Status
	ipo   uint16
	iattr uint8
	msg   string
	// hostLimit: refused for the host's limits (max_controllers_per_host,
	// max_queues_per_host), counted apart from other Controller Busy refusals.
	hostLimit bool
}

func invalidSQE(off uint16, msg string) *connectError {
	return &connectError{st: nvmeproto.StatusConnectInvalidParameters.WithDNR(), ipo: off, iattr: nvmeproto.ConnectIAttrSQE, msg: msg}
}

func invalidData(off uint16, msg string) *connectError {
	return &connectError{st: nvmeproto.StatusConnectInvalidParameters.WithDNR(), ipo: off, iattr: nvmeproto.ConnectIAttrData, msg: msg}
}

// connect executes a Connect command on an unbound queue.
func (q *Queue) connect(r *Request) {
	q.connectMu.Lock()
	defer q.connectMu.Unlock()
	if q.bind.Load() != nil { // a second Connect raced the first
		q.t.rejects.add(RejectInvalidState)
		q.reject(r, nvmeproto.StatusCommandSequenceError.WithDNR(), "connect on a connected queue")
		return
	}
	var cc nvmeproto.ConnectCommand
	cc.FromCommand(&r.Cmd)
	var d nvmeproto.ConnectData
	s, ce := q.connectCheck(r, &cc, &d)
	if ce == nil {
		if cc.QID == 0 {
			ce = q.connectAdmin(s, &cc, &d)
		} else {
			ce = q.connectIO(s, &cc, &d)
		}
	}
	if ce != nil {
		q.t.rejects.add(ce.reason())
		if ce.st.Code() == nvmeproto.StatusConnectInvalidParameters.Code() ||
			ce.st.Code() == nvmeproto.StatusConnectInvalidHost.Code() {
			r.CQE.DW0 = nvmeproto.ConnectInvalidParamDW0(ce.ipo, ce.iattr)
		}
		// Once per host (or, before the host NQN is known, per peer) and interval: a host
		// retrying a refused Connect in a loop does not flood the log.
		key := "connect " + d.HostNQN
		if d.HostNQN == "" {
			key = "connect peer " + q.peer
		}
		if ok, n := q.t.refusals.Allow(key); ok {
			q.log.Warn("connect refused", "reason", ce.msg, "status", ce.st.String(), "ipo", ce.ipo, "iattr", ce.iattr,
				"qid", cc.QID, "sqsize", cc.SQSize, "kato", cc.KATO, "cntlid", d.CNTLID,
				"subnqn", d.SubNQN, "hostnqn", d.HostNQN, "port", q.port.id, "peer", q.peer, "suppressed", n)
		}
		q.finish(r, ce.st)
		return
	}
	q.stopConnectTimer()
	b := q.bind.Load()
	var authreq uint16
	if b.auth != nil {
		authreq = nvmeproto.AuthReqATR
	}
	r.CQE.DW0 = nvmeproto.ConnectSuccessDW0(b.ctrl.cntlid, authreq)
	b.ctrl.log.Info("queue connected", "qid", b.qid, "sqsize", cc.SQSize, "port", q.port.id, "sq_flow_control", !b.sqhdOff,
		"authentication", b.auth != nil)
	q.finish(r, nvmeproto.StatusSuccess)
}

// connectCheck decodes and checks the parts of a Connect common to admin and I/O queues,
// and returns the subsystem it names. The subsystem may be removed (or the host's access
// revoked) from here on: connectAdmin and connectIO check again where they add to it.
func (q *Queue) connectCheck(r *Request, cc *nvmeproto.ConnectCommand, d *nvmeproto.ConnectData) (*subsystem, *connectError) {
	if cc.RecFmt != 0 {
		return nil, &connectError{st: nvmeproto.StatusConnectIncompatibleFormat.WithDNR(), msg: "record format is not 0"}
	}
	if err := d.Unmarshal(r.Data[:r.Length]); err != nil {
		var fe *nvmeproto.FieldError
		if errors.As(err, &fe) {
			return nil, invalidData(uint16(fe.Offset), fe.Error())
		}
		return nil, invalidData(0, err.Error())
	}
	if nvmeproto.CheckNQN(d.HostNQN) != nil {
		return nil, invalidData(nvmeproto.ConnectDataOffHostNQN, "malformed host NQN")
	}
	if d.HostID == ([16]byte{}) {
		// NVMe over Fabrics 1.1, 3.3. Registrations belong to the host identifier: hosts
		// sending 0h would all be one registrant.
		return nil, invalidData(nvmeproto.ConnectDataOffHostID,
			"host identifier is 0h; the host must send its own (nvme-cli: --hostid or /etc/nvme/hostid)")
	}
	// An unknown subsystem and one the host may not access get the same answer, so that a
	// host cannot find out which subsystems exist (the discovery log lists only the ones
	// it may access, too); the log says which it was.
	s := q.t.subsystem(d.SubNQN)
	if s == nil {
		return nil, invalidData(nvmeproto.ConnectDataOffSubNQN, "no such subsystem")
	}
	if !s.allowed(d.HostNQN) {
		return nil, invalidData(nvmeproto.ConnectDataOffSubNQN, "host is not allowed to access the subsystem")
	}
	if cc.SQSize == 0 {
		return nil, invalidSQE(nvmeproto.ConnectSQEOffSQSize, "queue size 0")
	}
	if uint32(cc.SQSize)+1 > q.depth {
		return nil, invalidSQE(nvmeproto.ConnectSQEOffSQSize, "queue larger than the transport connection's depth")
	}
	if q.expectQID >= 0 && int32(cc.QID) != q.expectQID {
		// The transport sized the queue, its buffers and its share of the admin reserve
		// by the qid it was connected as: an admin queue connecting as an I/O queue (or
		// the reverse) would get what it did not ask for.
		return nil, invalidSQE(nvmeproto.ConnectSQEOffQID, fmt.Sprintf("queue ID %d, but the transport connection is queue %d", cc.QID, q.expectQID))
	}
	return s, nil
}

// connectAdmin creates a controller for an admin queue Connect.
func (q *Queue) connectAdmin(s *subsystem, cc *nvmeproto.ConnectCommand, d *nvmeproto.ConnectData) *connectError {
	if d.CNTLID != nvmeproto.CNTLIDDynamic {
		return invalidData(nvmeproto.ConnectDataOffCNTLID, "admin queue cntlid must be 0xFFFF (dynamic controller model)")
	}
	if int(cc.SQSize)+1 > AdminQueueDepth {
		return invalidSQE(nvmeproto.ConnectSQEOffSQSize, "admin queue larger than 32 entries")
	}
	var auth *ctrlAuth
	if !s.disc {
		// From memory: the host's secret files are read by its AUTH_Negotiate, on the
		// queue's authentication worker (see auth.go), not on this goroutine.
		authenticates, required := q.t.hostAuth(s.nqn, d.HostNQN)
		if !authenticates && required {
			// Not admitted: the same answer as for an unknown subsystem (see connectCheck).
			return invalidData(nvmeproto.ConnectDataOffSubNQN, "the subsystem requires authentication and the host has no DH-HMAC-CHAP secret")
		}
		if authenticates {
			auth = &ctrlAuth{}
		}
	}
	// Counted only once admitted: a refused Connect must not use up the host's limits.
	if over := q.t.hostTake(d.HostNQN, true); over != "" {
		return &connectError{st: nvmeproto.StatusConnectControllerBusy, msg: over, hostLimit: true}
	}
	c := newController(q, s, d.HostNQN, d.HostID)
	c.auth = auth
	// Checked again where the controller joins the subsystem, under the lock that
	// removing the subsystem and changing its hosts take: either the controller is in the
	// table before they look at it (and they fail it), or the Connect is refused here.
	var ce *connectError
	s.mu.Lock()
	switch {
	case s.closed:
		ce = invalidData(nvmeproto.ConnectDataOffSubNQN, "no such subsystem (removed during the Connect)")
	case !s.allowedLocked(d.HostNQN):
		ce = invalidData(nvmeproto.ConnectDataOffSubNQN, "host is not allowed to access the subsystem (changed during the Connect)")
	case !s.allocCntlid(c):
		ce = &connectError{st: nvmeproto.StatusConnectControllerBusy, msg: "no controller ID available"}
	default:
		// Before anyone else can see the controller (fail logs through it).
		c.log = q.t.log.With("subsystem", s.nqn, "cntlid", c.cntlid, "host", d.HostNQN)
	}
	s.mu.Unlock()
	if ce != nil {
		q.t.hostRelease(d.HostNQN, true)
		return ce
	}
	kato := q.t.keepAlive(cc.KATO)
	if kato != roundKATO(cc.KATO) {
		c.log.Info("keep-alive timeout adjusted to the limits", "host_kato_ms", cc.KATO, "kato", kato,
			"min", q.t.lim.MinKeepAliveTimeout, "max", q.t.lim.MaxKeepAliveTimeout)
	}
	b := &binding{ctrl: c, qid: 0, entries: uint32(cc.SQSize) + 1, sqhdOff: cc.DisableSQFlowControl()}
	if c.auth != nil {
		b.auth = q.newQueueAuth(b)
	}
	c.mu.Lock()
	if c.failReason != nil {
		// Failed before its admin queue was bound (the subsystem removed, the host's
		// access revoked): fail found no queue to disconnect, so refuse the Connect.
		reason := c.failReason
		c.mu.Unlock()
		if b.auth != nil {
			b.auth.stop() // its authentication timeout would end the queue's next binding
		}
		s.removeController(c)
		q.t.hostRelease(d.HostNQN, true)
		return invalidData(nvmeproto.ConnectDataOffSubNQN, "controller failed during the Connect: "+reason.Error())
	}
	c.queues[0] = q
	c.startKeepAlive(kato)
	c.mu.Unlock()
	q.bind.Store(b)
	c.log.Info("controller created", "kato", kato, "discovery", c.disc, "port", q.port.id)
	return nil
}

// connectIO binds an I/O queue to an existing controller.
func (q *Queue) connectIO(s *subsystem, cc *nvmeproto.ConnectCommand, d *nvmeproto.ConnectData) *connectError {
	s.mu.Lock()
	c := s.ctrls[d.CNTLID]
	s.mu.Unlock()
	switch {
	case c == nil:
		return invalidData(nvmeproto.ConnectDataOffCNTLID, "no such controller")
	case c.hostNQN != d.HostNQN:
		return invalidData(nvmeproto.ConnectDataOffHostNQN, "host NQN differs from the admin queue's")
	case c.hostID != d.HostID:
		return invalidData(nvmeproto.ConnectDataOffHostID, "host ID differs from the admin queue's")
	case c.port != q.port:
		// A controller lives on the port its admin queue connected through: Identify
		// (IOCCSZ, SGLS), the discovery log's port-local entries and the ANA states it
		// reports are that port's, and I/O commands are checked against the ANA state
		// of the port they arrive on. An I/O queue on another port would see states
		// the host was not told of. The status is SPDK's for the same refusal (Connect
		// Invalid Parameters, IATTR 0, IPO at QID).
		return invalidSQE(nvmeproto.ConnectSQEOffQID, fmt.Sprintf(
			"I/O queue connected through port %d, but controller %d's admin queue is on port %d", q.port.id, c.cntlid, c.port.id))
	case c.disc:
		return invalidSQE(nvmeproto.ConnectSQEOffQID, "discovery controllers have no I/O queues")
	case int(cc.SQSize)+1 > q.t.tr.QueueDepth:
		return invalidSQE(nvmeproto.ConnectSQEOffSQSize, "queue larger than CAP.MQES+1")
	}
	if over := q.t.hostTake(d.HostNQN, false); over != "" {
		return &connectError{st: nvmeproto.StatusConnectControllerBusy, msg: over, hostLimit: true}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var ce *connectError
	switch {
	case c.dead || !c.enabled.Load() || c.shutdown:
		ce = &connectError{st: nvmeproto.StatusCommandSequenceError.WithDNR(), msg: "controller is not ready"}
	case int(cc.QID) > c.ioQueues:
		ce = invalidSQE(nvmeproto.ConnectSQEOffQID, "queue ID beyond the number of queues granted")
	case c.queues[cc.QID] != nil:
		ce = &connectError{st: nvmeproto.StatusCommandSequenceError.WithDNR(), msg: "queue ID already connected"}
	}
	if ce != nil {
		q.t.hostRelease(d.HostNQN, false)
		return ce
	}
	b := &binding{ctrl: c, qid: cc.QID, entries: uint32(cc.SQSize) + 1, sqhdOff: cc.DisableSQFlowControl()}
	if c.auth != nil {
		b.auth = q.newQueueAuth(b)
	}
	c.queues[cc.QID] = q
	// Listed before the queue is bound, so before any command on it reads a reservation
	// state; the Connect being executed holds the queue's drain off until it is bound.
	c.subsys.addIOQueue(q)
	q.bind.Store(b)
	c.kaSeen.Store(true)
	return nil
}

// beginAdmin validates a command on an admin queue.
func (q *Queue) beginAdmin(r *Request, c *controller) nvmeproto.Status {
	cmd := &r.Cmd
	if st := checkFlags(cmd); st != nvmeproto.StatusSuccess {
		return st
	}
	if cmd.Opcode == nvmeproto.OpFabrics {
		switch cmd.FabricsType() {
		case nvmeproto.FabricsPropertyGet, nvmeproto.FabricsPropertySet:
		case nvmeproto.FabricsDisconnect:
			// Disconnect deletes the I/O queue it arrives on; the association ends with
			// the admin queue's transport connection, not with a command.
			return nvmeproto.StatusInvalidQueueType.WithDNR()
		case nvmeproto.FabricsConnect:
			return nvmeproto.StatusCommandSequenceError.WithDNR()
		default:
			return nvmeproto.StatusInvalidOpcode.WithDNR()
		}
		if st := ParseSGL(r, &q.port.caps); st != nvmeproto.StatusSuccess {
			return st
		}
		if r.Length != 0 {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		return nvmeproto.StatusSuccess
	}
	if !c.adminOpSupported(cmd.Opcode) {
		return nvmeproto.StatusInvalidOpcode.WithDNR()
	}
	if !c.enabled.Load() {
		return nvmeproto.StatusCommandSequenceError.WithDNR()
	}
	return ParseSGL(r, &q.port.caps)
}

// execFabrics runs a Property Get/Set or Disconnect on the admin queue.
func (c *controller) execFabrics(q *Queue, r *Request) {
	cmd := &r.Cmd
	switch cmd.FabricsType() {
	case nvmeproto.FabricsPropertyGet:
		var pg nvmeproto.PropertyGetCommand
		pg.FromCommand(cmd)
		v, st := c.propertyGet(pg.Offset, pg.Size())
		if st != nvmeproto.StatusSuccess {
			q.reject(r, st, "property get refused")
			return
		}
		r.CQE.DW0, r.CQE.DW1 = uint32(v), uint32(v>>32)
		q.finish(r, st)
	case nvmeproto.FabricsPropertySet:
		var ps nvmeproto.PropertySetCommand
		ps.FromCommand(cmd)
		if ps.Offset != nvmeproto.PropCC || ps.Size() != 4 {
			q.reject(r, nvmeproto.StatusInvalidField.WithDNR(), "property set refused")
			return
		}
		cc := nvmeproto.CC(uint32(ps.Value))
		if cc.SHN() == ccSHNReserved {
			// 11b is reserved: the write is refused whole, as SPDK's nvmf_prop_set_cc does
			// (nvmet takes it for a shutdown).
			q.reject(r, nvmeproto.StatusInvalidField.WithDNR(), "property set refused: CC.SHN 11b is reserved")
			return
		}
		c.setCC(cc)
		q.finish(r, nvmeproto.StatusSuccess)
	default: // Begin lets no other fctype through (Disconnect: Invalid Queue Type)
		q.reject(r, nvmeproto.StatusInvalidOpcode.WithDNR(), "invalid fabrics command")
	}
}

// ccSHNReserved is the reserved CC.SHN value 11b.
const ccSHNReserved = 3

// cap returns the CAP property.
func (c *controller) cap() nvmeproto.CAP {
	mqes := uint16(c.t.tr.QueueDepth - 1)
	if c.disc {
		mqes = AdminQueueDepth - 1
	}
	return nvmeproto.CAP(0).WithMQES(mqes).WithCQR(true).WithTO(capTimeout).
		WithCSS(nvmeproto.CAPCSSNVM).WithMPSMIN(0).WithMPSMAX(0)
}

// propertyGet reads a property; size is 4 or 8 (0 for a reserved ATTRIB).
func (c *controller) propertyGet(off uint32, size int) (uint64, nvmeproto.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case off == nvmeproto.PropCAP && size == 8:
		return uint64(c.cap()), nvmeproto.StatusSuccess
	case size != 4:
	case off == nvmeproto.PropVS:
		return uint64(nvmeVersion), nvmeproto.StatusSuccess
	case off == nvmeproto.PropCC:
		return uint64(c.cc), nvmeproto.StatusSuccess
	case off == nvmeproto.PropCSTS:
		return uint64(c.csts), nvmeproto.StatusSuccess
	case off == nvmeproto.PropNSSR:
		return 0, nvmeproto.StatusSuccess // NVM subsystem reset is not supported: reads 0
	}
	return 0, nvmeproto.StatusInvalidField.WithDNR()
}
