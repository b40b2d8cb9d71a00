package target

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// lateCloseTransport is a rawTransport that, asked to disconnect, closes its queue only
// once release is closed: a transport slow to tear a connection down.
type lateCloseTransport struct {
	rawTransport
	q            *Queue
	once         sync.Once
	disconnected chan struct{} // closed at the first Disconnect
	release      chan struct{} // Close follows once it is closed
}

func newLateCloseTransport() *lateCloseTransport {
	return &lateCloseTransport{rawTransport: rawTransport{completed: map[*Request]int{}},
		disconnected: make(chan struct{}), release: make(chan struct{})}
}

func (tr *lateCloseTransport) Disconnect(reason error) {
	tr.rawTransport.Disconnect(reason)
	tr.once.Do(func() {
		close(tr.disconnected)
		go func() {
			<-tr.release
			tr.q.Close()
		}()
	})
}

// lockedBuffer is a bytes.Buffer for a logger on one goroutine and a test on another.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// denyEnv is a target whose subsystem lists two hosts, the first connected through a
// lateCloseTransport and the second through a rawTransport.
type denyEnv struct {
	tgt        *Target
	late       *lateCloseTransport
	logs       *lockedBuffer
	nqn, a, b  string
	aID, bID   uint16
	otherAdmin *Queue
}

func newDenyEnv(t *testing.T, opts ...Option) *denyEnv {
	t.Helper()
	e := &denyEnv{nqn: "nqn.2024-01.io.gonvmf:deny", logs: &lockedBuffer{},
		a: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000000a",
		b: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000000b"}
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: e.nqn, Hosts: []string{e.a, e.b},
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}}},
	}
	tgt, err := New(cfg, append(opts, WithLogger(slog.New(slog.NewTextHandler(e.logs, nil))))...)
	if err != nil {
		t.Fatal(err)
	}
	e.tgt = tgt
	port, err := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	buf := aligned.Bytes(4096)
	connect := func(tr TransportQueue, raw *rawTransport, host string) *Queue {
		t.Helper()
		q, err := port.NewQueue(tr, 8)
		if err != nil {
			t.Fatal(err)
		}
		cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6,
			SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: 1024, Key: 9}}
		(&nvmeproto.ConnectCommand{SQSize: 7}).ToCommand(&cmd)
		cd := make([]byte, 1024)
		(&nvmeproto.ConnectData{HostID: [16]byte{15: 1}, CNTLID: 0xFFFF, SubNQN: e.nqn, HostNQN: host}).Marshal(cd)
		if c := raw.submit(t, q, &Request{}, cmd, cd, buf); !c.Status.Success() {
			t.Fatalf("connect %s: %v", host, c.Status)
		}
		return q
	}
	e.late = newLateCloseTransport()
	e.late.q = connect(e.late, &e.late.rawTransport, e.a)
	other := &rawTransport{completed: map[*Request]int{}}
	e.otherAdmin = connect(other, other, e.b)
	e.aID, e.bID = e.late.q.ControllerID(), e.otherAdmin.ControllerID()
	t.Cleanup(func() {
		select {
		case <-e.late.release:
		default:
			close(e.late.release)
		}
		e.otherAdmin.Close()
		tgt.Close()
	})
	return e
}

// controllerIDs returns the IDs of the controllers the target lists for subsystem nqn.
func controllerIDs(tgt *Target, nqn string) []uint16 {
	var ids []uint16
	for _, c := range tgt.Controllers() {
		if c.Subsystem == nqn {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// TestDenyHostReturnsOnceItsControllersAreGone: DenyHost returns once the denied host's
// controllers have left the subsystem, however long their transport takes to close their
// admin queues, so that what an operator lists right after it (Controllers, the control
// API's ListControllers and stats, the Subsystem DenyHost answers) no longer shows them;
// the other host's controller stays. The old code returned as soon as it had asked the
// transport to disconnect, and the controller was still listed until the transport closed
// its queue.
func TestDenyHostReturnsOnceItsControllersAreGone(t *testing.T) {
	e := newDenyEnv(t)
	type result struct {
		err  error
		left []uint16 // the subsystem's controllers as DenyHost returned
	}
	done := make(chan result, 1)
	go func() {
		err := e.tgt.DenyHost(e.nqn, e.a)
		done <- result{err, controllerIDs(e.tgt, e.nqn)}
	}()
	select {
	case <-e.late.disconnected:
	case <-time.After(10 * time.Second):
		t.Fatalf("DenyHost did not disconnect the denied host's admin queue:\n%s", e.logs)
	}
	// The transport holds the queue open: DenyHost must not return until it closes it.
	select {
	case r := <-done:
		t.Fatalf("DenyHost returned (%v) while the transport had not closed the denied host's admin queue: the subsystem lists controllers %v (the denied one is %d)",
			r.err, r.left, e.aID)
	case <-time.After(200 * time.Millisecond):
	}
	close(e.late.release)
	select {
	case r := <-done:
		if r.err != nil || len(r.left) != 1 || r.left[0] != e.bID {
			t.Errorf("DenyHost: %v; controllers as it returned %v, want only the other host's %d", r.err, r.left, e.bID)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("DenyHost did not return within 10 s of the transport closing the queue:\n%s", e.logs)
	}
}

// TestDenyHostWaitIsBounded: a transport that does not close a denied host's admin queue
// holds DenyHost up for the queue-close timeout at most; the change stands, and the log
// names the controllers still listed.
func TestDenyHostWaitIsBounded(t *testing.T) {
	e := newDenyEnv(t, WithQueueCloseTimeout(300*time.Millisecond))
	start := time.Now()
	if err := e.tgt.DenyHost(e.nqn, e.a); err != nil {
		t.Fatalf("DenyHost with a transport that does not close: %v", err)
	}
	took := time.Since(start)
	if took < 300*time.Millisecond || took > 10*time.Second {
		t.Errorf("DenyHost returned after %v, want the queue-close timeout (300ms)", took)
	}
	if hosts := e.tgt.Config().Subsystems[0].Hosts; len(hosts) != 1 || hosts[0] != e.b {
		t.Errorf("hosts after DenyHost: %v, want only %s", hosts, e.b)
	}
	if log := e.logs.String(); !strings.Contains(log, "their transport has not closed their admin queues") ||
		!strings.Contains(log, fmt.Sprintf("cntlids=[%d]", e.aID)) {
		t.Errorf("the log does not name the controller still listed (%d):\n%s", e.aID, log)
	}
	close(e.late.release)
}
