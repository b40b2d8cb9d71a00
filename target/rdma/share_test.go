package rdma

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// holdSends makes the fake host keep the target's response SENDs from completing (as a
// host that posts no receive buffers does, under RNR retry), while it still sees the
// responses: its command IDs free up and it sends more.
func holdSends(fc *fconn) {
	fc.ep.mu.Lock()
	fc.ep.holdSend = true
	fc.ep.mu.Unlock()
}

// waitHeld waits until the fake host holds n SEND completions back.
func waitHeld(t *testing.T, e *fakeEP, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		e.mu.Lock()
		h := len(e.held)
		e.mu.Unlock()
		if h >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host holds %d SEND completions, want %d", h, n)
		}
	}
}

// holdReads makes the fake host keep the target's RDMA READ completions until
// releaseRead delivers them one by one.
func holdReads(fc *fconn) {
	fc.ep.mu.Lock()
	fc.ep.holdReads = true
	fc.ep.mu.Unlock()
}

// flood sends n reads of nlb blocks of the null namespace on fc without waiting for
// them, from goroutines; done counts the completions.
func flood(t *testing.T, fc *fconn, n, nlb int, done *atomic.Int32) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := fc.h.begin()
			r := rw(nvmeproto.OpRead, 2, uint64(i*nlb), nlb)
			r.SGL = cmd.keyedAt(0, nlb*512)
			if err := cmd.submit(&r, nil); err != nil {
				cmd.release()
				return
			}
			if _, ok := cmd.wait(60 * time.Second); ok {
				done.Add(1)
			}
			cmd.release()
		}()
	}
	return &wg
}

// waitPoolBelow waits until the pool has fewer than pages free.
func waitPoolBelow(t *testing.T, p *pool, pages int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		free, _, _ := p.stats()
		if free < pages {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool still has %d pages free, want fewer than %d", free, pages)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostileNextToHonest floods hostile with 63 reads of 128 KiB of the null namespace whose
// responses never complete (twice a 4 MiB pool: it holds every buffer it gets), waits
// until they hold the pool, runs check, then times 100 reads of 4 KiB on honest (at
// most 5 s), lets the hostile host's responses complete and checks all 63 did.
func hostileNextToHonest(t *testing.T, e *engine, hostile, honest *fconn, check func()) {
	t.Helper()
	holdSends(hostile)
	var hdone atomic.Int32
	wg := flood(t, hostile, 63, 256, &hdone) // 63 × 32 pages
	waitPoolBelow(t, e.pool, e.pool.reserve+2*e.pool.headroom)
	time.Sleep(50 * time.Millisecond) // the flood's later reads wait for buffers
	check()
	start := time.Now()
	for i := range 100 {
		c, _ := honest.h.exec(rw(nvmeproto.OpRead, 2, uint64(i), 8), nil, 4096)
		expectOK(t, "honest read", c)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("100 reads of the honest host took %v next to the hostile one", d)
	}
	hostile.ep.releaseHeld()
	wg.Wait()
	if n := hdone.Load(); n != 63 {
		t.Errorf("%d of the hostile host's 63 reads completed once it let them", n)
	}
}

// TestEngineFairShare: a host that sends a flood of 128 KiB reads and never lets their
// responses complete (holding every buffer it gets) takes no more than the pool minus
// the headroom; another host's 4 KiB reads keep completing at once.
func TestEngineFairShare(t *testing.T) {
	e := newEngine(t, engineOpts{hostBytes: 64 * 128 << 10}) // 4 MiB pool: 1024 pages
	_, cntlid := e.adminConnect(0)
	hostile := e.ioConnect(1, cntlid, 64)
	honest := e.ioConnect(2, cntlid, 16)
	// What the hostile connection holds is its poll group's to change and read: look at it
	// from the group's goroutine, when the honest host's first response is posted.
	var held atomic.Int64
	held.Store(-1)
	hostileNextToHonest(t, e, hostile, honest, func() {
		deliver := honest.ep.onResp
		honest.ep.onResp = func(b []byte) {
			held.CompareAndSwap(-1, int64(hostile.c.share.held))
			deliver(b)
		}
	})
	if got, limit := held.Load(), e.pool.npages-e.pool.reserve-e.pool.headroom; got < 0 {
		t.Errorf("no response of the honest host was posted")
	} else if got > int64(limit) {
		t.Errorf("the hostile connection holds %d pages, more than pool − reserve − headroom = %d", got, limit)
	}
	e.closeAll(hostile, honest)
}

// TestEngineLargeDoesNotBlockSmall: a 128 KiB request that does not fit in what the pool
// has left does not hold up another connection's 4 KiB requests that do (a single FIFO
// would), and is itself served once the buffers come back, even while the small
// requests keep coming.
func TestEngineLargeDoesNotBlockSmall(t *testing.T) {
	// 64 pages: 32 for the admin reserve, 32 (one 128 KiB buffer) for I/O.
	e := newEngine(t, engineOpts{poolSize: 256 << 10, maxIO: 128 << 10})
	_, cntlid := e.adminConnect(0)
	holder := e.ioConnect(1, cntlid, 16)
	large := e.ioConnect(2, cntlid, 16)
	small := e.ioConnect(3, cntlid, 16)
	// The holder keeps 7 × 16 KiB = 28 pages: 4 pages of I/O buffer left.
	holdSends(holder)
	var hdone atomic.Int32
	hwg := flood(t, holder, 7, 32, &hdone)
	waitPoolBelow(t, e.pool, e.pool.reserve+5)
	var ldone atomic.Int32
	waits := e.g.stats.bufWaits.Load()
	lwg := flood(t, large, 1, 256, &ldone) // 32 pages: does not fit
	deadline := time.Now().Add(5 * time.Second)
	for e.g.stats.bufWaits.Load() == waits {
		if time.Now().After(deadline) {
			t.Fatal("the 128 KiB read did not wait for a buffer")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	c, _ := small.h.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
	expectOK(t, "small read next to a waiting large one", c)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a 4 KiB read took %v behind a 128 KiB one that does not fit", d)
	}
	// Small reads keep coming while the holder lets go, and their responses complete one
	// every millisecond, so they always hold pages and each freed page has a small read
	// waiting for it: the large read must get its 32 pages all the same.
	holdSends(small)
	stop := make(chan struct{})
	var swg sync.WaitGroup
	swg.Add(1)
	go func() {
		defer swg.Done()
		for {
			select {
			case <-stop:
				small.ep.releaseHeld()
				return
			case <-time.After(time.Millisecond):
				small.ep.deliverOne()
			}
		}
	}()
	for w := range 8 {
		swg.Add(1)
		go func() {
			defer swg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, _ := small.h.exec(rw(nvmeproto.OpRead, 2, uint64(w*1000+i), 8), nil, 4096)
				expectOK(t, "small read", c)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	holder.ep.releaseHeld()
	hwg.Wait()
	served := make(chan struct{})
	go func() { lwg.Wait(); close(served) }()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Errorf("the 128 KiB read was not served within 5 s while 4 KiB reads kept coming")
	}
	close(stop)
	swg.Wait()
	<-served
	if ldone.Load() != 1 {
		t.Errorf("the large read did not complete")
	}
	e.closeAll(holder, large, small)
}

// TestEngineResponseTimeout: a connection whose response SENDs never complete is torn
// down after the response timeout and its buffers return to the pool; another
// connection is not affected.
func TestEngineResponseTimeout(t *testing.T) {
	e := newEngine(t, engineOpts{respTO: 500 * time.Millisecond})
	_, cntlid := e.adminConnect(0)
	stuck := e.ioConnect(1, cntlid, 16)
	other := e.ioConnect(2, cntlid, 16)
	holdSends(stuck)
	var done atomic.Int32
	wg := flood(t, stuck, 8, 256, &done)
	start := time.Now()
	stuck.waitDead(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("torn down %v after its responses stalled; the response timeout is 500 ms", d)
	}
	if rt, sr := e.g.m.responseTimeouts.Load(), e.g.m.shareReclaims.Load(); rt != 1 || sr != 0 {
		t.Errorf("counted %d response timeouts and %d share reclaims, want 1, 0", rt, sr)
	}
	stuck.h.lost()
	wg.Wait()
	c, _ := other.h.exec(rw(nvmeproto.OpRead, 2, 0, 256), nil, 128<<10)
	expectOK(t, "the other connection's read", c)
	// Slow but moving responses are not a stall.
	holdSends(other)
	go func() {
		for range 12 {
			time.Sleep(100 * time.Millisecond)
			other.ep.deliverHeld(false)
		}
		other.ep.releaseHeld()
	}()
	for i := range 10 {
		c, _ := other.h.exec(rw(nvmeproto.OpRead, 2, uint64(i), 8), nil, 4096)
		expectOK(t, "read with slow responses", c)
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-other.dead:
		t.Fatal("a connection whose responses were slow but progressing was torn down")
	default:
	}
	e.closeAll(other)
}

// TestEngineResponseTrickle: a host that lets its stuck responses through one at a time,
// each within a watch period, makes no progress in the watchdog's sense: what was
// outstanding at one check is not done by the next, so the connection is torn down after
// the response timeout although a completion came in every period. The old watchdog
// took any completion for progress and never tore it down.
func TestEngineResponseTrickle(t *testing.T) {
	const respTO = 500 * time.Millisecond // watch period 125 ms
	e := newEngine(t, engineOpts{respTO: respTO})
	_, cntlid := e.adminConnect(0)
	stuck := e.ioConnect(1, cntlid, 32)
	holdSends(stuck)
	var done atomic.Int32
	wg := flood(t, stuck, 24, 256, &done) // 128 KiB reads: every response signaled
	waitHeld(t, stuck.ep, 24)
	start := time.Now()
	stop := make(chan struct{})
	var twg sync.WaitGroup
	twg.Add(1)
	go func() { // one completion every 100 ms: 2.4 s for all of them
		defer twg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				stuck.ep.deliverOne()
			}
		}
	}()
	select {
	case <-stuck.dead:
		if d := time.Since(start); d < respTO {
			t.Errorf("torn down %v after the trickle began, before the response timeout (%v)", d, respTO)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("a connection whose responses trickled through one per 100 ms was not torn down in 2 s (response timeout %v)", respTO)
	}
	close(stop)
	twg.Wait()
	if rt := e.g.m.responseTimeouts.Load(); rt != 1 {
		t.Errorf("counted %d response timeouts, want 1", rt)
	}
	stuck.h.lost()
	wg.Wait()
}

// TestEngineReclaimUnderPressure: a connection that borrowed most of the pool and whose
// responses stall is torn down within seconds once another connection keeps waiting
// within its share — long before the response timeout. Meanwhile the waiting connection
// still progresses through the headroom, two largest buffers at a time.
func TestEngineReclaimUnderPressure(t *testing.T) {
	e := newEngine(t, engineOpts{hostBytes: 64 * 128 << 10, respTO: 60 * time.Second}) // 1024 pages
	_, cntlid := e.adminConnect(0)
	hostile := e.ioConnect(1, cntlid, 64)
	honest := e.ioConnect(2, cntlid, 32)
	holdSends(hostile)
	var hdone atomic.Int32
	hwg := flood(t, hostile, 63, 256, &hdone)
	waitPoolBelow(t, e.pool, e.pool.reserve+2*e.pool.headroom)
	time.Sleep(50 * time.Millisecond)
	// The honest connection keeps 16 reads of 128 KiB in flight: more than the headroom
	// gives a small holder, well within its share.
	start := time.Now()
	rounds := 0
	for {
		var odone atomic.Int32
		flood(t, honest, 16, 256, &odone).Wait()
		if n := odone.Load(); n != 16 {
			t.Fatalf("%d of 16 reads within the honest connection's share completed", n)
		}
		rounds++
		select {
		case <-hostile.dead:
		default:
			if time.Since(start) < 20*time.Second {
				continue
			}
			t.Fatalf("the stalled borrower was not reclaimed within 20 s (response timeout 60 s)")
		}
		break
	}
	t.Logf("the hostile connection was torn down %v after the honest one began waiting (%d rounds of 16 reads)", time.Since(start), rounds)
	if rt, sr := e.g.m.responseTimeouts.Load(), e.g.m.shareReclaims.Load(); rt != 0 || sr != 1 {
		t.Errorf("counted %d response timeouts and %d share reclaims, want 0, 1", rt, sr)
	}
	hostile.h.lost()
	hwg.Wait()
	e.closeAll(honest)
}

// TestEngineStarvedRequestSparesSmallHolders: a request within its share that cannot
// fit, overtaken until it is owed the next buffers, holds up the requests that compete
// for the same pages — but not those of a small holder, served from the headroom the
// starved request could not use anyway. (Seen in the guest: a hostile host's queue within
// its share, starved behind a borrower that never gives back, stalled the Linux host's
// 4 KiB reads for seconds.)
func TestEngineStarvedRequestSparesSmallHolders(t *testing.T) {
	e := newEngine(t, engineOpts{hostBytes: 64 * 128 << 10}) // 1024 pages; no watchdog
	_, cntlid := e.adminConnect(0)
	borrower := e.ioConnect(1, cntlid, 64)
	within := e.ioConnect(2, cntlid, 64)
	honest := e.ioConnect(3, cntlid, 16)
	holdSends(borrower)
	holdSends(within)
	var bdone, wdone atomic.Int32
	bwg := flood(t, borrower, 63, 256, &bdone) // takes all but the headroom and the reserve
	waitPoolBelow(t, e.pool, e.pool.reserve+2*e.pool.headroom)
	time.Sleep(50 * time.Millisecond)
	wwg := flood(t, within, 20, 256, &wdone) // two buffers from the headroom, then waits within its share
	deadline := time.Now().Add(10 * time.Second)
	start := time.Now()
	for i := 0; time.Now().Before(deadline); i++ {
		c, _ := honest.h.exec(rw(nvmeproto.OpRead, 2, uint64(i), 8), nil, 4096)
		expectOK(t, "honest read", c)
		if i >= 300 {
			break
		}
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("300 reads of a small holder took %v next to a starved request", d)
	}
	borrower.ep.releaseHeld()
	within.ep.releaseHeld()
	bwg.Wait()
	wwg.Wait()
	e.closeAll(borrower, within, honest)
}

// TestWatchStall: the watchdog's verdict on a connection whose responses stall. Over its
// share, it is reclaimed after pressureStall if another connection waited within its own
// at any time during the stall — also when that one no longer waits, its need met by the
// first borrowers torn down (seen in the guest: the hog's queues reclaimed after those
// held on until the response timeout, their RNR-retried SENDs slowing the Linux host
// next to them) — but not for waits before the stall, nor within its share; everything
// after the response timeout.
func TestWatchStall(t *testing.T) {
	const timeout = 30 * time.Second
	t0 := time.Unix(1000, 0)
	w := &respWatch{since: t0, needy: 5}
	ps := pressureStall(timeout)
	for _, tc := range []struct {
		name     string
		after    time.Duration
		events   uint64
		needyNow bool
		over     bool
		want     error
	}{
		{"progressing recently, others waited", ps - time.Millisecond, 9, true, true, nil},
		{"over its share, a wait during the stall, none now", ps, 6, false, true, errHoldingBuffers},
		{"over its share, one waits now", ps, 5, true, true, errHoldingBuffers},
		{"over its share, waits only before the stall", ps, 5, false, true, nil},
		{"within its share, others waited", ps, 9, true, false, nil},
		{"within its share, response timeout", timeout, 5, false, false, errResponseTimeout},
		{"over its share, response timeout", timeout + time.Second, 9, true, true, errResponseTimeout},
	} {
		if got := w.stall(t0.Add(tc.after), timeout, tc.events, tc.needyNow, tc.over); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// shareRig drives a poll group's share engine directly, as the group's goroutine does
// (the group does not run): requests are writes whose data needs no RDMA READ (no
// descriptors), so a buffer is all they wait for, and after each event the group passes
// over its waiting room as its loop does after a kick, until a pass serves nothing.
type shareRig struct {
	p *pool
	g *group
}

func newShareRig(t *testing.T, poolBytes int) *shareRig {
	p := testPool(t, poolBytes, 128<<10)
	return &shareRig{p: p, g: newGroup(0, p, newFakeCQ(), groupConfig{cqeCap: 100}, testLogger(t))}
}

// conn adds a live I/O connection to the group and the pool's division.
func (r *shareRig) conn() *conn {
	r.p.addIOConn(1)
	return &conn{g: r.g, pool: r.p, state: stateLive}
}

// submit begins a request of c for a buffer of 1<<k pages as conn.start does: a buffer
// at once if the share rules allow, the waiting room otherwise.
func (r *shareRig) submit(c *conn, k int) *rctx {
	x := &rctx{c: c, bufOrder: k, req: target.Request{Dir: nvmeproto.DirHostToCtrl, Length: uint32(pageSize << k)}}
	if c.mayAllocNow(k) {
		if off, ok := c.allocBuf(k); ok {
			x.bufOff, x.hasBuf = off, true
			c.haveBuf(x)
			return x
		}
	}
	x.state = stWantBuf
	r.g.waitBuf(x)
	r.serve()
	return x
}

// done completes the requests (one batch of completions) and gives their buffers back.
func (r *shareRig) done(xs ...*rctx) {
	for _, x := range xs {
		x.c.unwire(x)
		x.c.freeBuf(x)
		x.state = stFree
	}
	r.serve()
}

func (r *shareRig) serve() {
	for r.g.serveBufWait() {
	}
}

// TestShareStarvedRequestAfterQuotaShrinks: a request marked starved (within its share,
// overtaken maxBypass times) whose connection's quota then shrinks below what it holds
// plus the request — more queues connect to the pool — can only borrow. It is served as
// soon as the pool has room beyond the headroom and no one waits within a share, and so
// are the requests behind it; the mark must not keep its group needy (which forbids
// borrowing device-wide, its own request's included) until the connection's holdings
// drain. They need not: its holdings may be unsignaled responses, which only a later
// completion of the same connection retires, and its later requests all wait behind the
// starved one.
func TestShareStarvedRequestAfterQuotaShrinks(t *testing.T) {
	r := newShareRig(t, 2<<20) // 512 pages: 32 reserve, 60 headroom, 420 to share
	p := r.p
	a, b, h := r.conn(), r.conn(), r.conn()
	if q := p.quotaPages(); q != 140 {
		t.Fatalf("quota with 3 connections: %d pages, want 140", q)
	}
	// h borrows 11 largest buffers while no one waits; a holds 16 of 16 KiB (64 pages,
	// what unsignaled responses may hold): 96 pages left, fewer than a largest buffer
	// within a share may leave (headroom and reserve: 92).
	var hx []*rctx
	for range 11 {
		hx = append(hx, r.submit(h, p.maxOrder))
	}
	for range 16 {
		r.submit(a, 2)
	}
	for i, x := range hx {
		if !x.hasBuf {
			t.Fatalf("h's buffer %d was not allocated", i)
		}
	}
	if a.share.held != 64 {
		t.Fatalf("a holds %d pages, want 64", a.share.held)
	}
	// a's largest buffer fits its share but not the pool: it waits, and b's 4 KiB
	// requests (a small holder's, from the headroom) overtake it until it is starved.
	x := r.submit(a, p.maxOrder)
	if x.hasBuf || !a.within(x.bufOrder) || a.small(x.bufOrder) {
		t.Fatalf("a's 128 KiB request: buffer %v, within its share %v, small %v; want it waiting, within, not small",
			x.hasBuf, a.within(x.bufOrder), a.small(x.bufOrder))
	}
	for i := range maxBypass {
		y := r.submit(b, 0)
		if !y.hasBuf {
			t.Fatalf("b's 4 KiB request %d was not served next to the waiting 128 KiB one", i)
		}
		r.done(y)
	}
	if r.g.shares.starved != x {
		t.Fatalf("a's request, overtaken %d times, is not marked starved", x.bypassed)
	}
	// Three more queues connect (the hog's): a's holdings and its request no longer fit
	// its share. Then h's requests complete, all in one batch of completions.
	r.conn()
	r.conn()
	r.conn()
	if q := p.quotaPages(); q != 70 || a.within(x.bufOrder) {
		t.Fatalf("quota with 6 connections: %d pages (a holds %d), want 70", q, a.share.held)
	}
	r.done(hx...)
	free, _, _ := p.stats()
	if !x.hasBuf {
		t.Fatalf("a's starved request still waits with %d of %d pages free and no one waiting within a share "+
			"(pool.needy %d, starved mark kept: %v)", free, p.npages, p.needy.Load(), r.g.shares.starved == x)
	}
	// What waits behind it in its group goes too: a's next request, and another
	// connection's request that cannot use the headroom (h's third largest buffer).
	ay := r.submit(a, 0)
	hy := []*rctx{r.submit(h, p.maxOrder), r.submit(h, p.maxOrder), r.submit(h, p.maxOrder)}
	if !ay.hasBuf || !hy[2].hasBuf {
		t.Errorf("after the starved request: a's next request served %v, h's third largest buffer %v", ay.hasBuf, hy[2].hasBuf)
	}
	if n := p.needy.Load(); n != 0 || r.g.shares.starved != nil {
		t.Errorf("pool.needy %d, starved mark %v with no one waiting", n, r.g.shares.starved != nil)
	}
}

// waitPoolFree waits until the pool has pages free.
func waitPoolFree(t *testing.T, p *pool, pages int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		free, _, _ := p.stats()
		if free >= pages {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the pool has %d pages free after 5 s, want %d", what, free, pages)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEngineQuietHostProbe: the responses of small reads are sent unsignaled and keep
// their buffers until a later completion. A host that reads a little and goes quiet gets
// them retired by the watchdog's zero-length RDMA WRITE (the pool has every page back
// within a few watch periods, the connection lives on); a host that holds those
// responses back (posts no receive buffers) and goes quiet is torn down after the
// response timeout. Before the probe the first kept its buffers until its next command
// and the second was never torn down: nothing signaled was outstanding to watch.
func TestEngineQuietHostProbe(t *testing.T) {
	const respTO = 500 * time.Millisecond // watch period 125 ms
	e := newEngine(t, engineOpts{respTO: respTO})
	_, cntlid := e.adminConnect(0)
	quiet := e.ioConnect(1, cntlid, 16)
	held := e.ioConnect(2, cntlid, 16)
	free, _, _ := e.pool.stats()
	for i := range 4 {
		c, _ := quiet.h.exec(rw(nvmeproto.OpRead, 2, uint64(i), 8), nil, 4096)
		expectOK(t, "4 KiB read", c)
	}
	// Their responses went unsignaled (a probe may already have retired some if the
	// reads were a watch period apart on a loaded machine).
	waitPoolFree(t, e.pool, free, "a host quiet after four 4 KiB reads")
	probes := quiet.ep.zeroWrites.Load()
	if probes < 1 {
		t.Errorf("the quiet host's pages came back without a zero-length RDMA WRITE: its responses were signaled, the test needs them unsignaled")
	}
	time.Sleep(4 * watchPeriod(respTO)) // nothing unsignaled left: no further probe
	if n := quiet.ep.zeroWrites.Load(); n != probes {
		t.Errorf("the quiet host's QP got %d zero-length RDMA WRITEs, %d before a quiet second with nothing unsignaled", n, probes)
	}
	c, _ := quiet.h.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
	expectOK(t, "a read after the quiet period", c)

	holdSends(held)
	start := time.Now()
	for i := range 4 {
		c, _ := held.h.exec(rw(nvmeproto.OpRead, 2, uint64(i), 8), nil, 4096)
		expectOK(t, "4 KiB read whose response is held back", c)
	}
	select {
	case <-held.dead:
		if d := time.Since(start); d < respTO {
			t.Errorf("torn down %v after its first read, before the response timeout (%v)", d, respTO)
		}
	case <-time.After(respTO + 10*watchPeriod(respTO)):
		t.Fatalf("a host holding back its unsignaled responses was not torn down %v after going quiet (response timeout %v)",
			time.Since(start).Round(time.Millisecond), respTO)
	}
	if rt := e.g.m.responseTimeouts.Load(); rt != 1 {
		t.Errorf("counted %d response timeouts, want 1", rt)
	}
	select {
	case <-quiet.dead:
		t.Error("the quiet host's connection was torn down")
	default:
	}
	e.closeAll(quiet)
}

// floodLogs sends n Get Log Page commands for size bytes of the SMART log (zero-filled
// past its 512 bytes) on admin queue fc without waiting for them, from goroutines; done
// counts the successful completions.
func floodLogs(t *testing.T, fc *fconn, n, size int, done *atomic.Int32) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := fc.h.begin()
			g := nvmeproto.GetLogPageCommand{LID: nvmeproto.LIDSMART, NSID: nvmeproto.NSIDAll, RAE: true}
			g.SetLength(uint64(size))
			var c nvmeproto.Command
			g.ToCommand(&c)
			c.SGL = cmd.keyedAt(0, size)
			if err := cmd.submit(&c, nil); err != nil {
				cmd.release()
				return
			}
			if cqe, ok := cmd.wait(60 * time.Second); ok && cqe.Status.Code() == nvmeproto.StatusSuccess.Code() {
				done.Add(1)
			}
			cmd.release()
		}()
	}
	return &wg
}

// TestEngineAdminQueueShare: a host whose admin queue sends Get Log Page after Get Log
// Page of the largest transfer and never lets their responses complete holds no more
// than an admin queue's quota of the pool; another host's reads keep completing, and
// the admin commands beyond the quota wait (none fails) until the host lets the
// responses complete.
func TestEngineAdminQueueShare(t *testing.T) {
	e := newEngine(t, engineOpts{hostBytes: 64 * 128 << 10}) // 1024 pages; no watchdog
	_, cntlid := e.adminConnect(0)
	honest := e.ioConnect(1, cntlid, 16)
	hostile, _ := e.adminConnect(0)
	holdSends(hostile)
	var hdone atomic.Int32
	waits := e.g.stats.bufWaits.Load()
	wg := floodLogs(t, hostile, 64, 128<<10, &hdone) // 64 × 32 pages: twice the pool
	for deadline := time.Now().Add(10 * time.Second); e.g.stats.bufWaits.Load() == waits; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the admin queue's Get Log Pages never waited for buffers")
		}
	}
	time.Sleep(50 * time.Millisecond) // the flood's later commands wait too
	// What the admin connection holds is its poll group's to read: look when the honest
	// host's first response is posted.
	var held atomic.Int64
	held.Store(-1)
	deliver := honest.ep.onResp
	honest.ep.onResp = func(b []byte) {
		held.CompareAndSwap(-1, int64(hostile.c.share.held))
		deliver(b)
	}
	start := time.Now()
	for i := range 100 {
		cmd := honest.h.begin()
		r := rw(nvmeproto.OpRead, 2, uint64(i), 8)
		r.SGL = cmd.keyedAt(0, 4096)
		if err := cmd.submit(&r, nil); err != nil {
			t.Fatal(err)
		}
		c, ok := cmd.wait(5 * time.Second)
		if !ok {
			free, _, _ := e.pool.stats()
			t.Fatalf("read %d of the honest host got no buffer in 5 s next to the admin queue (%d pool pages free)", i, free)
		}
		expectOK(t, "honest read", c)
		cmd.release()
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("100 reads of the honest host took %v next to the admin queue", d)
	}
	if got, limit := held.Load(), e.pool.adminQuota; got < 0 || got > int64(limit) {
		t.Errorf("the admin connection holds %d pages, want 0..%d (its quota)", got, limit)
	}
	hostile.ep.releaseHeld()
	wg.Wait()
	if n := hdone.Load(); n != 64 {
		t.Errorf("%d of the admin queue's 64 Get Log Pages succeeded once the host let them", n)
	}
	e.closeAll(hostile, honest)
}

// TestShareAdminQuota: an admin connection holds at most its quota of the pool; its
// request beyond it waits for the connection's own buffers, and its later requests wait
// behind it even where they would fit, while another admin connection's requests and an
// I/O connection's are served at once.
func TestShareAdminQuota(t *testing.T) {
	r := newShareRig(t, 2<<20) // 512 pages, largest buffer 32
	p := r.p
	if p.adminQuota != 64 {
		t.Fatalf("admin quota %d pages, want 64 (two largest buffers)", p.adminQuota)
	}
	admin := func() *conn { return &conn{g: r.g, pool: p, state: stateLive, admin: true} }
	a, b, io := admin(), admin(), r.conn()
	big := p.maxOrder
	a1, a2 := r.submit(a, big), r.submit(a, big)
	a3 := r.submit(a, big) // beyond the quota
	a4 := r.submit(a, 0)   // would fit in the quota's pages, but arrived after a3
	if !a1.hasBuf || !a2.hasBuf || a3.hasBuf || a4.hasBuf || a.share.held != 64 {
		t.Fatalf("admin connection: buffers %v %v %v %v, holding %d pages; want the first two only, 64 pages",
			a1.hasBuf, a2.hasBuf, a3.hasBuf, a4.hasBuf, a.share.held)
	}
	if b1, i1 := r.submit(b, 0), r.submit(io, big); !b1.hasBuf || !i1.hasBuf {
		t.Fatalf("held up behind an admin connection at its quota: other admin connection %v, I/O connection %v",
			b1.hasBuf, i1.hasBuf)
	}
	r.done(a1)
	if !a3.hasBuf || a4.hasBuf {
		t.Fatalf("after one buffer came back: the request beyond the quota %v (want served), the one behind it %v (want waiting)",
			a3.hasBuf, a4.hasBuf)
	}
	r.done(a2)
	if !a4.hasBuf || a.share.held != 33 {
		t.Fatalf("after another: the last request %v, holding %d pages; want served, 33", a4.hasBuf, a.share.held)
	}
	if r.g.admin.q.head != nil || a.share.adminWait != 0 {
		t.Errorf("admin requests still queued: %d of the connection", a.share.adminWait)
	}
}
