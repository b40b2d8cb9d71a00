//go:build cgo && !nordma

package rdmacm

/*
#cgo noescape gonvmf_post_srq_recv
#cgo nocallback gonvmf_post_srq_recv
#include "verbs_linux.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// SRQ is a shared receive queue: receive buffers posted once for many QPs
// (QPConfig.SRQ), each message taking the next buffer whichever QP it
// arrives on (tell them apart by Completion.QPNum). A QP on an SRQ has no
// receive queue of its own: QP.PostRecv fails, and its error state flushes
// none of the SRQ's buffers.
type SRQ struct {
	node
	pd    *PD
	srq   *C.struct_ibv_srq
	maxWR int
}

// NewSRQ creates a shared receive queue for at least maxWR outstanding
// receives of at most maxSGE SGEs (at most MaxRecvSGE) in pd.
func (pd *PD) NewSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if maxWR <= 0 || maxSGE <= 0 || maxSGE > MaxRecvSGE {
		return nil, fmt.Errorf("rdmacm: NewSRQ(%d, %d): need maxWR > 0 and 1 <= maxSGE <= %d", maxWR, maxSGE, MaxRecvSGE)
	}
	if !pd.acquire() {
		return nil, ErrClosed
	}
	defer pd.release()
	var got C.uint32_t
	var e C.int
	s := C.gonvmf_create_srq(pd.pd, C.uint32_t(maxWR), C.uint32_t(maxSGE), &got, &e)
	if s == nil {
		return nil, newError("ibv_create_srq", errnoOf(e), "%s, %d receives of %d SGEs (device limits: see Device.Query)",
			pd.dev.name, maxWR, maxSGE)
	}
	srq := &SRQ{pd: pd, srq: s, maxWR: int(got)}
	pd.addKid(srq)
	return srq, nil
}

// MaxWR returns how many receives the SRQ holds (at least what was asked for).
func (s *SRQ) MaxWR() int { return s.maxWR }

// PostRecv posts receive requests as one chain. Errors as for QP.PostSend
// (a *PostError of Op "ibv_post_srq_recv" and QPNum 0). It does not allocate.
func (s *SRQ) PostRecv(wrs []RecvWR) error {
	if len(wrs) == 0 {
		return nil
	}
	if !s.acquire() {
		return ErrClosed
	}
	r := C.gonvmf_post_srq_recv(cHandle(unsafe.Pointer(s.srq)), (*C.gonvmf_recv_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs)))
	s.release()
	if errno := syscall.Errno(uint64(r) >> 32); errno != 0 {
		e := &PostError{Op: "ibv_post_srq_recv", Index: int(uint32(r)), Errno: errno}
		if e.Index < len(wrs) {
			e.ID = wrs[e.Index].ID
		}
		return e
	}
	return nil
}

// Close destroys the QPs using the SRQ, then the SRQ; its posted buffers
// are no longer used.
func (s *SRQ) Close() error {
	if s == nil {
		return nil
	}
	return s.closeOnce(func() error {
		s.pd.removeKid(s)
		if rc := C.ibv_destroy_srq(s.srq); rc != 0 {
			return newError("ibv_destroy_srq", errnoOf(rc), "%s", s.pd.dev.name)
		}
		return nil
	})
}
