package control_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/target"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/target/control"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
	"github.com/gonvmf/gonvmf/target/server"
)

const (
	subNQN  = "nqn.2024-01.io.gonvmf:ctl"
	twoNQN  = "nqn.2024-01.io.gonvmf:ctl-two"
	hostNQN = "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// socketPath is a short socket path (t.TempDir paths can pass the 107-byte limit).
func socketPath(t *testing.T) string {
	d, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "run", "gonvmf.sock")
}

func testConfig(socket string) *conf.Config {
	return &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: subNQN, AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 4 << 20}}}},
		Transport: conf.Transport{InCapsuleDataSize: conf.DefaultInCapsuleDataSize, BufferPoolSize: 8 << 20, PollGroups: 1},
		Control:   conf.Control{Socket: socket},
	}
}

// start serves cfg in-process (loop) with its control API, and dials the API.
func start(t *testing.T, cfg *conf.Config) (*server.Server, pb.ControlClient) {
	t.Helper()
	s, _ := serve(t, cfg)
	cl, cc, err := control.Dial(control.DialOptions{Socket: s.Config().Control.Socket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return s, cl
}

// serve starts a server on the loop transport with the target options, and its control
// API; both are closed at the end of the test.
func serve(t *testing.T, cfg *conf.Config, opts ...target.Option) (*server.Server, *control.Server) {
	t.Helper()
	s, err := server.New(cfg, server.Options{Logger: quiet, Loop: true, Target: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cs, err := control.Start(s, s.Config().Control, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return s, cs
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func wantCode(t *testing.T, what string, err error, code codes.Code, text string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), text) {
		t.Errorf("%s: %v; want %v containing %q", what, err, code, text)
	}
}

// host connects a Go host to the loop server; it rescans namespaces on change events.
func host(t *testing.T, s *server.Server, nqn string, events chan<- initiator.AsyncEvent) *initiator.Controller {
	t.Helper()
	return hostWith(t, s, nqn, events, nil)
}

// hostWith is host with mut changing the options first.
func hostWith(t *testing.T, s *server.Server, nqn string, events chan<- initiator.AsyncEvent, mut func(*initiator.Options)) *initiator.Controller {
	t.Helper()
	o := initiator.Options{Transport: initiator.TransportLoop, SubNQN: nqn, HostNQN: hostNQN, Logger: quiet,
		Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) },
		OnAsyncEvent: func(ev initiator.AsyncEvent) {
			if events != nil {
				events <- ev
			}
		}}
	if mut != nil {
		mut(&o)
	}
	c, err := initiator.Dial(ctx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func sizes(c *initiator.Controller) map[uint32]int64 {
	m := map[uint32]int64{}
	for _, ns := range c.Namespaces() {
		m[ns.NSID] = ns.Size()
	}
	return m
}

func waitEvent(t *testing.T, events <-chan initiator.AsyncEvent) initiator.AsyncEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no asynchronous event within 10 s")
	}
	panic("unreachable")
}

// TestControlAPI exercises every RPC over the Unix socket against an in-process target
// with a connected host, which sees namespace changes without reconnecting.
func TestControlAPI(t *testing.T) {
	sock := socketPath(t)
	s, cl := start(t, testConfig(sock))
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v mode %v", err, fi.Mode())
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v", fi.Mode())
	}
	events := make(chan initiator.AsyncEvent, 16)
	h := host(t, s, subNQN, events)
	c := ctx(t)

	// Namespaces: add, resize, write-protect, remove; the host follows each.
	file := filepath.Join(t.TempDir(), "two.img")
	ns, err := cl.AddNamespace(c, &pb.AddNamespaceRequest{Subsystem: subNQN, Namespace: &pb.Namespace{Nsid: 2, Backend: "file", Path: file, Size: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Blocks != 2048 || ns.LbaSize != 512 || ns.Uuid != conf.FormatUUID(conf.DeriveUUID(subNQN, 2)) {
		t.Errorf("added namespace %v", ns)
	}
	if ev := waitEvent(t, events); len(ev.Changed) != 1 || ev.Changed[0] != 2 || sizes(h)[2] != 1<<20 {
		t.Errorf("host after the add: event %+v, namespaces %v", ev, sizes(h))
	}
	if ns, err = cl.ResizeNamespace(c, &pb.ResizeNamespaceRequest{Subsystem: subNQN, Nsid: 2, Size: 3 << 20}); err != nil || ns.Size != 3<<20 || ns.Blocks != 3<<20/512 {
		t.Fatalf("resize: %v %v", ns, err)
	}
	if waitEvent(t, events); sizes(h)[2] != 3<<20 {
		t.Errorf("host after the resize: %v", sizes(h))
	}
	if ns, err = cl.SetNamespaceReadOnly(c, &pb.SetNamespaceReadOnlyRequest{Subsystem: subNQN, Nsid: 2, ReadOnly: true}); err != nil || !ns.ReadOnly {
		t.Fatalf("read-only: %v %v", ns, err)
	}
	waitEvent(t, events)
	n2, _ := h.Namespace(2)
	if _, err := n2.WriteAt(c, make([]byte, 4096), 0, 0); err == nil {
		t.Errorf("write to the write-protected namespace succeeded")
	}
	n1, _ := h.Namespace(1)
	if _, err := n1.WriteAt(c, make([]byte, 8192), 0, 0); err != nil {
		t.Fatal(err)
	}
	list, err := cl.ListNamespaces(c, &pb.ListNamespacesRequest{Subsystem: subNQN})
	if err != nil || len(list.Namespaces) != 2 || list.Namespaces[0].Counters.WriteCommands != 1 || list.Namespaces[0].Counters.WriteBytes != 8192 {
		t.Errorf("namespaces %v %v", list, err)
	}
	if _, err := cl.RemoveNamespace(c, &pb.RemoveNamespaceRequest{Subsystem: subNQN, Nsid: 2}); err != nil {
		t.Fatal(err)
	}
	if waitEvent(t, events); len(sizes(h)) != 1 {
		t.Errorf("host after the removal: %v", sizes(h))
	}

	// Errors: status codes, and messages that name the object and the reason.
	_, err = cl.AddNamespace(c, &pb.AddNamespaceRequest{Subsystem: subNQN, Namespace: &pb.Namespace{Nsid: 1, Backend: "null", Size: 1 << 20}})
	wantCode(t, "existing nsid", err, codes.AlreadyExists, `nsid 1 in "`+subNQN+`"`)
	_, err = cl.AddNamespace(c, &pb.AddNamespaceRequest{Subsystem: subNQN, Namespace: &pb.Namespace{Nsid: 3, Backend: "null", Size: 1<<20 + 1}})
	wantCode(t, "bad size", err, codes.InvalidArgument, "is not a multiple of the LBA size 512")
	_, err = cl.AddNamespace(c, &pb.AddNamespaceRequest{Subsystem: subNQN, Namespace: &pb.Namespace{Nsid: 3, Backend: "null", Size: 1 << 20, Uuid: "nope"}})
	wantCode(t, "bad uuid", err, codes.InvalidArgument, `namespace 3: uuid "nope"`)
	_, err = cl.ResizeNamespace(c, &pb.ResizeNamespaceRequest{Subsystem: subNQN, Nsid: 1, Size: 1 << 20})
	wantCode(t, "shrink", err, codes.FailedPrecondition, "cannot shrink")
	_, err = cl.RemoveNamespace(c, &pb.RemoveNamespaceRequest{Subsystem: subNQN, Nsid: 9})
	wantCode(t, "missing namespace", err, codes.NotFound, "nsid 9")
	_, err = cl.ListNamespaces(c, &pb.ListNamespacesRequest{Subsystem: twoNQN})
	wantCode(t, "missing subsystem", err, codes.NotFound, twoNQN)
	_, err = cl.DenyHost(c, &pb.DenyHostRequest{Subsystem: subNQN, HostNqn: hostNQN})
	wantCode(t, "deny on allow-any", err, codes.FailedPrecondition, "allows any host")
	_, err = cl.AddListener(c, &pb.AddListenerRequest{Listener: &pb.Listener{Address: "10.99.0.2"}})
	wantCode(t, "listener in loop mode", err, codes.FailedPrecondition, "in-process")
	_, err = cl.SetANAState(c, &pb.SetANAStateRequest{Listener: &pb.Listener{Address: "10.99.0.1"}, Group: 1, State: "inaccessible"})
	wantCode(t, "ANA state of a listener not served", err, codes.NotFound, "no such listener: 10.99.0.1:4420")
	_, err = cl.SetANAState(c, &pb.SetANAStateRequest{Listener: &pb.Listener{Address: "10.99.0.1"}, Group: 129, State: "inaccessible"})
	wantCode(t, "ANA group 129", err, codes.InvalidArgument, "ANA group 129 is not a group ID; use 1..128")
	_, err = cl.SetANAState(c, &pb.SetANAStateRequest{Listener: &pb.Listener{Address: "10.99.0.1"}, Group: 1, State: "standby"})
	wantCode(t, "ANA state standby", err, codes.InvalidArgument, `"standby" is not an ANA state`)
	_, err = cl.AddListener(c, &pb.AddListenerRequest{Listener: &pb.Listener{Address: "10.99.0.2", AnaStates: []*pb.ANAGroupState{{Group: 0, State: "optimized"}}}})
	wantCode(t, "listener with ANA group 0", err, codes.InvalidArgument, "ANA group 0 is not a group ID")

	// Subsystems and hosts.
	sub, err := cl.AddSubsystem(c, &pb.AddSubsystemRequest{Subsystem: &pb.Subsystem{Nqn: twoNQN, Model: "ctl-test", Hosts: []string{hostNQN},
		CntlidMin: 0x8000, Namespaces: []*pb.Namespace{{Nsid: 1, Backend: "null", Size: 1 << 30, LbaSize: 4096, AnaGroup: 7}}}})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Serial != conf.DeriveSerial(twoNQN) || len(sub.Namespaces) != 1 || sub.Namespaces[0].Blocks != 1<<30/4096 ||
		sub.CntlidMin != 0x8000 || sub.CntlidMax != conf.MaxCNTLID || sub.Namespaces[0].AnaGroup != 7 {
		t.Errorf("added subsystem %v", sub)
	}
	h2 := host(t, s, twoNQN, nil)
	other := "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	if sub, err = cl.AllowHost(c, &pb.AllowHostRequest{Subsystem: twoNQN, HostNqn: other}); err != nil || len(sub.Hosts) != 2 || sub.Controllers != 1 {
		t.Fatalf("allow: %v %v", sub, err)
	}
	ctrls, err := cl.ListControllers(c, &pb.ListControllersRequest{Subsystem: twoNQN})
	if err != nil || len(ctrls.Controllers) != 1 {
		t.Fatalf("controllers %v %v", ctrls, err)
	}
	if k := ctrls.Controllers[0]; k.HostNqn != hostNQN || k.Listener != "loop loop" || !k.Ready || len(k.Queues) != 2 || k.Queues[1].Depth == 0 || k.KeepAliveTimeoutMs == 0 {
		t.Errorf("controller %v", k)
	}
	// DenyHost answers once the denied host's controller is gone: its answer, the
	// controller list and the stats below no longer count it.
	if sub, err = cl.DenyHost(c, &pb.DenyHostRequest{Subsystem: twoNQN, HostNqn: hostNQN}); err != nil || len(sub.Hosts) != 1 || sub.Controllers != 0 {
		t.Fatalf("deny: %v %v", sub, err)
	}
	if ctrls, err := cl.ListControllers(c, &pb.ListControllersRequest{Subsystem: twoNQN}); err != nil || len(ctrls.Controllers) != 0 {
		t.Errorf("controllers after the deny: %v %v", ctrls, err)
	}
	select {
	case <-h2.Done():
	case <-time.After(10 * time.Second):
		t.Errorf("the denied host's controller was not disconnected")
	}
	if sub, err = cl.SetHosts(c, &pb.SetHostsRequest{Subsystem: twoNQN, AllowAnyHost: true}); err != nil || !sub.AllowAnyHost || len(sub.Hosts) != 0 {
		t.Fatalf("set hosts: %v %v", sub, err)
	}
	subs, err := cl.ListSubsystems(c, &pb.ListSubsystemsRequest{})
	if err != nil || len(subs.Subsystems) != 2 || subs.Subsystems[0].Controllers != 1 {
		t.Errorf("subsystems %v %v", subs, err)
	}

	st, err := cl.GetStats(c, &pb.GetStatsRequest{})
	if err != nil || st.Controllers != 1 || st.Queues != 2 || len(st.Namespaces) != 2 || st.DiscoveryGeneration < 2 {
		t.Errorf("stats %v %v", st, err)
	}
	lis, err := cl.ListListeners(c, &pb.ListListenersRequest{})
	if err != nil || len(lis.Listeners) != 1 || lis.Listeners[0].Port != 4420 {
		t.Errorf("listeners %v %v", lis, err)
	}

	// Save: the running configuration reads back as a file, and a target started from it
	// serves the same subsystems and namespaces.
	saved, err := cl.SaveConfig(c, &pb.SaveConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := conf.Parse([]byte(saved.Yaml), "saved.yaml")
	if err != nil {
		t.Fatalf("the saved configuration does not parse: %v\n%s", err, saved.Yaml)
	}
	if want := s.Config(); rc.String() != (func() string { want.File = "saved.yaml"; return want.String() })() {
		t.Errorf("saved configuration\n%s\ndiffers from the running one\n%s", rc, want)
	}
	if _, err := cl.RemoveSubsystem(c, &pb.RemoveSubsystemRequest{Nqn: twoNQN}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rc.Control.Socket = socketPath(t)
	s2, cl2 := start(t, rc)
	subs2, err := cl2.ListSubsystems(c, &pb.ListSubsystemsRequest{})
	if err != nil || len(subs2.Subsystems) != 2 || subs2.Subsystems[1].Model != "ctl-test" {
		t.Errorf("restarted from the saved configuration: %v %v", subs2, err)
	}
	if got := sizes(host(t, s2, twoNQN, nil)); len(got) != 1 || got[1] != 1<<30 {
		t.Errorf("restarted target's namespaces %v", got)
	}
}

// TestControlSocket: a second target cannot take a live socket, a stale one is replaced,
// and Close removes it.
func TestControlSocket(t *testing.T) {
	sock := socketPath(t)
	s, _ := start(t, testConfig(sock))
	want := "control: socket " + sock + ": another gonvmf is serving its control API there; stop it, or give this one its own control.socket"
	if _, err := control.Start(s, conf.Control{Socket: sock}, quiet); err == nil || err.Error() != want {
		t.Errorf("second control API on the same socket: %v\nwant %s", err, want)
	}
	stale := socketPath(t)
	os.MkdirAll(filepath.Dir(stale), 0o700)
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	c, err := control.Start(s, conf.Control{Socket: stale}, quiet)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	c.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
	if _, _, err := control.Dial(control.DialOptions{Socket: stale}); err == nil || !strings.Contains(err.Error(), "is gonvmf serve running?") {
		t.Errorf("dialing a missing socket: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	d := t.TempDir()
	for p, kind := range map[string]string{f: "a regular file", d: "a directory"} {
		want := "control: socket " + p + ": " + kind + " is in the way; remove it or set control.socket elsewhere"
		if _, err := control.Start(s, conf.Control{Socket: p}, quiet); err == nil || err.Error() != want {
			t.Errorf("%s where the socket goes: %v\nwant %s", kind, err, want)
		}
	}

	// In a directory that exists and others may read, with a umask that would leave the
	// socket open to them: mode 0600, nothing else left in the directory; the same for a
	// path too long to bind in a temporary directory first.
	defer syscall.Umask(syscall.Umask(0))
	shared := t.TempDir()
	os.Chmod(shared, 0o755)
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 40))
	os.MkdirAll(long, 0o755)
	long = filepath.Join(long, strings.Repeat("s", conf.MaxSocketPathLength-len(long)-1))
	for _, p := range []string{filepath.Join(shared, "gonvmf.sock"), long} {
		c, err := control.Start(s, conf.Control{Socket: p}, quiet)
		if err != nil {
			t.Fatalf("socket %s: %v", p, err)
		}
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket %s with umask 0: %v, mode %v", p, err, fi.Mode())
		}
		if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
			t.Errorf("%d entries beside the socket %s, want none", len(ents)-1, p)
		}
		c.Close()
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("socket %s left after Close: %v", p, err)
		}
	}
}

// TestControlConcurrent: many clients change the target at once; every operation either
// applies whole or fails cleanly, and the final state is what the successful ones say.
func TestControlConcurrent(t *testing.T) {
	s, cl := start(t, testConfig(socketPath(t)))
	c := ctx(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				nsid := uint32(10 + g*10 + i)
				if _, err := cl.AddNamespace(c, &pb.AddNamespaceRequest{Subsystem: subNQN, Namespace: &pb.Namespace{Nsid: nsid, Backend: "null", Size: 1 << 20}}); err != nil {
					t.Error(err)
					return
				}
				if _, err := cl.ResizeNamespace(c, &pb.ResizeNamespaceRequest{Subsystem: subNQN, Nsid: nsid, Size: 2 << 20}); err != nil {
					t.Error(err)
				}
				if i%2 == 1 {
					if _, err := cl.RemoveNamespace(c, &pb.RemoveNamespaceRequest{Subsystem: subNQN, Nsid: nsid}); err != nil {
						t.Error(err)
					}
				}
				nqn := fmt.Sprintf("nqn.2024-01.io.gonvmf:c%d", g)
				if _, err := cl.AddSubsystem(c, &pb.AddSubsystemRequest{Subsystem: &pb.Subsystem{Nqn: nqn, AllowAnyHost: true}}); err != nil {
					t.Error(err)
				}
				if _, err := cl.RemoveSubsystem(c, &pb.RemoveSubsystemRequest{Nqn: nqn}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rc := s.Config()
	if len(rc.Subsystems) != 1 || len(rc.Subsystems[0].Namespaces) != 1+8*5 {
		t.Fatalf("after the concurrent operations: %d subsystems, %d namespaces", len(rc.Subsystems), len(rc.Subsystems[0].Namespaces))
	}
	for _, ns := range rc.Subsystems[0].Namespaces[1:] {
		if ns.Size != 2<<20 || ns.NSID%2 == 1 {
			t.Errorf("namespace %+v", ns)
		}
	}
	if n := len(s.Target().Namespaces()); n != 41 {
		t.Errorf("%d namespaces served", n)
	}
}

// TestControlTCP: the TCP listener admits a client with a certificate signed by the
// client CA, and refuses one without.
func TestControlTCP(t *testing.T) {
	cfg, dir, cliCert, cliKey := tcpConfig(t)
	otherCA, otherKey := newCA(t, dir, "other-ca")
	badCert, badKey := newCert(t, dir, "intruder", otherCA, otherKey, false)
	_, cs := serve(t, cfg)
	addr := cs.TCPAddr().String()
	call := func(cert, key string) error {
		cl, cc, err := control.Dial(control.DialOptions{TCP: addr, TLSCert: cert, TLSKey: key, TLSCA: filepath.Join(dir, "ca.pem")})
		if err != nil {
			return err
		}
		defer cc.Close()
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cl.ListSubsystems(c, &pb.ListSubsystemsRequest{})
		return err
	}
	if err := call(cliCert, cliKey); err != nil {
		t.Errorf("client with a certificate of the client CA: %v", err)
	}
	if err := call(badCert, badKey); err == nil {
		t.Errorf("a client certificate of another CA was accepted")
	}
	if _, _, err := control.Dial(control.DialOptions{TCP: addr}); err == nil {
		t.Errorf("Dial over TCP without certificates succeeded")
	}
}

// tcpConfig is testConfig with the control API also on TCP (a free port on the loopback)
// with TLS: a CA, the server's certificate, and a client certificate of that CA for the
// caller (dir holds them, ca.pem the CA).
func tcpConfig(t *testing.T) (cfg *conf.Config, dir, cliCert, cliKey string) {
	t.Helper()
	dir = t.TempDir()
	ca, caKey := newCA(t, dir, "ca")
	srvCert, srvKey := newCert(t, dir, "server", ca, caKey, true)
	cliCert, cliKey = newCert(t, dir, "client", ca, caKey, false)
	cfg = testConfig(socketPath(t))
	free, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the control listener
	if err != nil {
		t.Fatal(err)
	}
	free.Close()
	cfg.Control.TCP, cfg.Control.TLSCert, cfg.Control.TLSKey, cfg.Control.TLSClientCA = free.Addr().String(), srvCert, srvKey, filepath.Join(dir, "ca.pem")
	return cfg, dir, cliCert, cliKey
}

func newCA(t *testing.T, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func newCert(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, server bool) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cert, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return cert, keyFile
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestListenerANAConversion: a listener's ANA states survive the trip to the API and
// back; bad groups and states are errors naming them.
func TestListenerANAConversion(t *testing.T) {
	l := conf.Listener{Transport: "rdma", Address: "10.99.0.1", Port: 4421}
	l.ANAStates[1], l.ANAStates[40] = conf.ANAInaccessible, conf.ANAChange
	pl := control.ListenerToPB(l)
	if len(pl.AnaStates) != 2 || pl.AnaStates[0].Group != 1 || pl.AnaStates[0].State != "inaccessible" || pl.AnaStates[1].Group != 40 {
		t.Errorf("ListenerToPB: %v", pl)
	}
	back, err := control.ListenerFromPB(pl)
	if err != nil || back != l {
		t.Errorf("ListenerFromPB: %+v %v", back, err)
	}
	pl.AnaStates[1].State = "sideways"
	if _, err := control.ListenerFromPB(pl); err == nil || !strings.Contains(err.Error(), `ANA group 40: "sideways" is not an ANA state`) {
		t.Errorf("ListenerFromPB with a bad state: %v", err)
	}
}

// TestCloseStopsEveryListenerAtOnce: Close stops the socket's and the TCP listener's calls
// together: while a call on the socket is still running (its graceful stop waiting for it),
// the TCP listener already takes no new call. (They were stopped one after the other, the
// TCP one still taking calls — changes included — for up to 5 s after shutdown began.)
func TestCloseStopsEveryListenerAtOnce(t *testing.T) {
	cfg, dir, cliCert, cliKey := tcpConfig(t)
	const slow = 3 << 20
	opener, opening, release := testutil.HeldOpener(slow)
	t.Cleanup(release)
	s, cs := serve(t, cfg, target.WithBackendOpener(opener))
	ucl, ucc, err := control.Dial(control.DialOptions{Socket: s.Config().Control.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer ucc.Close()
	tcl, tcc, err := control.Dial(control.DialOptions{TCP: cs.TCPAddr().String(), TLSCert: cliCert, TLSKey: cliKey, TLSCA: filepath.Join(dir, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	defer tcc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := tcl.ListSubsystems(ctx, &pb.ListSubsystemsRequest{}); err != nil {
		t.Fatalf("TCP call before Close: %v", err)
	}
	go ucl.AddNamespace(ctx, &pb.AddNamespaceRequest{Subsystem: subNQN, Namespace: &pb.Namespace{Nsid: 2, Backend: "null", Size: slow}})
	<-opening
	// A call on TCP too, waiting behind the first (changes are serialized): both graceful
	// stops wait, and the one deadline must end both.
	go tcl.AddNamespace(ctx, &pb.AddNamespaceRequest{Subsystem: subNQN, Namespace: &pb.Namespace{Nsid: 3, Backend: "null", Size: 1 << 20}})
	time.Sleep(100 * time.Millisecond)
	closed := make(chan struct{})
	start := time.Now()
	go func() { cs.Close(); close(closed) }()
	time.Sleep(300 * time.Millisecond) // Close has begun; the socket's call still runs
	if _, err := tcl.ListSubsystems(ctx, &pb.ListSubsystemsRequest{}); err == nil {
		t.Error("the TCP listener took a call after Close began")
	}
	select {
	case <-closed:
		if d := time.Since(start); d > 7*time.Second {
			t.Errorf("Close took %v with calls stuck on both listeners; the deadline is 5 s", d)
		}
	case <-time.After(10 * time.Second):
		t.Error("Close did not return with calls stuck on both listeners: the 5 s deadline ended only one graceful stop")
	}
	release()
	<-closed
}
