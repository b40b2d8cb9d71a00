package backend

import (
	"fmt"
	"io"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring is a Linux native asynchronous I/O context (io_setup/io_submit) owned by one
// goroutine, typically a transport's poll loop. Reads and writes of the file and block
// backends opened with O_DIRECT go to the kernel without a worker goroutine: the owner
// submits with Executor.SubmitRing, the kernel signals the eventfd given to NewRing when
// a request completes, and the owner calls Reap, which calls the requests' Done. This is
// how the kernel's own target drives files and block devices (asynchronous direct I/O),
// and it saves the two goroutine (and thread) hand-offs per command of the worker pool,
// and the scheduler's churn around a blocking system call in every worker.
//
// A Ring is not safe for concurrent use: Submit, Ready and Reap belong to its owner.
type Ring struct {
	ctx    uintptr
	ring   *aioRing // the kernel's completion ring, mapped at ctx
	notify int      // eventfd the kernel signals per completion (-1: none)

	iocbs  []iocb
	slots  []ringSlot
	free   []int32
	events []ioEvent
	ptr    [1]*iocb

	inflight atomic.Int32

	ext ringExt // rbd requests completing on this ring (the ceph build)
}

type ringSlot struct {
	r    *Request
	e    *Executor
	s    *fdStore
	fd   int // the store's descriptor for r: the O_DSYNC one for FUA writes
	off  int64
	done int // bytes already transferred (short transfers are finished synchronously)
}

// struct iocb of <linux/aio_abi.h> (little-endian layout).
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   int32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// struct io_event.
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

// struct aio_ring, the header of the completion ring the kernel maps at the context's
// address.
type aioRing struct {
	id, nr, head, tail uint32
	magic              uint32
	compat, incompat   uint32
	headerLength       uint32
}

const (
	iocbCmdPread  = 0
	iocbCmdPwrite = 1
	iocbFlagResfd = 1 << 0
	aioRingMagic  = 0xa10a10a1
)

// NewRing creates a context for depth requests in flight; the kernel signals eventfd
// notify (when >= 0) on every completion. In the ceph build, rbd requests submitted
// through the ring complete on it too (their number is not bounded by depth), and librbd's
// threads signal notify when the first of a batch completes.
func NewRing(depth, notify int) (*Ring, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("backend: asynchronous I/O ring of %d requests", depth)
	}
	g := &Ring{notify: notify}
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&g.ctx)), 0); e != 0 {
		if e == unix.EAGAIN {
			return nil, fmt.Errorf("backend: io_setup(%d): %w: the system's AIO events are used up; raise fs.aio-max-nr (sysctl -w fs.aio-max-nr=1048576)", depth, e)
		}
		return nil, fmt.Errorf("backend: io_setup(%d): %w", depth, e)
	}
	// The context ID is the address of the kernel's ring, mapped into the process: read
	// its head and tail to see completions without a system call.
	g.ring = *(**aioRing)(unsafe.Pointer(&g.ctx))
	if g.ring.magic != aioRingMagic || g.ring.headerLength != uint32(unsafe.Sizeof(aioRing{})) {
		g.ring = nil // an unknown layout: Ready always asks the kernel
	}
	g.iocbs = make([]iocb, depth)
	g.slots = make([]ringSlot, depth)
	g.free = make([]int32, 0, depth)
	for i := depth - 1; i >= 0; i-- {
		g.free = append(g.free, int32(i))
	}
	g.events = make([]ioEvent, min(depth, 128))
	return g, nil
}

// InFlight returns the number of requests submitted and not yet reaped.
func (g *Ring) InFlight() int { return int(g.inflight.Load()) + g.ext.inFlight() }

// Ready reports whether completions may be waiting for Reap.
func (g *Ring) Ready() bool {
	if g.ext.ready() {
		return true
	}
	if g.inflight.Load() == 0 {
		return false
	}
	if g.ring == nil {
		return true
	}
	return atomic.LoadUint32(&g.ring.head) != atomic.LoadUint32(&g.ring.tail)
}

// submit starts r on the ring if its backend and operation allow; it reports whether it
// did. The executor's accounting (e.active) is taken by the caller.
func (g *Ring) submit(e *Executor, r *Request) bool {
	if len(g.free) == 0 || (r.Op != OpRead && r.Op != OpWrite) {
		return false
	}
	s, ok := e.b.(interface{ asyncStore() *fdStore })
	if !ok {
		return false
	}
	fs := s.asyncStore()
	if fs == nil {
		return false
	}
	var err error
	if r.Op == OpRead {
		_, err = fs.checkBuf(r.Buf, r.SLBA)
	} else {
		_, err = fs.checkWrite(r.Buf, r.SLBA)
	}
	if err == nil && r.NLB != 0 && r.NLB != uint64(len(r.Buf))>>fs.lbaShift {
		err = nlbMismatch(r, fs.lbaSize)
	}
	if err != nil {
		return false // the executor reports it, synchronously
	}
	fd := fs.fd
	if r.Op == OpWrite && r.FUA {
		if fs.syncF == nil {
			return false // FUA needs an fdatasync: the executor does it
		}
		fd = fs.syncFD
	}
	i := g.free[len(g.free)-1]
	sl := &g.slots[i]
	*sl = ringSlot{r: r, e: e, s: fs, fd: fd, off: int64(r.SLBA << fs.lbaShift)}
	if !g.start(i) {
		*sl = ringSlot{}
		return false
	}
	g.free = g.free[:len(g.free)-1]
	g.inflight.Add(1)
	return true
}

// start submits slot i's remaining transfer.
func (g *Ring) start(i int32) bool {
	sl := &g.slots[i]
	cb := &g.iocbs[i]
	*cb = iocb{data: uint64(i), fildes: uint32(sl.fd), offset: sl.off + int64(sl.done)}
	cb.opcode = iocbCmdPread
	if sl.r.Op == OpWrite {
		cb.opcode = iocbCmdPwrite
	}
	b := sl.r.Buf[sl.done:]
	cb.buf = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	cb.nbytes = uint64(len(b))
	if g.notify >= 0 {
		cb.flags = iocbFlagResfd
		cb.resfd = uint32(g.notify)
	}
	g.ptr[0] = cb
	for {
		n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, g.ctx, 1, uintptr(unsafe.Pointer(&g.ptr[0])))
		g.ptr[0] = nil
		if e == unix.EINTR {
			g.ptr[0] = cb
			continue
		}
		return e == 0 && n == 1
	}
}

// Reap completes the requests the kernel (or librbd) has finished (calling their Done)
// and returns how many. It does not block.
func (g *Ring) Reap() int {
	return g.ext.reap() + g.reapAIO()
}

func (g *Ring) reapAIO() int {
	if g.inflight.Load() == 0 {
		return 0
	}
	var zero unix.Timespec
	n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, g.ctx, 0, uintptr(len(g.events)),
		uintptr(unsafe.Pointer(&g.events[0])), uintptr(unsafe.Pointer(&zero)), 0)
	if e != 0 {
		return 0
	}
	done := 0
	for k := range g.events[:n] {
		ev := &g.events[k]
		if g.finish(int32(ev.data), ev.res) {
			done++
		}
	}
	return done
}

// finish handles a completion of slot i with result res; it reports whether the request
// is done (a short transfer is continued).
func (g *Ring) finish(i int32, res int64) bool {
	sl := &g.slots[i]
	r := sl.r
	var err error
	switch {
	case res < 0:
		err = g.ioError(sl, unix.Errno(-res))
		if r.Op == OpWrite && r.FUA {
			err = sl.s.syncWriteError(err)
		}
	case res == 0:
		if r.Op == OpRead {
			err = fmt.Errorf("backend: read %s at byte %d, %d bytes: %w (file truncated?)", sl.s.path, sl.off+int64(sl.done), len(r.Buf)-sl.done, io.ErrUnexpectedEOF)
		} else {
			err = fmt.Errorf("backend: write %s at byte %d, %d bytes: %w", sl.s.path, sl.off+int64(sl.done), len(r.Buf)-sl.done, io.ErrShortWrite)
		}
	default:
		sl.done += int(res)
		if sl.done < len(r.Buf) {
			if g.start(i) {
				return false
			}
			// Could not resubmit: finish the rest synchronously (rare: a short transfer).
			off := sl.off + int64(sl.done)
			if r.Op == OpRead {
				err = sl.s.readFull(r.Buf[sl.done:], off)
			} else if err = sl.s.writeFull(sl.fd, r.Buf[sl.done:], off); r.FUA {
				err = sl.s.syncWriteError(err)
			}
		}
	}
	e := sl.e
	*sl = ringSlot{}
	g.free = append(g.free, i)
	g.inflight.Add(-1)
	r.Err = err
	r.Done(r)
	e.active.Done()
	return true
}

func (g *Ring) ioError(sl *ringSlot, errno unix.Errno) error {
	what := "read"
	if sl.r.Op == OpWrite {
		what = "write"
	}
	return fmt.Errorf("backend: %s %s at byte %d, %d bytes: %w", what, sl.s.path, sl.off+int64(sl.done), len(sl.r.Buf)-sl.done, errno)
}

// Close waits for the requests in flight (reaping them) and destroys the context.
func (g *Ring) Close() error {
	g.ext.close()
	for g.inflight.Load() > 0 {
		var ts unix.Timespec
		ts.Nsec = 10e6
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, g.ctx, 1, uintptr(len(g.events)),
			uintptr(unsafe.Pointer(&g.events[0])), uintptr(unsafe.Pointer(&ts)), 0)
		if e != 0 && e != unix.EINTR {
			break
		}
		for k := range g.events[:n] {
			g.finish(int32(g.events[k].data), g.events[k].res)
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_IO_DESTROY, g.ctx, 0, 0); e != 0 {
		return fmt.Errorf("backend: io_destroy: %w", e)
	}
	return nil
}

// asyncStore returns the store a Ring may drive directly: opened with O_DIRECT and
// through the real system calls (not a test's fault injection).
func (s *fdStore) asyncStore() *fdStore {
	if !s.direct {
		return nil
	}
	if _, ok := s.sys.(realSys); !ok {
		return nil
	}
	return s
}
