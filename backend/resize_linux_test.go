package backend

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// resizeCheck grows b from 1 MiB to 3 MiB while a writer and a reader run on its first
// block, then checks that the new blocks work, read zeroes until written, keep the old
// data, and that shrinking is refused and changes nothing.
func resizeCheck(t *testing.T, b Backend, size uint64) {
	t.Helper()
	r, ok := b.(Resizer)
	if !ok {
		t.Fatalf("%T is not a Resizer", b)
	}
	lba := uint64(b.LBASize())
	old := alignedBuf(int(lba))
	fill(old, 1)
	if err := b.WriteBlocks(old, 0, false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // I/O racing the resize (the race detector checks the capacity's accesses)
		defer wg.Done()
		buf := alignedBuf(int(lba))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := b.ReadBlocks(buf, 0); err != nil {
				t.Error(err)
				return
			}
			if err := b.WriteBlocks(old, 0, false); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	oldBlocks := b.NumBlocks()
	end := alignedBuf(int(lba))
	if err := b.ReadBlocks(end, oldBlocks); !errors.Is(err, ErrLBAOutOfRange) {
		t.Errorf("read past the end before resizing: %v", err)
	}
	n, err := r.Resize(3 * size)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n != 3*size/lba || b.NumBlocks() != n {
		t.Fatalf("Resize returned %d, NumBlocks %d; want %d", n, b.NumBlocks(), 3*size/lba)
	}
	last := n - 1
	if err := b.ReadBlocks(end, last); err != nil {
		t.Fatalf("reading the new last block: %v", err)
	}
	if !isZero(end) && Describe(b).Kind != KindNull {
		t.Errorf("a new block does not read zeroes")
	}
	fill(end, 2)
	if err := b.WriteBlocks(end, last, false); err != nil {
		t.Fatalf("writing the new last block: %v", err)
	}
	got := alignedBuf(int(lba))
	if Describe(b).Kind != KindNull {
		if err := b.ReadBlocks(got, last); err != nil || string(got) != string(end) {
			t.Errorf("new last block reads back wrong (%v)", err)
		}
		if err := b.ReadBlocks(got, 0); err != nil || string(got) != string(old) {
			t.Errorf("block 0 changed by the resize (%v)", err)
		}
	}
	if _, err := r.Resize(size); !errors.Is(err, ErrShrink) || b.NumBlocks() != n {
		t.Errorf("shrinking: %v, %d blocks", err, b.NumBlocks())
	}
	if _, err := r.Resize(3*size + 1); err == nil {
		t.Errorf("a size that is not a multiple of the lba size was accepted")
	}
	if m, err := r.Resize(0); err != nil || m != n {
		t.Errorf("Resize(0) with nothing changed: %d, %v", m, err)
	}
}

func TestResizeNull(t *testing.T) {
	b, err := Open(Spec{Kind: KindNull, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	resizeCheck(t, b, 1<<20)
}

func TestResizeMemory(t *testing.T) {
	b, err := Open(Spec{Kind: KindMemory, Size: 1 << 20, LBASize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	resizeCheck(t, b, 1<<20)
}

func TestResizeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ns.img")
	b, err := Open(Spec{Kind: KindFile, Path: p, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	resizeCheck(t, b, 1<<20)
	if st, err := os.Stat(p); err != nil || st.Size() != 3<<20 {
		t.Fatalf("file after the resize: %v %v", st.Size(), err)
	}
	// Grown by someone else: Resize(0) takes the file's size, whole blocks only.
	if err := os.Truncate(p, 4<<20+100); err != nil {
		t.Fatal(err)
	}
	if n, err := b.(Resizer).Resize(0); err != nil || n != 4<<20/512 {
		t.Fatalf("Resize(0) after the file grew: %d, %v", n, err)
	}

	b.Close()

	// A read-only namespace cannot extend its file.
	ro, err := Open(Spec{Kind: KindFile, Path: p, ReadOnly: true, Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.(Resizer).Resize(8 << 20); err == nil {
		t.Errorf("a read-only file namespace extended its file")
	}
}

func TestResizeBlock(t *testing.T) {
	dev, backing := testBlockDeviceBacking(t, 1<<20, 512)
	if backing == "" {
		t.Skip("GONVMF_TEST_BLOCKDEV cannot be grown by the test")
	}
	b, err := Open(Spec{Kind: KindBlock, Path: dev})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := b.(Resizer)
	if _, err := r.Resize(2 << 20); err == nil {
		t.Errorf("a block namespace grew past its device")
	}
	if err := os.Truncate(backing, 3<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_CAPACITY, 0)
	f.Close()
	if err != nil {
		t.Skipf("LOOP_SET_CAPACITY: %v", err)
	}
	if n, err := r.Resize(0); err != nil || n != 3<<20/512 || b.NumBlocks() != n {
		t.Fatalf("Resize(0) after the device grew: %d, %v", n, err)
	}
}
