//go:build linux

package vm

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// needGuest skips outside the VM, or fails there when GONVMF_REQUIRE_RDMA=1 says RDMA must
// be present (the go-tests suite sets it in the guest).
func needGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("GONVMF_GUEST") == "1" {
		return
	}
	const msg = "needs the gonvmf VM with Soft-RoCE: run integration/run-tests.sh go-tests"
	if os.Getenv("GONVMF_REQUIRE_RDMA") == "1" {
		t.Fatal("GONVMF_REQUIRE_RDMA=1 but not in the guest; " + msg)
	}
	t.Skip(msg)
}

func mustEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("environment variable %s is not set in the guest", name)
	}
	return v
}

func TestRDMAGuestSoftRoCE(t *testing.T) {
	needGuest(t)
	dev := mustEnv(t, "RXE_DEV")
	ip := mustEnv(t, "RXE_IP")

	state, err := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, "ports/1/state"))
	if err != nil {
		t.Fatalf("reading the port state of %s: %v", dev, err)
	}
	if !strings.Contains(string(state), "ACTIVE") {
		t.Errorf("%s port 1 state = %q, want ACTIVE", dev, strings.TrimSpace(string(state)))
	}
	for _, f := range []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"} {
		if fi, err := os.Stat(f); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("%s: want a character device (err %v)", f, err)
		}
	}

	netdev := mustEnv(t, "RXE_NETDEV")
	ifc, err := net.InterfaceByName(netdev)
	if err != nil {
		t.Fatalf("netdev %s: %v", netdev, err)
	}
	if want, _ := strconv.Atoi(os.Getenv("RXE_MTU")); ifc.MTU != want {
		t.Errorf("%s MTU = %d, want RXE_MTU=%d", netdev, ifc.MTU, want)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatalf("addresses of %s: %v", netdev, err)
	}
	found := false
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == ip {
			found = true
		}
	}
	if !found {
		t.Errorf("%s has addresses %v, want %s", netdev, addrs, ip)
	}
}

func TestRDMAGuestLimitsAndDirs(t *testing.T) {
	needGuest(t)
	// RDMA memory registration pins pages: the harness lifts RLIMIT_MEMLOCK.
	f, err := os.Open("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	memlock := ""
	for s := bufio.NewScanner(f); s.Scan(); {
		if strings.HasPrefix(s.Text(), "Max locked memory") {
			memlock = strings.Join(strings.Fields(s.Text())[3:5], " ")
		}
	}
	if memlock != "unlimited unlimited" {
		t.Errorf("RLIMIT_MEMLOCK soft/hard = %q, want unlimited", memlock)
	}

	out := mustEnv(t, "OUT")
	p := filepath.Join(out, "go-harness-check.txt")
	if err := os.WriteFile(p, []byte("written by TestRDMAGuestLimitsAndDirs\n"), 0o644); err != nil {
		t.Errorf("$OUT (%s) is not writable: %v", out, err)
	}
	if src := mustEnv(t, "SRC"); !fileExists(filepath.Join(src, "go.mod")) {
		t.Errorf("$SRC (%s) has no go.mod: the repo is not visible in the guest", src)
	}
	if s := os.Getenv("SCRATCH"); s != "" {
		// The scratch disk is for O_DIRECT backing files; check it takes one.
		if err := checkODirect(filepath.Join(s, "odirect-check")); err != nil {
			t.Errorf("O_DIRECT on $SCRATCH (%s): %v", s, err)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// checkODirect creates path with O_DIRECT and writes one aligned 4 KiB block.
func checkODirect(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_DIRECT, 0o644)
	if err != nil {
		return fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	defer os.Remove(path)
	defer f.Close()
	buf, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("mmap an aligned buffer: %w", err)
	}
	defer syscall.Munmap(buf)
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("O_DIRECT write of 4096 bytes to %s: %w", path, err)
	}
	return nil
}
