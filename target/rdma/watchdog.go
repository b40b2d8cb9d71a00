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
// poll group therefore checks its connections every watchPeriod: a live connection with
// signaled work requests outstanding whose send queue has completed nothing for
// limits.response_timeout is torn down (errResponseTimeout), which flushes its work
// requests and gives its buffers back to the pool.

// errResponseTimeout ends a connection whose responses made no progress.
var errResponseTimeout = errors.New("rdma: responses made no progress within limits.response_timeout (the host posts no receive buffers?)")

// watchPeriod is how often a poll group checks its connections' progress for a response
// timeout of d: a quarter of it, at most a second. A stall is acted on between d and
// d + watchPeriod after its last progress.
func watchPeriod(d time.Duration) time.Duration { return min(d/4, time.Second) }

// respWatch is a connection's progress record (owned by its poll group).
type respWatch struct {
	done  uint64    // signaled send queue completions handled (RDMA READs and SENDs)
	seen  uint64    // done at the last check
	since time.Time // when a check first found no progress with work outstanding; zero: progressing
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
	for i := range g.conns {
		c := g.conns[i].Load()
		if c == nil || c.state != stateLive {
			continue
		}
		c.checkProgress(now, g.cfg.respTimeout)
	}
}

// checkProgress tears c down if its send queue has had work outstanding and completed
// nothing for timeout.
func (c *conn) checkProgress(now time.Time, timeout time.Duration) {
	w := &c.watch
	outstanding := c.sigOut > 0 || c.sendWait.head != nil
	if w.done != w.seen || !outstanding {
		w.seen = w.done
		w.since = time.Time{}
		return
	}
	if w.since.IsZero() {
		w.since = now
		return
	}
	if now.Sub(w.since) < timeout {
		return
	}
	if ok, n := c.g.refusals.Allow("response-timeout " + c.peer.String()); ok {
		c.log.Warn("responses made no progress: disconnecting the queue and freeing its buffers",
			"qid", c.cfg.qid, "cntlid", c.q.ControllerID(), "response_timeout", timeout,
			"signaled_outstanding", c.sigOut, "requests", c.busyContexts(), "pool_pages_held", c.share.held,
			"suppressed", n)
	}
	c.requestCloseLocal(errResponseTimeout)
}
