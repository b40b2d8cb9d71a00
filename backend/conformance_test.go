package backend

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// kindTraits says what the conformance suite can expect of a backend kind.
type kindTraits struct {
	// persistent: data written is read back (false for null), and survives a reopen
	// (reopen) — false for memory, whose storage lives in the Backend value.
	persistent, reopen bool
}

// opener opens the backend under test; every call with the same test fixture reaches the
// same storage where the kind allows it.
type opener func(t *testing.T, readOnly bool) Backend

// conformanceSize is the namespace size the suite's openers should use.
const conformanceSize = 8 << 20

// runConformance checks the behaviour every Backend shares: geometry, data round trips,
// FUA, range and buffer checks, write zeroes, deallocate, flush and read-only.
func runConformance(t *testing.T, open opener, lba uint32, tr kindTraits) {
	t.Helper()
	openRW := func(t *testing.T) Backend {
		b := open(t, false)
		t.Cleanup(func() { b.Close() })
		return b
	}

	t.Run("geometry", func(t *testing.T) {
		b := openRW(t)
		if b.LBASize() != lba {
			t.Errorf("LBASize = %d, want %d", b.LBASize(), lba)
		}
		if want := uint64(conformanceSize) / uint64(lba); b.NumBlocks() != want {
			t.Errorf("NumBlocks = %d, want %d", b.NumBlocks(), want)
		}
		if b.ReadOnly() {
			t.Error("ReadOnly = true for a read-write open")
		}
		if pbs := Describe(b).PhysicalBlockSize; pbs < lba {
			t.Errorf("PhysicalBlockSize = %d, less than the lba size %d", pbs, lba)
		}
	})

	t.Run("readwrite", func(t *testing.T) {
		b := openRW(t)
		n := b.NumBlocks()
		// Single blocks, runs that cross 64 KiB (memory chunk) boundaries, the last blocks.
		cases := []struct{ slba, nlb uint64 }{
			{0, 1}, {1, 3}, {65536/uint64(lba) - 2, 5}, {200, 300}, {n - 1, 1}, {n - 17, 17},
		}
		for i, c := range cases {
			w := alignedBuf(int(c.nlb) * int(lba))
			fill(w, byte(i+1))
			if err := b.WriteBlocks(w, c.slba, i%2 == 1); err != nil {
				t.Fatalf("WriteBlocks(slba %d, nlb %d): %v", c.slba, c.nlb, err)
			}
			r := alignedBuf(len(w))
			fill(r, 0xEE)
			if err := b.ReadBlocks(r, c.slba); err != nil {
				t.Fatalf("ReadBlocks(slba %d, nlb %d): %v", c.slba, c.nlb, err)
			}
			if tr.persistent && !bytes.Equal(r, w) {
				t.Errorf("slba %d nlb %d: read back differs from what was written", c.slba, c.nlb)
			}
			if !tr.persistent && !isZero(r) {
				t.Errorf("slba %d nlb %d: null backend read non-zero data", c.slba, c.nlb)
			}
		}
		// Blocks never written read as zeroes.
		r := alignedBuf(int(lba) * 8)
		fill(r, 1)
		if err := b.ReadBlocks(r, 1000); err != nil {
			t.Fatal(err)
		}
		if !isZero(r) {
			t.Error("unwritten blocks do not read as zeroes")
		}
	})

	t.Run("range", func(t *testing.T) {
		b := openRW(t)
		n := b.NumBlocks()
		one := alignedBuf(int(lba))
		two := alignedBuf(2 * int(lba))
		bad := []struct {
			name string
			op   Op
			f    func() error
		}{
			{"read at capacity", OpRead, func() error { return b.ReadBlocks(one, n) }},
			{"read across end", OpRead, func() error { return b.ReadBlocks(two, n-1) }},
			{"read slba overflow", OpRead, func() error { return b.ReadBlocks(two, math.MaxUint64) }},
			{"write at capacity", OpWrite, func() error { return b.WriteBlocks(one, n, false) }},
			{"write across end", OpWrite, func() error { return b.WriteBlocks(two, n-1, true) }},
			{"write slba overflow", OpWrite, func() error { return b.WriteBlocks(one, math.MaxUint64, false) }},
			{"deallocate across end", OpDeallocate, func() error { return b.Deallocate(n-1, 2) }},
			{"deallocate nlb overflow", OpDeallocate, func() error { return b.Deallocate(1, math.MaxUint64) }},
			{"write zeroes across end", OpWriteZeroes, func() error { return b.WriteZeroes(n-3, 4) }},
			{"write zeroes slba overflow", OpWriteZeroes, func() error { return b.WriteZeroes(math.MaxUint64-1, 2) }},
		}
		for _, c := range bad {
			err := c.f()
			if !errors.Is(err, ErrLBAOutOfRange) {
				t.Errorf("%s: err = %v, want ErrLBAOutOfRange", c.name, err)
				continue
			}
			if s := Status(c.op, err); s != nvmeproto.StatusLBAOutOfRange.WithDNR() {
				t.Errorf("%s: Status = %v, want LBA Out of Range with DNR", c.name, s)
			}
		}
		// The edges themselves are fine.
		if err := b.ReadBlocks(two, n-2); err != nil {
			t.Errorf("read of the last two blocks: %v", err)
		}
		if err := b.WriteBlocks(one, n-1, false); err != nil {
			t.Errorf("write of the last block: %v", err)
		}
		if err := b.WriteZeroes(0, n); err != nil {
			t.Errorf("write zeroes of the whole namespace: %v", err)
		}
		if err := b.Deallocate(0, n); err != nil {
			t.Errorf("deallocate of the whole namespace: %v", err)
		}
		if err := b.Deallocate(n, 0); err != nil {
			t.Errorf("deallocate of 0 blocks at capacity: %v", err)
		}
	})

	t.Run("unaligned", func(t *testing.T) {
		b := openRW(t)
		big := alignedBuf(4 * Alignment)
		bufs := map[string][]byte{
			"misaligned start": big[512 : 512+int(lba)],
			"partial block":    big[:int(lba)+1],
			"empty":            big[:0],
			"nil":              nil,
		}
		if lba > 512 {
			bufs["half block"] = big[:lba/2]
		}
		for name, buf := range bufs {
			if err := b.ReadBlocks(buf, 0); !errors.Is(err, ErrUnaligned) {
				t.Errorf("read, %s: err = %v, want ErrUnaligned", name, err)
			}
			if err := b.WriteBlocks(buf, 0, false); !errors.Is(err, ErrUnaligned) {
				t.Errorf("write, %s: err = %v, want ErrUnaligned", name, err)
			}
		}
	})

	t.Run("writezeroes", func(t *testing.T) {
		b := openRW(t)
		w := alignedBuf(40 * int(lba))
		fill(w, 9)
		if err := b.WriteBlocks(w, 100, false); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteZeroes(110, 20); err != nil {
			t.Fatalf("WriteZeroes: %v", err)
		}
		if err := b.WriteZeroes(0, 0); err != nil {
			t.Fatalf("WriteZeroes of 0 blocks: %v", err)
		}
		r := alignedBuf(len(w))
		if err := b.ReadBlocks(r, 100); err != nil {
			t.Fatal(err)
		}
		L := int(lba)
		if !isZero(r[10*L : 30*L]) {
			t.Error("zeroed blocks do not read as zeroes")
		}
		if tr.persistent && (!bytes.Equal(r[:10*L], w[:10*L]) || !bytes.Equal(r[30*L:], w[30*L:])) {
			t.Error("write zeroes changed blocks outside its range")
		}
	})

	t.Run("deallocate", func(t *testing.T) {
		b := openRW(t)
		w := alignedBuf(256 * int(lba))
		fill(w, 3)
		if err := b.WriteBlocks(w, 512, false); err != nil {
			t.Fatal(err)
		}
		if err := b.Deallocate(520, 200); err != nil {
			t.Fatalf("Deallocate: %v", err)
		}
		r := alignedBuf(len(w))
		if err := b.ReadBlocks(r, 512); err != nil {
			t.Fatal(err)
		}
		L := int(lba)
		for i := range 256 {
			got, old := r[i*L:(i+1)*L], w[i*L:(i+1)*L]
			inside := i >= 8 && i < 208
			switch {
			case inside && Describe(b).DeallocateReadsZeroes && !isZero(got):
				t.Fatalf("block %d: deallocated, DeallocateReadsZeroes, but reads non-zero", 512+i)
			case inside && tr.persistent && !isZero(got) && !bytes.Equal(got, old):
				t.Fatalf("block %d: deallocated block reads neither zeroes nor its old data", 512+i)
			case !inside && tr.persistent && !bytes.Equal(got, old):
				t.Fatalf("block %d: outside the deallocated range but changed", 512+i)
			}
		}
	})

	t.Run("flush", func(t *testing.T) {
		b := openRW(t)
		w := alignedBuf(int(lba))
		fill(w, 5)
		if err := b.WriteBlocks(w, 7, false); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	})

	t.Run("readonly", func(t *testing.T) {
		rw := open(t, false)
		w := alignedBuf(4 * int(lba))
		fill(w, 77)
		if err := rw.WriteBlocks(w, 33, false); err != nil {
			t.Fatal(err)
		}
		if err := rw.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		b := open(t, true)
		t.Cleanup(func() { b.Close() })
		if !b.ReadOnly() {
			t.Fatal("ReadOnly = false for a read-only open")
		}
		checks := map[Op]error{
			OpWrite:       b.WriteBlocks(w, 33, false),
			OpDeallocate:  b.Deallocate(0, 1),
			OpWriteZeroes: b.WriteZeroes(0, 1),
		}
		for op, err := range checks {
			if !errors.Is(err, ErrReadOnly) {
				t.Errorf("%v: err = %v, want ErrReadOnly", op, err)
			}
			if s := Status(op, err); s != nvmeproto.StatusNSWriteProtected.WithDNR() {
				t.Errorf("%v: Status = %v, want Namespace is Write Protected with DNR", op, s)
			}
		}
		if err := b.WriteBlocks(w, 33, true); !errors.Is(err, ErrReadOnly) {
			t.Errorf("FUA write: err = %v, want ErrReadOnly", err)
		}
		r := alignedBuf(len(w))
		if err := b.ReadBlocks(r, 33); err != nil {
			t.Fatalf("read from a read-only namespace: %v", err)
		}
		if tr.reopen && !bytes.Equal(r, w) {
			t.Error("read-only reopen does not see the data written before")
		}
		if err := b.Flush(); err != nil {
			t.Errorf("Flush on a read-only namespace: %v", err)
		}
	})
}

func TestConformanceNull(t *testing.T) {
	for _, lba := range []uint32{512, 4096} {
		t.Run(lbaName(lba), func(t *testing.T) {
			runConformance(t, func(t *testing.T, ro bool) Backend {
				b, err := Open(Spec{Kind: KindNull, Size: conformanceSize, LBASize: lba, ReadOnly: ro})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}, lba, kindTraits{})
		})
	}
}

func TestConformanceMemory(t *testing.T) {
	for _, lba := range []uint32{512, 4096} {
		t.Run(lbaName(lba), func(t *testing.T) {
			runConformance(t, func(t *testing.T, ro bool) Backend {
				b, err := Open(Spec{Kind: KindMemory, Size: conformanceSize, LBASize: lba, ReadOnly: ro})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}, lba, kindTraits{persistent: true})
		})
	}
}

func lbaName(lba uint32) string {
	if lba == 512 {
		return "lba512"
	}
	return "lba4096"
}
