package nvmeproto

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// put writes v little-endian at b[off:] using size bytes (1, 2, 3, 4 or 8).
func put(b []byte, off, size int, v uint64) {
	for i := 0; i < size; i++ {
		b[off+i] = byte(v >> (8 * i))
	}
}

// get reads a size-byte little-endian value at b[off:].
func get(b []byte, off, size int) uint64 {
	var v uint64
	for i := 0; i < size; i++ {
		v |= uint64(b[off+i]) << (8 * i)
	}
	return v
}

// sqe returns a 64-byte SQE with the given fields set and the Command decoded from it.
func sqe(t *testing.T, fill func(b []byte)) ([]byte, *Command) {
	t.Helper()
	b := make([]byte, SQESize)
	fill(b)
	var c Command
	if err := c.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	return b, &c
}

// marshalSQE encodes c.
func marshalSQE(c *Command) []byte {
	b := make([]byte, SQESize)
	c.Marshal(b)
	return b
}

// offsetCheck is one golden check: the field at Off (Size bytes) must hold Want in the
// encoding, and Got is what the decoder produced from an encoding holding Want there.
type offsetCheck struct {
	name string // "<field>@<offset>"
	got  uint64
	want uint64
}

func runChecks(t *testing.T, checks []offsetCheck) {
	t.Helper()
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if ck.got != ck.want {
				t.Errorf("got %#x, want %#x", ck.got, ck.want)
			}
		})
	}
}

// wantBytes fails unless b[off:off+len(want)] equals want.
func wantBytes(t *testing.T, name string, b []byte, off int, want []byte) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		if got := b[off : off+len(want)]; !bytes.Equal(got, want) {
			t.Errorf("bytes %d..%d = %q, want %q", off, off+len(want)-1, got, want)
		}
	})
}

// wantLE fails unless the little-endian value of size bytes at off equals want.
func wantLE(t *testing.T, name string, b []byte, off, size int, want uint64) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		if got := get(b, off, size); got != want {
			t.Errorf("bytes %d..%d = %#x, want %#x", off, off+size-1, got, want)
		}
	})
}

var _ = binary.LittleEndian

// fieldCase pins one integer field of a fixed-size structure T at a byte offset, in both
// directions: encoding a T with only that field set must put the value at off, and
// decoding bytes holding the value at off must give the field that value.
type fieldCase[T any] struct {
	name string // "<field>@<offset>"
	off  int
	size int // bytes: 1, 2, 3, 4, 8
	get  func(*T) uint64
	set  func(*T, uint64)
}

// pattern returns a value of size bytes with every byte distinct and non-zero.
func pattern(size int) uint64 {
	var v uint64
	for i := 0; i < size; i++ {
		v |= uint64(0x11*(i+1)&0xFF|0x01) << (8 * i)
	}
	return v
}

func runFieldCases[T any](t *testing.T, total int, marshal func(*T, []byte), unmarshal func(*T, []byte) error, cases []fieldCase[T]) {
	t.Helper()
	var zero T
	base := bytes.Repeat([]byte{0xA5}, total) // encoders overwrite every byte: a reused buffer keeps none of its old ones
	marshal(&zero, base)                      // what an all-zero T encodes to (space padded strings etc.)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := pattern(c.size)
			var x T
			c.set(&x, v)
			b := bytes.Repeat([]byte{0x5A}, total)
			marshal(&x, b)
			if got := get(b, c.off, c.size); got != v {
				t.Errorf("encode: bytes %d..%d = %#x, want %#x", c.off, c.off+c.size-1, got, v)
			}
			for i := range b {
				if (i < c.off || i >= c.off+c.size) && b[i] != base[i] {
					t.Errorf("encode: byte %d = %#x, want %#x (only the field was set)", i, b[i], base[i])
					break
				}
			}
			clear(b)
			put(b, c.off, c.size, v)
			var y T
			if err := unmarshal(&y, b); err != nil {
				t.Fatal(err)
			}
			if got := c.get(&y); got != v {
				t.Errorf("decode: field = %#x, want %#x", got, v)
			}
		})
	}
}
