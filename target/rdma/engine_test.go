package rdma

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// These tests run the transport engine (poll group, request state machine, buffer pool)
// with the real target core over the fake fabric of fake_test.go.

func TestEngineAdminAndIO(t *testing.T) {
	for _, mode := range []struct {
		name string
		o    engineOpts
	}{
		{"event", engineOpts{icd: 8192}},
		{"spin", engineOpts{icd: 8192, spin: 64}},
		{"busy", engineOpts{icd: 8192, busyPoll: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEngine(t, mode.o)
			a, cntlid := e.adminConnect(0)
			if a.ep.reads.Load() == 0 {
				t.Errorf("the admin Connect data was not fetched by RDMA READ")
			}
			id := a.h.identify(1, 0)
			if got := uint16(id[78]) | uint16(id[79])<<8; got != cntlid {
				t.Errorf("Identify CNTLID %d, Connect returned %d", got, cntlid)
			}
			if sgls := uint32(id[536]) | uint32(id[537])<<8 | uint32(id[538])<<16 | uint32(id[539])<<24; sgls&(1<<2) == 0 {
				t.Errorf("Identify SGLS %#x lacks keyed SGL support", sgls)
			}
			io := e.ioConnect(1, cntlid, 32)

			// Keyed writes and reads of several sizes, with data checked.
			for i, n := range []int{1, 8, 64, 256} { // 512-byte blocks
				data := pattern(n*512, byte(i))
				slba := uint64(i * 1024)
				c, _ := io.h.exec(rw(nvmeproto.OpWrite, 1, slba, n), data, len(data))
				expectOK(t, fmt.Sprintf("write %d blocks", n), c)
				c, got := io.h.exec(rw(nvmeproto.OpRead, 1, slba, n), nil, len(data))
				expectOK(t, fmt.Sprintf("read %d blocks", n), c)
				if !bytes.Equal(got, data) {
					t.Errorf("read %d blocks: data differs from what was written", n)
				}
			}
			// In-capsule write, keyed read back.
			data := pattern(4096, 9)
			expectOK(t, "in-capsule write", io.h.execInline(rw(nvmeproto.OpWrite, 1, 5000, 8), data))
			c, got := io.h.exec(rw(nvmeproto.OpRead, 1, 5000, 8), nil, 4096)
			expectOK(t, "read after in-capsule write", c)
			if !bytes.Equal(got, data) {
				t.Errorf("in-capsule write: read back differs")
			}
			// Null namespace: reads return zeroes into host memory that held garbage.
			c, got = io.h.exec(rw(nvmeproto.OpRead, 2, 0, 8), bytes.Repeat([]byte{0xAB}, 4096), 4096)
			expectOK(t, "null read", c)
			if !bytes.Equal(got, make([]byte, 4096)) {
				t.Errorf("null namespace read returned non-zero data")
			}
			// Errors are reported, the queue keeps working.
			c, _ = io.h.exec(rw(nvmeproto.OpRead, 1, 1<<40, 1), nil, 512)
			if c.Status.Code() != nvmeproto.StatusLBAOutOfRange.Code() {
				t.Errorf("out-of-range read: status %v", c.Status)
			}
			c, _ = io.h.exec(rw(nvmeproto.OpRead, 1, 0, 8), nil, 512) // SGL shorter than NLB
			if c.Status.Code() != nvmeproto.StatusDataSGLLengthInvalid.Code() {
				t.Errorf("short SGL: status %v", c.Status)
			}
			c, _ = io.h.exec(rw(nvmeproto.OpRead, 1, 0, 1), nil, 512)
			expectOK(t, "read after errors", c)
			e.closeAll(io, a)
		})
	}
}

// TestEngineConcurrentIO runs many commands at once on several queues and checks every
// byte.
func TestEngineConcurrentIO(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 8192, poolSize: 1 << 20})
	a, cntlid := e.adminConnect(0)
	const queues, depth, perQueue = 3, 16, 60
	var wg sync.WaitGroup
	conns := []*fconn{a}
	for q := 1; q <= queues; q++ {
		io := e.ioConnect(uint16(q), cntlid, depth)
		conns = append(conns, io)
		for w := 0; w < depth-1; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perQueue/(depth-1)+1; i++ {
					n := []int{1, 8, 32, 256}[(w+i)%4]
					slba := uint64(((q*depth+w)*8 + i%8) * 256)
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
	}
	wg.Wait()
	e.closeAll(conns...)
}

// TestEnginePoolShortage: a pool with room for one largest transfer; many of them at
// once wait their turn and all succeed.
func TestEnginePoolShortage(t *testing.T) {
	e := newEngine(t, engineOpts{poolSize: 128 << 10, maxIO: 128 << 10})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	const n = 10
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := pattern(128<<10, byte(i))
			c, _ := io.h.exec(rw(nvmeproto.OpWrite, 1, uint64(i*256), 256), data, len(data))
			expectOK(t, "write", c)
		}()
	}
	wg.Wait()
	// A read's buffer stays taken until its response's SEND completes: hold those
	// completions for a while so that the reads pile up behind the single buffer.
	io.ep.mu.Lock()
	io.ep.holdSend = true
	io.ep.mu.Unlock()
	stop := make(chan struct{})
	released := make(chan struct{})
	go func() {
		defer close(released)
		for {
			select {
			case <-stop:
				io.ep.releaseHeld()
				return
			case <-time.After(20 * time.Millisecond):
				io.ep.deliverHeld(false)
			}
		}
	}()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, got := io.h.exec(rw(nvmeproto.OpRead, 1, uint64(i*256), 256), nil, 128<<10)
			expectOK(t, "read", c)
			if !bytes.Equal(got, pattern(128<<10, byte(i))) {
				t.Errorf("block %d: data differs", i)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-released
	if waits := e.g.stats.bufWaits.Load(); waits == 0 {
		t.Errorf("no command waited for a buffer: the test did not exercise the shortage")
	}
	e.closeAll(io, a)
}

// TestEngineReadCredits: RDMA READs beyond the negotiated initiator depth wait.
func TestEngineReadCredits(t *testing.T) {
	e := newEngine(t, engineOpts{ird: 2, maxMsg: 4096})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	maxOut := writesHoldingReads(t, io, 6, 16<<10) // 4 READs each (max message 4 KiB)
	if maxOut > 2 {
		t.Errorf("%d RDMA READs were outstanding at once; the initiator depth is 2", maxOut)
	}
	if maxOut == 0 {
		t.Errorf("no READs were held: the test did not run")
	}
}

// writesHoldingReads sends n writes of size bytes at once (write i: a pattern seeded i at
// LBA i*64) while the fake host holds the target's RDMA READ completions, releasing one
// at a time after a pause in which the writes pile up; then reads each back and checks
// it. It returns the most READs that were outstanding at once.
func writesHoldingReads(t *testing.T, io *fconn, n, size int) int {
	t.Helper()
	holdReads(io)
	var done atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := pattern(size, byte(i))
			c, _ := io.h.exec(rw(nvmeproto.OpWrite, 1, uint64(i*64), size/512), data, len(data))
			expectOK(t, "write", c)
			done.Add(1)
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	// The pause: releasing starts once the held READs have stopped growing for a while, so
	// that a write goroutine the scheduler starts late does not see an earlier READ released
	// before its own is posted.
	for last, since := -1, time.Now(); done.Load() < int32(n) && time.Now().Before(deadline); {
		io.ep.mu.Lock()
		held := len(io.ep.heldReads)
		io.ep.mu.Unlock()
		if held != last {
			last, since = held, time.Now()
		} else if time.Since(since) >= 100*time.Millisecond {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	for done.Load() < int32(n) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		io.ep.releaseRead()
	}
	wg.Wait()
	io.ep.mu.Lock()
	maxOut := io.ep.maxHeldRd
	io.ep.mu.Unlock()
	for i := range n {
		c, got := io.h.exec(rw(nvmeproto.OpRead, 1, uint64(i*64), size/512), nil, size)
		expectOK(t, "read", c)
		if !bytes.Equal(got, pattern(size, byte(i))) {
			t.Errorf("write %d of %d bytes (its READs held, then read back): data differs", i, size)
		}
	}
	return maxOut
}

// TestEngineSendQueueShortage: responses wait for send queue slots when the send
// completions lag.
func TestEngineSendQueueShortage(t *testing.T) {
	e := newEngine(t, engineOpts{})
	_, cntlid := e.adminConnect(0)
	e.o.sqSize = 4 // room for two read responses (WRITE + SEND each)
	io := e.ioConnect(1, cntlid, 16)
	io.ep.mu.Lock()
	io.ep.holdSend = true
	io.ep.mu.Unlock()
	const n = 8
	var wg sync.WaitGroup
	var done atomic.Int32
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := io.h.exec(rw(nvmeproto.OpRead, 2, uint64(i), 8), nil, 4096)
			expectOK(t, "read", c)
			done.Add(1)
		}()
	}
	// With SEND completions held only the first responses go out.
	time.Sleep(200 * time.Millisecond)
	if d := done.Load(); d > 2 {
		t.Errorf("%d commands completed with room for 2 responses in the send queue", d)
	}
	io.ep.releaseHeld()
	wg.Wait()
	if e.g.stats.sendWaits.Load() == 0 {
		t.Errorf("no response waited for send queue slots")
	}
}

// TestEngineDisconnectFreesResources: a host that disconnects with commands in flight
// gets every resource of its connections released, and other hosts keep working.
func TestEngineDisconnectFreesResources(t *testing.T) {
	e := newEngine(t, engineOpts{})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	other, cntlid2 := e.adminConnect(0)
	otherIO := e.ioConnect(1, cntlid2, 16)

	// Hold READ completions so that writes are in flight when the host goes.
	holdReads(io)
	for i := 0; i < 4; i++ {
		cmd := io.h.begin()
		w := rw(nvmeproto.OpWrite, 1, uint64(i*8), 8)
		w.SGL = cmd.keyedAt(0, 4096)
		if err := cmd.submit(&w, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	// The host goes away: the QP breaks and the CM reports DISCONNECTED.
	io.ep.Disconnect()
	io.c.requestClose(errHostDisconnect)
	io.waitDead(t)
	// The admin queue stays (the host would reconnect the I/O queue); its own loss ends
	// the controller.
	a.ep.Disconnect()
	a.c.requestClose(errHostDisconnect)
	a.waitDead(t)

	c, got := otherIO.h.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
	expectOK(t, "the other host's read", c)
	if len(got) != 4096 {
		t.Fatalf("short read")
	}
	if n := e.g.nconns.Load(); n != 2 {
		t.Errorf("%d connections in the poll group, want the other host's 2", n)
	}
	e.closeAll(otherIO, other)
}

// TestEngineKeepAliveExpiry: a host that vanishes silently is detected by keep-alive and
// its connections are released.
func TestEngineKeepAliveExpiry(t *testing.T) {
	e := newEngine(t, engineOpts{})
	a, cntlid := e.adminConnect(1000)
	io := e.ioConnect(1, cntlid, 16)
	start := time.Now()
	a.waitDead(t)
	io.waitDead(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("connections released %v after the host went silent (KATO 1 s)", d)
	}
	if n := e.g.nconns.Load(); n != 0 {
		t.Errorf("%d connections left", n)
	}
}

// TestEngineForcedDrain: a device that never flushes a disconnected QP's requests does
// not keep the connection forever.
func TestEngineForcedDrain(t *testing.T) {
	old := drainTimeout
	drainTimeout = 300 * time.Millisecond
	defer func() { drainTimeout = old }()
	e := newEngine(t, engineOpts{})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	io.ep.mu.Lock()
	io.ep.noFlush = true
	io.ep.holdReads = true
	io.ep.mu.Unlock()
	cmd := io.h.begin()
	w := rw(nvmeproto.OpWrite, 1, 0, 8)
	w.SGL = cmd.keyedAt(0, 4096)
	if err := cmd.submit(&w, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	io.c.requestClose(errHostDisconnect)
	io.waitDead(t)
	a.c.requestClose(errHostDisconnect)
	a.waitDead(t)
	if free, total, _ := e.pool.stats(); free != total {
		t.Errorf("pool: %d of %d pages free", free, total)
	}
}

// TestEngineBadRemoteKey: an RDMA READ the host's memory refuses breaks the connection
// (as on hardware), which is then released.
func TestEngineBadRemoteKey(t *testing.T) {
	e := newEngine(t, engineOpts{})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	cmd := io.h.begin()
	w := rw(nvmeproto.OpWrite, 1, 0, 8)
	w.SGL = cmd.keyedAt(0, 4096)
	w.SGL.Key++ // wrong rkey
	if err := cmd.submit(&w, nil); err != nil {
		t.Fatal(err)
	}
	io.waitDead(t)
}

// TestEngineShortCapsule: a capsule shorter than an SQE ends the connection.
func TestEngineShortCapsule(t *testing.T) {
	e := newEngine(t, engineOpts{})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	if err := io.ep.hostSend(make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	io.waitDead(t)
}

// TestEngineSGLList: a Last Segment list of keyed descriptors in the capsule, each
// moved with its own RDMA READs/WRITEs.
func TestEngineSGLList(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 8192, maxMsg: 4096})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	data := pattern(24<<10, 3)
	run := func(op uint8, in []byte) []byte {
		cmd := io.h.begin()
		copy(cmd.buf, in[:8<<10])
		copy(cmd.buf[32<<10:], in[8<<10:])
		list := make([]byte, 32)
		d1 := cmd.keyedAt(0, 8<<10)
		d2 := cmd.keyedAt(32<<10, 16<<10)
		d1.Marshal(list)
		d2.Marshal(list[16:])
		c := rw(op, 1, 100, 48)
		c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeLastSegment, Subtype: nvmeproto.SGLSubtypeOffset, Length: 32}
		if err := cmd.submit(&c, list); err != nil {
			t.Fatal(err)
		}
		cqe, ok := cmd.wait(hostTimeout)
		if !ok {
			t.Fatal("no completion")
		}
		expectOK(t, "SGL list command", cqe)
		defer cmd.release()
		return append(bytes.Clone(cmd.buf[:8<<10]), cmd.buf[32<<10:48<<10]...)
	}
	run(nvmeproto.OpWrite, data)
	if got := run(nvmeproto.OpRead, make([]byte, 24<<10)); !bytes.Equal(got, data) {
		t.Errorf("data moved through a two-descriptor list differs")
	}
}

// TestEngineBackpressureOnContexts: the host may send its next command as soon as it
// has a response, before the target saw the SEND complete; the command waits for a
// free context instead of failing.
func TestEngineBackpressureOnContexts(t *testing.T) {
	e := newEngine(t, engineOpts{})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 4) // 8 contexts
	io.ep.mu.Lock()
	io.ep.holdSend = true
	io.ep.mu.Unlock()
	// Every context ends up waiting for a SEND completion; then the completions come.
	go func() { time.Sleep(300 * time.Millisecond); io.ep.releaseHeld() }()
	for i := 0; i < 12; i++ { // more than the contexts, one at a time
		// Flushes: one send queue slot per response, so contexts run out first.
		c, _ := io.h.exec(nvmeproto.Command{Opcode: nvmeproto.OpFlush, NSID: 2}, nil, 0)
		expectOK(t, fmt.Sprintf("flush %d", i), c)
	}
	if e.g.stats.ctxWaits.Load() == 0 {
		t.Errorf("no command waited for a context")
	}
}

// TestEngineAllocations checks that the steady-state I/O path allocates nothing: a
// 4 KiB read and write on a memory namespace, through the whole engine, per iteration.
func TestEngineAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations")
	}
	e := newEngine(t, engineOpts{busyPoll: true, nss: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	var got atomic.Int64
	io.ep.onResp = func([]byte) { got.Add(1) }
	mk := func(op uint8) []byte {
		c := rw(op, 1, 8, 8)
		c.Flags = nvmeproto.PSDTSGL << 6
		c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Address: io.ep.hostBase, Length: 4096, Key: io.ep.hostKey}
		b := make([]byte, 64)
		c.Marshal(b)
		return b
	}
	wr, rd := mk(nvmeproto.OpWrite), mk(nvmeproto.OpRead)
	one := func(capsule []byte) {
		want := got.Load() + 1
		for io.ep.hostSend(capsule) != nil {
			runtime.Gosched()
		}
		for got.Load() < want {
			runtime.Gosched()
		}
	}
	for i := 0; i < 100; i++ { // warm up: lazily bound callbacks, pool lists
		one(wr)
		one(rd)
	}
	allocs := testing.AllocsPerRun(200, func() {
		one(wr)
		one(rd)
	})
	if allocs > 0 {
		t.Errorf("%.2f allocations per write+read pair; want 0", allocs)
	}
}

// TestEngineAdminNotBehindIO: with the pool taken by I/O and more I/O waiting for it,
// admin commands (Identify needs a buffer, Keep Alive none) still complete at once.
func TestEngineAdminNotBehindIO(t *testing.T) {
	e := newEngine(t, engineOpts{poolSize: 256 << 10, maxIO: 128 << 10})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	io.ep.mu.Lock()
	io.ep.holdSend = true // read buffers stay taken until their SEND completes
	io.ep.mu.Unlock()
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := io.h.exec(rw(nvmeproto.OpRead, 2, uint64(i*256), 256), nil, 128<<10)
			expectOK(t, "read", c)
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.g.stats.bufWaits.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e.g.stats.bufWaits.Load() == 0 {
		t.Fatalf("the I/O did not exhaust the pool")
	}
	start := time.Now()
	a.h.identify(1, 0)
	c, _ := a.h.exec(nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive}, nil, 0)
	expectOK(t, "keep alive", c)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("admin commands took %v behind the I/O", d)
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				io.ep.deliverHeld(false)
			}
		}
	}()
	wg.Wait()
	close(stop)
	io.ep.releaseHeld()
	e.closeAll(io, a)
}

// BenchmarkEngineReadWrite4K: a 4 KiB write then a 4 KiB read (keyed SGL, memory
// namespace) per iteration through the whole engine on the fake fabric — receive, Begin,
// pool buffer, RDMA READ, backend, RDMA WRITE, SEND — one command at a time. It measures
// the engine's per-command cost without a device. The poll group sleeps when idle and the
// host waits for each response on a channel, so nothing spins: cpu-ns/op (the process's
// CPU time per iteration) is the engine's work plus two wake-ups, and stays comparable on
// a loaded machine where ns/op does not.
func BenchmarkEngineReadWrite4K(b *testing.B) {
	e := newEngine(b, engineOpts{nss: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	resp := make(chan struct{}, 1)
	io.ep.onResp = func([]byte) { resp <- struct{}{} }
	mk := func(op uint8) []byte {
		c := rw(op, 1, 8, 8)
		c.Flags = nvmeproto.PSDTSGL << 6
		c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Address: io.ep.hostBase, Length: 4096, Key: io.ep.hostKey}
		b := make([]byte, 64)
		c.Marshal(b)
		return b
	}
	wr, rd := mk(nvmeproto.OpWrite), mk(nvmeproto.OpRead)
	one := func(capsule []byte) {
		for io.ep.hostSend(capsule) != nil {
			runtime.Gosched()
		}
		<-resp
	}
	for i := 0; i < 100; i++ {
		one(wr)
		one(rd)
	}
	b.ReportAllocs()
	b.SetBytes(2 * 4096)
	cpu0 := testutil.CPUTime()
	b.ResetTimer()
	for b.Loop() {
		one(wr)
		one(rd)
	}
	testutil.ReportCPU(b, cpu0)
}

// TestEngineArmsOnce: a sleeping poll group that a wake-up (not a completion) ends does
// not arm its completion queue again (arming is a system call); a completion's event
// makes the next sleep arm.
func TestEngineArmsOnce(t *testing.T) {
	e := newEngine(t, engineOpts{})
	a, _ := e.adminConnect(0)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	sleeping := func() bool { return e.g.sleeping.Load() }
	// wake wakes the group (no completion, no event) and waits until it sleeps again: past
	// its arm, which comes before the sleep is counted.
	wake := func() {
		s := e.g.stats.sleeps.Load()
		e.g.kick()
		waitFor("the group to sleep again", func() bool { return e.g.stats.sleeps.Load() > s && sleeping() })
	}
	waitFor("the group to sleep", sleeping)
	// A completion of the connect that lands between a sleep's arm and its last look at
	// the queue raises an event that a later sleep consumes, and the sleep after that
	// arms again: once. Settle first; a group that arms on every wake-up never settles.
	arms := e.cq.arms.Load()
	for try := 0; ; try++ {
		wake()
		got := e.cq.arms.Load()
		if got == arms {
			break
		}
		if try == 3 {
			t.Fatalf("the group armed its queue again on each of 4 wake-ups without a completion")
		}
		arms = got
	}
	for i := 0; i < 5; i++ {
		wake()
	}
	if got := e.cq.arms.Load(); got != arms {
		t.Errorf("%d more arms after 5 wake-ups without a completion; want none", got-arms)
	}
	// A command: its completions fire the armed event; the group arms again before the next sleep.
	c := a.h.propGet(nvmeproto.PropVS, false)
	if c == 0 {
		t.Fatal("no version from the admin queue")
	}
	waitFor("the group to arm again and sleep", func() bool { return e.cq.arms.Load() > arms && sleeping() })
	e.closeAll(a)
}

// TestEngineContextsOnDemand: a connection allocates request contexts as its commands
// need them, a chunk at a time, not its full depth's at connect time.
func TestEngineContextsOnDemand(t *testing.T) {
	e := newEngine(t, engineOpts{})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 128)
	if io.c.nctx > ctxChunk {
		t.Fatalf("%d contexts allocated after the connect (1 command); want at most %d", io.c.nctx, ctxChunk)
	}
	var wg sync.WaitGroup
	for w := 0; w < 40; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := io.h.exec(rw(nvmeproto.OpRead, 2, uint64(w*8), 8), nil, 4096)
			expectOK(t, "read", c)
		}()
	}
	wg.Wait()
	if io.c.nctx > 2*len(io.c.ctxs) || io.c.nctx%ctxChunk != 0 && io.c.nctx != len(io.c.ctxs) {
		t.Errorf("%d contexts allocated of %d", io.c.nctx, len(io.c.ctxs))
	}
	e.closeAll(io, a)
}
