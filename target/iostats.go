package target

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// I/O accounting. Every I/O command that reached a namespace is counted when it
// completes (Queue.complete), in the namespace's own memory: commands and bytes by class,
// errors by class and status, and — while the Target measures latency (MeasureLatency) —
// a histogram of the time from Begin to completion. The counters are sharded: a queue
// counts into one shard (SetCounterShard; round robin by default), so queues served by
// different CPUs never write the same cache line, and the I/O path takes no lock and
// allocates nothing. Readers (Namespaces, the SMART log, a metrics scrape) sum the shards.
// A namespace's counters live and die with it: removing a namespace drops them, and one
// added again under the same NSID counts from zero.

// IOClass is the class an I/O command is counted in.
type IOClass uint8

// I/O classes. Compare counts as a read, as the SMART log counts it (its data is read
// from the namespace); Write Zeroes and Dataset Management are "other".
const (
	IORead IOClass = iota
	IOWrite
	IOFlush
	IOOther
	NumIOClasses
)

var ioClassNames = [NumIOClasses]string{"read", "write", "flush", "other"}

// String returns the class's name: read, write, flush or other.
func (c IOClass) String() string {
	if c < NumIOClasses {
		return ioClassNames[c]
	}
	return "unknown"
}

// ioClassOf classifies an I/O queue opcode.
func ioClassOf(opcode uint8) IOClass {
	switch opcode {
	case nvmeproto.OpRead, nvmeproto.OpCompare:
		return IORead
	case nvmeproto.OpWrite:
		return IOWrite
	case nvmeproto.OpFlush:
		return IOFlush
	}
	return IOOther
}

// Latency histograms: bucket i (0 ≤ i < LatencyBuckets) counts latencies in
// (LatencyBound(i-1), LatencyBound(i)], the bounds doubling from 10 µs to about 10.5 s;
// one more bucket counts what is longer.
const (
	LatencyBuckets = 21
	latencyBase    = 10 * time.Microsecond
)

// LatencyBound returns the upper bound of latency bucket i: 10 µs × 2^i.
func LatencyBound(i int) time.Duration { return latencyBase << i }

// latencyBucket returns the bucket of a latency of d nanoseconds.
func latencyBucket(d int64) int {
	if d <= int64(latencyBase) {
		return 0
	}
	return min(bits.Len64(uint64(d-1)/uint64(latencyBase)), LatencyBuckets)
}

// LatencyHistogram is a latency distribution: Buckets[i] counts the latencies in
// (LatencyBound(i-1), LatencyBound(i)] (not cumulative), Buckets[LatencyBuckets] those
// above the last bound.
type LatencyHistogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets [LatencyBuckets + 1]uint64
}

// Quantile estimates the q-quantile (0 < q ≤ 1) as the upper bound of the bucket it falls
// in (0 with no samples; the last bound doubled beyond it).
func (h *LatencyHistogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(q*float64(h.Count) + 0.5)
	rank = max(rank, 1)
	var n uint64
	for i, c := range h.Buckets {
		n += c
		if n >= rank {
			return LatencyBound(i)
		}
	}
	return LatencyBound(LatencyBuckets)
}

// Mean is the average latency (0 with no samples).
func (h *LatencyHistogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.Count)
}

// IOCounters count one class of a namespace's I/O commands.
type IOCounters struct {
	// Commands completed, errors included.
	Commands uint64
	// Errors: commands completed with a status other than success.
	Errors uint64
	// Bytes moved by the successful commands (reads and writes; Compare counts as a read).
	Bytes uint64
	// Latency of the commands completed while the target measured it (MeasureLatency):
	// from Begin to the completion handed to the transport.
	Latency LatencyHistogram
}

// ErrorCount counts the commands of one class completed with one status (its Code: DNR,
// More and CRD are not told apart).
type ErrorCount struct {
	Class  IOClass
	Status nvmeproto.Status
	Count  uint64
}

// classStats are one shard's counters of one class.
type classStats struct {
	ok      atomic.Uint64 // successful commands
	bytes   atomic.Uint64 // bytes the successful ones moved
	latency atomic.Uint64 // sum of the latencies measured, ns
	buckets [LatencyBuckets + 1]atomic.Uint64
}

// ioShard is one shard of a namespace's counters. The padding keeps two shards' counters
// at least a cache line apart, wherever the array starts.
type ioShard struct {
	c [NumIOClasses]classStats
	_ [64]byte
}

// statShards is how many shards a namespace's counters have. Queues of one poll group
// share one (SetCounterShard); more poll groups than shards share shards.
const statShards = 16

// count records the completion of r, an I/O command on namespace ns, with status st, in
// shard shard.
func (ns *namespace) count(shard uint8, r *Request, st nvmeproto.Status) {
	cl := ioClassOf(r.Cmd.Opcode)
	s := &ns.stats[shard%statShards].c[cl]
	if st.Code() == nvmeproto.StatusSuccess {
		s.ok.Add(1)
		if cl <= IOWrite {
			s.bytes.Add(uint64(r.Length))
		}
	} else {
		ns.errs.add(cl, st)
	}
	if r.start != 0 {
		d := nanotime() - r.start
		s.buckets[latencyBucket(d)].Add(1)
		s.latency.Add(uint64(d))
	}
}

// counters sums the shards.
func (ns *namespace) counters() (out [NumIOClasses]IOCounters, errs []ErrorCount) {
	for i := range ns.stats {
		for cl := range NumIOClasses {
			s := &ns.stats[i].c[cl]
			o := &out[cl]
			o.Commands += s.ok.Load()
			o.Bytes += s.bytes.Load()
			o.Latency.Sum += time.Duration(s.latency.Load())
			for b := range s.buckets {
				n := s.buckets[b].Load()
				o.Latency.Buckets[b] += n
				o.Latency.Count += n
			}
		}
	}
	errs = ns.errs.snapshot()
	for _, e := range errs {
		out[e.Class].Commands += e.Count
		out[e.Class].Errors += e.Count
	}
	return out, errs
}

// totals sums the successful reads and writes and their 512-byte units: the SMART log's
// counters.
func (ns *namespace) totals() (readCmds, writeCmds, readUnits, writeUnits uint64) {
	for i := range ns.stats {
		r, w := &ns.stats[i].c[IORead], &ns.stats[i].c[IOWrite]
		readCmds += r.ok.Load()
		writeCmds += w.ok.Load()
		readUnits += r.bytes.Load() / dataUnitBytes
		writeUnits += w.bytes.Load() / dataUnitBytes
	}
	return
}

// errorCounts counts error completions by class and status in a small lock-free table:
// a slot's key is claimed once (compare-and-swap), in slot order, and never changes.
// (class, status) pairs beyond the table's room are counted per class in overflow
// (reported as ErrorOverflow). Errors are rare, so the table is not sharded.
type errorCounts struct {
	keys     [errorSlots]atomic.Uint32 // errorKey; 0: free
	counts   [errorSlots]atomic.Uint64
	overflow [NumIOClasses]atomic.Uint64
}

const errorSlots = 32

// ErrorOverflow is the Status of an ErrorCount that lumps together the statuses a
// full error table had no room for.
const ErrorOverflow nvmeproto.Status = 0xFFFF

func errorKey(cl IOClass, st nvmeproto.Status) uint32 {
	return 1<<31 | uint32(cl)<<16 | uint32(st.Code())
}

func (e *errorCounts) add(cl IOClass, st nvmeproto.Status) {
	key := errorKey(cl, st)
	for i := range e.keys {
		k := e.keys[i].Load()
		if k == 0 && e.keys[i].CompareAndSwap(0, key) {
			k = key
		} else if k == 0 {
			k = e.keys[i].Load() // another completion claimed it first
		}
		if k == key {
			e.counts[i].Add(1)
			return
		}
	}
	e.overflow[cl%NumIOClasses].Add(1)
}

// snapshot returns the counts, sorted by class and status.
func (e *errorCounts) snapshot() []ErrorCount {
	var out []ErrorCount
	for i := range e.keys {
		k := e.keys[i].Load()
		if k == 0 {
			break // slots are claimed in order
		}
		if n := e.counts[i].Load(); n > 0 {
			out = append(out, ErrorCount{Class: IOClass(k >> 16 & 0xFF), Status: nvmeproto.Status(k & 0xFFFF), Count: n})
		}
	}
	for cl := range e.overflow {
		if n := e.overflow[cl].Load(); n > 0 {
			out = append(out, ErrorCount{Class: IOClass(cl), Status: ErrorOverflow, Count: n})
		}
	}
	slices.SortFunc(out, func(a, b ErrorCount) int {
		return cmp.Or(cmp.Compare(a.Class, b.Class), cmp.Compare(a.Status, b.Status))
	})
	return out
}

// StatusLabel is the status label of an NVMe status: its name in the NVM command set in
// snake_case ("lba_out_of_range"), "sct_N_sc_0xNN" for a status without a name, and
// "other" for ErrorOverflow.
func StatusLabel(st nvmeproto.Status) string {
	if st == ErrorOverflow {
		return "other"
	}
	name := st.Code().NameNVM()
	if name == "" {
		return fmt.Sprintf("sct_%d_sc_%#02x", uint8(st.SCT()), st.SC())
	}
	var b strings.Builder
	sep := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if sep && b.Len() > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
			sep = false
		} else {
			sep = true
		}
	}
	return b.String()
}

// clockBase anchors nanotime; time.Since of a time with a monotonic reading reads only the
// monotonic clock.
var clockBase = time.Now()

// nanotime is a monotonic clock in nanoseconds, never 0.
func nanotime() int64 { return int64(time.Since(clockBase)) + 1 }

// MeasureLatency turns the latency histograms of namespace I/O on or off (off by
// default). Measuring reads the clock twice per I/O command — a few tens of nanoseconds
// with the vDSO, a system call each where the clock source has none (emulated guests) —
// so it is on only when someone looks: package target/metrics turns it on.
func (t *Target) MeasureLatency(on bool) { t.timing.Store(on) }

// SetCounterShard makes the queue count its I/O in counter shard i (of every namespace).
// Queues whose commands one goroutine begins and completes (an RDMA poll group) should
// share a shard, so that no two CPUs write one cache line; without it queues take shards
// round robin. Call it before the queue's first command.
func (q *Queue) SetCounterShard(i int) { q.shard = uint8(uint(i) % statShards) }
