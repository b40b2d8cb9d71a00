package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// end is one side of a test connection: its own device handle, PD, CQ,
// registered arena, CM ID and QP.
type end struct {
	dev *rdmacm.Device
	pd  *rdmacm.PD
	cq  *rdmacm.CQ // send and receive completions (unless rcq is set)
	rcq *rdmacm.CQ // receive completions, if separate
	mem *rdmacm.Arena
	id  *rdmacm.CMID
	qp  *rdmacm.QP
}

// setup opens the device the ID is bound to and creates the end's objects
// and QP.
func (e *end) setup(id *rdmacm.CMID, o *pairOpts) error {
	var err error
	if e.dev, err = rdmacm.OpenDevice(id.DeviceName()); err != nil {
		return err
	}
	if e.pd, err = e.dev.AllocPD(); err != nil {
		return err
	}
	if e.cq, err = e.dev.NewCQ(o.cqEntries); err != nil {
		return err
	}
	rcq := e.cq
	if o.recvCQEntries > 0 {
		if e.rcq, err = e.dev.NewCQ(o.recvCQEntries); err != nil {
			return err
		}
		rcq = e.rcq
	}
	if e.mem, err = e.pd.NewArena(o.arenaSize, o.access); err != nil {
		return err
	}
	e.id = id
	e.qp, err = id.CreateQP(e.pd, rdmacm.QPConfig{
		SendCQ: e.cq, RecvCQ: rcq,
		MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR,
		MaxSendSGE: 4, MaxRecvSGE: 2,
		MaxInlineData: o.inline,
	})
	return err
}

func (e *end) recvCQ() *rdmacm.CQ {
	if e.rcq != nil {
		return e.rcq
	}
	return e.cq
}

// close tears the end down in dependency order (the objects would also
// close their dependents themselves; TestRDMATeardownInFlight checks that).
func (e *end) close() error {
	return errors.Join(e.qp.Close(), e.id.Close(), e.mem.Close(), e.cq.Close(), e.rcq.Close(), e.pd.Close(), e.dev.Close())
}

type pairOpts struct {
	arenaSize     int
	access        rdmacm.Access // of both arenas (local write is implied)
	sendWR        int
	recvWR        int
	inline        int
	cqEntries     int
	recvCQEntries int // > 0: separate receive CQs
	reqData       []byte
	repData       []byte
	initDepth     uint8 // client's initiator depth (RDMA READs it may issue)
	respRes       uint8 // client's responder resources (READs the server may issue)
	// pre-accept/pre-connect hooks, e.g. to post receives
	srvSetup, cliSetup func(e *end) error
}

func (o *pairOpts) defaults() {
	if o.arenaSize == 0 {
		o.arenaSize = 1 << 20
	}
	if o.sendWR == 0 {
		o.sendWR = 64
	}
	if o.recvWR == 0 {
		o.recvWR = 64
	}
	if o.cqEntries == 0 {
		o.cqEntries = o.sendWR + o.recvWR
	}
}

// pair is a connection over rdma_cm between a listener side (srv) and a
// dialling side (cli) in the same process.
type pair struct {
	ip       netip.Addr
	lch, cch *rdmacm.EventChannel
	listener *rdmacm.CMID
	srv, cli end
	req      *rdmacm.Event // the server's CONNECT_REQUEST
	est      *rdmacm.Event // the client's ESTABLISHED
	srvEst   *rdmacm.Event // the server's ESTABLISHED
}

// newPair connects a pair; it is closed at the end of the test.
func newPair(t testing.TB, ip netip.Addr, o pairOpts) *pair {
	t.Helper()
	p, err := dialPair(ip, o)
	if p != nil {
		t.Cleanup(func() {
			if err := p.close(); err != nil {
				t.Errorf("closing the pair: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func dialPair(ip netip.Addr, o pairOpts) (*pair, error) {
	o.defaults()
	p := &pair{ip: ip}
	var err error
	if p.lch, err = rdmacm.NewEventChannel(); err != nil {
		return p, err
	}
	if p.cch, err = rdmacm.NewEventChannel(); err != nil {
		return p, err
	}
	if p.listener, err = p.lch.Listen(netip.AddrPortFrom(ip, 0), 8); err != nil {
		return p, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	srvDone := make(chan error, 1)
	go func() { srvDone <- p.accept(ctx, &o) }()

	id, est, err := rdmacm.Dial(ctx, p.cch, p.listener.LocalAddr(), rdmacm.DialOptions{
		Param: rdmacm.ConnParam{
			PrivateData:        o.reqData,
			InitiatorDepth:     o.initDepth,
			ResponderResources: o.respRes,
		},
		CreateQP: func(id *rdmacm.CMID) error {
			if err := p.cli.setup(id, &o); err != nil {
				return err
			}
			if o.cliSetup != nil {
				return o.cliSetup(&p.cli)
			}
			return nil
		},
	})
	if err != nil {
		cancel()
		<-srvDone
		return p, fmt.Errorf("dial %v: %w", p.listener.LocalAddr(), err)
	}
	p.cli.id, p.est = id, est
	if err := <-srvDone; err != nil {
		return p, err
	}
	return p, nil
}

// accept serves one connection request on the listener's channel.
func (p *pair) accept(ctx context.Context, o *pairOpts) error {
	ev, err := p.lch.GetEvent(ctx)
	if err != nil {
		return fmt.Errorf("server: waiting for CONNECT_REQUEST: %w", err)
	}
	if ev.Type != rdmacm.EventConnectRequest {
		return fmt.Errorf("server: got %v, want CONNECT_REQUEST", ev)
	}
	p.req = ev
	if err := p.srv.setup(ev.ID, o); err != nil {
		ev.ID.Reject(nil)
		return fmt.Errorf("server: setup: %w", err)
	}
	if o.srvSetup != nil {
		if err := o.srvSetup(&p.srv); err != nil {
			return err
		}
	}
	// Grant what the peer asked for, as the NVMe-oF target does: our
	// initiator depth is bounded by the peer's responder resources (the
	// event's InitiatorDepth) and we serve the peer's initiator depth.
	if err := ev.ID.Accept(&rdmacm.ConnParam{
		PrivateData:        o.repData,
		InitiatorDepth:     ev.Param.InitiatorDepth,
		ResponderResources: ev.Param.ResponderResources,
		RNRRetryCount:      7,
	}); err != nil {
		return fmt.Errorf("server: accept: %w", err)
	}
	ev, err = p.lch.GetEvent(ctx)
	if err != nil {
		return fmt.Errorf("server: waiting for ESTABLISHED: %w", err)
	}
	if ev.Type != rdmacm.EventEstablished || ev.ID != p.srv.id {
		return fmt.Errorf("server: got %v, want ESTABLISHED for %v", ev, p.srv.id)
	}
	p.srvEst = ev
	return nil
}

func (p *pair) close() error {
	return errors.Join(p.cli.close(), p.srv.close(), p.listener.Close(), p.cch.Close(), p.lch.Close())
}

// postRecvs posts n receive buffers of size bytes from off in e's arena,
// with IDs id0, id0+1, ...
func postRecvs(t testing.TB, e *end, off, size, n int, id0 uint64) {
	t.Helper()
	wrs := make([]rdmacm.RecvWR, n)
	for i := range wrs {
		wrs[i].ID = id0 + uint64(i)
		wrs[i].SetSGL(e.mem.SGE(off+i*size, size))
	}
	if err := e.qp.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
}

// pollN polls cq until it has n completions (or the timeout passes),
// sleeping on the completion channel between polls.
func pollN(t testing.TB, cq *rdmacm.CQ, n int, timeout time.Duration) []rdmacm.Completion {
	t.Helper()
	var got []rdmacm.Completion
	buf := make([]rdmacm.Completion, 16)
	deadline := time.Now().Add(timeout)
	for len(got) < n {
		k, err := cq.Poll(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...)
		if k > 0 {
			continue
		}
		if err := cq.Arm(false); err != nil {
			t.Fatal(err)
		}
		if k, _ = cq.Poll(buf); k > 0 {
			got = append(got, buf[:k]...)
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%d of %d completions after %v: %+v", len(got), n, timeout, got)
		}
		if _, err := cq.Wait(left); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) > n {
		t.Fatalf("%d completions, want %d: %+v", len(got), n, got)
	}
	return got
}

// requireRDMA returns the test address and checks for leaks at the end.
func requireRDMA(t *testing.T) netip.Addr {
	t.Helper()
	ip := rdmatest.RequireAddr(t)
	rdmatest.LeakCheck(t)
	return ip
}
