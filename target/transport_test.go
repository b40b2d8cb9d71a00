package target

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// rawTransport is a minimal TransportQueue that records completions, to test the
// transport contract directly (the way an RDMA transport drives the core).
type rawTransport struct {
	mu        sync.Mutex
	completed map[*Request]int
	cqes      []nvmeproto.Completion
	reasons   []error
}

// rawHostID is the host identifier of the raw connections (0h is refused).
var rawHostID = [16]byte{15: 1}

func (tr *rawTransport) Complete(r *Request) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.completed[r]++
	tr.cqes = append(tr.cqes, r.CQE)
}

func (tr *rawTransport) Disconnect(reason error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.reasons = append(tr.reasons, reason)
}

func (tr *rawTransport) last() nvmeproto.Completion {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.cqes[len(tr.cqes)-1]
}

// submit drives one command through Begin, the data phase and Execute as a transport
// does, and waits for its completion (an admin command completes from the controller's
// admin worker); data is the host memory (read from for writes, written for reads).
func (tr *rawTransport) submit(t *testing.T, q *Queue, r *Request, cmd nvmeproto.Command, data, buf []byte) nvmeproto.Completion {
	t.Helper()
	r.Cmd = cmd
	if !q.Begin(r) {
		return tr.last()
	}
	if r.Length > 0 && !r.InCapsule {
		r.Data = buf[:r.Length]
		if r.Dir == nvmeproto.DirHostToCtrl {
			copy(r.Data, data)
		}
	}
	tr.mu.Lock()
	before := tr.completed[r]
	tr.mu.Unlock()
	q.Execute(r)
	var c nvmeproto.Completion
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		tr.mu.Lock()
		done := tr.completed[r] > before
		tr.mu.Unlock()
		if done {
			c = r.CQE // the core has let go of r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("opcode %#x not completed in 10 s", cmd.Opcode)
		}
	}
	if r.Dir == nvmeproto.DirCtrlToHost && c.Status.Success() {
		copy(data, r.Data[:r.Length])
	}
	return c
}

func TestTransportContract(t *testing.T) {
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: "nqn.2024-01.io.gonvmf:raw", AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}}},
	}
	tgt, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	// New resolved a copy: the caller's configuration is as it was, the target's has the
	// defaults (a Config built in Go has no in-capsule data unless it asks for it).
	if cfg.Transport != (conf.Transport{}) || cfg.Listeners[0].Port != 0 || cfg.Subsystems[0].Namespaces[0].LBASize != 0 {
		t.Errorf("New changed the caller's configuration: %+v", cfg)
	}
	if rc := tgt.Config(); rc.Listeners[0].Port != conf.DefaultPort || rc.Subsystems[0].Namespaces[0].LBASize != conf.DefaultLBASize ||
		rc.Subsystems[0].Namespaces[0].UUID == ([16]byte{}) || rc.Transport != tgt.TransportConfig() {
		t.Errorf("running configuration not resolved:\n%s", rc)
	}
	if _, err := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, Keyed: true, InCapsuleDataSize: -1}); err == nil {
		t.Error("AddPort accepted a negative in-capsule data size")
	}
	port, err := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, TrAddr: "10.0.0.1", TrSvcID: "4420", Keyed: true,
		InCapsuleDataSize: tgt.TransportConfig().InCapsuleDataSize})
	if err != nil {
		t.Fatal(err)
	}
	if l := port.Limits(); l.MaxQueueDepth != conf.DefaultQueueDepth || l.MaxTransferSize != conf.DefaultMaxIOSize ||
		tgt.MaxTransferSize() != conf.DefaultMaxIOSize || l.InCapsuleDataSize != 0 {
		t.Errorf("limits %+v", l)
	}

	tr := &rawTransport{completed: map[*Request]int{}}
	q, err := port.NewQueue(tr, 32)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]Request, 4)
	buf := aligned.Bytes(8192 + 1)
	keyed := func(n int) nvmeproto.SGLDescriptor {
		return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: uint32(n), Address: 0x1000, Key: 9}
	}
	// Connect, enable.
	conn := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(1024)}
	(&nvmeproto.ConnectCommand{SQSize: 31}).ToCommand(&conn)
	cd := make([]byte, 1024)
	(&nvmeproto.ConnectData{HostID: rawHostID, CNTLID: 0xFFFF, SubNQN: "nqn.2024-01.io.gonvmf:raw", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"}).Marshal(cd)
	if c := tr.submit(t, q, &reqs[0], conn, cd, buf); !c.Status.Success() {
		t.Fatalf("connect: %v", c.Status)
	}
	if q.QID() != 0 || q.ControllerID() == 0 || q.Size() != 32 {
		t.Errorf("qid %d cntlid %d size %d", q.QID(), q.ControllerID(), q.Size())
	}
	ps := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6}
	(&nvmeproto.PropertySetCommand{Offset: nvmeproto.PropCC, Value: uint64(nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4))}).ToCommand(&ps)
	tr.submit(t, q, &reqs[1], ps, nil, buf)

	// I/O queue.
	tio := &rawTransport{completed: map[*Request]int{}}
	qio, _ := port.NewQueue(tio, 8)
	(&nvmeproto.ConnectCommand{QID: 1, SQSize: 7}).ToCommand(&conn)
	(&nvmeproto.ConnectData{HostID: rawHostID, CNTLID: q.ControllerID(), SubNQN: "nqn.2024-01.io.gonvmf:raw", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"}).Marshal(cd)
	if c := tio.submit(t, qio, &reqs[2], conn, cd, buf); !c.Status.Success() {
		t.Fatalf("I/O connect: %v", c.Status)
	}
	r := &reqs[3]
	w := nvmeproto.Command{Opcode: nvmeproto.OpWrite, Flags: nvmeproto.PSDTSGL << 6, NSID: 1, SGL: keyed(4096), CDW12: 7}
	data := bytes.Repeat([]byte{0xA5, 0x5A, 1, 2}, 1024)
	// Unaligned transport buffers (the core bounces them).
	if c := tio.submit(t, qio, r, w, data, buf[1:]); !c.Status.Success() {
		t.Fatalf("unaligned write: %v", c.Status)
	}
	rd := w
	rd.Opcode = nvmeproto.OpRead
	got := make([]byte, 4096)
	if c := tio.submit(t, qio, r, rd, got, buf[1:]); !c.Status.Success() || !bytes.Equal(got, data) {
		t.Fatalf("unaligned read: %v, data equal %v", c.Status, bytes.Equal(got, data))
	}
	if r.Dir != nvmeproto.DirCtrlToHost || r.Length != 4096 || len(r.SGL) != 1 || r.SGL[0].Key != 9 || r.SGL[0].Address != 0x1000 {
		t.Errorf("request description: dir %v length %d sgl %v", r.Dir, r.Length, r.SGL)
	}
	// A 64 KiB Compare reads into the Request's scratch buffer, which is not kept: a
	// host's largest Compares on every slot would otherwise pin that much per Request.
	big := bytes.Repeat([]byte{3, 1, 4, 1, 5, 9, 2, 6}, 8<<10)
	w64 := nvmeproto.Command{Opcode: nvmeproto.OpWrite, Flags: nvmeproto.PSDTSGL << 6, NSID: 1, SGL: keyed(len(big)), CDW12: 127}
	buf64 := aligned.Bytes(len(big))
	if c := tio.submit(t, qio, r, w64, big, buf64); !c.Status.Success() {
		t.Fatalf("64 KiB write: %v", c.Status)
	}
	cmp := w64
	cmp.Opcode = nvmeproto.OpCompare
	if c := tio.submit(t, qio, r, cmp, big, buf64); !c.Status.Success() {
		t.Fatalf("64 KiB compare of what was written: %v", c.Status)
	}
	if n := max(cap(r.bounce), cap(r.br.Buf)); n > bounceKeep {
		t.Errorf("after a 64 KiB Compare the Request keeps a %d-byte scratch buffer (at most %d)", n, bounceKeep)
	}
	// Fail: the transport could not fetch the data.
	r.Cmd = w
	if !qio.Begin(r) {
		t.Fatal("Begin refused a good write")
	}
	qio.Fail(r, nvmeproto.StatusDataTransferError)
	if c := tio.last(); c.Status != nvmeproto.StatusDataTransferError || c.SQID != 1 {
		t.Errorf("Fail: %+v", c)
	}
	// Execute with a buffer shorter than the transfer: a transport bug, Internal Error.
	if !qio.Begin(r) {
		t.Fatal("Begin refused a good write")
	}
	r.Data = buf[:100]
	qio.Execute(r)
	if c := tio.last(); c.Status.Code() != nvmeproto.StatusInternalError {
		t.Errorf("short buffer: %v", c.Status)
	}
	// Every Begin got exactly one Complete.
	for _, tr := range []*rawTransport{tr, tio} {
		for r, n := range tr.completed {
			if n < 1 {
				t.Errorf("request %p completed %d times", r, n)
			}
		}
	}
	if n := len(tio.cqes); n != 7 {
		t.Errorf("%d completions on the I/O queue, want 7", n)
	}
	// Close the admin queue: the controller ends, the I/O queue is asked to disconnect.
	q.Close()
	tio.mu.Lock()
	reasons := tio.reasons
	tio.mu.Unlock()
	if len(reasons) != 1 || reasons[0] != ErrAdminQueueGone {
		t.Errorf("I/O queue disconnect reasons %v", reasons)
	}
	if qio.Begin(r) {
		t.Error("Begin accepted a command on a disconnected queue")
	} else if c := tio.last(); c.Status != nvmeproto.StatusAbortSQDeletion {
		t.Errorf("command after disconnect: %v", c.Status)
	}
	qio.Close()
}

// TestConcurrentConnects: two Connects begun on one new queue before either executes:
// one wins, the other gets Command Sequence Error, both complete exactly once.
func TestConcurrentConnects(t *testing.T) {
	cfg := &conf.Config{
		Listeners:  []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: "nqn.2024-01.io.gonvmf:raw", AllowAnyHost: true}},
	}
	tgt, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	port, _ := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, Keyed: true})
	tr := &rawTransport{completed: map[*Request]int{}}
	q, _ := port.NewQueue(tr, 32)
	var reqs [2]Request
	cd := make([]byte, 1024)
	(&nvmeproto.ConnectData{HostID: rawHostID, CNTLID: 0xFFFF, SubNQN: "nqn.2024-01.io.gonvmf:raw", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"}).Marshal(cd)
	for i := range reqs {
		r := &reqs[i]
		r.Cmd = nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, CID: uint16(i), SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: 1024}}
		(&nvmeproto.ConnectCommand{SQSize: 31}).ToCommand(&r.Cmd)
		if !q.Begin(r) {
			t.Fatal("Begin refused a Connect on a new queue")
		}
		r.Data = cd
	}
	q.Execute(&reqs[0])
	q.Execute(&reqs[1])
	if len(tr.cqes) != 2 || !tr.cqes[0].Status.Success() || tr.cqes[1].Status.Code() != nvmeproto.StatusCommandSequenceError {
		t.Fatalf("completions %+v", tr.cqes)
	}
}

// TestPortIDs: port IDs go up from 1 and, once 65535 is given, wrap past 0 to the first
// ID no open port has; a closed port's ID is not given again before the others.
func TestPortIDs(t *testing.T) {
	tgt, err := New(&conf.Config{StateFile: conf.StateFileNone}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	add := func() *Port {
		t.Helper()
		p, err := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, Keyed: true})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p1, p2 := add(), add()
	if p1.ID() != 1 || p2.ID() != 2 {
		t.Fatalf("first port IDs %d, %d; want 1, 2", p1.ID(), p2.ID())
	}
	p2.Close()
	if p := add(); p.ID() != 3 {
		t.Errorf("after closing port 2: ID %d, want 3", p.ID())
	}
	tgt.mu.Lock()
	tgt.nextPortID = 0xFFFF
	tgt.mu.Unlock()
	var ids []uint16
	for range 3 {
		ids = append(ids, add().ID())
	}
	// 0xFFFF, then 1 (open) and 2 (free since p2 closed).
	if want := []uint16{0xFFFF, 2, 4}; !slices.Equal(ids, want) {
		t.Errorf("port IDs across the wrap: %v, want %v (1 and 3 are open)", ids, want)
	}
}
