package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/control"
	"github.com/gonvmf/gonvmf/target/loop"
	"github.com/gonvmf/gonvmf/target/server"
)

const ctlNQN = "nqn.2024-01.io.gonvmf:ctl-cli"

// ctlTarget serves the configuration file text in-process (loop) with its control API on
// a socket of its own, and returns the server and the socket.
func ctlTarget(t *testing.T, file string) (*server.Server, string) {
	t.Helper()
	return ctlTargetWith(t, file, server.Options{})
}

// ctlTargetWith is ctlTarget with further server options (Loop and Logger are set).
func ctlTargetWith(t *testing.T, file string, o server.Options) (*server.Server, string) {
	t.Helper()
	cfg, err := conf.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	o.Loop, o.Logger = true, slog.New(slog.DiscardHandler)
	s, err := server.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := control.Start(s, s.Config().Control, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, s.Config().Control.Socket
}

func ctlConfig(t *testing.T, extra string) string {
	d, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	p := filepath.Join(d, "target.yaml")
	text := `listeners: [{address: 10.99.0.1}]
subsystems:
  - nqn: ` + ctlNQN + `
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: memory, size: 4MiB}
` + extra + `
transport: {buffer_pool_size: 8MiB, poll_groups: 1}
control: {socket: ` + filepath.Join(d, "ctl.sock") + `}
`
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCtl runs gonvmf ctl's commands as a user would against a running (in-process)
// target: tables, --json, the changes, errors and exit statuses, and save's output
// accepted by gonvmf check.
func TestCtl(t *testing.T) {
	s, sock := ctlTarget(t, ctlConfig(t, ""))
	ctl := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := gonvmf(t, append([]string{"ctl", "--socket", sock}, args...)...)
		if code != want {
			t.Fatalf("gonvmf ctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}
	contains := func(what, text string, subs ...string) {
		t.Helper()
		for _, sub := range subs {
			if !strings.Contains(text, sub) {
				t.Errorf("%s: no %q in\n%s", what, sub, text)
			}
		}
	}

	out, _ := ctl(0, "subsystem", "ls")
	contains("subsystem ls", out, "NQN", "SERIAL", ctlNQN, conf.DeriveSerial(ctlNQN), "any")

	dir := t.TempDir()
	two := "nqn.2024-01.io.gonvmf:ctl-two"
	host := "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"
	out, _ = ctl(0, "subsystem", "add", two, "--model", "cli", "--host", host,
		"--ns", "nsid=1,backend=file,path="+filepath.Join(dir, "a.img")+",size=1MiB", "--ns", "nsid=2,backend=null,size=1GiB,lba_size=4096")
	contains("subsystem add", out, "added subsystem "+two, "2 namespaces")
	_, errOut := ctl(1, "subsystem", "add", two, "--allow-any-host")
	contains("subsystem add twice", errOut, "gonvmf: ctl subsystem add:", "subsystem already exists", two)
	_, errOut = ctl(2, "subsystem", "add", "nqn.2024-01.io.gonvmf:x", "--ns", "nsid=1,backend=null,sise=1GiB")
	contains("bad --ns", errOut, `unknown field "sise"`, "did you mean size?")

	// 2^32 + 3 would have been NSID 3.
	_, errOut = ctl(2, "ns", "add", ctlNQN, "--nsid", "4294967299", "--backend", "memory", "--size", "2MiB")
	contains("ns add --nsid 2^32+3", errOut, "--nsid 4294967299: out of range")
	out, _ = ctl(0, "ns", "add", ctlNQN, "--nsid", "3", "--backend", "memory", "--size", "2MiB", "--lba-size", "4096")
	contains("ns add", out, "added namespace 3 to "+ctlNQN, "2.0 MiB (512 blocks of 4096 bytes)")
	out, _ = ctl(0, "ns", "resize", ctlNQN, "3", "8MiB")
	contains("ns resize", out, "8.0 MiB (2048 blocks)")
	_, errOut = ctl(1, "ns", "resize", ctlNQN, "3", "1MiB")
	contains("ns resize smaller", errOut, "cannot shrink")
	out, _ = ctl(0, "ns", "ro", ctlNQN, "3", "on")
	contains("ns ro", out, "write-protected")
	_, errOut = ctl(2, "ns", "ro", ctlNQN, "3", "maybe")
	contains("ns ro maybe", errOut, "write on (write-protect) or off")
	out, _ = ctl(0, "ns", "ls")
	contains("ns ls", out, "SUBSYSTEM", "NSID", two, "a.img", "1.0 GiB", "ro")
	out, _ = ctl(0, "ns", "ls", ctlNQN, "--json")
	var nsl struct {
		Namespaces []struct {
			Nsid     uint32 `json:"nsid"`
			Size     string `json:"size"`
			ReadOnly bool   `json:"read_only"`
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(out), &nsl); err != nil || len(nsl.Namespaces) != 2 || nsl.Namespaces[1].Size != "8388608" || !nsl.Namespaces[1].ReadOnly {
		t.Errorf("ns ls --json: %v %+v\n%s", err, nsl, out)
	}
	out, _ = ctl(0, "ns", "rm", ctlNQN, "3")
	contains("ns rm", out, "removed namespace 3")
	_, errOut = ctl(1, "ns", "rm", ctlNQN, "3")
	contains("ns rm again", errOut, "no such namespace")

	other := "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	out, _ = ctl(0, "host", "allow", two, other)
	contains("host allow", out, "2 hosts allowed")
	out, _ = ctl(0, "host", "deny", two, host)
	contains("host deny", out, "denied "+host, "1 hosts allowed")
	out, _ = ctl(0, "host", "ls", two)
	contains("host ls", out, other)
	_, errOut = ctl(1, "host", "deny", ctlNQN, host)
	contains("host deny on allow-any", errOut, "allows any host")
	_, errOut = ctl(2, "host", "set", two)
	contains("host set without hosts", errOut, "--any or the host NQNs")
	out, _ = ctl(0, "host", "set", two, "--any")
	contains("host set --any", out, "any host may connect")

	out, _ = ctl(0, "listener", "ls")
	contains("listener ls", out, "rdma", "10.99.0.1", "4420")
	_, errOut = ctl(1, "listener", "add", "10.99.0.2")
	contains("listener add on a loop target", errOut, "in-process")
	out, _ = ctl(0, "ana", "ls")
	contains("ana ls", out, "GROUP", "STATE", "10.99.0.1", "*", "optimized")
	_, errOut = ctl(1, "ana", "set", "10.99.0.1", "1", "inaccessible")
	contains("ana set on a loop target", errOut, "no such listener: 10.99.0.1:4420")
	_, errOut = ctl(2, "ana", "set", "10.99.0.1", "4421", "200", "inaccessible")
	contains("ana set group 200", errOut, `"200" is not an ANA group; use 1..128`)
	_, errOut = ctl(2, "ana", "set", "10.99.0.1", "1", "standby")
	contains("ana set standby", errOut, `"standby" is not an ANA state`)
	_, errOut = ctl(2, "ana", "set", "10.99.0.1", "1")
	contains("ana set without a state", errOut, "usage: gonvmf ctl ana set ADDRESS [PORT] GROUP STATE")
	out, _ = ctl(0, "ns", "add", two, "--nsid", "5", "--backend", "null", "--size", "1MiB", "--ana-group", "9", "--json")
	var added struct {
		AnaGroup uint32 `json:"ana_group"`
	}
	if err := json.Unmarshal([]byte(out), &added); err != nil || added.AnaGroup != 9 {
		t.Errorf("ns add --ana-group 9: %v\n%s", err, out)
	}
	out, _ = ctl(0, "ns", "ana-group", two, "5", "12")
	contains("ns ana-group", out, "namespace 5 of "+two+" is in ANA group 12")
	out, _ = ctl(0, "ns", "ana-group", two, "5", "3", "--json")
	if err := json.Unmarshal([]byte(out), &added); err != nil || added.AnaGroup != 3 {
		t.Errorf("ns ana-group --json: %v\n%s", err, out)
	}
	if g := s.Config().Subsystems[1].Namespaces[2].ANAGroup; g != 3 {
		t.Errorf("the running configuration's ana_group %d, want 3", g)
	}
	_, errOut = ctl(1, "ns", "ana-group", two, "7", "3")
	contains("ns ana-group of a namespace that does not exist", errOut, "gonvmf: ctl ns ana-group:", "no such namespace")
	_, errOut = ctl(1, "ns", "ana-group", "nqn.2024-01.io.gonvmf:none", "1", "3")
	contains("ns ana-group in a subsystem that does not exist", errOut, "no such subsystem")
	_, errOut = ctl(2, "ns", "ana-group", two, "5", "129")
	contains("ns ana-group 129", errOut, `"129" is not an ANA group; use 1..128`)
	_, errOut = ctl(2, "ns", "ana-group", two, "5")
	contains("ns ana-group without a group", errOut, "usage: gonvmf ctl ns ana-group NQN NSID GROUP")
	out, _ = ctl(0, "subsystem", "add", "nqn.2024-01.io.gonvmf:ctl-three", "--allow-any-host", "--cntlid-min", "100", "--cntlid-max", "200", "--json")
	var three struct {
		Min uint32 `json:"cntlid_min"`
		Max uint32 `json:"cntlid_max"`
	}
	if err := json.Unmarshal([]byte(out), &three); err != nil || three.Min != 100 || three.Max != 200 {
		t.Errorf("subsystem add --cntlid-min 100 --cntlid-max 200: %v\n%s", err, out)
	}
	_, errOut = ctl(2, "subsystem", "add", "nqn.2024-01.io.gonvmf:ctl-four", "--allow-any-host", "--cntlid-max", "70000")
	contains("subsystem add --cntlid-max 70000", errOut, "--cntlid-max 70000: use 1..65519")
	ctl(0, "subsystem", "rm", "nqn.2024-01.io.gonvmf:ctl-three")
	out, _ = ctl(0, "ctrl", "ls")
	contains("ctrl ls", out, "SUBSYSTEM", "CNTLID", "CONNECTED")
	out, _ = ctl(0, "stats")
	contains("stats", out, "controllers 0", "BUFFER_POOL", two)

	saved := filepath.Join(dir, "saved.yaml")
	_, errOut = ctl(0, "save", "-o", saved)
	contains("save -o", errOut, "saved the running configuration to "+saved)
	if code, _, e := gonvmf(t, "check", "--static", "--config", saved); code != 0 {
		t.Errorf("gonvmf check of the saved configuration: exit %d\n%s", code, e)
	}
	out, _ = ctl(0, "save")
	rc, err := conf.Parse([]byte(out), "")
	if err != nil || len(rc.Subsystems) != 2 || rc.Subsystems[1].Model != "cli" || rc.Control.Socket != sock {
		t.Errorf("save: %v\n%s", err, out)
	}

	out, _ = ctl(0, "subsystem", "rm", two)
	contains("subsystem rm", out, "removed subsystem "+two)
	if n := len(s.Config().Subsystems); n != 1 {
		t.Errorf("%d subsystems left", n)
	}

	_, errOut = ctl(2, "ns", "rm", ctlNQN)
	contains("missing argument", errOut, "usage: gonvmf ctl ns rm NQN NSID")
	code, _, errOut := gonvmf(t, "ctl", "--socket", filepath.Join(dir, "none.sock"), "subsystem", "ls")
	if code != 1 || !strings.Contains(errOut, "is gonvmf serve running?") {
		t.Errorf("no target: exit %d\n%s", code, errOut)
	}
}

// TestCtlANAWait: ctl ns ana-group into a group that serves no I/O on the port of a host
// whose write is held in the backend fails when --timeout ends the target's wait for it,
// with the target's message — the move was made, which controller still has how many
// commands — and not as a target that did not answer; run again, it waits for the write
// and succeeds.
func TestCtlANAWait(t *testing.T) {
	gate := testutil.NewWriteGate()
	defer gate.Open() // before the cleanups, which wait for the held write
	s, sock := ctlTargetWith(t, ctlConfig(t, ""), server.Options{Target: []target.Option{target.WithBackendOpener(gate.Opener())}})
	var states [conf.MaxANAGroup + 1]conf.ANAState
	states[4] = conf.ANAChange
	lp, err := loop.New(s.Target(), loop.Options{Name: "b", ANAStates: states})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: ctlNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f", Logger: slog.New(slog.DiscardHandler),
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

	code, out, errOut := gonvmf(t, "ctl", "--socket", sock, "--timeout", "500ms", "ns", "ana-group", ctlNQN, "1", "4")
	if code != 1 {
		t.Fatalf("ctl ns ana-group with a write held: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"gonvmf: ctl ns ana-group:", "ana_group 1 → 4", "the change took effect",
		"1 I/O command admitted under the previous state still executes", "on controller 1 of " + ctlNQN} {
		if !strings.Contains(errOut, want) {
			t.Errorf("ctl's error does not say %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "no answer within --timeout") {
		t.Errorf("ctl reports the target's answer as no answer:\n%s", errOut)
	}
	if g := s.Config().Subsystems[0].Namespaces[0].ANAGroup; g != 4 {
		t.Errorf("ana_group %d after the wait ended, want 4 (the move stands)", g)
	}
	type result struct {
		code     int
		out, err string
	}
	again := make(chan result, 1)
	go func() {
		code, out, errOut := gonvmf(t, "ctl", "--socket", sock, "ns", "ana-group", ctlNQN, "1", "4")
		again <- result{code, out, errOut}
	}()
	select {
	case r := <-again:
		t.Fatalf("ctl ns ana-group again returned (exit %d) with the write held\n%s%s", r.code, r.out, r.err)
	case <-time.After(300 * time.Millisecond):
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
	select {
	case r := <-again:
		if r.code != 0 || !strings.Contains(r.out, "namespace 1 of "+ctlNQN+" is in ANA group 4") {
			t.Errorf("ctl ns ana-group again: exit %d\n%s%s", r.code, r.out, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ctl ns ana-group again did not return within 10 s of the write completing")
	}
}

// TestReloadOnSIGHUP: serve's SIGHUP handler applies the file's changes, and an invalid
// file changes nothing and says why.
func TestReloadOnSIGHUP(t *testing.T) {
	file := ctlConfig(t, "")
	s, _ := ctlTarget(t, file)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	stats := &reloadStats{}
	text, _ := os.ReadFile(file)

	grown := strings.Replace(string(text), "{nsid: 1, backend: memory, size: 4MiB}", "{nsid: 1, backend: memory, size: 8MiB}\n      - {nsid: 2, backend: null, size: 1GiB}", 1)
	os.WriteFile(file, []byte(grown), 0o600)
	reload(s, file, log, stats, nil)
	if ns := s.Target().Namespaces(); len(ns) != 2 || ns[0].Blocks != 8<<20/512 {
		t.Errorf("namespaces after the reload: %+v\n%s", ns, logs.String())
	}
	if !strings.Contains(logs.String(), "reload: 2 changes applied") {
		t.Errorf("log:\n%s", logs.String())
	}

	before := s.Config().String()
	logs.Reset()
	os.WriteFile(file, []byte(strings.Replace(grown, "size: 1GiB", "size: 1GiB, lba_size: 1000", 1)), 0o600)
	reload(s, file, log, stats, nil)
	if s.Config().String() != before || !strings.Contains(logs.String(), "lba_size: 1000 is not a supported LBA size") ||
		!strings.Contains(logs.String(), "reload refused: nothing changed") {
		t.Errorf("invalid file: log\n%s", logs.String())
	}
	if !backend.RBDAvailable {
		// A backend this build lacks is refused with the fix, as at start.
		logs.Reset()
		os.WriteFile(file, []byte(strings.Replace(grown, "{nsid: 2, backend: null, size: 1GiB}",
			"{nsid: 2, backend: rbd, rbd: {pool: p, image: i}}", 1)), 0o600)
		reload(s, file, log, stats, nil)
		if s.Config().String() != before || !strings.Contains(logs.String(), "make build-ceph") ||
			!strings.Contains(logs.String(), "reload refused: nothing changed") {
			t.Errorf("rbd in a build without ceph: log\n%s", logs.String())
		}
	}
	logs.Reset()
	os.WriteFile(file, []byte(strings.Replace(grown, "poll_groups: 1", "poll_groups: 2", 1)), 0o600)
	reload(s, file, log, stats, nil)
	if s.Config().String() != before || !strings.Contains(logs.String(), "transport.poll_groups: 1 → 2") {
		t.Errorf("transport change: log\n%s", logs.String())
	}
	refused := uint64(2) // the invalid file, the transport change
	if !backend.RBDAvailable {
		refused++ // the rbd namespace
	}
	if r := stats.get(); r.Succeeded != 1 || r.Failed != refused || !r.LastFailed {
		t.Errorf("reloads counted: %+v, want 1 succeeded, %v failed, the last failed", r, refused)
	}
}

// TestCtlStatsIO: gonvmf ctl stats shows what the metrics serve — I/O by class, errors
// by status, latency quantiles once latency is measured, refused connections.
func TestCtlStatsIO(t *testing.T) {
	s, sock := ctlTarget(t, ctlConfig(t, ""))
	s.Target().MeasureLatency(true)
	dial := func(nqn string) (*initiator.Controller, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: nqn,
			HostNQN: "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f", Logger: slog.New(slog.DiscardHandler),
			Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }})
	}
	if _, err := dial(ctlNQN + "-nope"); err == nil {
		t.Fatal("connected to an unknown subsystem")
	}
	c, err := dial(ctlNQN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns, _ := c.Namespace(1)
	ctx := context.Background()
	for i := range 3 {
		if _, err := ns.WriteAt(ctx, make([]byte, 4096), int64(i)*4096, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := ns.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := c.GetBuffer(ctx, 4096)
	if err := ns.Read(ctx, b, 1<<30); err == nil {
		t.Fatal("read past the end succeeded")
	}
	b.Release()

	code, out, errOut := gonvmf(t, "ctl", "--socket", sock, "stats")
	if code != 0 {
		t.Fatalf("ctl stats: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"READS", "FLUSHES", "ERRORS", "0/-", "3/12 KiB", "lba_out_of_range",
		"P99", "write", "refused: unknown_subsystem 1", "RDMA connection requests rejected: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestCtlHostKeys: gonvmf ctl host key and subsystem auth as a user runs them: a secret
// from standard input or a file, listings that never print a secret, save that writes
// them back, errors with exit statuses; then a SIGHUP reload of the hosts section. No
// output and no log line shows a key.
func TestCtlHostKeys(t *testing.T) {
	file := ctlConfig(t, "")
	cfg, err := conf.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := server.New(cfg, server.Options{Loop: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := control.Start(s, s.Config().Control, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sock := s.Config().Control.Socket

	key := func(h nvmeproto.AuthHashID, n int) string {
		k, err := dhchap.GenerateSecret(rand.Reader, h, n)
		if err != nil {
			t.Fatal(err)
		}
		return k.Encode()
	}
	key1, key2, ckey := key(nvmeproto.AuthHashSHA256, 32), key(nvmeproto.AuthHashSHA384, 48), key(0, 64)
	var keys []string
	for _, k := range []string{key1, key2, ckey} {
		keys = append(keys, strings.Split(k, ":")[2])
	}
	var outputs []string
	ctl := func(want int, stdin string, args ...string) (string, string) {
		t.Helper()
		if stdin != "" {
			f := filepath.Join(t.TempDir(), "stdin")
			os.WriteFile(f, []byte(stdin), 0o600)
			in, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			saved := os.Stdin
			os.Stdin = in
			defer func() { os.Stdin = saved }()
		}
		code, out, errOut := gonvmf(t, append([]string{"ctl", "--socket", sock}, args...)...)
		if code != want {
			t.Fatalf("gonvmf ctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		if args[0] != "save" {
			outputs = append(outputs, out, errOut)
		}
		return out, errOut
	}
	contains := func(what, text string, subs ...string) {
		t.Helper()
		for _, sub := range subs {
			if !strings.Contains(text, sub) {
				t.Errorf("%s: no %q in\n%s", what, sub, text)
			}
		}
	}
	host := "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"

	out, _ := ctl(0, key1+"\n", "host", "key", "set", host, "--dhchap-secret", "-", "--dhchap-dhgroups", "ffdhe2048,null")
	contains("host key set", out, "host "+host+": secret, DH groups set (secret DHHC-1:01:<32-byte key>:, controller secret -)")
	kf := filepath.Join(t.TempDir(), "host.key")
	os.WriteFile(kf, []byte(key2+"\n"), 0o600)
	out, _ = ctl(0, "", "host", "key", "set", host, "--dhchap-secret", "file:"+kf, "-C", ckey, "--dhchap-hashes", "sha384")
	contains("host key set file:", out, "secret file:"+kf, "controller secret DHHC-1:00:<64-byte key>:")
	out, _ = ctl(0, "", "host", "key", "ls")
	contains("host key ls", out, "HOST", "SECRET", "CTRL_SECRET", host, "file:"+kf, "DHHC-1:00:<64-byte key>:", "sha384", "ffdhe2048,null")
	out, _ = ctl(0, "", "host", "key", "ls", "--json")
	var hkl struct {
		Hosts []struct {
			Nqn          string   `json:"nqn"`
			DhchapSecret string   `json:"dhchap_secret"`
			DhchapHashes []string `json:"dhchap_hashes"`
			Subsystems   []string `json:"subsystems"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(out), &hkl); err != nil || len(hkl.Hosts) != 1 || hkl.Hosts[0].DhchapSecret != "file:"+kf ||
		len(hkl.Hosts[0].DhchapHashes) != 1 || len(hkl.Hosts[0].Subsystems) != 1 {
		t.Errorf("host key ls --json: %v %+v\n%s", err, hkl, out)
	}

	out, _ = ctl(0, "", "subsystem", "auth", ctlNQN, "on")
	contains("subsystem auth on", out, "new connections must authenticate")
	out, _ = ctl(0, "", "subsystem", "ls")
	contains("subsystem ls", out, "AUTH", "required")
	_, errOut := ctl(1, "", "host", "key", "rm", host)
	contains("host key rm under auth_required", errOut, "gonvmf: ctl host key rm:", "auth_required", "no host can connect")
	_, errOut = ctl(2, "", "subsystem", "auth", ctlNQN, "maybe")
	contains("subsystem auth maybe", errOut, "write on (require authentication) or off")
	_, errOut = ctl(2, "", "host", "key", "set", host)
	contains("host key set nothing", errOut, "nothing to set")
	_, errOut = ctl(1, "", "host", "key", "set", host, "--dhchap-secret", "DHHC-1:01:"+keys[0][:30]+":")
	contains("host key set, a mangled secret", errOut, "dhchap_secret", "copy it again")
	_, errOut = ctl(2, "", "host", "key", "set", host, "--dhchap-secret", "-")
	contains("host key set - with nothing on standard input", errOut, "standard input was empty")
	out, _ = ctl(0, "", "host", "key", "set", host, "--dhchap-ctrl-secret", "none", "--dhchap-hashes", "default")
	contains("host key set: no controller secret", out, "controller secret -")

	saved := filepath.Join(t.TempDir(), "saved.yaml")
	ctl(0, "", "save", "-o", saved)
	rc, err := conf.Load(saved)
	if err != nil || len(rc.Hosts) != 1 || rc.Hosts[0].DHCHAPSecret != "file:"+kf || rc.Hosts[0].DHCHAPCtrlSecret != "" || !rc.Subsystems[0].AuthRequired {
		t.Errorf("saved configuration: %v %+v", err, rc)
	}

	ctl(0, "", "subsystem", "auth", ctlNQN, "off")
	out, _ = ctl(0, "", "host", "key", "rm", host)
	contains("host key rm", out, "no longer authenticates")
	_, errOut = ctl(1, "", "host", "key", "rm", host)
	contains("host key rm again", errOut, "no entry in the hosts section")

	// SIGHUP: the file gains the host with an inline secret and auth_required.
	text, _ := os.ReadFile(file)
	next := strings.Replace(string(text), "    allow_any_host: true\n", "    allow_any_host: true\n    auth_required: true\n", 1) +
		"hosts:\n  - nqn: " + host + "\n    dhchap_secret: \"" + key1 + "\"\n"
	os.WriteFile(file, []byte(next), 0o600)
	reload(s, file, log, &reloadStats{}, nil)
	contains("reload log", logs.String(), "reload: 2 changes applied", "add host "+host+" to the hosts section (dhchap_secret DHHC-1:01:<32-byte key>:)")
	if h := s.Config().HostByNQN(host); h == nil || h.DHCHAPSecret != key1 || !s.Config().Subsystems[0].AuthRequired {
		t.Errorf("after the reload: %+v", s.Config())
	}

	for _, text := range append(outputs, logs.String()) {
		for _, k := range keys {
			if strings.Contains(text, k) || strings.Contains(text, k[:30]) {
				t.Fatalf("a key shows in an output or the log:\n%s", text)
			}
		}
	}
}

// TestCtlNsReopen: after a flush whose fdatasync failed (EIO injected into a real file
// backend), gonvmf ctl ns ls shows the namespace failed, why, and the command that puts it
// back; gonvmf ctl ns reopen does, and writes and flushes succeed again.
func TestCtlNsReopen(t *testing.T) {
	img := filepath.Join(t.TempDir(), "b.img")
	f := &backend.Faults{}
	s, sock := ctlTargetWith(t, ctlConfig(t, "      - {nsid: 2, backend: file, path: "+img+", size: 1MiB}"), server.Options{
		Target: []target.Option{target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
			spec.Faults = f
			return backend.Open(spec)
		})}})
	ctl := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := gonvmf(t, append([]string{"ctl", "--socket", sock}, args...)...)
		if code != want {
			t.Fatalf("gonvmf ctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: ctlNQN,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f", Logger: slog.New(slog.DiscardHandler),
		Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns, _ := c.Namespace(2)
	if _, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0); err != nil {
		t.Fatal(err)
	}
	if out := ctl(0, "ns", "ls"); !strings.Contains(out, "STATE") || strings.Contains(out, "failed") {
		t.Errorf("ns ls before the failure:\n%s", out)
	}
	f.FailSyncs(syscall.EIO)
	if err := ns.Flush(ctx); err == nil {
		t.Fatal("flush succeeded with fdatasync failing")
	}
	out := ctl(0, "ns", "ls", ctlNQN)
	for _, want := range []string{"failed", "namespace 2 of " + ctlNQN + " failed:", "fdatasync " + img, "input/output error",
		"gonvmf ctl ns reopen " + ctlNQN + " 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("ns ls of a failed namespace: no %q in\n%s", want, out)
		}
	}
	var nsl struct {
		Namespaces []struct {
			Nsid    uint32 `json:"nsid"`
			State   string `json:"state"`
			Failure string `json:"failure"`
		} `json:"namespaces"`
	}
	out = ctl(0, "ns", "ls", "--json")
	if err := json.Unmarshal([]byte(out), &nsl); err != nil || len(nsl.Namespaces) != 2 || nsl.Namespaces[0].State != "ok" ||
		nsl.Namespaces[1].State != "failed" || !strings.Contains(nsl.Namespaces[1].Failure, "fdatasync") {
		t.Errorf("ns ls --json: %v %+v\n%s", err, nsl, out)
	}
	if _, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0); err == nil {
		t.Error("write to the failed namespace succeeded")
	}

	ctl(1, "ns", "reopen", ctlNQN, "9")
	ctl(2, "ns", "reopen", ctlNQN)
	out = ctl(0, "ns", "reopen", ctlNQN, "2")
	if !strings.Contains(out, "reopened namespace 2 of "+ctlNQN+" (state ok); cleared the failure:") || !strings.Contains(out, "fdatasync") {
		t.Errorf("ns reopen:\n%s", out)
	}
	if out := ctl(0, "ns", "ls"); strings.Contains(out, "failed") {
		t.Errorf("ns ls after the reopen:\n%s", out)
	}
	if _, err := ns.WriteAt(ctx, make([]byte, 4096), 0, 0); err != nil {
		t.Errorf("write after the reopen: %v", err)
	}
	if err := ns.Flush(ctx); err != nil {
		t.Errorf("flush after the reopen: %v", err)
	}
	var rr struct {
		Namespace struct {
			State string `json:"state"`
		} `json:"namespace"`
		ClearedFailure *string `json:"cleared_failure"`
	}
	out = ctl(0, "ns", "reopen", ctlNQN, "2", "--json")
	if err := json.Unmarshal([]byte(out), &rr); err != nil || rr.ClearedFailure == nil || *rr.ClearedFailure != "" || rr.Namespace.State != "ok" {
		t.Errorf("ns reopen --json of a healthy namespace: %v\n%s", err, out)
	}
}

// TestAbsSubsystemPaths: a subsystem read with ctl subsystem add --yaml has every path
// relative to the YAML file's directory made absolute — rbd's ceph_conf and keyring too,
// which the target would otherwise look for next to its own configuration.
func TestAbsSubsystemPaths(t *testing.T) {
	dir := t.TempDir()
	cs := conf.Subsystem{Namespaces: []conf.Namespace{
		{Path: "disk.img"},
		{Backend: conf.BackendRBD, RBD: conf.RBD{CephConf: "ceph.conf", Keyring: "sub/keyring"}},
		{Path: "/abs/disk.img", RBD: conf.RBD{CephConf: "/etc/ceph/ceph.conf"}},
	}}
	absSubsystemPaths(&cs, dir)
	for _, c := range []struct{ got, want string }{
		{cs.Namespaces[0].Path, filepath.Join(dir, "disk.img")},
		{cs.Namespaces[1].RBD.CephConf, filepath.Join(dir, "ceph.conf")},
		{cs.Namespaces[1].RBD.Keyring, filepath.Join(dir, "sub", "keyring")},
		{cs.Namespaces[1].Path, ""},
		{cs.Namespaces[2].Path, "/abs/disk.img"},
		{cs.Namespaces[2].RBD.CephConf, "/etc/ceph/ceph.conf"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// TestCtlSaveReplacesFile: ctl save -o replaces the file whole with one of mode 0600 (the
// YAML may hold secrets) whatever the old one's mode, leaves no temporary file behind,
// replaces the file a symbolic link names rather than the link, and leaves the file as it
// was when the target cannot be reached.
func TestCtlSaveReplacesFile(t *testing.T) {
	_, sock := ctlTarget(t, ctlConfig(t, ""))
	dir := t.TempDir()
	saved := filepath.Join(dir, "target.yaml")
	if err := os.WriteFile(saved, []byte("# the boot configuration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "current.yaml")
	if err := os.Symlink("target.yaml", link); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{saved, link} {
		if code, _, errOut := gonvmf(t, "ctl", "--socket", sock, "save", "-o", out); code != 0 {
			t.Fatalf("save -o %s: exit %d\n%s", out, code, errOut)
		}
		fi, err := os.Stat(saved)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("after save -o %s: %s is %v, %v; want mode 0600", out, saved, fi.Mode(), err)
		}
		if c, err := conf.Parse(readFile(t, saved), saved); err != nil || len(c.Subsystems) != 1 || c.Subsystems[0].NQN != ctlNQN {
			t.Errorf("after save -o %s: %s does not hold the running configuration: %v", out, saved, err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != os.ModeSymlink {
			t.Errorf("after save -o %s: %s is no longer a symbolic link: %v %v", out, link, fi.Mode(), err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 2 {
			t.Errorf("after save -o %s: the directory holds %v", out, ents)
		}
	}
	before := readFile(t, saved)
	code, _, errOut := gonvmf(t, "ctl", "--socket", filepath.Join(dir, "none.sock"), "save", "-o", saved)
	if code != 1 || !strings.Contains(errOut, "is gonvmf serve running?") || !bytes.Equal(readFile(t, saved), before) {
		t.Errorf("save -o with no target: exit %d, file changed: %v\n%s", code, !bytes.Equal(readFile(t, saved), before), errOut)
	}
}

// TestCtlNsAddRBD: ctl ns add adds an rbd namespace from its --rbd-* flags, which reach
// the backend as the image's spec and the running configuration as its rbd section; flags
// the configuration's rules refuse are a usage error that names the flag and the fix, and
// the target is not asked. The target here opens a memory backend in place of the image.
func TestCtlNsAddRBD(t *testing.T) {
	var mu sync.Mutex
	var opened []backend.RBDSpec
	s, sock := ctlTargetWith(t, ctlConfig(t, ""), server.Options{
		Target: []target.Option{target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
			if spec.Kind != backend.KindRBD {
				return backend.Open(spec)
			}
			mu.Lock()
			opened = append(opened, spec.RBD)
			mu.Unlock()
			return backend.Open(backend.Spec{Kind: backend.KindMemory, Size: spec.RBD.CreateSize, LBASize: spec.LBASize})
		})}})
	ctl := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := gonvmf(t, append([]string{"ctl", "--socket", sock, "ns", "add", ctlNQN}, args...)...)
		if code != want {
			t.Fatalf("gonvmf ctl ns add %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}
	contains := func(what, text string, subs ...string) {
		t.Helper()
		for _, sub := range subs {
			if !strings.Contains(text, sub) {
				t.Errorf("%s: no %q in\n%s", what, sub, text)
			}
		}
	}

	cephConf, err := filepath.Abs(filepath.Join("ceph", "ceph.conf"))
	if err != nil {
		t.Fatal(err)
	}
	out := ctl(0, "--nsid", "2", "--backend", "rbd", "--lba-size", "4096", "--rbd-pool", "gw", "--rbd-rados-namespace", "tenant1",
		"--rbd-image", "vol2", "--rbd-ceph-conf", filepath.Join("ceph", "ceph.conf"), "--rbd-user", "gonvmf",
		"--rbd-keyring", "/etc/ceph/ceph.client.gonvmf.keyring", "--rbd-create-size", "8MiB")
	contains("ns add --backend rbd", out, "added namespace 2 to "+ctlNQN+": rbd gw/tenant1/vol2", "8.0 MiB (2048 blocks of 4096 bytes)")
	want := backend.RBDSpec{Pool: "gw", Namespace: "tenant1", Image: "vol2", Conf: cephConf, User: "gonvmf",
		Keyring: "/etc/ceph/ceph.client.gonvmf.keyring", CreateSize: 8 << 20}
	mu.Lock()
	if len(opened) != 1 || opened[0] != want {
		t.Errorf("the backend opened %+v, want one open of %+v", opened, want)
	}
	mu.Unlock()
	wantConf := conf.RBD{Pool: "gw", RadosNamespace: "tenant1", Image: "vol2", CephConf: cephConf, User: "gonvmf",
		Keyring: "/etc/ceph/ceph.client.gonvmf.keyring", CreateSize: 8 << 20}
	if nss := s.Config().Subsystems[0].Namespaces; len(nss) != 2 || nss[1].Backend != conf.BackendRBD || nss[1].RBD != wantConf {
		t.Errorf("running configuration's namespaces %+v, want the second rbd with %+v", nss, wantConf)
	}
	code, lsOut, errOut := gonvmf(t, "ctl", "--socket", sock, "ns", "ls", ctlNQN)
	if code != 0 || !strings.Contains(lsOut, "gw/tenant1/vol2") {
		t.Errorf("ns ls: exit %d\n%s%s", code, lsOut, errOut)
	}
	// The running configuration's rules across namespaces are the target's: one image, one
	// namespace.
	out = ctl(1, "--nsid", "3", "--backend", "rbd", "--rbd-pool", "gw", "--rbd-rados-namespace", "tenant1", "--rbd-image", "vol2",
		"--rbd-ceph-conf", cephConf, "--rbd-create-size", "8MiB")
	contains("ns add of an image in use", out, "image gw/tenant1/vol2 is already the backing of")

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--backend", "rbd"},
			[]string{"--rbd-*: missing; name the image, e.g. --rbd-pool rbd --rbd-image vol1"}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw"},
			[]string{"--rbd-image: missing; name the image, e.g. --rbd-image vol1"}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "a/b"},
			[]string{`--rbd-image a/b: "a/b" is not a valid image name`, "use the name the rbd tool shows"}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "v", "--rbd-user", "client.gonvmf"},
			[]string{"--rbd-user client.gonvmf: user is the client's id", "; write --rbd-user gonvmf"}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "v", "--read-only", "--rbd-create-size", "8MiB"},
			[]string{"--rbd-create-size 8MiB: a read-only namespace cannot create its image; create the image first (rbd create), or remove --read-only"}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "v", "--lba-size", "4096", "--rbd-create-size", "6KiB"},
			[]string{"--rbd-create-size 6KiB: ", "is not a multiple of the LBA size 4096; use a multiple of 4096"}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "v", "--rbd-create-size", "0"},
			[]string{`--rbd-create-size "0": an image of 0 bytes holds nothing`}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "v", "--rbd-create-size", "8 pages"},
			[]string{`--rbd-create-size "8 pages": `}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "v", "--size", "1GiB"},
			[]string{"--size 1GiB: rbd namespaces take their size from the image; remove --size: to create a missing image write --rbd-create-size"}},
		{[]string{"--backend", "rbd", "--rbd-pool", "gw", "--rbd-image", "v", "--path", "/srv/v.img"},
			[]string{"--path /srv/v.img: rbd namespaces have no backing file", "; remove --path, and write --rbd-pool rbd --rbd-image vol1"}},
		{[]string{"--backend", "memory", "--size", "1MiB", "--rbd-user", "gonvmf"},
			[]string{"--rbd-*: rbd describes the image of an rbd namespace, not of a memory one; remove the --rbd-* flags, or set --backend rbd"}},
		{[]string{"--backend", "block", "--path", "/dev/null", "--size", "1GiB"},
			[]string{"--size 1GiB: block namespaces take their size from the device; remove --size"}},
		{[]string{"--backend", "file", "--size", "1GiB"},
			[]string{"--path: missing; file namespaces need the path of their backing file, e.g. --path /var/lib/gonvmf/disk0.img"}},
		{[]string{"--backend", "block"},
			[]string{"--path: missing; block namespaces need the path of their backing device, e.g. --path /dev/nvme0n1"}},
		{[]string{"--backend", "null"},
			[]string{"--size: missing; null namespaces need a capacity, e.g. --size 10GiB"}},
		{[]string{"--backend", "memory"},
			[]string{"--size: missing; memory namespaces need a capacity, e.g. --size 10GiB"}},
		{[]string{"--backend", "null", "--size", "1GiB", "--path", "/srv/x.img"},
			[]string{"--path /srv/x.img: null namespaces have no backing file; remove --path, or use --backend file"}},
		{[]string{"--backend", "memory", "--size", "2TiB"},
			[]string{"--size 2TiB: ", "a memory namespace may have; use a smaller size, or --backend null for benchmarks that need no data"}},
		{[]string{"--backend", "rbd", "--rbd-image", "v"},
			[]string{"--rbd-pool: missing; name the pool, e.g. --rbd-pool rbd"}},
	} {
		out := ctl(2, append([]string{"--nsid", "4"}, c.args...)...)
		contains("ns add "+strings.Join(c.args, " "), out, append([]string{"gonvmf: "}, c.want...)...)
	}
	mu.Lock()
	if len(opened) != 1 {
		t.Errorf("refused flags opened backends: %+v", opened[1:])
	}
	mu.Unlock()
	if n := len(s.Config().Subsystems[0].Namespaces); n != 2 {
		t.Errorf("%d namespaces after the refused ns adds, want 2", n)
	}
}
