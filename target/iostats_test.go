package target

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestLatencyBuckets: bucket i holds (10 µs × 2^(i-1), 10 µs × 2^i]; beyond the last
// bound is the overflow bucket.
func TestLatencyBuckets(t *testing.T) {
	us := int64(time.Microsecond)
	for _, c := range []struct {
		d    int64
		want int
	}{
		{0, 0}, {1, 0}, {10 * us, 0}, {10*us + 1, 1}, {20 * us, 1}, {20*us + 1, 2}, {40 * us, 2},
		{100 * us, 4}, {int64(time.Millisecond), 7}, {int64(LatencyBound(LatencyBuckets - 1)), LatencyBuckets - 1},
		{int64(LatencyBound(LatencyBuckets-1)) + 1, LatencyBuckets}, {int64(time.Hour), LatencyBuckets},
	} {
		if got := latencyBucket(c.d); got != c.want {
			t.Errorf("latencyBucket(%v) = %d, want %d", time.Duration(c.d), got, c.want)
		}
	}
	if LatencyBound(0) != 10*time.Microsecond || LatencyBound(LatencyBuckets-1) != 10485760*time.Microsecond {
		t.Errorf("bounds %v .. %v", LatencyBound(0), LatencyBound(LatencyBuckets-1))
	}
	for i := 1; i < LatencyBuckets; i++ { // every bound lands in its own bucket, one more in the next
		b := int64(LatencyBound(i))
		if latencyBucket(b) != i || latencyBucket(b+1) != i+1 {
			t.Errorf("bound %v: buckets %d and %d", LatencyBound(i), latencyBucket(b), latencyBucket(b+1))
		}
	}
}

func TestLatencyQuantile(t *testing.T) {
	var h LatencyHistogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Errorf("empty histogram: %v %v", h.Quantile(0.5), h.Mean())
	}
	h.Buckets[0], h.Buckets[3], h.Buckets[LatencyBuckets] = 90, 9, 1
	h.Count, h.Sum = 100, 100*time.Millisecond
	for q, want := range map[float64]time.Duration{0.5: LatencyBound(0), 0.9: LatencyBound(0), 0.95: LatencyBound(3),
		0.99: LatencyBound(3), 1: LatencyBound(LatencyBuckets)} {
		if got := h.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if h.Mean() != time.Millisecond {
		t.Errorf("mean %v", h.Mean())
	}
}

// TestErrorCounts: statuses are counted by class and code (DNR ignored), concurrently,
// and what does not fit in the table is counted per class as ErrorOverflow.
func TestErrorCounts(t *testing.T) {
	var e errorCounts
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				st := nvmeproto.StatusLBAOutOfRange
				if i%2 == 0 {
					st = st.WithDNR()
				}
				e.add(IOClass(g%2), st)
			}
		}()
	}
	wg.Wait()
	got := e.snapshot()
	want := []ErrorCount{{IORead, nvmeproto.StatusLBAOutOfRange, 2000}, {IOWrite, nvmeproto.StatusLBAOutOfRange, 2000}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("%+v, want %+v", got, want)
	}
	for sc := range 40 {
		e.add(IOOther, nvmeproto.MakeStatus(nvmeproto.SCTMediaError, uint8(0x80+sc)))
	}
	got = e.snapshot()
	var other, overflow uint64
	for _, c := range got {
		if c.Class == IOOther && c.Status != ErrorOverflow {
			other += c.Count
		}
		if c.Status == ErrorOverflow {
			overflow += c.Count
		}
	}
	if other != errorSlots-2 || overflow != 40-(errorSlots-2) {
		t.Errorf("%d counted, %d in overflow: %+v", other, overflow, got)
	}
}

// TestNamespaceCount: completions land in their class; bytes only for successful reads
// and writes; latencies in the histogram only when the command was timed; the SMART
// totals are the successful reads (Compare included) and writes.
func TestNamespaceCount(t *testing.T) {
	ns := &namespace{}
	req := func(op uint8, n uint32, start int64) *Request {
		return &Request{Cmd: nvmeproto.Command{Opcode: op}, Length: n, start: start}
	}
	ok := nvmeproto.StatusSuccess
	ns.count(0, req(nvmeproto.OpRead, 4096, 0), ok)
	ns.count(3, req(nvmeproto.OpCompare, 512, 0), ok)
	ns.count(5, req(nvmeproto.OpWrite, 8192, nanotime()-int64(15*time.Microsecond)), ok)
	ns.count(7, req(nvmeproto.OpWrite, 8192, 0), nvmeproto.StatusNSWriteProtected.WithDNR())
	ns.count(1, req(nvmeproto.OpFlush, 0, nanotime()), ok)
	ns.count(2, req(nvmeproto.OpWriteZeroes, 0, 0), ok)
	ns.count(17, req(nvmeproto.OpDatasetManagement, 16, 0), nvmeproto.StatusLBAOutOfRange)
	io, errs := ns.counters()
	want := [NumIOClasses][3]uint64{{2, 0, 4608}, {2, 1, 8192}, {1, 0, 0}, {2, 1, 0}}
	for cl := range NumIOClasses {
		c := io[cl]
		if got := [3]uint64{c.Commands, c.Errors, c.Bytes}; got != want[cl] {
			t.Errorf("%v: commands, errors, bytes %v, want %v", cl, got, want[cl])
		}
	}
	// The latencies are real clock readings (at least 15 µs and 0 µs, more on a loaded
	// machine): each must be in the bucket of the latency recorded.
	if h := io[IOWrite].Latency; h.Count != 1 || h.Buckets[latencyBucket(int64(h.Sum))] != 1 || h.Sum < 15*time.Microsecond {
		t.Errorf("write latency %+v", h)
	}
	if h := io[IOFlush].Latency; h.Count != 1 || h.Buckets[latencyBucket(int64(h.Sum))] != 1 {
		t.Errorf("flush latency %+v", h)
	}
	if io[IORead].Latency.Count != 0 {
		t.Errorf("untimed reads in the histogram: %+v", io[IORead].Latency)
	}
	if len(errs) != 2 || errs[0] != (ErrorCount{IOWrite, nvmeproto.StatusNSWriteProtected, 1}) ||
		errs[1] != (ErrorCount{IOOther, nvmeproto.StatusLBAOutOfRange, 1}) {
		t.Errorf("errors %+v", errs)
	}
	rc, wc, ru, wu := ns.totals()
	if rc != 2 || wc != 1 || ru != 9 || wu != 16 {
		t.Errorf("SMART totals %d %d %d %d", rc, wc, ru, wu)
	}
}

// BenchmarkCount is the I/O path's accounting of one command: the counters only (no
// metrics served), and with the latency histogram (the clock read at Begin included).
func BenchmarkCount(b *testing.B) {
	ns := &namespace{}
	r := &Request{Cmd: nvmeproto.Command{Opcode: nvmeproto.OpRead}, Length: 4096}
	b.Run("counters", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ns.count(0, r, nvmeproto.StatusSuccess)
		}
	})
	b.Run("latency", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.start = nanotime()
			ns.count(0, r, nvmeproto.StatusSuccess)
		}
	})
}

// BenchmarkCountParallel: the counters (no clock) from every CPU into one shard — what
// queues on different CPUs would do without shards — against each into its own.
func BenchmarkCountParallel(b *testing.B) {
	for _, c := range []struct {
		name   string
		shared bool
	}{{"one-shard", true}, {"own-shards", false}} {
		b.Run(c.name, func(b *testing.B) {
			ns := &namespace{}
			var next atomic.Uint32
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				shard := uint8(next.Add(1))
				if c.shared {
					shard = 0
				}
				r := &Request{Cmd: nvmeproto.Command{Opcode: nvmeproto.OpRead}, Length: 4096}
				for pb.Next() {
					ns.count(shard, r, nvmeproto.StatusSuccess)
				}
			})
		})
	}
}
