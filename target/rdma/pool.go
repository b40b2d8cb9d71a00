package rdma

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/rdmacm"
)

// pageSize is the pool's allocation granule: the backends' O_DIRECT alignment and the
// smallest I/O unit (4 KiB).
const pageSize = 4096

const pageShift = 12

// region is registered memory as the device names it: a byte slice outside the Go
// heap (an rdmacm.Arena in the target; plain memory with fake keys in unit tests), the
// address of its first byte in SGEs, and its local key.
type region struct {
	mem  []byte
	base uint64
	lkey uint32
}

// sge describes bytes [off, off+n) of the region.
func (r *region) sge(off, n int) rdmacm.SGE {
	return rdmacm.SGE{Addr: r.base + uint64(off), Length: uint32(n), LKey: r.lkey}
}

// pool is a device's data buffer pool: one registered region sliced into 4 KiB pages and
// handed out as power-of-two runs of pages (a buddy allocator), so every buffer is
// contiguous and 4 KiB aligned: it is the RDMA READ/WRITE buffer and the backend's
// O_DIRECT buffer at once, and data never moves inside the target.
//
// A buffer is at most maxOrder pages (the largest transfer, MDTS). Part of the pool
// (reserve pages) is kept for priority allocations — admin queues, so that Identify,
// Get Log Page and the admin Connect never wait behind I/O; each admin queue holds at
// most adminQuota pages, the I/O queues fair shares of the rest (share.go).
//
// alloc and free take a mutex for a few dozen instructions; neither allocates. When an
// allocation fails the caller queues its request and sets its poll group's want flag;
// free kicks every group that wants buffers.
type pool struct {
	reg      region
	npages   int
	maxOrder int // largest buffer: 1<<maxOrder pages
	reserve  int // pages only priority allocations may use
	// adminQuota is the most pages one admin connection may hold (share.go).
	adminQuota int

	mu      sync.Mutex
	heads   []int32 // per order: first free block (page index), -1 if none
	next    []int32 // per page that heads a free block: the next free block of its order
	prev    []int32
	order   []int8 // per page: order of the free block it heads, -1 otherwise
	free    int    // free pages
	minFree int    // low-water mark, for statistics

	headroom int // pages borrowing connections leave free (share.go)

	// The division (share.go): live I/O connections, the pages closed ones still hold
	// (commands stuck in a backend), and the quota computed from them. divMu orders the
	// recomputations (connects, closes, a closed connection's buffers coming back) and
	// guards ioConns; closedHeld and quota are atomics because others read them without it.
	divMu      sync.Mutex
	ioConns    int          // I/O connections sharing the pool: attached, queue pair not gone
	closedHeld atomic.Int64 // pages held by I/O connections whose queue pairs are gone
	quota      atomic.Int64 // pages a sharing connection may hold without borrowing
	needy      atomic.Int32 // groups with a request waiting within its connection's share
	// needyEvents counts the times a request within its share found no buffer: the
	// watchdog sees pressure between two of its checks even if it lasts microseconds each.
	needyEvents atomic.Uint64

	wanting atomic.Int32 // groups with requests waiting for buffers
	groupMu sync.Mutex
	groups  []*group
}

// newPool makes a pool of the region's whole pages; maxBytes is the largest buffer
// (rounded up to a power-of-two number of pages).
func newPool(reg region, maxBytes int) (*pool, error) {
	npages := len(reg.mem) / pageSize
	maxPages := (maxBytes + pageSize - 1) / pageSize
	if maxPages < 1 {
		maxPages = 1
	}
	maxOrder := bits.Len(uint(maxPages - 1))
	if npages < 1<<maxOrder {
		return nil, fmt.Errorf("rdma: buffer pool of %d bytes cannot hold one %d-byte transfer", len(reg.mem), (1<<maxOrder)*pageSize)
	}
	p := &pool{
		reg:      reg,
		npages:   npages,
		maxOrder: maxOrder,
		heads:    make([]int32, maxOrder+1),
		next:     make([]int32, npages),
		prev:     make([]int32, npages),
		order:    make([]int8, npages),
	}
	// Keep one largest buffer for priority allocations when the pool has room for more
	// than one, so that admin commands never wait behind I/O; a pool of a single largest
	// buffer reserves nothing (I/O could not run at all otherwise).
	p.reserve = min(1<<maxOrder, npages-(1<<maxOrder))
	p.headroom = (npages - p.reserve) / headroomFraction
	p.adminQuota = adminQuotaPages(maxOrder)
	p.addIOConn(0)
	for i := range p.heads {
		p.heads[i] = -1
	}
	for i := range p.order {
		p.order[i] = -1
	}
	// Carve the pages into the largest aligned blocks that fit.
	for i := 0; i < npages; {
		k := maxOrder
		for k > 0 && (i&(1<<k-1) != 0 || i+1<<k > npages) {
			k--
		}
		p.push(i, k)
		i += 1 << k
	}
	p.free = npages
	p.minFree = npages
	return p, nil
}

// orderOf returns the order of the smallest buffer holding n bytes, or -1 if n is larger
// than the largest buffer.
func (p *pool) orderOf(n int) int {
	pages := (n + pageSize - 1) >> pageShift
	if pages < 1 {
		pages = 1
	}
	k := bits.Len(uint(pages - 1))
	if k > p.maxOrder {
		return -1
	}
	return k
}

func (p *pool) push(pg, k int) {
	h := p.heads[k]
	p.next[pg] = h
	p.prev[pg] = -1
	if h >= 0 {
		p.prev[h] = int32(pg)
	}
	p.heads[k] = int32(pg)
	p.order[pg] = int8(k)
}

func (p *pool) unlink(pg, k int) {
	n, pr := p.next[pg], p.prev[pg]
	if pr >= 0 {
		p.next[pr] = n
	} else {
		p.heads[k] = n
	}
	if n >= 0 {
		p.prev[n] = pr
	}
	p.order[pg] = -1
}

// alloc returns the byte offset of a free buffer of 1<<k pages, or false. Without prio
// it leaves the reserve alone.
func (p *pool) alloc(k int, prio bool) (int, bool) {
	keep := p.reserve
	if prio {
		keep = 0
	}
	return p.allocKeep(k, keep)
}

// allocKeep is alloc that leaves at least keep pages free.
func (p *pool) allocKeep(k, keep int) (int, bool) {
	need := 1 << k
	p.mu.Lock()
	if p.free-need < keep {
		p.mu.Unlock()
		return 0, false
	}
	j := k
	for j <= p.maxOrder && p.heads[j] < 0 {
		j++
	}
	if j > p.maxOrder {
		p.mu.Unlock()
		return 0, false // enough pages, but fragmented
	}
	pg := int(p.heads[j])
	p.unlink(pg, j)
	for j > k { // split, keeping the lower half
		j--
		p.push(pg+1<<j, j)
	}
	p.free -= need
	if p.free < p.minFree {
		p.minFree = p.free
	}
	p.mu.Unlock()
	return pg << pageShift, true
}

// release returns the buffer of 1<<k pages at byte offset off and kicks the poll groups
// that wait for buffers.
func (p *pool) release(off, k int) {
	pg := off >> pageShift
	p.mu.Lock()
	p.free += 1 << k
	for k < p.maxOrder {
		b := pg ^ 1<<k
		if b+1<<k > p.npages || p.order[b] != int8(k) {
			break
		}
		p.unlink(b, k)
		pg &^= 1 << k
		k++
	}
	p.push(pg, k)
	p.mu.Unlock()
	if p.wanting.Load() > 0 {
		p.kickWaiters()
	}
}

// buf returns the slice of the buffer at off holding n bytes.
func (p *pool) buf(off, n int) []byte { return p.reg.mem[off : off+n : off+n] }

// stats returns the free pages, the total and the low-water mark.
func (p *pool) stats() (free, total, minFree int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.free, p.npages, p.minFree
}

func (p *pool) addGroup(g *group) {
	p.groupMu.Lock()
	p.groups = append(p.groups, g)
	p.groupMu.Unlock()
}

// setWant records whether g has requests waiting for buffers.
func (p *pool) setWant(g *group, want bool) {
	if g.wantBuf == want {
		return
	}
	g.wantBuf = want
	if want {
		g.wantFlag.Store(true)
		p.wanting.Add(1)
	} else {
		g.wantFlag.Store(false)
		p.wanting.Add(-1)
	}
}

func (p *pool) kickWaiters() {
	p.groupMu.Lock()
	for _, g := range p.groups {
		if g.wantFlag.Load() {
			g.kick()
		}
	}
	p.groupMu.Unlock()
}
