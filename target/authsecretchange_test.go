package target_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/target"
)

// setHostKeysResult is what a SetHostKeys run on a goroutine of its own returned.
type setHostKeysResult struct {
	created bool
	err     error
}

// goSetHostKeys runs tgt.SetHostKeys on a goroutine of its own and delivers its result.
func goSetHostKeys(tgt *target.Target, host string, ch target.HostKeysChange) <-chan setHostKeysResult {
	done := make(chan setHostKeysResult, 1)
	go func() {
		created, err := tgt.SetHostKeys(host, ch)
		done <- setHostKeysResult{created, err}
	}()
	return done
}

// awaitSetHostKeys waits for a SetHostKeys started by goSetHostKeys; the wait is a
// watchdog (what says what it waits for), far longer than any bound the tests set.
func awaitSetHostKeys(t *testing.T, what string, done <-chan setHostKeysResult) setHostKeysResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: SetHostKeys has not returned 10 s later", what)
	}
	panic("unreachable")
}

// awaitHeldRead waits until a read of the held secret file has started.
func awaitHeldRead(t *testing.T, what string, held *heldSecretFile) {
	t.Helper()
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the secret file was not read (through the target's file loader) within 10 s", what)
	}
}

func newSecret(t *testing.T) *dhchap.Secret {
	t.Helper()
	s, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// holdNewSecretFile sets SecretReadTimeout to d and writes a new secret file whose reads
// by targets created from now on are held (holdSecretFile); both are restored when the
// test ends. The test defers held.release, so that it runs before the cleanups close the
// target.
func holdNewSecretFile(t *testing.T, d time.Duration) (path string, held *heldSecretFile) {
	t.Helper()
	old := target.SecretReadTimeout
	target.SecretReadTimeout = d
	path = writeSecretFile(t, newSecret(t))
	held, restore := holdSecretFile(path)
	t.Cleanup(func() {
		restore()
		target.SecretReadTimeout = old
	})
	return path, held
}

// TestSetHostKeysSecretReadHungFails: SetHostKeys whose secret file's read hangs (a hung
// mount) fails after SecretReadTimeout, naming the host, the field, the file and the
// fix, and wrapping context.DeadlineExceeded; nothing changes. A second SetHostKeys of
// the same file joins the read still in flight rather than starting another. Once the
// file system answers, the change applies.
func TestSetHostKeysSecretReadHungFails(t *testing.T) {
	path, held := holdNewSecretFile(t, 50*time.Millisecond)
	defer held.release() // before the cleanups close the target
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	ch := target.HostKeysChange{DHCHAPSecret: new(conf.SecretFilePrefix + path)}

	for _, what := range []string{"SetHostKeys of a secret file whose read hangs", "second SetHostKeys of the file"} {
		r := awaitSetHostKeys(t, what, goSetHostKeys(e.tgt, otherNQN, ch))
		if r.err == nil {
			t.Fatalf("%s succeeded (reads held: %d), want it to fail after SecretReadTimeout", what, held.reads.Load())
		}
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("%s: error %v does not wrap context.DeadlineExceeded", what, r.err)
		}
		for _, want := range []string{otherNQN, "dhchap_secret", path, "check the file system that holds it"} {
			if !strings.Contains(r.err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", what, r.err, want)
			}
		}
		if h := e.tgt.Config().HostByNQN(otherNQN); h != nil {
			t.Errorf("%s failed but the host has an entry: %+v", what, h)
		}
	}
	if n := held.reads.Load(); n != 1 {
		t.Errorf("%d reads of the hung secret file, want 1: the second SetHostKeys must join the read in flight", n)
	}

	held.release()
	r := awaitSetHostKeys(t, "SetHostKeys once the file system answers", goSetHostKeys(e.tgt, otherNQN, ch))
	if r.err != nil || !r.created {
		t.Fatalf("SetHostKeys once the file system answers: created %v, %v; want a new entry", r.created, r.err)
	}
}

// TestSetHostKeysSecretReadHoldsNoChange: while SetHostKeys waits for its secret file's
// read, other configuration changes of the target apply (AddNamespace here): the read
// holds no lock they need. Once the file answers, SetHostKeys applies too.
func TestSetHostKeysSecretReadHoldsNoChange(t *testing.T) {
	path, held := holdNewSecretFile(t, time.Hour) // the read waits until the test releases it
	defer held.release()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))

	done := goSetHostKeys(e.tgt, otherNQN, target.HostKeysChange{DHCHAPSecret: new(conf.SecretFilePrefix + path)})
	awaitHeldRead(t, "SetHostKeys", held)
	added := make(chan error, 1)
	go func() { added <- e.tgt.AddNamespace(subNQN, memNS(2, 1<<20)) }()
	select {
	case err := <-added:
		if err != nil {
			t.Fatalf("AddNamespace while SetHostKeys waits for its secret file: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AddNamespace did not complete within 10 s while SetHostKeys waits for its secret file: the read holds the configuration lock")
	}
	select {
	case r := <-done:
		t.Fatalf("SetHostKeys returned (%v) while its secret file's read is held", r.err)
	default:
	}

	held.release()
	if r := awaitSetHostKeys(t, "SetHostKeys once the file answers", done); r.err != nil || !r.created {
		t.Fatalf("SetHostKeys once the file answers: created %v, %v; want a new entry", r.created, r.err)
	}
	c := e.tgt.Config()
	if h := c.HostByNQN(otherNQN); h == nil || h.DHCHAPSecret != conf.SecretFilePrefix+path {
		t.Errorf("host entry after SetHostKeys: %+v, want dhchap_secret file:%s", h, path)
	}
	if n := len(c.Subsystems[0].Namespaces); n != 2 {
		t.Errorf("%d namespaces after AddNamespace, want 2", n)
	}
}

// TestSetHostKeysEntryChangedDuringRead: SetHostKeys reads the secrets of the entry it
// would install before it takes the configuration lock; when another change alters
// either secret of the entry meanwhile, what it installs is checked again. Host A has an
// inline secret; one SetHostKeys sets one of its secrets (held) to a file whose read is
// held (its read reads the other secret as it is then); meanwhile another sets the other
// secret (changed) to a file, which is then removed. Once the first read answers, the
// first SetHostKeys — whose entry now holds the removed file, which it has not read —
// fails naming that field and file, and the entry stays as the second change left it.
func TestSetHostKeysEntryChangedDuringRead(t *testing.T) {
	for _, tc := range []struct{ held, changed string }{
		{held: "dhchap_secret", changed: "dhchap_ctrl_secret"},
		{held: "dhchap_ctrl_secret", changed: "dhchap_secret"},
	} {
		t.Run(tc.changed+" changed", func(t *testing.T) {
			heldPath, held := holdNewSecretFile(t, time.Hour)
			inline := newSecret(t).Encode()
			changedPath := writeSecretFile(t, newSecret(t))
			defer held.release()
			cfg := baseConfig(memNS(1, 1<<20))
			cfg.Hosts = []conf.Host{{NQN: otherNQN, DHCHAPSecret: inline}}
			e := newEnv(t, cfg)
			set := func(field, path string) target.HostKeysChange {
				if field == "dhchap_secret" {
					return target.HostKeysChange{DHCHAPSecret: new(conf.SecretFilePrefix + path)}
				}
				return target.HostKeysChange{DHCHAPCtrlSecret: new(conf.SecretFilePrefix + path)}
			}

			first := goSetHostKeys(e.tgt, otherNQN, set(tc.held, heldPath))
			awaitHeldRead(t, "first SetHostKeys", held)
			r := awaitSetHostKeys(t, "second SetHostKeys", goSetHostKeys(e.tgt, otherNQN, set(tc.changed, changedPath)))
			if r.err != nil {
				t.Fatalf("second SetHostKeys (%s) while the first waits for its file: %v", tc.changed, r.err)
			}
			if err := os.Remove(changedPath); err != nil {
				t.Fatal(err)
			}

			held.release()
			r = awaitSetHostKeys(t, "first SetHostKeys once its file answers", first)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.changed+": ") || !strings.Contains(r.err.Error(), changedPath) {
				t.Fatalf("first SetHostKeys, whose entry now names the removed file %s as %s: %v; want an error naming %s and the file",
					changedPath, tc.changed, r.err, tc.changed)
			}
			want := conf.Host{NQN: otherNQN, DHCHAPSecret: inline, DHCHAPCtrlSecret: conf.SecretFilePrefix + changedPath}
			if tc.changed == "dhchap_secret" {
				want.DHCHAPSecret, want.DHCHAPCtrlSecret = conf.SecretFilePrefix+changedPath, ""
			}
			h := e.tgt.Config().HostByNQN(otherNQN)
			if h == nil || h.DHCHAPSecret != want.DHCHAPSecret || h.DHCHAPCtrlSecret != want.DHCHAPCtrlSecret {
				t.Errorf("host entry after the failed SetHostKeys: %+v; want dhchap_secret %q, dhchap_ctrl_secret %q", h,
					conf.RedactSecret(want.DHCHAPSecret), conf.RedactSecret(want.DHCHAPCtrlSecret))
			}
		})
	}
}

// TestNewSecretReadHungFails: New whose configuration's host has a secret file whose read
// hangs fails after SecretReadTimeout, naming the entry (hosts[0]), the host, the field,
// the file and the fix, and wrapping context.DeadlineExceeded.
func TestNewSecretReadHungFails(t *testing.T) {
	path, held := holdNewSecretFile(t, 50*time.Millisecond)
	defer held.release()
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Hosts = []conf.Host{{NQN: otherNQN, DHCHAPSecret: conf.SecretFilePrefix + path}}
	type result struct {
		tgt *target.Target
		err error
	}
	done := make(chan result, 1)
	go func() {
		tgt, err := target.New(cfg, target.WithLogger(testLogger(t)))
		done <- result{tgt, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("New has not returned 10 s after it started reading a secret file that hangs")
	}
	if r.err == nil {
		r.tgt.Close()
		t.Fatalf("New succeeded (reads held: %d), want it to fail after SecretReadTimeout", held.reads.Load())
	}
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("New: error %v does not wrap context.DeadlineExceeded", r.err)
	}
	for _, want := range []string{"hosts[0]", otherNQN, "dhchap_secret", path, "check the file system that holds it"} {
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("New: error %q does not say %q", r.err, want)
		}
	}
}

// TestSetHostKeysReadsOnlyChangedSecrets: when another change alters the entry while
// SetHostKeys reads its secrets, SetHostKeys reads under the configuration lock only the
// values it has not read: the file it read before is not read again, so a file system
// that hangs after that read holds no change under the lock. Host A has an inline
// secret; one SetHostKeys gives it a secret file whose read is held; meanwhile another
// gives it an inline controller secret. The file's read then answers, and every read of
// it after that hangs: the first SetHostKeys applies without another.
func TestSetHostKeysReadsOnlyChangedSecrets(t *testing.T) {
	hostPath, held := holdNewSecretFile(t, time.Hour)
	defer held.release()
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Hosts = []conf.Host{{NQN: otherNQN, DHCHAPSecret: newSecret(t).Encode()}}
	e := newEnv(t, cfg)

	first := goSetHostKeys(e.tgt, otherNQN, target.HostKeysChange{DHCHAPSecret: new(conf.SecretFilePrefix + hostPath)})
	awaitHeldRead(t, "first SetHostKeys", held)
	ctrl := newSecret(t).Encode()
	r := awaitSetHostKeys(t, "second SetHostKeys", goSetHostKeys(e.tgt, otherNQN, target.HostKeysChange{DHCHAPCtrlSecret: &ctrl}))
	if r.err != nil {
		t.Fatalf("second SetHostKeys (inline controller secret) while the first waits for its file: %v", r.err)
	}

	held.handOver()
	r = awaitSetHostKeys(t, "first SetHostKeys once its file answered", first)
	if r.err != nil {
		t.Fatalf("first SetHostKeys once its file answered: %v", r.err)
	}
	if n := held.reads.Load(); n != 1 {
		t.Errorf("%d reads of the secret file, want 1: SetHostKeys read it again under the lock", n)
	}
	h := e.tgt.Config().HostByNQN(otherNQN)
	if h == nil || h.DHCHAPSecret != conf.SecretFilePrefix+hostPath || h.DHCHAPCtrlSecret != ctrl {
		t.Errorf("host entry after both SetHostKeys: %+v; want dhchap_secret file:%s and the inline controller secret", h, hostPath)
	}
}

// TestHostKeysReadApply: Apply applies a ReadHostKeys result once, to the Target that
// read it: a second Apply, and one of a zero or nil HostKeysRead, change nothing and
// say why; an invalid change reads as no error and fails in Apply.
func TestHostKeysReadApply(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	e := newEnv(t, cfg)
	secret := newSecret(t).Encode()
	r, err := e.tgt.ReadHostKeys(otherNQN, target.HostKeysChange{DHCHAPSecret: &secret})
	if err != nil {
		t.Fatalf("ReadHostKeys: %v", err)
	}
	if created, err := r.Apply(); err != nil || !created {
		t.Fatalf("Apply: created %v, %v; want a new entry", created, err)
	}
	if h := e.tgt.Config().HostByNQN(otherNQN); h == nil || h.DHCHAPSecret != secret {
		t.Fatalf("host entry after Apply: %+v, want the secret read", h)
	}
	if _, err := r.Apply(); err == nil || !strings.Contains(err.Error(), "applied already") {
		t.Errorf("a second Apply of one HostKeysRead: %v, want an error saying it was applied already", err)
	}
	for name, r := range map[string]*target.HostKeysRead{"zero": {}, "nil": nil} {
		if _, err := r.Apply(); err == nil || !strings.Contains(err.Error(), "call Target.ReadHostKeys") {
			t.Errorf("Apply of a %s HostKeysRead: %v, want an error saying to call ReadHostKeys", name, err)
		}
	}
	bad := "DHHC-1:00:not-a-key:"
	r, err = e.tgt.ReadHostKeys(otherNQN, target.HostKeysChange{DHCHAPCtrlSecret: &bad})
	if err != nil {
		t.Fatalf("ReadHostKeys of an invalid change: %v, want its error from Apply", err)
	}
	if _, err := r.Apply(); err == nil {
		t.Error("Apply of an invalid controller secret succeeded")
	}
	if h := e.tgt.Config().HostByNQN(otherNQN); h == nil || h.DHCHAPCtrlSecret != "" {
		t.Errorf("host entry after a failed Apply: %+v, want it unchanged", h)
	}
}
