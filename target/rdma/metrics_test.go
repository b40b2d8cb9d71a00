package rdma

import (
	"runtime"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// TestRejectCounts: every nvme-rdma reject status has a reason label, in status order
// with "other" last, and counts once per reject.
func TestRejectCounts(t *testing.T) {
	tr := &Transport{}
	tr.m.reject(nvmeproto.RDMARejectInvalidHSQSize)
	tr.m.reject(nvmeproto.RDMARejectNoResources)
	tr.m.reject(nvmeproto.RDMARejectNoResources)
	tr.m.reject(0x77)
	got := tr.Rejects()
	if len(got) != numRejectStatuses {
		t.Fatalf("%d reasons: %+v", len(got), got)
	}
	want := map[string]uint64{"invalid_hsqsize": 1, "no_resources": 2, "other": 1}
	for i, r := range got {
		if r.Count != want[r.Reason] {
			t.Errorf("%s (%v): %d, want %d", r.Reason, r.Status, r.Count, want[r.Reason])
		}
		if i < len(got)-1 && int(r.Status) != i+1 {
			t.Errorf("entry %d is status %v", i, r.Status)
		}
	}
	if got[len(got)-1].Reason != "other" || got[0].Reason != "invalid_private_data_length" {
		t.Errorf("order %+v", got)
	}
}

// TestEngineCountsIO: I/O through the engine on the fake fabric lands in the namespace's
// counters and latency histogram, and an idle poll group counts idle polls.
func TestEngineCountsIO(t *testing.T) {
	e := newEngine(t, engineOpts{spin: 100})
	e.tgt.MeasureLatency(true)
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	for i := range 4 {
		c, _ := io.h.exec(rw(nvmeproto.OpWrite, 1, uint64(i*8), 8), make([]byte, 4096), 4096)
		expectOK(t, "write", c)
	}
	c, _ := io.h.exec(rw(nvmeproto.OpRead, 1, 0, 8), nil, 4096)
	expectOK(t, "read", c)
	ns := e.tgt.Namespaces()[0]
	if r, w := ns.IO[target.IORead], ns.IO[target.IOWrite]; r.Commands != 1 || w.Commands != 4 || w.Bytes != 4*4096 ||
		r.Latency.Count != 1 || w.Latency.Count != 4 {
		t.Errorf("counters %+v", ns.IO)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.g.m.idlePolls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e.g.m.idlePolls.Load() == 0 || e.g.m.idlePolls.Load() > e.g.stats.polls.Load() {
		t.Errorf("idle polls %d of %d polls", e.g.m.idlePolls.Load(), e.g.stats.polls.Load())
	}
	e.closeAll(io, a)
}

// BenchmarkEngineMetrics is BenchmarkEngineReadWrite4K (a 4 KiB write then a 4 KiB read
// per iteration through the whole engine on the fake fabric) with the latency histograms
// off (the counters only, as without metrics) and on (metrics served): the I/O path's
// cost of metrics, and its allocations (none).
func BenchmarkEngineMetrics(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "latency=off"
		if on {
			name = "latency=on"
		}
		b.Run(name, func(b *testing.B) {
			e := newEngine(b, engineOpts{nss: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}})
			e.tgt.MeasureLatency(on)
			_, cntlid := e.adminConnect(0)
			io := e.ioConnect(1, cntlid, 16)
			resp := make(chan struct{}, 1)
			io.ep.onResp = func([]byte) { resp <- struct{}{} }
			mk := func(op uint8) []byte {
				c := rw(op, 1, 8, 8)
				c.Flags = nvmeproto.PSDTSGL << 6
				c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Address: io.ep.hostBase, Length: 4096, Key: io.ep.hostKey}
				b := make([]byte, 64)
				c.Marshal(b)
				return b
			}
			wr, rd := mk(nvmeproto.OpWrite), mk(nvmeproto.OpRead)
			one := func(capsule []byte) {
				for io.ep.hostSend(capsule) != nil {
					runtime.Gosched()
				}
				<-resp
			}
			for range 100 {
				one(wr)
				one(rd)
			}
			b.ReportAllocs()
			b.SetBytes(2 * 4096)
			cpu0 := testutil.CPUTime()
			b.ResetTimer()
			for b.Loop() {
				one(wr)
				one(rd)
			}
			testutil.ReportCPU(b, cpu0)
			b.StopTimer()
			if ns := e.tgt.Namespaces()[0]; ns.IO[target.IOWrite].Commands < uint64(b.N) || (on && ns.IO[target.IORead].Latency.Count < uint64(b.N)) {
				b.Errorf("counted %+v for %d iterations", ns.IO, b.N)
			}
		})
	}
}
