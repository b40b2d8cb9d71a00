package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runTestsLib runs bash with run-tests-lib.sh sourced, then the script, with args as $1...
// It returns the output of the script, stdout and stderr together.
func runTestsLib(t *testing.T, env []string, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"-c", "set -u; . ./run-tests-lib.sh; " + script, "bash"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash -c %q %q: %v\n%s", script, args, err, out)
	}
	return string(out)
}

// TestRunTestsLibDeadline: a suite is started only when its vm.sh --timeout (the last one
// of its options, as vm.sh takes it) plus vm.sh's overhead ends before the deadline.
func TestRunTestsLibDeadline(t *testing.T) {
	for _, c := range []struct {
		env  []string
		opts string
		want string
	}{
		{nil, "--quiet", "900"},
		{[]string{"GONVMF_VM_TIMEOUT=700"}, "--disk 1G", "700"},
		{[]string{"GONVMF_VM_TIMEOUT=700"}, "--timeout 900 --disk 1G --timeout 600 --quiet", "600"},
		{nil, "--kernel 6.12 --timeout 1500", "1500"},
	} {
		got := strings.TrimSpace(runTestsLib(t, append([]string{"GONVMF_VM_TIMEOUT="}, c.env...),
			`[ -n "$GONVMF_VM_TIMEOUT" ] || unset GONVMF_VM_TIMEOUT; vm_timeout_of $1`, c.opts))
		if got != c.want {
			t.Errorf("vm_timeout_of %s (env %v) = %q, want %q", c.opts, c.env, got, c.want)
		}
	}

	const now = 1_000_000
	for _, c := range []struct {
		deadline, timeout int
		fits              bool
		why               string
	}{
		{0, 1800, true, ""},
		{now + 930, 900, true, ""},
		{now + 929, 900, false, "needs up to 930 s (--timeout 900 + 30), 929 s left"},
		{now - 5, 600, false, "needs up to 630 s (--timeout 600 + 30), 0 s left"},
		{now + 100000, 0, false, "has no --timeout, 100000 s left"},
	} {
		out := runTestsLib(t, nil, `if fits_deadline "$@"; then echo fits; else echo "no: $DEADLINE_WHY"; fi`,
			fmt.Sprint(c.deadline), fmt.Sprint(c.timeout), fmt.Sprint(now))
		want := "fits"
		if !c.fits {
			want = "no: " + c.why
		}
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("fits_deadline %d %d %d: %q, want %q", c.deadline, c.timeout, now, got, want)
		}
	}
}

// TestRunTestsLibReport runs failure_report on fake results directories and checks what
// the tail of a CI log would show. Cases: a go-tests binary that hit -test.timeout (the
// tests still running, not the goroutine dump), a failed Go test among others (its error,
// not its slog records or another test's lines), a suite with more failed checks than
// shown and one very long reason, a suite that timed out without a failed check (vm.sh's
// verdict and the script's last lines, not the ps listing after them), a suite without a
// results directory, and results that print nothing.
func TestRunTestsLibReport(t *testing.T) {
	root := t.TempDir()
	write := func(suite, file, text string) string {
		t.Helper()
		dir := filepath.Join(root, suite)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	report := func(suite, result, dir string) []string {
		t.Helper()
		out := runTestsLib(t, nil, `failure_report "$@"`, suite, result, dir)
		return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	}
	has := func(lines []string, sub string) bool {
		for _, l := range lines {
			if strings.Contains(l, sub) {
				return true
			}
		}
		return false
	}
	check := func(name string, lines []string, want, unwanted []string) {
		t.Helper()
		for _, w := range want {
			if !has(lines, w) {
				t.Errorf("%s: no line with %q in the report:\n%s", name, w, strings.Join(lines, "\n"))
			}
		}
		for _, u := range unwanted {
			if has(lines, u) {
				t.Errorf("%s: a line with %q in the report:\n%s", name, u, strings.Join(lines, "\n"))
			}
		}
		for _, l := range lines {
			if len(l) > 320 {
				t.Errorf("%s: a line of %d characters, want the report's lines cut at 300: %.80s...", name, len(l), l)
			}
		}
	}

	// go-tests: target_rdma hit -test.timeout; a test of rdmacm failed.
	var crash strings.Builder
	crash.WriteString("=== RUN   TestRDMAOther\n--- PASS: TestRDMAOther (0.50s)\n=== RUN   TestRDMAHang\n=== RUN   TestRDMAHang/wildcard\n")
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&crash, "    testutil.go:58: time=x level=INFO msg=\"step %d\" component=rdma %s\n", i, strings.Repeat("k=v ", 100))
	}
	crash.WriteString("panic: test timed out after 4m0s\n\trunning tests:\n\t\tTestRDMAHang (3m59s)\n\t\tTestRDMAHang/wildcard (3m58s)\n\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&crash, "goroutine %d [chan receive]:\nmain.f()\n\t/src/f.go:%d +0x1\n\n", i, i)
	}
	write("go-tests", "target_rdma.log", crash.String())
	write("go-tests", "rdmacm.log", `=== RUN   TestRDMAA
    rdma_test.go:10: connecting
=== RUN   TestRDMAA/sub
    rdma_test.go:20: read back 4096 bytes, want 8192
    testutil.go:58: time=x level=INFO msg="queue torn down" component=rdma
=== RUN   TestRDMAB
=== PAUSE TestRDMAB
=== CONT  TestRDMAB
    rdma_test.go:30: other test's line
--- PASS: TestRDMAB (0.10s)
=== NAME  TestRDMAA
    testutil.go:58: time=x level=INFO msg="controller destroyed" component=target
--- FAIL: TestRDMAA (1.00s)
    --- FAIL: TestRDMAA/sub (0.90s)
FAIL
`)
	dir := write("go-tests", "results.txt", `RESULT PASS rdmacm/TestRDMAB: (0.10s)
RESULT FAIL rdmacm/TestRDMAA: (1.00s); see rdmacm.log
RESULT PASS target_rdma/TestRDMAOther: (0.50s)
RESULT FAIL target_rdma: test binary exited 2 while running TestRDMAHang: panic: test timed out after 4m0s
`)
	lines := report("go-tests", "FAIL(1)", dir)
	check("go-tests", lines, []string{
		"go-tests FAIL(1): " + dir,
		"  FAIL rdmacm/TestRDMAA: (1.00s); see rdmacm.log",
		"  FAIL target_rdma: test binary exited 2 while running TestRDMAHang: panic: test timed out after 4m0s",
		"  --- target_rdma.log at the crash:",
		`msg="step 29"`,
		"  | panic: test timed out after 4m0s",
		"TestRDMAHang/wildcard (3m58s)",
		"  --- TestRDMAA in rdmacm.log, its last lines:",
		"  |     rdma_test.go:20: read back 4096 bytes, want 8192",
	}, []string{"goroutine", `msg="step 10"`, "other test's line", "controller destroyed", "PASS"})
	if len(lines) > 25 {
		t.Errorf("go-tests: %d lines of report, want at most 25:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	// 12 failed checks, one of them 2000 characters long
	var res strings.Builder
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&res, "RESULT PASS ok-%d\nRESULT FAIL check-%02d: reason %d\n", i, i, i)
	}
	res.WriteString("RESULT FAIL long: " + strings.Repeat("x", 2000) + "\n")
	dir = write("20-e2e", "results.txt", res.String())
	lines = report("20-e2e", "FAIL(1)", dir)
	check("20-e2e", lines, []string{"  FAIL check-01: reason 1", "  FAIL check-10: reason 10", "... and 3 more failed checks in " + dir + "/results.txt"},
		[]string{"check-11", "long", "ok-"})
	if len(lines) != 12 {
		t.Errorf("20-e2e: %d lines of report, want 12 (header, 10 checks, the rest counted):\n%s", len(lines), strings.Join(lines, "\n"))
	}

	// a suite the guest's watchdog killed, before it recorded a failed check
	write("30-initiator", "results.txt", "RESULT PASS a\n")
	write("30-initiator", "harness.log", `vm.sh: booting for 30-initiator (timeout 900 s, 4096 MiB, 2 vCPUs); results in /x
vm.sh: 30-initiator: TIMEOUT: the script ran past the 900 s limit and was killed in the guest after 901.2 s; processes and dmesg at the end of /x/guest.log
`)
	dir = write("30-initiator", "guest.log", `gonvmf-vm: stage 2 at uptime 3.1 s, kernel 6.1.0
gonvmf-vm: running: bash /src/integration/tests/30-initiator.sh (watchdog 840 s)
=== [4.0] first step
RESULT PASS a
=== [5.0] k-target-gone: waiting for perf
still waiting
gonvmf-vm: TIMEOUT: the script ran past the time limit and was killed at uptime 844 s
--- processes at the timeout
  PID  PPID STAT WCHAN ELAPSED COMMAND
`)
	lines = report("30-initiator", "TIMEOUT", dir)
	check("30-initiator", lines, []string{
		"30-initiator TIMEOUT: " + dir,
		"  vm.sh: 30-initiator: TIMEOUT: the script ran past the 900 s limit",
		"  === [5.0] k-target-gone: waiting for perf",
		"  still waiting",
	}, []string{"booting", "processes at the timeout", "stage 2", "FAIL"})

	lines = report("40-rbd", "ERROR", filepath.Join(root, "none"))
	check("40-rbd", lines, []string{"40-rbd ERROR: ", "  (no results directory)"}, nil)

	for _, r := range []string{"PASS", "SKIP", "not run", "SKIPPED(deadline)"} {
		if out := runTestsLib(t, nil, `failure_report "$@"`, "x", r, dir); out != "" {
			t.Errorf("failure_report for %s printed %q, want nothing", r, out)
		}
	}
}
