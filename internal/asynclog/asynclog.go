// Package asynclog decouples log writers from the log's destination: a Writer takes each
// line into a bounded buffer and a goroutine of its own writes the buffer to the sink, so
// that a slow sink (journald under back-pressure, a full pipe, a network filesystem) never
// stalls the goroutine that logged. gonvmf's poll groups log connects and refusals from the
// threads that also serve every other queue in the group; with a synchronous handler one
// slow write held up the I/O of all of them.
//
// The contract: Write copies p and returns at once; p reaches the sink whole (one Write
// call of the sink's may carry several lines, never part of one) and in the order of the
// Writes. When the buffer is full Write drops p and counts it; when the goroutine next
// takes the buffer it calls the Writer's report with the count and a writer for the report,
// whose lines go to the sink after that batch, outside the bounded buffer: a report is
// never dropped, so every dropped line is counted in one (once the sink moves), and the
// report lands after the lines that preceded the drops.
// Flush waits for what was written before it; Close flushes and stops the goroutine, after
// which Write writes to the sink directly — once the goroutine has written everything
// accepted before (until then Writes are still buffered, so a sink that is stuck when a
// bounded Close gives up stalls no caller, and the order holds).
package asynclog

import (
	"bytes"
	"context"
	"io"
	"sync"
)

// DefaultSize is the buffer of a Writer that is not given one: a few thousand lines of
// gonvmf's log.
const DefaultSize = 512 << 10

// Writer is an io.Writer that hands what it is given to a sink from a goroutine of its own.
// Create it with New. It is safe for concurrent use.
type Writer struct {
	sink   io.Writer
	report func(w io.Writer, lines, bytes uint64)
	rep    bytes.Buffer // the goroutine's: report's lines for the batch being written

	sinkMu sync.Mutex // serialises the sink's writes: the goroutine's and those after Close

	mu       sync.Mutex
	pending  []byte        // lines not yet taken by the goroutine; cap fixed at New
	spare    []byte        // the goroutine's batch buffer between batches
	seq      uint64        // Writes accepted; each left a token in wake or is in a batch
	written  uint64        // of them, the ones the sink has returned from
	batchEnd chan struct{} // closed when the batch being written has been
	dropped  uint64        // lines dropped since the last report
	dropB    uint64        // their bytes
	total    uint64        // lines dropped since New
	closed   bool          // Close was called: the goroutine writes what is pending, then stops
	direct   bool          // the goroutine has stopped with nothing pending: Write goes to the sink

	wake chan struct{} // capacity 1: a batch is pending
	stop chan struct{}
	done chan struct{}
}

// New starts a Writer that writes to sink through a buffer of size bytes (DefaultSize if
// size <= 0). report, if not nil, is called from the Writer's goroutine with the lines and
// bytes dropped since its last call; what it writes to w (a log line about the loss, in
// the log's format) goes to the sink right after the batch taken with the count. It must
// write its report to w, not to the Writer, whose buffer may be full again.
func New(sink io.Writer, size int, report func(w io.Writer, lines, bytes uint64)) *Writer {
	if size <= 0 {
		size = DefaultSize
	}
	w := &Writer{
		sink:     sink,
		report:   report,
		pending:  make([]byte, 0, size),
		spare:    make([]byte, 0, size),
		batchEnd: make(chan struct{}),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go w.run()
	return w
}

// Write takes a copy of p for the sink, or drops it when the buffer cannot hold it. It
// never waits for the sink (but after Close, once the goroutine has stopped, when it writes
// to the sink itself), and it reports success either way: dropping is the Writer's policy,
// not the caller's error.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.direct {
		w.mu.Unlock()
		w.sinkMu.Lock()
		defer w.sinkMu.Unlock()
		return w.sink.Write(p)
	}
	if len(w.pending)+len(p) > cap(w.pending) {
		w.dropped++
		w.total++
		w.dropB += uint64(len(p))
		w.mu.Unlock()
		// A line larger than the whole buffer is dropped with nothing pending: the
		// goroutine still has a report to write.
		select {
		case w.wake <- struct{}{}:
		default:
		}
		return len(p), nil
	}
	w.pending = append(w.pending, p...)
	w.seq++
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// Dropped returns the lines dropped since New.
func (w *Writer) Dropped() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// Flush waits until everything written before it has reached the sink, or ctx is done
// (then it returns ctx's error).
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	target := w.seq
	for w.written < target && !w.direct {
		ch := w.batchEnd
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	return nil
}

// Close flushes (bounded by ctx), stops the goroutine and makes later Writes go to the sink
// directly. It returns Flush's error; the goroutine stops once a sink that is stuck
// returns.
func (w *Writer) Close(ctx context.Context) error {
	err := w.Flush(ctx)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return err
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	if err == nil {
		select {
		case <-w.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	return err
}

// run writes batches until Close: it swaps the pending buffer for its spare, so that
// Writes go on into an empty buffer while it writes the batch. After Close it writes
// until nothing is pending, then hands the sink to Write (direct).
func (w *Writer) run() {
	defer close(w.done)
	for {
		select {
		case <-w.wake:
		case <-w.stop:
			for {
				w.writeBatch() // what was accepted before, and since, Close
				w.mu.Lock()
				if len(w.pending) == 0 && w.dropped == 0 {
					w.direct = true
					w.mu.Unlock()
					return
				}
				w.mu.Unlock()
			}
		}
		w.writeBatch()
	}
}

// writeBatch writes what is pending, then the report of the lines dropped since the last
// batch: the drops were counted while the lines of this batch were pending, and the lines
// accepted after the count go to the next batch, after the report.
func (w *Writer) writeBatch() {
	w.mu.Lock()
	batch := w.pending
	w.pending = w.spare[:0]
	end := w.seq
	lines, dropB := w.dropped, w.dropB
	w.dropped, w.dropB = 0, 0
	w.mu.Unlock()
	w.rep.Reset()
	if lines > 0 && w.report != nil {
		w.report(&w.rep, lines, dropB)
	}

	if len(batch) > 0 || w.rep.Len() > 0 {
		w.sinkMu.Lock()
		if len(batch) > 0 {
			w.sink.Write(batch) //nolint:errcheck // as slog: a log sink's error has nowhere to go
		}
		if w.rep.Len() > 0 {
			w.sink.Write(w.rep.Bytes()) //nolint:errcheck // as above
		}
		w.sinkMu.Unlock()
	}

	w.mu.Lock()
	w.spare = batch[:0]
	w.written = end
	close(w.batchEnd)
	w.batchEnd = make(chan struct{})
	w.mu.Unlock()
}
