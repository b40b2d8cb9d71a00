package target_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// nsEvent waits for an outstanding AER to complete with Namespace Attribute Changed and
// returns the Changed Namespace List (reading it re-arms the event).
func nsEvent(t *testing.T, admin *hostQueue, ch <-chan nvmeproto.Completion) []uint32 {
	t.Helper()
	c := wait(t, ch)
	expectOK(t, "AER", c)
	if ev := nvmeproto.AsyncEvent(c.DW0); ev != nvmeproto.EventNamespaceAttrChanged {
		t.Fatalf("event %v, want namespace attribute changed", ev)
	}
	buf, lc := admin.getLog(0x04, nvmeproto.NSIDAll, 0, 4096, 0, false)
	expectOK(t, "changed namespace list", lc)
	var l nvmeproto.ChangedNSList
	l.Unmarshal(buf)
	return l
}

func armAER(admin *hostQueue) <-chan nvmeproto.Completion {
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	return admin.submit(&aer, nil)
}

func nsze(t *testing.T, admin *hostQueue, nsid uint32) uint64 {
	t.Helper()
	buf, c := admin.identify(nvmeproto.CNSNamespace, nsid, 0)
	expectOK(t, "identify namespace", c)
	var id nvmeproto.IdentifyNamespace
	if err := id.Unmarshal(buf); err != nil {
		t.Fatal(err)
	}
	return id.NSZE
}

func runningNS(t *testing.T, tgt *target.Target, nsid uint32) conf.Namespace {
	t.Helper()
	for _, ns := range tgt.Config().Subsystems[0].Namespaces {
		if ns.NSID == nsid {
			return ns
		}
	}
	t.Fatalf("namespace %d not in the running configuration", nsid)
	return conf.Namespace{}
}

// TestResizeNamespace: a namespace grows while a host is connected; the host gets a
// Namespace Attribute Changed event naming it, Identify reports the new size, I/O reaches
// the new blocks, and the running configuration follows. Shrinking and invalid sizes
// change nothing.
func TestResizeNamespace(t *testing.T) {
	file := fileNS(t, 2, 1<<20)
	e := newEnv(t, baseConfig(conf.Namespace{NSID: 1, Backend: conf.BackendNull, Size: 1 << 20}, file, memNS(3, 1<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	expectOK(t, "AEC", admin.setFeature(0x0B, 1<<8, nil))

	for _, c := range []struct {
		nsid uint32
		size conf.Size
	}{{2, 4 << 20}, {1, 2 << 20}, {3, 3 << 20}} {
		ch := armAER(admin)
		w := rw(nvmeproto.OpWrite, c.nsid, uint64(c.size)/512-1, 1, 512)
		expect(t, "write past the end before the resize", q.do(&w, pattern(512, 1)), nvmeproto.StatusLBAOutOfRange)
		if err := e.tgt.ResizeNamespace(subNQN, c.nsid, c.size); err != nil {
			t.Fatal(err)
		}
		if l := nsEvent(t, admin, ch); len(l) != 1 || l[0] != c.nsid {
			t.Fatalf("changed namespaces %v, want [%d]", l, c.nsid)
		}
		if got := nsze(t, admin, c.nsid); got != uint64(c.size)/512 {
			t.Errorf("namespace %d: NSZE %d after resizing to %s", c.nsid, got, c.size)
		}
		expectOK(t, "write to the new last block", q.do(&w, pattern(512, 1)))
		if got := runningNS(t, e.tgt, c.nsid).Size; got != c.size {
			t.Errorf("namespace %d: running configuration size %s, want %s", c.nsid, got, c.size)
		}
	}
	if st, err := os.Stat(file.Path); err != nil || st.Size() != 4<<20 {
		t.Errorf("the file was not extended: %v", err)
	}

	// A file grown outside gonvmf: size 0 takes its new size.
	if err := os.Truncate(file.Path, 6<<20); err != nil {
		t.Fatal(err)
	}
	ch := armAER(admin)
	if err := e.tgt.ResizeNamespace(subNQN, 2, 0); err != nil {
		t.Fatal(err)
	}
	nsEvent(t, admin, ch)
	if got := nsze(t, admin, 2); got != 6<<20/512 {
		t.Errorf("NSZE %d after the file grew to 6 MiB", got)
	}

	unchanged := e.tgt.Config().String()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"shrink", e.tgt.ResizeNamespace(subNQN, 2, 1<<20), "cannot shrink"},
		{"not a multiple of the lba size", e.tgt.ResizeNamespace(subNQN, 1, 3<<20+100), "is not a multiple of the LBA size 512"},
		{"memory over its limit", e.tgt.ResizeNamespace(subNQN, 3, 2*conf.MaxMemorySize), "more than the"},
		{"missing namespace", e.tgt.ResizeNamespace(subNQN, 9, 1<<20), "no such namespace"},
		{"missing subsystem", e.tgt.ResizeNamespace("nqn.2024-01.io.gonvmf:nope", 1, 1<<20), "no such subsystem"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, c.err, c.want)
		}
		if got := e.tgt.Config().String(); got != unchanged {
			t.Errorf("%s: the failed resize changed the configuration:\n%s", c.name, got)
		}
	}
	if got := nsze(t, admin, 2); got != 6<<20/512 {
		t.Errorf("NSZE %d after a refused shrink", got)
	}
}

// TestSetNamespaceReadOnly: write protection changes while a host writes; the host gets
// the event and Identify's NSATTR; a namespace opened read-only cannot become writable.
func TestSetNamespaceReadOnly(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20), conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: 1 << 20, ReadOnly: true}))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	expectOK(t, "AEC", admin.setFeature(0x0B, 1<<8, nil))
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expectOK(t, "write", q.do(&w, pattern(512, 1)))

	ch := armAER(admin)
	if err := e.tgt.SetNamespaceReadOnly(subNQN, 1, true); err != nil {
		t.Fatal(err)
	}
	if l := nsEvent(t, admin, ch); len(l) != 1 || l[0] != 1 {
		t.Fatalf("changed namespaces %v", l)
	}
	expect(t, "write to a write-protected namespace", q.do(&w, pattern(512, 1)), nvmeproto.StatusNSWriteProtected)
	buf, _ := admin.identify(nvmeproto.CNSNamespace, 1, 0)
	var id nvmeproto.IdentifyNamespace
	id.Unmarshal(buf)
	if id.NSATTR&nvmeproto.NSATTRWriteProtected == 0 {
		t.Errorf("NSATTR %#x: not write protected", id.NSATTR)
	}
	if !runningNS(t, e.tgt, 1).ReadOnly {
		t.Errorf("running configuration not read-only")
	}
	r := rw(nvmeproto.OpRead, 1, 0, 1, 512)
	expectOK(t, "read from a write-protected namespace", q.do(&r, make([]byte, 512)))
	if err := e.tgt.SetNamespaceReadOnly(subNQN, 1, false); err != nil {
		t.Fatal(err)
	}
	expectOK(t, "write after write protection was lifted", q.do(&w, pattern(512, 1)))

	err := e.tgt.SetNamespaceReadOnly(subNQN, 2, false)
	if err == nil || !strings.Contains(err.Error(), "opened read-only") {
		t.Errorf("making a namespace opened read-only writable: %v", err)
	}
	if !runningNS(t, e.tgt, 2).ReadOnly {
		t.Errorf("the refused change changed the configuration")
	}
}

// TestDenyHostDisconnects: taking a host off the allow list disconnects that host's
// controllers (and only them) and refuses its reconnection.
func TestDenyHostDisconnects(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Subsystems[0].AllowAnyHost = false
	cfg.Subsystems[0].Hosts = []string{hostNQN, otherNQN}
	e := newEnv(t, cfg)
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	other, _ := e.adminConnect(subNQN, otherNQN, 0)

	if err := e.tgt.DenyHost(subNQN, hostNQN); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*hostQueue{admin, q} {
		if err := waitDone(t, h, 2*time.Second); !errors.Is(err, target.ErrHostNotAllowed) {
			t.Errorf("denied host's queue torn down with %v", err)
		}
	}
	_, c := other.propGet(nvmeproto.PropCSTS, false)
	expectOK(t, "the other host's controller", c)
	h := e.dial(32)
	// Refused as an unknown subsystem would be (TestConnectRefusalsLookAlike).
	expect(t, "reconnect of the denied host", h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN), nvmeproto.StatusConnectInvalidParameters)

	if err := e.tgt.DenyHost(subNQN, hostNQN); !errors.Is(err, target.ErrNoSuchHost) {
		t.Errorf("denying a host that is not listed: %v", err)
	}
	if err := e.tgt.DenyHost(subNQN, otherNQN); err == nil || !strings.Contains(err.Error(), "no host may connect") {
		t.Errorf("denying the last host: %v", err)
	}
	if err := e.tgt.AllowHost(subNQN, "host\x01"); err == nil || !strings.Contains(err.Error(), "is not a valid host NQN") {
		t.Errorf("allowing a malformed host NQN: %v", err)
	}
	if err := e.tgt.AllowHost(subNQN, hostNQN); err != nil {
		t.Fatal(err)
	}
	if err := e.tgt.AllowHost(subNQN, hostNQN); err != nil {
		t.Errorf("allowing a listed host again: %v", err)
	}
	if got := e.tgt.Config().Subsystems[0].Hosts; len(got) != 2 || got[0] != otherNQN || got[1] != hostNQN {
		t.Errorf("hosts %v", got)
	}
	e.adminConnect(subNQN, hostNQN, 0)

	// allow_any_host admits everyone, and then single hosts are neither allowed nor denied;
	// the other host was never disturbed.
	if err := e.tgt.SetAllowedHosts(subNQN, true, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.tgt.DenyHost(subNQN, hostNQN); !errors.Is(err, target.ErrAllowsAnyHost) {
		t.Errorf("denying a host of an allow-any subsystem: %v", err)
	}
	if err := e.tgt.AllowHost(subNQN, hostNQN); !errors.Is(err, target.ErrAllowsAnyHost) {
		t.Errorf("allowing a host of an allow-any subsystem: %v", err)
	}
	if err := e.tgt.SetAllowedHosts(subNQN, false, nil); err == nil || !strings.Contains(err.Error(), "no host may connect") {
		t.Errorf("an empty allow list: %v", err)
	}
	select {
	case <-other.conn.Done():
		t.Errorf("the allowed host was disconnected: %v", other.conn.Err())
	default:
	}
}

// TestInspect: Controllers and Namespaces describe what is connected and count I/O.
func TestInspect(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20), conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30, LBASize: 4096}))
	before := time.Now()
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 5000)
	q := e.ioConnect(1, cntlid, 16)
	e.ioConnect(2, cntlid, 8)
	e.adminConnect(nvmeproto.DiscoveryNQN, otherNQN, 0)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write", q.do(&w, pattern(4096, 1)))
	r := rw(nvmeproto.OpRead, 1, 0, 2, 1024)
	expectOK(t, "read", q.do(&r, make([]byte, 1024)))
	_ = admin

	cs := e.tgt.Controllers()
	if len(cs) != 2 {
		t.Fatalf("%d controllers: %+v", len(cs), cs)
	}
	c := cs[0]
	if c.Subsystem != subNQN || c.ID != cntlid || c.HostNQN != hostNQN || c.HostID != hostID || c.Discovery ||
		c.KeepAlive != 5*time.Second || c.Connected.Before(before) || !c.Ready {
		t.Errorf("controller %+v", c)
	}
	if len(c.Queues) != 3 || c.Queues[0].ID != 0 || c.Queues[0].Size != 32 || c.Queues[1].ID != 1 || c.Queues[1].Size != 16 ||
		c.Queues[2].Size != 8 || c.Queues[1].InFlight != 0 {
		t.Errorf("queues %+v", c.Queues)
	}
	if d := cs[1]; d.Subsystem != nvmeproto.DiscoveryNQN || !d.Discovery || d.HostNQN != otherNQN || len(d.Queues) != 1 {
		t.Errorf("discovery controller %+v", d)
	}

	ns := e.tgt.Namespaces()
	if len(ns) != 2 {
		t.Fatalf("namespaces %+v", ns)
	}
	want := target.NamespaceInfo{Subsystem: subNQN, NSID: 1, Backend: "memory", Blocks: 2048, LBASize: 512,
		ReadCommands: 1, WriteCommands: 1, ReadBytes: 1024, WriteBytes: 4096}
	got := ns[0]
	if got.IO[target.IORead].Commands != 1 || got.IO[target.IOWrite].Commands != 1 || got.IO[target.IORead].Bytes != 1024 {
		t.Errorf("namespace 1 I/O counters %+v", got.IO)
	}
	got.IO, got.Errors = [target.NumIOClasses]target.IOCounters{}, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("namespace 1: %+v\nwant %+v", ns[0], want)
	}
	if ns[1].NSID != 2 || ns[1].Blocks != 1<<30/4096 || ns[1].LBASize != 4096 || ns[1].ReadCommands != 0 {
		t.Errorf("namespace 2: %+v", ns[1])
	}
}

// TestOperationsRacingIO runs every run-time operation from several goroutines while
// hosts do I/O on several queues: I/O to namespaces nobody changes never fails and reads
// back what it wrote; I/O to the namespaces being changed gets only the statuses the
// change explains; every command completes once. -race checks the rest.
func TestOperationsRacingIO(t *testing.T) {
	cfg := baseConfig(memNS(1, 4<<20), memNS(2, 1<<20), conf.Namespace{NSID: 3, Backend: conf.BackendNull, Size: 1 << 20})
	e := newEnv(t, cfg)
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	expectOK(t, "AEC", admin.setFeature(0x0B, 1<<8, nil))
	qs := []*hostQueue{e.ioConnect(1, cntlid, 16), e.ioConnect(2, cntlid, 16)}

	var submitted, completed atomic.Int64
	var bad sync.Map // unexpected status → count
	stop := make(chan struct{})
	var io sync.WaitGroup
	for i, q := range qs {
		io.Add(1)
		go func() {
			defer io.Done()
			buf := pattern(4096, byte(i+1))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				// Namespace 1: write then compare its own blocks (never changed).
				// Namespace 2: added and removed meanwhile; 3: resized and write-protected.
				nsid := uint32(1 + n%3)
				op := []uint8{nvmeproto.OpWrite, nvmeproto.OpCompare}[n/3%2]
				data := buf
				if nsid != 1 && op == nvmeproto.OpCompare { // their data does not survive the changes
					op, data = nvmeproto.OpRead, make([]byte, 4096)
				}
				slba := uint64(i*64 + n/6%8*8)
				cmd := rw(op, nsid, slba, 8, 4096)
				done := make(chan nvmeproto.Completion, 1)
				cmd.CID = q.nextCID()
				if err := q.conn.Submit(&cmd, data, func(c nvmeproto.Completion) { done <- c }); err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				submitted.Add(1)
				c := <-done
				completed.Add(1)
				st := c.Status
				ok := st.Success() ||
					nsid == 2 && st.Code() == nvmeproto.StatusInvalidNamespace.Code() ||
					nsid == 3 && st.Code() == nvmeproto.StatusNSWriteProtected.Code()
				if !ok {
					k := fmt.Sprintf("nsid %d op %#x: %v", nsid, op, st)
					v, _ := bad.LoadOrStore(k, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
			}
		}()
	}
	// AERs keep being answered and the log read, as the Linux host does.
	aerDone := make(chan struct{})
	go func() {
		defer close(aerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ch := armAER(admin)
			select {
			case <-ch:
				admin.getLog(0x04, nvmeproto.NSIDAll, 0, 4096, 0, false)
			case <-stop:
				return
			}
		}
	}()

	const rounds = 30
	var ops sync.WaitGroup
	errs := make(chan error, 1000)
	run := func(f func(n int) error) {
		ops.Add(1)
		go func() {
			defer ops.Done()
			for n := range rounds {
				if err := f(n); err != nil {
					errs <- err
				}
			}
		}()
	}
	two := conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true, Namespaces: []conf.Namespace{memNS(1, 1<<20)}}
	run(func(n int) error {
		if err := e.tgt.RemoveNamespace(subNQN, 2); err != nil {
			return err
		}
		return e.tgt.AddNamespace(subNQN, memNS(2, 1<<20))
	})
	run(func(n int) error { return e.tgt.ResizeNamespace(subNQN, 3, conf.Size(1<<20+(n+1)*4096)) })
	run(func(n int) error { return e.tgt.SetNamespaceReadOnly(subNQN, 3, n%2 == 0) })
	run(func(n int) error {
		if err := e.tgt.AddSubsystem(two); err != nil {
			return err
		}
		return e.tgt.RemoveSubsystem(two.NQN)
	})
	run(func(n int) error {
		if n%2 == 0 {
			return e.tgt.SetAllowedHosts(subNQN, false, []string{hostNQN, otherNQN})
		}
		return e.tgt.SetAllowedHosts(subNQN, true, nil)
	})
	run(func(int) error { e.tgt.Controllers(); e.tgt.Namespaces(); e.tgt.Config(); return nil })
	ops.Wait()
	close(stop)
	io.Wait()
	<-aerDone
	close(errs)
	for err := range errs {
		t.Errorf("operation: %v", err)
	}
	bad.Range(func(k, v any) bool {
		t.Errorf("%s: %d times", k, v.(*atomic.Int64).Load())
		return true
	})
	if s, c := submitted.Load(), completed.Load(); s != c || s == 0 {
		t.Errorf("%d commands submitted, %d completed", s, c)
	}
	if got := runningNS(t, e.tgt, 3).Size; got != conf.Size(1<<20+rounds*4096) {
		t.Errorf("namespace 3 size %s", got)
	}
	t.Logf("%d commands during %d rounds of operations", submitted.Load(), rounds)
}

// TestRemoveNamespaceInFlight: commands in flight when their namespace is removed
// finish normally, new ones get Invalid Namespace at once, the removal returns when the
// last one has finished, and the other namespace on the same queue is not disturbed.
func TestRemoveNamespaceInFlight(t *testing.T) {
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20), memNS(2, 1<<20)), gatedBackend(g))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 16)
	w2 := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	inflight := []<-chan nvmeproto.Completion{q.submit(&w2, pattern(512, 1)), q.submit(&w2, pattern(512, 2))}
	g.waitBlocked(t, 2)

	removed := make(chan error, 1)
	go func() { removed <- e.tgt.RemoveNamespace(subNQN, 2) }()
	waitFor(t, func() bool { return len(e.tgt.Namespaces()) == 1 })
	expect(t, "write to the namespace being removed", q.do(&w2, pattern(512, 3)), nvmeproto.StatusInvalidNamespace)
	w1 := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	ch1 := q.submit(&w1, pattern(512, 4))
	select {
	case err := <-removed:
		t.Fatalf("RemoveNamespace returned (%v) with commands in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.open()
	for _, ch := range inflight {
		expectOK(t, "write in flight during the removal", wait(t, ch))
	}
	expectOK(t, "write to the other namespace", wait(t, ch1))
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RemoveNamespace did not return after its commands finished")
	}
	select {
	case <-q.conn.Done():
		t.Fatalf("the queue was torn down: %v", q.conn.Err())
	default:
	}
}

// growingBackend is a backend whose store grows by itself (as an rbd image resized
// elsewhere does), reporting it through Spec.OnResize.
type growingBackend struct {
	backend.Backend
	blocks atomic.Uint64
}

func (g *growingBackend) NumBlocks() uint64 { return g.blocks.Load() }

// TestBackendReportsResize: a backend that reports a new size of its own (Spec.OnResize)
// makes the target tell hosts, as ResizeNamespace does.
func TestBackendReportsResize(t *testing.T) {
	var grow func(uint64)
	var gb *growingBackend
	open := target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(spec)
		if err != nil {
			return nil, err
		}
		gb = &growingBackend{Backend: b}
		gb.blocks.Store(b.NumBlocks())
		grow = spec.OnResize
		return gb, nil
	})
	e := newEnv(t, baseConfig(conf.Namespace{NSID: 1, Backend: conf.BackendNull, Size: 1 << 20}), open)
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	expectOK(t, "AEC", admin.setFeature(0x0B, 1<<8, nil))
	ch := armAER(admin)
	gb.blocks.Store(4096)
	grow(4096)
	if l := nsEvent(t, admin, ch); len(l) != 1 || l[0] != 1 {
		t.Fatalf("changed namespaces %v", l)
	}
	if got := nsze(t, admin, 1); got != 4096 {
		t.Errorf("NSZE %d after the backend grew to 4096 blocks", got)
	}
}

// TestAddSubsystemPublishedWhole: a subsystem added at run time is not found by hosts
// until every namespace of it is open: a Connect while one still opens is refused, and
// one after finds all of them. (It used to be published first: a host connecting in
// between saw part of its namespaces, with no event for the rest.)
func TestAddSubsystemPublishedWhole(t *testing.T) {
	const slow = 3 << 20
	opener, opening, release := testutil.HeldOpener(slow)
	t.Cleanup(release)
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithBackendOpener(opener))
	two := conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true,
		Namespaces: []conf.Namespace{memNS(1, 1<<20), memNS(2, slow)}}
	added := make(chan error, 1)
	go func() { added <- e.tgt.AddSubsystem(two) }()
	<-opening
	h := e.dial(32)
	c := h.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, two.NQN, hostNQN)
	h.conn.Close()
	if c.Status.Success() {
		t.Error("a host connected to a subsystem whose namespaces were still opening")
	}
	release()
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	admin, _ := e.adminConnect(two.NQN, hostNQN, 0)
	buf, c := admin.identify(nvmeproto.CNSActiveNSList, 0, 0)
	expectOK(t, "active namespace list", c)
	if a, b := binary.LittleEndian.Uint32(buf), binary.LittleEndian.Uint32(buf[4:]); a != 1 || b != 2 {
		t.Errorf("active namespaces %d, %d; want 1, 2", a, b)
	}
}

// TestAddSubsystemStopsWhenClosed: a target closed while AddSubsystem opens the new
// subsystem's namespaces opens no more of them (the subsystem is not published yet, so
// Close cannot close it) and the add fails with ErrClosed.
func TestAddSubsystemStopsWhenClosed(t *testing.T) {
	const slow, after = 3 << 20, 5 << 20
	held, opening, release := testutil.HeldOpener(slow)
	t.Cleanup(release)
	var afterOpens atomic.Int32
	opener := func(s backend.Spec) (backend.Backend, error) {
		if s.Size == after {
			afterOpens.Add(1)
		}
		return held(s)
	}
	tgt, err := target.New(baseConfig(memNS(1, 1<<20)), target.WithBackendOpener(opener), target.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	two := conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true,
		Namespaces: []conf.Namespace{memNS(1, slow), memNS(2, after)}}
	added := make(chan error, 1)
	go func() { added <- tgt.AddSubsystem(two) }()
	<-opening
	tgt.Close()
	release()
	if err := <-added; !errors.Is(err, target.ErrClosed) {
		t.Errorf("AddSubsystem on a target closed meanwhile: %v, want ErrClosed", err)
	}
	if n := afterOpens.Load(); n != 0 {
		t.Errorf("%d namespaces opened after the target closed", n)
	}
}

// TestInsertAtIndex: InsertSubsystem and InsertNamespace put what they add at the index
// given — in the running configuration, and for a subsystem in Subsystems (the discovery
// log's order) too; an index out of range is an error that changes nothing.
func TestInsertAtIndex(t *testing.T) {
	tgt, err := target.New(baseConfig(memNS(1, 1<<20), memNS(2, 1<<20)), target.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	sub := func(nqn string) conf.Subsystem {
		return conf.Subsystem{NQN: nqn, AllowAnyHost: true, Namespaces: []conf.Namespace{memNS(1, 1<<20)}}
	}
	const two, three = "nqn.2024-01.io.gonvmf:two", "nqn.2024-01.io.gonvmf:three"
	for _, c := range []struct {
		i   int
		nqn string
		ok  bool
	}{{0, two, true}, {1, three, true}, {4, "nqn.2024-01.io.gonvmf:four", false}, {-1, "nqn.2024-01.io.gonvmf:five", false}} {
		if err := tgt.InsertSubsystem(c.i, sub(c.nqn)); (err == nil) != c.ok {
			t.Errorf("InsertSubsystem(%d, %s): %v, want success %v", c.i, c.nqn, err, c.ok)
		}
	}
	want := []string{two, three, subNQN}
	var inConfig, listed []string
	for _, s := range tgt.Config().Subsystems {
		inConfig = append(inConfig, s.NQN)
	}
	for _, s := range tgt.Subsystems() {
		if !s.Discovery {
			listed = append(listed, s.NQN)
		}
	}
	if !reflect.DeepEqual(inConfig, want) || !reflect.DeepEqual(listed, want) {
		t.Errorf("subsystems: configuration %v, listed %v; want %v", inConfig, listed, want)
	}

	for _, c := range []struct {
		i    int
		nsid uint32
		ok   bool
	}{{0, 7, true}, {3, 5, true}, {5, 6, false}, {-1, 8, false}} {
		if err := tgt.InsertNamespace(subNQN, c.i, memNS(c.nsid, 1<<20)); (err == nil) != c.ok {
			t.Errorf("InsertNamespace(%d, nsid %d): %v, want success %v", c.i, c.nsid, err, c.ok)
		}
	}
	var nsids []uint32
	for _, ns := range tgt.Config().Subsystems[2].Namespaces {
		nsids = append(nsids, ns.NSID)
	}
	if !reflect.DeepEqual(nsids, []uint32{7, 1, 2, 5}) {
		t.Errorf("namespaces in the configuration: %v, want [7 1 2 5]", nsids)
	}
	if n := len(tgt.Namespaces()); n != 6 {
		t.Errorf("%d namespaces served, want 6", n)
	}
}

// closeFailsBackend is a backend whose Close closes it and reports a failure.
type closeFailsBackend struct{ backend.Backend }

func (b closeFailsBackend) Close() error {
	b.Backend.Close()
	return errors.New("injected: close failed")
}

// TestRemoveSubsystemReleaseFails: a subsystem whose namespace 1's backend fails to close
// is removed all the same, and RemoveSubsystem says so with an error wrapping
// ErrRemovedUnclean that names the subsystem and the namespace, as RemoveNamespace does
// for a namespace; namespace 2, whose backend closes, is not named, and the subsystem can
// be added again. A backend still executing commands at the close timeout is no error
// (TestFenceRemovedSubsystemStore). The old code dropped the close's error: RemoveSubsystem
// returned nil.
func TestRemoveSubsystemReleaseFails(t *testing.T) {
	const doomed = 3 << 20
	var doomedOpens atomic.Int32
	open := target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(spec)
		if err == nil && spec.Size == doomed && doomedOpens.Add(1) == 1 { // not once added again
			b = closeFailsBackend{b}
		}
		return b, err
	})
	e := newEnv(t, baseConfig(memNS(1, doomed), memNS(2, 1<<20)), open)
	cs := e.tgt.Config().Subsystems[0]
	err := e.tgt.RemoveSubsystem(subNQN)
	if !errors.Is(err, target.ErrRemovedUnclean) || !strings.Contains(err.Error(), subNQN) ||
		!strings.Contains(err.Error(), "namespace 1: closing backend: injected: close failed") ||
		strings.Contains(err.Error(), "namespace 2") {
		t.Fatalf("RemoveSubsystem, namespace 1's backend failing to close: %v; want ErrRemovedUnclean naming %s and namespace 1 only", err, subNQN)
	}
	if n := len(e.tgt.Config().Subsystems); n != 0 {
		t.Errorf("%d subsystems in the running configuration after the removal, want none", n)
	}
	for _, s := range e.tgt.Subsystems() {
		if s.NQN == subNQN {
			t.Errorf("subsystem %s still listed after its removal", subNQN)
		}
	}
	if err := e.tgt.AddSubsystem(cs); err != nil {
		t.Errorf("AddSubsystem again: %v", err)
	}
}
