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
