package backend

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// handoffs counts requests handed to worker goroutines (Handoffs).
var handoffs atomic.Uint64

// Handoffs returns how many requests every Executor has handed to its worker goroutines
// so far. A transport's poll loop that blocks its thread in a system call compares it
// before and after a round: when it changed, a worker goroutine may be waiting to run and
// the loop should yield first (runtime.Gosched).
func Handoffs() uint64 { return handoffs.Load() }

// Op is the operation of a Request.
type Op uint8

const (
	OpRead Op = iota
	OpWrite
	OpFlush
	OpDeallocate
	OpWriteZeroes
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	case OpDeallocate:
		return "deallocate"
	case OpWriteZeroes:
		return "write zeroes"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Range is a run of logical blocks: a Dataset Management range.
type Range struct{ SLBA, NLB uint64 }

// Request is one asynchronous backend operation. The caller owns it (typically one per
// command slot, reused) and must not touch it between Submit and Done.
type Request struct {
	Op   Op
	SLBA uint64
	// NLB is the number of blocks. For OpRead and OpWrite, 0 means len(Buf)/LBASize and any
	// other value must match it. Ignored by OpFlush, and by OpDeallocate when Ranges is set.
	NLB uint64
	// Buf is the data of OpRead and OpWrite (see Backend for the alignment rules).
	Buf []byte
	// FUA makes an OpWrite, OpWriteZeroes or OpDeallocate durable before Done (the
	// target sets it for every write when the host disabled the volatile write cache).
	// For write zeroes and deallocate the backend is flushed after the operation.
	FUA bool
	// Ranges are the blocks of an OpDeallocate (a caller-owned slice, reused); when empty,
	// SLBA and NLB are used. Every range is checked before any is deallocated, so an
	// out-of-range entry fails the request without side effects.
	Ranges []Range
	// Err is the outcome, set before Done is called. Status(r.Op, r.Err) is the NVMe status.
	Err error
	// Done is called exactly once when the request completes, from a worker goroutine,
	// for inline backends from Submit before it returns, for asynchronous ones (rbd) from
	// the backend's completion goroutine (or Submit, for a request failing its checks).
	// Done must be quick.
	Done func(*Request)

	next *Request // the executor's queue (Submit to a worker)
}

// Executor runs Requests against a Backend on a bounded pool of worker goroutines, so a
// transport keeps many commands in flight while each worker blocks in one system call.
// For backends that never block (Info.Inline: null, memory) it runs each request inline in
// Submit instead: Done is then called before Submit returns. Backends that complete
// requests on their own (Info.Async: rbd) get them straight from Submit, without workers.
//
// Submit never waits for the workers: requests beyond those they hold wait in a queue
// linked through the Requests themselves, which the callers own, so the queue needs no
// memory of its own and has no bound but the number of Requests in existence. A
// transport's event loop (a poll group serving many hosts and namespaces) can therefore
// hand a slow or stuck backend as many requests as it likes without being blocked itself.
type Executor struct {
	b      Backend
	inline bool
	async  asyncStarter // the backend starts requests itself (Info.Async)
	mu     sync.RWMutex // held shared by Submit, exclusively by Close
	closed bool
	wg     sync.WaitGroup // workers
	active sync.WaitGroup // inline executions in progress

	qmu        sync.Mutex // the workers' queue
	qcond      sync.Cond  // signaled when a request is queued or the executor stops
	head, tail *Request
	queued     int
	stopping   bool // Close: workers exit once the queue is empty
}

// NewExecutor starts an executor for b. workers <= 0 means Describe(b).Workers (which
// follows Spec.Workers), or DefaultWorkers.
func NewExecutor(b Backend, workers int) *Executor {
	info := Describe(b)
	e := &Executor{b: b, inline: info.Inline}
	e.qcond.L = &e.qmu
	if a, ok := b.(asyncStarter); ok {
		e.async = a
		return e
	}
	if e.inline {
		return e
	}
	if workers <= 0 {
		workers = info.Workers
	}
	if workers <= 0 {
		workers = DefaultWorkers
	}
	e.wg.Add(workers)
	for range workers {
		go e.worker()
	}
	return e
}

// Queued returns the number of requests waiting for a worker.
func (e *Executor) Queued() int {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	return e.queued
}

// Submit starts r; it does not allocate and never blocks: r waits for a worker in the
// executor's queue (or runs inline for inline backends). After Close, r completes at
// once with ErrClosed.
func (e *Executor) Submit(r *Request) {
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		r.Err = ErrClosed
		r.Done(r)
		return
	}
	if e.async != nil {
		e.active.Add(1)
		e.mu.RUnlock()
		e.async.start(r, e, nil)
		return
	}
	if e.inline {
		e.active.Add(1)
		e.mu.RUnlock()
		e.run(r)
		e.active.Done()
		return
	}
	e.enqueue(r)
	e.mu.RUnlock()
}

// enqueue hands r to the workers. The caller holds e.mu shared or an e.active count (a
// ring request that would have blocked): Close stops the workers only after both.
func (e *Executor) enqueue(r *Request) {
	handoffs.Add(1)
	e.qmu.Lock()
	r.next = nil
	if e.tail == nil {
		e.head = r
	} else {
		e.tail.next = r
	}
	e.tail = r
	e.queued++
	e.qcond.Signal()
	e.qmu.Unlock()
}

// asyncStarter is a backend that completes requests on its own (Info.Async): rbd.
type asyncStarter interface {
	// start begins r and returns without waiting for it. The request ends with
	// e.complete, called once: from Submit's goroutine when it fails before reaching the
	// backend's library, otherwise from the backend's completion goroutine, or from g's
	// owner (in g.Reap) when g is not nil. e is nil for a synchronous call.
	start(r *Request, e *Executor, g *Ring)
}

// complete ends a request of an asynchronous backend: its outcome, its Done, then the
// executor's account of requests in flight (e may be nil: a synchronous call).
func (e *Executor) complete(r *Request, err error) {
	r.Err = err
	r.Done(r)
	if e != nil {
		e.active.Done()
	}
}

// SubmitRing is Submit through the asynchronous I/O ring g when the request can run
// there (a read or write, on a file or block backend opened with O_DIRECT, with room in
// the ring; any request of an rbd backend); Done is then called by g.Reap on g's owner
// goroutine. Otherwise, and when g is nil, it is Submit. Close waits for ring requests as
// for any other.
func (e *Executor) SubmitRing(g *Ring, r *Request) {
	if g == nil || e.inline {
		e.Submit(r)
		return
	}
	if e.async != nil {
		e.mu.RLock()
		if e.closed {
			e.mu.RUnlock()
			e.Submit(r) // completes it with ErrClosed
			return
		}
		e.active.Add(1)
		e.mu.RUnlock()
		e.async.start(r, e, g)
		return
	}
	e.mu.RLock()
	if !e.closed {
		e.active.Add(1)
		if g.submit(e, r) {
			e.mu.RUnlock()
			return
		}
		e.active.Done()
	}
	e.mu.RUnlock()
	e.Submit(r)
}

// Close waits for every submitted request to complete and stops the workers. It does not
// close the Backend. Close is idempotent.
func (e *Executor) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.mu.Unlock()
	e.active.Wait() // ring requests may still hand theirs to the workers
	e.qmu.Lock()
	e.stopping = true
	e.qcond.Broadcast()
	e.qmu.Unlock()
	e.wg.Wait()
}

func (e *Executor) worker() {
	defer e.wg.Done()
	for {
		e.qmu.Lock()
		for e.head == nil && !e.stopping {
			e.qcond.Wait()
		}
		r := e.head
		if r == nil { // stopping, and nothing left
			e.qmu.Unlock()
			return
		}
		e.head = r.next
		if e.head == nil {
			e.tail = nil
		}
		r.next = nil
		e.queued--
		e.qmu.Unlock()
		e.run(r)
	}
}

func (e *Executor) run(r *Request) {
	r.Err = Execute(e.b, r)
	r.Done(r)
}

// Execute runs r synchronously against b and returns its error, without calling r.Done.
// The Executor uses it; a caller with its own goroutines may too.
func Execute(b Backend, r *Request) error {
	switch r.Op {
	case OpRead, OpWrite:
		if r.NLB != 0 && r.NLB != uint64(len(r.Buf))/uint64(b.LBASize()) {
			return nlbMismatch(r, b.LBASize())
		}
		if r.Op == OpRead {
			return b.ReadBlocks(r.Buf, r.SLBA)
		}
		return b.WriteBlocks(r.Buf, r.SLBA, r.FUA)
	case OpFlush:
		return b.Flush()
	case OpWriteZeroes:
		return syncIf(b, r.FUA, b.WriteZeroes(r.SLBA, r.NLB))
	case OpDeallocate:
		if len(r.Ranges) == 0 {
			return syncIf(b, r.FUA, b.Deallocate(r.SLBA, r.NLB))
		}
		if b.ReadOnly() {
			return ErrReadOnly
		}
		n := b.NumBlocks()
		for _, rg := range r.Ranges {
			if rg.NLB > n || rg.SLBA > n-rg.NLB {
				return rangeError(rg.SLBA, rg.NLB, n)
			}
		}
		for _, rg := range r.Ranges {
			if err := b.Deallocate(rg.SLBA, rg.NLB); err != nil {
				return err
			}
		}
		return syncIf(b, r.FUA, nil)
	}
	return fmt.Errorf("%w %d", ErrInvalidOp, uint8(r.Op))
}

// syncIf flushes b after a successful operation when fua is set: what makes a write
// zeroes or deallocate durable (the file's extents, the device's cache).
func syncIf(b Backend, fua bool, err error) error {
	if err != nil || !fua {
		return err
	}
	return b.Flush()
}

func nlbMismatch(r *Request, lba uint32) error {
	return fmt.Errorf("%w: buffer length %d is %d blocks of %d bytes, request nlb is %d",
		ErrUnaligned, len(r.Buf), uint64(len(r.Buf))/uint64(lba), lba, r.NLB)
}
