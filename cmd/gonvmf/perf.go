package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/urfave/cli/v2"
)

func init() { registerCommand(perfCommand) }

func perfCommand() *cli.Command {
	return &cli.Command{
		Name:  "perf",
		Usage: "measure a namespace: IOPS, bandwidth and latency percentiles, optionally verifying data",
		UsageText: "gonvmf perf -t rdma -a ADDRESS [-s PORT] -n NQN [-w WORKLOAD] [-o SIZE] [-q DEPTH] [-j QUEUES] [-T DURATION | -N IOS] [--verify] [--json]\n" +
			"   gonvmf perf -t loop --config FILE [-n NQN] [options]",
		Description: `perf drives one namespace with the initiator's asynchronous API, like spdk_nvme_perf
and fio: -j I/O queues, each with -q commands in flight, each command -o bytes, for -T
(or until -N I/Os), with workload read, write, randread, randwrite, rw (sequential
mixed) or randrw (random mixed, --rwmixread percent reads). Each queue works on its own
slice of the range (--offset, --size; default the whole namespace). It prints IOPS,
MiB/s and latency avg/p50/p90/p99/p99.9/max per direction, with a live progress line
on standard error (--progress=false to silence it), or JSON (--json).

--verify stamps every block written with its LBA, a generation and the run's seed (plus
a CRC-32C), never lets two commands touch the same block at once, and checks every block
read: a workload that reads first writes the whole range (prefill); one that writes
reads the whole range back at the end. Mismatches are reported with LBA and
expected/got values and make perf exit 1. A controller that fails or disappears stops
the run with an error (exit 1); perf never waits forever.`,
		Flags: append(fabricsFlags(" (with -t loop: default the configuration's first subsystem)"),
			&cli.StringFlag{Name: "rw", Aliases: []string{"w"}, Value: "randread", Usage: "`WORKLOAD`: read, write, randread, randwrite, rw or randrw"},
			&cli.IntFlag{Name: "rwmixread", Aliases: []string{"M"}, Value: 50, Usage: "`PERCENT` of reads in rw/randrw"},
			&cli.StringFlag{Name: "bs", Aliases: []string{"o"}, Value: "4k", Usage: "I/O `SIZE` (k, m suffixes are powers of 1024)"},
			&cli.IntFlag{Name: "iodepth", Aliases: []string{"q"}, Value: 32, Usage: "commands in flight per queue (`DEPTH`)"},
			&cli.IntFlag{Name: "queues", Aliases: []string{"j"}, Value: 1, Usage: "number of I/O `QUEUES` (one per connection)"},
			&cli.DurationFlag{Name: "runtime", Aliases: []string{"T"}, Usage: "run for `DURATION` (default 10s unless -N is given)"},
			&cli.Uint64Flag{Name: "ios", Aliases: []string{"N"}, Usage: "stop after `COUNT` I/Os"},
			&cli.UintFlag{Name: "nsid", Usage: "namespace `NSID` (default: the first)"},
			&cli.StringFlag{Name: "offset", Value: "0", Usage: "start of the range in bytes (`SIZE`)"},
			&cli.StringFlag{Name: "size", Usage: "length of the range in bytes (`SIZE`; default the rest of the namespace, with --verify at most 256m)"},
			&cli.BoolFlag{Name: "verify", Aliases: []string{"V"}, Usage: "stamp and check data"},
			&cli.BoolFlag{Name: "fua", Usage: "write with FUA (force unit access)"},
			&cli.Uint64Flag{Name: "seed", Usage: "random `SEED` (default: from the clock)"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
			&cli.BoolFlag{Name: "progress", Value: true, Usage: "print a live progress line on standard error"},
			&cli.DurationFlag{Name: "io-timeout", Value: initiator.DefaultCommandTimeout, Usage: "fail the controller when a command takes longer than `DURATION`"},
			&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the measured run to `FILE`"}),
		Action: runPerf,
	}
}

// perfConfig is the parsed command line.
type perfConfig struct {
	workload   string
	random     bool
	readPct    int // 0..100
	bs         int
	qd, queues int
	runtime    time.Duration
	ios        uint64
	nsid       uint32
	offset     int64
	size       int64
	sizeSet    bool
	verify     bool
	fua        bool
	seed       uint64
	json       bool
	progress   bool
	cpuprofile string
}

func (pc *perfConfig) hasRead() bool  { return pc.readPct > 0 }
func (pc *perfConfig) hasWrite() bool { return pc.readPct < 100 }

// parseSize parses a byte count with an optional k/m/g/t suffix (powers of 1024, as fio;
// "KiB" and "KB" mean the same).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (a number with an optional k, m, g or t suffix)", s)
	}
	return v * mult, nil
}

func parsePerf(c *cli.Context) (*perfConfig, error) {
	pc := &perfConfig{workload: c.String("rw"), qd: c.Int("iodepth"), queues: c.Int("queues"),
		runtime: c.Duration("runtime"), ios: c.Uint64("ios"), nsid: uint32(c.Uint("nsid")),
		verify: c.Bool("verify"), fua: c.Bool("fua"), seed: c.Uint64("seed"), json: c.Bool("json"),
		progress: c.Bool("progress")}
	switch pc.workload {
	case "read", "randread":
		pc.readPct = 100
	case "write", "randwrite":
		pc.readPct = 0
	case "rw", "readwrite", "randrw", "mixed":
		pc.readPct = c.Int("rwmixread")
		if pc.readPct < 0 || pc.readPct > 100 {
			return nil, usageError("--rwmixread %d: want 0..100", pc.readPct)
		}
	default:
		return nil, usageError("--rw %q: use read, write, randread, randwrite, rw or randrw", pc.workload)
	}
	pc.random = strings.HasPrefix(pc.workload, "rand") || pc.workload == "mixed"
	bs, err := parseSize(c.String("bs"))
	if err != nil || bs < 512 || bs > 16<<20 {
		return nil, usageError("--bs %q: want 512 bytes to 16m", c.String("bs"))
	}
	pc.bs = int(bs)
	if pc.qd < 1 || pc.qd > initiator.MaxQueueSize {
		return nil, usageError("--iodepth %d: want 1..%d", pc.qd, initiator.MaxQueueSize)
	}
	if pc.queues < 1 || pc.queues > 256 {
		return nil, usageError("--queues %d: want 1..256", pc.queues)
	}
	if pc.runtime < 0 {
		return nil, usageError("--runtime must be positive")
	}
	if pc.runtime == 0 && pc.ios == 0 {
		pc.runtime = 10 * time.Second
	}
	if pc.offset, err = parseSize(c.String("offset")); err != nil {
		return nil, usageError("--offset: %v", err)
	}
	if s := c.String("size"); s != "" {
		if pc.size, err = parseSize(s); err != nil || pc.size == 0 {
			return nil, usageError("--size %q: want a positive size", s)
		}
		pc.sizeSet = true
	}
	if pc.seed == 0 {
		pc.seed = uint64(time.Now().UnixNano()) | 1
	}
	return pc, nil
}

func runPerf(c *cli.Context) error {
	pc, err := parsePerf(c)
	if err != nil {
		return err
	}
	o, s, err := fabricsOptions(c, "")
	if err != nil {
		return err
	}
	o.Queues = pc.queues
	o.QueueSize = max(pc.qd, 2)
	o.CommandTimeout = c.Duration("io-timeout")
	ctx, cancel := connectCtx(c)
	err = dial(ctx, o, s)
	cancel()
	if err != nil {
		return err
	}
	defer s.Close()
	if f := c.String("cpuprofile"); f != "" {
		pc.cpuprofile = f
	}
	res, err := perfRun(c.Context, s.ctrl, pc, o, c.App.ErrWriter)
	if res != nil {
		if pc.json {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			enc.Encode(res)
		} else {
			res.print(c.App.Writer)
		}
	}
	if err != nil {
		return cli.Exit("perf: "+err.Error(), exitFailure)
	}
	if res.Verify != nil && res.Verify.Mismatches > 0 {
		msg := fmt.Sprintf("perf: verify failed: %d blocks did not read back as written", res.Verify.Mismatches)
		if res.Verify.Unstamped == res.Verify.Mismatches {
			// Nothing perf wrote came back: the usual cause is a namespace that drops writes.
			msg += " (none carried a perf stamp: does the namespace discard writes, like a null backend? pick another with --nsid)"
		}
		return cli.Exit(msg, exitFailure)
	}
	return nil
}

const (
	phaseFill  = iota // verify: write the whole range once
	phaseRun          // the measured workload
	phaseCheck        // verify: read the whole range back
)

// perfState is one perf run over one controller.
type perfState struct {
	pc       *perfConfig
	ctrl     *initiator.Controller
	ns       *initiator.Namespace
	lbaSize  int
	perUnit  uint64 // blocks per I/O
	base     uint64 // first LBA of the range
	workers  []*worker
	stop     atomic.Bool
	failed   atomic.Bool // firstErr is set
	issued   atomic.Uint64
	errMu    sync.Mutex
	firstErr error
	epoch    time.Time
}

func (r *perfState) now() int64 { return int64(time.Since(r.epoch)) }

func (r *perfState) fail(err error) {
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
	r.failed.Store(true)
	r.stop.Store(true)
}

func (r *perfState) err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}

// worker drives one I/O queue over its own slice of the range. Its state is guarded by
// mu: the queue's completion goroutine runs onDone, the main goroutine starts phases.
type worker struct {
	r        *perfState
	q        *initiator.IOQueue
	mu       sync.Mutex
	rng      *rand.Rand
	lo, n    uint64 // units (I/O-sized pieces) [lo, lo+n) of the range
	cursor   uint64
	gen      []uint32 // verify: last generation written per unit
	busy     []uint64 // verify: units with a command in flight
	ios      []*ioCtx
	phase    int
	inflight int
	done     chan struct{}

	stats      [2]dirStats // read, write
	live       [2]liveStats
	checked    uint64
	mismatches uint64
	unstamped  uint64 // mismatches that carried no perf stamp at all
	firstBad   []mismatch
}

type dirStats struct {
	hist       histogram
	ios, bytes uint64
}

type liveStats struct{ ios, bytes, lat atomic.Uint64 }

type ioCtx struct {
	req   initiator.Request
	unit  uint64
	gen   uint32
	write bool
	start int64
}

func (w *worker) isBusy(u uint64) bool { return w.busy[u/64]&(1<<(u%64)) != 0 }
func (w *worker) setBusy(u uint64)     { w.busy[u/64] |= 1 << (u % 64) }
func (w *worker) clearBusy(u uint64)   { w.busy[u/64] &^= 1 << (u % 64) }

// next prepares io for the worker's next command; false when the phase has nothing more
// for this slot.
func (w *worker) next(io *ioCtx) bool {
	r, pc := w.r, w.r.pc
	verify := pc.verify
	var write bool
	var unit uint64
	switch w.phase {
	case phaseFill:
		if w.cursor >= w.n {
			return false
		}
		unit, write = w.cursor, true
		w.cursor++
	case phaseCheck:
		for w.cursor < w.n && w.gen[w.cursor] == 0 {
			w.cursor++
		}
		if w.cursor >= w.n {
			return false
		}
		unit = w.cursor
		w.cursor++
	default:
		if r.stop.Load() || (pc.ios > 0 && r.issued.Add(1) > pc.ios) {
			return false
		}
		switch pc.readPct {
		case 100:
		case 0:
			write = true
		default:
			write = w.rng.IntN(100) >= pc.readPct
		}
		if pc.random {
			unit = w.rng.Uint64N(w.n)
			for tries := 0; verify && w.isBusy(unit); tries++ {
				if tries < 8 {
					unit = w.rng.Uint64N(w.n)
				} else {
					unit = (unit + 1) % w.n
				}
			}
		} else {
			unit = w.cursor
			for verify && w.isBusy(unit) {
				unit = (unit + 1) % w.n
			}
			w.cursor = (unit + 1) % w.n
		}
	}
	if verify {
		w.setBusy(unit)
	}
	io.unit, io.write = unit, write
	req := &io.req
	req.LBA = r.base + (w.lo+unit)*r.perUnit
	if write {
		req.Op = initiator.OpWrite
		req.Flags = 0
		if pc.fua {
			req.Flags = initiator.FUA
		}
		if verify {
			io.gen = w.gen[unit] + 1
			stampBlocks(req.Buf.Bytes(), r.lbaSize, req.LBA, uint64(io.gen), pc.seed)
		}
	} else {
		req.Op = initiator.OpRead
		req.Flags = 0
	}
	io.start = r.now()
	return true
}

// issue starts io's next command; it reports whether one is in flight.
func (w *worker) issue(io *ioCtx) bool {
	if !w.next(io) {
		return false
	}
	if err := w.q.Submit(&io.req); err != nil {
		if w.r.pc.verify {
			w.clearBusy(io.unit)
		}
		w.r.fail(fmt.Errorf("submitting on queue %d: %w", w.q.ID(), err))
		return false
	}
	w.inflight++
	return true
}

// start begins a phase: every slot issues its first command.
func (w *worker) start(phase int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.phase, w.cursor, w.done = phase, 0, make(chan struct{})
	for _, io := range w.ios {
		if !w.issue(io) {
			break
		}
	}
	if w.inflight == 0 {
		close(w.done)
	}
}

// onDone runs on the queue's completion goroutine.
func (w *worker) onDone(req *initiator.Request) {
	io := req.User.(*ioCtx)
	lat := w.r.now() - io.start
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	pc := w.r.pc
	if pc.verify {
		w.clearBusy(io.unit)
	}
	if req.Err != nil {
		w.r.fail(fmt.Errorf("%v of %d bytes at LBA %d on queue %d: %w", req.Op, req.Buf.Len(), req.LBA, w.q.ID(), req.Err))
	} else {
		d := 0
		if io.write {
			d = 1
		}
		if w.phase == phaseRun {
			st := &w.stats[d]
			st.hist.record(uint64(lat))
			st.ios++
			st.bytes += uint64(req.Buf.Len())
			lv := &w.live[d]
			lv.ios.Add(1)
			lv.bytes.Add(uint64(req.Buf.Len()))
			lv.lat.Add(uint64(lat))
		}
		if pc.verify {
			if io.write {
				w.gen[io.unit] = io.gen
			} else if g := w.gen[io.unit]; g != 0 {
				w.check(req, uint64(g))
			}
		}
	}
	if !w.r.failed.Load() && w.issue(io) {
		return
	}
	if w.inflight == 0 {
		close(w.done)
	}
}

// check verifies the blocks of a completed read.
func (w *worker) check(req *initiator.Request, gen uint64) {
	r := w.r
	b := req.Buf.Bytes()
	for off, lba := 0, req.LBA; off < len(b); off, lba = off+r.lbaSize, lba+1 {
		w.checked++
		if m := checkBlock(b[off:off+r.lbaSize], lba, gen, r.pc.seed); m != nil {
			w.mismatches++
			if !m.Magic {
				w.unstamped++
			}
			if len(w.firstBad) < 10 {
				w.firstBad = append(w.firstBad, *m)
			}
		}
	}
	if w.mismatches > 0 && !r.stop.Load() {
		r.stop.Store(true) // finish this phase, report
	}
}

// perfRun sets up the workers, runs the phases and collects the results. It returns the
// results measured so far together with an error when the run failed.
func perfRun(ctx context.Context, ctrl *initiator.Controller, pc *perfConfig, o initiator.Options, progress io.Writer) (*perfResult, error) {
	r := &perfState{pc: pc, ctrl: ctrl, epoch: time.Now()}
	var err error
	if pc.nsid == 0 {
		nss := ctrl.Namespaces()
		if len(nss) == 0 {
			return nil, errors.New("the controller has no active namespace")
		}
		r.ns = nss[0]
	} else if r.ns, err = ctrl.Namespace(pc.nsid); err != nil {
		return nil, err
	}
	ns := r.ns
	r.lbaSize = ns.BlockSize()
	switch {
	case pc.bs%r.lbaSize != 0:
		return nil, fmt.Errorf("--bs %d is not a multiple of the namespace's %d-byte blocks", pc.bs, r.lbaSize)
	case pc.bs > ctrl.MaxTransferSize():
		return nil, fmt.Errorf("--bs %d is larger than the controller's %d-byte transfer limit (MDTS)", pc.bs, ctrl.MaxTransferSize())
	case pc.offset%int64(r.lbaSize) != 0 || pc.offset >= ns.Size():
		return nil, fmt.Errorf("--offset %d: not a multiple of %d inside the %d-byte namespace", pc.offset, r.lbaSize, ns.Size())
	}
	size := ns.Size() - pc.offset
	if pc.sizeSet {
		if pc.size > size {
			return nil, fmt.Errorf("--offset %d + --size %d is beyond the %d-byte namespace", pc.offset, pc.size, ns.Size())
		}
		size = pc.size
	} else if pc.verify {
		size = min(size, 256<<20)
	}
	units := uint64(size) / uint64(pc.bs)
	r.perUnit = uint64(pc.bs / r.lbaSize)
	r.base = uint64(pc.offset) / uint64(r.lbaSize)
	nq := ctrl.IOQueues()
	if nq < pc.queues {
		fmt.Fprintf(progress, "perf: the controller granted %d I/O queues of the %d asked for\n", nq, pc.queues)
	}
	qd := pc.qd
	if d := ctrl.IOQueue(0).Depth(); d < qd {
		fmt.Fprintf(progress, "perf: queue depth %d limited to the controller's %d\n", qd, d)
		qd = d
	}
	per := units / uint64(nq)
	minUnits := uint64(1)
	if pc.verify {
		minUnits = 2 * uint64(qd)
	}
	if per < minUnits {
		return nil, fmt.Errorf("the range of %d bytes holds %d I/Os of %d bytes: too few for %d queues x depth %d (use a larger --size or a smaller --bs)",
			size, units, pc.bs, nq, qd)
	}
	if pc.verify && units > 1<<28 {
		return nil, fmt.Errorf("verify over %d I/O units needs too much memory; use a smaller --size", units)
	}
	res := &perfResult{Workload: pc.workload, BlockSize: pc.bs, QueueDepth: qd, Queues: nq, Target: targetName(&o),
		SubNQN: o.SubNQN, NSID: ns.NSID, Offset: pc.offset, Size: int64(per*uint64(nq)) * int64(pc.bs), Seed: pc.seed}
	if pc.hasRead() && pc.hasWrite() {
		res.RWMixRead = pc.readPct
	}
	for i := 0; i < nq; i++ {
		w := &worker{r: r, q: ctrl.IOQueue(i), rng: rand.New(rand.NewPCG(pc.seed, uint64(i))), lo: uint64(i) * per, n: per}
		if i == nq-1 && !pc.verify {
			w.n = units - w.lo
		}
		if pc.verify {
			w.gen = make([]uint32, w.n)
			w.busy = make([]uint64, (w.n+63)/64)
		}
		mem, err := ctrl.AllocBuffer(qd * pc.bs)
		if err != nil {
			return nil, fmt.Errorf("allocating %d bytes of I/O buffers: %w", qd*pc.bs, err)
		}
		defer mem.Release()
		for j := 0; j < qd; j++ {
			io := &ioCtx{}
			io.req = initiator.Request{NSID: ns.NSID, Blocks: uint32(r.perUnit), Buf: mem.Slice(j*pc.bs, pc.bs), Done: w.onDone, User: io}
			w.ios = append(w.ios, io)
		}
		r.workers = append(r.workers, w)
	}
	if !pc.json {
		res.printHeader(progress, pc, ns)
	}

	if pc.verify && pc.hasRead() {
		start := time.Now()
		if err := r.phase(ctx, phaseFill, nil); err != nil {
			err = fmt.Errorf("prefill for verify: %w", err)
			res.Error = err.Error()
			return res, err
		}
		res.Verify = &verifyResult{PrefillS: time.Since(start).Seconds()}
		if !pc.json {
			fmt.Fprintf(progress, "perf: verify: prefilled %s in %.1fs\n", humanize.IBytes(uint64(res.Size)), res.Verify.PrefillS)
		}
	}
	if pc.cpuprofile != "" {
		f, err := os.Create(pc.cpuprofile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	var timer *time.Timer
	if pc.runtime > 0 {
		timer = time.AfterFunc(pc.runtime, func() { r.stop.Store(true) })
	}
	var pr *progressPrinter
	if pc.progress {
		pr = newProgress(r, progress)
	}
	runErr := r.phase(ctx, phaseRun, pr)
	elapsed := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if timer != nil {
		timer.Stop()
	}
	res.collect(r, elapsed, cpuTime(&ru1)-cpuTime(&ru0))
	if runErr == nil && pc.verify && pc.hasWrite() && r.mismatches() == 0 {
		r.stop.Store(false)
		runErr = r.phase(ctx, phaseCheck, nil)
		if res.Verify == nil {
			res.Verify = &verifyResult{}
		}
		res.Verify.ReadBack = true
	}
	if pc.verify {
		if res.Verify == nil {
			res.Verify = &verifyResult{}
		}
		for _, w := range r.workers {
			res.Verify.Checked += w.checked
			res.Verify.Mismatches += w.mismatches
			res.Verify.Unstamped += w.unstamped
			for i := range w.firstBad {
				if len(res.Verify.First) < 10 {
					res.Verify.First = append(res.Verify.First, w.firstBad[i].String())
				}
			}
		}
	}
	if runErr != nil {
		res.Error = runErr.Error()
	}
	return res, runErr
}

func (r *perfState) mismatches() uint64 {
	var n uint64
	for _, w := range r.workers {
		w.mu.Lock()
		n += w.mismatches
		w.mu.Unlock()
	}
	return n
}

// phase runs one phase on every worker and waits until all their commands completed. A
// failed controller completes every outstanding command with an error, so this returns;
// as a last resort it gives up (with an error) a while after the controller failed.
func (r *perfState) phase(ctx context.Context, phase int, pr *progressPrinter) error {
	for _, w := range r.workers {
		w.start(phase)
	}
	all := make(chan struct{})
	go func() {
		for _, w := range r.workers {
			<-w.done
		}
		close(all)
	}()
	var tick <-chan time.Time
	if pr != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	ctrlDone := r.ctrl.Done()
	var giveUp <-chan time.Time
	interrupted := ctx.Done()
	for {
		select {
		case <-all:
			if pr != nil {
				pr.finish()
			}
			// A failed controller is the root cause: the command that noticed it first
			// (its error in r.err) only reports a consequence, "aborted: connection lost".
			if err := r.ctrl.Err(); err != nil {
				return fmt.Errorf("controller failed: %w", err)
			}
			return r.err()
		case <-tick:
			pr.print()
		case <-interrupted:
			r.fail(fmt.Errorf("interrupted: %w", ctx.Err()))
			interrupted = nil
		case <-ctrlDone:
			r.fail(fmt.Errorf("controller failed: %w", r.ctrl.Err()))
			ctrlDone = nil
			giveUp = time.After(30 * time.Second)
		case <-giveUp:
			if pr != nil {
				pr.finish()
			}
			return fmt.Errorf("controller failed (%v) and commands did not complete within 30 s", r.ctrl.Err())
		}
	}
}

func cpuTime(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func targetName(o *initiator.Options) string {
	if o.Transport == initiator.TransportLoop {
		return "loop (in-process target)"
	}
	return fmt.Sprintf("%s %s:%d", o.Transport, o.Addr, o.Port)
}

// progressPrinter prints one line per second: the last second's rates and mean latency.
type progressPrinter struct {
	r       *perfState
	w       io.Writer
	tty     bool
	start   time.Time
	last    time.Time
	lastIOs [2]uint64
	lastB   [2]uint64
	lastLat [2]uint64
	printed bool
}

func newProgress(r *perfState, w io.Writer) *progressPrinter {
	p := &progressPrinter{r: r, w: w, start: time.Now(), last: time.Now()}
	if f, ok := w.(*os.File); ok {
		p.tty = isTerminal(f)
	}
	return p
}

func (p *progressPrinter) print() {
	now := time.Now()
	dt := now.Sub(p.last).Seconds()
	p.last = now
	var ios, b, lat [2]uint64
	for _, w := range p.r.workers {
		for d := range 2 {
			ios[d] += w.live[d].ios.Load()
			b[d] += w.live[d].bytes.Load()
			lat[d] += w.live[d].lat.Load()
		}
	}
	var line strings.Builder
	fmt.Fprintf(&line, "[%4.0fs]", now.Sub(p.start).Seconds())
	var tIOs, tB, tLat uint64
	for d, name := range []string{"read", "write"} {
		n := ios[d] - p.lastIOs[d]
		tIOs += n
		tB += b[d] - p.lastB[d]
		tLat += lat[d] - p.lastLat[d]
		if (d == 0 && p.r.pc.hasRead()) || (d == 1 && p.r.pc.hasWrite()) {
			fmt.Fprintf(&line, " %s %s IOPS", name, humanize.SIWithDigits(float64(n)/dt, 1, ""))
		}
	}
	avg := 0.0
	if tIOs > 0 {
		avg = float64(tLat) / float64(tIOs) / 1e3
	}
	fmt.Fprintf(&line, " | %.1f MiB/s | avg lat %.1f us | %d I/Os", float64(tB)/dt/(1<<20), avg, ios[0]+ios[1])
	p.lastIOs, p.lastB, p.lastLat = ios, b, lat
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line.String())
	} else {
		fmt.Fprintln(p.w, line.String())
	}
	p.printed = true
}

func (p *progressPrinter) finish() {
	if p.tty && p.printed {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
