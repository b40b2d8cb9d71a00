package conf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/internal/flight"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Host is a host that authenticates with DH-HMAC-CHAP (NVMe in-band authentication): its
// secret and, for bidirectional authentication, the controller's secret it may ask the
// target to prove. A host listed here must authenticate to every subsystem it connects
// to; a subsystem with AuthRequired admits no other host.
type Host struct {
	// NQN is the host's NQN (its /etc/nvme/hostnqn). Required, unique.
	NQN string `yaml:"nqn"`
	// DHCHAPSecret is the host's secret: the "DHHC-1:<hh>:<base64>:" text nvme
	// gen-dhchap-key prints, or "file:<path>" naming a file that holds it (relative to
	// the configuration file's directory; readable and writable by the target's user
	// only). Required.
	DHCHAPSecret string `yaml:"dhchap_secret"`
	// DHCHAPCtrlSecret is the controller's secret (same forms): with it the host may
	// authenticate the target too (nvme connect --dhchap-ctrl-secret). Optional.
	DHCHAPCtrlSecret string `yaml:"dhchap_ctrl_secret"`
	// DHCHAPHashes are the hash functions the target accepts from this host, in order of
	// preference: sha256, sha384, sha512. Default sha512, sha384, sha256.
	DHCHAPHashes []string `yaml:"dhchap_hashes"`
	// DHCHAPDHGroups are the Diffie-Hellman groups accepted, in order of preference: null
	// (no DH exchange), ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192. Default
	// ffdhe2048 … ffdhe8192, then null.
	DHCHAPDHGroups []string `yaml:"dhchap_dhgroups"`
}

// SecretFilePrefix marks a secret kept in a file: "file:/etc/gonvmf/host1.key".
const SecretFilePrefix = "file:"

var hostKeys = []string{"nqn", "dhchap_secret", "dhchap_ctrl_secret", "dhchap_hashes", "dhchap_dhgroups"}

// Hash function and DH group names, as the Linux target's configfs spells them (without
// its "hmac()" wrapper, which is accepted too).
var (
	hashNames = map[string]nvmeproto.AuthHashID{
		"sha256": nvmeproto.AuthHashSHA256, "sha384": nvmeproto.AuthHashSHA384, "sha512": nvmeproto.AuthHashSHA512,
	}
	dhGroupNames = map[string]nvmeproto.AuthDHGroupID{
		"null": nvmeproto.AuthDHGroupNull, "ffdhe2048": nvmeproto.AuthDHGroupFFDHE2048, "ffdhe3072": nvmeproto.AuthDHGroupFFDHE3072,
		"ffdhe4096": nvmeproto.AuthDHGroupFFDHE4096, "ffdhe6144": nvmeproto.AuthDHGroupFFDHE6144, "ffdhe8192": nvmeproto.AuthDHGroupFFDHE8192,
	}
)

func hashName(s string) string { return strings.TrimSuffix(strings.TrimPrefix(s, "hmac("), ")") }

// HostByNQN returns the host entry with that NQN, or nil.
func (c *Config) HostByNQN(nqn string) *Host {
	for i := range c.Hosts {
		if c.Hosts[i].NQN == nqn {
			return &c.Hosts[i]
		}
	}
	return nil
}

// Hashes returns the host's accepted hash functions, in order of preference (names
// validated by Resolve).
func (h *Host) Hashes() []nvmeproto.AuthHashID {
	if len(h.DHCHAPHashes) == 0 {
		return slices.Clone(dhchap.DefaultHashes)
	}
	var out []nvmeproto.AuthHashID
	for _, n := range h.DHCHAPHashes {
		if id, ok := hashNames[hashName(n)]; ok {
			out = append(out, id)
		}
	}
	return out
}

// DHGroups returns the host's accepted DH groups, in order of preference.
func (h *Host) DHGroups() []nvmeproto.AuthDHGroupID {
	if len(h.DHCHAPDHGroups) == 0 {
		return slices.Clone(dhchap.DefaultDHGroups)
	}
	var out []nvmeproto.AuthDHGroupID
	for _, n := range h.DHCHAPDHGroups {
		if id, ok := dhGroupNames[n]; ok {
			out = append(out, id)
		}
	}
	return out
}

// RedactSecret describes a dhchap_secret or dhchap_ctrl_secret value without revealing
// the key, for listings and logs: a "file:" secret is its path (which holds the key, and
// is not one), an inline one its DHHC-1 prefix, transformation hash and key length
// ("DHHC-1:01:<32-byte key>:"), "" stays "".
func RedactSecret(v string) string {
	switch {
	case v == "":
		return ""
	case strings.HasPrefix(v, SecretFilePrefix):
		return v
	}
	s, err := dhchap.ParseSecret(v)
	if err != nil {
		return "<invalid secret>"
	}
	return s.String()
}

// SameAs reports whether h and o describe the host alike: the same NQN and secrets (as
// written: a file: secret is the same while it names the same file), and the same hash
// functions and DH groups in the same order once defaults and spellings ("hmac(sha256)")
// are resolved.
func (h *Host) SameAs(o *Host) bool {
	return h.NQN == o.NQN && h.DHCHAPSecret == o.DHCHAPSecret && h.DHCHAPCtrlSecret == o.DHCHAPCtrlSecret &&
		slices.Equal(h.Hashes(), o.Hashes()) && slices.Equal(h.DHGroups(), o.DHGroups())
}

// Keys reads the host's secrets (from their files for "file:" secrets, so a rewritten
// file takes effect the next time Keys is called) and returns what the target needs to
// authenticate the host. The error names the field and never quotes a secret.
func (h *Host) Keys() (*dhchap.HostKeys, error) { return h.KeysWith(LoadSecret) }

// KeysWith is Keys with load reading each secret (a dhchap_secret or dhchap_ctrl_secret
// value) in place of LoadSecret: the target bounds the time a "file:" secret's read may
// take.
func (h *Host) KeysWith(load func(value string) (*dhchap.Secret, error)) (*dhchap.HostKeys, error) {
	k := &dhchap.HostKeys{Hashes: h.Hashes(), DHGroups: h.DHGroups()}
	var err error
	if k.Host, err = load(h.DHCHAPSecret); err != nil {
		return nil, fmt.Errorf("host %s: dhchap_secret: %w", h.NQN, err)
	}
	if h.DHCHAPCtrlSecret != "" {
		if k.Ctrl, err = load(h.DHCHAPCtrlSecret); err != nil {
			return nil, fmt.Errorf("host %s: dhchap_ctrl_secret: %w", h.NQN, err)
		}
	}
	return k, nil
}

// LoadSecret parses an inline secret or reads and parses a "file:" one (checking the
// file's ownership and mode first); the error of a "file:" secret names the file and
// says how to fix it ("<what is wrong>; <fix>", as a FieldError prints). A "file:"
// secret's read may block as long as its filesystem does.
func LoadSecret(v string) (*dhchap.Secret, error) {
	path, isFile := strings.CutPrefix(v, SecretFilePrefix)
	if !isFile {
		return dhchap.ParseSecret(v)
	}
	s, fix, err := readSecretFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w; %s", err, fix)
	}
	return s, nil
}

// readSecretFile checks the secret file path (secretFileProblem), reads it and parses
// the secret; on failure it returns what is wrong and how to fix it. An error of the
// stat or the read wraps the os error (a missing file's is fs.ErrNotExist).
func readSecretFile(path string) (s *dhchap.Secret, fix string, err error) {
	if fix, err := secretFileProblem(path); err != nil {
		return nil, fix, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Sprintf("check that the target's user can read %s (chmod 600 %s) and that its file system answers", path, path),
			fmt.Errorf("cannot read the secret file: %w", err)
	}
	defer clear(data) // the secret's text; the Secret keeps its own copy of the key
	if s, err = dhchap.ParseSecretBytes(data); err != nil {
		return nil, "put the DHHC-1:... text nvme gen-dhchap-key prints in the file, whole", fmt.Errorf("%s: %w", path, err)
	}
	return s, "", nil
}

// secretFileProblem checks that path is a regular file owned by this process's user
// and closed to everyone else; it returns how to fix what is wrong and what is wrong (a
// stat error wraps the os error), or "" and nil.
func secretFileProblem(path string) (fix string, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("create it with the key nvme gen-dhchap-key prints, readable only by the target's user (chmod 600 %s)", path),
			fmt.Errorf("cannot read the secret file: %w", err)
	case err != nil:
		return fmt.Sprintf("check that the target's user can reach %s (the x permission of each directory above it) and that the file system holding it answers", path),
			fmt.Errorf("cannot read the secret file: %w", err)
	case !fi.Mode().IsRegular():
		return "name a file that holds the secret", fmt.Errorf("%s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Sprintf("chmod 600 %s: a secret must be readable by the target's user only", path),
			fmt.Errorf("%s is open to other users (mode %#o)", path, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Sprintf("chown %d %s: the secret file must belong to the target's user", os.Geteuid(), path),
			fmt.Errorf("%s belongs to uid %d, the target runs as uid %d", path, st.Uid, os.Geteuid())
	}
	return "", nil
}

// --- decoding ---

func (d *decoder) host(n *yaml.Node, path string, h *Host) {
	d.mapping(n, path, hostKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "nqn":
			d.str(v, p, &h.NQN)
		case "dhchap_secret":
			d.str(v, p, &h.DHCHAPSecret)
		case "dhchap_ctrl_secret":
			d.str(v, p, &h.DHCHAPCtrlSecret)
		case "dhchap_hashes":
			d.sequence(v, p, func(n *yaml.Node, p string) {
				var s string
				d.str(n, p, &s)
				h.DHCHAPHashes = append(h.DHCHAPHashes, s)
			})
		case "dhchap_dhgroups":
			d.sequence(v, p, func(n *yaml.Node, p string) {
				var s string
				d.str(n, p, &s)
				h.DHCHAPDHGroups = append(h.DHCHAPDHGroups, s)
			})
		}
	})
}

// --- validation ---

// hosts validates the hosts section (static checks: no file is read).
func (v *validator) hosts() {
	seen := map[string]string{}
	for i := range v.c.Hosts {
		h := &v.c.Hosts[i]
		p := fmt.Sprintf("hosts[%d]", i)
		switch {
		case h.NQN == "":
			if !v.skip(p + ".nqn") {
				v.fail(p+".nqn", "", "missing", "give the host's NQN (its /etc/nvme/hostnqn)")
			}
		case h.NQN == DiscoveryNQN:
			v.fail(p+".nqn", h.NQN, "the discovery NQN names a subsystem, not a host", "use the host's own NQN (its /etc/nvme/hostnqn)")
		default:
			// As under subsystems[].hosts: what no host can send is an error, what the
			// Linux host sends but the NQN form does not allow (blktests' host names) a
			// warning, so that every host a subsystem may list can also authenticate.
			if prob := nqnUnusable(h.NQN); prob != "" {
				v.fail(p+".nqn", h.NQN, fmt.Sprintf("%q is not a valid host NQN: %s", h.NQN, prob),
					"use the host's NQN as in its /etc/nvme/hostnqn, e.g. nqn.2014-08.org.nvmexpress:uuid:<uuid>")
				break
			}
			if prob := nqnProblem(h.NQN); prob != "" {
				v.warn(p+".nqn", h.NQN, fmt.Sprintf("%q is not in the NVMe NQN form (%s): the Linux host accepts it, but it is not portable", h.NQN, prob),
					"check it is the host's NQN as in its /etc/nvme/hostnqn (usually nqn.2014-08.org.nvmexpress:uuid:<uuid>)")
			}
			if msg, fix := hostNQNCaseWarning(h.NQN); msg != "" {
				v.warn(p+".nqn", h.NQN, msg, fix)
			}
			if prev, dup := seen[h.NQN]; dup {
				v.fail(p+".nqn", h.NQN, fmt.Sprintf("host %s is already described by %s", h.NQN, v.where(prev)), "describe each host once")
			} else {
				seen[h.NQN] = p
			}
		}
		if h.DHCHAPSecret == "" {
			if !v.skip(p + ".dhchap_secret") {
				v.fail(p+".dhchap_secret", "", "missing: a host listed under hosts authenticates with a DH-HMAC-CHAP secret",
					"set dhchap_secret to the output of 'nvme gen-dhchap-key --nqn <host NQN>', or file:<path> of a file holding it")
			}
		} else {
			v.secret(p+".dhchap_secret", &h.DHCHAPSecret)
		}
		if h.DHCHAPCtrlSecret != "" {
			v.secret(p+".dhchap_ctrl_secret", &h.DHCHAPCtrlSecret)
		}
		names := map[string]bool{}
		for j, n := range h.DHCHAPHashes {
			hp := fmt.Sprintf("%s.dhchap_hashes[%d]", p, j)
			if _, ok := hashNames[hashName(n)]; !ok {
				v.fail(hp, n, fmt.Sprintf("%q is not a DH-HMAC-CHAP hash function", n), "use sha256, sha384 or sha512")
			} else if names[hashName(n)] {
				v.fail(hp, n, fmt.Sprintf("%s is listed twice", n), "remove the repeated entry")
			}
			names[hashName(n)] = true
		}
		if len(h.DHCHAPHashes) == 0 && v.explicit(p+".dhchap_hashes") {
			v.fail(p+".dhchap_hashes", "", "empty: no hash function is accepted", "list at least one of sha256, sha384, sha512, or remove dhchap_hashes for all three")
		}
		for j, n := range h.DHCHAPDHGroups {
			gp := fmt.Sprintf("%s.dhchap_dhgroups[%d]", p, j)
			if _, ok := dhGroupNames[n]; !ok {
				v.fail(gp, n, fmt.Sprintf("%q is not a DH-HMAC-CHAP DH group", n), "use null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144 or ffdhe8192")
			} else if names["dh:"+n] {
				v.fail(gp, n, fmt.Sprintf("%s is listed twice", n), "remove the repeated entry")
			}
			names["dh:"+n] = true
		}
		if len(h.DHCHAPDHGroups) == 0 && v.explicit(p+".dhchap_dhgroups") {
			v.fail(p+".dhchap_dhgroups", "", "empty: no DH group is accepted", "list at least one group, or remove dhchap_dhgroups for all of them")
		}
		h.canonicalize()
	}
}

// canonicalize spells the host's hash functions and DH groups out as String prints them:
// defaults filled in, "hmac(sha256)" written sha256. Names that did not validate are kept
// as written, so that the error quotes them.
func (h *Host) canonicalize() {
	hs, gs := h.Hashes(), h.DHGroups()
	if len(hs) == len(h.DHCHAPHashes) || len(h.DHCHAPHashes) == 0 {
		h.DHCHAPHashes = h.DHCHAPHashes[:0]
		for _, x := range hs {
			h.DHCHAPHashes = append(h.DHCHAPHashes, x.String())
		}
	}
	if len(gs) == len(h.DHCHAPDHGroups) || len(h.DHCHAPDHGroups) == 0 {
		h.DHCHAPDHGroups = h.DHCHAPDHGroups[:0]
		for _, x := range gs {
			h.DHCHAPDHGroups = append(h.DHCHAPDHGroups, x.String())
		}
	}
}

// secret checks an inline secret, or makes a "file:" path absolute (relative to the
// configuration file's directory). Error messages never quote a secret.
func (v *validator) secret(p string, s *string) {
	if path, ok := strings.CutPrefix(*s, SecretFilePrefix); ok {
		if path == "" {
			v.fail(p, *s, "file: names no file", "write file:<path of the file holding the secret>")
			return
		}
		*s = SecretFilePrefix + v.rel(path)
		return
	}
	if _, err := dhchap.ParseSecret(*s); err != nil {
		v.fail(p, "", strings.TrimPrefix(err.Error(), "dhchap: "),
			"give the DHHC-1:... text nvme gen-dhchap-key prints, whole, or file:<path> of a file holding it")
	}
}

// subsystemAuth checks a subsystem's auth_required against the hosts that may connect.
func (v *validator) subsystemAuth(s *Subsystem, p string) {
	if !s.AuthRequired {
		return
	}
	if s.AllowAnyHost {
		if len(v.c.Hosts) == 0 {
			v.fail(p+".auth_required", "true", "authentication is required and no host has a secret, so no host can connect",
				"describe the hosts and their dhchap_secret under the top-level hosts:, or remove auth_required")
		}
		return
	}
	for j, h := range s.Hosts {
		if v.c.HostByNQN(h) == nil {
			v.fail(fmt.Sprintf("%s.hosts[%d]", p, j), h, fmt.Sprintf("host %s may connect, but authentication is required and it has no secret", h),
				"add it with its dhchap_secret under the top-level hosts:, or remove auth_required")
		}
	}
}

// --- system checks ---

// checkSecretFile checks the file of a "file:" secret: it must exist, belong to this
// user, be closed to others and hold a valid secret. It returns what is wrong and how to
// fix it, or "" and "". Its stat and read block as long as the file system does (tests
// replace it).
var checkSecretFile = func(path string) (msg, fix string) {
	if _, fix, err := readSecretFile(path); err != nil {
		return err.Error(), fix
	}
	return "", ""
}

// startSecretCheck starts checking the secret file path on a goroutine of its own, or
// joins the check of path in flight (fsChecks): a file whose stat or read never returns
// (a hung mount) holds one goroutine, and the thread blocked in it, however many times
// the configuration is checked meanwhile (each SIGHUP of gonvmf serve). A check that
// ends is forgotten: the next one reads the file again.
func startSecretCheck(path string) *flight.Call[fsResult] {
	return startSecretFileCheck(path, "", "", "").call
}

// startSecretFileCheck starts the check of the secret file path (checkSecretFile), which
// field holds (as "file:" and path) for host.
func startSecretFileCheck(path, field, host, val string) *pendingCheck {
	check := checkSecretFile
	pc := startCheck(fsCheck{key: "secret\x00" + path, run: func() (r fsResult) {
		if msg, fix := check(path); msg != "" {
			r.fail("", SecretFilePrefix+path, msg, fix)
		}
		return r
	}}, field, field, val, fmt.Sprintf("host %s: the secret file %s", host, path))
	pc.fix = "check the file system that holds it (a hung NFS mount?), or keep the secret in a file on a local file system, and check again"
	return pc
}

// pendingSecrets are the "file:" secrets' checks CheckSystem started
// (startSecretChecks), and the check of the configuration file's mode when it holds a
// secret inline.
type pendingSecrets struct {
	files  []*pendingCheck
	inline string        // the first field holding a secret inline ("": none)
	mode   *pendingCheck // the configuration file's stat, when inline is set
}

// startSecretChecks starts checking every "file:" secret's file (startSecretCheck), and,
// when the configuration holds a secret inline, the mode of the configuration file.
func (v *validator) startSecretChecks() pendingSecrets {
	var s pendingSecrets
	for i := range v.c.Hosts {
		h := &v.c.Hosts[i]
		for _, f := range []struct {
			name string
			val  string
		}{{"dhchap_secret", h.DHCHAPSecret}, {"dhchap_ctrl_secret", h.DHCHAPCtrlSecret}} {
			p := fmt.Sprintf("hosts[%d].%s", i, f.name)
			path, isFile := strings.CutPrefix(f.val, SecretFilePrefix)
			if !isFile {
				if f.val != "" && s.inline == "" {
					s.inline = p
				}
				continue
			}
			s.files = append(s.files, startSecretFileCheck(path, p, h.NQN, f.val))
		}
	}
	if s.inline != "" && v.c.File != "" {
		s.mode = startCheck(modeCheck(v.c.File), s.inline, s.inline, "", "the configuration file "+v.c.File)
	}
	return s
}

// modeCheck stats path, for its mode.
func modeCheck(path string) fsCheck {
	return fsCheck{key: "mode\x00" + path, run: func() (r fsResult) {
		r.fi, _ = os.Stat(path)
		return r
	}}
}

// finishSecretChecks waits for s within w: a secret file that has not answered by then
// (a hung mount) fails the check, naming the field, the host and the file, rather than
// holding CheckSystem (gonvmf check, serve's start and reload) for ever. A configuration
// file that holds inline secrets and is readable by others gets a warning, as does one
// whose stat did not answer.
func (v *validator) finishSecretChecks(s pendingSecrets, w *checkWait) {
	for _, pc := range s.files {
		v.finish(pc, w)
	}
	if s.mode == nil {
		return
	}
	if !w.wait(s.mode.call.Done()) {
		v.warn(s.inline, "", fmt.Sprintf("the configuration holds a secret inline, and the stat of %s, to see whether it is open to other users, did not answer within %v", v.c.File, w.d),
			"check the mount that holds it (a hung NFS or FUSE mount?), then run gonvmf check again")
		return
	}
	if r, _ := s.mode.call.Result(); r.fi != nil && r.fi.Mode().Perm()&0o077 != 0 {
		v.warn(s.inline, "", fmt.Sprintf("the configuration holds a secret inline and %s is open to other users (mode %#o)", v.c.File, r.fi.Mode().Perm()),
			fmt.Sprintf("chmod 600 %s, or keep the secret in a file of its own (file:<path>)", v.c.File))
	}
}
