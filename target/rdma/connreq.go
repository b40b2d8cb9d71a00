package rdma

import (
	"fmt"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// connLimits are what a connection request is checked against.
type connLimits struct {
	maxIOQueues  int // highest I/O qid
	adminDepth   int // largest admin queue (32)
	maxDepth     int // largest I/O queue (transport.queue_depth)
	deviceMaxIRD int // the device's max_qp_init_rd_atom: RDMA READs we may have outstanding
	deviceMaxWR  int // the device's max_qp_wr
}

// connParams are the queue parameters accepted for a connection.
type connParams struct {
	req     nvmeproto.RDMAConnReq
	depth   int // receive slots: min(hsqsize+1, the limit); REP crqsize
	ird     int // RDMA READs outstanding at once (our initiator depth)
	hostIRD int // what the host said it can serve
}

// rejectError is a refused connection request: the nvme-rdma reject status and why.
type rejectError struct {
	status nvmeproto.RDMARejectStatus
	msg    string
}

func (e *rejectError) Error() string {
	return fmt.Sprintf("connection request rejected (%v): %s", e.status, e.msg)
}

func reject(st nvmeproto.RDMARejectStatus, format string, args ...any) *rejectError {
	return &rejectError{status: st, msg: fmt.Sprintf(format, args...)}
}

// checkConnReq validates the private data of a CONNECT_REQUEST (the Linux host pads it to
// 56 bytes; the first 32 matter) and the host's RDMA READ resources, and sizes the queue.
// hostIRD is the number of RDMA READs the host can serve for us (rdma_cm reports it as
// the request's InitiatorDepth).
func checkConnReq(priv []byte, hostIRD int, lim connLimits) (connParams, *rejectError) {
	var p connParams
	if err := p.req.Unmarshal(priv); err != nil {
		return p, reject(nvmeproto.RDMARejectInvalidLen, "private data is %d bytes, need %d", len(priv), nvmeproto.RDMAConnReqSize)
	}
	r := &p.req
	if r.RecFmt != nvmeproto.RDMARecFmt {
		return p, reject(nvmeproto.RDMARejectInvalidRecFmt, "recfmt %d, only %d is defined", r.RecFmt, nvmeproto.RDMARecFmt)
	}
	if int(r.QID) > lim.maxIOQueues {
		return p, reject(nvmeproto.RDMARejectInvalidQID, "qid %d, at most %d I/O queues", r.QID, lim.maxIOQueues)
	}
	entries := int(r.HSQSize) + 1
	limit := lim.maxDepth
	if r.QID == 0 {
		limit = lim.adminDepth
		if entries > limit {
			return p, reject(nvmeproto.RDMARejectInvalidHSQSize, "admin queue hsqsize %d (%d entries), at most %d entries", r.HSQSize, entries, limit)
		}
	}
	if entries < 2 {
		return p, reject(nvmeproto.RDMARejectInvalidHSQSize, "hsqsize %d: a queue needs at least 2 entries", r.HSQSize)
	}
	if r.HRQSize == 0 {
		return p, reject(nvmeproto.RDMARejectInvalidHRQSize, "hrqsize 0: the host can receive no responses")
	}
	// Controller IDs are 0..0xFFEF; 0xFFFF is "allocate" (seen on the admin queue). An I/O
	// queue names an existing controller (its Connect is checked by the core); older
	// hosts send zeros.
	if r.QID != 0 && r.CNTLID > 0xFFEF {
		return p, reject(nvmeproto.RDMARejectInvalidCNTLID, "I/O queue %d names cntlid %#x, outside 0..0xffef", r.QID, r.CNTLID)
	}
	if hostIRD <= 0 {
		return p, reject(nvmeproto.RDMARejectInvalidIRD, "the host serves no RDMA READs (responder resources 0): host data could not be fetched")
	}
	p.depth = min(entries, limit)
	if lim.deviceMaxWR > 0 {
		// The send queue holds up to 3 work requests per command (see sqDepth).
		p.depth = min(p.depth, lim.deviceMaxWR/3)
	}
	if p.depth < 2 {
		return p, reject(nvmeproto.RDMARejectNoResources, "the device supports only %d work requests per queue", lim.deviceMaxWR)
	}
	p.hostIRD = hostIRD
	p.ird = hostIRD
	if lim.deviceMaxIRD > 0 {
		p.ird = min(p.ird, lim.deviceMaxIRD)
	}
	return p, nil
}

// rejectData is the private data of a reject with status st.
func rejectData(st nvmeproto.RDMARejectStatus) []byte {
	b := make([]byte, nvmeproto.RDMAConnRejSize)
	(&nvmeproto.RDMAConnRej{RecFmt: nvmeproto.RDMARecFmt, Status: st}).Marshal(b)
	return b
}

// acceptData is the private data of an accept telling the host our receive queue size.
func acceptData(crqsize int) []byte {
	b := make([]byte, nvmeproto.RDMAConnRepSize)
	(&nvmeproto.RDMAConnRep{RecFmt: nvmeproto.RDMARecFmt, CRQSize: uint16(crqsize)}).Marshal(b)
	return b
}
