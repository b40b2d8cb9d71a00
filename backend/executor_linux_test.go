package backend

import (
	"bytes"
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gateBackend blocks every read until the gate opens and records how many reads run at
// once: a stand-in for a slow device.
type gateBackend struct {
	nullBackend
	gate        chan struct{}
	running     atomic.Int32
	maxRunning  atomic.Int32
	completedMu sync.Mutex
	completed   int
}

func newGateBackend(t *testing.T) *gateBackend {
	g := &gateBackend{gate: make(chan struct{})}
	g.init(512, 9, (1<<20)/512, false)
	return g
}

func (g *gateBackend) ReadBlocks(buf []byte, slba uint64) error {
	n := g.running.Add(1)
	for {
		m := g.maxRunning.Load()
		if n <= m || g.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	<-g.gate
	g.running.Add(-1)
	g.completedMu.Lock()
	g.completed++
	g.completedMu.Unlock()
	return g.nullBackend.ReadBlocks(buf, slba)
}

// Info makes it a worker-pool backend (the embedded null one runs inline).
func (g *gateBackend) Info() Info { return Info{Kind: "gate", Workers: 3} }

// TestExecutorBoundedWorkers checks that exactly Workers requests run at once, the rest
// wait queued, and Close waits for all of them.
func TestExecutorBoundedWorkers(t *testing.T) {
	g := newGateBackend(t)
	e := NewExecutor(g, 0) // workers from Info: 3
	var done atomic.Int32
	reqs := make([]Request, 10)
	for i := range reqs {
		reqs[i] = Request{Op: OpRead, Buf: alignedBuf(512), Done: func(*Request) { done.Add(1) }}
		e.Submit(&reqs[i])
	}
	waitFor(t, func() bool { return g.running.Load() == 3 })
	time.Sleep(20 * time.Millisecond) // give a fourth worker, if any, time to show up
	if n := g.maxRunning.Load(); n != 3 {
		t.Fatalf("%d requests ran at once, want 3 workers", n)
	}
	if done.Load() != 0 {
		t.Fatal("requests completed before the backend returned")
	}
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with requests still in flight")
	case <-time.After(20 * time.Millisecond):
	}
	close(g.gate)
	<-closed
	if done.Load() != 10 {
		t.Errorf("%d requests completed before Close returned, want 10", done.Load())
	}
	for i := range reqs {
		if reqs[i].Err != nil {
			t.Errorf("request %d: %v", i, reqs[i].Err)
		}
	}
	// After Close, Submit completes at once with ErrClosed.
	var r Request
	called := false
	r = Request{Op: OpRead, Buf: alignedBuf(512), Done: func(*Request) { called = true }}
	e.Submit(&r)
	if !called || !errors.Is(r.Err, ErrClosed) {
		t.Errorf("Submit after Close: done %v err %v", called, r.Err)
	}
	e.Close() // idempotent
}

// TestExecutorSubmitNeverBlocks: with every worker stuck, Submit still returns at once
// for any number of requests (a transport's event loop calls it for many hosts), and
// they all run, in order, once the backend moves again.
func TestExecutorSubmitNeverBlocks(t *testing.T) {
	g := newGateBackend(t)
	e := NewExecutor(g, 1)
	const n = 5000
	reqs := make([]Request, n)
	var order []int
	var mu sync.Mutex
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for i := range reqs {
			reqs[i] = Request{Op: OpRead, Buf: alignedBuf(512), Done: func(*Request) {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			}}
			e.Submit(&reqs[i])
		}
	}()
	select {
	case <-submitted:
	case <-time.After(10 * time.Second):
		close(g.gate)
		t.Fatal("Submit blocked behind a stuck backend")
	}
	if q := e.Queued(); q < n-1 {
		t.Errorf("%d requests queued, want at least %d", q, n-1)
	}
	close(g.gate)
	e.Close()
	if len(order) != n {
		t.Fatalf("%d of %d requests completed", len(order), n)
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("request %d completed as the %dth: one worker runs them in order", v, i)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExecutorInline: null and memory requests complete inside Submit.
func TestExecutorInline(t *testing.T) {
	for _, kind := range []Kind{KindNull, KindMemory} {
		b, err := Open(Spec{Kind: kind, Size: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		e := NewExecutor(b, 8)
		if !Describe(b).Inline {
			t.Errorf("%s: not inline", kind)
		}
		var r Request
		doneInSubmit := false
		inSubmit := true
		r = Request{Op: OpWrite, SLBA: 1, Buf: alignedBuf(512), Done: func(*Request) { doneInSubmit = inSubmit }}
		e.Submit(&r)
		inSubmit = false
		if !doneInSubmit || r.Err != nil {
			t.Errorf("%s: Done called inside Submit: %v, err %v", kind, doneInSubmit, r.Err)
		}
		e.Close()
		b.Close()
	}
}

// TestExecutorHandoffs: Handoffs counts the requests handed to worker goroutines, not
// the ones done inline.
func TestExecutorHandoffs(t *testing.T) {
	mem, err := Open(Spec{Kind: KindMemory, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	inline := NewExecutor(mem, 1)
	defer inline.Close()
	h0 := Handoffs()
	r := Request{Op: OpRead, Buf: alignedBuf(512), Done: func(*Request) {}}
	inline.Submit(&r)
	if Handoffs() != h0 {
		t.Errorf("an inline request counted as a hand-off")
	}
	f := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "h.img"), Size: 1 << 20})
	e := NewExecutor(f, 1)
	defer e.Close()
	done := make(chan struct{})
	r2 := Request{Op: OpRead, Buf: alignedBuf(4096), Done: func(*Request) { close(done) }}
	e.Submit(&r2)
	<-done
	if Handoffs() < h0+1 {
		t.Errorf("Handoffs %d after a worker request; want at least %d", Handoffs(), h0+1)
	}
}

// TestExecutorRequests checks Execute's request handling: NLB against the buffer,
// deallocate ranges checked before any is applied, unknown ops.
func TestExecutorRequests(t *testing.T) {
	b, err := Open(Spec{Kind: KindMemory, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n := b.NumBlocks()
	w := alignedBuf(64 << 10)
	fill(w, 6)
	if err := Execute(b, &Request{Op: OpWrite, Buf: w, NLB: 128}); err != nil {
		t.Fatal(err)
	}
	if err := Execute(b, &Request{Op: OpRead, Buf: w[:4096], NLB: 7}); !errors.Is(err, ErrUnaligned) {
		t.Errorf("NLB not matching the buffer: %v, want ErrUnaligned", err)
	}
	// One bad range: nothing is deallocated.
	rs := []Range{{0, 8}, {n - 1, 2}, {16, 8}}
	if err := Execute(b, &Request{Op: OpDeallocate, Ranges: rs}); !errors.Is(err, ErrLBAOutOfRange) {
		t.Errorf("deallocate with a bad range: %v", err)
	}
	r := alignedBuf(len(w))
	b.ReadBlocks(r, 0)
	if !bytes.Equal(r, w) {
		t.Error("a failed deallocate changed data")
	}
	rs = []Range{{0, 8}, {16, 8}, {100, 0}}
	if err := Execute(b, &Request{Op: OpDeallocate, Ranges: rs}); err != nil {
		t.Fatal(err)
	}
	b.ReadBlocks(r, 0)
	if !isZero(r[:8*512]) || !isZero(r[16*512:24*512]) || !bytes.Equal(r[8*512:16*512], w[8*512:16*512]) || !bytes.Equal(r[24*512:], w[24*512:]) {
		t.Error("deallocate ranges applied wrongly")
	}
	if err := Execute(b, &Request{Op: OpDeallocate, SLBA: 24, NLB: 8}); err != nil {
		t.Fatal(err)
	}
	if err := Execute(b, &Request{Op: OpWriteZeroes, SLBA: 40, NLB: 8}); err != nil {
		t.Fatal(err)
	}
	if err := Execute(b, &Request{Op: OpFlush}); err != nil {
		t.Fatal(err)
	}
	b.ReadBlocks(r, 0)
	if !isZero(r[24*512:32*512]) || !isZero(r[40*512:48*512]) {
		t.Error("deallocate / write zeroes by SLBA and NLB not applied")
	}
	if err := Execute(b, &Request{Op: Op(99)}); !errors.Is(err, ErrInvalidOp) {
		t.Errorf("unknown op: %v", err)
	}
	ro, _ := Open(Spec{Kind: KindMemory, Size: 1 << 20, ReadOnly: true})
	if err := Execute(ro, &Request{Op: OpDeallocate, Ranges: rs}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("deallocate ranges on read-only: %v", err)
	}
}

// TestExecutorConcurrent drives each backend from many goroutines through an Executor,
// every goroutine owning a region, and checks every block (run with -race).
func TestExecutorConcurrent(t *testing.T) {
	type target struct {
		name string
		open func(t *testing.T) Backend
	}
	targets := []target{
		{"memory", func(t *testing.T) Backend {
			b, err := Open(Spec{Kind: KindMemory, Size: 16 << 20, LBASize: 512})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"file", func(t *testing.T) Backend {
			return openTestFile(t, Spec{Path: tempPath(t), Size: 16 << 20, LBASize: 512, Workers: 8})
		}},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			b := tg.open(t)
			e := NewExecutor(b, 0)
			defer e.Close()
			const goroutines, rounds, blocks = 16, 40, 16
			region := b.NumBlocks() / goroutines
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for gi := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					done := make(chan *Request, 1)
					req := &Request{Done: func(r *Request) { done <- r }}
					w, r := alignedBuf(blocks*512), alignedBuf(blocks*512)
					for i := range rounds {
						slba := uint64(gi)*region + uint64(i*blocks)%(region-blocks)
						fill(w, byte(gi*rounds+i))
						*req = Request{Op: OpWrite, SLBA: slba, Buf: w, FUA: i%5 == 0, Done: req.Done}
						e.Submit(req)
						<-done
						if req.Err != nil {
							errs <- req.Err
							return
						}
						*req = Request{Op: OpRead, SLBA: slba, Buf: r, Done: req.Done}
						e.Submit(req)
						<-done
						if req.Err != nil || !bytes.Equal(r, w) {
							errs <- errors.New("read back differs")
							return
						}
						if i%7 == 0 {
							*req = Request{Op: OpWriteZeroes, SLBA: slba, NLB: blocks / 2, Done: req.Done}
							e.Submit(req)
							<-done
							*req = Request{Op: OpRead, SLBA: slba, Buf: r, Done: req.Done}
							e.Submit(req)
							<-done
							if !isZero(r[:blocks/2*512]) || !bytes.Equal(r[blocks/2*512:], w[blocks/2*512:]) {
								errs <- errors.New("write zeroes read back differs")
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func tempPath(t *testing.T) string { return t.TempDir() + "/ns.img" }

// TestExecutorSubmitAllocs: Submit and completion allocate nothing, inline or on workers.
func TestExecutorSubmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	mem, _ := Open(Spec{Kind: KindMemory, Size: 1 << 20})
	file := openTestFile(t, Spec{Path: tempPath(t), Size: 1 << 20, Workers: 2})
	for _, b := range []Backend{mem, file} {
		e := NewExecutor(b, 0)
		done := make(chan *Request, 1)
		req := &Request{Op: OpWrite, SLBA: 8, Buf: alignedBuf(4096), Done: func(r *Request) { done <- r }}
		e.Submit(req) // first write allocates the memory chunk
		<-done
		ops := []Op{OpWrite, OpRead, OpWriteZeroes, OpDeallocate, OpFlush}
		i := 0
		allocs := testing.AllocsPerRun(200, func() {
			req.Op = ops[i%len(ops)]
			req.NLB = 0
			if req.Op == OpWriteZeroes || req.Op == OpDeallocate {
				req.NLB = 8
			}
			i++
			e.Submit(req)
			<-done
			if req.Err != nil {
				t.Fatal(req.Err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per request, want 0", Describe(b).Kind, allocs)
		}
		e.Close()
	}
	runtime.KeepAlive(file)
}
