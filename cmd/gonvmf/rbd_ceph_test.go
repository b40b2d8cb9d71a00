//go:build ceph && linux && cgo

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/cephtest"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/server"
)

func TestMain(m *testing.M) {
	childMain()
	os.Exit(cephtest.Main(m))
}

// rbdLoopConfig is a loop-target configuration with one rbd namespace on a new image of
// the test cluster (created by create_size, removed when t ends).
func rbdLoopConfig(t *testing.T, image, extra string) string {
	t.Helper()
	c := cephtest.Get(t)
	t.Cleanup(func() { c.Rbd("rm", "--no-progress", c.Pool+"/"+image) })
	return writeFile(t, "rbd.yaml", fmt.Sprintf(`listeners:
  - address: 10.99.0.1
subsystems:
  - nqn: nqn.2024-01.io.gonvmf:rbd
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: rbd
        %s
        rbd:
          pool: %s
          image: %s
          ceph_conf: %s
          user: %s
          keyring: %s
          create_size: 64MiB
`, extra, c.Pool, image, c.Conf, c.User, c.Keyring))
}

func randomImage(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// TestRBDPerfLoopVerify: gonvmf perf --verify through the in-process target on an rbd
// namespace: mixed random I/O, FUA writes and large blocks, every block read checked.
func TestRBDPerfLoopVerify(t *testing.T) {
	for _, lba := range []string{"512", "4096"} {
		t.Run("lba"+lba, func(t *testing.T) {
			cfg := rbdLoopConfig(t, randomImage("perf-verify"), "lba_size: "+lba)
			for _, args := range [][]string{
				{"--rw", "randrw", "-o", "4k", "-q", "16", "--size", "8m", "-T", "1s"},
				{"--rw", "write", "-o", "128k", "-q", "4", "--size", "8m", "--fua", "-T", "1s"},
				{"--rw", "randread", "-o", "64k", "-q", "8", "--size", "8m", "-j", "2", "-N", "200"},
			} {
				a := append([]string{"--log-level", "warn", "perf", "-t", "loop", "-c", cfg, "--json", "--progress=false", "--verify", "--allow-overwrite"}, args...)
				code, out, errOut := gonvmf(t, a...)
				if code != 0 {
					t.Fatalf("perf %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
				}
				var res struct {
					Total struct {
						IOs uint64 `json:"ios"`
					} `json:"total"`
					Verify *struct {
						Checked    uint64 `json:"blocks_checked"`
						Mismatches uint64 `json:"mismatches"`
					} `json:"verify"`
				}
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatalf("perf %s: output is not JSON: %v\n%s", strings.Join(args, " "), err, out)
				}
				if res.Total.IOs == 0 || res.Verify == nil || res.Verify.Checked == 0 || res.Verify.Mismatches != 0 {
					t.Errorf("perf %s: %d I/Os, verify %+v", strings.Join(args, " "), res.Total.IOs, res.Verify)
				}
			}
		})
	}
}

// TestRBDMissingImage: a namespace whose image does not exist stops the target with the
// image named and the fix.
func TestRBDMissingImage(t *testing.T) {
	cfg := rbdLoopConfig(t, randomImage("missing"), "read_only: true")
	cfg2 := strings.Replace(readFileString(t, cfg), "          create_size: 64MiB\n", "", 1)
	os.WriteFile(cfg, []byte(cfg2), 0o644)
	code, out, errOut := gonvmf(t, "perf", "-t", "loop", "-c", cfg, "-T", "100ms", "--progress=false")
	if code != 1 || !strings.Contains(errOut, "no image") || !strings.Contains(errOut, "rbd create") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestRBDCtlNsReopen: an rbd namespace whose librbd flush failed (EIO injected in place of
// librbd's result) shows failed in gonvmf ctl ns ls with its image, refuses writes, and
// gonvmf ctl ns reopen puts it back into service.
func TestRBDCtlNsReopen(t *testing.T) {
	f := &backend.Faults{}
	cfg := rbdLoopConfig(t, randomImage("ctl-reopen"), "lba_size: 512")
	text := strings.Replace(readFileString(t, cfg), "listeners:", "control: {socket: "+filepath.Join(filepath.Dir(cfg), "ctl.sock")+"}\nlisteners:", 1)
	os.WriteFile(cfg, []byte(text), 0o600)
	s, sock := ctlTargetWith(t, cfg, server.Options{Target: []target.Option{
		target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
			spec.Faults = f
			return backend.Open(spec)
		})}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const nqn = "nqn.2024-01.io.gonvmf:rbd"
	c, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: nqn,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f", Logger: slog.New(slog.DiscardHandler),
		Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns, _ := c.Namespace(1)
	if _, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0); err != nil {
		t.Fatal(err)
	}
	f.FailSyncs(syscall.EIO)
	if err := ns.Flush(ctx); err == nil {
		t.Fatal("flush succeeded with the librbd flush failing")
	}
	if _, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0); err == nil {
		t.Error("write to the failed namespace succeeded")
	}
	code, out, errOut := gonvmf(t, "ctl", "--socket", sock, "ns", "ls")
	if code != 0 || !strings.Contains(out, "failed") || !strings.Contains(out, "rbd image") || !strings.Contains(out, "flush") ||
		!strings.Contains(out, "gonvmf ctl ns reopen "+nqn+" 1") {
		t.Errorf("ns ls: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := gonvmf(t, "ctl", "--socket", sock, "ns", "reopen", nqn, "1"); code != 0 || !strings.Contains(out, "cleared the failure") {
		t.Errorf("ns reopen: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0); err != nil {
		t.Errorf("write after the reopen: %v", err)
	}
	if err := ns.Flush(ctx); err != nil {
		t.Errorf("flush after the reopen: %v", err)
	}
}
