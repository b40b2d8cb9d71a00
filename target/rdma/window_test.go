package rdma

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// closeCheckWire closes the connection and checks that its data on the wire was all
// accounted for (read once the group is done with it).
func closeCheckWire(e *engine, fc *fconn) {
	e.t.Helper()
	e.closeAll(fc)
	if fc.c.wireOut != 0 {
		e.t.Errorf("the closed connection counts %d bytes of RDMA data on the wire, want 0", fc.c.wireOut)
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

// TestEngineDataWindowWrites: a queue's read responses put no more than its window of
// RDMA WRITE data on the wire; the rest wait for the earlier ones' SENDs to complete, and
// all complete once they do.
func TestEngineDataWindowWrites(t *testing.T) {
	e := newEngine(t, engineOpts{window: 128 << 10})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 32)
	// 16 reads of 64 KiB: 1 MiB.
	if d := readsWithSendsHeld(t, io, 16, 128, 2); d != 2 {
		t.Errorf("%d of 16 64 KiB reads answered with their SENDs held, want 2 (a 128 KiB window)", d)
	}
	if e.g.stats.sendWaits.Load() == 0 {
		t.Errorf("no response waited for the window")
	}
	closeCheckWire(e, io)
}

// TestEngineDataWindowReads: a queue's writes put no more than its window of RDMA READs
// on the wire, below its READ credits; the data arrives intact.
func TestEngineDataWindowReads(t *testing.T) {
	e := newEngine(t, engineOpts{window: 64 << 10, ird: 8})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	maxOut := writesHoldingReads(t, io, 8, 32<<10) // one READ each
	if maxOut != 2 {
		t.Errorf("%d 32 KiB RDMA READs were outstanding at most, want 2 (a 64 KiB window, 8 READ credits)", maxOut)
	}
	closeCheckWire(e, io)
}

// TestEngineDataWindowLargeTransferAlone: a transfer larger than the window goes on its
// own, in both directions, and small ones keep going around it.
func TestEngineDataWindowLargeTransferAlone(t *testing.T) {
	e := newEngine(t, engineOpts{window: 16 << 10})
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
// window, in either direction: 40 reads of 4 KiB all get their responses posted with
// their SENDs held under a 16 KiB window (past the first 15, which go unsignaled, every
// response is signaled and would count), and 8 writes of 4 KiB have all their RDMA READs
// out at once under an 8 KiB one (their READ credits are the bound).
func TestEngineDataWindowPageTransfers(t *testing.T) {
	t.Run("reads", func(t *testing.T) {
		e := newEngine(t, engineOpts{window: 16 << 10})
		_, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 64)
		if d := readsWithSendsHeld(t, io, 40, 8, 40); d != 40 { // 40 reads of 4 KiB
			t.Errorf("%d of 40 4 KiB reads answered with their SENDs held, want all 40 (page-sized transfers are outside the 16 KiB window)", d)
		}
		closeCheckWire(e, io)
	})
	t.Run("writes", func(t *testing.T) {
		e := newEngine(t, engineOpts{window: 8 << 10, ird: 8})
		_, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 16)
		if maxOut := writesHoldingReads(t, io, 8, 4096); maxOut != 8 {
			t.Errorf("%d 4 KiB RDMA READs were outstanding at most, want 8 (8 READ credits; page-sized transfers are outside the 8 KiB window)", maxOut)
		}
		closeCheckWire(e, io)
	})
}
