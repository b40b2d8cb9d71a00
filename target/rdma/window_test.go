package rdma

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// closeCheckWire closes the connections and checks that their data on the wire was all
// accounted for (read once the group is done with them).
func closeCheckWire(e *engine, fcs ...*fconn) {
	e.t.Helper()
	e.closeAll(fcs...)
	for _, fc := range fcs {
		if fc.c.wireOut != 0 {
			e.t.Errorf("closed queue %d counts %d bytes of RDMA data on the wire, want 0", fc.c.cfg.qid, fc.c.wireOut)
		}
	}
}

// readsWithSendsHeld sends n reads of nlb blocks of the null namespace on fc while the
// host holds its SEND completions (it sees a response as it is posted), and reports how
// many were answered once want were, or after 10 s, and 200 ms more for any past want.
// Then it lets the completions through and waits for all n.
func readsWithSendsHeld(t *testing.T, fc *fconn, n, nlb, want int) int {
	t.Helper()
	holdSends(fc)
	var done atomic.Int32
	wg := flood(t, fc, n, nlb, &done)
	deadline := time.Now().Add(10 * time.Second)
	for done.Load() < int32(want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	answered := int(done.Load())
	for done.Load() < int32(n) {
		fc.ep.deliverOne()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	return answered
}

// readBlock reads block slba of the null namespace on fc.
func readBlock(t testing.TB, fc *fconn, slba uint64) {
	t.Helper()
	c, _ := fc.h.exec(rw(nvmeproto.OpRead, 2, slba, 1), nil, 512)
	expectOK(t, "read", c)
}

// contender connects a second controller, with one I/O queue that reads a block, so that
// the group's queues of other controllers are held to their windows (group.contended) for
// the next soloRounds rounds with work; the tests that use it do fewer. It returns the
// controller's queues, to close.
func contender(e *engine) []*fconn {
	e.t.Helper()
	admin, cntlid := e.adminConnect(0)
	q := e.ioConnect(1, cntlid, 4)
	readBlock(e.t, q, 0)
	return []*fconn{admin, q}
}

// TestEngineDataWindowWrites: while another controller's queue contends, a queue's
// read responses put no more than its window of RDMA WRITE data on the wire; the rest
// wait for the earlier ones' SENDs to complete, and all complete once they do.
func TestEngineDataWindowWrites(t *testing.T) {
	e := newEngine(t, engineOpts{window: 128 << 10})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 32)
	other := contender(e)
	// 16 reads of 64 KiB: 1 MiB.
	if d := readsWithSendsHeld(t, io, 16, 128, 2); d != 2 {
		t.Errorf("%d of 16 64 KiB reads answered with their SENDs held, want 2 (a 128 KiB window)", d)
	}
	if e.g.stats.sendWaits.Load() == 0 {
		t.Errorf("no response waited for the window")
	}
	closeCheckWire(e, append(other, io)...)
}

// TestEngineDataWindowReads: while another controller's queue contends, a queue's writes
// put no more than its window of RDMA READs on the wire, below its READ credits; the data
// arrives intact.
func TestEngineDataWindowReads(t *testing.T) {
	e := newEngine(t, engineOpts{window: 64 << 10, ird: 8})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	other := contender(e)
	maxOut := writesHoldingReads(t, io, 8, 32<<10) // one READ each
	if maxOut != 2 {
		t.Errorf("%d 32 KiB RDMA READs were outstanding at most, want 2 (a 64 KiB window, 8 READ credits)", maxOut)
	}
	closeCheckWire(e, append(other, io)...)
}

// TestEngineDataWindowSolo: a queue with no other controller's queue in its poll group
// may have soloWindows windows of data on the wire, in both directions, whatever its own
// controller's other queues do; a command of another controller's queue holds it to one
// window again, until that controller has sent nothing for soloRounds rounds with work.
func TestEngineDataWindowSolo(t *testing.T) {
	t.Run("reads", func(t *testing.T) {
		e := newEngine(t, engineOpts{window: 64 << 10})
		_, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 32)
		sibling := e.ioConnect(2, cntlid, 4) // the same controller's: no contender
		readBlock(t, sibling, 0)
		// 24 reads of 32 KiB (768 KiB): 16 fit in 8 windows of 64 KiB.
		if d := readsWithSendsHeld(t, io, 24, 64, 16); d != 16 {
			t.Errorf("alone: %d of 24 32 KiB reads answered with their SENDs held, want 16 (8 windows of 64 KiB)", d)
		}
		io.ep.releaseHeld()
		other := contender(e)
		if d := readsWithSendsHeld(t, io, 24, 64, 2); d != 2 {
			t.Errorf("next to a contender: %d of 24 32 KiB reads answered with their SENDs held, want 2 (a 64 KiB window)", d)
		}
		io.ep.releaseHeld()
		// Rounds with work on io alone: the contender's mark ages out.
		for i := range soloRounds + 1 {
			readBlock(t, io, uint64(i))
		}
		if d := readsWithSendsHeld(t, io, 24, 64, 16); d != 16 {
			t.Errorf("alone again: %d of 24 32 KiB reads answered with their SENDs held, want 16 (8 windows of 64 KiB)", d)
		}
		closeCheckWire(e, append(other, io, sibling)...)
	})
	t.Run("writes", func(t *testing.T) {
		e := newEngine(t, engineOpts{window: 16 << 10, ird: 16})
		_, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 16)
		// 12 writes of 16 KiB, one READ each: 8 fit in 8 windows of 16 KiB.
		if maxOut := writesHoldingReads(t, io, 12, 16<<10); maxOut != 8 {
			t.Errorf("alone: %d 16 KiB RDMA READs were outstanding at most, want 8 (8 windows of 16 KiB, 16 READ credits)", maxOut)
		}
		closeCheckWire(e, io)
	})
}

// TestGroupContended: the two controllers that last had a command arrive contend for the
// other controllers' windows for soloRounds rounds with work; a controller never contends
// with itself, and a queue before Connect (nil) marks nothing.
func TestGroupContended(t *testing.T) {
	var g group
	a, b, c := new(int), new(int), new(int) // three controllers
	g.markCommand(nil)
	if g.contended(a) || g.contended(nil) {
		t.Fatal("an empty group contends")
	}
	g.markCommand(a)
	if g.contended(a) {
		t.Error("a controller contends with itself")
	}
	if !g.contended(b) {
		t.Error("b is not held back for a's fresh command")
	}
	g.markCommand(b)
	g.markCommand(b)
	if !g.contended(a) || !g.contended(b) || !g.contended(c) {
		t.Error("a and b, both fresh, do not contend for each other and for c")
	}
	g.workRounds += soloRounds - 1
	g.markCommand(a) // b's mark is soloRounds-1 old, a's fresh
	if !g.contended(a) {
		t.Error("a is not held back for b's command soloRounds-1 rounds ago")
	}
	g.workRounds++
	if g.contended(a) {
		t.Error("a is held back for b's command soloRounds rounds ago")
	}
	if !g.contended(b) || !g.contended(c) {
		t.Error("b or c is not held back for a's fresh command")
	}
}

// TestEngineDataWindowLargeTransferAlone: a transfer larger than the window (and than
// soloWindows of it) goes on its own, in both directions, and small ones keep going
// around it.
func TestEngineDataWindowLargeTransferAlone(t *testing.T) {
	e := newEngine(t, engineOpts{window: 8 << 10})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 20 {
				slba := uint64(i*8192 + k*256) // 20 × 128 KiB per client, apart
				data := pattern(128<<10, byte(i+k))
				if i%2 == 1 { // small ones between
					data = data[:4096]
				}
				nlb := len(data) / 512
				c, _ := io.h.exec(rw(nvmeproto.OpWrite, 1, slba, nlb), data, len(data))
				expectOK(t, "write", c)
				c, got := io.h.exec(rw(nvmeproto.OpRead, 1, slba, nlb), nil, len(data))
				expectOK(t, "read", c)
				if !bytes.Equal(got, data) {
					t.Errorf("queue client %d, round %d: %d bytes read back differ", i, k, len(data))
					return
				}
			}
		}()
	}
	wg.Wait()
	closeCheckWire(e, io)
}

// TestEngineDataWindowPageTransfers: transfers of at most a page are not counted in the
// window, in either direction: next to another controller's queue, 40 reads of 4 KiB all
// get their responses posted with their SENDs held under a 16 KiB window (past the first
// 15, which go unsignaled, every response is signaled and would count), and 8 writes of
// 4 KiB have all their RDMA READs out at once under an 8 KiB one (their READ credits are
// the bound).
func TestEngineDataWindowPageTransfers(t *testing.T) {
	t.Run("reads", func(t *testing.T) {
		e := newEngine(t, engineOpts{window: 16 << 10})
		_, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 64)
		other := contender(e)
		if d := readsWithSendsHeld(t, io, 40, 8, 40); d != 40 { // 40 reads of 4 KiB
			t.Errorf("%d of 40 4 KiB reads answered with their SENDs held, want all 40 (page-sized transfers are outside the 16 KiB window)", d)
		}
		closeCheckWire(e, append(other, io)...)
	})
	t.Run("writes", func(t *testing.T) {
		e := newEngine(t, engineOpts{window: 8 << 10, ird: 8})
		_, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 16)
		other := contender(e)
		if maxOut := writesHoldingReads(t, io, 8, 4096); maxOut != 8 {
			t.Errorf("%d 4 KiB RDMA READs were outstanding at most, want 8 (8 READ credits; page-sized transfers are outside the 8 KiB window)", maxOut)
		}
		closeCheckWire(e, append(other, io)...)
	})
}

// TestEngineDataWindowWriteNotStarvedByReads: on a queue whose large reads keep the
// window full and more of their responses waiting, a write that arrives takes the window
// in its turn (its RDMA READ after the responses that were waiting before it), not only
// once no read response waits: requests take the window in the order they started to
// wait for it, across both directions. (The responses' completions used to let the next waiting
// response in first, and a write waited for as long as the reads went on: a host times
// it out after 30 s.)
func TestEngineDataWindowWriteNotStarvedByReads(t *testing.T) {
	e := newEngine(t, engineOpts{window: 32 << 10})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 32)
	holdSends(io)
	var done atomic.Int32
	wgs := []*sync.WaitGroup{flood(t, io, 20, 64, &done)} // 20 reads of 32 KiB: 8 windows' worth, 12 waiting
	deadline := time.Now().Add(10 * time.Second)
	for done.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	written := make(chan nvmeproto.Completion, 1)
	go func() {
		c, _ := io.h.exec(rw(nvmeproto.OpWrite, 1, 0, 64), pattern(32<<10, 5), 32<<10)
		written <- c
	}()
	time.Sleep(50 * time.Millisecond) // the write waits for the window
	delivered := 0
	for ; delivered < 60; delivered++ {
		select {
		case c := <-written:
			expectOK(t, "the write", c)
			// 12 responses waited before its READ, and the responses that queued while it
			// waited go before its own (~12 more): a bound, where it used to be none.
			if delivered > 40 {
				t.Errorf("the write waited for %d read responses to complete", delivered)
			}
			t.Logf("the write completed after %d read responses", delivered)
			delivered = -1
		default:
		}
		if delivered < 0 {
			break
		}
		io.ep.deliverOne()                            // one read's response completes,
		wgs = append(wgs, flood(t, io, 1, 64, &done)) // and the host sends another read
		time.Sleep(2 * time.Millisecond)
	}
	if delivered >= 0 {
		t.Errorf("the write still waits after %d read responses completed, with reads going on", delivered)
	}
	io.ep.releaseHeld()
	for _, wg := range wgs {
		wg.Wait()
	}
	if delivered >= 0 {
		<-written
	}
	closeCheckWire(e, io)
}
