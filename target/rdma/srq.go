package rdma

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
)

// srqPoster is a shared receive queue as the engine uses it (*rdmacm.SRQ, or a fake).
type srqPoster interface {
	PostRecv(wrs []rdmacm.RecvWR) error
}

// srqChunkSlots is how many receive buffers a shared receive queue adds at a time.
const srqChunkSlots = 32

// maxSRQChunks bounds a shared receive queue (work request IDs carry a 16-bit slot).
const maxSRQChunks = 1 << 16 / srqChunkSlots

// sharedRecv is a poll group's shared receive queue: the receive buffers (a command entry
// and, when the port allows in-capsule data, a page-aligned data area each) of all its I/O
// queues, which take whichever buffer is next when a command arrives. It holds as many
// buffers as its queues have entries, up to limit: memory and registration grow with the
// connections instead of being reserved for every one of them in full, and a burst on one
// queue can use the buffers the idle ones do not. Past the limit the queues' entries share
// the buffers, and a host that sends more commands than there are buffers is held back by
// RNR (receiver not ready) retries, which the target accepts with retry count 7 (forever).
// Admin queues keep their own receives: a connect or keep-alive never waits for an I/O
// queue's buffer.
//
// Buffers are added in chunks of srqChunkSlots by reserve (the connection manager's
// goroutine, before the queue is published), all the chunks a joining queue needs in one
// registered region; from then on the poll group's goroutine owns the buffers' reposting
// (repost, post).
type sharedRecv struct {
	q     srqPoster
	icd   int // in-capsule data bytes per buffer
	limit int // most buffers
	// alloc returns registered memory for a chunk and a function releasing it.
	alloc func(bytes int) (region, func() error, error)

	mu     sync.Mutex // guards want and growth
	want   int        // entries of the queues on the SRQ
	chunks [maxSRQChunks]atomic.Pointer[srqChunk]
	slots  atomic.Int32 // buffers posted (chunks × srqChunkSlots)

	// The poll group's: buffers to repost at the end of the round.
	stage []rdmacm.RecvWR
	n     int
}

// srqChunk is srqChunkSlots receive buffers in one registered region: the command entries,
// then (page aligned) the in-capsule data areas.
type srqChunk struct {
	reg  region
	free func() error // frees the region: set on the first chunk of a region only
	icd  int
	wrs  [srqChunkSlots]rdmacm.RecvWR
}

const srqICDBase = srqChunkSlots * nvmeproto.SQESize // page aligned: 2 KiB < 4 KiB rounds up below

func srqChunkBytes(icd int) int {
	if icd == 0 {
		return alignUp(srqICDBase, pageSize)
	}
	return alignUp(srqICDBase, pageSize) + srqChunkSlots*icd
}

// newSharedRecv returns the buffers of SRQ q, which holds at least limit receives. The
// limit is taken down to whole chunks: buffers are added a chunk at a time, and a chunk
// that did not fit would be posted in part.
func newSharedRecv(q srqPoster, icd, limit int, alloc func(int) (region, func() error, error)) *sharedRecv {
	limit = min(max(limit/srqChunkSlots*srqChunkSlots, srqChunkSlots), maxSRQChunks*srqChunkSlots)
	return &sharedRecv{q: q, icd: icd, limit: limit, alloc: alloc,
		stage: make([]rdmacm.RecvWR, 0, alignUp(limit, srqChunkSlots))}
}

// reserve accounts for an I/O queue of depth entries joining and adds buffers up to
// min(entries of all queues, limit). It fails only when no buffer could be added for a
// queue that would have none. Any goroutine.
func (s *sharedRecv) reserve(depth int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want += depth
	target := alignUp(min(s.want, s.limit), srqChunkSlots)
	for int(s.slots.Load()) < target {
		if err := s.grow((target - int(s.slots.Load())) / srqChunkSlots); err != nil {
			if s.slots.Load() > 0 {
				return nil // the queue shares what there is
			}
			s.want -= depth
			return err
		}
	}
	return nil
}

// unreserve accounts for a queue leaving. Buffers stay: the next connection uses them.
func (s *sharedRecv) unreserve(depth int) {
	s.mu.Lock()
	s.want -= depth
	s.mu.Unlock()
}

// grow adds n chunks of buffers in one registered region and posts them. Called with mu
// held. One region per call, not per chunk: registering memory (mmap, mlock, the device's
// registration) is what makes a connection's first queue slow to join, a few milliseconds
// per region under emulation. The region is freed with its first chunk (close); a chunk
// whose post failed stays unused in it. A chunk the device took part of stays too, as
// posted buffers (its other buffers are never used): the device may fill any buffer it
// took, so neither it nor its region may go while the SRQ exists.
func (s *sharedRecv) grow(n int) error {
	k := int(s.slots.Load()) / srqChunkSlots
	n = min(max(n, 1), maxSRQChunks-k)
	if n <= 0 {
		return fmt.Errorf("rdma: shared receive queue has its most buffers (%d)", k*srqChunkSlots)
	}
	cb := srqChunkBytes(s.icd)
	reg, free, err := s.alloc(n * cb)
	if err != nil {
		return fmt.Errorf("rdma: receive buffers for the shared receive queue: %w", err)
	}
	icdBase := alignUp(srqICDBase, pageSize)
	for c := range n {
		off := c * cb
		sub := region{mem: reg.mem[off : off+cb : off+cb], base: reg.base + uint64(off), lkey: reg.lkey}
		ch := &srqChunk{reg: sub, icd: s.icd}
		if c == 0 {
			ch.free = free
		}
		for j := range ch.wrs {
			w := &ch.wrs[j]
			w.ID = wrID(kindSRQRecv, (k+c)*srqChunkSlots+j, 0, 0)
			w.NumSGE = 1
			w.SGL[0] = sub.sge(j*nvmeproto.SQESize, nvmeproto.SQESize)
			if s.icd > 0 {
				w.NumSGE = 2
				w.SGL[1] = sub.sge(icdBase+j*s.icd, s.icd)
			}
		}
		s.chunks[k+c].Store(ch) // before the post: a completion can only follow it
		if err := s.q.PostRecv(ch.wrs[:]); err != nil {
			var pe *rdmacm.PostError
			if errors.As(err, &pe) && pe.Index > 0 {
				s.slots.Add(srqChunkSlots)
				return fmt.Errorf("rdma: posting %d receives to the shared receive queue: %d posted: %w", srqChunkSlots, pe.Index, err)
			}
			s.chunks[k+c].Store(nil)
			if c == 0 {
				free()
			}
			return fmt.Errorf("rdma: posting %d receives to the shared receive queue: %w", srqChunkSlots, err)
		}
		s.slots.Add(srqChunkSlots)
	}
	return nil
}

// buffers returns the command entry and the in-capsule data area of buffer i.
func (s *sharedRecv) buffers(i int) (sqe, icd []byte) {
	ch := s.chunks[i/srqChunkSlots].Load()
	j := i % srqChunkSlots
	sqe = ch.reg.mem[j*nvmeproto.SQESize : (j+1)*nvmeproto.SQESize]
	if ch.icd > 0 {
		b := alignUp(srqICDBase, pageSize) + j*ch.icd
		icd = ch.reg.mem[b : b+ch.icd : b+ch.icd]
	}
	return sqe, icd
}

// valid reports whether i names a posted buffer.
func (s *sharedRecv) valid(i int) bool {
	return i >= 0 && i < int(s.slots.Load()) && s.chunks[i/srqChunkSlots].Load() != nil
}

// repost stages buffer i to go back to the SRQ at the end of the round (post). Poll
// group's goroutine.
func (s *sharedRecv) repost(i int) {
	ch := s.chunks[i/srqChunkSlots].Load()
	s.stage = append(s.stage, ch.wrs[i%srqChunkSlots])
}

// post hands the staged buffers back to the SRQ in one call. Poll group's goroutine.
func (s *sharedRecv) post() error {
	if len(s.stage) == 0 {
		return nil
	}
	err := s.q.PostRecv(s.stage)
	clear(s.stage)
	s.stage = s.stage[:0]
	return err
}

// close releases the buffers' memory (after the SRQ itself is gone).
func (s *sharedRecv) close() error {
	var first error
	for k := range s.chunks {
		if ch := s.chunks[k].Swap(nil); ch != nil && ch.free != nil {
			if err := ch.free(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
