package rdma

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/target"
)

// This file is a fake RDMA fabric for unit tests: a completion queue, queue pairs that
// execute RDMA READ/WRITE and SEND synchronously against registered memory (plain Go
// memory with made-up addresses), and a host whose memory has an rkey. It lets the
// engine (poll group, request state machine, buffer pool) run with the real target core
// on a machine without RDMA.

// fakeCQ is a completion queue.
type fakeCQ struct {
	mu     sync.Mutex
	q      []rdmacm.Completion
	head   int
	armed  bool
	notify chan struct{}
	wake   chan struct{}
	closed bool
	timer  *time.Timer  // Wait's
	arms   atomic.Int64 // Arm calls
}

func newFakeCQ() *fakeCQ {
	return &fakeCQ{q: make([]rdmacm.Completion, 0, 1<<16), notify: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
}

func (cq *fakeCQ) push(wc rdmacm.Completion) {
	cq.mu.Lock()
	cq.q = append(cq.q, wc)
	armed := cq.armed
	cq.armed = false
	cq.mu.Unlock()
	if armed {
		select {
		case cq.notify <- struct{}{}:
		default:
		}
	}
}

func (cq *fakeCQ) Poll(wc []rdmacm.Completion) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0, rdmacm.ErrClosed
	}
	n := copy(wc, cq.q[cq.head:])
	cq.head += n
	if cq.head == len(cq.q) {
		cq.q, cq.head = cq.q[:0], 0
	}
	return n, nil
}

func (cq *fakeCQ) Arm(bool) error {
	cq.arms.Add(1)
	cq.mu.Lock()
	cq.armed = true
	cq.mu.Unlock()
	return nil
}

// Wait is called by the poll group's goroutine only; its timer is reused, so that
// sleeping allocates nothing (as with a real CQ).
func (cq *fakeCQ) Wait(timeout time.Duration) (bool, error) {
	if cq.timer == nil {
		cq.timer = time.NewTimer(timeout)
	} else {
		cq.timer.Reset(timeout)
	}
	defer cq.timer.Stop()
	select {
	case <-cq.notify:
		return true, nil
	case <-cq.wake:
		return false, nil
	case <-cq.timer.C:
		return false, nil
	}
}

func (cq *fakeCQ) Wake() {
	select {
	case cq.wake <- struct{}{}:
	default:
	}
}

func (cq *fakeCQ) close() {
	cq.mu.Lock()
	cq.closed = true
	cq.mu.Unlock()
	cq.Wake()
}

// fakeFabric translates local addresses of registered regions.
type fakeFabric struct {
	mu      sync.Mutex
	regions []*region
	next    uint64
}

func newFakeFabric() *fakeFabric { return &fakeFabric{next: 0x1000_0000_0000} }

// newRegion returns n bytes of 4 KiB aligned memory with a fresh address range.
func (f *fakeFabric) newRegion(n int) region {
	b := make([]byte, n+pageSize)
	off := 0
	if a := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (pageSize - 1)); a != 0 {
		off = pageSize - a
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := &region{mem: b[off : off+n : off+n], base: f.next, lkey: uint32(len(f.regions) + 1)}
	f.next += uint64(n) + 1<<32
	f.regions = append(f.regions, r)
	return *r
}

// local returns the memory an SGE describes, or nil.
func (f *fakeFabric) local(s rdmacm.SGE) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.regions {
		if s.LKey == r.lkey && s.Addr >= r.base && s.Addr+uint64(s.Length) <= r.base+uint64(len(r.mem)) {
			off := s.Addr - r.base
			return r.mem[off : off+uint64(s.Length)]
		}
	}
	return nil
}

// fakeEP is a connection's queue pair with the host at its other end.
type fakeEP struct {
	f  *fakeFabric
	cq *fakeCQ

	qpn uint32   // its QP number (Completion.QPNum of its receives)
	srq *fakeSRQ // its receives come from there (then recvs stays empty)

	mu        sync.Mutex
	recvs     []rdmacm.RecvWR // posted, in order (a window of recvArr)
	recvArr   []rdmacm.RecvWR
	err       bool
	dead      bool
	reads     atomic.Int64 // RDMA READs executed
	holdReads bool         // keep READ completions until releaseReads
	heldReads []rdmacm.Completion
	maxHeldRd int // most READs outstanding at once while held

	// host side
	hostMem  []byte
	hostBase uint64
	hostKey  uint32
	onResp   func([]byte)
	holdSend bool // queue SEND completions instead of delivering them
	held     []rdmacm.Completion
	// sendsHeld: a SEND, signaled or not, was posted while holdSend and not delivered
	// since; a zero-length RDMA WRITE's completion then waits in held behind it.
	sendsHeld  bool
	zeroWrites atomic.Int32 // zero-length RDMA WRITEs posted
	noFlush    bool         // Disconnect does not flush (a device that never completes flushed requests)
	// invalidated lists the keys of the SEND with Invalidate responses, in order.
	invalidated []uint32
}

const fakeHostKey = 0x5151

var fakeQPNs atomic.Uint32

func newFakeEP(f *fakeFabric, cq *fakeCQ, hostBytes int) *fakeEP {
	arr := make([]rdmacm.RecvWR, 4096)
	return &fakeEP{f: f, cq: cq, hostMem: make([]byte, hostBytes), hostBase: 0x7f00_0000_0000, hostKey: fakeHostKey,
		recvs: arr[:0], recvArr: arr, qpn: 100 + fakeQPNs.Add(1)}
}

func (e *fakeEP) PostRecv(wrs []rdmacm.RecvWR) error {
	if e.srq != nil && len(wrs) > 0 {
		return errors.New("fake: the QP's receives are the shared receive queue's")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return rdmacm.ErrClosed
	}
	for i := range wrs {
		if e.err {
			if !e.noFlush {
				e.cq.push(rdmacm.Completion{ID: wrs[i].ID, Status: rdmacm.WCFlushErr})
			}
			continue
		}
		if len(e.recvs) == cap(e.recvs) && len(e.recvs) < len(e.recvArr) {
			// hostSend consumed the front: slide the window back instead of growing it
			e.recvs = e.recvArr[:copy(e.recvArr, e.recvs)]
		}
		e.recvs = append(e.recvs, wrs[i])
	}
	return nil
}

func (e *fakeEP) host(addr uint64, n uint32, key uint32) []byte {
	if key != e.hostKey || addr < e.hostBase || addr+uint64(n) > e.hostBase+uint64(len(e.hostMem)) {
		return nil
	}
	off := addr - e.hostBase
	return e.hostMem[off : off+uint64(n)]
}

// fail moves the QP to the error state after wr failed with st: later requests flush.
func (e *fakeEP) fail(wr *rdmacm.SendWR, st rdmacm.WCStatus) {
	e.err = true
	e.cq.push(rdmacm.Completion{ID: wr.ID, Status: st, QPNum: 1})
	for i := range e.recvs {
		e.cq.push(rdmacm.Completion{ID: e.recvs[i].ID, Status: rdmacm.WCFlushErr})
	}
	e.recvs = e.recvs[:0]
}

// Post posts receives, then sends, as rdmacm.QP.Post does.
func (e *fakeEP) Post(recvs []rdmacm.RecvWR, sends []rdmacm.SendWR) error {
	if err := e.PostRecv(recvs); err != nil {
		return err
	}
	return e.PostSend(sends)
}

func (e *fakeEP) PostSend(wrs []rdmacm.SendWR) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return rdmacm.ErrClosed
	}
	for i := range wrs {
		w := &wrs[i]
		if e.err {
			if !e.noFlush {
				e.cq.push(rdmacm.Completion{ID: w.ID, Status: rdmacm.WCFlushErr})
			}
			continue
		}
		var op rdmacm.WCOpcode
		if w.Op == rdmacm.OpWrite && w.NumSGE == 0 {
			// A zero-length RDMA WRITE names no memory (IBTA C9-88); it completes
			// in order, behind the SENDs held back.
			e.zeroWrites.Add(1)
			if w.Flags&rdmacm.FlagSignaled != 0 {
				wc := rdmacm.Completion{ID: w.ID, Opcode: rdmacm.WCWrite}
				if e.holdSend && e.sendsHeld {
					e.held = append(e.held, wc)
				} else {
					e.cq.push(wc)
				}
			}
			continue
		}
		if w.NumSGE != 1 {
			e.fail(w, rdmacm.WCLocLenErr)
			continue
		}
		loc := e.f.local(w.SGL[0])
		if loc == nil {
			e.fail(w, rdmacm.WCLocProtErr)
			continue
		}
		switch w.Op {
		case rdmacm.OpRead:
			src := e.host(w.RemoteAddr, w.SGL[0].Length, w.RKey)
			if src == nil {
				e.fail(w, rdmacm.WCRemAccessErr)
				continue
			}
			copy(loc, src)
			e.reads.Add(1)
			op = rdmacm.WCRead
		case rdmacm.OpWrite:
			dst := e.host(w.RemoteAddr, w.SGL[0].Length, w.RKey)
			if dst == nil {
				e.fail(w, rdmacm.WCRemAccessErr)
				continue
			}
			copy(dst, loc)
			op = rdmacm.WCWrite
		case rdmacm.OpSend, rdmacm.OpSendInv:
			if w.Op == rdmacm.OpSendInv {
				e.invalidated = append(e.invalidated, w.Imm)
			}
			if e.onResp != nil {
				e.onResp(loc)
			}
			e.sendsHeld = e.holdSend
			op = rdmacm.WCSend
		default:
			e.fail(w, rdmacm.WCLocQPOpErr)
			continue
		}
		if w.Flags&rdmacm.FlagSignaled != 0 {
			wc := rdmacm.Completion{ID: w.ID, Opcode: op}
			if e.holdReads && w.Op == rdmacm.OpRead {
				e.heldReads = append(e.heldReads, wc)
				e.maxHeldRd = max(e.maxHeldRd, len(e.heldReads))
			} else if e.holdSend && op == rdmacm.WCSend {
				e.held = append(e.held, wc)
			} else {
				e.cq.push(wc)
			}
		}
	}
	return nil
}

// releaseHeld delivers the SEND completions held back and stops holding them.
func (e *fakeEP) releaseHeld() { e.deliverHeld(true) }

// deliverHeld delivers the held SEND completions, and with stopHolding holds no more.
func (e *fakeEP) deliverHeld(stopHolding bool) {
	e.mu.Lock()
	h := e.held
	e.held = nil
	e.sendsHeld = false // what was posted so far went through
	if stopHolding {
		e.holdSend = false
	}
	e.mu.Unlock()
	for _, wc := range h {
		e.cq.push(wc)
	}
}

// deliverOne delivers the oldest held SEND completion, if any.
func (e *fakeEP) deliverOne() {
	e.mu.Lock()
	if len(e.held) == 0 {
		e.mu.Unlock()
		return
	}
	wc := e.held[0]
	e.held = e.held[1:]
	if len(e.held) == 0 {
		e.sendsHeld = false
	}
	e.mu.Unlock()
	e.cq.push(wc)
}

// releaseReads delivers the oldest held READ completion; it reports whether there was one.
func (e *fakeEP) releaseRead() bool {
	e.mu.Lock()
	if len(e.heldReads) == 0 {
		e.mu.Unlock()
		return false
	}
	wc := e.heldReads[0]
	e.heldReads = e.heldReads[1:]
	e.mu.Unlock()
	e.cq.push(wc)
	return true
}

func (e *fakeEP) Disconnect() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err {
		return nil
	}
	e.err = true
	if !e.noFlush {
		for _, wc := range append(e.held, e.heldReads...) {
			wc.Status = rdmacm.WCFlushErr
			e.cq.push(wc)
		}
		e.held, e.heldReads = nil, nil
		for i := range e.recvs {
			e.cq.push(rdmacm.Completion{ID: e.recvs[i].ID, Status: rdmacm.WCFlushErr})
		}
	}
	e.recvs = e.recvs[:0]
	return nil
}

func (e *fakeEP) Destroy() error {
	e.mu.Lock()
	e.dead = true
	e.mu.Unlock()
	return nil
}

var errRNR = errors.New("fake: receiver not ready")

// fakeSRQ is a shared receive queue: buffers any fake QP on it takes in posting order.
type fakeSRQ struct {
	mu    sync.Mutex
	recvs []rdmacm.RecvWR
	head  int
	posts atomic.Int64 // PostRecv calls
}

func (s *fakeSRQ) PostRecv(wrs []rdmacm.RecvWR) error {
	s.posts.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head > 0 && len(s.recvs)+len(wrs) > cap(s.recvs) {
		s.recvs = s.recvs[:copy(s.recvs, s.recvs[s.head:])]
		s.head = 0
	}
	s.recvs = append(s.recvs, wrs...)
	return nil
}

func (s *fakeSRQ) take() (rdmacm.RecvWR, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == len(s.recvs) {
		return rdmacm.RecvWR{}, false
	}
	w := s.recvs[s.head]
	s.head++
	return w, true
}

// posted returns how many buffers the SRQ holds.
func (s *fakeSRQ) posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recvs) - s.head
}

// hostSend delivers a capsule into the target's next posted receive.
func (e *fakeEP) hostSend(capsule []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err || e.dead {
		return errors.New("fake: queue pair in error state")
	}
	var w rdmacm.RecvWR
	if e.srq != nil {
		var ok bool
		if w, ok = e.srq.take(); !ok {
			return errRNR
		}
	} else {
		if len(e.recvs) == 0 {
			return errRNR
		}
		w = e.recvs[0]
		e.recvs = e.recvs[1:]
	}
	rest := capsule
	for i := 0; i < int(w.NumSGE) && len(rest) > 0; i++ {
		b := e.f.local(w.SGL[i])
		n := copy(b, rest)
		rest = rest[n:]
	}
	if len(rest) > 0 {
		e.cq.push(rdmacm.Completion{ID: w.ID, Status: rdmacm.WCLocLenErr, QPNum: e.qpn})
		return nil
	}
	e.cq.push(rdmacm.Completion{ID: w.ID, Opcode: rdmacm.WCRecv, ByteLen: uint32(len(capsule)), QPNum: e.qpn})
	return nil
}

// fakeLink is a hostLink over a fakeEP.
type fakeLink struct{ ep *fakeEP }

func (l fakeLink) send(capsule []byte) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := l.ep.hostSend(capsule)
		if !errors.Is(err, errRNR) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Microsecond) // receiver not ready: retry, as RNR retry 7 does
	}
}

func (l fakeLink) memory() ([]byte, uint64, uint32) {
	return l.ep.hostMem, l.ep.hostBase, l.ep.hostKey
}

func (l fakeLink) close() { l.ep.Disconnect() }

// ---- engine harness ----

type engineOpts struct {
	poolSize  int
	maxIO     int
	busyPoll  bool
	spin      int
	icd       int // in-capsule data size (0: none)
	ird       int
	sqSize    int // 0: sqDepth(depth)
	maxMsg    int
	hostBytes int
	nss       []conf.Namespace
	respTO    time.Duration // limits.response_timeout of the poll group (0: no watchdog)
	qd        int           // transport.queue_depth (0: default)
	ioQueues  int           // transport.max_io_queues (0: default)
	window    int           // I/O queues' limits.max_queue_data_in_flight (0: no bound)
	noSendInv bool          // a device without SEND with Invalidate
	limits    conf.Limits   // the configuration's limits (zero fields: defaults)

	srq        int                    // > 0: I/O queues share a receive queue of at most this many buffers
	targetOpts []target.Option        // more options for target.New (a backend opener, ...)
	connLog    *slog.Logger           // the connections' logger (default: the test's)
	wrapEP     func(*fakeEP) endpoint // wraps each connection's queue pair (checks of the work requests)
}

type engine struct {
	t    testing.TB
	tgt  *target.Target
	port *target.Port
	f    *fakeFabric
	cq   *fakeCQ
	pool *pool
	g    *group
	srq  *fakeSRQ
	o    engineOpts
}

// The helpers shared with other packages' tests.
var (
	testLogger = testutil.Logger
	expectOK   = testutil.ExpectOK
)

func newEngine(t testing.TB, o engineOpts) *engine {
	t.Helper()
	if o.maxIO == 0 {
		o.maxIO = 128 << 10
	}
	if o.poolSize == 0 {
		o.poolSize = 4 << 20
	}
	if o.ird == 0 {
		o.ird = 4
	}
	if o.maxMsg == 0 {
		o.maxMsg = 8 << 20
	}
	if o.hostBytes == 0 {
		o.hostBytes = 64 * o.maxIO
	}
	if o.nss == nil {
		o.nss = []conf.Namespace{
			{NSID: 1, Backend: conf.BackendMemory, Size: 128 << 20},
			{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30},
		}
	}
	cfg := &conf.Config{
		Listeners:  []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: testSubNQN, AllowAnyHost: true, Namespaces: o.nss}},
		Transport: conf.Transport{MaxIOSize: o.maxIO, InCapsuleDataSize: o.icd, BufferPoolSize: conf.Size(o.poolSize),
			QueueDepth: o.qd, MaxIOQueues: o.ioQueues},
		Limits: o.limits,
	}
	log := testLogger(t)
	tgt, err := target.New(cfg, append([]target.Option{target.WithLogger(log)}, o.targetOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	port, err := tgt.AddPort(target.PortConfig{TrType: target.TrTypeRDMA, AdrFam: target.AdrFamIPv4, TrAddr: "10.99.0.1",
		TrSvcID: "4420", Advertise: true, Keyed: true, InCapsuleDataSize: tgt.TransportConfig().InCapsuleDataSize, MaxSGLDescriptors: target.MaxSGLDescriptors})
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{t: t, tgt: tgt, port: port, f: newFakeFabric(), cq: newFakeCQ(), o: o}
	e.pool, err = newPool(e.f.newRegion(o.poolSize), tgt.MaxTransferSize())
	if err != nil {
		t.Fatal(err)
	}
	e.g = newGroup(0, e.pool, e.cq, groupConfig{busyPoll: o.busyPoll, spin: o.spin, cqeCap: 1 << 20, respTimeout: o.respTO}, log)
	if o.srq > 0 {
		e.srq = &fakeSRQ{}
		e.g.srq = newSharedRecv(e.srq, tgt.TransportConfig().InCapsuleDataSize, o.srq, func(n int) (region, func() error, error) {
			return e.f.newRegion(n), func() error { return nil }, nil
		})
	}
	e.g.start()
	t.Cleanup(func() {
		tgt.Close()
		e.g.stop()
		select {
		case <-e.g.stopped:
		case <-time.After(10 * time.Second):
			t.Errorf("poll group did not stop")
		}
		e.cq.close()
	})
	return e
}

// fconn is a connection of the engine with its fake host queue.
type fconn struct {
	c    *conn
	ep   *fakeEP
	h    *hostQueue
	dead chan struct{}
}

// dial connects a queue of depth entries (qid for the limits: 0 is an admin queue).
func (e *engine) dial(qid uint16, depth int) *fconn {
	e.t.Helper()
	cfg := connConfig{qid: qid, depth: depth, ird: e.o.ird, sqSize: e.o.sqSize, maxMsg: e.o.maxMsg, admin: qid == 0,
		sendInv: !e.o.noSendInv}
	if cfg.sqSize == 0 {
		cfg.sqSize = sqDepth(depth)
	}
	if qid != 0 {
		cfg.icd = e.port.Limits().InCapsuleDataSize
		cfg.window = e.o.window
	}
	ep := newFakeEP(e.f, e.cq, e.o.hostBytes)
	var qp endpoint = ep
	if e.o.wrapEP != nil {
		qp = e.o.wrapEP(ep)
	}
	cfg.srq = qid != 0 && e.g.srq != nil
	if cfg.srq {
		if err := e.g.srq.reserve(depth); err != nil {
			e.t.Fatal(err)
		}
		ep.srq = e.srq
	}
	reg := e.f.newRegion(layoutFor(&cfg).size)
	log := e.o.connLog
	if log == nil {
		log = testLogger(e.t)
	}
	c := newConn(cfg, reg, qp, e.pool, log)
	c.qpn = ep.qpn
	if err := e.g.attach(c); err != nil {
		e.t.Fatal(err)
	}
	q, err := e.port.NewQueue(c, depth)
	if err != nil {
		e.t.Fatal(err)
	}
	c.q = q
	q.ExpectQID(qid) // as accept does with the CM private data's qid
	fc := &fconn{c: c, ep: ep, dead: make(chan struct{})}
	c.onDead = func(*conn) {
		if c.cfg.srq {
			e.g.srq.unreserve(depth)
		}
		close(fc.dead)
	}
	if err := c.postInitialRecvs(); err != nil {
		e.t.Fatal(err)
	}
	e.g.publish(c)
	fc.h = newHostQueue(e.t, depth, e.o.hostBytes/depth)
	ep.onResp = fc.h.onResponse
	fc.h.attach(fakeLink{ep})
	return fc
}

// waitDead waits until the connection's resources are released.
func (fc *fconn) waitDead(t testing.TB) {
	t.Helper()
	select {
	case <-fc.dead:
	case <-time.After(20 * time.Second):
		t.Fatalf("connection not released: state %v, receives %d, sends %d, requests %s", fc.c.state, fc.c.recvPosted, fc.c.sigOut, fc.c.busyContexts())
	}
}

// closeAll disconnects the connections, waits until they are released and checks that
// every pool buffer came back.
func (e *engine) closeAll(fcs ...*fconn) {
	e.t.Helper()
	for _, fc := range fcs {
		fc.ep.Disconnect()
		fc.c.requestClose(errHostDisconnect)
	}
	for _, fc := range fcs {
		fc.waitDead(e.t)
	}
	if free, total, _ := e.pool.stats(); free != total {
		e.t.Errorf("pool: %d of %d pages free after the connections closed", free, total)
	}
}

// adminConnect connects an admin queue and enables the controller.
func (e *engine) adminConnect(kato uint32) (*fconn, uint16) {
	e.t.Helper()
	a := e.dial(0, 32)
	c := a.h.connect(0, kato, nvmeproto.CNTLIDDynamic, testSubNQN, testHostNQN)
	expectOK(e.t, "admin connect", c)
	cntlid, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
	a.h.enable()
	return a, cntlid
}

// ioConnect connects I/O queue qid of controller cntlid.
func (e *engine) ioConnect(qid, cntlid uint16, depth int) *fconn {
	e.t.Helper()
	q := e.dial(qid, depth)
	c := q.h.connect(qid, 0, cntlid, testSubNQN, testHostNQN)
	expectOK(e.t, "I/O connect", c)
	return q
}
