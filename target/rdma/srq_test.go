package rdma

import (
	"bytes"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
)

// ioOnQueue runs writes (keyed and in-capsule) and reads of patterns on io from depth-1
// workers and checks every byte; rounds per worker.
func ioOnQueue(t *testing.T, io *fconn, q, depth, rounds int) {
	var wg sync.WaitGroup
	for w := 0; w < depth-1; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				n := []int{1, 8, 16, 256}[(w+i)%4]
				slba := uint64((q*depth + w) * 256) // a region of its own: 256 blocks
				data := pattern(n*512, byte(q*31+w*7+i))
				if (w+i)%3 == 0 && n*512 <= 8192 {
					expectOK(t, "in-capsule write", io.h.execInline(rw(nvmeproto.OpWrite, 1, slba, n), data))
				} else {
					c, _ := io.h.exec(rw(nvmeproto.OpWrite, 1, slba, n), data, len(data))
					expectOK(t, "write", c)
				}
				c, got := io.h.exec(rw(nvmeproto.OpRead, 1, slba, n), nil, len(data))
				expectOK(t, "read", c)
				if !bytes.Equal(got, data) {
					t.Errorf("queue %d worker %d: data mismatch at slba %d", q, w, slba)
				}
			}
		}()
	}
	wg.Wait()
}

// TestEngineSRQ: I/O queues on a shared receive queue get buffers for all their entries
// (up to its limit), serve keyed and in-capsule commands on several queues at once, and
// give every buffer back; the admin queue keeps its own receives.
func TestEngineSRQ(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 8192, poolSize: 2 << 20, srq: 256})
	a, cntlid := e.adminConnect(0)
	if a.c.cfg.srq {
		t.Fatal("the admin queue is on the shared receive queue")
	}
	const queues, depth = 3, 16
	conns := []*fconn{a}
	for q := 1; q <= queues; q++ {
		io := e.ioConnect(uint16(q), cntlid, depth)
		if !io.c.cfg.srq || io.c.recvPosted != 0 {
			t.Fatalf("queue %d: srq %v, %d receives of its own", q, io.c.cfg.srq, io.c.recvPosted)
		}
		conns = append(conns, io)
	}
	if got, want := int(e.g.srq.slots.Load()), alignUp(queues*depth, srqChunkSlots); got != want {
		t.Errorf("the shared receive queue has %d buffers for %d queues of %d entries; want %d", got, queues, depth, want)
	}
	var wg sync.WaitGroup
	for q := 1; q <= queues; q++ {
		wg.Add(1)
		go func() { defer wg.Done(); ioOnQueue(t, conns[q], q, depth, 8) }()
	}
	wg.Wait()
	e.closeAll(conns...)
	waitBuffers(t, e)
}

// waitBuffers checks that every buffer of the shared receive queue is posted again.
func waitBuffers(t *testing.T, e *engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.srq.posted() != int(e.g.srq.slots.Load()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the shared receive queue's %d buffers are posted", e.srq.posted(), e.g.srq.slots.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEngineSRQLimit: four queues of 32 entries on a shared receive queue limited to 32
// buffers, all at full depth: hosts that find no buffer retry (RNR), and every command
// completes.
func TestEngineSRQLimit(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 8192, poolSize: 4 << 20, srq: 32})
	a, cntlid := e.adminConnect(0)
	const queues, depth = 4, 32
	conns := []*fconn{a}
	for q := 1; q <= queues; q++ {
		conns = append(conns, e.ioConnect(uint16(q), cntlid, depth))
	}
	if got := e.g.srq.slots.Load(); got != 32 {
		t.Fatalf("%d buffers, want the limit of 32", got)
	}
	var wg sync.WaitGroup
	for q := 1; q <= queues; q++ {
		wg.Add(1)
		go func() { defer wg.Done(); ioOnQueue(t, conns[q], q, depth, 3) }()
	}
	wg.Wait()
	e.closeAll(conns...)
	waitBuffers(t, e)
}

// TestEngineSRQReconnectStorm: queues on a shared receive queue connect, run I/O and
// disconnect over and over (some while their commands are in flight) next to a queue that
// keeps working; the queue never runs out of buffers, the working queue's commands all
// complete, and every buffer comes back.
func TestEngineSRQReconnectStorm(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 8192, poolSize: 4 << 20, srq: 64})
	a, cntlid := e.adminConnect(0)
	steady := e.ioConnect(1, cntlid, 16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ioOnQueue(t, steady, 1, 8, 1)
		}
	}()
	for round := 0; round < 20; round++ {
		var storm []*fconn
		for q := 2; q <= 6; q++ {
			storm = append(storm, e.ioConnect(uint16(q), cntlid, 32))
		}
		var sw sync.WaitGroup
		for k, io := range storm {
			sw.Add(1)
			go func() {
				defer sw.Done()
				if k%2 == 0 {
					ioOnQueue(t, io, k+2, 8, 1)
					return
				}
				// Commands in flight when the host goes away: sent, never waited for.
				for w := 0; w < 4; w++ {
					cmd := io.h.begin()
					r := rw(nvmeproto.OpRead, 1, uint64(w*8), 8)
					r.SGL = cmd.keyedAt(0, 4096)
					if err := cmd.submit(&r, nil); err != nil {
						t.Errorf("sending a read: %v", err)
					}
				}
			}()
		}
		sw.Wait()
		for _, io := range storm {
			io.ep.Disconnect()
			io.c.requestClose(errHostDisconnect)
		}
		for _, io := range storm {
			io.waitDead(t)
		}
	}
	close(stop)
	wg.Wait()
	if got := e.g.srq.slots.Load(); got > 64 {
		t.Errorf("%d buffers after the storm; the limit is 64", got)
	}
	e.closeAll(steady, a)
	waitBuffers(t, e)
	if e.g.srq.want != 0 {
		t.Errorf("the shared receive queue still counts %d entries of gone queues", e.g.srq.want)
	}
}

// rawCapsule returns a command capsule for fc to send raw (fakeEP.hostSend), over and
// over: op of 8 blocks of namespace nsid, its data the first 4 KiB of the host's memory
// through a keyed descriptor. Its CID, 0, is not one fc's host queue tracks: from now on
// the host takes fc's responses without looking at them.
func rawCapsule(fc *fconn, op uint8, nsid uint32) []byte {
	fc.ep.mu.Lock()
	fc.ep.onResp = func([]byte) {}
	fc.ep.mu.Unlock()
	c := rw(op, nsid, 0, 8)
	c.Flags = nvmeproto.PSDTSGL << 6
	c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Address: fc.ep.hostBase, Length: 4096, Key: fc.ep.hostKey}
	capsule := make([]byte, nvmeproto.SQESize)
	c.Marshal(capsule)
	return capsule
}

// TestEngineSRQOverrun: on a shared receive queue nothing stops a host from sending more
// commands than its queue has entries; one that does is disconnected, and every buffer it
// took goes back to the queue.
func TestEngineSRQOverrun(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 8192, srq: 256})
	a, cntlid := e.adminConnect(0)
	const depth = 16
	io := e.ioConnect(1, cntlid, depth)
	// Three idle queues: the shared receive queue grows to 64 buffers, more than queue
	// 1's 2 x depth contexts and depth waiting.
	idle := []*fconn{e.ioConnect(2, cntlid, depth), e.ioConnect(3, cntlid, depth), e.ioConnect(4, cntlid, depth)}
	if got := e.g.srq.slots.Load(); got < 3*depth+1 {
		t.Fatalf("%d buffers: too few to overrun a queue of %d entries", got, depth)
	}
	holdSends(io) // responses never complete: contexts stay taken
	capsule := rawCapsule(io, nvmeproto.OpRead, 2)
	sent := 0
	for ; sent < 4*depth; sent++ { // 2 x depth contexts, depth waiting, then one too many
		// fakeLink.send retries while no buffer is posted (RNR), as the host's device
		// does: a poll group that has not reposted yet is no disconnection.
		if err := (fakeLink{io.ep}).send(capsule); err != nil {
			break // the target disconnected
		}
	}
	io.waitDead(t)
	if sent < 3*depth {
		t.Errorf("disconnected after %d commands; a queue of %d entries may have %d in contexts and waiting", sent, depth, 3*depth)
	}
	e.closeAll(append(idle, a)...)
	waitBuffers(t, e)
}

// TestEngineSRQHeldBuffersOverrun: a host that sends more commands than its queue has
// entries, each keeping its receive buffer (writes whose RDMA READs the fake host does
// not answer), is disconnected once it holds more than its depth of the poll group's
// shared receive buffers, and another queue of the group keeps working. (Counting only
// contexts and capsules waiting for them let it hold three times its depth: every
// buffer of the group here, the other queue's commands finding none.)
func TestEngineSRQHeldBuffersOverrun(t *testing.T) {
	e := newEngine(t, engineOpts{srq: 64})
	a, cntlid := e.adminConnect(0)
	const depth = 32
	hostile := e.ioConnect(1, cntlid, depth)
	honest := e.ioConnect(2, cntlid, depth)
	if got := e.g.srq.slots.Load(); got != 2*depth {
		t.Fatalf("%d receive buffers, want %d", got, 2*depth)
	}
	holdReads(hostile)
	capsule := rawCapsule(hostile, nvmeproto.OpWrite, 1)
	sent := 0
	deadline := time.Now().Add(2 * time.Second)
	for sent < 3*depth && time.Now().Before(deadline) {
		err := hostile.ep.hostSend(capsule)
		if errors.Is(err, errRNR) {
			time.Sleep(time.Millisecond) // no buffer now: the host's device retries
			continue
		}
		if err != nil {
			break // the target disconnected
		}
		sent++
	}
	hostile.waitDead(t)
	if sent < depth+1 {
		t.Errorf("disconnected after %d commands; a queue of %d entries may have that many", sent, depth)
	}
	for i := range 10 {
		c, _ := honest.h.exec(rw(nvmeproto.OpRead, 2, uint64(i), 8), nil, 4096)
		expectOK(t, "the other queue's read", c)
	}
	e.closeAll(honest, a)
	waitBuffers(t, e)
}

// TestEngineSRQFairShare: on a shared receive queue, a host whose flood of 128 KiB reads
// waits for pool buffers (it holds every buffer it gets: its responses never complete)
// must not take the receive buffers with its waiting commands: another queue of the poll
// group keeps getting its commands in, and completes them at once.
func TestEngineSRQFairShare(t *testing.T) {
	e := newEngine(t, engineOpts{hostBytes: 64 * 128 << 10, srq: srqChunkSlots}) // 4 MiB pool, 32 receive buffers
	_, cntlid := e.adminConnect(0)
	hostile := e.ioConnect(1, cntlid, 64)
	honest := e.ioConnect(2, cntlid, 16)
	if !hostile.c.cfg.srq || !honest.c.cfg.srq {
		t.Fatal("the I/O queues are not on the shared receive queue")
	}
	hostileNextToHonest(t, e, hostile, honest, func() {}) // twice the receive buffers too
	e.closeAll(hostile, honest)
	waitBuffers(t, e)
}

// failingSRQ is a receive queue whose PostRecv fails on call failAt (1-based; 0: never),
// and which holds at most capacity receives (0: any number), posting as many of a chain
// as fit, as ibv_post_srq_recv does.
type failingSRQ struct {
	calls, failAt int
	capacity      int
	posted        []rdmacm.RecvWR
}

func (s *failingSRQ) PostRecv(wrs []rdmacm.RecvWR) error {
	if s.calls++; s.calls == s.failAt {
		return errors.New("post failed")
	}
	if s.capacity > 0 && len(s.posted)+len(wrs) > s.capacity {
		fit := s.capacity - len(s.posted)
		s.posted = append(s.posted, wrs[:fit]...)
		return &rdmacm.PostError{Op: "ibv_post_srq_recv", Index: fit, ID: wrs[fit].ID, Errno: syscall.ENOMEM}
	}
	s.posted = append(s.posted, wrs...)
	return nil
}

// TestSharedRecvGrowsInOneRegion: a queue joining takes all the chunks it needs in one
// registered region (one registration per join, not per chunk), every buffer is a distinct
// page-aligned area inside it, and close frees each region once; a post that fails midway
// keeps the chunks already posted (their region stays until close), and one that fails
// first frees the region at once.
func TestSharedRecvGrowsInOneRegion(t *testing.T) {
	const icd = 8192
	f := newFakeFabric()
	var allocs []int
	frees := map[int]int{}
	alloc := func(n int) (region, func() error, error) {
		i := len(allocs)
		allocs = append(allocs, n)
		return f.newRegion(n), func() error { frees[i]++; return nil }, nil
	}
	q := &failingSRQ{}
	s := newSharedRecv(q, icd, 1024, alloc)
	if err := s.reserve(128); err != nil {
		t.Fatal(err)
	}
	cb := srqChunkBytes(icd)
	if len(allocs) != 1 || allocs[0] != 4*cb || s.slots.Load() != 128 || len(q.posted) != 128 {
		t.Fatalf("a queue of 128 entries: regions %v (want one of %d bytes), %d buffers, %d posted", allocs, 4*cb, s.slots.Load(), len(q.posted))
	}
	if err := s.reserve(40); err != nil { // two more chunks: 168 entries round up to 192
		t.Fatal(err)
	}
	if len(allocs) != 2 || allocs[1] != 2*cb || s.slots.Load() != 192 {
		t.Fatalf("another queue of 40 entries: regions %v, %d buffers; want a second region of %d bytes, 192 buffers", allocs, s.slots.Load(), 2*cb)
	}
	seen := map[uintptr]bool{}
	for i := range int(s.slots.Load()) {
		sqe, data := s.buffers(i)
		p := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		if len(sqe) != nvmeproto.SQESize || len(data) != icd || p%pageSize != 0 || seen[p] {
			t.Fatalf("buffer %d: entry %d bytes, data %d bytes at %#x (page aligned, not shared, wanted)", i, len(sqe), len(data), p)
		}
		seen[p] = true
		if w := q.posted[i]; w.SGL[1].Length != icd || int(w.ID) != int(wrID(kindSRQRecv, i, 0, 0)) {
			t.Fatalf("buffer %d: posted as %+v", i, w)
		}
	}
	if err := s.close(); err != nil || frees[0] != 1 || frees[1] != 1 {
		t.Fatalf("close: %v, frees %v; want each region freed once", err, frees)
	}

	// The third chunk's post fails: two chunks stay posted, the reserve goes on with them.
	allocs, frees = nil, map[int]int{}
	q = &failingSRQ{failAt: 3}
	s = newSharedRecv(q, icd, 1024, alloc)
	if err := s.reserve(128); err != nil || s.slots.Load() != 64 || frees[0] != 0 {
		t.Fatalf("post failing at the third chunk: %v, %d buffers, region freed %d times; want nil, 64, 0", err, s.slots.Load(), frees[0])
	}
	s.close()
	if frees[0] != 1 {
		t.Fatalf("close freed the region %d times, want once", frees[0])
	}

	// The device takes part of a chunk (a receive queue holding fewer than the chunks
	// asked of it): the chunk and its region stay, its posted buffers are buffers.
	allocs, frees = nil, map[int]int{}
	q = &failingSRQ{capacity: 40}
	s = newSharedRecv(q, icd, 1024, alloc)
	if err := s.reserve(64); err != nil || s.slots.Load() != 64 || frees[0] != 0 || !s.valid(39) {
		t.Fatalf("a post taken in part: %v, %d buffers, region freed %d times, buffer 39 valid %v; want nil, 64, 0, true",
			err, s.slots.Load(), frees[0], s.valid(39))
	}
	if sqe, _ := s.buffers(39); len(sqe) != nvmeproto.SQESize {
		t.Fatalf("buffer 39 (posted) has an entry of %d bytes", len(sqe))
	}
	s.close()
	if frees[0] != 1 {
		t.Fatalf("close freed the region %d times, want once", frees[0])
	}
	allocs, frees = nil, map[int]int{}
	q = &failingSRQ{capacity: 20}
	s = newSharedRecv(q, icd, 1024, alloc)
	if err := s.reserve(32); err != nil || s.slots.Load() != 32 || frees[0] != 0 {
		t.Fatalf("the first post taken in part: %v, %d buffers, region freed %d times; want nil, 32, 0", err, s.slots.Load(), frees[0])
	}
	s.close()

	// A limit that is not whole chunks is taken down to them: nothing is posted beyond
	// it (a queue made for 1000 receives; devices may hold more, but need not).
	allocs, frees = nil, map[int]int{}
	q = &failingSRQ{capacity: 1000}
	s = newSharedRecv(q, icd, 1000, alloc)
	if err := s.reserve(2048); err != nil || s.slots.Load() != 992 || len(q.posted) != 992 {
		t.Fatalf("limit 1000, 2048 entries: %v, %d buffers, %d posted; want nil, 992, 992", err, s.slots.Load(), len(q.posted))
	}
	s.close()

	// The first post fails: nothing is posted, the region is freed, the reserve fails.
	allocs, frees = nil, map[int]int{}
	q = &failingSRQ{failAt: 1}
	s = newSharedRecv(q, icd, 1024, alloc)
	if err := s.reserve(32); err == nil || s.slots.Load() != 0 || frees[0] != 1 {
		t.Fatalf("first post failing: %v, %d buffers, region freed %d times; want an error, 0, 1", err, s.slots.Load(), frees[0])
	}
}
