package initiator

import (
	"context"
	"errors"
	"fmt"

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
// would go unauthenticated).

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
	buf, err := c.pool.Get(ctx, authBufSize)
	if err != nil {
		return err
	}
	defer buf.Release()
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
		r := &Request{Op: opCommand, name: "Authentication Send (" + name + ")", Buf: sub, dir: nvmeproto.DirHostToCtrl}
		(&nvmeproto.AuthSendCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: nvmeproto.AuthSPSP0,
			SPSP1: nvmeproto.AuthSPSP1, TL: uint32(len(msg))}).ToCommand(&r.cmd)
		return q.exec(ctx, r)
	}
	recv := func(name string) ([]byte, error) {
		clear(buf.b)
		r := &Request{Op: opCommand, name: "Authentication Receive (" + name + ")", Buf: buf, dir: nvmeproto.DirCtrlToHost}
		(&nvmeproto.AuthReceiveCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: nvmeproto.AuthSPSP0,
			SPSP1: nvmeproto.AuthSPSP1, AL: authBufSize}).ToCommand(&r.cmd)
		if err := q.exec(ctx, r); err != nil {
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
// every I/O queue, as the Linux host does when its secret changes (writing
// /sys/class/nvme/nvmeX/dhchap_secret). Non-empty hostSecret / ctrlSecret replace the
// secrets first. The controller keeps working during the transactions; a failure is
// returned, and the controller then disconnects the queues that failed.
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
	if err := c.authenticate(ctx, c.admin); err != nil {
		return err
	}
	for _, q := range c.io {
		if err := c.authenticate(ctx, q); err != nil {
			return err
		}
	}
	return nil
}
