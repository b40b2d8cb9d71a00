package rdmacm

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrNotSupported is returned by every constructor in builds without RDMA
// support: without cgo, on other operating systems, or with -tags nordma.
var ErrNotSupported = errors.New("rdmacm: RDMA not supported in this build " +
	"(needs linux, cgo and the rdma-core headers libibverbs-dev and librdmacm-dev; " +
	"this binary was built with CGO_ENABLED=0, -tags nordma or for another OS)")

// ErrNoDevice reports that libibverbs found no usable RDMA device, or that
// an address is not bound to one. errors.Is(err, ErrNoDevice) also holds
// for an [*Error] carrying ENODEV.
var ErrNoDevice = errors.New("rdmacm: no RDMA device: load rdma_rxe and add an rxe link " +
	"(modprobe rdma_rxe ib_uverbs rdma_ucm; rdma link add rxe0 type rxe netdev <ifname>; " +
	"the netdev needs a unicast IP that is not on lo), or install the provider for your NIC " +
	"(Debian: ibverbs-providers); see integration/README.md")

// ErrClosed is returned by operations on an object after its Close (or the
// Close of an object it depends on).
var ErrClosed = errors.New("rdmacm: use of closed object")

// Error is a failed libibverbs/librdmacm call: the call, its arguments and
// the errno it reported.
type Error struct {
	Op    string        // C function, e.g. "rdma_bind_addr"
	Args  string        // its arguments, for the message
	Errno syscall.Errno // errno, or the positive error the verbs call returned
}

func (e *Error) Error() string {
	return fmt.Sprintf("rdmacm: %s(%s): %v", e.Op, e.Args, e.Errno)
}

// Unwrap returns the errno, so errors.Is(err, syscall.EAGAIN) works.
func (e *Error) Unwrap() error { return e.Errno }

// Is makes errors.Is(err, ErrNoDevice) true for ENODEV.
func (e *Error) Is(target error) bool {
	return target == ErrNoDevice && e.Errno == syscall.ENODEV
}

func newError(op string, errno syscall.Errno, format string, args ...any) *Error {
	if errno == 0 {
		errno = syscall.EIO // the library failed without saying why
	}
	return &Error{Op: op, Args: fmt.Sprintf(format, args...), Errno: errno}
}

// PostError is a post of a chain of work requests that stopped at Index:
// requests [0, Index) were posted and will complete, requests from Index on
// were not.
type PostError struct {
	Op    string        // "ibv_post_send" or "ibv_post_recv"
	QPNum uint32        // the QP
	Index int           // first request not posted
	ID    uint64        // its ID
	Errno syscall.Errno // ENOMEM: queue full; EINVAL: bad request (e.g. too many SGEs)
}

func (e *PostError) Error() string {
	return fmt.Sprintf("rdmacm: %s(qp %d): work request %d (id %#x) not posted: %v",
		e.Op, e.QPNum, e.Index, e.ID, e.Errno)
}

// Unwrap returns the errno.
func (e *PostError) Unwrap() error { return e.Errno }

// RejectError is returned by [Dial] when the passive side rejected the
// connection; it carries the reject's private data (for NVMe-oF: recfmt and
// sts, 4 bytes, possibly padded by the transport).
type RejectError struct {
	Reason      int    // CM reject reason; RejectConsumerDefined for rdma_reject
	PrivateData []byte // the reject's private data
}

func (e *RejectError) Error() string {
	pd := e.PrivateData
	for len(pd) > 0 && pd[len(pd)-1] == 0 {
		pd = pd[:len(pd)-1] // the transport pads it
	}
	return fmt.Sprintf("rdmacm: connection rejected (reason %d, private data % x, %d bytes with padding)",
		e.Reason, pd, len(e.PrivateData))
}

// WCError describes a completion with an error status; see [Completion.Err].
type WCError struct {
	ID        uint64
	QPNum     uint32
	Opcode    WCOpcode // only meaningful for successful completions; kept for logs
	Status    WCStatus
	VendorErr uint32
}

func (e *WCError) Error() string {
	return fmt.Sprintf("rdmacm: work completion error on qp %d (wr id %#x): %v (vendor error %#x)",
		e.QPNum, e.ID, e.Status, e.VendorErr)
}

// MemlockError reports that RLIMIT_MEMLOCK is too small for the memory the
// process must lock and register. errors.Is(err, ErrMemlock) holds.
type MemlockError struct {
	Limit uint64 // soft RLIMIT_MEMLOCK in bytes
	Need  uint64 // bytes that must be locked (already locked + requested)
}

// ErrMemlock is the target of errors.Is for a [*MemlockError].
var ErrMemlock = errors.New("rdmacm: RLIMIT_MEMLOCK too small")

func (e *MemlockError) Error() string {
	return fmt.Sprintf("rdmacm: RLIMIT_MEMLOCK is %s but %s must be locked: "+
		"run `ulimit -l unlimited` (or at least %d KiB) before starting, "+
		"set LimitMEMLOCK=infinity in the systemd unit, "+
		"or grant CAP_IPC_LOCK", fmtBytes(e.Limit), fmtBytes(e.Need), (e.Need+1023)/1024)
}

// Is makes errors.Is(err, ErrMemlock) true.
func (e *MemlockError) Is(target error) bool { return target == ErrMemlock }

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
