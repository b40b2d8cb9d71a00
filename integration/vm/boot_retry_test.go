//go:build linux

package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fakeQemu is a qemu-system-x86_64 that boots nothing: each call takes the next step of
// $FAKEQEMU_PLAN (comma-separated) and acts out how that boot ended, in the files vm.sh
// reads back (console.log through the -chardev logfile, guest.log and .vm/status in the
// gonvmf-out share). It counts its calls in $FAKEQEMU_STATE/calls and records whether the
// scratch disk it was given exists in $FAKEQEMU_STATE/disks.
const fakeQemu = `#!/bin/bash
out="" con="" disk=""
for a in "$@"; do
	case $a in
	*mount_tag=gonvmf-out*) out=${a#local,path=}; out=${out%%,mount_tag=*} ;;
	*logfile=*) con=${a#*logfile=}; con=${con%%,*} ;;
	file=*) disk=${a#file=}; disk=${disk%%,if=*} ;;
	esac
done
n=$(( $(cat "$FAKEQEMU_STATE/calls" 2>/dev/null || echo 0) + 1 ))
echo $n > "$FAKEQEMU_STATE/calls"
[ -z "$disk" ] || { [ -s "$disk" ] && echo present || echo missing; } >> "$FAKEQEMU_STATE/disks"
IFS=, read -ra plan <<< "$FAKEQEMU_PLAN"
step=${plan[$((n - 1))]:-pass}
case $step in
panic)
	printf '[    1.76] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[    1.77] Kernel panic - not syncing: Fatal exception in interrupt\n' > "$con" ;;
stage1)
	printf 'gonvmf-vm stage1: cannot mount the host root (9p tag gonvmf-root)\nGONVMF-VM-STAGE1-FAILED\n' > "$con" ;;
started-panic)
	echo "gonvmf-vm: running the script" > "$out/guest.log"
	printf '[   30.00] Kernel panic - not syncing: Fatal exception\n' > "$con" ;;
pass)
	echo "boot $n" > "$con"
	echo "script ran in boot $n" > "$out/guest.log"
	echo "exit 0" > "$out/.vm/status" ;;
esac
exit 0
`

// fakeImage makes vm.sh's image root in dir look built and current, for a kernel package
// apt does not know (so vm.sh uses the cached image without asking to rebuild it).
func fakeImage(t *testing.T, dir string) {
	t.Helper()
	src, err := os.ReadFile("vm.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^INITRAMFS_MODULES="([^"]*)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("vm.sh has no INITRAMFS_MODULES line")
	}
	stage1, err := os.ReadFile("init-stage1.sh")
	if err != nil {
		t.Fatal(err)
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("needs /bin/busybox (busybox-static), as vm.sh does: %v", err)
	}
	// initramfs_name: the hash of stage 1, busybox and the module list
	h := sha256.New()
	h.Write(stage1)
	h.Write(busybox)
	h.Write([]byte(string(m[1]) + "\n"))
	img := filepath.Join(dir, "images", "fake_1")
	if err := os.MkdirAll(img, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"manifest": "KPKG=gonvmf-test-no-such-kernel\nKPKG_VERSION=1\nKVER=0.0.0-fake\n",
		"vmlinux":  "not a kernel\n",
		"initramfs-" + hex.EncodeToString(h.Sum(nil))[:16] + ".cpio.gz": "not an initramfs\n",
	} {
		if err := os.WriteFile(filepath.Join(img, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("images/fake_1", filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
}

// TestBootRetry checks that vm.sh run boots again when the guest's kernel died before the
// guest script began (TCG loses a boot now and then: an oops, a panic, qemu status 0), and
// only then: a guest that died once its script was running, or whose stage 1 reported a
// failure, is a result and is not retried; nor is anything beyond GONVMF_VM_BOOT_RETRIES.
func TestBootRetry(t *testing.T) {
	if out, err := exec.Command("bash", "vm.sh", "check").CombinedOutput(); err != nil {
		t.Skipf("needs the VM harness's host prerequisites (integration/vm/setup-host.sh): %v\n%s", err, out)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "qemu-system-x86_64"), []byte(fakeQemu), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "noop.sh")
	if err := os.WriteFile(script, []byte("true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, plan, retries string
		disk                bool
		wantCode, wantCalls int
		wantLost            int    // console.boot<N>.log files kept
		wantMsg             string // in vm.sh's output
	}{
		{name: "panic-then-pass", plan: "panic,pass", wantCode: 0, wantCalls: 2, wantLost: 1, wantMsg: "booting again (2 of 3)"},
		{name: "panic-then-pass-disk", plan: "panic,pass", disk: true, wantCode: 0, wantCalls: 2, wantLost: 1, wantMsg: "passed in"},
		{name: "always-panic", plan: "panic,panic,panic,pass", wantCode: 125, wantCalls: 3, wantLost: 2, wantMsg: "without reporting a result"},
		{name: "no-retries", plan: "panic,pass", retries: "0", wantCode: 125, wantCalls: 1, wantMsg: "without reporting a result"},
		{name: "died-in-script", plan: "started-panic,pass", wantCode: 125, wantCalls: 1, wantMsg: "without reporting a result"},
		{name: "stage1-failed", plan: "stage1,pass", wantCode: 125, wantCalls: 1, wantMsg: "GONVMF-VM-STAGE1-FAILED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmDir, state, out := t.TempDir(), t.TempDir(), t.TempDir()
			fakeImage(t, vmDir)
			args := []string{"vm.sh", "run", "-q", "--timeout", "60", "--out", out}
			if tc.disk {
				args = append(args, "--disk", "8M")
			}
			cmd := exec.Command("bash", append(args, script)...)
			cmd.Env = append(os.Environ(),
				"PATH="+bin+":"+os.Getenv("PATH"),
				"GONVMF_VM_DIR="+vmDir, "GONVMF_VM_KPKG=gonvmf-test-no-such-kernel",
				"FAKEQEMU_STATE="+state, "FAKEQEMU_PLAN="+tc.plan)
			if tc.retries != "" {
				cmd.Env = append(cmd.Env, "GONVMF_VM_BOOT_RETRIES="+tc.retries)
			}
			output, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("vm.sh: %v\n%s", err, output)
			}
			if code != tc.wantCode {
				t.Errorf("exit status %d, want %d\n%s", code, tc.wantCode, output)
			}
			calls, _ := os.ReadFile(filepath.Join(state, "calls"))
			if n, _ := strconv.Atoi(strings.TrimSpace(string(calls))); n != tc.wantCalls {
				t.Errorf("qemu started %d times, want %d\n%s", n, tc.wantCalls, output)
			}
			lost, _ := filepath.Glob(filepath.Join(out, "console.boot*.log"))
			if len(lost) != tc.wantLost {
				t.Errorf("%d lost boots' consoles kept (%v), want %d", len(lost), lost, tc.wantLost)
			}
			if !strings.Contains(string(output), tc.wantMsg) {
				t.Errorf("vm.sh's output lacks %q:\n%s", tc.wantMsg, output)
			}
			if tc.disk {
				disks, _ := os.ReadFile(filepath.Join(state, "disks"))
				if got := strings.Fields(string(disks)); len(got) != tc.wantCalls || strings.Contains(string(disks), "missing") {
					t.Errorf("scratch disk per boot: %q, want present in each of %d boots", got, tc.wantCalls)
				}
				if left, _ := filepath.Glob(filepath.Join(vmDir, "disks", "*")); len(left) != 0 {
					t.Errorf("scratch disks left behind: %v", left)
				}
			}
			if tc.wantCode == 0 {
				if log, _ := os.ReadFile(filepath.Join(out, "guest.log")); !strings.Contains(string(log), "script ran") {
					t.Errorf("guest.log of the passing boot: %q", log)
				}
			}
		})
	}
}
