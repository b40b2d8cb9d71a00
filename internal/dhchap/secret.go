// Package dhchap owns the cryptography of NVMe in-band authentication, DH-HMAC-CHAP
// (NVMe Base 2.0 §8.13): the DHHC-1 secret representation, the secret transformation, the
// host and controller responses, the augmented challenge, and the RFC 7919 finite field
// Diffie-Hellman groups. It is shared by the target and the initiator and does no I/O.
//
// Wire formats live in nvmeproto; this package only computes. Its contracts:
//
//   - A Secret is a parsed "DHHC-1:<hh>:<base64 key‖CRC-32>:" string. Its String and
//     LogValue never reveal the key; Encode does.
//   - Responses are HMACs with the transaction's hash function, keyed with the transformed
//     secret, over C ‖ SEQNUM (LE32) ‖ T_ID (LE16) ‖ SC_C ‖ "HostHost" ‖ NQNh ‖ 00h ‖ NQNc
//     for the host and C ‖ SEQNUM ‖ T_ID ‖ SC_C ‖ "Controller" ‖ NQNc ‖ 00h ‖ NQNh for the
//     controller, where C is the (augmented) challenge. Compare them with Equal (constant
//     time).
//   - Diffie-Hellman private exponents never go through math/big: g^x and y^x are computed
//     with filippo.io/bigmod (the constant-time modular arithmetic behind crypto/rsa), so
//     their timing depends on the exponent's length only, which is fixed per group. Only
//     public values (the peer's DH value and the group's prime) are checked with math/big.
//   - Key material derived during a transaction — the transformed secret, the hash of the
//     shared secret that keys the augmentation, the augmented challenges, the shared
//     secret and the private exponent — is cleared as soon as it has been used (the
//     shared secret and the exponent when the transaction ends). A Secret's own key lives
//     as long as the Secret; ParseSecretBytes keeps nothing of the text it parses.
package dhchap

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// SecretPrefix starts every secret in the DHHC-1 representation.
const SecretPrefix = "DHHC-1:"

// Secret is a DH-HMAC-CHAP secret: a 32, 48 or 64-byte key and the hash function of its
// transformation (0 for none). It is immutable.
type Secret struct {
	key       []byte
	transform nvmeproto.AuthHashID
}

// NewSecret makes a Secret of key with the given transformation hash (0 for none). The
// key must be 32, 48 or 64 bytes, with any of the hashes: the transformation is an HMAC,
// which takes a key of any length. (nvme gen-dhchap-key makes the two agree, and Linux
// 6.1 requires it; later kernels take them mixed.)
func NewSecret(key []byte, transform nvmeproto.AuthHashID) (*Secret, error) {
	switch len(key) {
	case 32, 48, 64:
	default:
		return nil, fmt.Errorf("dhchap: a secret key is 32, 48 or 64 bytes, not %d", len(key))
	}
	if transform != 0 && transform.Size() == 0 {
		return nil, fmt.Errorf("dhchap: secret transformation hash %02d is not 00 (none), 01 (SHA-256), 02 (SHA-384) or 03 (SHA-512)", uint8(transform))
	}
	return &Secret{key: append([]byte(nil), key...), transform: transform}, nil
}

// GenerateSecret makes a random secret of keyLen bytes (32, 48 or 64) read from r.
func GenerateSecret(r io.Reader, transform nvmeproto.AuthHashID, keyLen int) (*Secret, error) {
	key := make([]byte, keyLen)
	if _, err := io.ReadFull(r, key); err != nil {
		return nil, fmt.Errorf("dhchap: reading %d random bytes: %w", keyLen, err)
	}
	return NewSecret(key, transform)
}

// ParseSecret parses the DHHC-1 representation that nvme gen-dhchap-key prints and the
// Linux host and target take: "DHHC-1:" hh ":" base64(key ‖ CRC-32(key), little-endian)
// ":", where hh is 00 (no transformation), 01 (SHA-256), 02 (SHA-384) or 03 (SHA-512).
// The trailing ":" may be left out. Errors never quote the secret.
func ParseSecret(s string) (*Secret, error) {
	b := []byte(s)
	defer clear(b)
	return ParseSecretBytes(b)
}

// ParseSecretBytes is ParseSecret of the text in b, which it does not keep or copy
// beyond the key the Secret holds: a caller that read b from a file may clear it after.
func ParseSecretBytes(b []byte) (*Secret, error) {
	b = bytes.TrimSpace(b)
	rest, ok := bytes.CutPrefix(b, []byte(SecretPrefix))
	if !ok {
		return nil, fmt.Errorf("dhchap: a secret starts with %q (the form nvme gen-dhchap-key prints: DHHC-1:<hh>:<base64>:)", SecretPrefix)
	}
	hh, b64, ok := bytes.Cut(rest, []byte(":"))
	if !ok || len(hh) != 2 || hh[0] != '0' || hh[1] < '0' || hh[1] > '3' {
		return nil, fmt.Errorf("dhchap: the secret's hash field after %q must be 00, 01, 02 or 03", SecretPrefix)
	}
	b64 = bytes.TrimSuffix(b64, []byte(":"))
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	defer clear(raw) // NewSecret copies the key
	n, err := base64.StdEncoding.Decode(raw, b64)
	if err != nil {
		return nil, fmt.Errorf("dhchap: the secret's key is not valid base64 (%v): copy it again, whole", err)
	}
	if n != 36 && n != 52 && n != 68 {
		return nil, fmt.Errorf("dhchap: the secret's base64 decodes to %d bytes, want 36, 52 or 68 (a 32, 48 or 64-byte key and its CRC-32): copy it again, whole", n)
	}
	key, stored := raw[:n-4], binary.LittleEndian.Uint32(raw[n-4:])
	if sum := crc32.ChecksumIEEE(key); sum != stored {
		return nil, fmt.Errorf("dhchap: the secret's CRC-32 does not match its key (stored %08x, computed %08x): it was mistyped or altered; copy it again", stored, sum)
	}
	return NewSecret(key, nvmeproto.AuthHashID(hh[1]-'0'))
}

// Encode returns s in the DHHC-1 representation (it reveals the key).
func (s *Secret) Encode() string {
	raw := binary.LittleEndian.AppendUint32(append([]byte(nil), s.key...), crc32.ChecksumIEEE(s.key))
	return fmt.Sprintf("%s%02d:%s:", SecretPrefix, uint8(s.transform), base64.StdEncoding.EncodeToString(raw))
}

// String describes s without revealing the key.
func (s *Secret) String() string {
	return fmt.Sprintf("%s%02d:<%d-byte key>:", SecretPrefix, uint8(s.transform), len(s.key))
}

// LogValue keeps the key out of logs.
func (s *Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// KeyLen returns the key's length in bytes.
func (s *Secret) KeyLen() int { return len(s.key) }

// TransformHash returns the hash function of the secret transformation, 0 for none.
func (s *Secret) TransformHash() nvmeproto.AuthHashID { return s.transform }

// Equal reports whether s and o are the same secret, in time independent of the keys.
func (s *Secret) Equal(o *Secret) bool {
	return s.transform == o.transform && hmac.Equal(s.key, o.key)
}

// Transform applies the secret transformation for the entity named nqn (the host NQN for
// a host secret, the subsystem NQN for a controller secret): HMAC(H, key, nqn ‖
// "NVMe-over-Fabrics") with H the secret's transformation hash, or the key itself when it
// has none. The result keys the responses.
func (s *Secret) Transform(nqn string) []byte {
	if s.transform == 0 {
		return append([]byte(nil), s.key...)
	}
	m := hmac.New(newHash(s.transform), s.key)
	m.Write([]byte(nqn))
	m.Write([]byte("NVMe-over-Fabrics"))
	return m.Sum(nil)
}

// newHash returns the constructor of hash function h; callers check h.Size() != 0 first.
func newHash(h nvmeproto.AuthHashID) func() hash.Hash {
	switch h {
	case nvmeproto.AuthHashSHA256:
		return sha256.New
	case nvmeproto.AuthHashSHA384:
		return sha512.New384
	case nvmeproto.AuthHashSHA512:
		return sha512.New
	}
	panic(fmt.Sprintf("dhchap: hash %v has no implementation", h))
}

// Transaction holds what both responses of one authentication transaction cover besides
// the key, challenge and sequence number.
type Transaction struct {
	Hash    nvmeproto.AuthHashID // HASHID of the Challenge
	TID     uint16               // T_ID
	SCC     uint8                // SC_C of the Negotiate (0: no secure channel)
	HostNQN string               // NQNh
	SubNQN  string               // NQNc
}

// checkHash reports whether t.Hash is a defined hash function.
func (t *Transaction) checkHash() error {
	if t.Hash.Size() == 0 {
		return fmt.Errorf("dhchap: %v is not a DH-HMAC-CHAP hash function", t.Hash)
	}
	return nil
}

// HostResponse computes R1 = HMAC(H, key, C1 ‖ S1 ‖ T_ID ‖ SC_C ‖ "HostHost" ‖ NQNh ‖ 00h ‖
// NQNc): key is the host secret transformed with the host NQN, challenge is C1 (already
// augmented when a DH group is in use) and seq is S1.
func (t *Transaction) HostResponse(key, challenge []byte, seq uint32) ([]byte, error) {
	return t.response(key, challenge, seq, "HostHost", t.HostNQN, t.SubNQN)
}

// ControllerResponse computes R2 = HMAC(H, key, C2 ‖ S2 ‖ T_ID ‖ SC_C ‖ "Controller" ‖
// NQNc ‖ 00h ‖ NQNh): key is the controller secret transformed with the subsystem NQN,
// challenge is C2 (augmented when a DH group is in use) and seq is S2.
func (t *Transaction) ControllerResponse(key, challenge []byte, seq uint32) ([]byte, error) {
	return t.response(key, challenge, seq, "Controller", t.SubNQN, t.HostNQN)
}

// respond computes a response (HostResponse or ControllerResponse of a Transaction) with
// s transformed for nqn, and wipes the transformed key after.
func respond(f func(key, challenge []byte, seq uint32) ([]byte, error), s *Secret, nqn string, challenge []byte, seq uint32) ([]byte, error) {
	k := s.Transform(nqn)
	defer clear(k)
	return f(k, challenge, seq)
}

func (t *Transaction) response(key, challenge []byte, seq uint32, role, first, second string) ([]byte, error) {
	if err := t.checkHash(); err != nil {
		return nil, err
	}
	if len(challenge) != t.Hash.Size() {
		return nil, fmt.Errorf("dhchap: a %v challenge is %d bytes, not %d", t.Hash, t.Hash.Size(), len(challenge))
	}
	m := hmac.New(newHash(t.Hash), key)
	var b [7]byte
	binary.LittleEndian.PutUint32(b[0:], seq)
	binary.LittleEndian.PutUint16(b[4:], t.TID)
	b[6] = t.SCC
	m.Write(challenge)
	m.Write(b[:])
	m.Write([]byte(role))
	m.Write([]byte(first))
	m.Write([]byte{0})
	m.Write([]byte(second))
	return m.Sum(nil), nil
}

// AugmentChallenge computes the augmented challenge Ca = HMAC(H, H(sessionKey), c) used in
// place of a challenge when a DH group is in use; sessionKey is the DH shared secret
// g^xy mod p, big-endian and as long as the group's prime.
func (t *Transaction) AugmentChallenge(sessionKey, challenge []byte) ([]byte, error) {
	if err := t.checkHash(); err != nil {
		return nil, err
	}
	h := newHash(t.Hash)()
	h.Write(sessionKey)
	key := h.Sum(nil)
	m := hmac.New(newHash(t.Hash), key) // copies key
	clear(key)
	m.Write(challenge)
	return m.Sum(nil), nil
}

// Equal compares two responses in constant time.
func Equal(a, b []byte) bool { return hmac.Equal(a, b) }
