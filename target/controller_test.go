package target_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

func waitDone(t testing.TB, h *hostQueue, within time.Duration) error {
	t.Helper()
	select {
	case <-h.conn.Done():
		return h.conn.Err()
	case <-time.After(within):
		t.Fatalf("queue not torn down within %v", within)
	}
	return nil
}

func TestKeepAliveExpiry(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 500)
	q := e.ioConnect(1, cntlid, 8)
	start := time.Now()
	var silent time.Time
	// Traffic keeps the controller alive (TBKAS): I/O only, for three timeouts.
	for time.Since(start) < 1200*time.Millisecond {
		silent = time.Now()
		f := sglCmd(nvmeproto.OpFlush, 1, 0)
		expectOK(t, "flush", q.do(&f, nil))
		time.Sleep(40 * time.Millisecond)
	}
	// Silence: the controller fails between KATO and 1.5 KATO later, all queues go.
	if err := waitDone(t, admin, 5*time.Second); !errors.Is(err, target.ErrKeepAliveExpired) {
		t.Fatalf("admin queue: %v, want keep alive expired", err)
	}
	if d := time.Since(silent); d < 500*time.Millisecond {
		t.Errorf("expired after %v, before KATO", d)
	}
	if err := waitDone(t, q, time.Second); !errors.Is(err, target.ErrKeepAliveExpired) {
		t.Fatalf("I/O queue: %v, want keep alive expired", err)
	}
	f := sglCmd(nvmeproto.OpFlush, 1, 0)
	if err := q.conn.Submit(&f, nil, func(nvmeproto.Completion) {}); err == nil {
		t.Error("submit on a torn down queue succeeded")
	}
	// The controller is gone: its cntlid no longer accepts I/O queues.
	waitFor(t, func() bool {
		h := e.dial(8)
		defer h.conn.Close()
		return h.connect(1, 7, 0, cntlid, subNQN, hostNQN).Status.Code() == nvmeproto.StatusConnectInvalidParameters.Code()
	})
}

// TestKeepAliveExpiresWithIOStuck: the timer fires even when every command is stuck in
// the backend and the host sends nothing more.
func TestKeepAliveExpiresWithIOStuck(t *testing.T) {
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), gatedBackend(g))
	t.Cleanup(g.open)
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 200)
	q := e.ioConnect(1, cntlid, 8)
	var pending []<-chan nvmeproto.Completion
	for i := range 8 {
		w := rw(nvmeproto.OpWrite, 1, uint64(i), 1, 512)
		pending = append(pending, q.submit(&w, make([]byte, 512)))
	}
	g.waitBlocked(t, 1)
	if err := waitDone(t, admin, 2*time.Second); !errors.Is(err, target.ErrKeepAliveExpired) {
		t.Fatalf("admin queue: %v", err)
	}
	waitDone(t, q, time.Second)
	g.open()
	for _, ch := range pending { // in-flight commands still complete
		expectOK(t, "stuck write", wait(t, ch))
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestControllerReset: CC.EN 1→0 with I/O in flight drops the I/O queues, keeps CSTS.RDY
// until the in-flight commands completed, and the host can enable and connect again.
func TestControllerReset(t *testing.T) {
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), gatedBackend(g))
	t.Cleanup(g.open)
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	aerCh := admin.submit(&aer, nil)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	inflight := q.submit(&w, pattern(512, 1))
	g.waitBlocked(t, 1)

	expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4))))
	if err := waitDone(t, q, time.Second); !errors.Is(err, target.ErrControllerReset) {
		t.Fatalf("I/O queue: %v, want controller reset", err)
	}
	expect(t, "AER at reset", wait(t, aerCh), nvmeproto.StatusAbortSQDeletion)
	v, _ := admin.propGet(nvmeproto.PropCSTS, false)
	if !nvmeproto.CSTS(v).RDY() {
		t.Fatal("CSTS.RDY cleared while a command was still in flight")
	}
	g.open()
	expectOK(t, "in-flight write", wait(t, inflight))
	waitFor(t, func() bool {
		v, _ := admin.propGet(nvmeproto.PropCSTS, false)
		return !nvmeproto.CSTS(v).RDY()
	})
	// Commands need an enabled controller again.
	_, c := admin.identify(nvmeproto.CNSController, 0, 0)
	expect(t, "identify while disabled", c, nvmeproto.StatusCommandSequenceError)
	admin.enable()
	q2 := e.ioConnect(1, cntlid, 8)
	r := rw(nvmeproto.OpRead, 1, 0, 1, 512)
	got := make([]byte, 512)
	expectOK(t, "read after reset", q2.do(&r, got))
	if !bytes.Equal(got, pattern(512, 1)) {
		t.Error("write completed before the reset is not there")
	}
}

// TestTimestampRestartsAtReset: a Controller Level Reset sets the Timestamp feature to 0
// with origin 000b, whether it was counting from the previous reset or from a value the
// host set; it then counts from the reset, not from when the controller was created.
func TestTimestampRestartsAtReset(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	readTS := func() nvmeproto.Timestamp {
		t.Helper()
		b, c := admin.getFeature(0x0E, 0, 0, nvmeproto.TimestampSize)
		expectOK(t, "get timestamp", c)
		var ts nvmeproto.Timestamp
		ts.Unmarshal(b)
		return ts
	}
	// reset runs CC.EN 1→0→1 and returns when it was asked for.
	reset := func() time.Time {
		t.Helper()
		at := time.Now()
		expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4))))
		waitFor(t, func() bool {
			v, _ := admin.propGet(nvmeproto.PropCSTS, false)
			return !nvmeproto.CSTS(v).RDY()
		})
		admin.enable()
		return at
	}
	check := func(name string, since time.Time) {
		t.Helper()
		ts := readTS()
		// The controller reset after the test asked for it, so the value cannot exceed the
		// time since; counted from anything earlier it would include the 100 ms slept.
		if elapsed := uint64(time.Since(since).Milliseconds()); ts.Origin != nvmeproto.TimestampOriginReset || ts.Millis > elapsed {
			t.Errorf("%s: timestamp %d ms origin %d, want at most %d ms origin 0 (since the reset)", name, ts.Millis, ts.Origin, elapsed)
		}
	}
	time.Sleep(100 * time.Millisecond)
	check("after a reset", reset())

	tb := make([]byte, nvmeproto.TimestampSize)
	(&nvmeproto.Timestamp{Millis: 1_700_000_000_000}).Marshal(tb)
	expectOK(t, "set timestamp", admin.setFeature(0x0E, 0, tb))
	if ts := readTS(); ts.Origin != nvmeproto.TimestampOriginHost || ts.Millis < 1_700_000_000_000 {
		t.Fatalf("timestamp %+v after Set Features", ts)
	}
	time.Sleep(100 * time.Millisecond)
	check("after a reset following Set Features", reset())
}

// TestShutdown: CC.SHN drains I/O, flushes the backends and reports SHST complete.
func TestShutdown(t *testing.T) {
	ss := &spies{}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20), memNS(2, 1<<20)), spyBackends(ss, nil, 0))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write", q.do(&w, pattern(4096, 2)))
	before := ss.get(0).flushes.Load() + ss.get(1).flushes.Load()

	cc := nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithSHN(nvmeproto.CCSHNNormal)
	expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(cc)))
	waitFor(t, func() bool {
		v, _ := admin.propGet(nvmeproto.PropCSTS, false)
		return nvmeproto.CSTS(v).SHST() == nvmeproto.CSTSSHSTComplete
	})
	if after := ss.get(0).flushes.Load() + ss.get(1).flushes.Load(); after < before+2 {
		t.Errorf("backends flushed %d times at shutdown, want both", after-before)
	}
	if err := waitDone(t, q, time.Second); !errors.Is(err, target.ErrControllerShutdown) {
		t.Fatalf("I/O queue: %v, want shutdown", err)
	}
	// No new I/O queues until a reset.
	h := e.dial(8)
	expect(t, "I/O connect after shutdown", h.connect(1, 7, 0, cntlid, subNQN, hostNQN), nvmeproto.StatusCommandSequenceError)
}

// TestKeepAliveStopsAtShutdown: from a shutdown notification the keep-alive timer does
// not run — the host that shut the controller down sends no more keep-alives, and a Set
// Features Keep Alive Timer meanwhile does not start it — and it runs again once CC.SHN
// returns to 0. The old code kept the timer running: the idle controller failed with
// keep alive expired after its shutdown.
func TestKeepAliveStopsAtShutdown(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	const kato = 300 // ms: an idle controller fails 300..450 ms after the last command
	admin, _ := e.adminConnect(subNQN, hostNQN, kato)
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal))))
	waitFor(t, func() bool {
		v, _ := admin.propGet(nvmeproto.PropCSTS, false)
		return nvmeproto.CSTS(v).SHST() == nvmeproto.CSTSSHSTComplete
	})
	expectOK(t, "Set Features Keep Alive Timer after the shutdown", admin.setFeature(0x0F, kato, nil))
	select {
	case <-admin.conn.Done():
		t.Fatalf("idle controller torn down after its shutdown: %v", admin.conn.Err())
	case <-time.After(4 * kato * time.Millisecond):
	}
	expectOK(t, "CC.SHN=0, EN=0", admin.propSet(nvmeproto.PropCC, uint32(base)))
	if err := waitDone(t, admin, 10*kato*time.Millisecond); !errors.Is(err, target.ErrKeepAliveExpired) {
		t.Fatalf("idle controller after CC.SHN=0: %v, want keep alive expired", err)
	}
}

// TestShutdownReservedSHN: a Property Set of CC with SHN 11b (reserved) is refused with
// Invalid Field in Command and changes nothing: no shutdown starts, the I/O queues stay.
// The old code took it for a shutdown notification.
func TestShutdownReservedSHN(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	cc := nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)
	expect(t, "CC.SHN=11b", admin.propSet(nvmeproto.PropCC, uint32(cc.WithSHN(3))), nvmeproto.StatusInvalidField)
	time.Sleep(50 * time.Millisecond)
	if v, c := admin.propGet(nvmeproto.PropCC, false); c.Status.Success() && nvmeproto.CC(v) != cc {
		t.Errorf("CC %v after the refused write, want %v", nvmeproto.CC(v), cc)
	}
	if v, _ := admin.propGet(nvmeproto.PropCSTS, false); nvmeproto.CSTS(v).SHST() != nvmeproto.CSTSSHSTNormal || !nvmeproto.CSTS(v).RDY() {
		t.Errorf("CSTS %v after the refused write, want RDY and no shutdown", nvmeproto.CSTS(v))
	}
	f := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectOK(t, "flush on the I/O queue after the refused write", q.do(&f, nil))
}

// TestShutdownIdleTearsDown: after a shutdown the controller lives as long as the host
// sends commands (it polls CSTS.SHST), however long, and is torn down with
// ErrShutdownIdle once the host has sent nothing for the shutdown idle timeout
// (shutdownIdleFactor × max(KATO, floor); here 4 × 300 ms): a host that vanished after
// its shutdown does not leave its controller for ever. The old code stopped the timer at
// CC.SHN: the controller stayed.
func TestShutdownIdleTearsDown(t *testing.T) {
	defer target.SetShutdownIdleFloor(50 * time.Millisecond)()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	const kato = 300 // ms: shutdown idle timeout 1.2 s, torn down 1.2..1.8 s after the last command
	admin, _ := e.adminConnect(subNQN, hostNQN, kato)
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal))))
	// The host polls CSTS for longer than the timeout: every poll keeps the controller.
	for end := time.Now().Add(3 * kato * 4 * time.Millisecond / 2); time.Now().Before(end); {
		_, c := admin.propGet(nvmeproto.PropCSTS, false)
		expectOK(t, "Property Get CSTS after the shutdown", c)
		time.Sleep(100 * time.Millisecond)
	}
	last := time.Now()
	if err := waitDone(t, admin, 10*time.Second); !errors.Is(err, target.ErrShutdownIdle) {
		t.Fatalf("idle controller after its shutdown: %v, want %v", err, target.ErrShutdownIdle)
	}
	if d := time.Since(last); d < 4*kato*time.Millisecond-150*time.Millisecond {
		t.Errorf("torn down %v after the host's last command; the shutdown idle timeout is %v", d, 4*kato*time.Millisecond)
	}
}

// TestResetWithShutdown: a reset (CC.EN 1→0) and a shutdown notification (CC.SHN) written
// together, or one while the other drains, both wait for every command in flight: SHST
// does not read complete, nor RDY clear, while a write is still in the backend, and both
// get there once it completes. The old code let the second cancel the first's completion
// (RDY stayed 1 for good, a later enable was ignored) and reported SHST complete, with
// the backends flushed, while the write was still in flight.
func TestResetWithShutdown(t *testing.T) {
	base := nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4)
	csts := func(admin *hostQueue) nvmeproto.CSTS {
		v, c := admin.propGet(nvmeproto.PropCSTS, false)
		expectOK(t, "CSTS", c)
		return nvmeproto.CSTS(v)
	}
	for _, tc := range []struct {
		name   string
		writes []nvmeproto.CC // CC values written in order, the write blocked in the backend
		shst   uint8          // SHST once the write completed
	}{
		{"EN=0 and SHN in one write", []nvmeproto.CC{base.WithSHN(nvmeproto.CCSHNNormal)}, nvmeproto.CSTSSHSTComplete},
		{"EN=0, then SHN", []nvmeproto.CC{base, base.WithSHN(nvmeproto.CCSHNNormal)}, nvmeproto.CSTSSHSTComplete},
		{"SHN, then EN=0", []nvmeproto.CC{base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal), base.WithSHN(nvmeproto.CCSHNNormal)}, nvmeproto.CSTSSHSTComplete},
		{"SHN, then withdrawn", []nvmeproto.CC{base.WithEN(true).WithSHN(nvmeproto.CCSHNNormal), base.WithEN(true)}, nvmeproto.CSTSSHSTNormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			e := newEnv(t, baseConfig(memNS(1, 1<<20)), gatedBackend(g))
			t.Cleanup(g.open)
			admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
			q := e.ioConnect(1, cntlid, 8)
			w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
			inflight := q.submit(&w, pattern(512, 3))
			g.waitBlocked(t, 1)
			for _, cc := range tc.writes {
				expectOK(t, "CC "+cc.String(), admin.propSet(nvmeproto.PropCC, uint32(cc)))
			}
			time.Sleep(100 * time.Millisecond)
			if st := csts(admin); st.SHST() == nvmeproto.CSTSSHSTComplete || (!tc.writes[len(tc.writes)-1].EN() && !st.RDY()) {
				t.Fatalf("CSTS %#x (RDY %v, SHST %d) while a write is still in flight", uint32(st), st.RDY(), st.SHST())
			}
			g.open()
			expectOK(t, "in-flight write", wait(t, inflight))
			last := tc.writes[len(tc.writes)-1]
			waitFor(t, func() bool {
				st := csts(admin)
				return st.SHST() == tc.shst && st.RDY() == last.EN()
			})
			time.Sleep(50 * time.Millisecond)
			if st := csts(admin); st.SHST() != tc.shst || st.RDY() != last.EN() {
				t.Fatalf("CSTS %#x (RDY %v, SHST %d) after the drain, want RDY %v SHST %d", uint32(st), st.RDY(), st.SHST(), last.EN(), tc.shst)
			}
			if !last.EN() { // the controller can be enabled again
				expectOK(t, "CC.EN=1", admin.propSet(nvmeproto.PropCC, uint32(base.WithEN(true))))
				waitFor(t, func() bool { return csts(admin).RDY() })
			}
		})
	}
}

// TestNamespaceChangeAEN: adding and removing a namespace completes an outstanding AER
// with Namespace Attribute Changed, lists the NSID in the Changed Namespace List, and
// masks further events until that log is read.
func TestNamespaceChangeAEN(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	expectOK(t, "AEC", admin.setFeature(0x0B, 1<<8, nil))
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ch := admin.submit(&aer, nil)

	if err := e.tgt.AddNamespace(subNQN, memNS(5, 1<<20)); err != nil {
		t.Fatal(err)
	}
	c := wait(t, ch)
	expectOK(t, "AER", c)
	if ev := nvmeproto.AsyncEvent(c.DW0); ev != nvmeproto.EventNamespaceAttrChanged {
		t.Fatalf("event %v", ev)
	}
	// Masked until the log is read: another change does not complete the next AER.
	aer2 := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ch2 := admin.submit(&aer2, nil)
	if err := e.tgt.AddNamespace(subNQN, memNS(6, 1<<20)); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch2:
		t.Fatalf("AER completed while the event was masked: %+v", c)
	case <-time.After(50 * time.Millisecond):
	}
	buf, c := admin.getLog(0x04, nvmeproto.NSIDAll, 0, 4096, 0, false)
	expectOK(t, "changed namespace list", c)
	var l nvmeproto.ChangedNSList
	l.Unmarshal(buf)
	if len(l) != 2 || l[0] != 5 || l[1] != 6 {
		t.Fatalf("changed namespaces %v, want [5 6]", l)
	}
	buf, _ = admin.getLog(0x04, nvmeproto.NSIDAll, 0, 4096, 0, false)
	if l.Unmarshal(buf); len(l) != 0 {
		t.Fatalf("changed namespace list not cleared by reading: %v", l)
	}
	// The new namespace works.
	w := rw(nvmeproto.OpWrite, 5, 0, 1, 512)
	expectOK(t, "write to the new namespace", q.do(&w, pattern(512, 4)))
	list, _ := admin.identify(nvmeproto.CNSActiveNSList, 0, 0)
	var ids nvmeproto.NSIDList
	ids.Unmarshal(list)
	if len(ids) != 3 {
		t.Errorf("active namespaces %v", ids)
	}

	// Removal: unmasked again, the AER completes; I/O to it fails.
	if err := e.tgt.RemoveNamespace(subNQN, 5); err != nil {
		t.Fatal(err)
	}
	c = wait(t, ch2)
	if nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventNamespaceAttrChanged {
		t.Fatalf("event on removal %#x", c.DW0)
	}
	expect(t, "write to the removed namespace", q.do(&w, pattern(512, 4)), nvmeproto.StatusInvalidNamespace)
	buf, _ = admin.getLog(0x04, nvmeproto.NSIDAll, 0, 4096, 0, false)
	if l.Unmarshal(buf); len(l) != 1 || l[0] != 5 {
		t.Fatalf("changed namespaces %v, want [5]", l)
	}
	if err := e.tgt.AddNamespace(subNQN, memNS(1, 1<<20)); !errors.Is(err, target.ErrNamespaceExists) {
		t.Errorf("adding an existing NSID: %v", err)
	}
	if err := e.tgt.RemoveNamespace(subNQN, 42); !errors.Is(err, target.ErrNoSuchNamespace) {
		t.Errorf("removing a missing NSID: %v", err)
	}
	// An event raised with no AER outstanding is delivered by the next AER.
	if err := e.tgt.AddNamespace(subNQN, memNS(7, 1<<20)); err != nil {
		t.Fatal(err)
	}
	aer3 := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	if c := admin.do(&aer3, nil); nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventNamespaceAttrChanged {
		t.Fatalf("queued event %#x", c.DW0)
	}
}

// TestDiscoveryGenctr: the discovery log generation counter changes when the set of
// entries changes, and discovery controllers that enabled it get a log change event.
func TestDiscoveryGenctr(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	if _, err := e.tgt.AddPort(target.PortConfig{TrType: target.TrTypeRDMA, AdrFam: target.AdrFamIPv4,
		TrAddr: "10.99.0.1", TrSvcID: "4420", Advertise: true, Keyed: true}); err != nil {
		t.Fatal(err)
	}
	admin, _ := e.adminConnect(nvmeproto.DiscoveryNQN, hostNQN, 0)
	header := func() nvmeproto.DiscoveryLogHeader {
		t.Helper()
		b, c := admin.getLog(0x70, 0, 0, 1024, 0, false)
		expectOK(t, "discovery log", c)
		var h nvmeproto.DiscoveryLogHeader
		h.Unmarshal(b)
		return h
	}
	h0 := header()
	if h0.NumRec != 1 {
		t.Fatalf("numrec %d", h0.NumRec)
	}
	expectOK(t, "AEC discovery change", admin.setFeature(0x0B, 1<<31, nil))
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ch := admin.submit(&aer, nil)

	sub2 := conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true, Namespaces: []conf.Namespace{memNS(1, 1<<20)}}
	if err := e.tgt.AddSubsystem(sub2); err != nil {
		t.Fatal(err)
	}
	c := wait(t, ch)
	if nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventDiscoveryLogChange {
		t.Fatalf("event %#x", c.DW0)
	}
	h1 := header()
	if h1.GenCtr == h0.GenCtr || h1.NumRec != 2 {
		t.Fatalf("after adding a subsystem: genctr %d→%d numrec %d", h0.GenCtr, h1.GenCtr, h1.NumRec)
	}
	// Taking this host off the allow list removes the entry and changes genctr.
	if err := e.tgt.SetAllowedHosts(sub2.NQN, false, []string{otherNQN}); err != nil {
		t.Fatal(err)
	}
	h2 := header()
	if h2.GenCtr == h1.GenCtr || h2.NumRec != 1 {
		t.Fatalf("after changing hosts: genctr %d→%d numrec %d", h1.GenCtr, h2.GenCtr, h2.NumRec)
	}
	if err := e.tgt.RemoveSubsystem(sub2.NQN); err != nil {
		t.Fatal(err)
	}
	if h3 := header(); h3.GenCtr == h2.GenCtr {
		t.Fatal("genctr unchanged after removing a subsystem")
	}
	// Port-local entries only (LSP bit 0): this controller came in over the loop port,
	// which is not advertised.
	b, c := admin.getLog(0x70, 0, 0, 1024, 1, false)
	expectOK(t, "discovery log PLEO", c)
	var h nvmeproto.DiscoveryLogHeader
	h.Unmarshal(b)
	if h.NumRec != 0 {
		t.Errorf("port local entries: %d, want 0", h.NumRec)
	}
}

// TestTeardown: Disconnect on an I/O queue, closing the admin queue, and removing the
// subsystem each tear down what they should.
func TestTeardown(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q1 := e.ioConnect(1, cntlid, 8)
	q2 := e.ioConnect(2, cntlid, 8)

	d := sglCmd(nvmeproto.OpFabrics, uint32(nvmeproto.FabricsDisconnect), 0)
	d.NSID = uint32(nvmeproto.FabricsDisconnect)
	// On the admin queue Disconnect is refused (it deletes an I/O queue), and nothing ends.
	expect(t, "disconnect on the admin queue", admin.do(&d, nil), nvmeproto.StatusInvalidQueueType)
	_, c := admin.identify(nvmeproto.CNSController, 0, 0)
	expectOK(t, "identify after the refused disconnect", c)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expectOK(t, "I/O after the refused disconnect", q1.do(&w, pattern(512, 4)))
	expectOK(t, "disconnect", q1.do(&d, nil))
	if err := waitDone(t, q1, time.Second); !errors.Is(err, target.ErrDisconnectCommand) {
		t.Fatalf("after Disconnect: %v", err)
	}
	// The qid is free again.
	waitFor(t, func() bool {
		h := e.dial(8)
		ok := h.connect(1, 7, 0, cntlid, subNQN, hostNQN).Status.Success()
		h.conn.Close()
		return ok
	})

	// Admin queue gone: the association ends, I/O queues go.
	admin.conn.Close()
	if err := waitDone(t, q2, time.Second); !errors.Is(err, target.ErrAdminQueueGone) {
		t.Fatalf("I/O queue after the admin queue closed: %v", err)
	}

	// Removing the subsystem fails its controllers.
	admin2, cntlid2 := e.adminConnect(subNQN, hostNQN, 0)
	q3 := e.ioConnect(1, cntlid2, 8)
	if err := e.tgt.RemoveSubsystem(subNQN); err != nil {
		t.Fatal(err)
	}
	waitDone(t, admin2, time.Second)
	waitDone(t, q3, time.Second)
	h := e.dial(32)
	expect(t, "connect to a removed subsystem", h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN), nvmeproto.StatusConnectInvalidParameters)
}
