package rdma

import (
	"sync/atomic"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Counters kept for metrics (package target/metrics), apart from the engine's own
// groupStats: each is written by one goroutine or off the I/O path, and read when a
// scrape or gonvmf ctl stats asks (GroupStats, Rejects).

// groupMetrics are a poll group's counters beyond groupStats; only its goroutine writes
// them.
type groupMetrics struct {
	// idlePolls counts the rounds that found nothing to do: no completion, no command
	// the core completed, no connection event, no buffer to hand out.
	idlePolls atomic.Uint64
	// responseTimeouts and shareReclaims count the connections the watchdog tore down
	// (watchdog.go): errResponseTimeout and errHoldingBuffers.
	responseTimeouts, shareReclaims atomic.Uint64
	// forcedDrains counts the closing connections whose work requests the device did
	// not flush within drainTimeout (conn.forceDrain; the log says which). Tests check it.
	forcedDrains atomic.Uint64
	// probes counts the watchdog's zero-length RDMA WRITEs behind the unsignaled
	// responses of a quiet connection (conn.probe). Tests check it.
	probes atomic.Uint64
	// shard is the namespace counter shard of the group's queues (target.Queue.
	// SetCounterShard): the group's goroutine begins and, for memory, null and
	// asynchronous I/O, completes their commands, so they share one.
	shard int
}

// transportMetrics are the transport's counters for metrics.
type transportMetrics struct {
	// rejects counts the connection requests rejected, by nvme-rdma status (index 0: a
	// status outside the table).
	rejects [numRejectStatuses]atomic.Uint64
	groups  atomic.Int32 // poll groups created, numbering their counter shards
}

const numRejectStatuses = int(nvmeproto.RDMARejectInvalidCNTLID) + 1

func (m *transportMetrics) reject(st nvmeproto.RDMARejectStatus) {
	i := int(st)
	if i >= numRejectStatuses {
		i = 0
	}
	m.rejects[i].Add(1)
}

// RejectCount counts the connection requests rejected with one nvme-rdma status.
type RejectCount struct {
	Status nvmeproto.RDMARejectStatus // 0: any status outside the specification's
	Reason string                     // the status in snake_case, a metrics label value
	Count  uint64
}

var rejectReasons = [numRejectStatuses]string{
	"other", "invalid_private_data_length", "invalid_recfmt", "invalid_qid", "invalid_hsqsize",
	"invalid_hrqsize", "no_resources", "invalid_ird", "invalid_ord", "invalid_cntlid",
}

// Rejects returns how many connection requests the transport rejected since it started,
// for every nvme-rdma reject status (zeros included, so that a metric exists before its
// first reject).
func (tr *Transport) Rejects() []RejectCount {
	out := make([]RejectCount, 0, numRejectStatuses)
	for i := 1; i <= numRejectStatuses; i++ {
		j := i % numRejectStatuses // "other" last
		out = append(out, RejectCount{Status: nvmeproto.RDMARejectStatus(j), Reason: rejectReasons[j], Count: tr.m.rejects[j].Load()})
	}
	return out
}
