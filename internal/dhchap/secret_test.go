package dhchap

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"log/slog"
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

const (
	key32   = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	key48   = key32 + "202122232425262728292a2b2c2d2e2f"
	key64   = key48 + "303132333435363738393a3b3c3d3e3f"
	testNQN = "nqn.2014-08.org.nvmexpress:uuid:12345678-1234-1234-1234-123456789abc"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Known answers from an independent implementation: nvme-cli 2.3 / libnvme 1.3 (OpenSSL),
// `nvme gen-dhchap-key --secret=<key> --hmac=<hh> --key-length=<n> [--nqn=<nqn>]`. With
// hh 0 it prints the key in the DHHC-1 form; with hh 1..3 it prints the key *transformed*
// for the NQN (libnvme's nvme_gen_dhchap_key), which pins Transform.
var nvmeCLIKeys = []struct {
	key, nqn string
	hh       nvmeproto.AuthHashID
	printed  string
}{
	{key32, "", 0, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"},
	{key48, "", 0, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:"},
	{key64, "", 0, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P4zODhA=:"},
	{key32, testNQN, 1, "DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7/:"},
	{key48, testNQN, 2, "DHHC-1:02:NwqxfxwFQhRNg8ncQQ2645ht3wneCjXuJaX/V9tLWt9AIcSRpk+h6mkYWKny/dFsqsGKHw==:"},
	{key64, testNQN, 3, "DHHC-1:03:c3lgfzD5HZ29Xmro92EZHhfluxQql5/Of33XBh4g+Lmks3bctimmKuOCJ9F1qhHuppeNOuxDSqRiml6FbHKNXJP4uv0=:"},
	{key32, "nqn.2024-01.io.gonvmf:sub1", 1, "DHHC-1:01:1VoD7TWiqc1GuBvySnzYKyMyr5rHowV+HnmxvFG8dWIORFB8:"},
	{strings.Repeat("ff", 32), "nqn.2024-01.io.gonvmf:host1", 1, "DHHC-1:01:hJCRzypJAKUo0YcBOswd4oe+LP0XEsrA0iikvDocUxd6gkSw:"},
}

func TestSecretKnownAnswers(t *testing.T) {
	for _, c := range nvmeCLIKeys {
		key := unhex(t, c.key)
		s, err := NewSecret(key, c.hh)
		if err != nil {
			t.Fatal(err)
		}
		printed, err := ParseSecret(c.printed)
		if err != nil {
			t.Fatalf("%s: %v", c.printed, err)
		}
		if printed.TransformHash() != c.hh {
			t.Errorf("%s: hash %v", c.printed, printed.TransformHash())
		}
		if c.hh == 0 {
			if !printed.Equal(s) || s.Encode() != c.printed {
				t.Errorf("hh 0, %d-byte key: encodes as %s, want %s", len(key), s.Encode(), c.printed)
			}
			if !bytes.Equal(s.Transform(testNQN), key) {
				t.Error("transformation 00 must return the key")
			}
			continue
		}
		if got := s.Transform(c.nqn); !bytes.Equal(got, printed.key) {
			t.Errorf("Transform(%s, hh %d, %s) = %x, nvme-cli printed %x", c.key[:8], c.hh, c.nqn, got, printed.key)
		}
		// And the transformation is what the spec says: HMAC(H, key, NQN ‖ "NVMe-over-Fabrics").
		var h func() hash.Hash = map[nvmeproto.AuthHashID]func() hash.Hash{1: sha256.New, 2: sha512.New384, 3: sha512.New}[c.hh]
		m := hmac.New(h, key)
		m.Write([]byte(c.nqn + "NVMe-over-Fabrics"))
		if !bytes.Equal(m.Sum(nil), printed.key) {
			t.Errorf("hh %d: spec formula disagrees with nvme-cli", c.hh)
		}
		if round, err := ParseSecret(printed.Encode()); err != nil || !round.Equal(printed) || printed.Encode() != c.printed {
			t.Errorf("re-encoding %s: %s %v", c.printed, printed.Encode(), err)
		}
	}
}

func TestParseSecretErrors(t *testing.T) {
	good := nvmeCLIKeys[3].printed
	flip := []byte(good)
	flip[12] ^= 0x01 // still base64, wrong CRC
	for _, c := range []struct{ in, want string }{
		{"", "starts with"},
		{"DHHC-2:01:" + good[10:], "starts with"},
		{"DHHC-1:1:" + good[10:], "00, 01, 02 or 03"},
		{"DHHC-1:04:" + good[10:], "00, 01, 02 or 03"},
		{"DHHC-1:0x:" + good[10:], "00, 01, 02 or 03"},
		{"DHHC-1:01", "00, 01, 02 or 03"},
		{"DHHC-1:01:not*base64:", "not valid base64"},
		{"DHHC-1:01:AAAA:", "decodes to 3 bytes"},
		{string(flip), "CRC-32 does not match"},
	} {
		_, err := ParseSecret(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.in, err, c.want)
			continue
		}
		// Errors never quote the secret.
		if len(c.in) > 20 && strings.Contains(err.Error(), c.in[10:20]) {
			t.Errorf("%q: error quotes the secret: %v", c.in, err)
		}
	}
	// Leniency: surrounding blanks (a file's newline) and a missing trailing colon.
	for _, in := range []string{good + "\n", " " + good, strings.TrimSuffix(good, ":")} {
		if _, err := ParseSecret(in); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
	// A key whose length differs from its transformation hash's size is a secret (later
	// Linux kernels take them): the transformation keys the HMAC with it whatever its
	// length, and gives the hash's size.
	for _, c := range []struct {
		in   string
		hash nvmeproto.AuthHashID
	}{
		{strings.Replace(nvmeCLIKeys[1].printed, ":00:", ":01:", 1), nvmeproto.AuthHashSHA256}, // 48 bytes
		{strings.Replace(nvmeCLIKeys[0].printed, ":00:", ":03:", 1), nvmeproto.AuthHashSHA512}, // 32 bytes
	} {
		sec, err := ParseSecret(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if k := sec.Transform("nqn.2014-08.org.nvmexpress:uuid:x"); len(k) != c.hash.Size() || sec.Encode() != c.in {
			t.Errorf("%q: transformed to %d bytes (want %d), encoded as %q", c.in, len(k), c.hash.Size(), sec.Encode())
		}
	}
	if _, err := NewSecret(make([]byte, 33), 0); err == nil {
		t.Error("33-byte key accepted")
	}
	if _, err := NewSecret(make([]byte, 32), 4); err == nil {
		t.Error("transformation 04 accepted")
	}
}

// TestParseSecretBytes: the secret parsed from a file's bytes keeps its own key, so the
// caller may clear what it read (conf does) without changing the secret.
func TestParseSecretBytes(t *testing.T) {
	for _, c := range nvmeCLIKeys {
		text := []byte(c.printed + "\n")
		s, err := ParseSecretBytes(text)
		if err != nil {
			t.Fatalf("%q: %v", c.printed, err)
		}
		clear(text)
		if s.Encode() != c.printed {
			t.Errorf("%q: after the text was cleared the secret encodes as %q", c.printed, s.Encode())
		}
	}
	if _, err := ParseSecretBytes([]byte("DHHC-1:01:AAAA:")); err == nil || !strings.Contains(err.Error(), "decodes to 3 bytes") {
		t.Errorf("3-byte key: %v", err)
	}
}

func TestSecretRedacted(t *testing.T) {
	s, err := ParseSecret(nvmeCLIKeys[3].printed)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "secret", s)
	for _, out := range []string{s.String(), fmt.Sprint(s), fmt.Sprintf("%v", s), logged.String()} {
		if strings.Contains(out, nvmeCLIKeys[3].printed[10:30]) || !strings.Contains(out, "<32-byte key>") {
			t.Errorf("secret shown as %q", out)
		}
	}
	g, err := GenerateSecret(bytes.NewReader(bytes.Repeat([]byte{7}, 64)), nvmeproto.AuthHashSHA384, 48)
	if err != nil || g.KeyLen() != 48 || g.TransformHash() != nvmeproto.AuthHashSHA384 {
		t.Fatalf("GenerateSecret: %v", err)
	}
	if _, err := GenerateSecret(bytes.NewReader(nil), 0, 32); err == nil {
		t.Error("GenerateSecret with an empty reader")
	}
}

// TestResponses pins the message each response covers by assembling it byte by byte.
func TestResponses(t *testing.T) {
	const host, sub = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e", "nqn.2024-01.io.gonvmf:sub1"
	for _, h := range []nvmeproto.AuthHashID{1, 2, 3} {
		key := bytes.Repeat([]byte{0x5A}, h.Size())
		c := bytes.Repeat([]byte{0xC1}, h.Size())
		tx := Transaction{Hash: h, TID: 0x1234, HostNQN: host, SubNQN: sub}
		msg := func(role, a, b string) []byte {
			m := append([]byte(nil), c...)
			m = append(m, 0x78, 0x56, 0x34, 0x12) // seq 0x12345678, LE
			m = append(m, 0x34, 0x12)             // T_ID, LE
			m = append(m, 0)                      // SC_C
			m = append(m, role...)
			m = append(m, a...)
			m = append(m, 0)
			return append(m, b...)
		}
		mac := func(m []byte) []byte {
			x := hmac.New(newHash(h), key)
			x.Write(m)
			return x.Sum(nil)
		}
		r1, err := tx.HostResponse(key, c, 0x12345678)
		if err != nil || !Equal(r1, mac(msg("HostHost", host, sub))) {
			t.Errorf("%v host response: %v", h, err)
		}
		r2, err := tx.ControllerResponse(key, c, 0x12345678)
		if err != nil || !Equal(r2, mac(msg("Controller", sub, host))) {
			t.Errorf("%v controller response: %v", h, err)
		}
		if len(r1) != h.Size() || Equal(r1, r2) {
			t.Errorf("%v: responses %x %x", h, r1, r2)
		}
		// Every input matters.
		for name, other := range map[string]Transaction{
			"tid": {Hash: h, TID: 0x1235, HostNQN: host, SubNQN: sub}, "scc": {Hash: h, TID: 0x1234, SCC: 1, HostNQN: host, SubNQN: sub},
			"swapped NQNs": {Hash: h, TID: 0x1234, HostNQN: sub, SubNQN: host},
		} {
			if o, _ := other.HostResponse(key, c, 0x12345678); Equal(o, r1) {
				t.Errorf("%v: %s does not change the host response", h, name)
			}
		}
		if o, _ := tx.HostResponse(key, c, 0x12345679); Equal(o, r1) {
			t.Errorf("%v: seq does not change the response", h)
		}
		// Augmented challenge: HMAC(H, H(session key), C).
		skey := bytes.Repeat([]byte{0x33}, 256)
		hk := newHash(h)()
		hk.Write(skey)
		x := hmac.New(newHash(h), hk.Sum(nil))
		x.Write(c)
		if ca, err := tx.AugmentChallenge(skey, c); err != nil || !Equal(ca, x.Sum(nil)) {
			t.Errorf("%v augmented challenge: %v", h, err)
		}
		if _, err := tx.HostResponse(key, c[:len(c)-1], 1); err == nil {
			t.Errorf("%v: short challenge accepted", h)
		}
	}
	bad := Transaction{Hash: 7}
	if _, err := bad.HostResponse(nil, nil, 0); err == nil {
		t.Error("hash 7 accepted")
	}
	if _, err := bad.AugmentChallenge(nil, nil); err == nil {
		t.Error("hash 7 accepted for the augmented challenge")
	}
}

// TestLinuxControllerResponse is a known answer computed by the Linux 6.12 target (nvmet):
// Linux host → Linux target over rxe in the 6.12 guest, hmac(sha256), NULL DH group,
// bidirectional, with dynamic debug on; the target printed the R2 it sent in Success1
// ("ctrl 1 qid 0 response ...") for the host's C2 and S2 (T_ID 0). Our controller
// response from the same inputs must be the same bytes.
func TestLinuxControllerResponse(t *testing.T) {
	ctrl, err := ParseSecret("DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7/:")
	if err != nil {
		t.Fatal(err)
	}
	tx := Transaction{Hash: nvmeproto.AuthHashSHA256, TID: 0,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:3a6e1f52-9b0c-4d7e-8f21-5c4b3a2d1e0f", SubNQN: "nqn.2024-01.io.gonvmf:kat"}
	c2 := unhex(t, "fde1c2549ab6af985f6661d4bbebf892cfca8e51283452adae4fc9c7fd7935b1")
	got, err := tx.ControllerResponse(ctrl.Transform(tx.SubNQN), c2, 125290870)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "84019769dd8d74f184d0e21b70c4a039773c70ab2eaf545366dccd03fdf19a32"); !bytes.Equal(got, want) {
		t.Fatalf("R2 = %x, the Linux target sent %x", got, want)
	}
}
