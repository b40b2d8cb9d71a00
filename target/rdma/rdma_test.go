package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
	"github.com/gonvmf/gonvmf/target"
)

// The TestRDMA* tests run the transport on a real RDMA device (Soft-RoCE in the guest:
// integration/run-tests.sh go-tests) against a minimal in-Go host built on rdmacm.

// rdmaLink is a host queue pair: capsules go out as SENDs from per-CID buffers,
// responses arrive in receive buffers, and the data area is registered for the
// target's RDMA READs and WRITEs.
type rdmaLink struct {
	t      testing.TB
	ch     *rdmacm.EventChannel
	dev    *rdmacm.Device
	pd     *rdmacm.PD
	cq     *rdmacm.CQ
	mem    *rdmacm.Arena
	id     *rdmacm.CMID
	qp     *rdmacm.QP
	depth  int
	data   int // bytes of data area
	capOff int // capsule buffers
	capSz  int
	rspOff int // response receive buffers

	onResp   func([]byte)
	lost     func()
	noRepost bool
	stop     atomic.Bool
	done     chan struct{}
	sendMu   sync.Mutex
	closed   sync.Once
}

type dialOpts struct {
	priv      []byte // CM private data (default: a valid request for qid, depth)
	qid       uint16
	depth     int
	dataBytes int
	icd       int   // largest in-capsule data the host sends
	respRes   uint8 // RDMA READs the host serves (default 16)
	noRespRes bool
	recvs     int  // receive buffers posted at first (default depth)
	noRepost  bool // never post a receive again (a host that holds the target's responses)
}

var testPortSeq atomic.Uint32

// dialRDMA connects a host queue pair to addr.
func dialRDMA(t testing.TB, addr netip.AddrPort, o dialOpts) (*rdmaLink, *rdmacm.Event, error) {
	if o.depth == 0 {
		o.depth = 32
	}
	if o.dataBytes == 0 {
		o.dataBytes = o.depth * (128 << 10)
	}
	if o.priv == nil {
		o.priv = make([]byte, nvmeproto.RDMAConnReqSize)
		(&nvmeproto.RDMAConnReq{QID: o.qid, HRQSize: uint16(o.depth), HSQSize: uint16(o.depth - 1)}).Marshal(o.priv)
	}
	if o.respRes == 0 && !o.noRespRes {
		o.respRes = 16
	}
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		return nil, nil, err
	}
	if o.recvs == 0 {
		o.recvs = o.depth
	}
	l := &rdmaLink{t: t, ch: ch, depth: o.depth, data: o.dataBytes, capSz: nvmeproto.SQESize + o.icd, done: make(chan struct{}),
		noRepost: o.noRepost}
	l.capOff = alignUp(l.data, pageSize)
	l.rspOff = alignUp(l.capOff+o.depth*l.capSz, pageSize)
	size := l.rspOff + o.depth*nvmeproto.CQESize
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, ev, err := rdmacm.Dial(ctx, ch, addr, rdmacm.DialOptions{
		Param: rdmacm.ConnParam{PrivateData: o.priv, ResponderResources: o.respRes},
		CreateQP: func(id *rdmacm.CMID) error {
			var err error
			if l.dev, err = rdmacm.OpenDevice(id.DeviceName()); err != nil {
				return err
			}
			if l.pd, err = l.dev.AllocPD(); err != nil {
				return err
			}
			if l.cq, err = l.dev.NewCQ(4 * o.depth); err != nil {
				return err
			}
			if l.mem, err = l.pd.NewArena(size, rdmacm.AccessRemoteRead|rdmacm.AccessRemoteWrite); err != nil {
				return err
			}
			if l.qp, err = id.CreateQP(l.pd, rdmacm.QPConfig{SendCQ: l.cq, RecvCQ: l.cq,
				MaxSendWR: 2 * o.depth, MaxRecvWR: o.depth, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
				return err
			}
			wrs := make([]rdmacm.RecvWR, o.recvs)
			for i := range wrs {
				wrs[i].ID = uint64(i)
				wrs[i].SetSGL(l.mem.SGE(l.rspOff+i*nvmeproto.CQESize, nvmeproto.CQESize))
			}
			return l.qp.PostRecv(wrs)
		},
	})
	if err != nil {
		l.release()
		return nil, nil, err
	}
	l.id = id
	go l.poll()
	return l, ev, nil
}

// poll delivers responses and reposts their receive buffers.
func (l *rdmaLink) poll() {
	defer close(l.done)
	wcs := make([]rdmacm.Completion, 32)
	for !l.stop.Load() {
		n, err := l.cq.PollWait(wcs, 50*time.Millisecond)
		if err != nil {
			return
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdmacm.WCSuccess {
				if l.lost != nil {
					l.lost()
				}
				continue
			}
			if !wc.Opcode.IsRecv() {
				continue
			}
			i := int(wc.ID)
			off := l.rspOff + i*nvmeproto.CQESize
			if l.onResp != nil {
				l.onResp(bytes.Clone(l.mem.Bytes()[off : off+int(wc.ByteLen)]))
			}
			if l.noRepost {
				continue
			}
			var w [1]rdmacm.RecvWR
			w[0].ID = uint64(i)
			w[0].SetSGL(l.mem.SGE(off, nvmeproto.CQESize))
			l.qp.PostRecv(w[:])
		}
	}
}

func (l *rdmaLink) send(capsule []byte) error {
	if len(capsule) > l.capSz {
		return fmt.Errorf("capsule of %d bytes, link built for %d", len(capsule), l.capSz)
	}
	cid := int(binary.LittleEndian.Uint16(capsule[2:]))
	off := l.capOff + (cid%l.depth)*l.capSz
	copy(l.mem.Bytes()[off:], capsule)
	var w [1]rdmacm.SendWR
	w[0].ID = uint64(1<<32 | cid)
	w[0].Op = rdmacm.OpSend
	w[0].Flags = rdmacm.FlagSignaled
	w[0].SetSGL(l.mem.SGE(off, len(capsule)))
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	return l.qp.PostSend(w[:])
}

func (l *rdmaLink) memory() ([]byte, uint64, uint32) {
	return l.mem.Bytes()[:l.data], l.mem.Addr(0), l.mem.RKey()
}

// close disconnects and releases everything.
func (l *rdmaLink) close() {
	l.closed.Do(func() {
		if l.id != nil {
			l.id.Disconnect()
		}
		l.stop.Store(true)
		if l.cq != nil {
			l.cq.Wake()
		}
		if l.id != nil {
			<-l.done
		}
		l.release()
	})
}

// vanish destroys the host's side without a disconnect handshake first.
func (l *rdmaLink) vanish() {
	l.closed.Do(func() {
		l.stop.Store(true)
		l.cq.Wake()
		<-l.done
		l.qp.Close()
		l.release()
	})
}

func (l *rdmaLink) release() {
	l.qp.Close()
	l.id.Close()
	l.mem.Close()
	l.cq.Close()
	l.pd.Close()
	l.dev.Close()
	l.ch.Close()
}

// ---- target side ----

type rdmaEnv struct {
	t     testing.TB
	links []*rdmaLink
	tgt   *target.Target
	tr    *Transport
	lis   *Listener
	addr  netip.AddrPort
}

func newRDMAEnv(t testing.TB, tcfg conf.Transport, nss ...conf.Namespace) *rdmaEnv {
	t.Helper()
	return newRDMAEnvLimits(t, tcfg, conf.Limits{}, nss...)
}

// newRDMAEnvLimits is newRDMAEnv with limits (zero fields: the defaults).
func newRDMAEnvLimits(t testing.TB, tcfg conf.Transport, lim conf.Limits, nss ...conf.Namespace) *rdmaEnv {
	t.Helper()
	return newRDMAEnvAt(t, rdmatest.RequireAddr(t), tcfg, lim, nss...)
}

// newRDMAEnvAt is newRDMAEnvLimits listening on ip.
func newRDMAEnvAt(t testing.TB, ip netip.Addr, tcfg conf.Transport, lim conf.Limits, nss ...conf.Namespace) *rdmaEnv {
	t.Helper()
	if nss == nil {
		nss = []conf.Namespace{
			{NSID: 1, Backend: conf.BackendMemory, Size: 256 << 20},
			{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30},
		}
	}
	if tcfg.BufferPoolSize == 0 {
		tcfg.BufferPoolSize = 16 << 20
	}
	if tcfg.PollGroups == 0 {
		tcfg.PollGroups = 2
	}
	if tcfg.SharedReceiveQueue == 0 { // what a configuration file gets
		tcfg.SharedReceiveQueue = conf.DefaultSharedReceiveQueue
	}
	if tcfg.InCapsuleDataSize == 0 {
		tcfg.InCapsuleDataSize = conf.DefaultInCapsuleDataSize
	}
	port := uint16(4700 + testPortSeq.Add(1)%500 + uint32(time.Now().Unix()%50)*10)
	cfg := &conf.Config{
		Listeners:  []conf.Listener{{Address: ip.String(), Port: port}},
		Subsystems: []conf.Subsystem{{NQN: testSubNQN, AllowAnyHost: true, Namespaces: nss}},
		Transport:  tcfg,
		Limits:     lim,
	}
	log := testLogger(t)
	tgt, err := target.New(cfg, target.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(tgt, WithLogger(log))
	if err != nil {
		tgt.Close()
		t.Fatal(err)
	}
	lis, err := tr.Listen(tgt.Config().Listeners[0])
	if err != nil {
		tr.Close()
		tgt.Close()
		t.Fatal(err)
	}
	e := &rdmaEnv{t: t, tgt: tgt, tr: tr, lis: lis, addr: lis.Addr()}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("transport close: %v", err)
		}
		tgt.Close()
	})
	return e
}

// hostQ is a connected host queue over RDMA.
type hostQ struct {
	*hostQueue
	link *rdmaLink
}

func (e *rdmaEnv) dial(qid uint16, depth, icd int) *hostQ {
	e.t.Helper()
	q, err := e.tryDial(qid, depth, icd)
	if err != nil {
		e.t.Fatalf("connecting qid %d: %v", qid, err)
	}
	return q
}

// tryDial is dial returning its error.
func (e *rdmaEnv) tryDial(qid uint16, depth, icd int) (*hostQ, error) {
	h := newHostQueue(e.t, depth, 128<<10)
	l, _, err := dialRDMA(e.t, e.addr, dialOpts{qid: qid, depth: depth, icd: icd})
	if err != nil {
		return nil, err
	}
	l.onResp = h.onResponse
	l.lost = h.lost
	h.attach(l)
	e.t.Cleanup(l.close)
	e.links = append(e.links, l)
	return &hostQ{h, l}, nil
}

func (e *rdmaEnv) adminConnect(kato uint32) (*hostQ, uint16) {
	e.t.Helper()
	a := e.dial(0, 32, 0)
	c := a.connect(0, kato, nvmeproto.CNTLIDDynamic, testSubNQN, testHostNQN)
	expectOK(e.t, "admin connect", c)
	cntlid, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
	a.enable()
	return a, cntlid
}

func (e *rdmaEnv) ioConnect(qid, cntlid uint16, depth int) *hostQ {
	e.t.Helper()
	q := e.dial(qid, depth, 8192)
	expectOK(e.t, "I/O connect", q.connect(qid, 0, cntlid, testSubNQN, testHostNQN))
	return q
}

// waitConns waits until the transport has n connections.
func (e *rdmaEnv) waitConns(n int, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := e.tr.Stats()
		if s.Connections == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d connections after %v, want %d", s.Connections, within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectPoolFree disconnects every host, waits for the transport to release their
// connections and checks that the whole buffer pool is free.
func (e *rdmaEnv) expectPoolFree() {
	e.t.Helper()
	for _, l := range e.links {
		l.close()
	}
	e.waitConns(0, 15*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := e.tr.Stats()
		if s.PoolFreeBytes == s.PoolTotalBytes {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("buffer pool: %d of %d bytes free", s.PoolFreeBytes, s.PoolTotalBytes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- tests ----

// TestRDMARejects: connection requests with bad nvme-rdma private data are rejected
// with the status naming the problem.
func TestRDMARejects(t *testing.T) {
	e := newRDMAEnv(t, conf.Transport{})
	priv := func(recfmt, qid, hrq, hsq uint16) []byte {
		b := make([]byte, nvmeproto.RDMAConnReqSize)
		(&nvmeproto.RDMAConnReq{RecFmt: recfmt, QID: qid, HRQSize: hrq, HSQSize: hsq}).Marshal(b)
		return b
	}
	for _, tc := range []struct {
		name string
		o    dialOpts
		want nvmeproto.RDMARejectStatus
	}{
		{"recfmt", dialOpts{priv: priv(1, 0, 32, 31)}, nvmeproto.RDMARejectInvalidRecFmt},
		{"qid", dialOpts{priv: priv(0, 99, 32, 31)}, nvmeproto.RDMARejectInvalidQID},
		{"admin hsqsize", dialOpts{priv: priv(0, 0, 64, 63)}, nvmeproto.RDMARejectInvalidHSQSize},
		{"hrqsize", dialOpts{priv: priv(0, 1, 0, 31)}, nvmeproto.RDMARejectInvalidHRQSize},
		{"no responder resources", dialOpts{noRespRes: true}, nvmeproto.RDMARejectInvalidIRD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, err := dialRDMA(t, e.addr, tc.o)
			if err == nil {
				l.close()
				t.Fatalf("connected; want reject %v", tc.want)
			}
			var rj *rdmacm.RejectError
			if !errors.As(err, &rj) {
				t.Fatalf("dial: %v; want a reject", err)
			}
			var r nvmeproto.RDMAConnRej
			if err := r.Unmarshal(rj.PrivateData); err != nil {
				t.Fatalf("reject private data % x: %v", rj.PrivateData, err)
			}
			if r.Status != tc.want {
				t.Errorf("reject status %v, want %v", r.Status, tc.want)
			}
		})
	}
	e.waitConns(0, time.Second)
}

// TestRDMAAdminAndIO: the admin Connect (data by RDMA READ), controller enable,
// Identify, an I/O queue, keyed and in-capsule writes and reads with data checked.
func TestRDMAAdminAndIO(t *testing.T) {
	e := newRDMAEnv(t, conf.Transport{})
	a, cntlid := e.adminConnect(0)
	id := a.identify(1, 0)
	if got := binary.LittleEndian.Uint16(id[78:]); got != cntlid {
		t.Errorf("Identify CNTLID %d, Connect returned %d", got, cntlid)
	}
	if ioccsz := binary.LittleEndian.Uint32(id[1792:]); ioccsz*16 < 64+8192 {
		t.Errorf("IOCCSZ %d: no room for 8 KiB of in-capsule data", ioccsz)
	}
	io := e.ioConnect(1, cntlid, 32)
	for i, n := range []int{1, 8, 64, 256} {
		data := pattern(n*512, byte(i))
		slba := uint64(i * 1024)
		c, _ := io.exec(rw(nvmeproto.OpWrite, 1, slba, n), data, len(data))
		expectOK(t, fmt.Sprintf("write %d blocks", n), c)
		c, got := io.exec(rw(nvmeproto.OpRead, 1, slba, n), nil, len(data))
		expectOK(t, fmt.Sprintf("read %d blocks", n), c)
		if !bytes.Equal(got, data) {
			t.Errorf("read %d blocks: data differs", n)
		}
	}
	data := pattern(8192, 7)
	expectOK(t, "in-capsule write", io.execInline(rw(nvmeproto.OpWrite, 1, 9000, 16), data))
	c, got := io.exec(rw(nvmeproto.OpRead, 1, 9000, 16), nil, 8192)
	expectOK(t, "read after in-capsule write", c)
	if !bytes.Equal(got, data) {
		t.Errorf("in-capsule write: read back differs")
	}
	c, got = io.exec(rw(nvmeproto.OpRead, 2, 0, 8), bytes.Repeat([]byte{0xEE}, 4096), 4096)
	expectOK(t, "null read", c)
	if !bytes.Equal(got, make([]byte, 4096)) {
		t.Errorf("null read: not zeroes")
	}
	// Concurrent traffic on two I/O queues.
	io2 := e.ioConnect(2, cntlid, 32)
	var wg sync.WaitGroup
	for q, h := range []*hostQ{io, io2} {
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					n := []int{8, 64, 256}[i%3]
					slba := uint64((q*8+w)*4096 + i*256)
					d := pattern(n*512, byte(q+w+i))
					c, _ := h.exec(rw(nvmeproto.OpWrite, 1, slba, n), d, len(d))
					expectOK(t, "write", c)
					c, got := h.exec(rw(nvmeproto.OpRead, 1, slba, n), nil, len(d))
					expectOK(t, "read", c)
					if !bytes.Equal(got, d) {
						t.Errorf("queue %d worker %d: data mismatch", q+1, w)
					}
				}
			}()
		}
	}
	wg.Wait()
	e.expectPoolFree()
}

// TestRDMAPoolExhaustion: a pool with room for one largest transfer serves many of them
// at once on several queues: they wait their turn, none fails.
func TestRDMAPoolExhaustion(t *testing.T) {
	e := newRDMAEnv(t, conf.Transport{BufferPoolSize: 128 << 10, MaxIOSize: 128 << 10})
	_, cntlid := e.adminConnect(0)
	var wg sync.WaitGroup
	for q := 1; q <= 3; q++ {
		io := e.ioConnect(uint16(q), cntlid, 16)
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 4; i++ {
					slba := uint64(((q*6+w)*4 + i) * 256)
					d := pattern(128<<10, byte(q*w+i))
					c, _ := io.exec(rw(nvmeproto.OpWrite, 1, slba, 256), d, len(d))
					expectOK(t, "write", c)
					c, got := io.exec(rw(nvmeproto.OpRead, 1, slba, 256), nil, len(d))
					expectOK(t, "read", c)
					if !bytes.Equal(got, d) {
						t.Errorf("data mismatch at slba %d", slba)
					}
				}
			}()
		}
	}
	wg.Wait()
	s := e.tr.Stats()
	t.Logf("buffer waits %d, lowest free %d bytes", s.BufferWaits, s.PoolLowestBytes)
	if s.BufferWaits == 0 {
		t.Errorf("no command waited for a buffer: the pool was not exhausted")
	}
	e.expectPoolFree()
}

// TestRDMAKeepAliveExpiry: a host that goes silent is detected by keep-alive; every
// resource of its connections is released, and the target serves others.
func TestRDMAKeepAliveExpiry(t *testing.T) {
	e := newRDMAEnv(t, conf.Transport{})
	base, _ := rdmatest.Resources()
	_, cntlid := e.adminConnect(1000)
	e.ioConnect(1, cntlid, 32)
	e.waitConns(2, time.Second)
	e.waitConns(0, 10*time.Second) // KATO 1 s: gone within 1.5 s plus teardown
	other, c2 := e.adminConnect(0)
	io := e.ioConnect(1, c2, 16)
	c, _ := io.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
	expectOK(t, "another host's read", c)
	_ = other
	if base != nil {
		// The silent host's own QPs still exist; the target's are gone: the target side
		// now holds the two new queues only, as before plus 2 host + 2 target QPs.
		now, _ := rdmatest.Resources()
		if got, want := now["qp"]-base["qp"], 2+2+2; got != want {
			t.Errorf("%d more QPs than at the start, want %d (the expired host's 2 and the new host's 2 on each side)", got, want)
		}
	}
}

// TestRDMAHostGone: a host that disappears with commands in flight gets everything
// released; another host keeps working throughout.
func TestRDMAHostGone(t *testing.T) {
	e := newRDMAEnv(t, conf.Transport{})
	base, _ := rdmatest.Resources()
	other, c2 := e.adminConnect(0)
	otherIO := e.ioConnect(1, c2, 16)
	otherPages := e.tr.Stats().QueueMemPages

	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 32)
	for i := 0; i < 16; i++ {
		cmd := io.begin()
		copy(cmd.buf, pattern(64<<10, byte(i)))
		w := rw(nvmeproto.OpWrite, 1, uint64(i*128), 128)
		w.SGL = cmd.keyedAt(0, 64<<10)
		if err := cmd.submit(&w, nil); err != nil {
			t.Fatal(err)
		}
	}
	io.link.vanish()
	a.link.vanish()
	e.waitConns(2, 15*time.Second)
	c, _ := otherIO.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
	expectOK(t, "the other host's read", c)
	_ = other
	if base != nil {
		deadline := time.Now().Add(5 * time.Second)
		for {
			now, _ := rdmatest.Resources()
			// The other host: 2 QPs each side, its 2 MRs, and the queue memory of its 2
			// queues on the target; the target's slabs of queue memory and the shared
			// receive queues' buffers stay for the next connections.
			st := e.tr.Stats()
			chunks := st.SharedRecvBufs / srqChunkSlots
			if now["qp"]-base["qp"] == 4 && now["mr"]-base["mr"] == 2+chunks+st.QueueMemSlabs && st.QueueMemPages == otherPages {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("RDMA resources not released: qp %d→%d, mr %d→%d (%d slabs of queue memory, %d shared receive chunks), queue memory pages held %d, want %d",
					base["qp"], now["qp"], base["mr"], now["mr"], st.QueueMemSlabs, chunks, st.QueueMemPages, otherPages)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	e.expectPoolFree()
}

// TestRDMACloseWithHostsConnected: closing the transport disconnects hosts and releases
// every RDMA object and descriptor.
func TestRDMACloseWithHostsConnected(t *testing.T) {
	rdmatest.LeakCheck(t)
	ip := rdmatest.RequireAddr(t)
	cfg := &conf.Config{
		Listeners:  []conf.Listener{{Address: ip.String(), Port: uint16(5300 + testPortSeq.Add(1))}},
		Subsystems: []conf.Subsystem{{NQN: testSubNQN, AllowAnyHost: true, Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendNull, Size: 1 << 30}}}},
		Transport:  conf.Transport{BufferPoolSize: 8 << 20, PollGroups: 2, InCapsuleDataSize: conf.DefaultInCapsuleDataSize},
	}
	tgt, err := target.New(cfg, target.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	tr, err := New(tgt, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tr.Listen(tgt.Config().Listeners[0])
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	e := &rdmaEnv{t: t, tgt: tgt, tr: tr, lis: lis, addr: lis.Addr()}
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	c, _ := io.exec(rw(nvmeproto.OpRead, 1, 0, 8), nil, 4096)
	expectOK(t, "read", c)
	start := time.Now()
	if err := tr.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("closing with a host connected took %v", d)
	}
}

// BenchmarkRDMARead4kQD1 measures the round trip of one 4 KiB read (null namespace) from
// the in-Go host, one command at a time, with event-driven and busy-polling groups.
func BenchmarkRDMARead4kQD1(b *testing.B) {
	for _, mode := range []struct {
		name string
		tc   conf.Transport
	}{
		{"event", conf.Transport{}},
		{"busy", conf.Transport{BusyPoll: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			e := newRDMAEnv(b, mode.tc)
			_, cntlid := e.adminConnect(0)
			io := e.ioConnect(1, cntlid, 32)
			cmd := rw(nvmeproto.OpRead, 2, 0, 8)
			for b.Loop() {
				c, _ := io.exec(cmd, nil, 4096)
				if !c.Status.Success() {
					b.Fatal(c.Status)
				}
			}
		})
	}
}

// BenchmarkRDMAWrite4kQD1 is the same for writes (host data fetched by RDMA READ).
func BenchmarkRDMAWrite4kQD1(b *testing.B) {
	e := newRDMAEnv(b, conf.Transport{})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 32)
	cmd := rw(nvmeproto.OpWrite, 2, 0, 8)
	data := make([]byte, 4096)
	for b.Loop() {
		c, _ := io.exec(cmd, data, 4096)
		if !c.Status.Success() {
			b.Fatal(c.Status)
		}
	}
}
