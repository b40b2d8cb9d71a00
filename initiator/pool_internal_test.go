package initiator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/target/loop"
)

const poolTestNQN = "nqn.2024-01.io.gonvmf:pool-test"

// loopDialer starts a target with a 16 MiB memory namespace and returns a dialer of its
// loop port.
func loopDialer(t *testing.T) LoopDialer {
	t.Helper()
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: poolTestNQN, AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 16 << 20, LBASize: 512}}}},
		Transport: conf.Transport{InCapsuleDataSize: 4096, QueueDepth: 64, MaxIOQueues: 4, KeepAliveTimeout: 120 * time.Second},
	}
	_, port := testutil.LoopTarget(t, cfg, loop.Options{})
	return func(depth int) (LoopConn, error) {
		c, err := port.Dial(depth)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

func dialLoop(t *testing.T, dial LoopDialer, mut func(*Options)) *Controller {
	t.Helper()
	o := Options{Transport: TransportLoop, Loop: dial, SubNQN: poolTestNQN, Queues: 2, QueueSize: 32, Logger: testutil.Logger(t)}
	if mut != nil {
		mut(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const poison = 0xEE

// poisonPool makes releasing c's pool memory overwrite it with poison (standing in for
// the unmapping of an RDMA arena) and returns a flag set when all of it was released.
func poisonPool(c *Controller) *atomic.Bool {
	var released atomic.Bool
	var left atomic.Int32
	left.Store(int32(len(c.pool.regs)))
	for _, reg := range c.pool.regs {
		reg.close = func() error {
			for i := range reg.mem {
				reg.mem[i] = poison
			}
			if left.Add(-1) == 0 {
				released.Store(true)
			}
			return nil
		}
	}
	return &released
}

// untouched reports whether the pool memory is still all poison.
func untouched(c *Controller) bool {
	for _, reg := range c.pool.regs {
		if bytes.Count(reg.mem, []byte{poison}) != len(reg.mem) {
			return false
		}
	}
	return true
}

// TestPoolAfterClose: once Close released the pool memory, no method hands it out or
// writes into it: GetBuffer and WriteAt fail with ErrClosed and leave the memory alone.
func TestPoolAfterClose(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	ns := c.Namespaces()[0]
	released := poisonPool(c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !released.Load() {
		t.Fatal("Close with no pool buffer out did not release the pool memory")
	}
	ctx := context.Background()
	if b, err := c.GetBuffer(ctx, 4096); !errors.Is(err, ErrClosed) {
		t.Errorf("GetBuffer after Close: buffer %t, %v; want ErrClosed", b != nil, err)
	}
	if n, err := ns.WriteAt(ctx, bytes.Repeat([]byte{0x5A}, 8192), 0, 0); !errors.Is(err, ErrClosed) || n != 0 {
		t.Errorf("WriteAt after Close: %d, %v; want 0, ErrClosed", n, err)
	}
	if n, err := ns.ReadAt(ctx, make([]byte, 8192), 0); !errors.Is(err, ErrClosed) || n != 0 {
		t.Errorf("ReadAt after Close: %d, %v; want 0, ErrClosed", n, err)
	}
	if !untouched(c) {
		t.Error("the released pool memory was written after Close")
	}
}

// TestPoolHeldAcrossClose: a pool buffer held across Close keeps the memory: it is
// released when the buffer is, not before.
func TestPoolHeldAcrossClose(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	released := poisonPool(c)
	held, err := c.GetBuffer(context.Background(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if released.Load() {
		t.Fatal("Close released the pool memory while a buffer of it was held")
	}
	if _, err := c.GetBuffer(context.Background(), 4096); !errors.Is(err, ErrClosed) {
		t.Errorf("GetBuffer after Close: %v; want ErrClosed", err)
	}
	held.Release()
	if !released.Load() {
		t.Fatal("returning the last pool buffer after Close did not release the memory")
	}
}

// TestPoolCloseUnderIO: callers copying through pool buffers while Close runs, and on
// after it (until they saw the memory released, then once more), never write the memory
// after it was released.
func TestPoolCloseUnderIO(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	ns := c.Namespaces()[0]
	released := poisonPool(c)
	var wg sync.WaitGroup
	var ios atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{byte(g + 1)}, 4096)
			for {
				last := released.Load()
				var err error
				if g%2 == 0 {
					_, err = ns.WriteAt(context.Background(), p, int64(g)*4096, 0)
				} else {
					_, err = ns.ReadAt(context.Background(), p, int64(g)*4096)
				}
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if last {
					return
				}
				ios.Add(1)
			}
		}()
	}
	for ios.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	wg.Wait()
	if !untouched(c) {
		t.Error("pool memory written after it was released")
	}
}

// pdTransport stands in for the RDMA transport's protection domain around c's loop
// transport, for dedicated buffers: closing it frees every region still registered (their
// memory overwritten with poison), as closing a protection domain closes its arenas, and
// it refuses new regions afterwards with an error of its own, as rdmacm does.
type pdTransport struct {
	transport
	mu     sync.Mutex
	closed int
	regs   map[*region]bool
}

var errPDClosed = errors.New("test: protection domain closed")

func withPD(c *Controller) *pdTransport {
	pd := &pdTransport{transport: c.tr, regs: map[*region]bool{}}
	c.tr = pd
	return pd
}

func (t *pdTransport) newRegion(n int) (*region, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed > 0 {
		return nil, errPDClosed
	}
	r := goRegion(n)
	t.regs[r] = true
	r.close = func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.regs, r)
		return nil
	}
	return r, nil
}

func (t *pdTransport) close() error {
	t.mu.Lock()
	t.closed++
	for r := range t.regs {
		for i := range r.mem {
			r.mem[i] = poison
		}
	}
	t.mu.Unlock()
	return t.transport.close()
}

func (t *pdTransport) closes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// TestAllocBufferAcrossClose: a dedicated buffer held across Close stays valid (Close does
// not free the transport it is registered with) until it is released; AllocBuffer after
// Close fails with ErrClosed and registers nothing.
func TestAllocBufferAcrossClose(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	pd := withPD(c)
	b, err := c.AllocBuffer(8192)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.Bytes() {
		b.Bytes()[i] = 0x5A
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b.Bytes(), []byte{0x5A}) != len(b.Bytes()) || pd.closes() != 0 {
		t.Fatalf("Close freed the transport (%d closes) and the memory of a dedicated buffer still held", pd.closes())
	}
	if nb, err := c.AllocBuffer(4096); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocBuffer after Close: buffer %t, %v; want ErrClosed", nb != nil, err)
	}
	if len(pd.regs) != 1 {
		t.Errorf("%d regions registered after AllocBuffer after Close, want 1 (the held buffer)", len(pd.regs))
	}
	b.Release()
	if pd.closes() != 1 || c.AllocatedBytes() != 0 {
		t.Errorf("after the last buffer's Release: transport closed %d times, %d bytes allocated; want 1, 0", pd.closes(), c.AllocatedBytes())
	}
}

// TestAllocBufferFailedThenClosed: AllocBuffer on a failed controller reports the failure;
// once it is closed, ErrClosed.
func TestAllocBufferFailedThenClosed(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	c.fail(fmt.Errorf("%w: test", ErrDisconnected))
	if _, err := c.AllocBuffer(4096); !errors.Is(err, ErrDisconnected) {
		t.Errorf("AllocBuffer on a failed controller: %v, want ErrDisconnected", err)
	}
	c.Close()
	if _, err := c.AllocBuffer(4096); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocBuffer on a failed controller after Close: %v, want ErrClosed", err)
	}
}

// TestAllocBufferCloseRace: goroutines allocating dedicated buffers while Close runs get
// either a buffer that stays valid until they release it or ErrClosed; the transport is
// closed once, after the last release.
func TestAllocBufferCloseRace(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	pd := withPD(c)
	var wg sync.WaitGroup
	var allocs atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := c.AllocBuffer(4096)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("goroutine %d: AllocBuffer during Close: %v, want ErrClosed", g, err)
					}
					return
				}
				allocs.Add(1)
				p := b.Bytes()
				for i := range p {
					p[i] = byte(g + 1)
				}
				runtime.Gosched()
				if bytes.Count(p, []byte{byte(g + 1)}) != len(p) {
					t.Errorf("goroutine %d: a dedicated buffer was freed while held", g)
				}
				b.Release()
			}
		}()
	}
	for allocs.Load() < 100 {
		time.Sleep(time.Millisecond)
	}
	c.Close()
	wg.Wait()
	if pd.closes() != 1 || c.AllocatedBytes() != 0 {
		t.Errorf("transport closed %d times, %d bytes allocated; want 1, 0", pd.closes(), c.AllocatedBytes())
	}
}

// TestPoolChunkRegions: every pool chunk is a region of its own, so a command on a pool
// buffer carries the memory key of that chunk only: the controller it goes to cannot reach
// the other chunks (other commands' bounce buffers, admin and authentication data)
// through it.
func TestPoolChunkRegions(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	p := c.pool
	var held []*Buffer
	seen := map[*region]bool{}
	for range len(p.bufs) {
		b, err := c.GetBuffer(context.Background(), p.ChunkSize())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
		if seen[b.reg] || len(b.reg.mem) != p.ChunkSize() || b.off != 0 {
			t.Fatalf("pool buffer %d: region of %d bytes at offset %d (shared: %v), want a region of its own of %d bytes",
				len(held), len(b.reg.mem), b.off, seen[b.reg], p.ChunkSize())
		}
		seen[b.reg] = true
	}
	if len(held)*p.ChunkSize() != DefaultBufferPoolSize {
		t.Errorf("%d chunks of %d bytes, want %d bytes in all", len(held), p.ChunkSize(), DefaultBufferPoolSize)
	}
	for _, b := range held {
		b.Release()
	}
}
