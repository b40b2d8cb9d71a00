package target

import (
	"bytes"
	"errors"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// flagsSGL is the only Flags value (FUSE and PSDT bits) Fabrics commands may carry:
// no fused operation, SGL for data with a metadata buffer pointer.
const flagsSGL = nvmeproto.PSDTSGL << 6

// checkFlags rejects fused commands and PRP data pointers.
func checkFlags(cmd *nvmeproto.Command) nvmeproto.Status {
	if cmd.Flags&0xC3 != flagsSGL {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	return nvmeproto.StatusSuccess
}

// NVM command fields.
const (
	rwFUA         = 1 << 30 // Read/Write CDW12: force unit access
	dsmAD         = 1 << 2  // Dataset Management CDW11: attribute deallocate
	dsmRangeSize  = 16      // one Dataset Management range
	dsmMaxRanges  = 256
	maxNLBPerCmd  = 1 << 16 // NLB is a 0's based 16-bit field
	dataUnitBytes = 512     // SMART data units count thousands of these
)

// unavailable is the status of a command that meets ns closed or closing: Namespace Not
// Ready without DNR while a reopen will put a fresh namespace in its place (a transient
// state: the host retries, after the delay CRD selects if it enabled ACRE), Invalid
// Namespace with DNR when the namespace is gone for good (removed, or inactive after a
// reopen failed). nil, a namespace that does not exist, is Invalid Namespace too.
func (c *controller) unavailable(ns *namespace) nvmeproto.Status {
	if ns == nil || !ns.reopening.Load() {
		return nvmeproto.StatusInvalidNamespace.WithDNR()
	}
	return c.notReady(ns)
}

// notReady is Namespace Not Ready without DNR for ns, about to be reopened or being
// reopened. If the host enabled ACRE it carries CRD 1 (CRDT1) while the reopen is short,
// CRD 2 (CRDT2) once it has lasted long (see crdReopenLong); without ACRE CRD is 0, as
// the specification wants.
func (c *controller) notReady(ns *namespace) nvmeproto.Status {
	switch {
	case !c.acre.Load():
		return nvmeproto.StatusNSNotReady
	case ns.reopenLong():
		return nvmeproto.StatusNSNotReady.WithCRD(crdReopenLong)
	}
	return nvmeproto.StatusNSNotReady.WithCRD(crdReopen)
}

// beginIO validates a command on an I/O queue.
func (q *Queue) beginIO(r *Request, c *controller) nvmeproto.Status {
	cmd := &r.Cmd
	if st := checkFlags(cmd); st != nvmeproto.StatusSuccess {
		return st
	}
	switch cmd.Opcode {
	case nvmeproto.OpRead, nvmeproto.OpWrite, nvmeproto.OpCompare, nvmeproto.OpFlush,
		nvmeproto.OpWriteZeroes, nvmeproto.OpDatasetManagement,
		nvmeproto.OpReservationRegister, nvmeproto.OpReservationAcquire, nvmeproto.OpReservationRelease,
		nvmeproto.OpReservationReport:
	case nvmeproto.OpFabrics:
		switch cmd.FabricsType() {
		case nvmeproto.FabricsConnect:
			return nvmeproto.StatusCommandSequenceError.WithDNR()
		case nvmeproto.FabricsDisconnect:
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
	default:
		return nvmeproto.StatusInvalidOpcode.WithDNR()
	}
	if st := ParseSGL(r, &q.port.caps); st != nvmeproto.StatusSuccess {
		return st
	}
	ns := c.subsys.lookup(cmd.NSID)
	if ns == nil || ns.closing() {
		return c.unavailable(ns)
	}
	r.ns = ns // no reference: see namespace.state; complete counts the command in it
	if q.t.timing.Load() {
		r.start = nanotime()
	}
	if !isResvOpcode(cmd.Opcode) {
		// Counted before the ANA and reservation checks: a fence of an ANA change or a
		// Preempt and Abort of this namespace published after this command read the old
		// state waits for it.
		q.fenceEnter(r, ns)
	}
	// An Asymmetric Access status (never with DNR: a multipath host retries elsewhere).
	if st := q.port.anaStatus(ns.anaGroup.Load()); st != nvmeproto.StatusSuccess {
		return st
	}
	nblocks := ns.blocks.Load()
	switch cmd.Opcode {
	case nvmeproto.OpRead, nvmeproto.OpWrite, nvmeproto.OpCompare:
		slba := uint64(cmd.CDW11)<<32 | uint64(cmd.CDW10)
		nlb := uint64(cmd.CDW12&0xFFFF) + 1
		n := nlb << ns.shift
		if n > uint64(q.t.mdtsBytes) {
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		if uint64(r.Length) != n {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		if nlb > nblocks || slba > nblocks-nlb {
			return nvmeproto.StatusLBAOutOfRange.WithDNR()
		}
		if cmd.Opcode == nvmeproto.OpWrite && ns.readOnly.Load() {
			return nvmeproto.StatusNSWriteProtected.WithDNR()
		}
		if cmd.Opcode == nvmeproto.OpWrite && ns.failed() {
			return nvmeproto.StatusWriteFault.WithDNR()
		}
	case nvmeproto.OpFlush:
		if r.Length != 0 {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		if ns.failed() {
			return nvmeproto.StatusWriteFault.WithDNR()
		}
	case nvmeproto.OpWriteZeroes:
		if r.Length != 0 {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		slba := uint64(cmd.CDW11)<<32 | uint64(cmd.CDW10)
		nlb := uint64(cmd.CDW12&0xFFFF) + 1
		if nlb > nblocks || slba > nblocks-nlb {
			return nvmeproto.StatusLBAOutOfRange.WithDNR()
		}
		if ns.readOnly.Load() {
			return nvmeproto.StatusNSWriteProtected.WithDNR()
		}
		if ns.failed() {
			return nvmeproto.StatusWriteFault.WithDNR()
		}
	case nvmeproto.OpDatasetManagement:
		nr := cmd.CDW10&0xFF + 1
		if r.Length < nr*dsmRangeSize {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		if cmd.CDW11&dsmAD != 0 && ns.readOnly.Load() {
			return nvmeproto.StatusNSWriteProtected.WithDNR()
		}
		if cmd.CDW11&dsmAD != 0 && ns.failed() {
			return nvmeproto.StatusWriteFault.WithDNR()
		}
	case nvmeproto.OpReservationRegister, nvmeproto.OpReservationAcquire:
		if r.Length < nvmeproto.ResvRegisterDataSize {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		return nvmeproto.StatusSuccess
	case nvmeproto.OpReservationRelease:
		if r.Length < nvmeproto.ResvReleaseDataSize {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		return nvmeproto.StatusSuccess
	case nvmeproto.OpReservationReport:
		var rr nvmeproto.ReservationReportCommand
		rr.FromCommand(cmd)
		if uint64(r.Length) != rr.Length() {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		return nvmeproto.StatusSuccess
	}
	// The read and write command groups are subject to the namespace's reservation.
	write := cmd.Opcode != nvmeproto.OpRead && cmd.Opcode != nvmeproto.OpCompare
	return c.resvAccess(ns, write)
}

// execIO runs a validated I/O command through the namespace's executor.
func (q *Queue) execIO(r *Request, c *controller) {
	cmd := &r.Cmd
	switch cmd.Opcode {
	case nvmeproto.OpFabrics: // Disconnect: answer, then delete the queue
		q.finish(r, nvmeproto.StatusSuccess)
		q.disconnect(ErrDisconnectCommand)
		return
	case nvmeproto.OpReservationRegister, nvmeproto.OpReservationAcquire, nvmeproto.OpReservationRelease,
		nvmeproto.OpReservationReport:
		go q.execResv(r, c)
		return
	}
	ns := r.ns
	br := &r.br
	if br.Done == nil {
		br.Done = r.ioDone // bound once per Request: no allocation per command
	}
	br.Err, br.Buf, br.Ranges, br.FUA, br.NLB = nil, nil, nil, false, 0
	br.SLBA = uint64(cmd.CDW11)<<32 | uint64(cmd.CDW10)
	r.compare, r.bounced = false, false
	async := q.ring != nil // the data is the transport's buffer, not Go memory
	switch cmd.Opcode {
	case nvmeproto.OpRead:
		br.Op = backend.OpRead
		br.NLB = uint64(cmd.CDW12&0xFFFF) + 1
		br.Buf = r.Data[:r.Length]
		if !aligned.Is(br.Buf) {
			br.Buf = r.alignedBuf(int(r.Length))
			r.bounced = true
			async = false
		}
	case nvmeproto.OpWrite:
		br.Op = backend.OpWrite
		br.NLB = uint64(cmd.CDW12&0xFFFF) + 1
		br.FUA = cmd.CDW12&rwFUA != 0 || !c.wce.Load()
		br.Buf = r.Data[:r.Length]
		if !aligned.Is(br.Buf) {
			b := r.alignedBuf(int(r.Length))
			copy(b, br.Buf)
			br.Buf = b
			async = false
		}
	case nvmeproto.OpCompare:
		br.Op = backend.OpRead
		br.NLB = uint64(cmd.CDW12&0xFFFF) + 1
		br.Buf = r.alignedBuf(int(r.Length))
		r.compare = true
		async = false
	case nvmeproto.OpFlush:
		br.Op = backend.OpFlush
	case nvmeproto.OpWriteZeroes:
		br.Op = backend.OpWriteZeroes
		br.NLB = uint64(cmd.CDW12&0xFFFF) + 1
		br.FUA = cmd.CDW12&rwFUA != 0 || !c.wce.Load() // FUA is bit 30 here too
	case nvmeproto.OpDatasetManagement:
		if cmd.CDW11&dsmAD == 0 { // only hints (integral read/write): nothing to do
			q.finish(r, nvmeproto.StatusSuccess)
			return
		}
		if r.ranges == nil {
			r.ranges = make([]backend.Range, 0, dsmMaxRanges)
		}
		r.ranges = r.ranges[:0]
		nr := int(cmd.CDW10&0xFF) + 1
		for i := 0; i < nr; i++ {
			e := r.Data[i*dsmRangeSize:]
			nlb := uint64(le.Uint32(e[4:]))
			if nlb == 0 {
				continue
			}
			r.ranges = append(r.ranges, backend.Range{SLBA: le.Uint64(e[8:]), NLB: nlb})
		}
		if len(r.ranges) == 0 {
			q.finish(r, nvmeproto.StatusSuccess)
			return
		}
		br.Op = backend.OpDeallocate
		br.Ranges = r.ranges
		br.FUA = !c.wce.Load()
	}
	if async {
		ns.exec.SubmitRing(q.ring, br)
		return
	}
	ns.exec.Submit(br)
}

// ioDone is the backend completion of r's I/O command.
func (r *Request) ioDone(br *backend.Request) {
	q, ns := r.q, r.ns
	st := backend.Status(br.Op, br.Err)
	if br.Err != nil {
		switch {
		case errors.Is(br.Err, backend.ErrClosed): // closed while the command was on its way
			st = q.bind.Load().ctrl.unavailable(ns)
		case errors.Is(br.Err, backend.ErrSync):
			ns.fail(br.Err)
		}
		if errors.Is(br.Err, backend.ErrNeedsReopen) {
			// The backend is reopened in the background; the host retries the command
			// (Status: Namespace Not Ready without DNR, unless writes may be lost).
			ns.needsReopen(br.Err)
			if st == nvmeproto.StatusNSNotReady {
				st = q.bind.Load().ctrl.notReady(ns)
			}
		}
	}
	if st == nvmeproto.StatusSuccess {
		switch {
		case r.compare:
			if !bytes.Equal(br.Buf, r.Data[:r.Length]) {
				st = nvmeproto.StatusCompareFailure
			}
		case r.bounced:
			copy(r.Data[:r.Length], br.Buf)
		}
	}
	br.Buf = nil // the backend is done with it; a scratch buffer is not kept through it
	r.dropBounce()
	if st != nvmeproto.StatusSuccess {
		if br.Err != nil {
			q.log.Debug("backend error", "nsid", ns.nsid, "op", br.Op.String(), "slba", br.SLBA, "err", br.Err)
		}
		q.noteError(r, st, "I/O command failed")
	}
	q.finish(r, st)
}
