package rdma

import (
	"errors"
	"time"
)

// The response watchdog.
//
// The send queue of a connection completes in order, and only a host can stop it: an
// RDMA WRITE or READ is served by the host's adapter, but a SEND needs a receive buffer
// the host's software posts, and without one the host answers RNR NAK — which with RNR
// retry 7 (what hosts ask for, and what the target accepts with) is retried forever, no
// error ever completing it. Everything posted after that SEND waits too: read buffers
// (held until their response's SEND completes), send queue slots, request contexts. A
// poll group therefore checks its connections every watchPeriod: a live connection whose
// send queue has made no progress for limits.response_timeout is torn down
// (errResponseTimeout), which flushes its work requests and gives its buffers back to the
// pool; so is, after pressureStall, one that holds more than its share of the pool while
// another connection waited within its own during the stall (errHoldingBuffers, see
// share.go).
//
// Unsignaled responses (conn.signalResponse) complete nothing: a host that holds them
// back and then goes quiet leaves nothing signaled outstanding for the checks to watch,
// and their buffers held. A check that finds a connection with unsignaled responses, no
// signaled work request outstanding and no response posted since the previous check
// posts a zero-length RDMA WRITE behind them, signaled (conn.probe): from a live host it
// completes within milliseconds and frees their buffers; held up behind them it is a
// stall like any other. A connection busy enough to post responses between checks
// signals one in every unsigMax, so it never needs one: the probe costs an idle queue
// one work request, and the I/O path nothing.
//
// Progress between two checks means that something completed and that every signaled
// work request outstanding at the first check completed before the second: the send queue
// completes in order, so a host that lets one of many stuck SENDs through now and then
// (its receive buffers trickled) still stalls — without the second part it reset the
// clock with every completion and kept its buffers as long as it liked. A host that
// answers at all answers within milliseconds, far below a period (at least 250 ms).

// Why the watchdog ends a connection.
var (
	errResponseTimeout = errors.New("rdma: responses made no progress within limits.response_timeout (the host posts no receive buffers?)")
	errHoldingBuffers  = errors.New("rdma: holding more than its share of the buffer pool with responses making no progress while other queues wait")
)

// pressureStall is how long a connection over its share of the pool may go without
// response progress while another connection waits within its share (share.go), for a
// response timeout of d.
func pressureStall(d time.Duration) time.Duration { return min(d/2, 2*time.Second) }

// watchPeriod is how often a poll group checks its connections' progress for a response
// timeout of d: a quarter of it, at most a second. A stall is acted on between d and
// d + watchPeriod after its last progress.
func watchPeriod(d time.Duration) time.Duration { return min(d/4, time.Second) }

// respWatch is a connection's progress record (owned by its poll group).
type respWatch struct {
	done  uint64    // signaled send queue completions handled (RDMA READs, SENDs, probes)
	seen  uint64    // done at the last check
	mark  uint64    // done + signaled work requests outstanding at the last check
	resp  uint64    // conn.respSeq at the last check
	since time.Time // when a check first found no progress with work outstanding; zero: progressing
	// needy is pool.needyEvents when the stall was first seen: a later count means a
	// connection waited within its share during the stall.
	needy uint64
}

// stall is what the watchdog decides for a connection whose responses made no progress
// since w.since (now): nil to wait, errResponseTimeout after timeout, errHoldingBuffers
// after pressureStall if it holds more than its share (over) and another connection
// waited within its own at some time during the stall (needyEvents moved since it began,
// or one waits now: needyNow). At some time, not at this check: the first borrowers torn
// down free enough for the waiter, which then no longer waits, while the others stalled
// beside them keep the pool, and the host's retried SENDs keep the fabric and CPUs busy.
func (w *respWatch) stall(now time.Time, timeout time.Duration, needyEvents uint64, needyNow, over bool) error {
	stalled := now.Sub(w.since)
	switch {
	case stalled >= timeout:
		return errResponseTimeout
	case stalled >= pressureStall(timeout) && over && (needyNow || needyEvents != w.needy):
		return errHoldingBuffers
	}
	return nil
}

// startWatch starts the group's periodic check (a no-op without a response timeout).
func (g *group) startWatch() {
	d := g.cfg.respTimeout
	if d <= 0 {
		return
	}
	p := watchPeriod(d)
	g.watchTimer = time.AfterFunc(p, func() {
		g.watchDue.Store(true)
		if g.sleeping.Load() {
			g.cq.Wake()
		}
		if !g.stopping.Load() {
			g.watchTimer.Reset(p)
		}
	})
}

// watchdog checks every live connection of the group for stalled responses.
func (g *group) watchdog(now time.Time) {
	ev, needyNow := g.pool.needyEvents.Load(), g.pool.needy.Load() > 0
	for i := range g.conns {
		c := g.conns[i].Load()
		if c == nil || c.state != stateLive {
			continue
		}
		c.checkProgress(now, g.cfg.respTimeout, ev, needyNow)
	}
}

// checkProgress tears c down if its send queue has had work outstanding and made no
// progress (see above) at any check for timeout, or for pressureStall while it holds
// more than its share of the pool and another connection waited within its own during
// the stall (respWatch.stall; ev is pool.needyEvents now, needyNow whether a connection
// waits now).
func (c *conn) checkProgress(now time.Time, timeout time.Duration, ev uint64, needyNow bool) {
	w := &c.watch
	quiet := c.respSeq == w.resp
	w.resp = c.respSeq
	if quiet && c.unsig.len() > 0 && c.sigOut == 0 && c.sqUsed < c.cfg.sqSize {
		c.probe()
	}
	outstanding := c.sigOut > 0 || c.sendWait.head != nil
	progress := !outstanding || w.done != w.seen && w.done >= w.mark
	w.seen, w.mark = w.done, w.done+uint64(c.sigOut)
	if progress {
		w.since = time.Time{}
		return
	}
	if w.since.IsZero() {
		w.since, w.needy = now, ev
		return
	}
	reason := w.stall(now, timeout, ev, needyNow, c.share.held > c.pool.quotaPages())
	if reason == nil {
		return
	}
	msg := "responses made no progress: disconnecting the queue and freeing its buffers"
	if reason == errHoldingBuffers {
		c.g.m.shareReclaims.Add(1)
		msg = "responses made no progress while the queue holds more than its share of the buffer pool and others waited: " +
			"disconnecting the queue and freeing its buffers"
	} else {
		c.g.m.responseTimeouts.Add(1)
	}
	if ok, n := c.g.refusals.Allow("response-timeout " + c.peer.String()); ok {
		c.log.Warn(msg, "cntlid", c.q.ControllerID(), "stalled", now.Sub(w.since).Round(time.Millisecond),
			"response_timeout", timeout, "signaled_outstanding", c.sigOut, "requests", c.busyContexts(),
			"pool_pages_held", c.share.held, "pool_quota_pages", c.pool.quotaPages(), "suppressed", n)
	}
	c.requestCloseLocal(reason)
}
