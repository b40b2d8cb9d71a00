package rdma

import (
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/internal/ratelog"
	"github.com/gonvmf/gonvmf/rdmacm"
	"golang.org/x/sys/unix"
)

// endpoint is a connection's queue pair as the engine uses it (*rdmacm.QP plus its CM
// ID in the target; a fake in unit tests).
type endpoint interface {
	PostSend(wrs []rdmacm.SendWR) error
	PostRecv(wrs []rdmacm.RecvWR) error
	// Post posts receives, then sends, in one call (see rdmacm.QP.Post).
	Post(recvs []rdmacm.RecvWR, sends []rdmacm.SendWR) error
	// Disconnect moves the QP to the error state (rdma_disconnect), so that every
	// outstanding work request completes, flushed, and tells the host.
	Disconnect() error
	// Destroy destroys the QP: the hardware touches none of its buffers afterwards.
	Destroy() error
}

// compQueue is a poll group's completion queue (*rdmacm.CQ, or a fake).
type compQueue interface {
	Poll(wc []rdmacm.Completion) (int, error)
	Arm(solicitedOnly bool) error
	Wait(timeout time.Duration) (bool, error)
	Wake()
}

// Work request IDs: kind in bits 0..7, context or receive slot in 8..23, the
// connection's slot in its group's table in 24..39, and that slot's generation in
// 40..63 (completions of a connection that is gone are recognised and dropped).
const (
	kindRecv  = 1
	kindRead  = 2
	kindWrite = 3
	kindSend  = 4
	// A shared receive queue's buffer (idx): the connection is the completion's QP.
	kindSRQRecv = 5
	// The watchdog's zero-length RDMA WRITE behind a connection's unsignaled responses
	// (watchdog.go, conn.probe).
	kindProbe = 6
)

func wrID(kind, idx, slot int, gen uint32) uint64 {
	return uint64(kind) | uint64(idx)<<8 | uint64(slot)<<24 | uint64(gen&0xFFFFFF)<<40
}

// maxConnsPerGroup bounds a poll group's connection table.
const maxConnsPerGroup = 4096

// pollBatch is how many completions a poll group takes per Poll call.
const pollBatch = 64

// Drain timing: how long a closing connection waits for the device to flush its work
// requests before its QP is destroyed regardless, and how often a group with closing
// connections wakes up to check.
var drainTimeout = 5 * time.Second // a variable for tests

const (
	drainCheck    = 50 * time.Millisecond
	idleWakeEvery = time.Second
)

// groupConfig tunes a poll group.
type groupConfig struct {
	busyPoll bool // never sleep on the completion channel
	spin     int  // event mode: empty polls after the last work before sleeping
	cqeCap   int  // completion queue entries (the sum of its connections' needs must fit)
	// respTimeout is limits.response_timeout (watchdog.go); 0: no watchdog.
	respTimeout time.Duration
}

// group is a poll group: one goroutine polling one completion queue shared by many
// connections' QPs, in batches. It owns the state of those connections (send queue and
// RDMA READ credits, the requests' state machines, staged work requests), so none of
// it needs a lock; other goroutines hand it work through lock-free lists (completed
// commands, connection events) and wake it if it sleeps.
type group struct {
	id   int
	log  *slog.Logger
	pool *pool
	cq   compQueue
	cfg  groupConfig
	// ring, when set, runs the reads and writes of the group's queues on file and block
	// backends as asynchronous I/O; the kernel signals the completion queue's wake-up
	// eventfd when they complete, and the group reaps them (nil: worker goroutines).
	ring *backend.Ring
	// srq, when set, is the shared receive queue of the group's I/O queues (conn.cfg.srq);
	// qpConns finds their connections by QP number (the group's goroutine's).
	srq     *sharedRecv
	qpConns map[uint32]*conn

	wcs []rdmacm.Completion

	mu      sync.Mutex // guards the slot allocator and cqeUsed
	conns   []atomic.Pointer[conn]
	gens    []uint32
	free    []int32
	nconns  atomic.Int32
	cqeUsed int

	done     atomic.Pointer[rctx] // commands the core completed (a LIFO stack)
	attn     atomic.Pointer[conn] // connections with events (close requested, core closed)
	sleeping atomic.Bool
	kicked   atomic.Bool
	wantFlag atomic.Bool // some request waits for pool buffers (read by pool.release)
	wantBuf  bool        // the group's own copy of wantFlag

	admin    adminWaits  // admin commands waiting for a buffer (served first, share.go)
	shares   groupShares // I/O commands waiting for a buffer, by connection (share.go)
	dirty    []*conn
	draining []*conn

	watchTimer *time.Timer     // sets watchDue every watchPeriod (watchdog.go)
	watchDue   atomic.Bool     // the connections' progress is due for a check
	refusals   ratelog.Limiter // connections torn down for a limit: a line per host and interval

	startOnce sync.Once // start
	stopping  atomic.Bool
	cqGone    bool // the completion queue was closed under the group
	armed     bool // the completion queue is armed and its event not yet taken
	stopped   chan struct{}

	// Quiescing (Transport.Drain): the target is shutting down. The group starts no new
	// command — capsules that arrive stay in their receive buffers, unanswered, and the
	// host resends them after it reconnects — while the commands already begun finish
	// and their responses go out (every response SEND signaled, so that its completion
	// is seen). busy is then the number of begun commands without a completed response
	// (held Asynchronous Event Requests and responses already posted unsignaled
	// excepted), recounted after every round with work; -1 until first counted.
	quiesce   atomic.Bool
	quiescing bool // the group's copy of quiesce
	busy      atomic.Int64
	counted   atomic.Bool // busy has been counted since quiesce was seen

	closeLog logLimit // "queue torn down" lines

	// workRounds counts the rounds that found work; recent holds the two controllers
	// whose queues most recently had a command arrive here, the later first, with
	// workRounds then. Together they tell a queue whether another host's commands share
	// its group (see conn.windowFits). A mark keeps its controller reachable until a
	// command of another replaces it: two controllers per group at most.
	workRounds uint64
	recent     [2]cmdMark

	stats groupStats
	m     groupMetrics // metrics.go
}

// groupStats count events of a poll group (read racily, for logs and tests).
type groupStats struct {
	polls, completions, sleeps, wakeups atomic.Uint64
	arms                                atomic.Uint64
	bufWaits, readWaits, sendWaits      atomic.Uint64
	ctxWaits                            atomic.Uint64
}

func newGroup(id int, p *pool, cq compQueue, cfg groupConfig, log *slog.Logger) *group {
	g := &group{
		id: id, log: log.With("poll_group", id), pool: p, cq: cq, cfg: cfg,
		wcs:     make([]rdmacm.Completion, pollBatch),
		conns:   make([]atomic.Pointer[conn], maxConnsPerGroup),
		gens:    make([]uint32, maxConnsPerGroup),
		free:    make([]int32, 0, maxConnsPerGroup),
		dirty:   make([]*conn, 0, maxConnsPerGroup),
		qpConns: make(map[uint32]*conn),
		stopped: make(chan struct{}),
	}
	for i := maxConnsPerGroup - 1; i >= 0; i-- {
		g.free = append(g.free, int32(i))
	}
	p.addGroup(g)
	g.startWatch()
	return g
}

var errGroupFull = errors.New("rdma: poll group has no room for another queue pair")

// attach gives c a slot in the group's table if the completion queue has room for c's
// work requests. The group ignores c until publish.
func (g *group) attach(c *conn) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.free) == 0 || g.cqeUsed+c.cqeNeed > g.cfg.cqeCap {
		return errGroupFull
	}
	slot := g.free[len(g.free)-1]
	g.free = g.free[:len(g.free)-1]
	g.gens[slot] = (g.gens[slot] + 1) & 0xFFFFFF
	g.cqeUsed += c.cqeNeed
	if !c.admin {
		g.pool.addIOConn(1)
	}
	c.g = g
	c.slot = int(slot)
	c.gen = g.gens[slot]
	c.initWRs()
	g.nconns.Add(1)
	return nil
}

// publish makes c's completions and events reach it; everything the group reads of c
// must be set before. A close requested before publish is acted on now.
func (g *group) publish(c *conn) {
	g.conns[c.slot].Store(c)
	c.published.Store(true)
	if c.closeReq.Load() || c.cfg.srq {
		g.pushAttn(c) // the group enters a shared receive queue's connection in qpConns
	}
}

// room reports whether a connection needing cqe completion entries fits, and how many
// connections the group has (to spread them).
func (g *group) room(cqe int) (fits bool, conns int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.free) > 0 && g.cqeUsed+cqe <= g.cfg.cqeCap, int(g.nconns.Load())
}

// detach frees c's slot; completions still carrying it are dropped.
func (g *group) detach(c *conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.detached {
		return
	}
	c.detached = true
	if g.conns[c.slot].Load() == c {
		g.conns[c.slot].Store(nil)
	}
	g.free = append(g.free, int32(c.slot))
	g.cqeUsed -= c.cqeNeed
	if !c.admin {
		g.pool.leaveDivision(c.latePages())
	}
	g.nconns.Add(-1)
}

// pushDone hands a command the core completed to the group. Any goroutine.
func (g *group) pushDone(x *rctx) {
	for {
		old := g.done.Load()
		x.nextDone = old
		if g.done.CompareAndSwap(old, x) {
			break
		}
	}
	if g.sleeping.Load() {
		g.cq.Wake()
	}
}

// pushAttn queues c for the group's attention (its flags say why). Any goroutine.
func (g *group) pushAttn(c *conn) {
	if !c.attnQueued.CompareAndSwap(false, true) {
		return
	}
	for {
		old := g.attn.Load()
		c.nextAttn = old
		if g.attn.CompareAndSwap(old, c) {
			break
		}
	}
	g.cq.Wake()
}

// kick makes the group retry waiting requests (buffers were freed). Any goroutine.
func (g *group) kick() {
	g.kicked.Store(true)
	if g.sleeping.Load() {
		g.cq.Wake()
	}
}

// start runs the group's goroutine, once: at the device's opening (and, for a group that
// never ran, before the device's close, which waits for every group).
func (g *group) start() { g.startOnce.Do(func() { go g.run() }) }

// stop makes run return once no connection is left (or at once with force).
func (g *group) stop() {
	g.stopping.Store(true)
	g.cq.Wake()
}

// run is the poll group's goroutine. It keeps one OS thread for its whole life
// (runtime.LockOSThread). Unlocked, it resumed after every pass through the Go scheduler
// (its yields, sysmon taking its P during a long post) on whichever thread picked it up,
// and its work spread over several threads, which the kernel placed each anew beside the
// host's threads and the softirq work its posts raise. Measured in two 6.1 guest boots
// (null, the Linux host, 8 repetitions each, the two builds alternated; medians of 4,
// locked against unlocked, the first boot then the second): 4k reads at QD1 2,304
// against 1,647 and 1,648 against 1,405 IOPS, at QD32 7,157 against 5,386 and 5,319
// against 4,370 (p99 11.1 against 16.0 and 15.7 against 24.0 ms), 4k QD32 writes 6,886
// against 5,674 and 7,137 against 5,764, 128 KiB reads 427 against 429 and 419 against
// 350, and the process's CPU per I/O lower in every job (4k QD32 reads 76 against 128
// and 134 against 164 µs). In the first boot the locked build ran under another name,
// which the benchmark's system call counter leaves out. On Linux 6.12, whose Soft-RoCE runs
// a post's packets in a workqueue, two such boots disagreed within their spread (4k QD32
// reads 7,165 against 7,763 and 7,735 against 7,150). The price: a locked goroutine's
// runtime.Gosched hands its P to another thread and back (two wake-ups), so busy polling
// passes through the scheduler as often as a busy round does, not at every empty poll.
func (g *group) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(g.stopped)
	defer func() {
		if g.watchTimer != nil {
			g.watchTimer.Stop()
		}
	}()
	idle, busy := 0, 0
	y, _ := g.cq.(yielder)
	for {
		if g.iterate() {
			idle = 0
			// A group that keeps finding work never sleeps, so it never yields in
			// Wait: yield here too (see threadCQ), checking the clock every
			// busyYieldCheck rounds only.
			if busy++; busy >= busyYieldCheck && y != nil {
				busy = 0
				y.maybeYield()
			}
			continue
		}
		g.m.idlePolls.Add(1)
		if g.cqGone || (g.stopping.Load() && g.nconns.Load() == 0 && g.done.Load() == nil) {
			return
		}
		if g.cfg.busyPoll {
			if len(g.draining) > 0 {
				g.housekeeping()
			}
			// A locked goroutine's runtime.Gosched hands its P to another thread and
			// back (see run): not at every empty poll, but as often as a busy round does.
			if y == nil {
				runtime.Gosched()
			} else if busy++; busy >= busyYieldCheck {
				busy = 0
				y.maybeYield()
			}
			continue
		}
		// A spin counted in polls, not time: reading the clock is a system call where
		// the vDSO has no usable clock source (emulated guests). A goroutine that the
		// last rounds handed work (a backend worker) runs at once, not after the spin.
		if idle < g.cfg.spin {
			idle++
			if y != nil {
				y.yieldOnHandoff()
				if idle%spinYieldPolls == 0 {
					y.yieldCPU()
				}
			}
			continue
		}
		g.sleep()
		idle = 0
	}
}

// iterate does one round of work: completions, completed commands, connection events,
// requests waiting for buffers, then posts what was staged. It reports whether there
// was anything to do.
func (g *group) iterate() bool {
	work := false
	n, err := g.cq.Poll(g.wcs)
	if err != nil {
		if errors.Is(err, rdmacm.ErrClosed) {
			g.cqGone = true
			return false
		}
		g.log.Error("polling the completion queue failed", "err", err)
		time.Sleep(10 * time.Millisecond)
	}
	g.stats.polls.Add(1)
	if n > 0 {
		g.stats.completions.Add(uint64(n))
		for i := range g.wcs[:n] {
			g.dispatch(&g.wcs[i])
		}
		work = true
	}
	if g.ring != nil && g.ring.Ready() {
		g.ring.Reap() // completes commands: they land on g.done
		work = true
	}
	if g.done.Load() != nil {
		g.processDone()
		work = true
	}
	if g.attn.Load() != nil {
		g.processAttn()
		work = true
	}
	if g.kicked.Swap(false) || g.wantBuf {
		if g.serveBufWait() {
			work = true
		}
	}
	if g.watchDue.Load() {
		g.watchDue.Store(false)
		g.watchdog(time.Now())
	}
	g.post()
	if len(g.draining) > 0 && work {
		g.housekeeping()
	}
	if g.quiescing || g.quiesce.Load() {
		g.countBusy(work)
	}
	if work {
		g.workRounds++
	}
	return work
}

// cmdMark is a controller (target.Queue.Association) whose queue had a command arrive,
// and the group's workRounds then.
type cmdMark struct {
	assoc any
	round uint64
}

// soloRounds is how many rounds with work a controller stays a contender for the other
// controllers' queues after its last command arrived. A host with commands outstanding
// sends its next as responses reach it, well within that; one idle for longer is not
// held back for.
const soloRounds = 64

// markCommand notes that a command of a queue of controller assoc arrived (nil, before
// Connect: none).
func (g *group) markCommand(assoc any) {
	if assoc == nil {
		return
	}
	if g.recent[0].assoc != assoc {
		g.recent[1] = g.recent[0]
		g.recent[0].assoc = assoc
	}
	g.recent[0].round = g.workRounds
}

// contended reports whether a queue of another controller than assoc had a command
// arrive in the group's last soloRounds rounds with work. Queues of one controller are
// one host's traffic, which the host orders itself (the Linux host spreads a job's
// commands over the queues of the CPUs it runs on).
func (g *group) contended(assoc any) bool {
	m := g.recent[0]
	if m.assoc == assoc {
		m = g.recent[1]
	}
	return m.assoc != nil && g.workRounds-m.round < soloRounds
}

// countBusy counts the commands a quiescing group still owes a response (see quiesce),
// when a round did work or nothing was counted yet.
func (g *group) countBusy(work bool) {
	if !g.quiescing {
		g.quiescing = true
		g.busy.Store(-1)
	}
	if !work && g.counted.Load() {
		return
	}
	n := 0
	for i := range g.conns {
		c := g.conns[i].Load()
		if c == nil || c.state != stateLive {
			continue
		}
		for _, x := range c.ctxs[:c.nctx] { // the rest are not allocated yet
			if x.owesResponse() {
				n++
			}
		}
	}
	g.busy.Store(int64(n))
	g.counted.Store(true)
}

// sleep arms the completion queue and waits for a completion, a wake-up or a timeout.
func (g *group) sleep() {
	g.sleeping.Store(true)
	if g.done.Load() != nil || g.attn.Load() != nil || g.kicked.Load() || (g.stopping.Load() && g.nconns.Load() == 0) ||
		(g.ring != nil && g.ring.Ready()) {
		g.sleeping.Store(false)
		return
	}
	// Arm only if the last arm has not fired yet: a sleep that a wake-up (not a
	// completion) ended left the queue armed, and arming costs a system call.
	if !g.armed {
		if err := g.cq.Arm(false); err != nil && !g.stopping.Load() {
			g.log.Error("arming the completion queue failed", "err", err)
		}
		g.armed = true
		g.stats.arms.Add(1)
	}
	// A completion that arrived before the arm raises no event: look once more.
	if n, _ := g.cq.Poll(g.wcs); n > 0 {
		g.sleeping.Store(false)
		g.stats.completions.Add(uint64(n))
		for i := range g.wcs[:n] {
			g.dispatch(&g.wcs[i])
		}
		g.post()
		if g.quiescing {
			g.countBusy(true) // a round with work: a Drain waiting on the count sees it
		}
		return
	}
	timeout := idleWakeEvery
	if len(g.draining) > 0 || g.quiesce.Load() != g.quiescing {
		timeout = drainCheck
	}
	g.stats.sleeps.Add(1)
	if ok, _ := g.cq.Wait(timeout); ok {
		g.armed = false // the event was the arm's: the next sleep arms again
		g.stats.wakeups.Add(1)
	}
	g.sleeping.Store(false)
	if len(g.draining) > 0 {
		g.housekeeping()
	}
}

// dispatch routes one completion to its connection.
func (g *group) dispatch(wc *rdmacm.Completion) {
	id := wc.ID
	kind := int(id & 0xFF)
	idx := int(id>>8) & 0xFFFF
	if kind == kindSRQRecv {
		g.dispatchSRQ(idx, wc)
		return
	}
	slot := int(id>>24) & 0xFFFF
	gen := uint32(id >> 40)
	if slot >= len(g.conns) {
		return
	}
	c := g.conns[slot].Load()
	if c == nil || c.gen != gen || c.hwDrained {
		return // a connection that is gone
	}
	switch kind {
	case kindRecv:
		c.onRecv(idx, wc)
	case kindRead:
		c.onRead(idx, wc)
	case kindSend:
		c.onSend(idx, wc)
	case kindProbe:
		c.onProbe(wc)
	case kindWrite:
		// Unsignaled: only error completions arrive, before the SEND of the same
		// chain, which accounts for the whole chain.
		if wc.Status != rdmacm.WCSuccess && wc.Status != rdmacm.WCFlushErr {
			c.fatal("RDMA WRITE failed", wc)
		}
	default:
		g.log.Error("completion with an unknown work request id", "wr_id", id, "status", wc.Status.String())
	}
}

// processDone takes the commands the core completed, oldest first.
func (g *group) processDone() {
	h := g.done.Swap(nil)
	var rev *rctx
	for h != nil {
		n := h.nextDone
		h.nextDone = rev
		rev = h
		h = n
	}
	for x := rev; x != nil; {
		n := x.nextDone
		x.nextDone = nil
		x.c.onComplete(x)
		x = n
	}
}

// dispatchSRQ routes a command that arrived in the shared receive queue's buffer i to the
// connection of its QP; a buffer whose connection is gone goes back to the queue.
func (g *group) dispatchSRQ(i int, wc *rdmacm.Completion) {
	if g.srq == nil || !g.srq.valid(i) {
		g.log.Error("completion of an unknown shared receive queue buffer", "wr_id", wc.ID, "status", wc.Status.String())
		return
	}
	c := g.qpConns[wc.QPNum]
	if c == nil && g.attn.Load() != nil {
		g.processAttn() // a connection published since the last round
		c = g.qpConns[wc.QPNum]
	}
	if c == nil || c.hwDrained {
		g.srq.repost(i)
		return
	}
	c.onRecv(i, wc)
}

// processAttn handles connection events: connections joining the shared receive queue,
// close requests and finished core queues.
func (g *group) processAttn() {
	h := g.attn.Swap(nil)
	for c := h; c != nil; {
		n := c.nextAttn
		c.nextAttn = nil
		c.attnQueued.Store(false)
		if !c.published.Load() {
			c = n
			continue // publish pushes it again
		}
		if c.cfg.srq && !c.srqJoined && c.state != stateDead {
			c.srqJoined = true
			g.qpConns[c.qpn] = c
		}
		if c.closeReq.Load() && c.state == stateLive {
			c.beginClose()
		}
		if c.coreClosed.Load() && !c.coreDone {
			c.coreDone = true
			c.maybeFinalize()
		}
		c = n
	}
}

// markDirty notes that c has staged work requests to post at the end of the round.
func (g *group) markDirty(c *conn) {
	if !c.dirty {
		c.dirty = true
		g.dirty = append(g.dirty, c)
	}
}

// post hands the round's work to the kernel: the asynchronous I/O queued by the round
// (one io_submit), the shared receive queue's buffers, then every connection's staged work
// requests.
func (g *group) post() {
	if g.ring != nil && g.ring.Pending() > 0 {
		g.ring.Flush()
	}
	if g.srq != nil {
		if err := g.srq.post(); err != nil {
			g.log.Error("reposting receive buffers to the shared receive queue failed", "err", err)
		}
	}
	g.flush()
}

// flush posts every connection's staged work requests: receives, then the send chain,
// in one call per connection.
func (g *group) flush() {
	for i := 0; i < len(g.dirty); i++ { // flushing may dirty more connections
		c := g.dirty[i]
		c.dirty = false
		c.flush()
	}
	clear(g.dirty)
	g.dirty = g.dirty[:0]
}

// housekeeping forces the drain of connections whose device did not flush their work
// requests in time.
func (g *group) housekeeping() {
	now := time.Now()
	for i := 0; i < len(g.draining); i++ {
		c := g.draining[i]
		if !c.hwDrained && now.After(c.drainDeadline) {
			c.forceDrain()
		}
	}
}

func (g *group) removeDraining(c *conn) {
	for i, d := range g.draining {
		if d == c {
			g.draining = append(g.draining[:i], g.draining[i+1:]...)
			return
		}
	}
}

// logLimit lets through a few log lines per second and counts the rest, so that churn
// (a host connecting and disconnecting in a loop) cannot flood the log. Safe for
// concurrent use.
type logLimit struct {
	mu         sync.Mutex
	second     int64
	n          int
	suppressed int
}

const logLinesPerSecond = 10

// allow reports whether a line may be logged now and, if so, how many were suppressed
// since the last one that was.
func (l *logLimit) allow() (ok bool, suppressed int) {
	now := time.Now().Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now != l.second {
		l.second, l.n = now, 0
	}
	if l.n >= logLinesPerSecond {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// fifo is an intrusive queue of request contexts (linked through rctx.next).
type fifo struct{ head, tail *rctx }

func (q *fifo) push(x *rctx) {
	x.next = nil
	if q.tail == nil {
		q.head = x
	} else {
		q.tail.next = x
	}
	q.tail = x
}

func (q *fifo) pop() *rctx {
	x := q.head
	if x != nil {
		q.head = x.next
		if q.head == nil {
			q.tail = nil
		}
		x.next = nil
	}
	return x
}

// unlink takes x out of the queue; prev is the context before it (nil: x is the head).
func (q *fifo) unlink(prev, x *rctx) {
	if prev == nil {
		q.head = x.next
	} else {
		prev.next = x.next
	}
	if q.tail == x {
		q.tail = prev
	}
	x.next = nil
}

// removeConn takes every context of c out of the queue and returns them as a list
// (linked through next).
func (q *fifo) removeConn(c *conn) *rctx {
	var keep fifo
	var out fifo
	for x := q.pop(); x != nil; x = q.pop() {
		if x.c == c {
			out.push(x)
		} else {
			keep.push(x)
		}
	}
	*q = keep
	return out.head
}

// threadCQ is the completion queue of a poll group in the target: an idle group sleeps
// with its OS thread blocked in poll(2) (rdmacm.CQ.WaitThread) rather than in the Go
// netpoller, so a command arriving at an idle group wakes the group's own thread and
// nothing else: no runtime timer per sleep, no netpoller hand-off to another thread.
//
// The blocking call keeps the goroutine's P, and the goroutine never parks, which the Go
// scheduler sees as one goroutine running for ever: after 10 ms without a pass through the
// scheduler its monitor thread (sysmon) preempts it (a signal, which interrupts the
// poll(2)), takes its P away and from then on polls at its fastest rate, each time reading
// the clock — a system call where the vDSO has no usable clock source (emulated guests).
// A yield (runtime.Gosched) before the sleep prevents that, but costs a wake-up of another
// thread that finds nothing to do and sleeps again: two futex calls and two context
// switches per sleep, one sleep per I/O at low queue depths. So the group yields only when
// yieldAfter has passed since its last yield (one clock read per sleep), and at once when
// the round handed work to a goroutine (a backend worker: it would otherwise wait in this
// P's queue until sysmon takes the P). A group that keeps finding work does not sleep, and
// its long verbs calls (Soft-RoCE sends a whole post inside the call) are system calls to
// the runtime: it makes the same check every busyYieldCheck busy rounds (maybeYield), or
// sysmon preempts it every 10 ms, takes its P during a post and wakes every 20 µs.
//
// Giving the P back for the sleep itself (the runtime's entersyscallblock, reachable by
// go:linkname, around a raw ppoll) costs more than sysmon's retakes: the hand-off wakes
// other threads around every sleep. Measured at 4k QD1 (null, same guest boot): 16
// system calls per I/O instead of 6.7 (futex 1.8 instead of 0.4, clock reads 8.5 instead
// of 2.3), 5.2 context switches instead of 2.3, and 0.76 of the IOPS.
type threadCQ struct {
	*rdmacm.CQ
	lastYield int64 // nanotime
	handoffs  uint64
}

// yieldAfter is how long a poll group goes between yields (see threadCQ): well under
// sysmon's 10 ms, because a busy group looks at the clock only every busyYieldCheck
// rounds, and under load a round is a post of several commands' packets, a millisecond
// or more in an emulated guest: with 4 ms, a look that comes just short of it can put
// the next past 10 ms, where sysmon preempts the group instead. Measured in two 6.1 guest
// boots (null, the Linux host, 3 and 4 repetitions, 4 ms and 2 ms alternated, 7 pairs):
// 2 ms had more IOPS in 7 of 7 pairs at 4k QD32 writes (medians 7,790 → 8,136 in the
// second boot), a lower p99.9 in 7 of 7 at 4k QD32 reads (33.1 → 20.1 ms) and a lower
// p99 in 5 of 7 for either (writes 10.7 → 9.2 ms); 4k QD1 unchanged. 1 ms was no better.
//
// With each group on its own OS thread (see run), measured again in 6.1 guest boots (null,
// the Linux host, 8 repetitions, the builds alternated under one name, medians of 4):
//   - 1 ms against 2 ms (one boot): no better, only different. 4k reads at QD1 1,649
//     against 2,120 IOPS and at QD32 5,446 against 6,046, but 4k QD32 writes 6,990
//     against 5,919, 4k reads at QD8 4,846 against 3,563 and at QD64 5,073 against 4,449,
//     128 KiB reads 417 against 433.
//   - A spare P (GOMAXPROCS one above the group count, so that sysmon leaves a group's P
//     alone during its system calls until 10 ms have passed, and no other goroutine waits
//     for a group's P) changed nothing beyond the noise in two boots: 128 KiB reads 422
//     against 332 IOPS in the first (the repetitions overlapping), 434 against 435 in the
//     second; 4k reads at QD1 1,755 against 2,070 and 1,914 against 1,968. Running the
//     builds in turn (5 s of 128 KiB reads each, three times each) did not separate them
//     either: with the spare P 55,173–56,421 KiB/s against 33,169–51,307 in one boot,
//     26,649–52,891 against 49,584–54,755 in another, and one build alone, six times in a
//     third boot, 34,496–54,671.
//   - The spare P and no clock-driven yields (a yield after a hand-off only) cost 4k reads
//     a third of their IOPS: QD1 1,238 against 1,927 (gonvmf's CPU per I/O 1,046 against
//     659 µs), QD32 3,951 against 6,443 (one boot, 5 repetitions). Without the yields,
//     sysmon's preemptions (above) take their place, at a higher price.
const yieldAfter = 2 * time.Millisecond

//go:linkname nanotime runtime.nanotime
func nanotime() int64

func (c *threadCQ) Wait(timeout time.Duration) (bool, error) {
	c.maybeYield()
	return c.CQ.WaitThread(timeout)
}

// yielder is implemented by completion queues whose group must pass through the Go
// scheduler now and then while it keeps finding work or spins (threadCQ).
type yielder interface {
	maybeYield()     // busy rounds: yield after yieldAfter or a hand-off
	yieldOnHandoff() // spinning: yield after a hand-off only (no clock read)
	yieldCPU()       // spinning, every spinYieldPolls polls: let the OS run others here
}

// spinYieldPolls is how many polls a spinning group makes between offers of its CPU to
// the other threads the kernel has runnable on it (yieldCPU). A spinning group is a
// thread that never blocks, and a thread woken on its CPU may wait for the end of its
// time slice (Linux's EEVDF scheduler, 6.6 and later, lets the running task finish its
// slice: 1.5 ms with 2 CPUs). Where the RDMA device is software those threads carry the
// I/O: Soft-RoCE in Linux 6.12 runs a queue pair's packets in a workqueue (6.1 inside the
// post's system call), the host's side of a loopback link included, so the next command
// of a host at a low queue depth waited for the spin that waited for it. Measured in one
// 6.12 guest boot (null, the Linux host, two copies of each build, order reversed every
// repetition): 4k reads at QD1 1,649 / 1,268 → 2,260 / 1,894 IOPS (p99 2.2 / 2.8 → 1.1 /
// 1.3 ms), at QD32 7,338 / 5,368 → 8,733 / 7,907, the Linux target 2,346 and 8,980; two
// more boots alike (QD1 1,765 / 1,722 → 2,122 / 1,935, and with a system call trace on
// 1,648 / 1,901 → 2,004 / 1,937). On 6.1 two such boots put it within their noise: 4k QD1
// medians 2,766 / 2,875 and 2,378 / 2,084 → 2,256 / 2,920 and 2,344 / 2,565, QD32 alike.
// A yield with no other thread runnable returns at once: one system call per
// spinYieldPolls polls of an idle group. Offering the CPU at the first empty poll as well
// (when the last round's posts have just queued kernel work, possibly on this CPU) moved
// nothing beyond the noise: two 6.12 boots disagreed (4k QD8 3,569 → 4,624 and 4,203 →
// 4,208 IOPS, QD1 1,459 → 1,633 and 1,586 → 1,418), and on 6.1 QD1 and QD8 were level.
// Offering it after every round that posted, busy or not, did not pay either (null, one
// boot per kernel, builds alternated over 4 repetitions; medians against this build): on
// 6.1 4k QD1 1.18, QD32 reads 1.03, writes 1.10, 128 KiB reads 1.08, each within the
// repetitions' spread; on 6.12 0.86, 1.03, 0.89 and 0.98.
// Groups under transport.busy_poll do not offer theirs: busy polling is the choice to
// give each group a CPU.
const spinYieldPolls = 16

// busyYieldCheck is how many busy rounds a group makes between looks at the clock for
// maybeYield.
const busyYieldCheck = 4

// maybeYield yields if yieldAfter has passed since the last yield, or a backend worker
// was handed work since then.
func (c *threadCQ) maybeYield() {
	now := nanotime()
	if h := backend.Handoffs(); now-c.lastYield >= int64(yieldAfter) || h != c.handoffs {
		c.lastYield, c.handoffs = now, h
		runtime.Gosched()
	}
}

// yieldOnHandoff yields if a backend worker was handed work since the last yield. It
// reads no clock: a spinning group calls it at every empty poll.
func (c *threadCQ) yieldOnHandoff() {
	if h := backend.Handoffs(); h != c.handoffs {
		c.handoffs = h
		runtime.Gosched()
	}
}

// yieldCPU gives the thread's CPU to the threads the kernel has runnable on it, if any
// (sched_yield(2); see spinYieldPolls). It does not pass through the Go scheduler.
func (c *threadCQ) yieldCPU() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
