package dhchap

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

const (
	pHost = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"
	pSub  = "nqn.2024-01.io.gonvmf:sub1"
)

func mustSecret(t testing.TB, fill byte, h nvmeproto.AuthHashID, n int) *Secret {
	t.Helper()
	s, err := NewSecret(bytes.Repeat([]byte{fill}, n), h)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// exchange runs one transaction between h and c as the transports would: Negotiate (Send),
// Challenge (Receive), Reply (Send), Success1 (Receive), Success2 (Send). It returns the
// host's error (after sending Failure2 for a local one) and the controller's Send error.
func exchange(t testing.TB, h *Host, c *Controller) (hostErr, ctrlErr error) {
	t.Helper()
	const al = 4096
	if err := c.Send(h.Negotiate()); err != nil {
		ctrlErr = err
	}
	msg, err := c.Receive(al)
	if err != nil {
		t.Fatalf("Receive(challenge): %v", err)
	}
	reply, err := h.Challenge(msg)
	if err != nil {
		if f := h.Failure2(err); f != nil {
			_ = c.Send(f)
		}
		return err, ctrlErr
	}
	if err := c.Send(reply); err != nil {
		ctrlErr = err
	}
	msg, err = c.Receive(al)
	if err != nil {
		t.Fatalf("Receive(success1): %v", err)
	}
	s2, err := h.Success1(msg)
	if err != nil {
		if f := h.Failure2(err); f != nil {
			if e := c.Send(f); e != nil && ctrlErr == nil {
				ctrlErr = e
			}
		}
		return err, ctrlErr
	}
	if s2 != nil {
		if err := c.Send(s2); err != nil {
			ctrlErr = err
		}
	}
	return nil, ctrlErr
}

func TestExchangeMatrix(t *testing.T) {
	groups := []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull, nvmeproto.AuthDHGroupFFDHE2048, nvmeproto.AuthDHGroupFFDHE3072,
		nvmeproto.AuthDHGroupFFDHE4096, nvmeproto.AuthDHGroupFFDHE6144, nvmeproto.AuthDHGroupFFDHE8192}
	if testing.Short() {
		groups = groups[:2]
	}
	hostKey := mustSecret(t, 1, nvmeproto.AuthHashSHA256, 32)
	ctrlKey := mustSecret(t, 2, 0, 48)
	for _, hash := range []nvmeproto.AuthHashID{1, 2, 3} {
		for _, g := range groups {
			for _, bidi := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/bidi=%v", hash, g, bidi), func(t *testing.T) {
					c := NewController(HostKeys{Host: hostKey, Ctrl: ctrlKey, Hashes: []nvmeproto.AuthHashID{hash},
						DHGroups: []nvmeproto.AuthDHGroupID{g}}, pHost, pSub, nil, nil)
					cfg := HostConfig{Secret: hostKey, HostNQN: pHost, SubNQN: pSub}
					if bidi {
						cfg.CtrlSecret = ctrlKey
					}
					h, _ := NewHost(cfg, 7)
					if herr, cerr := exchange(t, h, c); herr != nil || cerr != nil {
						t.Fatalf("host: %v, controller: %v", herr, cerr)
					}
					if !c.Authenticated() || c.InProgress() || c.Bidirectional() != bidi {
						t.Errorf("authenticated %v in progress %v bidirectional %v", c.Authenticated(), c.InProgress(), c.Bidirectional())
					}
					if hh, hg := h.Selected(); hh != hash || hg != g {
						t.Errorf("host selected %v/%v", hh, hg)
					}
					if ch, cg := c.Selected(); ch != hash || cg != g {
						t.Errorf("controller selected %v/%v", ch, cg)
					}
				})
			}
		}
	}
}

func TestExchangeFailures(t *testing.T) {
	hostKey := mustSecret(t, 1, nvmeproto.AuthHashSHA256, 32)
	ctrlKey := mustSecret(t, 2, nvmeproto.AuthHashSHA512, 64)
	keys := HostKeys{Host: hostKey, Ctrl: ctrlKey, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}
	newPair := func(k HostKeys, cfg HostConfig) (*Host, *Controller) {
		c := NewController(k, pHost, pSub, nil, nil)
		cfg.HostNQN, cfg.SubNQN = pHost, pSub
		if cfg.Secret == nil {
			cfg.Secret = hostKey
		}
		h, _ := NewHost(cfg, 3)
		return h, c
	}
	wantRemote := func(t *testing.T, err error, e nvmeproto.AuthFailExplanation) {
		t.Helper()
		var pe *ProtocolError
		if !errors.As(err, &pe) || !pe.Remote || pe.Explanation != e || !errors.Is(err, ErrRejected) {
			t.Errorf("host error %v, want the controller's Failure1 with %v", err, e)
		}
	}

	t.Run("wrong host key", func(t *testing.T) {
		h, c := newPair(keys, HostConfig{Secret: mustSecret(t, 9, nvmeproto.AuthHashSHA256, 32)})
		herr, cerr := exchange(t, h, c)
		wantRemote(t, herr, nvmeproto.AuthFailFailed)
		if cerr == nil || !strings.Contains(cerr.Error(), "does not match") || c.Authenticated() {
			t.Errorf("controller: %v, authenticated %v", cerr, c.Authenticated())
		}
		if e, err := c.Failure(); e != nvmeproto.AuthFailFailed || err == nil {
			t.Errorf("Failure() = %v, %v", e, err)
		}
	})
	t.Run("host key of another host NQN", func(t *testing.T) {
		c := NewController(keys, "nqn.2024-01.io.gonvmf:other-host", pSub, nil, nil)
		h, _ := NewHost(HostConfig{Secret: hostKey, HostNQN: pHost, SubNQN: pSub}, 1)
		herr, _ := exchange(t, h, c)
		wantRemote(t, herr, nvmeproto.AuthFailFailed)
	})
	t.Run("wrong controller key", func(t *testing.T) {
		h, c := newPair(keys, HostConfig{CtrlSecret: mustSecret(t, 8, nvmeproto.AuthHashSHA512, 64)})
		herr, cerr := exchange(t, h, c)
		var pe *ProtocolError
		if !errors.As(herr, &pe) || pe.Remote || pe.Explanation != nvmeproto.AuthFailFailed || !strings.Contains(herr.Error(), "controller's response") {
			t.Errorf("host: %v", herr)
		}
		// The host's Failure2 ends the controller's transaction unauthenticated.
		if cerr == nil || !strings.Contains(cerr.Error(), "AUTH_Failure2") || c.Authenticated() {
			t.Errorf("controller: %v, authenticated %v", cerr, c.Authenticated())
		}
	})
	t.Run("bidirectional without a controller key", func(t *testing.T) {
		h, c := newPair(HostKeys{Host: hostKey}, HostConfig{CtrlSecret: ctrlKey})
		herr, cerr := exchange(t, h, c)
		wantRemote(t, herr, nvmeproto.AuthFailFailed)
		if cerr == nil || !strings.Contains(cerr.Error(), "no controller secret") {
			t.Errorf("controller: %v", cerr)
		}
	})
	t.Run("no common hash", func(t *testing.T) {
		h, c := newPair(HostKeys{Host: hostKey, Hashes: []nvmeproto.AuthHashID{nvmeproto.AuthHashSHA512}},
			HostConfig{Hashes: []nvmeproto.AuthHashID{nvmeproto.AuthHashSHA256}})
		herr, cerr := exchange(t, h, c)
		wantRemote(t, herr, nvmeproto.AuthFailHashUnusable)
		if cerr == nil {
			t.Error("controller accepted")
		}
	})
	t.Run("no common DH group", func(t *testing.T) {
		h, c := newPair(HostKeys{Host: hostKey, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE4096}},
			HostConfig{DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull}})
		herr, _ := exchange(t, h, c)
		wantRemote(t, herr, nvmeproto.AuthFailDHGroupUnusable)
	})
}

// step drives a controller to the point where it expects the Reply and returns the host.
func atReply(t *testing.T, keys HostKeys) (*Host, *Controller, []byte) {
	t.Helper()
	c := NewController(keys, pHost, pSub, nil, nil)
	h, _ := NewHost(HostConfig{Secret: keys.Host, CtrlSecret: keys.Ctrl, HostNQN: pHost, SubNQN: pSub}, 5)
	if err := c.Send(h.Negotiate()); err != nil {
		t.Fatal(err)
	}
	ch, err := c.Receive(4096)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := h.Challenge(ch)
	if err != nil {
		t.Fatal(err)
	}
	return h, c, reply
}

func failure1(t *testing.T, c *Controller) nvmeproto.AuthFailure {
	t.Helper()
	b, err := c.Receive(4096)
	if err != nil {
		t.Fatal(err)
	}
	var f nvmeproto.AuthFailure
	if err := f.Unmarshal(b); err != nil || f.AuthID != nvmeproto.AuthMsgFailure1 {
		t.Fatalf("expected Failure1, got %x (%v)", b, err)
	}
	if c.Authenticated() {
		t.Error("authenticated after a failure")
	}
	return f
}

func TestControllerProtocolErrors(t *testing.T) {
	keys := HostKeys{Host: mustSecret(t, 1, 0, 32), DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}

	t.Run("truncated reply", func(t *testing.T) {
		_, c, reply := atReply(t, keys)
		if err := c.Send(reply[:len(reply)-1]); err == nil {
			t.Fatal("accepted")
		}
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectPayload || f.TID != 5 {
			t.Errorf("%+v", f)
		}
	})
	t.Run("reply with another T_ID", func(t *testing.T) {
		_, c, reply := atReply(t, keys)
		reply[4]++
		if err := c.Send(reply); err == nil {
			t.Fatal("accepted")
		}
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectPayload {
			t.Errorf("%+v", f)
		}
	})
	t.Run("replayed reply after success", func(t *testing.T) {
		h, c, reply := atReply(t, keys)
		if err := c.Send(reply); err != nil {
			t.Fatal(err)
		}
		s1, _ := c.Receive(4096)
		if _, err := h.Success1(s1); err != nil || !c.Authenticated() {
			t.Fatal(err)
		}
		if err := c.Send(reply); err == nil {
			t.Fatal("replayed Reply accepted")
		}
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectProtocol {
			t.Errorf("%+v", f)
		}
	})
	t.Run("reply from an old transaction", func(t *testing.T) {
		// A Reply recorded in one transaction does not authenticate the next one: the
		// new challenge, sequence number and DH values differ.
		_, c, old := atReply(t, keys)
		if err := c.Send(old); err != nil {
			t.Fatal(err)
		}
		_, _ = c.Receive(4096)
		h2, _ := NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 5)
		if err := c.Send(h2.Negotiate()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Receive(4096); err != nil {
			t.Fatal(err)
		}
		if err := c.Send(old); err == nil {
			t.Fatal("old Reply accepted")
		}
		if f := failure1(t, c); f.Explanation == 0 {
			t.Errorf("%+v", f)
		}
	})
	t.Run("success2 without bidirectional", func(t *testing.T) {
		_, c, _ := atReply(t, keys)
		s2 := make([]byte, 16)
		(&nvmeproto.AuthSuccess2{TID: 5}).Marshal(s2)
		if err := c.Send(s2); err == nil {
			t.Fatal("accepted")
		}
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectProtocol {
			t.Errorf("%+v", f)
		}
	})
	t.Run("DH value in the NULL group and bad DH values", func(t *testing.T) {
		nk := HostKeys{Host: keys.Host, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull}}
		_, c, reply := atReply(t, nk)
		var r nvmeproto.AuthReply
		_ = r.Unmarshal(reply)
		r.DHValue = []byte{1, 2, 3}
		b := make([]byte, r.Size())
		r.Marshal(b)
		if err := c.Send(b); err == nil {
			t.Fatal("accepted")
		}
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectPayload {
			t.Errorf("%+v", f)
		}
		_, c, reply = atReply(t, keys)
		_ = r.Unmarshal(reply)
		r.DHValue = make([]byte, 256)
		r.DHValue[255] = 1 // y = 1
		b = make([]byte, r.Size())
		r.Marshal(b)
		if err := c.Send(b); err == nil || !errors.Is(err, ErrPublicValue) {
			t.Fatalf("y = 1: %v", err)
		}
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailDHGroupUnusable {
			t.Errorf("%+v", f)
		}
	})
	t.Run("secure channel concatenation and foreign protocols", func(t *testing.T) {
		c := NewController(keys, pHost, pSub, nil, nil)
		n := nvmeproto.AuthNegotiate{TID: 1, SCC: nvmeproto.AuthSCNewTLSPSK, Protocols: []nvmeproto.AuthProtocolDescriptor{{AuthID: 1,
			HashIDs: []nvmeproto.AuthHashID{1}, DHGroupIDs: []nvmeproto.AuthDHGroupID{1}}}}
		b := make([]byte, n.Size())
		n.Marshal(b)
		_ = c.Send(b)
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailConcatMismatch || f.TID != 1 {
			t.Errorf("%+v", f)
		}
		n.SCC, n.Protocols[0].AuthID = 0, 9
		n.Marshal(b)
		_ = c.Send(b)
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailProtocolUnusable {
			t.Errorf("%+v", f)
		}
		_ = c.Send(b[:9])
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectPayload {
			t.Errorf("%+v", f)
		}
	})
	t.Run("receive with nothing to send", func(t *testing.T) {
		c := NewController(keys, pHost, pSub, nil, nil)
		if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectProtocol {
			t.Errorf("%+v", f)
		}
	})
	t.Run("short allocation length", func(t *testing.T) {
		c := NewController(keys, pHost, pSub, nil, nil)
		h, _ := NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 2)
		_ = c.Send(h.Negotiate())
		if _, err := c.Receive(100); err == nil {
			t.Fatal("a 336-byte Challenge fit in 100 bytes")
		}
		// The transaction stands: a retry with room gets the same Challenge.
		if _, err := c.Receive(336); err != nil || !c.InProgress() {
			t.Fatalf("retry: %v", err)
		}
	})
	t.Run("short allocation length with nothing to send", func(t *testing.T) {
		// Idle and after a success alike: a Receive too short for Failure1 fails and
		// leaves everything as it was (the queue stays authenticated, nothing pends).
		c := NewController(keys, pHost, pSub, nil, nil)
		for _, authenticated := range []bool{false, true} {
			if authenticated {
				h, _ := NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 3)
				if herr, cerr := exchange(t, h, c); herr != nil || cerr != nil || !c.Authenticated() {
					t.Fatal(herr, cerr)
				}
			}
			if _, err := c.Receive(nvmeproto.AuthFailureSize - 1); err == nil {
				t.Fatalf("authenticated %v: a Failure1 fit in %d bytes", authenticated, nvmeproto.AuthFailureSize-1)
			}
			if c.FailurePending() || c.InProgress() || c.Authenticated() != authenticated {
				t.Fatalf("authenticated %v: after the short Receive: failure pending %v, in progress %v, authenticated %v",
					authenticated, c.FailurePending(), c.InProgress(), c.Authenticated())
			}
		}
	})
}

func TestReauthentication(t *testing.T) {
	keys := HostKeys{Host: mustSecret(t, 1, 0, 32), Ctrl: mustSecret(t, 2, 0, 32)}
	c := NewController(keys, pHost, pSub, nil, nil)
	h, _ := NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 1)
	if herr, cerr := exchange(t, h, c); herr != nil || cerr != nil || !c.Authenticated() {
		t.Fatal(herr, cerr)
	}
	// A second transaction: the queue stays authenticated while it runs.
	h, _ = NewHost(HostConfig{Secret: keys.Host, CtrlSecret: keys.Ctrl, HostNQN: pHost, SubNQN: pSub}, 2)
	if err := c.Send(h.Negotiate()); err != nil || !c.Authenticated() || !c.InProgress() {
		t.Fatalf("%v authenticated %v", err, c.Authenticated())
	}
	ch, _ := c.Receive(4096)
	reply, _ := h.Challenge(ch)
	_ = c.Send(reply)
	s1, _ := c.Receive(4096)
	s2, err := h.Success1(s1)
	if err != nil || s2 == nil {
		t.Fatal(err)
	}
	if err := c.Send(s2); err != nil || !c.Authenticated() {
		t.Fatal(err)
	}
	// After a key rotation the old key fails, and the queue loses its authentication.
	c.SetKeys(HostKeys{Host: mustSecret(t, 3, 0, 32)})
	h, _ = NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 3)
	herr, _ := exchange(t, h, c)
	if herr == nil || c.Authenticated() {
		t.Fatalf("old key after rotation: %v, authenticated %v", herr, c.Authenticated())
	}
}

// TestAbandon: an abandoned re-authentication leaves the queue authenticated and its
// transaction's secrets gone; the abandoned transaction's Reply is out of protocol, and a
// new transaction works.
func TestAbandon(t *testing.T) {
	keys := HostKeys{Host: mustSecret(t, 1, 0, 32), DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}
	c := NewController(keys, pHost, pSub, nil, nil)
	h, _ := NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 1)
	if herr, cerr := exchange(t, h, c); herr != nil || cerr != nil || !c.Authenticated() {
		t.Fatal(herr, cerr)
	}
	c.Abandon() // idle: nothing to abandon
	if !c.Authenticated() || c.InProgress() || c.FailurePending() {
		t.Fatalf("Abandon while idle: authenticated %v, in progress %v", c.Authenticated(), c.InProgress())
	}
	h, _ = NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 2)
	_ = c.Send(h.Negotiate())
	ch, _ := c.Receive(4096)
	reply, err := h.Challenge(ch)
	if err != nil {
		t.Fatal(err)
	}
	kp := c.kp
	c.Abandon()
	if !c.Authenticated() || c.InProgress() || c.FailurePending() || c.kp != nil || c.c1 != nil {
		t.Fatalf("after Abandon: authenticated %v, in progress %v, failure pending %v, key pair kept %v",
			c.Authenticated(), c.InProgress(), c.FailurePending(), c.kp != nil)
	}
	if !bytes.Equal(kp.x, make([]byte, len(kp.x))) {
		t.Error("the abandoned transaction's private key was not wiped")
	}
	if err := c.Send(reply); err == nil {
		t.Fatal("the abandoned transaction's Reply was accepted")
	}
	if f := failure1(t, c); f.Explanation != nvmeproto.AuthFailIncorrectProtocol {
		t.Errorf("%+v", f)
	}
	h, _ = NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 3)
	if herr, cerr := exchange(t, h, c); herr != nil || cerr != nil || !c.Authenticated() {
		t.Fatal(herr, cerr)
	}
	// A failed transaction is not abandoned: its Failure1 stays pending.
	h, _ = NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 4)
	_ = c.Send(h.Negotiate()[:9])
	c.Abandon()
	if !c.FailurePending() {
		t.Fatal("Abandon dropped a pending Failure1")
	}
}

// TestRefuse: a refused re-authentication answers the Negotiate's transaction with
// Failure1 carrying the explanation Refuse was given (here authentication protocol not
// usable, for a secret that cannot be read), reports that explanation and the cause in
// Failure, and leaves the queue unauthenticated.
func TestRefuse(t *testing.T) {
	keys := HostKeys{Host: mustSecret(t, 1, 0, 32)}
	c := NewController(keys, pHost, pSub, nil, nil)
	h, _ := NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 1)
	if herr, cerr := exchange(t, h, c); herr != nil || cerr != nil || !c.Authenticated() {
		t.Fatal(herr, cerr)
	}
	h, _ = NewHost(HostConfig{Secret: keys.Host, HostNQN: pHost, SubNQN: pSub}, 0x1234)
	why := errors.New("the host's secret cannot be read")
	if err := c.Refuse(h.Negotiate(), nvmeproto.AuthFailProtocolUnusable, why); err != why || c.Authenticated() || !c.FailurePending() {
		t.Fatalf("Refuse: %v, authenticated %v, failure pending %v", err, c.Authenticated(), c.FailurePending())
	}
	b, err := c.Receive(4096)
	var f nvmeproto.AuthFailure
	if err != nil || f.Unmarshal(b) != nil || f.AuthID != nvmeproto.AuthMsgFailure1 || f.TID != 0x1234 ||
		f.Reason != nvmeproto.AuthFailReasonFailed || f.Explanation != nvmeproto.AuthFailProtocolUnusable {
		t.Fatalf("after Refuse, Receive: %v %+v", err, f)
	}
	if expl, cause := c.Failure(); expl != nvmeproto.AuthFailProtocolUnusable || cause != why {
		t.Errorf("Failure: %v %v", expl, cause)
	}
}

// TestControllerWithoutHostSecret: a controller given no host secret (an admin queue
// before its keys are read) fails every transaction with Failure1 (authentication
// failed) until SetKeys gives one, and then authenticates.
func TestControllerWithoutHostSecret(t *testing.T) {
	key := mustSecret(t, 1, 0, 32)
	c := NewController(HostKeys{}, pHost, pSub, nil, nil)
	h, _ := NewHost(HostConfig{Secret: key, HostNQN: pHost, SubNQN: pSub}, 1)
	herr, cerr := exchange(t, h, c)
	var pe *ProtocolError
	if !errors.As(herr, &pe) || !pe.Remote || pe.Explanation != nvmeproto.AuthFailFailed || cerr == nil || c.Authenticated() {
		t.Fatalf("without a host secret: host %v, controller %v, authenticated %v", herr, cerr, c.Authenticated())
	}
	c.SetKeys(HostKeys{Host: key})
	h, _ = NewHost(HostConfig{Secret: key, HostNQN: pHost, SubNQN: pSub}, 2)
	if herr, cerr := exchange(t, h, c); herr != nil || cerr != nil || !c.Authenticated() {
		t.Fatal(herr, cerr)
	}
}

func TestHostRejectsBadChallenges(t *testing.T) {
	key := mustSecret(t, 1, 0, 32)
	h, _ := NewHost(HostConfig{Secret: key, HostNQN: pHost, SubNQN: pSub, Hashes: []nvmeproto.AuthHashID{1},
		DHGroups: []nvmeproto.AuthDHGroupID{0, 1}}, 4)
	for name, ch := range map[string]nvmeproto.AuthChallenge{
		"unoffered hash":     {TID: 4, HashID: 3, C1: make([]byte, 64)},
		"wrong HL":           {TID: 4, HashID: 1, C1: make([]byte, 31)},
		"unoffered group":    {TID: 4, HashID: 1, DHGroupID: 2, C1: make([]byte, 32), DHValue: make([]byte, 384)},
		"other transaction":  {TID: 5, HashID: 1, C1: make([]byte, 32)},
		"DH value with NULL": {TID: 4, HashID: 1, C1: make([]byte, 32), DHValue: []byte{1}},
		"bad DH value":       {TID: 4, HashID: 1, DHGroupID: 1, C1: make([]byte, 32), DHValue: make([]byte, 256)},
	} {
		b := make([]byte, ch.Size())
		ch.Marshal(b)
		_, err := h.Challenge(b)
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Remote {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if f := h.Failure2(err); len(f) != 8 || f[1] != nvmeproto.AuthMsgFailure2 || f[7] != uint8(pe.Explanation) {
			t.Errorf("%s: Failure2 %x", name, f)
		}
	}
	if _, err := h.Challenge([]byte{1, 2, 3}); err == nil {
		t.Error("garbage accepted")
	}
	if _, err := h.Success1(make([]byte, 16)); err == nil {
		t.Error("zero Success1 accepted")
	}
}

// FuzzControllerSend feeds the controller arbitrary Authentication Send data (network
// input), interleaved with Receives: it never panics and never authenticates.
func FuzzControllerSend(f *testing.F) {
	key := mustSecret(f, 1, 0, 32)
	h, _ := NewHost(HostConfig{Secret: mustSecret(f, 2, 0, 32), HostNQN: pHost, SubNQN: pSub}, 1)
	f.Add(h.Negotiate(), []byte{1, 2, 0, 0, 1, 0, 32}, uint16(4096))
	f.Add([]byte{0, 0xF0, 0, 0, 1, 0, 1, 1}, []byte{1, 4, 0, 0, 1, 0}, uint16(8))
	f.Fuzz(func(t *testing.T, a, b []byte, al uint16) {
		c := NewController(HostKeys{Host: key, DHGroups: []nvmeproto.AuthDHGroupID{0}}, pHost, pSub, nil, nil)
		for _, m := range [][]byte{a, b, a} {
			_ = c.Send(m)
			out, err := c.Receive(int(al))
			if err == nil && len(out) > int(al) {
				t.Fatalf("%d bytes for allocation length %d", len(out), al)
			}
		}
		if c.Authenticated() {
			t.Fatal("authenticated without the key")
		}
	})
}
