package backend

import (
	"bytes"
	"sync"
	"testing"
)

func openMem(t *testing.T, size uint64, lba uint32) *memoryBackend {
	t.Helper()
	b, err := Open(Spec{Kind: KindMemory, Size: size, LBASize: lba})
	if err != nil {
		t.Fatal(err)
	}
	return b.(*memoryBackend)
}

// TestMemorySparse: memory is taken by writes only, a chunk at a time, given back when a
// deallocate or write zeroes covers a whole chunk, and never more than the size.
func TestMemorySparse(t *testing.T) {
	const size = 1 << 20 // 16 chunks
	b := openMem(t, size, 512)
	if b.AllocatedBytes() != 0 {
		t.Fatalf("fresh backend holds %d bytes", b.AllocatedBytes())
	}
	r := alignedBuf(size)
	if err := b.ReadBlocks(r, 0); err != nil || !isZero(r) {
		t.Fatalf("read of an empty backend: %v, zero %v", err, isZero(r))
	}
	if b.AllocatedBytes() != 0 {
		t.Error("reads allocated memory")
	}
	w := alignedBuf(512)
	fill(w, 1)
	if err := b.WriteBlocks(w, 0, false); err != nil {
		t.Fatal(err)
	}
	if got := b.AllocatedBytes(); got != memChunkSize {
		t.Errorf("one block written: %d bytes held, want one chunk (%d)", got, memChunkSize)
	}
	// A write across a chunk boundary takes the second chunk too.
	w2 := alignedBuf(4096)
	fill(w2, 2)
	if err := b.WriteBlocks(w2, memChunkSize/512-4, false); err != nil {
		t.Fatal(err)
	}
	if got := b.AllocatedBytes(); got != 2*memChunkSize {
		t.Errorf("%d bytes held, want two chunks", got)
	}
	// Fill everything: bounded by the size.
	all := alignedBuf(size)
	fill(all, 3)
	if err := b.WriteBlocks(all, 0, false); err != nil {
		t.Fatal(err)
	}
	if got := b.AllocatedBytes(); got != size {
		t.Errorf("full backend holds %d bytes, want %d", got, size)
	}
	// Deallocate a range covering chunks 2..4 whole and parts of chunks 1 and 5.
	first, nlb := uint64(memChunkSize/512+10), uint64(4*memChunkSize/512+10)
	if err := b.Deallocate(first, nlb); err != nil {
		t.Fatal(err)
	}
	if got := b.AllocatedBytes(); got != size-3*memChunkSize {
		t.Errorf("after deallocating 3 whole chunks: %d bytes held, want %d", got, size-3*memChunkSize)
	}
	if err := b.ReadBlocks(r, 0); err != nil {
		t.Fatal(err)
	}
	lo, hi := first*512, (first+nlb)*512
	if !isZero(r[lo:hi]) || !bytes.Equal(r[:lo], all[:lo]) || !bytes.Equal(r[hi:], all[hi:]) {
		t.Error("deallocate zeroed the wrong bytes")
	}
	if err := b.WriteZeroes(0, size/512); err != nil {
		t.Fatal(err)
	}
	if b.AllocatedBytes() != 0 {
		t.Errorf("write zeroes of everything left %d bytes held", b.AllocatedBytes())
	}
	// Sizes that are not whole chunks are fine.
	odd := openMem(t, memChunkSize+4096, 4096)
	if err := odd.WriteBlocks(alignedBuf(8192), odd.NumBlocks()-2, false); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryRace runs overlapping reads, writes and deallocates on the same chunks; the
// race detector checks the per-chunk locking, and every read must see whole blocks from
// one writer or zeroes.
func TestMemoryRace(t *testing.T) {
	b := openMem(t, 4*memChunkSize, 512)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := alignedBuf(3 * memChunkSize / 2)
			for i := range 50 {
				slba := uint64((g*13+i*29)%128) * 2
				switch (g + i) % 4 {
				case 0:
					for j := range buf {
						buf[j] = byte(g + 1)
					}
					if err := b.WriteBlocks(buf, slba, false); err != nil {
						t.Error(err)
						return
					}
				case 1:
					if err := b.Deallocate(slba, uint64(len(buf)/512)); err != nil {
						t.Error(err)
						return
					}
				default:
					if err := b.ReadBlocks(buf, slba); err != nil {
						t.Error(err)
						return
					}
					for blk := 0; blk < len(buf); blk += 512 {
						v := buf[blk]
						if v > 8 || !bytes.Equal(buf[blk:blk+512], bytes.Repeat([]byte{v}, 512)) {
							t.Errorf("torn block at slba %d", slba+uint64(blk/512))
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if b.AllocatedBytes() > 4*memChunkSize {
		t.Errorf("holds %d bytes, more than its size", b.AllocatedBytes())
	}
}

func TestOpenErrors(t *testing.T) {
	cases := []struct {
		spec Spec
		want string
	}{
		{Spec{}, "kind is empty"},
		{Spec{Kind: "nfs"}, `unknown kind "nfs"`},
		{Spec{Kind: KindMemory}, "needs a size"},
		{Spec{Kind: KindNull}, "needs a size"},
		{Spec{Kind: KindMemory, Size: 1000}, "not a multiple"},
		{Spec{Kind: KindNull, Size: 4096, LBASize: 1024 + 512}, "invalid"},
		{Spec{Kind: KindMemory, Size: 1 << 63}, "too large"},
	}
	for _, c := range cases {
		_, err := Open(c.spec)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("Open(%+v) = %v, want an error containing %q", c.spec, err, c.want)
		}
	}
	b, err := Open(Spec{Kind: KindNull, Size: 4096})
	if err != nil || b.LBASize() != 512 || b.NumBlocks() != 8 {
		t.Errorf("lba size 0 should default to 512: %v", err)
	}
}
