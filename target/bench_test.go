package target_test

import (
	"sync/atomic"
	"testing"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// benchQueue is a host-side I/O queue for benchmarks: one command reused, the completion
// callback bound once, so the host side allocates nothing per I/O either.
type benchQueue struct {
	h      *hostQueue
	cmd    nvmeproto.Command
	buf    []byte
	done   func(nvmeproto.Completion)
	status atomic.Uint32
	fin    atomic.Bool
	ch     chan struct{}
}

func newBenchQueue(h *hostQueue, op uint8) *benchQueue {
	q := &benchQueue{h: h, cmd: rw(op, 1, 0, 8, 4096), buf: make([]byte, 4096), ch: make(chan struct{}, 1)}
	q.done = q.complete
	return q
}

func (q *benchQueue) complete(c nvmeproto.Completion) {
	q.status.Store(uint32(c.Status))
	if !q.fin.Swap(true) {
		return
	}
	q.ch <- struct{}{} // the submitter is waiting: a worker completed it
}

// run submits one 4 KiB command at slba and waits for it.
func (q *benchQueue) run(b *testing.B, slba uint64) {
	q.cmd.CDW10, q.cmd.CDW11 = uint32(slba), uint32(slba>>32)
	q.fin.Store(false)
	if err := q.h.conn.Submit(&q.cmd, q.buf, q.done); err != nil {
		b.Fatal(err)
	}
	if !q.fin.Swap(true) { // not completed inline: wait for the worker
		<-q.ch
	}
	if s := nvmeproto.Status(q.status.Load()); !s.Success() {
		b.Fatalf("I/O failed: %v", s)
	}
}

func benchEnv(b *testing.B, queues int, latency bool) []*hostQueue {
	cfg := baseConfig(conf.Namespace{NSID: 1, Backend: conf.BackendNull, Size: 1 << 30})
	e := newEnv(b, cfg)
	e.tgt.MeasureLatency(latency)
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	var qs []*hostQueue
	for i := range queues {
		qs = append(qs, e.ioConnect(uint16(i+1), cntlid, 128))
	}
	return qs
}

func benchIO(b *testing.B, op uint8, latency bool) {
	q := newBenchQueue(benchEnv(b, 1, latency)[0], op)
	const span = (1 << 30) / 4096
	for i := range 1000 { // warm up: grow buffers, bind callbacks
		q.run(b, uint64(i%span)*8)
	}
	b.ReportAllocs()
	b.SetBytes(4096)
	cpu := testutil.CPUTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q.run(b, uint64(i%span)*8)
	}
	testutil.ReportCPU(b, cpu)
}

// BenchmarkLoopRead4K: one 4 KiB read at a time through the loop transport, the full
// target command path and the null backend.
// The I/O counters are always on; the latency histograms are off (no metrics served).
func BenchmarkLoopRead4K(b *testing.B) { benchIO(b, nvmeproto.OpRead, false) }

// BenchmarkLoopWrite4K: as BenchmarkLoopRead4K for writes.
func BenchmarkLoopWrite4K(b *testing.B) { benchIO(b, nvmeproto.OpWrite, false) }

// BenchmarkLoopRead4KMetrics: BenchmarkLoopRead4K with the latency histograms on, as
// when metrics are served (two clock reads per command more).
func BenchmarkLoopRead4KMetrics(b *testing.B) { benchIO(b, nvmeproto.OpRead, true) }

// BenchmarkLoopWrite4KMetrics: as BenchmarkLoopRead4KMetrics for writes.
func BenchmarkLoopWrite4KMetrics(b *testing.B) { benchIO(b, nvmeproto.OpWrite, true) }

// BenchmarkLoopRead4KParallel: 4 KiB reads from several goroutines, each on its own I/O
// queue of one controller (the per-CPU queue layout a host uses).
func BenchmarkLoopRead4KParallel(b *testing.B) {
	qs := benchEnv(b, 4, false)
	var next atomic.Int32
	b.ReportAllocs()
	b.SetBytes(4096)
	cpu := testutil.CPUTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)-1) % len(qs)
		q := newBenchQueue(qs[i], nvmeproto.OpRead)
		slba := uint64(0)
		for pb.Next() {
			q.run(b, slba)
			slba = (slba + 8) % (1 << 30 / 512)
		}
	})
	testutil.ReportCPU(b, cpu)
}
