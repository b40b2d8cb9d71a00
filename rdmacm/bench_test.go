package rdmacm_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// The benchmarks move messages of 4 KiB and 64 KiB from a client QP to a
// server QP over rdma_cm, the way perftest's ib_send_bw, ib_write_bw and
// ib_read_bw do (same queue depths: 128 outstanding sends, 512 posted
// receives; reads limited by the device's initiator depth; every request
// and every receive uses the same buffer, as perftest's do at these sizes),
// so the ratio to perftest in the same guest measures this package's
// overhead (testdata/perftest-compare.sh). They report MB/s (1e6 bytes) and
// msgs/s.
const (
	benchTxDepth = 128 // outstanding send-queue requests
	benchRxDepth = 512 // posted receives
)

// benchBatch is the number of requests per post (the last one is
// signaled); GONVMF_BENCH_BATCH overrides it for experiments.
var benchBatch = func() int {
	if n, err := strconv.Atoi(os.Getenv("GONVMF_BENCH_BATCH")); err == nil && n >= 1 && n <= benchTxDepth {
		return n
	}
	return 16
}()

var benchSizes = []struct {
	name string
	size int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}}

// BenchmarkRDMASend: SENDs into receives the server reposts as they
// complete.
func BenchmarkRDMASend(b *testing.B) { benchOps(b, rdmacm.OpSend) }

// BenchmarkRDMAWrite: RDMA WRITEs into the server's memory.
func BenchmarkRDMAWrite(b *testing.B) { benchOps(b, rdmacm.OpWrite) }

// BenchmarkRDMARead: RDMA READs from the server's memory.
func BenchmarkRDMARead(b *testing.B) { benchOps(b, rdmacm.OpRead) }

func benchOps(b *testing.B, op rdmacm.Opcode) {
	rdmatest.RequireAddr(b)
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) { benchOp(b, op, sz.size) })
	}
}

func benchOp(b *testing.B, op rdmacm.Opcode, size int) {
	addr := rdmatest.RequireAddr(b)
	const depth = benchTxDepth // for READs: = the initiator depth asked for
	o := pairOpts{
		arenaSize: 2 * size,
		access:    rdmacm.AccessRemoteRead | rdmacm.AccessRemoteWrite,
		sendWR:    benchTxDepth, recvWR: benchRxDepth, cqEntries: benchTxDepth + benchRxDepth,
		initDepth: rdmacm.MaxDepth, respRes: rdmacm.MaxDepth, // the device's maximum
	}
	if op == rdmacm.OpSend {
		o.srvSetup = func(e *end) error {
			wrs := make([]rdmacm.RecvWR, benchRxDepth)
			for i := range wrs {
				wrs[i].SetSGL(e.mem.SGE(0, size))
			}
			return e.qp.PostRecv(wrs)
		}
	}
	p := newPair(b, addr, o)

	// The server reposts receives as SENDs consume them.
	var stop atomic.Bool
	var wg sync.WaitGroup
	srvErr := make(chan error, 1)
	if op == rdmacm.OpSend {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wcs := make([]rdmacm.Completion, 64)
			recv := make([]rdmacm.RecvWR, 64)
			for !stop.Load() {
				n, err := p.srv.cq.Poll(wcs)
				if err != nil {
					srvErr <- err
					return
				}
				for i, c := range wcs[:n] {
					if c.Status != rdmacm.WCSuccess {
						srvErr <- c.Err()
						return
					}
					recv[i].SetSGL(p.srv.mem.SGE(0, size))
				}
				if err := p.srv.qp.PostRecv(recv[:n]); err != nil {
					srvErr <- err
					return
				}
				if n == 0 {
					runtime.Gosched()
				}
			}
		}()
	}

	wrs := make([]rdmacm.SendWR, benchBatch)
	for i := range wrs {
		wrs[i] = rdmacm.SendWR{Op: op, RemoteAddr: p.srv.mem.Addr(0), RKey: p.srv.mem.RKey()}
		wrs[i].SetSGL(p.cli.mem.SGE(0, size))
	}
	wrs[benchBatch-1].Flags = rdmacm.FlagSignaled
	wcs := make([]rdmacm.Completion, 32)

	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done+benchBatch <= depth {
			k := min(benchBatch, b.N-posted)
			batch := wrs[benchBatch-k:]
			batch[k-1].ID = uint64(k) // a signaled completion retires its batch
			if err := p.cli.qp.PostSend(batch); err != nil {
				b.Fatal(err)
			}
			posted += k
		}
		n, err := p.cli.cq.Poll(wcs)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range wcs[:n] {
			if c.Status != rdmacm.WCSuccess {
				b.Fatalf("after %d of %d: %v", done, b.N, c.Err())
			}
			done += int(c.ID)
		}
		if n == 0 {
			runtime.Gosched()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-srvErr:
		b.Fatal(fmt.Errorf("server: %w", err))
	default:
	}
}
