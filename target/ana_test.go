package target_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

// anaConfig: namespace 1 in ANA group 1, namespaces 2 and 3 in group 2, namespace 4 in
// group 7.
func anaConfig() *conf.Config {
	cfg := baseConfig(memNS(1, 1<<20), memNS(2, 1<<20), memNS(3, 1<<20), memNS(4, 1<<20))
	ns := cfg.Subsystems[0].Namespaces
	ns[1].ANAGroup, ns[2].ANAGroup, ns[3].ANAGroup = 2, 2, 7
	return cfg
}

// secondPort registers another loop port (another listener) with e's target.
func (e *env) secondPort(o loop.Options) *env {
	e.t.Helper()
	p, err := loop.New(e.tgt, o)
	if err != nil {
		e.t.Fatalf("loop.New: %v", err)
	}
	e.t.Cleanup(func() { p.Close() })
	return &env{t: e.t, tgt: e.tgt, port: p}
}

// anaLog reads the whole ANA log page (the host's buffer size, as the Linux host does,
// in one command) and decodes it; rgo asks for groups only.
func anaLog(t *testing.T, admin *hostQueue, rgo, rae bool) (nvmeproto.ANALog, []byte) {
	t.Helper()
	var lsp uint8
	if rgo {
		lsp = nvmeproto.LSPANARGO
	}
	b, c := admin.getLog(uint8(nvmeproto.LIDANA), nvmeproto.NSIDAll, 0, conf.ANALogMaxSize+4-conf.ANALogMaxSize%4, lsp, rae)
	expectOK(t, "get log page ANA", c)
	var l nvmeproto.ANALog
	if err := l.Unmarshal(b); err != nil {
		t.Fatalf("ANA log: %v", err)
	}
	return l, b
}

type wantGroup struct {
	id    uint32
	state nvmeproto.ANAState
	nsids []uint32
}

func checkGroups(t *testing.T, l nvmeproto.ANALog, want ...wantGroup) {
	t.Helper()
	if len(l.Groups) != len(want) {
		t.Fatalf("ANA log has %d groups %+v, want %d", len(l.Groups), l.Groups, len(want))
	}
	for i, w := range want {
		g := l.Groups[i]
		if g.GroupID != w.id || g.State != w.state || len(g.NSIDs) != len(w.nsids) {
			t.Errorf("group %d: %+v, want id %d state %v nsids %v", i, g, w.id, w.state, w.nsids)
			continue
		}
		for j := range w.nsids {
			if g.NSIDs[j] != w.nsids[j] {
				t.Errorf("group %d: nsids %v, want %v", w.id, g.NSIDs, w.nsids)
				break
			}
		}
	}
}

// TestANAIdentify checks the Identify fields the Linux host needs to enable ANA
// (nvme_mpath_init_identify: CMIC.ANA, 0 < MNAN <= NN, and a log of 16 + NANAGRPID × 32
// + MNAN × 4 bytes no larger than MDTS) and the namespaces' group IDs.
func TestANAIdentify(t *testing.T) {
	e := newEnv(t, anaConfig())
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	id := admin.identifyController()
	if id.CMIC != nvmeproto.CMICMultiPort|nvmeproto.CMICMultiCtrl|nvmeproto.CMICANA {
		t.Errorf("CMIC %#x", id.CMIC)
	}
	// Every state, and not "ANAGRPID static": SetNamespaceANAGroup changes it.
	if id.ANACAP != 0x1F || id.ANATT != 10 || id.ANAGRPMAX != 128 || id.NANAGRPID != 128 {
		t.Errorf("ANACAP %#x ANATT %d ANAGRPMAX %d NANAGRPID %d", id.ANACAP, id.ANATT, id.ANAGRPMAX, id.NANAGRPID)
	}
	if id.MNAN == 0 || id.MNAN > id.NN || id.MNAN != 1024 {
		t.Errorf("MNAN %d NN %d", id.MNAN, id.NN)
	}
	if id.OAES&nvmeproto.OAESANAChange == 0 {
		t.Errorf("OAES %#x lacks ANA change notices", id.OAES)
	}
	if logSize := 16 + int(id.NANAGRPID)*32 + int(id.MNAN)*4; logSize != conf.ANALogMaxSize || logSize > 4096<<id.MDTS {
		t.Errorf("the host's ANA log buffer (%d bytes) does not fit MDTS %d", logSize, id.MDTS)
	}
	for nsid, group := range map[uint32]uint32{1: 1, 2: 2, 3: 2, 4: 7} {
		b, c := admin.identify(nvmeproto.CNSNamespace, nsid, 0)
		expectOK(t, "identify namespace", c)
		var ns nvmeproto.IdentifyNamespace
		if err := ns.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		if ns.ANAGRPID != group || ns.NMIC != nvmeproto.NMICShared {
			t.Errorf("namespace %d: ANAGRPID %d NMIC %#x, want group %d, shared", nsid, ns.ANAGRPID, ns.NMIC, group)
		}
		b, c = admin.identify(nvmeproto.CNSCSIndependentNamespace, nsid, 0)
		expectOK(t, "identify I/O command set independent namespace", c)
		var ind nvmeproto.IdentifyNamespaceIndependent
		if err := ind.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		if ind.ANAGRPID != group || ind.NMIC != nvmeproto.NMICShared {
			t.Errorf("namespace %d (CNS 08h): ANAGRPID %d NMIC %#x", nsid, ind.ANAGRPID, ind.NMIC)
		}
	}
	// The discovery controller has no ANA.
	disc, _ := e.adminConnect(nvmeproto.DiscoveryNQN, hostNQN, 0)
	id = disc.identifyController()
	if id.CMIC != 0 || id.ANACAP != 0 || id.MNAN != 0 || id.OAES&nvmeproto.OAESANAChange != 0 {
		t.Errorf("discovery controller: CMIC %#x ANACAP %#x MNAN %d OAES %#x", id.CMIC, id.ANACAP, id.MNAN, id.OAES)
	}
}

// TestANALogPage: the log lists every group a namespace is in and every group set on the
// controller's port, in ID order, with the port's states and the NSIDs in ascending
// order; RGO leaves the NSID lists out; the offset is honoured; log page 0Ch is listed as
// supported.
func TestANALogPage(t *testing.T) {
	var states [conf.MaxANAGroup + 1]conf.ANAState
	states[2], states[9] = conf.ANAInaccessible, conf.ANANonOptimized
	cfg := anaConfig()
	e := newEnv(t, cfg)
	e = e.secondPort(loop.Options{ANAStates: states})
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)

	l, raw := anaLog(t, admin, false, false)
	if l.ChangeCount != 0 {
		t.Errorf("change count %d before any change", l.ChangeCount)
	}
	checkGroups(t, l,
		wantGroup{1, nvmeproto.ANAOptimized, []uint32{1}},
		wantGroup{2, nvmeproto.ANAInaccessible, []uint32{2, 3}},
		wantGroup{7, nvmeproto.ANAOptimized, []uint32{4}},
		wantGroup{9, nvmeproto.ANANonOptimized, nil}) // set on the port, no namespace
	size := 16 + 4*32 + 4*4
	for i, b := range raw[size:] {
		if b != 0 {
			t.Fatalf("byte %d past the log's %d bytes is %#x, want zero fill", size+i, size, b)
		}
	}
	if n := binary.LittleEndian.Uint16(raw[8:]); n != 4 {
		t.Errorf("NGRPS %d", n)
	}

	// Groups only: 16-byte header and 32-byte descriptors with NNSIDS 0.
	l, raw = anaLog(t, admin, true, false)
	checkGroups(t, l,
		wantGroup{1, nvmeproto.ANAOptimized, nil}, wantGroup{2, nvmeproto.ANAInaccessible, nil},
		wantGroup{7, nvmeproto.ANAOptimized, nil}, wantGroup{9, nvmeproto.ANANonOptimized, nil})
	if raw[16+4*32] != 0 || binary.LittleEndian.Uint32(raw[16+32:]) != 2 {
		t.Errorf("RGO log: %x", raw[:16+4*32+4])
	}

	// Header first, then the rest from an offset, as hosts read large pages.
	hdr, c := admin.getLog(uint8(nvmeproto.LIDANA), nvmeproto.NSIDAll, 0, 16, 0, false)
	expectOK(t, "ANA log header", c)
	rest, c := admin.getLog(uint8(nvmeproto.LIDANA), nvmeproto.NSIDAll, 16, size-16, 0, false)
	expectOK(t, "ANA log from offset 16", c)
	whole, _ := anaLog(t, admin, false, false)
	var again nvmeproto.ANALog
	if err := again.Unmarshal(append(hdr, rest...)); err != nil || len(again.Groups) != len(whole.Groups) {
		t.Errorf("log read in two parts: %v %+v", err, again)
	}

	// nvme-cli reads 4 KiB at a time up to the largest size the log can have (8208
	// bytes): past the entries it reads zeroes; past that size the offset is invalid.
	tail, c := admin.getLog(uint8(nvmeproto.LIDANA), nvmeproto.NSIDAll, 8192, 16, 0, false)
	expectOK(t, "ANA log at offset 8192", c)
	for _, x := range tail {
		if x != 0 {
			t.Fatalf("ANA log at offset 8192: %x, want zeroes", tail)
		}
	}
	_, c = admin.getLog(uint8(nvmeproto.LIDANA), nvmeproto.NSIDAll, 8212, 4, 0, false)
	expect(t, "ANA log past its largest size", c, nvmeproto.StatusInvalidField)

	b, c := admin.getLog(uint8(nvmeproto.LIDSupportedLogPages), 0, 0, nvmeproto.SupportedLogPagesSize, 0, false)
	expectOK(t, "supported log pages", c)
	if binary.LittleEndian.Uint32(b[4*0x0C:])&1 == 0 {
		t.Error("log page 0Ch is not listed as supported")
	}
}

// TestANAStatusPerState: I/O for a namespace whose group is inaccessible, in persistent
// loss or in change on the controller's port completes with the Asymmetric Access status
// of that state, without DNR (the Linux host only fails commands over when DNR is clear);
// other groups and admin commands are unaffected; the error log records the failure.
func TestANAStatusPerState(t *testing.T) {
	e := newEnv(t, anaConfig())
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 16)
	p := e.port.Target()
	for _, tc := range []struct {
		state conf.ANAState
		want  nvmeproto.Status
	}{
		{conf.ANAOptimized, nvmeproto.StatusSuccess},
		{conf.ANANonOptimized, nvmeproto.StatusSuccess},
		{conf.ANAInaccessible, nvmeproto.StatusANAInaccessible},
		{conf.ANAPersistentLoss, nvmeproto.StatusANAPersistentLoss},
		{conf.ANAChange, nvmeproto.StatusANATransition},
	} {
		if err := p.SetANAState(context.Background(), 2, tc.state); err != nil {
			t.Fatal(err)
		}
		if got := p.ANAState(2); got != tc.state {
			t.Errorf("ANAState(2) = %q after setting %q", got, tc.state)
		}
		w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
		r := rw(nvmeproto.OpRead, 3, 0, 1, 512)
		f := sglCmd(nvmeproto.OpFlush, 2, 0)
		for what, cmd := range map[string]*nvmeproto.Command{"write": &w, "read": &r, "flush": &f} {
			var data []byte
			if cmd.Opcode != nvmeproto.OpFlush {
				data = make([]byte, 512)
			}
			c := q.do(cmd, data)
			if c.Status.Code() != tc.want.Code() || c.Status.DNR() {
				t.Errorf("%s: %s in group 2 completed with %v, want %v without DNR", tc.state, what, c.Status, tc.want)
			}
			if !tc.want.Success() && c.Status.SCT() != nvmeproto.SCTPathRelated {
				t.Errorf("%s: SCT %d, want 3 (path related)", tc.state, c.Status.SCT())
			}
		}
		// Group 1 stays optimized.
		w1 := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
		expectOK(t, string(tc.state)+": write in group 1", q.do(&w1, make([]byte, 512)))
		_, c := admin.identify(nvmeproto.CNSNamespace, 2, 0)
		expectOK(t, string(tc.state)+": identify namespace 2", c)
	}
	b, c := admin.getLog(uint8(nvmeproto.LIDErrorInfo), 0, 0, nvmeproto.ErrorInfoEntrySize, 0, false)
	expectOK(t, "error log", c)
	var ei nvmeproto.ErrorInfoEntry
	if err := ei.Unmarshal(b); err != nil || ei.Status.Code() != nvmeproto.StatusANATransition.Code() || (ei.NSID != 2 && ei.NSID != 3) {
		t.Errorf("newest error log entry %+v (%v), want ANA Transition on nsid 2 or 3 (group 2)", ei, err)
	}
}

// TestANAPerPort: each controller reports its own port's states and is refused I/O by
// them only.
func TestANAPerPort(t *testing.T) {
	var a, b [conf.MaxANAGroup + 1]conf.ANAState
	a[2], b[2] = conf.ANAOptimized, conf.ANAInaccessible
	e := newEnv(t, anaConfig())
	ea, eb := e.secondPort(loop.Options{ANAStates: a}), e.secondPort(loop.Options{ANAStates: b})
	adminA, ca := ea.adminConnect(subNQN, hostNQN, 0)
	adminB, cb := eb.adminConnect(subNQN, hostNQN, 0)
	la, _ := anaLog(t, adminA, true, false)
	lb, _ := anaLog(t, adminB, true, false)
	if la.Groups[1].State != nvmeproto.ANAOptimized || lb.Groups[1].State != nvmeproto.ANAInaccessible {
		t.Errorf("group 2: port A %v, port B %v", la.Groups[1].State, lb.Groups[1].State)
	}
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	expectOK(t, "write through A", ea.ioConnect(1, ca, 8).do(&w, make([]byte, 512)))
	w = rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	expect(t, "write through B", eb.ioConnect(1, cb, 8).do(&w, make([]byte, 512)), nvmeproto.StatusANAInaccessible)
}

// TestANAChangeEvent: a state change raises an ANA Change event on the controllers of
// that port only, bumps the change count (header and the group's descriptor); the event
// stays masked until the host reads the log without RAE; a host that disabled ANA change
// notices gets none; setting the state a group has already changes nothing.
func TestANAChangeEvent(t *testing.T) {
	e := newEnv(t, anaConfig())
	other := e.secondPort(loop.Options{})
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	otherAdmin, _ := other.adminConnect(subNQN, hostNQN, 0)
	p := e.port.Target()
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev := admin.submit(&aer, nil)
	oaer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	oev := otherAdmin.submit(&oaer, nil)

	if err := p.SetANAState(context.Background(), 2, conf.ANAInaccessible); err != nil {
		t.Fatal(err)
	}
	c := wait(t, ev)
	expectOK(t, "AER", c)
	if nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventANAChange {
		t.Fatalf("event %v, want ANA change (notice 03h, log 0Ch)", nvmeproto.AsyncEvent(c.DW0))
	}
	select {
	case c := <-oev:
		t.Fatalf("the controller of the other port got event %v", nvmeproto.AsyncEvent(c.DW0))
	case <-time.After(50 * time.Millisecond):
	}
	l, _ := anaLog(t, admin, false, true) // RAE: the event stays masked
	if l.ChangeCount != 1 || l.Groups[1].ChangeCount != 1 || l.Groups[0].ChangeCount != 0 {
		t.Errorf("change counts: header %d, group 1 %d, group 2 %d; want 1, 0, 1", l.ChangeCount, l.Groups[0].ChangeCount, l.Groups[1].ChangeCount)
	}
	aer = sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev = admin.submit(&aer, nil)
	if err := p.SetANAState(context.Background(), 2, conf.ANAChange); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ev:
		t.Fatalf("a masked event was reported: %v", nvmeproto.AsyncEvent(c.DW0))
	case <-time.After(50 * time.Millisecond):
	}
	l, _ = anaLog(t, admin, false, false) // unmasks
	if l.ChangeCount != 2 || l.Groups[1].State != nvmeproto.ANAChange {
		t.Errorf("after the second change: count %d, state %v", l.ChangeCount, l.Groups[1].State)
	}
	if err := p.SetANAState(context.Background(), 2, conf.ANAChange); err != nil { // no change
		t.Fatal(err)
	}
	select {
	case c := <-ev:
		t.Fatalf("setting the same state raised %v", nvmeproto.AsyncEvent(c.DW0))
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.SetANAState(context.Background(), 2, conf.ANAOptimized); err != nil {
		t.Fatal(err)
	}
	c = wait(t, ev)
	if nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventANAChange {
		t.Fatalf("event %v after unmasking", nvmeproto.AsyncEvent(c.DW0))
	}
	if l, _ = anaLog(t, admin, false, false); l.ChangeCount != 3 {
		t.Errorf("change count %d, want 3", l.ChangeCount)
	}

	// ANA change notices disabled: no event.
	expectOK(t, "AEC namespace attribute only", admin.setFeature(0x0B, uint32(nvmeproto.AECNamespaceAttr), nil))
	aer = sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev = admin.submit(&aer, nil)
	if err := p.SetANAState(context.Background(), 2, conf.ANAInaccessible); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ev:
		t.Fatalf("a disabled event was reported: %v", nvmeproto.AsyncEvent(c.DW0))
	case <-time.After(50 * time.Millisecond):
	}
}

// TestANANamespaceChanges: a namespace added at run time in a new group shows in the log
// with that group, and the change count goes up.
func TestANANamespaceChanges(t *testing.T) {
	e := newEnv(t, anaConfig())
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	l, _ := anaLog(t, admin, false, false)
	before := l.ChangeCount
	ns := memNS(5, 1<<20)
	ns.ANAGroup = 40
	if err := e.tgt.AddNamespace(subNQN, ns); err != nil {
		t.Fatal(err)
	}
	l, _ = anaLog(t, admin, false, false)
	if l.ChangeCount <= before || len(l.Groups) != 4 || l.Groups[3].GroupID != 40 || l.Groups[3].NSIDs[0] != 5 || l.Groups[3].ChangeCount != l.ChangeCount {
		t.Errorf("after adding namespace 5 in group 40: %+v", l)
	}
	if err := e.tgt.RemoveNamespace(subNQN, 5); err != nil {
		t.Fatal(err)
	}
	if l, _ = anaLog(t, admin, false, false); len(l.Groups) != 3 {
		t.Errorf("after removing namespace 5: %+v", l)
	}
	bad := memNS(6, 1<<20)
	bad.ANAGroup = 200
	if err := e.tgt.AddNamespace(subNQN, bad); err == nil {
		t.Error("a namespace in ANA group 200 was added")
	}
}

// TestANANamespaceMove: SetNamespaceANAGroup moves a namespace to another group at once —
// I/O through a port gets the new group's state there, Identify Namespace, the log and
// the configuration show the new group, the change count goes up (the header and both
// groups' descriptors) — and raises an ANA Change event on the subsystem's controllers of
// every port, keeping them and their queues; moving it to its own group changes nothing;
// a bad group or an unknown namespace is refused with nothing changed.
func TestANANamespaceMove(t *testing.T) {
	var states [conf.MaxANAGroup + 1]conf.ANAState
	states[7] = conf.ANAInaccessible
	e := newEnv(t, anaConfig()) // every group optimized
	ep := e.secondPort(loop.Options{ANAStates: states})
	admin, cntlid := ep.adminConnect(subNQN, hostNQN, 0)
	otherAdmin, _ := e.adminConnect(subNQN, otherNQN, 0)
	io := ep.ioConnect(1, cntlid, 8)
	before, _ := anaLog(t, admin, false, false)
	aer, oaer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0), sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev, oev := admin.submit(&aer, nil), otherAdmin.submit(&oaer, nil)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expectOK(t, "write in group 1", io.do(&w, make([]byte, 512)))

	if err := e.tgt.SetNamespaceANAGroup(context.Background(), subNQN, 1, 7); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan nvmeproto.Completion{"this port": ev, "the other port": oev} {
		if c := wait(t, ch); nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventANAChange {
			t.Errorf("the controller of %s got event %v, want ANA change", name, nvmeproto.AsyncEvent(c.DW0))
		}
	}
	w = rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expect(t, "write in group 7 (inaccessible on this port)", io.do(&w, make([]byte, 512)), nvmeproto.StatusANAInaccessible)
	l, _ := anaLog(t, admin, false, false)
	if l.ChangeCount <= before.ChangeCount {
		t.Errorf("change count %d, %d before the move", l.ChangeCount, before.ChangeCount)
	}
	// Group 1, now empty and not set on this port, is no longer listed.
	checkGroups(t, l, wantGroup{2, nvmeproto.ANAOptimized, []uint32{2, 3}}, wantGroup{7, nvmeproto.ANAInaccessible, []uint32{1, 4}})
	if l.Groups[1].ChangeCount != l.ChangeCount {
		t.Errorf("group 7's change count %d, want the header's %d", l.Groups[1].ChangeCount, l.ChangeCount)
	}
	if ol, _ := anaLog(t, otherAdmin, false, false); len(ol.Groups) != 2 || ol.Groups[0].GroupID != 2 || ol.Groups[1].GroupID != 7 ||
		ol.Groups[1].ChangeCount != l.ChangeCount || ol.Groups[1].State != nvmeproto.ANAOptimized {
		t.Errorf("the other port's log: %+v", ol.Groups)
	}
	b, c := admin.identify(nvmeproto.CNSNamespace, 1, 0)
	expectOK(t, "identify namespace 1", c)
	var id nvmeproto.IdentifyNamespace
	if err := id.Unmarshal(b); err != nil || id.ANAGRPID != 7 {
		t.Errorf("Identify Namespace ANAGRPID %d (%v), want 7", id.ANAGRPID, err)
	}
	if g := e.tgt.Config().Subsystems[0].Namespaces[0].ANAGroup; g != 7 {
		t.Errorf("the configuration's ana_group %d, want 7", g)
	}

	// Its own group: no event, no count.
	aer = sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev = admin.submit(&aer, nil)
	if err := e.tgt.SetNamespaceANAGroup(context.Background(), subNQN, 1, 7); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ev:
		t.Fatalf("moving a namespace to its own group raised %v", nvmeproto.AsyncEvent(c.DW0))
	case <-time.After(50 * time.Millisecond):
	}
	if again, _ := anaLog(t, admin, false, true); again.ChangeCount != l.ChangeCount {
		t.Errorf("change count %d after moving a namespace to its own group, want %d", again.ChangeCount, l.ChangeCount)
	}

	running := e.tgt.Config().String()
	for _, tc := range []struct {
		sub     string
		nsid, g uint32
		want    error
	}{
		{subNQN, 1, 0, target.ErrInvalidANA},
		{subNQN, 1, conf.MaxANAGroup + 1, target.ErrInvalidANA},
		{subNQN, 9, 2, target.ErrNoSuchNamespace},
		{"nqn.2024-01.io.gonvmf:none", 1, 2, target.ErrNoSuchSubsystem},
	} {
		if err := e.tgt.SetNamespaceANAGroup(context.Background(), tc.sub, tc.nsid, tc.g); !errors.Is(err, tc.want) {
			t.Errorf("SetNamespaceANAGroup(%q, %d, %d) = %v, want %v", tc.sub, tc.nsid, tc.g, err, tc.want)
		}
	}
	if got := e.tgt.Config().String(); got != running {
		t.Errorf("a refused move changed the configuration:\n%s", got)
	}
	w = rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expect(t, "write after the refused moves", io.do(&w, make([]byte, 512)), nvmeproto.StatusANAInaccessible)
}

func TestANASetErrors(t *testing.T) {
	e := newEnv(t, anaConfig())
	p := e.port.Target()
	for _, tc := range []struct {
		g  uint32
		st conf.ANAState
	}{{0, conf.ANAOptimized}, {129, conf.ANAOptimized}, {1, "standby"}, {0, ""}} { // "" unsets (TestANAStateUnset)
		if err := p.SetANAState(context.Background(), tc.g, tc.st); !errors.Is(err, target.ErrInvalidANA) {
			t.Errorf("SetANAState(%d, %q) = %v, want ErrInvalidANA", tc.g, tc.st, err)
		}
	}
	var bad [conf.MaxANAGroup + 1]conf.ANAState
	bad[3] = "sideways"
	if _, err := loop.New(e.tgt, loop.Options{ANAStates: bad}); !errors.Is(err, target.ErrInvalidANA) {
		t.Errorf("a port with state %q: %v", bad[3], err)
	}
	if err := p.SetANAState(context.Background(), 5, conf.ANAPersistentLoss); err != nil {
		t.Fatal(err)
	}
	if st := p.ANAStates(); st[5] != conf.ANAPersistentLoss || st[1] != "" {
		t.Errorf("ANAStates: %q", st[:6])
	}
}

// TestControllerIDRange: controllers get IDs from the subsystem's cntlid_min..cntlid_max
// only; when all are taken a Connect gets Controller Busy; a freed ID is handed out again.
func TestControllerIDRange(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Subsystems[0].CNTLIDMin, cfg.Subsystems[0].CNTLIDMax = 0x8000, 0x8002
	e := newEnv(t, cfg)
	var ids []uint16
	var first *hostQueue
	for i := range 3 {
		h, id := e.adminConnect(subNQN, hostNQN, 0)
		if i == 0 {
			first = h
		}
		ids = append(ids, id)
		b, c := h.identify(nvmeproto.CNSController, 0, 0)
		expectOK(t, "identify", c)
		if got := binary.LittleEndian.Uint16(b[78:]); got != id {
			t.Errorf("Identify CNTLID %#x, Connect gave %#x", got, id)
		}
	}
	if ids[0] != 0x8000 || ids[1] != 0x8001 || ids[2] != 0x8002 {
		t.Errorf("controller IDs %#x, want 0x8000..0x8002", ids)
	}
	h := e.dial(32)
	c := h.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, hostNQN)
	expect(t, "fourth controller", c, nvmeproto.StatusConnectControllerBusy)
	first.conn.Close()
	waitFor(t, func() bool {
		h := e.dial(32)
		c := h.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, hostNQN)
		id, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
		return c.Status.Success() && id == 0x8000
	})
}

// TestANAStateUnset: setting a group's state to "" unsets it: it reports optimized, is no
// longer in the port's states (the running configuration), and the ANA log lists it only
// while a namespace is in it.
func TestANAStateUnset(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	p := e.port.Target()
	if err := p.SetANAState(context.Background(), 5, conf.ANAInaccessible); err != nil {
		t.Fatal(err)
	}
	if st := p.ANAStates(); st[5] != conf.ANAInaccessible {
		t.Fatalf("group 5 after setting it: %q", st[5])
	}
	if err := p.SetANAState(context.Background(), 5, ""); err != nil {
		t.Fatal(err)
	}
	if st := p.ANAStates(); st[5] != "" {
		t.Errorf("group 5 after unsetting it: %q, want not set", st[5])
	}
	l, _ := anaLog(t, admin, false, false)
	for _, g := range l.Groups {
		if g.GroupID == 5 {
			t.Errorf("the ANA log lists group 5 (no namespace in it, not set): %+v", g)
		}
	}
}
