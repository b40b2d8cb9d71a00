package rdma

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// BenchmarkEngine drives the whole engine — poll group, request state machine, buffer
// pool, target core, backend — on the fake fabric with a host that keeps qd commands in
// flight on one I/O queue, as fio does. One op is one command: ns/op is the engine's CPU
// cost per I/O plus the fake fabric's (a copy per RDMA READ or WRITE), allocs/op must
// be 0 (the steady state allocates nothing). The poll group runs in event mode (it
// arms and sleeps when idle), the default.
//
// make test runs it as a regression guard (integration/bench/engine-guard.sh): every
// case at 0 allocs/op and under a generous ns/op bound.
func BenchmarkEngine(b *testing.B) {
	cases := []struct {
		name string
		op   uint8
		nsid uint32
		size int
		qd   int
		icd  bool // write data in the capsule
		srq  bool // the I/O queue on a shared receive queue
	}{
		{"randread-4k-qd1-null", nvmeproto.OpRead, 2, 4096, 1, false, false},
		{"randread-4k-qd32-null", nvmeproto.OpRead, 2, 4096, 32, false, false},
		{"randwrite-4k-qd32-null", nvmeproto.OpWrite, 2, 4096, 32, false, false},
		{"randwrite-4k-qd32-null-incapsule", nvmeproto.OpWrite, 2, 4096, 32, true, false},
		{"read-128k-qd16-null", nvmeproto.OpRead, 2, 128 << 10, 16, false, false},
		{"write-128k-qd16-null", nvmeproto.OpWrite, 2, 128 << 10, 16, false, false},
		{"randread-4k-qd32-memory", nvmeproto.OpRead, 1, 4096, 32, false, false},
		{"randwrite-4k-qd32-memory", nvmeproto.OpWrite, 1, 4096, 32, false, false},
		{"randread-4k-qd32-null-srq", nvmeproto.OpRead, 2, 4096, 32, false, true},
		{"randwrite-4k-qd32-null-incapsule-srq", nvmeproto.OpWrite, 2, 4096, 32, true, true},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			benchEngine(b, bc.op, bc.nsid, bc.size, bc.qd, bc.icd, bc.srq)
		})
	}
}

func benchEngine(b *testing.B, op uint8, nsid uint32, size, qd int, inCapsule, srq bool) {
	srqLimit := 0
	if srq {
		srqLimit = 256
	}
	e := newEngine(b, engineOpts{
		srq:      srqLimit,
		icd:      8192,
		poolSize: 8 << 20,
		spin:     DefaultSpin,
		nss: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendMemory, Size: 64 << 20},
			{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30},
		},
	})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 128)
	var done atomic.Int64
	io.ep.mu.Lock()
	io.ep.onResp = func([]byte) { done.Add(1) }
	io.ep.mu.Unlock()

	// One capsule per slot, each with its own command ID and host buffer.
	const lba = 512
	nlb := size / lba
	capsules := make([][]byte, qd)
	for i := range capsules {
		slba := uint64(i * nlb)
		c := rw(op, nsid, slba, nlb)
		c.CID = uint16(i)
		c.Flags = nvmeproto.PSDTSGL << 6
		icd := 0
		if inCapsule && op == nvmeproto.OpWrite {
			icd = size
			c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeDataBlock, Subtype: nvmeproto.SGLSubtypeOffset, Length: uint32(size)}
		} else {
			c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Subtype: nvmeproto.SGLSubtypeAddress,
				Address: io.ep.hostBase + uint64(i*size), Length: uint32(size), Key: io.ep.hostKey}
		}
		capsules[i] = make([]byte, nvmeproto.SQESize+icd)
		c.Marshal(capsules[i])
	}
	if len(io.ep.hostMem) < qd*size {
		b.Fatalf("host memory %d bytes < %d", len(io.ep.hostMem), qd*size)
	}

	// run completes n commands with at most qd in flight, sending the next capsule as soon
	// as a slot frees (from this goroutine: the fake fabric delivers responses on the poll
	// group's goroutine, inside its post).
	var sent int64
	run := func(n int64) {
		target := sent + n
		for done.Load() < target {
			for sent < target && sent-done.Load() < int64(qd) {
				if io.ep.hostSend(capsules[sent%int64(qd)]) != nil {
					break // receiver not ready: a receive is reposted once a command completes
				}
				sent++
			}
			runtime.Gosched()
		}
	}
	run(int64(4 * qd * 16)) // warm up: pool free lists, lazily bound callbacks
	runtime.GC()            // the set-up's garbage: not the I/O's
	polls0, sleeps0 := e.g.stats.polls.Load(), e.g.stats.sleeps.Load()
	gc0 := gcCycles()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(int64(b.N))
	b.StopTimer()
	// Garbage collections during the I/O: none when nothing allocates, so GOGC and
	// GOMEMLIMIT cannot touch the I/O path's latency.
	b.ReportMetric(float64(gcCycles()-gc0), "gcs")
	b.ReportMetric(float64(e.g.stats.polls.Load()-polls0)/float64(b.N), "polls/op")
	b.ReportMetric(float64(e.g.stats.sleeps.Load()-sleeps0)/float64(b.N), "sleeps/op")
}

// gcCycles returns how many garbage collections the process has completed.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
