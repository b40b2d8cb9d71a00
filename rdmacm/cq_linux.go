//go:build cgo && !nordma

package rdmacm

/*
#cgo noescape gonvmf_poll_cq
#cgo nocallback gonvmf_poll_cq
#cgo nocallback gonvmf_req_notify_cq
#cgo nocallback gonvmf_get_cq_event
#include "verbs_linux.h"
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

// CQ is a completion queue with its own completion channel. Many QPs may
// share one CQ; tell their completions apart by Completion.QPNum or by the
// work request IDs.
//
// The usual loop of the goroutine that owns a CQ:
//
//	for {
//		n, _ := cq.Poll(wcs)
//		if n == 0 {
//			cq.Arm(false)          // then poll once more: a completion
//			n, _ = cq.Poll(wcs)    // may have come in before the arm
//			if n == 0 {
//				cq.Wait(timeout) // sleep; cq.Wake() ends it early
//				continue
//			}
//		}
//		handle(wcs[:n])
//	}
type CQ struct {
	node
	dev     *Device
	cq      *C.struct_ibv_cq
	ch      *C.struct_ibv_comp_channel
	handle  uintptr
	entries int

	pfd    *pollFD
	waitRC C.int
	waitFn func(uintptr) bool
}

// NewCQ creates a completion queue with at least entries entries and a
// completion channel. Size it for every completion that can be outstanding
// on it: an overrun loses completions and moves the QPs to the error state
// (AsyncCQErr).
func (d *Device) NewCQ(entries int) (*CQ, error) {
	if entries <= 0 {
		return nil, fmt.Errorf("rdmacm: CQ with %d entries: must be positive", entries)
	}
	if !d.acquire() {
		return nil, ErrClosed
	}
	defer d.release()
	ch, errno := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, newError("ibv_create_comp_channel", errnoFrom(errno), "%s", d.name)
	}
	cq := &CQ{dev: d, ch: ch, entries: entries}
	cq.handle = cqs.add(cq)
	var e C.int
	cq.cq = C.gonvmf_create_cq(d.ctx, C.int(entries), C.uintptr_t(cq.handle), ch, &e)
	if cq.cq == nil {
		cqs.remove(cq.handle)
		C.ibv_destroy_comp_channel(ch)
		return nil, newError("ibv_create_cq", errnoOf(e), "%s, %d entries", d.name, entries)
	}
	pfd, err := newPollFD(int(ch.fd), d.name+" completion channel")
	if err != nil {
		C.ibv_destroy_cq(cq.cq)
		cqs.remove(cq.handle)
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	cq.pfd = pfd
	cq.entries = int(cq.cq.cqe)
	cq.waitFn = func(uintptr) bool {
		cq.waitRC = C.gonvmf_get_cq_event(cq.ch)
		return cq.waitRC != 0
	}
	d.addKid(cq)
	return cq, nil
}

// Entries returns the CQ's actual size.
func (cq *CQ) Entries() int { return cq.entries }

// Device returns the device the CQ belongs to.
func (cq *CQ) Device() *Device { return cq.dev }

// Poll moves up to len(wc) completions into wc and returns how many. It
// does not block or allocate.
func (cq *CQ) Poll(wc []Completion) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	if !cq.acquire() {
		return 0, ErrClosed
	}
	n := C.gonvmf_poll_cq(cq.cq, (*C.struct_ibv_wc)(unsafe.Pointer(&wc[0])), C.int(len(wc)))
	cq.release()
	if n < 0 {
		return 0, newError("ibv_poll_cq", negErrno(n), "%s", cq.dev.name)
	}
	return int(n), nil
}

// Arm requests a completion channel event for the next completion (only
// the next solicited one if solicitedOnly). Poll once more after arming:
// completions that arrived before the arm raise no event.
func (cq *CQ) Arm(solicitedOnly bool) error {
	if !cq.acquire() {
		return ErrClosed
	}
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	rc := C.gonvmf_req_notify_cq(cq.cq, so)
	cq.release()
	if rc != 0 {
		return newError("ibv_req_notify_cq", errnoOf(rc), "%s", cq.dev.name)
	}
	return nil
}

// Wait sleeps until the armed CQ raises a completion event (notified is
// true), the timeout passes (timeout <= 0: no timeout) or Wake is called.
// It consumes and acknowledges the event. A sleeping Wait holds no OS
// thread. Call Wait from one goroutine at a time. It does not allocate.
func (cq *CQ) Wait(timeout time.Duration) (notified bool, err error) {
	if cq.isClosed() {
		return false, ErrClosed
	}
	ok, err := cq.pfd.waitTimeout(timeout, cq.waitFn)
	if err != nil {
		if cq.isClosed() {
			return false, ErrClosed
		}
		return false, fmt.Errorf("rdmacm: wait on completion channel of %s: %w", cq.dev.name, err)
	}
	if !ok {
		return false, nil
	}
	if cq.waitRC < 0 {
		return false, newError("ibv_get_cq_event", negErrno(cq.waitRC), "%s", cq.dev.name)
	}
	return true, nil
}

// Wake makes a sleeping Wait return (notified false), or the next Wait if
// none is sleeping. Safe from any goroutine; use it to hand the CQ's
// goroutine new work.
func (cq *CQ) Wake() {
	if cq.pfd != nil {
		cq.pfd.interrupt()
	}
}

// Close destroys the QPs using the CQ, then the CQ and its channel. A
// sleeping Wait returns ErrClosed.
func (cq *CQ) Close() error {
	if cq == nil {
		return nil
	}
	return cq.closeOnce(func() error {
		cq.dev.removeKid(cq)
		cq.pfd.close() // wakes Wait, waits for a running read
		cqs.remove(cq.handle)
		var err error
		if rc := C.ibv_destroy_cq(cq.cq); rc != 0 {
			err = newError("ibv_destroy_cq", errnoOf(rc), "%s", cq.dev.name)
		}
		if rc := C.ibv_destroy_comp_channel(cq.ch); rc != 0 && err == nil {
			err = newError("ibv_destroy_comp_channel", errnoOf(rc), "%s", cq.dev.name)
		}
		return err
	})
}
