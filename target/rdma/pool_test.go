package rdma

import (
	"math/rand/v2"
	"testing"
)

func testPool(t *testing.T, bytes, maxIO int) *pool {
	t.Helper()
	p, err := newPool(newFakeFabric().newRegion(bytes), maxIO)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPoolOrders(t *testing.T) {
	p := testPool(t, 1<<20, 128<<10)
	for _, tc := range []struct{ n, k int }{
		{1, 0}, {4096, 0}, {4097, 1}, {8192, 1}, {12 << 10, 2}, {64 << 10, 4}, {128 << 10, 5}, {128<<10 + 1, -1},
	} {
		if k := p.orderOf(tc.n); k != tc.k {
			t.Errorf("orderOf(%d) = %d, want %d", tc.n, k, tc.k)
		}
	}
}

// TestPoolAccounting allocates until the pool is exhausted, checks that buffers are
// aligned and disjoint, frees everything in random order and checks that the pool
// merges back into whole largest buffers.
func TestPoolAccounting(t *testing.T) {
	const size, maxIO = 1<<20 + 3*4096, 128 << 10 // not a multiple of the largest buffer
	p := testPool(t, size, maxIO)
	free0, total, _ := p.stats()
	if free0 != total || total != size/pageSize {
		t.Fatalf("new pool: %d of %d pages free, want %d", free0, total, size/pageSize)
	}
	type buf struct{ off, k int }
	var bufs []buf
	used := make([]bool, total)
	rng := rand.New(rand.NewPCG(1, 2))
	for {
		k := rng.IntN(p.maxOrder + 1)
		off, ok := p.alloc(k, true)
		if !ok {
			// Exhausted for this size: try smaller ones until nothing is left.
			for k = k - 1; k >= 0 && !ok; k-- {
				off, ok = p.alloc(k, true)
			}
			k++
			if !ok {
				break
			}
		}
		if off%(pageSize<<k) != 0 {
			t.Fatalf("buffer of order %d at offset %#x is not aligned to its size", k, off)
		}
		for pg := off / pageSize; pg < off/pageSize+1<<k; pg++ {
			if used[pg] {
				t.Fatalf("page %d handed out twice", pg)
			}
			used[pg] = true
		}
		bufs = append(bufs, buf{off, k})
	}
	if f, _, low := p.stats(); f != 0 || low != 0 {
		t.Errorf("exhausted pool: %d pages free, low-water %d", f, low)
	}
	rng.Shuffle(len(bufs), func(i, j int) { bufs[i], bufs[j] = bufs[j], bufs[i] })
	for _, b := range bufs {
		p.release(b.off, b.k)
	}
	if f, _, _ := p.stats(); f != total {
		t.Fatalf("after freeing everything %d of %d pages are free", f, total)
	}
	// Everything merged: as many largest buffers as fit, again.
	want := size / maxIO
	for i := 0; i < want; i++ {
		if _, ok := p.alloc(p.maxOrder, true); !ok {
			t.Fatalf("only %d largest buffers after merging, want %d", i, want)
		}
	}
}

// TestPoolReserve: ordinary allocations leave one largest buffer for priority ones.
func TestPoolReserve(t *testing.T) {
	p := testPool(t, 512<<10, 128<<10) // four largest buffers
	for i := 0; i < 3; i++ {
		if _, ok := p.alloc(p.maxOrder, false); !ok {
			t.Fatalf("ordinary allocation %d failed", i)
		}
	}
	if _, ok := p.alloc(0, false); ok {
		t.Errorf("an ordinary allocation took from the reserve")
	}
	if _, ok := p.alloc(0, true); !ok {
		t.Errorf("a priority allocation found no buffer in the reserve")
	}
	// A pool of exactly one largest buffer reserves nothing, or I/O could never run.
	q := testPool(t, 128<<10, 128<<10)
	if _, ok := q.alloc(q.maxOrder, false); !ok {
		t.Errorf("single-buffer pool: the largest transfer cannot be allocated")
	}
}

func TestPoolTooSmall(t *testing.T) {
	if _, err := newPool(newFakeFabric().newRegion(64<<10), 128<<10); err == nil {
		t.Errorf("a pool smaller than one transfer was accepted")
	}
}

// TestPoolKicksWaiters: freeing a buffer wakes poll groups that wait for one.
func TestPoolKicksWaiters(t *testing.T) {
	p := testPool(t, 128<<10, 128<<10)
	cq := newFakeCQ()
	g := newGroup(0, p, cq, groupConfig{cqeCap: 100}, testLogger(t))
	off, _ := p.alloc(p.maxOrder, false)
	p.setWant(g, true)
	p.release(off, p.maxOrder)
	if !g.kicked.Load() {
		t.Errorf("a waiting group was not kicked when a buffer was freed")
	}
	p.setWant(g, false)
	g.kicked.Store(false)
	off, _ = p.alloc(0, false)
	p.release(off, 0)
	if g.kicked.Load() {
		t.Errorf("a group that waits for nothing was kicked")
	}
}

func BenchmarkPoolAllocRelease(b *testing.B) {
	p, _ := newPool(newFakeFabric().newRegion(64<<20), 128<<10)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i % 6
		off, ok := p.alloc(k, false)
		if !ok {
			b.Fatal("pool exhausted")
		}
		p.release(off, k)
	}
}
