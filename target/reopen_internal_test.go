package target

import (
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestReopenCatchesCommandOnItsWay: a command that passed Begin before ReopenNamespace
// closed its namespace reaches the closed executor when the transport executes it (the
// data phase of an RDMA transport lies in between); it answers Namespace Not Ready without
// DNR — with CRD 1 where the host enabled ACRE — as a command arriving during the reopen
// does. A command on its way to a namespace whose reopen failed answers Invalid Namespace
// with DNR. The old code answered Invalid Namespace with DNR in both cases.
func TestReopenCatchesCommandOnItsWay(t *testing.T) {
	const nqn = "nqn.2024-01.io.gonvmf:raw"
	opening, release := make(chan struct{}), make(chan struct{})
	var opens int
	var failOpen bool
	opener := func(s backend.Spec) (backend.Backend, error) {
		if opens++; opens > 1 {
			opening <- struct{}{}
			<-release
			if failOpen {
				return nil, io.ErrUnexpectedEOF
			}
		}
		return backend.Open(s)
	}
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: nqn, AllowAnyHost: true, Namespaces: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendFile, Path: filepath.Join(t.TempDir(), "ns1.img"), Size: 1 << 20}}}},
	}
	tgt, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithBackendOpener(opener))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	port, err := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	buf := aligned.Bytes(8192)
	keyed := nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: 1024, Key: 9}
	connect := func(tr *rawTransport, qid uint16, cntlid uint16) *Queue {
		q, err := port.NewQueue(tr, 8)
		if err != nil {
			t.Fatal(err)
		}
		cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed}
		(&nvmeproto.ConnectCommand{QID: qid, SQSize: 7}).ToCommand(&cmd)
		cd := make([]byte, 1024)
		(&nvmeproto.ConnectData{HostID: [16]byte{15: 1}, CNTLID: cntlid, SubNQN: nqn, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"}).Marshal(cd)
		if c := tr.submit(t, q, &Request{}, cmd, cd, buf); !c.Status.Success() {
			t.Fatalf("connect queue %d: %v", qid, c.Status)
		}
		return q
	}
	tadm := &rawTransport{completed: map[*Request]int{}}
	adm := connect(tadm, 0, 0xFFFF)
	defer adm.Close()
	ps := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6}
	(&nvmeproto.PropertySetCommand{Offset: nvmeproto.PropCC, Value: uint64(nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4))}).ToCommand(&ps)
	tadm.submit(t, adm, &Request{}, ps, nil, buf)
	tio := &rawTransport{completed: map[*Request]int{}}
	qio := connect(tio, 1, adm.ControllerID())
	defer qio.Close()

	read := nvmeproto.Command{Opcode: nvmeproto.OpRead, Flags: nvmeproto.PSDTSGL << 6, NSID: 1,
		SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: 4096, Key: 9}, CDW12: 7}
	// onItsWay begins a read, has the reopen close the namespace (the opener blocks in
	// it), then executes the read and returns its completion; the reopen goes on when
	// release is sent to, and its result arrives on the returned channel.
	onItsWay := func() (nvmeproto.Completion, <-chan error) {
		t.Helper()
		r := &Request{Cmd: read}
		if !qio.Begin(r) {
			t.Fatalf("Begin refused a read of the open namespace: %v", tio.last().Status)
		}
		done := make(chan error, 1)
		go func() { done <- tgt.ReopenNamespace(nqn, 1) }()
		select {
		case <-opening:
		case err := <-done:
			t.Fatalf("the reopen returned %v without opening the backend", err)
		case <-time.After(10 * time.Second):
			t.Fatal("the reopen did not open the backend")
		}
		r.Data = buf[:r.Length]
		tio.mu.Lock()
		n := len(tio.cqes)
		tio.mu.Unlock()
		qio.Execute(r)
		tio.mu.Lock()
		defer tio.mu.Unlock()
		if len(tio.cqes) != n+1 {
			t.Fatalf("Execute completed %d commands, want the read at once", len(tio.cqes)-n)
		}
		return tio.cqes[n], done
	}
	check := func(what string, c nvmeproto.Completion, want nvmeproto.Status) {
		t.Helper()
		if c.Status != want {
			t.Errorf("%s: %v, want %v", what, c.Status, want)
		}
	}

	c, done := onItsWay()
	check("read on its way as the reopen closed the namespace", c, nvmeproto.StatusNSNotReady)
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("reopen: %v", err)
	}
	sf := nvmeproto.Command{Opcode: nvmeproto.OpSetFeatures, Flags: nvmeproto.PSDTSGL << 6, CDW10: uint32(nvmeproto.FIDHostBehaviorSupport),
		SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: nvmeproto.HostBehaviorSize, Key: 9}}
	hb := make([]byte, nvmeproto.HostBehaviorSize)
	(&nvmeproto.HostBehavior{ACRE: 1}).Marshal(hb)
	if c := tadm.submit(t, adm, &Request{}, sf, hb, buf); !c.Status.Success() {
		t.Errorf("enable ACRE: %v", c.Status)
	}
	c, done = onItsWay()
	check("read on its way, ACRE enabled", c, nvmeproto.StatusNSNotReady.WithCRD(1))
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("second reopen: %v", err)
	}
	failOpen = true
	r := &Request{Cmd: read}
	if !qio.Begin(r) {
		t.Fatalf("Begin refused a read of the open namespace: %v", tio.last().Status)
	}
	failed := make(chan error, 1)
	go func() { failed <- tgt.ReopenNamespace(nqn, 1) }()
	<-opening
	release <- struct{}{}
	if err := <-failed; err == nil {
		t.Fatal("the reopen succeeded with the opener failing")
	}
	r.Data = buf[:r.Length]
	qio.Execute(r)
	check("read on its way to a namespace whose reopen failed", tio.last(), nvmeproto.StatusInvalidNamespace.WithDNR())
}

// TestAutoReopenAfterOperatorsFailedReopen: an automatic reopen asked for before an
// operator's reopen, but that gets the configuration lock only after that reopen failed
// (autoReopen runs on its own goroutine), leaves the namespace as the operator's reopen
// did: inactive, its backend not opened again, until the operator reopens it. The old
// code reopened it: a namespace the hosts had dropped on Invalid Namespace came back
// without anyone asking.
func TestAutoReopenAfterOperatorsFailedReopen(t *testing.T) {
	const nqn = "nqn.2024-01.io.gonvmf:raw"
	var opens atomic.Int32
	var failing atomic.Bool
	opener := func(s backend.Spec) (backend.Backend, error) {
		opens.Add(1)
		if failing.Load() {
			return nil, io.ErrUnexpectedEOF
		}
		return backend.Open(s)
	}
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: nqn, AllowAnyHost: true, Namespaces: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendFile, Path: filepath.Join(t.TempDir(), "ns1.img"), Size: 1 << 20}}}},
		AutoReopen: conf.AutoReopen{Attempts: 1},
	}
	tgt, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithBackendOpener(opener))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	s := tgt.subsystem(nqn)
	old := s.lookup(1)
	failing.Store(true)
	if err := tgt.ReopenNamespace(nqn, 1); err == nil {
		t.Fatal("the operator's reopen succeeded with the opener failing")
	}
	failing.Store(false)
	before := opens.Load()
	s.autoReopen(old, backend.ErrNeedsReopen) // as the goroutine needsReopen started before
	if n := opens.Load() - before; n != 0 {
		t.Errorf("the automatic reopen opened the backend %d times after the operator's reopen failed, want none", n)
	}
	if ns := s.lookup(1); ns != old || !old.inactive() {
		t.Error("the namespace is not left inactive, as the operator's failed reopen left it")
	}
}
