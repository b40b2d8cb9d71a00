package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// TestRDMA* run in the VM guest (integration/run-tests.sh), against the Linux kernel
// target configured through configfs, or against an external target named by
// GONVMF_INITIATOR_TARGET=NQN@ADDR:PORT (a running `gonvmf serve`; the tests that need to
// reconfigure the target then skip).

const envExternal = "GONVMF_INITIATOR_TARGET"

type rdmaEnv struct {
	addr string
	port int
	nqn  string
	kt   *kernelTarget // nil for an external target
}

// rdmaTarget returns the target to test against; port picks the kernel target's port.
func rdmaTarget(t *testing.T, port int) *rdmaEnv {
	t.Helper()
	ip := rdmatest.Require(t)
	if ext := os.Getenv(envExternal); ext != "" {
		nqn, hp, ok := strings.Cut(ext, "@")
		h, p, ok2 := strings.Cut(hp, ":")
		pn, err := strconv.Atoi(p)
		if !ok || !ok2 || err != nil {
			t.Fatalf("%s=%q: want NQN@ADDR:PORT", envExternal, ext)
		}
		return &rdmaEnv{addr: h, port: pn, nqn: nqn}
	}
	nqn := fmt.Sprintf("nqn.2024-01.io.gonvmf:initiator-%d", port)
	kt := newKernelTarget(t, nqn, ip, port, 64<<20)
	time.Sleep(200 * time.Millisecond) // TCG: let the listener settle
	return &rdmaEnv{addr: ip, port: port, nqn: nqn, kt: kt}
}

func (e *rdmaEnv) options() initiator.Options {
	return initiator.Options{Addr: e.addr, Port: e.port, SubNQN: e.nqn, HostNQN: hostNQN,
		Queues: 2, QueueSize: 32, Logger: quiet}
}

func (e *rdmaEnv) dial(t *testing.T, mut func(*initiator.Options)) *initiator.Controller {
	t.Helper()
	o := e.options()
	if mut != nil {
		mut(&o)
	}
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := initiator.Dial(cx, o)
	if err != nil {
		t.Fatalf("Dial %s@%s:%d: %v\n%s", e.nqn, e.addr, e.port, err, dmesgTail(10))
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func slowCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestRDMAKernelTarget connects, identifies and moves data every way the initiator can:
// in-capsule writes, keyed SGL reads and writes of several sizes, zero-copy and bounce
// buffers, FUA, Flush, Write Zeroes, Deallocate, many commands in flight on two queues.
func TestRDMAKernelTarget(t *testing.T) {
	e := rdmaTarget(t, 4431)
	c := e.dial(t, nil)
	id := c.Identify()
	t.Logf("controller %d: %q %q fr %q, mdts %d B, in-capsule %d B, KATO %v, %d I/O queues of %d, CAP %v, VS %v",
		c.ID(), id.MN, id.SN, id.FR, c.MaxTransferSize(), c.InCapsuleDataSize(), c.KeepAliveTimeout(),
		c.IOQueues(), c.IOQueue(0).Depth(), c.CAP(), c.Version())
	if id.SubNQN != e.nqn {
		t.Errorf("Identify SUBNQN %q", id.SubNQN)
	}
	if c.IOQueues() != 2 {
		t.Errorf("%d I/O queues", c.IOQueues())
	}
	nss := c.Namespaces()
	if len(nss) != 1 {
		t.Fatalf("namespaces %v", nss)
	}
	ns := nss[0]
	t.Logf("namespace %d: %d blocks of %d bytes, descriptors %d", ns.NSID, ns.Blocks(), ns.BlockSize(), len(ns.Descriptors()))
	if e.kt != nil && ns.Size() != 64<<20 {
		t.Errorf("namespace size %d", ns.Size())
	}
	cx := slowCtx(t)
	for _, n := range []int{512, 4096, 8192, 64 << 10, 128 << 10, 192 << 10} {
		if n%ns.BlockSize() != 0 {
			continue
		}
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*13 + n>>9)
		}
		off := int64(n) * 5
		if _, err := ns.WriteAt(cx, p, off, 0); err != nil {
			t.Fatalf("WriteAt %d: %v", n, err)
		}
		q := make([]byte, n)
		if _, err := ns.ReadAt(cx, q, off); err != nil {
			t.Fatalf("ReadAt %d: %v", n, err)
		}
		if !bytes.Equal(p, q) {
			t.Fatalf("%d bytes read back differ", n)
		}
	}
	// Zero-copy with dedicated registered memory, FUA, Flush.
	buf, err := c.AllocBuffer(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i / 4096)
	}
	big := buf.Slice(0, min(256<<10, c.MaxTransferSize()))
	if err := ns.Write(cx, big, 2048, initiator.FUA); err != nil {
		t.Fatal(err)
	}
	if err := ns.Flush(cx); err != nil {
		t.Fatal(err)
	}
	rb := buf.Slice(128<<10, 4096)
	clear(rb.Bytes())
	if err := ns.Read(cx, rb, 2048+uint64(5*4096/ns.BlockSize())); err != nil {
		t.Fatal(err)
	}
	if rb.Bytes()[0] != 5 || rb.Bytes()[4095] != 5 {
		t.Fatalf("zero-copy read back %d/%d, want 5", rb.Bytes()[0], rb.Bytes()[4095])
	}
	if err := ns.WriteZeroes(cx, 2048, 8, 0); err != nil {
		t.Fatalf("Write Zeroes: %v", err)
	}
	z := make([]byte, 8*ns.BlockSize())
	if _, err := ns.ReadAt(cx, z, 2048*int64(ns.BlockSize())); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(z, make([]byte, len(z))) {
		t.Error("Write Zeroes left data")
	}
	if err := ns.Deallocate(cx, 4096, 64); err != nil && !errors.Is(err, initiator.ErrNotSupported) {
		t.Fatalf("Deallocate: %v", err)
	}
	// Past the end: LBA Out of Range, or Capacity Exceeded as the Linux target says.
	var se *initiator.StatusError
	if err := ns.Read(cx, rb, ns.Blocks()); !errors.As(err, &se) || (se.Status.Code() != nvmeproto.StatusLBAOutOfRange.Code() && se.Status.SC() != 0x81) {
		t.Errorf("read past the end: %v", err)
	}
	asyncStress(t, c, ns, 20)
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// asyncStress keeps every slot of every queue busy with write/read-back pairs of
// distinct 4 KiB blocks for rounds rounds.
func asyncStress(t *testing.T, c *initiator.Controller, ns *initiator.Namespace, rounds int) {
	t.Helper()
	const bs = 4096
	nb := uint32(bs / ns.BlockSize())
	slots := 0
	for i := 0; i < c.IOQueues(); i++ {
		slots += c.IOQueue(i).Depth()
	}
	mem, err := c.AllocBuffer(slots * bs)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Release()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	bad := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		wg.Done()
	}
	slot := 0
	start := time.Now()
	for qi := 0; qi < c.IOQueues(); qi++ {
		q := c.IOQueue(qi)
		for s := 0; s < q.Depth(); s++ {
			no := slot
			slot++
			b := mem.Slice(no*bs, bs)
			r := &initiator.Request{NSID: ns.NSID, Blocks: nb, Buf: b, Op: initiator.OpRead}
			round := 0
			submit := func() {
				if r.Op == initiator.OpRead {
					r.Op = initiator.OpWrite
					round++
					for i := 0; i < bs; i += 512 {
						b.Bytes()[i], b.Bytes()[i+1], b.Bytes()[i+2] = byte(no), byte(no>>8), byte(round)
					}
				} else {
					r.Op = initiator.OpRead
					clear(b.Bytes())
				}
				r.LBA = uint64(no*rounds+round) * uint64(nb)
				if err := q.Submit(r); err != nil {
					bad(err)
				}
			}
			r.Done = func(r *initiator.Request) {
				if r.Err != nil {
					bad(r.Err)
					return
				}
				if r.Op == initiator.OpRead {
					d := b.Bytes()
					if d[0] != byte(no) || d[1] != byte(no>>8) || d[2] != byte(round) || d[bs-512+2] != byte(round) {
						bad(fmt.Errorf("slot %d round %d: read back %v", no, round, d[:3]))
						return
					}
					if round == rounds {
						wg.Done()
						return
					}
				}
				submit()
			}
			wg.Add(1)
			submit()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(300 * time.Second):
		t.Fatal("async I/O did not finish")
	}
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	n := slots * rounds * 2
	t.Logf("async: %d commands on %d slots in %v", n, slots, time.Since(start))
}

// TestRDMADiscovery reads the discovery log of the target.
func TestRDMADiscovery(t *testing.T) {
	e := rdmaTarget(t, 4432)
	c := e.dial(t, func(o *initiator.Options) { o.SubNQN = nvmeproto.DiscoveryNQN })
	if !c.IsDiscovery() {
		t.Error("not a discovery controller")
	}
	l, err := c.DiscoveryLog(slowCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range l.Entries {
		t.Logf("entry: %v %v %v port %d %s:%s %s", en.TrType, en.AdrFam, en.SubType, en.PortID, en.TrAddr, en.TrSvcID, en.SubNQN)
		if en.SubNQN == e.nqn && en.TrType == nvmeproto.TrTypeRDMA && en.TrAddr == e.addr && en.TrSvcID == strconv.Itoa(e.port) {
			found = true
		}
	}
	if !found {
		t.Errorf("%s at %s:%d not in the discovery log", e.nqn, e.addr, e.port)
	}
}

// TestRDMAConnectErrors: unknown NQN, refused host, nothing listening, unreachable
// address — each ends with a clear, typed error.
func TestRDMAConnectErrors(t *testing.T) {
	e := rdmaTarget(t, 4433)
	cx := slowCtx(t)
	o := e.options()
	o.SubNQN = "nqn.2024-01.io.gonvmf:no-such-subsystem"
	_, err := initiator.Dial(cx, o)
	t.Logf("unknown NQN: %v", err)
	if !errors.Is(err, initiator.ErrSubsystemNotFound) {
		t.Errorf("unknown NQN: %v", err)
	}

	o = e.options()
	o.Port = 4499
	start := time.Now()
	_, err = initiator.Dial(cx, o)
	t.Logf("nothing listening (%v): %v", time.Since(start), err)
	if !errors.Is(err, initiator.ErrConnectRefused) {
		t.Errorf("no listener: %v", err)
	}

	o = e.options()
	o.Addr = "10.99.0.77"
	o.ConnectTimeout = 5 * time.Second
	start = time.Now()
	_, err = initiator.Dial(cx, o)
	t.Logf("unreachable (%v): %v", time.Since(start), err)
	if !errors.Is(err, initiator.ErrUnreachable) && !errors.Is(err, initiator.ErrConnectRefused) {
		t.Errorf("unreachable address: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("unreachable address took %v to fail", d)
	}

	if e.kt == nil {
		t.Skip("external target: cannot set up a host allow list")
	}
	allowed := "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"
	kt := newKernelTarget(t, "nqn.2024-01.io.gonvmf:initiator-hosts", e.addr, 4434, 1<<20, allowed)
	time.Sleep(200 * time.Millisecond)
	o = e.options()
	o.Port, o.SubNQN = kt.Port, kt.NQN
	_, err = initiator.Dial(cx, o)
	t.Logf("refused host: %v", err)
	if !errors.Is(err, initiator.ErrHostNotAllowed) {
		t.Errorf("refused host: %v", err)
	}
	o.HostNQN = allowed
	c, err := initiator.Dial(cx, o)
	if err != nil {
		t.Fatalf("allowed host: %v", err)
	}
	c.Close()
}

// TestRDMATargetGone removes the subsystem from the port under I/O: the kernel target
// drops the controller; every request must come back with an error and nothing may hang.
func TestRDMATargetGone(t *testing.T) {
	e := rdmaTarget(t, 4435)
	if e.kt == nil {
		t.Skip("external target: cannot take it away")
	}
	c := e.dial(t, func(o *initiator.Options) { o.Queues = 1; o.KeepAlive = 2 * time.Second })
	ns := c.Namespaces()[0]
	q := c.IOQueue(0)
	buf, err := c.AllocBuffer(q.Depth() * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	var completed, failed atomic.Int64
	var outstanding sync.WaitGroup
	nb := uint32(4096 / ns.BlockSize())
	for i := 0; i < q.Depth(); i++ {
		r := &initiator.Request{Op: initiator.OpRead, NSID: ns.NSID, Blocks: nb, LBA: uint64(i) * uint64(nb), Buf: buf.Slice(i*4096, 4096)}
		r.Done = func(r *initiator.Request) {
			if r.Err != nil {
				failed.Add(1)
				outstanding.Done()
				return
			}
			completed.Add(1)
			if err := q.Submit(r); err != nil {
				failed.Add(1)
				outstanding.Done()
			}
		}
		outstanding.Add(1)
		if err := q.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	for completed.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	if err := e.kt.disable(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitOrFail(t, 90*time.Second, "outstanding requests after the target dropped us", outstanding.Wait)
	t.Logf("all %d requests failed %v after the target went away (controller: %v)", failed.Load(), time.Since(start), c.Err())
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("controller not failed")
	}
	waitOrFail(t, 30*time.Second, "Close", func() { c.Close() })
}
