package target_test

import (
	"errors"
	"fmt"
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
// controller and the host's accounting are released, and the request still completes
// (to the transport) when the backend finally finishes it.
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
	if _, q := e.tgt.HostUsage(hostNQN); q != 1 {
		t.Errorf("host holds %d queues after its I/O queue closed, want 1 (the admin queue)", q)
	}
	close(gate)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the late request never completed")
	}
}

// stuckRead starts a target whose backends block reads until gate closes (and count
// their Close calls in closes, if not nil), with the given queue-close timeout; connects
// a controller with one I/O queue and leaves a read of namespace 1 stuck in its backend.
func stuckRead(t *testing.T, closeTimeout time.Duration, closes *atomic.Int32) (e *env, io *hostQueue, gate chan struct{}, done <-chan nvmeproto.Completion) {
	t.Helper()
	gate = make(chan struct{})
	open := func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil {
			return nil, err
		}
		return &stuckBackend{Backend: b, gate: gate, closes: closes}, nil
	}
	e = newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithBackendOpener(open), target.WithQueueCloseTimeout(closeTimeout))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io = e.ioConnect(1, cntlid, 32)
	cmd := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	done = io.submit(&cmd, make([]byte, 4096))
	time.Sleep(100 * time.Millisecond) // the read is in the backend
	return e, io, gate, done
}

// stuckBackend blocks reads until gate closes and counts its Close calls in closes (if
// not nil).
type stuckBackend struct {
	backend.Backend
	gate   chan struct{}
	closes *atomic.Int32
}

func (b *stuckBackend) Close() error {
	if b.closes != nil {
		b.closes.Add(1)
	}
	return b.Backend.Close()
}

func (b *stuckBackend) ReadBlocks(buf []byte, slba uint64) error {
	<-b.gate
	return b.Backend.ReadBlocks(buf, slba)
}

func (b *stuckBackend) Info() backend.Info {
	i := backend.Describe(b.Backend)
	i.Inline = false // through the executor's workers, as a file would
	return i
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
