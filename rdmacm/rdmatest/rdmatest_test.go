package rdmatest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRequire runs Require in a child process with and without
// GONVMF_REQUIRE_RDMA=1: without an RDMA device it must skip, then fail;
// with one it must pass both times.
func TestRequire(t *testing.T) {
	if os.Getenv("RDMATEST_CHILD") == "1" {
		t.Logf("address %s", Require(t))
		return
	}
	_, err := find()
	self, xerr := os.Executable()
	if xerr != nil {
		t.Fatal(xerr)
	}
	for _, require := range []string{"", "1"} {
		cmd := exec.Command(self, "-test.run", "^TestRequire$", "-test.v")
		cmd.Env = append(os.Environ(), "RDMATEST_CHILD=1", EnvRequire+"="+require)
		out, _ := cmd.CombinedOutput()
		want := "--- PASS"
		switch {
		case err != nil && require == "":
			want = "--- SKIP"
		case err != nil:
			want = "--- FAIL"
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("%s=%q, find() error %v: want %s in\n%s", EnvRequire, require, err, want, out)
		}
		if err != nil && !strings.Contains(string(out), "integration/run-tests.sh") {
			t.Errorf("the skip/fail message does not say how to run the test:\n%s", out)
		}
	}
}

func TestParseCounts(t *testing.T) {
	// As printed by iproute2 6.1 in the guest, with a second device added.
	js := `[{"ifindex":0,"ifname":"rxe0","pd":1,"cq":2,"qp":1,"cm_id":3,"mr":0,"ctx":0,"srq":0},` +
		`{"ifindex":1,"ifname":"rxe1","pd":2,"cq":0,"qp":4,"cm_id":0,"mr":5,"ctx":1,"srq":0}]`
	c, err := parseCounts([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{"pd": 3, "cq": 2, "qp": 5, "cm_id": 3, "mr": 5, "ctx": 1, "srq": 0}
	if len(c) != len(want) {
		t.Errorf("got %v, want %v", c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s: got %d, want %d", k, c[k], v)
		}
	}
	if _, err := parseCounts([]byte("Failed to open NETLINK_RDMA socket")); err == nil {
		t.Error("garbage parsed")
	}
}
