// Package testutil holds what the tests of several packages share: a logger that shows
// the code's log in the test's output, completion checks, a target with a loop port, a
// backend opener that holds one open, one whose backends hold writes, and benchmarks' CPU
// time per operation. Only tests import it.
package testutil

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

// EnvLog is the environment variable that turns on debug logging in tests.
const EnvLog = "GONVMF_TEST_LOG"

// Logger returns a logger for the code under test. With EnvLog set its debug lines, with
// go test -v its info lines go to the test's log (t.Log, shown with the test), and to
// standard error once the test has finished (goroutines of the code under test may log
// during teardown); otherwise they go nowhere.
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelInfo
	switch {
	case os.Getenv(EnvLog) != "":
		level = slog.LevelDebug
	case testing.Verbose():
	default:
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w := &testWriter{t: t}
	t.Cleanup(w.finish)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// testWriter writes lines to t.Log while the test runs, then to standard error.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return os.Stderr.Write(p)
	}
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func (w *testWriter) finish() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// Expect stops the test unless c has want's status code.
func Expect(t testing.TB, what string, c nvmeproto.Completion, want nvmeproto.Status) {
	t.Helper()
	if c.Status.Code() != want.Code() {
		t.Fatalf("%s: status %v (dw0 %#x), want %v", what, c.Status, c.DW0, want)
	}
}

// ExpectOK stops the test unless c reports success.
func ExpectOK(t testing.TB, what string, c nvmeproto.Completion) {
	t.Helper()
	Expect(t, what, c, nvmeproto.StatusSuccess)
}

// LoopTarget starts a target for cfg (target.New with Logger(t) and opts) and registers a
// loop port with o; both are closed when the test ends, and an error closing the target
// fails it.
func LoopTarget(t testing.TB, cfg *conf.Config, o loop.Options, opts ...target.Option) (*target.Target, *loop.Port) {
	t.Helper()
	tgt, err := target.New(cfg, append([]target.Option{target.WithLogger(Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("target.New: %v", err)
	}
	t.Cleanup(func() {
		if err := tgt.Close(); err != nil {
			t.Errorf("target.Close: %v", err)
		}
	})
	p, err := loop.New(tgt, o)
	if err != nil {
		t.Fatalf("loop.New: %v", err)
	}
	return tgt, p
}

// HeldOpener returns a backend opener (target.WithBackendOpener) that opens backends with
// backend.Open, except that the open of one of size bytes signals on opening and then
// waits until release is called — a slow backend (rbd, a device) held at a chosen point.
// release may be called more than once.
func HeldOpener(size uint64) (open func(backend.Spec) (backend.Backend, error), opening <-chan struct{}, release func()) {
	gate, signal := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	open = func(s backend.Spec) (backend.Backend, error) {
		if s.Size == size {
			select {
			case signal <- struct{}{}:
			default:
			}
			<-gate
		}
		return backend.Open(s)
	}
	return open, signal, func() { once.Do(func() { close(gate) }) }
}

// WriteGate holds the writes of the backends its Opener opens until Open is called: a
// backend whose requests do not complete, released at a chosen point. Those backends run
// requests on worker goroutines, so a held write holds up nothing else.
type WriteGate struct {
	gate chan struct{}
	once sync.Once
	held atomic.Int64
}

// NewWriteGate returns a closed gate.
func NewWriteGate() *WriteGate { return &WriteGate{gate: make(chan struct{})} }

// Opener opens backends with backend.Open and wraps them (target.WithBackendOpener).
func (g *WriteGate) Opener() func(backend.Spec) (backend.Backend, error) {
	return func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil {
			return nil, err
		}
		return &gatedWrites{Backend: b, g: g}, nil
	}
}

// WaitHeld waits until n writes are held at the gate.
func (g *WriteGate) WaitHeld(t testing.TB, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.held.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes held at the gate after 10 s, want %d", g.held.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Open lets every write through, held or to come. It may be called more than once.
func (g *WriteGate) Open() { g.once.Do(func() { close(g.gate) }) }

type gatedWrites struct {
	backend.Backend
	g *WriteGate
}

func (b *gatedWrites) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	b.g.held.Add(1)
	<-b.g.gate
	b.g.held.Add(-1)
	return b.Backend.WriteBlocks(buf, slba, fua)
}

func (b *gatedWrites) Info() backend.Info {
	i := backend.Describe(b.Backend)
	i.Inline, i.Workers = false, 8
	return i
}

// CPUTime is the process's CPU time (user and system, every thread). Benchmarks report CPU
// time per operation with it (ReportCPU): on a loaded machine wall-clock ns/op includes
// time spent waiting for a CPU, CPU time does not.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports the CPU time since start (a CPUTime value) per operation, as
// cpu-ns/op.
func ReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(CPUTime()-start)/float64(b.N), "cpu-ns/op")
}
