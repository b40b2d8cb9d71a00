package asynclog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedSink records what it is given; while its gate is closed a Write waits for it to open.
type gatedSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	entered chan struct{} // a Write has started (capacity 1)
	gate    chan struct{} // receives one token per Write while gated; nil: open
}

func newGatedSink(gated bool) *gatedSink {
	s := &gatedSink{entered: make(chan struct{}, 1)}
	if gated {
		s.gate = make(chan struct{})
	}
	return s
}

func (s *gatedSink) Write(p []byte) (int, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *gatedSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// within fails the test if f does not return within 10 s: a Write that waited for a
// stuck sink would never return.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return while the sink was stuck", what)
	}
}

// TestWriteDoesNotWaitForSink: with the sink stuck in a write, Writes return at once, fill
// the buffer and are then dropped and counted; once the sink moves, the accepted lines
// arrive whole and in order, and the report counts the dropped ones.
func TestWriteDoesNotWaitForSink(t *testing.T) {
	sink := newGatedSink(true)
	var mu sync.Mutex
	var dropLines, dropBytes uint64
	w := New(sink, 64, func(_ io.Writer, lines, bytes uint64) {
		mu.Lock()
		dropLines += lines
		dropBytes += bytes
		mu.Unlock()
	})
	within(t, "the first Write", func() { w.Write([]byte("line-00\n")) })
	<-sink.entered // the goroutine holds line 0 and waits for the sink
	within(t, "Writes to a full buffer", func() {
		for i := 1; i <= 20; i++ {
			fmt.Fprintf(w, "line-%02d\n", i)
		}
	})
	// 64 bytes hold eight 8-byte lines: 1–8 are kept, 9–20 dropped.
	if got := w.Dropped(); got != 12 {
		t.Errorf("Dropped() = %d while the sink is stuck, want 12", got)
	}
	close(sink.gate)
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 0; i <= 8; i++ {
		fmt.Fprintf(&want, "line-%02d\n", i)
	}
	if got := sink.String(); got != want.String() {
		t.Errorf("sink got\n%s\nwant\n%s", got, want.String())
	}
	mu.Lock()
	if dropLines != 12 || dropBytes != 12*8 {
		t.Errorf("the report counted %d lines, %d bytes; want 12, 96", dropLines, dropBytes)
	}
	mu.Unlock()
	// The buffer is free again.
	w.Write([]byte("line-21\n"))
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sink.String(); !strings.HasSuffix(got, "line-08\nline-21\n") {
		t.Errorf("after the sink recovered, got\n%s", got)
	}
}

// TestFlushBoundedByContext: Flush gives up with ctx's error while the sink is stuck and
// succeeds once it moves; Close stops the goroutine and later Writes go to the sink directly.
func TestFlushBoundedByContext(t *testing.T) {
	sink := newGatedSink(true)
	w := New(sink, 0, nil)
	w.Write([]byte("a\n"))
	<-sink.entered // a is in the goroutine's batch; b will be the next one
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with the sink stuck: %v, want %v", err, context.DeadlineExceeded)
	}
	w.Write([]byte("b\n"))
	sink.gate <- struct{}{} // a\n
	sink.gate <- struct{}{} // b\n
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	default:
		t.Error("Close returned before the goroutine stopped")
	}
	go func() { sink.gate <- struct{}{} }()
	w.Write([]byte("c\n")) // direct: returns once the sink has it
	if got := sink.String(); got != "a\nb\nc\n" {
		t.Errorf("sink got %q, want %q", got, "a\nb\nc\n")
	}
}

// TestCloseAfterStuckFlush: a Close whose flush gives up still marks the Writer closed.
func TestCloseAfterStuckFlush(t *testing.T) {
	sink := newGatedSink(true)
	w := New(sink, 0, nil)
	w.Write([]byte("a\n"))
	<-sink.entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with the sink stuck: %v", err)
	}
	close(sink.gate)
	<-w.done
	w.Write([]byte("b\n"))
	if got := sink.String(); got != "a\nb\n" {
		t.Errorf("sink got %q", got)
	}
}

// TestConcurrentLoggersKeepLinesWhole: slog loggers on many goroutines share a Writer; every
// line arrives whole, once, and each goroutine's lines in its order.
func TestConcurrentLoggersKeepLinesWhole(t *testing.T) {
	sink := newGatedSink(false)
	w := New(sink, 0, nil)
	log := slog.New(slog.NewTextHandler(w, nil))
	const goroutines, lines = 8, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				log.Info("connect", "g", g, "i", i, "pad", strings.Repeat("x", 40))
			}
		}()
	}
	wg.Wait()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := w.Dropped(); d != 0 {
		t.Fatalf("%d lines dropped with an open sink and a %d-byte buffer", d, DefaultSize)
	}
	next := make([]int, goroutines)
	got := strings.Split(strings.TrimSuffix(sink.String(), "\n"), "\n")
	if len(got) != goroutines*lines {
		t.Fatalf("%d lines, want %d", len(got), goroutines*lines)
	}
	for _, l := range got {
		var g, i int
		if _, err := fmt.Sscanf(l[strings.Index(l, " g="):], " g=%d i=%d pad=", &g, &i); err != nil || g < 0 || g >= goroutines {
			t.Fatalf("line %q: %v", l, err)
		}
		if i != next[g] || !strings.HasSuffix(l, strings.Repeat("x", 40)) {
			t.Fatalf("line %q: want i=%d of g=%d, whole", l, next[g], g)
		}
		next[g]++
	}
}

// TestWriteAfterStuckClose: after a Close whose flush gave up on a stuck sink, Writes
// still do not wait for the sink (they are buffered behind what was accepted before, or
// dropped), the drop report follows the lines before the drops, and once the sink moves
// everything arrives in order; only then does Write go to the sink directly. (Writes
// after such a Close went straight to the sink: they waited for it — every logger of a
// shutting-down process stalled — and overtook the lines still in the buffer.)
func TestWriteAfterStuckClose(t *testing.T) {
	sink := newGatedSink(true)
	var w *Writer
	w = New(sink, 16, func(rw io.Writer, lines, bytes uint64) { fmt.Fprintf(rw, "D%d\n", lines) })
	w.Write([]byte("a\n"))
	<-sink.entered // the goroutine holds "a" and waits for the sink
	for i := 1; i <= 5; i++ {
		w.Write([]byte(fmt.Sprintf("b%d\n", i))) // 15 bytes: the buffer holds them
	}
	w.Write([]byte("b6\n")) // dropped
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with the sink stuck: %v", err)
	}
	within(t, "a Write after a Close that gave up", func() { w.Write([]byte("c\n")) }) // the buffer is full: dropped
	close(sink.gate)
	<-w.done
	w.Write([]byte("e\n"))
	if got, want := sink.String(), "a\nb1\nb2\nb3\nb4\nb5\nD2\ne\n"; got != want {
		t.Errorf("sink got %q, want %q", got, want)
	}
}

// TestDropReportNeverDropped: the report of dropped lines reaches the sink even when the
// buffer is full again by the time it is made (another goroutine logged first) and when
// it is longer than the whole buffer, so the reports add up to Dropped once the sink
// moves. (The report went through the same bounded buffer and was dropped in turn,
// counted as one line: the lines it reported were never reported.)
func TestDropReportNeverDropped(t *testing.T) {
	sink := newGatedSink(true)
	var w *Writer
	calls := 0
	w = New(sink, 16, func(rw io.Writer, lines, bytes uint64) {
		calls++
		if calls == 1 { // loggers racing the report fill the buffer just emptied
			for i := range 6 {
				fmt.Fprintf(w, "r%d\n", i)
			}
		}
		fmt.Fprintf(rw, "[%d lines, %d bytes dropped]\n", lines, bytes) // > 16 bytes
	})
	w.Write([]byte("a\n"))
	<-sink.entered // the goroutine holds "a" and waits for the sink
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(w, "b%d\n", i) // 3 bytes (b10: 4): b1–b5 fit, b6–b10 are dropped
	}
	close(sink.gate)
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(strings.Repeat("x", 20) + "\n")) // larger than the buffer: dropped, with nothing pending
	within(t, "the report of a line larger than the buffer", func() {
		for !strings.Contains(sink.String(), "[1 lines, 21 bytes dropped]") {
			time.Sleep(time.Millisecond)
		}
	})
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "a\nb1\nb2\nb3\nb4\nb5\n[5 lines, 16 bytes dropped]\nr0\nr1\nr2\nr3\nr4\n[1 lines, 3 bytes dropped]\n[1 lines, 21 bytes dropped]\n"
	if got := sink.String(); got != want {
		t.Errorf("sink got %q, want %q", got, want)
	}
	if d := w.Dropped(); d != 7 {
		t.Errorf("Dropped() = %d, want 7 (5 b lines, r5, the long line)", d)
	}
}
