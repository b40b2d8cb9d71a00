package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// In-band authentication (DH-HMAC-CHAP). When a queue's Connect returns AUTHREQ.ATR the
// host authenticates that queue before using it, as the Linux host does: AUTH_Negotiate
// (SHA-256/384/512, the NULL group and ffdhe2048..8192) by Authentication Send, the
// Challenge by Authentication Receive (4 KiB allocation length, enough for ffdhe8192),
// the Reply, then Success1 and, when Options.DHCHAPCtrlSecret asks to authenticate the
// controller too, the check of the controller's response and Success2. A failure on the
// host's side is reported to the controller with AUTH_Failure2; either side's failure
// fails Dial with a *ConnectError wrapping ErrAuthFailed, as does a queue whose Connect
// does not ask for authentication while Options.DHCHAPCtrlSecret is set (the controller
// would go unauthenticated). An I/O queue that authenticates keeps one of its entries
// for its authentication commands (queue.reserveAuthSlot); it is opened one entry larger
// when the controller allows, so its Depth is still Options.QueueSize.
//
// A controller may also ask for authentication later: an I/O command that fails with
// Authentication Required without Do Not Retry makes the host re-authenticate the
// controller and then send the command again, as the Linux host does
// (nvme_decide_disposition AUTHENTICATE: its dhchap_auth_work, then nvme_retry_req): see
// awaitReauth.

// ErrAuthFailed: in-band authentication failed (wrong or missing secret on either side).
var ErrAuthFailed = errors.New("initiator: authentication failed")

// authBufSize is the allocation length of Authentication Receive (the Linux host's).
const authBufSize = 4096

// parseSecrets checks the DH-HMAC-CHAP options (withDefaults).
func (o *Options) parseSecrets() error {
	var err error
	if o.DHCHAPSecret != "" {
		if o.hostSecret, err = dhchap.ParseSecret(o.DHCHAPSecret); err != nil {
			return fmt.Errorf("initiator: DH-HMAC-CHAP secret (--dhchap-secret): %w", err)
		}
	}
	if o.DHCHAPCtrlSecret != "" {
		if o.hostSecret == nil {
			return errors.New("initiator: a controller secret (--dhchap-ctrl-secret) needs the host secret (--dhchap-secret) too")
		}
		if o.ctrlSecret, err = dhchap.ParseSecret(o.DHCHAPCtrlSecret); err != nil {
			return fmt.Errorf("initiator: DH-HMAC-CHAP controller secret (--dhchap-ctrl-secret): %w", err)
		}
	}
	return nil
}

// authBuffer returns the controller's buffer for authentication messages, registered
// memory of its own made at the first authentication and freed by teardown
// (releaseAuthBuffer). Authentication does not take pool buffers: when the commands
// waiting for a re-authentication hold every pool buffer (the bounce buffers of ReadAt
// and WriteAt), the re-authentication still has one. Its callers use it one at a time:
// Dial's connect runs on one goroutine, and re-authentications hold authMu. A command
// whose exec returned before it ended (its context ended) holds its own reference:
// detachAuthBuffer leaves the buffer to it, and the next transaction gets a new one.
func (c *Controller) authBuffer() (*Buffer, error) {
	if c.authBuf != nil {
		return c.authBuf, nil
	}
	// A user of the pool's gate, as a dedicated buffer is: the transport the region is
	// registered with is closed after it is freed.
	if c.closing.Load() || !c.pool.users.Enter() {
		return nil, fmt.Errorf("initiator: authentication buffer: %w", ErrClosed)
	}
	reg, err := c.tr.newRegion(authBufSize)
	if err != nil {
		c.pool.leave()
		return nil, fmt.Errorf("initiator: authentication buffer of %d bytes: %w", authBufSize, err)
	}
	free := reg.close
	reg.close = func() error {
		var err error
		if free != nil {
			err = free()
		}
		c.pool.leave()
		return err
	}
	c.authBuf = &Buffer{reg: reg, b: reg.mem[:authBufSize:authBufSize]}
	c.authBuf.refs.Store(1)
	return c.authBuf, nil
}

// detachAuthBuffer drops the controller's reference to the authentication buffer after
// an authentication command was left outstanding (its exec's context ended): the
// controller may still transfer into the buffer, so no later transaction uses it, and the
// command's reference frees it when the command ends. Called by the buffer's user (see
// authBuffer).
func (c *Controller) detachAuthBuffer() {
	if c.authBuf != nil {
		c.authBuf.Release()
		c.authBuf = nil
	}
}

// releaseAuthBuffer frees the authentication buffer (teardown, once every queue has
// ended its commands).
func (c *Controller) releaseAuthBuffer() {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	if c.authBuf != nil {
		c.authBuf.Release()
		c.authBuf = nil
	}
}

// authenticate runs one DH-HMAC-CHAP transaction on q.
func (c *Controller) authenticate(ctx context.Context, q *queue) error {
	o := &c.opts
	fail := func(reason string, err error) error {
		return &ConnectError{Target: o.target(), QID: q.qid, SubNQN: o.SubNQN, HostNQN: o.HostNQN,
			Reason: reason, Err: errors.Join(ErrAuthFailed, err)}
	}
	if o.hostSecret == nil {
		return fail("the controller requires in-band authentication (Connect AUTHREQ): give a DH-HMAC-CHAP secret (--dhchap-secret)", nil)
	}
	buf, err := c.authBuffer()
	if err != nil {
		return err
	}
	tid := uint16(c.authTID.Add(1))
	h, err := dhchap.NewHost(dhchap.HostConfig{Secret: o.hostSecret, CtrlSecret: o.ctrlSecret,
		HostNQN: o.HostNQN, SubNQN: o.SubNQN, Seq: &c.authSeq}, tid)
	if err != nil {
		return fail(err.Error(), err)
	}
	send := func(name string, msg []byte) error {
		copy(buf.b, msg)
		sub := buf.Slice(0, len(msg))
		defer sub.Release()
		r := &Request{Op: opCommand, name: "Authentication Send (" + name + ")", Buf: sub, dir: nvmeproto.DirHostToCtrl,
			reserved: true}
		(&nvmeproto.AuthSendCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: nvmeproto.AuthSPSP0,
			SPSP1: nvmeproto.AuthSPSP1, TL: uint32(len(msg))}).ToCommand(&r.cmd)
		completed, err := q.execWait(ctx, r)
		if !completed {
			c.detachAuthBuffer()
		}
		return err
	}
	recv := func(name string) ([]byte, error) {
		clear(buf.b)
		r := &Request{Op: opCommand, name: "Authentication Receive (" + name + ")", Buf: buf, dir: nvmeproto.DirCtrlToHost,
			reserved: true}
		(&nvmeproto.AuthReceiveCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: nvmeproto.AuthSPSP0,
			SPSP1: nvmeproto.AuthSPSP1, AL: authBufSize}).ToCommand(&r.cmd)
		completed, err := q.execWait(ctx, r)
		if !completed {
			c.detachAuthBuffer()
		}
		if err != nil {
			return nil, err
		}
		return append([]byte(nil), buf.b...), nil
	}
	// protocol reports a failed step: Failure2 to the controller unless it failed first.
	protocol := func(err error) error {
		if f := h.Failure2(err); f != nil {
			if serr := send("AUTH_Failure2", f); serr != nil {
				err = errors.Join(err, serr)
			}
		}
		var pe *dhchap.ProtocolError
		reason := err.Error()
		switch {
		case errors.As(err, &pe) && pe.Remote && pe.Explanation == nvmeproto.AuthFailProtocolUnusable:
			// The host offers DH-HMAC-CHAP: the controller cannot run it for this host
			// (the gonvmf and Linux targets answer so when they cannot use their secret).
			reason = fmt.Sprintf("the controller cannot authenticate host %s (%v): its secret for the host is unreadable or invalid; see the target's log",
				o.HostNQN, pe.Explanation)
		case errors.As(err, &pe) && pe.Remote:
			reason = fmt.Sprintf("the controller rejected the authentication (%v): check the host secret (--dhchap-secret) against the target's for host %s",
				pe.Explanation, o.HostNQN)
		}
		return fail(reason, err)
	}

	if err := send("AUTH_Negotiate", h.Negotiate()); err != nil {
		return err
	}
	msg, err := recv("Challenge")
	if err != nil {
		return err
	}
	reply, err := h.Challenge(msg)
	if err != nil {
		return protocol(err)
	}
	if err := send("Reply", reply); err != nil {
		return err
	}
	if msg, err = recv("Success1"); err != nil {
		return err
	}
	s2, err := h.Success1(msg)
	if err != nil {
		return protocol(err)
	}
	if s2 != nil {
		if err := send("Success2", s2); err != nil {
			return err
		}
	}
	if q.qid == 0 {
		hash, group := h.Selected()
		c.log.Info("authenticated", "hash", hash.String(), "dhgroup", group.String(), "bidirectional", s2 != nil)
	}
	return nil
}

// Reauthenticate runs a new authentication transaction on the admin queue and then on
// every I/O queue that authenticated at its Connect, as the Linux host does when its
// secret changes (writing /sys/class/nvme/nvmeX/dhchap_secret; nvme_ctrl_auth_work).
// Non-empty hostSecret / ctrlSecret replace the secrets first. The controller keeps
// working during the transactions; a failure is returned, and the controller then
// disconnects the queues that failed. It waits for a re-authentication a command's
// Authentication Required started, and that one for it: one runs at a time. When ctx
// ends it returns at once; a step left in flight keeps its message buffer, and the next
// transaction authenticates in a new one.
func (c *Controller) Reauthenticate(ctx context.Context, hostSecret, ctrlSecret string) error {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	if hostSecret != "" || ctrlSecret != "" {
		o := c.opts
		if hostSecret != "" {
			o.DHCHAPSecret = hostSecret
		}
		if ctrlSecret != "" {
			o.DHCHAPCtrlSecret = ctrlSecret
		}
		if err := o.parseSecrets(); err != nil {
			return err
		}
		c.opts.DHCHAPSecret, c.opts.DHCHAPCtrlSecret = o.DHCHAPSecret, o.DHCHAPCtrlSecret
		c.opts.hostSecret, c.opts.ctrlSecret = o.hostSecret, o.ctrlSecret
	}
	seq := c.reauthBegin()
	if err := c.reauthAll(ctx); err != nil {
		return err
	}
	c.reauthMu.Lock()
	c.reauthDone.Store(seq)
	c.reauthMu.Unlock()
	return nil
}

// reauthAll authenticates the admin queue, then the I/O queues that authenticated at
// their Connect (nvme_ctrl_auth_work skips the others too). Called with authMu held. A
// failure wraps ErrAuthFailed and names the queue whose transaction failed.
func (c *Controller) reauthAll(ctx context.Context) error {
	if err := c.authenticate(ctx, c.admin); err != nil {
		return reauthError(c.admin, err)
	}
	for _, q := range c.io {
		if !q.authed {
			continue
		}
		if err := c.authenticate(ctx, q); err != nil {
			return reauthError(q, err)
		}
	}
	return nil
}

// authError is a failed re-authentication: its message says which queue's transaction
// failed and why, and it wraps ErrAuthFailed and the transaction's error (a
// *ConnectError, whose own message speaks of a connect, or what exec returned).
type authError struct {
	msg  string
	errs []error
}

func (e *authError) Error() string   { return e.msg }
func (e *authError) Unwrap() []error { return e.errs }

// reauthError wraps the error of q's re-authentication transaction.
func reauthError(q *queue, err error) error {
	what := "the admin queue"
	if q.qid != 0 {
		what = fmt.Sprintf("I/O queue %d", q.qid)
	}
	reason := err.Error()
	if ce := (*ConnectError)(nil); errors.As(err, &ce) {
		reason = ce.Reason // Reason says what Err's parts say
	}
	return &authError{msg: fmt.Sprintf("%v: re-authenticating %s: %s", ErrAuthFailed, what, reason), errs: []error{ErrAuthFailed, err}}
}

// reauthWaiter is a slot waiting for a re-authentication with its request r (the slot's
// retryReq when it registered), and the Command Retry Delay to wait after it.
type reauthWaiter struct {
	s     *slot
	r     *Request
	delay time.Duration
}

// awaitReauth makes s, whose I/O command r (named op; sent is the slot's sentAuth of that
// attempt, read by retry before it published r) failed with Authentication Required and
// waits in retryReq, wait for a re-authentication of the controller: the one running, which
// any Authentication Required seen meanwhile joins, or a new one it starts (the Linux
// host queues its controller's dhchap_auth_work, which runs one at a time). An attempt
// sent before the last re-authentication succeeded met the controller before it: it is
// retried without another. Unlike the Linux host, which requeues the command at once,
// the retry's delay starts only once the re-authentication succeeded, so that the retry
// does not meet the same status. A request no longer in retryReq (its caller stopped it,
// and retryDue ended it) waits for nothing. Called on the completion goroutine
// (queue.retry), so teardown's wait for bg, which starts once every completion goroutine
// has returned, never races with its bg.Add.
func (c *Controller) awaitReauth(s *slot, r *Request, delay time.Duration, sent uint64, op string) {
	c.reauthMu.Lock()
	defer c.reauthMu.Unlock()
	if s.retryReq.Load() != r {
		return
	}
	if !c.reauthRunning && sent < c.reauthDone.Load() {
		s.timer.Reset(delay)
		return
	}
	if !c.reauthRunning {
		c.reauthRunning = true
		c.reauthGen++
		c.bg.Add(1)
		go c.reauthenticate(c.reauthGen, s.q.qid, op)
	}
	s.authWait.Store(c.reauthGen) // the running one's: only reauthenticate advances reauthGen
	c.reauthWaiters = append(c.reauthWaiters, reauthWaiter{s, r, delay})
}

// reauthBegin numbers a re-authentication that starts (Reauthenticate's or
// reauthenticate's, with authMu held, so in the order they run): once it succeeded,
// reauthDone holds its number, and a command sent before then that fails with
// Authentication Required is retried without another.
func (c *Controller) reauthBegin() uint64 {
	c.reauthMu.Lock()
	defer c.reauthMu.Unlock()
	c.reauthSeq++
	return c.reauthSeq
}

// reauthenticate is re-authentication gen, which a command (op on queue qid) failed with
// Authentication Required started. On success it arms the timers of the commands that
// wait for it, those whose slot still waits with the request it registered (a slot
// whose command left retryReq meanwhile, stopped by its caller or aborted, waits for
// nothing). A failure is a soft state, as in the Linux host (nvme_ctrl_auth_work: the
// credentials stay valid until the controller terminates the connection): it is logged,
// the controller stays up, and the commands that still wait for it (not for a later one)
// end with their Authentication Required status wrapped with the failure
// (queue.endAuthWait), not retried again; the controller disconnects the queues whose
// authentication it refused if it wants to (gonvmf's target AuthFailureGrace after the
// failure). Once the controller is closing it does not authenticate, and ends nothing:
// the teardown ends the waiting commands with ErrClosed.
func (c *Controller) reauthenticate(gen uint64, qid uint16, op string) {
	defer c.bg.Done()
	var err error
	var seq uint64
	c.authMu.Lock()
	switch {
	case c.closing.Load():
		err = ErrClosed
	case c.opts.hostSecret == nil:
		err = fmt.Errorf("%w: no DH-HMAC-CHAP secret is configured: give the host's (Options.DHCHAPSecret, --dhchap-secret)", ErrAuthFailed)
	default:
		c.log.Info("re-authenticating: the controller answered Authentication Required", "qid", qid, "command", op)
		seq = c.reauthBegin()
		err = c.reauthAll(context.Background())
	}
	c.authMu.Unlock()
	c.reauthMu.Lock()
	waiters := c.reauthWaiters
	c.reauthWaiters = nil
	c.reauthRunning = false
	if err == nil {
		c.reauthDone.Store(seq)
	}
	c.reauthMu.Unlock()
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return
		}
		c.log.Warn("re-authentication failed: the commands that waited for it fail; the controller stays connected until it disconnects",
			"qid", qid, "command", op, "err", err)
		cause := fmt.Errorf("re-authenticating the controller failed: %w", err)
		for _, w := range waiters {
			w.s.q.endAuthWait(w, gen, cause)
		}
		return
	}
	for _, w := range waiters {
		if w.s.retryReq.Load() == w.r && w.s.authWait.CompareAndSwap(gen, 0) {
			w.s.timer.Reset(w.delay)
		}
	}
}
