package target

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// oneHostAuthKeys gives host its keys on every subsystem; other hosts have none.
type oneHostAuthKeys struct {
	host string
	keys *dhchap.HostKeys
}

func (k oneHostAuthKeys) HostAuth(_, host string) (authenticates, required bool) {
	return host == k.host && k.keys != nil, false
}

func (k oneHostAuthKeys) HostKeys(_ context.Context, _, host string) (*dhchap.HostKeys, error) {
	if host == k.host {
		return k.keys, nil
	}
	return nil, nil
}

// syncBuffer is a bytes.Buffer safe for the goroutines that log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestAuthStepNotRunAfterClose: once Close has stopped a queue's authentication, no step
// of it runs, even when its worker had found the queue open and then got its slots.
// acquire takes no slots once its stop channel is closed, free as they are (the old
// code's selects picked a free slot or the closed channel at random: 1 in 4 calls took
// the slots); and an Authentication Send that the worker runs all the same (the queue
// closed after acquire returned) completes with Command Aborted due to SQ Deletion
// without computing: the old code ran the AUTH_Negotiate on the abandoned transaction,
// generating a DH key pair that nothing wiped, and answered it with success.
func TestAuthStepNotRunAfterClose(t *testing.T) {
	const host = "nqn.2014-08.org.nvmexpress:uuid:3f1e0c2a-5b7d-4e9f-8a6c-1d2e3f4a5b6c"
	t.Run("acquire", func(t *testing.T) {
		defer func(n int) { authSlotsFixed = n }(authSlotsFixed)
		authSlotsFixed = 2
		p := newAuthSlots()
		stop := make(chan struct{})
		close(stop)
		for i := range 100 {
			if h, ok := p.acquire(host, stop); ok {
				p.release(h)
				t.Fatalf("acquire %d, its stop channel closed, took the free slots", i+1)
			}
		}
		if len(p.all) != 0 || len(p.hosts) != 0 {
			t.Fatalf("after refused acquires: %d slots held, %d hosts listed; want none", len(p.all), len(p.hosts))
		}
		h, ok := p.acquire(host, make(chan struct{}))
		if !ok {
			t.Fatal("acquire with free slots and an open stop channel failed")
		}
		p.release(h)
	})

	t.Run("runAuth", func(t *testing.T) {
		const nqn = "nqn.2024-01.io.gonvmf:authclose"
		key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
		if err != nil {
			t.Fatal(err)
		}
		keys := oneHostAuthKeys{host, &dhchap.HostKeys{Host: key, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}}
		var logs syncBuffer
		cfg := &conf.Config{
			Listeners: []conf.Listener{{Address: "10.99.0.1"}},
			Subsystems: []conf.Subsystem{{NQN: nqn, AllowAnyHost: true,
				Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}}},
		}
		tgt, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithAuthKeys(keys))
		if err != nil {
			t.Fatal(err)
		}
		defer tgt.Close()
		port, err := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, Keyed: true})
		if err != nil {
			t.Fatal(err)
		}
		var computed atomic.Int32
		defer dhchap.SetControllerDHHook(func(nvmeproto.AuthDHGroupID) { computed.Add(1) })()

		buf := aligned.Bytes(8192)
		tr := &rawTransport{completed: map[*Request]int{}}
		q, err := port.NewQueue(tr, 32)
		if err != nil {
			t.Fatal(err)
		}
		connect := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6,
			SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: nvmeproto.ConnectDataSize, Key: 9}}
		(&nvmeproto.ConnectCommand{QID: 0, SQSize: 31}).ToCommand(&connect)
		cd := make([]byte, nvmeproto.ConnectDataSize)
		(&nvmeproto.ConnectData{HostID: rawHostID, CNTLID: nvmeproto.CNTLIDDynamic, SubNQN: nqn, HostNQN: host}).Marshal(cd)
		c := tr.submit(t, q, &Request{}, connect, cd, buf)
		if !c.Status.Success() {
			t.Fatalf("admin connect: %v", c.Status)
		}
		if _, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0); atr != nvmeproto.AuthReqATR {
			t.Fatalf("Connect AUTHREQ %#x, want ATR", atr)
		}
		b := q.bind.Load()

		h, err := dhchap.NewHost(dhchap.HostConfig{Secret: key, HostNQN: host, SubNQN: nqn}, 1)
		if err != nil {
			t.Fatal(err)
		}
		neg := h.Negotiate()
		r := &Request{}
		r.Cmd.Flags = nvmeproto.PSDTSGL << 6
		r.Cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: uint32(len(neg)), Key: 9}
		(&nvmeproto.AuthSendCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: 1, SPSP1: 1, TL: uint32(len(neg))}).ToCommand(&r.Cmd)
		if !q.Begin(r) {
			t.Fatalf("Begin refused the AUTH_Negotiate: %v", tr.last().Status)
		}
		r.Data = buf[:r.Length]
		copy(r.Data, neg)

		// Close stops the queue's authentication, then waits for the command begun.
		closed := make(chan bool, 1)
		go func() { closed <- q.Close() }()
		select {
		case <-b.auth.stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not stop the queue's authentication")
		}
		q.runAuth(r, b, hostKeysLoad{keys: keys.keys}) // as the worker does once it has its slots

		tr.mu.Lock()
		n := tr.completed[r]
		tr.mu.Unlock()
		if n != 1 {
			t.Fatalf("the AUTH_Negotiate completed %d times, want once", n)
		}
		if r.CQE.Status != nvmeproto.StatusAbortSQDeletion {
			t.Errorf("AUTH_Negotiate on a closed queue: %v, want %v", r.CQE.Status, nvmeproto.StatusAbortSQDeletion)
		}
		if n := computed.Load(); n != 0 {
			t.Errorf("the AUTH_Negotiate on a closed queue ran %d DH computations, want none", n)
		}
		if strings.Contains(logs.String(), "queue authenticated") {
			t.Errorf("a closed queue was logged as authenticated:\n%s", logs.String())
		}
		select {
		case drained := <-closed:
			if !drained {
				t.Error("Close reported commands left executing")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return once the AUTH_Negotiate had completed")
		}
	})
}

// TestLateBoundQueueAuthStopped: a host with a DH-HMAC-CHAP secret connects, and its
// connection goes while the Connect executes: Close finds the queue unbound and waits for
// the Connect, which binds it and starts its authentication. Settling the queue stops
// that authentication as Close stops that of a binding it sees: its AuthTimeout timer is
// stopped, so no "authentication timed out" line, no rejection counted and no Disconnect
// of the dead queue follow 60 s later. The old code left the timer running.
func TestLateBoundQueueAuthStopped(t *testing.T) {
	const (
		host = "nqn.2014-08.org.nvmexpress:uuid:7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
		nqn  = "nqn.2024-01.io.gonvmf:latebind"
	)
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	keys := oneHostAuthKeys{host, &dhchap.HostKeys{Host: key, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}}
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: nqn, AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}}},
	}
	tgt, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)), WithAuthKeys(keys))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	port, err := tgt.AddPort(PortConfig{TrType: TrTypeRDMA, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := &rawTransport{completed: map[*Request]int{}}
	q, err := port.NewQueue(tr, 32)
	if err != nil {
		t.Fatal(err)
	}
	r := &Request{}
	r.Cmd = nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6,
		SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: nvmeproto.ConnectDataSize, Key: 9}}
	(&nvmeproto.ConnectCommand{QID: 0, SQSize: 31}).ToCommand(&r.Cmd)
	if !q.Begin(r) {
		t.Fatalf("Begin refused the Connect: %v", tr.last().Status)
	}
	r.Data = aligned.Bytes(8192)[:r.Length]
	(&nvmeproto.ConnectData{HostID: rawHostID, CNTLID: nvmeproto.CNTLIDDynamic, SubNQN: nqn, HostNQN: host}).Marshal(r.Data)

	// The connection goes: Close looks at the queue (unbound) and waits for the Connect.
	closed := make(chan bool, 1)
	go func() { closed <- q.Close() }()
	waitGoroutine(t, "Close waiting for the Connect", "target.(*Queue).Close(", "target.(*Queue).waitDrained(")
	q.Execute(r)
	if c := tr.last(); !c.Status.Success() {
		t.Fatalf("Connect: %v", c.Status)
	}
	select {
	case drained := <-closed:
		if !drained {
			t.Fatal("Close reported commands left executing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the Connect had completed")
	}

	b := q.bind.Load()
	if b == nil || b.auth == nil {
		t.Fatal("the Connect did not bind the queue with authentication")
	}
	a := b.auth
	a.mu.Lock()
	stopped, running := a.closed, a.timer.Stop()
	a.mu.Unlock()
	if !stopped || running {
		t.Errorf("after the late-bound queue settled: authentication stopped %v, its AuthTimeout timer running %v; want stopped, not running", stopped, running)
	}
	select {
	case <-a.stopped:
	default:
		t.Error("the late-bound queue's authentication worker stop channel is open")
	}
	select {
	case <-b.ctrl.gone:
	case <-time.After(10 * time.Second):
		t.Error("the controller of the late-bound admin queue is still in its subsystem 10 s after Close")
	}
}

// waitGoroutine waits until a goroutine's stack holds every one of frames (function names
// as a traceback prints them).
func waitGoroutine(t *testing.T, what string, frames ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n := runtime.Stack(buf, true)
		for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
			if !slices.ContainsFunc(frames, func(f string) bool { return !strings.Contains(g, f) }) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no goroutine in %v after 10 s", what, frames)
		}
	}
}
