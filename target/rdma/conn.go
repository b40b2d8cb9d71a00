package rdma

import (
	"errors"
	"log/slog"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/target"
)

// reqState is where a request context is in its state machine (see rctx).
type reqState uint8

// Request context states.
const (
	stFree     reqState = iota // not in use
	stCore                     // begun: between Begin and Complete (executing, or waiting as below)
	stWantBuf                  // begun, waiting for a pool buffer
	stRead                     // begun, fetching the host's data (READs posted or waiting for credits)
	stWantSend                 // completed by the core, waiting for send queue slots
	stSend                     // response posted, waiting for the SEND's completion
)

var reqStateNames = [...]string{stFree: "free", stCore: "core", stWantBuf: "want-buffer", stRead: "read", stWantSend: "want-send", stSend: "send"}

func (s reqState) String() string {
	if int(s) < len(reqStateNames) {
		return reqStateNames[s]
	}
	return "reqState(" + strconv.Itoa(int(s)) + ")"
}

// rctx is one request context of a connection: the target.Request the core sees, the
// receive slot its capsule arrived in, its data buffer, and where it is in the state
// machine
//
//	receive → Begin → [buffer] → [RDMA READ] → Execute → Complete → [RDMA WRITE] + SEND → free
//
// A connection has twice as many contexts as receive slots: the receive buffer goes
// back to the host when the core completes the command, while the context stays
// until the response's SEND has completed (its buffer holds the data being written).
type rctx struct {
	req   target.Request
	c     *conn
	idx   int
	state reqState
	recv  int32 // receive slot holding the capsule, -1 when reposted

	hasBuf   bool
	bufOrder int
	bufOff   int

	// RDMA READ progress: next descriptor and offset in it, bytes placed, READs
	// outstanding, whether all were posted and whether one failed.
	rdDesc  int
	rdOff   uint32
	rdPlace int
	rdOut   int
	rdAll   bool
	rdErr   bool

	bypassed int    // rounds other connections' buffers were served while this one waited (share.go)
	wire     int    // bytes of RDMA data this request counts in conn.wireOut
	sqSlots  int    // send queue slots held by the response chain
	seq      uint64 // the response's position among the connection's responses
	unsigned bool   // the response SEND was posted unsignaled (see conn.unsig)

	// winWait is the request's turn for the window (conn.winTurns when it started to wait
	// for it; 0: not waiting): see yieldsWindow.
	winWait uint64

	next     *rctx // fifo link (buffer, READ and send waits)
	nextDone *rctx // the group's completed list
}

// connState is where a connection is in its life.
type connState uint8

// Connection states.
const (
	stateLive     connState = iota // serving commands
	stateDraining                  // disconnected; waiting for flushes and the core
	stateDead                      // resources released
)

var connStateNames = [...]string{stateLive: "live", stateDraining: "draining", stateDead: "dead"}

func (s connState) String() string {
	if int(s) < len(connStateNames) {
		return connStateNames[s]
	}
	return "connState(" + strconv.Itoa(int(s)) + ")"
}

// connConfig describes a connection's queues.
type connConfig struct {
	qid    uint16
	depth  int // receive slots (hsqsize+1, capped)
	icd    int // in-capsule data bytes per receive slot (0: none)
	ird    int // RDMA READs outstanding at once
	sqSize int // send queue work requests
	maxMsg int // largest RDMA message
	admin  bool
	remote string // the host's address, for inspection (target.RemoteAddresser)
	srq    bool   // receives come from the poll group's shared receive queue
	// sendInv: responses to commands whose host asked for its key to be invalidated go as
	// SEND with Invalidate (the device has the memory management extensions).
	sendInv bool
	// window bounds the bytes of RDMA data (READs of the host's data, WRITEs of read
	// data) the connection has on the wire at once (0: no bound); see conn.wireOut.
	window int
}

// sqDepth is the send queue size for a queue of depth commands: for each command a
// response SEND and an RDMA WRITE or READ, and room for the responses of commands
// whose receive slot was already reposted. And at least twice the longest response
// chain of one command on a device whose messages hold a whole transfer (an RDMA WRITE
// per descriptor of a full in-capsule list, then the SEND): unsignaled responses may
// hold up to half of the send queue with no completion coming to free it, so only a
// chain that fits in the other half is sure to be posted (see chainFits).
func sqDepth(depth int) int { return max(3*depth, 2*(target.MaxSGLDescriptors+1)) }

// connLayout is how a connection's registered memory is laid out: the 64-byte command
// entries of every receive slot, then (page aligned, so in-capsule write data can go to
// the backend without a copy) each slot's in-capsule data, then the 16-byte response
// of every context.
type connLayout struct {
	icdBase, respBase, size int
}

func layoutFor(cfg *connConfig) connLayout {
	var l connLayout
	if cfg.srq { // the receive buffers are the shared receive queue's
		l.size = alignUp(2*cfg.depth*nvmeproto.CQESize, pageSize)
		return l
	}
	l.icdBase = alignUp(cfg.depth*nvmeproto.SQESize, pageSize)
	l.respBase = l.icdBase + cfg.depth*cfg.icd
	l.size = alignUp(l.respBase+2*cfg.depth*nvmeproto.CQESize, pageSize)
	return l
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// conn is one connected queue pair: a target.Queue's transport side (it implements
// target.TransportQueue). Its mutable state belongs to its poll group's goroutine;
// Complete and Disconnect, called by the core from any goroutine, only push to the
// group.
type conn struct {
	g    *group
	slot int
	gen  uint32
	cfg  connConfig
	lay  connLayout
	reg  region
	ep   endpoint
	q    *target.Queue
	log  *slog.Logger
	pool *pool

	admin   bool
	cqeNeed int

	// ctxs are the request contexts by index, allocated ctxChunk at a time as the queue
	// gets deeper (nil beyond nctx): an idle connection holds a few kilobytes, not the
	// ~200 KiB its full depth would take. freeCtx lists the allocated ones not in use.
	ctxs     []*rctx
	nctx     int
	freeCtx  []int32
	recvWait ring // receive completions waiting for a free context
	// srqHeld counts the shared receive queue's buffers the connection holds: capsules
	// begun and not yet completed by the core, and those in recvWait. A command's buffer
	// goes back when the core completes it, before its response is sent, so a host that
	// keeps to its queue size never has more than depth of them (see onRecv).
	srqHeld int

	share connShare // its part of the buffer pool (share.go)
	watch respWatch // its responses' progress (watchdog.go)

	sqUsed, rdUsed int
	readWait       fifo
	sendWait       fifo

	// wireOut is the bytes of RDMA data of the connection's requests that are staged or
	// posted and not yet complete: the RDMA READs of a command's data (from its first
	// READ until the last completes) and the RDMA WRITEs of a signaled response (until
	// its SEND completes; unsignaled responses, at most unsigMaxBuf each and
	// unsigMaxBytes together, are not counted), each larger than windowMin (smaller
	// transfers are not counted and never wait for it). A request that would take it past
	// cfg.window — soloWindows of it while no other controller's queue contends —
	// waits (readWait, sendWait) unless nothing is counted. A queue can then stage only a
	// window's worth of data per round next to others, so one that floods the target with
	// large transfers cannot make its poll group's rounds — and every other queue's
	// commands in them — wait behind megabytes of its data (on Soft-RoCE, whose post call
	// builds every packet of the posted messages, that is the time between rounds); on a
	// link, queues share the wire by bytes rather than by commands.
	wireOut int
	// winTurns numbers the requests that wait for the window, in either direction, in the
	// order they start to wait (rctx.winWait).
	winTurns uint64

	sendStage []rdmacm.SendWR
	nSend     int
	recvWRs   []rdmacm.RecvWR // one prepared receive per slot
	recvStage []rdmacm.RecvWR
	nRecv     int
	dirty     bool

	recvPosted int // receives the device holds
	sigOut     int // signaled send work requests the device holds

	// Selective signaling: most response SENDs are posted unsignaled, so that the
	// group is not woken for their completions; a later signaled SEND's completion
	// (completions of a send queue come in order) retires them all. unsig lists them in
	// posting order.
	unsig      ring
	unsigBytes int    // pool bytes the unsignaled responses hold
	respSeq    uint64 // responses posted
	// probeSeq is respSeq when the watchdog's zero-length RDMA WRITE was posted: it
	// completes after every response through it (watchdog.go, conn.probe). At most one
	// is outstanding: it is posted only with nothing signaled outstanding (sigOut 0).
	probeSeq uint64

	state         connState
	detached      bool // slot given back (guarded by the group's mu)
	hwDrained     bool
	coreDone      bool
	drainDeadline time.Time
	closeReason   atomic.Pointer[error]

	peer       netip.Addr  // the host's address (limits.max_queues_per_address)
	lateCore   int         // commands the core still executes after its queue closed (see lateDone)
	coreLate   atomic.Bool // the core queue closed with commands still executing
	closeReq   atomic.Bool
	coreClosed atomic.Bool
	attnQueued atomic.Bool
	published  atomic.Bool // in its group's table: completions and events are handled
	qpn        uint32      // its QP's number (set before publish)
	srqJoined  bool        // in the group's qpConns (the group's goroutine's)
	nextAttn   *conn

	// onDead releases what the transport created for the connection (CM ID, memory);
	// it runs on its own goroutine after the QP is destroyed.
	onDead func(c *conn)
}

// newConn prepares a connection's contexts on registered memory reg (at least
// layoutFor(cfg).size bytes). The caller then creates the target queue (c.q), attaches
// c to a poll group and posts the receives with postInitialRecvs.
func newConn(cfg connConfig, reg region, ep endpoint, p *pool, log *slog.Logger) *conn {
	c := &conn{
		cfg: cfg, lay: layoutFor(&cfg), reg: reg, ep: ep, log: log, pool: p,
		admin:   cfg.admin,
		cqeNeed: cfg.depth + cfg.sqSize,
	}
	n := 2 * cfg.depth
	c.ctxs = make([]*rctx, n)
	c.freeCtx = make([]int32, 0, n)
	c.recvWait = newRing(cfg.depth)
	c.unsig = newRing(n)
	c.sendStage = make([]rdmacm.SendWR, min(sendStageStart, cfg.sqSize))
	if !cfg.srq {
		c.recvStage = make([]rdmacm.RecvWR, cfg.depth)
		c.recvWRs = make([]rdmacm.RecvWR, cfg.depth)
	}
	return c
}

// ctxChunk is how many request contexts a connection allocates at a time.
const ctxChunk = 16

// sendStageStart is how many send work requests a connection can stage in one round
// before its staging array grows (up to its send queue's size).
const sendStageStart = 16

// freeCtxs is how many request contexts the connection can still take: the free
// allocated ones and those not allocated yet.
func (c *conn) freeCtxs() int { return len(c.freeCtx) + len(c.ctxs) - c.nctx }

// moreCtxs allocates the next chunk of request contexts and lists them as free.
func (c *conn) moreCtxs() {
	n := min(ctxChunk, len(c.ctxs)-c.nctx)
	chunk := make([]rctx, n)
	for k := n - 1; k >= 0; k-- {
		x := &chunk[k]
		i := c.nctx + k
		x.c, x.idx, x.recv = c, i, -1
		x.req.Context = x
		c.ctxs[i] = x
		c.freeCtx = append(c.freeCtx, int32(i))
	}
	c.nctx += n
}

// initWRs fills in the receive work requests once the connection has its slot.
func (c *conn) initWRs() {
	for i := range c.recvWRs {
		w := &c.recvWRs[i]
		w.ID = wrID(kindRecv, i, c.slot, c.gen)
		w.NumSGE = 1
		w.SGL[0] = c.reg.sge(i*nvmeproto.SQESize, nvmeproto.SQESize)
		if c.cfg.icd > 0 {
			w.NumSGE = 2
			w.SGL[1] = c.reg.sge(c.lay.icdBase+i*c.cfg.icd, c.cfg.icd)
		}
	}
}

// postInitialRecvs posts every receive slot. Call it after attach, before accepting. (A
// connection on a shared receive queue has none of its own.)
func (c *conn) postInitialRecvs() error {
	if c.cfg.srq {
		return nil
	}
	c.recvPosted = len(c.recvWRs)
	if err := c.ep.PostRecv(c.recvWRs); err != nil {
		c.recvPosted = 0
		return err
	}
	return nil
}

func (c *conn) respBuf(i int) []byte {
	off := c.lay.respBase + i*nvmeproto.CQESize
	return c.reg.mem[off : off+nvmeproto.CQESize]
}

// Complete implements target.TransportQueue: the core finished a command.
func (c *conn) Complete(r *target.Request) {
	c.g.pushDone(r.Context.(*rctx))
}

// Disconnect implements target.TransportQueue: the core wants the connection gone.
func (c *conn) Disconnect(reason error) {
	c.requestClose(reason)
}

// requestClose asks the group to tear the connection down. Any goroutine.
func (c *conn) requestClose(reason error) {
	if reason != nil {
		c.closeReason.CompareAndSwap(nil, &reason)
	}
	c.closeReq.Store(true)
	c.g.pushAttn(c)
}

func (c *conn) reason() error {
	if p := c.closeReason.Load(); p != nil {
		return *p
	}
	return nil
}

// ---- receive → execute ----

// onRecv handles the arrival of a command capsule in receive buffer i (the connection's
// own slot, or the shared receive queue's buffer).
func (c *conn) onRecv(i int, wc *rdmacm.Completion) {
	if c.cfg.srq {
		c.srqHeld++
	} else {
		c.recvPosted--
	}
	if wc.Status != rdmacm.WCSuccess {
		if wc.Status != rdmacm.WCFlushErr {
			c.fatal("receive failed", wc)
		}
		c.releaseRecv(i)
		c.checkDrained()
		return
	}
	if c.state != stateLive {
		c.releaseRecv(i)
		c.checkDrained()
		return
	}
	if wc.ByteLen < nvmeproto.SQESize {
		c.log.Warn("host sent a command capsule shorter than 64 bytes: disconnecting", "qid", c.cfg.qid, "bytes", wc.ByteLen)
		c.releaseRecv(i)
		c.requestCloseLocal(errShortCapsule)
		return
	}
	if c.cfg.srq && c.srqHeld > c.cfg.depth {
		// More of the poll group's receive buffers than the queue has entries: only a
		// host ignoring its queue size sends that many, and on a shared receive queue
		// nothing else stops it from taking the buffers every other queue of the group
		// depends on (commands waiting for RDMA READ credits, the data window or the
		// backend hold theirs).
		c.log.Warn("host sent more commands than its queue has entries: disconnecting", "qid", c.cfg.qid,
			"depth", c.cfg.depth, "receive_buffers", c.srqHeld)
		c.releaseRecv(i)
		c.requestCloseLocal(errQueueOverrun)
		return
	}
	c.g.markCommand(c.q.Association())
	if c.recvWait.len() > 0 || c.freeCtxs() == 0 || c.g.quiescing {
		if c.recvWait.len() == c.recvWait.cap() {
			// Twice the queue's depth in use and as many more waiting: more commands than
			// the queue has entries, which only a host ignoring its queue size can send
			// (on a shared receive queue nothing else stops it).
			c.log.Warn("host sent more commands than its queue has entries: disconnecting", "qid", c.cfg.qid,
				"depth", c.cfg.depth, "contexts", len(c.ctxs))
			c.releaseRecv(i)
			c.requestCloseLocal(errQueueOverrun)
			return
		}
		if !c.g.quiescing {
			c.g.stats.ctxWaits.Add(1)
		}
		c.recvWait.push(int32(i), wc.ByteLen) // quiescing: never started (see group.quiesce)
		return
	}
	c.start(c.takeCtx(), i, int(wc.ByteLen))
}

var (
	errShortCapsule   = errors.New("rdma: command capsule shorter than 64 bytes")
	errQPError        = errors.New("rdma: queue pair error")
	errHostDisconnect = errors.New("rdma: host disconnected")
	errPostFailed     = errors.New("rdma: posting work requests failed")
	errQueueOverrun   = errors.New("rdma: host sent more commands than its queue has entries")
)

func (c *conn) takeCtx() *rctx {
	if len(c.freeCtx) == 0 {
		c.moreCtxs()
	}
	n := len(c.freeCtx) - 1
	x := c.ctxs[c.freeCtx[n]]
	c.freeCtx = c.freeCtx[:n]
	return x
}

// releaseRecv gives back a receive buffer whose capsule will not be executed: a shared
// receive queue's goes back to it (the connection's own slots are not reposted on a
// connection going away).
func (c *conn) releaseRecv(i int) {
	if c.cfg.srq {
		c.giveSRQ(i)
	}
}

// giveSRQ hands the shared receive queue's buffer i back to it.
func (c *conn) giveSRQ(i int) {
	c.g.srq.repost(i)
	c.srqHeld--
}

// recvBuffers returns receive buffer i's command entry and in-capsule data area.
func (c *conn) recvBuffers(i int) (sqe, icd []byte) {
	if c.cfg.srq {
		return c.g.srq.buffers(i)
	}
	off := i * nvmeproto.SQESize
	sqe = c.reg.mem[off : off+nvmeproto.SQESize]
	if c.cfg.icd > 0 {
		b := c.lay.icdBase + i*c.cfg.icd
		icd = c.reg.mem[b : b+c.cfg.icd : b+c.cfg.icd]
	}
	return sqe, icd
}

// start begins the command that arrived in receive slot i (n bytes).
func (c *conn) start(x *rctx, i, n int) {
	x.recv = int32(i)
	r := &x.req
	sqe, icdArea := c.recvBuffers(i)
	r.Cmd.Unmarshal(sqe) // 64 bytes: cannot fail
	if n > nvmeproto.SQESize && len(icdArea) > 0 {
		icd := min(n-nvmeproto.SQESize, len(icdArea))
		r.ICD = icdArea[:icd:icd]
	} else {
		r.ICD = nil
	}
	x.state = stCore
	if !c.q.Begin(r) {
		return // completed inline with an error
	}
	if r.Length == 0 || r.InCapsule {
		c.q.Execute(r)
		return
	}
	k := c.pool.orderOf(int(r.Length))
	if k < 0 { // the core checked MDTS; the pool holds MDTS-sized buffers
		c.q.Fail(r, nvmeproto.StatusInternalError)
		return
	}
	if !c.chainFits(r) {
		c.q.Fail(r, nvmeproto.StatusInternalError)
		return
	}
	x.bufOrder = k
	if c.mayAllocNow(k) {
		if off, ok := c.allocBuf(k); ok {
			x.bufOff, x.hasBuf = off, true
			c.haveBuf(x)
			return
		}
	}
	x.state = stWantBuf
	if c.cfg.srq {
		// Begin has copied what it needs of the capsule (the entry into r.Cmd, an SGL
		// list into the Request) and there is no in-capsule data: the shared receive
		// buffer goes back now. Commands waiting for the pool — a host flooding its queues
		// past its share — would otherwise drain the receive queue that every I/O queue of
		// the poll group depends on, and stall the others' commands.
		c.giveSRQ(int(x.recv))
		x.recv = -1
		r.ICD = nil
	}
	c.g.waitBuf(x)
}

// chainFits reports whether the response of controller-to-host command r (its RDMA
// WRITEs and the SEND, posted as one chain) is sure to find room in the send queue.
// Unsignaled responses hold at most half of it (signalResponse) and may stay until the
// next signaled completion, or on a quiet queue the watchdog's probe a watch period or
// two later: a chain longer than the other half could wait that long for send queue
// slots, and every response queued behind it too.
// Such a command (more descriptors or messages than sqDepth allows for, on a device with
// small messages or a send queue capped by the device) fails at once instead.
func (c *conn) chainFits(r *target.Request) bool {
	if r.Dir == nvmeproto.DirHostToCtrl {
		return true // RDMA READs are posted as send queue slots free up
	}
	n := 1
	for i := range r.SGL {
		n += (int(r.SGL[i].Length) + c.cfg.maxMsg - 1) / c.cfg.maxMsg
	}
	if n <= c.cfg.sqSize-c.cfg.sqSize/2 {
		return true
	}
	c.log.Warn("a command's response needs more work requests than the send queue is sure to have free: failing it",
		"qid", c.cfg.qid, "cid", r.Cmd.CID, "descriptors", len(r.SGL), "length", r.Length,
		"work_requests", n, "send_queue", c.cfg.sqSize, "max_msg", c.cfg.maxMsg)
	return false
}

// haveBuf continues a command that got its data buffer.
func (c *conn) haveBuf(x *rctx) {
	r := &x.req
	r.Data = c.pool.buf(x.bufOff, int(r.Length))
	if r.Dir != nvmeproto.DirHostToCtrl {
		x.state = stCore
		c.q.Execute(r)
		return
	}
	x.state = stRead
	x.rdDesc, x.rdOff, x.rdPlace, x.rdOut, x.rdAll, x.rdErr = 0, 0, 0, 0, false, false
	if c.readWait.head == nil && c.postReads(x) {
		return
	}
	if x.wire == 0 && wireBytes(int(r.Length)) > 0 {
		c.waitWindow(x) // behind other reads: its turn for the window is now
	}
	c.g.stats.readWaits.Add(1)
	c.readWait.push(x)
}

// failNoBuffer ends a command that waited for a buffer on a connection going away.
func (c *conn) failNoBuffer(x *rctx) {
	x.state = stCore
	c.q.Fail(&x.req, nvmeproto.StatusAbortSQDeletion)
}

// postReads stages RDMA READs of x's host data while READ credits and send queue slots
// last; it reports whether all of them are staged.
func (c *conn) postReads(x *rctx) bool {
	r := &x.req
	if x.wire == 0 { // the command's data is not counted on the wire yet (r.Length > 0: it has a buffer)
		if !c.windowFits(int(r.Length)) || c.yieldsWindow(x, int(r.Length), c.sendWait.head) {
			c.waitWindow(x)
			return false
		}
		x.wire = wireBytes(int(r.Length))
		c.wireOut += x.wire
		x.winWait = 0
	}
	for x.rdDesc < len(r.SGL) {
		if c.rdUsed >= c.cfg.ird || c.sqUsed >= c.cfg.sqSize {
			return false
		}
		d := &r.SGL[x.rdDesc]
		n := min(d.Length-x.rdOff, uint32(c.cfg.maxMsg))
		w := c.stageSend()
		w.ID = wrID(kindRead, x.idx, c.slot, c.gen)
		w.Op = rdmacm.OpRead
		w.Flags = rdmacm.FlagSignaled
		w.RemoteAddr = d.Address + uint64(x.rdOff)
		w.RKey = d.Key
		w.NumSGE = 1
		w.SGL[0] = c.pool.reg.sge(x.bufOff+x.rdPlace, int(n))
		x.rdPlace += int(n)
		x.rdOff += n
		if x.rdOff == d.Length {
			x.rdDesc++
			x.rdOff = 0
		}
		c.rdUsed++
		c.sqUsed++
		c.sigOut++
		x.rdOut++
	}
	x.rdAll = true
	return true
}

func (c *conn) onRead(i int, wc *rdmacm.Completion) {
	x := c.ctxs[i]
	c.rdUsed--
	c.sqUsed--
	c.sigOut--
	c.watch.done++
	x.rdOut--
	if wc.Status != rdmacm.WCSuccess {
		x.rdErr = true
		if wc.Status != rdmacm.WCFlushErr {
			c.fatal("RDMA READ of the host's data failed", wc)
		}
	}
	if x.state == stRead && x.rdOut == 0 && (x.rdAll || c.state != stateLive) {
		c.readDone(x)
	}
	if c.state == stateLive {
		c.pumpReads()
		c.pumpSends()
	} else {
		c.checkDrained()
	}
}

// readDone executes (or fails) a command whose READs have all completed.
func (c *conn) readDone(x *rctx) {
	c.unwire(x)
	x.state = stCore
	switch {
	case c.state != stateLive:
		c.q.Fail(&x.req, nvmeproto.StatusAbortSQDeletion)
	case x.rdErr:
		c.q.Fail(&x.req, nvmeproto.StatusDataTransferError)
	default:
		c.q.Execute(&x.req)
	}
}

func (c *conn) pumpReads() {
	for c.readWait.head != nil {
		if !c.postReads(c.readWait.head) {
			return
		}
		c.readWait.pop()
	}
}

// ---- complete → respond ----

// onComplete handles a command the core completed: the receive slot goes back to the
// host, then the response (RDMA WRITEs of read data chained before the SEND).
func (c *conn) onComplete(x *rctx) {
	if x.recv >= 0 {
		if c.cfg.srq {
			c.giveSRQ(int(x.recv))
		} else if c.state == stateLive {
			c.stageRecv(int(x.recv))
		}
		x.recv = -1
	}
	if c.state != stateLive {
		c.recycle(x)
		if c.state == stateDead && c.lateCore > 0 {
			c.lateDone()
		}
		return
	}
	if x.hasBuf && x.req.Dir == nvmeproto.DirHostToCtrl {
		// The backend is done with the host's data: the buffer is free before the
		// response goes out.
		c.freeBuf(x)
	}
	w := c.respWRs(x)
	if n := respData(x); c.sendWait.head != nil || c.sqUsed+w > c.cfg.sqSize || !c.windowFits(n) ||
		c.yieldsWindow(x, n, c.readWait.head) {
		if wireBytes(n) > 0 {
			c.waitWindow(x)
		}
		c.g.stats.sendWaits.Add(1)
		x.state = stWantSend
		x.sqSlots = w
		c.sendWait.push(x)
		return
	}
	c.postResponse(x, w)
}

// sendsData reports whether x's response carries data to the host.
func sendsData(x *rctx) bool {
	r := &x.req
	return r.Length > 0 && !r.InCapsule && x.hasBuf && r.Dir != nvmeproto.DirHostToCtrl && r.CQE.Status.Success()
}

// respWRs counts the work requests of x's response chain.
func (c *conn) respWRs(x *rctx) int {
	n := 1
	if sendsData(x) {
		for i := range x.req.SGL {
			l := int(x.req.SGL[i].Length)
			n += (l + c.cfg.maxMsg - 1) / c.cfg.maxMsg
		}
	}
	return n
}

// respData is the bytes of RDMA WRITEs in x's response chain.
func respData(x *rctx) int {
	if sendsData(x) {
		return int(x.req.Length)
	}
	return 0
}

// windowFits reports whether a request moving n bytes of RDMA data may start now:
// outside the window (wireBytes counts none of it), within the connection's window —
// soloWindows of it while no other controller's queue contends in the poll group
// (group.contended) —, or alone on the wire (a transfer larger than the window still
// goes, on its own).
func (c *conn) windowFits(n int) bool {
	w := wireBytes(n)
	if w == 0 || c.cfg.window == 0 || c.wireOut == 0 {
		return true
	}
	limit := c.cfg.window
	if !c.g.contended(c.q.Association()) {
		limit *= soloWindows
	}
	return c.wireOut+w <= limit
}

// waitWindow gives x its turn for the window if it has none: it starts to wait now.
func (c *conn) waitWindow(x *rctx) {
	if x.winWait == 0 {
		c.winTurns++
		x.winWait = c.winTurns
	}
}

// yieldsWindow reports whether x, whose transfer is n bytes, must let head (the first
// request waiting in the other direction: readWait for a response, sendWait for a
// write's RDMA READs) take the window first: head waits for it, and started to wait
// before x. The window is taken in the order requests started to wait for it, across
// both directions; otherwise a queue whose large reads keep the window full — each
// response's completion letting the next waiting response in first — keeps a write's
// RDMA READs waiting for as long as the reads go on, and the host times the write out.
func (c *conn) yieldsWindow(x *rctx, n int, head *rctx) bool {
	return head != nil && head.winWait != 0 && wireBytes(n) > 0 &&
		(x.winWait == 0 || head.winWait < x.winWait)
}

// soloWindows is how many windows of data a queue may have on the wire while no other
// host's queue contends in its poll group: the window exists for the other hosts'
// commands, and a lone host's queue of large transfers that waits a round trip between
// them (one 128 KiB transfer at a time at the default) leaves the link idle in between.
// A host that starts to contend finds at most this much per queue of the lone host ahead
// of its first command (each such queue is back to one window for its next transfers).
// More is not better where the link is software: on Linux 6.12's Soft-RoCE (null, the
// Linux host, 128 KiB QD16, one boot, builds alternated over 4 repetitions) 32 windows
// lost every median against 8 — reads 0.94 and 0.93 with fio free and on one vCPU, writes
// 0.87 and 0.85 — and 4 measured level with 8 within the boot's spread.
const soloWindows = 8

// windowMin is the largest transfer the window leaves out: a page. The window keeps a
// queue's large transfers from holding up its poll group's rounds (on Soft-RoCE the post
// call builds every packet); page-sized ones are what the quiet queues it protects send,
// and a queue of them has at most its depth in pages on the wire (512 KiB at the default
// depth of 128). Counted, they made a queue of 4 KiB random reads deeper than 32 wait for
// its own window with nothing large on the wire.
const windowMin = 4096

// wireBytes is what a transfer of n bytes counts in conn.wireOut.
func wireBytes(n int) int {
	if n <= windowMin {
		return 0
	}
	return n
}

// unwire takes x's data out of the connection's bytes on the wire.
func (c *conn) unwire(x *rctx) {
	c.wireOut -= x.wire
	x.wire = 0
}

func (c *conn) postResponse(x *rctx, w int) {
	r := &x.req
	if sendsData(x) {
		place := 0
		for i := range r.SGL {
			d := &r.SGL[i]
			for off := uint32(0); off < d.Length; {
				n := min(d.Length-off, uint32(c.cfg.maxMsg))
				wr := c.stageSend()
				wr.ID = wrID(kindWrite, x.idx, c.slot, c.gen)
				wr.Op = rdmacm.OpWrite
				wr.Flags = 0
				wr.RemoteAddr = d.Address + uint64(off)
				wr.RKey = d.Key
				wr.NumSGE = 1
				wr.SGL[0] = c.pool.reg.sge(x.bufOff+place, int(n))
				place += int(n)
				off += n
			}
		}
	}
	resp := c.respBuf(x.idx)
	r.CQE.Marshal(resp)
	wr := c.stageSend()
	wr.ID = wrID(kindSend, x.idx, c.slot, c.gen)
	wr.Op = rdmacm.OpSend
	wr.RemoteAddr, wr.RKey = 0, 0
	if key, ok := invalidateKey(r); ok && c.cfg.sendInv {
		wr.Op, wr.Imm = rdmacm.OpSendInv, key
	}
	wr.NumSGE = 1
	wr.SGL[0] = c.reg.sge(c.lay.respBase+x.idx*nvmeproto.CQESize, nvmeproto.CQESize)
	c.sqUsed += w
	x.sqSlots = w
	x.state = stSend
	c.respSeq++
	x.seq = c.respSeq
	held := 0
	if x.hasBuf {
		held = pageSize << x.bufOrder
	}
	if c.signalResponse(held) {
		wr.Flags = rdmacm.FlagSignaled
		x.unsigned = false
		c.sigOut++
		x.wire = wireBytes(respData(x))
		c.wireOut += x.wire
		return
	}
	wr.Flags = 0
	x.unsigned = true
	c.unsig.push(int32(x.idx), 0)
	c.unsigBytes += held
}

// invalidateKey returns the key the response to r invalidates at the host: that of r's
// one keyed descriptor, when the host asked for it (subtype Invalidate Key). The Linux
// host registers a memory region for each command's data and asks so; the response's
// SEND with Invalidate spares it a local invalidation — a work request and a completion
// it would wait for before completing the command. With several descriptors the host
// invalidates its keys itself.
func invalidateKey(r *target.Request) (uint32, bool) {
	if len(r.SGL) != 1 || r.SGL[0].ID() != nvmeproto.SGLIDKeyedInvalidate {
		return 0, false
	}
	return r.SGL[0].Key, true
}

// Selective signaling limits.
const (
	unsigMax      = 16        // unsignaled responses in a row
	unsigMaxBytes = 256 << 10 // pool bytes unsignaled responses may hold per connection
	unsigMaxBuf   = 16 << 10  // larger read responses are always signaled
)

// signalResponse decides whether the next response SEND (whose chain holds held bytes of
// pool memory) is signaled: always on admin queues, when unsignaled responses would
// pile up (count, pool bytes, send queue or context room), and when the pool runs
// short, so that what they hold is not kept from others.
func (c *conn) signalResponse(held int) bool {
	if c.admin || c.g.quiescing || c.unsig.len()+1 >= unsigMax || held > unsigMaxBuf || c.unsigBytes+held > unsigMaxBytes ||
		2*c.sqUsed > c.cfg.sqSize || 4*c.freeCtxs() < len(c.ctxs) {
		return true
	}
	if held > 0 {
		if c.pool.wanting.Load() > 0 {
			return true
		}
		free, total, _ := c.pool.stats()
		if 4*free < total {
			return true
		}
		// An unsignaled response of a queue that goes quiet is retired only by the
		// watchdog's probe, a watch period or two later: what the pool keeps outside
		// its reserve must still hold a largest buffer, or a command waiting for one
		// would wait that long (a small pool: 4 KiB held this way holds up a transfer of
		// the pool's size).
		if free-c.pool.reserve < 1<<c.pool.maxOrder {
			return true
		}
	}
	return false
}

// retireUnsigned completes the unsignaled responses posted before seq (through seq
// with through).
func (c *conn) retireUnsigned(seq uint64, through bool) {
	for c.unsig.len() > 0 {
		i, _ := c.unsig.peek()
		x := c.ctxs[i]
		if x.seq > seq || (x.seq == seq && !through) {
			return
		}
		c.unsig.pop()
		c.retireResponse(x)
	}
}

// retireResponse frees what a completed response held.
func (c *conn) retireResponse(x *rctx) {
	c.unwire(x)
	c.sqUsed -= x.sqSlots
	x.sqSlots = 0
	if x.unsigned {
		x.unsigned = false
		if x.hasBuf {
			c.unsigBytes -= pageSize << x.bufOrder
		}
	}
	c.recycle(x)
}

func (c *conn) pumpSends() {
	for c.sendWait.head != nil {
		x := c.sendWait.head
		if n := respData(x); c.sqUsed+x.sqSlots > c.cfg.sqSize || !c.windowFits(n) || c.yieldsWindow(x, n, c.readWait.head) {
			return
		}
		c.sendWait.pop()
		x.winWait = 0
		c.postResponse(x, x.sqSlots)
	}
}

func (c *conn) onSend(i int, wc *rdmacm.Completion) {
	x := c.ctxs[i]
	if x.state != stSend {
		return // an unsignaled response already retired by a later completion
	}
	c.watch.done++
	if wc.Status != rdmacm.WCSuccess && wc.Status != rdmacm.WCFlushErr {
		c.fatal("response SEND failed", wc)
	}
	// Completions of the send queue come in order: every unsignaled response posted
	// before this one is complete too (an unsignaled SEND completes here only as a
	// flushed error, and then through itself).
	c.retireUnsigned(x.seq, x.unsigned)
	if x.state == stSend { // signaled
		c.sigOut--
		c.retireResponse(x)
	}
	if c.state == stateLive {
		c.pumpSends()
		c.pumpReads()
	} else {
		c.checkDrained()
	}
}

// probe stages a signaled zero-length RDMA WRITE behind c's unsignaled responses. The
// send queue completes in order, so its completion retires them all (their buffers go
// back to the pool), and while it is outstanding the watchdog sees a signaled request
// that makes no progress if the host holds the responses back (posts no receive
// buffers). A zero-length RDMA operation names no memory: the responder checks no
// address or key (IBTA C9-88), and it takes no receive buffer of the host.
func (c *conn) probe() {
	wr := c.stageSend()
	wr.ID = wrID(kindProbe, 0, c.slot, c.gen)
	wr.Op = rdmacm.OpWrite
	wr.Flags = rdmacm.FlagSignaled
	wr.RemoteAddr, wr.RKey, wr.Imm = 0, 0, 0
	wr.NumSGE = 0
	c.sqUsed++
	c.sigOut++
	c.probeSeq = c.respSeq
	c.g.m.probes.Add(1)
	c.log.Debug("responses posted unsignaled on a quiet queue: a zero-length RDMA WRITE behind them retires them",
		"cntlid", c.q.ControllerID(), "responses", c.unsig.len(), "pool_bytes", c.unsigBytes)
}

// onProbe completes the probe: every response posted before it is complete too.
func (c *conn) onProbe(wc *rdmacm.Completion) {
	c.sqUsed--
	c.sigOut--
	c.watch.done++
	if wc.Status != rdmacm.WCSuccess && wc.Status != rdmacm.WCFlushErr {
		c.fatal("the watchdog's zero-length RDMA WRITE failed", wc)
	}
	c.retireUnsigned(c.probeSeq, true)
	if c.state == stateLive {
		c.pumpSends()
		c.pumpReads()
	} else {
		c.checkDrained()
	}
}

// recycle frees x's buffer and the context; a receive waiting for a context gets it.
func (c *conn) recycle(x *rctx) {
	c.unwire(x)
	if x.hasBuf {
		c.freeBuf(x)
	}
	r := &x.req
	r.Data, r.ICD, r.SGL = nil, nil, nil
	x.state = stFree
	x.sqSlots = 0
	x.winWait = 0
	if c.state == stateLive && c.recvWait.len() > 0 && !c.g.quiescing {
		i, n := c.recvWait.pop()
		c.start(x, int(i), int(n))
		return
	}
	c.freeCtx = append(c.freeCtx, int32(x.idx))
}

// owesResponse reports whether the host still waits for x's response: x was begun and
// its response has not been sent (a response posted unsignaled counts as sent: nothing
// may come to retire it), and it is not an Asynchronous Event Request, which the core
// holds until an event or the queue's end.
func (x *rctx) owesResponse() bool {
	switch x.state {
	case stFree:
		return false
	case stSend:
		return !x.unsigned
	case stCore:
		return !(x.c.admin && x.req.Cmd.Opcode == nvmeproto.OpAsyncEventRequest)
	}
	return true
}

// ---- staging and posting ----

func (c *conn) stageSend() *rdmacm.SendWR {
	if c.nSend == len(c.sendStage) { // a longer round than ever: grow, once
		grown := make([]rdmacm.SendWR, min(2*len(c.sendStage), c.cfg.sqSize))
		copy(grown, c.sendStage)
		c.sendStage = grown
	}
	w := &c.sendStage[c.nSend]
	c.nSend++
	c.g.markDirty(c)
	return w
}

func (c *conn) stageRecv(i int) {
	c.recvStage[c.nRecv] = c.recvWRs[i]
	c.nRecv++
	c.recvPosted++
	c.g.markDirty(c)
}

// flush posts the staged work requests, receives then sends, in one call (or, on a
// connection going away, completes them as flushed without posting).
func (c *conn) flush() {
	nr, ns := c.nRecv, c.nSend
	c.nRecv, c.nSend = 0, 0
	if c.state != stateLive {
		c.flushStaged(0, nr, 0, ns)
		return
	}
	if nr == 0 && ns == 0 {
		return
	}
	err := c.ep.Post(c.recvStage[:nr], c.sendStage[:ns])
	if err == nil {
		return
	}
	recvs, sends := 0, 0 // posted before the failure
	var pe *rdmacm.PostError
	if errors.As(err, &pe) {
		if pe.Op == "ibv_post_send" {
			recvs, sends = nr, pe.Index
		} else {
			recvs = pe.Index
		}
	}
	c.log.Error("posting work requests failed: disconnecting", "qid", c.cfg.qid, "receives", nr, "sends", ns, "err", err)
	c.requestCloseLocal(errPostFailed)
	c.flushStaged(recvs, nr, sends, ns)
}

// flushStaged completes staged work requests [r0, r1) and [s0, s1) as flushed, for the
// accounting of requests that never reached the device. The connection is closing; with
// its staged work gone it may hold nothing on the device any more, which no completion
// would then tell (unsignaled sends complete nothing): it checks.
func (c *conn) flushStaged(r0, r1, s0, s1 int) {
	defer c.checkDrained()
	var wc rdmacm.Completion
	wc.Status = rdmacm.WCFlushErr
	for i := r0; i < r1; i++ {
		wc.ID = c.recvStage[i].ID
		c.g.dispatch(&wc)
	}
	for i := s0; i < s1; i++ {
		w := &c.sendStage[i]
		if w.Flags&rdmacm.FlagSignaled == 0 {
			continue
		}
		wc.ID = w.ID
		c.g.dispatch(&wc)
	}
}

// ---- teardown ----

// fatal handles an error completion: the QP is in the error state, the connection is
// lost.
func (c *conn) fatal(what string, wc *rdmacm.Completion) {
	if c.state == stateLive {
		c.log.Warn(what+": disconnecting", "qid", c.cfg.qid, "cntlid", c.q.ControllerID(),
			"status", wc.Status.String(), "vendor_err", wc.VendorErr, "wr_id", wc.ID)
	}
	c.requestCloseLocal(errQPError)
}

// requestCloseLocal starts the teardown from the group's own goroutine.
func (c *conn) requestCloseLocal(reason error) {
	c.closeReason.CompareAndSwap(nil, &reason)
	c.closeReq.Store(true)
	if c.state == stateLive {
		c.beginClose()
	}
}

// beginClose disconnects: the QP goes to the error state and flushes what the device
// holds, queued commands fail, and the core queue closes (waiting for the commands it
// runs) on its own goroutine.
func (c *conn) beginClose() {
	if c.state != stateLive {
		return
	}
	c.state = stateDraining
	c.drainDeadline = time.Now().Add(drainTimeout)
	c.g.draining = append(c.g.draining, c)
	reason := c.reason()
	if ok, suppressed := c.g.closeLog.allow(); ok {
		attrs := []any{"cntlid", c.q.ControllerID(), "host", c.q.HostNQN(), "reason", reason, // the logger has remote and qid
			"in_flight", c.busyContexts()}
		if suppressed > 0 {
			attrs = append(attrs, "suppressed", suppressed)
		}
		c.log.Info("queue torn down", attrs...)
	}
	if err := c.ep.Disconnect(); err != nil {
		c.log.Debug("rdma_disconnect", "qid", c.cfg.qid, "err", err)
	}
	// Commands waiting for buffers, READ credits or send slots.
	c.g.dropWaiters(c)
	for x := c.readWait.pop(); x != nil; x = c.readWait.pop() {
		x.rdAll = true // post no more
		if x.state == stRead && x.rdOut == 0 {
			c.readDone(x)
		}
	}
	for x := c.sendWait.pop(); x != nil; x = c.sendWait.pop() {
		c.recycle(x)
	}
	for c.recvWait.len() > 0 { // capsules that waited for a context
		i, _ := c.recvWait.pop()
		c.releaseRecv(int(i))
	}
	go func() {
		if !c.q.Close() {
			c.coreLate.Store(true) // before coreClosed: maybeFinalize reads it after
		}
		c.coreClosed.Store(true)
		c.g.pushAttn(c)
	}()
	c.checkDrained()
}

// checkDrained notes when the device holds nothing of a closing connection any more.
func (c *conn) checkDrained() {
	if c.state != stateDraining || c.hwDrained || c.recvPosted > 0 || c.sigOut > 0 || c.nSend > 0 || c.nRecv > 0 {
		return
	}
	c.hwDrained = true
	c.maybeFinalize()
}

// forceDrain destroys the QP of a connection whose flushes did not all arrive, then
// completes what the device held.
func (c *conn) forceDrain() {
	c.g.m.forcedDrains.Add(1)
	c.log.Warn("the device did not flush the connection's work requests in time: destroying its queue pair",
		"qid", c.cfg.qid, "receives", c.recvPosted, "sends", c.sigOut, "requests", c.busyContexts(), "timeout", drainTimeout)
	if err := c.ep.Destroy(); err != nil {
		c.log.Error("destroying the queue pair", "qid", c.cfg.qid, "err", err)
	}
	c.hwDrained = true
	c.recvPosted, c.sigOut, c.sqUsed, c.rdUsed = 0, 0, 0, 0
	for _, x := range c.ctxs[:c.nctx] {
		switch x.state {
		case stRead:
			if x.rdOut > 0 {
				x.rdOut = 0
				c.readDone(x)
			}
		case stSend:
			x.unsigned = false
			c.recycle(x)
		}
	}
	c.unsig.reset()
	c.unsigBytes = 0
	c.maybeFinalize()
}

// busyContexts counts the request contexts in use by state, for logs and test failures:
// "core=2 send=1", or "none".
func (c *conn) busyContexts() string {
	var n [len(reqStateNames)]int
	for _, x := range c.ctxs[:c.nctx] {
		if st := x.state; int(st) < len(n) {
			n[st]++
		}
	}
	var b []byte
	for st, k := range n {
		if reqState(st) != stFree && k > 0 {
			if len(b) > 0 {
				b = append(b, ' ')
			}
			b = append(b, reqState(st).String()...)
			b = append(b, '=')
			b = strconv.AppendInt(b, int64(k), 10)
		}
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// maybeFinalize releases the connection once the device and the core are done with it.
func (c *conn) maybeFinalize() {
	if c.state != stateDraining || !c.hwDrained || !c.coreDone {
		return
	}
	c.state = stateDead
	c.g.removeDraining(c)
	c.g.detach(c)
	// Destroy the QP before giving back buffers: unsignaled responses that completed
	// silently are known only to be done now.
	if err := c.ep.Destroy(); err != nil {
		c.log.Error("destroying the queue pair", "qid", c.cfg.qid, "err", err)
	}
	if c.srqJoined {
		c.srqJoined = false
		if c.g.qpConns[c.qpn] == c { // the device may have given the number to a newer QP
			delete(c.g.qpConns, c.qpn)
		}
	}
	for c.unsig.len() > 0 {
		i, _ := c.unsig.pop()
		x := c.ctxs[i]
		x.unsigned = false
		c.recycle(x)
	}
	c.unsigBytes = 0
	for _, x := range c.ctxs[:c.nctx] {
		if x.hasBuf && x.state != stCore {
			c.recycle(x)
		}
	}
	// What it holds now is its late commands' (detach counted it in pool.closedHeld).
	c.share.closed = !c.admin
	if c.coreLate.Load() {
		// The core gave up waiting for commands its backend has not completed: they may
		// still read their in-capsule data in this connection's memory (and write their
		// pool buffers), so the memory is released only once the last one completes.
		for _, x := range c.ctxs[:c.nctx] {
			if x.state == stCore {
				c.lateCore++
			}
		}
		if c.lateCore > 0 {
			c.log.Warn("queue pair destroyed; its memory is kept until the backend completes the commands still executing",
				"qid", c.cfg.qid, "commands", c.lateCore, "pool_pages_held", c.share.held,
				"pool_pages_held_by_closed_queues", c.pool.closedHeld.Load())
			return
		}
	}
	if c.onDead != nil {
		go c.onDead(c)
	}
}

// lateDone notes that a command the core still executed after its queue closed has
// completed; after the last one the connection's memory is released.
func (c *conn) lateDone() {
	c.lateCore--
	if c.lateCore > 0 {
		return
	}
	c.log.Info("the commands left executing after the queue closed have completed: releasing its memory", "qid", c.cfg.qid)
	if c.onDead != nil {
		go c.onDead(c)
	}
}

// ring is a fixed-capacity FIFO of receive completions (slot, bytes).
type ring struct {
	slot []int32
	n    []uint32
	head int
	cnt  int
}

func newRing(capacity int) ring {
	return ring{slot: make([]int32, capacity), n: make([]uint32, capacity)}
}

func (r *ring) len() int { return r.cnt }

func (r *ring) cap() int { return len(r.slot) }

func (r *ring) push(slot int32, n uint32) {
	i := (r.head + r.cnt) % len(r.slot)
	r.slot[i], r.n[i] = slot, n
	r.cnt++
}

func (r *ring) pop() (int32, uint32) {
	s, n := r.slot[r.head], r.n[r.head]
	r.head = (r.head + 1) % len(r.slot)
	r.cnt--
	return s, n
}

func (r *ring) peek() (int32, uint32) { return r.slot[r.head], r.n[r.head] }

func (r *ring) reset() { r.head, r.cnt = 0, 0 }
