package initiator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// queueTransport is one transport connection (an RDMA queue pair, a loop Conn) carrying
// one NVMe queue. The queue core owns slots, command IDs, timeouts and failure; the
// transport moves capsules and runs the queue's completion goroutine.
type queueTransport interface {
	// post sends the command capsule of s: the SQE s.cmd and, when s.icd is set, the
	// first s.icdLen bytes of s.buf as in-capsule data. It is called from any goroutine.
	post(s *slot) error
	// run is the queue's completion goroutine: it hands responses to q.response and
	// send completions to q.event, finishes slots with q.finish, and when the queue is
	// dead (q.dead) disconnects, drains, waits for q.quiesce and aborts what is left
	// with q.abortAll before returning.
	run()
	// wake interrupts run's sleep (the queue died).
	wake()
	// events is the number of events that complete a command: the response, plus the
	// send completion on RDMA.
	events() int32
	// close frees the transport's resources once run has returned.
	close() error
}

const (
	slotFree uint32 = iota
	slotBusy
)

// Layout of a queue's control region (registered memory): the Connect data, then one
// Dataset Management range per slot; transports append their own areas (capsules,
// response buffers) after ctlSize(depth).
const ctlConnectOff = 0

func ctlDSMOff(i int) int         { return nvmeproto.ConnectDataSize + i*nvmeproto.DSMRangeSize }
func ctlSize(depth int) int       { return nvmeproto.ConnectDataSize + depth*nvmeproto.DSMRangeSize }
func alignUp(n, a int) int        { return (n + a - 1) &^ (a - 1) }
func cidBits(depth int) uint      { return uint(bits.Len(uint(depth - 1))) }
func monoNow(c *Controller) int64 { return c.clock.Load() }

// deadlineAfter returns the controller clock time timeout (> 0) after now (≥ 0),
// saturated at math.MaxInt64, which the clock never passes: a timeout too long to
// represent never expires.
func deadlineAfter(now int64, timeout time.Duration) int64 {
	if int64(timeout) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(timeout)
}

// slot is one command in flight on a queue.
type slot struct {
	q        *queue
	idx      uint16
	gen      uint16
	state    atomic.Uint32
	pending  atomic.Int32  // events still to come before the command is complete
	deadline atomic.Int64  // controller clock; 0: no timeout
	info     atomic.Uint32 // opcode | CID<<16, for the watchdog's message

	cmd     nvmeproto.Command
	req     *Request
	buf     *Buffer // data buffer (one reference held while busy, retries included)
	reg     *region // the memory the keyed SGL addresses (buf's region, or the control region)
	icd     bool    // buf travels in the capsule
	cqe     nvmeproto.Completion
	gotResp bool

	// Retries (see queue.retry). While a failed attempt waits for its Command Retry
	// Delay the slot stays busy with no deadline, its request in retryReq; whoever takes
	// the request out of retryReq owns the slot from then on: retryDue (which sends the
	// command again, or ends it when its caller stopped it), or abortAll once the queue
	// is dead.
	retries  uint8 // attempts sent again for the current command
	retryReq atomic.Pointer[Request]
	timer    *time.Timer // runs retryDue; created stopped with the queue, so retries allocate no timer
	// A command failed with Authentication Required waits in retryReq for the
	// controller's re-authentication (Controller.awaitReauth) before its timer is
	// armed: authWait is the number of the re-authentication it waits for (0: none).
	// A wait starts with authWait 0 (wait), and only awaitReauth sets it, to the number
	// the wait registered with, so a request in retryReq with authWait gen waits for
	// re-authentication gen, not a later one.
	authWait atomic.Uint64
	sentAuth uint64 // Controller.reauthDone when the attempt was sent (arm)
	reserved bool   // the queue's authentication slot (queue.authSlot): never in free

	x any // transport's per-slot state
}

// queue is one NVMe submission/completion queue pair of a controller.
type queue struct {
	ctrl    *Controller
	qid     uint16
	depth   int // slots allocated (hsqsize+1)
	idxMask uint16
	slots   []slot
	free    chan uint16
	icdMax  int // in-capsule data limit in bytes (0: none)
	timeout time.Duration
	ctl     *region // Connect data and DSM ranges
	connBuf *Buffer // the Connect data, in ctl
	tr      queueTransport
	nevents int32
	usable  int // slots in use (≤ depth)
	size    int // I/O queues: the queue size asked for, as granted (IOQueue.Size)

	// authSlot holds the index of the slot kept for authentication commands on an I/O
	// queue that authenticates (reserveAuthSlot), nil otherwise: a re-authentication
	// must find a slot while every other one waits for it.
	authSlot chan uint16
	authed   bool // the queue authenticated at its Connect (re-authentication repeats it)
	// The waiters on this queue of failed re-authentications (endAuthWait), for the
	// completion goroutine to end (runAuthEnds); authEnds is set after each append.
	authEndMu sync.Mutex
	authEndWs []authEnd
	authEnds  atomic.Bool

	active  atomic.Int32 // submitters between the dead check and their post
	waiting atomic.Int32 // busy slots waiting for a retry delay (slot.retryReq set)
	dead    atomic.Bool
	deadCh  chan struct{}
	errMu   sync.Mutex
	err     error
	exited  chan struct{} // run returned
}

func newQueue(c *Controller, qid uint16, depth int, timeout time.Duration) *queue {
	q := &queue{
		ctrl: c, qid: qid, depth: depth, slots: make([]slot, depth),
		idxMask: uint16(1<<cidBits(depth) - 1), free: make(chan uint16, depth),
		timeout: timeout, deadCh: make(chan struct{}), exited: make(chan struct{}),
	}
	for i := range q.slots {
		s := &q.slots[i]
		s.q, s.idx = q, uint16(i)
		s.timer = time.AfterFunc(time.Hour, s.retryDue)
		s.timer.Stop()
	}
	return q
}

// start opens the free list to the first n slots (the usable depth after the transport
// connection told the controller's receive queue size) and starts the completion
// goroutine.
func (q *queue) start(n int) {
	if n > q.depth {
		n = q.depth
	}
	q.usable = n
	for i := 0; i < n; i++ {
		q.free <- uint16(i)
	}
	q.nevents = q.tr.events()
	go func() {
		defer close(q.exited)
		q.tr.run()
	}()
}

// fail kills the queue: every outstanding command completes with err (wrapped), new
// submissions fail. Safe from any goroutine, idempotent.
func (q *queue) fail(err error) {
	q.errMu.Lock()
	first := q.err == nil
	if first {
		q.err = err
	}
	q.errMu.Unlock()
	if !first {
		return
	}
	q.dead.Store(true)
	close(q.deadCh)
	q.tr.wake()
	q.ctrl.queueFailed(err)
}

// deadErr returns why the queue died.
func (q *queue) deadErr() error {
	q.errMu.Lock()
	defer q.errMu.Unlock()
	if q.err == nil {
		return ErrClosed
	}
	return q.err
}

// quiesce waits until no submitter is between its dead check and its post; after the
// queue is dead, no new command can be posted once it returns.
func (q *queue) quiesce() {
	for q.active.Load() != 0 {
		runtime.Gosched()
	}
}

// submit starts r on the queue. With wait, it waits (until ctx ends or the queue dies)
// for a free slot; otherwise it returns ErrQueueFull when there is none. On error r.Done
// is not called.
func (q *queue) submit(ctx context.Context, r *Request, wait bool) error {
	if r.Done == nil {
		return fmt.Errorf("initiator: %s on queue %d: the request has no Done function (set Request.Done: Submit calls it when the command completes)", r.opName(), q.qid)
	}
	q.active.Add(1)
	defer q.active.Add(-1)
	if q.dead.Load() {
		return q.deadErr()
	}
	if q.qid != 0 && q.ctrl.closing.Load() {
		return fmt.Errorf("initiator: %s on queue %d: %w", r.opName(), q.qid, ErrClosed)
	}
	free := q.free
	if r.reserved && q.authSlot != nil {
		free = q.authSlot
	}
	var idx uint16
	select {
	case idx = <-free:
	default:
		if !wait {
			return ErrQueueFull
		}
		select {
		case idx = <-free:
		case <-ctx.Done():
			return fmt.Errorf("initiator: %s: waiting for a free slot on queue %d: %w", r.opName(), q.qid, ctx.Err())
		case <-q.deadCh:
			return q.deadErr()
		}
	}
	s := &q.slots[idx]
	if err := q.build(s, r); err != nil {
		q.release(s)
		return err
	}
	s.req, r.slot = r, s
	if s.buf != nil {
		s.buf.ref()
	}
	s.retries = 0
	q.arm(s)
	if err := q.tr.post(s); err != nil {
		s.state.Store(slotFree)
		s.deadline.Store(0)
		if s.buf != nil {
			s.buf.unref()
		}
		s.req, s.buf = nil, nil
		q.release(s)
		err = fmt.Errorf("%w: posting %s on queue %d: %v", ErrDisconnected, r.opName(), q.qid, err)
		q.fail(err)
		return err
	}
	return nil
}

// release returns a slot no command holds to the free list it came from.
func (q *queue) release(s *slot) {
	if s.reserved {
		q.authSlot <- s.idx
		return
	}
	q.free <- s.idx
}

// reserveAuthSlot keeps one slot of an I/O queue for its authentication commands, as the
// Linux host sends them on a reserved tag (nvme_auth_submit, NVME_SUBMIT_RESERVED): when
// every command of the queue failed with Authentication Required and waits for the
// re-authentication, the re-authentication still finds a slot. Called after Connect,
// before the queue is used; the queue's Depth is one less than its usable entries (the
// controller opens I/O queues one entry larger when it expects them to authenticate:
// see openIOQueues). A queue of one usable entry cannot keep one for authentication and
// go on working: that is an error.
func (q *queue) reserveAuthSlot() error {
	if q.authSlot != nil {
		return nil
	}
	if q.usable < 2 {
		return fmt.Errorf("initiator: I/O queue %d has %d usable entry (the controller's receive queue size): a queue that authenticates needs 2, one kept for authentication commands",
			q.qid, q.usable)
	}
	idx := <-q.free
	q.slots[idx].reserved = true
	q.authSlot = make(chan uint16, 1)
	q.authSlot <- idx
	q.usable--
	return nil
}

// arm readies a busy slot whose SQE is built for an attempt: the events to wait for, the
// deadline, and the state store that publishes the slot to the completion goroutine.
func (q *queue) arm(s *slot) {
	s.gotResp = false
	s.pending.Store(q.nevents)
	if s.req.noTimeout || q.timeout <= 0 {
		s.deadline.Store(0)
	} else {
		s.deadline.Store(deadlineAfter(monoNow(q.ctrl), q.timeout))
	}
	s.info.Store(uint32(s.cmd.Opcode) | uint32(s.cmd.CID)<<16)
	s.sentAuth = q.ctrl.reauthDone.Load()
	s.state.Store(slotBusy)
}

// newCID gives the slot's command a command ID not used by its previous attempt or
// command, so that a stale completion matches nothing.
func (s *slot) newCID() {
	s.gen++
	s.cmd.CID = s.idx | s.gen<<cidBits(s.q.depth)
}

// build fills the slot's SQE for r and decides how its data travels.
func (q *queue) build(s *slot, r *Request) error {
	cmd := &s.cmd
	s.buf, s.reg, s.icd = nil, nil, false
	var dir nvmeproto.Direction
	switch r.Op {
	case OpRead, OpWrite:
		if r.Buf == nil {
			return fmt.Errorf("initiator: %s without a buffer", r.Op)
		}
		if r.Blocks == 0 || r.Blocks > 1<<16 {
			return fmt.Errorf("initiator: %s of %d blocks: want 1..65536", r.Op, r.Blocks)
		}
		op, ctl := nvmeproto.OpRead, uint16(0)
		dir = nvmeproto.DirCtrlToHost
		if r.Op == OpWrite {
			op, dir = nvmeproto.OpWrite, nvmeproto.DirHostToCtrl
		}
		if r.Flags&FUA != 0 {
			ctl |= nvmeproto.RWControlFUA
		}
		*cmd = nvmeproto.Command{}
		rw := nvmeproto.RWCommand{Opcode: op, NSID: r.NSID, SLBA: r.LBA, NLB: uint16(r.Blocks - 1), Control: ctl}
		rw.ToCommand(cmd)
		s.buf = r.Buf
	case OpFlush:
		*cmd = nvmeproto.Command{Opcode: nvmeproto.OpFlush, NSID: r.NSID}
	case OpWriteZeroes:
		if r.Blocks == 0 || r.Blocks > 1<<16 {
			return fmt.Errorf("initiator: Write Zeroes of %d blocks: want 1..65536", r.Blocks)
		}
		ctl := uint16(0)
		if r.Flags&Unmap != 0 {
			ctl |= nvmeproto.RWControlDEAC
		}
		if r.Flags&FUA != 0 {
			ctl |= nvmeproto.RWControlFUA
		}
		*cmd = nvmeproto.Command{}
		rw := nvmeproto.RWCommand{Opcode: nvmeproto.OpWriteZeroes, NSID: r.NSID, SLBA: r.LBA, NLB: uint16(r.Blocks - 1), Control: ctl}
		rw.ToCommand(cmd)
	case OpDeallocate:
		if r.Blocks == 0 {
			return errors.New("initiator: Deallocate of 0 blocks")
		}
		*cmd = nvmeproto.Command{}
		d := nvmeproto.DatasetManagementCommand{NSID: r.NSID, NR: 0, Attributes: nvmeproto.DSMAttrAD}
		d.ToCommand(cmd)
		off := ctlDSMOff(int(s.idx))
		rg := nvmeproto.DSMRange{NLB: r.Blocks, SLBA: r.LBA}
		rg.Marshal(q.ctl.mem[off:])
		dir = nvmeproto.DirHostToCtrl
		s.reg = q.ctl
		cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Address: q.ctl.base + uint64(off),
			Length: nvmeproto.DSMRangeSize, Key: q.ctl.rkey}
	case opCommand:
		*cmd = r.cmd
		dir = r.dir
		s.buf = r.Buf
	default:
		return fmt.Errorf("initiator: unknown operation %v", r.Op)
	}
	s.newCID()
	cmd.Flags = nvmeproto.PSDTSGL << 6
	switch {
	case r.Op == OpDeallocate:
	case s.buf == nil:
		cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}
	case dir == nvmeproto.DirHostToCtrl && q.icdMax > 0 && s.buf.Len() <= q.icdMax:
		s.icd = true
		cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeDataBlock, Subtype: nvmeproto.SGLSubtypeOffset,
			Length: uint32(s.buf.Len())}
	default:
		if s.buf.Len() > nvmeproto.MaxKeyedLength {
			return fmt.Errorf("initiator: %s of %d bytes: a keyed SGL carries at most %d", r.opName(), s.buf.Len(), nvmeproto.MaxKeyedLength)
		}
		s.reg = s.buf.reg
		cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Address: s.buf.addr(0),
			Length: uint32(s.buf.Len()), Key: s.buf.reg.rkey}
	}
	return nil
}

// response records a response capsule; it returns the slot it belongs to, or an error
// for a completion that matches no outstanding command (a protocol violation).
func (q *queue) response(cqe *nvmeproto.Completion) (*slot, error) {
	idx := cqe.CID & q.idxMask
	if int(idx) >= len(q.slots) {
		return nil, fmt.Errorf("initiator: queue %d: completion for unknown command ID %#x", q.qid, cqe.CID)
	}
	s := &q.slots[idx]
	if s.state.Load() != slotBusy || s.cmd.CID != cqe.CID || s.gotResp {
		return nil, fmt.Errorf("initiator: queue %d: completion for command ID %#x, which is not outstanding", q.qid, cqe.CID)
	}
	s.cqe = *cqe
	s.gotResp = true
	return s, nil
}

// event counts one of the command's completion events; true when it was the last.
func (s *slot) event() bool { return s.pending.Add(-1) == 0 }

// finish completes the slot's attempt: unless retry sends the command again, it frees the
// slot, then calls Done. err (a transport failure) overrides the response.
func (q *queue) finish(s *slot, err error) {
	if err == nil && s.gotResp && !s.cqe.Status.Success() && q.retry(s) {
		return
	}
	q.end(s, err, nil)
}

// end frees the slot and calls Done with its response or err; cause, if not nil, is
// why the failed status is final (the request's Err wraps the *StatusError and cause).
func (q *queue) end(s *slot, err, cause error) {
	r := s.req
	buf := s.buf
	cqe := s.cqe
	got := s.gotResp
	s.req, s.buf, s.reg = nil, nil, nil
	s.deadline.Store(0)
	s.state.Store(slotFree)
	q.release(s)
	if buf != nil {
		buf.unref()
	}
	switch {
	case err != nil:
		r.Status, r.DW0, r.dw1, r.Err = 0, 0, 0, err
	case !got:
		r.Status, r.DW0, r.dw1, r.Err = 0, 0, 0, fmt.Errorf("initiator: %s on queue %d ended without a response", r.opName(), q.qid)
	default:
		r.Status, r.DW0, r.dw1 = cqe.Status, cqe.DW0, cqe.DW1
		if cqe.Status.Success() {
			r.Err = nil
		} else {
			r.Err = &StatusError{Op: r.opName(), QID: q.qid, CID: cqe.CID, Status: cqe.Status, DW0: cqe.DW0, ioCmd: q.qid != 0 && r.Op != opCommand}
			if cause != nil {
				r.Err = fmt.Errorf("%w, and %w", r.Err, cause)
			}
		}
	}
	r.Done(r)
}

// retry decides whether a command whose attempt failed with status st is sent again, as
// the Linux host's nvme_decide_disposition and nvme_retry_req do for block I/O: an I/O
// command (not an admin or Fabrics command: the Linux host fails those fast) whose status
// lacks Do Not Retry, at most Options.MaxRetries times, after the Command Retry Delay the
// status's CRD selects (retryDelay); for Authentication Required the delay starts once
// the controller has been re-authenticated (Controller.awaitReauth). Path-related
// statuses (SCT 3h: ANA states, path errors) go to the caller at once, as the Linux
// host's multipath sends them to another path: this host has one path, and failing over
// is its caller's business. A stopped request (its caller's context ended), a closing
// controller (as the Linux host fails requests of a dying queue) and a dead queue end the
// command instead.
//
// It keeps the slot busy with its request and buffer reference, with no deadline while
// waiting, and arms the slot's timer (retryDue), or has the re-authentication arm it.
// Called on the completion goroutine.
func (q *queue) retry(s *slot) bool {
	r, st := s.req, s.cqe.Status
	if r.Op == opCommand || st.DNR() || st.SCT() == nvmeproto.SCTPathRelated ||
		int(s.retries) >= q.ctrl.opts.MaxRetries || r.stop.Load() || q.ctrl.closing.Load() || q.dead.Load() {
		return false
	}
	s.retries++
	s.deadline.Store(0)
	// Read before s.wait publishes r: from then on its caller may stop it, and another
	// request take the slot (arm writes sentAuth).
	sent, op := s.sentAuth, r.opName()
	s.wait(r)
	if delay := q.ctrl.retryDelay(st.CRD()); st.Code() == nvmeproto.StatusAuthRequired.Code() {
		q.ctrl.awaitReauth(s, r, delay, sent, op)
	} else {
		s.timer.Reset(delay)
	}
	if r.stop.Load() {
		s.timer.Reset(0) // stopped meanwhile: see stopRetries
	}
	return true
}

// authEnd is a waiter of re-authentication gen, which failed with cause.
type authEnd struct {
	w     reauthWaiter
	gen   uint64
	cause error
}

// endAuthWait hands w, a waiter of re-authentication gen, which failed with cause, to the
// completion goroutine (runAuthEnds), which ends w's request if its slot still waits for
// gen. Called off the completion goroutine.
func (q *queue) endAuthWait(w reauthWaiter, gen uint64, cause error) {
	q.authEndMu.Lock()
	q.authEndWs = append(q.authEndWs, authEnd{w, gen, cause})
	q.authEndMu.Unlock()
	q.authEnds.Store(true)
	q.tr.wake()
}

// runAuthEnds ends, with their Authentication Required status and the failure, the
// commands of failed re-authentications (endAuthWait) whose slots still wait for them: a
// slot whose request left retryReq (retryDue or abortAll took it), or that waits for a
// later re-authentication (its request was sent again, failed again and registered
// anew, the same *Request or not), is left alone. It runs on the completion goroutine,
// the one that starts a wait for a re-authentication (retry, which awaitReauth
// registers), so no new wait starts between its check of the slot and its take: with
// authWait still gen, the take takes the wait that registered for gen, or the same
// request parked by retryDue for a closing controller's teardown. The transports'
// completion goroutines call it whenever they wake up; it costs an atomic load when
// there is nothing to end.
func (q *queue) runAuthEnds() {
	if !q.authEnds.Load() || !q.authEnds.Swap(false) {
		return
	}
	q.authEndMu.Lock()
	ends := q.authEndWs
	q.authEndWs = nil
	q.authEndMu.Unlock()
	for _, e := range ends {
		s, r := e.w.s, e.w.r
		// authWait before retryReq: a take that then found authWait another
		// re-authentication's would have to put the request back, which retryDue and
		// stopRetries could miss.
		if s.retryReq.Load() != r || !s.authWait.CompareAndSwap(e.gen, 0) || !s.retryReq.CompareAndSwap(r, nil) {
			continue
		}
		q.waiting.Add(-1)
		q.end(s, nil, e.cause)
	}
}

// wait puts the slot's request r in retryReq: the slot waits for a retry delay, and for
// no re-authentication until awaitReauth registers it.
func (s *slot) wait(r *Request) {
	s.authWait.Store(0)
	s.q.waiting.Add(1)
	s.retryReq.Store(r)
}

// take takes the request out of retryReq, and with it the waiting slot; nil if another
// took it.
func (s *slot) take() *Request {
	r := s.retryReq.Swap(nil)
	if r != nil {
		s.q.waiting.Add(-1)
	}
	return r
}

// retryDue runs on the timer's goroutine when a retry's delay is over, or at once when
// stopRetries kicked it. Like submit it counts itself in active before it looks at dead,
// so abortAll (which runs after quiesce) cannot run while it holds the slot. A request it
// takes from a dead queue it leaves busy: abortAll has not visited the slot (it would have
// taken the request itself), and finishes it when it does. Once the controller is closing
// it puts the request back for the same reason: Shutdown does not wait for retries, and
// its teardown's abortAll ends them.
func (s *slot) retryDue() {
	q := s.q
	q.active.Add(1)
	defer q.active.Add(-1)
	r := s.take()
	if r == nil || q.dead.Load() {
		return
	}
	s.authWait.Store(0) // a re-authentication ending later has nothing to kick here
	if r.stop.Load() {
		q.finish(s, nil) // Done gets the last attempt's status; a stopped request's Done runs anywhere
		return
	}
	if q.ctrl.closing.Load() {
		s.wait(r)
		return
	}
	s.newCID()
	q.arm(s)
	if err := q.tr.post(s); err != nil {
		// Not posted, so the slot is still this goroutine's; it stays busy, and abortAll
		// finishes it.
		q.fail(fmt.Errorf("%w: posting %s on queue %d again (retry %d): %v", ErrDisconnected, r.opName(), q.qid, s.retries, err))
	}
}

// stopRetries ends r's retries once its caller's context ended: no attempt is sent after
// it, and a retry waiting for its delay ends now, not when the delay is over. With
// retry's check of stop after arming the timer, at least one of the two sees the other
// and sets the timer to fire now (a second firing finds retryReq empty). A kick that
// lands on a later command of the slot only sends that command's retry early.
func (q *queue) stopRetries(r *Request) {
	r.stop.Store(true)
	if s := r.slot; s != nil && s.retryReq.Load() == r {
		s.timer.Reset(0)
	}
}

// abortAll completes every outstanding command with the queue's error. Called by run
// once the queue is dead, quiesced and drained.
func (q *queue) abortAll() {
	err := q.deadErr()
	if cerr := q.ctrl.Err(); cerr != nil && !errors.Is(cerr, ErrClosed) {
		err = cerr // the root cause: another queue's failure may have torn this one down
	}
	for i := range q.slots {
		s := &q.slots[i]
		if s.state.Load() == slotBusy {
			s.take() // a retry waiting for its delay ends here (see slot.retryReq)
			s.timer.Stop()
			q.finish(s, fmt.Errorf("initiator: %s on queue %d aborted: %w", s.req.opName(), q.qid, err))
		}
	}
}

// expired returns a description of the first command past its deadline, or "".
func (q *queue) expired(now int64) string {
	for i := range q.slots {
		s := &q.slots[i]
		if s.state.Load() != slotBusy {
			continue
		}
		if d := s.deadline.Load(); d != 0 && now > d {
			info := s.info.Load()
			name := nvmeproto.AdminOpName(uint8(info))
			if q.qid != 0 {
				name = nvmeproto.IOOpName(uint8(info))
			}
			return fmt.Sprintf("%s (cid %#x) on queue %d after %v", name, info>>16, q.qid, q.timeout)
		}
	}
	return ""
}

// exec submits r (waiting for a slot) and waits for its completion or ctx. If ctx ends
// first, r is sent no more (no retry), and exec returns at once unless r.ownBuf: then it
// waits for the command to end (see execWait). A command exec left behind keeps its
// buffers referenced until it ends.
func (q *queue) exec(ctx context.Context, r *Request) error {
	_, err := q.execWait(ctx, r)
	return err
}

// execWait is exec, and reports whether r completed. Only then may the caller read r's
// results: otherwise the completion goroutine may still write them.
//
// A request with ownBuf holds the caller's buffer, which the controller may write into
// (or read) for as long as the command is outstanding: execWait then returns only once
// the command ended, its context notwithstanding — completed, aborted at its retry time,
// or aborted by the queue's teardown, which comes at the latest when the command times
// out (CommandTimeout, AdminTimeout) and the controller fails. On RDMA the teardown has
// moved the queue pair to the error state first, so no late transfer reaches the buffer.
func (q *queue) execWait(ctx context.Context, r *Request) (bool, error) {
	done := make(chan struct{})
	r.Done = func(*Request) { close(done) }
	if err := q.submit(ctx, r, true); err != nil {
		return false, err
	}
	select {
	case <-done:
		return true, r.Err
	case <-ctx.Done():
	}
	q.stopRetries(r)
	if !r.ownBuf {
		return false, fmt.Errorf("initiator: %s on queue %d: %w", r.opName(), q.qid, ctx.Err())
	}
	<-done
	if r.Err != nil {
		return true, fmt.Errorf("%w (the command ended after its caller's context: %w)", r.Err, ctx.Err())
	}
	return true, nil
}

// IOQueue is one I/O queue of a controller, for asynchronous I/O: Submit requests and
// get them back in their Done function on the queue's completion goroutine. Many
// requests may be in flight (up to Depth); requests on different queues run in parallel.
type IOQueue struct{ q *queue }

// ID returns the queue ID (1..N).
func (q *IOQueue) ID() uint16 { return q.q.qid }

// Depth returns how many commands the queue holds at once: its usable entries, less the
// one a queue that authenticates keeps for its authentication commands (AuthReserved).
// The controller opens such queues one entry larger than Options.QueueSize when the
// controller allows, so that Depth is the size asked for.
func (q *IOQueue) Depth() int { return q.q.usable }

// Size returns the I/O queue size: Options.QueueSize within the controller's limits
// (CAP.MQES+1, MAXCMD, on RDMA its receive queue size), as a queue that does not
// authenticate has it. The extra entry a queue that authenticates is opened with is not
// counted; the one it keeps when it could not get that extra entry is (Depth is then
// Size-1).
func (q *IOQueue) Size() int { return q.q.size }

// AuthReserved reports whether the queue keeps one of its entries for authentication
// commands, which Depth does not count.
func (q *IOQueue) AuthReserved() bool { return q.q.authSlot != nil }

// Submit starts r without blocking. It returns ErrQueueFull when Depth commands are
// outstanding, an error wrapping ErrClosed once Close or Shutdown began, or the
// controller's error once it failed, or an error when r.Done is nil; then r.Done is not
// called. Otherwise r.Done is called exactly once, after the command's retries (see
// Request.Done); a command waiting for a retry occupies its slot.
func (q *IOQueue) Submit(r *Request) error { return q.q.submit(nil, r, false) }

// SubmitWait is Submit, but waits for a free slot until ctx ends.
func (q *IOQueue) SubmitWait(ctx context.Context, r *Request) error { return q.q.submit(ctx, r, true) }

// InCapsuleDataSize returns the largest write sent inside the command capsule (0: none).
func (q *IOQueue) InCapsuleDataSize() int { return q.q.icdMax }
