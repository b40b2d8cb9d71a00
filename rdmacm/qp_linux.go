//go:build cgo && !nordma

package rdmacm

/*
#cgo noescape gonvmf_post_send
#cgo nocallback gonvmf_post_send
#cgo noescape gonvmf_post_recv
#cgo nocallback gonvmf_post_recv
#cgo noescape gonvmf_post
#cgo nocallback gonvmf_post
#include "verbs_linux.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"syscall"
	"unsafe"
)

// QP is a reliable-connected queue pair, created on a CM ID (which moves it
// through its states as the connection is made).
type QP struct {
	node
	id        *CMID
	pd        *PD
	sendCQ    *CQ
	recvCQ    *CQ
	srq       *SRQ
	qp        *C.struct_ibv_qp
	num       uint32
	caps      QPCaps
	maxInline C.uint32_t
}

// CreateQP creates the ID's reliable-connected QP in pd with completions
// going to cfg.SendCQ and cfg.RecvCQ. The ID must be bound to a device: a
// CONNECT_REQUEST's ID, or an ID whose route is resolved. Create the QP and
// post receives before Accept or Connect.
func (id *CMID) CreateQP(pd *PD, cfg QPConfig) (*QP, error) {
	// Describe the ID now: String takes the ID's lock, which is held below.
	desc := id.String()
	if pd == nil || cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: PD, SendCQ and RecvCQ are required", desc)
	}
	if cfg.MaxSendSGE == 0 {
		cfg.MaxSendSGE = 1
	}
	if cfg.MaxRecvSGE == 0 {
		cfg.MaxRecvSGE = 1
	}
	switch {
	case cfg.MaxSendWR <= 0 || cfg.MaxRecvWR < 0:
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: MaxSendWR %d / MaxRecvWR %d: need MaxSendWR > 0, MaxRecvWR >= 0",
			desc, cfg.MaxSendWR, cfg.MaxRecvWR)
	case cfg.MaxSendSGE < 0 || cfg.MaxSendSGE > MaxSGE:
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: MaxSendSGE %d: at most %d", desc, cfg.MaxSendSGE, MaxSGE)
	case cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > MaxRecvSGE:
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: MaxRecvSGE %d: at most %d", desc, cfg.MaxRecvSGE, MaxRecvSGE)
	case cfg.MaxInlineData < 0:
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: MaxInlineData %d is negative", desc, cfg.MaxInlineData)
	}
	if cfg.SendCQ.dev.ctx != pd.dev.ctx || cfg.RecvCQ.dev.ctx != pd.dev.ctx {
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: PD (%s) and CQs (%s, %s) are on different devices",
			desc, pd.dev.name, cfg.SendCQ.dev.name, cfg.RecvCQ.dev.name)
	}
	var srq *C.struct_ibv_srq
	if cfg.SRQ != nil {
		if cfg.SRQ.pd != pd {
			return nil, fmt.Errorf("rdmacm: CreateQP on %s: the SRQ is in another PD", desc)
		}
		srq = cfg.SRQ.srq
		cfg.MaxRecvWR, cfg.MaxRecvSGE = 0, 0
	}

	// Hold every object the QP depends on, in a fixed order (ID, PD, CQs
	// by address) so concurrent Closes cannot deadlock.
	deps := []*node{&id.node, &pd.node, &cfg.SendCQ.node}
	if cfg.RecvCQ != cfg.SendCQ {
		deps = append(deps, &cfg.RecvCQ.node)
		if uintptr(unsafe.Pointer(cfg.RecvCQ)) < uintptr(unsafe.Pointer(cfg.SendCQ)) {
			deps[2], deps[3] = deps[3], deps[2]
		}
	}
	if cfg.SRQ != nil {
		deps = append(deps, &cfg.SRQ.node)
	}
	for i, n := range deps {
		if !n.acquire() {
			for _, m := range deps[:i] {
				m.release()
			}
			return nil, ErrClosed
		}
	}
	defer func() {
		for _, n := range slices.Backward(deps) {
			n.release()
		}
	}()

	id.opMu.Lock()
	defer id.opMu.Unlock()
	if id.qp != nil {
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: the ID already has QP %d", desc, id.qp.num)
	}
	if dev := C.GoString(C.gonvmf_id_device_name(id.id)); dev == "" {
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: the ID is not bound to a device yet (resolve the route first)", desc)
	} else if id.id.verbs != pd.dev.ctx {
		return nil, fmt.Errorf("rdmacm: CreateQP on %s: the ID is on device %s but the PD is on %s", desc, dev, pd.dev.name)
	}
	caps := C.struct_ibv_qp_cap{
		max_send_wr:     C.uint32_t(cfg.MaxSendWR),
		max_recv_wr:     C.uint32_t(cfg.MaxRecvWR),
		max_send_sge:    C.uint32_t(cfg.MaxSendSGE),
		max_recv_sge:    C.uint32_t(cfg.MaxRecvSGE),
		max_inline_data: C.uint32_t(cfg.MaxInlineData),
	}
	sigAll := C.int(0)
	if cfg.SignalAll {
		sigAll = 1
	}
	var num C.uint32_t
	if rc := C.gonvmf_create_qp(id.id, pd.pd, cfg.SendCQ.cq, cfg.RecvCQ.cq, srq, &caps, sigAll, &num); rc != 0 {
		return nil, newError("rdma_create_qp", errnoOf(rc),
			"%s, send_wr %d, recv_wr %d, send_sge %d, recv_sge %d, inline %d (device limits: see Device.Query)",
			desc, cfg.MaxSendWR, cfg.MaxRecvWR, cfg.MaxSendSGE, cfg.MaxRecvSGE, cfg.MaxInlineData)
	}
	qp := &QP{
		id: id, pd: pd, sendCQ: cfg.SendCQ, recvCQ: cfg.RecvCQ, srq: cfg.SRQ,
		qp:  id.id.qp,
		num: uint32(num),
		caps: QPCaps{
			MaxSendWR: int(caps.max_send_wr), MaxRecvWR: int(caps.max_recv_wr),
			MaxSendSGE: int(caps.max_send_sge), MaxRecvSGE: int(caps.max_recv_sge),
			MaxInlineData: int(caps.max_inline_data),
		},
	}
	// Never inline more than asked for: the provider may round up.
	qp.maxInline = C.uint32_t(min(cfg.MaxInlineData, qp.caps.MaxInlineData))
	id.qp = qp
	for _, n := range deps {
		n.addKid(qp)
	}
	return qp, nil
}

// Num returns the QP number (Completion.QPNum).
func (qp *QP) Num() uint32 { return qp.num }

// Caps returns the queue sizes the QP got.
func (qp *QP) Caps() QPCaps { return qp.caps }

// ID returns the CM ID the QP belongs to.
func (qp *QP) ID() *CMID { return qp.id }

// PostSend posts wrs as one chain (in one cgo call; chains longer than 64
// requests ring the doorbell once per 64). SEND and RDMA WRITE requests of
// at most MaxInlineData bytes are sent inline. On failure the error is a
// *PostError whose Index tells how many requests were posted. It does not
// allocate (keep wrs in a long-lived struct).
func (qp *QP) PostSend(wrs []SendWR) error {
	if len(wrs) == 0 {
		return nil
	}
	if !qp.acquire() {
		return ErrClosed
	}
	r := C.gonvmf_post_send(cHandle(unsafe.Pointer(qp.qp)), (*C.gonvmf_send_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs)), qp.maxInline)
	qp.release()
	if errno := syscall.Errno(uint64(r) >> 32); errno != 0 {
		e := &PostError{Op: "ibv_post_send", QPNum: qp.num, Index: int(uint32(r)), Errno: errno}
		if e.Index < len(wrs) {
			e.ID = wrs[e.Index].ID
		}
		return e
	}
	return nil
}

// errSRQRecv: receives of a QP on an SRQ go to the SRQ.
var errSRQRecv = fmt.Errorf("rdmacm: the QP takes its receives from a shared receive queue: post them with SRQ.PostRecv: %w", syscall.EINVAL)

// PostRecv posts receive requests as one chain. Errors as for PostSend.
func (qp *QP) PostRecv(wrs []RecvWR) error {
	if len(wrs) == 0 {
		return nil
	}
	if qp.srq != nil {
		return errSRQRecv
	}
	if !qp.acquire() {
		return ErrClosed
	}
	r := C.gonvmf_post_recv(cHandle(unsafe.Pointer(qp.qp)), (*C.gonvmf_recv_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs)))
	qp.release()
	if errno := syscall.Errno(uint64(r) >> 32); errno != 0 {
		e := &PostError{Op: "ibv_post_recv", QPNum: qp.num, Index: int(uint32(r)), Errno: errno}
		if e.Index < len(wrs) {
			e.ID = wrs[e.Index].ID
		}
		return e
	}
	return nil
}

// Post posts receive requests and then send requests, each as one chain, in one cgo
// call: a poll loop's whole round for the QP. Either slice may be empty. On failure
// the error is a *PostError: Op "ibv_post_recv" (no send was posted) or
// "ibv_post_send" (every receive was), and Index within that slice.
func (qp *QP) Post(recvs []RecvWR, sends []SendWR) error {
	if len(recvs) == 0 {
		return qp.PostSend(sends)
	}
	if qp.srq != nil {
		return errSRQRecv
	}
	if len(sends) == 0 {
		return qp.PostRecv(recvs)
	}
	if !qp.acquire() {
		return ErrClosed
	}
	var failedSend C.int
	r := C.gonvmf_post(cHandle(unsafe.Pointer(qp.qp)), (*C.gonvmf_recv_wr)(unsafe.Pointer(&recvs[0])), C.int(len(recvs)),
		(*C.gonvmf_send_wr)(unsafe.Pointer(&sends[0])), C.int(len(sends)), qp.maxInline, &failedSend)
	qp.release()
	if errno := syscall.Errno(uint64(r) >> 32); errno != 0 {
		e := &PostError{Op: "ibv_post_recv", QPNum: qp.num, Index: int(uint32(r)), Errno: errno}
		if failedSend != 0 {
			e.Op = "ibv_post_send"
			if e.Index < len(sends) {
				e.ID = sends[e.Index].ID
			}
		} else if e.Index < len(recvs) {
			e.ID = recvs[e.Index].ID
		}
		return e
	}
	return nil
}

// Close destroys the QP; outstanding work requests are dropped without
// completions (disconnect first and poll the flushed completions to
// reclaim their buffers gracefully). The CM ID stays.
func (qp *QP) Close() error {
	if qp == nil {
		return nil
	}
	return qp.closeOnce(func() error {
		qp.id.opMu.Lock()
		ch := qp.id.ch // guarded by opMu: the channel the ID's events are read from
		if ch != nil {
			ch.qpMu.Lock() // not while an event of the ID moves the QP (EventChannel.qpMu)
		}
		rc := C.gonvmf_destroy_qp(qp.id.id)
		if ch != nil {
			ch.qpMu.Unlock()
		}
		if rc == 0 && qp.id.qp == qp {
			qp.id.qp = nil
		}
		qp.id.opMu.Unlock()
		qp.id.removeKid(qp)
		qp.pd.removeKid(qp)
		qp.sendCQ.removeKid(qp)
		qp.recvCQ.removeKid(qp)
		if qp.srq != nil {
			qp.srq.removeKid(qp)
		}
		if rc != 0 {
			return newError("ibv_destroy_qp", errnoOf(rc), "qp %d", qp.num)
		}
		return nil
	})
}
