package nvmeproto

import (
	"encoding/binary"
	"fmt"
	"math/big"
)

// le is the byte order of every NVMe structure.
var le = binary.LittleEndian

// bits32 returns width bits of v starting at bit shift.
func bits32(v uint32, shift, width uint) uint32 { return v >> shift & (1<<width - 1) }

// setBits32 returns v with width bits at shift replaced by x (x is truncated to width bits).
func setBits32(v uint32, shift, width uint, x uint32) uint32 {
	m := uint32(1<<width-1) << shift
	return v&^m | x<<shift&m
}

func bits64(v uint64, shift, width uint) uint64 { return v >> shift & (1<<width - 1) }

func setBits64(v uint64, shift, width uint, x uint64) uint64 {
	m := uint64(1<<width-1) << shift
	return v&^m | x<<shift&m
}

func setBit32(v uint32, bit uint, on bool) uint32 {
	if on {
		return v | 1<<bit
	}
	return v &^ (1 << bit)
}

func setBit64(v uint64, bit uint, on bool) uint64 {
	if on {
		return v | 1<<bit
	}
	return v &^ (1 << bit)
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// putASCII writes s into b as an Identify-style ASCII string: left justified and padded
// with spaces, truncated to len(b). Bytes outside printable ASCII are written as '?'.
func putASCII(b []byte, s string) {
	n := copy(b, s)
	for i := 0; i < n; i++ {
		if b[i] < 0x20 || b[i] > 0x7E {
			b[i] = '?'
		}
	}
	for i := n; i < len(b); i++ {
		b[i] = ' '
	}
}

// getASCII decodes a space (or NUL) padded ASCII field, dropping the padding. A field cut
// short by a NUL ends at the NUL.
func getASCII(b []byte) string {
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	n := len(b)
	for n > 0 && b[n-1] == ' ' {
		n--
	}
	return string(b[:n])
}

// putNQN writes s into b NUL terminated and NUL padded. s is truncated to len(b)-1 bytes so
// that a terminator always remains.
func putNQN(b []byte, s string) {
	n := copy(b[:len(b)-1], s)
	clear(b[n:])
}

// getNQN decodes a NUL terminated string field. ok is false when the field holds no NUL.
func getNQN(b []byte) (s string, ok bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), true
		}
	}
	return string(b), false
}

// Uint128 is an unsigned 128-bit little-endian counter, as used by the SMART / Health log
// and the capacity fields of Identify.
type Uint128 struct {
	Lo, Hi uint64
}

// U128 returns v as a Uint128.
func U128(v uint64) Uint128 { return Uint128{Lo: v} }

// Add returns u+v, wrapping at 2^128.
func (u Uint128) Add(v Uint128) Uint128 {
	lo := u.Lo + v.Lo
	hi := u.Hi + v.Hi
	if lo < u.Lo {
		hi++
	}
	return Uint128{Lo: lo, Hi: hi}
}

// Add64 returns u+v, wrapping at 2^128.
func (u Uint128) Add64(v uint64) Uint128 { return u.Add(Uint128{Lo: v}) }

// IsZero reports whether u is 0.
func (u Uint128) IsZero() bool { return u.Lo == 0 && u.Hi == 0 }

// Big returns u as a big.Int.
func (u Uint128) Big() *big.Int {
	b := new(big.Int).SetUint64(u.Hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(u.Lo))
}

// String returns u in decimal.
func (u Uint128) String() string {
	if u.Hi == 0 {
		return fmt.Sprint(u.Lo)
	}
	return u.Big().String()
}

func getU128(b []byte) Uint128 { return Uint128{Lo: le.Uint64(b), Hi: le.Uint64(b[8:])} }

func putU128(b []byte, u Uint128) {
	le.PutUint64(b, u.Lo)
	le.PutUint64(b[8:], u.Hi)
}

// FieldError reports a field of a structure received from the network whose value cannot
// be decoded (for example an NQN without a terminating NUL). Offset is the byte offset of
// the field inside the structure: a target answering Connect uses it as the IPO of a
// Connect Invalid Parameters completion.
type FieldError struct {
	Struct string // e.g. "Connect data"
	Field  string // e.g. "SUBNQN"
	Offset int    // byte offset of the field in the structure
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("nvmeproto: %s field %s at byte %d: %s", e.Struct, e.Field, e.Offset, e.Reason)
}

func short(what string, need int, b []byte) error {
	if len(b) < need {
		return &ErrShort{What: what, Need: need, Got: len(b)}
	}
	return nil
}
