package conf

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holdCheck starts, under key, a file system check that answers only when the test ends,
// so that CheckSystem's check with that key joins it (fsChecks) and does not answer: a
// hung mount for any kind of check, the stat-only ones too (the state file's, the
// configuration file's mode), which no FIFO or lease holds. A key that is not the one
// CheckSystem computes leaves CheckSystem's check to run and answer, which the tests see
// as a wrong result. The cleanup lets the check answer and waits until it has ended, so
// that the next test finds no check of key running.
func holdCheck(t *testing.T, key string) {
	t.Helper()
	if fsChecks.Running(key) != nil {
		t.Fatalf("a check of %q runs before the test holds one", key)
	}
	release := make(chan struct{})
	call := fsChecks.Start(key, func() (fsResult, error) {
		<-release
		return fsResult{}, nil
	})
	t.Cleanup(func() {
		close(release)
		<-call.Done()
	})
}

// heldField is a field CheckSystem must fail, or warn about, because its check is held,
// and the path its message must name.
type heldField struct{ field, path string }

// heldSystem parses a configuration with every kind of file system check that fails a
// field — a file and a block namespace, an rbd namespace's ceph_conf and keyring, the
// state file, the control listener's certificate and client CAs — and a host secret held
// inline, which makes CheckSystem stat the configuration file for its mode, and holds all
// 8 checks (holdCheck). It returns the configuration, the fields CheckSystem must fail in
// its errors' order, and the field it must warn about (the mode check's: a configuration
// file whose stat does not answer is no reason to refuse the configuration).
func heldSystem(t *testing.T) (c *Config, fails []heldField, warn heldField) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "target.yaml")
	p := func(name string) string { return filepath.Join(dir, name) }
	text := fmt.Sprintf("listeners: [{address: 10.99.0.1}]\nstate_file: %s\n", p("state.json")) +
		fmt.Sprintf("control: {tcp: \"127.0.0.1:4421\", tls_cert: %s, tls_key: %s, tls_client_ca: %s}\n", p("cert.pem"), p("key.pem"), p("ca.pem")) +
		"subsystems:\n  - nqn: nqn.2024-01.com.example:sys\n    hosts: [" + authHost + "]\n    namespaces:\n" +
		"      - {nsid: 1, backend: file, path: " + p("disk0.img") + "}\n" +
		"      - {nsid: 2, backend: block, path: " + p("dev") + "}\n" +
		"      - {nsid: 3, backend: rbd, rbd: {pool: rbd, image: vol1, user: gonvmf, ceph_conf: " + p("ceph.conf") + ", keyring: " + p("keyring") + "}}\n" +
		"hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: \"" + otherSecret + "\"\n"
	c, err := Parse([]byte(text), file)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, numbered(text))
	}
	if c.File != file || c.StateFile != p("state.json") {
		t.Fatalf("Parse: file %q, state file %q; want %q and %q", c.File, c.StateFile, file, p("state.json"))
	}
	nss := c.Subsystems[0].Namespaces
	for _, key := range []string{
		fileCheck(&nss[0]).key,
		blockCheck(&nss[1]).key,
		rbdFileCheck(p("ceph.conf"), "the cluster's ceph.conf").key,
		rbdFileCheck(p("keyring"), "client.gonvmf's keyring").key,
		stateFileCheck(p("state.json"), true).key,
		tlsPairCheck(p("cert.pem"), p("key.pem")).key,
		clientCACheck(p("ca.pem")).key,
		modeCheck(file).key,
	} {
		holdCheck(t, key)
	}
	fails = []heldField{
		{"state_file", p("state.json")},
		{"control.tls_cert", p("cert.pem")},
		{"control.tls_client_ca", p("ca.pem")},
		{"subsystems[0].namespaces[0].path", p("disk0.img")},
		{"subsystems[0].namespaces[1].path", p("dev")},
		{"subsystems[0].namespaces[2].rbd.ceph_conf", p("ceph.conf")},
		{"subsystems[0].namespaces[2].rbd.keyring", p("keyring")},
	}
	return c, fails, heldField{"hosts[0].dhchap_secret", file}
}

// checkSystemBounded runs c.CheckSystem and returns how long it took and its error; it
// fails the test when CheckSystem has not returned after 10 s.
func checkSystemBounded(t *testing.T, c *Config) (time.Duration, error) {
	t.Helper()
	type result struct {
		err     error
		elapsed time.Duration
	}
	checked := make(chan result, 1)
	go func() {
		start := time.Now()
		err := c.CheckSystem()
		checked <- result{err, time.Since(start)}
	}()
	select {
	case r := <-checked:
		return r.elapsed, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("CheckSystem still waits for the held checks after 10 s")
		return 0, nil
	}
}

// TestCheckSystemHeldChecksEachTimeOut: every kind of CheckSystem's file system checks
// that does not answer within systemCheckTimeout — the state file's, a block device's, an
// rbd namespace's ceph_conf and keyring, a file namespace's, the control listener's TLS
// files, all held (holdCheck) — fails its field with the path, the time waited and the
// fix, and the stat of a configuration file holding a secret inline that does not answer
// is a warning naming the file, not an error.
func TestCheckSystemHeldChecksEachTimeOut(t *testing.T) {
	c, fails, warn := heldSystem(t)
	saved := systemCheckTimeout
	systemCheckTimeout = 50 * time.Millisecond
	t.Cleanup(func() { systemCheckTimeout = saved })

	_, err := checkSystemBounded(t, c)
	errs := Errors(err)
	if len(errs) != len(fails) {
		t.Fatalf("CheckSystem: %v; want %d errors, one for each held check but the configuration file's", err, len(fails))
	}
	for i, f := range fails {
		e := errs[i]
		if e.Field != f.field || !strings.Contains(e.Msg, f.path) || !strings.Contains(e.Msg, "did not answer within 50ms") ||
			!strings.Contains(e.Fix, "hung NFS or FUSE mount") {
			t.Errorf("error %d: %+v; want field %s, the path %s, the time waited and the fix", i, e, f.field, f.path)
		}
	}
	var warned []string
	for _, w := range c.Warnings {
		if strings.Contains(w.Msg, "did not answer") {
			warned = append(warned, w.Field)
			if w.Field != warn.field || !strings.Contains(w.Msg, "holds a secret inline") || !strings.Contains(w.Msg, warn.path) ||
				!strings.Contains(w.Msg, "did not answer within 50ms") || !strings.Contains(w.Fix, "hung NFS or FUSE mount") {
				t.Errorf("warning %+v; want field %s, the secret inline, the file %s, the time waited and the fix", w, warn.field, warn.path)
			}
		}
	}
	if len(warned) != 1 {
		t.Errorf("warnings of checks that did not answer on %v; want one, on %s (the configuration file's stat)", warned, warn.field)
	}
}

// TestCheckSystemOneBoundForAllChecks: CheckSystem waits for its file system checks
// together, once systemCheckTimeout in all however many do not answer: with 8 checks held
// (heldSystem) and the bound shortened to 300ms it returns after at least 300ms (it gave
// them the bound) and before 600ms. Waiting the bound once for each held check would take
// 8 × 300ms = 2.4 s: 4 times the limit, so no slow machine makes a correct CheckSystem
// miss it, nor a wrong one meet it.
func TestCheckSystemOneBoundForAllChecks(t *testing.T) {
	c, fails, _ := heldSystem(t)
	const bound = 300 * time.Millisecond
	saved := systemCheckTimeout
	systemCheckTimeout = bound
	t.Cleanup(func() { systemCheckTimeout = saved })

	elapsed, err := checkSystemBounded(t, c)
	if n := len(Errors(err)); n != len(fails) {
		t.Fatalf("CheckSystem: %v; want %d errors, one for each held check but the configuration file's", err, len(fails))
	}
	if elapsed < bound || elapsed >= 2*bound {
		t.Errorf("CheckSystem with 8 checks held returned after %v; want one bound of %v (less than %v), not one for each", elapsed, bound, 2*bound)
	}
}
