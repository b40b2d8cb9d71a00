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
