package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
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
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
