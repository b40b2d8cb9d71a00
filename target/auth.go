package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// In-band authentication (DH-HMAC-CHAP, NVMe Base 2.0 §8.13).
//
// A host that has a secret for a subsystem must authenticate every queue it connects:
// Connect succeeds with AUTHREQ.ATR in DW0, and until an authentication transaction on
// that queue succeeds, every command but Authentication Send/Receive fails with
// Authentication Required. The transaction itself (internal/dhchap.Controller) runs on the
// queue's Authentication Send/Receive commands, which succeed as NVMe commands whatever
// the protocol outcome: failures travel as AUTH_Failure1/2 messages. A failed transaction
// (or one not completed within AuthTimeout of the Connect) is logged with the host NQN and
// the reason (once per host and interval, as refused Connects are), and the queue is
// disconnected AuthFailureGrace later, once the host has had the Failure1 message. A new
// AUTH_Negotiate on an authenticated queue re-authenticates it; the queue stays
// authenticated while that runs and loses it if it fails; one not ended within
// AuthTimeout of its AUTH_Negotiate is abandoned, and the queue stays authenticated. A
// queue not authenticated yet may start at most authMaxTransactions transactions: each
// costs the target a DH key pair and a shared secret (tens of milliseconds of a CPU for
// ffdhe8192), and the host NQN that gets a queue this far is no secret. An authenticated
// queue may start at most authMaxReauths re-authentications within AuthTimeout. The next
// AUTH_Negotiate is answered with Failure1, which fails the queue.
//
// Authentication commands do not run on the transport's goroutine, which serves other
// queues too (an RDMA poll group serves queues of many hosts): a DH exponentiation of
// ffdhe8192 takes tens of milliseconds, and an admin queue's AUTH_Negotiate reads the
// host's secret files. Execute queues them for the queue's authentication worker, a
// goroutine that exists while the queue has some queued and runs them one at a time in
// the order Execute received them (the admin queue's are not queued for the admin worker:
// they do not wait behind its commands, nor its commands behind them). Each runs holding
// one of the target's authentication slots (authSlots: half the CPUs, at least two), so
// that authentication storms leave CPUs to the transports, and one of its host's (half
// the target's, at least one), so that one host NQN, whatever number of queues and
// controllers it authenticates at once, cannot hold them all. It waits for its slots as
// long as it must, or until its queue closes (an unauthenticated queue is closed
// AuthTimeout after its Connect); none starts once Close has stopped the queue's
// authentication. While a step waits for its slots or runs, its
// controller's keep-alive timer does not expire, and its completion counts as a command
// for it: the host waits for the answer and sends nothing else meanwhile (the Linux host
// authenticates its admin queue inside its Connect, before it sends any Keep Alive), so a
// wait behind other steps — other hosts', or its own other controllers' after a reconnect
// — must not fail the controller on keep-alive. A host over its share waits rather than
// being answered with an error: the specification has no busy status for authentication
// (nor does the Linux target, which computes inline without a bound), the Linux host ends
// the transaction at any NVMe error status of Authentication Send/Receive, without a
// retry, and it re-authenticates all I/O queues of a controller at once. A command
// completes through TransportQueue.Complete from the worker, as a backend completes I/O.
// Begin still answers Authentication Required to the queue's other commands until the
// transaction that authenticates it has completed.
//
// Keys come from AuthKeys: by default the running configuration's hosts section and the
// subsystems' auth_required, which change at run time (SetHostKeys, RemoveHostKeys,
// SetAuthRequired). Connect decides from memory whether the host authenticates
// (AuthKeys.HostAuth: it has a secret configured), on the transport's goroutine, which
// reads no file. The admin queue's every AUTH_Negotiate, first authentication or
// re-authentication, then takes the host's keys (AuthKeys.HostKeys, which reads "file:"
// secrets) on the queue's authentication worker, before the step takes its slots or the
// queue's authentication lock: a read that hangs holds neither. The read is bounded by
// SecretReadTimeout and by the queue's closing; a file's read in flight is shared by
// every step that needs it, so a filesystem that hangs costs one goroutine per file,
// however many hosts retry. The controller's I/O queues use the keys its admin queue's
// last transaction took. So a key rotation applies to new connections and to
// re-authentications, and leaves authenticated queues alone until they reconnect or
// re-authenticate. An admin queue's transaction for a host whose keys cannot be taken
// fails at its AUTH_Negotiate (AUTH_Failure1; the Linux target answers the same for
// keys it cannot use): with "authentication protocol not usable" when the secret cannot
// be read or parsed (logged with the file and the error), with "authentication failed"
// when the host has no secret any more. A read that does not end within
// SecretReadTimeout is no verdict on the keys: the AUTH_Negotiate completes with Command
// Interrupted, without DNR, and no transaction starts (authKeysTimedOut), so that the
// host reconnects later. Either way the queue is then disconnected as for any failure,
// which ends the controller; until then the controller's I/O queues connect and
// re-authenticate with the keys it took (as with the Linux target).

// AuthKeys tells the target which hosts authenticate and with which keys. Implementations
// must be safe for concurrent use.
type AuthKeys interface {
	// HostAuth reports whether host hostNQN authenticates to subsystem subNQN (it has a
	// secret configured), and whether the subsystem admits only hosts that authenticate
	// (a host that does not is then refused at Connect). Connect asks it on the
	// transport's goroutine, which serves other hosts' queues too: it answers from memory
	// and must not block (no file I/O).
	HostAuth(subNQN, hostNQN string) (authenticates, required bool)
	// HostKeys returns the DH-HMAC-CHAP keys of host hostNQN for subsystem subNQN, nil
	// (and no error) if the host has none any more. The target asks it at each
	// AUTH_Negotiate of an admin queue, on the queue's authentication worker; it may read
	// files, and must return once ctx is done (SecretReadTimeout, or the queue closed).
	// An error fails the transaction; it should name what could not be read.
	HostKeys(ctx context.Context, subNQN, hostNQN string) (*dhchap.HostKeys, error)
}

// WithAuthKeys sets where the target finds its hosts' DH-HMAC-CHAP keys, replacing the
// ones of its configuration.
func WithAuthKeys(k AuthKeys) Option { return func(t *Target) { t.authKeys = k } }

// Timeouts of in-band authentication.
var (
	// AuthTimeout bounds the time from a queue's Connect to its authentication (the queue
	// is then disconnected), and from a re-authentication's AUTH_Negotiate to its end (the
	// transaction is then abandoned: its state is dropped and the queue stays
	// authenticated, as the Linux target's auth_expired_work does).
	AuthTimeout = 60 * time.Second
	// AuthFailureGrace is how long a queue whose authentication failed stays connected,
	// so that the host receives the Failure1 message before the connection goes.
	AuthFailureGrace = 2 * time.Second
	// SecretReadTimeout bounds the time an admin queue's AUTH_Negotiate waits for its
	// host's keys (the secret files' reads): longer, and the AUTH_Negotiate completes with
	// Command Interrupted and the queue is disconnected, well before the host gives up on
	// its command (the Linux host waits 60 s for an admin command) and before AuthTimeout.
	// It bounds as well the reads of a host's secrets by SetHostKeys and New, which then
	// fail.
	SecretReadTimeout = 10 * time.Second
)

// ErrAuthFailed is the reason a queue is disconnected after failing to authenticate.
var ErrAuthFailed = errors.New("target: in-band authentication failed")

// authMaxMessage bounds the data of Authentication Send and the allocation length of
// Authentication Receive: an AUTH_Negotiate with 255 descriptors is 16328 bytes, every
// other message at most 1168.
const authMaxMessage = 16 << 10

// authMaxTransactions bounds the transactions (AUTH_Negotiates) a queue may start before it
// is authenticated. A host retries a failed transaction on a new connection, so one is
// all it needs; the margin is for a host that restarts a transaction it lost track of.
const authMaxTransactions = 3

// authMaxReauths bounds the re-authentications (AUTH_Negotiates on an authenticated
// queue) a queue may start within AuthTimeout. Each costs a DH key pair and a shared
// secret (about 50 ms of a CPU for ffdhe8192) and an authentication slot, and an admin
// queue's also reads the host's secret file. The Linux host re-authenticates a queue when
// the operator writes its dhchap_secret or dhchap_ctrl_secret: two for a rotation of both
// keys; the margin is for a rotation retried. So a host gets at most
// authMaxReauths × 50 ms of a slot per AuthTimeout and queue.
const authMaxReauths = 4

// authSlotCount is the number of authentication steps the target runs at once: half the
// CPUs Go runs on (the other half stay with the transports' goroutines when every slot
// computes a DH exponentiation), at least two. 0 in authSlotsFixed: by GOMAXPROCS.
func authSlotCount() int {
	if authSlotsFixed > 0 {
		return authSlotsFixed
	}
	return max(2, runtime.GOMAXPROCS(0)/2)
}

// authSlotsFixed, when not 0, is authSlotCount's answer (tests).
var authSlotsFixed int

// authSlots bounds the authentication steps running at once in a target: in all, and per
// host NQN. A step holds one of its host's slots (perHost: half of all, at least one)
// and then one of all while it runs, so that one host — however many queues it
// authenticates at once, over however many connections — leaves the other half to
// other hosts; its steps beyond that wait for its own slots, holding none of all.
type authSlots struct {
	all     chan struct{}
	perHost int

	mu    sync.Mutex
	hosts map[string]*authHostSlots // hosts with steps running or waiting
}

// authHostSlots are one host's slots.
type authHostSlots struct {
	nqn   string
	slots chan struct{}
	refs  int // steps running or waiting for a slot (under authSlots.mu)
}

func newAuthSlots() *authSlots {
	n := authSlotCount()
	return &authSlots{all: make(chan struct{}, n), perHost: max(1, n/2), hosts: map[string]*authHostSlots{}}
}

// acquire waits for a slot of host's and then one of all; false, holding none, when stop
// is closed, whether or not a slot is free: a step never starts once its queue has
// stopped.
func (p *authSlots) acquire(host string, stop <-chan struct{}) (*authHostSlots, bool) {
	p.mu.Lock()
	h := p.hosts[host]
	if h == nil {
		h = &authHostSlots{nqn: host, slots: make(chan struct{}, p.perHost)}
		p.hosts[host] = h
	}
	h.refs++
	p.mu.Unlock()
	select {
	case h.slots <- struct{}{}:
	case <-stop:
		p.unref(h)
		return nil, false
	}
	select {
	case p.all <- struct{}{}:
	case <-stop:
		<-h.slots
		p.unref(h)
		return nil, false
	}
	// A select picks any ready case: a free slot may have won over a closed stop.
	if isClosed(stop) {
		p.release(h)
		return nil, false
	}
	return h, true
}

// isClosed reports whether ch is closed (it is never sent to).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// release gives back the slots acquire took.
func (p *authSlots) release(h *authHostSlots) {
	<-p.all
	<-h.slots
	p.unref(h)
}

// unref forgets a host with no step running or waiting.
func (p *authSlots) unref(h *authHostSlots) {
	p.mu.Lock()
	if h.refs--; h.refs == 0 {
		delete(p.hosts, h.nqn)
	}
	p.mu.Unlock()
}

// ctrlAuth is a controller's authentication state: its host's keys and the sequence
// numbers of its transactions.
type ctrlAuth struct {
	mu   sync.Mutex
	keys dhchap.HostKeys
	seq  dhchap.SeqCounter
}

func (a *ctrlAuth) current() dhchap.HostKeys {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys
}

// queueAuth is one queue's authentication state. ok is read by Begin without the lock.
type queueAuth struct {
	ok     atomic.Bool
	mu     sync.Mutex
	ctl    *dhchap.Controller
	timer  *time.Timer // AuthTimeout, then AuthFailureGrace
	closed bool
	// failed: a transaction failed; the queue is disconnected when the grace ends, and
	// nothing the host sends meanwhile (another failure, a new transaction, even a
	// successful one) moves that or authenticates the queue. Otherwise a host could
	// keep an unauthenticated queue by failing every grace period, guessing for ever.
	failed bool
	// started counts the transactions started while the queue was not authenticated.
	started int
	// reauths counts the re-authentications started: a re-authentication's timer acts
	// only while it is the latest.
	reauths uint64
	// reauthAt holds when the last authMaxReauths re-authentications were asked for,
	// the oldest at reauthAt[reauthNext] (zero while fewer were).
	reauthAt   [authMaxReauths]time.Time
	reauthNext int

	// work is the queue's authentication worker (see execAuth). stopped closes when the
	// queue closes (stop): a command waiting for its host's keys or for a slot then
	// completes with Command Aborted due to SQ Deletion.
	work    workQueue
	stopped chan struct{}
}

// allowReauth records a re-authentication asked for at now, or refuses it when the
// queue started authMaxReauths of them within AuthTimeout before now. Called with a.mu
// held.
func (a *queueAuth) allowReauth(now time.Time) error {
	oldest := a.reauthAt[a.reauthNext]
	if !oldest.IsZero() && now.Sub(oldest) < AuthTimeout {
		return fmt.Errorf("re-authentication refused: the queue asked for %d within %s (at most %d re-authentications per queue within the authentication timeout)",
			authMaxReauths+1, now.Sub(oldest).Round(time.Millisecond), authMaxReauths)
	}
	a.reauthAt[a.reauthNext] = now
	a.reauthNext = (a.reauthNext + 1) % authMaxReauths
	return nil
}

// newQueueAuth starts the authentication state of queue q bound by b (with its
// controller's current keys: none yet for an admin queue, whose AUTH_Negotiate takes
// them).
func (q *Queue) newQueueAuth(b *binding) *queueAuth {
	c, qid := b.ctrl, b.qid
	ctl := dhchap.NewController(c.auth.current(), c.hostNQN, c.subsys.nqn, &c.auth.seq, nil)
	a := &queueAuth{ctl: ctl, stopped: make(chan struct{})}
	a.work.run = func(r *Request) { q.authWorkerStep(r, b) }
	timeout := AuthTimeout
	a.timer = time.AfterFunc(timeout, func() {
		if !a.ok.Load() {
			q.t.authLog(c.log, slog.LevelWarn, "auth-timeout", c.hostNQN, "authentication timed out: queue disconnected",
				"qid", qid, "timeout", timeout)
			q.t.rejects.add(RejectAuthFailed)
			q.disconnect(ErrAuthFailed)
		}
	})
	return a
}

// stop releases the queue's timer and wipes the key material of a transaction left
// unfinished (Close).
func (a *queueAuth) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		close(a.stopped)
	}
	a.closed = true
	a.timer.Stop()
	a.ctl.Abandon()
}

// isAuthCommand reports whether cmd is Authentication Send or Receive.
func isAuthCommand(cmd *nvmeproto.Command) bool {
	return cmd.Opcode == nvmeproto.OpFabrics &&
		(cmd.FabricsType() == nvmeproto.FabricsAuthSend || cmd.FabricsType() == nvmeproto.FabricsAuthReceive)
}

// beginAuth validates an Authentication Send/Receive on a connected queue.
func (q *Queue) beginAuth(r *Request, b *binding) nvmeproto.Status {
	cmd := &r.Cmd
	if st := checkFlags(cmd); st != nvmeproto.StatusSuccess {
		return st
	}
	if b.auth == nil {
		// The host has no secret: nothing to authenticate (as the Linux target answers).
		return nvmeproto.StatusInvalidOpcode.WithDNR()
	}
	var secp, spsp0, spsp1 uint8
	var n uint32
	if cmd.FabricsType() == nvmeproto.FabricsAuthSend {
		var as nvmeproto.AuthSendCommand
		as.FromCommand(cmd)
		secp, spsp0, spsp1, n = as.SECP, as.SPSP0, as.SPSP1, as.TL
	} else {
		var ar nvmeproto.AuthReceiveCommand
		ar.FromCommand(cmd)
		secp, spsp0, spsp1, n = ar.SECP, ar.SPSP0, ar.SPSP1, ar.AL
	}
	if secp != nvmeproto.AuthSECPDHHMACCHAP || spsp0 != nvmeproto.AuthSPSP0 || spsp1 != nvmeproto.AuthSPSP1 ||
		n == 0 || n > authMaxMessage {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	if st := ParseSGL(r, &q.port.caps); st != nvmeproto.StatusSuccess {
		return st
	}
	if r.Length != n {
		return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
	}
	return nvmeproto.StatusSuccess
}

// execAuth queues an Authentication Send/Receive that beginAuth accepted for the queue's
// authentication worker, which runs them in order (authWorkerStep).
func (q *Queue) execAuth(r *Request, b *binding) {
	b.ctrl.authBusy.Add(1)
	b.auth.work.push(r)
}

// authWorkerStep runs a queued authentication command on the queue's authentication
// worker, holding authentication slots (its host's and the target's). A command whose
// queue closes before it runs is not run: it completes with Command Aborted due to SQ
// Deletion. Each command counts in its controller's authBusy from execAuth until it has
// completed, and its completion is keep-alive activity: the host's keep-alive timeout
// does not run while its authentication waits for the target.
func (q *Queue) authWorkerStep(r *Request, b *binding) {
	q.authStep(r, b)
	b.ctrl.activity()
	b.ctrl.authBusy.Add(-1)
}

// authStep runs one queued authentication command holding its slots, or completes it
// with Command Aborted due to SQ Deletion when its queue is closing. An admin queue's
// AUTH_Negotiate first takes the host's keys, holding no slot and not the queue's
// authentication lock (the read of a secret file may take up to SecretReadTimeout).
//
// The keys are the ones the configuration holds when the step runs, not when it started
// waiting for its slots: the load records the AuthKeys generation it read, and runAuth
// compares it with the current one (from memory). A change in between (SetHostKeys,
// RemoveHostKeys, a reload) sends the step back to load the keys again, holding no slot;
// after authKeysLoads loads that a change overtook, the AUTH_Negotiate is refused.
func (q *Queue) authStep(r *Request, b *binding) {
	for load := 1; ; load++ {
		if q.closing() {
			q.finish(r, nvmeproto.StatusAbortSQDeletion)
			return
		}
		var keys hostKeysLoad
		if b.qid == 0 && isNegotiate(r) {
			keys = q.t.loadHostKeys(b.ctrl, b.auth.stopped)
			keys.last = load == authKeysLoads
			if isClosed(b.auth.stopped) {
				q.finish(r, nvmeproto.StatusAbortSQDeletion)
				return
			}
		}
		slots, ok := q.t.authSlots.acquire(b.ctrl.hostNQN, b.auth.stopped)
		if !ok {
			q.finish(r, nvmeproto.StatusAbortSQDeletion)
			return
		}
		ran := q.runAuth(r, b, keys)
		q.t.authSlots.release(slots)
		if ran {
			return
		}
	}
}

// authKeysLoads bounds the loads of a host's keys for one AUTH_Negotiate when changes of
// the AuthKeys keep overtaking them (see authStep).
const authKeysLoads = 3

// isNegotiate reports whether r is an Authentication Send of an AUTH_Negotiate.
func isNegotiate(r *Request) bool {
	if r.Cmd.FabricsType() != nvmeproto.FabricsAuthSend {
		return false
	}
	data := r.Data[:r.Length]
	return len(data) >= 2 && data[0] == nvmeproto.AuthTypeCommon && data[1] == nvmeproto.AuthMsgNegotiate
}

// hostKeysLoad is what an admin queue's AUTH_Negotiate found of its host's keys: the keys
// (nil when the host has none any more), or why they could not be taken.
type hostKeysLoad struct {
	keys     *dhchap.HostKeys
	err      error
	timedOut bool // err is SecretReadTimeout's expiry: the file system may answer later

	loaded bool   // the keys were loaded (an admin queue's AUTH_Negotiate)
	gen    uint64 // the AuthKeys generation read before the load
	last   bool   // no load follows: a stale load refuses the AUTH_Negotiate
}

// authKeysGenerations is implemented by AuthKeys that count their changes: generation
// answers from memory and changes whenever HostKeys' answers may have.
type authKeysGenerations interface {
	generation() uint64
}

// authKeysGen is the generation of the target's AuthKeys, 0 when they count no changes.
func (t *Target) authKeysGen() uint64 {
	if g, ok := t.authKeys.(authKeysGenerations); ok {
		return g.generation()
	}
	return 0
}

// loadHostKeys takes the keys of controller c's host from the target's AuthKeys, waiting
// at most SecretReadTimeout, and not once stop is closed. A failure is logged (once per
// host and interval) with what could not be read and why.
func (t *Target) loadHostKeys(c *controller, stop <-chan struct{}) hostKeysLoad {
	if t.authKeys == nil {
		return hostKeysLoad{}
	}
	gen := t.authKeysGen()
	timeout := SecretReadTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() { // ends with ctx: at the latest when loadHostKeys returns
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	keys, err := t.authKeys.HostKeys(ctx, c.subsys.nqn, c.hostNQN)
	timedOut := errors.Is(err, context.DeadlineExceeded)
	switch {
	case err == nil || isClosed(stop):
	case timedOut:
		t.authLog(c.log, slog.LevelError, "auth-secret", c.hostNQN,
			"cannot read the host's DH-HMAC-CHAP secret in time: its AUTH_Negotiate completes with Command Interrupted and the queue is disconnected, so that the host reconnects",
			"timeout", timeout, "err", err)
	default:
		t.authLog(c.log, slog.LevelError, "auth-secret", c.hostNQN,
			"cannot read the host's DH-HMAC-CHAP secret: its authentication fails (AUTH_Failure1, authentication protocol not usable)",
			"err", err)
	}
	return hostKeysLoad{keys: keys, err: err, timedOut: timedOut, loaded: true, gen: gen}
}

// runAuth runs an Authentication Send/Receive and completes it: with Command Aborted due
// to SQ Deletion, running nothing, once the queue's authentication has stopped (Close).
// Checked under a.mu, which stop holds: a transaction step either runs before stop, which
// then wipes its key material, or not at all. It returns false, running nothing and
// completing nothing, when the host's keys it was given are stale (the AuthKeys changed
// since their load) and may be loaded again (see authStep).
func (q *Queue) runAuth(r *Request, b *binding, keys hostKeysLoad) (ran bool) {
	a, c := b.auth, b.ctrl
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		q.finish(r, nvmeproto.StatusAbortSQDeletion)
		return true
	}
	stale := keys.loaded && keys.gen != q.t.authKeysGen()
	if stale && !keys.last {
		a.mu.Unlock()
		return false
	}
	wasOK, wasInTx := a.ok.Load(), a.ctl.InProgress()
	if r.Cmd.FabricsType() == nvmeproto.FabricsAuthSend {
		data := r.Data[:r.Length]
		negotiate := isNegotiate(r)
		if negotiate {
			var refuse error
			expl := nvmeproto.AuthFailFailed
			if !wasOK {
				if a.started++; a.started > authMaxTransactions {
					refuse = fmt.Errorf("AUTH_Negotiate %d on a queue not authenticated yet refused: a queue may start at most %d transactions before it authenticates",
						a.started, authMaxTransactions)
				}
			} else {
				refuse = a.allowReauth(time.Now())
			}
			if refuse == nil && b.qid == 0 && keys.timedOut && !stale {
				q.authKeysTimedOut(r, a, c, keys.err)
				return true
			}
			if refuse == nil && b.qid == 0 {
				// The admin queue's transaction takes the keys authStep loaded.
				switch {
				case stale:
					refuse = fmt.Errorf("AUTH_Negotiate refused: the host's keys changed during each of %d loads of them (SetHostKeys, RemoveHostKeys or a reload while the step waited for its slots)",
						authKeysLoads)
				case keys.err != nil:
					refuse, expl = keys.err, nvmeproto.AuthFailProtocolUnusable
				case keys.keys == nil || keys.keys.Host == nil:
					refuse = fmt.Errorf("AUTH_Negotiate refused: AuthKeys returned no host secret for host %s (subsystem %s)",
						c.hostNQN, c.subsys.nqn)
				default:
					c.auth.mu.Lock()
					c.auth.keys = *keys.keys
					c.auth.mu.Unlock()
				}
			}
			// Every transaction uses the controller's current keys.
			a.ctl.SetKeys(c.auth.current())
			if refuse != nil {
				a.ctl.Refuse(data, expl, refuse)
				q.authFailed(a, c, b.qid, "answered with AUTH_Failure1", refuse, true)
				a.mu.Unlock()
				q.finish(r, nvmeproto.StatusSuccess)
				return true
			}
		}
		if err := a.ctl.Send(data); err != nil {
			msg := "the host sent AUTH_Failure2"
			if a.ctl.FailurePending() {
				msg = "answered with AUTH_Failure1"
			}
			q.authFailed(a, c, b.qid, msg, err, true)
		} else if wasInTx && !a.ctl.InProgress() && a.ctl.Authenticated() {
			q.authSucceeded(a, c, b.qid, wasOK)
		} else if negotiate && wasOK && a.ctl.InProgress() {
			q.reauthStarted(a, c, b.qid)
		}
		a.mu.Unlock()
		q.finish(r, nvmeproto.StatusSuccess)
		return true
	}
	pending := a.ctl.FailurePending()
	out, err := a.ctl.Receive(int(r.Length))
	if err != nil {
		a.mu.Unlock()
		q.reject(r, nvmeproto.StatusInvalidField.WithDNR(), err.Error())
		return true
	}
	n := copy(r.Data[:r.Length], out)
	clear(r.Data[n:r.Length])
	if len(out) >= 2 && out[1] == nvmeproto.AuthMsgFailure1 {
		// Logged when the failure was found, unless Receive found it.
		_, cause := a.ctl.Failure()
		q.authFailed(a, c, b.qid, "AUTH_Failure1 sent", cause, !pending)
	} else if wasInTx && !a.ctl.InProgress() && a.ctl.Authenticated() {
		q.authSucceeded(a, c, b.qid, wasOK)
	}
	a.mu.Unlock()
	q.finish(r, nvmeproto.StatusSuccess)
	return true
}

// authKeysTimedOut completes an admin queue's AUTH_Negotiate whose host's keys could not
// be read within SecretReadTimeout (cause) with Command Interrupted, without DNR, and
// disconnects the queue after AuthFailureGrace, as for a failed authentication. The
// transaction does not start. A slow file system is transient, and an AUTH_Failure1 is
// final for the host: the Linux host (6.10 and later) turns a received AUTH_Failure1 into
// -EKEYREJECTED, after which nvmf_should_reconnect gives the controller up, while an NVMe
// status without DNR on an Authentication Send lets it reconnect within ctrl_loss_tmo.
// Called with a.mu held; releases it.
func (q *Queue) authKeysTimedOut(r *Request, a *queueAuth, c *controller, cause error) {
	q.t.rejects.add(RejectAuthFailed)
	q.t.authLog(c.log, slog.LevelWarn, "auth-failed", c.hostNQN, "authentication not started: the host's secret could not be read in time",
		"qid", 0, "status", nvmeproto.StatusCommandInterrupted.String(), "cause", cause)
	q.authFailed(a, c, 0, "", cause, false)
	a.mu.Unlock()
	q.finish(r, nvmeproto.StatusCommandInterrupted)
}

// reauthStarted arms AuthTimeout for the re-authentication an AUTH_Negotiate just started
// on the authenticated queue: if the transaction has not ended by then, it is abandoned
// (its keys wiped, the next message expected an AUTH_Negotiate) and the queue stays
// authenticated. Its end (authSucceeded, authFailed) or the next re-authentication stops
// or supersedes the timer. Called with a.mu held.
func (q *Queue) reauthStarted(a *queueAuth, c *controller, qid uint16) {
	if a.closed || a.failed {
		return
	}
	a.timer.Stop()
	a.reauths++
	gen, timeout := a.reauths, AuthTimeout
	a.timer = time.AfterFunc(timeout, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed || a.failed || a.reauths != gen || !a.ctl.InProgress() {
			return
		}
		a.ctl.Abandon()
		q.t.authLog(c.log, slog.LevelWarn, "reauth-timeout", c.hostNQN,
			"re-authentication not completed in time: transaction abandoned, the queue stays authenticated",
			"qid", qid, "timeout", timeout)
	})
}

// authSucceeded marks the queue authenticated after a successful transaction (reauth: the
// queue was authenticated before it). Called with a.mu held.
func (q *Queue) authSucceeded(a *queueAuth, c *controller, qid uint16, reauth bool) {
	if a.failed {
		q.t.authLog(c.log, slog.LevelWarn, "auth-after-failure", c.hostNQN,
			"authentication after a failed one on the queue: not accepted, the queue is disconnected", "qid", qid)
		return
	}
	a.ok.Store(true)
	a.timer.Stop()
	hash, group := a.ctl.Selected()
	c.log.Info("queue authenticated", "qid", qid, "hash", hash.String(), "dhgroup", group.String(),
		"bidirectional", a.ctl.Bidirectional(), "reauthentication", reauth)
}

// authFailed marks the queue unauthenticated, logs the failure (if log) and schedules the
// queue's disconnection AuthFailureGrace after the first failure (the Failure1 the host
// receives, or the Failure2 it sent). Only this queue is disconnected: the admin queue's
// going ends its controller and so every I/O queue of it, while a failed I/O queue leaves
// the controller and its other queues, each authenticated on its own, working. (The
// Linux target ends the controller in both cases, nvmet_ctrl_fatal_error.) Called with
// a.mu held.
func (q *Queue) authFailed(a *queueAuth, c *controller, qid uint16, msg string, cause error, log bool) {
	a.ok.Store(false)
	if log { // once per failure
		q.t.rejects.add(RejectAuthFailed)
		expl, _ := a.ctl.Failure()
		q.t.authLog(c.log, slog.LevelWarn, "auth-failed", c.hostNQN, "authentication failed", "qid", qid, "message", msg,
			"reason_code", uint8(nvmeproto.AuthFailReasonFailed), "explanation_code", uint8(expl),
			"explanation", expl.String(), "cause", cause)
	}
	if a.closed || a.failed {
		return
	}
	a.failed = true
	a.timer.Stop()
	a.timer = time.AfterFunc(AuthFailureGrace, func() { q.disconnect(ErrAuthFailed) })
}

// authLog logs a line about host's authentication at most once per kind (what), host and
// interval, through the target's refusal limiter (as refused Connects are), with the
// number of lines left out since the last one: a host that fails, times out or has an
// unreadable secret in a loop cannot flood the log, while each host's first line is seen.
func (t *Target) authLog(l *slog.Logger, level slog.Level, what, host, msg string, args ...any) {
	if ok, n := t.refusals.Allow(what + " " + host); ok {
		l.Log(context.Background(), level, msg, append(args, "suppressed", n)...)
	}
}

// hostAuth asks the target's AuthKeys, if any, whether host hostNQN authenticates to
// subsystem subNQN and whether the subsystem requires it (from memory).
func (t *Target) hostAuth(subNQN, hostNQN string) (authenticates, required bool) {
	if t.authKeys == nil {
		return false, false
	}
	return t.authKeys.HostAuth(subNQN, hostNQN)
}

// configAuthKeys serves the keys of the running configuration's hosts section and the
// subsystems' auth_required. Whether a host authenticates is whether it has an entry. Its
// secrets are read again at every HostKeys (each admin queue AUTH_Negotiate), through
// secretReads, so rewriting a file: secret rotates the key without a restart, as does a
// change of the hosts section (SetHostKeys, RemoveHostKeys, a reload). Re-reading costs
// a read of a file of a hundred bytes per admin queue transaction; a cache keyed by the
// file's stat would still stat it (the call that hangs on a dead mount) and could miss a
// rewrite within the file system's timestamp granularity. A secret that cannot be read
// fails closed: the host's transactions fail.
type configAuthKeys struct {
	t     *Target
	reads secretReads
	gen   atomic.Uint64 // bumped by set, after hosts is replaced (authKeysGenerations)
	mu    sync.Mutex
	hosts map[string]conf.Host // by host NQN; replaced whole by set
}

// newConfigAuthKeys serves cfg's hosts, each of whose secrets must be readable, each
// host's within SecretReadTimeout (checkKeys): a secret file on a hung mount fails New
// rather than holding it for ever. The error names the host's entry (hosts[i]).
func newConfigAuthKeys(t *Target, cfg *conf.Config) (*configAuthKeys, error) {
	k := &configAuthKeys{t: t, reads: secretReads{load: loadSecretFile}}
	for i := range cfg.Hosts {
		if err := k.checkKeys(&cfg.Hosts[i]); err != nil {
			return nil, fmt.Errorf("hosts[%d]: %w", i, err)
		}
	}
	k.set(cfg.Hosts)
	return k, nil
}

// checkKeys reads host h's secrets as an authentication does (through k.reads, joining a
// read of the same file already in flight), waiting at most SecretReadTimeout, and
// discards them: a configuration change (or New) that checks an entry's secrets fails
// when a file's read does not end in time, rather than waiting for ever for a file
// system that hangs. A secret whose value is one of read (values the caller has read
// already) is not read again. The error names the host, the field and the file, and
// wraps context.DeadlineExceeded when the time ran out.
func (k *configAuthKeys) checkKeys(h *conf.Host, read ...string) error {
	d := SecretReadTimeout
	ctx, cancel := context.WithTimeoutCause(context.Background(), d,
		fmt.Errorf("%w: SecretReadTimeout %v", context.DeadlineExceeded, d))
	defer cancel()
	_, err := h.KeysWith(func(v string) (*dhchap.Secret, error) {
		if slices.Contains(read, v) {
			return nil, nil // read by the caller; the keys are discarded
		}
		return k.reads.secret(ctx, v)
	})
	return err
}

// set replaces the hosts served (a resolved hosts section).
func (k *configAuthKeys) set(hosts []conf.Host) {
	m := make(map[string]conf.Host, len(hosts))
	for _, h := range hosts {
		m[h.NQN] = h
	}
	k.mu.Lock()
	k.hosts = m
	k.gen.Add(1)
	k.mu.Unlock()
}

func (k *configAuthKeys) generation() uint64 { return k.gen.Load() }

func (k *configAuthKeys) HostAuth(subNQN, hostNQN string) (authenticates, required bool) {
	if s := k.t.subsystem(subNQN); s != nil {
		s.mu.Lock()
		required = s.authRequired
		s.mu.Unlock()
	}
	k.mu.Lock()
	_, authenticates = k.hosts[hostNQN]
	k.mu.Unlock()
	return authenticates, required
}

func (k *configAuthKeys) HostKeys(ctx context.Context, _, hostNQN string) (*dhchap.HostKeys, error) {
	k.mu.Lock()
	h, ok := k.hosts[hostNQN]
	k.mu.Unlock()
	if !ok {
		return nil, nil
	}
	return h.KeysWith(func(v string) (*dhchap.Secret, error) { return k.reads.secret(ctx, v) })
}

// --- run-time changes of the hosts section and auth_required ---

// ErrNoHostKeys: RemoveHostKeys of a host that has no entry in the hosts section.
var ErrNoHostKeys = errors.New("target: host has no entry in the hosts section")

// errExternalAuthKeys: the keys come from WithAuthKeys, which the hosts section does not
// feed.
var errExternalAuthKeys = errors.New("target: the hosts' keys come from WithAuthKeys, not from the configuration's hosts section; change them there")

// HostKeysChange is a change of one entry of the configuration's hosts section. Nil
// fields keep their value (a new entry starts empty); a set field replaces it. Values are
// written as in the configuration file.
type HostKeysChange struct {
	// DHCHAPSecret is the host's secret: the DHHC-1 text, or "file:<path>". Required for
	// a new entry; cannot be emptied (remove the entry instead).
	DHCHAPSecret *string
	// DHCHAPCtrlSecret is the controller's secret (same forms); "" removes it.
	DHCHAPCtrlSecret *string
	// DHCHAPHashes and DHCHAPDHGroups replace the lists (empty: the defaults).
	DHCHAPHashes   *[]string
	DHCHAPDHGroups *[]string
}

// Fields names the fields the change sets, by their configuration keys (for logs: no
// values, so no secrets).
func (ch HostKeysChange) Fields() []string {
	var out []string
	if ch.DHCHAPSecret != nil {
		out = append(out, "dhchap_secret")
	}
	if ch.DHCHAPCtrlSecret != nil {
		out = append(out, "dhchap_ctrl_secret")
	}
	if ch.DHCHAPHashes != nil {
		out = append(out, "dhchap_hashes")
	}
	if ch.DHCHAPDHGroups != nil {
		out = append(out, "dhchap_dhgroups")
	}
	return out
}

// SetHostKeys adds or changes the entry of host hostNQN in the hosts section: its
// DH-HMAC-CHAP secret (a key rotation), its controller secret, its hash functions and DH
// groups. The result is validated as the configuration file would be, and the secrets
// are read (a file: secret's file must exist, belong to the target's user and be closed
// to others) before anything changes. From then on the host's new connections and
// re-authentications use the new entry; its authenticated queues keep working. It
// reports whether the entry is new.
//
// The secrets are read (ReadHostKeys) before the change is serialized with the others
// (cfgMu; HostKeysRead.Apply), within SecretReadTimeout, so a secret file on a hung mount
// fails this change after SecretReadTimeout and holds up no other change meanwhile. The
// read applies the change to the running configuration as it is then; under cfgMu the
// change is applied again to the running configuration as it is by then, and the entry
// is installed only if each of its secret values (as resolved: a file: path cleaned,
// and made absolute against the configuration file's directory when it has one) has been read by
// this call: when another change altered a secret of the entry in between, the values
// this call has not read yet are read there, within SecretReadTimeout too (a value it
// has read is not read again). Reading a file before cfgMu validates as much as reading
// it under cfgMu: the lock does not guard the file's contents, which may change right
// after either read (every authentication reads them again).
func (t *Target) SetHostKeys(hostNQN string, ch HostKeysChange) (created bool, err error) {
	r, err := t.ReadHostKeys(hostNQN, ch)
	if err != nil {
		return false, err
	}
	return r.Apply()
}

// HostKeysRead is a change of a host's entry on one Target whose secrets ReadHostKeys
// has read; Apply applies it to that Target. Only ReadHostKeys makes one: the zero value
// is not a change, and Apply refuses it.
type HostKeysRead struct {
	t       *Target // nil in the zero value
	hostNQN string
	ch      HostKeysChange
	read    *conf.Host  // the entry whose secrets were read; nil: none (readHostKeysChange)
	applied atomic.Bool // Apply was called
}

// ReadHostKeys is the first half of SetHostKeys(hostNQN, ch): it reads the secrets of
// the entry the change gives, holding none of the target's locks, and fails as
// SetHostKeys does when one cannot be read. The second half, the change itself, is the
// result's Apply. A caller that serializes its changes with a lock of its own (package
// target/server) reads before it takes that lock and applies under it, so that a secret
// file on a hung mount holds up none of its other changes either.
//
// A change that cannot apply for another reason than a secret it cannot read (an
// invalid entry, a target whose keys come from WithAuthKeys, a closed target) returns
// a HostKeysRead and no error: Apply returns that error. The secrets are read as they
// are when ReadHostKeys runs, and Apply does not read again those whose values it has
// read: apply the result at once (a file: secret deleted or changed in between is
// installed as it was read; every authentication reads its file again, and fails then
// if it is gone).
func (t *Target) ReadHostKeys(hostNQN string, ch HostKeysChange) (*HostKeysRead, error) {
	r := &HostKeysRead{t: t, hostNQN: hostNQN, ch: ch}
	if k, _ := t.authKeys.(*configAuthKeys); k != nil {
		var err error
		if r.read, err = t.readHostKeysChange(k, fmt.Sprintf("host %q: keys", hostNQN), hostNQN, ch); err != nil {
			return nil, fmt.Errorf("target: %w", err)
		}
	}
	return r, nil
}

// Apply is the second half of SetHostKeys: it applies the change r (from ReadHostKeys)
// to the Target that read it, under its cfgMu, reading the entry's secrets again there
// when the change gives an entry other than the one r read (see SetHostKeys), and
// reports whether the entry is new. A HostKeysRead is one change: it applies once. A
// second Apply, whatever the first returned, changes nothing and returns an error (call
// ReadHostKeys again to retry). Apply of a nil or zero HostKeysRead returns an error.
func (r *HostKeysRead) Apply() (created bool, err error) {
	if r == nil || r.t == nil {
		return false, errors.New("target: HostKeysRead.Apply of a HostKeysRead that ReadHostKeys did not return: call Target.ReadHostKeys for the change")
	}
	if !r.applied.CompareAndSwap(false, true) {
		return false, fmt.Errorf("target: host %q: keys: this HostKeysRead was applied already; a HostKeysRead is one change: call Target.ReadHostKeys again to make it again", r.hostNQN)
	}
	t, hostNQN, ch, read := r.t, r.hostNQN, r.ch, r.read
	what := fmt.Sprintf("host %q: keys", hostNQN)
	k, _ := t.authKeys.(*configAuthKeys)
	err = t.change(what, true, func(c *conf.Config) error {
		if k == nil {
			return fmt.Errorf("%s: %w", what, errExternalAuthKeys)
		}
		var err error
		created, err = editHostKeys(c, what, hostNQN, ch)
		return err
	}, func(c *conf.Config) error {
		h := c.HostByNQN(hostNQN)
		if read == nil {
			if err := k.checkKeys(h); err != nil {
				return fmt.Errorf("target: %w", err)
			}
		} else if read.DHCHAPSecret != h.DHCHAPSecret || read.DHCHAPCtrlSecret != h.DHCHAPCtrlSecret {
			if err := k.checkKeys(h, read.DHCHAPSecret, read.DHCHAPCtrlSecret); err != nil {
				return fmt.Errorf("target: %w", err)
			}
		}
		k.set(c.Hosts)
		return nil
	})
	if err != nil {
		return false, err
	}
	t.log.Info("host keys set", "host", hostNQN, "new", created, "fields", ch.Fields())
	return created, nil
}

// readHostKeysChange applies ch to host hostNQN's entry in a copy of the running
// configuration, resolves it and reads the entry's secrets (checkKeys), without cfgMu.
// It returns the entry read, or nil (and no error) when the change does not apply to
// the copy (the target is closed, the edit or the resolution fails): SetHostKeys's
// change then reports why, or reads the secrets itself if the configuration changed
// meanwhile so that it applies.
func (t *Target) readHostKeysChange(k *configAuthKeys, what, hostNQN string, ch HostKeysChange) (*conf.Host, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, nil
	}
	c := t.cfg.Clone()
	t.mu.Unlock()
	if _, err := editHostKeys(c, what, hostNQN, ch); err != nil {
		return nil, nil
	}
	if err := c.Resolve(); err != nil {
		return nil, nil
	}
	h := c.HostByNQN(hostNQN)
	if err := k.checkKeys(h); err != nil {
		return nil, err
	}
	return h, nil
}

// editHostKeys applies ch to host hostNQN's entry in c, creating it if there is none,
// and reports whether it did. what names the change in errors.
func editHostKeys(c *conf.Config, what, hostNQN string, ch HostKeysChange) (created bool, err error) {
	i := slices.IndexFunc(c.Hosts, func(h conf.Host) bool { return h.NQN == hostNQN })
	created = i < 0
	if created {
		c.Hosts = append(c.Hosts, conf.Host{NQN: hostNQN})
		i = len(c.Hosts) - 1
	}
	h := &c.Hosts[i]
	if ch.DHCHAPSecret != nil {
		// Whitespace around a secret (the newline of a key file) is not part of it.
		h.DHCHAPSecret = strings.TrimSpace(*ch.DHCHAPSecret)
		if h.DHCHAPSecret == "" && !created {
			return created, fmt.Errorf("target: %s: dhchap_secret cannot be emptied: a host listed under hosts authenticates; remove the host's entry instead", what)
		}
	}
	if ch.DHCHAPCtrlSecret != nil {
		h.DHCHAPCtrlSecret = strings.TrimSpace(*ch.DHCHAPCtrlSecret)
	}
	if ch.DHCHAPHashes != nil {
		h.DHCHAPHashes = slices.Clone(*ch.DHCHAPHashes)
	}
	if ch.DHCHAPDHGroups != nil {
		h.DHCHAPDHGroups = slices.Clone(*ch.DHCHAPDHGroups)
	}
	return created, nil
}

// RemoveHostKeys removes host hostNQN's entry from the hosts section: its new
// connections no longer authenticate, and are refused by subsystems that require
// authentication (a subsystem that requires it and lists the host is an error: take the
// host off its list, or turn auth_required off, first). Its authenticated queues keep
// working until they reconnect; its next admin queue re-authentication fails and ends the
// controller (until then its I/O queues use the keys the controller took). ErrNoHostKeys
// when the host has no entry.
func (t *Target) RemoveHostKeys(hostNQN string) error {
	what := fmt.Sprintf("host %q: removing its keys", hostNQN)
	k, _ := t.authKeys.(*configAuthKeys)
	err := t.change(what, true, func(c *conf.Config) error {
		if k == nil {
			return fmt.Errorf("%s: %w", what, errExternalAuthKeys)
		}
		i := slices.IndexFunc(c.Hosts, func(h conf.Host) bool { return h.NQN == hostNQN })
		if i < 0 {
			return fmt.Errorf("%w: %q", ErrNoHostKeys, hostNQN)
		}
		c.Hosts = slices.Delete(c.Hosts, i, i+1)
		return nil
	}, func(c *conf.Config) error {
		k.set(c.Hosts)
		return nil
	})
	if err != nil {
		return err
	}
	t.log.Info("host keys removed", "host", hostNQN)
	return nil
}

// SetAuthRequired changes whether a subsystem admits only hosts that authenticate
// (auth_required; validated as in the configuration file: with it on, every host on the
// subsystem's list needs an entry in the hosts section). It applies to new connections:
// controllers already connected keep working, authenticated or not, until they
// reconnect (ControllerInfo.Authenticated tells them apart; DenyHost disconnects a
// host at once).
func (t *Target) SetAuthRequired(nqn string, required bool) error {
	var s *subsystem
	err := t.change(fmt.Sprintf("subsystem %q: auth_required %t", nqn, required), true, func(c *conf.Config) error {
		i := subsystemIndex(c, nqn)
		if s = t.subsystem(nqn); s == nil || s.disc || i < 0 {
			return fmt.Errorf("%w: %q", ErrNoSuchSubsystem, nqn)
		}
		c.Subsystems[i].AuthRequired = required
		return nil
	}, func(*conf.Config) error {
		s.mu.Lock()
		s.authRequired = required
		s.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	unauth := 0
	for _, c := range s.controllers() {
		if c.auth == nil {
			unauth++
		}
	}
	if required && unauth > 0 {
		t.log.Warn("authentication now required; controllers connected without authenticating keep working until they reconnect",
			"subsystem", nqn, "controllers", unauth)
	} else {
		t.log.Info("auth_required changed", "subsystem", nqn, "auth_required", required)
	}
	return nil
}
