package backend

import (
	"sync"
	"sync/atomic"
)

// memChunkSize is the allocation unit of the memory backend: a chunk is allocated on the
// first write that touches it, and freed when a deallocate or write zeroes covers it.
const memChunkSize = 64 << 10

type memChunk struct {
	mu    sync.RWMutex
	freed bool // set, under mu, when the chunk leaves the table
	data  [memChunkSize]byte
}

// memoryBackend is a sparse store in process memory, for tests and benchmarks. It never
// holds more than Size bytes (rounded up to whole chunks): unwritten and deallocated
// chunks take no memory and read as zeroes. Each chunk has its own lock, so requests on
// different chunks run in parallel.
//
// Resize grows the chunk table: it copies the table under growMu held exclusively, while
// the rare table updates (installing a chunk on its first write, freeing one) hold it
// shared; reads and writes to existing chunks take no table lock. The larger table is
// published before the larger capacity, so a request checked against the capacity always
// finds its chunks.
type memoryBackend struct {
	geometry
	tab       atomic.Pointer[[]atomic.Pointer[memChunk]]
	growMu    sync.RWMutex
	allocated atomic.Int64 // chunks in the table
}

func chunkTable(size uint64) *[]atomic.Pointer[memChunk] {
	t := make([]atomic.Pointer[memChunk], (size+memChunkSize-1)/memChunkSize)
	return &t
}

func openMemory(s Spec) (Backend, error) {
	lba, shift, err := checkLBASize(s.LBASize, 512)
	if err != nil {
		return nil, err
	}
	n, err := checkSize(s.Kind, s.Size, lba)
	if err != nil {
		return nil, err
	}
	b := &memoryBackend{}
	b.tab.Store(chunkTable(s.Size))
	b.init(lba, shift, n, s.ReadOnly)
	return b, nil
}

// AllocatedBytes returns the memory the backend holds for data.
func (b *memoryBackend) AllocatedBytes() uint64 {
	return uint64(b.allocated.Load()) * memChunkSize
}

func (b *memoryBackend) ReadBlocks(buf []byte, slba uint64) error {
	if _, err := b.checkBuf(buf, slba); err != nil {
		return err
	}
	off := slba << b.lbaShift
	chunks := *b.tab.Load()
	for len(buf) > 0 {
		i, co := off/memChunkSize, off%memChunkSize
		l := min(uint64(len(buf)), memChunkSize-co)
		if c := chunks[i].Load(); c == nil {
			clear(buf[:l])
		} else {
			c.mu.RLock()
			if c.freed {
				clear(buf[:l])
			} else {
				copy(buf[:l], c.data[co:])
			}
			c.mu.RUnlock()
		}
		buf = buf[l:]
		off += l
	}
	return nil
}

func (b *memoryBackend) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	if _, err := b.checkWrite(buf, slba); err != nil {
		return err
	}
	off := slba << b.lbaShift
	for len(buf) > 0 {
		i, co := off/memChunkSize, off%memChunkSize
		l := min(uint64(len(buf)), memChunkSize-co)
		for {
			c := (*b.tab.Load())[i].Load()
			if c == nil {
				// First write to this chunk. Allocation happens once per chunk, not in
				// steady state.
				nc := new(memChunk)
				b.growMu.RLock()
				installed := (*b.tab.Load())[i].CompareAndSwap(nil, nc)
				b.growMu.RUnlock()
				if !installed {
					continue
				}
				b.allocated.Add(1)
				c = nc
			}
			c.mu.Lock()
			if c.freed { // deallocated between Load and Lock: use the table's new state
				c.mu.Unlock()
				continue
			}
			copy(c.data[co:], buf[:l])
			c.mu.Unlock()
			break
		}
		buf = buf[l:]
		off += l
	}
	return nil
}

func (b *memoryBackend) Flush() error { return nil }

// Deallocate frees the chunks the range covers entirely and zeroes the partly covered
// pieces, so deallocated blocks read as zeroes.
func (b *memoryBackend) Deallocate(slba, nlb uint64) error {
	if err := b.checkModify(slba, nlb); err != nil {
		return err
	}
	off, n := slba<<b.lbaShift, nlb<<b.lbaShift
	b.growMu.RLock()
	defer b.growMu.RUnlock()
	chunks := *b.tab.Load()
	for n > 0 {
		i, co := off/memChunkSize, off%memChunkSize
		l := min(n, memChunkSize-co)
		if c := chunks[i].Load(); c != nil {
			c.mu.Lock()
			if !c.freed {
				if l == memChunkSize {
					c.freed = true
					chunks[i].CompareAndSwap(c, nil)
					b.allocated.Add(-1)
				} else {
					clear(c.data[co : co+l])
				}
			}
			c.mu.Unlock()
		}
		off += l
		n -= l
	}
	return nil
}

// WriteZeroes is Deallocate: both leave the blocks reading zeroes.
func (b *memoryBackend) WriteZeroes(slba, nlb uint64) error { return b.Deallocate(slba, nlb) }

// Resize grows the capacity to size bytes (at most what the configuration allows a
// memory namespace; conf checks that); the new blocks read as zeroes. Size 0 means no
// change.
func (b *memoryBackend) Resize(size uint64) (uint64, error) {
	b.growMu.Lock()
	defer b.growMu.Unlock()
	n, err := b.growTo(size)
	if err != nil || n == b.nblocks.Load() {
		return n, err
	}
	old := *b.tab.Load()
	if need := (size + memChunkSize - 1) / memChunkSize; need > uint64(len(old)) {
		t := chunkTable(size)
		for i := range old {
			(*t)[i].Store(old[i].Load())
		}
		b.tab.Store(t)
	}
	b.nblocks.Store(n)
	return n, nil
}

func (b *memoryBackend) Close() error {
	chunks := *b.tab.Load()
	for i := range chunks {
		chunks[i].Store(nil)
	}
	b.allocated.Store(0)
	return nil
}

func (b *memoryBackend) Info() Info {
	return Info{
		Kind:                  KindMemory,
		DeallocateReadsZeroes: true,
		PhysicalBlockSize:     b.lbaSize,
		Inline:                true,
	}
}
