package target_test

import (
	"context"
	"crypto/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// hostKeys gives each listed host NQN its keys on subNQN; other hosts have none.
type hostKeys map[string]*dhchap.HostKeys

func (k hostKeys) HostAuth(sub, host string) (authenticates, required bool) {
	return sub == subNQN && k[host] != nil, false
}

func (k hostKeys) HostKeys(_ context.Context, sub, host string) (*dhchap.HostKeys, error) {
	if sub != subNQN {
		return nil, nil
	}
	return k[host], nil
}

// heldDH holds the target's DH exponentiations (dhchap.SetControllerDHHook) until
// released: each reports its group on entered, then waits (only those of the groups given
// to holdDH, if any; the others go on). The hook is removed, and
// every held computation let go, when the test ends; a test that closes queues in its
// cleanups (dial) defers release too, so that a command held in the computation does not
// keep its queue's Close waiting before the hook's cleanup runs.
type heldDH struct {
	entered chan nvmeproto.AuthDHGroupID
	mu      sync.Mutex
	gate    chan struct{} // closed: computations pass
}

func holdDH(t *testing.T, groups ...nvmeproto.AuthDHGroupID) *heldDH {
	h := &heldDH{entered: make(chan nvmeproto.AuthDHGroupID, 64), gate: make(chan struct{})}
	restore := dhchap.SetControllerDHHook(func(g nvmeproto.AuthDHGroupID) {
		h.entered <- g
		if len(groups) > 0 && !slices.Contains(groups, g) {
			return
		}
		h.mu.Lock()
		gate := h.gate
		h.mu.Unlock()
		<-gate
	})
	t.Cleanup(func() {
		h.release()
		restore()
	})
	return h
}

// release lets the held computations, and all that follow, through.
func (h *heldDH) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.gate:
	default:
		close(h.gate)
	}
}

// hold makes the computations that start from now on wait again.
func (h *heldDH) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gate = make(chan struct{})
}

// wait waits for the next computation to start and returns its group.
func (h *heldDH) wait(t *testing.T) nvmeproto.AuthDHGroupID {
	t.Helper()
	select {
	case g := <-h.entered:
		return g
	case <-time.After(10 * time.Second):
		t.Fatal("no DH computation started within 10 s")
	}
	panic("unreachable")
}

// authSend and authReceive run Authentication Send of msg and Authentication Receive of up
// to 4 KiB; the latter returns the message received.
func (h *hostQueue) authSend(msg []byte) nvmeproto.Completion {
	h.t.Helper()
	cmd := authCmd(true, len(msg))
	return h.do(&cmd, msg)
}

func (h *hostQueue) authReceive() ([]byte, nvmeproto.Completion) {
	h.t.Helper()
	buf := make([]byte, 4096)
	cmd := authCmd(false, len(buf))
	c := h.do(&cmd, buf)
	return buf, c
}

// finishAuth runs the rest of host's transaction on h after its Negotiate succeeded:
// Challenge, Reply, Success1 (and Success2 when bidirectional).
func (h *hostQueue) finishAuth(host *dhchap.Host) {
	h.t.Helper()
	ch, c := h.authReceive()
	expectOK(h.t, "Authentication Receive (Challenge)", c)
	reply, err := host.Challenge(ch)
	if err != nil {
		h.t.Fatalf("host: %v", err)
	}
	expectOK(h.t, "Authentication Send (Reply)", h.authSend(reply))
	s1, c := h.authReceive()
	expectOK(h.t, "Authentication Receive (Success1)", c)
	s2, err := host.Success1(s1)
	if err != nil {
		h.t.Fatalf("host: %v", err)
	}
	if s2 != nil {
		expectOK(h.t, "Authentication Send (Success2)", h.authSend(s2))
	}
}

// TestAuthBlockedInDHRunsOffTransport: an authentication transaction whose DH computation
// takes long (held here; ffdhe8192 takes tens of milliseconds of a CPU) does not hold the
// goroutine that executed its Authentication Send — a transport's receive loop, which
// serves other hosts' queues too — on an admin queue nor on an I/O queue. Meanwhile
// another host's I/O and Keep Alive complete, and so does the authenticating host's Keep
// Alive on its authenticated admin queue; the transaction completes once the
// computation does. The old code ran Authentication Send inline: Submit did not return
// until the computation did.
func TestAuthBlockedInDHRunsOffTransport(t *testing.T) {
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	keys := hostKeys{otherNQN: {Host: key, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}}
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithAuthKeys(keys))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0) // no keys: no authentication
	io := e.ioConnect(1, cntlid, 8)
	dh := holdDH(t)
	defer dh.release()
	hostCfg := dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}
	ka := nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive, Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}

	// The admin queue's Negotiate, held in the target's DH key generation.
	authAdmin := e.dial(32)
	c := authAdmin.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, otherNQN)
	expectOK(t, "admin connect of the authenticating host", c)
	authCntlid, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0)
	if atr != nvmeproto.AuthReqATR {
		t.Fatalf("Connect AUTHREQ %#x, want ATR", atr)
	}
	host, _ := dhchap.NewHost(hostCfg, 1)
	neg := host.Negotiate()
	done := submitDataOffGoroutine(t, authAdmin, authCmd(true, len(neg)), neg, 5*time.Second)
	if g := dh.wait(t); g != nvmeproto.AuthDHGroupFFDHE2048 {
		t.Fatalf("DH computation in group %v, want %v", g, nvmeproto.AuthDHGroupFFDHE2048)
	}
	wr := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write of another host while an admin queue's authentication computes", io.do(&wr, make([]byte, 4096)))
	expectOK(t, "Keep Alive of another host while an admin queue's authentication computes", admin.do(&ka, nil))
	select {
	case c := <-done:
		t.Fatalf("Authentication Send completed (status %v) while its DH computation was held", c.Status)
	default:
	}
	dh.release()
	expectOK(t, "Authentication Send (Negotiate)", wait(t, done))
	authAdmin.finishAuth(host)
	authAdmin.enable()

	// An I/O queue's Negotiate, held likewise.
	authIO := e.dial(8)
	c = authIO.connect(1, 7, 0, authCntlid, subNQN, otherNQN)
	expectOK(t, "I/O connect of the authenticating host", c)
	if _, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0); atr != nvmeproto.AuthReqATR {
		t.Fatalf("I/O Connect AUTHREQ %#x, want ATR", atr)
	}
	for len(dh.entered) > 0 { // the admin queue's shared secret
		<-dh.entered
	}
	dh.hold()
	host, _ = dhchap.NewHost(hostCfg, 2)
	neg = host.Negotiate()
	done = submitDataOffGoroutine(t, authIO, authCmd(true, len(neg)), neg, 5*time.Second)
	dh.wait(t)
	expectOK(t, "write of another host while an I/O queue's authentication computes", io.do(&wr, make([]byte, 4096)))
	expectOK(t, "Keep Alive on the admin queue while its I/O queue's authentication computes", authAdmin.do(&ka, nil))
	select {
	case c := <-done:
		t.Fatalf("Authentication Send on the I/O queue completed (status %v) while its DH computation was held", c.Status)
	default:
	}
	dh.release()
	expectOK(t, "Authentication Send (Negotiate) on the I/O queue", wait(t, done))
	authIO.finishAuth(host)
	rd := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	expectOK(t, "read on the authenticated I/O queue", authIO.do(&rd, make([]byte, 4096)))
}

// TestAuthHostHoldsHalfTheSlots: one host cannot occupy every authentication slot. With
// two slots, a host's two admin queues each start a transaction; while the first one's
// DH computation is held, the second waits for its host's only slot (it does not start a
// computation), and another host's transaction runs in the slot left and completes. Once
// the computation returns, the waiting transaction runs too: it waited, it was not
// refused. The old code bounded the slots in all only: the second queue of the first
// host took the second slot, and the other host waited for the first host's computations.
func TestAuthHostHoldsHalfTheSlots(t *testing.T) {
	defer target.SetAuthSlots(2)()
	const thirdNQN = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-000000000000"
	keyA, _ := dhchap.GenerateSecret(rand.Reader, 0, 32)
	keyB, _ := dhchap.GenerateSecret(rand.Reader, 0, 32)
	// Host A's transactions compute in ffdhe2048, which is held; host B's in ffdhe3072.
	keys := hostKeys{
		otherNQN: {Host: keyA, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}},
		thirdNQN: {Host: keyB, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE3072}},
	}
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithAuthKeys(keys))
	dh := holdDH(t, nvmeproto.AuthDHGroupFFDHE2048)
	defer dh.release()
	connect := func(host string) *hostQueue {
		h := e.dial(32)
		c := h.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, host)
		expectOK(t, "admin connect", c)
		if _, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0); atr != nvmeproto.AuthReqATR {
			t.Fatalf("Connect AUTHREQ %#x, want ATR", atr)
		}
		return h
	}
	negotiate := func(q *hostQueue, host *dhchap.Host) <-chan nvmeproto.Completion {
		neg := host.Negotiate()
		return submitDataOffGoroutine(t, q, authCmd(true, len(neg)), neg, 5*time.Second)
	}
	cfgA := dhchap.HostConfig{Secret: keyA, HostNQN: otherNQN, SubNQN: subNQN}
	a1, a2 := connect(otherNQN), connect(otherNQN)
	hostA1, _ := dhchap.NewHost(cfgA, 1)
	hostA2, _ := dhchap.NewHost(cfgA, 2)

	doneA1 := negotiate(a1, hostA1)
	if g := dh.wait(t); g != nvmeproto.AuthDHGroupFFDHE2048 {
		t.Fatalf("DH computation in group %v, want host A's %v", g, nvmeproto.AuthDHGroupFFDHE2048)
	}
	doneA2 := negotiate(a2, hostA2)
	select {
	case g := <-dh.entered:
		t.Errorf("host A's second transaction started a DH computation (%v) while its first held its only slot", g)
	case <-time.After(300 * time.Millisecond):
	}

	b := connect(thirdNQN)
	hostB, _ := dhchap.NewHost(dhchap.HostConfig{Secret: keyB, HostNQN: thirdNQN, SubNQN: subNQN}, 1)
	doneB := negotiate(b, hostB)
	select {
	case c := <-doneB:
		expectOK(t, "host B's Authentication Send (Negotiate) while host A's computation is held", c)
	case <-time.After(10 * time.Second):
		t.Fatal("host B's Negotiate did not complete while host A's computation was held: host A holds every slot")
	}
	b.finishAuth(hostB)
	for _, c := range []<-chan nvmeproto.Completion{doneA1, doneA2} {
		select {
		case c := <-c:
			t.Fatalf("host A's Negotiate completed (status %v) while its computation was held", c.Status)
		default:
		}
	}

	dh.release()
	expectOK(t, "host A's first Authentication Send (Negotiate)", wait(t, doneA1))
	expectOK(t, "host A's second Authentication Send (Negotiate), which waited for a slot", wait(t, doneA2))
	a1.finishAuth(hostA1)
	a2.finishAuth(hostA2)
	for _, q := range []*hostQueue{a1, a2, b} {
		if _, c := q.propGet(nvmeproto.PropVS, false); c.Status.Code() != 0 {
			t.Errorf("Property Get on an authenticated queue: %v", c.Status)
		}
	}
}

// TestAuthWaitForSlotIsKeepAliveActivity: a controller whose admin queue's AUTH_Negotiate
// waits for an authentication slot, or computes in one, is not failed on keep-alive,
// however long that lasts: the host waits for the answer and sends nothing else (the
// Linux host authenticates its admin queue inside its Connect, before it sends Keep
// Alive). With one slot per host, a host's two controllers (KATO 300 ms) each start a
// transaction; the first one's DH computation is held for four KATOs while the second
// waits for the host's slot. Both controllers stay connected, and both transactions then
// complete and authenticate their queues. The old code counted only the arrival of the
// Authentication Send: both controllers failed on keep-alive 300 to 450 ms later.
func TestAuthWaitForSlotIsKeepAliveActivity(t *testing.T) {
	defer target.SetAuthSlots(2)()
	const kato = 300 // ms
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	keys := hostKeys{otherNQN: {Host: key, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}}
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithAuthKeys(keys))
	dh := holdDH(t)
	defer dh.release()
	cfg := dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}
	start := func(tid uint16) (*hostQueue, *dhchap.Host, <-chan nvmeproto.Completion) {
		q := e.dial(32)
		c := q.connect(0, 31, kato, nvmeproto.CNTLIDDynamic, subNQN, otherNQN)
		expectOK(t, "admin connect", c)
		if _, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0); atr != nvmeproto.AuthReqATR {
			t.Fatalf("Connect AUTHREQ %#x, want ATR", atr)
		}
		host, _ := dhchap.NewHost(cfg, tid)
		neg := host.Negotiate()
		return q, host, submitDataOffGoroutine(t, q, authCmd(true, len(neg)), neg, 5*time.Second)
	}
	computing, hostC, doneC := start(1)
	dh.wait(t)
	waiting, hostW, doneW := start(2)
	select {
	case g := <-dh.entered:
		t.Fatalf("the second controller's transaction started a DH computation (%v) while the first held its host's only slot", g)
	case <-time.After(4 * kato * time.Millisecond):
	}
	for _, q := range []struct {
		what string
		h    *hostQueue
		done <-chan nvmeproto.Completion
	}{{"computing in its slot", computing, doneC}, {"waiting for its host's slot", waiting, doneW}} {
		select {
		case <-q.h.conn.Done():
			t.Errorf("the controller whose AUTH_Negotiate is %s was disconnected after %d ms of KATO %d ms: %v",
				q.what, 4*kato, kato, q.h.conn.Err())
		default:
		}
		select {
		case c := <-q.done:
			t.Errorf("the AUTH_Negotiate %s completed (status %v) while the DH computation was held", q.what, c.Status)
		default:
		}
	}
	if t.Failed() {
		return
	}
	dh.release()
	expectOK(t, "Authentication Send (Negotiate) that computed", wait(t, doneC))
	expectOK(t, "Authentication Send (Negotiate) that waited for a slot", wait(t, doneW))
	computing.finishAuth(hostC)
	waiting.finishAuth(hostW)
	for _, q := range []*hostQueue{computing, waiting} {
		if _, c := q.propGet(nvmeproto.PropVS, false); c.Status.Code() != 0 {
			t.Errorf("Property Get on an authenticated queue: %v", c.Status)
		}
	}
}
