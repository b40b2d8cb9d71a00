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
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// CQ is a completion queue with its own completion channel. Many QPs may
// share one CQ; tell their completions apart by Completion.QPNum or by the
// work request IDs.
//
// The usual loop of the goroutine that owns a CQ (PollWait is its body):
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

	// WaitThread's wake-up: an eventfd written by Wake once a thread waiter
	// has used the CQ (threadWait), and the flag Close raises before waking it.
	wakeFD     int
	threadWait atomic.Bool
	closing    atomic.Bool
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
	efd, _, errno2 := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno2 != 0 {
		pfd.close()
		C.ibv_destroy_cq(cq.cq)
		cqs.remove(cq.handle)
		C.ibv_destroy_comp_channel(ch)
		return nil, fmt.Errorf("rdmacm: eventfd for the completion queue of %s: %w", d.name, errno2)
	}
	cq.wakeFD = int(efd)
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
	n := C.gonvmf_poll_cq(cHandle(unsafe.Pointer(cq.cq)), (*C.struct_ibv_wc)(unsafe.Pointer(&wc[0])), C.int(len(wc)))
	cq.release()
	if n < 0 {
		return 0, newError("ibv_poll_cq", negErrno(n), "%s", cq.dev.name)
	}
	return int(n), nil
}

// PollWait is one turn of the usual loop: Poll, and when nothing is there, Arm, Poll
// again (a completion may have come in before the arm) and, still with nothing, Wait up
// to timeout and return 0. A loop that needs to count or time its sleeps (a poll group)
// writes the steps out instead. It does not allocate.
func (cq *CQ) PollWait(wc []Completion, timeout time.Duration) (int, error) {
	n, err := cq.Poll(wc)
	if n > 0 || err != nil {
		return n, err
	}
	if err := cq.Arm(false); err != nil {
		return 0, err
	}
	if n, err = cq.Poll(wc); n > 0 || err != nil {
		return n, err
	}
	_, err = cq.Wait(timeout)
	return 0, err
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
	rc := C.gonvmf_req_notify_cq(cHandle(unsafe.Pointer(cq.cq)), so)
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
	if cq.threadWait.Load() {
		return false, fmt.Errorf("rdmacm: Wait on the completion queue of %s after WaitThread: its channel has left the netpoller; keep to WaitThread", cq.dev.name)
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

// WaitThread is Wait for a goroutine that owns the CQ and has nothing else
// to do: it blocks its OS thread in poll(2) on the completion channel and a
// wake-up eventfd, in one cgo call, instead of parking in the Go netpoller.
// A completion event then wakes that thread directly, without a runtime
// timer per sleep, a netpoller hand-off or a second thread being started to
// run the goroutine, which is what makes an idle-to-busy transition cheap
// where system calls and context switches are expensive (an emulated guest,
// Soft-RoCE). The price is an OS thread per sleeping CQ. After the first
// WaitThread, Wake writes the eventfd, and the completion channel leaves the
// netpoller (whose threads would otherwise wake for every event with nobody to
// hand it to), so Wait fails from then on. Call it from one goroutine at a time.
// It does not allocate.
func (cq *CQ) WaitThread(timeout time.Duration) (notified bool, err error) {
	if cq.closing.Load() || !cq.acquire() {
		return false, ErrClosed
	}
	if !cq.threadWait.Load() {
		cq.threadWait.Store(true)
		cq.pfd.detach() // see pollFD.detach; Wake writes the eventfd from now on
	}
	// A Wake that did not see threadWait yet interrupted the netpoller instead.
	if cq.pfd.wake.Swap(false) {
		cq.release()
		return false, nil
	}
	if cq.closing.Load() { // Close wakes after raising closing: look once more
		cq.release()
		return false, ErrClosed
	}
	ms := -1
	if timeout > 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	rc := C.gonvmf_wait_cq(cq.ch, C.int(cq.wakeFD), C.int(ms))
	cq.release()
	if rc < 0 {
		return false, newError("poll on completion channel", negErrno(rc), "%s", cq.dev.name)
	}
	return rc&1 != 0, nil
}

// Wake makes a sleeping Wait or WaitThread return (notified false), or the
// next one if none is sleeping. Safe from any goroutine; use it to hand the
// CQ's goroutine new work.
func (cq *CQ) Wake() {
	if cq.threadWait.Load() {
		if cq.acquire() { // the eventfd lives until Close
			cq.signalWake()
			cq.release()
		}
		return
	}
	if cq.pfd != nil {
		cq.pfd.interrupt()
	}
	// A first WaitThread that set threadWait after the load above and took wake before
	// interrupt set it sleeps on the eventfd: signal it too (a spare wake-up is harmless).
	if cq.threadWait.Load() && cq.acquire() {
		cq.signalWake()
		cq.release()
	}
}

// WakeFD returns the eventfd that ends WaitThread when signalled: the CQ's owner may
// have the kernel signal it (an asynchronous I/O context's completions) so that one
// WaitThread sleeps on both. It stays open until Close; do not close it.
func (cq *CQ) WakeFD() int { return cq.wakeFD }

func (cq *CQ) signalWake() {
	one := uint64(1)
	syscall.Syscall(syscall.SYS_WRITE, uintptr(cq.wakeFD), uintptr(unsafe.Pointer(&one)), 8)
}

// Close destroys the QPs using the CQ, then the CQ and its channel. A
// sleeping Wait returns ErrClosed.
func (cq *CQ) Close() error {
	if cq == nil {
		return nil
	}
	// A thread blocked in WaitThread holds the CQ: make it (and any that is
	// about to block) return before Close waits for it.
	if !cq.closing.Swap(true) {
		cq.signalWake()
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
		syscall.Close(cq.wakeFD)
		return err
	})
}
