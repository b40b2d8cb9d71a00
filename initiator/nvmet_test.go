package initiator_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The Linux kernel target (nvmet, nvmet-rdma), configured through configfs, for the
// TestRDMA* tests in the guest: it checks our reading of the protocol independently of
// gonvmf's own target.

const nvmetCfg = "/sys/kernel/config/nvmet"

// kernelTarget is one nvmet subsystem with one namespace on one rdma port.
type kernelTarget struct {
	NQN    string
	Addr   string
	Port   int
	portID string
	hosts  []string
	path   string
}

func write(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("nvmet: write %q to %s: %w", v, path, err)
	}
	return nil
}

// newKernelTarget exports a file (created on $SCRATCH or a temporary directory) of size
// bytes as namespace 1 of nqn on addr:port over rdma. hosts restricts access (none:
// any host). It skips the test where there is no configfs or nvmet.
func newKernelTarget(t *testing.T, nqn, addr string, port int, size int64, hosts ...string) *kernelTarget {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("configuring the Linux target needs root")
	}
	if out, err := exec.Command("modprobe", "-a", "nvmet", "nvmet-rdma").CombinedOutput(); err != nil {
		t.Skipf("no Linux NVMe target here (modprobe nvmet nvmet-rdma: %v %s)", err, out)
	}
	if _, err := os.Stat(nvmetCfg); err != nil {
		t.Skipf("no nvmet configfs: %v", err)
	}
	dir := os.Getenv("SCRATCH")
	if dir == "" {
		dir = t.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "nvmet-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	path := filepath.Join(dir, "ns1.img")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	kt := &kernelTarget{NQN: nqn, Addr: addr, Port: port, portID: strconv.Itoa(port), hosts: hosts, path: path}
	t.Cleanup(kt.teardown)
	if err := kt.setup(); err != nil {
		t.Fatal(err)
	}
	return kt
}

func (kt *kernelTarget) setup() error {
	s := filepath.Join(nvmetCfg, "subsystems", kt.NQN)
	if err := os.Mkdir(s, 0o755); err != nil {
		return fmt.Errorf("nvmet: %w", err)
	}
	if len(kt.hosts) == 0 {
		if err := write(filepath.Join(s, "attr_allow_any_host"), "1"); err != nil {
			return err
		}
	}
	for _, h := range kt.hosts {
		hd := filepath.Join(nvmetCfg, "hosts", h)
		if err := os.Mkdir(hd, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("nvmet: %w", err)
		}
		if err := os.Symlink(hd, filepath.Join(s, "allowed_hosts", h)); err != nil {
			return fmt.Errorf("nvmet: %w", err)
		}
	}
	ns := filepath.Join(s, "namespaces", "1")
	if err := os.Mkdir(ns, 0o755); err != nil {
		return fmt.Errorf("nvmet: %w", err)
	}
	if err := write(filepath.Join(ns, "device_path"), kt.path); err != nil {
		return err
	}
	if err := write(filepath.Join(ns, "enable"), "1"); err != nil {
		// O_DIRECT refused (tmpfs): buffered I/O.
		if err := write(filepath.Join(ns, "buffered_io"), "1"); err != nil {
			return err
		}
		if err := write(filepath.Join(ns, "enable"), "1"); err != nil {
			return err
		}
	}
	p := filepath.Join(nvmetCfg, "ports", kt.portID)
	if err := os.Mkdir(p, 0o755); err != nil {
		return fmt.Errorf("nvmet: %w", err)
	}
	for _, kv := range [][2]string{{"addr_trtype", "rdma"}, {"addr_adrfam", "ipv4"}, {"addr_traddr", kt.Addr}, {"addr_trsvcid", kt.portID}} {
		if err := write(filepath.Join(p, kv[0]), kv[1]); err != nil {
			return err
		}
	}
	return kt.enable()
}

// enable links the subsystem to the port; disable unlinks it, which makes the kernel
// target drop the controllers connected through the port.
func (kt *kernelTarget) enable() error {
	s := filepath.Join(nvmetCfg, "subsystems", kt.NQN)
	if err := os.Symlink(s, filepath.Join(nvmetCfg, "ports", kt.portID, "subsystems", kt.NQN)); err != nil {
		return fmt.Errorf("nvmet: enabling %s on port %s: %w", kt.NQN, kt.portID, err)
	}
	return nil
}

func (kt *kernelTarget) disable() error {
	return os.Remove(filepath.Join(nvmetCfg, "ports", kt.portID, "subsystems", kt.NQN))
}

func (kt *kernelTarget) teardown() {
	s := filepath.Join(nvmetCfg, "subsystems", kt.NQN)
	p := filepath.Join(nvmetCfg, "ports", kt.portID)
	os.Remove(filepath.Join(p, "subsystems", kt.NQN))
	os.Remove(p)
	write(filepath.Join(s, "namespaces", "1", "enable"), "0")
	os.Remove(filepath.Join(s, "namespaces", "1"))
	for _, h := range kt.hosts {
		os.Remove(filepath.Join(s, "allowed_hosts", h))
	}
	if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Controllers may still be going away; the next boot starts clean anyway.
		fmt.Fprintf(os.Stderr, "nvmet teardown: %v\n", err)
	}
	for _, h := range kt.hosts {
		os.Remove(filepath.Join(nvmetCfg, "hosts", h))
	}
}

// dmesgTail returns the kernel's last log lines, for failure messages.
func dmesgTail(n int) string {
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
