//go:build linux

package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuestLibNVMe runs guest-lib.sh's helpers for the Linux host's controllers and
// namespaces on the host, against a fake sysfs tree: two subsystems, native multipath's
// hidden per-controller paths, NSIDs that sort differently as text, a controller that
// becomes live late, and the steps in which nvme_wait_ctrl waits for it.
func TestGuestLibNVMe(t *testing.T) {
	dir := t.TempDir()
	sys, dev := filepath.Join(dir, "sys"), filepath.Join(dir, "dev")
	write := func(path, text string) {
		t.Helper()
		p := filepath.Join(sys, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const a, b = "nqn.2024-01.io.gonvmf:a", "nqn.2024-01.io.gonvmf:b"
	for ctrl, nqn := range map[string]string{"nvme0": a, "nvme1": b, "nvme2": a} {
		write("class/nvme/"+ctrl+"/subsysnqn", nqn)
		write("class/nvme/"+ctrl+"/state", "live")
	}
	write("class/nvme/nvme2/state", "connecting")
	write("class/nvme/nvme0/nvme0c0n1/dev", "259:9")
	write("class/nvme/nvme2/nvme0c2n1/dev", "259:10")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []struct{ name, nqn, nsid string }{
		{"nvme0n1", a, "1"}, {"nvme0n10", a, "10"}, {"nvme0n2", a, "2"}, {"nvme0n3", a, "3"}, {"nvme0c0n1", a, "1"}, {"nvme1n1", b, "1"},
	} {
		write("block/"+ns.name+"/device/subsysnqn", ns.nqn)
		write("block/"+ns.name+"/nsid", ns.nsid)
		if err := unix.Mknod(filepath.Join(dev, ns.name), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))); err != nil {
			t.Skipf("cannot make block device nodes here (%v): the check needs root", err)
		}
	}
	// nvme0n3's device node is missing: not listed yet (the guest has devtmpfs, no udev).
	os.Remove(filepath.Join(dev, "nvme0n3"))

	script := `
set -u
. "$LIB" 2> /dev/null
nvme_ctrls "$A" && echo "ctrls a: ${NVME_CTRLS[*]}"
nvme_ctrls nqn.2024-01.io.gonvmf:none || echo "ctrls none: ${#NVME_CTRLS[@]}"
nvme_ns_devs "$A" && echo "ns a: ${NVME_NS_DEVS[*]}"
nvme_ns_devs "$B" && echo "ns b: ${NVME_NS_DEVS[*]}"
nvme_ns_devs nqn.2024-01.io.gonvmf:none || echo "ns none: ${#NVME_NS_DEVS[@]}"
echo "wait_for_nvme_ns: $(wait_for_nvme_ns "$A" 1 | tr '\n' ' ')"
nvme_wait_ctrl "$A" " nvme0 " 1 2> /dev/null || echo "not live: $NVME_CTRL: ${NVME_ERR%% (*}"
echo live > "$GUEST_LIB_SYS/class/nvme/nvme2/state"
nvme_wait_ctrl "$A" " nvme0 " 5 && echo "new: $NVME_CTRL ${NVME_NS_DEVS[*]}"
t0=$EPOCHREALTIME
nap 0.2
s=$(since "$t0")
[[ $s =~ ^0\.[0-9]{3}$ ]] && echo "since ok"
# nvme_wait_ctrl's steps: 10 ms for 200 steps (connect times are timed to its end), then
# 100 ms. A nap that only counts makes the controller live at the 202nd.
echo connecting > "$GUEST_LIB_SYS/class/nvme/nvme2/state"
naps=()
nap() { naps+=("$1"); if [ ${#naps[@]} -eq 202 ]; then echo live > "$GUEST_LIB_SYS/class/nvme/nvme2/state"; fi; }
nvme_wait_ctrl "$A" " nvme0 " 60 && echo "steps: $(printf '%s\n' "${naps[@]}" | sort | uniq -c | tr -s ' \n' ' ')"
`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "LIB="+filepath.Join("guest-lib.sh"), "GUEST_LIB_SYS="+sys, "GUEST_LIB_DEV="+dev, "A="+a, "B="+b,
		"OUT="+dir, "TMPDIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := strings.Join([]string{
		"ctrls a: nvme0 nvme2",
		"ctrls none: 0",
		"ns a: " + dev + "/nvme0n1 " + dev + "/nvme0n2 " + dev + "/nvme0n10",
		"ns b: " + dev + "/nvme1n1",
		"ns none: 0",
		"wait_for_nvme_ns: " + dev + "/nvme0n1 " + dev + "/nvme0n2 " + dev + "/nvme0n10 ",
		"not live: nvme2: no live controller with a namespace of " + a + " 1 s after connecting",
		"new: nvme2 " + dev + "/nvme0n1 " + dev + "/nvme0n2 " + dev + "/nvme0n10",
		"since ok",
		"steps:  200 0.01 2 0.1 ",
		"RESULTS pass=0 fail=0 skip=0", // guest-lib's exit tally
	}, "\n") + "\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}
