package conf

import (
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// Size is a number of bytes.
//
// In YAML a size is a plain integer (4096) or a number with a unit, the way go-humanize
// writes them: binary units KiB, MiB, GiB, TiB, PiB, EiB (powers of 1024; also written
// Ki, Mi, ...) or decimal units kB, MB, GB, TB, PB, EB (powers of 1000); B means bytes. Units
// are case-insensitive and may follow a space; a fraction is allowed when the result is a
// whole number of bytes ("1.5GiB"). The single letters K, M, G, T, P and E are rejected:
// humanize reads them as powers of 1000 while fio, qemu and LVM read them as powers of 1024,
// so "10G" means different sizes to different readers of the same file.
type Size uint64

// Binary size units.
const (
	KiB Size = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
	PiB
	EiB
)

var sizeUnits = map[string]uint64{
	"": 1, "b": 1,
	"kib": 1 << 10, "ki": 1 << 10,
	"mib": 1 << 20, "mi": 1 << 20,
	"gib": 1 << 30, "gi": 1 << 30,
	"tib": 1 << 40, "ti": 1 << 40,
	"pib": 1 << 50, "pi": 1 << 50,
	"eib": 1 << 60, "ei": 1 << 60,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15, "eb": 1e18,
}

const sizeSyntaxHint = "write a whole number of bytes with a unit, e.g. 4096, 512MiB, 10GiB (×1024) or 10GB (×1000)"

// ParseSize parses a size written as described for Size.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q does not start with a number", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		switch unit {
		case "k", "m", "g", "t", "p", "e":
			u := strings.ToUpper(unit)
			return 0, fmt.Errorf("size %q has the ambiguous unit %q; write %siB for powers of 1024 or %sB for powers of 1000", s, u, u, u)
		}
		return 0, fmt.Errorf("size %q has an unknown unit %q; use B, KiB, MiB, GiB, TiB (×1024) or kB, MB, GB, TB (×1000)", s, strings.TrimSpace(t[i:]))
	}
	if !strings.Contains(num, ".") {
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		hi, lo := bits.Mul64(v, mult)
		if hi != 0 {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return Size(lo), nil
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("size %q has a malformed number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetUint64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	if !r.Num().IsUint64() {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(r.Num().Uint64()), nil
}

// String writes s exactly, in the largest binary unit that divides it ("10GiB", "8KiB"),
// or as a plain number of bytes; ParseSize reads it back unchanged.
func (s Size) String() string {
	units := []struct {
		n    Size
		name string
	}{{EiB, "EiB"}, {PiB, "PiB"}, {TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}}
	for _, u := range units {
		if s != 0 && s%u.n == 0 {
			return strconv.FormatUint(uint64(s/u.n), 10) + u.name
		}
	}
	return strconv.FormatUint(uint64(s), 10)
}

// Human returns s rounded for people, as go-humanize's IBytes writes it ("9.8 GiB").
func (s Size) Human() string { return humanize.IBytes(uint64(s)) }
