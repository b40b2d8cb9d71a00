package rdma

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/target"
)

// TestEngineConnectQIDMismatch: a queue pair opened as the admin queue (qid 0 in the CM
// private data: admin priority, the admin buffer reserve) cannot Connect as an I/O queue,
// nor an I/O queue pair as an admin queue.
func TestEngineConnectQIDMismatch(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 8192})
	a, cntlid := e.adminConnect(0)
	// Opened as qid 0, connecting as I/O queue 1.
	fake := e.dial(0, 32)
	c := fake.h.connect(1, 0, cntlid, testSubNQN, testHostNQN)
	if c.Status.Code() != nvmeproto.StatusConnectInvalidParameters.Code() || !c.Status.DNR() {
		t.Fatalf("admin queue pair connecting as qid 1: status %v, want Connect Invalid Parameters with DNR", c.Status)
	}
	if off, iattr := nvmeproto.ParseConnectInvalidParamDW0(c.DW0); off != nvmeproto.ConnectSQEOffQID || iattr != nvmeproto.ConnectIAttrSQE {
		t.Errorf("IPO %d IATTR %d, want the SQE's QID (%d, %d)", off, iattr, nvmeproto.ConnectSQEOffQID, nvmeproto.ConnectIAttrSQE)
	}
	// Opened as qid 2, connecting as the admin queue of a new controller.
	io := e.dial(2, 32)
	c = io.h.connect(0, 0, nvmeproto.CNTLIDDynamic, testSubNQN, testHostNQN)
	if c.Status.Code() != nvmeproto.StatusConnectInvalidParameters.Code() {
		t.Fatalf("I/O queue pair connecting as qid 0: status %v, want Connect Invalid Parameters", c.Status)
	}
	// The matching Connects work.
	expectOK(t, "I/O connect as its own qid", io.h.connect(2, 0, cntlid, testSubNQN, testHostNQN))
	e.closeAll(io, fake, a)
}

// gatedBackend holds every read until its gate opens, through the executor's workers.
type gatedBackend struct {
	backend.Backend
	gate chan struct{}
	in   chan struct{} // a read reached the backend
}

func (b *gatedBackend) ReadBlocks(buf []byte, slba uint64) error {
	select {
	case b.in <- struct{}{}:
	default:
	}
	<-b.gate
	return b.Backend.ReadBlocks(buf, slba)
}

func (b *gatedBackend) Flush() error {
	select {
	case b.in <- struct{}{}:
	default:
	}
	<-b.gate
	return b.Backend.Flush()
}

// gatedMemory returns a backend opener whose memory namespace (one per target) is gb.
func gatedMemory() (gb *gatedBackend, open func(backend.Spec) (backend.Backend, error)) {
	gb = &gatedBackend{gate: make(chan struct{}), in: make(chan struct{}, 1)}
	return gb, func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil || s.Kind != backend.KindMemory {
			return b, err
		}
		gb.Backend = b
		return gb, nil
	}
}

func (b *gatedBackend) Info() backend.Info {
	i := backend.Describe(b.Backend)
	i.Inline = false
	return i
}

// TestEngineStuckBackendClose: a backend request that does not complete does not hold a
// disconnected queue forever: after the core's close timeout the queue pair is destroyed
// and its completion queue share given back, while its memory stays until the request
// completes — then everything is released.
func TestEngineStuckBackendClose(t *testing.T) {
	gb, open := gatedMemory()
	e := newEngine(t, engineOpts{icd: 8192, targetOpts: []target.Option{
		target.WithBackendOpener(open), target.WithQueueCloseTimeout(300 * time.Millisecond)}})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	cmd := io.h.begin()
	r := rw(nvmeproto.OpRead, 1, 0, 8)
	r.SGL = cmd.keyedAt(0, 4096)
	if err := cmd.submit(&r, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gb.in:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never reached the backend")
	}
	io.ep.Disconnect()
	io.c.requestClose(errHostDisconnect)
	deadline := time.Now().Add(10 * time.Second)
	for {
		io.ep.mu.Lock()
		destroyed := io.ep.dead
		io.ep.mu.Unlock()
		if destroyed && e.g.nconns.Load() == 1 {
			break
		}
		if time.Now().After(deadline) {
			close(gb.gate)
			t.Fatalf("a queue whose backend request is stuck was not released: QP destroyed %v, %d connections in the group",
				destroyed, e.g.nconns.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-io.dead:
		t.Fatal("the connection's memory was released while a backend request may still use it")
	default:
	}
	close(gb.gate)
	io.waitDead(t)
	e.closeAll(a)
}

// TestEngineStuckQueuesHoldHostLimit: a host that reconnects again and again to a hung
// backend, each association leaving an I/O queue pair whose read is stuck in the backend
// with its pool buffer, is refused (Controller Busy) once those queues fill
// limits.max_queues_per_host: the pool pages held for it stop growing there, and another
// host still connects. When the backend completes the reads every stuck connection is
// released, the pool is whole, and the host connects again.
func TestEngineStuckQueuesHoldHostLimit(t *testing.T) {
	gb, open := gatedMemory()
	e := newEngine(t, engineOpts{icd: 8192, limits: conf.Limits{MaxQueuesPerHost: 4}, targetOpts: []target.Option{
		target.WithBackendOpener(open), target.WithQueueCloseTimeout(100 * time.Millisecond)}})
	// hangUp tears fc down as the host's disconnect does.
	hangUp := func(fc *fconn) {
		fc.ep.Disconnect()
		fc.c.requestClose(errHostDisconnect)
	}
	var stuck []*fconn
	var refused nvmeproto.Completion
	rounds := 0
	for ; rounds < 10; rounds++ {
		a := e.dial(0, 32)
		c := a.h.connect(0, 0, nvmeproto.CNTLIDDynamic, testSubNQN, testHostNQN)
		if !c.Status.Success() {
			refused = c
			hangUp(a)
			a.waitDead(t)
			break
		}
		cntlid, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
		a.h.enable()
		io := e.dial(1, 16)
		if c := io.h.connect(1, 0, cntlid, testSubNQN, testHostNQN); !c.Status.Success() {
			refused = c
			hangUp(io)
			hangUp(a)
			io.waitDead(t)
			a.waitDead(t)
			break
		}
		cmd := io.h.begin()
		r := rw(nvmeproto.OpRead, 1, 0, 8)
		r.SGL = cmd.keyedAt(0, 4096)
		if err := cmd.submit(&r, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-gb.in:
		case <-time.After(10 * time.Second):
			t.Fatal("the read never reached the backend")
		}
		hangUp(io)
		hangUp(a)
		a.waitDead(t)
		// The core gave up waiting for the read: the queue pair is destroyed, its memory kept.
		deadline := time.Now().Add(10 * time.Second)
		for {
			io.ep.mu.Lock()
			destroyed := io.ep.dead
			io.ep.mu.Unlock()
			if destroyed {
				break
			}
			if time.Now().After(deadline) {
				close(gb.gate)
				t.Fatalf("round %d: the I/O queue pair with a stuck read was not destroyed", rounds)
			}
			time.Sleep(5 * time.Millisecond)
		}
		stuck = append(stuck, io)
	}
	if rounds != 3 {
		close(gb.gate)
		t.Fatalf("the host reconnected %d times, each leaving a queue pair with a stuck read, before a Connect was refused; "+
			"limits.max_queues_per_host is 4: want the I/O Connect of the fourth refused", rounds)
	}
	if refused.Status.Code() != nvmeproto.StatusConnectControllerBusy.Code() || refused.Status.DNR() {
		t.Errorf("Connect of a host holding 3 stuck queues: %v, want Controller Busy without DNR", refused.Status)
	}
	if free, total, _ := e.pool.stats(); total-free != 3 {
		t.Errorf("the stuck reads hold %d pool pages, want 3 (one 4 KiB read each)", total-free)
	}
	// Another host keeps its share.
	o := e.dial(0, 32)
	c := o.h.connect(0, 0, nvmeproto.CNTLIDDynamic, testSubNQN, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa")
	expectOK(t, "another host's admin Connect", c)

	close(gb.gate)
	for _, fc := range stuck {
		fc.waitDead(t) // released once its read completed
	}
	if free, total, _ := e.pool.stats(); free != total {
		t.Errorf("pool: %d of %d pages free after the stuck reads completed", free, total)
	}
	if n := e.tgt.StuckQueues(); n != 0 {
		t.Errorf("%d stuck queues after the reads completed, want 0", n)
	}
	if ctrls, queues := e.tgt.HostUsage(testHostNQN); ctrls != 0 || queues != 0 {
		t.Errorf("host usage after its stuck reads completed: %d controllers, %d queues; want 0, 0", ctrls, queues)
	}
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	c, _ = io.h.exec(rw(nvmeproto.OpRead, 1, 0, 8), nil, 4096)
	expectOK(t, "read after the stuck reads completed", c)
	e.closeAll(io, a, o)
}

// TestEngineStuckQueuesLeaveTheShares: the pool buffers that commands stuck in a backend
// hold on closed queue pairs are out of the pool the live queues divide. A host whose
// backend hangs leaves two queue pairs holding 7 reads of 128 KiB each (448 of the 868
// divided pages); of two live queues, one flooding reads whose responses it never lets
// complete and one honest, the honest one gets buffers within its share: the flooding
// one holds more than its share of what is left, and is reclaimed.
func TestEngineStuckQueuesLeaveTheShares(t *testing.T) {
	gb, open := gatedMemory()
	e := newEngine(t, engineOpts{hostBytes: 64 * 128 << 10, respTO: 60 * time.Second, targetOpts: []target.Option{
		target.WithBackendOpener(open), target.WithQueueCloseTimeout(100 * time.Millisecond)}})
	p := e.pool // 4 MiB: 1024 pages, 32 reserved, 124 headroom, 868 divided; 128 KiB buffers are 32 pages
	gateOpen := false
	openGate := func() {
		if !gateOpen {
			gateOpen = true
			close(gb.gate)
		}
	}
	t.Cleanup(openGate) // before the engine's cleanup (last in, first out)
	hangUp := func(fc *fconn) {
		fc.ep.Disconnect()
		fc.c.requestClose(errHostDisconnect)
	}
	waitFree := func(want int, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if free, _, _ := p.stats(); free == want {
				return
			}
			if time.Now().After(deadline) {
				free, _, _ := p.stats()
				t.Fatalf("%s: %d pool pages free, want %d", what, free, want)
			}
		}
	}

	// The host with the hung backend: two connects, each leaving 7 reads stuck.
	const hungHost = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1"
	var stuck []*fconn
	for round := range 2 {
		a := e.dial(0, 32)
		c := a.h.connect(0, 0, nvmeproto.CNTLIDDynamic, testSubNQN, hungHost)
		expectOK(t, "the hung host's admin Connect", c)
		cntlid, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
		a.h.enable()
		io := e.dial(1, 16)
		expectOK(t, "the hung host's I/O Connect", io.h.connect(1, 0, cntlid, testSubNQN, hungHost))
		for i := range 7 {
			cmd := io.h.begin()
			r := rw(nvmeproto.OpRead, 1, uint64(i*256), 256)
			r.SGL = cmd.keyedAt(0, 128<<10)
			if err := cmd.submit(&r, nil); err != nil {
				t.Fatal(err)
			}
		}
		waitFree(p.npages-(round+1)*7*32, fmt.Sprintf("round %d: 7 reads of 128 KiB in the hung backend", round))
		hangUp(io)
		hangUp(a)
		a.waitDead(t)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			io.ep.mu.Lock()
			destroyed := io.ep.dead
			io.ep.mu.Unlock()
			if destroyed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the I/O queue pair with stuck reads was not destroyed", round)
			}
		}
		stuck = append(stuck, io)
	}
	if n := p.closedHeld.Load(); n != 2*7*32 {
		t.Errorf("closed queues hold %d pool pages by the count, want %d", n, 2*7*32)
	}

	// Another host, two live I/O queues: each may hold (868 − 448) / 2 pages.
	admin, cntlid := e.adminConnect(0)
	hostile := e.ioConnect(1, cntlid, 64)
	honest := e.ioConnect(2, cntlid, 32)
	divided := p.npages - p.reserve - p.headroom
	if q, want := p.quotaPages(), (divided-2*7*32)/2; q != want {
		t.Errorf("quota of the two live I/O queues: %d pages, want (%d − %d held by closed queues) / 2 = %d", q, divided, 2*7*32, want)
	}
	holdSends(hostile)
	var hdone atomic.Int32
	hwg := flood(t, hostile, 63, 256, &hdone)
	waitPoolBelow(t, p, p.reserve+2*p.headroom)
	time.Sleep(50 * time.Millisecond) // the flood's later reads wait for buffers
	// The honest queue's 6 reads of 128 KiB (192 pages) are within its share; its
	// responses wait until it has all 6 buffers (a host slow to post receive buffers), so
	// that they are held at once.
	holdSends(honest)
	start := time.Now()
	var odone atomic.Int32
	owg := flood(t, honest, 6, 256, &odone)
	select {
	case <-hostile.dead:
		t.Logf("the queue holding more than its share was torn down %v after the honest one began waiting", time.Since(start))
		waitFree(p.npages-2*7*32-6*32, "the honest queue's 6 reads hold their buffers")
	case <-time.After(15 * time.Second):
		free, _, _ := p.stats()
		t.Errorf("the honest queue's reads within its share waited 15 s (response timeout 60 s) with %d pool pages free "+
			"and the flooding queue not reclaimed (quota %d pages, closed queues hold %d)", free, p.quotaPages(), p.closedHeld.Load())
		hostile.ep.releaseHeld()
	}
	honest.ep.releaseHeld()
	owg.Wait()
	if n := odone.Load(); n != 6 {
		t.Errorf("%d of the honest queue's 6 reads completed", n)
	}
	if sr := e.g.m.shareReclaims.Load(); sr != 1 {
		t.Errorf("counted %d share reclaims, want 1", sr)
	}
	hostile.h.lost()
	hwg.Wait()
	hangUp(hostile)
	hostile.waitDead(t)

	// The backend completes: the stuck queues go, and their pages return to the shares.
	openGate()
	for _, fc := range stuck {
		fc.waitDead(t)
	}
	if n := p.closedHeld.Load(); n != 0 {
		t.Errorf("closed queues hold %d pool pages by the count after their reads completed, want 0", n)
	}
	if q := p.quotaPages(); q != divided {
		t.Errorf("quota of the one live I/O queue: %d pages, want all %d divided", q, divided)
	}
	e.closeAll(honest, admin)
}

// TestRDMALimits: connection requests beyond limits.max_queues_per_address are rejected
// with NO_RSC, and queue pairs that never send a Connect are torn down after
// limits.connect_timeout, which makes room again.
func TestRDMALimits(t *testing.T) {
	e := newRDMAEnvLimits(t, conf.Transport{}, conf.Limits{MaxQueuesPerAddress: 2, ConnectTimeout: time.Second})
	var links []*rdmaLink
	for i := range 2 {
		l, _, err := dialRDMA(t, e.addr, dialOpts{qid: 0})
		if err != nil {
			t.Fatalf("queue pair %d: %v", i, err)
		}
		links = append(links, l)
	}
	defer func() {
		for _, l := range links {
			l.close()
		}
	}()
	l, _, err := dialRDMA(t, e.addr, dialOpts{qid: 0})
	if err == nil {
		l.close()
		t.Fatal("a third queue pair from the address was accepted; limits.max_queues_per_address is 2")
	}
	var rj *rdmacm.RejectError
	if !errors.As(err, &rj) {
		t.Fatalf("dial: %v; want a reject", err)
	}
	var r nvmeproto.RDMAConnRej
	if err := r.Unmarshal(rj.PrivateData); err != nil || r.Status != nvmeproto.RDMARejectNoResources {
		t.Errorf("reject %v (%v), want NO_RSC", r.Status, err)
	}
	// Neither queue pair sends a Connect: both are gone after the 1 s connect timeout.
	e.waitConns(0, 15*time.Second)
	a, _ := e.adminConnect(0)
	expectOK(t, "identify after the idle queue pairs were torn down", func() nvmeproto.Completion {
		c, _ := a.exec(nvmeproto.Command{Opcode: nvmeproto.OpIdentify, CDW10: 1}, nil, 4096)
		return c
	}())
}

// TestEnginePollGroupNeverBlocksOnBackend: a namespace whose backend is stuck, with more
// commands waiting for it than any queue bound (three controllers' worth of Flushes,
// which always take the worker path), does not stop the poll group: another controller
// connects and is served, and so are reads of another namespace.
func TestEnginePollGroupNeverBlocksOnBackend(t *testing.T) {
	gb, open := gatedMemory()
	e := newEngine(t, engineOpts{qd: 16, ioQueues: 2, targetOpts: []target.Option{
		target.WithBackendOpener(open), target.WithExecutorWorkers(1)}})
	var conns []*fconn
	var flushes []*hostCmd
	for range 3 {
		a, cntlid := e.adminConnect(0)
		conns = append(conns, a)
		for qid := uint16(1); qid <= 2; qid++ {
			io := e.ioConnect(qid, cntlid, 16)
			conns = append(conns, io)
			for range 15 {
				cmd := io.h.begin()
				f := nvmeproto.Command{Opcode: nvmeproto.OpFlush, NSID: 1}
				if err := cmd.submit(&f, nil); err != nil {
					t.Fatal(err)
				}
				flushes = append(flushes, cmd)
			}
		}
	}
	// 90 Flushes on a backend that completes none.
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 16)
		c, _ := io.h.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
		expectOK(t, "read of another namespace", c)
		conns = append(conns, a, io)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(gb.gate)
		t.Fatal("the poll group is blocked behind a stuck backend: a new controller was not served")
	}
	close(gb.gate)
	for _, f := range flushes {
		c, ok := f.wait(30 * time.Second)
		if !ok {
			t.Fatal("a Flush did not complete once the backend did")
		}
		expectOK(t, "flush", c)
		f.release()
	}
	e.closeAll(conns...)
}

// TestRDMAResponseTimeout: a host that stops posting receive buffers holds the target's
// response SENDs under RNR retry, and with them the read buffers; the target tears the
// queue down after limits.response_timeout, the buffers return to the pool, and another
// host keeps being served meanwhile.
func TestRDMAResponseTimeout(t *testing.T) {
	e := newRDMAEnvLimits(t, conf.Transport{BufferPoolSize: 8 << 20}, conf.Limits{ResponseTimeout: 2 * time.Second})
	_, cntlid := e.adminConnect(0)
	other := e.ioConnect(1, cntlid, 32)
	l := e.dialHolder(2, cntlid, 128<<10, "hog")
	start := time.Now()
	submitReads(t, l.h, 31, 256)
	held := false
	for time.Since(start) < 30*time.Second {
		s := e.tr.Stats()
		if s.PoolFreeBytes < s.PoolTotalBytes-512<<10 {
			held = true
		}
		// The other host is served while the hog holds its buffers.
		c, _ := other.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
		expectOK(t, "the other host's read", c)
		if e.tr.Stats().Connections == 2 { // the hog's queue is gone
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	d := time.Since(start)
	if e.tr.Stats().Connections != 2 {
		t.Fatalf("the hog's queue is still up %v after its responses stalled (response timeout 2 s)", d)
	}
	if !held {
		t.Errorf("the hog never held pool buffers: the test did not exercise the stall")
	}
	t.Logf("hog's queue torn down %v after its reads", d)
	// Everything the hog held is back.
	l.close()
	e.expectPoolFree()
}

// TestRDMAQuietHostProbe: the watchdog's zero-length RDMA WRITE behind a quiet queue's
// unsignaled responses, on a real device. A host that reads a little and goes quiet gets
// the pages its unsignaled responses held back within a few watch periods and stays
// connected (the WRITE, with no address or key, completes at its adapter); a host that
// posts no receive buffers for those responses is torn down after the response timeout,
// where nothing signaled was outstanding for the watchdog to see before.
func TestRDMAQuietHostProbe(t *testing.T) {
	e := newRDMAEnvLimits(t, conf.Transport{}, conf.Limits{ResponseTimeout: 2 * time.Second})
	_, cntlid := e.adminConnect(0)
	quiet := e.ioConnect(1, cntlid, 32)
	for i := range 4 {
		c, _ := quiet.exec(rw(nvmeproto.OpRead, 2, uint64(i*8), 8), nil, 4096)
		expectOK(t, "4 KiB read", c)
	}
	if s := e.tr.Stats(); s.PoolFreeBytes == s.PoolTotalBytes {
		t.Fatalf("after four 4 KiB reads every pool page is free: their responses were signaled, the test needs them unsignaled")
	}
	// waitRetired waits until the pool is whole again: every unsignaled response retired.
	waitRetired := func(what string) {
		t.Helper()
		start := time.Now()
		for s := e.tr.Stats(); s.PoolFreeBytes != s.PoolTotalBytes; s = e.tr.Stats() {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s: unsignaled responses still hold %d bytes of the pool after %v",
					what, s.PoolTotalBytes-s.PoolFreeBytes, time.Since(start).Round(time.Millisecond))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: responses retired %v after the last read", what, time.Since(start).Round(time.Millisecond))
	}
	probes := func() (n uint64) {
		for _, g := range e.tr.GroupStats() {
			n += g.Probes
		}
		return n
	}
	waitRetired("a quiet host")
	if probes() == 0 {
		t.Error("the quiet host's pages came back without a probe")
	}
	c, _ := quiet.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
	expectOK(t, "a read after the quiet period", c)
	waitRetired("the quiet host's read after its quiet period")
	before := probes() // the quiet queue has nothing unsignaled left: later probes are the holder's
	l := e.dialHolder(2, cntlid, 64<<10, "holder")
	submitReads(t, l.h, 4, 8)
	start := time.Now()
	e.waitConns(2, 15*time.Second) // admin and the quiet queue
	t.Logf("the holder's queue torn down %v after its reads (response timeout 2 s)", time.Since(start).Round(time.Millisecond))
	if probes() == before {
		t.Error("the holder's queue was torn down without a probe: its responses were signaled, the test needs them unsignaled")
	}
	l.close()
	e.expectPoolFree()
}

// holder is a host queue that posts one receive buffer, for its Connect's response, and
// then none: the target's later response SENDs stay under RNR retry.
type holder struct {
	*rdmaLink
	h *hostQueue
}

// dialHolder connects I/O queue qid of controller cntlid as a holder with slot bytes of
// data per command; its link is closed at the end of the test (or before, by close).
func (e *rdmaEnv) dialHolder(qid, cntlid uint16, slot int, what string) holder {
	e.t.Helper()
	h := newHostQueue(e.t, 32, slot)
	l, _, err := dialRDMA(e.t, e.addr, dialOpts{qid: qid, depth: 32, icd: 8192, recvs: 1, noRepost: true})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(l.close)
	l.onResp = h.onResponse
	h.attach(l)
	expectOK(e.t, what+" connect", h.connect(qid, 0, cntlid, testSubNQN, testHostNQN))
	return holder{l, h}
}

// submitReads submits n reads of nlb blocks of the null namespace (NSID 2), the i-th at
// block i*nlb, without waiting for them.
func submitReads(t testing.TB, h *hostQueue, n, nlb int) {
	t.Helper()
	for i := range n {
		cmd := h.begin()
		r := rw(nvmeproto.OpRead, 2, uint64(i*nlb), nlb)
		r.SGL = cmd.keyedAt(0, nlb*512)
		if err := cmd.submit(&r, nil); err != nil {
			t.Fatal(err)
		}
	}
}
