package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// run is one synthetic fio run of the fixture.
type run struct {
	rep              int
	backend, target  string
	job              string // rw-bs-qdN
	iops, mibps      float64
	p50, p99         float64 // µs
	busy, fio, proc  int     // CPU ticks in the sample window (busy = user+system+softirq)
	windowOff        float64 // seconds the CPU window starts after fio's measured interval begins, less 1
	noCPU, fioFailed bool
	ext              *ext // the counters guest-bench.sh samples since it counts kernel crossings
}

// ext is what a sample window adds beyond /proc/stat and utime+stime: the target's system
// calls (and per call), its threads' switches and run time, fio's, the guest's switches and,
// with hasSoft, the softirq threads' switches (soft), with hasWait, the run-queue waits of
// the target's, the softirq threads' and fio's threads (ns) and, with hasSplit, the target's
// utime and stime (ticks).
type ext struct {
	sys, cs, fioCS, ctxt    int
	ns, fioNS               int64
	calls                   map[string]int
	soft                    int
	hasSoft                 bool
	wait, softWait, fioWait int64
	hasWait                 bool
	utime, stime            int
	hasSplit                bool
	wakes                   map[string]int // softirq-thread wake-ups in the window, by waker
}

const (
	hz        = 100
	runtime   = 10.0 // fio runtime (s)
	windowLen = 8.5  // CPU window (s)
)

// fixture writes raw results in the layout guest-bench.sh produces.
type fixture struct {
	t    *testing.T
	dir  string
	raw  string
	runs []run
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw")
	for _, d := range []string{"fio", "cpu", "perftest", "host", "meta", ".vm"} {
		if err := os.MkdirAll(filepath.Join(raw, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{t: t, dir: dir, raw: raw}
}

func (f *fixture) write(rel, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.raw, rel), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) add(r run) { f.runs = append(f.runs, r) }

func (f *fixture) finish(gonvmfStatus string, sessions, scaling string) {
	f.t.Helper()
	f.write("params.env", "RUNTIME=10\nRAMP=2\nREPS=3\nQDS=\"1 32\"\nNCPU=2\nHZ=100\nGONVMF_TRANSPORT=\"\"\n")
	f.write("meta/guest.txt", "kernel: 6.1.0-test\nvcpus: 2\nrxe_active_mtu: 4096\n")
	f.write("host/machine.txt", "date: 2026-01-01T00:00:00Z\ngit_commit: 0123456789abcdef\ngit_describe: 0123456-dirty\nwall_seconds: 42\n")
	f.write(".vm/status", "exit 0\n")
	f.write("gonvmf-status.txt", gonvmfStatus+"\n")
	f.write("sessions.tsv", "rep\tbackend\ttarget\torder\tstatus\tconnect_s\tio_queues\tqueue_size\tlba_bytes\tgonvmf_rss_start_kb\tgonvmf_rss_connected_kb\tgonvmf_rss_end_kb\tgonvmf_hwm_end_kb\treason\tverify\n"+sessions)
	f.write("scaling.tsv", "rep\ttarget\tqps_requested\tcontrollers\tio_queues_per_ctrl_requested\tio_queues_granted\tconnect_total_s\tconnect_first_s\tconnect_median_s\tconnect_max_s\tdisconnect_s\tgonvmf_rss_before_kb\tgonvmf_rss_after_kb\tguest_used_delta_kb\tslab_delta_kb\tstatus\n"+scaling)
	f.write("perftest/r1-ib_write_bw-4096.txt", " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 4096       7500             0.00               0.131072   		   0.004000\n")
	f.write("perftest/r1-ib_send_lat-8.txt", " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n 8       800          inf            inf          inf      	       inf         	-nan   		inf     		inf\n")
	// One fio JSON per session (rep, backend, target) holding its jobs, as guest-bench.sh writes.
	var idx bytes.Buffer
	idx.WriteString("rep\tbackend\ttarget\tjob\trw\tbs\tqd\tfio_rc\tjson\tcpu\n")
	sessionJobs := map[string][]any{}
	sessionRC := map[string]int{}
	var order []string
	for _, r := range f.runs {
		session := fmt.Sprintf("r%d-%s-%s", r.rep, r.backend, r.target)
		if _, ok := sessionRC[session]; !ok {
			order = append(order, session)
			sessionRC[session] = 0
		}
		var rw, bs string
		var qd int
		parts := strings.Split(r.job, "-")
		rw, bs = parts[0], parts[1]
		fmt.Sscanf(parts[2], "qd%d", &qd)
		if r.fioFailed {
			sessionRC[session] = 1
		}
		fmt.Fprintf(&idx, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%%RC:%s%%\tfio/%s.json\tcpu/%s-%s.txt\n", r.rep, r.backend, r.target, r.job, rw, bs, qd, session, session, session, r.job)
		dir := map[string]any{
			"io_bytes": int64(r.mibps * 1048576 * runtime), "iops": r.iops, "bw_bytes": r.mibps * 1048576,
			"lat_ns":  map[string]any{"mean": r.p50 * 1000, "percentile": map[string]float64{"50.000000": r.p50 * 1000, "99.000000": r.p99 * 1000, "99.900000": r.p99 * 1000}},
			"clat_ns": map[string]any{"mean": r.p50 * 1000},
		}
		empty := map[string]any{"io_bytes": 0, "iops": 0.0, "bw_bytes": 0.0, "lat_ns": map[string]any{"mean": 0.0}}
		job := map[string]any{"jobname": r.job, "error": 0, "job_runtime": runtime * 1000, "read": dir, "write": empty}
		if strings.Contains(rw, "write") {
			job["read"], job["write"] = empty, dir
		}
		if !r.fioFailed {
			sessionJobs[session] = append(sessionJobs[session], job)
		}
		if !r.noCPU {
			// the job's I/O starts at go; fio measures from go+ramp to go+ramp+runtime
			goAt := 1000.0 * float64(r.rep)
			e0 := goAt + 2 + 1 + r.windowOff
			// epoch uptime user nice system idle iowait irq softirq steal fio target
			idle := int(windowLen*hz*2) - r.busy
			first := fmt.Sprintf("%.6f 100.0 1000 0 1000 5000 0 0 100 0 300 400", e0)
			last := fmt.Sprintf("%.6f %.3f %d 0 %d %d 0 0 %d 0 %d %d", e0+windowLen, 100+windowLen, 1000+r.busy/2, 1000+r.busy-r.busy/2-r.busy/5, 5000+idle, 100+r.busy/5, 300+r.fio, 400+r.proc)
			var s0, s1 string
			if x := r.ext; x != nil {
				// target_syscalls target_cs target_ns fio_cs fio_ns guest_ctxt
				first += " 1000 50 7000000000 60 8000000000 90000"
				last += fmt.Sprintf(" %d %d %d %d %d %d", 1000+x.sys, 50+x.cs, 7000000000+x.ns, 60+x.fioCS, 8000000000+x.fioNS, 90000+x.ctxt)
				if x.hasSoft { // softirq_cs
					first += " 700"
					last += fmt.Sprintf(" %d", 700+x.soft)
				}
				if x.hasWait { // target_wait softirq_wait fio_wait
					first += " 1000000 2000000 3000000"
					last += fmt.Sprintf(" %d %d %d", 1000000+x.wait, 2000000+x.softWait, 3000000+x.fioWait)
				}
				if x.hasSplit { // target_utime target_stime
					first += " 250 150"
					last += fmt.Sprintf(" %d %d", 250+x.utime, 150+x.stime)
				}
				s0, s1 = fmt.Sprintf("s %.6f write:500 ioctl:500", e0), fmt.Sprintf("s %.6f", e0+windowLen)
				for _, k := range []string{"write", "ioctl", "poll"} {
					base := map[string]int{"write": 500, "ioctl": 500}[k]
					if n := base + x.calls[k]; n > 0 {
						s1 += fmt.Sprintf(" %s:%d", k, n)
					}
				}
				first += "\n" + s0
				last += "\n" + s1
				if x.wakes != nil { // k epoch waker:count ...; the first sample has seen 100 of each
					k0, k1 := fmt.Sprintf("k %.6f", e0), fmt.Sprintf("k %.6f", e0+windowLen)
					for _, o := range []string{"fio", "gonvmf", "other"} {
						if n, ok := x.wakes[o]; ok {
							k0 += fmt.Sprintf(" %s:100", o)
							k1 += fmt.Sprintf(" %s:%d", o, 100+n)
						}
					}
					first += "\n" + k0
					last += "\n" + k1
				}
			}
			f.write("cpu/"+session+"-"+r.job+".txt", fmt.Sprintf("# go %.6f ramp 2 runtime %g fio_pid 1 target_pid 2 after_s 5.0\n%s\n%s\n", goAt, runtime, first, last))
		}
	}
	for _, session := range order {
		if jobs := sessionJobs[session]; len(jobs) > 0 {
			js, _ := json.Marshal(map[string]any{"jobs": jobs})
			// fio puts its prerun notices before the JSON
			f.write("fio/"+session+".json", "x : Saving output of prerun in x.prerun.txt\n"+string(js))
		}
	}
	tsv := idx.String()
	for session, rc := range sessionRC {
		tsv = strings.ReplaceAll(tsv, "%RC:"+session+"%", fmt.Sprint(rc))
	}
	f.write("runs.tsv", tsv)
}

// report runs report.py on the fixture and returns report.md and summary.json.
func (f *fixture) report() (string, map[string]any) {
	f.t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		f.t.Skip("python3 is not installed (report.py needs it): apt-get install python3")
	}
	cmd := exec.Command(py, "report.py", f.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("report.py %s: %v\n%s", f.dir, err, out)
	}
	md, err := os.ReadFile(filepath.Join(f.dir, "report.md"))
	if err != nil {
		f.t.Fatal(err)
	}
	var sum map[string]any
	b, err := os.ReadFile(filepath.Join(f.dir, "summary.json"))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		f.t.Fatalf("summary.json: %v", err)
	}
	return string(md), sum
}

// get walks summary.json: get(sum, "jobs", "null/randread-4k-qd32", "ratio", "iops").
func get(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("summary.json: %v: %q is not an object", path, p)
		}
		v, ok = m[p]
		if !ok {
			t.Fatalf("summary.json: no %v (stopped at %q)", path, p)
		}
	}
	return v
}

func near(t *testing.T, what string, got any, want float64) {
	t.Helper()
	g, ok := got.(float64)
	if !ok || math.Abs(g-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %.6f", what, got, want)
	}
}

// Both targets measured: medians, ranges and ratios oriented so that >= 1 favours gonvmf.
func TestReportRatios(t *testing.T) {
	f := newFixture(t)
	for rep := 1; rep <= 3; rep++ {
		d := float64(rep * 10)
		// randread QD32: gonvmf has more IOPS, lower latency and less CPU per I/O
		f.add(run{rep: rep, backend: "null", target: "kernel", job: "randread-4k-qd32", iops: 1000 + d, mibps: 4, p50: 100, p99: 500 + d, busy: 170, fio: 70})
		f.add(run{rep: rep, backend: "null", target: "gonvmf", job: "randread-4k-qd32", iops: 1200 + d, mibps: 5, p50: 80, p99: 400 + d, busy: 120, fio: 70, proc: 40})
		// 128k read: gonvmf slower
		f.add(run{rep: rep, backend: "null", target: "kernel", job: "read-128k-qd16", iops: 800, mibps: 100, p50: 900, p99: 2000, busy: 100, fio: 50})
		f.add(run{rep: rep, backend: "null", target: "gonvmf", job: "read-128k-qd16", iops: 640, mibps: 80, p50: 1100, p99: 2500, busy: 100, fio: 50, proc: 30})
		// 128k read with fio on vCPU 0: gonvmf faster
		f.add(run{rep: rep, backend: "null", target: "kernel", job: "read-128k-qd16-cpu0", iops: 400, mibps: 50, p50: 1800, p99: 3000, busy: 100, fio: 50})
		f.add(run{rep: rep, backend: "null", target: "gonvmf", job: "read-128k-qd16-cpu0", iops: 440, mibps: 55, p50: 1600, p99: 2900, busy: 100, fio: 50, proc: 30})
		// the sweep's QD1 point
		f.add(run{rep: rep, backend: "null", target: "kernel", job: "randread-4k-qd1", iops: 300, mibps: 1, p50: 3000, p99: 4000, busy: 50, fio: 20})
		f.add(run{rep: rep, backend: "null", target: "gonvmf", job: "randread-4k-qd1", iops: 330, mibps: 1.2, p50: 2900, p99: 3900, busy: 50, fio: 20, proc: 10})
		// a sweep point outside the summary: its CPU shows in the CPU table too
		f.add(run{rep: rep, backend: "null", target: "kernel", job: "randread-4k-qd64", iops: 1100, mibps: 4.3, p50: 200, p99: 900, busy: 340, fio: 35})
		f.add(run{rep: rep, backend: "null", target: "gonvmf", job: "randread-4k-qd64", iops: 1000, mibps: 3.9, p50: 220, p99: 1200, busy: 240, fio: 70, proc: 80})
	}
	sessions := "1\tnull\tkernel\t1\tok\t0.800\t2\t128\t512\t\t\t\t\t\n" +
		"1\tnull\tgonvmf\t2\tok\t0.400\t2\t128\t512\t10240\t12288\t14336\t16384\t\n"
	scaling := "1\tkernel\t8\t4\t2\t8\t4.000\t1.0\t1.0\t1.1\t0.5\t\t\t2048\t1024\tok\n" +
		"1\tgonvmf\t8\t4\t2\t8\t2.000\t0.5\t0.5\t0.6\t0.3\t10240\t20480\t4096\t512\tok\n"
	f.finish("available", sessions, scaling)
	md, sum := f.report()

	j := "null/randread-4k-qd32"
	near(t, "kernel IOPS median", get(t, sum, "jobs", j, "kernel", "iops", "median"), 1020)
	near(t, "kernel IOPS min", get(t, sum, "jobs", j, "kernel", "iops", "min"), 1010)
	near(t, "kernel IOPS max", get(t, sum, "jobs", j, "kernel", "iops", "max"), 1030)
	near(t, "IOPS ratio (gonvmf/kernel)", get(t, sum, "jobs", j, "ratio", "iops"), 1220.0/1020)
	near(t, "p99 ratio (kernel/gonvmf)", get(t, sum, "jobs", j, "ratio", "lat_p99"), 520.0/420)
	// CPU per I/O: (busy - fio) ticks / hz / (iops * window)
	kcpu := (170.0 - 70) / hz / (1020 * windowLen) * 1e6
	gcpu := (120.0 - 70) / hz / (1220 * windowLen) * 1e6
	near(t, "kernel CPU µs/IO", get(t, sum, "jobs", j, "kernel", "cpu_us_io", "median"), kcpu)
	near(t, "CPU ratio (kernel/gonvmf)", get(t, sum, "jobs", j, "ratio", "cpu_us_io"), kcpu/gcpu)
	// the whole guest's CPU per I/O: fio's ticks included
	kall := 170.0 / hz / (1020 * windowLen) * 1e6
	gall := 120.0 / hz / (1220 * windowLen) * 1e6
	near(t, "kernel whole-guest CPU µs/IO", get(t, sum, "jobs", j, "kernel", "cpu_all_us_io", "median"), kall)
	near(t, "whole-guest CPU ratio (kernel/gonvmf)", get(t, sum, "jobs", j, "ratio", "cpu_all_us_io"), kall/gall)
	near(t, "gonvmf process µs/IO", get(t, sum, "jobs", j, "gonvmf", "proc_us_io", "median"), 40.0/hz/(1220*windowLen)*1e6)
	near(t, "128k bandwidth ratio", get(t, sum, "jobs", "null/read-128k-qd16", "ratio", "mibps"), 0.8)
	near(t, "128k bandwidth ratio, fio on vCPU 0", get(t, sum, "jobs", "null/read-128k-qd16-cpu0", "ratio", "mibps"), 1.1)
	// the summary: the pinned job's rows after the main jobs' (the 128k write row is absent:
	// not measured in this fixture)
	inOrder(t, md, "the summary's 128k rows, then the pinned ones",
		"| read 128k QD16 | bandwidth (MiB/s) | 100 | 80.0 | **0.80** (0.80–0.80) |",
		"| read 128k QD16, fio on vCPU 0 | bandwidth (MiB/s) | 50.0 | 55.0 | 1.10 (1.10–1.10) |",
		"| read 128k QD16, fio on vCPU 0 | CPU per I/O, all but fio (µs) |")
	if !strings.Contains(md, "| randread 4k QD32 | CPU per I/O, whole guest (µs) |") {
		t.Errorf("report.md: the summary lacks the whole guest's CPU per I/O")
	}
	if !strings.Contains(md, `The rows "fio on vCPU 0" repeat the 128k jobs`) {
		t.Errorf("report.md: the pinned rows are not explained")
	}

	for _, want := range []string{
		"| gonvmf | measured |",
		"≥ 1.00 means gonvmf is better",
		"| randread 4k QD32 | IOPS | 1,020 | 1,220 | 1.20 (1.19–1.20) |",
		"| read 128k QD16 | bandwidth (MiB/s) | 100 | 80.0 | **0.80** (0.80–0.80) |",
		"| randread 4k QD32 | latency p99 (µs), lower is better | 520 [510–530] | 420 [410–430] | 1.24 (1.23–1.24) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if !strings.Contains(md, "| 1 | 300 [300–300] | 330 [330–330] | 1.10") {
		t.Errorf("report.md: the sweep's QD1 row is missing or wrong")
	}
	if !strings.Contains(md, "| 8 | kernel | 4 × 2 | 8 | 4.00 |") || !strings.Contains(md, "| 8 | gonvmf | 4 × 2 | 8 | 2.00 |") {
		t.Errorf("report.md: scaling rows missing or wrong")
	}
	if !strings.Contains(md, "Connect-time ratio kernel/gonvmf (≥ 1: gonvmf connects faster): 8 QPs 2.00") {
		t.Errorf("report.md: the scaling connect-time ratio is missing or wrong")
	}
	if !strings.Contains(md, "| null | 0.80 | 0.40 | 2.00 |") {
		t.Errorf("report.md: the session connect-time row is missing or wrong")
	}
	// the CPU table: the summary's jobs first, then the sweep's other depths (ticks 340 and
	// 240 are twice the QD32 rows' 170 and 120; fio 35 half of 70; process 80 twice 40)
	inOrder(t, md, "the CPU table's jobs, the sweep's QD64 last",
		"| null | randread 4k QD32 | 10.0 / 7.1 | 4.1 / 4.1 | 2.4 | – |",
		"| null | read 128k QD16 | 5.9 / 5.9 | 2.9 / 2.9 | 1.8 | – |",
		"| null | randread 4k QD64 | 20.0 / 14.1 | 2.1 / 4.1 | 4.7 | – |")
	if !strings.Contains(md, "n/a (perftest measured no clock") {
		t.Errorf("report.md: perftest's inf latency is not reported as n/a")
	}
	checkPlot(t, f.dir, md)
}

// inOrder fails the test unless md holds every row, each after the one before.
func inOrder(t *testing.T, md, what string, rows ...string) {
	t.Helper()
	at := make([]int, len(rows))
	ok := true
	for i, r := range rows {
		at[i] = strings.Index(md, r)
		if at[i] < 0 || i > 0 && at[i] < at[i-1] {
			ok = false
		}
	}
	if !ok {
		t.Errorf("report.md: %s: rows missing or out of order (offsets %v, -1 missing)", what, at)
	}
}

// The kernel crossings: gonvmf's system calls per I/O (in total and by call) and its
// threads' context switches; the guest's switches less fio's for both targets; process
// CPU from the scheduler's run time rather than ticks.
func TestReportCrossings(t *testing.T) {
	f := newFixture(t)
	for rep := 1; rep <= 3; rep++ {
		f.add(run{rep: rep, backend: "null", target: "kernel", job: "randread-4k-qd32", iops: 1000, mibps: 4, p50: 100, p99: 500, busy: 170, fio: 70,
			ext: &ext{fioCS: 3000, fioNS: 700_000_000, ctxt: 3000 + 8500, soft: 1700, hasSoft: true,
				softWait: 85_000_000, fioWait: 170_000_000, hasWait: true, wakes: map[string]int{"fio": 850}}})
		f.add(run{rep: rep, backend: "null", target: "gonvmf", job: "randread-4k-qd32", iops: 1000, mibps: 4, p50: 100, p99: 500, busy: 170, fio: 70, proc: 999,
			ext: &ext{sys: 17000 + 850*rep, cs: 4250, ns: 425_000_000, fioCS: 3000, fioNS: 700_000_000, ctxt: 3000 + 17000,
				calls: map[string]int{"write": 8500, "ioctl": 8500 + 850*rep}, soft: 6800 * rep, hasSoft: true,
				wait: 425_000_000 * int64(rep), softWait: 170_000_000, fioWait: 340_000_000, hasWait: true,
				utime: 100 * rep, stime: 300, hasSplit: true,
				// 0.85 + (0.20, 0.25, 0.30) per I/O, and 0.005 other: counted, not listed
				wakes: map[string]int{"fio": 7225, "gonvmf": 1275 + 425*rep, "other": 42}}})
	}
	f.finish("available", "1\tnull\tkernel\t1\tok\t0.8\t2\t128\t512\t\t\t\t\t\tok\n"+
		"1\tnull\tgonvmf\t2\tok\t0.8\t2\t128\t512\t1\t1\t1\t1\t\tfio verify exited 1: bad magic\n"+
		"2\tnull\tgonvmf\t1\tok\t0.8\t2\t128\t512\t1\t1\t1\t1\t\tnot run (rep 2)\n", "")
	md, sum := f.report()
	j := "null/randread-4k-qd32"
	ios := 1000 * windowLen
	near(t, "gonvmf system calls per I/O", get(t, sum, "jobs", j, "gonvmf", "sys_io", "median"), (17000+850*2)/ios)
	near(t, "gonvmf context switches per I/O", get(t, sum, "jobs", j, "gonvmf", "proc_cs_io", "median"), 4250/ios)
	near(t, "kernel switches per I/O, all but fio", get(t, sum, "jobs", j, "kernel", "cs_io", "median"), 8500/ios)
	near(t, "switch ratio (kernel/gonvmf)", get(t, sum, "jobs", j, "ratio", "cs_io"), 0.5)
	near(t, "kernel softirq-thread switches per I/O", get(t, sum, "jobs", j, "kernel", "soft_cs_io", "median"), 1700/ios)
	near(t, "gonvmf softirq-thread switches per I/O", get(t, sum, "jobs", j, "gonvmf", "soft_cs_io", "median"), 6800*2/ios)
	near(t, "softirq-thread switch ratio (kernel/gonvmf)", get(t, sum, "jobs", j, "ratio", "soft_cs_io"), 1700.0/(6800*2))
	// schedstat run time, not the 999 ticks of utime+stime
	near(t, "gonvmf process µs/IO", get(t, sum, "jobs", j, "gonvmf", "proc_us_io", "median"), 425_000.0/ios)
	near(t, "kernel CPU µs/IO (fio from schedstat)", get(t, sum, "jobs", j, "kernel", "cpu_us_io", "median"), (170.0/hz-0.7)/ios*1e6)
	near(t, "gonvmf run-queue wait µs/IO", get(t, sum, "jobs", j, "gonvmf", "proc_wait_io", "median"), 2*425_000.0/ios)
	// the run time split in the ratio of utime to stime: 100:300, 200:300, 300:300 ticks
	near(t, "gonvmf user-mode µs/IO", get(t, sum, "jobs", j, "gonvmf", "proc_user_us_io", "median"), 425_000.0/ios*200/500)
	near(t, "gonvmf system-mode µs/IO", get(t, sum, "jobs", j, "gonvmf", "proc_sys_us_io", "median"), 425_000.0/ios*300/500)
	near(t, "kernel softirq-thread wait µs/IO", get(t, sum, "jobs", j, "kernel", "soft_wait_io", "median"), 85_000.0/ios)
	near(t, "softirq-thread wait ratio (kernel/gonvmf)", get(t, sum, "jobs", j, "ratio", "soft_wait_io"), 0.5)
	near(t, "fio wait ratio (kernel/gonvmf)", get(t, sum, "jobs", j, "ratio", "fio_wait_io"), 0.5)
	for _, want := range []string{
		"| randread 4k QD32 | system calls per I/O, gonvmf process | – | 2.20 | – |",
		"| randread 4k QD32 | context switches per I/O, all but fio | 1.00 | 2.00 | **0.50** (0.50–0.50) |",
		"| randread 4k QD32 | context switches per I/O, softirq threads | 0.200 | 1.60 | **0.12** (0.08–0.25) |",
		"| randread 4k QD32 | softirq-thread wake-ups per I/O | 0.100 | 1.10 | **0.09** (0.09–0.09) |",
		"| null | randread 4k QD32 | 0.10 | fio 0.10 | 1.10 | fio 0.85, gonvmf 0.25 |",
		"- **softirq-thread wake-ups**: how often `ksoftirqd/N` was woken",
		"- **context switches, softirq threads**: the same for the guest's `ksoftirqd/N` threads",
		"| randread 4k QD32 | run-queue wait per I/O, gonvmf process (µs) | – | 100 | – |",
		"| randread 4k QD32 | run-queue wait per I/O, fio (µs) | 20.0 | 40.0 | **0.50** (0.50–0.50) |",
		"- **run-queue wait**: the time threads were runnable but waited for a vCPU",
		"## Kernel crossings per I/O",
		"| null | randread 4k QD32 | 2.20 | ioctl 1.20, write 1.00 |",
		"| randread 4k QD32 | CPU per I/O, gonvmf process, user mode (µs), lower is better | – | 20.0 [12.5–25.0] | – |",
		"| null | randread 4k QD32 | 10.0 / 10.0 | 4.1 / 4.1 | 2.5 | 20.0 / 30.0 |",
		"null kernel ok; null gonvmf **failed**: fio verify exited 1: bad magic.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

// Samples from before the run-queue fields (19 per line): everything else is reported as
// before, and no run-queue or wake-up rows or text appear.
func TestReportCrossingsWithoutWaits(t *testing.T) {
	f := newFixture(t)
	for rep := 1; rep <= 3; rep++ {
		f.add(run{rep: rep, backend: "null", target: "kernel", job: "randread-4k-qd32", iops: 1000, mibps: 4, p50: 100, p99: 500, busy: 170, fio: 70,
			ext: &ext{fioCS: 3000, fioNS: 700_000_000, ctxt: 3000 + 8500, soft: 1700, hasSoft: true}})
		f.add(run{rep: rep, backend: "null", target: "gonvmf", job: "randread-4k-qd32", iops: 1000, mibps: 4, p50: 100, p99: 500, busy: 170, fio: 70, proc: 999,
			ext: &ext{sys: 17000, cs: 4250, ns: 425_000_000, fioCS: 3000, fioNS: 700_000_000, ctxt: 3000 + 17000,
				calls: map[string]int{"write": 8500, "ioctl": 8500}, soft: 6800, hasSoft: true}})
	}
	f.finish("available", "", "")
	md, sum := f.report()
	j := "null/randread-4k-qd32"
	ios := 1000 * windowLen
	near(t, "gonvmf system calls per I/O", get(t, sum, "jobs", j, "gonvmf", "sys_io", "median"), 17000/ios)
	near(t, "gonvmf softirq-thread switches per I/O", get(t, sum, "jobs", j, "gonvmf", "soft_cs_io", "median"), 6800/ios)
	for _, m := range []string{"proc_wait_io", "soft_wait_io", "fio_wait_io", "proc_user_us_io", "proc_sys_us_io", "soft_wake_io"} {
		if v, ok := get(t, sum, "jobs", j, "gonvmf").(map[string]any)[m]; ok {
			t.Errorf("summary.json has %s = %v from samples without its fields", m, v)
		}
	}
	if !strings.Contains(md, "| null | randread 4k QD32 | 10.0 / 10.0 | 4.1 / 4.1 | 2.5 | – |") {
		t.Errorf("report.md: the CPU table's user/system cell is not empty without utime and stime samples")
		t.Log(md)
	}
	if strings.Contains(md, "run-queue wait") {
		t.Errorf("report.md mentions run-queue waits it has no samples of")
	}
	if strings.Contains(md, "softirq-thread wake-ups") {
		t.Errorf("report.md mentions softirq-thread wake-ups it has no samples of")
	}
	if !strings.Contains(md, "| null | randread 4k QD32 | 2.00 | ioctl 1.00, write 1.00 |") {
		t.Errorf("report.md lacks the system calls by name")
		t.Log(md)
	}
}

// gonvmf not serving yet: its columns are empty, the reason is stated, nothing fails.
func TestReportGonvmfUnavailable(t *testing.T) {
	f := newFixture(t)
	for rep := 1; rep <= 3; rep++ {
		f.add(run{rep: rep, backend: "file", target: "kernel", job: "randwrite-4k-qd32", iops: 500 + float64(rep), mibps: 2, p50: 100, p99: 300, busy: 100, fio: 40})
	}
	reason := "no gonvmf binary: cmd/gonvmf has no Go files yet: nothing to build"
	f.finish("unavailable file: "+reason,
		"1\tfile\tkernel\t1\tok\t0.900\t2\t128\t4096\t\t\t\t\t\n1\tfile\tgonvmf\t2\tunavailable\t\t\t\t\t\t\t\t\t"+reason+"\n",
		"1\tgonvmf\t1\t\t\t\t\t\t\t\t\t\t\t\t\tunavailable: "+reason+"\n")
	md, sum := f.report()
	if !strings.Contains(md, "| gonvmf | **not available**: file: "+reason+" |") {
		t.Errorf("report.md does not say why gonvmf is missing")
	}
	if !strings.Contains(md, "| randwrite 4k QD32 | IOPS | 502 | – | – |") {
		t.Errorf("report.md: the kernel-only summary row is missing or wrong")
	}
	if r := get(t, sum, "jobs", "file/randwrite-4k-qd32"); r.(map[string]any)["ratio"] != nil {
		t.Errorf("summary.json has a ratio without gonvmf results: %v", r)
	}
}

// A CPU window outside fio's measured interval (a stalled guest) is left out and said so;
// a failed fio run is left out of the medians and listed.
func TestReportBadSamples(t *testing.T) {
	f := newFixture(t)
	f.add(run{rep: 1, backend: "null", target: "kernel", job: "randread-4k-qd1", iops: 100, mibps: 1, p50: 1, p99: 2, busy: 10, fio: 5, windowOff: 2})
	f.add(run{rep: 2, backend: "null", target: "kernel", job: "randread-4k-qd1", iops: 110, mibps: 1, p50: 1, p99: 2, busy: 10, fio: 5, windowOff: 0.3})
	f.add(run{rep: 3, backend: "null", target: "kernel", job: "randread-4k-qd1", fioFailed: true, noCPU: true})
	f.finish("available", "1\tnull\tkernel\t1\tok\t1.0\t2\t128\t512\t\t\t\t\t\n", "")
	md, sum := f.report()
	if !strings.Contains(md, "**CPU samples left out**") || !strings.Contains(md, "kernel rep 1 null randread-4k-qd1: no CPU samples spanning fio's measured interval (1 of 2 inside)") {
		t.Errorf("report.md does not list the CPU window that missed fio's interval")
	}
	if !strings.Contains(md, "**Failed runs**") || !strings.Contains(md, "kernel rep 3 null randread-4k-qd1: fio exited 1") {
		t.Errorf("report.md does not list the failed fio run")
	}
	near(t, "IOPS median of the two good runs", get(t, sum, "jobs", "null/randread-4k-qd1", "kernel", "iops", "median"), 105)
	near(t, "CPU samples kept", get(t, sum, "jobs", "null/randread-4k-qd1", "kernel", "cpu_us_io", "n"), 1)
}

func checkPlot(t *testing.T, dir, md string) {
	t.Helper()
	if _, err := exec.LookPath("gnuplot"); err != nil {
		if !strings.Contains(md, "No plot: gnuplot is not installed") {
			t.Errorf("without gnuplot the report should say so")
		}
		return
	}
	png, err := os.ReadFile(filepath.Join(dir, "iops-vs-qd.png"))
	if err != nil {
		t.Fatalf("gnuplot is installed but no plot was drawn: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("iops-vs-qd.png is not a PNG")
	}
	if !strings.Contains(md, "![IOPS and latency against queue depth](iops-vs-qd.png)") {
		t.Errorf("report.md does not show the plot")
	}
}
