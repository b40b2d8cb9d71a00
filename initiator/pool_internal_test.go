package initiator

import (
	"bytes"
	"context"
	"errors"
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
// the unmapping of an RDMA arena) and returns a flag set when that happened.
func poisonPool(c *Controller) *atomic.Bool {
	reg := c.pool.reg
	var released atomic.Bool
	reg.close = func() error {
		for i := range reg.mem {
			reg.mem[i] = poison
		}
		released.Store(true)
		return nil
	}
	return &released
}

// untouched reports whether the pool memory is still all poison.
func untouched(c *Controller) bool {
	return bytes.Count(c.pool.reg.mem, []byte{poison}) == len(c.pool.reg.mem)
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
