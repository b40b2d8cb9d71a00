package target_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
)

// TestNewResolvesACopy: New leaves the caller's configuration as it was and runs a resolved
// copy, which Config returns and which reads back through conf.Parse unchanged.
func TestNewResolvesACopy(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Transport = conf.Transport{}
	before := cfg.Clone()
	e := newEnv(t, cfg)
	if !reflect.DeepEqual(cfg, before) {
		t.Fatalf("New changed its argument:\n%+v\nwas\n%+v", cfg, before)
	}
	rc := e.tgt.Config()
	ns := rc.Subsystems[0].Namespaces[0]
	if rc.Transport.QueueDepth != conf.DefaultQueueDepth || rc.Transport.BufferPoolSize == 0 || rc.Transport.InCapsuleDataSize != 0 ||
		rc.Listeners[0].Port != conf.DefaultPort || ns.LBASize != conf.DefaultLBASize || ns.UUID != conf.DeriveUUID(subNQN, 1) {
		t.Errorf("running configuration is not resolved:\n%s", rc)
	}
	back, err := conf.Parse([]byte(rc.String()), "")
	if err != nil {
		t.Fatalf("the running configuration does not parse: %v\n%s", err, rc)
	}
	if back.String() != rc.String() {
		t.Errorf("the running configuration reads back as\n%s\nnot\n%s", back, rc)
	}
	// Config is a copy: changing it changes nothing.
	rc.Subsystems[0].Namespaces = nil
	if n := len(e.tgt.Config().Subsystems[0].Namespaces); n != 1 {
		t.Errorf("changing Config's result changed the target's: %d namespaces", n)
	}
}

// TestRuntimeChangesAreValidated: changes at run time are checked by the conf package as
// a configuration file would be, change nothing when they fail, and show in Config when
// they succeed.
func TestRuntimeChangesAreValidated(t *testing.T) {
	dir := t.TempDir()
	file := conf.Namespace{NSID: 2, Backend: conf.BackendFile, Path: filepath.Join(dir, "a.img"), Size: 1 << 20}
	e := newEnv(t, baseConfig(memNS(1, 1<<20), file))
	nsids := func(nqn string) []uint32 {
		c := e.tgt.Config()
		for _, s := range c.Subsystems {
			if s.NQN == nqn {
				var ids []uint32
				for _, ns := range s.Namespaces {
					ids = append(ids, ns.NSID)
				}
				return ids
			}
		}
		return nil
	}
	unchanged := e.tgt.Config().String()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"duplicate uuid", e.tgt.AddNamespace(subNQN, conf.Namespace{NSID: 3, Backend: conf.BackendNull, Size: 1 << 20,
			UUID: conf.DeriveUUID(subNQN, 1)}), "uuid " + conf.FormatUUID(conf.DeriveUUID(subNQN, 1)) + " is also the uuid of subsystems[0].namespaces[0]"},
		{"shared writable file", e.tgt.AddNamespace(subNQN, conf.Namespace{NSID: 3, Backend: conf.BackendFile, Path: file.Path}),
			"is already the backing of subsystems[0].namespaces[1]"},
		{"bad lba size", e.tgt.AddNamespace(subNQN, conf.Namespace{NSID: 3, Backend: conf.BackendMemory, Size: 1 << 20, LBASize: 1000}),
			"subsystems[0].namespaces[2].lba_size: 1000 is not a supported LBA size"},
		{"existing nsid", e.tgt.AddNamespace(subNQN, memNS(1, 1<<20)), "namespace already exists"},
		{"bad host", e.tgt.SetAllowedHosts(subNQN, false, []string{"host\x01"}), `"host\x01" is not a valid host NQN`},
		{"bad subsystem", e.tgt.AddSubsystem(conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendNull}}}), "subsystems[1].namespaces[0].size: missing"},
		// Valid as configuration, but the backend cannot be opened: nothing of it stays.
		{"unopenable namespace", e.tgt.AddSubsystem(conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true,
			Namespaces: []conf.Namespace{memNS(1, 1<<20), {NSID: 2, Backend: conf.BackendFile, Path: filepath.Join(dir, "no", "such.img")}}}), "such.img"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, c.err, c.want)
		}
		if got := e.tgt.Config().String(); got != unchanged {
			t.Errorf("%s: the failed change changed the configuration:\n%s", c.name, got)
		}
	}
	if err := e.tgt.RemoveNamespace(subNQN, 9); !errors.Is(err, target.ErrNoSuchNamespace) {
		t.Errorf("removing a missing namespace: %v", err)
	}
	if err := e.tgt.AddNamespace("nqn.2024-01.io.gonvmf:nope", memNS(1, 1<<20)); !errors.Is(err, target.ErrNoSuchSubsystem) {
		t.Errorf("adding to a missing subsystem: %v", err)
	}

	// Successful changes show in Config, resolved.
	if err := e.tgt.AddNamespace(subNQN, memNS(3, 1<<20)); err != nil {
		t.Fatal(err)
	}
	rc := e.tgt.Config()
	if ns := rc.Subsystems[0].Namespaces[2]; ns.NSID != 3 || ns.LBASize != conf.DefaultLBASize || ns.UUID != conf.DeriveUUID(subNQN, 3) {
		t.Errorf("added namespace: %+v", ns)
	}
	two := conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true, Namespaces: []conf.Namespace{memNS(1, 1<<20)}}
	if err := e.tgt.AddSubsystem(two); err != nil {
		t.Fatalf("adding the subsystem after the failed attempts: %v", err)
	}
	if err := e.tgt.AddSubsystem(two); !errors.Is(err, target.ErrSubsystemExists) {
		t.Errorf("adding it twice: %v", err)
	}
	if err := e.tgt.SetAllowedHosts(two.NQN, false, []string{hostNQN}); err != nil {
		t.Fatal(err)
	}
	if err := e.tgt.RemoveNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	if got := nsids(subNQN); !reflect.DeepEqual(got, []uint32{2, 3}) {
		t.Errorf("namespaces after removing 1: %v", got)
	}
	rc = e.tgt.Config()
	if s := rc.Subsystems[1]; s.NQN != two.NQN || s.AllowAnyHost || !reflect.DeepEqual(s.Hosts, []string{hostNQN}) || s.Serial != conf.DeriveSerial(two.NQN) {
		t.Errorf("second subsystem: %+v", s)
	}
	// Removing every subsystem is allowed at run time (a file needs one).
	for _, nqn := range []string{subNQN, two.NQN} {
		if err := e.tgt.RemoveSubsystem(nqn); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.tgt.Config().Subsystems); n != 0 {
		t.Errorf("%d subsystems left", n)
	}
}

// TestMetricsPerNamespace: MetricsPerNamespace, which the metrics endpoint reads at each
// scrape, is the running configuration's metrics.per_namespace — resolved at start, then
// each SetMetricsPerNamespace that passes validation, and unchanged by one that does not.
func TestMetricsPerNamespace(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Metrics.Address = "127.0.0.1:9469"
	e := newEnv(t, cfg)
	check := func(when, want string) {
		t.Helper()
		if got := e.tgt.MetricsPerNamespace(); got != want {
			t.Errorf("%s: MetricsPerNamespace %q, want %q", when, got, want)
		}
		if got := e.tgt.Config().Metrics.PerNamespace; got != want {
			t.Errorf("%s: Config's per_namespace %q, want %q", when, got, want)
		}
	}
	check("at start", conf.MetricsFull)
	if err := e.tgt.SetMetricsPerNamespace(conf.MetricsCounters); err != nil {
		t.Fatal(err)
	}
	check("set to counters", conf.MetricsCounters)
	if err := e.tgt.SetMetricsPerNamespace("histograms"); err == nil || !strings.Contains(err.Error(), "metrics.per_namespace") {
		t.Errorf("SetMetricsPerNamespace(%q): %v, want the validation error naming metrics.per_namespace", "histograms", err)
	}
	check("after a refused level", conf.MetricsCounters)
}
