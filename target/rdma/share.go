package rdma

import "github.com/gonvmf/gonvmf/target"

// Fair shares of the buffer pool.
//
// One pool serves every connection of a device. Without limits a single host can take
// all of it — a host that sends reads and never posts receive buffers keeps each read's
// buffer until the response SEND completes, which under RNR retry 7 is never — and every
// other host's commands then wait forever. So every I/O connection has a share, and the
// waiting room is not one FIFO:
//
//   - quota: a live I/O connection may hold up to (pool − admin reserve − headroom −
//     closed) / (live I/O connections on the device) pages, at least one largest buffer,
//     whatever the others do. Its requests within that share are served before anyone's
//     beyond it. closed is what I/O connections whose queue pairs are gone still hold:
//     the buffers of commands stuck in a backend, which the core gave up waiting for
//     (doc.go, Faults); each comes back when its command completes. A closing connection
//     stays a sharer, holding its buffers against its own share, until its queue pair
//     goes (its flushed work requests give back all but those). So the live
//     connections' shares add up to no more than what they can have: a host whose
//     backend hangs and that reconnects again and again cannot leave the others, within
//     their shares, with an empty pool, nor keep a live queue that takes what the stuck
//     ones left beyond its fair part of it from the watchdog's reclaim. The quota is
//     recomputed when a connection connects or its queue pair goes, and when a stuck
//     command's buffer comes back; never on a live connection's I/O.
//   - headroom: the last eighth of the pool serves only connections that hold little
//     (at most two largest buffers: smallGrant), so one that arrives or wakes up later —
//     or a queue's Connect — finds buffers at once, whatever the others hold.
//   - borrowing: beyond its quota a connection is served only while no connection waits
//     within its share (anywhere on the device), and never from the headroom.
//   - reclaim under pressure: a connection holding more than its quota whose responses
//     have made no progress for a couple of seconds, during which another waited within
//     its share, is torn down (watchdog.go). Borrowed buffers come back in microseconds from a host
//     that reads its responses; a host that does not must not keep the others waiting
//     until limits.response_timeout.
//   - waiting: each connection's waiting requests form its own FIFO; a poll group serves
//     the connections with waiters round robin, one buffer each per round, so a large
//     request (or a greedy connection) never holds up other connections' requests. A
//     request within its share that other connections' requests have overtaken too often
//     (maxBypass rounds) stops the group's round robin until it is served, so large
//     buffers are not starved by a stream of small ones either — except for small
//     holders' requests when it cannot use the headroom itself: those take pages it
//     could not have had. It is owed this only while within its share: once the quota
//     has shrunk below what its connection holds and asks for (more queues connected),
//     it borrows like any request beyond its share. Within one connection requests are
//     served in arrival order.
//   - buffers held hostage: a response that does not complete (see watchdog.go) ends its
//     connection after limits.response_timeout, which returns its buffers.
//
// Admin queues are outside all this: they have their own FIFO, served first, and the
// pool's reserve, and each holds at most adminQuota pages (the most an admin queue's
// host needs at once: two largest buffers, or a page for each of its 32 entries). A
// request beyond it waits for its own connection's buffers to come back; requests of
// other admin queues behind it go on.

// connShare is a connection's part in the pool's division (owned by its poll group).
type connShare struct {
	held   int   // pool pages the connection's requests hold
	wait   fifo  // its requests waiting for a buffer, in arrival order
	queued bool  // in its group's round robin of connections with waiters
	next   *conn // the round robin's link
	// closed: an I/O connection out of the division (its queue pair gone), what it
	// holds — its late commands' buffers — counted in pool.closedHeld until they come
	// back.
	closed bool

	// An admin connection's requests wait in its group's admin queue instead: adminWait
	// counts them; adminPass is the group's pass (adminWaits.pass) that found it at its
	// quota, so that its later requests do not overtake the one held back.
	adminWait int
	adminPass uint32
}

// adminWaits are a poll group's admin requests waiting for a buffer.
type adminWaits struct {
	q     fifo   // in arrival order
	pass  uint32 // serveAdmin passes
	short bool   // the last pass stopped at a request the pool had no pages for
}

// adminQuotaPages is the most pool pages an admin connection may hold, for a pool whose
// largest buffer is 1<<maxOrder pages: a host's admin commands with data are few and
// small (Identify, Get Log Page, Set Features, authentication), two largest ones at a
// time or a 4 KiB one in each of its AdminQueueDepth entries is all it needs.
func adminQuotaPages(maxOrder int) int {
	return max(smallGrantBuffers<<maxOrder, target.AdminQueueDepth)
}

// groupShares is a poll group's part: the connections whose requests wait for buffers.
type groupShares struct {
	head, tail *conn // round robin of connections with waiters (head is served next)
	waiting    int   // I/O requests waiting, over all connections
	starved    *rctx // a request within its share overtaken too often: served before anything else
	starvedBig bool  // ... that cannot use the headroom: small holders' requests still may
	needy      bool  // the group's own copy of needyFlag (pool.needy counts it)
}

// maxBypass is how many rounds a request within its share may be overtaken by other
// connections' requests (its buffer did not fit while theirs did) before the group
// serves nothing else until it fits.
const maxBypass = 16

// headroomFraction: the headroom is 1/headroomFraction of the pool outside the reserve.
const headroomFraction = 8

// smallGrantBuffers: a connection holding no more than this many largest buffers may
// take pages from the headroom.
const smallGrantBuffers = 2

// quotaPages is the number of pages an I/O connection of the pool may hold without
// borrowing.
func (p *pool) quotaPages() int { return int(p.quota.Load()) }

// addIOConn records delta more live I/O connections sharing the pool and recomputes the
// quota.
func (p *pool) addIOConn(delta int) {
	p.divMu.Lock()
	p.ioConns += delta
	p.divide()
	p.divMu.Unlock()
}

// leaveDivision takes an I/O connection out of the division as its queue pair goes: it
// no longer counts as a sharer, and the held pages its late commands keep (latePages)
// count as closedHeld until they come back (closedFreed).
func (p *pool) leaveDivision(held int) {
	p.divMu.Lock()
	p.ioConns--
	p.closedHeld.Add(int64(held))
	p.divide()
	p.divMu.Unlock()
}

// closedFreed notes that a closed I/O connection gave n pages back.
func (p *pool) closedFreed(n int) {
	p.divMu.Lock()
	p.closedHeld.Add(int64(-n))
	p.divide()
	p.divMu.Unlock()
}

// divide recomputes the quota: the pool outside the reserve, the headroom and what
// closed connections hold, divided among the live I/O connections, at least one largest
// buffer. Callers hold divMu, so that recomputations are stored in the order they see
// the counts.
func (p *pool) divide() {
	n := p.ioConns
	usable := p.npages - p.reserve - p.headroom - int(p.closedHeld.Load())
	q := usable
	if n > 1 {
		q = usable / n
	}
	p.quota.Store(int64(max(q, 1<<p.maxOrder)))
}

// setNeedy records whether g has a request waiting within its connection's share.
func (p *pool) setNeedy(g *group, needy bool) {
	if g.shares.needy == needy {
		return
	}
	g.shares.needy = needy
	if needy {
		p.needy.Add(1)
	} else {
		p.needy.Add(-1)
	}
}

// within reports whether c may take a buffer of 1<<k pages inside its share.
func (c *conn) within(k int) bool {
	return c.share.held+1<<k <= c.pool.quotaPages()
}

// allocBuf takes a buffer of 1<<k pages for one of c's requests under the share rules
// (admin queues: within their quota, from anywhere, the reserve included).
func (c *conn) allocBuf(k int) (int, bool) {
	p := c.pool
	if c.admin {
		if !c.withinAdmin(k) {
			return 0, false
		}
		off, ok := p.alloc(k, true)
		if ok {
			c.share.held += 1 << k
		}
		return off, ok
	}
	keep := p.reserve
	switch {
	case c.small(k):
		// A small holder: the headroom is for it.
	case c.within(k):
		keep += p.headroom
	default:
		if p.needy.Load() > 0 {
			return 0, false // others wait for their share: no borrowing
		}
		keep += p.headroom
	}
	off, ok := p.allocKeep(k, keep)
	if ok {
		c.share.held += 1 << k
	}
	return off, ok
}

// latePages counts the pool pages of c's commands that the core still executes.
func (c *conn) latePages() int {
	n := 0
	for _, x := range c.ctxs[:c.nctx] {
		if x.hasBuf && x.state == stCore {
			n += 1 << x.bufOrder
		}
	}
	return n
}

// freeBuf gives x's buffer back to the pool.
func (c *conn) freeBuf(x *rctx) {
	x.hasBuf = false
	c.share.held -= 1 << x.bufOrder
	if c.share.closed {
		c.pool.closedFreed(1 << x.bufOrder)
	}
	c.pool.release(x.bufOff, x.bufOrder)
}

// withinAdmin reports whether admin connection c may take a buffer of 1<<k pages inside
// its quota. A single buffer always fits (the quota is at least two largest ones).
func (c *conn) withinAdmin(k int) bool {
	return c.share.held+1<<k <= c.pool.adminQuota
}

// small reports whether a buffer of 1<<k pages keeps c a small holder (share.go), which
// may take pages from the headroom.
func (c *conn) small(k int) bool {
	return c.share.held+1<<k <= smallGrantBuffers<<c.pool.maxOrder
}

// mayAllocNow reports whether a new request of c for 1<<k pages may take a buffer at once
// rather than join the waiting room: nothing of c's waits before it, no request of the
// group waits within its share (then buffers go round robin, so that the waiting one is
// overtaken a bounded number of times), and no starved request is owed the pages it
// would take.
func (c *conn) mayAllocNow(k int) bool {
	if c.admin {
		return c.share.adminWait == 0 && !c.g.admin.short
	}
	s := &c.g.shares
	return c.share.wait.head == nil && !s.needy && (s.starved == nil || s.starvedBig && c.small(k))
}

// waitBuf queues x until the pool has a buffer for it.
func (g *group) waitBuf(x *rctx) {
	g.stats.bufWaits.Add(1)
	c := x.c
	x.bypassed = 0
	if c.admin {
		g.admin.q.push(x)
		c.share.adminWait++
	} else {
		c.share.wait.push(x)
		g.shares.waiting++
		if !c.share.queued {
			g.shares.enqueue(c)
		}
	}
	g.pool.setWant(g, true)
}

func (s *groupShares) enqueue(c *conn) {
	c.share.queued = true
	c.share.next = nil
	if s.tail == nil {
		s.head = c
	} else {
		s.tail.share.next = c
	}
	s.tail = c
}

func (s *groupShares) dequeue() *conn {
	c := s.head
	if c != nil {
		s.head = c.share.next
		if s.head == nil {
			s.tail = nil
		}
		c.share.next = nil
		c.share.queued = false
	}
	return c
}

// serveBufWait gives freed buffers to waiting requests: admin ones first, then I/O
// connections round robin under the share rules. It reports whether any request got
// one, or the group stopped counting as needy with requests still waiting (see
// serveShares): either way another pass may serve more.
func (g *group) serveBufWait() bool {
	progress := g.serveAdmin()
	if !g.admin.short && g.serveShares() {
		progress = true
	}
	g.pool.setWant(g, g.admin.q.head != nil || g.shares.waiting > 0)
	return progress
}

// serveAdmin gives freed buffers to waiting admin requests in arrival order, and
// reports whether any left the queue. A connection at its quota keeps its requests
// waiting (its own buffers coming back serve them) without holding up other
// connections' requests behind them; a request the pool has no pages for ends the pass
// and holds up I/O requests too (admin.short).
func (g *group) serveAdmin() bool {
	a := &g.admin
	a.pass++
	a.short = false
	progress := false
	var prev *rctx // the last request passed over, still queued
	for x := a.q.head; x != nil; {
		c := x.c
		switch {
		case c.state != stateLive:
			a.q.unlink(prev, x)
			c.share.adminWait--
			c.failNoBuffer(x)
			progress = true
		case c.share.adminPass == a.pass || !c.withinAdmin(x.bufOrder):
			c.share.adminPass = a.pass // its later requests wait behind this one
			prev = x
		default:
			off, ok := c.allocBuf(x.bufOrder)
			if !ok {
				a.short = true
				return progress
			}
			a.q.unlink(prev, x)
			c.share.adminWait--
			x.bufOff, x.hasBuf = off, true
			c.haveBuf(x)
			progress = true
		}
		// Go on after prev: x is prev or out of the queue, and prev belongs to a
		// connection passed over, not to the one whose request was just taken out, so
		// nothing done for that one (its teardown: dropWaiters) unlinked prev.
		if prev == nil {
			x = a.q.head
		} else {
			x = prev.next
		}
	}
	return progress
}

// serveShares serves the I/O connections with waiting requests, one buffer each per
// round, until a round serves none (or a starved request does not fit). The group's
// needy flag from its last pass holds its own borrowers back during this one: when the
// pass clears it and requests still wait, it reports progress so that another follows.
func (g *group) serveShares() bool {
	s := &g.shares
	progress := false
	needy := false
	wasNeedy := s.needy
	if x := s.starved; x != nil {
		switch {
		case x.state != stWantBuf || x.c.share.wait.head != x:
			s.starved = nil // served, or failed with its connection
		case g.serveHead(x.c):
			s.starved = nil
			progress = true
		case !x.c.small(x.bufOrder) && !x.c.within(x.bufOrder):
			// Beyond its share now (the quota shrank): only a borrower, owed nothing.
			s.starved = nil
		case !x.c.small(x.bufOrder):
			// It cannot use the headroom: small holders, which only can, go on.
			s.starvedBig = true
		default:
			g.pool.setNeedy(g, true)
			return false
		}
	}
	for s.head != nil {
		served := 0
		var failed *rctx // the first request of the round that did not fit
		// One round: every connection queued at its start gets a turn.
		for n := s.count(); n > 0; n-- {
			c := s.dequeue()
			if c.share.wait.head == nil {
				continue // emptied by its teardown
			}
			x := c.share.wait.head
			if s.starved != nil && !c.small(x.bufOrder) {
				s.enqueue(c) // the starved request is owed these pages
				continue
			}
			if g.serveHead(c) {
				served++
			} else {
				if c.within(x.bufOrder) {
					needy = true
					if failed == nil {
						failed = x
					}
				}
			}
			if c.share.wait.head != nil {
				s.enqueue(c)
			}
		}
		if served == 0 {
			break
		}
		progress = true
		if failed != nil && s.starved == nil {
			if failed.bypassed++; failed.bypassed >= maxBypass {
				s.starved = failed
				s.starvedBig = !failed.c.small(failed.bufOrder)
				if !s.starvedBig {
					break
				}
			}
		}
	}
	g.pool.setNeedy(g, needy || s.starved != nil)
	if needy {
		g.pool.needyEvents.Add(1) // pressure, for the watchdog
	}
	if wasNeedy && !s.needy && s.head != nil {
		progress = true // its borrowers may go now
	}
	return progress
}

// count returns the number of connections in the round robin.
func (s *groupShares) count() int {
	n := 0
	for c := s.head; c != nil; c = c.share.next {
		n++
	}
	return n
}

// serveHead gives c's first waiting request a buffer if the share rules and the pool
// allow (or fails it if c is going away); it reports whether the request left the
// waiting room.
func (g *group) serveHead(c *conn) bool {
	x := c.share.wait.head
	if c.state != stateLive {
		c.share.wait.pop()
		g.shares.waiting--
		c.failNoBuffer(x)
		return true
	}
	off, ok := c.allocBuf(x.bufOrder)
	if !ok {
		return false
	}
	c.share.wait.pop()
	g.shares.waiting--
	x.bufOff, x.hasBuf = off, true
	c.haveBuf(x)
	return true
}

// dropWaiters fails every request of c waiting for a buffer (c is closing).
func (g *group) dropWaiters(c *conn) {
	for x := g.admin.q.removeConn(c); x != nil; {
		n := x.next
		x.next = nil
		c.share.adminWait--
		c.failNoBuffer(x)
		x = n
	}
	if g.admin.q.head == nil {
		g.admin.short = false
	}
	for x := c.share.wait.pop(); x != nil; x = c.share.wait.pop() {
		g.shares.waiting--
		if g.shares.starved == x {
			g.shares.starved = nil
		}
		c.failNoBuffer(x)
	}
	// c stays in the round robin until its turn comes (with nothing to serve).
	g.pool.setWant(g, g.admin.q.head != nil || g.shares.waiting > 0)
	if g.shares.waiting == 0 {
		g.pool.setNeedy(g, false)
	}
}
