package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// The system calls by name from the raw_syscalls histogram.
func TestSamplerSyscalls(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hist")
	text := "# event histogram\n#\n# trigger info: hist:keys=id.syscall:vals=hitcount:sort=hitcount:size=512 if comm == \"gonvmf\" [active]\n#\n\n" +
		"{ id: sys_futex                   [202] } hitcount:         12\n" +
		"{ id: sys_write                   [  1] } hitcount:       3756\n\nTotals:\n    Hits: 3768\n    Entries: 2\n    Dropped: 0\n"
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
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
