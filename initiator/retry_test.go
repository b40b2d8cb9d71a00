package initiator_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// faults sits between the initiator and the loop target of one controller: it answers
// the commands match selects with the statuses in fail (the last one for ever when
// forever is set) instead of passing them on, records every matched attempt's command
// ID, reports crdt as Identify Controller CRDT1..3, and keeps the data of the last Set
// Features Host Behavior Support.
type faults struct {
	crdt [3]uint16

	mu           sync.Mutex
	match        func(*nvmeproto.Command) bool
	fail         []nvmeproto.Status
	forever      bool
	cids         []uint16
	sentAt       []time.Time
	hostBehavior []byte
}

// inject arms the faults for the commands match selects.
func (f *faults) inject(match func(*nvmeproto.Command) bool, forever bool, fail ...nvmeproto.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.match, f.fail, f.forever, f.cids, f.sentAt = match, fail, forever, nil, nil
}

// again re-arms the faults with one failure of status st for the commands already
// selected, reusing the slices: it allocates nothing once they have grown.
func (f *faults) again(st nvmeproto.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.forever, f.cids, f.sentAt = append(f.fail[:0], st), false, f.cids[:0], f.sentAt[:0]
}

// attempts returns the command IDs and send times of the matched commands so far.
func (f *faults) attempts() ([]uint16, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint16(nil), f.cids...), append([]time.Time(nil), f.sentAt...)
}

type faultConn struct {
	initiator.LoopConn
	f *faults
}

func (c faultConn) Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error {
	f := c.f
	switch {
	case cmd.Opcode == nvmeproto.OpIdentify && nvmeproto.CNS(cmd.CDW10) == nvmeproto.CNSController && !cmd.IsFabrics():
		off := int(cmd.SGL.Address)
		inner := done
		done = func(cqe nvmeproto.Completion) {
			for i, v := range f.crdt {
				binary.LittleEndian.PutUint16(data[off+128+2*i:], v)
			}
			inner(cqe)
		}
	case cmd.Opcode == nvmeproto.OpSetFeatures && nvmeproto.FID(cmd.CDW10) == nvmeproto.FIDHostBehaviorSupport:
		off := int(cmd.SGL.Address)
		f.mu.Lock()
		f.hostBehavior = append([]byte(nil), data[off:off+nvmeproto.HostBehaviorSize]...)
		f.mu.Unlock()
	}
	f.mu.Lock()
	if f.match != nil && f.match(cmd) {
		f.cids = append(f.cids, cmd.CID)
		f.sentAt = append(f.sentAt, time.Now())
		if len(f.fail) > 0 {
			st := f.fail[0]
			if len(f.fail) > 1 || !f.forever {
				f.fail = f.fail[1:]
			}
			f.mu.Unlock()
			done(nvmeproto.Completion{CID: cmd.CID, Status: st})
			return nil
		}
	}
	f.mu.Unlock()
	return c.LoopConn.Submit(cmd, data, done)
}

// dialFaults connects to e's target through faults reporting crdt.
func (e *env) dialFaults(t *testing.T, crdt [3]uint16, mut func(*initiator.Options)) (*initiator.Controller, *faults) {
	t.Helper()
	f := &faults{crdt: crdt}
	c := e.dial(t, func(o *initiator.Options) {
		dial := o.Loop
		o.Loop = func(depth int) (initiator.LoopConn, error) {
			conn, err := dial(depth)
			return faultConn{conn, f}, err
		}
		if mut != nil {
			mut(o)
		}
	})
	return c, f
}

func isOp(op uint8) func(*nvmeproto.Command) bool {
	return func(cmd *nvmeproto.Command) bool { return cmd.Opcode == op && !cmd.IsFabrics() }
}

var notReady = nvmeproto.StatusNSNotReady

// TestLoopRetryDelay: Dial enables ACRE (Host Behavior Support) on a controller that
// reports CRDT1; a read the controller fails with Namespace Not Ready without DNR is sent
// again after the delay each status's CRD selects (CRDT1, then CRDT2), with a new command
// ID each time, and then completes with the data.
func TestLoopRetryDelay(t *testing.T) {
	e := newEnv(t, nil)
	c, f := e.dialFaults(t, [3]uint16{1, 2, 3}, nil) // 100, 200, 300 ms
	f.mu.Lock()
	hb := f.hostBehavior
	f.mu.Unlock()
	if len(hb) != nvmeproto.HostBehaviorSize || hb[0] != nvmeproto.HostBehaviorEnable {
		t.Fatalf("Host Behavior Support sent at connection: %x, want ACRE 1", hb)
	}
	// The controller kept it: Get Features Host Behavior Support reads ACRE 1.
	gbuf, err := c.GetBuffer(ctx(t), nvmeproto.HostBehaviorSize)
	if err != nil {
		t.Fatal(err)
	}
	defer gbuf.Release()
	var gf nvmeproto.Command
	(&nvmeproto.GetFeaturesCommand{FID: nvmeproto.FIDHostBehaviorSupport}).ToCommand(&gf)
	if _, err := c.AdminCommand(ctx(t), &gf, gbuf); err != nil || gbuf.Bytes()[0] != nvmeproto.HostBehaviorEnable {
		t.Fatalf("Get Features Host Behavior Support: ACRE %d, %v; want 1", gbuf.Bytes()[0], err)
	}

	ns := c.Namespaces()[0]
	want := make([]byte, 4096)
	for i := range want {
		want[i] = byte(i * 13)
	}
	if _, err := ns.WriteAt(ctx(t), want, 0, 0); err != nil {
		t.Fatal(err)
	}
	buf, err := c.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	f.inject(isOp(nvmeproto.OpRead), false, notReady.WithCRD(1), notReady.WithCRD(2))
	start := time.Now()
	if err := ns.Read(ctx(t), buf, 0); err != nil {
		t.Fatalf("read failed twice with Namespace Not Ready (CRD 1, then 2): %v, want it retried", err)
	}
	cids, at := f.attempts()
	if len(cids) != 3 || cids[0] == cids[1] || cids[1] == cids[2] || cids[0] == cids[2] {
		t.Fatalf("read sent with command IDs %#x, want 3 attempts with distinct IDs", cids)
	}
	if d := at[1].Sub(at[0]); d < 100*time.Millisecond {
		t.Errorf("first retry %v after a CRD 1 status, want CRDT1 (100 ms)", d)
	}
	if d := at[2].Sub(at[1]); d < 200*time.Millisecond {
		t.Errorf("second retry %v after a CRD 2 status, want CRDT2 (200 ms)", d)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("read took %v", d)
	}
	if string(buf.Bytes()) != string(want) {
		t.Error("the retried read returned other data")
	}
}

// TestLoopRetryLimit: a command the controller keeps failing without DNR is sent
// 1+MaxRetries times (default 5, as the Linux host's max_retries; negative: once) and
// then fails with the controller's status; statuses with DNR, path-related statuses and
// admin commands are not retried.
func TestLoopRetryLimit(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		max  int
		want int
	}{{0, 1 + initiator.DefaultMaxRetries}, {2, 3}, {-1, 1}} {
		c, f := e.dialFaults(t, [3]uint16{}, func(o *initiator.Options) { o.MaxRetries = tc.max })
		f.inject(isOp(nvmeproto.OpFlush), true, notReady)
		err := c.Namespaces()[0].Flush(ctx(t))
		if !errors.Is(err, &initiator.StatusError{Status: notReady}) {
			t.Errorf("MaxRetries %d: flush the controller keeps failing: %v, want Namespace Not Ready", tc.max, err)
		}
		if cids, _ := f.attempts(); len(cids) != tc.want {
			t.Errorf("MaxRetries %d: flush sent %d times, want %d", tc.max, len(cids), tc.want)
		}
		c.Close()
	}

	c, f := e.dialFaults(t, [3]uint16{}, nil)
	ns := c.Namespaces()[0]
	for _, tc := range []struct {
		what string
		st   nvmeproto.Status
	}{
		{"Namespace Not Ready with DNR", notReady.WithDNR()},
		{"ANA Inaccessible (path related)", nvmeproto.StatusANAInaccessible},
	} {
		f.inject(isOp(nvmeproto.OpFlush), true, tc.st)
		if err := ns.Flush(ctx(t)); !errors.Is(err, &initiator.StatusError{Status: tc.st}) {
			t.Errorf("flush failed with %s: %v", tc.what, err)
		}
		if cids, _ := f.attempts(); len(cids) != 1 {
			t.Errorf("flush failed with %s sent %d times, want once", tc.what, len(cids))
		}
	}
	f.inject(isOp(nvmeproto.OpGetFeatures), true, nvmeproto.StatusInternalError)
	if _, err := c.GetFeatures(ctx(t), nvmeproto.FIDNumberOfQueues, 0); !errors.Is(err, &initiator.StatusError{Status: nvmeproto.StatusInternalError}) {
		t.Errorf("Get Features failed with Internal Error: %v", err)
	}
	if cids, _ := f.attempts(); len(cids) != 1 {
		t.Errorf("admin command failed without DNR sent %d times, want once (admin commands fail fast)", len(cids))
	}
}

// TestLoopRetryKeepsBuffer: while a request waits for its retry, its buffer stays the
// command's (the caller's Release does not free it) and Done is not called; the retry
// completes it.
func TestLoopRetryKeepsBuffer(t *testing.T) {
	e := newEnv(t, nil)
	c, f := e.dialFaults(t, [3]uint16{3}, nil) // CRDT1 300 ms
	buf, err := c.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	f.inject(isOp(nvmeproto.OpWrite), false, notReady.WithCRD(1))
	done := make(chan error, 1)
	r := &initiator.Request{Op: initiator.OpWrite, NSID: 1, Blocks: 8, Buf: buf, Done: func(r *initiator.Request) { done <- r.Err }}
	if err := c.IOQueue(0).Submit(r); err != nil {
		t.Fatal(err)
	}
	buf.Release()
	select {
	case err := <-done:
		t.Fatalf("write failed with Namespace Not Ready (CRD 1) ended before its retry: %v", err)
	case <-time.After(150 * time.Millisecond):
	}
	if got := c.AllocatedBytes(); got != 4096 {
		t.Errorf("buffer of a write waiting for its retry: %d bytes allocated, want 4096 (still the command's)", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("retried write: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("retried write not done")
	}
	if got := c.AllocatedBytes(); got != 0 {
		t.Errorf("after the retried write: %d bytes allocated, want 0", got)
	}
}

// TestLoopRetryContext: a retry waiting for a long delay (CRDT1 5 s) ends as soon as its
// caller's context does: ReadAt returns the context's error at once, Read returns once the
// command ended (its buffer free again), with an error that says both, and neither sends
// the command again.
func TestLoopRetryContext(t *testing.T) {
	e := newEnv(t, nil)
	c, f := e.dialFaults(t, [3]uint16{50}, nil)
	ns := c.Namespaces()[0]

	f.inject(isOp(nvmeproto.OpRead), true, notReady.WithCRD(1))
	cx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := ns.ReadAt(cx, make([]byte, 4096), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ReadAt whose retry waits 5 s, with a 300 ms context: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ReadAt returned %v after its 300 ms context ended", d)
	}

	f.inject(isOp(nvmeproto.OpRead), true, notReady.WithCRD(1))
	buf, err := c.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	cx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = ns.Read(cx, buf, 0)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, &initiator.StatusError{Status: notReady}) {
		t.Errorf("Read whose retry waits 5 s, with a 300 ms context: %v, want Namespace Not Ready and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Read returned %v after its 300 ms context ended", d)
	}
	buf.Release()
	if got := c.AllocatedBytes(); got != 0 {
		t.Errorf("Read returned, buffer released: %d bytes allocated, want 0 (the command has ended)", got)
	}
	time.Sleep(300 * time.Millisecond)
	if cids, _ := f.attempts(); len(cids) != 1 {
		t.Errorf("the stopped read was sent %d times, want once", len(cids))
	}
}

// TestLoopRetryClose: Close does not wait for a command's retry delay: the command ends
// with ErrClosed.
func TestLoopRetryClose(t *testing.T) {
	e := newEnv(t, nil)
	c, f := e.dialFaults(t, [3]uint16{50}, nil)
	f.inject(isOp(nvmeproto.OpFlush), true, notReady.WithCRD(1))
	done := make(chan error, 1)
	r := &initiator.Request{Op: initiator.OpFlush, NSID: 1, Done: func(r *initiator.Request) { done <- r.Err }}
	if err := c.IOQueue(0).Submit(r); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close with a flush waiting 5 s for its retry took %v", d)
	}
	select {
	case err := <-done:
		if !errors.Is(err, initiator.ErrClosed) {
			t.Errorf("flush waiting for its retry at Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("flush waiting for its retry not ended by Close")
	}
	if cids, _ := f.attempts(); len(cids) != 1 {
		t.Errorf("flush sent %d times, want once", len(cids))
	}
}

// TestLoopRetryAllocs: a retry (here one per command, CRD 0) allocates nothing: the slot
// keeps the request and its buffer, and its timer was made with the queue.
func TestLoopRetryAllocs(t *testing.T) {
	e := newEnv(t, func(c *conf.Config) { c.Subsystems[0].Namespaces[0].Backend = conf.BackendNull })
	c, f := e.dialFaults(t, [3]uint16{}, nil)
	cy := newCycle(t, c, initiator.OpRead, 4096)
	f.inject(isOp(nvmeproto.OpRead), false)
	for range 100 {
		f.again(notReady)
		cy.run(t) // warm up
	}
	if cids, _ := f.attempts(); len(cids) != 2 {
		t.Fatalf("read failed once without DNR sent %d times, want twice", len(cids))
	}
	if a := testing.AllocsPerRun(1000, func() { f.again(notReady); cy.run(t) }); a > 0.05 {
		t.Errorf("%.2f allocations per retried read", a)
	}
}
