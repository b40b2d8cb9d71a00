package perf

import (
	"fmt"
	"io"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/gonvmf/gonvmf/initiator"
)

// Result is what a run measured: printed as a table by Print, or encoded as JSON (gonvmf
// perf --json) with the tagged field names.
type Result struct {
	Workload   string        `json:"workload"`
	RWMixRead  int           `json:"rwmixread,omitempty"`
	BlockSize  int           `json:"block_size"`
	QueueDepth int           `json:"queue_depth"`
	Queues     int           `json:"queues"`
	Target     string        `json:"target"`
	SubNQN     string        `json:"subnqn"`
	NSID       uint32        `json:"nsid"`
	Offset     int64         `json:"offset"`
	Size       int64         `json:"size"`
	Seed       uint64        `json:"seed"`
	RuntimeS   float64       `json:"runtime_s"`
	CPUPercent float64       `json:"cpu_percent"` // perf's own CPU time over the run, % of one CPU
	Read       *DirResult    `json:"read,omitempty"`
	Write      *DirResult    `json:"write,omitempty"`
	Total      DirResult     `json:"total"`
	Verify     *VerifyResult `json:"verify,omitempty"`
	Error      string        `json:"error,omitempty"`
}

// DirResult is one direction's (or the total's) I/Os, bytes, rates and latency.
type DirResult struct {
	IOs   uint64  `json:"ios"`
	Bytes uint64  `json:"bytes"`
	IOPS  float64 `json:"iops"`
	MiBps float64 `json:"mib_s"`
	Lat   Latency `json:"lat_us"`
}

// Latency holds completion latencies in microseconds, measured from submission.
type Latency struct {
	Min  float64 `json:"min"`
	Avg  float64 `json:"avg"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

// VerifyResult reports a verifying run: blocks checked and those that did not read back
// as written (the first ten described in First).
type VerifyResult struct {
	PrefillS   float64  `json:"prefill_s,omitempty"`
	ReadBack   bool     `json:"read_back"`
	Checked    uint64   `json:"blocks_checked"`
	Mismatches uint64   `json:"mismatches"`
	Unstamped  uint64   `json:"unstamped"` // mismatches without a perf stamp (never written, or dropped)
	First      []string `json:"first_mismatches,omitempty"`
}

func newDirResult(h *histogram, ios, bytes uint64, elapsed time.Duration) DirResult {
	s := elapsed.Seconds()
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	d := DirResult{IOs: ios, Bytes: bytes}
	if s > 0 {
		d.IOPS = float64(ios) / s
		d.MiBps = float64(bytes) / s / (1 << 20)
	}
	d.Lat = Latency{Min: us(h.min), Avg: h.mean() / 1e3, P50: us(h.percentile(50)), P90: us(h.percentile(90)),
		P99: us(h.percentile(99)), P999: us(h.percentile(99.9)), Max: us(h.max)}
	return d
}

// collect merges the workers' statistics.
func (res *Result) collect(r *perfState, elapsed time.Duration, cpu time.Duration) {
	var h [2]histogram
	var all histogram
	var ios, bytes [2]uint64
	for _, w := range r.workers {
		w.mu.Lock()
		for d := range 2 {
			h[d].merge(&w.stats[d].hist)
			all.merge(&w.stats[d].hist)
			ios[d] += w.stats[d].ios
			bytes[d] += w.stats[d].bytes
		}
		w.mu.Unlock()
	}
	res.RuntimeS = elapsed.Seconds()
	if elapsed > 0 {
		res.CPUPercent = 100 * cpu.Seconds() / elapsed.Seconds()
	}
	if r.pc.hasRead() {
		d := newDirResult(&h[0], ios[0], bytes[0], elapsed)
		res.Read = &d
	}
	if r.pc.hasWrite() {
		d := newDirResult(&h[1], ios[1], bytes[1], elapsed)
		res.Write = &d
	}
	res.Total = newDirResult(&all, ios[0]+ios[1], bytes[0]+bytes[1], elapsed)
}

func (res *Result) printHeader(w io.Writer, pc *Config, ns *initiator.Namespace) {
	mix := ""
	if res.RWMixRead > 0 {
		mix = fmt.Sprintf(" (%d%% reads)", res.RWMixRead)
	}
	limit := pc.Runtime.String()
	if pc.IOs > 0 {
		limit = fmt.Sprintf("%d I/Os", pc.IOs)
		if pc.Runtime > 0 {
			limit += " or " + pc.Runtime.String()
		}
	}
	verify := ""
	if pc.Verify {
		verify = ", verify"
	}
	fmt.Fprintf(w, "perf: %s%s, %s blocks, queue depth %d x %d queue(s), %s%s\n", res.Workload, mix,
		humanize.IBytes(uint64(res.BlockSize)), res.QueueDepth, res.Queues, limit, verify)
	fmt.Fprintf(w, "perf: %s %s namespace %d (%s, %d-byte blocks), range %s at offset %d\n", res.Target, res.SubNQN,
		ns.NSID, humanize.IBytes(uint64(ns.Size())), ns.BlockSize(), humanize.IBytes(uint64(res.Size)), res.Offset)
}

// Print writes res as a table (latencies in microseconds), the verify summary and the
// error, if any.
func (res *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "\n%-6s %12s %10s %12s %9s %9s %9s %9s %9s %9s  (latency in us)\n",
		"", "IOPS", "MiB/s", "I/Os", "avg", "p50", "p90", "p99", "p99.9", "max")
	line := func(name string, d *DirResult) {
		fmt.Fprintf(w, "%-6s %12.1f %10.2f %12d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", name, d.IOPS, d.MiBps, d.IOs,
			d.Lat.Avg, d.Lat.P50, d.Lat.P90, d.Lat.P99, d.Lat.P999, d.Lat.Max)
	}
	if res.Read != nil {
		line("read", res.Read)
	}
	if res.Write != nil {
		line("write", res.Write)
	}
	if res.Read != nil && res.Write != nil {
		line("total", &res.Total)
	}
	fmt.Fprintf(w, "\nruntime %.2fs, perf CPU %.0f%% of one core\n", res.RuntimeS, res.CPUPercent)
	if v := res.Verify; v != nil {
		fmt.Fprintf(w, "verify: %d blocks checked", v.Checked)
		if v.ReadBack {
			fmt.Fprintf(w, " (including a read-back of the whole range)")
		}
		fmt.Fprintf(w, ", %d mismatches\n", v.Mismatches)
		for _, m := range v.First {
			fmt.Fprintf(w, "  %s\n", m)
		}
	}
	if res.Error != "" {
		fmt.Fprintf(w, "error: %s\n", res.Error)
	}
}
