package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/server"
)

const subNQN = "nqn.2024-01.io.gonvmf:server"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func config(addr string, port uint16) *conf.Config {
	return &conf.Config{
		Listeners: []conf.Listener{{Address: addr, Port: port}},
		Subsystems: []conf.Subsystem{{NQN: subNQN, AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 4 << 20}}}},
		Transport: conf.Transport{InCapsuleDataSize: conf.DefaultInCapsuleDataSize, BufferPoolSize: 8 << 20, PollGroups: 1},
	}
}

// identify connects to the subsystem with o and returns its namespaces' sizes.
func identify(t *testing.T, o initiator.Options) []int64 {
	t.Helper()
	o.SubNQN, o.Logger, o.Queues = subNQN, quiet, 1
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, o)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer c.Close()
	var sizes []int64
	for _, ns := range c.Namespaces() {
		sizes = append(sizes, ns.Size())
	}
	return sizes
}

func TestLoopServer(t *testing.T) {
	cfg := config("10.99.0.1", 0)
	before := cfg.Clone()
	s, err := server.New(cfg, server.Options{Logger: quiet, Loop: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("New changed its argument")
	}
	if s.Loop() == nil || len(s.Listeners()) != 0 {
		t.Fatalf("loop %v, listeners %v", s.Loop(), s.Listeners())
	}
	if _, err := s.AddListener(conf.Listener{Address: "10.99.0.2"}); err == nil || !strings.Contains(err.Error(), "in-process") {
		t.Errorf("AddListener in loop mode: %v", err)
	}
	o := initiator.Options{Transport: initiator.TransportLoop, Loop: func(depth int) (initiator.LoopConn, error) {
		c, err := s.Loop().Dial(depth)
		if err != nil {
			return nil, err
		}
		return c, nil
	}}
	if got := identify(t, o); !reflect.DeepEqual(got, []int64{4 << 20}) {
		t.Errorf("namespace sizes %v", got)
	}

	// The running configuration: resolved, with the configuration's listener (not served),
	// and what changed at run time.
	if err := s.Target().AddNamespace(subNQN, conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	rc := s.Config()
	if len(rc.Listeners) != 1 || rc.Listeners[0].Port != conf.DefaultPort || len(rc.Subsystems[0].Namespaces) != 2 {
		t.Errorf("running configuration:\n%s", rc)
	}
	if _, err := conf.Parse([]byte(rc.String()), ""); err != nil {
		t.Errorf("the running configuration does not parse: %v\n%s", err, rc)
	}
	if got := identify(t, o); !reflect.DeepEqual(got, []int64{4 << 20, 1 << 30}) {
		t.Errorf("namespace sizes after adding one: %v", got)
	}

	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.AddListener(conf.Listener{Address: "10.99.0.2"}); !errors.Is(err, server.ErrClosed) {
		t.Errorf("AddListener after Close: %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	bad := config("10.99.0.1", 0)
	bad.Subsystems[0].Namespaces[0].LBASize = 1000
	if _, err := server.New(bad, server.Options{Logger: quiet, Loop: true}); err == nil ||
		!strings.Contains(err.Error(), "subsystems[0].namespaces[0].lba_size: 1000 is not a supported LBA size") {
		t.Errorf("New with a bad configuration: %v", err)
	}
	if rdmatest.Required() {
		return
	}
	// Without an RDMA device the error says so, and nothing stays open.
	if _, err := server.New(config("10.99.0.1", 0), server.Options{Logger: quiet}); err == nil || !strings.Contains(err.Error(), "rdma") {
		t.Errorf("New without RDMA: %v", err)
	}
}

// TestRDMAServer: New listens on every configured listener, AddListener adds one (checked
// against those being served), hosts reach the target through both, and Config lists them.
func TestRDMAServer(t *testing.T) {
	ip := rdmatest.RequireAddr(t)
	port := uint16(4900 + time.Now().Unix()%50)
	s, err := server.New(config(ip.String(), port), server.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l := s.Listeners(); len(l) != 1 || l[0].Addr() != netip.AddrPortFrom(ip, port) {
		t.Fatalf("listeners %v", l)
	}
	if _, err := s.AddListener(conf.Listener{Address: ip.String(), Port: port}); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("adding the same listener again: %v", err)
	}
	lis, err := s.AddListener(conf.Listener{Address: ip.String(), Port: port + 100})
	if err != nil {
		t.Fatal(err)
	}
	rc := s.Config()
	if len(rc.Listeners) != 2 || rc.Listeners[1].Port != port+100 || rc.Listeners[1].Transport != "rdma" {
		t.Errorf("running configuration:\n%s", rc)
	}
	for _, p := range []uint16{port, lis.Addr().Port()} {
		o := initiator.Options{Transport: initiator.TransportRDMA, Addr: ip.String(), Port: int(p)}
		if got := identify(t, o); !reflect.DeepEqual(got, []int64{4 << 20}) {
			t.Errorf("port %d: namespace sizes %v", p, got)
		}
	}
	if st := s.Stats(); st.PoolTotalBytes != 8<<20 {
		t.Errorf("stats %+v", st)
	}
	if gs, ps := s.GroupStats(), s.PoolStats(); len(gs) != 1 || gs[0].Completions == 0 || len(ps) != 1 || ps[0].TotalBytes != 8<<20 {
		t.Errorf("poll group stats %+v, pool stats %+v", gs, ps)
	}

	// RemoveListener: the listener goes, hosts cannot connect there any more, the other
	// one keeps serving.
	if err := s.RemoveListener(conf.Listener{Address: ip.String(), Port: port + 100}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveListener(conf.Listener{Address: ip.String(), Port: port + 100}); !errors.Is(err, server.ErrNoSuchListener) {
		t.Errorf("removing it twice: %v", err)
	}
	if rc := s.Config(); len(rc.Listeners) != 1 || rc.Listeners[0].Port != port {
		t.Errorf("listeners after the removal: %+v", rc.Listeners)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportRDMA, Addr: ip.String(), Port: int(port + 100),
		SubNQN: subNQN, Logger: quiet, Queues: 1}); err == nil {
		c.Close()
		t.Errorf("connected through the removed listener")
	}
	if got := identify(t, initiator.Options{Transport: initiator.TransportRDMA, Addr: ip.String(), Port: int(port)}); !reflect.DeepEqual(got, []int64{4 << 20}) {
		t.Errorf("the remaining listener: namespace sizes %v", got)
	}

	// A reload that moves the listener to the wildcard address of the same port and back:
	// the listener the new one overlaps goes first, or the new one is refused.
	for _, addr := range []string{"0.0.0.0", ip.String()} {
		next := config(addr, port)
		if _, err := s.Reload(next); err != nil {
			t.Fatalf("reload to %s port %d: %v", addr, port, err)
		}
		if l := s.Listeners(); len(l) != 1 || l[0].Addr().Addr().String() != addr {
			t.Errorf("listeners after the reload to %s: %v", addr, l)
		}
		if got := identify(t, initiator.Options{Transport: initiator.TransportRDMA, Addr: ip.String(), Port: int(port)}); !reflect.DeepEqual(got, []int64{4 << 20}) {
			t.Errorf("after the reload to %s: namespace sizes %v", addr, got)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// gatedNS is a memory backend whose writes wait at a gate, on worker goroutines.
type gatedNS struct {
	backend.Backend
	gate    chan struct{}
	entered atomic.Int32
}

func (g *gatedNS) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	g.entered.Add(1)
	<-g.gate
	return g.Backend.WriteBlocks(buf, slba, fua)
}

func (g *gatedNS) Info() backend.Info {
	i := backend.Describe(g.Backend)
	i.Inline, i.Workers = false, 8
	return i
}

// TestRDMAShutdownAnswersInFlightWrites: what gonvmf serve does on SIGTERM. Writes in
// flight when the shutdown starts (held in a slow backend) get their successful
// responses before the host is disconnected; a write sent during the drain is not
// executed (the host resends it after reconnecting) and fails on the host only when the
// connection goes; new connections are refused; Shutdown returns once the writes are
// answered.
func TestRDMAShutdownAnswersInFlightWrites(t *testing.T) {
	ip := rdmatest.RequireAddr(t)
	port := uint16(4950 + time.Now().Unix()%40)
	g := &gatedNS{gate: make(chan struct{})}
	defer func() {
		select {
		case <-g.gate:
		default:
			close(g.gate)
		}
	}()
	opener := target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(spec)
		if err != nil {
			return nil, err
		}
		g.Backend = b
		return g, nil
	})
	s, err := server.New(config(ip.String(), port), server.Options{Logger: quiet, Target: []target.Option{opener}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o := initiator.Options{Transport: initiator.TransportRDMA, Addr: ip.String(), Port: int(port), SubNQN: subNQN, Logger: quiet,
		Queues: 1, CommandTimeout: 60 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := c.Namespaces()[0]
	const inflight = 4
	errs := make(chan error, inflight)
	for i := range inflight {
		go func() {
			_, err := ns.WriteAt(ctx, bytes.Repeat([]byte{byte(i + 1)}, 4096), int64(i)*4096, 0)
			errs <- err
		}()
	}
	for g.entered.Load() < inflight {
		if ctx.Err() != nil {
			t.Fatalf("only %d writes reached the backend", g.entered.Load())
		}
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		shut <- s.Shutdown(sctx)
	}()
	time.Sleep(500 * time.Millisecond) // the drain has begun
	late := make(chan error, 1)
	go func() {
		_, err := ns.WriteAt(ctx, make([]byte, 4096), 64<<10, 0)
		late <- err
	}()
	if _, err := initiator.Dial(ctx, o); err == nil {
		t.Error("a new connection was accepted during the drain")
	}
	if n := g.entered.Load(); n != inflight {
		t.Errorf("%d writes reached the backend: the one sent during the drain was started", n)
	}
	close(g.gate)
	for i := range inflight {
		if err := <-errs; err != nil {
			t.Errorf("write %d in flight across the shutdown: %v", i, err)
		}
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	select {
	case err := <-late:
		if err == nil {
			t.Error("the write sent during the drain succeeded")
		}
	case <-time.After(60 * time.Second):
		t.Error("the write sent during the drain never ended")
	}
	if n := g.entered.Load(); n != inflight {
		t.Errorf("%d writes reached the backend, want %d", n, inflight)
	}
}

// TestLoopShutdownReportsSyncFailure: the flush of an orderly shutdown syncs every
// namespace; one whose sync fails makes Shutdown fail with backend.ErrSync (gonvmf serve
// then exits 1 instead of reporting a clean stop).
func TestLoopShutdownReportsSyncFailure(t *testing.T) {
	f := &backend.Faults{}
	cfg := config("10.99.0.1", 0)
	cfg.Subsystems[0].Namespaces = []conf.Namespace{{NSID: 1, Backend: conf.BackendFile, Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20}}
	s, err := server.New(cfg, server.Options{Logger: quiet, Loop: true, Target: []target.Option{
		target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
			spec.Faults = f
			return backend.Open(spec)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	f.FailSyncs(syscall.EIO)
	err = s.Shutdown(context.Background())
	if !errors.Is(err, backend.ErrSync) {
		t.Errorf("Shutdown with a failing sync: %v, want backend.ErrSync", err)
	}
	if f.Syncs() != 1 {
		t.Errorf("%d syncs at shutdown, want 1", f.Syncs())
	}
}

// anaStates reads the ANA log page through the listener at p and returns each group's
// state.
func anaStates(t *testing.T, ip netip.Addr, p uint16) map[uint32]nvmeproto.ANAState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportRDMA, Addr: ip.String(), Port: int(p),
		SubNQN: subNQN, Logger: quiet, Queues: 1})
	if err != nil {
		t.Fatalf("connecting to port %d: %v", p, err)
	}
	defer c.Close()
	b := make([]byte, 4096)
	if err := c.GetLogPage(ctx, nvmeproto.LIDANA, nvmeproto.NSIDAll, 0, b); err != nil {
		t.Fatalf("ANA log through port %d: %v", p, err)
	}
	var l nvmeproto.ANALog
	if err := l.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	out := map[uint32]nvmeproto.ANAState{}
	for _, g := range l.Groups {
		out[g.GroupID] = g.State
	}
	return out
}

// TestRDMAServerANA: each listener starts with its configured ANA states; SetANAState
// and Reload change them per listener, Config shows them, and hosts read them from the
// ANA log of the listener they connected through.
func TestRDMAServerANA(t *testing.T) {
	ip := rdmatest.RequireAddr(t)
	port := uint16(4950 + time.Now().Unix()%40)
	cfg := config(ip.String(), port)
	cfg.Listeners = append(cfg.Listeners, conf.Listener{Address: ip.String(), Port: port + 100})
	cfg.Listeners[1].ANAStates[1] = conf.ANAInaccessible
	s, err := server.New(cfg, server.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := netip.AddrPortFrom(ip, port)
	if got := anaStates(t, ip, port); got[1] != nvmeproto.ANAOptimized {
		t.Errorf("listener A: %v", got)
	}
	if got := anaStates(t, ip, port+100); got[1] != nvmeproto.ANAInaccessible {
		t.Errorf("listener B: %v", got)
	}

	// Fail over: A inaccessible, B optimized.
	if err := s.SetANAState(context.Background(), a, 1, conf.ANAInaccessible); err != nil {
		t.Fatal(err)
	}
	next := cfg.Clone()
	next.Listeners[1].ANAStates[1] = conf.ANAOptimized
	next.Listeners[1].ANAStates[4] = conf.ANAChange
	if err := next.Resolve(); err != nil {
		t.Fatal(err)
	}
	changes, err := s.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	// A goes back to its configured (default) optimized; B's group 1 becomes optimized and
	// group 4 enters change: states that serve I/O first.
	lis := func(p uint16) string { return fmt.Sprintf("listener rdma %s port %d", ip, p) }
	want := []string{lis(port) + ": ANA group 1 inaccessible → optimized", lis(port+100) + ": ANA group 1 inaccessible → optimized",
		lis(port+100) + ": ANA group 4 optimized → change"}
	if !reflect.DeepEqual(changes, want) {
		t.Errorf("Reload changes %q, want %q", changes, want)
	}
	// The running configuration is next: A's group 1 back to not set, not "optimized".
	if got := s.Config().String(); got != next.String() {
		t.Errorf("running configuration after the reload:\n%s\nwant:\n%s", got, next)
	}
	if err := s.SetANAState(context.Background(), a, 1, conf.ANAInaccessible); err != nil {
		t.Fatal(err)
	}
	if got := anaStates(t, ip, port); got[1] != nvmeproto.ANAInaccessible {
		t.Errorf("listener A after the switch: %v", got)
	}
	if got := anaStates(t, ip, port+100); got[1] != nvmeproto.ANAOptimized || got[4] != nvmeproto.ANAChange {
		t.Errorf("listener B after the switch: %v", got)
	}
	rc := s.Config()
	if rc.Listeners[0].State(1) != conf.ANAInaccessible || rc.Listeners[1].State(1) != conf.ANAOptimized || rc.Listeners[1].State(4) != conf.ANAChange {
		t.Errorf("running configuration:\n%s", rc)
	}
	if err := s.SetANAState(context.Background(), netip.AddrPortFrom(ip, port+7), 1, conf.ANAOptimized); !errors.Is(err, server.ErrNoSuchListener) {
		t.Errorf("SetANAState on a listener not served: %v", err)
	}
}
