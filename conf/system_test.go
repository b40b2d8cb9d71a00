package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fileConfig is a valid configuration with one file namespace per entry of specs (each
// the YAML flow mapping after "nsid: N, backend: file, ").
func fileConfig(t *testing.T, specs ...string) *Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("listeners: [{address: 10.99.0.1}]\nsubsystems:\n  - nqn: nqn.2024-01.com.example:sys\n    allow_any_host: true\n    namespaces:\n")
	for i, s := range specs {
		fmt.Fprintf(&b, "      - {nsid: %d, backend: file, %s}\n", i+1, s)
	}
	return mustParse(t, b.String())
}

func checkSystemErr(t *testing.T, c *Config, line int, field, want string) {
	t.Helper()
	err := c.CheckSystem()
	if want == "" {
		if err != nil {
			t.Errorf("CheckSystem: %v", err)
		}
		return
	}
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Field != field || !strings.Contains(errs[0].Error(), want) || errs[0].Fix == "" {
		t.Errorf("CheckSystem = %v; want one error on %s containing %q", err, field, want)
	}
	if len(errs) == 1 && errs[0].Line != line {
		t.Errorf("error names line %d, want %d: %v", errs[0].Line, line, errs[0])
	}
}

func TestCheckSystemFiles(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.img")
	if err := os.WriteFile(small, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(dir, "odd.img")
	if err := os.WriteFile(odd, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.img")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	p0 := "subsystems[0].namespaces[0]."
	for _, tc := range []struct {
		name, spec, field, want string
	}{
		{"existing file, no size", "path: " + small, "", ""},
		{"existing file, larger size", "path: " + small + ", size: 1MiB", "", ""},
		{"missing file with size", "path: " + filepath.Join(dir, "new.img") + ", size: 1MiB", "", ""},
		{"missing file without size", "path: " + filepath.Join(dir, "new.img"), p0 + "path", "does not exist, and no size is given"},
		{"missing read-only file", "path: " + filepath.Join(dir, "new.img") + ", size: 1MiB, read_only: true", p0 + "path", "a read-only namespace does not create its file"},
		{"missing directory", "path: " + filepath.Join(dir, "no/such/dir/x.img") + ", size: 1MiB", p0 + "path", "neither does its directory"},
		{"file larger than size", "path: " + small + ", size: 4KiB", p0 + "size", "larger than size 4KiB, and the target never truncates"},
		{"empty file", "path: " + empty, p0 + "path", "is empty and no size is given"},
		{"size not a block multiple", "path: " + odd, p0 + "path", "1000 bytes, not a multiple of lba_size 512"},
		{"directory", "path: " + dir, p0 + "path", "is a directory"},
		{"character device", "path: /dev/null", p0 + "path", "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSystemErr(t, fileConfig(t, tc.spec), 6, tc.field, tc.want)
		})
	}

	t.Run("same file through a link", func(t *testing.T) {
		c := fileConfig(t, "path: "+small, "path: "+link)
		err := c.CheckSystem()
		if err == nil || !strings.Contains(err.Error(), "test.yaml:7: subsystems[0].namespaces[1].path: "+link+" is the same file or device as the backing of subsystems[0].namespaces[0] (line 6)") {
			t.Errorf("CheckSystem = %v", err)
		}
		c = fileConfig(t, "path: "+small+", read_only: true", "path: "+link+", read_only: true")
		if err := c.CheckSystem(); err != nil {
			t.Errorf("read-only namespaces sharing a file: %v", err)
		}
	})

	t.Run("unreadable file", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root opens any file")
		}
		locked := filepath.Join(dir, "locked.img")
		if err := os.WriteFile(locked, make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		checkSystemErr(t, fileConfig(t, "path: "+locked), 6, p0+"path", "cannot open")
	})
}

func TestCheckSystemBlock(t *testing.T) {
	c := mustParse(t, sub("      - {nsid: 1, backend: block, path: /dev/null}\n"))
	checkSystemErr(t, c, 7, "subsystems[0].namespaces[0].path", "/dev/null is not a block device")
	c = mustParse(t, sub("      - {nsid: 1, backend: block, path: /dev/gonvmf-no-such-device}\n"))
	checkSystemErr(t, c, 7, "subsystems[0].namespaces[0].path", "does not exist")
	// A real block device, where the machine has one we may open.
	devs, _ := filepath.Glob("/sys/block/*")
	for _, d := range devs {
		dev := "/dev/" + filepath.Base(d)
		if size, err := os.ReadFile(d + "/size"); err != nil || strings.TrimSpace(string(size)) == "0" {
			continue
		}
		if f, err := os.Open(dev); err == nil {
			f.Close()
			c = mustParse(t, sub(fmt.Sprintf("      - {nsid: 1, backend: block, path: %s, lba_size: 4096, read_only: true}\n", dev)))
			if err := c.CheckSystem(); err != nil {
				t.Errorf("block device %s with lba_size 4096: %v", dev, err)
			}
			t.Logf("checked %s", dev)
			return
		}
	}
	t.Log("no openable block device here; only the negative cases ran")
}

func TestCheckSystemMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RAM size is read on Linux only")
	}
	ram, ok := totalRAM()
	if !ok || ram == 0 {
		t.Fatal("totalRAM failed on Linux")
	}
	fits := mustParse(t, sub("      - {nsid: 1, backend: memory, size: 1MiB}\n"))
	if err := fits.CheckSystem(); err != nil {
		t.Errorf("1MiB memory namespace: %v", err)
	}
	half := (ram/2/MiB + 1) * MiB
	c := mustParse(t, sub(fmt.Sprintf("      - {nsid: 1, backend: memory, size: %d}\n      - {nsid: 2, backend: memory, size: %d}\n", half, half)))
	err := c.CheckSystem()
	if err == nil || !strings.Contains(err.Error(), "test.yaml:8: subsystems[0].namespaces[1].size: memory namespaces") ||
		!strings.Contains(err.Error(), "of RAM") {
		t.Errorf("namespaces larger than RAM together: %v", err)
	}
}

func TestCheckSystemRBD(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "ceph.conf")
	if err := os.WriteFile(conf, []byte("[global]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := func(rbd string) *Config {
		return mustParse(t, "listeners: [{address: 10.99.0.1}]\nsubsystems:\n  - nqn: nqn.2024-01.com.example:sys\n    allow_any_host: true\n    namespaces:\n"+
			"      - {nsid: 1, backend: rbd, rbd: {pool: rbd, image: vol1, "+rbd+"}}\n")
	}
	p0 := "subsystems[0].namespaces[0].rbd."
	checkSystemErr(t, cfg(""), 0, "", "")
	checkSystemErr(t, cfg("ceph_conf: "+conf), 0, "", "")
	checkSystemErr(t, cfg("ceph_conf: "+filepath.Join(dir, "none.conf")), 6, p0+"ceph_conf", "cannot read")
	checkSystemErr(t, cfg("ceph_conf: "+dir), 6, p0+"ceph_conf", "is not a regular file")
	checkSystemErr(t, cfg("user: gonvmf, keyring: "+filepath.Join(dir, "none.keyring")), 6, p0+"keyring", "cannot read")
}

func TestCheckBackends(t *testing.T) {
	c := mustParse(t, "listeners: [{address: 10.99.0.1}]\nsubsystems:\n  - nqn: nqn.2024-01.com.example:sys\n    allow_any_host: true\n    namespaces:\n"+
		"      - {nsid: 1, backend: null, size: 1MiB}\n      - nsid: 2\n        backend: rbd\n        rbd: {pool: rbd, image: vol1}\n")
	if err := c.CheckBackends(nil); err != nil {
		t.Errorf("CheckBackends(nil) = %v", err)
	}
	errs := Errors(c.CheckBackends(map[string]string{BackendRBD: "build gonvmf with make build-ceph"}))
	if len(errs) != 1 || errs[0].Field != "subsystems[0].namespaces[1].backend" || errs[0].Line != 8 ||
		!strings.Contains(errs[0].Error(), "this gonvmf has no rbd backend; build gonvmf with make build-ceph") {
		t.Errorf("CheckBackends = %v", errs)
	}
}
