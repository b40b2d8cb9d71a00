package target_test

import (
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// hostKeys gives each listed host NQN its keys on subNQN; other hosts have none.
type hostKeys map[string]*dhchap.HostKeys

func (k hostKeys) HostKeys(sub, host string) (*dhchap.HostKeys, bool) {
	if sub != subNQN {
		return nil, false
	}
	return k[host], false
}

// heldDH holds the target's DH exponentiations (dhchap.SetControllerDHHook) until
// released: each reports its group on entered, then waits. The hook is removed, and
// every held computation let go, when the test ends; a test that closes queues in its
// cleanups (dial) defers release too, so that a command held in the computation does not
// keep its queue's Close waiting before the hook's cleanup runs.
type heldDH struct {
	entered chan nvmeproto.AuthDHGroupID
	mu      sync.Mutex
	gate    chan struct{} // closed: computations pass
}

func holdDH(t *testing.T) *heldDH {
	h := &heldDH{entered: make(chan nvmeproto.AuthDHGroupID, 64), gate: make(chan struct{})}
	restore := dhchap.SetControllerDHHook(func(g nvmeproto.AuthDHGroupID) {
		h.entered <- g
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
