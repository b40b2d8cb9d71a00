package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
	"github.com/gonvmf/gonvmf/target/server"
)

const twoNQN = "nqn.2024-01.io.gonvmf:two"

func loopServer(t *testing.T, cfg *conf.Config, opts ...target.Option) *server.Server {
	t.Helper()
	s, err := server.New(cfg, server.Options{Logger: quiet, Loop: true, Target: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func resolved(t *testing.T, c *conf.Config) *conf.Config {
	t.Helper()
	c = c.Clone()
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReload: Reload applies the difference between the running configuration and a new
// one, after which the running configuration is the new one; what cannot change at run
// time is refused with nothing changed; a step that fails undoes the steps before it.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	base := config("10.99.0.1", 0)
	base.Subsystems[0].Namespaces = append(base.Subsystems[0].Namespaces,
		conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30},
		conf.Namespace{NSID: 3, Backend: conf.BackendFile, Path: filepath.Join(dir, "three.img"), Size: 1 << 20})
	s := loopServer(t, base)
	if changes, err := s.Reload(base); err != nil || len(changes) != 0 {
		t.Fatalf("reloading the running configuration: %v %v", changes, err)
	}

	next := base.Clone()
	next.AutoReopen.Attempts, next.AutoReopen.MaxBackoff = 3, time.Minute // changes in place
	sub := &next.Subsystems[0]
	sub.AllowAnyHost, sub.Hosts = false, []string{"nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"}
	sub.Namespaces[0].ReadOnly = true                          // 1: write-protected
	sub.Namespaces[1].Size = 2 << 30                           // 2: grows
	sub.Namespaces[2].Path = filepath.Join(dir, "three-b.img") // 3: another file: re-created
	sub.Namespaces = append(sub.Namespaces, conf.Namespace{NSID: 4, Backend: conf.BackendMemory, Size: 1 << 20})
	next.Subsystems = append(next.Subsystems, conf.Subsystem{NQN: twoNQN, AllowAnyHost: true,
		Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendNull, Size: 1 << 20}}})
	changes, err := s.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"auto_reopen.attempts: 10 → 3, auto_reopen.max_backoff: 30s → 1m0s",
		"remove namespace 3 (path",
		"add subsystem " + twoNQN,
		"add namespace 3 (file",
		"add namespace 4 (memory",
		"hosts any → [nqn.2014-08",
		"namespace 1 read_only false → true",
		"namespace 2 size 1GiB → 2GiB",
	}
	if len(changes) != len(want) {
		t.Fatalf("changes:\n%s", strings.Join(changes, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(changes[i], w) {
			t.Errorf("change %d: %q, want one containing %q", i, changes[i], w)
		}
	}
	if got, w := s.Config().String(), resolved(t, next).String(); got != w {
		t.Errorf("running configuration after the reload:\n%s\nwant\n%s", got, w)
	}
	if ns := s.Target().Namespaces(); len(ns) != 5 || ns[1].Blocks != 2<<30/512 || !ns[0].ReadOnly || ns[2].Path != filepath.Join(dir, "three-b.img") {
		t.Errorf("namespaces after the reload: %+v", ns)
	}

	// Back to the start: the reverse changes (the namespace that grew stays grown).
	back := base.Clone()
	back.Subsystems[0].Namespaces[1].Size = 2 << 30
	if _, err := s.Reload(back); err != nil {
		t.Fatal(err)
	}
	if got, w := s.Config().String(), resolved(t, back).String(); got != w {
		t.Errorf("running configuration after reloading the start:\n%s\nwant\n%s", got, w)
	}

	running := s.Config().String()
	for _, c := range []struct {
		name string
		edit func(c *conf.Config)
		want string
	}{
		{"transport", func(c *conf.Config) { c.Transport.QueueDepth = 64 }, "transport.queue_depth: 128 → 64: the transport settings"},
		{"control", func(c *conf.Config) { c.Control.Socket = "/run/other.sock" }, `control.socket: "/run/gonvmf/gonvmf.sock" → "/run/other.sock"`},
		{"metrics", func(c *conf.Config) { c.Metrics.Address = "127.0.0.1:9469" }, `metrics.address: "" → "127.0.0.1:9469": the metrics endpoint is set up at start; restart gonvmf to change it (per_namespace changes on reload)`},
		// The limits section is named field by field, as the transport section is.
		{"limits", func(c *conf.Config) { c.Limits.MaxQueues, c.Limits.ConnectTimeout = 512, 20*time.Second },
			"limits.max_queues: 1024 → 512, limits.connect_timeout: 10s → 20s: cannot change while gonvmf runs; restart it"},
		{"invalid auto_reopen", func(c *conf.Config) { c.AutoReopen.Backoff = time.Hour },
			"auto_reopen.backoff: 1h0m0s is out of range; use 100ms to 10m0s"},
		{"state file", func(c *conf.Config) { c.StateFile = filepath.Join(dir, "other.state.json") },
			`state_file: "" → "` + filepath.Join(dir, "other.state.json") + `": cannot change`},
		{"serial", func(c *conf.Config) { c.Subsystems[0].Serial = "X1" }, `serial "` + conf.DeriveSerial(subNQN) + `" → "X1"`},
		{"unreadable secret file", func(c *conf.Config) {
			h := "nqn.2014-08.org.nvmexpress:uuid:12345678-1234-1234-1234-123456789abc"
			c.Hosts = []conf.Host{{NQN: h, DHCHAPSecret: "file:" + filepath.Join(dir, "no-such.key")}}
			c.Subsystems[0].AllowAnyHost, c.Subsystems[0].Hosts, c.Subsystems[0].AuthRequired = false, []string{h}, true
		}, "add host nqn.2014-08.org.nvmexpress:uuid:12345678-1234-1234-1234-123456789abc to the hosts section (dhchap_secret file:"},
		{"shrink", func(c *conf.Config) { c.Subsystems[0].Namespaces[1].Size = 1 << 20 }, "namespace 2: size 1MiB is smaller than the 2GiB it has"},
		{"invalid", func(c *conf.Config) { c.Subsystems[0].Namespaces[0].LBASize = 1000 }, "lba_size: 1000 is not a supported LBA size"},
		{"a step fails", func(c *conf.Config) {
			// Namespace 1 goes, a subsystem comes, then a namespace whose file cannot be
			// created fails: the first two are undone.
			c.Subsystems[0].Namespaces = c.Subsystems[0].Namespaces[1:]
			c.Subsystems = append(c.Subsystems, conf.Subsystem{NQN: twoNQN, AllowAnyHost: true,
				Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendNull, Size: 1 << 20}}})
			c.Subsystems[0].Namespaces = append(c.Subsystems[0].Namespaces, conf.Namespace{NSID: 9, Backend: conf.BackendFile,
				Path: filepath.Join(dir, "no", "such", "dir.img"), Size: 1 << 20})
			// A host entry added before the failing step is taken out again.
			c.Hosts = []conf.Host{{NQN: "nqn.2014-08.org.nvmexpress:uuid:12345678-1234-1234-1234-123456789abc",
				DHCHAPSecret: "DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7/:"}}
		}, "add namespace 9 (file"},
	} {
		next := back.Clone()
		c.edit(next)
		changes, err := s.Reload(next)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (changes %v); want an error containing %q", c.name, err, changes, c.want)
		}
		if got := s.Config().String(); got != running {
			t.Errorf("%s: the refused reload changed the running configuration:\n%s", c.name, got)
		}
	}
	if n := len(s.Target().Namespaces()); n != 3 {
		t.Errorf("%d namespaces after the refused reloads", n)
	}
}

// TestServerOperations: the Server's operations reach the target and show in Config.
func TestServerOperations(t *testing.T) {
	s := loopServer(t, config("10.99.0.1", 0))
	two := conf.Subsystem{NQN: twoNQN, Hosts: []string{"nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"}}
	steps := []error{
		s.AddSubsystem(two),
		s.AddNamespace(twoNQN, conf.Namespace{NSID: 1, Backend: conf.BackendNull, Size: 1 << 20}),
		s.ResizeNamespace(twoNQN, 1, 4<<20),
		s.SetNamespaceReadOnly(twoNQN, 1, true),
		s.AllowHost(twoNQN, "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"),
		s.DenyHost(twoNQN, two.Hosts[0]),
		s.AddNamespace(twoNQN, conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: 1 << 20}),
		s.RemoveNamespace(twoNQN, 2),
	}
	for i, err := range steps {
		if err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
	rc := s.Config()
	got := rc.Subsystems[1]
	if len(got.Namespaces) != 1 || got.Namespaces[0].Size != 4<<20 || !got.Namespaces[0].ReadOnly ||
		!reflect.DeepEqual(got.Hosts, []string{"nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"}) {
		t.Errorf("subsystem after the operations: %+v", got)
	}
	if err := s.RemoveSubsystem(twoNQN); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveListener(conf.Listener{Address: "10.99.0.1"}); err == nil {
		t.Errorf("RemoveListener on a loop server succeeded")
	}
}

// TestOverlapsListener: which listeners a reload must remove before adding (a wildcard
// address and one of its family on the same port), and which it need not.
func TestOverlapsListener(t *testing.T) {
	l := func(addr string, port uint16) conf.Listener {
		return conf.Listener{Transport: "rdma", Address: addr, Port: port}
	}
	for _, c := range []struct {
		a, b conf.Listener
		want bool
	}{
		{l("0.0.0.0", 4420), l("10.0.0.1", 4420), true},
		{l("10.0.0.1", 4420), l("0.0.0.0", 4420), true},
		{l("::", 4420), l("fd00::1", 4420), true},
		{l("::", 4420), l("10.0.0.1", 4420), false}, // another family
		{l("0.0.0.0", 4420), l("10.0.0.1", 4421), false},
		{l("10.0.0.1", 4420), l("10.0.0.2", 4420), false},
		{l("10.0.0.1", 4420), l("10.0.0.1", 4420), false}, // the same listener
		{l("::ffff:0.0.0.0", 4420), l("10.0.0.1", 4420), true},
	} {
		if got := server.OverlapsListener(c.a, c.b); got != c.want {
			t.Errorf("%s:%d and %s:%d: overlap %v, want %v", c.a.Address, c.a.Port, c.b.Address, c.b.Port, got, c.want)
		}
	}
}

// TestSettledConfigWaitsForReload: SettledConfig (what ctl save writes) does not return
// the middle of a reload — a namespace removed, its replacement still opening — but the
// configuration once the reload is done.
func TestSettledConfigWaitsForReload(t *testing.T) {
	const slow = 3 << 20
	opener, opening, release := testutil.HeldOpener(slow)
	t.Cleanup(release)
	base := config("10.99.0.1", 0)
	base.Subsystems[0].Namespaces = append(base.Subsystems[0].Namespaces, conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30})
	s := loopServer(t, base, target.WithBackendOpener(opener))
	next := base.Clone()
	next.Subsystems[0].Namespaces[1] = conf.Namespace{NSID: 9, Backend: conf.BackendMemory, Size: slow}
	reloaded := make(chan error, 1)
	go func() { _, err := s.Reload(next); reloaded <- err }()
	<-opening
	settled := make(chan *conf.Config, 1)
	go func() { settled <- s.SettledConfig() }()
	select {
	case c := <-settled:
		t.Fatalf("SettledConfig returned while the reload ran:\n%s", c)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if got, want := (<-settled).String(), resolved(t, next).String(); got != want {
		t.Errorf("settled configuration:\n%s\nwant:\n%s", got, want)
	}
}

// closeFails is a backend whose Close fails.
type closeFails struct{ backend.Backend }

func (b closeFails) Close() error {
	b.Backend.Close()
	return errors.New("injected: close failed")
}

// TestReloadRemovalReleaseFails: a namespace removal and a subsystem removal that take
// effect but whose backends fail to close (target.ErrRemovedUnclean) are applied (with a
// warning), not taken for failed steps: the reload goes on and the running configuration
// is the new one. (It used to undo the steps before the namespace removal but not the
// removal, leaving a state that was neither configuration.)
func TestReloadRemovalReleaseFails(t *testing.T) {
	const doomed = 5 << 20
	opener := func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err == nil && s.Size == doomed {
			b = closeFails{b}
		}
		return b, err
	}
	base := config("10.99.0.1", 0)
	base.Subsystems[0].Namespaces = append(base.Subsystems[0].Namespaces, conf.Namespace{NSID: 2, Backend: conf.BackendNull, Size: doomed})
	base.Subsystems = append(base.Subsystems, conf.Subsystem{NQN: subNQN + "-doomed", AllowAnyHost: true,
		Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendNull, Size: doomed}}})
	s := loopServer(t, base, target.WithBackendOpener(opener))
	next := base.Clone()
	next.Subsystems = next.Subsystems[:1]
	next.AutoReopen.Attempts, next.AutoReopen.MaxBackoff = 3, time.Minute // changes in place
	sub := &next.Subsystems[0]
	sub.AllowAnyHost, sub.Hosts = false, []string{"nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"}
	sub.Namespaces = sub.Namespaces[:1]
	if _, err := s.Reload(next); err != nil {
		t.Fatalf("reload whose removal could not close its backend: %v", err)
	}
	if got, want := s.Config().String(), resolved(t, next).String(); got != want {
		t.Errorf("running configuration after the reload:\n%s\nwant:\n%s", got, want)
	}
}

// TestReloadKeepsMemoryNamespaceOnFailure: a reload that removes a memory namespace and
// fails at another step leaves the memory namespace as it was — its removal comes after
// every other step, so it is never made and undone (an undo re-creates it empty under
// the same identifiers).
func TestReloadKeepsMemoryNamespaceOnFailure(t *testing.T) {
	memOpens := 0
	opener := func(s backend.Spec) (backend.Backend, error) {
		if s.Kind == backend.KindMemory {
			memOpens++
		}
		return backend.Open(s)
	}
	base := config("10.99.0.1", 0)
	base.Subsystems[0].Namespaces = append(base.Subsystems[0].Namespaces, conf.Namespace{NSID: 2, Backend: conf.BackendMemory, Size: 1 << 20})
	s := loopServer(t, base, target.WithBackendOpener(opener))
	before, opens := s.Config().String(), memOpens
	next := base.Clone()
	next.Subsystems[0].Namespaces[1] = conf.Namespace{NSID: 3, Backend: conf.BackendFile,
		Path: filepath.Join(t.TempDir(), "missing", "three.img"), Size: 1 << 20} // its directory does not exist
	if _, err := s.Reload(next); err == nil {
		t.Fatal("a reload adding a file in a missing directory succeeded")
	}
	if s.Config().String() != before {
		t.Errorf("configuration after the failed reload differs:\n%s", s.Config())
	}
	if memOpens != opens {
		t.Errorf("the memory namespace was opened %d more times: removed and re-created empty", memOpens-opens)
	}
}

// TestReloadMovesMemoryNamespace: a memory namespace that moves to another NSID with its
// identifiers (an explicit UUID) is removed before the addition that takes them, so the
// reload succeeds (deferring its removal, as for a memory namespace that is only gone,
// made the addition a duplicate UUID).
func TestReloadMovesMemoryNamespace(t *testing.T) {
	base := config("10.99.0.1", 0)
	uuid := [16]byte{0x6f, 0x1c, 0x2c, 0x3e, 0x8a, 0x5b, 0x4d, 0x2e, 0x9a, 0x43, 0x0b, 0x1f, 0x2e, 0x3d, 0x4c, 0x5b}
	base.Subsystems[0].Namespaces = append(base.Subsystems[0].Namespaces, conf.Namespace{NSID: 2, Backend: conf.BackendMemory, Size: 1 << 20, UUID: uuid})
	s := loopServer(t, base)
	next := base.Clone()
	next.Subsystems[0].Namespaces[1].NSID = 3
	if _, err := s.Reload(next); err != nil {
		t.Fatalf("moving a memory namespace with an explicit UUID: %v", err)
	}
	if got, want := s.Config().String(), resolved(t, next).String(); got != want {
		t.Errorf("running configuration:\n%s\nwant:\n%s", got, want)
	}
}

// TestReloadUndoRestoresOrder: a reload that removes a subsystem from the middle of the
// order and a namespace from a list not in NSID order, then fails, leaves both where they
// were — the running configuration (what ctl save writes), the control API's listings
// and the discovery log's entries are those before the reload. (The undo used to add them
// back last: the discovery log listed the subsystem at the end, and the saved
// configuration had both moved.)
func TestReloadUndoRestoresOrder(t *testing.T) {
	const threeNQN, fourNQN = "nqn.2024-01.io.gonvmf:three", "nqn.2024-01.io.gonvmf:four"
	null := func(nsid uint32) conf.Namespace {
		return conf.Namespace{NSID: nsid, Backend: conf.BackendNull, Size: 1 << 20}
	}
	base := config("10.99.0.1", 0)
	base.Subsystems[0].Namespaces = []conf.Namespace{null(3), null(1), null(2)}
	base.Subsystems = append(base.Subsystems,
		conf.Subsystem{NQN: twoNQN, AllowAnyHost: true, Namespaces: []conf.Namespace{null(1)}},
		conf.Subsystem{NQN: threeNQN, AllowAnyHost: true, Namespaces: []conf.Namespace{null(1)}})
	s := loopServer(t, base)
	before := s.Config().String()
	wantOrder := []string{subNQN, twoNQN, threeNQN}

	next := base.Clone()
	next.Subsystems = slices.Delete(next.Subsystems, 1, 2) // two goes
	sub := &next.Subsystems[0]
	sub.Namespaces = slices.Delete(sub.Namespaces, 0, 1) // namespace 3 goes: [1 2], in NSID order
	next.Subsystems = append(next.Subsystems, conf.Subsystem{NQN: fourNQN, AllowAnyHost: true, Namespaces: []conf.Namespace{null(1)}})
	sub.Namespaces = append(sub.Namespaces, conf.Namespace{NSID: 9, Backend: conf.BackendFile,
		Path: filepath.Join(t.TempDir(), "missing", "nine.img"), Size: 1 << 20}) // its directory does not exist
	if changes, err := s.Reload(next); err == nil || !strings.Contains(err.Error(), "add namespace 9") {
		t.Fatalf("reload adding a file in a missing directory: %v (changes %v)", err, changes)
	}

	expectRestored(t, s, before, wantOrder)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: nvmeproto.DiscoveryNQN, Logger: quiet,
		Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }})
	if err != nil {
		t.Fatalf("connecting to the discovery subsystem: %v", err)
	}
	defer c.Close()
	l, err := c.DiscoveryLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var discovered []string
	for _, e := range l.Entries {
		discovered = append(discovered, e.SubNQN)
	}
	if !slices.Equal(discovered, wantOrder) {
		t.Errorf("discovery log after the failed reload: %v, want %v", discovered, wantOrder)
	}
}

// expectRestored checks that the running configuration after a failed reload is before,
// the one before it, and that the target lists its subsystems in the order want.
func expectRestored(t *testing.T, s *server.Server, before string, want []string) {
	t.Helper()
	if got := s.Config().String(); got != before {
		t.Errorf("running configuration after the failed reload:\n%s\nwant the one before it:\n%s", got, before)
	}
	var listed []string
	for _, si := range s.Target().Subsystems() {
		if !si.Discovery {
			listed = append(listed, si.NQN)
		}
	}
	if !slices.Equal(listed, want) {
		t.Errorf("subsystems listed after the failed reload: %v, want %v", listed, want)
	}
}

// TestReloadMovesNamespaceToANAGroup: a reload that changes only a namespace's ana_group
// moves the running namespace to the new group — one change, the namespace untouched: its
// data, the registrations and reservation on it (a host it fences stays fenced), the
// hosts' controllers and queues — and the hosts learn of it as the Linux host needs: an
// ANA Change event, and an ANA log with a higher change count that lists the namespace
// under its new group. (It used to remove the namespace and add it again: the
// reservation was gone, the fenced host could write, a memory namespace came back
// empty, and hosts got a Namespace Attribute Changed event instead.)
func TestReloadMovesNamespaceToANAGroup(t *testing.T) {
	base := config("10.99.0.1", 0) // namespace 1: memory, ana_group 1
	s := loopServer(t, base)
	a, b := connectRaw(t, s, 1), connectRaw(t, s, 2)
	data := make([]byte, 512)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	a.io.ok("write", a.rw(nvmeproto.OpWrite, 8, data))
	a.io.ok("register", a.resv(nvmeproto.OpReservationRegister, nvmeproto.ResvRegister, 0, 0, 0xA))
	a.io.ok("acquire", a.resv(nvmeproto.OpReservationAcquire, nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	if c := b.rw(nvmeproto.OpWrite, 9, make([]byte, 512)); c.Status.Code() != nvmeproto.StatusReservationConflict.Code() {
		t.Fatalf("host 2 writes under host 1's Write Exclusive reservation: status %v, want Reservation Conflict", c.Status)
	}
	before := a.anaLog() // also arms the ANA Change event
	if len(before.Groups) != 1 || before.Groups[0].GroupID != 1 {
		t.Fatalf("ANA log before the reload: %+v", before.Groups)
	}
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	event := a.admin.submit(&aer, nil)

	next := base.Clone()
	next.Subsystems[0].Namespaces[0].ANAGroup = 2
	changes, err := s.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"subsystem " + subNQN + ": namespace 1 ana_group 1 → 2"}; !slices.Equal(changes, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
	}
	select {
	case c := <-event:
		if ev := nvmeproto.AsyncEvent(c.DW0); ev != nvmeproto.EventANAChange {
			t.Errorf("asynchronous event %v, want ANA change", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no asynchronous event after the reload")
	}
	after := a.anaLog()
	if after.ChangeCount <= before.ChangeCount {
		t.Errorf("ANA change count %d after the reload, %d before: not bumped", after.ChangeCount, before.ChangeCount)
	}
	if len(after.Groups) != 1 || after.Groups[0].GroupID != 2 || !slices.Equal(after.Groups[0].NSIDs, []uint32{1}) ||
		after.Groups[0].State != nvmeproto.ANAOptimized || after.Groups[0].ChangeCount != after.ChangeCount {
		t.Errorf("ANA log after the reload: %+v, want group 2 (optimized, change count %d) with namespace 1", after.Groups, after.ChangeCount)
	}
	if g := a.identifyNS(1).ANAGRPID; g != 2 {
		t.Errorf("Identify Namespace ANAGRPID %d after the reload, want 2", g)
	}

	// The namespace is the one that ran: data, registrations, reservation.
	got := make([]byte, 512)
	a.io.ok("read", a.rw(nvmeproto.OpRead, 8, got))
	if !slices.Equal(got, data) {
		t.Errorf("the data written before the reload is gone")
	}
	if st := a.report(); st.RegCtl != 1 || st.RType != nvmeproto.ResvWriteExclusive || len(st.Controllers) != 1 || st.Controllers[0].RKey != 0xA {
		t.Errorf("reservation after the reload: %+v, want host 1 registered (key 0xA) holding Write Exclusive", st)
	}
	if c := b.rw(nvmeproto.OpWrite, 9, make([]byte, 512)); c.Status.Code() != nvmeproto.StatusReservationConflict.Code() {
		t.Errorf("host 2 writes after the reload: status %v, want Reservation Conflict (the reservation fences it)", c.Status)
	}
	// The hosts' controllers and queues are the ones they had.
	for _, q := range []*rawQueue{a.admin, a.io, b.admin, b.io} {
		select {
		case <-q.conn.Done():
			t.Errorf("a queue was disconnected: %v", q.conn.Err())
		default:
		}
	}
	var cntlids []uint16
	for _, c := range s.Target().Controllers() {
		if c.Subsystem == subNQN {
			cntlids = append(cntlids, c.ID)
		}
	}
	slices.Sort(cntlids)
	if want := []uint16{a.cntlid, b.cntlid}; !slices.Equal(cntlids, want) {
		t.Errorf("controllers after the reload %v, want %v", cntlids, want)
	}
	if got, want := s.Config().String(), resolved(t, next).String(); got != want {
		t.Errorf("running configuration after the reload:\n%s\nwant:\n%s", got, want)
	}

	// And back: one change again.
	if changes, err := s.Reload(base); err != nil || len(changes) != 1 || !strings.Contains(changes[0], "ana_group 2 → 1") {
		t.Errorf("reloading the first configuration: %v %v", changes, err)
	}
	if l := a.anaLog(); len(l.Groups) != 1 || l.Groups[0].GroupID != 1 || l.ChangeCount <= after.ChangeCount {
		t.Errorf("ANA log after moving back: %+v", l)
	}
}

// TestReloadANAMoveWaits: a reload that moves a namespace into a group serving no I/O on
// a port waits for a write that port admitted before, at most the queue-close timeout;
// when the write is still in the backend then, the move stays applied and the reload
// succeeds (undoing it would not call the write back).
func TestReloadANAMoveWaits(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	base := config("10.99.0.1", 0) // namespace 1: memory, ana_group 1

	gate := testutil.NewWriteGate()
	defer gate.Open() // before the cleanups, which wait for the held write
	s := loopServer(t, base, target.WithBackendOpener(gate.Opener()), target.WithQueueCloseTimeout(closeTimeout))
	var states [conf.MaxANAGroup + 1]conf.ANAState
	states[2] = conf.ANAInaccessible
	lp, err := loop.New(s.Target(), loop.Options{Name: "b", ANAStates: states})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f", Logger: quiet,
		Loop: func(depth int) (initiator.LoopConn, error) { return lp.Dial(depth) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ns, _ := h.Namespace(1)
	written := make(chan error, 1)
	go func() {
		_, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0)
		written <- err
	}()
	gate.WaitHeld(t, 1)

	next := base.Clone()
	next.Subsystems[0].Namespaces[0].ANAGroup = 2
	start := time.Now()
	changes, err := s.Reload(next)
	if d := time.Since(start); d < closeTimeout {
		t.Errorf("the reload returned after %v, before the close timeout %v, with a write admitted before the move in the backend", d, closeTimeout)
	}
	if err != nil || len(changes) != 1 || !strings.Contains(changes[0], "ana_group 1 → 2") {
		t.Fatalf("reload: %v %v; want the move applied", changes, err)
	}
	if g := s.Config().Subsystems[0].Namespaces[0].ANAGroup; g != 2 {
		t.Errorf("ana_group %d after the reload, want 2", g)
	}
	gate.Open()
	select {
	case err := <-written:
		if err != nil {
			t.Errorf("the write admitted before the move: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not complete within 10 s of the gate opening")
	}
}

// TestReloadRBDCreateSize: rbd.create_size changes in the running configuration only (it
// matters when a missing image is opened), ordered around write protection, which a
// namespace with a create_size cannot have; how the image is reached (rbd.user) re-creates
// the namespace, whose backend opens with it. (A create_size change used to re-create the
// namespace, dropping its registrations.)
func TestReloadRBDCreateSize(t *testing.T) {
	opens := 0
	opener := func(s backend.Spec) (backend.Backend, error) {
		if s.Kind == backend.KindRBD { // an image stands in: the build may have no librbd
			opens++
			s.Kind, s.Size, s.RBD = backend.KindMemory, 1<<20, backend.RBDSpec{}
		}
		return backend.Open(s)
	}
	base := config("10.99.0.1", 0)
	base.Subsystems[0].Namespaces = append(base.Subsystems[0].Namespaces,
		conf.Namespace{NSID: 2, Backend: conf.BackendRBD, RBD: conf.RBD{Pool: "rbd", Image: "vol2"}})
	s := loopServer(t, base, target.WithBackendOpener(opener))
	if err := s.Target().SetRBDCreateSize(subNQN, 1, 1<<20); err == nil || !strings.Contains(err.Error(), "only an rbd namespace") {
		t.Errorf("SetRBDCreateSize of a memory namespace: %v", err)
	}
	const what = "subsystem " + subNQN + ": namespace 2 "
	reload := func(name string, edit func(n *conf.Namespace), want ...string) {
		t.Helper()
		next := s.Config()
		edit(&next.Subsystems[0].Namespaces[1])
		changes, err := s.Reload(next)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(changes) != len(want) {
			t.Fatalf("%s: changes:\n%s\nwant:\n%s", name, strings.Join(changes, "\n"), strings.Join(want, "\n"))
		}
		for i, w := range want {
			if !strings.HasPrefix(changes[i], w) {
				t.Errorf("%s: change %d %q, want %q", name, i, changes[i], w)
			}
		}
		if got, want := s.Config().String(), resolved(t, next).String(); got != want {
			t.Errorf("%s: running configuration:\n%s\nwant:\n%s", name, got, want)
		}
	}
	reload("create_size set", func(n *conf.Namespace) { n.RBD.CreateSize = 8 << 20 }, what+"rbd.create_size none → 8MiB")
	reload("read-only without create_size", func(n *conf.Namespace) { n.RBD.CreateSize, n.ReadOnly = 0, true },
		what+"rbd.create_size 8MiB → none", what+"read_only false → true")
	reload("writable with create_size", func(n *conf.Namespace) { n.RBD.CreateSize, n.ReadOnly = 4<<20, false },
		what+"read_only true → false", what+"rbd.create_size none → 4MiB")
	if opens != 1 {
		t.Errorf("the image was opened %d times, want once: the namespace was re-created", opens)
	}
	reload("another user", func(n *conf.Namespace) { n.RBD.User = "gonvmf" }, what+`rbd.user "" → "gonvmf"`)
	if opens != 2 {
		t.Errorf("the image was opened %d times after changing rbd.user, want twice: the namespace reopened", opens)
	}
}

// openRecorder is a backend opener that records every Spec it is given and opens it with
// backend.Open, except that a file in dir stands in for an rbd image (the build may have
// no librbd), so that the image's data outlives a reopen; an open of an image whose
// rbd.user is refuse fails, as a cluster refusing an unknown client does.
type openRecorder struct {
	dir, refuse string
	mu          sync.Mutex
	specs       []backend.Spec
}

func (r *openRecorder) open(s backend.Spec) (backend.Backend, error) {
	r.mu.Lock()
	r.specs = append(r.specs, s)
	r.mu.Unlock()
	if s.Kind == backend.KindRBD {
		if s.RBD.User == r.refuse && r.refuse != "" {
			return nil, fmt.Errorf("test: the cluster refuses client.%s: %w", s.RBD.User, syscall.EACCES)
		}
		s.Kind, s.Path, s.Size, s.RBD = backend.KindFile, filepath.Join(r.dir, s.RBD.Image+".img"), 1<<20, backend.RBDSpec{}
	}
	return backend.Open(s)
}

// opened returns the Specs of the opens so far.
func (r *openRecorder) opened() []backend.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.specs)
}

// resvHosts connects two hosts to s and has the first write a block at LBA 8 of
// namespace 1, register key 0xA and hold Write Exclusive on it; it returns the hosts and
// the block.
func resvHosts(t *testing.T, s *server.Server) (a, b *rawHost, data []byte) {
	t.Helper()
	a, b = connectRaw(t, s, 1), connectRaw(t, s, 2)
	data = make([]byte, 512)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	a.io.ok("write", a.rw(nvmeproto.OpWrite, 8, data))
	a.io.ok("register", a.resv(nvmeproto.OpReservationRegister, nvmeproto.ResvRegister, 0, 0, 0xA))
	a.io.ok("acquire", a.resv(nvmeproto.OpReservationAcquire, nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	return a, b, data
}

// expectKept fails the test unless namespace 1 of s is the one resvHosts set up: a's
// block, registration and reservation, b fenced by it, both hosts' queues connected, and
// ANA group anaGroup.
func expectKept(t *testing.T, what string, a, b *rawHost, data []byte, anaGroup uint32) {
	t.Helper()
	got := make([]byte, 512)
	a.io.ok(what+": read", a.rw(nvmeproto.OpRead, 8, got))
	if !slices.Equal(got, data) {
		t.Errorf("%s: the data written before is gone", what)
	}
	if st := a.report(); st.RegCtl != 1 || st.RType != nvmeproto.ResvWriteExclusive || len(st.Controllers) != 1 || st.Controllers[0].RKey != 0xA {
		t.Errorf("%s: reservation %+v, want host 1 registered (key 0xA) holding Write Exclusive", what, st)
	}
	if c := b.rw(nvmeproto.OpWrite, 9, make([]byte, 512)); c.Status.Code() != nvmeproto.StatusReservationConflict.Code() {
		t.Errorf("%s: host 2 writes: status %v, want Reservation Conflict (the reservation fences it)", what, c.Status)
	}
	if g := a.identifyNS(1).ANAGRPID; g != anaGroup {
		t.Errorf("%s: Identify Namespace ANAGRPID %d, want %d", what, g, anaGroup)
	}
	for _, q := range []*rawQueue{a.admin, a.io, b.admin, b.io} {
		select {
		case <-q.conn.Done():
			t.Errorf("%s: a queue was disconnected: %v", what, q.conn.Err())
		default:
		}
	}
}

// TestReloadReopensForOpenSettings: a reload that changes only how a namespace's backend
// opens its store — shared, rbd.user, rbd.keyring — opens the backend again in place with
// the new settings: the namespace keeps its NSID, data, registrations, reservation and ANA
// group, the hosts their controllers and queues. shared on a memory namespace, which its
// backend does not use, changes the running configuration only. The old code removed the
// namespace and added it again: the changes were a removal and an addition, and the
// registrations and the reservation (and a memory namespace's data) were gone.
func TestReloadReopensForOpenSettings(t *testing.T) {
	dir := t.TempDir()
	img := conf.Namespace{NSID: 1, Backend: conf.BackendRBD, ANAGroup: 2, RBD: conf.RBD{Pool: "rbd", Image: "vol1"}}
	for _, c := range []struct {
		name   string
		ns     conf.Namespace
		edit   func(*conf.Namespace)
		change string
		opens  int                       // opens of the namespace's backend the reload makes
		check  func(s backend.Spec) bool // of the reopen's Spec
	}{
		{"file shared", conf.Namespace{NSID: 1, Backend: conf.BackendFile, Path: filepath.Join(dir, "one.img"), Size: 1 << 20, ANAGroup: 2},
			func(n *conf.Namespace) { n.Shared = true }, "shared false → true", 1, func(s backend.Spec) bool { return s.Shared }},
		{"rbd user", img, func(n *conf.Namespace) { n.RBD.User = "gonvmf" }, `rbd.user "" → "gonvmf"`, 1,
			func(s backend.Spec) bool { return s.RBD.User == "gonvmf" }},
		{"rbd keyring", img, func(n *conf.Namespace) { n.RBD.Keyring = filepath.Join(dir, "gonvmf.keyring") },
			`rbd.keyring "" → "` + filepath.Join(dir, "gonvmf.keyring") + `"`, 1,
			func(s backend.Spec) bool { return s.RBD.Keyring == filepath.Join(dir, "gonvmf.keyring") }},
		{"memory shared", conf.Namespace{NSID: 1, Backend: conf.BackendMemory, Size: 4 << 20, ANAGroup: 2},
			func(n *conf.Namespace) { n.Shared = true }, "shared false → true", 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &openRecorder{dir: t.TempDir()}
			base := config("10.99.0.1", 0)
			base.Subsystems[0].Namespaces[0] = c.ns
			s := loopServer(t, base, target.WithBackendOpener(r.open))
			a, b, data := resvHosts(t, s)
			before := len(r.opened())

			next := s.Config()
			c.edit(&next.Subsystems[0].Namespaces[0])
			changes, err := s.Reload(next)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"subsystem " + subNQN + ": namespace 1 " + c.change}; !slices.Equal(changes, want) {
				t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
			}
			specs := r.opened()[before:]
			if len(specs) != c.opens {
				t.Fatalf("the reload opened %d backends, want %d", len(specs), c.opens)
			}
			if c.check != nil && !c.check(specs[0]) {
				t.Errorf("the reopen's spec %+v does not have the new setting", specs[0])
			}
			expectKept(t, "after the reload", a, b, data, 2)
			if got, want := s.Config().String(), resolved(t, next).String(); got != want {
				t.Errorf("running configuration after the reload:\n%s\nwant:\n%s", got, want)
			}
			if c.ns.Backend == conf.BackendFile {
				// The file is locked shared now: another shared opener gets in.
				f, err := os.Open(c.ns.Path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
					t.Errorf("a shared lock on the file after the reload: %v; want it granted (the namespace's lock is shared)", err)
				}
			}
		})
	}
}

// TestReloadOpenSettingsRefused: new open settings the backend does not open with fail
// the reload: the namespace is opened again with the settings it had and keeps running
// (data, registrations, reservation), the steps before are undone, and the running
// configuration is the one before the reload.
func TestReloadOpenSettingsRefused(t *testing.T) {
	r := &openRecorder{dir: t.TempDir(), refuse: "nobody"}
	base := config("10.99.0.1", 0)
	base.Subsystems[0].Namespaces[0] = conf.Namespace{NSID: 1, Backend: conf.BackendRBD, RBD: conf.RBD{Pool: "rbd", Image: "vol1", User: "gonvmf"}}
	s := loopServer(t, base, target.WithBackendOpener(r.open))
	a, b, data := resvHosts(t, s)
	running := s.Config().String()
	before := len(r.opened())

	next := s.Config()
	next.Subsystems[0].Namespaces[0].RBD.User = "nobody"
	next.Subsystems = append(next.Subsystems, conf.Subsystem{NQN: twoNQN, AllowAnyHost: true}) // added first, then undone
	changes, err := s.Reload(next)
	if err == nil || !strings.Contains(err.Error(), `namespace 1 rbd.user "gonvmf" → "nobody"`) ||
		!strings.Contains(err.Error(), "opened again with the old ones") || !strings.Contains(err.Error(), "refuses client.nobody") {
		t.Fatalf("reload with a user the cluster refuses: %v (changes %v); want the step, the refusal and the old settings back", err, changes)
	}
	if got := s.Config().String(); got != running {
		t.Errorf("running configuration after the refused reload:\n%s\nwant:\n%s", got, running)
	}
	specs := r.opened()[before:]
	if len(specs) != 2 || specs[0].RBD.User != "nobody" || specs[1].RBD.User != "gonvmf" {
		t.Errorf("opens during the reload %+v, want the refused one as nobody, then one as gonvmf", specs)
	}
	expectKept(t, "after the refused reload", a, b, data, 1)
}

// growRefused is a backend whose Resize fails, as a store that cannot grow does.
type growRefused struct{ backend.Backend }

func (b growRefused) Resize(uint64) (uint64, error) {
	return 0, fmt.Errorf("test: the store cannot grow: %w", syscall.ENOSPC)
}

func (b growRefused) Info() backend.Info { return backend.Describe(b.Backend) }

// TestReloadOpenSettingsOfWriteProtected: a file namespace write-protected while it runs
// (its backend opened writable) takes a reload that makes it shared and writable at
// once: the reopen for shared opens the file for writing again, so that write protection
// can then go; every reopen the reload and its undo make does so, and a reload undone by
// a later step (a grow the store refuses) leaves the namespace as it was: write-protected
// over a backend that takes writes, which SetNamespaceReadOnly can lift. The old code
// reopened it from the configuration, read_only: the file was opened read-only, the
// reload failed at read_only true → false ("its backend was opened read-only"), and its
// undo reopened it read-only again, so that no later change could make it writable short
// of removing and adding it.
func TestReloadOpenSettingsOfWriteProtected(t *testing.T) {
	for _, undone := range []bool{false, true} {
		t.Run(fmt.Sprintf("undone=%t", undone), func(t *testing.T) {
			r := &openRecorder{dir: t.TempDir()}
			path := filepath.Join(t.TempDir(), "one.img")
			open := func(s backend.Spec) (backend.Backend, error) {
				b, err := r.open(s)
				if err != nil || s.Kind != backend.KindNull {
					return b, err
				}
				return growRefused{b}, nil
			}
			base := config("10.99.0.1", 0)
			base.Subsystems[0].Namespaces = []conf.Namespace{
				{NSID: 1, Backend: conf.BackendFile, Path: path, Size: 1 << 20},
				{NSID: 2, Backend: conf.BackendNull, Size: 1 << 20},
			}
			s := loopServer(t, base, target.WithBackendOpener(open))
			a := connectRaw(t, s, 1)
			data := make([]byte, 512)
			for i := range data {
				data[i] = byte(i*3 + 5)
			}
			a.io.ok("write before", a.rw(nvmeproto.OpWrite, 8, data))
			if err := s.SetNamespaceReadOnly(subNQN, 1, true); err != nil {
				t.Fatal(err)
			}
			running := s.Config().String()
			before := len(r.opened())

			next := s.Config()
			n := &next.Subsystems[0].Namespaces[0]
			n.Shared, n.ReadOnly = true, false
			if undone {
				next.Subsystems[0].Namespaces[1].Size = 2 << 20
			}
			changes, err := s.Reload(next)
			for i, sp := range r.opened()[before:] {
				if sp.Path == path && sp.ReadOnly {
					t.Errorf("open %d of the namespace's file during the reload is read-only; want it writable, as the backend it replaced", i+1)
				}
			}
			if !undone {
				if err != nil {
					t.Fatalf("reload making the write-protected namespace shared and writable: %v", err)
				}
				want := []string{"subsystem " + subNQN + ": namespace 1 shared false → true", "subsystem " + subNQN + ": namespace 1 read_only true → false"}
				if !slices.Equal(changes, want) {
					t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
				}
				a.io.ok("write after the reload", a.rw(nvmeproto.OpWrite, 9, data))
				if got, want := s.Config().String(), resolved(t, next).String(); got != want {
					t.Errorf("running configuration after the reload:\n%s\nwant:\n%s", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "namespace 2 size 1MiB → 2MiB") || !strings.Contains(err.Error(), "cannot grow") {
				t.Fatalf("reload whose grow fails: %v (changes %v); want the grow's step and its error", err, changes)
			}
			if got := s.Config().String(); got != running {
				t.Errorf("running configuration after the undone reload:\n%s\nwant:\n%s", got, running)
			}
			if c := a.rw(nvmeproto.OpWrite, 9, data); c.Status.Code() != nvmeproto.StatusNSWriteProtected.Code() {
				t.Errorf("a write after the undone reload: %v, want Namespace is Write Protected", c.Status)
			}
			if err := s.SetNamespaceReadOnly(subNQN, 1, false); err != nil {
				t.Fatalf("lifting write protection after the undone reload: %v", err)
			}
			a.io.ok("write once write protection is lifted", a.rw(nvmeproto.OpWrite, 9, data))
			got := make([]byte, 512)
			a.io.ok("read", a.rw(nvmeproto.OpRead, 8, got))
			if !slices.Equal(got, data) {
				t.Error("the data written before the reload is gone")
			}
		})
	}
}

// TestReloadANAWaitsTogether: a reload that moves two namespaces into a group serving no
// I/O on a port, each with a write that port admitted before held in its backend, waits
// for the two moves' fences together: it returns after about one queue-close timeout,
// not one for each move, with both moves applied and the writes still held. The old code
// waited for each move's fence before the next step: the reload took two close timeouts.
// Waits one after another take two close timeouts at least, each fence waiting its whole
// timeout for a held write; waits together take one and the reload's own work, which a
// close timeout of 1 s leaves a second for on a loaded machine.
func TestReloadANAWaitsTogether(t *testing.T) {
	const closeTimeout = time.Second
	base := config("10.99.0.1", 0) // namespace 1: memory, ana_group 1
	base.Subsystems[0].Namespaces = append(base.Subsystems[0].Namespaces,
		conf.Namespace{NSID: 2, Backend: conf.BackendMemory, Size: 4 << 20})

	gate := testutil.NewWriteGate()
	defer gate.Open() // before the cleanups, which wait for the held writes
	s := loopServer(t, base, target.WithBackendOpener(gate.Opener()), target.WithQueueCloseTimeout(closeTimeout))
	var states [conf.MaxANAGroup + 1]conf.ANAState
	states[2] = conf.ANAInaccessible
	lp, err := loop.New(s.Target(), loop.Options{Name: "b", ANAStates: states})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f", Logger: quiet,
		Loop: func(depth int) (initiator.LoopConn, error) { return lp.Dial(depth) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	written := make(chan error, 2)
	for nsid := uint32(1); nsid <= 2; nsid++ {
		ns, err := h.Namespace(nsid)
		if err != nil {
			t.Fatalf("namespace %d: %v", nsid, err)
		}
		go func() {
			_, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0)
			written <- err
		}()
	}
	gate.WaitHeld(t, 2)

	next := base.Clone()
	next.Subsystems[0].Namespaces[0].ANAGroup = 2
	next.Subsystems[0].Namespaces[1].ANAGroup = 2
	start := time.Now()
	changes, err := s.Reload(next)
	d := time.Since(start)
	if err != nil || len(changes) != 2 || !strings.Contains(changes[0], "namespace 1 ana_group 1 → 2") ||
		!strings.Contains(changes[1], "namespace 2 ana_group 1 → 2") {
		t.Fatalf("reload: %v %v; want both moves applied", changes, err)
	}
	if d < closeTimeout {
		t.Errorf("the reload returned after %v, before the close timeout %v, with writes admitted before the moves in the backends", d, closeTimeout)
	}
	if d >= 2*closeTimeout {
		t.Errorf("the reload took %v, two close timeouts (%v) or more: the moves' fences were waited for one after the other", d, 2*closeTimeout)
	}
	if n := len(written); n != 0 {
		t.Errorf("%d writes completed during the reload, with the gate closed", n)
	}
	gate.Open()
	for range 2 {
		select {
		case err := <-written:
			if err != nil {
				t.Errorf("a write admitted before the moves: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a write did not complete within 10 s of the gate opening")
		}
	}
}

// heldFlush is a backend whose Flush reports itself on entered and returns once release
// is closed.
type heldFlush struct {
	backend.Backend
	entered chan<- struct{}
	release <-chan struct{}
}

func (b heldFlush) Flush() error {
	b.entered <- struct{}{}
	<-b.release
	return b.Backend.Flush()
}

// TestReloadDuringShutdown: a Reload while Shutdown flushes (held here) applies nothing and
// fails with ErrClosed, so that no reload changes the target its stop drains and flushes.
// The old code checked only Close's mark, set after the flush, and added the subsystem.
func TestReloadDuringShutdown(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	opener := func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil {
			return nil, err
		}
		return heldFlush{b, entered, release}, nil
	}
	base := config("10.99.0.1", 0)
	s := loopServer(t, base, target.WithBackendOpener(opener))
	shut, shutDone := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(shutDone)
		shut <- s.Shutdown(context.Background())
	}()
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
		<-shutDone
	})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not flush the namespace within 10 s")
	}
	next := base.Clone()
	next.Subsystems = append(next.Subsystems, conf.Subsystem{NQN: twoNQN, AllowAnyHost: true})
	changes, err := s.Reload(next)
	if !errors.Is(err, server.ErrClosed) {
		t.Errorf("Reload during Shutdown's flush: %v (changes %q), want an error wrapping server.ErrClosed", err, changes)
	}
	for _, sub := range s.Config().Subsystems {
		if sub.NQN == twoNQN {
			t.Errorf("Reload during Shutdown's flush added subsystem %s", twoNQN)
		}
	}
	close(release)
	released = true
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// heldCloseOpener returns a backend opener (target.WithBackendOpener) that opens backends
// with backend.Open, except that the Close of one whose size is one of mibs MiB reports
// that size on entered, then waits until release(size) is called before it closes the
// backend. release may be called more than once.
func heldCloseOpener(mibs ...int) (open func(backend.Spec) (backend.Backend, error), entered <-chan int, release func(mib int)) {
	in := make(chan int, len(mibs))
	gates, releases := map[int]chan struct{}{}, map[int]func(){}
	for _, m := range mibs {
		gate := make(chan struct{})
		gates[m], releases[m] = gate, sync.OnceFunc(func() { close(gate) })
	}
	open = func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		m := int(s.Size >> 20)
		if err != nil || gates[m] == nil {
			return b, err
		}
		return heldClose{b, func() { in <- m; <-gates[m] }}, nil
	}
	return open, in, func(mib int) { releases[mib]() }
}

// heldClose is a backend whose Close calls hold first.
type heldClose struct {
	backend.Backend
	hold func()
}

func (b heldClose) Close() error {
	b.hold()
	return b.Backend.Close()
}

// waitClosing waits until the backends of the sizes want (MiB) are all in Close at once
// (none returns before the test releases it), at most 10 s; a backend of another size in
// Close meanwhile fails the test.
func waitClosing(t *testing.T, entered <-chan int, what string, want ...int) {
	t.Helper()
	var in []int
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for len(in) < len(want) {
		select {
		case m := <-entered:
			if !slices.Contains(want, m) {
				t.Fatalf("%s: the backend of %d MiB is closing with those of %v (closing: %v), want only those", what, m, want, in)
			}
			in = append(in, m)
		case <-deadline.C:
			t.Fatalf("%s: after 10 s only the backends of %v MiB are closing, want those of %v closing at once (a removal waits for the one before?)",
				what, in, want)
		}
	}
}

// heldNQN names the subsystem whose namespace heldSubsystems sizes mib MiB.
func heldNQN(mib int) string { return fmt.Sprintf("nqn.2024-01.io.gonvmf:held-%d", mib) }

// heldSubsystems appends to c a subsystem heldNQN(mib) for each of mibs, with one
// namespace of backend kind and size mib MiB.
func heldSubsystems(c *conf.Config, kind string, mibs ...int) {
	for _, m := range mibs {
		c.Subsystems = append(c.Subsystems, conf.Subsystem{NQN: heldNQN(m), AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: kind, Size: conf.Size(m) << 20}}})
	}
}

type reloadResult struct {
	changes []string
	err     error
}

// reloadAsync runs s.Reload(next) on its own goroutine and sends its result on the
// returned channel.
func reloadAsync(s *server.Server, next *conf.Config) <-chan reloadResult {
	reloaded := make(chan reloadResult, 1)
	go func() {
		changes, err := s.Reload(next)
		reloaded <- reloadResult{changes, err}
	}()
	return reloaded
}

// notReturned fails the test when the reload reloaded has returned.
func notReturned(t *testing.T, reloaded <-chan reloadResult, what string) {
	t.Helper()
	select {
	case r := <-reloaded:
		t.Fatalf("Reload returned (%v %v) %s", r.changes, r.err, what)
	default:
	}
}

// TestReloadRemovesSubsystemsAtOnce: a reload that removes several subsystems removes
// them at once, so it waits about one queue-close timeout however many have hosts'
// commands that do not finish: the backends of three removed subsystems' namespaces are
// in Close together, each held by the test (the close timeout, an hour, never ends one),
// and then — after them, as the plan orders them, even with no step between — those of
// two removed subsystems whose memory namespaces go last. The changes are reported in the
// plan's order. The old code removed one subsystem after the other: the second's
// namespace began closing only after the first's had closed.
func TestReloadRemovesSubsystemsAtOnce(t *testing.T) {
	open, entered, release := heldCloseOpener(11, 12, 13, 14, 15)
	defer func() {
		for m := 11; m <= 15; m++ {
			release(m)
		}
	}()
	base := config("10.99.0.1", 0)
	heldSubsystems(base, conf.BackendNull, 11, 12, 13)
	heldSubsystems(base, conf.BackendMemory, 14, 15) // removed last (their memory goes)
	s := loopServer(t, base, target.WithBackendOpener(open), target.WithQueueCloseTimeout(time.Hour))
	next := base.Clone()
	next.Subsystems = next.Subsystems[:1]
	reloaded := reloadAsync(s, next)

	waitClosing(t, entered, "removing the subsystems of null namespaces", 11, 12, 13)
	notReturned(t, reloaded, "with the removed subsystems' backends still closing")
	for _, m := range []int{13, 12, 11} {
		release(m)
	}
	waitClosing(t, entered, "removing the subsystems of memory namespaces", 14, 15)
	notReturned(t, reloaded, "with the removed subsystems' backends still closing")
	release(15)
	release(14)
	r := <-reloaded
	if r.err != nil {
		t.Fatal(r.err)
	}
	var want []string
	for m := 11; m <= 15; m++ {
		want = append(want, "remove subsystem "+heldNQN(m))
	}
	if !slices.Equal(r.changes, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(r.changes, "\n"), strings.Join(want, "\n"))
	}
	if got, want := s.Config().String(), resolved(t, next).String(); got != want {
		t.Errorf("running configuration after the reload:\n%s\nwant:\n%s", got, want)
	}
}

// TestReloadUndoesRemovalsBesidesFailed: when removals of subsystems applied at once fail
// (two of four here), the reload's error names each, and the removals that took effect —
// also one after a failed one in the plan — are undone, each subsystem back in its place
// in the order, as is the step before them: the running configuration is the one before
// the reload. The old code stopped at the first failure and named only it.
func TestReloadUndoesRemovalsBesidesFailed(t *testing.T) {
	base := config("10.99.0.1", 0)
	heldSubsystems(base, conf.BackendNull, 1, 2, 3, 4)
	s := loopServer(t, base)
	before := s.Config().String()

	injected := errors.New("injected: removal refused")
	fails := []string{heldNQN(2), heldNQN(4)}
	var mu sync.Mutex
	var removed []string
	defer server.SetRemoveSubsystem(func(tgt *target.Target, nqn string) error {
		if slices.Contains(fails, nqn) {
			return fmt.Errorf("subsystem %q: %w", nqn, injected)
		}
		err := tgt.RemoveSubsystem(nqn)
		if err == nil {
			mu.Lock()
			removed = append(removed, nqn)
			mu.Unlock()
		}
		return err
	})()

	next := base.Clone()
	next.Subsystems = next.Subsystems[:1]
	next.AutoReopen.Attempts = 3 // a step before the removals, undone too
	changes, err := s.Reload(next)
	if !errors.Is(err, injected) {
		t.Fatalf("reload whose removals of %v fail: %v (changes %v); want the injected error", fails, err, changes)
	}
	for _, nqn := range fails {
		if !strings.Contains(err.Error(), "remove subsystem "+nqn+": ") {
			t.Errorf("the reload's error does not name the failed removal of %s: %v", nqn, err)
		}
	}
	slices.Sort(removed)
	if want := []string{heldNQN(1), heldNQN(3)}; !slices.Equal(removed, want) {
		t.Errorf("subsystems removed before the undo: %v, want %v", removed, want)
	}
	expectRestored(t, s, before, []string{subNQN, heldNQN(1), heldNQN(2), heldNQN(3), heldNQN(4)})
}

// TestReloadRemovalsAtOnceDuringShutdown: when Shutdown begins while a reload's removals
// of subsystems run at once (held here), each of them runs to its end and the reload then
// applies no more step: it fails with ErrClosed, naming the addition it did not apply,
// and undoes nothing (the removals stay applied).
func TestReloadRemovalsAtOnceDuringShutdown(t *testing.T) {
	open, entered, release := heldCloseOpener(11, 12, 13)
	releaseAll := func() {
		for m := 11; m <= 13; m++ {
			release(m)
		}
	}
	defer releaseAll()
	base := config("10.99.0.1", 0)
	heldSubsystems(base, conf.BackendNull, 11, 12, 13)
	s := loopServer(t, base, target.WithBackendOpener(open), target.WithQueueCloseTimeout(time.Hour))
	next := base.Clone()
	next.Subsystems = append(next.Subsystems[:1], conf.Subsystem{NQN: twoNQN, AllowAnyHost: true})
	reloaded := reloadAsync(s, next)
	waitClosing(t, entered, "removing the subsystems", 11, 12, 13)
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The removals are released only once Shutdown has begun, so the reload meets the
	// stop before its next step.
	for deadline := time.Now().Add(10 * time.Second); !s.IsStopping(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Shutdown has not begun after 10 s")
		}
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with the removed subsystems' backends still closing", err)
	case <-time.After(200 * time.Millisecond):
	}
	releaseAll()
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	r := <-reloaded
	if !errors.Is(r.err, server.ErrClosed) || !strings.Contains(r.err.Error(), "add subsystem "+twoNQN+" (0 namespaces) and the 0 steps after it not applied") ||
		!strings.Contains(r.err.Error(), "the 3 changes before it stay applied") {
		t.Fatalf("Reload whose removals ran when Shutdown began: %v (changes %v); want an error wrapping ErrClosed that names the addition not applied after the 3 removals", r.err, r.changes)
	}
	for _, sub := range s.Target().Config().Subsystems {
		if sub.NQN != subNQN {
			t.Errorf("subsystem %s in the configuration after the reload stopped, want only %s (the removals stay applied, the addition is not applied)", sub.NQN, subNQN)
		}
	}
}

// TestReloadRemovalsClosedByShutdown: when the stop closes the target under a batch of
// removals, so that some of them fail with target.ErrClosed, the reload stops as it does
// at a step the stop comes before: the error wraps ErrClosed, names the removals not
// applied, and nothing is undone (an undo would meet the closed target too).
func TestReloadRemovalsClosedByShutdown(t *testing.T) {
	base := config("10.99.0.1", 0)
	heldSubsystems(base, conf.BackendNull, 1, 2, 3)
	s := loopServer(t, base)
	entered := make(chan struct{})
	stopped := make(chan struct{})
	var others sync.WaitGroup // the removals of subsystems 1 and 3
	others.Add(2)
	defer server.SetRemoveSubsystem(func(tgt *target.Target, nqn string) error {
		if nqn != heldNQN(2) {
			defer others.Done()
			return tgt.RemoveSubsystem(nqn)
		}
		// Once the other two have taken effect, the stop begins while this removal
		// runs, and closes the target under it.
		others.Wait()
		close(entered)
		<-stopped
		return fmt.Errorf("subsystem %q: %w", nqn, target.ErrClosed)
	})()
	next := base.Clone()
	next.Subsystems = next.Subsystems[:1]
	next.AutoReopen.Attempts = 3 // a step before the removals: not undone either
	reloaded := reloadAsync(s, next)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the removal of subsystem 2 did not begin within 10 s")
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	for deadline := time.Now().Add(10 * time.Second); !s.IsStopping(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Shutdown has not begun after 10 s")
		}
	}
	close(stopped)
	r := <-reloaded
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if !errors.Is(r.err, server.ErrClosed) || !errors.Is(r.err, target.ErrClosed) ||
		!strings.Contains(r.err.Error(), "remove subsystem "+heldNQN(2)+" and the 0 steps after it not applied") ||
		!strings.Contains(r.err.Error(), "the 3 changes applied stay applied") {
		t.Fatalf("Reload whose removal the stop closed: %v (changes %v); want an error wrapping ErrClosed that names the removal not applied and the 3 changes that stay", r.err, r.changes)
	}
	cfg := s.Target().Config()
	if cfg.AutoReopen.Attempts != 3 || len(cfg.Subsystems) != 2 || strings.Contains(r.err.Error(), "undo") {
		t.Errorf("the reload undid changes after the stop closed the target: auto_reopen.attempts %d, subsystems %d (want 3 and 2: the first and the one the stop closed); %v",
			cfg.AutoReopen.Attempts, len(cfg.Subsystems), r.err)
	}
}
