package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/rdmacm"
)

func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i>>8)
	}
	return b
}

// TestRDMADevices lists devices and checks the one carrying the test address
// against what an opened handle reports.
func TestRDMADevices(t *testing.T) {
	ip := requireRDMA(t)
	devs, err := rdmacm.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var info *rdmacm.DeviceInfo
	for i := range devs {
		for _, a := range devs[i].Addrs() {
			if a == ip {
				info = &devs[i]
			}
		}
	}
	if info == nil {
		t.Fatalf("no device has address %v: %+v", ip, devs)
	}
	t.Logf("%s: %+v", info.Name, info.Attr)
	a := info.Attr
	if a.MaxQP <= 0 || a.MaxQPWR <= 0 || a.MaxSGE <= 0 || a.MaxCQE <= 0 || a.MaxMR <= 0 || a.MaxPD <= 0 ||
		a.MaxQPInitRdAtom <= 0 || a.MaxQPRdAtom <= 0 || a.PhysPortCount != len(info.Ports) || a.NodeGUID == 0 {
		t.Errorf("implausible attributes: %+v", a)
	}
	var active *rdmacm.PortAttr
	for i, p := range info.Ports {
		t.Logf("port %d: state %v mtu %d/%d link %v max msg %d gids %+v", p.Port, p.State, p.ActiveMTU, p.MaxMTU,
			p.LinkLayer, p.MaxMsgSize, p.GIDs)
		if p.State == rdmacm.PortActive {
			active = &info.Ports[i]
		}
	}
	if active == nil {
		t.Fatal("no active port")
	}
	if active.ActiveMTU < 256 || active.ActiveMTU > active.MaxMTU || active.MaxMsgSize == 0 {
		t.Errorf("port %d: implausible MTU %d/%d, max msg %d", active.Port, active.ActiveMTU, active.MaxMTU, active.MaxMsgSize)
	}
	found := false
	for _, g := range active.GIDs {
		if a, ok := g.Addr(); ok && a == ip {
			found = true
			if g.Netdev == "" || g.Type == rdmacm.GIDTypeIB {
				t.Errorf("GID %v for %v: netdev %q type %v", g.GID, ip, g.Netdev, g.Type)
			}
		}
	}
	if !found {
		t.Errorf("port %d has no GID for %v", active.Port, ip)
	}

	dev, err := rdmacm.OpenDevice(info.Name)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Name() != info.Name {
		t.Errorf("OpenDevice(%q).Name() = %q", info.Name, dev.Name())
	}
	qa, err := dev.Query()
	if err != nil {
		t.Fatal(err)
	}
	if qa != info.Attr {
		t.Errorf("Query() = %+v, Devices() said %+v", qa, info.Attr)
	}
	pa, err := dev.QueryPort(active.Port)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != rdmacm.PortActive || pa.ActiveMTU != active.ActiveMTU {
		t.Errorf("QueryPort(%d) = %+v", active.Port, pa)
	}
	if _, err := dev.QueryPort(a.PhysPortCount + 1); err == nil {
		t.Errorf("QueryPort(%d) of a device with %d ports succeeded", a.PhysPortCount+1, a.PhysPortCount)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := dev.Query(); !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("Query after Close: %v, want ErrClosed", err)
	}
	if _, err := rdmacm.OpenDevice("nosuchdev0"); !errors.Is(err, rdmacm.ErrNoDevice) {
		t.Errorf("OpenDevice(nosuchdev0): %v, want ErrNoDevice", err)
	}
}

// TestRDMASendRecv sends messages of several sizes (inline and not, with
// and without immediate data) in one chain and checks every byte received.
func TestRDMASendRecv(t *testing.T) {
	ip := requireRDMA(t)
	const slot = 64 << 10
	sizes := []int{1, 16, 64, 100, 4096, 65536, 1000}
	p := newPair(t, ip, pairOpts{
		arenaSize: 2 * len(sizes) * slot, inline: 64,
		initDepth: rdmacm.MaxDepth, respRes: rdmacm.MaxDepth,
		srvSetup: func(e *end) error { postRecvs(t, e, 0, slot, len(sizes), 100); return nil },
		cliSetup: func(e *end) error { postRecvs(t, e, 0, slot, 2, 200); return nil },
	})
	// MaxDepth asked for the device's maximum RDMA READ depths.
	if a, err := p.cli.dev.Query(); err != nil {
		t.Fatal(err)
	} else if p.req.Param.InitiatorDepth != uint8(a.MaxQPRdAtom) || // librdmacm keeps the low byte
		p.req.Param.ResponderResources != uint8(a.MaxQPInitRdAtom) {
		t.Errorf("dialled with MaxDepth: the request offers responder resources %d, initiator depth %d; device maxima %d, %d",
			p.req.Param.InitiatorDepth, p.req.Param.ResponderResources, a.MaxQPRdAtom, a.MaxQPInitRdAtom)
	}
	if c := p.cli.qp.Caps(); c.MaxInlineData < 64 || c.MaxSendWR < 64 || c.MaxRecvWR < 64 || c.MaxSendSGE < 4 {
		t.Errorf("client QP caps %+v, asked for 64/64 WRs, 4 SGEs, 64 inline", c)
	}

	// Client: message i from its arena's slot len(sizes)+i; the last one
	// gathers from two SGEs and carries immediate data.
	cmem := p.cli.mem.Bytes()
	wrs := make([]rdmacm.SendWR, len(sizes))
	for i, n := range sizes {
		off := (len(sizes) + i) * slot
		copy(cmem[off:], pattern(byte(i), n))
		wrs[i] = rdmacm.SendWR{ID: uint64(i), Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}
		wrs[i].SetSGL(p.cli.mem.SGE(off, n))
	}
	last := len(sizes) - 1
	off := (len(sizes) + last) * slot
	wrs[last].Op, wrs[last].Imm = rdmacm.OpSendImm, 0xdeadbeef
	wrs[last].SetSGL(p.cli.mem.SGE(off, 300), p.cli.mem.SGE(off+300, sizes[last]-300))
	if err := p.cli.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	// The 16-byte message went inline: overwriting its buffer now must not
	// change what arrives.
	clear(cmem[(len(sizes)+1)*slot:][:16])

	sent := pollN(t, p.cli.cq, len(sizes), 60*time.Second)
	for i, c := range sent {
		if c.Status != rdmacm.WCSuccess || c.Opcode != rdmacm.WCSend || c.ID != uint64(i) || c.QPNum != p.cli.qp.Num() {
			t.Errorf("send completion %d: %+v (%v)", i, c, c.Err())
		}
	}
	got := pollN(t, p.srv.cq, len(sizes), 60*time.Second)
	smem := p.srv.mem.Bytes()
	for i, c := range got {
		if err := c.Err(); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if c.ID != uint64(100+i) || int(c.ByteLen) != sizes[i] || c.QPNum != p.srv.qp.Num() || !c.Opcode.IsRecv() {
			t.Errorf("receive completion %d: %+v, want id %d, %d bytes on qp %d", i, c, 100+i, sizes[i], p.srv.qp.Num())
			continue
		}
		if want := pattern(byte(i), sizes[i]); !bytes.Equal(smem[i*slot:][:sizes[i]], want) {
			t.Errorf("message %d (%d bytes): data differs", i, sizes[i])
		}
		if i == last {
			if c.Flags&rdmacm.WCWithImm == 0 || c.Imm() != 0xdeadbeef {
				t.Errorf("message %d: flags %#x imm %#x, want immediate 0xdeadbeef", i, c.Flags, c.Imm())
			}
		} else if c.Flags&rdmacm.WCWithImm != 0 {
			t.Errorf("message %d: unexpected immediate data", i)
		}
	}

	// And back: a response from the server (a 16-byte "CQE", inline).
	resp := pattern(0x55, 16)
	copy(smem[10*slot:], resp)
	w := []rdmacm.SendWR{{ID: 7, Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}}
	w[0].SetSGL(p.srv.mem.SGE(10*slot, 16))
	if err := p.srv.qp.PostSend(w); err != nil {
		t.Fatal(err)
	}
	pollN(t, p.srv.cq, 1, 30*time.Second)
	c := pollN(t, p.cli.cq, 1, 30*time.Second)[0]
	if c.Err() != nil || c.ID != 200 || c.ByteLen != 16 || !bytes.Equal(cmem[:16], resp) {
		t.Errorf("response: %+v, data % x", c, cmem[:16])
	}
}

// TestRDMAWriteRead: the server (as an NVMe-oF target would) RDMA WRITEs
// into the client's memory with the write chained unsignaled in front of a
// signaled SEND, and RDMA READs from it, scattering into several SGEs; a
// bad rkey fails the READ with a remote access error.
func TestRDMAWriteRead(t *testing.T) {
	ip := requireRDMA(t)
	const size = 4 << 20
	p := newPair(t, ip, pairOpts{
		arenaSize: size, access: rdmacm.AccessRemoteRead | rdmacm.AccessRemoteWrite,
		initDepth: 8, respRes: 8, inline: 64,
		cliSetup: func(e *end) error { postRecvs(t, e, 0, 64, 4, 1); return nil },
	})
	cmem, smem := p.cli.mem.Bytes(), p.srv.mem.Bytes()

	for _, n := range []int{4096, 128 << 10} {
		// WRITE n bytes from the server's arena at 1 MiB to the client's at
		// 2 MiB (gathered from two SGEs), then SEND a 16-byte response.
		data := pattern(byte(n>>10), n)
		copy(smem[1<<20:], data)
		copy(smem[64:], "response-capsule")
		clear(cmem[2<<20:][:n])
		wrs := []rdmacm.SendWR{
			{ID: 1, Op: rdmacm.OpWrite, RemoteAddr: p.cli.mem.Addr(2 << 20), RKey: p.cli.mem.RKey()},
			{ID: 2, Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled},
		}
		wrs[0].SetSGL(p.srv.mem.SGE(1<<20, n/2), p.srv.mem.SGE(1<<20+n/2, n-n/2))
		wrs[1].SetSGL(p.srv.mem.SGE(64, 16))
		if err := p.srv.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		c := pollN(t, p.srv.cq, 1, 60*time.Second)[0]
		if c.Err() != nil || c.ID != 2 || c.Opcode != rdmacm.WCSend {
			t.Fatalf("write+send: completion %+v, want only the SEND's (id 2)", c)
		}
		r := pollN(t, p.cli.cq, 1, 60*time.Second)[0]
		if r.Err() != nil || r.ByteLen != 16 || string(cmem[(r.ID-1)*64:][:16]) != "response-capsule" {
			t.Fatalf("client receive: %+v", r)
		}
		// The SEND arrived, so the WRITE before it has landed.
		if !bytes.Equal(cmem[2<<20:][:n], data) {
			t.Fatalf("RDMA WRITE of %d bytes: data differs at the client", n)
		}
		postRecvs(t, &p.cli, int(r.ID-1)*64, 64, 1, r.ID)

		// READ it back from the client into three SGEs at the server.
		clear(smem[2<<20:][:n])
		rd := []rdmacm.SendWR{{ID: 3, Op: rdmacm.OpRead, Flags: rdmacm.FlagSignaled,
			RemoteAddr: p.cli.mem.Addr(2 << 20), RKey: p.cli.mem.RKey()}}
		rd[0].SetSGL(p.srv.mem.SGE(2<<20, 100), p.srv.mem.SGE(2<<20+100, n/2-100), p.srv.mem.SGE(2<<20+n/2, n-n/2))
		if err := p.srv.qp.PostSend(rd); err != nil {
			t.Fatal(err)
		}
		c = pollN(t, p.srv.cq, 1, 60*time.Second)[0]
		if c.Err() != nil || c.ID != 3 || c.Opcode != rdmacm.WCRead {
			t.Fatalf("read: completion %+v (%v)", c, c.Err())
		}
		if !bytes.Equal(smem[2<<20:][:n], data) {
			t.Fatalf("RDMA READ of %d bytes: data differs", n)
		}
	}

	// A READ with a wrong rkey fails with a remote access error.
	bad := []rdmacm.SendWR{{ID: 9, Op: rdmacm.OpRead, Flags: rdmacm.FlagSignaled,
		RemoteAddr: p.cli.mem.Addr(0), RKey: p.cli.mem.RKey() ^ 0x5a5a00}}
	bad[0].SetSGL(p.srv.mem.SGE(0, 512))
	if err := p.srv.qp.PostSend(bad); err != nil {
		t.Fatal(err)
	}
	c := pollN(t, p.srv.cq, 1, 60*time.Second)[0]
	var wce *rdmacm.WCError
	if err := c.Err(); !errors.As(err, &wce) || c.ID != 9 || c.Status != rdmacm.WCRemAccessErr {
		t.Fatalf("READ with a bad rkey: %+v (%v), want status %v", c, err, rdmacm.WCRemAccessErr)
	}
	t.Logf("bad rkey: %v", c.Err())
}

// TestRDMAConnectReject: private data and connection parameters of the
// request and the accept travel through rdma_cm; a reject's private data
// reaches Dial.
func TestRDMAConnectReject(t *testing.T) {
	ip := requireRDMA(t)
	req := []byte("nvmf-req:0123456789abcdef0123456")[:32] // as large as an NVMe-oF REQ
	rep := []byte("nvmf-rep:fedcba9876543210fedcba9")[:32]
	p := newPair(t, ip, pairOpts{reqData: req, repData: rep, initDepth: 4, respRes: 8})
	if got := p.req.Param.PrivateData; len(got) < len(req) || !bytes.Equal(got[:len(req)], req) || anyNonZero(got[len(req):]) {
		t.Errorf("CONNECT_REQUEST private data % x, want % x (zero padded)", got, req)
	}
	if p.req.Listener != p.listener || p.req.ID != p.srv.id {
		t.Errorf("CONNECT_REQUEST ids: listener %v id %v", p.req.Listener, p.req.ID)
	}
	// Seen from the passive side: the peer's responder resources are our
	// initiator depth, and the other way round.
	if p.req.Param.InitiatorDepth != 8 || p.req.Param.ResponderResources != 4 {
		t.Errorf("CONNECT_REQUEST initiator depth %d, responder resources %d; want 8, 4 (client asked 4, 8)",
			p.req.Param.InitiatorDepth, p.req.Param.ResponderResources)
	}
	if p.req.Param.RNRRetryCount != 7 {
		t.Errorf("CONNECT_REQUEST rnr retry count %d, want 7 (Dial's default)", p.req.Param.RNRRetryCount)
	}
	if got := p.est.Param.PrivateData; len(got) < len(rep) || !bytes.Equal(got[:len(rep)], rep) {
		t.Errorf("ESTABLISHED private data % x, want % x", got, rep)
	}
	if p.est.ID != p.cli.id || p.est.Type != rdmacm.EventEstablished {
		t.Errorf("client event %v", p.est)
	}
	if a := p.cli.id.RemoteAddr(); a != p.listener.LocalAddr() {
		t.Errorf("client RemoteAddr %v, listener at %v", a, p.listener.LocalAddr())
	}
	if a, b := p.srv.id.RemoteAddr(), p.cli.id.LocalAddr(); a != b || a.Addr() != ip {
		t.Errorf("server sees the client at %v, client is at %v", a, b)
	}

	// A second connection is rejected with NVMe-oF REJ private data
	// (recfmt 0, sts 5 = INVALID_HRQSIZE).
	rej := []byte{0, 0, 5, 0}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		ev, err := p.lch.GetEvent(ctx)
		if err == nil && ev.Type != rdmacm.EventConnectRequest {
			err = errors.New("got " + ev.String())
		}
		if err == nil {
			err = ev.ID.Reject(rej)
			ev.ID.Close()
		}
		done <- err
	}()
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var qp *rdmacm.QP
	id, _, err := rdmacm.Dial(ctx, ch, p.listener.LocalAddr(), rdmacm.DialOptions{
		Param: rdmacm.ConnParam{PrivateData: req},
		CreateQP: func(id *rdmacm.CMID) (err error) {
			qp, err = id.CreateQP(p.cli.pd, rdmacm.QPConfig{SendCQ: p.cli.cq, RecvCQ: p.cli.cq, MaxSendWR: 4, MaxRecvWR: 4})
			return err
		},
	})
	if serr := <-done; serr != nil {
		t.Fatalf("server: %v", serr)
	}
	var re *rdmacm.RejectError
	if !errors.As(err, &re) {
		id.Close()
		t.Fatalf("Dial to a rejecting listener: %v, %v; want a *RejectError", id, err)
	}
	if re.Reason != rdmacm.RejectConsumerDefined || len(re.PrivateData) < 4 || !bytes.Equal(re.PrivateData[:4], rej) {
		t.Errorf("reject reason %d private data % x; want 28 (consumer defined), % x", re.Reason, re.PrivateData, rej)
	}
	t.Logf("rejected: %v", err)
	if err := qp.PostSend([]rdmacm.SendWR{{Op: rdmacm.OpSend}}); !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("the failed Dial left its QP open: PostSend: %v", err)
	}
}

func anyNonZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return true
		}
	}
	return false
}

// TestRDMADisconnect: after the server's connection migrates to its own
// event channel, a disconnect flushes the server's posted receives and both
// sides see DISCONNECTED, then TIMEWAIT_EXIT (the server on its new channel).
func TestRDMADisconnect(t *testing.T) {
	ip := requireRDMA(t)
	p := newPair(t, ip, pairOpts{
		srvSetup: func(e *end) error { postRecvs(t, e, 0, 256, 8, 1); return nil },
	})
	// The server's connection moves from the listener's channel to its own.
	sch, err := rdmacm.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Close()
	if err := p.srv.id.Migrate(sch); err != nil {
		t.Fatal(err)
	}
	if err := p.cli.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := func(ch *rdmacm.EventChannel, id *rdmacm.CMID, typ rdmacm.EventType) {
		t.Helper()
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			t.Fatalf("waiting for %v: %v", typ, err)
		}
		if ev.Type != typ || ev.ID != id {
			t.Fatalf("got %v, want %v for %v", ev, typ, id)
		}
	}
	// The passive side answers the disconnect request with its own
	// Disconnect, which also moves its QP to the error state.
	want(sch, p.srv.id, rdmacm.EventDisconnected)
	if err := p.srv.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	want(p.cch, p.cli.id, rdmacm.EventDisconnected)
	// The server's QP is in the error state: its receives are flushed.
	for i, c := range pollN(t, p.srv.cq, 8, 30*time.Second) {
		if c.Status != rdmacm.WCFlushErr || c.ID != uint64(i+1) {
			t.Errorf("receive %d after disconnect: %+v (%v), want flushed", i, c, c.Status)
		}
	}
	t0 := time.Now()
	want(sch, p.srv.id, rdmacm.EventTimewaitExit)
	want(p.cch, p.cli.id, rdmacm.EventTimewaitExit)
	t.Logf("TIMEWAIT_EXIT %v after DISCONNECTED", time.Since(t0))
	if err := p.cli.qp.PostSend([]rdmacm.SendWR{{Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}}); err == nil {
		c := pollN(t, p.cli.cq, 1, 10*time.Second)[0]
		if c.Status != rdmacm.WCFlushErr {
			t.Errorf("send after disconnect: %+v, want flushed", c)
		}
	}
}

// TestRDMATeardownInFlight closes everything while work is outstanding and
// goroutines are posting, polling and waiting, in an order that forces each
// object to close its dependents first; no descriptor or RDMA object may
// be left behind (LeakCheck).
func TestRDMATeardownInFlight(t *testing.T) {
	ip := requireRDMA(t)
	p, err := dialPair(ip, pairOpts{
		arenaSize: 8 << 20, access: rdmacm.AccessRemoteRead | rdmacm.AccessRemoteWrite,
		sendWR: 256, recvWR: 256, cqEntries: 1024, initDepth: 16, respRes: 16,
	})
	if err != nil {
		p.close()
		t.Fatal(err)
	}
	postRecvs(t, &p.srv, 0, 4096, 256, 0)
	postRecvs(t, &p.cli, 4<<20, 4096, 256, 0)

	// Outstanding: sends both ways, RDMA READs and WRITEs of 64 KiB.
	var wrs []rdmacm.SendWR
	for i := range 96 {
		w := rdmacm.SendWR{ID: uint64(i), Flags: rdmacm.FlagSignaled}
		switch i % 3 {
		case 0:
			w.Op = rdmacm.OpSend
			w.SetSGL(p.cli.mem.SGE(1<<20, 4096))
		case 1:
			w.Op, w.RemoteAddr, w.RKey = rdmacm.OpRead, p.srv.mem.Addr(2<<20), p.srv.mem.RKey()
			w.SetSGL(p.cli.mem.SGE(2<<20, 64<<10))
		case 2:
			w.Op, w.RemoteAddr, w.RKey = rdmacm.OpWrite, p.srv.mem.Addr(3<<20), p.srv.mem.RKey()
			w.SetSGL(p.cli.mem.SGE(3<<20, 64<<10))
		}
		wrs = append(wrs, w)
	}
	if err := p.cli.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	back := make([]rdmacm.SendWR, 64)
	for i := range back {
		back[i] = rdmacm.SendWR{ID: uint64(i), Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}
		back[i].SetSGL(p.srv.mem.SGE(4<<20, 4096))
	}
	if err := p.srv.qp.PostSend(back); err != nil {
		t.Fatal(err)
	}

	// Goroutines busy with the objects while they are closed.
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	wg.Add(4)
	go func() { // keeps posting sends until the QP is closed
		defer wg.Done()
		w := []rdmacm.SendWR{{Op: rdmacm.OpSend}}
		w[0].SetSGL(p.cli.mem.SGE(1<<20, 64))
		for {
			err := p.cli.qp.PostSend(w)
			if errors.Is(err, rdmacm.ErrClosed) {
				return
			}
			runtime.Gosched()
		}
	}()
	go func() { // keeps polling the server CQ
		defer wg.Done()
		buf := make([]rdmacm.Completion, 32)
		for {
			if _, err := p.srv.cq.Poll(buf); errors.Is(err, rdmacm.ErrClosed) {
				return
			}
			runtime.Gosched()
		}
	}()
	go func() { // sleeps on a CQ's completion channel (never armed)
		defer wg.Done()
		cq, err := p.srv.dev.NewCQ(16)
		if err != nil {
			if !errors.Is(err, rdmacm.ErrClosed) {
				errc <- err
			}
			return
		}
		for {
			if _, err := cq.Wait(0); err != nil {
				if !errors.Is(err, rdmacm.ErrClosed) {
					errc <- err
				}
				return
			}
		}
	}()
	go func() { // waits for CM events on a third channel
		defer wg.Done()
		ch, err := rdmacm.NewEventChannel()
		if err != nil {
			errc <- err
			return
		}
		if _, err := ch.Listen(netip.AddrPortFrom(ip, 0), 4); err != nil {
			errc <- err
		}
		go func() { time.Sleep(200 * time.Millisecond); ch.Close() }()
		if _, err := ch.GetEvent(context.Background()); !errors.Is(err, rdmacm.ErrClosed) {
			errc <- errors.New("GetEvent on a closed channel: " + errString(err))
		}
	}()
	time.Sleep(100 * time.Millisecond)

	// Parents first: each must close what depends on it.
	closeErr := errors.Join(
		p.cli.dev.Close(), // client PD, CQ, arena, QP
		p.lch.Close(),     // listener, server CM ID and QP
		p.srv.dev.Close(), // server PD, CQs (and the waiting one), arena
		p.cch.Close(),     // client CM ID
	)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if closeErr != nil {
		t.Fatalf("teardown: %v", closeErr)
	}
	// Everything reports closed, and closing again is a no-op.
	if err := p.cli.qp.PostSend(wrs[:1]); !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("PostSend after teardown: %v", err)
	}
	if _, err := p.srv.cq.Poll(make([]rdmacm.Completion, 1)); !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("Poll after teardown: %v", err)
	}
	if _, err := p.cli.pd.NewArena(4096, 0); !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("NewArena after teardown: %v", err)
	}
	if err := p.close(); err != nil {
		t.Errorf("second close of everything: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// checkWait: with wait one of the CQ's ways to sleep (Wait, WaitThread), arming and
// waiting wakes on a completion event, Wake interrupts a wait (also one that came
// first), and a timeout ends it. It returns the pair, for the caller's own checks.
func checkWait(t *testing.T, name string, wait func(*rdmacm.CQ, time.Duration) (bool, error)) *pair {
	t.Helper()
	ip := requireRDMA(t)
	p := newPair(t, ip, pairOpts{
		srvSetup: func(e *end) error { postRecvs(t, e, 0, 256, 4, 1); return nil },
	})
	cq := p.srv.cq
	buf := make([]rdmacm.Completion, 4)
	if err := cq.Arm(false); err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() {
		ok, err := wait(cq, 30*time.Second)
		if err == nil && !ok {
			err = fmt.Errorf("%s returned without a completion event", name)
		}
		woke <- err
	}()
	time.Sleep(50 * time.Millisecond)
	w := []rdmacm.SendWR{{Op: rdmacm.OpSend}}
	w[0].SetSGL(p.cli.mem.SGE(0, 32))
	if err := p.cli.qp.PostSend(w); err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	if n, err := cq.Poll(buf); n != 1 || err != nil || buf[0].Err() != nil || buf[0].ByteLen != 32 {
		t.Fatalf("after the wakeup: Poll = %d, %v, %+v", n, err, buf[0])
	}

	// Wake interrupts a wait without a timeout.
	go func() {
		ok, err := wait(cq, 0)
		if err == nil && ok {
			err = fmt.Errorf("%s reported a completion event after Wake", name)
		}
		woke <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cq.Wake()
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Wake did not end %s", name)
	}
	// A Wake with nobody waiting makes the next wait return at once.
	cq.Wake()
	if ok, err := wait(cq, 0); ok || err != nil {
		t.Fatalf("%s after Wake: %v, %v", name, ok, err)
	}
	t0 := time.Now()
	if ok, err := wait(cq, 100*time.Millisecond); ok || err != nil || time.Since(t0) < 100*time.Millisecond {
		t.Fatalf("%s(100ms) = %v, %v after %v", name, ok, err, time.Since(t0))
	}
	return p
}

// TestRDMAWait: checkWait for Wait (the netpoller), and goroutines waiting on many
// CQs do not hold OS threads.
func TestRDMAWait(t *testing.T) {
	p := checkWait(t, "Wait", (*rdmacm.CQ).Wait)

	// 64 goroutines waiting on 64 CQs hold no OS thread each.
	threads0 := osThreads(t)
	cqs := make([]*rdmacm.CQ, 64)
	var wg sync.WaitGroup
	for i := range cqs {
		c, err := p.srv.dev.NewCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		cqs[i] = c
		if err := c.Arm(false); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Wait(0)
		}()
	}
	time.Sleep(500 * time.Millisecond)
	threads := osThreads(t)
	for _, c := range cqs {
		c.Wake()
	}
	wg.Wait()
	for _, c := range cqs {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
	t.Logf("OS threads: %d before, %d with 64 goroutines waiting", threads0, threads)
	if threads > threads0+8 {
		t.Errorf("64 waiting goroutines took %d OS threads", threads-threads0)
	}
}

// TestRDMAWaitThread: checkWait for WaitThread (poll(2) on the caller's thread), and
// it returns ErrClosed when the CQ is closed under it.
func TestRDMAWaitThread(t *testing.T) {
	p := checkWait(t, "WaitThread", (*rdmacm.CQ).WaitThread)
	woke := make(chan error, 1)

	// Close ends a WaitThread without a timeout; later ones fail.
	c, err := p.srv.dev.NewCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Arm(false); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := c.WaitThread(0)
		woke <- err
	}()
	time.Sleep(50 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-woke:
		if err != nil && !errors.Is(err, rdmacm.ErrClosed) {
			t.Fatalf("WaitThread during Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end WaitThread")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitThread(0); !errors.Is(err, rdmacm.ErrClosed) {
		t.Fatalf("WaitThread after Close = %v, want ErrClosed", err)
	}
	c.Wake() // no effect, no panic

	// The first WaitThread takes the completion channel out of the netpoller, whose
	// threads would otherwise wake for every completion event with nobody to hand it
	// to; Wait then fails, and Close still works.
	c, err = p.srv.dev.NewCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	n0 := netpollerEventFiles(t)
	if ok, err := c.WaitThread(time.Millisecond); ok || err != nil {
		t.Fatalf("WaitThread(1ms) on an idle CQ = %v, %v", ok, err)
	}
	if n := netpollerEventFiles(t); n != n0-1 {
		t.Errorf("verbs event files in the netpoller: %d before the first WaitThread, %d after (want one fewer)", n0, n)
	}
	if _, err := c.Wait(time.Millisecond); err == nil || errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("Wait after WaitThread = %v, want an error that says to keep to WaitThread", err)
	}
	c.Wake()
	if ok, err := c.WaitThread(0); ok || err != nil {
		t.Fatalf("WaitThread after Wake = %v, %v", ok, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// netpollerEventFiles counts the verbs event files (completion channels, the async
// event file: anon_inode:[infinibandevent]) that the Go runtime's epoll instance
// watches, from /proc/self/fdinfo of the process's epoll descriptors.
func netpollerEventFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n, epolls := 0, 0
	for _, e := range fds {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:[eventpoll]" {
			continue
		}
		epolls++
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "tfd:" {
				continue
			}
			if l, _ := os.Readlink("/proc/self/fd/" + f[1]); l == "anon_inode:[infinibandevent]" {
				n++
			}
		}
	}
	if epolls == 0 {
		t.Fatal("no epoll descriptor in /proc/self/fd: the netpoller is not running")
	}
	return n
}

func osThreads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads: in /proc/self/status")
	return 0
}

// TestRDMAAsyncEvent overruns a receive CQ: the device reports CQ_ERR for
// that CQ through AsyncEvent.
func TestRDMAAsyncEvent(t *testing.T) {
	ip := requireRDMA(t)
	p := newPair(t, ip, pairOpts{recvCQEntries: 1, recvWR: 128,
		srvSetup: func(e *end) error { postRecvs(t, e, 0, 64, 128, 1); return nil },
	})
	n := p.srv.rcq.Entries() + 8
	t.Logf("receive CQ has %d entries; sending %d messages", p.srv.rcq.Entries(), n)
	wrs := make([]rdmacm.SendWR, n)
	for i := range wrs {
		wrs[i] = rdmacm.SendWR{ID: uint64(i), Op: rdmacm.OpSend}
		wrs[i].SetSGL(p.cli.mem.SGE(0, 8))
	}
	if err := p.cli.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var evs []rdmacm.AsyncEvent
	for {
		ev, err := p.srv.dev.AsyncEvent(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", evs, err)
		}
		evs = append(evs, ev)
		if ev.Type == rdmacm.AsyncCQErr {
			if ev.CQ != p.srv.rcq {
				t.Errorf("CQ_ERR for %p, want the receive CQ %p", ev.CQ, p.srv.rcq)
			}
			break
		}
	}
	t.Logf("async events: %v", evs)
	// Soft-RoCE keeps retrying the completion (and raising CQ_ERR) until
	// the QP is gone.
	if err := p.srv.qp.Close(); err != nil {
		t.Fatal(err)
	}

	// A cancelled context ends AsyncEvent; Close ends it with ErrClosed.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	for {
		ev, err := p.srv.dev.AsyncEvent(ctx2)
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("AsyncEvent with an expiring context: %v", err)
			}
			break
		}
		t.Logf("more: %v", ev)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := p.cli.dev.AsyncEvent(context.Background()); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	p.cli.dev.Close()
	if err := <-done; !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("AsyncEvent when the device is closed: %v", err)
	}
}

// TestRDMAPortEvents takes the RDMA netdev down and up: the device reports
// PORT_ERR and PORT_ACTIVE, and the port and its address come back. It runs
// only in the VM harness's guest, where the netdev is a dummy.
func TestRDMAPortEvents(t *testing.T) {
	ip := requireRDMA(t)
	nd := os.Getenv("RXE_NETDEV")
	if os.Getenv("GONVMF_GUEST") != "1" || nd == "" {
		t.Skip("takes the RDMA netdev down: runs only in the VM harness's guest (GONVMF_GUEST=1, RXE_NETDEV)")
	}
	devs, err := rdmacm.Devices()
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for _, d := range devs {
		if slices.Contains(d.Addrs(), ip) {
			name = d.Name
		}
	}
	dev, err := rdmacm.OpenDevice(name)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	link := func(state string) {
		t.Helper()
		if out, err := exec.Command("ip", "link", "set", nd, state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s %s: %v: %s", nd, state, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "set", nd, "up").Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := func(typ rdmacm.AsyncEventType) {
		t.Helper()
		for {
			ev, err := dev.AsyncEvent(ctx)
			if err != nil {
				t.Fatalf("waiting for %v: %v", typ, err)
			}
			t.Logf("async event %v", ev)
			if ev.Type == typ {
				if ev.Port != 1 {
					t.Errorf("%v for port %d, want 1", typ, ev.Port)
				}
				return
			}
		}
	}
	link("down")
	want(rdmacm.AsyncPortErr)
	if pa, err := dev.QueryPort(1); err != nil || pa.State == rdmacm.PortActive {
		t.Errorf("port after link down: %v %v", pa.State, err)
	}
	link("up")
	want(rdmacm.AsyncPortActive)
	// The port and its GID (the address rdma_cm binds to) come back.
	for {
		devs, err := rdmacm.Devices()
		if err == nil {
			for _, d := range devs {
				if d.Name == name && slices.Contains(d.Addrs(), ip) {
					return
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s did not get %v back after link up: %+v %v", name, ip, devs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRDMAPostPollAllocs: posting and polling allocate nothing.
func TestRDMAPostPollAllocs(t *testing.T) {
	ip := requireRDMA(t)
	p := newPair(t, ip, pairOpts{inline: 64, access: rdmacm.AccessRemoteWrite,
		srvSetup: func(e *end) error { postRecvs(t, e, 0, 4096, 32, 0); return nil },
	})
	send := make([]rdmacm.SendWR, 2)
	send[0] = rdmacm.SendWR{Op: rdmacm.OpWrite, RemoteAddr: p.srv.mem.Addr(512 << 10), RKey: p.srv.mem.RKey()}
	send[0].SetSGL(p.cli.mem.SGE(0, 4096))
	send[1] = rdmacm.SendWR{Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}
	send[1].SetSGL(p.cli.mem.SGE(8192, 16))
	recv := make([]rdmacm.RecvWR, 1)
	wcs := make([]rdmacm.Completion, 8)
	poll := func(cq *rdmacm.CQ) rdmacm.Completion {
		for {
			n, err := cq.Poll(wcs)
			if err != nil {
				panic(err)
			}
			if n > 1 {
				panic(fmt.Sprintf("%d completions: %+v", n, wcs[:n]))
			}
			if n == 1 {
				return wcs[0]
			}
			runtime.Gosched()
		}
	}
	_ = p.cli.qp.PostSend(nil) // warm up
	allocs := testing.AllocsPerRun(50, func() {
		if err := p.cli.qp.PostSend(send); err != nil {
			panic(err)
		}
		if c := poll(p.cli.cq); c.Status != rdmacm.WCSuccess {
			panic(c.Err())
		}
		c := poll(p.srv.cq)
		if c.Status != rdmacm.WCSuccess {
			panic(c.Err())
		}
		recv[0].ID = c.ID
		recv[0].SetSGL(p.srv.mem.SGE(int(c.ID)*4096, 4096))
		if err := p.srv.qp.PostRecv(recv); err != nil {
			panic(err)
		}
		p.srv.cq.Arm(false)
		p.srv.cq.Wake()
		p.srv.cq.Wait(0)                // returns at once: woken
		p.srv.cq.Wait(time.Microsecond) // sleeps in the netpoller
	})
	if allocs != 0 {
		t.Errorf("post + poll + arm + wait: %v allocations per round trip, want 0", allocs)
	}
}

// TestRDMAPost: QP.Post posts receives and then sends in one call: the server reposts
// a receive and answers in the same Post, the client gets the answer in the new
// receive, and a Post with only one kind (or none) works too.
func TestRDMAPost(t *testing.T) {
	ip := requireRDMA(t)
	const slot = 4096
	p := newPair(t, ip, pairOpts{
		arenaSize: 16 * slot, inline: 64,
		srvSetup: func(e *end) error { postRecvs(t, e, 0, slot, 1, 100); return nil },
	})
	if err := p.cli.qp.Post(nil, nil); err != nil {
		t.Fatalf("empty Post: %v", err)
	}
	// Client: a receive for the answer and the request, in one Post.
	cmem, smem := p.cli.mem.Bytes(), p.srv.mem.Bytes()
	recv := []rdmacm.RecvWR{{ID: 200}}
	recv[0].SetSGL(p.cli.mem.SGE(0, slot))
	copy(cmem[4*slot:], pattern(1, 64))
	req := []rdmacm.SendWR{{ID: 1, Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}}
	req[0].SetSGL(p.cli.mem.SGE(4*slot, 64))
	if err := p.cli.qp.Post(recv, req); err != nil {
		t.Fatal(err)
	}
	if c := pollN(t, p.srv.cq, 1, 30*time.Second)[0]; c.Err() != nil || c.ID != 100 || !bytes.Equal(smem[:64], pattern(1, 64)) {
		t.Fatalf("server receive: %+v (%v)", c, c.Err())
	}
	// Server: repost its receive and answer, in one Post.
	srecv := []rdmacm.RecvWR{{ID: 101}}
	srecv[0].SetSGL(p.srv.mem.SGE(slot, slot))
	copy(smem[8*slot:], pattern(2, 16))
	resp := []rdmacm.SendWR{{ID: 2, Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}}
	resp[0].SetSGL(p.srv.mem.SGE(8*slot, 16))
	if err := p.srv.qp.Post(srecv, resp); err != nil {
		t.Fatal(err)
	}
	// The client's request completed, and the answer landed in the receive it posted with it.
	got := pollN(t, p.cli.cq, 2, 30*time.Second)
	ids := map[uint64]bool{}
	for _, c := range got {
		if c.Err() != nil {
			t.Fatalf("client completion %+v: %v", c, c.Err())
		}
		ids[c.ID] = true
	}
	if !ids[1] || !ids[200] || !bytes.Equal(cmem[:16], pattern(2, 16)) {
		t.Fatalf("client completions %+v, data % x", got, cmem[:16])
	}
	pollN(t, p.srv.cq, 1, 30*time.Second) // the answer's send
	// The server's reposted receive takes the next message (sends only).
	if err := p.cli.qp.Post(nil, req); err != nil {
		t.Fatal(err)
	}
	if c := pollN(t, p.srv.cq, 1, 30*time.Second)[0]; c.Err() != nil || c.ID != 101 {
		t.Fatalf("second server receive: %+v (%v)", c, c.Err())
	}
	pollN(t, p.cli.cq, 1, 30*time.Second)
	// A receive Post past the queue's capacity fails as a receive post with the index.
	many := make([]rdmacm.RecvWR, 2*(p.cli.qp.Caps().MaxRecvWR+1)+1) // past a queue rounded up to a power of two
	for i := range many {
		many[i].ID = uint64(1000 + i)
		many[i].SetSGL(p.cli.mem.SGE(slot, 64))
	}
	var pe *rdmacm.PostError
	if err := p.cli.qp.Post(many, req); !errors.As(err, &pe) || pe.Op != "ibv_post_recv" || pe.Index == 0 || pe.Index >= len(many) {
		t.Fatalf("overfull receive Post: %v; want a PostError of ibv_post_recv with the index of the first request that did not fit", err)
	}
}

// TestRDMASRQ: two connections whose server QPs share one receive queue. Messages on
// either take the SRQ's next buffer and tell their QP apart by QPNum; the QPs have no
// receive queue of their own; closing the SRQ closes the QPs on it.
func TestRDMASRQ(t *testing.T) {
	ip := requireRDMA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lch, err := rdmacm.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer lch.Close()
	lis, err := lch.Listen(netip.AddrPortFrom(ip, 0), 8)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rdmacm.OpenDevice(lis.DeviceName())
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.NewCQ(256)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := pd.NewArena(64<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.NewSRQ(8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if srq.MaxWR() < 8 {
		t.Fatalf("SRQ holds %d receives, asked for 8", srq.MaxWR())
	}
	const slot = 1024
	recvs := make([]rdmacm.RecvWR, 8)
	for i := range recvs {
		recvs[i].ID = uint64(100 + i)
		recvs[i].SetSGL(mem.SGE(i*slot, slot))
	}
	if err := srq.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	// Two clients, each its own pair of objects; the server side of both is on the SRQ.
	type client struct {
		e   end
		ch  *rdmacm.EventChannel
		srv *rdmacm.QP
	}
	var cls [2]*client
	for k := range cls {
		c := &client{}
		cls[k] = c
		if c.ch, err = rdmacm.NewEventChannel(); err != nil {
			t.Fatal(err)
		}
		accepted := make(chan error, 1)
		go func() {
			ev, err := lch.GetEvent(ctx)
			if err != nil || ev.Type != rdmacm.EventConnectRequest {
				accepted <- fmt.Errorf("server: %v %v", ev, err)
				return
			}
			qp, err := ev.ID.CreateQP(pd, rdmacm.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, SRQ: srq})
			if err != nil {
				ev.ID.Reject(nil)
				accepted <- err
				return
			}
			c.srv = qp
			if err := ev.ID.Accept(&rdmacm.ConnParam{RNRRetryCount: 7}); err != nil {
				accepted <- err
				return
			}
			ev, err = lch.GetEvent(ctx)
			if err == nil && ev.Type != rdmacm.EventEstablished {
				err = fmt.Errorf("server: got %v, want ESTABLISHED", ev)
			}
			accepted <- err
		}()
		o := pairOpts{}
		o.defaults()
		id, _, err := rdmacm.Dial(ctx, c.ch, lis.LocalAddr(), rdmacm.DialOptions{
			CreateQP: func(id *rdmacm.CMID) error { return c.e.setup(id, &o) },
		})
		if err != nil {
			t.Fatal(err)
		}
		c.e.id = id
		if err := <-accepted; err != nil {
			t.Fatal(err)
		}
		defer func() {
			c.e.close()
			c.ch.Close()
		}()
	}
	if err := cls[0].srv.PostRecv(recvs[:1]); err == nil {
		t.Error("PostRecv on a QP on an SRQ succeeded; want an error naming the SRQ")
	}
	// Client k sends 3 messages: 6 receives taken from the SRQ's 8, in any interleaving.
	for k, c := range cls {
		wrs := make([]rdmacm.SendWR, 3)
		for i := range wrs {
			copy(c.e.mem.Bytes()[i*64:], pattern(byte(10*k+i), 64))
			wrs[i] = rdmacm.SendWR{ID: uint64(i), Op: rdmacm.OpSend, Flags: rdmacm.FlagSignaled}
			wrs[i].SetSGL(c.e.mem.SGE(i*64, 64))
		}
		if err := c.e.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		pollN(t, c.e.cq, 3, 30*time.Second)
	}
	got := pollN(t, cq, 6, 30*time.Second)
	seen := map[uint64]bool{}
	perQP := map[uint32]int{}
	for _, c := range got {
		if c.Err() != nil || !c.Opcode.IsRecv() || c.ID < 100 || c.ID >= 108 || seen[c.ID] {
			t.Fatalf("SRQ receive %+v (%v)", c, c.Err())
		}
		seen[c.ID] = true
		perQP[c.QPNum]++
		buf := mem.Bytes()[(c.ID-100)*slot:][:64]
		ok := false
		for k := range cls {
			for i := 0; i < 3; i++ {
				if c.QPNum == cls[k].srv.Num() && bytes.Equal(buf, pattern(byte(10*k+i), 64)) {
					ok = true
				}
			}
		}
		if !ok {
			t.Errorf("receive %d on qp %d: data from no message of that QP's client", c.ID, c.QPNum)
		}
	}
	if perQP[cls[0].srv.Num()] != 3 || perQP[cls[1].srv.Num()] != 3 {
		t.Errorf("receives per QP %v; want 3 on each of %d and %d", perQP, cls[0].srv.Num(), cls[1].srv.Num())
	}
	// Closing the SRQ closes the QPs on it first.
	if err := srq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cls[0].srv.PostSend(nil); err != nil {
		t.Fatal(err)
	}
	w := []rdmacm.SendWR{{ID: 1, Op: rdmacm.OpSend}}
	w[0].SetSGL(mem.SGE(0, 16))
	if err := cls[1].srv.PostSend(w); !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("PostSend on a QP of a closed SRQ: %v, want ErrClosed", err)
	}
	for _, c := range cls {
		c.srv.ID().Close()
	}
	cq.Close()
	mem.Close()
	pd.Close()
}

// TestRDMAListenBothFamilies: an IPv6 wildcard listener and an IPv4 one share a port, in
// either order: IPv6 IDs are bound IPv6-only, as the Linux target binds them. Without it
// the IPv6 ID held the port for IPv4 too, and the second bind failed (EADDRINUSE).
func TestRDMAListenBothFamilies(t *testing.T) {
	requireRDMA(t)
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, order := range [][2]netip.Addr{
		{netip.IPv6Unspecified(), netip.IPv4Unspecified()},
		{netip.IPv4Unspecified(), netip.IPv6Unspecified()},
	} {
		first, err := ch.Listen(netip.AddrPortFrom(order[0], 0), 4)
		if err != nil {
			t.Fatalf("listen on %v: %v", order[0], err)
		}
		port := first.LocalAddr().Port()
		second, err := ch.Listen(netip.AddrPortFrom(order[1], port), 4)
		if err != nil {
			t.Errorf("listen on %v port %d after %v: %v", order[1], port, order[0], err)
		} else {
			second.Close()
		}
		first.Close()
	}
}
