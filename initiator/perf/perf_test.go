package perf_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/initiator/perf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

// perfEnv is a loop target with a backend wrapper, and a controller on it.
type perfEnv struct {
	tgt  *target.Target
	ctrl *initiator.Controller
}

func newPerfEnv(t *testing.T, wrap func(backend.Backend) backend.Backend) *perfEnv {
	t.Helper()
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: "nqn.2024-01.io.gonvmf:perf", AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 8 << 20, LBASize: 512}}}},
		Transport: conf.Transport{InCapsuleDataSize: 4096, QueueDepth: 32, MaxIOQueues: 4, KeepAliveTimeout: time.Minute},
	}
	tgt, port := testutil.LoopTarget(t, cfg, loop.Options{}, target.WithBackendOpener(func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil || wrap == nil {
			return b, err
		}
		return wrap(b), nil
	}))
	o := initiator.Options{Transport: initiator.TransportLoop, SubNQN: "nqn.2024-01.io.gonvmf:perf", Queues: 2, QueueSize: 8, Logger: testutil.Logger(t),
		Loop: func(depth int) (initiator.LoopConn, error) {
			c, err := port.Dial(depth)
			if err != nil {
				return nil, err
			}
			return c, nil
		}}
	ctrl, err := initiator.Dial(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Close() })
	return &perfEnv{tgt: tgt, ctrl: ctrl}
}

// corruptBackend flips a byte of LBA 100 on every read of it.
type corruptBackend struct{ backend.Backend }

func (b corruptBackend) ReadBlocks(buf []byte, slba uint64) error {
	if err := b.Backend.ReadBlocks(buf, slba); err != nil {
		return err
	}
	if n := uint64(len(buf)) / uint64(b.LBASize()); slba <= 100 && 100 < slba+n {
		buf[(100-slba)*uint64(b.LBASize())+200] ^= 0x40
	}
	return nil
}

func TestPerfVerifyDetectsCorruption(t *testing.T) {
	e := newPerfEnv(t, func(b backend.Backend) backend.Backend { return corruptBackend{b} })
	pc := perf.Config{Workload: "read", ReadPercent: 100, BlockSize: 4096, QueueDepth: 4, Queues: 2, Runtime: time.Second,
		Verify: true, Size: 1 << 20, Seed: 7}
	res, err := perf.Run(context.Background(), e.ctrl, pc)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verify
	if v == nil || v.Mismatches == 0 || len(v.First) == 0 || !strings.Contains(v.First[0], "LBA 100:") || !strings.Contains(v.First[0], "CRC") {
		t.Fatalf("verify result %+v", v)
	}
	t.Logf("reported: %s", v.First[0])
}

// dropWrites is a backend that completes writes without writing while drop is set.
type dropWrites struct {
	backend.Backend
	drop *atomic.Bool
}

func (b dropWrites) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	if b.drop.Load() {
		return nil
	}
	return b.Backend.WriteBlocks(buf, slba, fua)
}

// TestPerfVerifyNotFooledByAnEarlierRun: a second run with the same seed, against a target
// that now drops writes, finds the first run's data and reports it (the stamps carry the
// run's start time, not only the seed, which repeats the offsets).
func TestPerfVerifyNotFooledByAnEarlierRun(t *testing.T) {
	var drop atomic.Bool
	e := newPerfEnv(t, func(b backend.Backend) backend.Backend { return dropWrites{b, &drop} })
	pc := perf.Config{Workload: "randread", ReadPercent: 100, Random: true, BlockSize: 4096, QueueDepth: 4, Queues: 2,
		IOs: 200, Verify: true, Size: 1 << 20, Seed: 11}
	res, err := perf.Run(context.Background(), e.ctrl, pc)
	if err != nil || res.Verify == nil || res.Verify.Mismatches != 0 {
		t.Fatalf("first run: %v, verify %+v", err, res.Verify)
	}
	drop.Store(true)
	res, err = perf.Run(context.Background(), e.ctrl, pc)
	if err != nil {
		t.Fatal(err)
	}
	if v := res.Verify; v == nil || v.Mismatches == 0 || !strings.Contains(v.First[0], "another run") {
		t.Fatalf("second run, the target dropping its writes: verify %+v", v)
	}
}

// stallingWriter collects what it is written; its first progress line (one that starts
// with "[") takes stall to write, as on a terminal or pipe that falls behind.
type stallingWriter struct {
	stall   time.Duration
	mu      sync.Mutex
	stalled bool
	text    strings.Builder
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	first := !w.stalled && strings.HasPrefix(string(p), "[")
	w.stalled = w.stalled || first
	w.mu.Unlock()
	if first {
		time.Sleep(w.stall)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.WriteString(string(p))
}

func (w *stallingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.String()
}

// TestPerfProgressLabelsItsSecond: each progress line is labeled with the second it
// reports, however late it is printed, and a second that ended before the run did gets
// its line even when the run's end is seen first. The first line's write stalls until
// after the 2.2 s run has ended: the second line is then due together with the end.
// The old code labeled a line with the time it was printed ("[   3s]" for second 2)
// or, picking the end first, printed no line for second 2.
func TestPerfProgressLabelsItsSecond(t *testing.T) {
	e := newPerfEnv(t, nil)
	w := &stallingWriter{stall: 1800 * time.Millisecond}
	pc := perf.Config{Workload: "randread", ReadPercent: 100, Random: true, BlockSize: 4096, QueueDepth: 4, Queues: 1,
		Runtime: 2200 * time.Millisecond, Size: 1 << 20, Seed: 5, Quiet: true, Progress: true, Messages: w}
	if _, err := perf.Run(context.Background(), e.ctrl, pc); err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, line := range strings.Split(w.String(), "\n") {
		if label, _, ok := strings.Cut(line, "]"); ok && strings.HasPrefix(label, "[") {
			labels = append(labels, strings.TrimSpace(label[1:]))
		}
	}
	if len(labels) < 2 || labels[0] != "1s" || labels[1] != "2s" {
		t.Errorf("progress lines labeled %q, want 1s and 2s first:\n%s", labels, w)
	}
}

// TestPerfFreesItsBuffers: every run frees the I/O memory it allocated, also when
// several run on one controller.
func TestPerfFreesItsBuffers(t *testing.T) {
	e := newPerfEnv(t, nil)
	before := e.ctrl.AllocatedBytes()
	for run := range 3 {
		pc := perf.Config{Workload: "randrw", ReadPercent: 50, Random: true, BlockSize: 4096, QueueDepth: 4, Queues: 2,
			IOs: 200, Verify: true, Size: 1 << 20, Seed: uint64(run + 1), Quiet: true}
		if _, err := perf.Run(context.Background(), e.ctrl, pc); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if got := e.ctrl.AllocatedBytes(); got != before {
			t.Fatalf("after run %d: %d bytes of dedicated buffers not freed (before the runs: %d)", run, got, before)
		}
	}
}

// TestPerfControllerGone closes the target in the middle of a run: perf must stop with
// an error soon, not hang.
func TestPerfControllerGone(t *testing.T) {
	e := newPerfEnv(t, nil)
	pc := perf.Config{Workload: "randwrite", ReadPercent: 0, Random: true, BlockSize: 4096, QueueDepth: 8, Queues: 2, Runtime: time.Minute,
		Verify: true, Size: 2 << 20, Seed: 9}
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.tgt.Close()
	}()
	start := time.Now()
	var done atomic.Bool
	go func() {
		time.Sleep(20 * time.Second)
		if !done.Load() {
			panic("perf did not stop 20 s after the target went away")
		}
	}()
	res, err := perf.Run(context.Background(), e.ctrl, pc)
	done.Store(true)
	if err == nil || !errors.Is(err, initiator.ErrDisconnected) {
		t.Fatalf("Run: %v", err)
	}
	// The root cause, not the command that noticed it first.
	if !strings.HasPrefix(err.Error(), "controller failed: ") {
		t.Errorf("Run: %v; want the controller's failure", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopped %v after start", d)
	}
	if res == nil || res.Error == "" {
		t.Errorf("result %+v", res)
	}
	t.Logf("stopped after %v: %v", time.Since(start), err)
}

// TestRun drives the engine directly: an I/O count is exact, a mixed verifying run checks
// what it wrote, the header goes to Messages unless Quiet, and Print writes the table.
func TestRun(t *testing.T) {
	e := newPerfEnv(t, nil)
	var msgs strings.Builder
	res, err := perf.Run(context.Background(), e.ctrl, perf.Config{Workload: "randrw", ReadPercent: 70, Random: true,
		BlockSize: 8192, QueueDepth: 4, Queues: 3, IOs: 3000, Verify: true, Size: 2 << 20, Seed: 5, Target: "loop test", Messages: &msgs})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.IOs != 3000 || res.Read == nil || res.Write == nil || res.Read.IOs+res.Write.IOs != 3000 || res.Read.IOs < res.Write.IOs {
		t.Errorf("I/Os: total %+v read %+v write %+v", res.Total, res.Read, res.Write)
	}
	if l := res.Total.Lat; l.Min <= 0 || l.P50 < l.Min || l.P99 < l.P50 || l.Max < l.P999 || l.P999 < l.P99 {
		t.Errorf("latency %+v", l)
	}
	if v := res.Verify; v == nil || v.Checked == 0 || v.Mismatches != 0 || !v.ReadBack {
		t.Errorf("verify %+v", v)
	}
	if res.SubNQN != "nqn.2024-01.io.gonvmf:perf" || res.Target != "loop test" || res.Queues != 2 || res.RWMixRead != 70 || res.Seed != 5 {
		t.Errorf("result %+v", res)
	}
	for _, want := range []string{"perf: the controller granted 2 I/O queues of the 3 asked for", "perf: randrw (70% reads), 8.0 KiB blocks, queue depth 4 x 2 queue(s), 3000 I/Os, verify",
		"perf: loop test nqn.2024-01.io.gonvmf:perf namespace 1", "perf: verify: prefilled 2.0 MiB"} {
		if !strings.Contains(msgs.String(), want) {
			t.Errorf("messages lack %q:\n%s", want, msgs.String())
		}
	}
	var table strings.Builder
	res.Print(&table)
	for _, want := range []string{"IOPS", "p99.9", "read ", "write ", "total ", "(including a read-back of the whole range), 0 mismatches"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("Print lacks %q:\n%s", want, table.String())
		}
	}

	msgs.Reset()
	if _, err := perf.Run(context.Background(), e.ctrl, perf.Config{Workload: "read", ReadPercent: 100, BlockSize: 4096, QueueDepth: 2,
		IOs: 10, Quiet: true, Messages: &msgs}); err != nil || msgs.Len() != 0 {
		t.Errorf("quiet run: %v, messages %q", err, msgs.String())
	}
	for _, c := range []perf.Config{{BlockSize: 4096, QueueDepth: 1}, {BlockSize: 0, QueueDepth: 1, IOs: 1}, {BlockSize: 4096, IOs: 1}} {
		if _, err := perf.Run(context.Background(), e.ctrl, c); err == nil {
			t.Errorf("Run(%+v) accepted", c)
		}
	}
}

func TestParseWorkload(t *testing.T) {
	for _, c := range []struct {
		name   string
		mix    int
		pct    int
		random bool
	}{{"read", 0, 100, false}, {"randread", 9, 100, true}, {"write", 50, 0, false}, {"randwrite", 50, 0, true},
		{"rw", 30, 30, false}, {"readwrite", 30, 30, false}, {"randrw", 70, 70, true}, {"mixed", 0, 0, true}} {
		pct, random, err := perf.ParseWorkload(c.name, c.mix)
		if err != nil || pct != c.pct || random != c.random {
			t.Errorf("ParseWorkload(%q, %d) = %d, %v, %v", c.name, c.mix, pct, random, err)
		}
	}
	for _, c := range []struct {
		name string
		mix  int
	}{{"sideways", 50}, {"randrw", 101}, {"rw", -1}} {
		if _, _, err := perf.ParseWorkload(c.name, c.mix); err == nil {
			t.Errorf("ParseWorkload(%q, %d) accepted", c.name, c.mix)
		}
	}
}
