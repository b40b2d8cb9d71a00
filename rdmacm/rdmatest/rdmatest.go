// Package rdmatest holds helpers for tests that need an RDMA device: finding
// one (or skipping the test where there is none) and checking that a test
// leaves no RDMA objects or file descriptors behind.
//
// Tests that need RDMA are named TestRDMA* and benchmarks BenchmarkRDMA*: the
// VM harness (integration/run-tests.sh) runs exactly those inside a guest with
// Soft-RoCE, with GONVMF_REQUIRE_RDMA=1 so that a missing device fails
// instead of skipping.
package rdmatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/rdmacm"
)

// EnvRequire is the variable that turns a missing RDMA device into a test
// failure ("1"); the VM harness sets it.
const EnvRequire = "GONVMF_REQUIRE_RDMA"

// EnvIP names the RDMA address to use (the harness sets it to the guest's
// rxe address).
const EnvIP = "RXE_IP"

// Required reports whether GONVMF_REQUIRE_RDMA=1.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Require returns the IP address of a usable RDMA device: $RXE_IP, or else
// the first IPv4 (then IPv6) address of an active port of a device. Where
// there is none it skips the test with a message saying how to run it, or
// fails it when GONVMF_REQUIRE_RDMA=1.
func Require(t testing.TB) (ip string) {
	t.Helper()
	return RequireAddr(t).String()
}

// RequireAddr is Require returning a netip.Addr.
func RequireAddr(t testing.TB) netip.Addr {
	t.Helper()
	ip, err := find()
	if err != nil {
		msg := fmt.Sprintf("needs an RDMA device; run through integration/run-tests.sh go-tests (%v)", err)
		if Required() {
			t.Fatalf("%s=1 but: %s", EnvRequire, msg)
		}
		t.Skip(msg)
	}
	return ip
}

// find returns the address Require uses, or why there is none.
func find() (netip.Addr, error) {
	devs, err := rdmacm.Devices()
	if err != nil {
		return netip.Addr{}, err
	}
	if s := os.Getenv(EnvIP); s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%s=%q: %v", EnvIP, s, err)
		}
		for _, d := range devs {
			for _, a := range d.Addrs() {
				if a == ip {
					return ip, nil
				}
			}
		}
		return netip.Addr{}, fmt.Errorf("%s=%v is not the address of an active RDMA port", EnvIP, ip)
	}
	for _, d := range devs {
		if a := d.Addrs(); len(a) > 0 {
			return a[0], nil
		}
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	return netip.Addr{}, fmt.Errorf("no active RDMA port with an IP address (devices: %s)", strings.Join(names, ", "))
}

// Counts are RDMA resource counts by kind ("qp", "cq", "mr", "pd",
// "cm_id", "srq", "ctx"), summed over devices.
type Counts map[string]int

// LeakKinds are the resource kinds LeakCheck compares. ("ctx" is left out:
// librdmacm keeps one device context open for the life of the process.)
var LeakKinds = []string{"qp", "cq", "mr", "pd", "cm_id", "srq"}

// Resources returns the system's RDMA resource counts (`rdma -j resource
// show`).
func Resources() (Counts, error) {
	out, err := exec.Command("rdma", "-j", "resource", "show").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("rdma -j resource show: %w", err)
	}
	c, err := parseCounts(out)
	if err != nil {
		return nil, fmt.Errorf("rdma -j resource show: %w", err)
	}
	return c, nil
}

// parseCounts parses `rdma -j resource show`.
func parseCounts(js []byte) (Counts, error) {
	var devs []map[string]any
	if err := json.Unmarshal(js, &devs); err != nil {
		return nil, fmt.Errorf("%w in %q", err, js)
	}
	c := Counts{}
	for _, d := range devs {
		for k, v := range d {
			if f, ok := v.(float64); ok && k != "ifindex" {
				c[k] += int(f)
			}
		}
	}
	return c, nil
}

// OpenFDs returns the number of open file descriptors of the process.
func OpenFDs() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	return len(ents) - 1, nil // minus the one ReadDir used
}

// WarmUp makes the process-lifetime descriptors exist before a baseline is
// taken: librdmacm's device contexts and the Go runtime's netpoller.
func WarmUp() {
	if d, err := rdmacm.OpenDevice(""); err == nil {
		d.Close()
	}
	if r, w, err := os.Pipe(); err == nil {
		r.SetReadDeadline(time.Now())
		r.Close()
		w.Close()
	}
}

// LeakCheck records the RDMA resource counts and the open file descriptors
// now and, when the test ends, fails it if they have not come back to
// these values (it waits up to 5 s for asynchronous teardown in the
// kernel). Call it first in a test, before creating RDMA objects; register
// the test's own cleanups after it (they run first).
func LeakCheck(t testing.TB) {
	t.Helper()
	WarmUp()
	fds0, err := OpenFDs()
	if err != nil {
		t.Fatalf("LeakCheck: %v", err)
	}
	res0, rerr := Resources()
	if rerr != nil {
		if Required() {
			t.Fatalf("LeakCheck: %v", rerr)
		}
		t.Logf("LeakCheck: RDMA resources not checked: %v", rerr)
	}
	t.Cleanup(func() {
		var fds int
		var res Counts
		deadline := time.Now().Add(5 * time.Second)
		for {
			fds, _ = OpenFDs()
			ok := fds == fds0
			if rerr == nil {
				res, _ = Resources()
				for _, k := range LeakKinds {
					ok = ok && res[k] == res0[k]
				}
			}
			if ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if fds != fds0 {
			t.Errorf("leaked file descriptors: %d open before the test, %d after", fds0, fds)
		}
		if rerr == nil {
			for _, k := range LeakKinds {
				if res[k] != res0[k] {
					t.Errorf("leaked RDMA objects: %s %d before the test, %d after", k, res0[k], res[k])
				}
			}
		}
	})
}

// EnvGuest marks the VM harness's guest ("1"), where tests may add and delete
// network and RDMA devices.
const EnvGuest = "GONVMF_GUEST"

// SoftRoCE adds a Soft-RoCE device dev on a new dummy netdev with address ip/24, for
// a test that removes a device, and deletes both when the test ends. It skips the test
// outside the VM harness's guest (GONVMF_GUEST=1, root): it changes the machine's
// devices.
func SoftRoCE(t testing.TB, dev, netdev string, ip netip.Addr) {
	t.Helper()
	RequireAddr(t)
	if os.Getenv(EnvGuest) != "1" || os.Getuid() != 0 {
		t.Skip("adds and deletes an RDMA device: runs only in the VM harness's guest (GONVMF_GUEST=1, root)")
	}
	t.Cleanup(func() {
		// If it is there. librdmacm closes this process's context of it only when it
		// looks at the device list after the device has left it (rdmacm.Rescan).
		done := DeleteRXE(dev, 30*time.Second)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				exec.Command("ip", "link", "del", netdev).Run()
				return
			case <-tick.C:
				rdmacm.Rescan()
			}
		}
	})
	run(t, "ip", "link", "add", netdev, "type", "dummy")
	run(t, "ip", "link", "set", netdev, "mtu", "9000", "up")
	run(t, "ip", "addr", "add", ip.String()+"/24", "dev", netdev)
	AddRXE(t, dev, netdev)
}

// AddRXE adds the Soft-RoCE device dev on netdev and waits for its port to be active.
func AddRXE(t testing.TB, dev, netdev string) {
	t.Helper()
	run(t, "rdma", "link", "add", dev, "type", "rxe", "netdev", netdev)
	for i := 0; ; i++ {
		b, _ := os.ReadFile("/sys/class/infiniband/" + dev + "/ports/1/state")
		if strings.Contains(string(b), "ACTIVE") {
			return
		}
		if i == 100 {
			t.Fatalf("%s did not become active: %q", dev, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DeleteRXE starts deleting the RDMA device dev and returns a channel that gets the
// result: nil once the deletion has finished, or an error — with the command's output —
// if it failed or had not finished within limit. The kernel finishes removing a
// Soft-RoCE device only when every process has closed what it opened on it, librdmacm's
// context of it included (see rdmacm.Rescan).
func DeleteRXE(dev string, limit time.Duration) <-chan error {
	done := make(chan error, 1)
	out := &strings.Builder{}
	cmd := exec.Command("rdma", "link", "delete", dev)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		done <- err
		return done
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	go func() {
		select {
		case err := <-waited:
			if err != nil {
				err = fmt.Errorf("rdma link delete %s: %w: %s", dev, err, out)
			}
			done <- err
		case <-time.After(limit):
			done <- fmt.Errorf("rdma link delete %s: not finished after %v", dev, limit)
		}
	}()
	return done
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Holders describes what this process holds on RDMA device dev, for a test's failure
// message: its open uverbs file descriptors and the device's resources (`rdma resource
// show`).
func Holders(dev string) string {
	var b strings.Builder
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "/dev/infiniband/") {
			fmt.Fprintf(&b, "fd %s → %s; ", e.Name(), l)
		}
	}
	for _, kind := range []string{"cm_id", "qp", "cq", "mr", "pd", "ctx", "srq"} {
		out, _ := exec.Command("rdma", "resource", "show", kind).CombinedOutput()
		fmt.Fprintf(&b, "%s: %s; ", kind, strings.TrimSpace(string(out)))
	}
	return b.String()
}
