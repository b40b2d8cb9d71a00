package backend

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring is a Linux native asynchronous I/O context (io_setup/io_submit) owned by one
// goroutine, typically a transport's poll loop. Reads and writes of the file and block
// backends opened with O_DIRECT go to the kernel without a worker goroutine: the owner
// queues them with Executor.SubmitRing and hands everything queued to the kernel with one
// io_submit in Flush (once per round of its loop), the kernel signals the eventfd given to
// NewRing when a request completes, and the owner calls Reap, which takes the completions
// from the ring the kernel keeps in the process's memory, without a system call, and calls
// the requests' Done. This is how the kernel's own target drives files and block devices
// (asynchronous direct I/O), and it saves the two goroutine (and thread) hand-offs per
// command of the worker pool, and the scheduler's churn around a blocking system call in
// every worker.
//
// Requests are submitted with RWF_NOWAIT: one that would make io_submit sleep (a write
// into a hole of a sparse file, which ext4 and xfs allocate in the submitter's context —
// measured in a TCG guest on ext4: 1.3 ms per io_submit on average, up to 325 ms, against
// 0.1 ms with RWF_NOWAIT; see BenchmarkRingSubmitWrite — or a full device queue) fails
// with EAGAIN instead, and goes to the Executor's workers.
//
// Linux AIO, not io_uring: without a kernel thread polling its submission queue
// (IORING_SETUP_SQPOLL) io_uring makes the same one system call per round (io_uring_enter)
// and reaps from a ring in user memory as this does, so it would save no crossing here;
// SQPOLL saves the call by taking a CPU for the polling thread, from the poll groups and,
// with a software RDMA device, from the packet work. And io_uring is refused where storage
// targets are often deployed: the default seccomp profiles of containerd (RuntimeDefault)
// and Docker (25.0 and later, moby/moby#46762) block its system calls, and Linux 6.6
// added the kernel.io_uring_disabled sysctl. It would need raw system calls
// (io_uring_setup, io_uring_enter, mmap of the rings) and this Ring kept as the fallback.
//
// A Ring is not safe for concurrent use: Submit, Flush, Ready and Reap belong to its owner.
type Ring struct {
	ctx    uintptr
	ring   *aioRing  // the kernel's completion ring, mapped at ctx (nil: an unknown layout)
	ringEv []ioEvent // its events
	notify int       // eventfd the kernel signals per completion (-1: none)

	iocbs   []iocb
	slots   []ringSlot
	free    []int32
	events  []ioEvent
	pending []*iocb // queued by submit, handed to the kernel by Flush
	pendIdx []int32 // their slots

	inflight atomic.Int32 // queued or in the kernel, not yet reaped

	// nowait submits with RWF_NOWAIT: what would block the submitter — a write into a
	// hole of a sparse file (block allocation, the inode lock taken exclusively, the
	// journal), a block device's full request queue — fails with EAGAIN instead, and the
	// request goes to the executor's workers. The owner is an event loop serving many
	// hosts; it must not sleep in io_submit.
	nowait    bool
	fallbacks atomic.Uint64 // requests handed to the workers (EAGAIN, or refused by io_submit)

	// Fault injection (tests; nil otherwise): faultSubmit stands in for io_submit of cbs
	// (it may pass a prefix to sysSubmit), faultResult rewrites the result of r's
	// completion before finish acts on it.
	faultSubmit func(cbs []*iocb) (int, unix.Errno)
	faultResult func(r *Request, res int64) int64

	ext ringExt // rbd requests completing on this ring (the ceph build)

	// Counters (owner goroutine): system calls made, for tests and benchmarks.
	Submits, GetEvents uint64
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
	rwfNowait     = 0x8 // RWF_NOWAIT of <linux/fs.h>
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
	g := &Ring{notify: notify, nowait: true}
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&g.ctx)), 0); e != 0 {
		if e == unix.EAGAIN {
			return nil, fmt.Errorf("backend: io_setup(%d): %w: the system's AIO events are used up; raise fs.aio-max-nr (sysctl -w fs.aio-max-nr=1048576)", depth, e)
		}
		return nil, fmt.Errorf("backend: io_setup(%d): %w", depth, e)
	}
	// The context ID is the address of the kernel's ring, mapped into the process: its
	// head and tail say whether completions wait, and its events can be taken without a
	// system call (the kernel reads the head back to know which slots are free again).
	g.ring = *(**aioRing)(unsafe.Pointer(&g.ctx))
	if g.ring.magic != aioRingMagic || g.ring.headerLength != uint32(unsafe.Sizeof(aioRing{})) || g.ring.nr == 0 {
		g.ring = nil // an unknown layout: Ready always asks the kernel, Reap calls io_getevents
	} else {
		g.ringEv = unsafe.Slice((*ioEvent)(unsafe.Add(unsafe.Pointer(g.ring), unsafe.Sizeof(aioRing{}))), g.ring.nr)
	}
	g.iocbs = make([]iocb, depth)
	g.slots = make([]ringSlot, depth)
	g.pending = make([]*iocb, 0, depth)
	g.pendIdx = make([]int32, 0, depth)
	g.free = make([]int32, 0, depth)
	for i := depth - 1; i >= 0; i-- {
		g.free = append(g.free, int32(i))
	}
	g.events = make([]ioEvent, min(depth, 128))
	return g, nil
}

// Fallbacks returns the number of requests that went to the executor's workers instead
// of completing on the ring: those that would have blocked the owner in the kernel
// (EAGAIN under RWF_NOWAIT) and those io_submit refused.
func (g *Ring) Fallbacks() uint64 { return g.fallbacks.Load() }

// InFlight returns the number of requests queued or submitted and not yet reaped.
func (g *Ring) InFlight() int { return int(g.inflight.Load()) + g.ext.inFlight() }

// Pending returns the number of requests queued for the next Flush.
func (g *Ring) Pending() int { return len(g.pending) }

// Ready reports whether completions may be waiting for Reap.
func (g *Ring) Ready() bool {
	if g.ext.ready() {
		return true
	}
	if int(g.inflight.Load()) == len(g.pending) {
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
	g.free = g.free[:len(g.free)-1]
	g.slots[i] = ringSlot{r: r, e: e, s: fs, fd: fd, off: int64(r.SLBA << fs.lbaShift)}
	g.inflight.Add(1)
	g.queue(i)
	return true
}

// queue prepares slot i's remaining transfer for the next Flush.
func (g *Ring) queue(i int32) {
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
	if g.nowait {
		cb.rwFlags = rwfNowait
	}
	if g.notify >= 0 {
		cb.flags = iocbFlagResfd
		cb.resfd = uint32(g.notify)
	}
	g.pending = append(g.pending, cb)
	g.pendIdx = append(g.pendIdx, i)
}

// Flush hands every queued request to the kernel with one io_submit (more only if the
// kernel takes part of them); a request io_submit refuses goes to its executor's workers,
// so the owner never does I/O itself. Every queued request is thus submitted or handed
// to the workers exactly once. Flush returns how many were queued. Call it once per
// round of the owner's loop, after the round's submissions.
func (g *Ring) Flush() int {
	n := len(g.pending)
	for k := 0; k < n; {
		r, e := g.ioSubmit(g.pending[k:n])
		g.Submits++
		switch {
		case e == unix.EINTR:
			continue
		case e == 0 && r > 0:
			k += min(r, n-k)
			continue
		}
		// Refused, the first of the rest (EAGAIN: the kernel's slots are not yet freed;
		// EOPNOTSUPP: a file without RWF_NOWAIT; EINVAL, EBADF: this request): a worker
		// does it, and the rest go on.
		i := g.pendIdx[k]
		k++
		if e == unix.EOPNOTSUPP && g.nowait {
			g.slots[i].s.refusesNowait()
		}
		g.fallback(i)
	}
	clear(g.pending)
	g.pending = g.pending[:0]
	g.pendIdx = g.pendIdx[:0]
	return n
}

// Reap completes the requests the kernel (or librbd) has finished (calling their Done)
// and returns how many. It does not block, and makes no system call when the kernel's
// ring is readable in place.
func (g *Ring) Reap() int {
	return g.ext.reap() + g.reapAIO()
}

func (g *Ring) reapAIO() int {
	if int(g.inflight.Load()) == len(g.pending) {
		return 0
	}
	if g.ring == nil {
		return g.reapSyscall()
	}
	done := 0
	nr := g.ring.nr
	head := atomic.LoadUint32(&g.ring.head)
	for {
		tail := atomic.LoadUint32(&g.ring.tail) // the kernel writes the event, then the tail
		if head == tail {
			return done
		}
		if head >= nr || tail >= nr {
			return done + g.reapSyscall() // not a ring we understand: let the kernel do it
		}
		for head != tail {
			ev := g.ringEv[head]
			head++
			if head == nr {
				head = 0
			}
			// Give the slot back before finishing: finish may resubmit (a short transfer).
			atomic.StoreUint32(&g.ring.head, head)
			if g.finish(int32(ev.data), ev.res) {
				done++
			}
		}
	}
}

// reapSyscall takes the completions with io_getevents.
func (g *Ring) reapSyscall() int {
	var zero unix.Timespec
	n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, g.ctx, 0, uintptr(len(g.events)),
		uintptr(unsafe.Pointer(&g.events[0])), uintptr(unsafe.Pointer(&zero)), 0)
	g.GetEvents++
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
	if g.faultResult != nil {
		res = g.faultResult(r, res)
	}
	var err error
	switch {
	case res == -int64(unix.EAGAIN) && g.nowait:
		// It would have blocked: a worker does it.
		g.fallback(i)
		return false
	case res == -int64(unix.EOPNOTSUPP) && g.nowait:
		// The device takes no non-blocking requests (it failed this one, not the
		// I/O): a worker does it, and the store's next ones too.
		sl.s.refusesNowait()
		g.fallback(i)
		return false
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
			g.queue(i) // the rest goes with the next Flush (rare: a short transfer)
			return false
		}
	}
	g.complete(i, err)
	return true
}

// ioSubmit submits cbs with one io_submit and returns how many the kernel took.
func (g *Ring) ioSubmit(cbs []*iocb) (int, unix.Errno) {
	if g.faultSubmit != nil {
		return g.faultSubmit(cbs)
	}
	return g.sysSubmit(cbs)
}

func (g *Ring) sysSubmit(cbs []*iocb) (int, unix.Errno) {
	if len(cbs) == 0 {
		return 0, 0
	}
	r, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, g.ctx, uintptr(len(cbs)), uintptr(unsafe.Pointer(&cbs[0])))
	return int(r), e
}

// fallback hands slot i's request to its executor's workers, all of it (redoing what a
// short transfer already did is harmless), and frees the slot.
func (g *Ring) fallback(i int32) {
	sl := &g.slots[i]
	r, e := sl.r, sl.e
	*sl = ringSlot{}
	g.free = append(g.free, i)
	g.inflight.Add(-1)
	g.fallbacks.Add(1)
	e.enqueue(r) // under the slot's e.active count, which keeps the workers running
	e.active.Done()
}

// complete ends slot i's request with err and frees the slot.
func (g *Ring) complete(i int32, err error) {
	sl := &g.slots[i]
	r := sl.r
	e := sl.e
	*sl = ringSlot{}
	g.free = append(g.free, i)
	g.inflight.Add(-1)
	r.Err = err
	r.Done(r)
	e.active.Done()
}

func (g *Ring) ioError(sl *ringSlot, errno unix.Errno) error {
	what := "read"
	if sl.r.Op == OpWrite {
		what = "write"
	}
	return fmt.Errorf("backend: %s %s at byte %d, %d bytes: %w", what, sl.s.path, sl.off+int64(sl.done), len(sl.r.Buf)-sl.done, errno)
}

// RingCloseTimeout bounds how long Ring.Close waits for requests in flight.
var RingCloseTimeout = 10 * time.Second

// Close submits what is queued, waits for the requests in flight (reaping them, so their
// Done is called) and destroys the context. The wait is bounded (RingCloseTimeout):
// requests the kernel (or librbd) has not completed by then — a hung device or network
// file system — are left, the context is not destroyed (io_destroy would wait for them),
// and Close returns an error counting them. Their buffers must then stay mapped.
func (g *Ring) Close() error {
	deadline := time.Now().Add(RingCloseTimeout)
	if !g.ext.close(deadline) {
		return fmt.Errorf("backend: %d rbd requests still in flight %v after closing the ring began: left behind", g.ext.inFlight(), RingCloseTimeout)
	}
	g.Flush()
	for g.inflight.Load() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("backend: %d asynchronous I/Os still in flight %v after closing the ring began: "+
				"the AIO context is left (io_destroy would wait for them)", g.inflight.Load(), RingCloseTimeout)
		}
		var ts unix.Timespec
		ts.Nsec = 10e6
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, g.ctx, 1, uintptr(len(g.events)),
			uintptr(unsafe.Pointer(&g.events[0])), uintptr(unsafe.Pointer(&ts)), 0)
		if e == unix.EINTR {
			n = 0 // a signal (the runtime's preemption): wait again
		} else if e != 0 {
			break
		}
		for k := range g.events[:n] {
			g.finish(int32(g.events[k].data), g.events[k].res)
		}
		g.Flush() // the rest of a short transfer
	}
	if _, _, e := unix.Syscall(unix.SYS_IO_DESTROY, g.ctx, 0, 0); e != 0 {
		return fmt.Errorf("backend: io_destroy: %w", e)
	}
	return nil
}

// refusesNowait records that the kernel refused a non-blocking request to s (see
// fdStore.blocking), and says so once.
func (s *fdStore) refusesNowait() {
	if s.blocking.CompareAndSwap(false, true) && s.log != nil {
		s.log.Info("the device refuses non-blocking I/O (RWF_NOWAIT): its reads and writes go to worker goroutines",
			"path", s.path)
	}
}

// asyncStore returns the store a Ring may drive directly: opened with O_DIRECT and
// through the real system calls (not a test's fault injection), and taking
// non-blocking requests.
func (s *fdStore) asyncStore() *fdStore {
	if !s.direct || s.blocking.Load() {
		return nil
	}
	if _, ok := s.sys.(realSys); !ok {
		return nil
	}
	return s
}
