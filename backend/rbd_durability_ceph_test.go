//go:build ceph && linux && cgo

package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// cacheConf writes a copy of the test cluster's ceph.conf whose clients use librbd's cache
// as policy says (writearound, writeback; "none": rbd_cache off). An image opened with it
// gets a RADOS connection of its own (connections are shared by ceph.conf path).
func cacheConf(t *testing.T, conf, policy string) string {
	t.Helper()
	text, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts := "rbd cache = true\nrbd cache policy = " + policy + "\n"
	if policy == "none" {
		opts = "rbd cache = false\n"
	}
	if !strings.Contains(string(text), "[global]\n") {
		t.Fatalf("%s has no [global] section", conf)
	}
	p := filepath.Join(t.TempDir(), "ceph-"+policy+".conf")
	if err := os.WriteFile(p, []byte(strings.Replace(string(text), "[global]\n", "[global]\n"+opts, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// submitWait runs r through e (librbd's asynchronous path, as the target does) and returns
// its error.
func submitWait(e *Executor, r *Request) error {
	done := make(chan struct{})
	r.Done = func(*Request) { close(done) }
	e.Submit(r)
	<-done
	return r.Err
}

// TestRBDFlushFailureIsErrSync: a failed rbd flush (EIO injected in place of librbd's
// result) is ErrSync, Write Fault with DNR, naming the image — and sticky: librbd reports
// the loss of a write its cache completed early to one flush only, so every later flush
// fails without asking it, until the image is opened again.
func TestRBDFlushFailureIsErrSync(t *testing.T) {
	_, rs := testImage(t, "8M")
	f := &Faults{}
	b := openRBDTest(t, Spec{RBD: rs, Faults: f})
	if err := b.WriteBlocks(alignedBuf(4096), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil || f.Syncs() != 1 {
		t.Fatalf("flush: %v, %d flushes counted, want 1", err, f.Syncs())
	}
	f.FailSyncs(syscall.EIO)
	err := b.Flush()
	if !errors.Is(err, ErrSync) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), rs.Name()) {
		t.Fatalf("flush failing with EIO: %v, want ErrSync wrapping EIO naming %s", err, rs.Name())
	}
	if st := Status(OpFlush, err); st != nvmeproto.StatusWriteFault.WithDNR() {
		t.Errorf("status %v, want Write Fault with DNR", st)
	}
	syncs := f.Syncs()
	if err2 := b.Flush(); err2 != err {
		t.Errorf("second flush: %v, want the first failure again (%v)", err2, err)
	}
	if n := f.Syncs() - syncs; n != 0 {
		t.Errorf("%d librbd flushes after the failure, want 0 (librbd would say all is well)", n)
	}
	// Write zeroes with FUA needs a flush, which fails the same way.
	if b.(*rbdImage).cache != rbdCacheNone {
		e := NewExecutor(b, 0)
		if err2 := submitWait(e, &Request{Op: OpWriteZeroes, SLBA: 0, NLB: 8, FUA: true}); err2 != err {
			t.Errorf("FUA write zeroes on the failed image: %v, want %v", err2, err)
		}
		e.Close()
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openRBDTest(t, Spec{RBD: rs, Faults: f})
	defer b.Close()
	if err := b.Flush(); err != nil {
		t.Errorf("flush after reopening: %v", err)
	}
}

// TestRBDFUAWriteFailure: a FUA write that fails is a sync failure (ErrSync, sticky), as
// a write through a file's O_DSYNC descriptor is — except a full cluster's or pool's
// refusal (ENOSPC, EDQUOT), which writes nothing; a plain write's failure is neither.
func TestRBDFUAWriteFailure(t *testing.T) {
	_, rs := testImage(t, "8M")
	f := &Faults{}
	b := openRBDTest(t, Spec{RBD: rs, Faults: f})
	defer b.Close()
	f.FailWrites(syscall.EIO, 1)
	if err := b.WriteBlocks(alignedBuf(4096), 0, false); !errors.Is(err, syscall.EIO) || errors.Is(err, ErrSync) {
		t.Errorf("plain write failing with EIO: %v, want EIO and not ErrSync", err)
	}
	f.FailWrites(syscall.EDQUOT, 1)
	err := b.WriteBlocks(alignedBuf(4096), 0, true)
	if errors.Is(err, ErrSync) || Status(OpWrite, err) != nvmeproto.StatusCapacityExceeded.WithDNR() {
		t.Errorf("FUA write refused for the pool's quota: %v (%v), want Capacity Exceeded and not ErrSync", err, Status(OpWrite, err))
	}
	if err := b.Flush(); err != nil {
		t.Fatalf("flush after failed plain writes: %v", err)
	}
	f.FailWrites(syscall.EIO, 1)
	err = b.WriteBlocks(alignedBuf(4096), 0, true)
	if !errors.Is(err, ErrSync) || !errors.Is(err, syscall.EIO) || Status(OpWrite, err) != nvmeproto.StatusWriteFault.WithDNR() {
		t.Fatalf("FUA write failing with EIO: %v, want ErrSync (Write Fault, DNR)", err)
	}
	if err2 := b.Flush(); err2 != err {
		t.Errorf("flush after the failed FUA write: %v, want %v", err2, err)
	}
}

// TestRBDConcurrentFlushFailure: flushes run one at a time and those that arrive
// meanwhile share the next one, so of many concurrent flushes — through the connection's
// reaper and through a Ring — none succeeds once one failed (librbd would report the
// failure to one flush only), and none is lost; healthy, they all succeed.
func TestRBDConcurrentFlushFailure(t *testing.T) {
	_, rs := testImage(t, "8M")
	f := &Faults{}
	b := openRBDTest(t, Spec{RBD: rs, Faults: f})
	defer b.Close()
	e := NewExecutor(b, 0)
	defer e.Close()
	h := newRingHarness(t, 4)

	// Half through the reaper, half through the ring, the ring's first: its completion
	// waits for the test to reap, while the reaper takes the others' at once — had they
	// run at the same time as the first flush, they would succeed before its failure was
	// known.
	const n = 64
	run := func() (failed int) {
		var wg sync.WaitGroup
		var bad atomic.Int32
		reqs := make([]Request, n)
		h.done.Store(0)
		wg.Add(n / 2)
		for i := range reqs {
			reqs[i] = Request{Op: OpFlush, Done: func(r *Request) {
				if r.Err != nil {
					if !errors.Is(r.Err, ErrSync) {
						t.Errorf("flush %d: %v, want ErrSync", i, r.Err)
					}
					bad.Add(1)
				}
				if i%2 == 1 {
					wg.Done()
				} else {
					h.done.Add(1)
				}
			}}
			if i%2 == 1 {
				e.Submit(&reqs[i])
			} else {
				e.SubmitRing(h.g, &reqs[i])
			}
		}
		h.wait(n / 2)
		wg.Wait()
		return int(bad.Load())
	}
	if bad := run(); bad != 0 {
		t.Fatalf("%d of %d healthy flushes failed", bad, n)
	}
	t.Logf("%d concurrent flushes made %d librbd flushes", n, f.Syncs())
	if f.Syncs() > n {
		t.Errorf("%d librbd flushes for %d requests", f.Syncs(), n)
	}
	f.FailSyncs(syscall.EIO)
	if bad := run(); bad != n {
		t.Errorf("%d of %d concurrent flushes failed after the first failed, want all", bad, n)
	}
}

// TestRBDImageCacheOverrides: the cache mode (and so the volatile write cache hosts see,
// and whether FUA writes are flushed) is the one librbd uses for the image: the client's
// configuration with the image's overrides (rbd config image set) applied. A client
// without the cache, writing to an image that turns it on, would otherwise tell hosts
// there is no volatile cache while librbd completes their writes from it.
func TestRBDImageCacheOverrides(t *testing.T) {
	c, rs := testImage(t, "8M")
	for _, tc := range []struct {
		client, key, value, want string
	}{
		{"none", "rbd_cache", "true", "writearound"}, // pacific's default policy
		{"writearound", "rbd_cache_policy", "writeback", "writeback"},
		{"writeback", "rbd_cache", "false", "none"},
	} {
		t.Run(tc.client+"-"+tc.key+"="+tc.value, func(t *testing.T) {
			img := c.Pool + "/" + rs.Image
			if _, err := c.Rbd("config", "image", "set", img, tc.key, tc.value); err != nil {
				t.Fatal(err)
			}
			defer c.Rbd("config", "image", "remove", img, tc.key)
			s := rs
			s.Conf = cacheConf(t, c.Conf, tc.client)
			b := openRBDTest(t, Spec{RBD: s})
			defer b.Close()
			if got := b.(*rbdImage).cache.String(); got != tc.want {
				t.Errorf("client %s, image %s=%s: cache mode %s, want %s", tc.client, tc.key, tc.value, got, tc.want)
			}
			if vwc := Describe(b).VolatileWriteCache; vwc != (tc.want != "none") {
				t.Errorf("VolatileWriteCache = %v with cache %s", vwc, tc.want)
			}
		})
	}
}

// TestRBDWriteCacheOffSyncs: with FUA (the target sets it on every write, write zeroes and
// deallocate once the host disabled the volatile write cache) write zeroes and deallocate
// are followed by a librbd flush whenever librbd's cache can complete them before the
// OSDs have them (write-around and write-back both do: they take no FUA flag), and a FUA
// write is under write-back (under write-around its FUA flag waits for the OSDs). Without
// the cache, and without FUA, nothing is flushed.
func TestRBDWriteCacheOffSyncs(t *testing.T) {
	c, rs := testImage(t, "8M")
	for _, policy := range []string{"writearound", "writeback", "none"} {
		t.Run(policy, func(t *testing.T) {
			f := &Faults{}
			s := rs
			s.Conf = cacheConf(t, c.Conf, policy)
			b := openRBDTest(t, Spec{RBD: s, Faults: f})
			defer b.Close()
			if got, want := b.(*rbdImage).cache.String(), policy; got != want {
				t.Fatalf("cache mode %s, want %s", got, want)
			}
			if Describe(b).VolatileWriteCache != (policy != "none") {
				t.Errorf("VolatileWriteCache = %v with cache %s", Describe(b).VolatileWriteCache, policy)
			}
			e := NewExecutor(b, 0)
			defer e.Close()
			cached := 0
			if policy != "none" {
				cached = 1
			}
			writeback := 0
			if policy == "writeback" {
				writeback = 1
			}
			for _, tc := range []struct {
				r     Request
				syncs int
			}{
				{Request{Op: OpWriteZeroes, SLBA: 8, NLB: 8}, 0},
				{Request{Op: OpWriteZeroes, SLBA: 8, NLB: 8, FUA: true}, cached},
				{Request{Op: OpDeallocate, SLBA: 8, NLB: 8}, 0},
				{Request{Op: OpDeallocate, SLBA: 8, NLB: 8, FUA: true}, cached},
				{Request{Op: OpDeallocate, Ranges: []Range{{0, 8}, {16, 8}}, FUA: true}, cached},
				{Request{Op: OpWrite, SLBA: 0, Buf: alignedBuf(4096)}, 0},
				{Request{Op: OpWrite, SLBA: 0, Buf: alignedBuf(4096), FUA: true}, writeback},
			} {
				before := f.Syncs()
				if err := submitWait(e, &tc.r); err != nil {
					t.Fatalf("%v fua=%v: %v", tc.r.Op, tc.r.FUA, err)
				}
				if n := f.Syncs() - before; n != tc.syncs {
					t.Errorf("%v fua=%v: %d librbd flushes, want %d", tc.r.Op, tc.r.FUA, n, tc.syncs)
				}
			}
			// The flush after a FUA write zeroes is a sync: its failure fails the image.
			if cached == 1 {
				f.FailSyncs(syscall.EIO)
				err := submitWait(e, &Request{Op: OpWriteZeroes, SLBA: 8, NLB: 8, FUA: true})
				if !errors.Is(err, ErrSync) {
					t.Errorf("FUA write zeroes whose flush fails: %v, want ErrSync", err)
				}
				if err2 := b.Flush(); err2 != err {
					t.Errorf("flush after it: %v, want %v", err2, err)
				}
			}
		})
	}
}

// TestRBDPeerLockIsWriteProtected: while a peer holds the image's exclusive lock and
// refuses to give it up (it took it with rbd_lock_acquire: another gateway, or an
// administrator's tool), librbd refuses our writes and flushes with EROFS. Nothing was
// written and nothing is lost: a FUA write and flushes — alone and sharing one librbd
// flush — fail with Namespace Write Protected (DNR), not a sync failure, and once the
// peer lets go, writes and flushes succeed without reopening the image. Other flush
// failures still fail the image: ENOSPC may report an earlier write the cache completed.
func TestRBDPeerLockIsWriteProtected(t *testing.T) {
	c, rs := testImage(t, "8M")
	for _, policy := range []string{"writearound", "writeback"} {
		t.Run(policy, func(t *testing.T) {
			s := rs
			s.Conf = cacheConf(t, c.Conf, policy)
			f := &Faults{}
			b := openRBDTest(t, Spec{RBD: s, Faults: f})
			defer b.Close()
			e := NewExecutor(b, 0)
			defer e.Close()
			peer, closePeer := peerImage(t, c, rs)
			if err := peer.LockAcquire(rbd.LockModeExclusive); err != nil {
				t.Fatalf("peer: taking the exclusive lock: %v", err)
			}
			wp := nvmeproto.StatusNSWriteProtected.WithDNR()
			err := b.WriteBlocks(alignedBuf(4096), 0, true)
			if !errors.Is(err, syscall.EROFS) || errors.Is(err, ErrSync) || Status(OpWrite, err) != wp {
				t.Errorf("FUA write with the lock held by a peer: %v (%v), want EROFS, %v, not ErrSync", err, Status(OpWrite, err), wp)
			}
			const n = 8
			flushes := make([]Request, n)
			var wg sync.WaitGroup
			wg.Add(n)
			for i := range flushes {
				flushes[i] = Request{Op: OpFlush, Done: func(*Request) { wg.Done() }}
				e.Submit(&flushes[i])
			}
			wg.Wait()
			for i := range flushes {
				if err := flushes[i].Err; !errors.Is(err, syscall.EROFS) || errors.Is(err, ErrSync) || Status(OpFlush, err) != wp {
					t.Errorf("flush %d with the lock held by a peer: %v, want EROFS, %v, not ErrSync", i, err, wp)
				}
			}
			if err := peer.LockRelease(); err != nil {
				t.Fatalf("peer: releasing the exclusive lock: %v", err)
			}
			closePeer()
			if err := b.Flush(); err != nil {
				t.Errorf("flush after the peer let go: %v", err)
			}
			w := alignedBuf(4096)
			fill(w, 3)
			if err := b.WriteBlocks(w, 0, true); err != nil {
				t.Errorf("FUA write after the peer let go: %v", err)
			}
			if err := b.Flush(); err != nil {
				t.Errorf("flush after the FUA write: %v", err)
			}
			f.FailSyncs(syscall.ENOSPC)
			if err := b.Flush(); !errors.Is(err, ErrSync) || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("flush failing with ENOSPC: %v, want ErrSync wrapping ENOSPC", err)
			}
		})
	}
}
