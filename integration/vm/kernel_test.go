//go:build linux

package vm

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestKernelSelection checks vm.sh's --kernel parsing on the host (no guest, no download):
// the named kernels are listed, and an unknown name is a usage error (status 2) that lists
// the known ones before anything is built.
func TestKernelSelection(t *testing.T) {
	out, err := exec.Command("bash", "vm.sh", "kernels").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--kernel 6.12 linux-image-6.12.") {
		t.Fatalf("vm.sh kernels: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"image", "--kernel", "nosuch"},
		{"run", "--kernel", "nosuch", "vm.sh"},
		{"image", "--kernel", "../x"},
		{"image", "--bogus"},
	} {
		cmd := exec.Command("bash", append([]string{"vm.sh"}, args...)...)
		cmd.Env = append(cmd.Environ(), "GONVMF_VM_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("vm.sh %v: %v, want exit status 2\n%s", args, err, out)
		}
		if len(args) > 2 && args[2] == "nosuch" && !strings.Contains(string(out), "use one of: 6.12") {
			t.Errorf("vm.sh %v does not list the known kernels:\n%s", args, out)
		}
	}
}
