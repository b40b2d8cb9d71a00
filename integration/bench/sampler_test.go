package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// shellFuncs returns the definitions of the named functions in guest-bench.sh, each from
// its "name() {" line to the first line that is a lone "}".
func shellFuncs(t *testing.T, names ...string) string {
	t.Helper()
	src, err := os.ReadFile("guest-bench.sh")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, n := range names {
		re := regexp.MustCompile(`(?ms)^` + regexp.QuoteMeta(n) + `\(\) \{\n.*?^\}\n`)
		def := re.Find(src)
		if def == nil {
			t.Fatalf("guest-bench.sh has no function %s", n)
		}
		b.Write(def)
	}
	return b.String()
}

// runBash runs script with bash and returns its standard output.
func runBash(t *testing.T, script string) string {
	t.Helper()
	sh, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	out, err := exec.Command(sh, "-c", script).Output()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, script)
	}
	return string(out)
}

// counts parses " key:count ..." lists as the sampler prints them.
func counts(t *testing.T, list string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range strings.Fields(list) {
		k, v, ok := strings.Cut(f, ":")
		if !ok {
			t.Fatalf("malformed entry %q in %q", f, list)
		}
		m[k] = v
	}
	return m
}

// The softirq threads' wake-ups by waking task, from a histogram in the format of the
// 6.1 guest's tracefs (testdata/wakeups.hist): summed over the threads of each kind.
func TestSamplerWakers(t *testing.T) {
	hist, err := filepath.Abs("testdata/wakeups.hist")
	if err != nil {
		t.Fatal(err)
	}
	out := runBash(t, shellFuncs(t, "hist_text", "wake_hist")+`
WAKE_HIST=`+hist+`
wake_hist
echo "$WAKE_LIST"
`)
	got := counts(t, out)
	want := map[string]string{
		"fio":     "27368", // 15367 + 12001: two fio threads
		"gonvmf":  "13487", // 8977 + 4510
		"kworker": "3",
		"other":   "13", // swapper 11 + ksoftirqd 2
	}
	if len(got) != len(want) {
		t.Errorf("wake_hist: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("wake_hist: %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// syscallHist writes a raw_syscalls histogram in the 6.1 guest's tracefs format, one entry
// per line given ("{ id: sys_write [  1] } hitcount: 3756"), to a file in dir.
func syscallHist(t *testing.T, dir string, entries []string, hits int) string {
	t.Helper()
	f := filepath.Join(dir, "hist")
	text := "# event histogram\n#\n# trigger info: hist:keys=id.syscall:vals=hitcount:sort=hitcount:size=512 if comm == \"gonvmf\" [active]\n#\n\n" +
		strings.Join(entries, "\n") + "\n\nTotals:\n    Hits: " + strconv.Itoa(hits) + "\n    Entries: " + strconv.Itoa(len(entries)) + "\n    Dropped: 0\n"
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// The system calls by name from the raw_syscalls histogram.
func TestSamplerSyscalls(t *testing.T) {
	f := syscallHist(t, t.TempDir(), []string{
		"{ id: sys_futex                   [202] } hitcount:         12",
		"{ id: sys_write                   [  1] } hitcount:       3756",
	}, 3768)
	out := runBash(t, shellFuncs(t, "hist_text", "sys_hist")+`
SYSCALL_HIST=`+f+`
sys_hist
echo "$SYS_TOTAL"
echo "$SYS_LIST"
`)
	lines := strings.SplitN(strings.TrimSpace(out), "\n", 2)
	if len(lines) != 2 || lines[0] != "3768" {
		t.Fatalf("sys_hist: total and list %q, want 3768 and the calls", out)
	}
	got := counts(t, lines[1])
	if len(got) != 2 || got["write"] != "3756" || got["futex"] != "12" {
		t.Errorf("sys_hist: %v, want write:3756 futex:12", got)
	}
}

// pid_ticks takes utime and stime from /proc/PID/stat (fields 14 and 15), split in memory.
func TestSamplerProcTicks(t *testing.T) {
	out := runBash(t, shellFuncs(t, "pid_ticks")+`
sleep 30 & p=$!
pid_ticks $p
echo "$UTICKS $STICKS $TICKS"
read -r line < /proc/$p/stat
kill $p
set -- ${line##*) }
echo "${12} ${13}"
`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("pid_ticks: output %q", out)
	}
	got, want := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(got) != 3 || len(want) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("pid_ticks: utime stime total %v, /proc/PID/stat says %v", got, want)
	}
}

// A sample parses the histograms in memory: reading their text back line by line from a
// here-string (a pipe, which bash's read builtin takes one byte per system call from) made a
// sample beside gonvmf thousands of system calls, each slow in the emulated guest, while the
// SCHED_FIFO sampler held a vCPU. Counted with strace where it is installed and may trace.
func TestSamplerHistReads(t *testing.T) {
	st, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (integration/vm/setup-host.sh installs it)")
	}
	sh, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	dir := t.TempDir()
	entries := make([]string, 60)
	for i := range entries {
		entries[i] = fmt.Sprintf("{ id: sys_call%-20d [%3d] } hitcount:       3756", i, i)
	}
	hist := syscallHist(t, dir, entries, 60*3756)
	wake, err := filepath.Abs("testdata/wakeups.hist")
	if err != nil {
		t.Fatal(err)
	}
	funcs := shellFuncs(t, "hist_text", "sys_hist", "wake_hist")
	reads := func(parse string) int {
		log := filepath.Join(dir, "trace")
		script := funcs + "SYSCALL_HIST=" + hist + " WAKE_HIST=" + wake + "\n" + parse + "\n"
		out, err := exec.Command(st, "-f", "-qq", "-e", "trace=read", "-o", log, sh, "--norc", "--noprofile", "-c", script).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "Operation not permitted") {
				t.Skipf("strace may not trace here: %s", out)
			}
			t.Fatalf("strace: %v\n%s", err, out)
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(data), "read(")
	}
	base := reads(":")
	parsed := reads("sys_hist; wake_hist; echo \"$SYS_TOTAL\" > /dev/null")
	// Two one-pass reads of the files (a few system calls each); byte by byte it was ~4,500.
	n := parsed - base
	t.Logf("parsing two histograms: %d read system calls", n)
	if n > 40 {
		t.Errorf("parsing two histograms took %d read system calls (%d with, %d without); want a few per file", n, parsed, base)
	}
}

// hist_clear writes the trigger back with ":clear" before its filter, to the trigger file
// beside the histogram's.
func TestSamplerHistClear(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ trigger, want string }{
		{`hist:keys=id.syscall:vals=hitcount:size=512 if comm == "gonvmf"`,
			`hist:keys=id.syscall:vals=hitcount:size=512:clear if comm == "gonvmf"`},
		{`hist:keys=common_pid.execname:vals=hitcount:size=1024 if comm ~ "ksoftirqd*"`,
			`hist:keys=common_pid.execname:vals=hitcount:size=1024:clear if comm ~ "ksoftirqd*"`},
		{`hist:keys=id.syscall:vals=hitcount`, `hist:keys=id.syscall:vals=hitcount:clear`},
	} {
		trig := filepath.Join(dir, "trigger")
		if err := os.WriteFile(trig, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		runBash(t, "log() { echo \"$*\" >&2; }\n"+shellFuncs(t, "hist_clear")+
			"hist_clear "+filepath.Join(dir, "hist")+" '"+c.trigger+"'\nhist_clear '' '"+c.trigger+"'\n")
		got, err := os.ReadFile(trig)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSuffix(string(got), "\n") != c.want {
			t.Errorf("hist_clear of %q wrote %q, want %q", c.trigger, got, c.want)
		}
	}
}
