package conf

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// idNamespace (3738c855-c57f-4ee1-8781-8f9834a1defc) is the UUID namespace of the
// version-5 UUIDs DeriveUUID makes. It was drawn at random once for gonvmf and must never
// change: hosts (multipath, blktests, udev's /dev/disk/by-id links) know namespaces by
// these UUIDs.
var idNamespace = [16]byte{0x37, 0x38, 0xc8, 0x55, 0xc5, 0x7f, 0x4e, 0xe1, 0x87, 0x81, 0x8f, 0x98, 0x34, 0xa1, 0xde, 0xfc}

// idName is what identifiers are derived from: the subsystem NQN, a NUL (which an NQN
// cannot contain) and the NSID in big-endian.
func idName(nqn string, nsid uint32) []byte {
	b := make([]byte, 0, len(nqn)+5)
	b = append(b, nqn...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, nsid)
}

// DeriveUUID is the namespace UUID used when a namespace gives none: the RFC 9562 version-5
// (SHA-1, name-based) UUID of the subsystem NQN, a NUL and the NSID as 4 big-endian bytes,
// in gonvmf's UUID namespace 3738c855-c57f-4ee1-8781-8f9834a1defc. The same NQN and NSID
// give the same UUID on every run and every machine.
func DeriveUUID(nqn string, nsid uint32) [16]byte {
	h := sha1.New()
	h.Write(idNamespace[:])
	h.Write(idName(nqn, nsid))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

func derive(domain, nqn string, nsid uint32) [32]byte {
	return sha256.Sum256(append([]byte("gonvmf "+domain+"\x00"), idName(nqn, nsid)...))
}

// DeriveNGUID is the namespace NGUID used when a namespace gives none: the first 16 bytes
// of a SHA-256 of the NQN and NSID, in a hash domain of its own so that it is unrelated to
// the UUID.
func DeriveNGUID(nqn string, nsid uint32) [16]byte {
	var g [16]byte
	s := derive("nguid", nqn, nsid)
	copy(g[:], s[:])
	return g
}

// DeriveEUI64 is the namespace EUI-64 used when a namespace gives none: 8 bytes of a
// SHA-256 of the NQN and NSID (its own hash domain), marked locally administered and
// unicast in the first byte as IEEE requires of identifiers that carry no assigned OUI.
func DeriveEUI64(nqn string, nsid uint32) [8]byte {
	var e [8]byte
	s := derive("eui64", nqn, nsid)
	copy(e[:], s[:])
	e[0] = e[0]&^0x01 | 0x02
	return e
}

// DeriveSerial is the controller serial number used when a subsystem gives none: 20
// upper-case hex digits of a SHA-256 of the NQN, so every subsystem has its own, stable one.
func DeriveSerial(nqn string) string {
	s := sha256.Sum256([]byte("gonvmf serial\x00" + nqn))
	return strings.ToUpper(hex.EncodeToString(s[:10]))
}

// ParseUUID parses the text form of a UUID: 32 hex digits in groups 8-4-4-4-12.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if len(s) != 36 {
		return u, fmt.Errorf("a UUID is 36 characters (8-4-4-4-12 hex digits), this is %d", len(s))
	}
	for _, i := range []int{8, 13, 18, 23} {
		if s[i] != '-' {
			return u, errors.New("a UUID has dashes after hex digits 8, 12, 16 and 20 (8-4-4-4-12)")
		}
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, errors.New("a UUID holds only hex digits and dashes")
	}
	return u, nil
}

func parseHexID(s string, out []byte, what string, seps string) error {
	h := strings.Map(func(r rune) rune {
		if strings.ContainsRune(seps, r) {
			return -1
		}
		return r
	}, s)
	if len(h) != 2*len(out) {
		return fmt.Errorf("an %s is %d hex digits, this has %d", what, 2*len(out), len(h))
	}
	if _, err := hex.Decode(out, []byte(h)); err != nil {
		return fmt.Errorf("an %s holds only hex digits", what)
	}
	return nil
}

// ParseNGUID parses an NGUID written as 32 hex digits; dashes between them are ignored, so
// the UUID-like form works too.
func ParseNGUID(s string) ([16]byte, error) {
	var g [16]byte
	err := parseHexID(s, g[:], "NGUID", "-")
	return g, err
}

// ParseEUI64 parses an EUI-64 written as 16 hex digits; '-' and ':' separators are ignored.
func ParseEUI64(s string) ([8]byte, error) {
	var e [8]byte
	err := parseHexID(s, e[:], "EUI-64", "-:")
	return e, err
}

// FormatUUID writes a UUID in its 8-4-4-4-12 text form, lower case.
func FormatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// FormatNGUID writes an NGUID as 32 lower-case hex digits, as nvme-cli prints it.
func FormatNGUID(g [16]byte) string { return hex.EncodeToString(g[:]) }

// FormatEUI64 writes an EUI-64 as 16 lower-case hex digits, as nvme-cli prints it.
func FormatEUI64(e [8]byte) string { return hex.EncodeToString(e[:]) }
