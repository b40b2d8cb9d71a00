package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
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
			var res perfResult
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
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"perf", "-t", "loop", "-c", cfg, "--rw", "sideways"}, 2, "--rw"},
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
		"lbaf  0 : ms:0   lbads:9  rp:0x0 (in use)", "Namespace 1: 32 MiB (65536 blocks of 512 bytes)", "uuid      : "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("identify: exit %d, output lacks %q\n%s\n%s", code, want, out, errOut)
		}
	}
	code, out, _ = gonvmf(t, "--log-level", "warn", "identify", "-t", "loop", "-c", cfg, "--json")
	var id struct {
		Controller map[string]any `json:"controller"`
		Namespaces []struct {
			NSID      uint32 `json:"nsid"`
			SizeBytes int64  `json:"size_bytes"`
		} `json:"namespaces"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &id) != nil || id.Controller["subnqn"] != "nqn.2024-01.io.gonvmf:perf" ||
		len(id.Namespaces) != 1 || id.Namespaces[0].SizeBytes != 32<<20 {
		t.Errorf("identify --json: exit %d\n%s", code, out)
	}
}

// perfEnv is a loop target with a backend wrapper, and a controller on it.
type perfEnv struct {
	tgt  *target.Target
	ctrl *initiator.Controller
	o    initiator.Options
}

func newPerfEnv(t *testing.T, wrap func(backend.Backend) backend.Backend) *perfEnv {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: "nqn.2024-01.io.gonvmf:perf", AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 8 << 20, LBASize: 512}}}},
		Transport: conf.Transport{InCapsuleDataSize: 4096, QueueDepth: 32, MaxIOQueues: 4, KeepAliveTimeout: time.Minute},
	}
	tgt, err := target.New(cfg, target.WithLogger(quiet), target.WithBackendOpener(func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil || wrap == nil {
			return b, err
		}
		return wrap(b), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	port, err := loop.New(tgt, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := initiator.Options{Transport: initiator.TransportLoop, SubNQN: "nqn.2024-01.io.gonvmf:perf", Queues: 2, QueueSize: 8, Logger: quiet,
		Loop: func(depth int) (initiator.LoopConn, error) {
			c, err := port.Dial(depth)
			if err != nil {
				return nil, err
			}
			return c, nil
		}}
	ctrl, err := initiator.Dial(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Close() })
	return &perfEnv{tgt: tgt, ctrl: ctrl, o: o}
}

// corruptBackend flips a byte of LBA 100 on every read of it.
type corruptBackend struct{ backend.Backend }

func (b corruptBackend) ReadBlocks(buf []byte, slba uint64) error {
	if err := b.Backend.ReadBlocks(buf, slba); err != nil {
		return err
	}
	if n := uint64(len(buf)) / uint64(b.LBASize()); slba <= 100 && 100 < slba+n {
		buf[(100-slba)*uint64(b.LBASize())+200] ^= 0x40
	}
	return nil
}

func TestPerfVerifyDetectsCorruption(t *testing.T) {
	e := newPerfEnv(t, func(b backend.Backend) backend.Backend { return corruptBackend{b} })
	pc := &perfConfig{workload: "read", readPct: 100, bs: 4096, qd: 4, queues: 2, runtime: time.Second,
		verify: true, size: 1 << 20, sizeSet: true, seed: 7, json: true}
	res, err := perfRun(context.Background(), e.ctrl, pc, e.o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verify
	if v == nil || v.Mismatches == 0 || len(v.First) == 0 || !strings.Contains(v.First[0], "LBA 100:") || !strings.Contains(v.First[0], "CRC") {
		t.Fatalf("verify result %+v", v)
	}
	t.Logf("reported: %s", v.First[0])
}

// TestPerfControllerGone closes the target in the middle of a run: perf must stop with
// an error soon, not hang.
func TestPerfControllerGone(t *testing.T) {
	e := newPerfEnv(t, nil)
	pc := &perfConfig{workload: "randwrite", readPct: 0, random: true, bs: 4096, qd: 8, queues: 2, runtime: time.Minute,
		verify: true, size: 2 << 20, sizeSet: true, seed: 9, json: true}
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.tgt.Close()
	}()
	start := time.Now()
	var done atomic.Bool
	go func() {
		time.Sleep(20 * time.Second)
		if !done.Load() {
			panic("perf did not stop 20 s after the target went away")
		}
	}()
	res, err := perfRun(context.Background(), e.ctrl, pc, e.o, io.Discard)
	done.Store(true)
	if err == nil || !errors.Is(err, initiator.ErrDisconnected) {
		t.Fatalf("perfRun: %v", err)
	}
	// The root cause, not the command that noticed it first.
	if !strings.HasPrefix(err.Error(), "controller failed: ") {
		t.Errorf("perfRun: %v; want the controller's failure", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopped %v after start", d)
	}
	if res == nil || res.Error == "" {
		t.Errorf("result %+v", res)
	}
	t.Logf("stopped after %v: %v", time.Since(start), err)
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

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"4096": 4096, "4k": 4096, "4K": 4096, "4KiB": 4096, "4kb": 4096, "1m": 1 << 20, "2G": 2 << 30, "0": 0} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "k", "-1", "4x", "1.5k"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) succeeded", s)
		}
	}
}

func TestStampCheck(t *testing.T) {
	b := make([]byte, 4096)
	stampBlocks(b, 512, 1000, 3, 0xabc)
	for i := 0; i < 8; i++ {
		if m := checkBlock(b[i*512:(i+1)*512], 1000+uint64(i), 3, 0xabc); m != nil {
			t.Fatalf("block %d: %v", i, m)
		}
	}
	if m := checkBlock(b[:512], 1000, 4, 0xabc); m == nil || !strings.Contains(m.String(), "expected LBA 1000 generation 4, got LBA 1000 generation 3") {
		t.Errorf("stale generation: %v", m)
	}
	if m := checkBlock(b[512:1024], 1000, 3, 0xabc); m == nil || !strings.Contains(m.String(), "got LBA 1001") {
		t.Errorf("wrong LBA: %v", m)
	}
	if m := checkBlock(b[:512], 1000, 3, 0xdef); m == nil || !strings.Contains(m.String(), "another run") {
		t.Errorf("wrong seed: %v", m)
	}
	b[300] ^= 1
	if m := checkBlock(b[:512], 1000, 3, 0xabc); m == nil || m.CRC {
		t.Errorf("corruption: %v", m)
	}
	if m := checkBlock(make([]byte, 512), 5, 1, 1); m == nil || !strings.Contains(m.String(), "without a perf stamp") {
		t.Errorf("zeroes: %v", m)
	}
}
