//go:build cgo && !nordma

package rdmacm

/*
#cgo CFLAGS: -O2 -Wall
#cgo LDFLAGS: -lrdmacm -libverbs
#include "verbs_linux.h"
*/
import "C"

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"unsafe"
)

// closer is an object another object depends on, closed first by its
// parent's Close.
type closer interface{ Close() error }

// node is embedded in every object. It guards the C object's lifetime and
// tracks the objects that depend on it.
//
// Operations that use the C object (posts, polls, creating dependents) hold
// life for reading; Close sets closed under the write lock, so once it is
// set no operation is in flight and none can start. Dependents register in
// kids and are closed before the object itself.
type node struct {
	life   sync.RWMutex
	closed bool // guarded by life

	kidsMu sync.Mutex
	kids   map[closer]struct{}

	once     sync.Once
	closeErr error
}

// acquire returns false if the object is closed; otherwise the caller must
// call release when done with the C object.
func (n *node) acquire() bool {
	n.life.RLock()
	if n.closed {
		n.life.RUnlock()
		return false
	}
	return true
}

func (n *node) release() { n.life.RUnlock() }

// isClosed reports whether Close has started.
func (n *node) isClosed() bool {
	n.life.RLock()
	defer n.life.RUnlock()
	return n.closed
}

// addKid registers a dependent; the caller holds acquire().
func (n *node) addKid(c closer) {
	n.kidsMu.Lock()
	if n.kids == nil {
		n.kids = make(map[closer]struct{})
	}
	n.kids[c] = struct{}{}
	n.kidsMu.Unlock()
}

func (n *node) removeKid(c closer) {
	n.kidsMu.Lock()
	delete(n.kids, c)
	n.kidsMu.Unlock()
}

// closeOrder orders an object's dependents for closing: registered memory last. A QP
// still posting may name it (a provider copies an inline send's payload from it inside
// ibv_post_send), and a QP's Close waits for its posts in progress; an Arena's does not.
func closeOrder(kids []closer) {
	slices.SortStableFunc(kids, func(a, b closer) int {
		_, am := a.(*Arena)
		_, bm := b.(*Arena)
		switch {
		case am == bm:
			return 0
		case am:
			return 1
		}
		return -1
	})
}

// closeOnce runs destroy once; concurrent and later calls wait for the first
// to finish and return nil. destroy runs after the object is marked closed
// (no operation in flight) and its dependents are closed.
func (n *node) closeOnce(destroy func() error) error {
	first := false
	n.once.Do(func() {
		first = true
		n.life.Lock()
		n.closed = true
		n.life.Unlock()
		n.kidsMu.Lock()
		kids := make([]closer, 0, len(n.kids))
		for k := range n.kids {
			kids = append(kids, k)
		}
		closeOrder(kids)
		n.kids = nil
		n.kidsMu.Unlock()
		var errs []error
		for _, k := range kids {
			if err := k.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := destroy(); err != nil {
			errs = append(errs, err)
		}
		n.closeErr = errors.Join(errs...)
	})
	if first {
		return n.closeErr
	}
	return nil
}

// registry maps the integer handles stored in C objects (id->context,
// cq->cq_context) back to Go objects: C never holds Go pointers.
type registry[T any] struct {
	mu   sync.Mutex
	next uintptr
	m    map[uintptr]T
}

func (r *registry[T]) add(v T) uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[uintptr]T)
	}
	r.next++
	r.m[r.next] = v
	return r.next
}

func (r *registry[T]) get(h uintptr) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[h]
	return v, ok
}

func (r *registry[T]) remove(h uintptr) {
	r.mu.Lock()
	delete(r.m, h)
	r.mu.Unlock()
}

var (
	cmids registry[*CMID]
	cqs   registry[*CQ]
)

// toCAddr converts an address to the C helper's form.
func toCAddr(ap netip.AddrPort) C.gonvmf_addr {
	var a C.gonvmf_addr
	ip := ap.Addr()
	switch {
	case !ip.IsValid():
		return a // family 0: none
	case ip.Is4() || ip.Is4In6():
		a.family = C.AF_INET
		b := ip.Unmap().As4()
		for i := range b {
			a.addr[i] = C.uint8_t(b[i])
		}
	default:
		a.family = C.AF_INET6
		b := ip.As16()
		for i := range b {
			a.addr[i] = C.uint8_t(b[i])
		}
	}
	a.port = C.uint16_t(ap.Port())
	return a
}

func fromCAddr(a *C.gonvmf_addr) netip.AddrPort {
	switch a.family {
	case C.AF_INET:
		var b [4]byte
		for i := range b {
			b[i] = byte(a.addr[i])
		}
		return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(a.port))
	case C.AF_INET6:
		var b [16]byte
		for i := range b {
			b[i] = byte(a.addr[i])
		}
		return netip.AddrPortFrom(netip.AddrFrom16(b), uint16(a.port))
	}
	return netip.AddrPort{}
}

// errnoOf converts a C helper's positive error code.
func errnoOf(rc C.int) syscall.Errno { return syscall.Errno(rc) }

// negErrno converts a C helper's negative error code.
func negErrno(rc C.int) syscall.Errno {
	if rc >= 0 {
		return syscall.EIO
	}
	return syscall.Errno(-rc)
}

// cBytes returns a pointer to b's data for a C call that only reads it
// during the call (nil for an empty slice).
func cBytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// errnoFrom extracts the errno cgo returned with a call's result.
func errnoFrom(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return syscall.EIO
}

// cHandle passes a libibverbs object to the per-I/O C calls as an integer (see
// verbs_linux.h): cgo checks a pointer argument whose type has pointers in it
// for Go memory at every call, about 6 ns of a 34 ns call on the build
// machine, and these objects are C memory that never moves.
func cHandle(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }
