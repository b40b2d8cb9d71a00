package dhchap

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// HostKeys is what a controller needs to authenticate one host: the host's secret, the
// controller's own secret when the host may ask to authenticate the controller
// (bidirectional authentication), and the hash functions and DH groups it accepts, in
// order of preference.
type HostKeys struct {
	Host     *Secret // required
	Ctrl     *Secret // nil: the controller cannot be authenticated (no bidirectional)
	Hashes   []nvmeproto.AuthHashID
	DHGroups []nvmeproto.AuthDHGroupID
}

// Default preference lists: the strongest hash, and the DH groups from the cheapest one
// that still has a DH exchange (the NULL group last: it gives no forward secrecy).
var (
	DefaultHashes   = []nvmeproto.AuthHashID{nvmeproto.AuthHashSHA512, nvmeproto.AuthHashSHA384, nvmeproto.AuthHashSHA256}
	DefaultDHGroups = []nvmeproto.AuthDHGroupID{
		nvmeproto.AuthDHGroupFFDHE2048, nvmeproto.AuthDHGroupFFDHE3072, nvmeproto.AuthDHGroupFFDHE4096,
		nvmeproto.AuthDHGroupFFDHE6144, nvmeproto.AuthDHGroupFFDHE8192, nvmeproto.AuthDHGroupNull,
	}
)

// ctrlStep is where a controller transaction stands: the message it expects or must send.
type ctrlStep uint8

const (
	ctrlIdle           ctrlStep = iota // expects AUTH_Negotiate
	ctrlSendChallenge                  // Authentication Receive returns the Challenge
	ctrlExpectReply                    // expects DH-HMAC-CHAP_Reply
	ctrlSendSuccess1                   // Authentication Receive returns Success1
	ctrlExpectSuccess2                 // expects Success2 (bidirectional only)
	ctrlSendFailure1                   // Authentication Receive returns Failure1
	ctrlDone                           // transaction over (authenticated or failed)
)

func (s ctrlStep) String() string {
	return [...]string{"expecting Negotiate", "sending Challenge", "expecting Reply", "sending Success1",
		"expecting Success2", "sending Failure1", "done"}[s]
}

// Controller runs the controller side of DH-HMAC-CHAP on one queue: it consumes the data
// of Authentication Send commands (Send) and produces the data of Authentication Receive
// commands (Receive). A queue is authenticated once a transaction succeeds; a new
// AUTH_Negotiate starts another transaction (re-authentication) and the queue stays
// authenticated until that one fails. Not safe for concurrent use: a queue runs its
// commands one at a time through it.
type Controller struct {
	keys    HostKeys
	hostNQN string
	subNQN  string
	rand    io.Reader
	seq     *SeqCounter // the controller's sequence numbers, shared by its queues

	step          ctrlStep
	authenticated bool
	tx            Transaction
	c1, c2        []byte
	s1, s2        uint32
	group         nvmeproto.AuthDHGroupID
	kp            *KeyPair
	skey          []byte
	failure       nvmeproto.AuthFailExplanation
	lastErr       error
}

// NewController returns the controller side of authentication for host hostNQN on
// subsystem subNQN. seq is the sequence number counter shared by the controller's queues
// (nil: a private one); rnd is the randomness source (nil: crypto/rand). Without a host
// secret in keys (keys.Host nil, until SetKeys gives one) every transaction fails:
// Failure1, authentication failed.
func NewController(keys HostKeys, hostNQN, subNQN string, seq *SeqCounter, rnd io.Reader) *Controller {
	if len(keys.Hashes) == 0 {
		keys.Hashes = DefaultHashes
	}
	if len(keys.DHGroups) == 0 {
		keys.DHGroups = DefaultDHGroups
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	if seq == nil {
		seq = new(SeqCounter)
	}
	return &Controller{keys: keys, hostNQN: hostNQN, subNQN: subNQN, rand: rnd, seq: seq}
}

// SetKeys replaces the keys used by transactions that start from now on (a
// re-authentication after a key rotation).
func (c *Controller) SetKeys(keys HostKeys) {
	if len(keys.Hashes) == 0 {
		keys.Hashes = DefaultHashes
	}
	if len(keys.DHGroups) == 0 {
		keys.DHGroups = DefaultDHGroups
	}
	c.keys = keys
}

// Authenticated reports whether the queue has been authenticated (and not failed since).
func (c *Controller) Authenticated() bool { return c.authenticated }

// InProgress reports whether a transaction has started and not ended.
func (c *Controller) InProgress() bool { return c.step != ctrlIdle && c.step != ctrlDone }

// FailurePending reports whether the transaction failed and the next Receive returns
// Failure1.
func (c *Controller) FailurePending() bool { return c.step == ctrlSendFailure1 }

// Failure returns the explanation and the cause of the last failed transaction, if the
// last transaction failed.
func (c *Controller) Failure() (nvmeproto.AuthFailExplanation, error) { return c.failure, c.lastErr }

// Selected returns the hash function and DH group of the current or last transaction.
func (c *Controller) Selected() (nvmeproto.AuthHashID, nvmeproto.AuthDHGroupID) {
	return c.tx.Hash, c.group
}

// Bidirectional reports whether the current or last transaction authenticated the
// controller too.
func (c *Controller) Bidirectional() bool { return c.c2 != nil }

// fail ends the transaction: the next Authentication Receive returns Failure1 with
// explanation e; err says why (for the log).
func (c *Controller) fail(e nvmeproto.AuthFailExplanation, err error) error {
	c.step, c.failure, c.lastErr, c.authenticated = ctrlSendFailure1, e, err, false
	c.clearSecrets()
	return err
}

func (c *Controller) clearSecrets() {
	clear(c.skey)
	if c.kp != nil {
		c.kp.wipe()
	}
	c.skey, c.kp, c.c1 = nil, nil, nil
}

// Abandon ends the transaction in progress without a verdict (the host stopped answering):
// its secrets are wiped, the next message expected is an AUTH_Negotiate (a later message
// of the abandoned transaction fails as out of protocol), and whether the queue is
// authenticated does not change. A transaction that has already failed (Failure1
// pending) stays as it is, as does an idle controller.
func (c *Controller) Abandon() {
	if !c.InProgress() || c.step == ctrlSendFailure1 {
		return
	}
	c.clearSecrets()
	c.c2, c.s2 = nil, 0
	c.step = ctrlIdle
}

// Send consumes the data of an Authentication Send command. It returns an error for a
// message that ends the transaction (the error says why; Receive then returns Failure1),
// or when the host reported a failure with AUTH_Failure2 (the transaction is over and the
// queue unauthenticated: no Failure1 follows). In both cases the command itself succeeds:
// failures travel in the protocol, not in the NVMe status.
func (c *Controller) Send(b []byte) error {
	var h nvmeproto.AuthMessageHeader
	if err := h.Unmarshal(b); err != nil {
		return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: %w", err))
	}
	name := nvmeproto.AuthMessageName(h.AuthType, h.AuthID)
	switch {
	case h.AuthType == nvmeproto.AuthTypeCommon && h.AuthID == nvmeproto.AuthMsgNegotiate:
		// Any time: starts a (new) transaction.
		return c.negotiate(b)
	case h.AuthType == nvmeproto.AuthTypeCommon && h.AuthID == nvmeproto.AuthMsgFailure2:
		var f nvmeproto.AuthFailure
		if err := f.Unmarshal(b); err != nil {
			return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: %w", err))
		}
		c.step, c.failure, c.authenticated = ctrlDone, f.Explanation, false
		c.lastErr = fmt.Errorf("dhchap: the host ended transaction %d with AUTH_Failure2: %v", f.TID, f.Explanation)
		c.clearSecrets()
		return c.lastErr
	}
	if c.step != ctrlExpectReply && c.step != ctrlExpectSuccess2 {
		return c.fail(nvmeproto.AuthFailIncorrectProtocol, fmt.Errorf("dhchap: %s received while %v", name, c.step))
	}
	if h.TID != c.tx.TID {
		return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: %s for transaction %d, the current one is %d", name, h.TID, c.tx.TID))
	}
	switch {
	case c.step == ctrlExpectReply && h.AuthType == nvmeproto.AuthTypeDHHMACCHAP && h.AuthID == nvmeproto.AuthMsgReply:
		return c.reply(b)
	case c.step == ctrlExpectSuccess2 && h.AuthType == nvmeproto.AuthTypeDHHMACCHAP && h.AuthID == nvmeproto.AuthMsgSuccess2:
		var s nvmeproto.AuthSuccess2
		if err := s.Unmarshal(b); err != nil {
			return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: %w", err))
		}
		c.step, c.authenticated = ctrlDone, true
		return nil
	}
	return c.fail(nvmeproto.AuthFailIncorrectProtocol, fmt.Errorf("dhchap: %s received while %v", name, c.step))
}

// Refuse ends the transaction that the AUTH_Negotiate b starts, without running it: the
// next Receive returns Failure1 with explanation e for its T_ID, and the queue is no
// longer authenticated. The target uses it when it will not run the transaction: the
// host has no keys any more (authentication failed), its secret cannot be read (the
// protocol is not usable), the queue started too many transactions. err says why, for
// the log.
func (c *Controller) Refuse(b []byte, e nvmeproto.AuthFailExplanation, err error) error {
	c.clearSecrets()
	c.c2, c.s2 = nil, 0
	if len(b) >= 6 {
		c.tx.TID = binary.LittleEndian.Uint16(b[4:])
	}
	return c.fail(e, err)
}

func (c *Controller) negotiate(b []byte) error {
	c.clearSecrets()
	c.c2, c.s2, c.failure, c.lastErr = nil, 0, 0, nil
	var n nvmeproto.AuthNegotiate
	if err := n.Unmarshal(b); err != nil {
		if len(b) >= 6 {
			c.tx.TID = binary.LittleEndian.Uint16(b[4:])
		}
		return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: %w", err))
	}
	c.tx = Transaction{TID: n.TID, SCC: n.SCC, HostNQN: c.hostNQN, SubNQN: c.subNQN}
	if c.keys.Host == nil {
		return c.fail(nvmeproto.AuthFailFailed, errors.New("dhchap: the controller has no secret for the host"))
	}
	if n.SCC != nvmeproto.AuthSCNone {
		return c.fail(nvmeproto.AuthFailConcatMismatch, fmt.Errorf("dhchap: the host asks for secure channel concatenation (SC_C %d), which needs TLS: not supported", n.SCC))
	}
	i := slices.IndexFunc(n.Protocols, func(p nvmeproto.AuthProtocolDescriptor) bool { return p.AuthID == nvmeproto.AuthIDDHHMACCHAP })
	if i < 0 {
		return c.fail(nvmeproto.AuthFailProtocolUnusable, fmt.Errorf("dhchap: AUTH_Negotiate offers no DH-HMAC-CHAP protocol descriptor (%d descriptors)", len(n.Protocols)))
	}
	p := n.Protocols[i]
	hash, ok := pick(c.keys.Hashes, p.HashIDs)
	if !ok {
		return c.fail(nvmeproto.AuthFailHashUnusable, fmt.Errorf("dhchap: the host offers hash functions %v, the controller accepts %v", p.HashIDs, c.keys.Hashes))
	}
	group, ok := pick(c.keys.DHGroups, p.DHGroupIDs)
	if !ok {
		return c.fail(nvmeproto.AuthFailDHGroupUnusable, fmt.Errorf("dhchap: the host offers DH groups %v, the controller accepts %v", p.DHGroupIDs, c.keys.DHGroups))
	}
	c.tx.Hash, c.group = hash, group
	if group != nvmeproto.AuthDHGroupNull {
		g, err := LookupGroup(group)
		if err != nil {
			return c.fail(nvmeproto.AuthFailDHGroupUnusable, err)
		}
		beforeDH(group)
		if c.kp, err = g.GenerateKey(c.rand); err != nil {
			return c.fail(nvmeproto.AuthFailFailed, err)
		}
	}
	c.step = ctrlSendChallenge
	return nil
}

// pick returns the first of ours (preference order) that theirs offers.
func pick[T comparable](ours, theirs []T) (T, bool) {
	for _, x := range ours {
		if slices.Contains(theirs, x) {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func (c *Controller) reply(b []byte) error {
	var r nvmeproto.AuthReply
	if err := r.Unmarshal(b); err != nil {
		return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: %w", err))
	}
	if len(r.R1) != c.tx.Hash.Size() {
		return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: Reply has HL %d, %v needs %d", len(r.R1), c.tx.Hash, c.tx.Hash.Size()))
	}
	challenge := c.c1
	if c.kp == nil {
		if len(r.DHValue) != 0 {
			return c.fail(nvmeproto.AuthFailIncorrectPayload, fmt.Errorf("dhchap: Reply carries a %d-byte DH value in the NULL DH group", len(r.DHValue)))
		}
	} else {
		beforeDH(c.group)
		skey, err := c.kp.SharedSecret(r.DHValue)
		if err != nil {
			return c.fail(nvmeproto.AuthFailDHGroupUnusable, err)
		}
		c.skey = skey
		if challenge, err = c.tx.AugmentChallenge(skey, c.c1); err != nil {
			return c.fail(nvmeproto.AuthFailFailed, err)
		}
	}
	want, err := respond(c.tx.HostResponse, c.keys.Host, c.hostNQN, challenge, c.s1)
	if c.kp != nil {
		clear(challenge) // augmented: derived from the shared secret
	}
	if err != nil {
		return c.fail(nvmeproto.AuthFailFailed, err)
	}
	if !Equal(want, r.R1) {
		return c.fail(nvmeproto.AuthFailFailed, fmt.Errorf("dhchap: the host's response does not match its secret (wrong host key, or a key for another host NQN)"))
	}
	// The host asks to authenticate the controller when CVALID is set with a non-zero S2
	// (S2 = 0 with C2 only seeds a TLS PSK, which is not supported: ignored).
	if r.CValid && r.SeqNum != 0 {
		if c.keys.Ctrl == nil {
			return c.fail(nvmeproto.AuthFailFailed, fmt.Errorf("dhchap: the host asks to authenticate the controller, and no controller secret is configured for it"))
		}
		c.c2, c.s2 = r.C2, r.SeqNum
	}
	c.step = ctrlSendSuccess1
	return nil
}

// Receive produces the data of an Authentication Receive command with allocation length
// al. It returns an error, and leaves the transaction where it was, only when al cannot
// hold the message (the command then fails with Invalid Field and the host may retry).
// With nothing to send it returns Failure1 (incorrect protocol message).
func (c *Controller) Receive(al int) ([]byte, error) {
	switch c.step {
	case ctrlSendChallenge:
		if c.c1 == nil {
			c.c1 = make([]byte, c.tx.Hash.Size())
			if _, err := io.ReadFull(c.rand, c.c1); err != nil {
				c.fail(nvmeproto.AuthFailFailed, fmt.Errorf("dhchap: reading the challenge: %w", err))
				return c.Receive(al)
			}
			c.s1 = c.seq.Next(c.rand)
		}
		ch := nvmeproto.AuthChallenge{TID: c.tx.TID, HashID: c.tx.Hash, SeqNum: c.s1, C1: c.c1}
		if c.kp != nil {
			ch.DHGroupID, ch.DHValue = c.kp.Group().ID, c.kp.Public()
		}
		if al < ch.Size() {
			return nil, fmt.Errorf("dhchap: Authentication Receive allocation length %d, the %s Challenge needs %d", al, ch.DHGroupID, ch.Size())
		}
		b := make([]byte, ch.Size())
		ch.Marshal(b)
		c.step = ctrlExpectReply
		return b, nil
	case ctrlSendSuccess1:
		s := nvmeproto.AuthSuccess1{TID: c.tx.TID, HL: uint8(c.tx.Hash.Size())}
		if c.c2 != nil {
			challenge := c.c2
			var err error
			if c.kp != nil {
				if challenge, err = c.tx.AugmentChallenge(c.skey, c.c2); err != nil {
					c.fail(nvmeproto.AuthFailFailed, err)
					return c.Receive(al)
				}
			}
			s.R2, err = respond(c.tx.ControllerResponse, c.keys.Ctrl, c.subNQN, challenge, c.s2)
			if c.kp != nil {
				clear(challenge) // augmented: derived from the shared secret
			}
			if err != nil {
				c.fail(nvmeproto.AuthFailFailed, err)
				return c.Receive(al)
			}
			s.RValid = true
		}
		if al < s.Size() {
			return nil, fmt.Errorf("dhchap: Authentication Receive allocation length %d, Success1 needs %d", al, s.Size())
		}
		b := make([]byte, s.Size())
		s.Marshal(b)
		if c.c2 != nil {
			c.step = ctrlExpectSuccess2
		} else {
			c.step, c.authenticated = ctrlDone, true
		}
		c.clearSecrets()
		return b, nil
	case ctrlSendFailure1:
		if al < nvmeproto.AuthFailureSize {
			return nil, fmt.Errorf("dhchap: Authentication Receive allocation length %d, Failure1 needs %d", al, nvmeproto.AuthFailureSize)
		}
		b := make([]byte, nvmeproto.AuthFailureSize)
		(&nvmeproto.AuthFailure{AuthID: nvmeproto.AuthMsgFailure1, TID: c.tx.TID, Reason: nvmeproto.AuthFailReasonFailed, Explanation: c.failure}).Marshal(b)
		c.step = ctrlDone
		return b, nil
	}
	// Nothing to send: the answer is Failure1, which al must hold before the transaction
	// ends (a Receive too short for it changes nothing, whatever the step).
	if al < nvmeproto.AuthFailureSize {
		return nil, fmt.Errorf("dhchap: Authentication Receive allocation length %d while %v, Failure1 needs %d", al, c.step, nvmeproto.AuthFailureSize)
	}
	c.fail(nvmeproto.AuthFailIncorrectProtocol, fmt.Errorf("dhchap: Authentication Receive while %v", c.step))
	return c.Receive(al)
}

// controllerDHHook, when set, runs before each DH exponentiation of a Controller (its key
// pair in Send of AUTH_Negotiate, the shared secret in Send of the Reply).
var controllerDHHook atomic.Pointer[func(nvmeproto.AuthDHGroupID)]

func beforeDH(g nvmeproto.AuthDHGroupID) {
	if f := controllerDHHook.Load(); f != nil {
		(*f)(g)
	}
}

// SetControllerDHHook makes every Controller call f with the group's ID before each of its
// DH exponentiations, until restore runs. It is for tests: f may block, standing for a
// computation that takes long (ffdhe8192 takes tens of milliseconds), to show what else
// runs meanwhile. Host computations are not affected.
func SetControllerDHHook(f func(nvmeproto.AuthDHGroupID)) (restore func()) {
	old := controllerDHHook.Swap(&f)
	return func() { controllerDHHook.Store(old) }
}

// SeqCounter hands out the sequence numbers (S1, S2) of one entity: starting at a random
// value, incremented for each transaction, never 0. Safe for concurrent use.
type SeqCounter struct{ v atomic.Uint32 }

// Next returns the next sequence number; the first draws its start from rnd.
func (s *SeqCounter) Next(rnd io.Reader) uint32 {
	for {
		old := s.v.Load()
		n := old + 1
		if old == 0 {
			var b [4]byte
			_, _ = io.ReadFull(rnd, b[:])
			n = binary.LittleEndian.Uint32(b[:])
		}
		if n == 0 {
			n = 1
		}
		if s.v.CompareAndSwap(old, n) {
			return n
		}
	}
}
