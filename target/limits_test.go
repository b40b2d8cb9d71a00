package target_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// TestLimitMaxQueues: the target holds at most limits.max_queues queues; a closed queue
// makes room again.
func TestLimitMaxQueues(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Limits.MaxQueues = 3
	cfg.Limits.MaxQueuesPerAddress = 2
	cfg.Limits.MaxQueuesPerHost = 2
	e := newEnv(t, cfg)
	var cs []interface{ Close() error }
	for i := range 3 {
		c, err := e.port.Dial(32)
		if err != nil {
			t.Fatalf("queue %d: %v", i, err)
		}
		cs = append(cs, c)
	}
	if _, err := e.port.Dial(32); !errors.Is(err, target.ErrTooManyQueues) {
		t.Fatalf("fourth queue: %v, want ErrTooManyQueues", err)
	}
	if n := e.tgt.QueueCount(); n != 3 {
		t.Errorf("QueueCount %d, want 3", n)
	}
	cs[0].Close()
	waitFor(t, func() bool { return e.tgt.QueueCount() == 2 })
	c, err := e.port.Dial(32)
	if err != nil {
		t.Fatalf("a queue after one closed: %v", err)
	}
	c.Close()
}

// TestLimitConnectTimeout: a queue that sends no Connect within limits.connect_timeout
// is disconnected; one that connects in time stays.
func TestLimitConnectTimeout(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Limits.ConnectTimeout = time.Second
	e := newEnv(t, cfg)
	idle, err := e.port.Dial(32)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := e.adminConnect(subNQN, hostNQN, 0)
	select {
	case <-idle.Done():
		if !errors.Is(idle.Err(), target.ErrConnectTimeout) {
			t.Errorf("idle queue ended with %v, want ErrConnectTimeout", idle.Err())
		}
		if n := e.tgt.ConnectRejects()[target.RejectConnectTimeout]; n != 1 {
			t.Errorf("connect rejects for connect_timeout: %d, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a queue without Connect is still up 10 s after a 1 s connect timeout")
	}
	select {
	case <-h.conn.Done():
		t.Fatalf("the connected queue was torn down too: %v", h.conn.Err())
	case <-time.After(1500 * time.Millisecond):
	}
	if _, c := h.propGet(nvmeproto.PropCSTS, false); !c.Status.Success() {
		t.Errorf("connected queue after the timeout: %v", c.Status)
	}
}

// TestLimitControllersPerHost: a host NQN gets at most limits.max_controllers_per_host
// controllers (Controller Busy beyond, without DNR: it may clear), others are not
// affected, and a destroyed controller makes room.
func TestLimitControllersPerHost(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Limits.MaxControllersPerHost = 2
	e := newEnv(t, cfg)
	a1, _ := e.adminConnect(subNQN, hostNQN, 0)
	e.adminConnect(subNQN, hostNQN, 0)
	h := e.dial(32)
	c := h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN)
	expect(t, "third controller of the host", c, nvmeproto.StatusConnectControllerBusy)
	if c.Status.DNR() {
		t.Errorf("Controller Busy with DNR: the host would never retry")
	}
	if n := e.tgt.ConnectRejects()[target.RejectHostLimit]; n != 1 {
		t.Errorf("connect rejects for host_limit: %d, want 1", n)
	}
	e.adminConnect(subNQN, otherNQN, 0) // another host is not affected
	a1.conn.Close()
	waitFor(t, func() bool { n, _ := e.tgt.HostUsage(hostNQN); return n == 1 })
	expectOK(t, "a controller after one went away", h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN))
}

// TestLimitQueuesPerHost: Number of Queues grants no more I/O queues than the host has
// left of limits.max_queues_per_host, and a Connect beyond it fails with Controller Busy.
func TestLimitQueuesPerHost(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Transport.MaxIOQueues = 8
	cfg.Limits.MaxQueuesPerHost = 4
	e := newEnv(t, cfg)
	a, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	c := a.setFeature(0x07, 7|7<<16, nil) // ask for 8
	expectOK(t, "number of queues", c)
	if nsqa, ncqa := c.DW0&0xFFFF+1, c.DW0>>16+1; nsqa != 3 || ncqa != 3 {
		t.Errorf("granted %d/%d I/O queues, want 3 (4 per host minus the admin queue)", nsqa, ncqa)
	}
	for qid := uint16(1); qid <= 3; qid++ {
		e.ioConnect(qid, cntlid, 32)
	}
	// A second controller of the host cannot connect any queue: the host holds 4.
	h := e.dial(32)
	expect(t, "admin connect past the host's queues", h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN),
		nvmeproto.StatusConnectControllerBusy)
	if ctrls, queues := e.tgt.HostUsage(hostNQN); ctrls != 1 || queues != 4 {
		t.Errorf("host usage %d controllers, %d queues; want 1, 4", ctrls, queues)
	}
	if r := e.tgt.ConnectRejects(); r[target.RejectHostLimit] != 1 || r[target.RejectControllerBusy] != 0 {
		t.Errorf("connect rejects: host_limit %d, controller_busy %d; want 1, 0", r[target.RejectHostLimit], r[target.RejectControllerBusy])
	}
}

// TestLimitKeepAlive: KATO 0 is transport.keep_alive_timeout, a KATO below or above the
// limits is raised or lowered to them (Get Features reports it), and a controller whose
// host connected with KATO 0 and went silent is reclaimed.
func TestLimitKeepAlive(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Transport.KeepAliveTimeout = 2 * time.Second
	cfg.Limits.MinKeepAliveTimeout = time.Second
	cfg.Limits.MaxKeepAliveTimeout = 3 * time.Second
	e := newEnv(t, cfg)
	kato := func(h *hostQueue) uint32 {
		_, c := h.getFeature(0x0F, 0, 0, 0)
		expectOK(t, "get keep alive timer", c)
		return c.DW0
	}
	for _, tc := range []struct{ host, want uint32 }{{0, 2000}, {100, 1000}, {2500, 2500}, {3600_000, 3000}} {
		h, _ := e.adminConnect(subNQN, hostNQN, tc.host)
		if got := kato(h); got != tc.want {
			t.Errorf("connect KATO %d ms: in effect %d ms, want %d", tc.host, got, tc.want)
		}
		expectOK(t, "set keep alive timer", h.setFeature(0x0F, tc.host, nil))
		if got := kato(h); got != tc.want {
			t.Errorf("set features KATO %d ms: in effect %d ms, want %d", tc.host, got, tc.want)
		}
		h.conn.Close()
	}
	// A host connects with KATO 0 and vanishes without closing its queue.
	h, _ := e.adminConnect(subNQN, hostNQN, 0)
	select {
	case <-h.conn.Done():
		if !errors.Is(h.conn.Err(), target.ErrKeepAliveExpired) {
			t.Errorf("KATO 0 controller ended with %v, want keep-alive expiry", h.conn.Err())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a KATO 0 controller whose host went silent was not reclaimed")
	}
}

// TestQueueCloseBounded: a backend request that never completes does not make closing
// its queue wait forever: Close returns after the close timeout reporting it, the
// controller is released, and the request still completes (to the transport) when the
// backend finally finishes it. Until then the queue counts against the limits, as stuck.
func TestQueueCloseBounded(t *testing.T) {
	e, io, gate, done := stuckRead(t, 500*time.Millisecond, nil)
	closed := make(chan struct{})
	go func() { io.conn.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("closing a queue waited for a backend request that does not complete")
	}
	if _, q := e.tgt.HostUsage(hostNQN); q != 2 {
		t.Errorf("host holds %d queues after its I/O queue closed with a stuck read, want 2 (the admin queue and the stuck one)", q)
	}
	if n := e.tgt.StuckQueues(); n != 1 {
		t.Errorf("%d stuck queues, want 1", n)
	}
	close(gate)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the late request never completed")
	}
	waitFor(t, func() bool { _, q := e.tgt.HostUsage(hostNQN); return q == 1 })
	if n, q := e.tgt.StuckQueues(), e.tgt.QueueCount(); n != 0 || q != 1 {
		t.Errorf("after the late request completed: %d stuck queues, %d queues; want 0, 1 (the admin queue)", n, q)
	}
}

// stuckRead starts a target whose backends block reads until gate closes (and count
// their Close calls in closes, if not nil), with the given queue-close timeout; connects
// a controller with one I/O queue and leaves a read of namespace 1 stuck in its backend.
func stuckRead(t *testing.T, closeTimeout time.Duration, closes *atomic.Int32) (e *env, io *hostQueue, gate chan struct{}, done <-chan nvmeproto.Completion) {
	t.Helper()
	sb := &stuckBackends{gate: make(chan struct{}), closes: closes}
	e = newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithBackendOpener(sb.open), target.WithQueueCloseTimeout(closeTimeout))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io = e.ioConnect(1, cntlid, 32)
	cmd := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	done = io.submit(&cmd, make([]byte, 4096))
	sb.waitReads(t, 1)
	return e, io, sb.gate, done
}

// stuckBackends opens backends that block reads until gate closes; it counts the reads
// that reached them and (in closes, if not nil) their Close calls.
type stuckBackends struct {
	gate   chan struct{}
	closes *atomic.Int32
	reads  atomic.Int32
}

func (sb *stuckBackends) open(s backend.Spec) (backend.Backend, error) {
	b, err := backend.Open(s)
	if err != nil {
		return nil, err
	}
	return &stuckBackend{Backend: b, sb: sb}, nil
}

// waitReads waits until n reads have reached the backends.
func (sb *stuckBackends) waitReads(t testing.TB, n int32) {
	t.Helper()
	waitFor(t, func() bool { return sb.reads.Load() >= n })
}

// stuckBackend is a backend of a stuckBackends.
type stuckBackend struct {
	backend.Backend
	sb *stuckBackends
}

func (b *stuckBackend) Close() error {
	if b.sb.closes != nil {
		b.sb.closes.Add(1)
	}
	return b.Backend.Close()
}

func (b *stuckBackend) ReadBlocks(buf []byte, slba uint64) error {
	b.sb.reads.Add(1)
	<-b.sb.gate
	return b.Backend.ReadBlocks(buf, slba)
}

func (b *stuckBackend) Info() backend.Info {
	i := backend.Describe(b.Backend)
	i.Inline = false // through the executor's workers, as a file would
	return i
}

// reconnectStuck is one association of a host against a hung backend, as the Linux host
// makes one every reconnect_delay: it dials and connects an admin queue of host and an
// I/O queue, sends a read that gets stuck in the backend, then tears both queues down
// (the I/O queue's Close gives up on the read after the close timeout). It returns the
// read's completion channel, or where the target refused: the error of a Dial, or the
// status of a Connect (the refused association's queues are closed).
func (e *env) reconnectStuck(sb *stuckBackends, host string) (done <-chan nvmeproto.Completion, dialErr error, refused nvmeproto.Completion) {
	e.t.Helper()
	ac, err := e.port.Dial(32)
	if err != nil {
		return nil, err, refused
	}
	a := &hostQueue{t: e.t, conn: ac}
	defer ac.Close()
	c := a.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, host)
	if !c.Status.Success() {
		return nil, nil, c
	}
	cntlid, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
	a.enable()
	ic, err := e.port.Dial(32)
	if err != nil {
		return nil, err, refused
	}
	io := &hostQueue{t: e.t, conn: ic}
	defer ic.Close()
	if c := io.connect(1, 31, 0, cntlid, subNQN, host); !c.Status.Success() {
		return nil, nil, c
	}
	before := sb.reads.Load()
	cmd := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	done = io.submit(&cmd, make([]byte, 4096))
	sb.waitReads(e.t, before+1)
	return done, nil, refused
}

// TestStuckQueuesHoldHostLimit: a host whose I/O queue closes with a read stuck in a hung
// backend, and which reconnects again and again (each time a read gets stuck again), runs
// into limits.max_queues_per_host: the closed queues keep counting while their reads
// execute, so its Connect fails with Controller Busy (no DNR: it clears) instead of each
// reconnect taking fresh queues — and the buffers their stuck commands hold. Another host
// still connects. Once the backend completes the reads, their places are free again.
func TestStuckQueuesHoldHostLimit(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Limits.MaxQueues = 16
	cfg.Limits.MaxQueuesPerHost = 4
	sb := &stuckBackends{gate: make(chan struct{})}
	e := newEnv(t, cfg, target.WithBackendOpener(sb.open), target.WithQueueCloseTimeout(100*time.Millisecond))
	var dones []<-chan nvmeproto.Completion
	var refused nvmeproto.Completion
	rounds := 0
	for ; rounds < 10; rounds++ {
		done, err, c := e.reconnectStuck(sb, hostNQN)
		if err != nil {
			close(sb.gate)
			t.Fatalf("round %d: Dial: %v; the host's limit should refuse it first", rounds, err)
		}
		if done == nil {
			refused = c
			break
		}
		dones = append(dones, done)
	}
	// Each association leaves one stuck I/O queue: with 3 the admin queue of the fourth
	// takes the host's last place and its I/O queue is refused.
	if rounds != 3 {
		close(sb.gate)
		t.Fatalf("the host reconnected %d times, each leaving a queue with a stuck read, before a Connect was refused; "+
			"limits.max_queues_per_host is 4: want the I/O Connect of the fourth refused", rounds)
	}
	expect(t, "I/O Connect of a host holding 3 stuck queues", refused, nvmeproto.StatusConnectControllerBusy)
	if refused.Status.DNR() {
		t.Errorf("Controller Busy with DNR: the host would not retry once the reads complete")
	}
	if n := e.tgt.ConnectRejects()[target.RejectHostLimit]; n != 1 {
		t.Errorf("connect rejects for host_limit: %d, want 1", n)
	}
	waitFor(t, func() bool { _, q := e.tgt.HostUsage(hostNQN); return q == 3 }) // the refused association's admin queue is gone
	if n := e.tgt.StuckQueues(); n != 3 {
		t.Errorf("%d stuck queues, want 3", n)
	}
	// Another host keeps its share.
	o, cntlid := e.adminConnect(subNQN, otherNQN, 0)
	oio := e.dial(32)
	expectOK(t, "another host's I/O Connect", oio.connect(1, 31, 0, cntlid, subNQN, otherNQN))

	close(sb.gate)
	for i, d := range dones {
		select {
		case <-d:
		case <-time.After(10 * time.Second):
			t.Fatalf("stuck read %d never completed once the backend did", i)
		}
	}
	waitFor(t, func() bool { c, q := e.tgt.HostUsage(hostNQN); return c == 0 && q == 0 })
	if n, q := e.tgt.StuckQueues(), e.tgt.QueueCount(); n != 0 || q != 2 {
		t.Errorf("after the reads completed: %d stuck queues, %d queues; want 0, 2 (the other host's)", n, q)
	}
	done, err, c := e.reconnectStuck(sb, hostNQN) // the backend completes reads now
	if err != nil || done == nil {
		t.Fatalf("the host reconnecting after its stuck reads completed: Dial %v, Connect %v", err, c.Status)
	}
	expectOK(t, "read once the backend completes", wait(t, done))
	o.conn.Close()
}

// TestStuckQueuesHoldMaxQueues: queues closed with reads stuck in a hung backend keep
// counting against limits.max_queues, so a host reconnecting again and again is refused
// a new queue (ErrTooManyQueues: the RDMA transport rejects the connection with NO_RSC)
// once they fill it; once the reads complete the target takes queues again.
func TestStuckQueuesHoldMaxQueues(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Limits.MaxQueues = 4
	cfg.Limits.MaxQueuesPerAddress = 4
	cfg.Limits.MaxQueuesPerHost = 4
	sb := &stuckBackends{gate: make(chan struct{})}
	e := newEnv(t, cfg, target.WithBackendOpener(sb.open), target.WithQueueCloseTimeout(100*time.Millisecond))
	other, _ := e.adminConnect(subNQN, otherNQN, 0)
	var dones []<-chan nvmeproto.Completion
	var dialErr error
	rounds := 0
	for ; rounds < 10; rounds++ {
		done, err, c := e.reconnectStuck(sb, hostNQN)
		if err != nil {
			dialErr = err
			break
		}
		if done == nil {
			close(sb.gate)
			t.Fatalf("round %d: Connect refused with %v; the target's limit should refuse the queue first", rounds, c.Status)
		}
		dones = append(dones, done)
	}
	// The other host's admin queue and two stuck ones: the third association's admin
	// queue takes the last place, its I/O queue is refused.
	if rounds != 2 {
		close(sb.gate)
		t.Fatalf("the host reconnected %d times, each leaving a queue with a stuck read, before a queue was refused; "+
			"limits.max_queues is 4: want the I/O queue of the third refused", rounds)
	}
	if !errors.Is(dialErr, target.ErrTooManyQueues) {
		t.Errorf("Dial with the target full of stuck queues: %v, want ErrTooManyQueues", dialErr)
	} else if !strings.Contains(dialErr.Error(), "2 of them closed but still counted") {
		t.Errorf("the refusal does not say that 2 of the queues are stuck: %v", dialErr)
	}
	waitFor(t, func() bool { return e.tgt.QueueCount() == 3 }) // the refused association's admin queue is gone
	if n := e.tgt.StuckQueues(); n != 2 {
		t.Errorf("%d stuck queues, want 2", n)
	}
	close(sb.gate)
	for i, d := range dones {
		select {
		case <-d:
		case <-time.After(10 * time.Second):
			t.Fatalf("stuck read %d never completed once the backend did", i)
		}
	}
	waitFor(t, func() bool { return e.tgt.QueueCount() == 1 })
	if n := e.tgt.StuckQueues(); n != 0 {
		t.Errorf("%d stuck queues after the reads completed, want 0", n)
	}
	done, err, c := e.reconnectStuck(sb, hostNQN)
	if err != nil || done == nil {
		t.Fatalf("the host reconnecting after its stuck reads completed: Dial %v, Connect %v", err, c.Status)
	}
	expectOK(t, "read once the backend completes", wait(t, done))
	other.conn.Close()
}

// TestLimitRefusedConnectNotCounted: an admin Connect refused after the per-host limits
// were checked (here: authentication required, and the host has no key) does not count
// against them. Else anyone could lock a host out by its NQN, which is no secret, with a
// few refused Connects.
func TestLimitRefusedConnectNotCounted(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Limits.MaxControllersPerHost = 2
	e := newEnv(t, cfg, target.WithAuthKeys(oneHostKeys{nil})) // required, nobody has a key
	for i := range 3 {
		h := e.dial(32)
		c := h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN)
		expect(t, fmt.Sprintf("connect %d without a key", i), c, nvmeproto.StatusConnectInvalidParameters)
		h.conn.Close()
	}
	if ctrls, queues := e.tgt.HostUsage(hostNQN); ctrls != 0 || queues != 0 {
		t.Errorf("host usage after refused Connects: %d controllers, %d queues; want 0, 0", ctrls, queues)
	}
	if n := e.tgt.ConnectRejects()[target.RejectHostLimit]; n != 0 {
		t.Errorf("%d refusals for the host's limits, want 0", n)
	}
}

// TestNamespaceCloseBounded: removing a namespace whose backend never completes a
// request stops waiting after the close timeout instead of hanging the caller (a control
// API request, SIGHUP) and the namespace is removed; closing the target gives up the same
// way, with ErrNamespaceBusy; the backend is closed only once the request completes.
func TestNamespaceCloseBounded(t *testing.T) {
	var closes atomic.Int32
	e, io, gate, done := stuckRead(t, 300*time.Millisecond, &closes)

	removed := make(chan error, 1)
	go func() { removed <- e.tgt.RemoveNamespace(subNQN, 1) }()
	select {
	case err := <-removed:
		if err != nil {
			t.Errorf("RemoveNamespace with a stuck backend request: %v, want it removed", err)
		}
	case <-time.After(5 * time.Second):
		close(gate)
		t.Fatal("RemoveNamespace waited for a backend request that does not complete (close timeout 300ms)")
	}
	if err := e.tgt.RemoveNamespace(subNQN, 1); !errors.Is(err, target.ErrNoSuchNamespace) {
		t.Errorf("removing it again: %v, want ErrNoSuchNamespace", err)
	}
	// A second namespace, stuck the same way, as the target shuts down.
	if err := e.tgt.AddNamespace(subNQN, memNS(2, 1<<20)); err != nil {
		t.Fatal(err)
	}
	cmd2 := rw(nvmeproto.OpRead, 2, 0, 8, 4096)
	done2 := io.submit(&cmd2, make([]byte, 4096))
	time.Sleep(100 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- e.tgt.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, target.ErrNamespaceBusy) {
			t.Errorf("Target.Close with a stuck backend request: %v, want ErrNamespaceBusy", err)
		}
	case <-time.After(5 * time.Second):
		close(gate)
		t.Fatal("Target.Close waited for a backend request that does not complete (close timeout 300ms)")
	}
	if n := closes.Load(); n != 0 {
		t.Errorf("the backend was closed %d times while its request still executed", n)
	}
	close(gate)
	for _, d := range []<-chan nvmeproto.Completion{done, done2} {
		select {
		case <-d:
		case <-time.After(10 * time.Second):
			t.Fatal("a late request never completed")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for closes.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := closes.Load(); n != 2 {
		t.Errorf("the two backends were closed %d times after their requests completed, want 2", n)
	}
}
