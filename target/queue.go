package target

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/internal/usegate"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TransportQueue is the transport's side of one connected queue (one RDMA queue pair,
// one TCP connection, one loop queue). The core calls it; it never blocks the core.
type TransportQueue interface {
	// Complete delivers req's completion to the host: for a successful
	// controller-to-host command first Data[:Length] to the SGL's host memory, then the
	// response capsule holding req.CQE. The core calls it exactly once for every
	// Request passed to Begin, from any goroutine (inline from Begin, Execute or Fail,
	// from a backend worker, from the controller's admin worker or a queue's
	// authentication worker, from the goroutine that raised an asynchronous event), and
	// possibly concurrently for different requests. After Complete returns the core no
	// longer touches req, so the transport may reuse it at once. Complete must not wait
	// for the goroutine that calls Begin/Execute/Close on this queue.
	Complete(req *Request)
	// Disconnect asks the transport to tear the queue's connection down (keep-alive
	// expiry, controller reset or shutdown, removal of the subsystem, the admin queue
	// going away, a Disconnect command). It must not block; the core may call it more
	// than once and from any goroutine. The transport later calls Queue.Close.
	Disconnect(reason error)
}

// Queue is the core's side of one connected queue. A transport creates it with
// Port.NewQueue when it accepts a connection, feeds it commands with Begin and
// Execute, and calls Close when the connection is gone.
//
// Per command, on the queue's receive goroutine:
//
//	if q.Begin(req) {               // validates; false: already completed with an error
//	    if req.Length > 0 && !req.InCapsule {
//	        req.Data = buffer of req.Length bytes
//	        if req.Dir == nvmeproto.DirHostToCtrl { fetch the host's data into req.Data }
//	    }
//	    q.Execute(req)              // or q.Fail(req, status) if the fetch failed
//	}
//
// Begin should be called in the order the commands arrived (it advances the SQ head that
// completions report); Begin, Execute and Fail are safe to call from any goroutine.
type Queue struct {
	t     *Target
	port  *Port
	tq    TransportQueue
	depth uint32
	log   *slog.Logger

	bind    atomic.Pointer[binding]
	head    atomic.Uint32
	users   usegate.Gate // commands between Begin and Complete; closed by markClosing
	drained chan struct{}

	connectMu sync.Mutex
	closeOnce sync.Once
	discOnce  sync.Once

	limiter rateLimiter
	shard   uint8 // which namespace counter shard this queue's I/O counts in

	ring *backend.Ring // asynchronous I/O for Execute's reads and writes (SetRing)

	// The I/O fence (fence.go): the queue's namespace data commands in flight per
	// namespace, at most one nsFence per NSID, sorted by NSID; replaced (under fenceMu),
	// never modified.
	fenceMu sync.Mutex
	fenceNS atomic.Pointer[[]*nsFence]

	peer         string      // the host's address, for logs before Connect (SetPeer)
	expectQID    int32       // the qid the transport connected the queue as, -1: any (ExpectQID)
	connectTimer *time.Timer // limits.connect_timeout

	// What the queue holds against the limits goes back (settle) once both Close has
	// detached it and its last command has completed: settleRefs counts the two. Close
	// sets the rest before it counts: the binding it detached, and whether it gave up
	// waiting for the commands (stuck, counted by noteStuck for stuckHost).
	settleRefs atomic.Int32
	closeBind  *binding
	stuck      bool
	stuckHost  string
	stuckPeer  string
}

var queueSeq atomic.Uint32

// binding is what a successful Connect established; immutable once stored.
type binding struct {
	ctrl    *controller
	qid     uint16
	entries uint32     // SQSIZE+1
	sqhdOff bool       // SQ flow control disabled: report SQHD 0xFFFF
	auth    *queueAuth // nil: no in-band authentication on this queue
}

// NewQueue creates the core side of a newly accepted connection. depth is the number of
// commands the transport can hold at once (its receive slots: the RDMA hsqsize+1); the
// host's Connect must not ask for a larger queue. The queue accepts nothing but a
// Connect command until one succeeds.
func (p *Port) NewQueue(tq TransportQueue, depth int) (*Queue, error) {
	if depth < 1 || depth > 65536 {
		return nil, fmt.Errorf("target: queue depth %d out of range 1..65536", depth)
	}
	q := &Queue{
		t: p.t, port: p, tq: tq, depth: uint32(depth),
		log:       p.t.log,
		drained:   make(chan struct{}),
		shard:     uint8(queueSeq.Add(1) % statShards),
		expectQID: -1,
	}
	if ok, stuck := p.t.takeQueue(); !ok {
		return nil, fmt.Errorf("%w: the target holds limits.max_queues (%d) queues%s", ErrTooManyQueues, p.t.lim.MaxQueues, stuckNote(stuck))
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.t.releaseQueue()
		return nil, ErrClosed
	}
	p.queues[q] = struct{}{}
	p.mu.Unlock()
	q.startConnectTimer()
	return q, nil
}

// SetRing makes the queue's reads and writes go through the asynchronous I/O ring g
// (backend.Executor.SubmitRing) where the backend allows, instead of the namespace's
// worker goroutines. The transport must then call Execute only on the goroutine that
// owns g, and reap g there (the commands complete from g.Reap). Call it before the
// queue's first command.
func (q *Queue) SetRing(g *backend.Ring) { q.ring = g }

// QID returns the queue ID the host connected with, or -1 before a successful Connect.
func (q *Queue) QID() int {
	if b := q.bind.Load(); b != nil {
		return int(b.qid)
	}
	return -1
}

// ControllerID returns the controller the queue belongs to, or 0 before Connect.
func (q *Queue) ControllerID() uint16 {
	if b := q.bind.Load(); b != nil {
		return b.ctrl.cntlid
	}
	return 0
}

// Association returns a value that is equal for the queues of one controller and differs
// between controllers, of any subsystem; nil before a successful Connect.
func (q *Queue) Association() any {
	if b := q.bind.Load(); b != nil {
		return b.ctrl
	}
	return nil
}

// HostNQN returns the NQN of the host whose Connect created or joined the queue's
// controller, or "" before a successful Connect.
func (q *Queue) HostNQN() string {
	if b := q.bind.Load(); b != nil {
		return b.ctrl.hostNQN
	}
	return ""
}

// Size returns the number of entries the host's Connect asked for (SQSIZE+1), or the
// transport's depth before Connect.
func (q *Queue) Size() int {
	if b := q.bind.Load(); b != nil {
		return int(b.entries)
	}
	return int(q.depth)
}

// Begin accepts a command that has arrived on the queue. It advances the SQ head and
// validates the command — opcode, queue state, namespace, SGL (see ParseSGL), transfer
// length and LBA range — and describes its data transfer in req (Dir, Length,
// InCapsule, SGL, and Data for in-capsule data).
//
// When Begin returns false the command has already been completed with an error status
// (TransportQueue.Complete was called, inline); the transport moves no data and does not
// call Execute. When it returns true the transport must eventually call exactly one of
// Execute or Fail for req.
func (q *Queue) Begin(r *Request) bool {
	r.q = q
	r.CQE = nvmeproto.Completion{}
	r.Dir = r.Cmd.DataDirection()
	r.Length, r.InCapsule, r.SGL, r.Data = 0, false, nil, nil
	r.ns, r.start = nil, 0
	r.fenceIn = nil
	if !q.acquire() {
		q.complete(r, nvmeproto.StatusAbortSQDeletion)
		return false
	}
	q.advanceHead()
	var st nvmeproto.Status
	b := q.bind.Load()
	switch {
	case b == nil:
		st = q.beginUnbound(r)
	case isAuthCommand(&r.Cmd):
		b.ctrl.activity()
		st = q.beginAuth(r, b)
	case b.auth != nil && !b.auth.ok.Load():
		st = nvmeproto.StatusAuthRequired.WithDNR()
	case b.qid == 0:
		b.ctrl.activity()
		st = q.beginAdmin(r, b.ctrl)
	default:
		b.ctrl.activity()
		st = q.beginIO(r, b.ctrl)
	}
	if st != nvmeproto.StatusSuccess {
		if st.SCT() == nvmeproto.SCTPathRelated {
			q.pathReject(r, st)
		} else {
			q.reject(r, st, "invalid command")
		}
		return false
	}
	return true
}

// Execute runs a command Begin accepted, once its data (if host-to-controller) is in
// req.Data. Execute does not block on storage: admin commands that may (Identify, Get
// Log Page, Get and Set Features) run on the controller's admin worker goroutine, in the
// order Execute received them, and complete from it; Keep Alive, Asynchronous Event
// Request, Abort, Connect and Property Get/Set run inline (a Property Get/Set queues
// behind admin commands still waiting for the worker). Nor does it compute:
// Authentication Send and Receive, on any queue, run on the queue's authentication
// worker, in the order Execute received them, and complete from it (auth.go). I/O commands are handed to the
// namespace's backend executor and complete from a worker (or inline for memory
// backends, or from the transport's asynchronous I/O ring: see SetRing). Either way
// TransportQueue.Complete is called exactly once.
func (q *Queue) Execute(r *Request) {
	if r.Length > 0 && uint64(len(r.Data)) < uint64(r.Length) {
		q.log.Error("transport gave a data buffer shorter than the transfer", "len", len(r.Data), "length", r.Length)
		q.finish(r, nvmeproto.StatusInternalError)
		return
	}
	b := q.bind.Load()
	switch {
	case b == nil || r.Cmd.Opcode == nvmeproto.OpFabrics && r.Cmd.FabricsType() == nvmeproto.FabricsConnect:
		// Only an unbound queue's Begin lets Connect through; a second Connect that
		// raced the first gets Command Sequence Error there.
		q.connect(r)
	case isAuthCommand(&r.Cmd):
		q.execAuth(r, b)
	case b.qid == 0:
		b.ctrl.execAdmin(q, r)
	default:
		q.execIO(r, b.ctrl)
	}
}

// Fail completes a command Begin accepted without executing it, with status st: for
// example Data Transfer Error when the transport could not fetch the host's data, or
// Command Aborted due to SQ Deletion when the connection is going away.
func (q *Queue) Fail(r *Request, st nvmeproto.Status) {
	q.finish(r, st)
}

// Close detaches the queue from its controller after the transport's connection is gone
// (whether the host closed it or the core asked with Disconnect). New commands fail with
// Command Aborted due to SQ Deletion; Close completes the asynchronous event requests
// the queue held, then waits until every other command begun on it has completed (their
// Complete calls still arrive; the transport may drop the responses). Closing a
// controller's admin queue ends the controller: its I/O queues are asked to disconnect.
//
// The wait is bounded (WithQueueCloseTimeout): a command whose backend request never
// completes is logged, and Close returns without it. Close then reports false, and the
// transport must keep what that command uses (its Request, data and in-capsule buffers)
// until Complete is called for it, which may be never. Until the last such command has
// completed the queue still counts against limits.max_queues and its host's
// limits.max_queues_per_host (and, an admin queue, max_controllers_per_host), as the
// transport's memory it holds does against the transport's: Target.StuckQueues counts
// these queues. Otherwise Close reports true, the queue's place in the limits is free,
// and the core makes no more calls for this queue. Close is idempotent (later calls
// report true).
func (q *Queue) Close() (drained bool) {
	drained = true
	q.closeOnce.Do(func() {
		q.markClosing()
		q.stopConnectTimer()
		q.port.mu.Lock()
		delete(q.port.queues, q)
		q.port.mu.Unlock()
		b := q.bind.Load()
		if b != nil && b.auth != nil {
			b.auth.stop()
		}
		if b != nil && b.qid == 0 {
			b.ctrl.adminQueueClosed()
		}
		var waited time.Duration
		drained, waited = q.waitDrained()
		if b != nil {
			b.ctrl.queueClosed(q, b.qid)
		}
		q.closeBind = b
		if !drained {
			q.markStuck(waited)
		}
		q.settleStep()
	})
	return drained
}

// waitDrained waits, at most the target's close timeout, until no command begun on the
// closing queue is executing; it reports whether that happened, and how long it waited if
// not. A queue with a command to a namespace whose stop flush Flush left executing
// (Target.stopHung) is not waited for: that namespace's backend hangs, and the flush has
// had its close timeout.
func (q *Queue) waitDrained() (drained bool, waited time.Duration) {
	select {
	case <-q.drained:
		return true, 0
	default:
	}
	limit := q.t.closeTimeout
	if q.t.stopHungIn(q.busyFences) {
		limit = 0
	}
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		select {
		case <-q.drained:
			return true, 0
		case <-t.C:
		}
	}
	select {
	case <-q.drained: // as the wait ended
		return true, 0
	default:
		return false, limit
	}
}

// busyFences yields the namespaces (fence keys) the queue has namespace data commands in
// flight to.
func (q *Queue) busyFences(yield func(fenceKey) bool) {
	for _, in := range q.fenceTable() {
		if in.count() > 0 && !yield(in.key()) {
			return
		}
	}
}

// markStuck counts the closing queue, whose commands Close gave up waiting for after
// waited, as stuck until settle, and logs it.
func (q *Queue) markStuck(waited time.Duration) {
	q.stuck = true
	b := q.bind.Load()
	if b != nil {
		q.stuckHost = b.ctrl.hostNQN
	}
	q.connectMu.Lock()
	q.stuckPeer = q.peer
	q.connectMu.Unlock()
	total, ofHost := q.t.noteStuck(q.stuckHost)
	q.log.Error("commands still executing after the queue closed: it is released without them, but it counts "+
		"against limits.max_queues and the host's limits, and their memory stays allocated, until the backend completes them",
		"qid", q.QID(), "cntlid", q.ControllerID(), "host", q.stuckHost, "peer", q.stuckPeer, "commands", q.users.Users(),
		"waited", waited, "stuck_queues", total, "host_stuck_queues", ofHost)
}

// settleStep is one of the two events settle waits for: Close done, or the closing
// queue's last command completed.
func (q *Queue) settleStep() {
	if q.settleRefs.Add(1) == 2 {
		q.settle()
	}
}

// settle gives back what the queue held against the limits, once it is closed and no
// command runs on it any more. It runs in Close, or — when Close gave up waiting — on the
// goroutine that completed the last command; it must not take connectMu (a Connect
// completing holds it), nor be called with the binding's queueAuth.mu held.
func (q *Queue) settle() {
	// A Connect still executing when Close looked may have bound the queue meanwhile: it is
	// detached as Close detaches the binding it sees, its authentication stopped too (its
	// timer would otherwise fire AuthTimeout after the Connect, on a queue long gone).
	b := q.bind.Load()
	if b != nil && b != q.closeBind {
		if b.auth != nil {
			b.auth.stop()
		}
		if b.qid == 0 {
			b.ctrl.adminQueueClosed()
		}
		b.ctrl.queueClosed(q, b.qid)
	}
	left := q.t.settleQueue(b, q.stuck, q.stuckHost)
	if q.stuck {
		q.log.Info("the commands a closed queue left executing have completed: its place in the limits is free again",
			"qid", q.QID(), "cntlid", q.ControllerID(), "host", q.stuckHost, "peer", q.stuckPeer, "stuck_queues", left)
	}
}

// disconnect stops the queue accepting commands and asks the transport to tear it down.
func (q *Queue) disconnect(reason error) {
	q.discOnce.Do(func() {
		q.markClosing()
		q.log.Debug("disconnecting queue", "qid", q.QID(), "cntlid", q.ControllerID(), "reason", reason)
		q.tq.Disconnect(reason)
	})
}

func (q *Queue) acquire() bool { return q.users.Enter() }

func (q *Queue) release() {
	if q.users.Leave() {
		q.setDrained()
	}
}

// markClosing makes acquire fail from now on; drained closes when nothing is in flight.
func (q *Queue) markClosing() {
	if _, drained := q.users.Close(); drained {
		q.setDrained()
	}
}

// setDrained marks a closing queue's last command complete: drained closes, an I/O queue
// leaves its subsystem's list of queues a fence waits for, and a queue already closed is
// settled.
func (q *Queue) setDrained() {
	close(q.drained)
	if b := q.bind.Load(); b != nil && b.qid != 0 {
		b.ctrl.subsys.dropIOQueue(q)
	}
	q.settleStep()
}

// closing reports whether the queue no longer accepts commands.
func (q *Queue) closing() bool { return q.users.Closed() }

// isDrained reports whether the queue is closing and no command begun on it is executing.
func (q *Queue) isDrained() bool { return isClosed(q.drained) }

func (q *Queue) advanceHead() {
	n := q.depth
	if b := q.bind.Load(); b != nil {
		n = b.entries
	}
	for {
		old := q.head.Load()
		h := old + 1
		if h >= n {
			h = 0
		}
		if q.head.CompareAndSwap(old, h) {
			return
		}
	}
}

// complete fills the CQE, counts an I/O command in its namespace (or a failed one that
// reached none in its subsystem), and hands the request to the transport.
func (q *Queue) complete(r *Request, st nvmeproto.Status) {
	r.CQE.CID = r.Cmd.CID
	r.CQE.Status = st
	if b := q.bind.Load(); b != nil {
		r.CQE.SQID = b.qid
		if b.sqhdOff {
			r.CQE.SQHD = 0xFFFF
		} else {
			r.CQE.SQHD = uint16(q.head.Load())
		}
		if r.ns != nil {
			r.ns.count(q.shard, r, st)
		} else if b.qid != 0 && st.Code() != nvmeproto.StatusSuccess {
			b.ctrl.subsys.ioErrs.add(ioClassOf(r.Cmd.Opcode), st)
		}
	} else {
		r.CQE.SQHD = uint16(q.head.Load())
	}
	r.ns = nil
	q.tq.Complete(r)
}

// finish completes a command Begin accepted.
func (q *Queue) finish(r *Request, st nvmeproto.Status) {
	fenceLeave(r)
	q.complete(r, st)
	q.release()
}

// reject completes a command with an error status, logging it (rate limited) and
// recording it in the controller's error log.
func (q *Queue) reject(r *Request, st nvmeproto.Status, msg string) {
	q.noteError(r, st, msg)
	q.finish(r, st)
}

// pathReject completes a command with a path related status (an ANA state that serves no
// I/O). It is normal operation for a multipath host, which retries on another path: it is
// recorded in the error log but logged at Debug only.
func (q *Queue) pathReject(r *Request, st nvmeproto.Status) {
	q.recordError(r, st)
	if q.log.Enabled(context.Background(), slog.LevelDebug) && q.limiter.allow() {
		q.log.Debug("I/O refused by ANA state", "qid", q.QID(), "cid", r.Cmd.CID, "opcode", r.Cmd.Opcode, "nsid", r.Cmd.NSID,
			"status", st.String(), "port", q.port.id)
	}
	q.finish(r, st)
}

// recordError enters a failed command in its controller's Error Information log, unless
// its queue is closing: no host waits on that queue for the completion of a command that
// ends while a reset, a shutdown or a disconnect tears it down (a transport may drop it,
// and the RDMA engine does), and its SQID may by then name a new queue of the
// controller, whose host would take the entry for one of its own commands.
func (q *Queue) recordError(r *Request, st nvmeproto.Status) {
	if b := q.bind.Load(); b != nil && !q.closing() {
		b.ctrl.recordError(b.qid, r, st)
	}
}

// noteError logs a failed command (rate limited) and records it in the error log.
func (q *Queue) noteError(r *Request, st nvmeproto.Status, msg string) {
	q.recordError(r, st)
	b := q.bind.Load()
	qid := -1
	if b != nil {
		qid = int(b.qid)
	}
	if q.limiter.allow() {
		attrs := []any{"qid", qid, "cid", r.Cmd.CID, "opcode", r.Cmd.Opcode, "nsid", r.Cmd.NSID,
			"status", st.String(), "sgl", r.Cmd.SGL.String()}
		if b != nil {
			attrs = append(attrs, "cntlid", b.ctrl.cntlid, "host", b.ctrl.hostNQN)
		}
		if n := q.limiter.takeSuppressed(); n > 0 {
			attrs = append(attrs, "suppressed", n)
		}
		q.log.Warn(msg, attrs...)
	}
}

// rateLimiter lets through a burst of log lines per second and counts the rest, so a
// misbehaving host cannot flood the log.
type rateLimiter struct {
	mu         sync.Mutex
	second     int64
	n          int
	suppressed int
}

const logLinesPerSecond = 10

func (l *rateLimiter) allow() bool {
	now := time.Now().Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now != l.second {
		l.second, l.n = now, 0
	}
	if l.n < logLinesPerSecond {
		l.n++
		return true
	}
	l.suppressed++
	return false
}

func (l *rateLimiter) takeSuppressed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.suppressed
	l.suppressed = 0
	return n
}
