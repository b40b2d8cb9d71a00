package vm

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// suiteHeaderLines is how far into a suite integration/run-tests.sh looks for its "# vm:"
// line (suite_header: head -n 30).
const suiteHeaderLines = 30

// TestSuiteHeaders: every suite's "# vm:" line is where run-tests.sh reads it, and there is
// at most one. A line past the first 30 is ignored without a word, and the suite runs with
// the defaults (its timeout, disk and kernel lost).
func TestSuiteHeaders(t *testing.T) {
	suites, err := filepath.Glob("../tests/*.sh")
	if err != nil || len(suites) == 0 {
		t.Fatalf("no suites in ../tests (err %v)", err)
	}
	for _, path := range suites {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var at []int
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			if strings.HasPrefix(sc.Text(), "# vm:") {
				at = append(at, n)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch {
		case len(at) > 1:
			t.Errorf("%s: %d \"# vm:\" lines (lines %v); run-tests.sh reads the first only: keep one", path, len(at), at)
		case len(at) == 1 && at[0] > suiteHeaderLines:
			t.Errorf("%s: the \"# vm:\" line is line %d; run-tests.sh reads the first %d lines only: move it up",
				path, at[0], suiteHeaderLines)
		}
	}
}
