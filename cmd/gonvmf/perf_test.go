package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/initiator/perf"
)

const loopConfig = `listeners:
  - address: 10.99.0.1
subsystems:
  - nqn: nqn.2024-01.io.gonvmf:perf
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: memory
        size: 32MiB
        lba_size: 512
  - nqn: nqn.2024-01.io.gonvmf:locked
    hosts:
      - nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555
    namespaces:
      - nsid: 1
        backend: null
        size: 1GiB
`

func TestPerfLoopJSON(t *testing.T) {
	cfg := writeFile(t, "loop.yaml", loopConfig)
	for _, args := range [][]string{
		{"--rw", "randread", "-o", "4k", "-q", "8", "-j", "2"},
		{"--rw", "randrw", "-M", "70", "-o", "8k", "-q", "4", "--verify", "--size", "4m"},
		{"--rw", "write", "-o", "64k", "-q", "2", "--verify", "--size", "2m", "--fua"},
		{"--rw", "read", "-o", "512", "-q", "16", "--verify", "--size", "1m", "-N", "5000"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			a := append([]string{"--log-level", "warn", "perf", "-t", "loop", "-c", cfg, "--json", "--progress=false"}, args...)
			if !strings.Contains(strings.Join(args, " "), "-N") {
				a = append(a, "-T", "300ms")
			}
			code, out, errOut := gonvmf(t, a...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			var res perf.Result
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if res.Total.IOs == 0 || res.Total.IOPS <= 0 || res.Total.Lat.P50 <= 0 || res.Total.Lat.Max < res.Total.Lat.P99 ||
				res.Total.Lat.P99 < res.Total.Lat.P50 || res.SubNQN != "nqn.2024-01.io.gonvmf:perf" {
				t.Errorf("results %+v", res)
			}
			if strings.Contains(strings.Join(args, " "), "--verify") {
				if res.Verify == nil || res.Verify.Checked == 0 || res.Verify.Mismatches != 0 {
					t.Errorf("verify %+v", res.Verify)
				}
			}
			if strings.Contains(strings.Join(args, " "), "-N") && res.Total.IOs != 5000 {
				t.Errorf("-N 5000 did %d I/Os", res.Total.IOs)
			}
			if res.RWMixRead == 70 && (res.Read == nil || res.Write == nil || res.Read.IOs < res.Write.IOs) {
				t.Errorf("70%% reads: %+v %+v", res.Read, res.Write)
			}
		})
	}
}

func TestPerfText(t *testing.T) {
	cfg := writeFile(t, "loop.yaml", loopConfig)
	code, out, errOut := gonvmf(t, "--log-level", "warn", "perf", "-t", "loop", "-c", cfg, "-T", "1200ms", "-q", "4", "--verify", "--size", "1m")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"IOPS", "MiB/s", "p99.9", "read ", "verify: ", "0 mismatches"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"perf: randread", "prefilled", "[   1s] read"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestPerfErrors(t *testing.T) {
	cfg := writeFile(t, "loop.yaml", loopConfig)
	nullCfg := writeFile(t, "null.yaml", `listeners:
  - address: 10.99.0.1
subsystems:
  - nqn: nqn.2024-01.io.gonvmf:null
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: null
        size: 1GiB
`)
	noSubs := writeFile(t, "nosubs.yaml", "listeners:\n  - address: 10.99.0.1\n")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"perf", "-t", "loop", "-c", cfg, "--rw", "sideways"}, 2, "--rw"},
		// A valid configuration that serves nothing: a usage error, not a panic.
		{[]string{"identify", "-t", "loop", "-c", noSubs}, 2, "serves no subsystem"},
		{[]string{"perf", "-t", "loop", "-c", noSubs}, 2, "serves no subsystem"},
		{[]string{"perf", "-t", "loop", "-c", cfg, "-o", "1000", "-T", "100ms"}, 1, "not a multiple"},
		{[]string{"perf", "-t", "loop", "-c", cfg, "--size", "1m", "-o", "64k", "-q", "16", "--verify"}, 1, "too few"},
		{[]string{"perf", "-t", "loop", "-c", cfg, "-n", "nqn.2024-01.io.gonvmf:nope"}, 1, "has no subsystem"},
		{[]string{"perf", "-t", "loop", "-c", cfg, "-n", "nqn.2024-01.io.gonvmf:locked"}, 1, "not allowed"},
		{[]string{"perf", "-t", "rdma", "-n", "nqn.2024-01.io.gonvmf:perf"}, 2, "-a/--traddr"},
		{[]string{"perf", "-t", "loop"}, 2, "--config"},
		// A null namespace drops what perf writes: the failure says so.
		{[]string{"perf", "-t", "loop", "-c", nullCfg, "--size", "1m", "-w", "write", "-q", "4", "--verify"}, 1, "discard writes"},
		{[]string{"identify", "-t", "loop", "-c", cfg, "--nsid", "9"}, 1, "no active namespace 9"},
	} {
		code, out, errOut := gonvmf(t, append([]string{"--log-level", "error"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q (stdout %q); want exit %d and %q", c.args, code, errOut, out, c.code, c.want)
		}
	}
}

func TestDiscoverIdentifyLoop(t *testing.T) {
	cfg := writeFile(t, "loop.yaml", loopConfig)
	code, out, errOut := gonvmf(t, "--log-level", "warn", "discover", "-t", "loop", "-c", cfg)
	// The locked subsystem is not listed: the discovery log shows what this host may access.
	if code != 0 || !strings.Contains(out, "Discovery Log Number of Records 1, Generation counter") ||
		!strings.Contains(out, "subnqn:  nqn.2024-01.io.gonvmf:perf") || !strings.Contains(out, "trtype:  loop") ||
		strings.Contains(out, "locked") {
		t.Errorf("discover: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = gonvmf(t, "--log-level", "warn", "discover", "-t", "loop", "-c", cfg, "--json")
	var d discoveryJSON
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || len(d.Records) != 1 {
		t.Errorf("discover --json: exit %d\n%s", code, out)
	}
	code, out, errOut = gonvmf(t, "--log-level", "warn", "identify", "-t", "loop", "-c", cfg)
	for _, want := range []string{"NVME Identify Controller:", "subnqn    : nqn.2024-01.io.gonvmf:perf", "NVME Identify Namespace 1:",
		"lbaf  0 : ms:0   lbads:9  rp:0x0 (in use)", "Namespace 1: 32 MiB (65536 blocks of 512 bytes)", "uuid      : ",
		"cmic      : 0xb", "anatt     : 10", "ANA group 1: optimized, namespaces [1]"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("identify: exit %d, output lacks %q\n%s\n%s", code, want, out, errOut)
		}
	}
	code, out, _ = gonvmf(t, "--log-level", "warn", "identify", "-t", "loop", "-c", cfg, "--json")
	var id struct {
		Controller map[string]any `json:"controller"`
		ANAGroups  []struct {
			Group uint32   `json:"group"`
			State string   `json:"state"`
			NSIDs []uint32 `json:"nsids"`
		} `json:"ana_groups"`
		Namespaces []struct {
			NSID      uint32 `json:"nsid"`
			SizeBytes int64  `json:"size_bytes"`
		} `json:"namespaces"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &id) != nil || id.Controller["subnqn"] != "nqn.2024-01.io.gonvmf:perf" ||
		len(id.Namespaces) != 1 || id.Namespaces[0].SizeBytes != 32<<20 ||
		len(id.ANAGroups) != 1 || id.ANAGroups[0].State != "optimized" || len(id.ANAGroups[0].NSIDs) != 1 {
		t.Errorf("identify --json: exit %d\n%s", code, out)
	}
}

func TestDiscoveryNames(t *testing.T) {
	// libnvme's tables: anything outside them is "unrecognized".
	for v, want := range map[uint8]string{0: "not specified", 1: "required", 2: "not required",
		4: "not specified, sq flow control disable supported", 6: "unrecognized", 3: "unrecognized"} {
		if got := treqStr(v); got != want {
			t.Errorf("treq %d: %q, want %q", v, got, want)
		}
	}
	for v, want := range map[uint16]string{0: "none", 1: "duplicate discovery information", 2: "explicit discovery connections",
		3: "explicit discovery connections, duplicate discovery information", 4: "unrecognized", 0x100: "unrecognized"} {
		if got := eflagsStr(v); got != want {
			t.Errorf("eflags %d: %q, want %q", v, got, want)
		}
	}
}

// TestPerfLoopOverwrite: with -t loop, perf writes to a namespace whose backend keeps its
// data (a file here; block and rbd alike) only with --allow-overwrite; reading needs no
// flag, and memory and null namespaces, which live and die with perf, need none either.
// The configuration comes from --config only, not from GONVMF_CONFIG.
func TestPerfLoopOverwrite(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "vol.img")
	data := bytes.Repeat([]byte("keep"), 1<<20) // 4 MiB that a running target may be serving
	if err := os.WriteFile(img, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "files.yaml", `listeners: [{address: 10.99.0.1}]
subsystems:
  - nqn: nqn.2024-01.io.gonvmf:files
    allow_any_host: true
    namespaces:
      - {nsid: 3, backend: memory, size: 4MiB}
      - {nsid: 1, backend: file, path: `+img+`, shared: true}
      - {nsid: 2, backend: null, size: 1GiB}
`)
	run := []string{"--log-level", "error", "perf", "-t", "loop", "-c", cfg, "--progress=false", "-o", "4k", "-q", "4", "-T", "100ms"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		// The lowest NSID is the file: perf's default namespace.
		{[]string{"-w", "randwrite"}, 2, "perf -w randwrite would overwrite namespace 1 of nqn.2024-01.io.gonvmf:files: its file backend " + img},
		{[]string{"-w", "randrw", "--nsid", "1"}, 2, "pass --allow-overwrite"},
		{[]string{"-w", "randread", "--verify", "--size", "1m"}, 2, "perf -w randread --verify would overwrite namespace 1"},
		{[]string{"-w", "randread"}, 0, ""},
		{[]string{"-w", "randrw", "-M", "100"}, 0, ""},
		{[]string{"-w", "randwrite", "--nsid", "3", "--verify", "--size", "1m"}, 0, ""},
		{[]string{"-w", "write", "--nsid", "2"}, 0, ""},
	} {
		code, out, errOut := gonvmf(t, append(run, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("perf %v: exit %d, stderr %q (stdout %q); want exit %d and %q", c.args, code, errOut, out, c.code, c.want)
		}
	}
	if !bytes.Equal(readFile(t, img), data) {
		t.Fatal("a refused or read-only run changed the file")
	}
	if code, out, errOut := gonvmf(t, append(run, "-w", "randwrite", "--allow-overwrite")...); code != 0 {
		t.Fatalf("perf -w randwrite --allow-overwrite: exit %d\n%s\n%s", code, out, errOut)
	}
	if bytes.Equal(readFile(t, img), data) {
		t.Error("perf -w randwrite --allow-overwrite left the file as it was")
	}

	// A shell set up for the target has GONVMF_CONFIG: the host commands do not take it.
	t.Setenv("GONVMF_CONFIG", cfg)
	for _, cmd := range [][]string{{"perf", "-w", "randwrite", "--allow-overwrite"}, {"identify"}, {"discover"}} {
		code, _, errOut := gonvmf(t, append([]string{"--log-level", "error", cmd[0], "-t", "loop"}, cmd[1:]...)...)
		if code != 2 || !strings.Contains(errOut, "-t loop needs --config FILE") {
			t.Errorf("%s -t loop with GONVMF_CONFIG set: exit %d\n%s", cmd[0], code, errOut)
		}
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
