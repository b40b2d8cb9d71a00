package rdma

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/gonvmf/gonvmf/rdmacm"
)

// Queue memory: each connection's own registered memory (response slots; the receive
// buffers of a queue without a shared receive queue).
//
// Most connections need a page or a few: an admin queue's 32 capsules and responses, an
// I/O queue on a shared receive queue its response slots (32 bytes per entry). Giving each
// its own arena costs an mmap, an mlock and a memory registration when it connects and
// the reverse when it goes — system calls that cost milliseconds each under emulation, on
// the path of every controller's connect. So requests of up to half a slab are carved from
// slabs of slabPages pages, registered once per device and kept until the device closes;
// a larger request gets an arena of its own.
//
// Reuse is safe because a connection's memory comes back only when its queue pair is gone
// (connDead): nothing can still be written there by the device. Handed-out pages are
// zeroed. All of it has local access only: no rkey of it ever reaches a host.

// slabPages is the number of pages in one slab: one bit each in a uint64.
const slabPages = 64

// memArena is the part of rdmacm.Arena that queue memory uses (a seam for tests).
type memArena interface {
	Bytes() []byte
	Addr(off int) uint64
	LKey() uint32
	Close() error
}

// qmem hands out queue memory for one device.
type qmem struct {
	newArena func(size int) (memArena, error)

	mu    sync.Mutex
	slabs []*qslab
}

type qslab struct {
	a    memArena
	free uint64 // bit i set: page i is free
}

// qmemBlock is one connection's queue memory.
type qmemBlock struct {
	region
	m     *qmem
	slab  *qslab   // nil: an arena of its own
	own   memArena // the arena of its own
	first int      // the slab's first page
	n     int      // pages
}

func newQmem(pd *rdmacm.PD) *qmem {
	return &qmem{newArena: func(size int) (memArena, error) { return pd.NewArena(size, 0) }}
}

// alloc returns size bytes (rounded up to pages) of zeroed, registered queue memory.
func (m *qmem) alloc(size int) (*qmemBlock, error) {
	n := (size + pageSize - 1) / pageSize
	if n == 0 {
		n = 1
	}
	if n > slabPages/2 { // would leave slabs too fragmented: its own arena
		a, err := m.newArena(n * pageSize)
		if err != nil {
			return nil, err
		}
		return &qmemBlock{region: regionOf(a, 0, n*pageSize), m: m, own: a, n: n}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.slabs {
		if first, ok := s.take(n); ok {
			return m.block(s, first, n), nil
		}
	}
	a, err := m.newArena(slabPages * pageSize)
	if err != nil {
		return nil, fmt.Errorf("a slab of %d pages of queue memory: %w", slabPages, err)
	}
	s := &qslab{a: a, free: ^uint64(0)}
	m.slabs = append(m.slabs, s)
	first, _ := s.take(n)
	return m.block(s, first, n), nil
}

func (m *qmem) block(s *qslab, first, n int) *qmemBlock {
	b := &qmemBlock{region: regionOf(s.a, first*pageSize, n*pageSize), m: m, slab: s, first: first, n: n}
	clear(b.mem)
	return b
}

func regionOf(a memArena, off, n int) region {
	return region{mem: a.Bytes()[off : off+n : off+n], base: a.Addr(off), lkey: a.LKey()}
}

// take finds n free pages in a row (first fit) and marks them used.
func (s *qslab) take(n int) (int, bool) {
	run := uint64(1)<<n - 1
	for free := s.free; free != 0; {
		i := bits.TrailingZeros64(free)
		if i+n > slabPages {
			return 0, false
		}
		if mask := run << i; s.free&mask == mask {
			s.free &^= mask
			return i, true
		}
		free &^= 1 << i
	}
	return 0, false
}

// release gives the block back: to its slab, or closes its own arena. Call it only when
// no queue pair can touch the memory any more.
func (b *qmemBlock) release() error {
	if b.own != nil {
		return b.own.Close()
	}
	b.m.mu.Lock()
	b.slab.free |= (uint64(1)<<b.n - 1) << b.first
	b.m.mu.Unlock()
	return nil
}

// close closes every slab (when the device closes; blocks still handed out must not be
// used after).
func (m *qmem) close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var first error
	for _, s := range m.slabs {
		if err := s.a.Close(); err != nil && first == nil {
			first = err
		}
	}
	m.slabs = nil
	return first
}

// stats reports the slabs and their pages in use.
func (m *qmem) stats() (slabs, used int) {
	if m == nil {
		return 0, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.slabs {
		used += slabPages - bits.OnesCount64(s.free)
	}
	return len(m.slabs), used
}
