//go:build ceph && linux && cgo

package backend

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/gonvmf/gonvmf/internal/cephtest"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { os.Exit(cephtest.Main(m)) }

// testImage creates an image of size bytes for t in the test cluster's pool and returns
// its spec (as the restricted client), removing the image when t ends.
func testImage(t *testing.T, size string) (*cephtest.Cluster, RBDSpec) {
	t.Helper()
	c := cephtest.Get(t)
	name := imageName(t)
	if size != "" {
		if _, err := c.Rbd("create", "--size", size, c.Pool+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if _, err := c.Rbd("rm", "--no-progress", c.Pool+"/"+name); err != nil && size != "" {
			t.Errorf("removing the test image: %v", err)
		}
	})
	return c, RBDSpec{Pool: c.Pool, Image: name, Conf: c.Conf, User: c.User, Keyring: c.Keyring}
}

func imageName(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	n := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("%.60s-%s", n, hex.EncodeToString(b[:]))
}

func openRBDTest(t *testing.T, s Spec) Backend {
	t.Helper()
	s.Kind = KindRBD
	b, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformanceRBD(t *testing.T) {
	for _, lba := range []uint32{512, 4096} {
		t.Run(lbaName(lba), func(t *testing.T) {
			_, rs := testImage(t, "8M")
			runConformance(t, func(t *testing.T, ro bool) Backend {
				return openRBDTest(t, Spec{RBD: rs, LBASize: lba, ReadOnly: ro})
			}, lba, kindTraits{persistent: true, reopen: true})
		})
	}
}

// TestRBDExecutor: many requests in flight at once through an Executor, completed by the
// connection's reaper, with no worker goroutines.
func TestRBDExecutor(t *testing.T) {
	_, rs := testImage(t, "16M")
	b := openRBDTest(t, Spec{RBD: rs})
	defer b.Close()
	info := Describe(b)
	if !info.Async || info.Workers != 0 || info.Inline || info.Kind != KindRBD || info.Path != rs.Name() {
		t.Fatalf("Info = %+v; want an async rbd backend without workers named %s", info, rs.Name())
	}
	e := NewExecutor(b, 0)
	defer e.Close()

	const n = 128 // in flight at once, each 16 KiB at its own offset
	bufs := make([][]byte, n)
	var wg sync.WaitGroup
	var failed atomic.Int32
	submit := func(reqs []Request) {
		wg.Add(len(reqs))
		for i := range reqs {
			reqs[i].Done = func(r *Request) {
				if r.Err != nil {
					failed.Add(1)
					t.Errorf("%s slba %d: %v", r.Op, r.SLBA, r.Err)
				}
				wg.Done()
			}
			e.Submit(&reqs[i])
		}
		wg.Wait()
	}
	writes := make([]Request, n)
	for i := range writes {
		bufs[i] = alignedBuf(16 << 10)
		fill(bufs[i], byte(i))
		writes[i] = Request{Op: OpWrite, SLBA: uint64(i) * 32, Buf: bufs[i], FUA: i%3 == 0}
	}
	submit(writes)
	submit([]Request{{Op: OpFlush}})
	reads := make([]Request, n)
	got := make([][]byte, n)
	for i := range reads {
		got[i] = alignedBuf(16 << 10)
		reads[i] = Request{Op: OpRead, SLBA: uint64(i) * 32, Buf: got[i], NLB: 32}
	}
	submit(reads)
	for i := range got {
		if !bytes.Equal(got[i], bufs[i]) {
			t.Fatalf("request %d: read back differs from what was written", i)
		}
	}
	// Deallocate with ranges, some empty; write zeroes; both read back as zeroes where
	// librbd discards whole objects or zeroes (write zeroes always).
	submit([]Request{
		{Op: OpWriteZeroes, SLBA: 32, NLB: 32},
		{Op: OpDeallocate, Ranges: []Range{{SLBA: 64 * 32, NLB: 0}, {SLBA: 64 * 32, NLB: 32}, {SLBA: 100 * 32, NLB: 64}}},
	})
	r := alignedBuf(16 << 10)
	if err := b.ReadBlocks(r, 32); err != nil || !isZero(r) {
		t.Fatalf("after write zeroes: err %v, zero %v", err, isZero(r))
	}
	if err := b.ReadBlocks(r, 0); err != nil || !bytes.Equal(r, bufs[0]) {
		t.Fatalf("the block before write zeroes: err %v, unchanged %v", err, bytes.Equal(r, bufs[0]))
	}
	// A bad request fails alone, at once, with the executor's usual errors.
	bad := []Request{
		{Op: OpRead, SLBA: b.NumBlocks(), Buf: alignedBuf(512)},
		{Op: OpDeallocate, Ranges: []Range{{SLBA: 0, NLB: 1}, {SLBA: b.NumBlocks(), NLB: 1}}},
		{Op: OpWrite, Buf: alignedBuf(4096), NLB: 3},
		{Op: Op(99)},
	}
	want := []error{ErrLBAOutOfRange, ErrLBAOutOfRange, ErrUnaligned, ErrInvalidOp}
	for i := range bad {
		done := make(chan struct{})
		bad[i].Done = func(*Request) { close(done) }
		e.Submit(&bad[i])
		<-done
		if !errors.Is(bad[i].Err, want[i]) {
			t.Errorf("bad request %d: err = %v, want %v", i, bad[i].Err, want[i])
		}
	}
	e.Close()
	done := make(chan struct{})
	late := &Request{Op: OpFlush, Done: func(*Request) { close(done) }}
	e.Submit(late)
	<-done
	if !errors.Is(late.Err, ErrClosed) {
		t.Errorf("submit after Close: err = %v, want ErrClosed", late.Err)
	}
}

// TestRBDRing: requests submitted through a Ring complete only in its owner's Reap, and
// librbd signals the ring's eventfd.
func TestRBDRing(t *testing.T) {
	_, rs := testImage(t, "8M")
	b := openRBDTest(t, Spec{RBD: rs, LBASize: 4096})
	defer b.Close()
	e := NewExecutor(b, 0)
	defer e.Close()
	h := newRingHarness(t, 4)
	owner := make(chan struct{}) // closed while the test goroutine may run Done
	var outside atomic.Int32

	const n = 32 // more than the ring's depth: rbd requests are not bounded by it
	w := make([][]byte, n)
	reqs := make([]Request, n)
	for i := range reqs {
		w[i] = alignedBuf(8192)
		fill(w[i], byte(i+1))
		reqs[i] = Request{Op: OpWrite, SLBA: uint64(i) * 2, Buf: w[i], FUA: i%2 == 1, Done: func(r *Request) {
			select {
			case <-owner:
			default:
				outside.Add(1)
			}
			if r.Err != nil {
				t.Errorf("write %d: %v", i, r.Err)
			}
			h.done.Add(1)
		}}
		e.SubmitRing(h.g, &reqs[i])
	}
	if h.g.InFlight() == 0 {
		t.Fatal("InFlight = 0 with rbd requests submitted")
	}
	// Nothing completes until the owner reaps, however long it waits.
	time.Sleep(200 * time.Millisecond)
	if h.done.Load() != 0 {
		t.Fatalf("%d requests completed before Reap", h.done.Load())
	}
	if !h.g.Ready() {
		t.Fatal("Ready = false with completions queued")
	}
	var cnt [8]byte
	if _, err := unix.Read(h.efd, cnt[:]); err != nil {
		t.Fatalf("the ring's eventfd was not signalled: %v", err)
	}
	close(owner)
	h.wait(n)
	if outside.Load() != 0 {
		t.Fatalf("%d requests completed outside Reap", outside.Load())
	}
	// Read back through the ring, then flush and a ranged deallocate.
	h.done.Store(0)
	r := make([][]byte, n)
	for i := range reqs {
		r[i] = alignedBuf(8192)
		reqs[i] = Request{Op: OpRead, SLBA: uint64(i) * 2, Buf: r[i], Done: reqs[i].Done}
		e.SubmitRing(h.g, &reqs[i])
	}
	h.wait(n)
	for i := range r {
		if !bytes.Equal(r[i], w[i]) {
			t.Fatalf("read %d differs from what was written", i)
		}
	}
	h.done.Store(0)
	reqs[0] = Request{Op: OpFlush, Done: reqs[0].Done}
	reqs[1] = Request{Op: OpDeallocate, Ranges: []Range{{0, 2}, {4, 2}}, Done: reqs[1].Done}
	e.SubmitRing(h.g, &reqs[0])
	e.SubmitRing(h.g, &reqs[1])
	h.wait(2)
	if h.g.InFlight() != 0 {
		t.Errorf("InFlight = %d after every request was reaped", h.g.InFlight())
	}
}

// TestRBDSubmitAllocs: a request through the Executor allocates nothing in steady state.
func TestRBDSubmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	_, rs := testImage(t, "8M")
	b := openRBDTest(t, Spec{RBD: rs})
	defer b.Close()
	e := NewExecutor(b, 0)
	defer e.Close()
	done := make(chan *Request, 1)
	req := &Request{Op: OpWrite, SLBA: 8, Buf: alignedBuf(4096), Done: func(r *Request) { done <- r }}
	ops := []Op{OpWrite, OpRead, OpWriteZeroes, OpDeallocate, OpFlush}
	i := 0
	run := func() {
		req.Op = ops[i%len(ops)]
		req.NLB, req.FUA = 0, i%2 == 0
		if req.Op == OpWriteZeroes || req.Op == OpDeallocate {
			req.NLB = 8
		}
		i++
		e.Submit(req)
		<-done
		if req.Err != nil {
			t.Fatal(req.Err)
		}
	}
	for range 10 {
		run()
	}
	if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
		t.Errorf("%v allocations per request, want 0", allocs)
	}
}

// TestRBDResize: `rbd resize` reaches the backend through the image watch.
func TestRBDResize(t *testing.T) {
	c, rs := testImage(t, "8M")
	sizes := make(chan uint64, 4)
	b := openRBDTest(t, Spec{RBD: rs, LBASize: 4096, OnResize: func(n uint64) { sizes <- n }})
	defer b.Close()
	if b.NumBlocks() != 2048 {
		t.Fatalf("NumBlocks = %d, want 2048", b.NumBlocks())
	}
	w := alignedBuf(4096)
	fill(w, 1)
	if err := b.WriteBlocks(w, 2048, false); !errors.Is(err, ErrLBAOutOfRange) {
		t.Fatalf("write past the end before the resize: %v", err)
	}
	wait := func(want uint64) {
		t.Helper()
		select {
		case n := <-sizes:
			if n != want {
				t.Fatalf("OnResize(%d), want %d", n, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no OnResize(%d) within 20 s", want)
		}
		if b.NumBlocks() != want {
			t.Fatalf("NumBlocks = %d after OnResize(%d)", b.NumBlocks(), want)
		}
	}
	if _, err := c.Rbd("resize", "--no-progress", "--size", "16M", rs.Pool+"/"+rs.Image); err != nil {
		t.Fatal(err)
	}
	wait(4096)
	if err := b.WriteBlocks(w, 4000, true); err != nil {
		t.Fatalf("write to the grown part: %v", err)
	}
	r := alignedBuf(4096)
	if err := b.ReadBlocks(r, 4000); err != nil || !bytes.Equal(r, w) {
		t.Fatalf("read back from the grown part: err %v, equal %v", err, bytes.Equal(r, w))
	}
	if _, err := c.Rbd("resize", "--no-progress", "--allow-shrink", "--size", "4M", rs.Pool+"/"+rs.Image); err != nil {
		t.Fatal(err)
	}
	wait(1024)
	if err := b.ReadBlocks(r, 1024); !errors.Is(err, ErrLBAOutOfRange) {
		t.Fatalf("read past the shrunk end: %v", err)
	}
	// A header update that is not a resize (a snapshot) calls nothing.
	if _, err := c.Rbd("snap", "create", rs.Pool+"/"+rs.Image+"@s"); err != nil {
		t.Fatal(err)
	}
	defer c.Rbd("snap", "rm", "--no-progress", rs.Pool+"/"+rs.Image+"@s")
	select {
	case n := <-sizes:
		t.Fatalf("OnResize(%d) after a snapshot", n)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestRBDSlowSizeRead: while the size read after a resize waits for a slow cluster, the
// connection's reaper goes on completing the requests of the image and of another image
// on the connection; the read, released, gives the size the last resize set.
func TestRBDSlowSizeRead(t *testing.T) {
	c, rs := testImage(t, "8M")
	_, other := testImage(t, "4M")
	f := &Faults{}
	a := openRBDTest(t, Spec{RBD: rs, LBASize: 4096, Faults: f})
	defer a.Close()
	b := openRBDTest(t, Spec{RBD: other})
	defer b.Close()
	if a.(*rbdImage).c != b.(*rbdImage).c {
		t.Fatal("the two images do not share a connection")
	}
	release := f.StallSizeReads()
	defer release()
	if _, err := c.Rbd("resize", "--no-progress", "--size", "16M", rs.Name()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); f.SizeReads() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no size read within 20 s of the resize")
		}
	}
	// A second resize while the first read waits: read too, once the first is done.
	if _, err := c.Rbd("resize", "--no-progress", "--size", "20M", rs.Name()); err != nil {
		t.Fatal(err)
	}
	w := alignedBuf(4096)
	fill(w, 3)
	for _, img := range []struct {
		name string
		be   Backend
	}{{"the resized image", a}, {"another image of the connection", b}} {
		e := NewExecutor(img.be, 0)
		done := make(chan error, 1)
		e.Submit(&Request{Op: OpWrite, SLBA: 0, Buf: w, Done: func(r *Request) { done <- r.Err }})
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("write to %s: %v", img.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a write to %s did not complete within 10 s while a size read waited", img.name)
		}
		e.Close()
	}
	release()
	for deadline := time.Now().Add(20 * time.Second); a.NumBlocks() != 20<<20/4096; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("NumBlocks = %d 20 s after the stalled reads were released, want %d", a.NumBlocks(), 20<<20/4096)
		}
	}
}

// TestRBDCreate: create_size makes a missing image, and leaves an existing one alone.
func TestRBDCreate(t *testing.T) {
	c, rs := testImage(t, "")
	rs.CreateSize = 12 << 20
	b := openRBDTest(t, Spec{RBD: rs})
	if b.NumBlocks() != 12<<20/512 {
		t.Errorf("created image: NumBlocks = %d, want %d", b.NumBlocks(), 12<<20/512)
	}
	b.Close()
	out, err := c.Rbd("info", rs.Pool+"/"+rs.Image)
	if err != nil || !strings.Contains(out, "size 12 MiB") {
		t.Fatalf("rbd info after create: %v\n%s", err, out)
	}
	rs.CreateSize = 32 << 20
	b = openRBDTest(t, Spec{RBD: rs})
	defer b.Close()
	if b.NumBlocks() != 12<<20/512 {
		t.Errorf("existing image with create_size: NumBlocks = %d, want its own %d", b.NumBlocks(), 12<<20/512)
	}
}

// TestRBDSharedConnection: images opened with the same cluster and client share one RADOS
// connection, which goes with the last of them.
func TestRBDSharedConnection(t *testing.T) {
	_, a := testImage(t, "4M")
	_, b := testImage(t, "4M")
	key := rbdConnKey{a.Conf, a.User, a.Keyring}
	conns := func() (int, int) {
		rbdConns.mu.Lock()
		defer rbdConns.mu.Unlock()
		if c := rbdConns.byKey[key]; c != nil {
			return len(rbdConns.byKey), c.refs
		}
		return len(rbdConns.byKey), 0
	}
	n0, _ := conns()
	ba := openRBDTest(t, Spec{RBD: a})
	bb := openRBDTest(t, Spec{RBD: b, ReadOnly: true})
	if n, refs := conns(); n != n0+1 || refs != 2 {
		t.Errorf("two images: %d connections (%d before), %d references; want one more, 2", n, n0, refs)
	}
	ba.Close()
	if _, refs := conns(); refs != 1 {
		t.Errorf("one image left: %d references, want 1", refs)
	}
	bb.Close()
	if n, _ := conns(); n != n0 {
		t.Errorf("no image left: %d connections, want %d", n, n0)
	}
}

// TestRBDBlocklistedConnection: when the cluster blocklists the RADOS client images share
// (a peer broke one image's exclusive lock: librbd blocklists the owner), an image opened
// again gets a new client, while another image still holds the old one — as the
// namespace reopen that recovers it does. The connection is retired when an operation
// fails with EBLOCKLISTED (ESHUTDOWN), or when an open does, which then tries once more.
// (The images' watches would retire it too, once librbd tells them: their size reads are
// held until the open is done, so that only the open finds the client blocklisted.)
func TestRBDBlocklistedConnection(t *testing.T) {
	for _, failFirst := range []bool{true, false} {
		name := "on-open"
		if failFirst {
			name = "after-failed-write"
		}
		t.Run(name, func(t *testing.T) {
			c, a := testImage(t, "4M")
			_, b := testImage(t, "4M")
			key := rbdConnKey{a.Conf, a.User, a.Keyring}
			shared := func() *rbdConn {
				rbdConns.mu.Lock()
				defer rbdConns.mu.Unlock()
				return rbdConns.byKey[key]
			}
			f := &Faults{}
			release := f.StallSizeReads()
			defer release()
			ba := openRBDTest(t, Spec{RBD: a, Faults: f})
			bb := openRBDTest(t, Spec{RBD: b, Faults: f})
			defer func() { bb.Close() }()
			old := ba.(*rbdImage).c
			if bb.(*rbdImage).c != old {
				t.Fatal("two images with one key do not share a connection")
			}
			w := alignedBuf(4096)
			fill(w, 9)
			if err := ba.WriteBlocks(w, 0, true); err != nil { // takes a's exclusive lock
				t.Fatal(err)
			}
			peer, closePeer := peerImage(t, c, a)
			owners, err := peer.LockGetOwners()
			if err != nil || len(owners) != 1 {
				t.Fatalf("peer: lock owners of %s: %v, %v; want one", a.Name(), owners, err)
			}
			if err := peer.LockBreak(rbd.LockModeExclusive, owners[0].Owner); err != nil {
				t.Fatalf("peer: breaking the lock of %s (owner %s): %v", a.Name(), owners[0].Owner, err)
			}
			closePeer()
			if failFirst {
				err := bb.WriteBlocks(w, 0, true)
				if !errors.Is(err, syscall.ESHUTDOWN) {
					t.Fatalf("FUA write on the blocklisted client: %v, want ESHUTDOWN", err)
				}
				if got := shared(); got == old {
					t.Errorf("the blocklisted connection is still shared with new opens")
				}
			}
			log, rec := testLogger(t)
			na, err := Open(Spec{Kind: KindRBD, RBD: a, Logger: log})
			release()
			if err := ba.Close(); err != nil {
				t.Logf("closing %s on the blocklisted client: %v", a.Name(), err)
			}
			ba = na
			if err != nil {
				t.Fatalf("reopening %s after its client was blocklisted: %v", a.Name(), err)
			}
			if retried := rec.has(slog.LevelInfo, "retrying the open on a new RADOS client"); retried == failFirst {
				t.Errorf("the reopen was retried: %v; want %v (the failed write retired the connection: %v)", retried, !failFirst, failFirst)
			}
			defer func() { ba.Close() }()
			if ba.(*rbdImage).c == old {
				t.Fatal("the reopened image is on the blocklisted connection")
			}
			if err := ba.WriteBlocks(w, 8, true); err != nil {
				t.Fatalf("FUA write after reopening: %v", err)
			}
			r := alignedBuf(4096)
			if err := ba.ReadBlocks(r, 0); err != nil || !bytes.Equal(r, w) {
				t.Fatalf("reading back the write made before the blocklist: err %v, equal %v", err, bytes.Equal(r, w))
			}
			// b still holds the old connection, which goes with it; reopened, b shares a's.
			if err := bb.Close(); err != nil {
				t.Logf("closing %s on the blocklisted client: %v", b.Name(), err)
			}
			if _, ok := rbdConns.byID.Load(old.id); ok {
				t.Error("the blocklisted connection outlived its last image")
			}
			bb = openRBDTest(t, Spec{RBD: b})
			if bb.(*rbdImage).c != ba.(*rbdImage).c {
				t.Error("b reopened is not on a's new connection")
			}
			if err := bb.WriteBlocks(w, 0, true); err != nil {
				t.Fatalf("FUA write on b reopened: %v", err)
			}
		})
	}
}

// TestRBDBlocklistFences: when the cluster blocklists the RADOS client images share
// (`ceph osd blocklist add`), each is fenced: its requests fail with ErrNeedsReopen
// (Namespace Not Ready, which hosts retry once it is reopened), not as sync failures, and
// it reports so once to OnNeedsReopen, an image without a request of its own too. No
// write is reported complete from then on. An image whose cache completed a write no
// flush covered reports ErrSync as well (the write may be lost), and its flushes fail
// with it. Reopened, an image is on a new client, with the data of its durable writes.
func TestRBDBlocklistFences(t *testing.T) {
	c, rs := testImage(t, "8M")
	_, idle := testImage(t, "4M")
	_, dirty := testImage(t, "4M")
	type report struct {
		image string
		err   error
	}
	reports := make(chan report, 16)
	open := func(r RBDSpec) Backend {
		return openRBDTest(t, Spec{RBD: r, OnNeedsReopen: func(err error) { reports <- report{r.Name(), err} }})
	}
	ba, bi, bd := open(rs), open(idle), open(dirty)
	defer func() {
		for _, b := range []Backend{ba, bi, bd} {
			b.Close()
		}
	}()
	conn := ba.(*rbdImage).c
	if bi.(*rbdImage).c != conn || bd.(*rbdImage).c != conn {
		t.Fatal("three images with one key do not share a connection")
	}
	cached := bd.(*rbdImage).vwc
	w := alignedBuf(4096)
	fill(w, 7)
	if err := ba.WriteBlocks(w, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := bd.WriteBlocks(w, 0, false); err != nil {
		t.Fatal(err)
	}
	addr, err := conn.conn.GetAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Blocklist(addr); err != nil {
		t.Fatal(err)
	}
	// The OSDs may still answer a request sent before they had the new OSD map.
	r := alignedBuf(4096)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = ba.ReadBlocks(r, 0); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reads still succeed 20 s after blocklisting the client %s", addr)
		}
	}
	if !errors.Is(err, ErrNeedsReopen) || !errors.Is(err, syscall.ESHUTDOWN) || errors.Is(err, ErrSync) {
		t.Fatalf("read on the blocklisted client: %v; want ErrNeedsReopen (ESHUTDOWN), not ErrSync", err)
	}
	if st := Status(OpRead, err); st != nvmeproto.StatusNSNotReady {
		t.Errorf("read on the blocklisted client: status %v, want Namespace Not Ready without DNR", st)
	}
	got := map[string]error{}
	for deadline := time.After(10 * time.Second); len(got) < 3; {
		select {
		case rp := <-reports:
			if _, dup := got[rp.image]; dup {
				t.Errorf("%s reported twice: %v", rp.image, rp.err)
			}
			got[rp.image] = rp.err
		case <-deadline:
			t.Fatalf("OnNeedsReopen reports within 10 s: %v; want one for each of the 3 images", got)
		}
	}
	for name, err := range got {
		lost := name == dirty.Name() && cached
		if !errors.Is(err, ErrNeedsReopen) || errors.Is(err, ErrSync) != lost {
			t.Errorf("%s reported %v; want ErrNeedsReopen, and ErrSync %v", name, err, lost)
		}
	}
	// Nothing is reported complete on the fenced client, and nothing but the lost writes
	// is a sync failure.
	for _, op := range []struct {
		what string
		do   func() error
		sync bool
	}{
		{"write", func() error { return ba.WriteBlocks(w, 8, false) }, false},
		{"FUA write", func() error { return ba.WriteBlocks(w, 8, true) }, false},
		{"flush", ba.Flush, false},
		{"write zeroes", func() error { return ba.WriteZeroes(16, 8) }, false},
		{"write, idle image", func() error { return bi.WriteBlocks(w, 0, false) }, false},
		{"flush, idle image", bi.Flush, false},
		{"flush after an unflushed write", bd.Flush, cached},
	} {
		err := op.do()
		if !errors.Is(err, ErrNeedsReopen) && !(op.sync && errors.Is(err, ErrSync)) || errors.Is(err, ErrSync) != op.sync {
			t.Errorf("%s on the blocklisted client: %v; want ErrNeedsReopen, and ErrSync %v", op.what, err, op.sync)
		}
	}
	select {
	case rp := <-reports:
		t.Errorf("%s reported again: %v", rp.image, rp.err)
	default:
	}
	if err := ba.Close(); err != nil {
		t.Logf("closing %s on the blocklisted client: %v", rs.Name(), err)
	}
	ba = openRBDTest(t, Spec{RBD: rs})
	if ba.(*rbdImage).c == conn {
		t.Fatal("the reopened image is on the blocklisted client")
	}
	if err := ba.ReadBlocks(r, 0); err != nil || !bytes.Equal(r, w) {
		t.Fatalf("reading back the FUA write made before the blocklist: err %v, equal %v", err, bytes.Equal(r, w))
	}
	if err := ba.WriteBlocks(w, 8, false); err != nil {
		t.Fatalf("write after reopening: %v", err)
	}
	if err := ba.Flush(); err != nil {
		t.Fatalf("flush after reopening: %v", err)
	}
}

// TestRBDErrors: what a user gets wrong is named, with the fix.
func TestRBDErrors(t *testing.T) {
	c, rs := testImage(t, "4M")
	dir := t.TempDir()
	// A cluster nobody runs: a ceph.conf whose monitor port has no listener.
	noCluster := filepath.Join(dir, "nocluster.conf")
	os.WriteFile(noCluster, []byte("[global]\nmon host = v2:127.0.0.1:9\nauth client required = none\n"), 0o644)
	badKeyring := filepath.Join(dir, "bad.keyring")
	os.WriteFile(badKeyring, []byte("[client."+c.User+"]\n\tkey = AQBo2x9mAAAAABAAm3m3BvvCyUn8t6AVmWmWxQ==\n"), 0o600)
	cases := []struct {
		name string
		spec Spec
		want []string
	}{
		{"no pool", Spec{RBD: RBDSpec{Image: "x"}}, []string{"needs a pool"}},
		{"no image", Spec{RBD: RBDSpec{Pool: "p"}}, []string{`pool "p" needs an image`}},
		{"size", Spec{RBD: rs, Size: 1 << 20}, []string{rs.Name(), "create_size", "rbd resize"}},
		{"create read-only", Spec{RBD: RBDSpec{Pool: "p", Image: "i", CreateSize: 1 << 20}, ReadOnly: true}, []string{"create_size with read_only"}},
		{"lba size", Spec{RBD: rs, LBASize: 1000}, []string{"lba size 1000"}},
		{"missing image", Spec{RBD: RBDSpec{Pool: rs.Pool, Image: "no-such-image", Conf: rs.Conf, User: rs.User, Keyring: rs.Keyring}},
			[]string{rs.Pool + "/no-such-image", `no image "no-such-image" in pool "` + rs.Pool + `"`, "rbd create", "create_size"}},
		{"missing image in namespace", Spec{RBD: RBDSpec{Pool: rs.Pool, Namespace: "nons", Image: "img", Conf: rs.Conf}},
			[]string{rs.Pool + "/nons/img", `(namespace "nons")`}},
		{"missing pool", Spec{RBD: RBDSpec{Pool: "no-such-pool", Image: "img", Conf: rs.Conf}},
			[]string{`pool "no-such-pool" does not exist`, "ceph osd pool create no-such-pool"}},
		{"missing conf", Spec{RBD: RBDSpec{Pool: rs.Pool, Image: rs.Image, Conf: filepath.Join(dir, "none.conf")}},
			[]string{"reading ceph.conf", "none.conf", "ceph_conf"}},
		{"no cluster", Spec{RBD: RBDSpec{Pool: rs.Pool, Image: rs.Image, Conf: noCluster, ConnectTimeout: 2 * time.Second}},
			[]string{"connecting to the Ceph cluster as client.admin", noCluster, "monitors", "127.0.0.1:9"}},
		{"wrong key", Spec{RBD: RBDSpec{Pool: rs.Pool, Image: rs.Image, Conf: rs.Conf, User: rs.User, Keyring: badKeyring}},
			[]string{"client." + c.User, "key", badKeyring}},
		{"no caps", Spec{RBD: RBDSpec{Pool: "device_health_metrics", Image: "img", Conf: rs.Conf, User: rs.User, Keyring: rs.Keyring}},
			[]string{"ceph auth caps client." + c.User}},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			s := tc.spec
			s.Kind = KindRBD
			s.Logger = slog.New(slog.DiscardHandler)
			b, err := Open(s)
			if err == nil {
				b.Close()
				t.Fatal("Open succeeded")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	rbdConns.mu.Lock()
	defer rbdConns.mu.Unlock()
	if n := len(rbdConns.byKey); n != 0 {
		t.Errorf("%d connections left after failed opens", n)
	}
}

// TestRBDDialDoesNotBlockOthers: while one cluster does not answer (its dial waits for
// ConnectTimeout), images of another cluster open and close at once; an open of the
// unanswering cluster's key that arrives meanwhile waits for that dial and gets its
// result instead of dialing again (and waiting as long once more).
func TestRBDDialDoesNotBlockOthers(t *testing.T) {
	_, rs := testImage(t, "4M")
	// A cluster nobody runs: a ceph.conf whose monitor port has no listener.
	noCluster := filepath.Join(t.TempDir(), "nocluster.conf")
	if err := os.WriteFile(noCluster, []byte("[global]\nmon host = v2:127.0.0.1:9\nauth client required = none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const timeout = 12 * time.Second
	bad := Spec{Kind: KindRBD, Logger: slog.New(slog.DiscardHandler),
		RBD: RBDSpec{Pool: rs.Pool, Image: rs.Image, Conf: noCluster, ConnectTimeout: timeout}}
	start := time.Now()
	first, second := make(chan error, 1), make(chan error, 1)
	open := func(ch chan<- error) {
		b, err := Open(bad)
		if err == nil {
			b.Close()
		}
		ch <- err
	}
	go open(first)
	// The first open is dialing by now (if it is not, the test shows less, and passes).
	time.Sleep(time.Second)
	go open(second)
	b := openRBDTest(t, Spec{RBD: rs})
	if err := b.WriteBlocks(alignedBuf(4096), 0, true); err != nil {
		t.Errorf("FUA write: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	took := time.Since(start)
	select {
	case err := <-first:
		t.Fatalf("opening and closing an image of a running cluster waited for the dial of one that does not answer "+
			"(%s; that open ended with %v)", took, err)
	default:
	}
	err1, err2 := <-first, <-second
	if err1 == nil || !strings.Contains(err1.Error(), "connecting to the Ceph cluster") {
		t.Fatalf("open of a cluster that does not answer: %v", err1)
	}
	if err2 != err1 {
		t.Errorf("the open that arrived during its key's dial failed with %v, want that dial's error %v", err2, err1)
	}
	if all := time.Since(start); all > timeout+timeout/2 {
		t.Errorf("both opens of the unanswering cluster took %s with a %s timeout", all, timeout)
	}
}

// cephThreads counts the threads librados started in this process (its log thread and
// messenger workers), which name themselves; Go's threads carry the program's name.
func cephThreads(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "comm"))
		if err != nil {
			continue // it ended meanwhile
		}
		if name := strings.TrimSpace(string(b)); name == "log" || strings.HasPrefix(name, "msgr-worker-") {
			n++
		}
	}
	return n
}

// TestRBDFailedDialShutsDown: a dial that fails to connect (no monitor answers) releases
// its RADOS handle at once, with the threads rados_connect started, not when a garbage
// collection runs the handle's finalizer (disabled here, as between two collections of a
// process with a large heap).
func TestRBDFailedDialShutsDown(t *testing.T) {
	noCluster := filepath.Join(t.TempDir(), "nocluster.conf")
	if err := os.WriteFile(noCluster, []byte("[global]\nmon host = v2:127.0.0.1:9\nauth client required = none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	before := cephThreads(t)
	for range 3 {
		_, err := Open(Spec{Kind: KindRBD, Logger: slog.New(slog.DiscardHandler),
			RBD: RBDSpec{Pool: "rbd", Image: "img", Conf: noCluster, ConnectTimeout: time.Second}})
		if err == nil || !strings.Contains(err.Error(), "connecting to the Ceph cluster") {
			t.Fatalf("open of a cluster nobody runs: %v", err)
		}
	}
	if after := cephThreads(t); after > before {
		t.Errorf("librados threads: %d before 3 failed dials, %d after: their RADOS handles were not shut down", before, after)
	}
}

// TestRBDOpenTimeout: an image open the OSDs do not answer (the OSD is stopped) fails after
// ConnectTimeout with the fix named, and the abandoned open cleans up after itself once
// they answer.
func TestRBDOpenTimeout(t *testing.T) {
	c := cephtest.Private(t) // its OSD is stopped: not the one other packages' tests use
	if _, err := c.Rbd("create", "--size", "4M", c.Pool+"/img"); err != nil {
		t.Fatal(err)
	}
	rs := RBDSpec{Pool: c.Pool, Image: "img", Conf: c.Conf}
	b, err := os.ReadFile(filepath.Join(c.Dir, "run", "osd.0.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatal(err)
	}
	rs.ConnectTimeout = 2 * time.Second
	key := rbdConnKey{rs.Conf, rs.User, rs.Keyring}
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			unix.Kill(pid, unix.SIGCONT)
		}
	}()
	start := time.Now()
	_, err = Open(Spec{Kind: KindRBD, RBD: rs, Logger: slog.New(slog.DiscardHandler)})
	took := time.Since(start)
	unix.Kill(pid, unix.SIGCONT)
	stopped = false
	if err == nil || !strings.Contains(err.Error(), "no answer from the OSDs within 2s") || !strings.Contains(err.Error(), "ceph -s") {
		t.Fatalf("Open with the OSD stopped: %v", err)
	}
	if took > 10*time.Second {
		t.Errorf("Open took %s with a 2 s timeout", took)
	}
	// The open goes on in the background and releases the connection when it answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rbdConns.mu.Lock()
		left := rbdConns.byKey[key]
		rbdConns.mu.Unlock()
		if left == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned open still holds its connection 30 s after the OSD resumed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And the image opens normally again.
	openRBDTest(t, Spec{RBD: rs}).Close()
}

// BenchmarkRBD is BenchmarkExecutor's random reads and writes at queue depth 32 (4 KiB)
// and 8 (128 KiB) on an rbd image of the test cluster (compare with its file-direct case on
// the same machine). CEPH_ARGS reaches the client's configuration
// (CEPH_ARGS=--rbd_disable_zero_copy_writes=false, for one).
func BenchmarkRBD(b *testing.B) {
	const region = 64 << 20
	c := cephtest.Get(b)
	name := fmt.Sprintf("BenchmarkRBD-%d", time.Now().UnixNano())
	if _, err := c.Rbd("create", "--size", "64M", c.Pool+"/"+name); err != nil {
		b.Fatal(err)
	}
	defer c.Rbd("rm", "--no-progress", c.Pool+"/"+name)
	be, err := Open(Spec{Kind: KindRBD, LBASize: 4096, Logger: slog.New(slog.DiscardHandler),
		RBD: RBDSpec{Pool: c.Pool, Image: name, Conf: c.Conf, User: c.User, Keyring: c.Keyring}})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	chunk := alignedBuf(1 << 20)
	fill(chunk, 1)
	for off := uint64(0); off < region; off += 1 << 20 {
		if err := be.WriteBlocks(chunk, off/4096, false); err != nil {
			b.Fatal(err)
		}
	}
	for _, op := range []Op{OpRead, OpWrite} {
		b.Run(op.String()+"-4k", func(b *testing.B) { runQD(b, be, op, 32, region/4096) })
		b.Run(op.String()+"-128k", func(b *testing.B) { runQDSize(b, be, op, 8, region/4096, 128<<10) })
	}
}
