package backend

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ringHarness drives a Ring the way a transport's poll loop does: submit, wait on the
// eventfd, reap.
type ringHarness struct {
	t    *testing.T
	g    *Ring
	efd  int
	done atomic.Int32
}

func newRingHarness(t *testing.T, depth int) *ringHarness {
	t.Helper()
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewRing(depth, efd)
	if err != nil {
		unix.Close(efd)
		t.Fatal(err)
	}
	h := &ringHarness{t: t, g: g, efd: efd}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
		unix.Close(efd)
	})
	return h
}

// wait reaps until n requests have completed through Done.
func (h *ringHarness) wait(n int32) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.done.Load() < n {
		if time.Now().After(deadline) {
			h.t.Fatalf("%d of %d requests completed; %d in the ring", h.done.Load(), n, h.g.InFlight())
		}
		h.g.Flush()
		if h.g.Ready() {
			h.g.Reap()
			continue
		}
		p := []unix.PollFd{{Fd: int32(h.efd), Events: unix.POLLIN}}
		unix.Poll(p, 100)
		var b [8]byte
		unix.Read(h.efd, b[:])
	}
}

func TestRingReadWrite(t *testing.T) {
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "ns.img"), Size: 4 << 20, LBASize: 512})
	if !b.direct {
		t.Skip("the test directory's filesystem has no O_DIRECT: the ring would not be used")
	}
	e := NewExecutor(b, 2)
	defer e.Close()
	h := newRingHarness(t, 8)

	const n = 16 // more than the ring holds: the rest go to the workers
	bufs := make([][]byte, n)
	reqs := make([]Request, n)
	for i := range reqs {
		bufs[i] = alignedBuf(8192)
		for j := range bufs[i] {
			bufs[i][j] = byte(i*7 + j)
		}
		reqs[i] = Request{Op: OpWrite, SLBA: uint64(i) * 16, Buf: bufs[i], FUA: i%2 == 0,
			Done: func(r *Request) {
				if r.Err != nil {
					t.Errorf("write %d: %v", i, r.Err)
				}
				h.done.Add(1)
			}}
		e.SubmitRing(h.g, &reqs[i])
	}
	if h.g.InFlight() == 0 {
		t.Fatal("no request went to the ring")
	}
	h.wait(n)
	if h.g.InFlight() != 0 {
		t.Fatalf("%d requests left in the ring", h.g.InFlight())
	}

	h.done.Store(0)
	for i := range reqs {
		rb := alignedBuf(8192)
		reqs[i] = Request{Op: OpRead, SLBA: uint64(i) * 16, NLB: 16, Buf: rb,
			Done: func(r *Request) {
				if r.Err != nil {
					t.Errorf("read %d: %v", i, r.Err)
				} else if !bytes.Equal(r.Buf, bufs[i]) {
					t.Errorf("read %d: data differs from what was written", i)
				}
				h.done.Add(1)
			}}
		e.SubmitRing(h.g, &reqs[i])
	}
	h.wait(n)

	// Requests the ring does not take run on the executor and report the same errors.
	h.done.Store(0)
	var errs [3]error
	bad := []Request{
		{Op: OpRead, SLBA: b.NumBlocks(), Buf: alignedBuf(4096)}, // out of range
		{Op: OpRead, SLBA: 0, Buf: alignedBuf(8192)[1:4097]},     // unaligned
		{Op: OpRead, SLBA: 0, NLB: 3, Buf: alignedBuf(4096)},     // NLB mismatch
	}
	for i := range bad {
		bad[i].Done = func(r *Request) { errs[i] = r.Err; h.done.Add(1) }
		e.SubmitRing(h.g, &bad[i])
	}
	h.wait(int32(len(bad)))
	if !errors.Is(errs[0], ErrLBAOutOfRange) || !errors.Is(errs[1], ErrUnaligned) || !errors.Is(errs[2], ErrUnaligned) {
		t.Fatalf("errors: %v", errs)
	}
}

// TestRingExecutorClose: Close of the executor waits for the ring's requests, and later
// submissions fail with ErrClosed.
func TestRingExecutorClose(t *testing.T) {
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20})
	if !b.direct {
		t.Skip("no O_DIRECT in the test directory")
	}
	e := NewExecutor(b, 1)
	h := newRingHarness(t, 4)
	r := Request{Op: OpRead, Buf: alignedBuf(4096), Done: func(*Request) { h.done.Add(1) }}
	e.SubmitRing(h.g, &r)
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	h.wait(1)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the ring's request completed")
	}
	var err error
	r2 := Request{Op: OpRead, Buf: alignedBuf(4096), Done: func(r *Request) { err = r.Err }}
	e.SubmitRing(h.g, &r2)
	if !errors.Is(err, ErrClosed) || h.g.InFlight() != 0 {
		t.Fatalf("after Close: %v, %d in the ring", err, h.g.InFlight())
	}
}

// TestRingAllocations: a read through the ring allocates nothing.
func TestRingAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20})
	if !b.direct {
		t.Skip("no O_DIRECT in the test directory")
	}
	e := NewExecutor(b, 1)
	defer e.Close()
	h := newRingHarness(t, 4)
	r := Request{Op: OpRead, Buf: alignedBuf(4096), Done: func(*Request) { h.done.Add(1) }}
	n := int32(0)
	allocs := testing.AllocsPerRun(50, func() {
		n++
		e.SubmitRing(h.g, &r)
		h.wait(n)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per read", allocs)
	}
}

// TestRingAIOLimit: a ring larger than the system's fs.aio-max-nr fails with
// EAGAIN and an error that says which sysctl to raise.
func TestRingAIOLimit(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/aio-max-nr")
	if err != nil {
		t.Skipf("no fs.aio-max-nr to exceed: %v", err)
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("fs.aio-max-nr %q: %v", b, err)
	}
	g, err := NewRing(limit+1, -1)
	if err == nil {
		g.Close()
		t.Skipf("io_setup(%d) succeeded with fs.aio-max-nr %d (the limit is not enforced here)", limit+1, limit)
	}
	if errors.Is(err, unix.EINVAL) {
		t.Skipf("fs.aio-max-nr %d is beyond io_setup's own bound (EINVAL): no EAGAIN to provoke", limit)
	}
	if !errors.Is(err, unix.EAGAIN) || !strings.Contains(err.Error(), "raise fs.aio-max-nr") {
		t.Errorf("NewRing(%d) beyond fs.aio-max-nr: %v; want EAGAIN and how to raise the limit", limit+1, err)
	}
}

// TestRingBatchAndUserReap: the requests queued in one round reach the kernel in one
// io_submit, and their completions are taken from the ring in the process's memory
// without io_getevents.
func TestRingBatchAndUserReap(t *testing.T) {
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20})
	if !b.direct {
		t.Skip("no O_DIRECT in the test directory")
	}
	e := NewExecutor(b, 1)
	defer e.Close()
	h := newRingHarness(t, 16)
	if h.g.ring == nil {
		t.Skip("the kernel's completion ring has an unknown layout here: Reap uses io_getevents")
	}
	const n = 12
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Op: OpRead, SLBA: uint64(i) * 8, Buf: alignedBuf(4096), Done: func(r *Request) {
			if r.Err != nil {
				t.Errorf("read %d: %v", i, r.Err)
			}
			h.done.Add(1)
		}}
		e.SubmitRing(h.g, &reqs[i])
	}
	if h.g.Pending() != n || h.g.Submits != 0 {
		t.Fatalf("before Flush: %d queued, %d io_submit calls; want %d, 0", h.g.Pending(), h.g.Submits, n)
	}
	if h.g.Ready() {
		t.Fatal("Ready before anything was submitted")
	}
	if got := h.g.Flush(); got != n || h.g.Submits != 1 {
		t.Fatalf("Flush handed %d requests in %d io_submit calls; want %d in 1", got, h.g.Submits, n)
	}
	h.wait(n)
	if h.g.GetEvents != 0 {
		t.Errorf("%d io_getevents calls; want the completions taken from the ring without one", h.g.GetEvents)
	}
	if h.g.InFlight() != 0 {
		t.Errorf("%d requests left in the ring", h.g.InFlight())
	}
}

// TestRingCloseBounded: a request the kernel never completes does not make Ring.Close
// spin forever: it returns an error naming the requests left once RingCloseTimeout has
// passed.
func TestRingCloseBounded(t *testing.T) {
	old := RingCloseTimeout
	RingCloseTimeout = 200 * time.Millisecond
	defer func() { RingCloseTimeout = old }()
	g, err := NewRing(4, -1)
	if err != nil {
		t.Skipf("no AIO context: %v", err)
	}
	g.inflight.Add(1) // a request the kernel will never complete (none was submitted)
	done := make(chan error, 1)
	go func() { done <- g.Close() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "1 asynchronous I/Os still in flight") {
			t.Errorf("Close: %v, want an error counting the request left", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Ring.Close spins on a request that never completes")
	}
	g.inflight.Add(-1)
	if err := g.Close(); err != nil {
		t.Errorf("Close once nothing is in flight: %v", err)
	}
}

// TestRingNowaitFallback: writes into the holes of a sparse file would block io_submit on
// block allocation (ext4, xfs: see BenchmarkRingSubmitWrite); under RWF_NOWAIT the kernel
// answers EAGAIN and the ring hands them to the executor's workers, with the data intact.
func TestRingNowaitFallback(t *testing.T) {
	dir := directDir(t)
	if fs := fsName(dir); fs != "ext4" && fs != "xfs" {
		t.Skipf("%s: only ext4 and xfs are known to refuse a non-overwriting direct write under RWF_NOWAIT", fs)
	}
	b := openTestFile(t, Spec{Path: filepath.Join(dir, "sparse.img"), Size: 64 << 20, LBASize: 4096})
	if !b.direct {
		t.Skip("no O_DIRECT")
	}
	e := NewExecutor(b, 2)
	defer e.Close()
	h := newRingHarness(t, 16)
	const n = 16
	bufs := make([][]byte, n)
	reqs := make([]Request, n)
	for i := range reqs {
		bufs[i] = alignedBuf(4096)
		fill(bufs[i], byte(i+1))
		reqs[i] = Request{Op: OpWrite, SLBA: uint64(i * 997), Buf: bufs[i], Done: func(r *Request) {
			if r.Err != nil {
				t.Errorf("write: %v", r.Err)
			}
			h.done.Add(1)
		}}
		e.SubmitRing(h.g, &reqs[i])
	}
	h.wait(n)
	if h.g.Fallbacks() == 0 {
		t.Errorf("no write into a hole went to the workers: io_submit did the allocation on the ring's owner")
	}
	for i := range reqs {
		got := alignedBuf(4096)
		if err := b.ReadBlocks(got, uint64(i*997)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bufs[i]) {
			t.Errorf("block %d: data differs after the fallback", i*997)
		}
	}
	// Overwrites of allocated blocks stay on the ring.
	before := h.g.Fallbacks()
	for i := range reqs {
		e.SubmitRing(h.g, &reqs[i])
	}
	h.wait(2 * n)
	if d := h.g.Fallbacks() - before; d > n/2 {
		t.Errorf("%d of %d overwrites of allocated blocks went to the workers", d, n)
	}
}

// TestRingNowaitRefused: a device that takes no non-blocking requests fails each with
// EOPNOTSUPP when it completes (a queue without REQ_NOWAIT): the request is done
// by a worker, not failed (a FUA write's failure would fail the namespace), and the
// store's later requests go to the workers without the ring.
func TestRingNowaitRefused(t *testing.T) {
	b := openTestFile(t, Spec{Path: filepath.Join(directDir(t), "ns.img"), Size: 1 << 20, LBASize: 512})
	if !b.direct {
		t.Skip("no O_DIRECT in the test directory")
	}
	e := NewExecutor(b, 2)
	defer e.Close()
	h := newRingHarness(t, 16)
	var refused atomic.Int32
	h.g.faultResult = func(r *Request, res int64) int64 {
		refused.Add(1)
		return -int64(unix.EOPNOTSUPP)
	}
	done := func(what string) func(*Request) {
		return func(r *Request) {
			if r.Err != nil {
				t.Errorf("%s on a device refusing RWF_NOWAIT: %v", what, r.Err)
			}
			h.done.Add(1)
		}
	}
	data := alignedBuf(4096)
	fill(data, 0x5a)
	w := Request{Op: OpWrite, SLBA: 8, Buf: data, FUA: true, Done: done("FUA write")}
	e.SubmitRing(h.g, &w)
	h.g.Flush()
	h.wait(1)
	if refused.Load() != 1 || h.g.Fallbacks() != 1 {
		t.Fatalf("%d completions refused, %d requests to the workers; want 1, 1", refused.Load(), h.g.Fallbacks())
	}
	if b.asyncStore() != nil {
		t.Errorf("the store still takes ring requests after the kernel refused RWF_NOWAIT")
	}
	submits := h.g.Submits
	r := Request{Op: OpRead, SLBA: 8, Buf: alignedBuf(4096), Done: done("read")}
	e.SubmitRing(h.g, &r)
	h.g.Flush()
	h.wait(2)
	if h.g.Submits != submits || refused.Load() != 1 || !bytes.Equal(r.Buf, data) {
		t.Errorf("the next request: %d io_submit calls, %d refused, data equal %v; want 0, 1, true",
			h.g.Submits-submits, refused.Load(), bytes.Equal(r.Buf, data))
	}
}

// TestRingBatchFaults: inside one batch, io_submit takes only part of the requests,
// refuses one (EAGAIN) at the head of the rest, and the kernel completes another with
// EAGAIN (RWF_NOWAIT) and a third short. Every request must still complete exactly once,
// with its data in place: the refused and the EAGAIN ones through the workers, the short
// one by resubmitting its rest.
func TestRingBatchFaults(t *testing.T) {
	b := openTestFile(t, Spec{Path: filepath.Join(directDir(t), "ns.img"), Size: 1 << 20, LBASize: 512})
	if !b.direct {
		t.Skip("no O_DIRECT in the test directory")
	}
	// Allocate the blocks first: writes into holes would really get EAGAIN (ext4, xfs).
	for lba := uint64(0); lba < 80; lba += 8 {
		if err := b.WriteBlocks(alignedBuf(4096), lba, false); err != nil {
			t.Fatal(err)
		}
	}
	e := NewExecutor(b, 2)
	defer e.Close()
	h := newRingHarness(t, 16)
	const (
		n       = 10
		refused = 3 // io_submit refuses it when it heads a call
		again   = 2 // completes with EAGAIN
		short   = 7 // completes short: half of it
	)
	reqs := make([]Request, n)
	bufs := make([][]byte, n)
	var dones [n]atomic.Int32
	for i := range reqs {
		bufs[i] = alignedBuf(4096)
		fill(bufs[i], byte(0x40+i))
		reqs[i] = Request{Op: OpWrite, SLBA: uint64(i) * 8, Buf: bufs[i], Done: func(r *Request) {
			if r.Err != nil {
				t.Errorf("write %d: %v", i, r.Err)
			}
			dones[i].Add(1)
			h.done.Add(1)
		}}
	}
	index := func(cb *iocb) int {
		r := h.g.slots[cb.data].r
		for i := range reqs {
			if r == &reqs[i] {
				return i
			}
		}
		t.Fatalf("iocb of slot %d names no test request", cb.data)
		return -1
	}
	var calls, refusals int
	h.g.faultSubmit = func(cbs []*iocb) (int, unix.Errno) {
		calls++
		if index(cbs[0]) == refused && refusals == 0 {
			refusals++
			return 0, unix.EAGAIN
		}
		return h.g.sysSubmit(cbs[:min(len(cbs), 3)]) // part of the batch only
	}
	var againDone, shortDone bool
	h.g.faultResult = func(r *Request, res int64) int64 {
		switch {
		case r == &reqs[again] && !againDone:
			againDone = true
			return -int64(unix.EAGAIN)
		case r == &reqs[short] && !shortDone && res > 0:
			shortDone = true
			return res / 2
		}
		return res
	}
	for i := range reqs {
		e.SubmitRing(h.g, &reqs[i])
	}
	if got := h.g.Flush(); got != n {
		t.Fatalf("Flush handed %d requests; want %d", got, n)
	}
	// 0-2 in one call, the refusal of 3, then 4-6 and 7-9.
	if calls != 4 {
		t.Errorf("%d io_submit calls for a batch of %d taken 3 at a time with one refused; want 4", calls, n)
	}
	h.wait(n)
	if !againDone || !shortDone {
		t.Fatalf("the faults were not injected (EAGAIN %v, short %v)", againDone, shortDone)
	}
	time.Sleep(50 * time.Millisecond) // a second Done would come now
	for i := range dones {
		if d := dones[i].Load(); d != 1 {
			t.Errorf("request %d completed %d times; want exactly once", i, d)
		}
	}
	if f := h.g.Fallbacks(); f != 2 {
		t.Errorf("%d requests went to the workers; want 2 (the refused and the EAGAIN one)", f)
	}
	if h.g.InFlight() != 0 || h.g.Pending() != 0 {
		t.Errorf("%d requests in the ring, %d queued after all completed", h.g.InFlight(), h.g.Pending())
	}
	for i := range reqs {
		got := alignedBuf(4096)
		if err := b.ReadBlocks(got, uint64(i)*8); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bufs[i]) {
			t.Errorf("request %d: the data on disk differs from what was written", i)
		}
	}
}
