package initiator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
)

// rdmaTransport connects queues over rdma_cm: one reliable-connected QP per queue, SEND
// for command capsules, RECV for response capsules; the target RDMA READs and WRITEs our
// registered memory through the keyed SGLs commands carry.
type rdmaTransport struct {
	o   *Options
	dst netip.AddrPort
	src netip.Addr

	mu   sync.Mutex
	dev  *rdmacm.Device
	pd   *rdmacm.PD
	attr rdmacm.DeviceAttr
}

func newRDMATransport(o *Options) (*rdmaTransport, error) {
	t := &rdmaTransport{o: o, dst: netip.AddrPortFrom(netip.MustParseAddr(o.Addr), uint16(o.Port))}
	if o.SrcAddr != "" {
		t.src = netip.MustParseAddr(o.SrcAddr)
	}
	return t, nil
}

// device opens the device the first queue's route resolved to; every queue must use it.
func (t *rdmaTransport) device(name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dev != nil {
		if t.dev.Name() != name {
			return fmt.Errorf("initiator: queue routed to RDMA device %s, the controller's other queues use %s", name, t.dev.Name())
		}
		return nil
	}
	dev, err := rdmacm.OpenDevice(name)
	if err != nil {
		return err
	}
	attr, err := dev.Query()
	if err != nil {
		dev.Close()
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		dev.Close()
		return err
	}
	t.dev, t.pd, t.attr = dev, pd, attr
	return nil
}

func (t *rdmaTransport) newRegion(n int) (*region, error) {
	t.mu.Lock()
	pd := t.pd
	t.mu.Unlock()
	if pd == nil {
		return nil, errors.New("initiator: no RDMA device yet")
	}
	a, err := pd.NewArena(n, rdmacm.AccessRemoteRead|rdmacm.AccessRemoteWrite)
	if err != nil {
		return nil, fmt.Errorf("initiator: registering %d bytes: %w", n, err)
	}
	return &region{mem: a.Bytes(), base: a.Addr(0), rkey: a.RKey(), lkey: a.LKey(), close: a.Close}, nil
}

func (t *rdmaTransport) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dev == nil {
		return nil
	}
	err := errors.Join(t.pd.Close(), t.dev.Close())
	t.dev, t.pd = nil, nil
	return err
}

// Work request IDs: kind in the high 32 bits, slot or receive index in the low ones.
const (
	wrSend = 1 << 32
	wrRecv = 2 << 32
)

// rdmaQueue is one queue's QP, CQ, event channel and control memory:
// [Connect data | DSM ranges | capsules (64 B per slot) | responses (16 B per slot)].
type rdmaQueue struct {
	q     *queue
	t     *rdmaTransport
	ch    *rdmacm.EventChannel
	id    *rdmacm.CMID
	qp    *rdmacm.QP
	cq    *rdmacm.CQ
	arena *rdmacm.Arena
	ctl   *region

	capOff, respOff int
	slots           []rdmaSlot
	recvWRs         []rdmacm.RecvWR // one per response buffer, prebuilt
	batch           []rdmacm.RecvWR
	ready           []*slot
	wcs             []rdmacm.Completion
	postedSends     atomic.Int32
	postedRecvs     int // completion goroutine only

	// While the completion goroutine runs Done functions (batching), commands they (or
	// anyone) submit are collected in pending and posted as one chain afterwards: one
	// doorbell for a whole batch of resubmissions (on Soft-RoCE every post is a syscall).
	sendMu   sync.Mutex
	batching bool
	pending  []rdmacm.SendWR
}

type rdmaSlot struct {
	wr [1]rdmacm.SendWR
}

func (rq *rdmaQueue) events() int32 { return 2 }

// openQueue resolves the route, creates the QP on the route's device and connects with the
// nvme-rdma private data. It returns the usable depth.
func (t *rdmaTransport) openQueue(ctx context.Context, q *queue, cntlid uint16) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, t.o.ConnectTimeout)
	defer cancel()
	rq := &rdmaQueue{q: q, t: t}
	ok := false
	defer func() {
		if !ok {
			rq.close()
		}
	}()
	var err error
	if rq.ch, err = rdmacm.NewEventChannel(); err != nil {
		return 0, err
	}
	if rq.id, err = rq.ch.CreateID(); err != nil {
		return 0, err
	}
	resolve := 2 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < resolve {
		resolve = max(time.Until(d), 10*time.Millisecond)
	}
	if err := rq.id.ResolveAddr(t.src, t.dst, resolve); err != nil {
		return 0, fmt.Errorf("resolving %v: %w", t.dst, err)
	}
	if _, err := rq.expect(ctx, rdmacm.EventAddrResolved); err != nil {
		return 0, err
	}
	if err := rq.id.ResolveRoute(resolve); err != nil {
		return 0, fmt.Errorf("resolving the route to %v: %w", t.dst, err)
	}
	if _, err := rq.expect(ctx, rdmacm.EventRouteResolved); err != nil {
		return 0, err
	}
	if err := t.device(rq.id.DeviceName()); err != nil {
		return 0, err
	}
	if err := rq.setup(); err != nil {
		return 0, err
	}
	var priv [nvmeproto.RDMAConnReqSize]byte
	req := nvmeproto.RDMAConnReq{QID: q.qid, HRQSize: uint16(q.depth), HSQSize: uint16(q.depth - 1), CNTLID: cntlid}
	req.Marshal(priv[:])
	p := rdmacm.ConnParam{
		PrivateData: priv[:],
		// The target RDMA READs our memory: we must serve its reads.
		ResponderResources: uint8(min(t.attr.MaxQPRdAtom, 255)),
		FlowControl:        1,
		RetryCount:         7,
		RNRRetryCount:      7,
	}
	if err := rq.id.Connect(&p); err != nil {
		return 0, fmt.Errorf("connecting to %v: %w", t.dst, err)
	}
	ev, err := rq.expect(ctx, rdmacm.EventEstablished)
	if err != nil {
		return 0, err
	}
	usable := q.depth
	var rep nvmeproto.RDMAConnRep
	if rep.Unmarshal(ev.Param.PrivateData) == nil && rep.CRQSize > 0 && int(rep.CRQSize) < usable {
		usable = int(rep.CRQSize)
	}
	q.ctl, q.tr = rq.ctl, rq
	go rq.watch()
	ok = true
	return usable, nil
}

// expect waits for the next CM event and fails unless it is want.
func (rq *rdmaQueue) expect(ctx context.Context, want rdmacm.EventType) (*rdmacm.Event, error) {
	ev, err := rq.ch.GetEvent(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: no answer from %v within the %v connect timeout (waiting for %v): is the target up and the address right?",
				ErrUnreachable, rq.t.dst, rq.t.o.ConnectTimeout, want)
		}
		return nil, fmt.Errorf("waiting for %v from %v: %w", want, rq.t.dst, err)
	}
	if ev.Type == want {
		return ev, nil
	}
	errno := syscall.Errno(0)
	if ev.Status < 0 {
		errno = syscall.Errno(-ev.Status)
	}
	switch ev.Type {
	case rdmacm.EventAddrError:
		return nil, fmt.Errorf("%w: cannot resolve %v to a local RDMA device (is the address reachable through an RDMA-capable interface?): %v",
			ErrConnectRefused, rq.t.dst.Addr(), errno)
	case rdmacm.EventRouteError:
		return nil, fmt.Errorf("%w: no route to %v over RDMA: %v", ErrConnectRefused, rq.t.dst.Addr(), errno)
	case rdmacm.EventUnreachable:
		return nil, fmt.Errorf("%w: %v is unreachable: %v", ErrUnreachable, rq.t.dst, errno)
	case rdmacm.EventRejected:
		return nil, rejectError(rq.t.dst, ev)
	case rdmacm.EventConnectError:
		return nil, fmt.Errorf("%w: connection to %v failed: %v", ErrConnectRefused, rq.t.dst, errno)
	}
	return nil, fmt.Errorf("%w: got %v (status %d) from %v while waiting for %v", ErrConnectRefused, ev.Type, ev.Status, rq.t.dst, want)
}

// rejectError explains a CM REJ: nobody listening, or the target's nvme-rdma reject.
func rejectError(dst netip.AddrPort, ev *rdmacm.Event) error {
	const (
		ibRejInvalidServiceID = 8
		ibRejConsumerDefined  = 28
	)
	if ev.Status == ibRejConsumerDefined {
		var rej nvmeproto.RDMAConnRej
		if rej.Unmarshal(ev.Param.PrivateData) == nil {
			return fmt.Errorf("%w: the target at %v rejected the queue: %v (nvme-rdma status %d)",
				ErrConnectRefused, dst, rej.Status, uint16(rej.Status))
		}
		return fmt.Errorf("%w: the target at %v rejected the connection", ErrConnectRefused, dst)
	}
	if ev.Status == ibRejInvalidServiceID {
		return fmt.Errorf("%w: nothing listens on %v (no NVMe-oF RDMA port there)", ErrConnectRefused, dst)
	}
	return fmt.Errorf("%w: connection to %v rejected (CM reason %d)", ErrConnectRefused, dst, ev.Status)
}

// setup creates the CQ, control memory and QP, and posts the receives.
func (rq *rdmaQueue) setup() error {
	t, q := rq.t, rq.q
	depth := q.depth
	var err error
	if rq.cq, err = t.dev.NewCQ(2*depth + 16); err != nil {
		return err
	}
	rq.capOff = alignUp(ctlSize(depth), 64)
	rq.respOff = rq.capOff + depth*nvmeproto.SQESize
	// The target only RDMA READs this memory (the Connect data, Dataset Management
	// ranges); capsules go out by SEND and responses come in by RECV, which need no remote
	// access: it gets no remote write.
	if rq.arena, err = t.pd.NewArena(rq.respOff+depth*nvmeproto.CQESize, rdmacm.AccessRemoteRead); err != nil {
		return err
	}
	a := rq.arena
	rq.ctl = &region{mem: a.Bytes(), base: a.Addr(0), rkey: a.RKey(), lkey: a.LKey()}
	cfg := rdmacm.QPConfig{SendCQ: rq.cq, RecvCQ: rq.cq, MaxSendWR: depth + 1, MaxRecvWR: depth,
		MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: nvmeproto.SQESize}
	if rq.qp, err = rq.id.CreateQP(t.pd, cfg); err != nil {
		cfg.MaxInlineData = 0 // not every device sends inline
		if rq.qp, err = rq.id.CreateQP(t.pd, cfg); err != nil {
			return err
		}
	}
	rq.slots = make([]rdmaSlot, depth)
	for i := range rq.slots {
		q.slots[i].x = &rq.slots[i]
		wr := &rq.slots[i].wr[0]
		wr.ID = wrSend | uint64(i)
		wr.Op = rdmacm.OpSend
		wr.Flags = rdmacm.FlagSignaled
		wr.SGL[0] = a.SGE(rq.capOff+i*nvmeproto.SQESize, nvmeproto.SQESize)
	}
	rq.recvWRs = make([]rdmacm.RecvWR, depth)
	for i := range rq.recvWRs {
		rq.recvWRs[i].ID = wrRecv | uint64(i)
		rq.recvWRs[i].SetSGL(a.SGE(rq.respOff+i*nvmeproto.CQESize, nvmeproto.CQESize))
	}
	if err := rq.qp.PostRecv(rq.recvWRs); err != nil {
		return fmt.Errorf("posting %d receives: %w", depth, err)
	}
	rq.postedRecvs = depth
	rq.batch = make([]rdmacm.RecvWR, 0, depth)
	rq.pending = make([]rdmacm.SendWR, 0, depth)
	rq.ready = make([]*slot, 0, depth)
	rq.wcs = make([]rdmacm.Completion, 64)
	return nil
}

func (rq *rdmaQueue) post(s *slot) error {
	wr := &s.x.(*rdmaSlot).wr[0]
	s.cmd.Marshal(rq.ctl.mem[rq.capOff+int(s.idx)*nvmeproto.SQESize:])
	wr.NumSGE = 1
	if s.icd {
		wr.SGL[1] = rdmacm.SGE{Addr: s.buf.addr(0), Length: uint32(s.buf.Len()), LKey: s.buf.reg.lkey}
		wr.NumSGE = 2
	}
	rq.sendMu.Lock()
	if rq.batching {
		rq.pending = append(rq.pending, *wr)
		rq.sendMu.Unlock()
		return nil
	}
	rq.sendMu.Unlock()
	rq.postedSends.Add(1)
	if err := rq.qp.PostSend(s.x.(*rdmaSlot).wr[:]); err != nil {
		rq.postedSends.Add(-1)
		return err
	}
	return nil
}

// flush posts the sends collected while batching as one chain. Only the completion
// goroutine sets batching, so pending is not touched by anyone else once it is cleared.
func (rq *rdmaQueue) flush() {
	rq.sendMu.Lock()
	rq.batching = false
	chain := rq.pending
	rq.sendMu.Unlock()
	if len(chain) == 0 {
		return
	}
	rq.postedSends.Add(int32(len(chain)))
	if err := rq.qp.PostSend(chain); err != nil {
		posted := 0
		var pe *rdmacm.PostError
		if errors.As(err, &pe) {
			posted = pe.Index
		}
		rq.postedSends.Add(int32(posted - len(chain)))
		// The commands not posted stay busy until the failed queue aborts them.
		rq.q.fail(fmt.Errorf("%w: queue %d: posting %d commands: %v", ErrDisconnected, rq.q.qid, len(chain)-posted, err))
	}
	rq.pending = chain[:0]
}

func (rq *rdmaQueue) wake() {
	if rq.cq != nil {
		rq.cq.Wake()
	}
}

// watch turns CM events after the connection into queue failures: the target or the
// fabric dropped the connection.
func (rq *rdmaQueue) watch() {
	for {
		ev, err := rq.ch.GetEvent(context.Background())
		if err != nil {
			return
		}
		switch ev.Type {
		case rdmacm.EventDisconnected, rdmacm.EventDeviceRemoval, rdmacm.EventAddrChange, rdmacm.EventTimewaitExit:
			rq.q.fail(fmt.Errorf("%w: queue %d: %v on the connection to %v", ErrDisconnected, rq.q.qid, ev.Type, rq.t.dst))
		}
	}
}

// handle processes a batch of work completions: responses are matched to slots and their
// receive buffers reposted (before any Done runs, so a new command always finds a posted
// receive for its response), then completed commands are finished.
func (rq *rdmaQueue) handle(wcs []rdmacm.Completion) {
	q := rq.q
	ready := rq.ready[:0]
	batch := rq.batch[:0]
	for i := range wcs {
		wc := &wcs[i]
		idx := int(uint32(wc.ID))
		if wc.ID&wrSend != 0 {
			rq.postedSends.Add(-1)
			if wc.Status != rdmacm.WCSuccess {
				q.fail(fmt.Errorf("%w: queue %d: command send failed: %v", ErrDisconnected, q.qid, wc.Status))
				continue
			}
			if s := &q.slots[idx]; s.event() {
				ready = append(ready, s)
			}
			continue
		}
		rq.postedRecvs--
		if wc.Status != rdmacm.WCSuccess {
			q.fail(fmt.Errorf("%w: queue %d: receive failed: %v", ErrDisconnected, q.qid, wc.Status))
			continue
		}
		batch = append(batch, rq.recvWRs[idx])
		if wc.ByteLen < nvmeproto.CQESize {
			q.fail(fmt.Errorf("initiator: queue %d: response capsule of %d bytes", q.qid, wc.ByteLen))
			continue
		}
		var cqe nvmeproto.Completion
		cqe.Unmarshal(rq.ctl.mem[rq.respOff+idx*nvmeproto.CQESize:])
		s, err := q.response(&cqe)
		if err != nil {
			q.fail(err)
			continue
		}
		if s.event() {
			ready = append(ready, s)
		}
	}
	if len(batch) > 0 && !q.dead.Load() {
		if err := rq.qp.PostRecv(batch); err != nil {
			var pe *rdmacm.PostError
			if errors.As(err, &pe) {
				rq.postedRecvs += pe.Index
			}
			q.fail(fmt.Errorf("initiator: queue %d: reposting receives: %w", q.qid, err))
		} else {
			rq.postedRecvs += len(batch)
		}
	}
	if len(ready) > 0 {
		rq.sendMu.Lock()
		rq.batching = true
		rq.sendMu.Unlock()
		for _, s := range ready {
			q.finish(s, nil)
		}
		rq.flush()
	}
	rq.ready, rq.batch = ready[:0], batch[:0]
}

func (rq *rdmaQueue) run() {
	q := rq.q
	for !q.dead.Load() {
		q.runAuthEnds()
		n, err := rq.cq.Poll(rq.wcs)
		if err != nil {
			q.fail(fmt.Errorf("initiator: queue %d: polling: %w", q.qid, err))
			break
		}
		if n > 0 {
			rq.handle(rq.wcs[:n])
			continue
		}
		if err := rq.cq.Arm(false); err != nil {
			q.fail(fmt.Errorf("initiator: queue %d: arming the CQ: %w", q.qid, err))
			break
		}
		if n, _ = rq.cq.Poll(rq.wcs); n > 0 {
			rq.handle(rq.wcs[:n])
			continue
		}
		if _, err := rq.cq.Wait(0); err != nil { // Wake (teardown) interrupts it
			q.fail(fmt.Errorf("initiator: queue %d: waiting for completions: %w", q.qid, err))
			break
		}
	}
	// Dead: disconnecting moves the QP to the error state, which flushes every posted
	// request; collect them (bounded), then abort whatever got no response.
	rq.id.Disconnect()
	q.quiesce()
	deadline := time.Now().Add(3 * time.Second)
	for (rq.postedSends.Load() > 0 || rq.postedRecvs > 0) && time.Now().Before(deadline) {
		n, err := rq.cq.Poll(rq.wcs)
		if err != nil {
			break
		}
		if n > 0 {
			rq.handle(rq.wcs[:n])
			continue
		}
		time.Sleep(time.Millisecond)
	}
	q.abortAll()
}

func (rq *rdmaQueue) close() error {
	var errs []error
	if rq.qp != nil {
		errs = append(errs, rq.qp.Close())
	}
	if rq.id != nil {
		errs = append(errs, rq.id.Close())
	}
	if rq.ch != nil {
		errs = append(errs, rq.ch.Close())
	}
	if rq.cq != nil {
		errs = append(errs, rq.cq.Close())
	}
	if rq.arena != nil {
		errs = append(errs, rq.arena.Close())
	}
	return errors.Join(errs...)
}
