package rdmacm_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/gonvmf/gonvmf/rdmacm"
)

// rlimitMemlock is RLIMIT_MEMLOCK on Linux (x86, arm, riscv).
const rlimitMemlock = 8

// TestRDMAMemlock runs itself as an unprivileged user with RLIMIT_MEMLOCK
// at 64 KiB: CheckMemlock and NewArena must refuse a 1 MiB arena with an
// error that says how to raise the limit.
func TestRDMAMemlock(t *testing.T) {
	if os.Getenv("RDMACM_MEMLOCK_CHILD") == "1" {
		memlockChild(t)
		return
	}
	requireRDMA(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestRDMAMemlock$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "RDMACM_MEMLOCK_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	t.Logf("child (uid 65534, RLIMIT_MEMLOCK 64 KiB):\n%s", out)
	if err != nil || strings.Contains(string(out), "--- FAIL") ||
		!strings.Contains(string(out), "--- PASS") && !strings.Contains(string(out), "--- SKIP") {
		t.Fatalf("child: %v", err)
	}
}

func memlockChild(t *testing.T) {
	lim := syscall.Rlimit{Cur: 64 << 10, Max: 64 << 10}
	if err := syscall.Setrlimit(rlimitMemlock, &lim); err != nil {
		t.Fatal(err)
	}
	err := rdmacm.CheckMemlock(1 << 20)
	if !errors.Is(err, rdmacm.ErrMemlock) {
		t.Fatalf("CheckMemlock(1 MiB) with a 64 KiB limit: %v", err)
	}
	for _, want := range []string{"RLIMIT_MEMLOCK is 64 KiB", "ulimit -l", "LimitMEMLOCK=infinity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if err := rdmacm.CheckMemlock(16 << 10); err != nil {
		t.Errorf("CheckMemlock(16 KiB) with a 64 KiB limit: %v", err)
	}
	dev, err := rdmacm.OpenDevice("")
	if err != nil {
		t.Skipf("an unprivileged user cannot open the device here: %v", err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Skipf("an unprivileged user cannot use the device here: %v", err)
	}
	if a, err := pd.NewArena(1<<20, 0); !errors.Is(err, rdmacm.ErrMemlock) {
		a.Close()
		t.Errorf("NewArena(1 MiB) with a 64 KiB limit: %v", err)
	}
	a, err := pd.NewArena(16<<10, 0)
	if err != nil {
		t.Fatalf("NewArena(16 KiB) with a 64 KiB limit: %v", err)
	}
	a.Close()
}
