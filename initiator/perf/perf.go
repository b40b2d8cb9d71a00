// Package perf is gonvmf's benchmark engine, the core of gonvmf perf: it drives one
// namespace of a connected initiator.Controller with the initiator's asynchronous API, like
// spdk_nvme_perf and fio — one worker per I/O queue, each with QueueDepth commands in
// flight over its own slice of the range — and measures IOPS, bandwidth and latency
// percentiles per direction (a log-linear histogram, within 1.6 % of the true value). With
// Verify it stamps every block it writes with its LBA, a generation and the run's seed
// (plus a CRC-32C), never lets two commands touch one block at once, and checks every
// block it reads.
//
//	res, err := perf.Run(ctx, ctrl, perf.Config{Workload: "randread", ReadPercent: 100, Random: true,
//	        BlockSize: 4096, QueueDepth: 32, Runtime: 10 * time.Second})
//	res.Print(os.Stdout)                      // or encoding/json: the fields are tagged
//
// Run allocates its buffers and workers up front; the I/O path allocates nothing. The
// caller owns the controller: Run neither connects nor closes it, and returns (with an
// error) when the controller fails rather than waiting for it.
package perf

import (
	"context"
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
)

// Config describes one run. BlockSize and QueueDepth are required; the rest have the
// documented zero values.
type Config struct {
	// Workload names the workload in the report (read, write, randread, randwrite, rw,
	// randrw); ParseWorkload gives ReadPercent and Random for a name.
	Workload string
	// ReadPercent is the share of reads: 100 reads only, 0 writes only, else mixed.
	ReadPercent int
	// Random picks each I/O's offset at random in the worker's slice; otherwise offsets
	// are sequential.
	Random bool
	// BlockSize is the size of every I/O in bytes, a multiple of the namespace's blocks.
	BlockSize int
	// QueueDepth is the commands in flight per I/O queue (limited to the controller's
	// queue size). Every I/O queue of the controller gets a worker.
	QueueDepth int
	// Queues is how many I/O queues the controller was asked for: fewer granted is
	// noted in Messages (0: no note).
	Queues int
	// Runtime ends the run after that long; IOs after that many I/Os. 0: no limit (at
	// least one of the two must be set).
	Runtime time.Duration
	IOs     uint64
	// NSID is the namespace (0: the controller's first active one).
	NSID uint32
	// Offset and Size are the range in bytes. Size 0: the rest of the namespace, with
	// Verify at most 256 MiB.
	Offset int64
	Size   int64
	// Verify stamps and checks data: a workload that reads first writes the whole range
	// (prefill), one that writes reads the whole range back at the end.
	Verify bool
	// FUA writes with Force Unit Access.
	FUA bool
	// Seed seeds the offsets (0: from the clock); verify stamps carry it mixed with the
	// run's start time, so that no run accepts data an earlier one left.
	Seed uint64
	// Target says how the run reached the target, for the report ("rdma 10.99.0.1:4420").
	Target string
	// Messages receives the run's header and notices (fewer queues or a shallower queue
	// than asked for), and with Progress a line per second (redrawn in place on a
	// terminal). nil: none.
	Messages io.Writer
	// Quiet leaves the header and the prefill line out of Messages (gonvmf perf --json).
	Quiet bool
	// Progress prints a progress line per second to Messages.
	Progress bool
	// CPUProfile, when set, is a file to write a CPU profile of the measured phase to.
	CPUProfile string
}

func (pc *Config) hasRead() bool  { return pc.ReadPercent > 0 }
func (pc *Config) hasWrite() bool { return pc.ReadPercent < 100 }

// ParseWorkload returns the read share and access pattern of a workload name: read,
// write, randread, randwrite, rw (also readwrite) or randrw (also mixed), where the mixed
// ones read rwmixread percent of the time.
func ParseWorkload(name string, rwmixread int) (readPercent int, random bool, err error) {
	switch name {
	case "read", "randread":
		readPercent = 100
	case "write", "randwrite":
		readPercent = 0
	case "rw", "readwrite", "randrw", "mixed":
		if rwmixread < 0 || rwmixread > 100 {
			return 0, false, fmt.Errorf("%d percent of reads: want 0..100", rwmixread)
		}
		readPercent = rwmixread
	default:
		return 0, false, fmt.Errorf("%q is not a workload: use read, write, randread, randwrite, rw or randrw", name)
	}
	return readPercent, strings.HasPrefix(name, "rand") || name == "mixed", nil
}

// ParseSize parses a byte count with an optional k/m/g/t suffix (powers of 1024, as fio;
// "KiB" and "KB" mean the same).
func ParseSize(s string) (int64, error) {
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

const (
	phaseFill  = iota // verify: write the whole range once
	phaseRun          // the measured workload
	phaseCheck        // verify: read the whole range back
)

// perfState is one perf run over one controller.
type perfState struct {
	pc      *Config
	ctrl    *initiator.Controller
	ns      *initiator.Namespace
	lbaSize int
	// stamp is the run's identity in verify stamps: the seed (which also drives the
	// offsets, for repeatable runs) mixed with this invocation's start time, so that a
	// run never accepts what an earlier run with the same seed left on the media.
	stamp    uint64
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
	verify := pc.Verify
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
		if r.stop.Load() || (pc.IOs > 0 && r.issued.Add(1) > pc.IOs) {
			return false
		}
		switch pc.ReadPercent {
		case 100:
		case 0:
			write = true
		default:
			write = w.rng.IntN(100) >= pc.ReadPercent
		}
		if pc.Random {
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
		if pc.FUA {
			req.Flags = initiator.FUA
		}
		if verify {
			io.gen = w.gen[unit] + 1
			stampBlocks(req.Buf.Bytes(), r.lbaSize, req.LBA, uint64(io.gen), r.stamp)
		}
	} else {
		req.Op = initiator.OpRead
		req.Flags = 0
		if verify {
			// The buffer may hold what this context last wrote or read of the same
			// blocks: a read that succeeds without the target writing the buffer must
			// not find a valid stamp there.
			unstampBlocks(req.Buf.Bytes(), r.lbaSize)
		}
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
		if w.r.pc.Verify {
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
	if pc.Verify {
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
		if pc.Verify {
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
		if m := checkBlock(b[off:off+r.lbaSize], lba, gen, r.stamp); m != nil {
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

// Run runs cfg on ctrl: it sets up the workers, runs the phases (prefill, the measured
// run, read-back) and collects the results. It returns the results measured so far
// together with an error when the run failed (the controller failed, ctx was done, a
// command failed); data that did not read back as written is not an error but
// Result.Verify.Mismatches.
func Run(ctx context.Context, ctrl *initiator.Controller, cfg Config) (*Result, error) {
	pc := &cfg
	if pc.BlockSize <= 0 || pc.QueueDepth <= 0 || (pc.Runtime <= 0 && pc.IOs == 0) {
		return nil, fmt.Errorf("perf: block size %d, queue depth %d, runtime %v, %d I/Os: each must be positive (runtime or I/Os)",
			pc.BlockSize, pc.QueueDepth, pc.Runtime, pc.IOs)
	}
	if pc.Seed == 0 {
		pc.Seed = uint64(time.Now().UnixNano()) | 1
	}
	progress := pc.Messages
	if progress == nil {
		progress = io.Discard
	}
	r := &perfState{pc: pc, ctrl: ctrl, epoch: time.Now()}
	r.stamp = pc.Seed ^ uint64(r.epoch.UnixNano())*0x9E3779B97F4A7C15
	var err error
	if pc.NSID == 0 {
		nss := ctrl.Namespaces()
		if len(nss) == 0 {
			return nil, errors.New("the controller has no active namespace")
		}
		r.ns = nss[0]
	} else if r.ns, err = ctrl.Namespace(pc.NSID); err != nil {
		return nil, err
	}
	ns := r.ns
	r.lbaSize = ns.BlockSize()
	switch {
	case pc.BlockSize%r.lbaSize != 0:
		return nil, fmt.Errorf("--bs %d is not a multiple of the namespace's %d-byte blocks", pc.BlockSize, r.lbaSize)
	case pc.BlockSize > ctrl.MaxTransferSize():
		return nil, fmt.Errorf("--bs %d is larger than the controller's %d-byte transfer limit (MDTS)", pc.BlockSize, ctrl.MaxTransferSize())
	case pc.Offset%int64(r.lbaSize) != 0 || pc.Offset >= ns.Size():
		return nil, fmt.Errorf("--offset %d: not a multiple of %d inside the %d-byte namespace", pc.Offset, r.lbaSize, ns.Size())
	}
	size := ns.Size() - pc.Offset
	if pc.Size > 0 {
		if pc.Size > size {
			return nil, fmt.Errorf("--offset %d + --size %d is beyond the %d-byte namespace", pc.Offset, pc.Size, ns.Size())
		}
		size = pc.Size
	} else if pc.Verify {
		size = min(size, 256<<20)
	}
	units := uint64(size) / uint64(pc.BlockSize)
	r.perUnit = uint64(pc.BlockSize / r.lbaSize)
	r.base = uint64(pc.Offset) / uint64(r.lbaSize)
	nq := ctrl.IOQueues()
	if nq < pc.Queues {
		fmt.Fprintf(progress, "perf: the controller granted %d I/O queues of the %d asked for\n", nq, pc.Queues)
	}
	qd := pc.QueueDepth
	if d := ctrl.IOQueue(0).Depth(); d < qd {
		if ctrl.IOQueue(0).AuthReserved() {
			fmt.Fprintf(progress, "perf: queue depth %d limited to %d: the host keeps one of the controller's %d queue entries for authentication\n", qd, d, d+1)
		} else {
			fmt.Fprintf(progress, "perf: queue depth %d limited to the controller's %d\n", qd, d)
		}
		qd = d
	}
	per := units / uint64(nq)
	minUnits := uint64(1)
	if pc.Verify {
		minUnits = 2 * uint64(qd)
	}
	if per < minUnits {
		return nil, fmt.Errorf("the range of %d bytes holds %d I/Os of %d bytes: too few for %d queues x depth %d (use a larger --size or a smaller --bs)",
			size, units, pc.BlockSize, nq, qd)
	}
	if pc.Verify && units > 1<<28 {
		return nil, fmt.Errorf("verify over %d I/O units needs too much memory; use a smaller --size", units)
	}
	res := &Result{Workload: pc.Workload, BlockSize: pc.BlockSize, QueueDepth: qd, Queues: nq, Target: pc.Target,
		SubNQN: ctrl.Identify().SubNQN, NSID: ns.NSID, Offset: pc.Offset, Size: int64(per*uint64(nq)) * int64(pc.BlockSize), Seed: pc.Seed}
	if pc.hasRead() && pc.hasWrite() {
		res.RWMixRead = pc.ReadPercent
	}
	// Every buffer reference Run takes (each queue's memory and its slices), dropped when
	// it returns: the memory is freed once the commands still using it complete.
	var bufs []*initiator.Buffer
	defer func() {
		for _, b := range bufs {
			b.Release()
		}
	}()
	for i := 0; i < nq; i++ {
		w := &worker{r: r, q: ctrl.IOQueue(i), rng: rand.New(rand.NewPCG(pc.Seed, uint64(i))), lo: uint64(i) * per, n: per}
		if i == nq-1 && !pc.Verify {
			w.n = units - w.lo
		}
		if pc.Verify {
			w.gen = make([]uint32, w.n)
			w.busy = make([]uint64, (w.n+63)/64)
		}
		mem, err := ctrl.AllocBuffer(qd * pc.BlockSize)
		if err != nil {
			return nil, fmt.Errorf("allocating %d bytes of I/O buffers: %w", qd*pc.BlockSize, err)
		}
		bufs = append(bufs, mem)
		for j := 0; j < qd; j++ {
			io := &ioCtx{}
			buf := mem.Slice(j*pc.BlockSize, pc.BlockSize)
			bufs = append(bufs, buf)
			io.req = initiator.Request{NSID: ns.NSID, Blocks: uint32(r.perUnit), Buf: buf, Done: w.onDone, User: io}
			w.ios = append(w.ios, io)
		}
		r.workers = append(r.workers, w)
	}
	if !pc.Quiet {
		res.printHeader(progress, pc, ns)
	}

	if pc.Verify && pc.hasRead() {
		start := time.Now()
		if err := r.phase(ctx, phaseFill, nil); err != nil {
			err = fmt.Errorf("prefill for verify: %w", err)
			res.Error = err.Error()
			return res, err
		}
		res.Verify = &VerifyResult{PrefillS: time.Since(start).Seconds()}
		if !pc.Quiet {
			fmt.Fprintf(progress, "perf: verify: prefilled %s in %.1fs\n", humanize.IBytes(uint64(res.Size)), res.Verify.PrefillS)
		}
	}
	if pc.CPUProfile != "" {
		f, err := os.Create(pc.CPUProfile)
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
	if pc.Runtime > 0 {
		timer = time.AfterFunc(pc.Runtime, func() { r.stop.Store(true) })
	}
	var pr *progressPrinter
	if pc.Progress {
		pr = newProgress(r, progress)
	}
	runErr := r.phase(ctx, phaseRun, pr)
	elapsed := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if timer != nil {
		timer.Stop()
	}
	res.collect(r, elapsed, cpuTime(&ru1)-cpuTime(&ru0))
	if runErr == nil && pc.Verify && pc.hasWrite() && r.mismatches() == 0 {
		r.stop.Store(false)
		runErr = r.phase(ctx, phaseCheck, nil)
		if res.Verify == nil {
			res.Verify = &VerifyResult{}
		}
		res.Verify.ReadBack = true
	}
	if pc.Verify {
		if res.Verify == nil {
			res.Verify = &VerifyResult{}
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
				// A second that ended before this loop saw the run end still gets its
				// line: select picks at random among the cases ready.
				select {
				case at := <-tick:
					pr.print(at)
				default:
				}
				pr.finish()
			}
			// A failed controller is the root cause: the command that noticed it first
			// (its error in r.err) only reports a consequence, "aborted: connection lost".
			if err := r.ctrl.Err(); err != nil {
				return fmt.Errorf("controller failed: %w", err)
			}
			return r.err()
		case at := <-tick:
			pr.print(at)
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

// progressPrinter prints one line per second: the rates and mean latency since the last
// line. A line is labeled with the second it reports (its tick's time), however late it
// is printed (a busy machine, a slow terminal).
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

// print prints the line of the tick due at at.
func (p *progressPrinter) print(at time.Time) {
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
	fmt.Fprintf(&line, "[%4.0fs]", at.Sub(p.start).Seconds())
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
