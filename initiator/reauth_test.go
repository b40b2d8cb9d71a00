package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// authGate sits between the initiator and the loop target of one controller and plays a
// controller whose I/O queues lost their authentication: once shut, it answers every
// command of an I/O queue but Authentication Send/Receive with Authentication Required
// without Do Not Retry (what gonvmf's target answers with DNR), until an AUTH_Negotiate
// passes on that queue; the authentication itself runs against the real target. Queues
// are numbered in the order the initiator dials them: 0 the admin queue, then the I/O
// queues. It logs, in order, the commands it refused and the AUTH_Negotiates it passed.
type authGate struct {
	mu      sync.Mutex
	dials   int
	shut    map[int]bool
	refused int
	log     []string
	hold    chan struct{} // if not nil, the admin queue's AUTH_Negotiate waits until it is closed
	// barrier, if not 0, makes each command the shut gate refuses wait (at most 10 s)
	// until barrier of them have arrived; allIn is closed then.
	barrier, arrived int
	allIn            chan struct{}
	// withhold, if set, makes the gate keep every Authentication Receive of the admin
	// queue from the target and never answer it; withheld receives them.
	withhold bool
	withheld chan struct{}
}

// close makes every I/O queue refuse its commands until it authenticates again.
func (g *authGate) close(ioQueues int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for q := 1; q <= ioQueues; q++ {
		g.shut[q] = true
	}
	g.refused, g.log = 0, nil
}

func (g *authGate) events() (int, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused, append([]string(nil), g.log...)
}

// negotiations counts the AUTH_Negotiates logged on queue qid.
func negotiations(log []string, qid int) int {
	n := 0
	for _, e := range log {
		if e == fmt.Sprintf("negotiate %d", qid) {
			n++
		}
	}
	return n
}

type gateConn struct {
	initiator.LoopConn
	g   *authGate
	qid int
}

func (c gateConn) Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error {
	g := c.g
	g.mu.Lock()
	if hold := g.hold; hold != nil && c.qid == 0 && cmd.IsFabrics() && cmd.FabricsType() == nvmeproto.FabricsAuthSend {
		g.mu.Unlock()
		<-hold // on the re-authenticating goroutine, not a completion goroutine
		g.mu.Lock()
	}
	switch {
	case cmd.IsFabrics() && cmd.FabricsType() == nvmeproto.FabricsAuthSend:
		if m := data[cmd.SGL.Address:]; m[0] == nvmeproto.AuthTypeCommon && m[1] == nvmeproto.AuthMsgNegotiate {
			g.shut[c.qid] = false
			g.log = append(g.log, fmt.Sprintf("negotiate %d", c.qid))
		}
	case cmd.IsFabrics() && cmd.FabricsType() == nvmeproto.FabricsAuthReceive:
		if g.withhold && c.qid == 0 {
			g.mu.Unlock()
			g.withheld <- struct{}{}
			return nil
		}
	case g.shut[c.qid]:
		if g.barrier > 0 {
			if g.arrived++; g.arrived == g.barrier {
				close(g.allIn)
			}
			allIn := g.allIn
			g.mu.Unlock()
			select { // on the submitting goroutine
			case <-allIn:
			case <-time.After(10 * time.Second):
			}
			g.mu.Lock()
		}
		g.refused++
		g.log = append(g.log, fmt.Sprintf("refused %d", c.qid))
		g.mu.Unlock()
		done(nvmeproto.Completion{CID: cmd.CID, Status: nvmeproto.StatusAuthRequired})
		return nil
	}
	g.mu.Unlock()
	return c.LoopConn.Submit(cmd, data, done)
}

// wrap makes o's loop connections go through g, each with its queue's ID (in dial order:
// the admin queue 0, then the I/O queues).
func (g *authGate) wrap(o *initiator.Options) {
	dial := o.Loop
	o.Loop = func(depth int) (initiator.LoopConn, error) {
		conn, err := dial(depth)
		g.mu.Lock()
		qid := g.dials
		g.dials++
		g.mu.Unlock()
		return gateConn{conn, g, qid}, err
	}
}

// dialGate connects to e's target through an authGate, with two I/O queues.
func (e *env) dialGate(t *testing.T, mut func(*initiator.Options)) (*initiator.Controller, *authGate) {
	t.Helper()
	g := &authGate{shut: map[int]bool{}}
	c := e.dial(t, func(o *initiator.Options) {
		g.wrap(o)
		o.Queues = 2
		if mut != nil {
			mut(o)
		}
	})
	return c, g
}

func nullGroupKeys(t *testing.T) (*dhchap.Secret, *dhchap.HostKeys) {
	hk := genSecret(t, nvmeproto.AuthHashSHA256)
	return hk, &dhchap.HostKeys{Host: hk, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull}}
}

// dialReauth connects, through an authGate, to a target that authenticates the host with
// a fresh key of the null DH group; mut (nil: none) changes the options further.
func dialReauth(t *testing.T, mut func(*initiator.Options)) (*initiator.Controller, *authGate) {
	t.Helper()
	hk, keys := nullGroupKeys(t)
	e, _ := authEnv(t, keys)
	return e.dialGate(t, func(o *initiator.Options) {
		o.DHCHAPSecret = hk.Encode()
		if mut != nil {
			mut(o)
		}
	})
}

// TestLoopReauthOnAuthRequired: a read the controller fails with Authentication
// Required (no DNR) makes the host re-authenticate the controller, the admin queue first
// and then every I/O queue that authenticated at its Connect, as the Linux host's
// dhchap_auth_work does, and only then is the read sent again: it returns the data.
func TestLoopReauthOnAuthRequired(t *testing.T) {
	c, g := dialReauth(t, nil)
	ns := c.Namespaces()[0]
	want := bytes.Repeat([]byte{0x5C}, 4096)
	if _, err := ns.WriteAt(ctx(t), want, 0, 0); err != nil {
		t.Fatal(err)
	}

	g.close(2)
	got := make([]byte, 4096)
	if _, err := ns.ReadAt(ctx(t), got, 0); err != nil {
		t.Fatalf("read the controller answered Authentication Required: %v, want it re-authenticated and retried", err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the read retried after re-authentication returned other data")
	}
	refused, log := g.events()
	if refused != 1 {
		t.Errorf("%d commands answered Authentication Required, want 1 (the read, then its retry after re-authentication passed): %q", refused, log)
	}
	if len(log) != 4 || log[0] != "refused 1" && log[0] != "refused 2" ||
		log[1] != "negotiate 0" || log[2] != "negotiate 1" || log[3] != "negotiate 2" {
		t.Errorf("events %q, want the refused read, then AUTH_Negotiate on the admin queue, then on I/O queues 1 and 2", log)
	}
	if err := c.Err(); err != nil {
		t.Errorf("controller failed: %v", err)
	}
}

// TestLoopReauthFullQueues: every slot of both I/O queues holds a read the controller
// fails with Authentication Required: one re-authentication serves them all (it runs one
// at a time per controller, and the failures seen while it runs join it), it finds a
// slot on each I/O queue (the one kept for authentication), and every read then
// completes.
func TestLoopReauthFullQueues(t *testing.T) {
	c, g := dialReauth(t, nil)
	type read struct {
		q *initiator.IOQueue
		r *initiator.Request
	}
	var reads []read
	var done chan error // made once the reads are counted, before any is submitted
	for qi := 0; qi < c.IOQueues(); qi++ {
		q := c.IOQueue(qi)
		for range q.Depth() {
			b, err := c.AllocBuffer(512)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Release()
			reads = append(reads, read{q, &initiator.Request{Op: initiator.OpRead, NSID: 1, LBA: uint64(len(reads)), Blocks: 1, Buf: b,
				Done: func(r *initiator.Request) { done <- r.Err }}})
		}
	}
	done = make(chan error, len(reads))
	// Every read meets the shut gate: the re-authentication the first one starts waits
	// at its AUTH_Negotiate until all of them have been answered.
	hold := make(chan struct{})
	g.mu.Lock()
	g.hold = hold
	g.mu.Unlock()
	g.close(2)
	for i, rd := range reads {
		if err := rd.q.Submit(rd.r); err != nil {
			t.Fatalf("submitting read %d on queue %d: %v", i, rd.q.ID(), err)
		}
	}
	close(hold)
	n := len(reads)
	for i := 0; i < n; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("read: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d reads not done 10 s after the controller asked for authentication", n-i, n)
		}
	}
	refused, log := g.events()
	if refused != n {
		t.Errorf("%d reads answered Authentication Required, want all %d (sent once, then again after one re-authentication)", refused, n)
	}
	for qid := 0; qid <= 2; qid++ {
		if k := negotiations(log, qid); k != 1 {
			t.Errorf("queue %d: %d AUTH_Negotiates for %d reads failed with Authentication Required, want 1 (one re-authentication)", qid, k, n)
		}
	}
}

// TestLoopReauthFails: when the re-authentication a command's Authentication Required
// started fails, the command fails with its Authentication Required status wrapped with
// the authentication failure, and the controller stays up (a failed re-authentication is
// a soft state, as in the Linux host): the target refused the host's key (it was rotated
// on the target only), or the host has no secret to authenticate with (then every
// refused command tries again, and fails again). With retries disabled (MaxRetries
// negative) the host does not re-authenticate: the command fails with the controller's
// status.
func TestLoopReauthFails(t *testing.T) {
	authRequired := &initiator.StatusError{Status: nvmeproto.StatusAuthRequired}
	t.Run("key rotated on the target", func(t *testing.T) {
		hk, keys := nullGroupKeys(t)
		e, ak := authEnv(t, keys)
		c, g := e.dialGate(t, func(o *initiator.Options) { o.DHCHAPSecret = hk.Encode() })
		_, keys2 := nullGroupKeys(t)
		ak.set(hostNQN, keys2)
		g.close(2)
		err := c.Namespaces()[0].Flush(ctx(t))
		var ce *initiator.ConnectError
		if !errors.Is(err, initiator.ErrAuthFailed) || !errors.Is(err, authRequired) || !errors.As(err, &ce) ||
			!strings.Contains(err.Error(), "the admin queue") {
			t.Fatalf("flush whose re-authentication failed: %v, want Authentication Required wrapped with ErrAuthFailed and the admin queue's *ConnectError", err)
		}
		// The target drops the queues AuthFailureGrace (2 s) after the failure.
		if err := c.Err(); err != nil {
			t.Errorf("controller after the failed re-authentication: %v, want it still connected", err)
		}
		if _, log := g.events(); negotiations(log, 0) != 1 {
			t.Errorf("events %q, want one AUTH_Negotiate on the admin queue", log)
		}
	})
	t.Run("no secret", func(t *testing.T) {
		e := newEnv(t, nil)
		c, g := e.dialGate(t, nil)
		g.close(2)
		for i := range 2 {
			err := c.Namespaces()[0].Flush(ctx(t))
			if !errors.Is(err, initiator.ErrAuthFailed) || !errors.Is(err, authRequired) {
				t.Fatalf("flush %d answered Authentication Required on a host without a secret: %v, want it wrapped with ErrAuthFailed", i, err)
			}
			if err := c.Err(); err != nil {
				t.Fatalf("controller after failed re-authentication %d: %v, want it still connected", i, err)
			}
		}
		if refused, log := g.events(); refused != 2 {
			t.Errorf("events %q, want each flush refused once, not retried after its re-authentication failed", log)
		}
	})
	t.Run("retries disabled", func(t *testing.T) {
		c, g := dialReauth(t, func(o *initiator.Options) { o.MaxRetries = -1 })
		g.close(2)
		err := c.Namespaces()[0].Flush(ctx(t))
		if !errors.Is(err, &initiator.StatusError{Status: nvmeproto.StatusAuthRequired}) {
			t.Fatalf("flush with MaxRetries -1: %v, want Authentication Required", err)
		}
		if refused, log := g.events(); refused != 1 || len(log) != 1 {
			t.Errorf("events %q, want the flush refused once and no re-authentication", log)
		}
		if err := c.Err(); err != nil {
			t.Errorf("controller failed: %v", err)
		}
	})
}

// TestLoopReauthPoolExhausted: the commands waiting for the re-authentication hold every
// buffer of the controller's pool (the bounce buffers of eight ReadAt calls, with a
// 64 KiB pool of eight 8 KiB buffers); the re-authentication still runs (its messages
// have registered memory of their own), and the reads complete.
func TestLoopReauthPoolExhausted(t *testing.T) {
	c, g := dialReauth(t, func(o *initiator.Options) { o.BufferPoolSize = 64 << 10 })
	const n = 8
	// The gate refuses the reads once all eight have their bounce buffers, so the
	// re-authentication starts when the pool is empty.
	g.mu.Lock()
	g.barrier, g.allIn = n, make(chan struct{})
	g.mu.Unlock()
	g.close(2)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.Namespaces()[0].ReadAt(cx, make([]byte, 4096), int64(i)*4096)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("read whose bounce buffer was one of the pool's last while it waited for re-authentication: %v", err)
		}
	}
	if refused, log := g.events(); refused != n || negotiations(log, 0) != 1 {
		t.Errorf("events %q, want %d reads refused and one re-authentication", log, n)
	}
}

// TestLoopAuthCancel: a context that ends while the controller withholds the answer to
// an Authentication Receive ends Dial and Reauthenticate at once: they do not wait for
// the command (AdminTimeout), whose message buffer the controller may still write. After
// the cancelled Reauthenticate the next one authenticates (in a new buffer).
func TestLoopAuthCancel(t *testing.T) {
	hk, keys := nullGroupKeys(t)
	e, _ := authEnv(t, keys)
	const wait = 3 * time.Second // far below AdminTimeout
	withhold := func(g *authGate) {
		g.mu.Lock()
		g.withhold, g.withheld = true, make(chan struct{}, 16)
		g.mu.Unlock()
	}
	cancelAtWithheld := func(g *authGate, cancel context.CancelFunc) {
		select {
		case <-g.withheld:
		case <-time.After(10 * time.Second):
		}
		cancel()
	}
	mut := func(o *initiator.Options) { o.DHCHAPSecret = hk.Encode(); o.AdminTimeout = 30 * time.Second }

	t.Run("Dial", func(t *testing.T) {
		g := &authGate{shut: map[int]bool{}}
		withhold(g)
		o := e.options()
		mut(&o)
		g.wrap(&o)
		cx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go cancelAtWithheld(g, cancel)
		start := time.Now()
		c, err := initiator.Dial(cx, o)
		if err == nil {
			c.Close()
			t.Fatal("Dial whose Authentication Receive was never answered succeeded")
		}
		if d := time.Since(start); d > wait || !errors.Is(err, context.Canceled) {
			t.Errorf("Dial cancelled at its withheld Authentication Receive returned after %v with %v, want context.Canceled within %v", d, err, wait)
		}
	})
	t.Run("Reauthenticate", func(t *testing.T) {
		c, g := e.dialGate(t, mut)
		withhold(g)
		cx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go cancelAtWithheld(g, cancel)
		start := time.Now()
		err := c.Reauthenticate(cx, "", "")
		if d := time.Since(start); d > wait || !errors.Is(err, context.Canceled) {
			t.Errorf("Reauthenticate cancelled at its withheld Authentication Receive returned after %v with %v, want context.Canceled within %v", d, err, wait)
		}
		g.mu.Lock()
		g.withhold = false
		g.mu.Unlock()
		if err := c.Reauthenticate(ctx(t), "", ""); err != nil {
			t.Errorf("Reauthenticate after a cancelled one: %v", err)
		}
		roundTrip(t, c)
	})
}

// TestLoopReauthAfterReauthenticate: a flush sent before Reauthenticate whose
// Authentication Required arrives after Reauthenticate succeeded met the controller
// before the re-authentication: it is retried at once, without a second one.
func TestLoopReauthAfterReauthenticate(t *testing.T) {
	c, g := dialReauth(t, nil)
	// The gate holds the refused flush until allIn is closed (a barrier never reached).
	g.mu.Lock()
	g.barrier, g.allIn = 2, make(chan struct{})
	g.mu.Unlock()
	g.close(2)
	errc := make(chan error, 1)
	go func() { errc <- c.Namespaces()[0].Flush(ctx(t)) }()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		g.mu.Lock()
		n := g.arrived
		g.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the flush did not reach the gate in 5 s")
		}
	}
	if err := c.Reauthenticate(ctx(t), "", ""); err != nil {
		t.Fatal(err)
	}
	close(g.allIn)
	if err := <-errc; err != nil {
		t.Fatalf("flush refused before Reauthenticate succeeded: %v", err)
	}
	if _, log := g.events(); negotiations(log, 0) != 1 {
		t.Errorf("events %q, want one AUTH_Negotiate on the admin queue (Reauthenticate's), no second re-authentication", log)
	}
}
