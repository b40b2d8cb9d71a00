package initiator_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

// Cross-checks of in-band authentication between the initiator and the target over the
// loop transport: every hash function × DH group, uni- and bidirectional, wrong keys,
// missing keys, commands before authentication, replayed and truncated messages,
// re-authentication and key rotation.

// authKeys is a target.AuthKeys whose keys the tests change at run time (rotation).
type authKeys struct {
	mu       sync.Mutex
	keys     map[string]*dhchap.HostKeys // by host NQN
	required bool
}

func (a *authKeys) HostAuth(sub, host string) (authenticates, required bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sub != subNQN {
		return false, false
	}
	return a.keys[host] != nil, a.required
}

func (a *authKeys) HostKeys(_ context.Context, sub, host string) (*dhchap.HostKeys, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sub != subNQN {
		return nil, nil
	}
	return a.keys[host], nil
}

func (a *authKeys) set(host string, k *dhchap.HostKeys) {
	a.mu.Lock()
	a.keys[host] = k
	a.mu.Unlock()
}

func genSecret(t testing.TB, h nvmeproto.AuthHashID) *dhchap.Secret {
	t.Helper()
	n := 32
	if h != 0 {
		n = h.Size()
	}
	s, err := dhchap.GenerateSecret(rand.Reader, h, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authEnv(t testing.TB, keys *dhchap.HostKeys) (*env, *authKeys) {
	t.Helper()
	ak := &authKeys{keys: map[string]*dhchap.HostKeys{}}
	if keys != nil {
		ak.keys[hostNQN] = keys
	}
	return newEnv(t, nil, target.WithAuthKeys(ak)), ak
}

// roundTrip writes and reads back a block through every I/O queue.
func roundTrip(t testing.TB, c *initiator.Controller) {
	t.Helper()
	ns := c.Namespaces()[0]
	want := bytes.Repeat([]byte{0xA5}, 4096)
	for i := 0; i < c.IOQueues(); i++ {
		if _, err := ns.WriteAt(context.Background(), want, int64(i)*4096, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4096)
		if _, err := ns.ReadAt(context.Background(), got, int64(i)*4096); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read back: %v", err)
		}
	}
}

func TestAuthMatrix(t *testing.T) {
	groups := []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull, nvmeproto.AuthDHGroupFFDHE2048, nvmeproto.AuthDHGroupFFDHE3072,
		nvmeproto.AuthDHGroupFFDHE4096, nvmeproto.AuthDHGroupFFDHE6144, nvmeproto.AuthDHGroupFFDHE8192}
	if testing.Short() {
		groups = groups[:2]
	}
	for _, hash := range []nvmeproto.AuthHashID{nvmeproto.AuthHashSHA256, nvmeproto.AuthHashSHA384, nvmeproto.AuthHashSHA512} {
		for _, g := range groups {
			for _, bidi := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/bidi=%v", hash, g, bidi), func(t *testing.T) {
					hk, ck := genSecret(t, hash), genSecret(t, 0)
					e, _ := authEnv(t, &dhchap.HostKeys{Host: hk, Ctrl: ck,
						Hashes: []nvmeproto.AuthHashID{hash}, DHGroups: []nvmeproto.AuthDHGroupID{g}})
					c := e.dial(t, func(o *initiator.Options) {
						o.DHCHAPSecret = hk.Encode()
						if bidi {
							o.DHCHAPCtrlSecret = ck.Encode()
						}
					})
					roundTrip(t, c)
				})
			}
		}
	}
}

// dialErr dials and returns the error, which must not be nil.
func dialErr(t *testing.T, e *env, mut func(*initiator.Options)) error {
	t.Helper()
	o := e.options()
	if mut != nil {
		mut(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, o)
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded")
	}
	return err
}

func TestAuthFailures(t *testing.T) {
	hk, ck := genSecret(t, nvmeproto.AuthHashSHA256), genSecret(t, nvmeproto.AuthHashSHA512)
	keys := &dhchap.HostKeys{Host: hk, Ctrl: ck}

	t.Run("wrong host key", func(t *testing.T) {
		e, _ := authEnv(t, keys)
		err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret = genSecret(t, 1).Encode() })
		var ce *initiator.ConnectError
		if !errors.Is(err, initiator.ErrAuthFailed) || !errors.As(err, &ce) || ce.QID != 0 ||
			!strings.Contains(err.Error(), "rejected the authentication (authentication failed)") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("wrong controller key", func(t *testing.T) {
		e, _ := authEnv(t, keys)
		err := dialErr(t, e, func(o *initiator.Options) {
			o.DHCHAPSecret, o.DHCHAPCtrlSecret = hk.Encode(), genSecret(t, 3).Encode()
		})
		if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "controller's response does not match") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("bidirectional without a controller key on the target", func(t *testing.T) {
		e, _ := authEnv(t, &dhchap.HostKeys{Host: hk})
		err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret, o.DHCHAPCtrlSecret = hk.Encode(), ck.Encode() })
		if !errors.Is(err, initiator.ErrAuthFailed) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("no secret on the host", func(t *testing.T) {
		e, _ := authEnv(t, keys)
		err := dialErr(t, e, nil)
		if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "--dhchap-secret") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("subsystem requires authentication, host has no keys", func(t *testing.T) {
		e, ak := authEnv(t, nil)
		ak.required = true
		err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret = hk.Encode() })
		if !errors.Is(err, initiator.ErrHostNotAllowed) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("host secret given, target does not ask", func(t *testing.T) {
		e, _ := authEnv(t, nil)
		c := e.dial(t, func(o *initiator.Options) { o.DHCHAPSecret = hk.Encode() })
		roundTrip(t, c)
	})
	t.Run("controller secret given, target does not ask", func(t *testing.T) {
		// Bidirectional authentication asked for, and a controller that never proves
		// itself: refused, not silently accepted.
		e, _ := authEnv(t, nil)
		err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret, o.DHCHAPCtrlSecret = hk.Encode(), ck.Encode() })
		var ce *initiator.ConnectError
		if !errors.Is(err, initiator.ErrAuthFailed) || !errors.As(err, &ce) || ce.QID != 0 ||
			!strings.Contains(err.Error(), "did not require authentication") || !strings.Contains(err.Error(), "remove the controller secret") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("bad secrets", func(t *testing.T) {
		e, _ := authEnv(t, keys)
		for _, mut := range []func(*initiator.Options){
			func(o *initiator.Options) { o.DHCHAPSecret = "DHHC-1:01:garbage:" },
			func(o *initiator.Options) { o.DHCHAPCtrlSecret = ck.Encode() },
		} {
			if err := dialErr(t, e, mut); !strings.Contains(err.Error(), "dhchap") {
				t.Errorf("%v", err)
			}
		}
	})
}

func TestReauthenticate(t *testing.T) {
	hk := genSecret(t, nvmeproto.AuthHashSHA384)
	e, ak := authEnv(t, &dhchap.HostKeys{Host: hk})
	c := e.dial(t, func(o *initiator.Options) { o.DHCHAPSecret = hk.Encode() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Bidirectional now, same host key: admin and I/O queues re-authenticate.
	ck := genSecret(t, 0)
	ak.set(hostNQN, &dhchap.HostKeys{Host: hk, Ctrl: ck})
	if err := c.Reauthenticate(ctx, "", ck.Encode()); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
	// Key rotation: the target takes the new key; re-authenticating with it works.
	hk2 := genSecret(t, nvmeproto.AuthHashSHA384)
	ak.set(hostNQN, &dhchap.HostKeys{Host: hk2, Ctrl: ck})
	if err := c.Reauthenticate(ctx, hk2.Encode(), ""); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
	// A new connection with the old key fails; with the new one it works.
	if err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret = hk.Encode() }); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Fatal(err)
	}
	roundTrip(t, e.dial(t, func(o *initiator.Options) { o.DHCHAPSecret = hk2.Encode() }))
	// Re-authenticating with the old key fails, and the target drops the controller.
	target.AuthFailureGrace = 200 * time.Millisecond // the host reads the failure first, even on a loaded machine
	defer func() { target.AuthFailureGrace = 2 * time.Second }()
	if err := c.Reauthenticate(ctx, hk.Encode(), ""); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Fatalf("re-authentication with the old key: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("controller still connected 10 s after a failed re-authentication")
	}
}

// rawQueue is a loop queue driven command by command, to send what the initiator never
// would.
type rawQueue struct {
	t    *testing.T
	conn *loop.Conn
	mem  []byte
	cid  uint16
}

func dialRaw(t *testing.T, e *env) *rawQueue {
	t.Helper()
	c, err := e.port.Dial(32)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawQueue{t: t, conn: c, mem: make([]byte, 64<<10)}
}

// exec runs cmd with n bytes of host memory (offset 0) and returns its completion.
func (q *rawQueue) exec(cmd *nvmeproto.Command, n int) nvmeproto.Completion {
	q.t.Helper()
	q.cid++
	cmd.CID = q.cid
	cmd.Flags = nvmeproto.PSDTSGL << 6
	cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: uint32(n)}
	ch := make(chan nvmeproto.Completion, 1)
	if err := q.conn.Submit(cmd, q.mem, func(c nvmeproto.Completion) { ch <- c }); err != nil {
		q.t.Fatal(err)
	}
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		q.t.Fatal("no completion in 10 s")
	}
	return nvmeproto.Completion{}
}

func (q *rawQueue) connect(qid, cntlid uint16) (uint16, uint16) {
	d := nvmeproto.ConnectData{HostID: [16]byte{0: 0x6f, 15: 0x5b}, CNTLID: cntlid, SubNQN: subNQN, HostNQN: hostNQN}
	d.Marshal(q.mem)
	var cmd nvmeproto.Command
	(&nvmeproto.ConnectCommand{QID: qid, SQSize: 15}).ToCommand(&cmd)
	cqe := q.exec(&cmd, nvmeproto.ConnectDataSize)
	if cqe.Status.Code() != 0 {
		q.t.Fatalf("Connect: %v", cqe.Status)
	}
	return nvmeproto.ParseConnectSuccessDW0(cqe.DW0)
}

func (q *rawQueue) send(msg []byte) nvmeproto.Status {
	copy(q.mem, msg)
	var cmd nvmeproto.Command
	(&nvmeproto.AuthSendCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: 1, SPSP1: 1, TL: uint32(len(msg))}).ToCommand(&cmd)
	return q.exec(&cmd, len(msg)).Status
}

func (q *rawQueue) receive(al int) ([]byte, nvmeproto.Status) {
	var cmd nvmeproto.Command
	(&nvmeproto.AuthReceiveCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: 1, SPSP1: 1, AL: uint32(al)}).ToCommand(&cmd)
	st := q.exec(&cmd, al).Status
	return append([]byte(nil), q.mem[:al]...), st
}

func (q *rawQueue) identify() nvmeproto.Status {
	var cmd nvmeproto.Command
	(&nvmeproto.IdentifyCommand{CNS: nvmeproto.CNSController}).ToCommand(&cmd)
	return q.exec(&cmd, nvmeproto.IdentifySize).Status
}

// challenged starts a transaction with h on q: it sends h's Negotiate, takes the
// controller's Challenge and returns h's Reply to it (not sent).
func (q *rawQueue) challenged(h *dhchap.Host) []byte {
	q.t.Helper()
	if st := q.send(h.Negotiate()); st.Code() != 0 {
		q.t.Fatalf("Negotiate: %v", st)
	}
	ch, _ := q.receive(4096)
	reply, err := h.Challenge(ch)
	if err != nil {
		q.t.Fatal(err)
	}
	return reply
}

// authenticate runs a whole transaction with h on q.
func (q *rawQueue) authenticate(h *dhchap.Host) {
	q.t.Helper()
	q.send(q.challenged(h))
	s1, _ := q.receive(4096)
	if s2, err := h.Success1(s1); err != nil {
		q.t.Fatal(err)
	} else if s2 != nil {
		q.send(s2)
	}
}

// negotiateRefused sends h's Negotiate, which the controller must answer with Failure1
// (authentication failed) and then the queue's disconnection; what names the attempt.
func (q *rawQueue) negotiateRefused(h *dhchap.Host, what string) {
	q.t.Helper()
	if st := q.send(h.Negotiate()); st.Code() != 0 {
		q.t.Fatalf("%s's Negotiate: %v", what, st)
	}
	if f, _ := q.receive(4096); !isFailure1(f, nvmeproto.AuthFailFailed) {
		q.t.Fatalf("%s: expected Failure1 (authentication failed), got %x", what, f[:8])
	}
	select {
	case <-q.conn.Done():
		if !errors.Is(q.conn.Err(), target.ErrAuthFailed) {
			q.t.Errorf("disconnected with %v", q.conn.Err())
		}
	case <-time.After(5 * time.Second):
		q.t.Fatalf("queue still connected after %s was refused", what)
	}
}

// propertyGetOK runs a Property Get of CAP, which must succeed: the queue is
// authenticated (what says after what).
func (q *rawQueue) propertyGetOK(what string) {
	q.t.Helper()
	var pg nvmeproto.Command
	(&nvmeproto.PropertyGetCommand{Attrib: 1, Offset: nvmeproto.PropCAP}).ToCommand(&pg)
	if st := q.exec(&pg, 0).Status; st.Code() != 0 {
		q.t.Fatalf("Property Get after %s: %v", what, st)
	}
}

func isFailure1(b []byte, e nvmeproto.AuthFailExplanation) bool {
	var f nvmeproto.AuthFailure
	return f.Unmarshal(b) == nil && f.AuthID == nvmeproto.AuthMsgFailure1 && f.Explanation == e
}

func TestAuthTargetProtocol(t *testing.T) {
	hk := genSecret(t, 0)
	keys := &dhchap.HostKeys{Host: hk, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}
	hostCfg := dhchap.HostConfig{Secret: hk, HostNQN: hostNQN, SubNQN: subNQN}
	authRequired := nvmeproto.StatusAuthRequired.WithDNR()

	t.Run("commands before authentication", func(t *testing.T) {
		e, _ := authEnv(t, keys)
		aq := dialRaw(t, e)
		cntlid, authreq := aq.connect(0, nvmeproto.CNTLIDDynamic)
		if authreq != nvmeproto.AuthReqATR {
			t.Fatalf("AUTHREQ %#x", authreq)
		}
		if st := aq.identify(); st != authRequired {
			t.Errorf("Identify before authentication: %v", st)
		}
		var pg nvmeproto.Command
		(&nvmeproto.PropertyGetCommand{Attrib: 1, Offset: nvmeproto.PropCAP}).ToCommand(&pg)
		if st := aq.exec(&pg, 0).Status; st != authRequired {
			t.Errorf("Property Get before authentication: %v", st)
		}
		h, _ := dhchap.NewHost(hostCfg, 1)
		aq.authenticate(h)
		if st := aq.exec(&pg, 0).Status; st.Code() != 0 {
			t.Fatalf("Property Get after authentication: %v", st)
		}
		// Enable the controller so that I/O queues may connect.
		var ps nvmeproto.Command
		(&nvmeproto.PropertySetCommand{Offset: nvmeproto.PropCC, Value: uint64(nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4))}).ToCommand(&ps)
		if st := aq.exec(&ps, 0).Status; st.Code() != 0 {
			t.Fatalf("Property Set CC: %v", st)
		}
		if st := aq.identify(); st.Code() != 0 {
			t.Fatalf("Identify after authentication: %v", st)
		}
		var sf nvmeproto.Command
		(&nvmeproto.SetFeaturesCommand{FID: nvmeproto.FIDNumberOfQueues, CDW11: uint32(nvmeproto.MakeNumQueues(0, 0))}).ToCommand(&sf)
		aq.exec(&sf, 0)
		// The I/O queue must authenticate on its own.
		iq := dialRaw(t, e)
		if _, authreq := iq.connect(1, cntlid); authreq != nvmeproto.AuthReqATR {
			t.Fatalf("I/O AUTHREQ %#x", authreq)
		}
		var rd nvmeproto.Command
		(&nvmeproto.RWCommand{Opcode: nvmeproto.OpRead, NSID: 1}).ToCommand(&rd)
		if st := iq.exec(&rd, 512).Status; st != authRequired {
			t.Errorf("Read before authentication: %v", st)
		}
		h, _ = dhchap.NewHost(hostCfg, 2)
		iq.authenticate(h)
		if st := iq.exec(&rd, 512).Status; st.Code() != 0 {
			t.Errorf("Read after authentication: %v", st)
		}
	})
	t.Run("command fields", func(t *testing.T) {
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		for name, as := range map[string]nvmeproto.AuthSendCommand{
			"secp": {SECP: 0xEA, SPSP0: 1, SPSP1: 1, TL: 72}, "spsp0": {SECP: 0xE9, SPSP0: 2, SPSP1: 1, TL: 72},
			"spsp1": {SECP: 0xE9, SPSP0: 1, SPSP1: 0, TL: 72}, "tl 0": {SECP: 0xE9, SPSP0: 1, SPSP1: 1},
			"tl 1 MiB": {SECP: 0xE9, SPSP0: 1, SPSP1: 1, TL: 1 << 20},
		} {
			var cmd nvmeproto.Command
			as.ToCommand(&cmd)
			if st := q.exec(&cmd, 72).Status; st != nvmeproto.StatusInvalidField.WithDNR() {
				t.Errorf("%s: %v", name, st)
			}
		}
		var cmd nvmeproto.Command
		(&nvmeproto.AuthSendCommand{SECP: 0xE9, SPSP0: 1, SPSP1: 1, TL: 72}).ToCommand(&cmd)
		if st := q.exec(&cmd, 64).Status; st != nvmeproto.StatusDataSGLLengthInvalid.WithDNR() {
			t.Errorf("TL 72, SGL 64: %v", st)
		}
	})
	t.Run("truncated reply", func(t *testing.T) {
		target.AuthFailureGrace = 50 * time.Millisecond
		defer func() { target.AuthFailureGrace = 2 * time.Second }()
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		h, _ := dhchap.NewHost(hostCfg, 7)
		reply := q.challenged(h)
		if st := q.send(reply[:len(reply)-10]); st.Code() != 0 {
			t.Fatalf("Authentication Send itself failed: %v", st)
		}
		if f, _ := q.receive(4096); !isFailure1(f, nvmeproto.AuthFailIncorrectPayload) {
			t.Fatalf("expected Failure1 (incorrect payload), got %x", f[:8])
		}
		select {
		case <-q.conn.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("queue still connected after the failure")
		}
	})
	t.Run("failures do not keep the queue", func(t *testing.T) {
		// A host that fails, then keeps failing within each grace period and finally
		// completes a transaction, is still disconnected a grace period after its first
		// failure, and its late success does not authenticate the queue.
		const grace = 300 * time.Millisecond
		target.AuthFailureGrace = grace
		defer func() { target.AuthFailureGrace = 2 * time.Second }()
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		h, _ := dhchap.NewHost(hostCfg, 11)
		reply := q.challenged(h)
		start := time.Now()
		q.send(reply[:len(reply)-10]) // a failure
		if f, _ := q.receive(4096); !isFailure1(f, nvmeproto.AuthFailIncorrectPayload) {
			t.Fatalf("expected Failure1, got %x", f[:8])
		}
		time.Sleep(grace / 2)
		q.send(reply[:len(reply)-10]) // another, within the grace
		q.receive(4096)
		h2, _ := dhchap.NewHost(hostCfg, 12) // and a complete transaction
		q.send(q.challenged(h2))
		q.receive(4096)
		select {
		case <-q.conn.Done():
			if d := time.Since(start); d > grace+grace/2+200*time.Millisecond {
				t.Errorf("disconnected %v after the first failure; the grace is %v", d, grace)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("queue still connected 5 s after its first failure")
		}
	})
	t.Run("transactions before authentication are bounded", func(t *testing.T) {
		// Each AUTH_Negotiate costs the target a DH key pair: a queue not authenticated
		// yet gets three, then Failure1 and the disconnection.
		target.AuthFailureGrace = 50 * time.Millisecond
		defer func() { target.AuthFailureGrace = 2 * time.Second }()
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		for i := range 3 {
			h, _ := dhchap.NewHost(hostCfg, uint16(20+i))
			q.challenged(h) // a Challenge, with the target's DH value
		}
		h, _ := dhchap.NewHost(hostCfg, 23)
		q.negotiateRefused(h, "the fourth transaction")
	})
	t.Run("re-authentications are bounded", func(t *testing.T) {
		// Each re-authentication costs the target a DH key pair on the goroutine that
		// serves other queues: an authenticated queue gets four within AuthTimeout, then
		// Failure1 and the disconnection.
		target.AuthFailureGrace = 50 * time.Millisecond
		defer func() { target.AuthFailureGrace = 2 * time.Second }()
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		h, _ := dhchap.NewHost(hostCfg, 40)
		q.authenticate(h)
		for i := range 4 {
			h, _ := dhchap.NewHost(hostCfg, uint16(41+i))
			q.authenticate(h)
			q.propertyGetOK(fmt.Sprintf("re-authentication %d", i+1))
		}
		h, _ = dhchap.NewHost(hostCfg, 45)
		q.negotiateRefused(h, "the fifth re-authentication")
	})
	t.Run("re-authentications are counted within AuthTimeout", func(t *testing.T) {
		// Past AuthTimeout the oldest re-authentication no longer counts.
		defer func() { target.AuthTimeout = 60 * time.Second }()
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		h, _ := dhchap.NewHost(hostCfg, 50)
		q.authenticate(h)
		target.AuthTimeout = 300 * time.Millisecond // for the re-authentications only
		for i := range 8 {
			if i == 4 {
				time.Sleep(400 * time.Millisecond)
			}
			h, _ := dhchap.NewHost(hostCfg, uint16(51+i))
			q.authenticate(h)
			q.propertyGetOK(fmt.Sprintf("re-authentication %d", i+1))
		}
	})
	t.Run("abandoned re-authentication", func(t *testing.T) {
		// A re-authentication the host never finishes is abandoned after AuthTimeout: the
		// queue stays authenticated, and the transaction's late Reply is out of protocol.
		target.AuthFailureGrace = 50 * time.Millisecond
		defer func() { target.AuthTimeout, target.AuthFailureGrace = 60*time.Second, 2*time.Second }()
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		h, _ := dhchap.NewHost(hostCfg, 30)
		q.authenticate(h)
		target.AuthTimeout = 100 * time.Millisecond // for the re-authentication only
		h, _ = dhchap.NewHost(hostCfg, 31)
		reply := q.challenged(h)
		time.Sleep(400 * time.Millisecond)
		q.propertyGetOK("the re-authentication was abandoned")
		q.send(reply)
		if f, _ := q.receive(4096); !isFailure1(f, nvmeproto.AuthFailIncorrectProtocol) {
			t.Fatalf("Reply of the abandoned transaction: expected Failure1 (incorrect protocol message), got %x", f[:8])
		}
	})
	t.Run("replayed reply on another queue", func(t *testing.T) {
		e, _ := authEnv(t, keys)
		a := dialRaw(t, e)
		a.connect(0, nvmeproto.CNTLIDDynamic)
		h, _ := dhchap.NewHost(hostCfg, 9)
		reply := a.challenged(h)
		a.send(reply)
		if s1, _ := a.receive(4096); s1[1] != nvmeproto.AuthMsgSuccess1 {
			t.Fatalf("first queue: %x", s1[:8])
		}
		// An eavesdropper replays the Negotiate and the Reply on its own connection.
		b := dialRaw(t, e)
		b.connect(0, nvmeproto.CNTLIDDynamic)
		b.send(h.Negotiate())
		b.receive(4096)
		b.send(reply)
		if f, _ := b.receive(4096); !isFailure1(f, nvmeproto.AuthFailFailed) && !isFailure1(f, nvmeproto.AuthFailDHGroupUnusable) {
			t.Fatalf("replayed Reply: %x", f[:8])
		}
		if st := b.identify(); st != authRequired {
			t.Errorf("Identify after the replay: %v", st)
		}
	})
	t.Run("authentication timeout", func(t *testing.T) {
		target.AuthTimeout = 100 * time.Millisecond
		defer func() { target.AuthTimeout = 60 * time.Second }()
		e, _ := authEnv(t, keys)
		q := dialRaw(t, e)
		q.connect(0, nvmeproto.CNTLIDDynamic)
		select {
		case <-q.conn.Done():
			if !errors.Is(q.conn.Err(), target.ErrAuthFailed) {
				t.Errorf("disconnected with %v", q.conn.Err())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("unauthenticated queue still connected")
		}
	})
	t.Run("no keys: Authentication Send is an invalid opcode", func(t *testing.T) {
		e, _ := authEnv(t, nil)
		q := dialRaw(t, e)
		if _, authreq := q.connect(0, nvmeproto.CNTLIDDynamic); authreq != 0 {
			t.Fatalf("AUTHREQ %#x without keys", authreq)
		}
		h, _ := dhchap.NewHost(hostCfg, 1)
		if st := q.send(h.Negotiate()); st != nvmeproto.StatusInvalidOpcode.WithDNR() {
			t.Errorf("%v", st)
		}
	})
}

// TestAuthFromConfig: the target takes the hosts' secrets and auth_required from its
// configuration (no AuthKeys given).
func TestAuthFromConfig(t *testing.T) {
	hk, ck := genSecret(t, nvmeproto.AuthHashSHA512), genSecret(t, nvmeproto.AuthHashSHA256)
	e := newEnv(t, func(c *conf.Config) {
		c.Subsystems[0].AuthRequired = true
		c.Hosts = []conf.Host{{NQN: hostNQN, DHCHAPSecret: hk.Encode(), DHCHAPCtrlSecret: ck.Encode(),
			DHCHAPHashes: []string{"sha384"}, DHCHAPDHGroups: []string{"ffdhe4096"}}}
	})
	c := e.dial(t, func(o *initiator.Options) { o.DHCHAPSecret, o.DHCHAPCtrlSecret = hk.Encode(), ck.Encode() })
	roundTrip(t, c)
	if err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret = genSecret(t, 3).Encode() }); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Errorf("wrong key: %v", err)
	}
	other := "nqn.2014-08.org.nvmexpress:uuid:00000000-1111-4222-8333-444444444444"
	if err := dialErr(t, e, func(o *initiator.Options) { o.HostNQN, o.DHCHAPSecret = other, hk.Encode() }); !errors.Is(err, initiator.ErrHostNotAllowed) {
		t.Errorf("host without a secret on an auth_required subsystem: %v", err)
	}
}

// TestAuthKeyFileRotation: rewriting a file: secret rotates the host's key without a
// restart: re-authentication and new connections use the new key; a secret file that
// becomes unusable fails the host's authentication (fails closed) with "authentication
// protocol not usable".
func TestAuthKeyFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "host.key")
	write := func(s *dhchap.Secret, mode os.FileMode) {
		if err := os.WriteFile(path, []byte(s.Encode()+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	old, next := genSecret(t, nvmeproto.AuthHashSHA256), genSecret(t, nvmeproto.AuthHashSHA256)
	write(old, 0o600)
	e := newEnv(t, func(c *conf.Config) {
		c.Hosts = []conf.Host{{NQN: hostNQN, DHCHAPSecret: "file:" + path}}
	})
	c := e.dial(t, func(o *initiator.Options) { o.DHCHAPSecret = old.Encode() })
	write(next, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Reauthenticate(ctx, next.Encode(), ""); err != nil {
		t.Fatalf("re-authentication with the rotated key: %v", err)
	}
	roundTrip(t, c)
	if err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret = old.Encode() }); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Errorf("old key after rotation: %v", err)
	}
	roundTrip(t, e.dial(t, func(o *initiator.Options) { o.DHCHAPSecret = next.Encode() }))
	write(next, 0o644)
	err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret = next.Encode() })
	var pe *dhchap.ProtocolError
	if !errors.Is(err, initiator.ErrAuthFailed) || !errors.As(err, &pe) || pe.Explanation != nvmeproto.AuthFailProtocolUnusable {
		t.Errorf("secret file open to others: %v", err)
	}
}

// lockedBuffer is a log destination safe for the target's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), "msg=\""+msg+"\"")
}

// TestAuthLogRateLimited: authentication failures, timeouts and an unreadable secret are
// logged once per host and interval, however often the host repeats them, as refused
// Connects are.
func TestAuthLogRateLimited(t *testing.T) {
	const n = 5
	hk := genSecret(t, 0)
	keys := &dhchap.HostKeys{Host: hk, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull}}
	logged := func(t *testing.T, mut func(*conf.Config), opts ...target.Option) (*env, *lockedBuffer) {
		var buf lockedBuffer
		opts = append(opts, target.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		return newEnv(t, mut, opts...), &buf
	}
	t.Run("failures", func(t *testing.T) {
		e, buf := logged(t, nil, target.WithAuthKeys(&authKeys{keys: map[string]*dhchap.HostKeys{hostNQN: keys}}))
		h, _ := dhchap.NewHost(dhchap.HostConfig{Secret: hk, HostNQN: hostNQN, SubNQN: subNQN}, 1)
		for range n {
			q := dialRaw(t, e)
			q.connect(0, nvmeproto.CNTLIDDynamic)
			q.send(h.Negotiate()[:9]) // truncated: Failure1 (incorrect payload)
			if f, _ := q.receive(4096); !isFailure1(f, nvmeproto.AuthFailIncorrectPayload) {
				t.Fatalf("expected Failure1, got %x", f[:8])
			}
		}
		if got := buf.count("authentication failed"); got != 1 {
			t.Errorf("%d failures logged %d lines, want 1", n, got)
		}
	})
	t.Run("timeouts", func(t *testing.T) {
		target.AuthTimeout = 50 * time.Millisecond
		defer func() { target.AuthTimeout = 60 * time.Second }()
		e, buf := logged(t, nil, target.WithAuthKeys(&authKeys{keys: map[string]*dhchap.HostKeys{hostNQN: keys}}))
		for range n {
			q := dialRaw(t, e)
			q.connect(0, nvmeproto.CNTLIDDynamic)
			select {
			case <-q.conn.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("unauthenticated queue still connected")
			}
		}
		if got := buf.count("authentication timed out: queue disconnected"); got != 1 {
			t.Errorf("%d timeouts logged %d lines, want 1", n, got)
		}
	})
	t.Run("unreadable secret", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "host.key")
		if err := os.WriteFile(path, []byte(hk.Encode()), 0o600); err != nil {
			t.Fatal(err)
		}
		e, buf := logged(t, func(c *conf.Config) { c.Hosts = []conf.Host{{NQN: hostNQN, DHCHAPSecret: "file:" + path}} })
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := dialErr(t, e, func(o *initiator.Options) { o.DHCHAPSecret = hk.Encode() }); !errors.Is(err, initiator.ErrAuthFailed) {
				t.Fatalf("host with an unreadable secret: %v", err)
			}
		}
		if got := buf.count("cannot read the host's DH-HMAC-CHAP secret: its authentication fails (AUTH_Failure1, authentication protocol not usable)"); got != 1 {
			t.Errorf("%d Connects with an unreadable secret logged %d lines, want 1", n, got)
		}
	})
}

// TestAuthQueueDepth: an I/O queue that authenticates keeps one entry for its
// authentication commands, and is opened one entry larger, so Depth is the QueueSize
// asked for; when the controller allows no larger queue (the target's MAXCMD 64),
// Depth is one less, and AuthReserved says why. Without authentication Depth is
// QueueSize and nothing is reserved. Size, which identify reports, is QueueSize in every
// case.
func TestAuthQueueDepth(t *testing.T) {
	hk := genSecret(t, nvmeproto.AuthHashSHA256)
	auth, _ := authEnv(t, &dhchap.HostKeys{Host: hk})
	plain := newEnv(t, nil)
	for _, tc := range []struct {
		e           *env
		size, depth int
		secret      string
		reserved    bool
	}{
		{auth, 32, 32, hk.Encode(), true},
		{auth, 64, 63, hk.Encode(), true},
		{plain, 32, 32, "", false},
	} {
		c := tc.e.dial(t, func(o *initiator.Options) { o.QueueSize = tc.size; o.DHCHAPSecret = tc.secret })
		for i := range c.IOQueues() {
			q := c.IOQueue(i)
			if q.Depth() != tc.depth || q.AuthReserved() != tc.reserved || q.Size() != tc.size {
				t.Errorf("QueueSize %d, authenticated %v: queue %d depth %d, reserved for authentication %v, size %d; want %d, %v, %d",
					tc.size, tc.secret != "", q.ID(), q.Depth(), q.AuthReserved(), q.Size(), tc.depth, tc.reserved, tc.size)
			}
		}
		roundTrip(t, c)
		c.Close()
	}
}
