package initiator_test

// These tests drive gonvmf's own target in-process through the loop transport: the
// initiator package does not import the target, its external tests do.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

const (
	subNQN  = "nqn.2024-01.io.gonvmf:initiator-test"
	hostNQN = "nqn.2014-08.org.nvmexpress:uuid:6f1c2a3b-4d5e-4f60-8a9b-0c1d2e3f4a5b"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	tgt  *target.Target
	port *loop.Port
}

// newEnv starts a target with one subsystem of a 16 MiB memory namespace (4 KiB in-capsule
// data) and a loop port; mut may change the configuration first.
func newEnv(t testing.TB, mut func(*conf.Config), opts ...target.Option) *env {
	t.Helper()
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: subNQN, AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 16 << 20, LBASize: 512}}}},
		Transport: conf.Transport{InCapsuleDataSize: 4096, QueueDepth: 64, MaxIOQueues: 4, KeepAliveTimeout: 120 * time.Second},
	}
	if mut != nil {
		mut(cfg)
	}
	tgt, p := testutil.LoopTarget(t, cfg, loop.Options{Advertise: true, Name: "loop-test"}, opts...)
	return &env{tgt: tgt, port: p}
}

func (e *env) options() initiator.Options {
	return initiator.Options{
		Transport: initiator.TransportLoop,
		Loop: func(depth int) (initiator.LoopConn, error) {
			c, err := e.port.Dial(depth)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		SubNQN: subNQN, HostNQN: hostNQN, Queues: 2, QueueSize: 32, Logger: quiet,
	}
}

func (e *env) dial(t testing.TB, mut func(*initiator.Options)) *initiator.Controller {
	t.Helper()
	o := e.options()
	if mut != nil {
		mut(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestLoopConnectIdentify(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, nil)
	id := c.Identify()
	if id.SubNQN != subNQN || id.CNTLID != c.ID() || id.CNTRLTYPE != nvmeproto.ControllerTypeIO {
		t.Errorf("Identify: subnqn %q cntlid %d/%d type %d", id.SubNQN, id.CNTLID, c.ID(), id.CNTRLTYPE)
	}
	if c.IOQueues() != 2 {
		t.Errorf("IOQueues = %d, want 2", c.IOQueues())
	}
	if q := c.IOQueue(1); q.ID() != 2 || q.Depth() != 32 {
		t.Errorf("queue 1: id %d depth %d", q.ID(), q.Depth())
	}
	if c.InCapsuleDataSize() != 4096 {
		t.Errorf("in-capsule data size %d, want 4096", c.InCapsuleDataSize())
	}
	if !c.CAP().CQR() && c.CAP().MQES() == 0 {
		t.Errorf("CAP %v", c.CAP())
	}
	if c.KeepAliveTimeout() != initiator.DefaultKeepAlive {
		t.Errorf("KATO %v", c.KeepAliveTimeout())
	}
	ns := c.Namespaces()
	if len(ns) != 1 || ns[0].NSID != 1 || ns[0].BlockSize() != 512 || ns[0].Size() != 16<<20 {
		t.Fatalf("namespaces: %+v", ns)
	}
	if u, ok := ns[0].UUID(); !ok || u == ([16]byte{}) {
		t.Errorf("namespace UUID %x %v", u, ok)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !errors.Is(c.Err(), initiator.ErrClosed) {
		t.Errorf("Err after Close = %v", c.Err())
	}
	if _, err := ns[0].ReadAt(ctx(t), make([]byte, 512), 0); !errors.Is(err, initiator.ErrClosed) {
		t.Errorf("ReadAt after Close: %v", err)
	}
}

func TestLoopReadWrite(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, nil)
	ns := c.Namespaces()[0]
	cx := ctx(t)

	// Copying API: sizes around the in-capsule limit and the bounce chunk size.
	for _, n := range []int{512, 4096, 8192, 128 << 10, 300 << 10} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*7 + n)
		}
		off := int64(n) * 3
		if got, err := ns.WriteAt(cx, p, off, 0); err != nil || got != n {
			t.Fatalf("WriteAt %d: %d %v", n, got, err)
		}
		q := make([]byte, n)
		if got, err := ns.ReadAt(cx, q, off); err != nil || got != n {
			t.Fatalf("ReadAt %d: %d %v", n, got, err)
		}
		if !bytes.Equal(p, q) {
			t.Fatalf("ReadAt %d returned other data", n)
		}
	}
	if _, err := ns.WriteAt(cx, make([]byte, 100), 0, 0); err == nil {
		t.Error("WriteAt of a partial block succeeded")
	}

	// Zero-copy API with dedicated memory, FUA, Flush.
	buf, err := c.AllocBuffer(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i >> 9)
	}
	if err := ns.Write(cx, buf, 100, initiator.FUA); err != nil {
		t.Fatal(err)
	}
	if err := ns.Flush(cx); err != nil {
		t.Fatal(err)
	}
	rb := buf.Slice(32<<10, 4096)
	defer rb.Release()
	clear(rb.Bytes())
	if err := ns.Read(cx, rb, 100+64); err != nil { // block 64 of what was written
		t.Fatal(err)
	}
	if rb.Bytes()[0] != 64 || rb.Bytes()[4095] != 71 {
		t.Fatalf("Read got %d..%d", rb.Bytes()[0], rb.Bytes()[4095])
	}

	// Write Zeroes and Deallocate read back as zeroes on the memory backend.
	if err := ns.WriteZeroes(cx, 100, 8, 0); err != nil {
		t.Fatal(err)
	}
	if err := ns.Deallocate(cx, 108, 8); err != nil {
		t.Fatal(err)
	}
	z := make([]byte, 16*512)
	if _, err := ns.ReadAt(cx, z, 100*512); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(z, make([]byte, len(z))) {
		t.Error("Write Zeroes / Deallocate left data")
	}

	// Out of range: a StatusError with LBA Out of Range.
	err = ns.Read(cx, rb, ns.Blocks()-2)
	var se *initiator.StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvmeproto.StatusLBAOutOfRange.Code() {
		t.Fatalf("read past the end: %v", err)
	}
	if !strings.Contains(err.Error(), "LBA Out of Range") {
		t.Errorf("message %q", err)
	}
	if !errors.Is(err, &initiator.StatusError{Status: nvmeproto.StatusLBAOutOfRange}) {
		t.Error("errors.Is by status")
	}
	// The controller is still fine after a command error.
	if err := ns.Read(cx, rb, 0); err != nil {
		t.Fatal(err)
	}
}

// TestLoopAsync keeps every slot of every queue busy with writes and read-backs of
// distinct blocks and checks the data.
func TestLoopAsync(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, func(o *initiator.Options) { o.Queues = 3; o.QueueSize = 16 })
	if c.IOQueues() != 3 {
		t.Fatalf("%d queues", c.IOQueues())
	}
	ns := c.Namespaces()[0]
	const bs, rounds = 4096, 20
	mem, err := c.AllocBuffer(3 * 16 * bs)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Release()
	var wg sync.WaitGroup
	var failures atomic.Int32
	var mu sync.Mutex
	var firstErr error
	for qi := 0; qi < c.IOQueues(); qi++ {
		q := c.IOQueue(qi)
		for s := 0; s < q.Depth(); s++ {
			slotNo := qi*16 + s
			b := mem.Slice(slotNo*bs, bs)
			r := &initiator.Request{NSID: ns.NSID, Blocks: bs / 512, Buf: b}
			round := 0
			var next func()
			next = func() {
				lba := uint64(slotNo*rounds+round) * (bs / 512)
				if r.Op == initiator.OpWrite {
					r.Op = initiator.OpRead
					clear(b.Bytes())
				} else {
					r.Op = initiator.OpWrite
					round++
					for i := 0; i < bs; i += 8 {
						b.Bytes()[i] = byte(slotNo)
						b.Bytes()[i+1] = byte(round)
					}
					lba = uint64(slotNo*rounds+round) * (bs / 512)
				}
				r.LBA = lba
				if err := q.Submit(r); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					failures.Add(1)
					wg.Done()
				}
			}
			r.Done = func(r *initiator.Request) {
				if r.Err != nil {
					mu.Lock()
					firstErr = r.Err
					mu.Unlock()
					failures.Add(1)
					wg.Done()
					return
				}
				if r.Op == initiator.OpRead {
					d := b.Bytes()
					if d[0] != byte(slotNo) || d[1] != byte(round) || d[bs-8] != byte(slotNo) {
						mu.Lock()
						firstErr = errors.New("read back other data")
						mu.Unlock()
						failures.Add(1)
						wg.Done()
						return
					}
					if round == rounds-1 {
						wg.Done()
						return
					}
				}
				next()
			}
			wg.Add(1)
			next()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("async I/O did not finish")
	}
	if failures.Load() != 0 {
		t.Fatalf("%d failures, e.g. %v", failures.Load(), firstErr)
	}
}

func TestLoopUnknownSubsystem(t *testing.T) {
	e := newEnv(t, nil)
	o := e.options()
	o.SubNQN = "nqn.2024-01.io.gonvmf:nope"
	_, err := initiator.Dial(ctx(t), o)
	if !errors.Is(err, initiator.ErrSubsystemNotFound) {
		t.Fatalf("Dial: %v", err)
	}
	var ce *initiator.ConnectError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "has no subsystem nqn.2024-01.io.gonvmf:nope") {
		t.Errorf("message: %v", err)
	}
}

func TestLoopHostNotAllowed(t *testing.T) {
	e := newEnv(t, func(c *conf.Config) {
		c.Subsystems[0].AllowAnyHost = false
		c.Subsystems[0].Hosts = []string{"nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"}
	})
	_, err := initiator.Dial(ctx(t), e.options())
	if !errors.Is(err, initiator.ErrHostNotAllowed) {
		t.Fatalf("Dial: %v", err)
	}
	if !strings.Contains(err.Error(), hostNQN) || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("message: %v", err)
	}
	// The allowed host gets in.
	e.dial(t, func(o *initiator.Options) {
		o.HostNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"
	})
}

func TestLoopDiscovery(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, func(o *initiator.Options) { o.SubNQN = nvmeproto.DiscoveryNQN })
	if !c.IsDiscovery() || c.IOQueues() != 0 || c.KeepAliveTimeout() != 0 {
		t.Fatalf("discovery controller: %v %d %v", c.IsDiscovery(), c.IOQueues(), c.KeepAliveTimeout())
	}
	l, err := c.DiscoveryLog(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range l.Entries {
		if en.SubNQN == subNQN && en.TrType == nvmeproto.TrTypeIntraHost && en.TrAddr == "loop-test" {
			found = true
		}
	}
	if !found {
		t.Fatalf("discovery log %+v lacks %s", l, subNQN)
	}
}

// TestLoopTargetGone closes the target under a stream of I/O: every request must come
// back with an error, the controller must fail, and nothing may hang.
func TestLoopTargetGone(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, nil)
	ns := c.Namespaces()[0]
	q := c.IOQueue(0)
	buf, err := c.AllocBuffer(q.Depth() * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	var completed, failed atomic.Int64
	var outstanding sync.WaitGroup
	for i := 0; i < q.Depth(); i++ {
		r := &initiator.Request{Op: initiator.OpRead, NSID: ns.NSID, Blocks: 8, Buf: buf.Slice(i*4096, 4096)}
		r.Done = func(r *initiator.Request) {
			if r.Err != nil {
				failed.Add(1)
				outstanding.Done()
				return
			}
			completed.Add(1)
			r.LBA = uint64(rand.IntN(1000)) * 8
			if err := q.Submit(r); err != nil {
				failed.Add(1)
				outstanding.Done()
			}
		}
		outstanding.Add(1)
		if err := q.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	for completed.Load() < 1000 {
		time.Sleep(time.Millisecond)
	}
	e.tgt.Close()
	waitOrFail(t, 10*time.Second, "requests after the target closed", outstanding.Wait)
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("controller not failed")
	}
	if !errors.Is(c.Err(), initiator.ErrDisconnected) {
		t.Errorf("Err = %v", c.Err())
	}
	if failed.Load() != int64(q.Depth()) {
		t.Errorf("%d requests failed, want %d", failed.Load(), q.Depth())
	}
	if _, err := ns.ReadAt(ctx(t), make([]byte, 512), 0); err == nil {
		t.Error("ReadAt on a failed controller succeeded")
	}
	waitOrFail(t, 10*time.Second, "Close", func() { c.Close() })
}

// TestLoopShutdownUnderResubmission: requests that resubmit themselves from Done keep
// every queue busy; Shutdown still gets to the controller shutdown (CC.SHN, CSTS.SHST)
// well within its context, and every request ends.
func TestLoopShutdownUnderResubmission(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, nil)
	ns := c.Namespaces()[0]
	var outstanding sync.WaitGroup
	var completed, refused atomic.Int64
	for qi := range c.IOQueues() {
		q := c.IOQueue(qi)
		buf, err := c.AllocBuffer(q.Depth() * 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Release()
		for i := 0; i < q.Depth(); i++ {
			r := &initiator.Request{Op: initiator.OpRead, NSID: ns.NSID, Blocks: 8, Buf: buf.Slice(i*4096, 4096)}
			r.Done = func(r *initiator.Request) {
				if r.Err == nil {
					completed.Add(1)
					r.LBA = uint64(rand.IntN(1000)) * 8
					err := q.Submit(r)
					if err == nil {
						return
					}
					if errors.Is(err, initiator.ErrClosed) {
						refused.Add(1)
					} else {
						t.Errorf("resubmission: %v", err)
					}
				}
				r.Buf.Release()
				outstanding.Done()
			}
			outstanding.Add(1)
			if err := q.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for completed.Load() < 1000 {
		time.Sleep(time.Millisecond)
	}
	const budget = 20 * time.Second
	sctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	if err := c.Shutdown(sctx); err != nil {
		t.Errorf("Shutdown under resubmitting I/O after %v: %v", time.Since(start), err)
	}
	if d := time.Since(start); d > budget/2 {
		t.Errorf("Shutdown took %v of its %v", d, budget)
	}
	waitOrFail(t, 10*time.Second, "requests after Shutdown", outstanding.Wait)
	if refused.Load() == 0 {
		t.Error("no resubmission was refused with ErrClosed")
	}
}

// shnSpy calls onSHN for a Property Set of CC with a shutdown notification.
type shnSpy struct {
	initiator.LoopConn
	onSHN func()
}

func (s shnSpy) Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error {
	if cmd.IsFabrics() && cmd.FabricsType() == nvmeproto.FabricsPropertySet {
		var p nvmeproto.PropertySetCommand
		p.FromCommand(cmd)
		if p.Offset == nvmeproto.PropCC && nvmeproto.CC(p.Value).SHN() != 0 {
			s.onSHN()
		}
	}
	return s.LoopConn.Submit(cmd, data, done)
}

// TestLoopShutdownStalledIO: a read the target does not complete does not keep Shutdown
// from sending CC.SHN: the wait for outstanding I/O ends halfway through ctx.
func TestLoopShutdownStalledIO(t *testing.T) {
	var sb *stallBackend
	e := newEnv(t, nil, stallBackends(&sb))
	var shn atomic.Bool
	var unstall sync.Once
	release := func() { unstall.Do(func() { close(sb.release) }) }
	t.Cleanup(release)
	c := e.dial(t, func(o *initiator.Options) {
		dial := o.Loop
		o.Loop = func(depth int) (initiator.LoopConn, error) {
			conn, err := dial(depth)
			// Once SHN is out, let the target finish the read (and so the shutdown).
			return shnSpy{conn, func() { shn.Store(true); release() }}, err
		}
	})
	buf, err := c.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	sb.stalled.Store(true)
	done := make(chan error, 1)
	r := &initiator.Request{Op: initiator.OpRead, NSID: 1, Blocks: 8, Buf: buf, Done: func(r *initiator.Request) { done <- r.Err }}
	if err := c.IOQueue(0).Submit(r); err != nil {
		t.Fatal(err)
	}
	// Half of 10 s for the stalled read, up to 3 s for the loop queue to give up on it
	// (loopCloseWait), the rest for the shutdown.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Shutdown(sctx)
	if !shn.Load() {
		t.Errorf("Shutdown with a stalled read never sent CC.SHN (Shutdown: %v)", err)
	} else if err != nil {
		t.Errorf("Shutdown with a stalled read: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, initiator.ErrClosed) {
			t.Errorf("stalled read ended with %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stalled read not aborted after Shutdown")
	}
}

func waitOrFail(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not finish in %v", what, d)
	}
}

// stallBackend blocks reads while stalled is set.
type stallBackend struct {
	backend.Backend
	stalled atomic.Bool
	release chan struct{}
}

// stallBackends opens the target's backends as stallBackends; *sb is the last opened.
func stallBackends(sb **stallBackend) target.Option {
	return target.WithBackendOpener(func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil {
			return nil, err
		}
		*sb = &stallBackend{Backend: b, release: make(chan struct{})}
		return *sb, nil
	})
}

func (b *stallBackend) ReadBlocks(buf []byte, slba uint64) error {
	if b.stalled.Load() {
		<-b.release
	}
	return b.Backend.ReadBlocks(buf, slba)
}

// TestLoopTimeout: a command the target never completes fails the controller with
// ErrTimeout after CommandTimeout.
func TestLoopTimeout(t *testing.T) {
	var sb *stallBackend
	e := newEnv(t, nil, stallBackends(&sb))
	t.Cleanup(func() { close(sb.release) })
	c := e.dial(t, func(o *initiator.Options) { o.CommandTimeout = 300 * time.Millisecond })
	ns := c.Namespaces()[0]
	sb.stalled.Store(true)
	start := time.Now()
	_, err := ns.ReadAt(ctx(t), make([]byte, 4096), 0)
	if !errors.Is(err, initiator.ErrTimeout) {
		t.Fatalf("stalled read: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 8*time.Second {
		t.Errorf("timed out after %v", d)
	}
	if !errors.Is(c.Err(), initiator.ErrTimeout) {
		t.Errorf("controller error %v", c.Err())
	}
}

// TestLoopAllocatedBytes: a dedicated buffer counts until its last reference, its
// slices' included, is dropped.
func TestLoopAllocatedBytes(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, nil)
	b, err := c.AllocBuffer(8192)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Slice(4096, 4096)
	if got := c.AllocatedBytes(); got != 8192 {
		t.Errorf("after AllocBuffer(8192): %d bytes", got)
	}
	b.Release()
	if got := c.AllocatedBytes(); got != 8192 {
		t.Errorf("buffer released, its slice not: %d bytes, want 8192", got)
	}
	s.Release()
	if got := c.AllocatedBytes(); got != 0 {
		t.Errorf("buffer and slice released: %d bytes, want 0", got)
	}
}

// TestLoopSubmitWithoutDone: a request without a Done function is refused by Submit
// and SubmitWait; the controller keeps working.
func TestLoopSubmitWithoutDone(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, nil)
	q := c.IOQueue(0)
	if err := q.Submit(&initiator.Request{Op: initiator.OpFlush, NSID: 1}); err == nil || !strings.Contains(err.Error(), "no Done function") {
		t.Errorf("Submit without Done: %v", err)
	}
	if err := q.SubmitWait(ctx(t), &initiator.Request{Op: initiator.OpFlush, NSID: 1}); err == nil || !strings.Contains(err.Error(), "no Done function") {
		t.Errorf("SubmitWait without Done: %v", err)
	}
	if err := c.Namespaces()[0].Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestLoopHugeTimeouts: command timeouts too long to add to the controller clock
// (math.MaxInt64, "no timeout") never expire: a read held by the target for a second,
// across several watchdog checks, completes, and so does an admin command.
func TestLoopHugeTimeouts(t *testing.T) {
	var sb *stallBackend
	e := newEnv(t, nil, stallBackends(&sb))
	c := e.dial(t, func(o *initiator.Options) {
		o.CommandTimeout = time.Duration(math.MaxInt64)
		o.AdminTimeout = time.Duration(math.MaxInt64)
	})
	ns := c.Namespaces()[0]
	// The controller clock, which deadlines are computed from, starts at 0 and is
	// advanced by the watchdog every 100 ms: let it move first.
	time.Sleep(time.Second)
	sb.stalled.Store(true)
	read := make(chan error, 1)
	go func() {
		_, err := ns.ReadAt(ctx(t), make([]byte, 4096), 0)
		read <- err
	}()
	time.Sleep(time.Second) // the watchdog checks every 100 ms
	sb.stalled.Store(false)
	close(sb.release)
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("read with a math.MaxInt64 command timeout: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read not done 10 s after the target let it complete")
	}
	if err := c.Err(); err != nil {
		t.Fatalf("controller failed: %v", err)
	}
	if _, err := c.GetFeatures(ctx(t), nvmeproto.FIDNumberOfQueues, 0); err != nil {
		t.Fatalf("admin command with a math.MaxInt64 admin timeout: %v", err)
	}
}

// lateConn completes the next command of opcode op a second late, from a timer
// goroutine, once armed; fired is signalled after that completion was handed over.
type lateConn struct {
	initiator.LoopConn
	op    uint8
	armed *atomic.Bool
	fired chan struct{}
}

func (l lateConn) Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error {
	if cmd.Opcode != l.op || !l.armed.CompareAndSwap(true, false) {
		return l.LoopConn.Submit(cmd, data, done)
	}
	return l.LoopConn.Submit(cmd, data, func(cqe nvmeproto.Completion) {
		time.AfterFunc(time.Second, func() {
			done(cqe)
			l.fired <- struct{}{}
		})
	})
}

// TestLoopAdminCommandAbandoned: AdminCommand whose context ends before the completion
// returns a zero Completion and does not read the request the completion goroutine
// fills in later (run with -race). Nothing the test goroutine does after AdminCommand
// returns may order it before that completion: the follow-up runs on a goroutine
// started before.
func TestLoopAdminCommandAbandoned(t *testing.T) {
	e := newEnv(t, nil)
	var armed atomic.Bool
	fired := make(chan struct{}, 1)
	c := e.dial(t, func(o *initiator.Options) {
		dial := o.Loop
		o.Loop = func(depth int) (initiator.LoopConn, error) {
			conn, err := dial(depth)
			return lateConn{conn, nvmeproto.OpGetFeatures, &armed, fired}, err
		}
	})
	// After the late completion was handed over, one more Get Features: completions are
	// delivered in order, so once it returns the late one was delivered too.
	after := make(chan error, 1)
	fctx := ctx(t)
	go func() {
		select {
		case <-fired:
		case <-time.After(10 * time.Second):
			after <- errors.New("the late completion was not delivered")
			return
		}
		_, err := c.GetFeatures(fctx, nvmeproto.FIDNumberOfQueues, 0)
		after <- err
	}()
	var cmd nvmeproto.Command
	(&nvmeproto.GetFeaturesCommand{FID: nvmeproto.FIDNumberOfQueues}).ToCommand(&cmd)
	armed.Store(true)
	cx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	cqe, err := c.AdminCommand(cx, &cmd, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AdminCommand completed a second late within a 20 ms context: %v, %+v", err, cqe)
	}
	if cqe != (nvmeproto.Completion{}) {
		t.Errorf("AdminCommand whose context ended returned completion %+v, want zero", cqe)
	}
	if err := <-after; err != nil {
		t.Fatal(err)
	}
}

// TestLoopContext: a cancelled context ends the call, not the command.
func TestLoopContext(t *testing.T) {
	var sb *stallBackend
	e := newEnv(t, nil, stallBackends(&sb))
	c := e.dial(t, nil)
	ns := c.Namespaces()[0]
	sb.stalled.Store(true)
	cx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := ns.ReadAt(cx, make([]byte, 4096), 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadAt with an expiring context: %v", err)
	}
	// Fill a queue: one more is refused with ErrQueueFull.
	q := c.IOQueue(0)
	buf, err := c.AllocBuffer(q.Depth() * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	var wg sync.WaitGroup
	for i := 0; i < q.Depth(); i++ {
		wg.Add(1)
		r := &initiator.Request{Op: initiator.OpRead, NSID: 1, Blocks: 8, Buf: buf.Slice(i*4096, 4096), Done: func(r *initiator.Request) {
			if r.Err != nil {
				t.Error(r.Err)
			}
			wg.Done()
		}}
		if err := q.Submit(r); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if err := q.Submit(&initiator.Request{Op: initiator.OpFlush, NSID: 1, Done: func(*initiator.Request) {}}); !errors.Is(err, initiator.ErrQueueFull) {
		t.Fatalf("submit to a full queue: %v", err)
	}
	sb.stalled.Store(false)
	close(sb.release)
	waitOrFail(t, 10*time.Second, "stalled reads", wg.Wait)
	// The abandoned command completes; the controller keeps working.
	if _, err := ns.ReadAt(ctx(t), make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestLoopOptions(t *testing.T) {
	for _, tc := range []struct {
		o    initiator.Options
		want string
	}{
		{initiator.Options{SubNQN: subNQN}, "no target address"},
		{initiator.Options{Addr: "host.example", SubNQN: subNQN}, "not an IP address"},
		{initiator.Options{Addr: "10.0.0.1"}, "no subsystem NQN"},
		{initiator.Options{Addr: "10.0.0.1", SubNQN: "bo\ngus"}, "subsystem NQN"},
		{initiator.Options{Transport: "tcp", SubNQN: subNQN}, "unknown transport"},
		{initiator.Options{Transport: "loop", SubNQN: subNQN}, "needs Options.Loop"},
		{initiator.Options{Addr: "10.0.0.1", SubNQN: subNQN, QueueSize: 5000}, "queue size"},
		{initiator.Options{Transport: "loop", Loop: func(int) (initiator.LoopConn, error) { return nil, errors.New("not dialled") },
			SubNQN: subNQN, KeepAlive: 50 * 24 * time.Hour}, "keep-alive timeout (Options.KeepAlive) 1200h0m0s is longer than the 1193h2m47.295s"},
	} {
		_, err := initiator.Dial(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// TestLoopKeepAlive: with a 1 s KATO the target would drop a silent host after at most
// 1.5 s; Keep Alive every 500 ms keeps the controller.
func TestLoopKeepAlive(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, func(o *initiator.Options) { o.KeepAlive = time.Second })
	if c.KeepAliveTimeout() != time.Second {
		t.Fatalf("KATO %v", c.KeepAliveTimeout())
	}
	select {
	case <-c.Done():
		t.Fatalf("controller failed: %v", c.Err())
	case <-time.After(3 * time.Second):
	}
	if _, err := c.Namespaces()[0].ReadAt(ctx(t), make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
}

// TestLoopAsyncEvent: a namespace added on the target reaches the host as a Namespace
// Attribute Changed notice; the controller rescans and reports it.
func TestLoopAsyncEvent(t *testing.T) {
	e := newEnv(t, nil)
	events := make(chan initiator.AsyncEvent, 4)
	c := e.dial(t, func(o *initiator.Options) { o.OnAsyncEvent = func(ev initiator.AsyncEvent) { events <- ev } })
	if err := e.tgt.AddNamespace(subNQN, conf.Namespace{NSID: 7, Backend: conf.BackendMemory, Size: 1 << 20, LBASize: 4096}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Event.Type() != nvmeproto.AETypeNotice || ev.Event.LogPage() != nvmeproto.LIDChangedNSList {
			t.Errorf("event %v", ev.Event)
		}
		if len(ev.Changed) != 1 || ev.Changed[0] != 7 {
			t.Errorf("changed namespaces %v", ev.Changed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no asynchronous event")
	}
	ns, err := c.Namespace(7)
	if err != nil {
		t.Fatalf("after the notice: %v (namespaces %v)", err, c.Namespaces())
	}
	if ns.BlockSize() != 4096 || ns.Size() != 1<<20 {
		t.Errorf("namespace 7: %d blocks of %d", ns.Blocks(), ns.BlockSize())
	}
	// The AER was resubmitted: a second change is reported too.
	if err := e.tgt.RemoveNamespace(subNQN, 7); err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("no second asynchronous event")
	}
	if _, err := c.Namespace(7); err == nil {
		t.Error("namespace 7 still listed after its removal")
	}
}

// TestLoopAsyncEventClose: the OnAsyncEvent callback may close the controller.
func TestLoopAsyncEventClose(t *testing.T) {
	e := newEnv(t, nil)
	closed := make(chan error, 1)
	var c *initiator.Controller
	var ready sync.WaitGroup
	ready.Add(1)
	c = e.dial(t, func(o *initiator.Options) {
		o.OnAsyncEvent = func(initiator.AsyncEvent) {
			ready.Wait()
			closed <- c.Close()
		}
	})
	ready.Done()
	if err := e.tgt.AddNamespace(subNQN, conf.Namespace{NSID: 7, Backend: conf.BackendMemory, Size: 1 << 20, LBASize: 4096}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close from the callback: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close called from the OnAsyncEvent callback did not return within 20 s")
	}
	select {
	case <-c.Done():
	default:
		t.Error("controller not done after Close")
	}
	if !errors.Is(c.Err(), initiator.ErrClosed) {
		t.Errorf("Err after Close = %v", c.Err())
	}
}

// sglSpy counts the data pointers of the write commands that pass through a loop Conn.
type sglSpy struct {
	initiator.LoopConn
	inCapsule, keyed *atomic.Int64
}

func (s sglSpy) Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error {
	if cmd.Opcode == nvmeproto.OpWrite {
		switch cmd.SGL.ID() {
		case nvmeproto.SGLIDDataOffset:
			s.inCapsule.Add(1)
		case nvmeproto.SGLIDKeyedAddress:
			s.keyed.Add(1)
		}
	}
	return s.LoopConn.Submit(cmd, data, done)
}

// TestLoopInCapsuleData: writes up to the controller's in-capsule size travel in the
// capsule (SGL 0x01), larger ones and all of them with NoInCapsuleData use a keyed SGL.
func TestLoopInCapsuleData(t *testing.T) {
	e := newEnv(t, nil)
	for _, noICD := range []bool{false, true} {
		var icd, keyed atomic.Int64
		c := e.dial(t, func(o *initiator.Options) {
			dial := o.Loop
			o.Loop = func(depth int) (initiator.LoopConn, error) {
				conn, err := dial(depth)
				return sglSpy{conn, &icd, &keyed}, err
			}
			o.NoInCapsuleData = noICD
		})
		ns := c.Namespaces()[0]
		for _, n := range []int{512, 4096, 8192} {
			if _, err := ns.WriteAt(ctx(t), make([]byte, n), 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		wantICD, wantKeyed := int64(2), int64(1)
		if noICD {
			wantICD, wantKeyed = 0, 3
		}
		if icd.Load() != wantICD || keyed.Load() != wantKeyed {
			t.Errorf("NoInCapsuleData %v: %d in-capsule and %d keyed writes, want %d and %d", noICD, icd.Load(), keyed.Load(), wantICD, wantKeyed)
		}
		c.Close()
	}
}

// TestLoopReadContextKeepsBuffer: a zero-copy Read whose context ends while the target
// still holds the command does not hand the buffer back: it returns once the command
// completed (here successfully, with the data in the buffer), and nothing writes the
// buffer after it returned.
func TestLoopReadContextKeepsBuffer(t *testing.T) {
	var sb *stallBackend
	e := newEnv(t, nil, stallBackends(&sb))
	c := e.dial(t, nil)
	var unstall sync.Once
	release := func() { unstall.Do(func() { close(sb.release) }) }
	t.Cleanup(release) // before Close, which waits for the read
	ns := c.Namespaces()[0]
	want := bytes.Repeat([]byte{0xC3}, 4096)
	if _, err := ns.WriteAt(ctx(t), want, 0, 0); err != nil {
		t.Fatal(err)
	}
	buf, err := c.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	sb.stalled.Store(true)
	cx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	read := make(chan error, 1)
	go func() { read <- ns.Read(cx, buf, 0) }()
	select {
	case err := <-read:
		t.Fatalf("Read returned (%v) while the target still held the command: the target may write into the buffer after", err)
	case <-time.After(500 * time.Millisecond):
	}
	sb.stalled.Store(false)
	release()
	select {
	case err := <-read:
		if err != nil {
			t.Errorf("Read completed after its context ended: %v, want nil (the data arrived)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read not done after the target completed it")
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Error("Read returned without the data")
	}
}

// TestLoopReadAbandonedHeld: a read the target holds past the command timeout fails the
// controller; the loop queue gives up waiting for the target after a while and aborts the
// read, which then returns ErrTimeout; but its buffer stays referenced (not freed, not
// reused) until the target completes the command, since until then it may write into it.
func TestLoopReadAbandonedHeld(t *testing.T) {
	var sb *stallBackend
	e := newEnv(t, nil, stallBackends(&sb))
	var unstall sync.Once
	release := func() { unstall.Do(func() { close(sb.release) }) }
	t.Cleanup(release)
	c := e.dial(t, func(o *initiator.Options) { o.CommandTimeout = 300 * time.Millisecond })
	ns := c.Namespaces()[0]
	buf, err := c.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	sb.stalled.Store(true)
	cx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ns.Read(cx, buf, 0); !errors.Is(err, initiator.ErrTimeout) {
		t.Fatalf("read the target holds past the command timeout: %v, want ErrTimeout", err)
	}
	buf.Release()
	if got := c.AllocatedBytes(); got != 4096 {
		t.Fatalf("the buffer of a read the target still holds: %d bytes allocated after its Release, want 4096", got)
	}
	sb.stalled.Store(false)
	release()
	deadline := time.Now().Add(10 * time.Second)
	for c.AllocatedBytes() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := c.AllocatedBytes(); got != 0 {
		t.Errorf("the target completed the abandoned read: %d bytes still allocated, want 0", got)
	}
}
