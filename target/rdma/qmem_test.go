package rdma

import (
	"errors"
	"testing"
)

// fakeArena is registered memory without a device.
type fakeArena struct {
	mem    []byte
	base   uint64
	closed bool
}

func (a *fakeArena) Bytes() []byte       { return a.mem }
func (a *fakeArena) Addr(off int) uint64 { return a.base + uint64(off) }
func (a *fakeArena) LKey() uint32        { return uint32(a.base >> 20) }
func (a *fakeArena) Close() error {
	if a.closed {
		return errors.New("closed twice")
	}
	a.closed = true
	return nil
}

func newFakeQmem() (*qmem, *[]*fakeArena) {
	var made []*fakeArena
	m := &qmem{newArena: func(size int) (memArena, error) {
		a := &fakeArena{mem: make([]byte, size), base: uint64(len(made)+1) << 32}
		made = append(made, a)
		return a, nil
	}}
	return m, &made
}

func TestQmemSlabs(t *testing.T) {
	m, made := newFakeQmem()
	var blocks []*qmemBlock
	// A slab's worth of one-page blocks comes from one arena, in order, without overlap.
	for i := range slabPages {
		b, err := m.alloc(100)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.mem) != pageSize || b.base != (*made)[0].Addr(i*pageSize) || b.lkey != (*made)[0].LKey() {
			t.Fatalf("block %d: %d bytes at %#x (lkey %#x), want page %d of the first slab", i, len(b.mem), b.base, b.lkey, i)
		}
		blocks = append(blocks, b)
	}
	if len(*made) != 1 {
		t.Fatalf("%d arenas for %d one-page blocks, want 1", len(*made), slabPages)
	}
	// The next one needs a second slab.
	b, err := m.alloc(pageSize)
	if err != nil || b.base != (*made)[1].Addr(0) {
		t.Fatalf("block after a full slab: %v at %#x, want the second slab's first page", err, b.base)
	}
	// Freed pages are handed out again, zeroed; a run of pages needs them in a row.
	blocks[3].mem[0], blocks[4].mem[7] = 0xAA, 0xBB
	for _, i := range []int{3, 4, 9} {
		if err := blocks[i].release(); err != nil {
			t.Fatal(err)
		}
	}
	two, err := m.alloc(2 * pageSize)
	if err != nil || two.base != (*made)[0].Addr(3*pageSize) || len(two.mem) != 2*pageSize {
		t.Fatalf("two pages: %v at %#x (%d bytes), want pages 3-4 of the first slab", err, two.base, len(two.mem))
	}
	for i, v := range two.mem {
		if v != 0 {
			t.Fatalf("reused memory not zeroed at %d: %#x", i, v)
		}
	}
	if three, err := m.alloc(3 * pageSize); err != nil || three.base != (*made)[1].Addr(pageSize) {
		t.Fatalf("three pages: %v at %#x, want pages 1-3 of the second slab (the first has no 3 free in a row)", err, three.base)
	}
	if slabs, used := m.stats(); slabs != 2 || used != slabPages-1+1+3 {
		t.Errorf("stats: %d slabs, %d pages used; want 2, %d", slabs, used, slabPages-1+1+3)
	}
	// A block's slice cannot grow into its neighbour.
	if cap(two.mem) != len(two.mem) {
		t.Errorf("block capacity %d beyond its %d bytes", cap(two.mem), len(two.mem))
	}
}

func TestQmemLarge(t *testing.T) {
	m, made := newFakeQmem()
	b, err := m.alloc((slabPages/2+1)*pageSize - 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(*made) != 1 || len((*made)[0].mem) != (slabPages/2+1)*pageSize || b.own == nil {
		t.Fatalf("a block larger than half a slab: %d arenas, want its own of %d pages", len(*made), slabPages/2+1)
	}
	if err := b.release(); err != nil || !(*made)[0].closed {
		t.Fatalf("releasing a block with its own arena: %v, closed %v", err, (*made)[0].closed)
	}
	if slabs, _ := m.stats(); slabs != 0 {
		t.Errorf("%d slabs after a large block only", slabs)
	}
}

func TestQmemClose(t *testing.T) {
	m, made := newFakeQmem()
	for range slabPages + 1 {
		if _, err := m.alloc(pageSize); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	for i, a := range *made {
		if !a.closed {
			t.Errorf("slab %d not closed", i)
		}
	}
	var nilm *qmem
	if err := nilm.close(); err != nil {
		t.Errorf("closing no queue memory: %v", err)
	}
}

func TestQmemArenaError(t *testing.T) {
	boom := errors.New("boom")
	m := &qmem{newArena: func(int) (memArena, error) { return nil, boom }}
	if _, err := m.alloc(pageSize); !errors.Is(err, boom) {
		t.Errorf("slab arena failing: %v", err)
	}
	if _, err := m.alloc(slabPages * pageSize); !errors.Is(err, boom) {
		t.Errorf("own arena failing: %v", err)
	}
}
