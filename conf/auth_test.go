package conf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// authConfig writes a configuration with one authenticating host into dir and returns its
// path; secret and ctrl are the YAML values of the two secrets.
func authConfig(t *testing.T, dir, secret, ctrl string, mode os.FileMode) string {
	t.Helper()
	text := baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    hosts: [" + authHost + "]\n    auth_required: true\n    namespaces:\n" + nullNS +
		"hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + secret + "\n"
	if ctrl != "" {
		text += "    dhchap_ctrl_secret: " + ctrl + "\n    dhchap_hashes: [hmac(sha256)]\n    dhchap_dhgroups: [ffdhe3072, null]\n"
	}
	p := filepath.Join(dir, "target.yaml")
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeSecret(t *testing.T, path, secret string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(secret+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

const otherSecret = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"

func TestAuthSecretFiles(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, filepath.Join(dir, "host.key"), strings.Trim(goodSecret, `"`), 0o600)
	writeSecret(t, filepath.Join(dir, "ctrl.key"), otherSecret, 0o600)
	path := authConfig(t, dir, "file:host.key", "file:"+filepath.Join(dir, "ctrl.key"), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h := c.HostByNQN(authHost)
	if h == nil || h.DHCHAPSecret != "file:"+filepath.Join(dir, "host.key") {
		t.Fatalf("relative secret file not resolved: %+v", h)
	}
	if err := c.CheckSystem(); err != nil || len(c.Warnings) != 0 {
		t.Fatalf("CheckSystem: %v, warnings %v", err, c.Warnings)
	}
	k, err := h.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if k.Host.TransformHash() != nvmeproto.AuthHashSHA256 || k.Ctrl == nil || k.Ctrl.TransformHash() != 0 {
		t.Errorf("keys %v %v", k.Host, k.Ctrl)
	}
	if len(k.Hashes) != 1 || k.Hashes[0] != nvmeproto.AuthHashSHA256 ||
		len(k.DHGroups) != 2 || k.DHGroups[0] != nvmeproto.AuthDHGroupFFDHE3072 || k.DHGroups[1] != nvmeproto.AuthDHGroupNull {
		t.Errorf("preferences %v %v", k.Hashes, k.DHGroups)
	}
	// A rewritten file takes effect at the next Keys (key rotation).
	writeSecret(t, filepath.Join(dir, "host.key"), otherSecret, 0o600)
	if k2, err := h.Keys(); err != nil || k2.Host.Equal(k.Host) {
		t.Errorf("rewritten secret file not read again: %v", err)
	}
	// The printed configuration reads back the same.
	back, err := Parse([]byte(c.String()), path)
	if err != nil || back.String() != c.String() {
		t.Errorf("String does not read back: %v\n%s", err, c.String())
	}

	for _, tc := range []struct {
		name, want, fix string
		prep            func()
	}{
		{"open to others", "is open to other users (mode 0644)", "chmod 600", func() { writeSecret(t, filepath.Join(dir, "host.key"), otherSecret, 0o644) }},
		{"missing", "cannot read the secret file", "create it with the key", func() { os.Remove(filepath.Join(dir, "host.key")) }},
		{"directory", "is not a regular file", "name a file", func() { os.Mkdir(filepath.Join(dir, "host.key"), 0o700) }},
		{"bad content", "the secret's CRC-32 does not match", "nvme gen-dhchap-key prints", func() {
			writeSecret(t, filepath.Join(dir, "host.key"), strings.Replace(otherSecret, "KfiaR", "KfiaS", 1), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.RemoveAll(filepath.Join(dir, "host.key"))
			tc.prep()
			c, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			err = c.CheckSystem()
			if err == nil {
				t.Fatal("CheckSystem accepted the secret file")
			}
			errs := Errors(err)
			if len(errs) != 1 || errs[0].Field != "hosts[0].dhchap_secret" || !strings.Contains(errs[0].Msg, tc.want) ||
				!strings.Contains(errs[0].Fix, tc.fix) || errs[0].Line != 13 {
				t.Errorf("%+v", errs)
			}
			if strings.Contains(err.Error(), "vpq37fuC3d") || strings.Contains(err.Error(), "AAECAwQFBgcI") {
				t.Errorf("error quotes the secret: %v", err)
			}
			if _, err := c.HostByNQN(authHost).Keys(); err == nil || !strings.Contains(err.Error(), "host "+authHost+": dhchap_secret: ") ||
				!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "; ") || !strings.Contains(err.Error(), tc.fix) {
				t.Errorf("Keys: %v; want the host, the field, %q and the fix (%q)", err, tc.want, tc.fix)
			}
		})
	}
	if os.Geteuid() == 0 {
		writeSecret(t, filepath.Join(dir, "nobody.key"), otherSecret, 0o600)
		if err := os.Chown(filepath.Join(dir, "nobody.key"), 65534, 65534); err == nil {
			if fix, err := secretFileProblem(filepath.Join(dir, "nobody.key")); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(fix, "chown 0") {
				t.Errorf("foreign owner: %v %q", err, fix)
			}
		}
	}
}

func TestAuthInlineSecretWarning(t *testing.T) {
	dir := t.TempDir()
	path := authConfig(t, dir, goodSecret, "", 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckSystem(); err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || c.Warnings[0].Field != "hosts[0].dhchap_secret" || !strings.Contains(c.Warnings[0].Fix, "chmod 600 "+path) {
		t.Fatalf("warnings %v", c.Warnings)
	}
	k, err := c.Hosts[0].Keys()
	if err != nil || k.Ctrl != nil || len(k.Hashes) != 3 || len(k.DHGroups) != 6 {
		t.Fatalf("inline keys: %v %+v", err, k)
	}
	os.Chmod(path, 0o600)
	c, _ = Load(path)
	if err := c.CheckSystem(); err != nil || len(c.Warnings) != 0 {
		t.Errorf("mode 0600: %v %v", err, c.Warnings)
	}
}

func TestRedactSecretAndSameAs(t *testing.T) {
	const inline = "DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7/:"
	for in, want := range map[string]string{
		"": "", inline: "DHHC-1:01:<32-byte key>:", "file:/etc/gonvmf/h.key": "file:/etc/gonvmf/h.key",
		"DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5fr:": "<invalid secret>",
	} {
		if got := RedactSecret(in); got != want {
			t.Errorf("RedactSecret(%q) = %q, want %q", in, got, want)
		}
	}
	a := Host{NQN: "h", DHCHAPSecret: inline}
	b := a
	b.DHCHAPHashes = []string{"hmac(sha512)", "sha384", "sha256"} // the default, spelled out
	b.DHCHAPDHGroups = []string{"ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144", "ffdhe8192", "null"}
	if !a.SameAs(&b) {
		t.Errorf("the default lists spelled out differ from the default")
	}
	for _, edit := range []func(h *Host){
		func(h *Host) { h.DHCHAPSecret = "file:/k" },
		func(h *Host) { h.DHCHAPCtrlSecret = inline },
		func(h *Host) { h.DHCHAPHashes = []string{"sha256", "sha384", "sha512"} },
		func(h *Host) { h.DHCHAPDHGroups = []string{"null"} },
	} {
		c := a
		edit(&c)
		if a.SameAs(&c) {
			t.Errorf("%+v is the same as %+v", c, a)
		}
	}
}

// TestCheckSystemSecretFileHung: CheckSystem waits for the checks of secret files that do
// not answer (a hung mount; here checks held until the test ends) at most
// systemCheckTimeout, all of them at once, and fails each with the field, the host, the
// file and the fix. A check of a file whose check is in flight joins it rather than
// starting another; one after it ended reads the file again.
func TestCheckSystemSecretFileHung(t *testing.T) {
	dir := t.TempDir()
	path := authConfig(t, dir, "file:host.key", "file:ctrl.key", 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	savedCheck, savedTimeout := checkSecretFile, systemCheckTimeout
	checkSecretFile = func(string) (string, string) {
		<-release
		return "", ""
	}
	systemCheckTimeout = 50 * time.Millisecond
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
		checkSecretFile, systemCheckTimeout = savedCheck, savedTimeout
	})

	checked := make(chan error, 1)
	go func() { checked <- c.CheckSystem() }()
	select {
	case err = <-checked:
	case <-time.After(10 * time.Second):
		t.Fatal("CheckSystem still waits for the held secret files after 10 s")
	}
	errs := Errors(err)
	if len(errs) != 2 {
		t.Fatalf("CheckSystem: %v, want one error per held secret file", err)
	}
	for i, f := range []string{"dhchap_secret", "dhchap_ctrl_secret"} {
		file := filepath.Join(dir, map[string]string{"dhchap_secret": "host.key", "dhchap_ctrl_secret": "ctrl.key"}[f])
		e := errs[i]
		if e.Field != "hosts[0]."+f || !strings.Contains(e.Msg, "host "+authHost) || !strings.Contains(e.Msg, file) ||
			!strings.Contains(e.Msg, "did not answer within 50ms") || !strings.Contains(e.Fix, "hung NFS mount") {
			t.Errorf("error %d: %+v, want field hosts[0].%s, host, file %s, the time waited and the fix", i, e, f, file)
		}
	}
	hostKey := filepath.Join(dir, "host.key")
	held := startSecretCheck(hostKey)
	if again := startSecretCheck(hostKey); again != held {
		t.Error("a check of a file whose check is in flight started another")
	}
	close(release)
	released = true
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the released check did not end within 10 s")
	}
	next := startSecretCheck(hostKey)
	if next == held {
		t.Error("a check after the file's check ended joined the ended one")
	}
	select {
	case <-next.Done(): // the test leaves no check running
	case <-time.After(10 * time.Second):
		t.Fatal("the check after the release did not end within 10 s")
	}
}

// TestLoadSecretFileStatErrors: a missing secret file's error is fs.ErrNotExist and its
// fix is to create the file; a path the target's user cannot reach (here through a
// regular file: ENOTDIR) is not told to create it, and its fix names the path.
func TestLoadSecretFileStatErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "host.key")
	_, err := LoadSecret(SecretFilePrefix + missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "create it with the key") || !strings.Contains(err.Error(), "chmod 600 "+missing) {
		t.Errorf("LoadSecret of a missing file: %v; want fs.ErrNotExist and the fix to create it", err)
	}
	plain := filepath.Join(dir, "plain")
	writeSecret(t, plain, goodSecret, 0o600)
	through := filepath.Join(plain, "host.key")
	_, err = LoadSecret(SecretFilePrefix + through)
	if err == nil || errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "create it") ||
		!strings.Contains(err.Error(), "can reach "+through) {
		t.Errorf("LoadSecret of a file under a regular file: %v; want no fix to create it, and one to make %s reachable", err, through)
	}
}
