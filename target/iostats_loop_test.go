package target_test

import (
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// TestIOAccounting: known I/O through the loop transport shows in Namespaces (by class,
// bytes, errors by status, latency while measured), in Subsystems (connections, commands
// that reached no namespace) and in ConnectRejects; a namespace removed and added again
// counts from zero.
func TestIOAccounting(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20), memNS(2, 1<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	_ = admin
	io := e.ioConnect(1, cntlid, 16)
	e.ioConnect(2, cntlid, 16)

	buf := make([]byte, 4096)
	for range 3 {
		cmd := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
		expectOK(t, "write", io.do(&cmd, buf))
	}
	e.tgt.MeasureLatency(true)
	for range 5 {
		cmd := rw(nvmeproto.OpRead, 1, 8, 8, 4096)
		expectOK(t, "read", io.do(&cmd, buf))
	}
	flush := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectOK(t, "flush", io.do(&flush, nil))
	e.tgt.MeasureLatency(false)
	oob := rw(nvmeproto.OpRead, 1, 1<<20, 8, 4096) // beyond the namespace
	expect(t, "read out of range", io.do(&oob, buf), nvmeproto.StatusLBAOutOfRange)
	wz := rw(nvmeproto.OpWriteZeroes, 2, 0, 8, 0)
	expectOK(t, "write zeroes", io.do(&wz, nil))
	bad := rw(nvmeproto.OpRead, 9, 0, 8, 4096) // no such namespace
	expect(t, "read of nsid 9", io.do(&bad, buf), nvmeproto.StatusInvalidNamespace)

	nss := e.tgt.Namespaces()
	if len(nss) != 2 {
		t.Fatalf("namespaces %+v", nss)
	}
	n1, n2 := nss[0], nss[1]
	type cnt struct{ cmds, errs, bytes, timed uint64 }
	got := func(c target.IOCounters) cnt { return cnt{c.Commands, c.Errors, c.Bytes, c.Latency.Count} }
	for _, c := range []struct {
		ns   target.NamespaceInfo
		cl   target.IOClass
		want cnt
	}{
		{n1, target.IORead, cnt{6, 1, 5 * 4096, 5}},
		{n1, target.IOWrite, cnt{3, 0, 3 * 4096, 0}},
		{n1, target.IOFlush, cnt{1, 0, 0, 1}},
		{n1, target.IOOther, cnt{}},
		{n2, target.IOOther, cnt{1, 0, 0, 0}},
		{n2, target.IORead, cnt{}},
	} {
		if g := got(c.ns.IO[c.cl]); g != c.want {
			t.Errorf("namespace %d %v: %+v, want %+v", c.ns.NSID, c.cl, g, c.want)
		}
	}
	if n1.ReadCommands != 5 || n1.WriteCommands != 3 || n1.ReadBytes != 5*4096 || n1.WriteBytes != 3*4096 {
		t.Errorf("SMART counters %+v", n1)
	}
	h := n1.IO[target.IORead].Latency
	var sum uint64
	for _, b := range h.Buckets {
		sum += b
	}
	if sum != h.Count || h.Sum <= 0 || h.Sum > 5*time.Second {
		t.Errorf("read latency %+v", h)
	}
	if len(n1.Errors) != 1 || n1.Errors[0] != (target.ErrorCount{Class: target.IORead, Status: nvmeproto.StatusLBAOutOfRange, Count: 1}) {
		t.Errorf("errors %+v", n1.Errors)
	}

	subs := e.tgt.Subsystems()
	if len(subs) != 2 || subs[0].NQN != subNQN || subs[1].NQN != nvmeproto.DiscoveryNQN || !subs[1].Discovery {
		t.Fatalf("subsystems %+v", subs)
	}
	if s := subs[0]; s.Controllers != 1 || s.AdminQueues != 1 || s.IOQueues != 2 ||
		len(s.IOErrors) != 1 || s.IOErrors[0] != (target.ErrorCount{Class: target.IORead, Status: nvmeproto.StatusInvalidNamespace, Count: 1}) {
		t.Errorf("subsystem %+v", s)
	}

	// Refused queues, by reason.
	h2 := e.dial(32)
	expect(t, "connect to an unknown subsystem", h2.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN+"x", hostNQN),
		nvmeproto.StatusConnectInvalidParameters)
	h3 := e.dial(16)
	expect(t, "connect to an unknown controller", h3.connect(1, 15, 0, cntlid+7, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters)
	r := e.tgt.ConnectRejects()
	if r[target.RejectUnknownSubsystem] != 1 || r[target.RejectInvalidParameters] != 1 || r[target.RejectHostNotAllowed] != 0 {
		t.Errorf("connect rejects %v", r)
	}
	if target.RejectUnknownSubsystem.String() != "unknown_subsystem" || target.IOFlush.String() != "flush" {
		t.Errorf("names %v %v", target.RejectUnknownSubsystem, target.IOFlush)
	}

	// Removed: its counters go with it; added again: from zero.
	if err := e.tgt.RemoveNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	if nss := e.tgt.Namespaces(); len(nss) != 1 || nss[0].NSID != 2 {
		t.Fatalf("after the removal: %+v", nss)
	}
	if err := e.tgt.AddNamespace(subNQN, memNS(1, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if nss := e.tgt.Namespaces(); len(nss) != 2 || nss[0].NSID != 1 || nss[0].IO[target.IORead].Commands != 0 || len(nss[0].Errors) != 0 {
		t.Fatalf("added again: %+v", nss)
	}
}
