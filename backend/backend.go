package backend

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/gonvmf/gonvmf/internal/aligned"
)

// Backend is the storage behind one namespace. Offsets and counts are in logical blocks.
//
// Methods are safe for concurrent use, except Close, which must be called once, after every
// other call has returned (close the Executor first). Data buffers are caller-provided;
// they are aligned to Alignment and their length is a non-zero multiple of LBASize — the
// caller (the target's registered buffer pool) guarantees that, and the backend checks it
// cheaply, returning an error wrapping ErrUnaligned. A backend neither copies nor keeps a
// caller's buffer beyond the call.
type Backend interface {
	// LBASize is the logical block size in bytes: a power of two from 512 to 4096.
	LBASize() uint32
	// NumBlocks is the capacity in logical blocks.
	NumBlocks() uint64
	// ReadOnly reports whether writes, deallocate and write zeroes fail with ErrReadOnly.
	ReadOnly() bool
	// ReadBlocks reads len(buf)/LBASize blocks starting at slba into buf.
	ReadBlocks(buf []byte, slba uint64) error
	// WriteBlocks writes buf to len(buf)/LBASize blocks starting at slba. With fua set the
	// data is durable (on stable media) when WriteBlocks returns.
	WriteBlocks(buf []byte, slba uint64, fua bool) error
	// Flush makes every completed write durable.
	Flush() error
	// Deallocate tells the backend that nlb blocks from slba are no longer in use (TRIM).
	// It is advisory: a later read returns zeroes when Describe(b).DeallocateReadsZeroes,
	// and otherwise either the old data or zeroes. nlb 0 does nothing.
	Deallocate(slba, nlb uint64) error
	// WriteZeroes makes nlb blocks from slba read as zeroes. nlb 0 does nothing.
	WriteZeroes(slba, nlb uint64) error
	// Close releases the backend's descriptors and memory.
	Close() error
}

// Alignment is the alignment in bytes that data buffers must have: the page size, which
// satisfies O_DIRECT on every Linux filesystem and block device with sectors up to 4 KiB.
// Go memory aligned to it comes from internal/aligned.Bytes.
const Alignment = aligned.Alignment

// Kind names a backend implementation, as written in the configuration.
type Kind string

const (
	KindFile   Kind = "file"   // a regular file, created or extended to Spec.Size
	KindBlock  Kind = "block"  // a block device
	KindNull   Kind = "null"   // reads return zeroes, writes are dropped
	KindMemory Kind = "memory" // sparse, process-lifetime memory bounded by Spec.Size
	KindRBD    Kind = "rbd"    // a Ceph RBD image (the ceph build only: see RBDSpec)
)

// Spec says which backend to open and how.
type Spec struct {
	Kind Kind
	// Path is the file or block device (file and block only).
	Path string
	// Size is the namespace size in bytes, a multiple of LBASize. For a file, 0 means the
	// existing file's size; a smaller file is extended (sparse) and a larger one is used
	// only up to Size, never truncated. For a block device, 0 means the whole device.
	// null and memory need it.
	Size uint64
	// LBASize is the logical block size: 512 or 4096 (any power of two in between is
	// accepted). 0 means 512, or the device's logical sector size for a block device.
	LBASize uint32
	// ReadOnly opens the file or device read-only; writes fail with ErrReadOnly.
	ReadOnly bool
	// Shared lets other processes open the same file or device at the same time (two
	// targets serving one namespace for high availability): a file is locked shared
	// (flock LOCK_SH) instead of exclusively, so only another shared or read-only opener
	// gets in; a block device is opened without O_EXCL. Coordinating the writers is then
	// the caller's business.
	Shared bool
	// Workers is the number of I/O workers an Executor created with workers <= 0 starts
	// for this backend. 0 means DefaultWorkers for file and block; null and memory run
	// inline and ignore it.
	Workers int
	// Logger receives warnings (for example the fall back to buffered I/O) and the
	// backend's open/close messages. nil means slog.Default().
	Logger *slog.Logger

	// RBD is the image of a KindRBD backend (rbd only).
	RBD RBDSpec
	// OnResize, when set, is called when the backend's capacity changes under it (an RBD
	// image resized with `rbd resize`), with the new capacity in blocks; NumBlocks returns
	// it from then on. It is called from the backend's own goroutine, one call at a time;
	// it must not block on the backend's I/O.
	OnResize func(blocks uint64)
	// OnNeedsReopen, when set, is called once when the backend learns that it serves no
	// more requests until it is reopened (they fail with ErrNeedsReopen from then on): an
	// rbd image whose RADOS client the cluster blocklisted, noticed by a request or the
	// image watch of any image on that client. err wraps ErrNeedsReopen, and ErrSync when
	// writes reported complete since the last successful flush may have been lost. It is
	// called from the backend's own goroutines (a completion path among them): it must
	// return at once and not call the backend.
	OnNeedsReopen func(err error)
	// Faults, when set, makes the file and block backends' system calls, and the rbd
	// backend's librbd writes and flushes, fail as it says (and the rbd backend's size
	// reads wait): for tests of how the layers above handle I/O errors. Never set in
	// production.
	Faults *Faults

	// sys, when set, replaces the system calls of the file and block backends (tests
	// inject faults and count calls with it).
	sys sysOps
}

// DefaultWorkers is the number of I/O workers for the file and block backends when
// Spec.Workers is 0. Each worker holds one synchronous system call, so this is the number
// of commands the backend has in flight at once.
const DefaultWorkers = 64

// Info describes properties of an open backend that the target reports to hosts
// (Identify Namespace) or uses to size its executor.
type Info struct {
	Kind Kind
	Path string
	// Direct reports whether data moves with O_DIRECT (file and block). A file backend on a
	// filesystem that refuses O_DIRECT falls back to buffered I/O and reports false.
	Direct bool
	// DeallocateReadsZeroes reports that blocks read as zeroes after Deallocate
	// (Identify Namespace DLFEAT read behavior 001b).
	DeallocateReadsZeroes bool
	// VolatileWriteCache reports that completed writes may be lost on power failure until
	// Flush. Informational (logs): controllers report a volatile write cache whatever
	// their namespaces have, so that hosts flush a namespace added later.
	VolatileWriteCache bool
	// PhysicalBlockSize is the preferred write granularity in bytes (NPWG/NOWS); at least
	// the logical block size.
	PhysicalBlockSize uint32
	// Workers is the executor size this backend wants; 0 for backends that run inline.
	Workers int
	// Inline reports that requests complete without blocking, so an Executor runs them in
	// the submitting goroutine.
	Inline bool
	// Async reports that the backend completes requests on its own (a library's threads
	// hand them to one goroutine of the backend, or to a Ring's owner): an Executor starts
	// them in Submit and needs no workers, and the number in flight is bounded by the
	// callers, not by threads (rbd).
	Async bool
	// ThinProvisioned reports that storage is allocated as blocks are written (a sparse
	// file): writes can fail for lack of space (ENOSPC) before the namespace is full, and
	// Usage says how much is allocated and how much more can be.
	ThinProvisioned bool
}

// Usager is implemented by thin-provisioned backends (Info.ThinProvisioned).
type Usager interface {
	// Usage returns the bytes of the namespace that are allocated, and the bytes that can
	// still be allocated (the free space of the filesystem, which other files share).
	Usage() (allocated, available uint64, err error)
}

// Describer is implemented by backends that describe themselves; every backend in this
// package does.
type Describer interface {
	Info() Info
}

// Describe returns b's Info, or a conservative default for a Backend that does not
// implement Describer.
func Describe(b Backend) Info {
	if d, ok := b.(Describer); ok {
		return d.Info()
	}
	return Info{VolatileWriteCache: true, PhysicalBlockSize: b.LBASize(), Workers: DefaultWorkers}
}

var (
	// ErrLBAOutOfRange: the command's blocks extend beyond the namespace capacity.
	ErrLBAOutOfRange = errors.New("LBA out of range")
	// ErrReadOnly: a write, deallocate or write zeroes to a read-only namespace.
	ErrReadOnly = errors.New("namespace is read-only")
	// ErrUnaligned: a data buffer that is empty, not aligned to Alignment, or whose length
	// is not a multiple of the logical block size (or does not match Request.NLB).
	ErrUnaligned = errors.New("data buffer misaligned")
	// ErrClosed: a request submitted to a closed Executor.
	ErrClosed = errors.New("backend executor closed")
	// ErrInvalidOp: a Request with an Op this package does not know.
	ErrInvalidOp = errors.New("invalid backend operation")
	// ErrNotSupported: the backend kind is not available on this operating system.
	ErrNotSupported = errors.New("not supported on this platform")
	// ErrShrink: a Resize to less than the current capacity. Hosts may have data in the
	// blocks that would go, so a namespace only grows.
	ErrShrink = errors.New("backend: a namespace cannot shrink")
	// ErrNeedsReopen: the backend serves no more requests until it is closed and opened
	// again: its storage has fenced it off (an rbd image whose RADOS client the cluster
	// blocklisted; an open made after that gets a new client). The request failed and
	// changed nothing that was reported complete; on the reopened backend it may succeed.
	// It speaks for no earlier write: when writes reported complete may have been lost
	// with the fenced client, the error wraps ErrSync as well. Spec.OnNeedsReopen reports
	// the same condition without waiting for a request to meet it. Status maps it to
	// Namespace Not Ready without DNR (ErrSync, if wrapped too, takes precedence).
	ErrNeedsReopen = errors.New("the backend must be reopened: its storage has fenced it off")
	// ErrSync: making completed writes durable failed (fdatasync, or a write through the
	// O_DSYNC descriptor, reported an error). Writes the backend had already reported as
	// complete may be lost, and the kernel reports such an error once: a retried
	// fdatasync succeeds without the data. Status maps it to Write Fault with DNR, and the
	// target stops reporting success for writes to the namespace until it is reopened.
	ErrSync = errors.New("syncing to stable storage failed; completed writes may be lost")
)

// Resizer is implemented by backends whose capacity can grow while they are open (every
// backend of this package). Resize grows the capacity to size bytes, a multiple of
// LBASize — a file is extended (sparse), null and memory simply get larger — or, with
// size 0, takes the size the backing store has now (a block device or a file that was
// grown outside gonvmf). It returns the new number of blocks. Shrinking is refused
// (ErrShrink). Resize is safe to call while requests run: a request sees either the old
// or the new capacity.
type Resizer interface {
	Resize(size uint64) (blocks uint64, err error)
}

// Open opens the backend s describes. Errors name the field or path at fault.
func Open(s Spec) (Backend, error) {
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	switch s.Kind {
	case KindFile:
		return openFile(s)
	case KindBlock:
		return openBlock(s)
	case KindNull:
		return openNull(s)
	case KindMemory:
		return openMemory(s)
	case KindRBD:
		return openRBD(s)
	case "":
		return nil, errors.New("backend: kind is empty; want file, block, null, memory or rbd")
	}
	return nil, fmt.Errorf("backend: unknown kind %q; want file, block, null, memory or rbd", s.Kind)
}

// checkLBASize validates s.LBASize (0 is replaced by def) and returns it with its log2.
func checkLBASize(lba, def uint32) (uint32, uint, error) {
	if lba == 0 {
		lba = def
	}
	if lba < 512 || lba > 4096 || lba&(lba-1) != 0 {
		return 0, 0, fmt.Errorf("backend: lba size %d is invalid; use 512 or 4096", lba)
	}
	return lba, uint(bits.TrailingZeros32(lba)), nil
}

// checkSize validates a namespace size in bytes against the block size and returns the
// number of blocks.
func checkSize(kind Kind, size uint64, lba uint32) (uint64, error) {
	if size == 0 {
		return 0, fmt.Errorf("backend: %s backend needs a size", kind)
	}
	if size%uint64(lba) != 0 {
		return 0, fmt.Errorf("backend: size %d is not a multiple of the lba size %d", size, lba)
	}
	if size > 1<<62 {
		return 0, fmt.Errorf("backend: size %d is too large (at most 2^62 bytes)", size)
	}
	return size / uint64(lba), nil
}

// geometry is the part every backend shares: block size, capacity and the cheap checks.
// The capacity is atomic because Resize may grow it while requests are checked against
// it; it never shrinks, so a request checked against the old capacity stays inside.
type geometry struct {
	lbaSize  uint32
	lbaShift uint
	nblocks  atomic.Uint64
	readOnly bool
}

func (g *geometry) init(lba uint32, shift uint, nblocks uint64, readOnly bool) {
	g.lbaSize, g.lbaShift, g.readOnly = lba, shift, readOnly
	g.nblocks.Store(nblocks)
}

func (g *geometry) LBASize() uint32   { return g.lbaSize }
func (g *geometry) NumBlocks() uint64 { return g.nblocks.Load() }
func (g *geometry) ReadOnly() bool    { return g.readOnly }

// checkRange reports whether [slba, slba+nlb) lies inside the namespace, without
// overflowing.
func (g *geometry) checkRange(slba, nlb uint64) error {
	if n := g.nblocks.Load(); nlb > n || slba > n-nlb {
		return rangeError(slba, nlb, n)
	}
	return nil
}

// grow checks a new capacity of size bytes (0: keep the capacity) against the current
// one and returns it in blocks.
func (g *geometry) growTo(size uint64) (uint64, error) {
	cur := g.nblocks.Load()
	if size == 0 {
		return cur, nil
	}
	if size%uint64(g.lbaSize) != 0 {
		return 0, fmt.Errorf("backend: size %d is not a multiple of the lba size %d", size, g.lbaSize)
	}
	if size > 1<<62 {
		return 0, fmt.Errorf("backend: size %d is too large (at most 2^62 bytes)", size)
	}
	n := size >> g.lbaShift
	if n < cur {
		return 0, fmt.Errorf("%w: %d bytes is less than the current %d", ErrShrink, size, cur<<g.lbaShift)
	}
	return n, nil
}

func rangeError(slba, nlb, capacity uint64) error {
	return fmt.Errorf("%w: slba %d + nlb %d > capacity %d blocks", ErrLBAOutOfRange, slba, nlb, capacity)
}

// checkBuf validates a data buffer and the range it covers and returns its block count.
func (g *geometry) checkBuf(buf []byte, slba uint64) (uint64, error) {
	n := uint64(len(buf))
	if n == 0 || n&uint64(g.lbaSize-1) != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(buf)))&(Alignment-1) != 0 {
		return 0, unalignedError(buf, g.lbaSize)
	}
	nlb := n >> g.lbaShift
	return nlb, g.checkRange(slba, nlb)
}

func unalignedError(buf []byte, lba uint32) error {
	return fmt.Errorf("%w: buffer at %#x length %d; want %d-byte alignment and a non-zero multiple of %d bytes",
		ErrUnaligned, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), len(buf), Alignment, lba)
}

// checkWrite is checkBuf for writes: read-only first, as the namespace's write protection
// is the more fundamental error.
func (g *geometry) checkWrite(buf []byte, slba uint64) (uint64, error) {
	if g.readOnly {
		return 0, ErrReadOnly
	}
	return g.checkBuf(buf, slba)
}

// checkModify is the check for deallocate and write zeroes.
func (g *geometry) checkModify(slba, nlb uint64) error {
	if g.readOnly {
		return ErrReadOnly
	}
	return g.checkRange(slba, nlb)
}
