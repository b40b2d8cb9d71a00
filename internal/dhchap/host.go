package dhchap

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// HostConfig is what a host needs to authenticate to a subsystem.
type HostConfig struct {
	Secret     *Secret // the host's secret (required)
	CtrlSecret *Secret // the controller's secret: set to authenticate the controller too
	HostNQN    string
	SubNQN     string
	Hashes     []nvmeproto.AuthHashID    // offered, in the host's order (default: SHA-256, 384, 512)
	DHGroups   []nvmeproto.AuthDHGroupID // offered (default: NULL, ffdhe2048..8192)
	Rand       io.Reader                 // nil: crypto/rand
	Seq        *SeqCounter               // the host's sequence numbers (nil: a private counter)
}

// ProtocolError is a failed host transaction. Explanation is what the host reports in
// AUTH_Failure2 (when Remote is false) or what the controller reported in AUTH_Failure1
// (Remote true: the host sends nothing more).
type ProtocolError struct {
	Explanation nvmeproto.AuthFailExplanation
	Remote      bool
	Err         error
}

func (e *ProtocolError) Error() string {
	if e.Remote {
		return fmt.Sprintf("dhchap: the controller rejected the authentication: %v (AUTH_Failure1)", e.Explanation)
	}
	return fmt.Sprintf("dhchap: %v (%v)", e.Err, e.Explanation)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// ErrRejected is wrapped by a ProtocolError that carries the controller's Failure1.
var ErrRejected = errors.New("authentication rejected by the controller")

// Host runs the host side of one DH-HMAC-CHAP transaction: Negotiate → (Challenge) Reply
// → (Success1) Success2. A failed step returns a *ProtocolError; unless it is Remote, the
// caller sends Failure2 and stops. Not safe for concurrent use.
type Host struct {
	cfg    HostConfig
	tx     Transaction
	c2     []byte
	s2     uint32
	skey   []byte
	groupV nvmeproto.AuthDHGroupID
}

// NewHost starts a transaction with identifier tid.
func NewHost(cfg HostConfig, tid uint16) (*Host, error) {
	if cfg.Secret == nil {
		return nil, errors.New("dhchap: no host secret")
	}
	if len(cfg.Hashes) == 0 {
		cfg.Hashes = []nvmeproto.AuthHashID{nvmeproto.AuthHashSHA256, nvmeproto.AuthHashSHA384, nvmeproto.AuthHashSHA512}
	}
	if len(cfg.DHGroups) == 0 {
		cfg.DHGroups = []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull, nvmeproto.AuthDHGroupFFDHE2048, nvmeproto.AuthDHGroupFFDHE3072,
			nvmeproto.AuthDHGroupFFDHE4096, nvmeproto.AuthDHGroupFFDHE6144, nvmeproto.AuthDHGroupFFDHE8192}
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.Seq == nil {
		cfg.Seq = new(SeqCounter)
	}
	return &Host{cfg: cfg, tx: Transaction{TID: tid, HostNQN: cfg.HostNQN, SubNQN: cfg.SubNQN}}, nil
}

// Negotiate returns the AUTH_Negotiate message.
func (h *Host) Negotiate() []byte {
	n := nvmeproto.AuthNegotiate{TID: h.tx.TID, SCC: nvmeproto.AuthSCNone, Protocols: []nvmeproto.AuthProtocolDescriptor{{
		AuthID: nvmeproto.AuthIDDHHMACCHAP, HashIDs: h.cfg.Hashes, DHGroupIDs: h.cfg.DHGroups}}}
	b := make([]byte, n.Size())
	n.Marshal(b)
	return b
}

// Selected returns the hash function and DH group the controller chose.
func (h *Host) Selected() (nvmeproto.AuthHashID, nvmeproto.AuthDHGroupID) { return h.tx.Hash, h.groupV }

func (h *Host) fail(e nvmeproto.AuthFailExplanation, err error) error {
	clear(h.skey)
	h.skey = nil
	return &ProtocolError{Explanation: e, Err: err}
}

// remoteFailure recognises AUTH_Failure1 in b.
func remoteFailure(b []byte) error {
	var f nvmeproto.AuthFailure
	if len(b) >= 2 && b[0] == nvmeproto.AuthTypeCommon && b[1] == nvmeproto.AuthMsgFailure1 && f.Unmarshal(b) == nil {
		return &ProtocolError{Explanation: f.Explanation, Remote: true, Err: ErrRejected}
	}
	return nil
}

// Challenge consumes the controller's Challenge (or Failure1) and returns the Reply.
func (h *Host) Challenge(b []byte) ([]byte, error) {
	if err := remoteFailure(b); err != nil {
		return nil, err
	}
	var c nvmeproto.AuthChallenge
	if err := c.Unmarshal(b); err != nil {
		return nil, h.fail(nvmeproto.AuthFailIncorrectProtocol, fmt.Errorf("expected a Challenge: %w", err))
	}
	if c.TID != h.tx.TID {
		return nil, h.fail(nvmeproto.AuthFailIncorrectProtocol, fmt.Errorf("Challenge for transaction %d, ours is %d", c.TID, h.tx.TID))
	}
	if !contains(h.cfg.Hashes, c.HashID) || c.HashID.Size() == 0 {
		return nil, h.fail(nvmeproto.AuthFailHashUnusable, fmt.Errorf("the controller chose %v, which was not offered", c.HashID))
	}
	if len(c.C1) != c.HashID.Size() {
		return nil, h.fail(nvmeproto.AuthFailHashUnusable, fmt.Errorf("Challenge HL %d for %v (needs %d)", len(c.C1), c.HashID, c.HashID.Size()))
	}
	if !contains(h.cfg.DHGroups, c.DHGroupID) || !c.DHGroupID.Valid() {
		return nil, h.fail(nvmeproto.AuthFailDHGroupUnusable, fmt.Errorf("the controller chose %v, which was not offered", c.DHGroupID))
	}
	h.tx.Hash, h.groupV = c.HashID, c.DHGroupID
	challenge := c.C1
	reply := nvmeproto.AuthReply{TID: h.tx.TID}
	if c.DHGroupID == nvmeproto.AuthDHGroupNull {
		if len(c.DHValue) != 0 {
			return nil, h.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("Challenge carries a %d-byte DH value in the NULL DH group", len(c.DHValue)))
		}
	} else {
		g, err := LookupGroup(c.DHGroupID)
		if err != nil {
			return nil, h.fail(nvmeproto.AuthFailDHGroupUnusable, err)
		}
		kp, err := g.GenerateKey(h.cfg.Rand)
		if err != nil {
			return nil, h.fail(nvmeproto.AuthFailFailed, err)
		}
		defer kp.wipe() // after the shared secret and the public value are taken
		if h.skey, err = kp.SharedSecret(c.DHValue); err != nil {
			return nil, h.fail(nvmeproto.AuthFailDHGroupUnusable, err)
		}
		if challenge, err = h.tx.AugmentChallenge(h.skey, c.C1); err != nil {
			return nil, h.fail(nvmeproto.AuthFailFailed, err)
		}
		reply.DHValue = kp.Public()
	}
	var err error
	reply.R1, err = respond(h.tx.HostResponse, h.cfg.Secret, h.cfg.HostNQN, challenge, c.SeqNum)
	if h.skey != nil {
		clear(challenge) // augmented: derived from the shared secret
	}
	if err != nil {
		return nil, h.fail(nvmeproto.AuthFailFailed, err)
	}
	if h.cfg.CtrlSecret != nil {
		h.c2 = make([]byte, c.HashID.Size())
		if _, err := io.ReadFull(h.cfg.Rand, h.c2); err != nil {
			return nil, h.fail(nvmeproto.AuthFailFailed, fmt.Errorf("reading the challenge: %w", err))
		}
		h.s2 = h.cfg.Seq.Next(h.cfg.Rand)
		reply.CValid, reply.SeqNum, reply.C2 = true, h.s2, h.c2
	}
	out := make([]byte, reply.Size())
	reply.Marshal(out)
	return out, nil
}

// Success1 consumes the controller's Success1 (or Failure1). For bidirectional
// authentication it checks the controller's response and returns Success2 to send;
// otherwise it returns nil and the transaction is complete.
func (h *Host) Success1(b []byte) ([]byte, error) {
	defer func() { clear(h.skey); h.skey = nil }()
	if err := remoteFailure(b); err != nil {
		return nil, err
	}
	var s nvmeproto.AuthSuccess1
	if err := s.Unmarshal(b); err != nil {
		return nil, h.fail(nvmeproto.AuthFailIncorrectProtocol, fmt.Errorf("expected Success1: %w", err))
	}
	if s.TID != h.tx.TID {
		return nil, h.fail(nvmeproto.AuthFailIncorrectProtocol, fmt.Errorf("Success1 for transaction %d, ours is %d", s.TID, h.tx.TID))
	}
	if int(s.HL) != h.tx.Hash.Size() {
		return nil, h.fail(nvmeproto.AuthFailHashUnusable, fmt.Errorf("Success1 HL %d, %v needs %d", s.HL, h.tx.Hash, h.tx.Hash.Size()))
	}
	if h.c2 == nil {
		return nil, nil
	}
	if !s.RValid {
		return nil, h.fail(nvmeproto.AuthFailFailed, errors.New("the controller did not answer the host's challenge (no controller secret configured for this host?)"))
	}
	challenge := h.c2
	if h.skey != nil {
		var err error
		if challenge, err = h.tx.AugmentChallenge(h.skey, h.c2); err != nil {
			return nil, h.fail(nvmeproto.AuthFailFailed, err)
		}
	}
	want, err := respond(h.tx.ControllerResponse, h.cfg.CtrlSecret, h.cfg.SubNQN, challenge, h.s2)
	if h.skey != nil {
		clear(challenge) // augmented: derived from the shared secret
	}
	if err != nil {
		return nil, h.fail(nvmeproto.AuthFailFailed, err)
	}
	if !Equal(want, s.R2) {
		return nil, h.fail(nvmeproto.AuthFailFailed, errors.New("the controller's response does not match the controller secret: wrong --dhchap-ctrl-secret, or not the subsystem it claims"))
	}
	out := make([]byte, nvmeproto.AuthSuccess2Size)
	(&nvmeproto.AuthSuccess2{TID: h.tx.TID}).Marshal(out)
	return out, nil
}

// Failure2 returns the AUTH_Failure2 message that reports err (a *ProtocolError) to the
// controller; nil when err came from the controller's Failure1.
func (h *Host) Failure2(err error) []byte {
	var pe *ProtocolError
	e := nvmeproto.AuthFailFailed
	if errors.As(err, &pe) {
		if pe.Remote {
			return nil
		}
		e = pe.Explanation
	}
	b := make([]byte, nvmeproto.AuthFailureSize)
	(&nvmeproto.AuthFailure{AuthID: nvmeproto.AuthMsgFailure2, TID: h.tx.TID, Reason: nvmeproto.AuthFailReasonFailed, Explanation: e}).Marshal(b)
	return b
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
