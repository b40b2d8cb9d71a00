package control_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/control"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
	"github.com/gonvmf/gonvmf/target/server"
)

// startFaulty is start with every namespace's backend opened with f injecting faults into
// its system calls (a real file on a disk that fails when told).
func startFaulty(t *testing.T, cfg *conf.Config, f *backend.Faults) (*server.Server, pb.ControlClient) {
	t.Helper()
	return startOpener(t, cfg, func(spec backend.Spec) (backend.Backend, error) {
		spec.Faults = f
		return backend.Open(spec)
	})
}

// startOpener is start with open opening every namespace's backend.
func startOpener(t *testing.T, cfg *conf.Config, open func(backend.Spec) (backend.Backend, error)) (*server.Server, pb.ControlClient) {
	t.Helper()
	s, err := server.New(cfg, server.Options{Logger: quiet, Loop: true, Target: []target.Option{target.WithBackendOpener(open)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := control.Start(s, s.Config().Control, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl, cc, err := control.Dial(control.DialOptions{Socket: s.Config().Control.Socket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return s, cl
}

func isWriteFaultDNR(err error) bool {
	var se *initiator.StatusError
	return errors.As(err, &se) && se.Status.Code() == nvmeproto.StatusWriteFault.Code() && se.Status.DNR()
}

// TestReopenFailedNamespace: a flush whose fdatasync fails (EIO injected once; the kernel
// would let the next one succeed) fails the namespace; the control API shows it failed
// with the reason, writes and flushes keep failing with Write Fault (DNR) and reads
// work; ReopenNamespace clears it, says what it cleared, and writes and flushes succeed
// again with the data written before the failure still there.
func TestReopenFailedNamespace(t *testing.T) {
	cfg := testConfig(socketPath(t))
	path := filepath.Join(t.TempDir(), "ns1.img")
	cfg.Subsystems[0].Namespaces[0] = conf.Namespace{NSID: 1, Backend: conf.BackendFile, Path: path, Size: 1 << 20}
	f := &backend.Faults{}
	s, cl := startFaulty(t, cfg, f)
	c := ctx(t)
	events := make(chan initiator.AsyncEvent, 8)
	h := host(t, s, subNQN, events)
	ns, _ := h.Namespace(1)

	state := func(what, want string) *pb.Namespace {
		t.Helper()
		r, err := cl.ListNamespaces(c, &pb.ListNamespacesRequest{Subsystem: subNQN})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Namespaces) != 1 || r.Namespaces[0].State != want {
			t.Fatalf("%s: namespaces %v, want namespace 1 %s", what, r.Namespaces, want)
		}
		return r.Namespaces[0]
	}
	state("at start", control.StateOK)

	data := bytes.Repeat([]byte("durable!"), 512)
	if _, err := ns.WriteAt(c, data, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := ns.Flush(c); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.WriteAt(c, bytes.Repeat([]byte{7}, 4096), 8192, 0); err != nil {
		t.Fatal(err)
	}
	f.FailSyncs(syscall.EIO)
	if err := ns.Flush(c); !isWriteFaultDNR(err) {
		t.Fatalf("flush with fdatasync failing: %v, want Write Fault with DNR", err)
	}
	n := state("after the failed flush", control.StateFailed)
	if !strings.Contains(n.Failure, "fdatasync") || !strings.Contains(n.Failure, path) || !strings.Contains(n.Failure, syscall.EIO.Error()) {
		t.Errorf("failure %q does not say that fdatasync of %s failed with EIO", n.Failure, path)
	}
	syncs := f.Syncs()
	if err := ns.Flush(c); !isWriteFaultDNR(err) {
		t.Errorf("second flush: %v, want Write Fault with DNR (the kernel would now say all is well)", err)
	}
	if _, err := ns.WriteAt(c, data, 0, 0); !isWriteFaultDNR(err) {
		t.Errorf("write to the failed namespace: %v, want Write Fault with DNR", err)
	}
	if f.Syncs() != syncs {
		t.Errorf("fdatasync called %d more times on the failed namespace", f.Syncs()-syncs)
	}
	got := make([]byte, len(data))
	if _, err := ns.ReadAt(c, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read from the failed namespace: %v (data equal: %v)", err, bytes.Equal(got, data))
	}
	// The failure is shown wherever namespaces are.
	st, err := cl.GetStats(c, &pb.GetStatsRequest{})
	if err != nil || len(st.Namespaces) != 1 || st.Namespaces[0].State != control.StateFailed {
		t.Errorf("GetStats namespaces %v %v, want namespace 1 failed", st.GetNamespaces(), err)
	}
	subs, err := cl.ListSubsystems(c, &pb.ListSubsystemsRequest{})
	if err != nil || subs.Subsystems[0].Namespaces[0].State != control.StateFailed {
		t.Errorf("ListSubsystems %v %v, want namespace 1 failed", subs, err)
	}

	_, err = cl.ReopenNamespace(c, &pb.ReopenNamespaceRequest{Subsystem: subNQN, Nsid: 7})
	wantCode(t, "reopen NSID 7", err, codes.NotFound, "7")
	_, err = cl.ReopenNamespace(c, &pb.ReopenNamespaceRequest{Subsystem: "nqn.2024-01.io.gonvmf:nope", Nsid: 1})
	wantCode(t, "reopen in an unknown subsystem", err, codes.NotFound, "nope")

	r, err := cl.ReopenNamespace(c, &pb.ReopenNamespaceRequest{Subsystem: subNQN, Nsid: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.ClearedFailure != n.Failure || r.Namespace.GetState() != control.StateOK || r.Namespace.GetBlocks() != 2048 {
		t.Errorf("reopen answered %v; want failure %q cleared and namespace 1 ok with 2048 blocks", r, n.Failure)
	}
	if ev := waitEvent(t, events); len(ev.Changed) != 1 || ev.Changed[0] != 1 {
		t.Errorf("host event after the reopen: %+v, want namespace 1 changed", ev)
	}
	state("after the reopen", control.StateOK)
	if _, err := ns.WriteAt(c, data, 4096, 0); err != nil {
		t.Errorf("write after the reopen: %v", err)
	}
	if err := ns.Flush(c); err != nil {
		t.Errorf("flush after the reopen: %v", err)
	}
	if _, err := ns.ReadAt(c, got, 0); err != nil || !bytes.Equal(got[:4096], data[:4096]) {
		t.Errorf("read after the reopen: %v (data written before the failure intact: %v)", err, bytes.Equal(got[:4096], data[:4096]))
	}
	// Reopening a healthy namespace is allowed and clears nothing.
	if r, err := cl.ReopenNamespace(c, &pb.ReopenNamespaceRequest{Subsystem: subNQN, Nsid: 1}); err != nil || r.ClearedFailure != "" {
		t.Errorf("reopening a healthy namespace: %v %v", r, err)
	}
}

// TestReopenCannotOpen: a reopen whose backend cannot be opened again fails with
// FailedPrecondition naming the cause, the namespace shows inactive and refuses commands
// (Invalid Namespace with DNR: nothing brings it back by itself), and a later reopen puts
// it back; while that reopen is opening the backend, commands get Namespace Not Ready
// without DNR and with CRD 1 (the Go initiator enables ACRE, as the Linux host does), and
// a host that retries (the Go initiator's default) gets its write through once the reopen
// is done.
func TestReopenCannotOpen(t *testing.T) {
	cfg := testConfig(socketPath(t))
	cfg.Subsystems[0].Namespaces[0] = conf.Namespace{NSID: 1, Backend: conf.BackendFile, Path: filepath.Join(t.TempDir(), "ns1.img"), Size: 1 << 20}
	var failOpen, holdOpen atomic.Bool
	opening, release := make(chan struct{}), make(chan struct{})
	s, cl := startOpener(t, cfg, func(spec backend.Spec) (backend.Backend, error) {
		if holdOpen.Load() {
			close(opening)
			<-release
		}
		if failOpen.Load() {
			return nil, fmt.Errorf("backend: open %s: %w", spec.Path, syscall.EIO)
		}
		return backend.Open(spec)
	})
	c := ctx(t)
	h := host(t, s, subNQN, nil)
	ns, _ := h.Namespace(1)
	failOpen.Store(true)
	_, err := cl.ReopenNamespace(c, &pb.ReopenNamespaceRequest{Subsystem: subNQN, Nsid: 1})
	wantCode(t, "reopen that cannot open the backend", err, codes.FailedPrecondition, "input/output error")
	r, err := cl.ListNamespaces(c, &pb.ListNamespacesRequest{})
	if err != nil || len(r.Namespaces) != 1 || r.Namespaces[0].State != control.StateInactive {
		t.Fatalf("namespaces %v %v, want namespace 1 inactive", r.GetNamespaces(), err)
	}
	var se *initiator.StatusError
	if _, err := ns.WriteAt(c, make([]byte, 4096), 0, 0); !errors.As(err, &se) || se.Status.Code() != nvmeproto.StatusInvalidNamespace.Code() || !se.Status.DNR() {
		t.Errorf("write to the inactive namespace: %v, want Invalid Namespace with DNR", err)
	}
	failOpen.Store(false)
	holdOpen.Store(true)
	reopened := make(chan error, 1)
	go func() {
		r, err := cl.ReopenNamespace(c, &pb.ReopenNamespaceRequest{Subsystem: subNQN, Nsid: 1})
		if err == nil && r.Namespace.GetState() != control.StateOK {
			err = fmt.Errorf("namespace %v after the reopen, want ok", r.Namespace)
		}
		reopened <- err
	}()
	select {
	case <-opening:
	case err := <-reopened:
		t.Fatalf("second reopen returned %v without opening the backend", err)
	}
	holdOpen.Store(false)
	raw := hostWith(t, s, subNQN, nil, func(o *initiator.Options) { o.MaxRetries = -1 })
	rawNS, _ := raw.Namespace(1)
	_, err = rawNS.WriteAt(c, make([]byte, 4096), 0, 0)
	if !errors.As(err, &se) || se.Status.Code() != nvmeproto.StatusNSNotReady || se.Status.DNR() || se.Status.CRD() != 1 {
		t.Errorf("write during the reopen (no retries): %v (status %v), want Namespace Not Ready without DNR, CRD 1", err, se.Status)
	}
	// A host that retries: its write is refused while the reopen holds, then goes through.
	refused := make(chan struct{}, 1)
	retrying := hostWith(t, s, subNQN, nil, func(o *initiator.Options) {
		dial := o.Loop
		o.Loop = func(depth int) (initiator.LoopConn, error) {
			conn, err := dial(depth)
			return notReadySpy{conn, refused}, err
		}
	})
	retryNS, _ := retrying.Namespace(1)
	written := make(chan error, 1)
	go func() {
		_, err := retryNS.WriteAt(c, make([]byte, 4096), 0, 0)
		written <- err
	}()
	select {
	case <-refused:
	case err := <-written:
		t.Errorf("write during the reopen ended (%v) before the target refused it", err)
	case <-time.After(10 * time.Second):
		t.Error("write during the reopen not refused within 10 s")
	}
	close(release)
	if err := <-written; err != nil {
		t.Errorf("write during the reopen, retried by the host: %v", err)
	}
	if err := <-reopened; err != nil {
		t.Fatalf("second reopen: %v", err)
	}
	if _, err := ns.WriteAt(c, make([]byte, 4096), 0, 0); err != nil {
		t.Errorf("write after the second reopen: %v", err)
	}
}

// notReadySpy signals refused (without blocking) when a write completes with Namespace
// Not Ready.
type notReadySpy struct {
	initiator.LoopConn
	refused chan<- struct{}
}

func (s notReadySpy) Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error {
	if cmd.Opcode != nvmeproto.OpWrite || cmd.IsFabrics() {
		return s.LoopConn.Submit(cmd, data, done)
	}
	return s.LoopConn.Submit(cmd, data, func(cqe nvmeproto.Completion) {
		if cqe.Status.Code() == nvmeproto.StatusNSNotReady {
			select {
			case s.refused <- struct{}{}:
			default:
			}
		}
		done(cqe)
	})
}

// closeFails is a backend whose Close closes it and reports a failure.
type closeFails struct{ backend.Backend }

func (b closeFails) Close() error {
	b.Backend.Close()
	return errors.New("injected: close failed")
}

// TestRemoveReleaseFails: RemoveSubsystem and RemoveNamespace of what has a backend that
// fails to close take effect (the subsystem, the namespace, are no longer listed) and
// answer alike: FailedPrecondition saying the removal took effect but releasing failed,
// and naming the namespace. The old code answered RemoveSubsystem with success.
func TestRemoveReleaseFails(t *testing.T) {
	const doomed = 5 << 20
	cfg := testConfig(socketPath(t))
	cfg.Subsystems[0].Namespaces = append(cfg.Subsystems[0].Namespaces, conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: doomed})
	cfg.Subsystems = append(cfg.Subsystems, conf.Subsystem{NQN: twoNQN, AllowAnyHost: true,
		Namespaces: []conf.Namespace{{NSID: 3, Backend: conf.BackendNull, Size: doomed}}})
	_, cl := startOpener(t, cfg, func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err == nil && s.Size == doomed {
			b = closeFails{b}
		}
		return b, err
	})
	c := ctx(t)
	_, err := cl.RemoveNamespace(c, &pb.RemoveNamespaceRequest{Subsystem: subNQN, Nsid: 2})
	wantCode(t, "RemoveNamespace, its backend failing to close", err, codes.FailedPrecondition,
		target.ErrRemovedUnclean.Error()+": namespace 2: closing backend: injected: close failed")
	_, err = cl.RemoveSubsystem(c, &pb.RemoveSubsystemRequest{Nqn: twoNQN})
	wantCode(t, "RemoveSubsystem, its namespace's backend failing to close", err, codes.FailedPrecondition,
		target.ErrRemovedUnclean.Error()+": namespace 3: closing backend: injected: close failed")
	subs, err := cl.ListSubsystems(c, &pb.ListSubsystemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(subs.Subsystems) != 1 || subs.Subsystems[0].Nqn != subNQN || len(subs.Subsystems[0].Namespaces) != 1 {
		t.Errorf("subsystems after the removals: %v; want %s with namespace 1 alone", subs.Subsystems, subNQN)
	}
}
