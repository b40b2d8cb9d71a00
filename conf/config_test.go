package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// exported returns a copy of c without the unexported bookkeeping and the File and
// Warnings fields, for comparing configurations.
func exported(c *Config) Config {
	x := *c
	x.src, x.File, x.Warnings = nil, "", nil
	return x
}

func examples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	return files
}

// TestExamples loads every example: each must be valid, draw no warnings, and print as
// YAML that parses back to the same configuration.
func TestExamples(t *testing.T) {
	for _, f := range examples(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.File != f {
				t.Errorf("File = %q, want %q", c.File, f)
			}
			for _, w := range c.Warnings {
				t.Errorf("warning: %v", w)
			}
			text := c.String()
			again, err := Parse([]byte(text), "resolved.yaml")
			if err != nil {
				t.Fatalf("the resolved config does not parse: %v\n%s", err, numbered(text))
			}
			if !reflect.DeepEqual(exported(c), exported(again)) {
				t.Errorf("round trip changed the config:\n%s\nbecame\n%s", text, again)
			}
		})
	}
}

// TestAnnotatedExampleShowsDefaults keeps the annotated example (the documentation of the
// defaults) in step with the code.
func TestAnnotatedExampleShowsDefaults(t *testing.T) {
	c, err := Load("examples/annotated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := mustParse(t, minimal)
	if c.Control != d.Control {
		t.Errorf("annotated.yaml control %+v differs from the defaults %+v", c.Control, d.Control)
	}
	if c.Metrics != d.Metrics {
		t.Errorf("annotated.yaml metrics %+v differs from the defaults %+v", c.Metrics, d.Metrics)
	}
	if c.Transport != d.Transport {
		t.Errorf("annotated.yaml transport\n%+v\ndiffers from the defaults\n%+v", c.Transport, d.Transport)
	}
	if c.Limits != d.Limits {
		t.Errorf("annotated.yaml limits\n%+v\ndiffer from the defaults\n%+v", c.Limits, d.Limits)
	}
	if c.AutoReopen != d.AutoReopen {
		t.Errorf("annotated.yaml auto_reopen %+v differs from the defaults %+v", c.AutoReopen, d.AutoReopen)
	}
	l, dl := c.Listeners[0], d.Listeners[0]
	l.Address, dl.Address = "", ""
	if l != dl {
		t.Errorf("annotated.yaml listener %+v differs from the defaults %+v", l, dl)
	}
	ns, dns := c.Subsystems[0].Namespaces[0], d.Subsystems[0].Namespaces[0]
	if ns.LBASize != dns.LBASize || ns.ReadOnly != dns.ReadOnly || c.Subsystems[0].Model != d.Subsystems[0].Model {
		t.Errorf("annotated.yaml namespace defaults differ: %+v vs %+v", ns, dns)
	}
}

const minimal = `
listeners:
  - address: 10.99.0.1
subsystems:
  - nqn: nqn.2024-01.com.example:min
    allow_any_host: true
    namespaces:
      - nsid: 7
        backend: null
        size: 1GiB
`

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	c, err := Parse([]byte(text), "test.yaml")
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, numbered(text))
	}
	return c
}

func absPath(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestResolvedPathsStay: the paths a configuration names relative to its file are
// resolved to absolute ones, so that resolving again — what the target does with its
// copy, and with every change at run time — leaves them as they are. With the file named
// by a relative path with a directory (gonvmf serve -c conf/t.yaml) they used to be
// prefixed once more each time: conf/conf/t.state.json, conf/conf/disk.img.
func TestResolvedPathsStay(t *testing.T) {
	text := strings.Replace(minimal, "backend: null", "backend: file\n        path: disk.img", 1)
	c, err := Parse([]byte(text), filepath.Join("sub", "t.yaml"))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, numbered(text))
	}
	wantState, wantPath := absPath(t, filepath.Join("sub", "t.state.json")), absPath(t, filepath.Join("sub", "disk.img"))
	if c.StateFile != wantState || c.Subsystems[0].Namespaces[0].Path != wantPath {
		t.Fatalf("resolved state_file %q, path %q; want %q, %q", c.StateFile, c.Subsystems[0].Namespaces[0].Path, wantState, wantPath)
	}
	for i := range 2 {
		n := c.Clone()
		if err := n.Resolve(); err != nil {
			t.Fatal(err)
		}
		if n.StateFile != wantState || n.Subsystems[0].Namespaces[0].Path != wantPath {
			t.Fatalf("resolved again (%d): state_file %q, path %q; want %q, %q", i+1, n.StateFile, n.Subsystems[0].Namespaces[0].Path, wantState, wantPath)
		}
		c = n
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, minimal)
	want := Config{
		Listeners: []Listener{{Transport: "rdma", Address: "10.99.0.1", Port: 4420}},
		Subsystems: []Subsystem{{
			NQN:          "nqn.2024-01.com.example:min",
			Serial:       DeriveSerial("nqn.2024-01.com.example:min"),
			Model:        "gonvmf",
			CNTLIDMin:    1,
			CNTLIDMax:    0xFFEF,
			AllowAnyHost: true,
			Namespaces: []Namespace{{
				NSID: 7, Backend: "null", Size: GiB, LBASize: 512, ANAGroup: 1,
				UUID:  DeriveUUID("nqn.2024-01.com.example:min", 7),
				NGUID: DeriveNGUID("nqn.2024-01.com.example:min", 7),
				EUI64: DeriveEUI64("nqn.2024-01.com.example:min", 7),
			}},
		}},
		Transport: Transport{
			QueueDepth:         128,
			InCapsuleDataSize:  8192,
			MaxIOSize:          128 << 10,
			BufferPoolSize:     16 * MiB, // 128 × 128 KiB
			PollGroups:         0,
			SharedReceiveQueue: 256,
			BusyPoll:           false,
			MaxIOQueues:        16,
			KeepAliveTimeout:   120 * time.Second,
		},
		Control:   Control{Socket: DefaultControlSocket},
		StateFile: absPath(t, "test.state.json"), // next to the file (mustParse names it test.yaml), absolute
		Limits: Limits{
			MaxQueues:             1024,
			MaxQueuesPerAddress:   256,
			MaxControllersPerHost: 64,
			MaxQueuesPerHost:      256,
			ConnectTimeout:        10 * time.Second,
			MinKeepAliveTimeout:   time.Second,
			MaxKeepAliveTimeout:   5 * time.Minute,
			ResponseTimeout:       10 * time.Second,
			MaxQueueDataInFlight:  128 << 10,
		},
		AutoReopen: AutoReopen{Attempts: 10, Backoff: time.Second, MaxBackoff: 30 * time.Second, Settle: time.Minute},
	}
	if got := exported(c); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

func TestBufferPoolDefaultIsCapped(t *testing.T) {
	c := mustParse(t, minimal+"transport:\n  queue_depth: 1024\n  max_io_size: 1MiB\n")
	if c.Transport.BufferPoolSize != GiB {
		t.Errorf("buffer pool = %v, want the 1GiB cap", c.Transport.BufferPoolSize)
	}
}

func TestSmallBufferPoolWarns(t *testing.T) {
	c := mustParse(t, minimal+"transport:\n  max_io_size: 1MiB\n  buffer_pool_size: 16MiB\n")
	if len(c.Warnings) != 1 || c.Warnings[0].Field != "transport.buffer_pool_size" || c.Warnings[0].Line != 13 ||
		!strings.Contains(c.Warnings[0].Error(), "less than one full queue") {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

func TestEmptySubsystemWarns(t *testing.T) {
	c := mustParse(t, "listeners: [{address: '::'}]\nsubsystems:\n  - nqn: nqn.2024-01.com.example:empty\n    allow_any_host: true\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0].Error(), "test.yaml:3: subsystems[0].namespaces: the subsystem has no namespaces") {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

// TestNonStandardNQNWarns: names outside the NVMe NQN form, which the Linux host and
// target accept (blktests' default subsystem, tutorials' "testnqn"), are accepted with a
// warning that names the field and says they are not portable; the fatal problems stay
// errors (TestBadConfigs: too long, control characters, the discovery NQN).
func TestNonStandardNQNWarns(t *testing.T) {
	for _, nqn := range []string{"blktests-subsystem-1", "testnqn", "iqn.2024-01.com.example:t", "nqn.2024-13.com.example:t",
		"nqn.2024-01.com.exa_mple:t", "nqn.2014-08.org.nvmexpress:uuid:1234"} {
		c := mustParse(t, "listeners: [{address: '::'}]\nsubsystems:\n  - nqn: \""+nqn+"\"\n    hosts: [testhost]\n    namespaces: [{nsid: 1, backend: null, size: 1GiB}]\n")
		if c.Subsystems[0].NQN != nqn {
			t.Fatalf("NQN %q became %q", nqn, c.Subsystems[0].NQN)
		}
		if len(c.Warnings) != 2 {
			t.Fatalf("%s: %d warnings, want 2 (subsystem and host NQN): %v", nqn, len(c.Warnings), c.Warnings)
		}
		if w := c.Warnings[0].Error(); !strings.Contains(w, "test.yaml:3: subsystems[0].nqn:") || !strings.Contains(w, "not portable") ||
			!strings.Contains(w, "SPDK") || !strings.Contains(w, "nqn.yyyy-mm.<reverse domain>:<name>") {
			t.Errorf("%s: warning %q", nqn, w)
		}
		if w := c.Warnings[1].Error(); !strings.Contains(w, "test.yaml:4: subsystems[0].hosts[0]:") || !strings.Contains(w, "not portable") {
			t.Errorf("host testhost: warning %q", w)
		}
	}
}

// TestClone: a clone is equal to its original and shares no memory with it; it resolves
// again to the same configuration; errors about it name fields without the original
// file's lines.
func TestClone(t *testing.T) {
	c := mustParse(t, strings.Replace(minimal, "allow_any_host: true", "hosts: [nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555]", 1))
	n := c.Clone()
	if !reflect.DeepEqual(exported(c), exported(n)) || n.File != c.File {
		t.Fatalf("clone differs:\n%s\n%s", c, n)
	}
	n.Listeners[0].Port = 9
	n.Subsystems[0].Hosts[0] = "x"
	n.Subsystems[0].Namespaces[0].NSID = 77
	n.Subsystems = append(n.Subsystems, Subsystem{})
	if c.Listeners[0].Port == 9 || c.Subsystems[0].Hosts[0] == "x" || c.Subsystems[0].Namespaces[0].NSID == 77 || len(c.Subsystems) != 1 {
		t.Errorf("changing the clone changed the original: %s", c)
	}
	m := c.Clone()
	if err := m.Resolve(); err != nil || !reflect.DeepEqual(exported(c), exported(m)) {
		t.Errorf("the clone resolves to something else (%v):\n%s", err, m)
	}
	m.Subsystems[0].Namespaces[0].LBASize = 1000
	if err := m.Resolve(); err == nil || !strings.HasPrefix(err.Error(), "test.yaml: subsystems[0].namespaces[0].lba_size: 1000") {
		t.Errorf("error about a clone: %v", err)
	}
}

func TestInCapsuleDataDefault(t *testing.T) {
	for _, text := range []string{minimal, minimal + "transport:\n  in_capsule_data_size:\n", minimal + "transport:\n  queue_depth: 64\n"} {
		if c := mustParse(t, text); c.Transport.InCapsuleDataSize != DefaultInCapsuleDataSize {
			t.Errorf("%q: in-capsule data size %d, want the default", text, c.Transport.InCapsuleDataSize)
		}
	}
}

func TestSharedReceiveQueueDefaultAndOff(t *testing.T) {
	if c := mustParse(t, minimal); c.Transport.SharedReceiveQueue != DefaultSharedReceiveQueue {
		t.Errorf("a file without shared_receive_queue: %d, want the default %d", c.Transport.SharedReceiveQueue, DefaultSharedReceiveQueue)
	}
	c := mustParse(t, minimal+"transport:\n  shared_receive_queue: 0\n")
	if c.Transport.SharedReceiveQueue != 0 {
		t.Fatalf("shared_receive_queue: 0 resolved to %d", c.Transport.SharedReceiveQueue)
	}
	if err := c.Resolve(); err != nil || c.Transport.SharedReceiveQueue != 0 {
		t.Errorf("Resolve again: %v, shared receive queue %d", err, c.Transport.SharedReceiveQueue)
	}
}

func TestInCapsuleDataOff(t *testing.T) {
	c := mustParse(t, minimal+"transport:\n  in_capsule_data_size: 0\n")
	if c.Transport.InCapsuleDataSize != 0 {
		t.Fatalf("in_capsule_data_size: 0 resolved to %d", c.Transport.InCapsuleDataSize)
	}
	if err := c.Resolve(); err != nil || c.Transport.InCapsuleDataSize != 0 {
		t.Errorf("Resolve again: %v, in-capsule %d", err, c.Transport.InCapsuleDataSize)
	}
}

func TestNullValuesTakeDefaults(t *testing.T) {
	c := mustParse(t, `
listeners:
  - address: 10.99.0.1
    port:
subsystems:
  - nqn: nqn.2024-01.com.example:n
    model: ~
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: null
        size: 4KiB
        lba_size:
transport:
`)
	if c.Listeners[0].Port != 4420 || c.Subsystems[0].Model != DefaultModel || c.Subsystems[0].Namespaces[0].LBASize != 512 {
		t.Errorf("empty values did not take the defaults: %+v", c)
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	c := mustParse(t, `
listeners:
  - &l {address: 10.99.0.1}
  - <<: *l
    port: 4421
subsystems:
  - nqn: nqn.2024-01.com.example:m
    allow_any_host: true
    namespaces:
      - &ns
        nsid: 1
        backend: memory
        size: 8MiB
        lba_size: 4096
      - <<: *ns
        nsid: 2
        size: 16MiB
`)
	l := c.Listeners
	if l[1].Address != "10.99.0.1" || l[1].Port != 4421 || l[0].Port != 4420 {
		t.Errorf("listeners: %+v", l)
	}
	ns := c.Subsystems[0].Namespaces
	if ns[1].NSID != 2 || ns[1].Size != 16*MiB || ns[1].LBASize != 4096 || ns[1].Backend != "memory" {
		t.Errorf("merged namespace: %+v", ns[1])
	}
	if ns[0].UUID == ns[1].UUID {
		t.Errorf("merged namespaces share a UUID")
	}
}

func TestHostList(t *testing.T) {
	c := mustParse(t, `
listeners: [{address: "fd00::1", port: 4420}]
subsystems:
  - nqn: nqn.2014-08.org.nvmexpress:uuid:0f4e2a0e-3b7c-4b8e-9d6a-1c2b3a4d5e6f
    hosts:
      - nqn.2014-08.org.nvmexpress:uuid:2b0d4a4e-3c1f-4f60-9f0f-6a9d2a1c8e11
      - nqn.2024-01.com.example:host:a
    namespaces: [{nsid: 1, backend: null, size: 1MiB}]
`)
	if s := c.Subsystems[0]; s.AllowAnyHost || len(s.Hosts) != 2 {
		t.Errorf("hosts: %+v", s)
	}
}

func TestNumericStringsKeepTheirText(t *testing.T) {
	c := mustParse(t, strings.Replace(minimal, "    allow_any_host: true\n", "    allow_any_host: true\n    serial: 000123\n    model: 1e3\n", 1))
	if s := c.Subsystems[0]; s.Serial != "000123" || s.Model != "1e3" {
		t.Errorf("serial %q model %q", s.Serial, s.Model)
	}
}

func TestRelativePathFollowsTheConfigFile(t *testing.T) {
	text := "listeners: [{address: 10.99.0.1}]\nsubsystems:\n  - nqn: nqn.2024-01.com.example:f\n    allow_any_host: true\n    namespaces:\n      - {nsid: 1, backend: file, path: disks/a.img, size: 1MiB}\n      - {nsid: 2, backend: file, path: /abs/b.img, size: 1MiB}\n"
	c, err := Parse([]byte(text), "/etc/gonvmf/target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Subsystems[0].Namespaces[0].Path; p != "/etc/gonvmf/disks/a.img" {
		t.Errorf("relative path resolved to %q", p)
	}
	if p := c.Subsystems[0].Namespaces[1].Path; p != "/abs/b.img" {
		t.Errorf("absolute path became %q", p)
	}
}

func TestRBDNamespace(t *testing.T) {
	text := sub(`      - nsid: 1
        backend: rbd
        rbd:
          pool: rbd
          rados_namespace: tenant1
          image: vol1
          ceph_conf: ceph/ceph.conf
          user: gonvmf
          keyring: /etc/ceph/ceph.client.gonvmf.keyring
          create_size: 10GiB
      - {nsid: 2, backend: rbd, read_only: true, rbd: {pool: rbd, image: gold}}
      - {nsid: 3, backend: rbd, read_only: true, rbd: {pool: rbd, image: gold}}
`)
	c, err := Parse([]byte(text), "/etc/gonvmf/target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := RBD{Pool: "rbd", RadosNamespace: "tenant1", Image: "vol1", CephConf: "/etc/gonvmf/ceph/ceph.conf",
		User: "gonvmf", Keyring: "/etc/ceph/ceph.client.gonvmf.keyring", CreateSize: 10 * GiB}
	if got := c.Subsystems[0].Namespaces[0].RBD; got != want {
		t.Errorf("rbd = %+v\nwant %+v", got, want)
	}
	if n := c.Subsystems[0].Namespaces[0].RBD.Name(); n != "rbd/tenant1/vol1" {
		t.Errorf("Name = %q", n)
	}
	if c.Subsystems[0].Namespaces[0].Size != 0 {
		t.Errorf("size = %v, want 0 (the image's)", c.Subsystems[0].Namespaces[0].Size)
	}
	out := c.String()
	for _, w := range []string{"rbd:\n", "pool: rbd\n", "rados_namespace: tenant1\n", "image: vol1\n", "ceph_conf: /etc/gonvmf/ceph/ceph.conf\n",
		"user: gonvmf\n", "create_size: 10GiB", "# size: that of the image", "# user: admin", "# keyring: as ceph.conf says"} {
		if !strings.Contains(out, w) {
			t.Errorf("String() lacks %q:\n%s", w, out)
		}
	}
	again, err := Parse([]byte(out), "resolved.yaml")
	if err != nil {
		t.Fatalf("the resolved config does not parse: %v\n%s", err, numbered(out))
	}
	if !reflect.DeepEqual(exported(c), exported(again)) {
		t.Errorf("round trip changed the config:\n%s\nbecame\n%s", out, again)
	}
}

func TestReadOnlyNamespacesMayShareAFile(t *testing.T) {
	mustParse(t, sub("      - {nsid: 1, backend: file, path: /srv/a.img, read_only: true}\n      - {nsid: 2, backend: file, path: /srv/a.img, read_only: true}\n"))
}

func TestExplicitIdentifiers(t *testing.T) {
	c := mustParse(t, sub(`      - nsid: 1
        backend: null
        size: 1GiB
        uuid: 6F1C2C3E-8A5B-4D2E-9A43-0B1F2E3D4C5B
        nguid: 6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4c5b
        eui64: "02:a0:b1:c2:d3:e4:f5:01"
`))
	ns := c.Subsystems[0].Namespaces[0]
	if FormatUUID(ns.UUID) != "6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4c5b" || FormatNGUID(ns.NGUID) != "6f1c2c3e8a5b4d2e9a430b1f2e3d4c5b" ||
		FormatEUI64(ns.EUI64) != "02a0b1c2d3e4f501" {
		t.Errorf("identifiers: %s %s %s", FormatUUID(ns.UUID), FormatNGUID(ns.NGUID), FormatEUI64(ns.EUI64))
	}
}

// TestResolveInCode covers Configs built in Go rather than read from YAML.
func TestResolveInCode(t *testing.T) {
	c := &Config{
		Listeners: []Listener{{Address: "10.99.0.1"}},
		Subsystems: []Subsystem{{
			NQN: "nqn.2024-01.com.example:code", AllowAnyHost: true,
			Namespaces: []Namespace{{NSID: 1, Backend: BackendMemory, Size: 4 * MiB}},
		}},
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if c.Listeners[0].Port != DefaultPort || c.Listeners[0].Transport != "rdma" || c.Transport.QueueDepth != DefaultQueueDepth ||
		c.Transport.InCapsuleDataSize != 0 || c.Subsystems[0].Namespaces[0].LBASize != 512 ||
		c.Subsystems[0].Namespaces[0].UUID != DeriveUUID("nqn.2024-01.com.example:code", 1) {
		t.Errorf("resolved: %+v", c)
	}
	before := exported(c)
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, exported(c)) {
		t.Errorf("Resolve is not idempotent")
	}

	c.Transport.InCapsuleDataSize = DefaultInCapsuleDataSize
	if err := c.Resolve(); err != nil || c.Transport.InCapsuleDataSize != DefaultInCapsuleDataSize {
		t.Errorf("in-capsule data set in code: %v, %d", err, c.Transport.InCapsuleDataSize)
	}
	c.Transport.InCapsuleDataSize = -1
	if err := c.Resolve(); err == nil || !strings.Contains(err.Error(), "transport.in_capsule_data_size: -1 is not a supported in-capsule data size") {
		t.Errorf("negative in-capsule data size: %v", err)
	}

	bad := &Config{Subsystems: []Subsystem{{NQN: "nqn.2024-01.com.example:code", AllowAnyHost: true,
		Namespaces: []Namespace{{NSID: 1, Backend: BackendNull, Size: 4 * MiB, LBASize: 520}}}}}
	err := bad.Resolve()
	if err == nil || !strings.Contains(err.Error(), "subsystems[0].namespaces[0].lba_size: 520 is not a supported LBA size; use 512 or 4096") {
		t.Errorf("Resolve of a bad in-code config: %v", err)
	}
}

// TestNothingServedIsValid: a configuration with no subsystems or no listeners is valid
// (the control API adds them at run time, and removing the last one must leave a
// configuration that saves to a file that loads), and round-trips through its YAML.
func TestNothingServedIsValid(t *testing.T) {
	for name, text := range map[string]string{
		"no subsystems": "listeners: [{address: 10.99.0.1}]\nsubsystems: []\n",
		"no listeners":  "subsystems:\n  - nqn: nqn.2024-01.com.example:a\n    allow_any_host: true\n",
		"neither":       "listeners: []\nsubsystems: []\n",
	} {
		c, err := Parse([]byte(text), "t.yaml")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		again, err := Parse([]byte(c.String()), "saved.yaml")
		if err != nil {
			t.Errorf("%s: the saved form does not load: %v\n%s", name, err, c.String())
			continue
		}
		if len(again.Subsystems) != len(c.Subsystems) || len(again.Listeners) != len(c.Listeners) {
			t.Errorf("%s: saved and loaded: %d subsystems, %d listeners; want %d, %d", name,
				len(again.Subsystems), len(again.Listeners), len(c.Subsystems), len(c.Listeners))
		}
	}
}

// TestYAMLTagsMatchDecoder keeps the documented yaml tags and the decoder's keys in step.
func TestYAMLTagsMatchDecoder(t *testing.T) {
	for _, tc := range []struct {
		v    any
		keys []string
	}{
		{Config{}, configKeys}, {Listener{}, listenerKeys}, {Subsystem{}, subsystemKeys},
		{Namespace{}, namespaceKeys}, {RBD{}, rbdKeys}, {Transport{}, transportKeys}, {Host{}, hostKeys}, {Control{}, controlKeys}, {Metrics{}, metricsKeys}, {Limits{}, limitsKeys},
		{AutoReopen{}, autoReopenKeys},
	} {
		typ := reflect.TypeOf(tc.v)
		var tags []string
		for i := range typ.NumField() {
			if tag := typ.Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
				tags = append(tags, tag)
			}
		}
		if !reflect.DeepEqual(tags, tc.keys) {
			t.Errorf("%s: yaml tags %v, decoder keys %v", typ.Name(), tags, tc.keys)
		}
	}
}

// TestReadmeListsEveryField keeps conf/README.md (the configuration reference) complete.
func TestReadmeListsEveryField(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][]string{configKeys, listenerKeys, subsystemKeys, namespaceKeys, rbdKeys, transportKeys, hostKeys, controlKeys, metricsKeys, limitsKeys, autoReopenKeys} {
		for _, k := range keys {
			if !strings.Contains(string(b), "`"+k+"`") {
				t.Errorf("README.md does not document `%s`", k)
			}
		}
	}
}

func TestFieldErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    FieldError
		want string
	}{
		{FieldError{File: "conf/example.yaml", Line: 12, Field: "subsystems[0].namespaces[1].lba_size", Value: "1024",
			Msg: "1024 is not a supported LBA size", Fix: "use 512 or 4096"},
			"conf/example.yaml:12: subsystems[0].namespaces[1].lba_size: 1024 is not a supported LBA size; use 512 or 4096"},
		{FieldError{Field: "listeners", Msg: "no listeners are configured", Fix: "add one"}, "listeners: no listeners are configured; add one"},
		{FieldError{File: "x.yaml", Msg: "the file is empty"}, "x.yaml: the file is empty"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tc := range badConfigs {
		f.Add([]byte(tc.yaml))
	}
	files, _ := filepath.Glob("examples/*.yaml")
	for _, file := range files {
		b, _ := os.ReadFile(file)
		f.Add(b)
	}
	for _, tc := range hostSpellings {
		f.Add([]byte(tc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			for _, e := range Errors(err) {
				if e.Msg == "" || e.File != "fuzz.yaml" {
					t.Fatalf("malformed error %#v", e)
				}
			}
			return
		}
		text := c.String()
		again, err := Parse([]byte(text), "fuzz.yaml")
		if err != nil {
			t.Fatalf("resolved config does not parse: %v\n%s", err, text)
		}
		if !reflect.DeepEqual(exported(c), exported(again)) {
			t.Fatalf("round trip changed the config:\ninput %q\nfirst  %#v\nsecond %#v\n%s", data, exported(c), exported(again), text)
		}
	})
}

// hostSpellings are host entries whose hash and group lists are defaulted or spelled in
// another accepted form.
var hostSpellings = []string{
	sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n",
	sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n    dhchap_hashes: [hmac(sha256), sha512]\n    dhchap_dhgroups: [null]\n",
}

// TestHostCanonical: a resolved host entry lists its hash functions and DH groups as
// String prints them (defaults filled in, hmac() dropped), so the printed configuration
// parses back to the same Config.
func TestHostCanonical(t *testing.T) {
	c := mustParse(t, hostSpellings[0])
	if h := c.Hosts[0]; !reflect.DeepEqual(h.DHCHAPHashes, []string{"sha512", "sha384", "sha256"}) ||
		!reflect.DeepEqual(h.DHCHAPDHGroups, []string{"ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144", "ffdhe8192", "null"}) {
		t.Errorf("defaults not spelled out: %+v", h)
	}
	c = mustParse(t, hostSpellings[1])
	if h := c.Hosts[0]; !reflect.DeepEqual(h.DHCHAPHashes, []string{"sha256", "sha512"}) || !reflect.DeepEqual(h.DHCHAPDHGroups, []string{"null"}) {
		t.Errorf("spellings not canonical: %+v", h)
	}
	for _, text := range hostSpellings {
		c := mustParse(t, text)
		again := mustParse(t, c.String())
		if !reflect.DeepEqual(exported(c), exported(again)) {
			t.Errorf("round trip changed the config:\n%#v\n%#v", exported(c), exported(again))
		}
		if err := again.Resolve(); err != nil || !reflect.DeepEqual(exported(c), exported(again)) {
			t.Errorf("Resolve not idempotent: %v", err)
		}
	}
}

// TestMergeBomb makes sure nested merge keys cost linear time: 12 levels that each merge the
// level below ten times would be 10^12 expansions without the visited set.
func TestMergeBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("x0: &m0 {nsid: 1}\n")
	for i := 1; i <= 12; i++ {
		refs := strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10)
		fmt.Fprintf(&b, "x%d: &m%d {<<: [%s]}\n", i, i, strings.TrimSuffix(refs, ", "))
	}
	b.WriteString("listeners: [{address: 10.99.0.1}]\nsubsystems:\n  - nqn: nqn.2024-01.com.example:bomb\n    allow_any_host: true\n    namespaces:\n      - {<<: *m12, backend: null, size: 1MiB}\n")
	start := time.Now()
	_, err := Parse([]byte(b.String()), "bomb.yaml")
	if err == nil || !strings.Contains(err.Error(), `unknown field "x0"`) {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Parse took %v", d)
	}
}

// TestControl: the control section's defaults, relative paths, the TCP listener's mutual
// TLS, and the round trip through String.
func TestControl(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "target.yaml")
	c, err := Parse([]byte(minimal+"control:\n  socket: run/ctl.sock\n  tcp: 127.0.0.1:4421\n  tls_cert: pki/server.pem\n  tls_key: pki/server.key\n  tls_client_ca: /etc/gonvmf/clients.pem\n"), file)
	if err != nil {
		t.Fatal(err)
	}
	want := Control{Socket: filepath.Join(dir, "run/ctl.sock"), TCP: "127.0.0.1:4421", TLSCert: filepath.Join(dir, "pki/server.pem"),
		TLSKey: filepath.Join(dir, "pki/server.key"), TLSClientCA: "/etc/gonvmf/clients.pem"}
	if c.Control != want {
		t.Errorf("control %+v\nwant %+v", c.Control, want)
	}
	again, err := Parse([]byte(c.String()), "")
	if err != nil || again.Control != want {
		t.Errorf("round trip: %v %+v", err, again)
	}
	if c := mustParse(t, minimal); c.Control != (Control{Socket: DefaultControlSocket}) || !strings.Contains(c.String(), "control:\n  socket: /run/gonvmf/gonvmf.sock\n") {
		t.Errorf("default control %+v\n%s", c.Control, c.String())
	}
}

// TestMetrics: the metrics section is off by default, takes an address:port (or :port),
// and round-trips through String.
func TestMetrics(t *testing.T) {
	if c := mustParse(t, minimal); c.Metrics != (Metrics{}) || !strings.Contains(c.String(), "# metrics: off") {
		t.Errorf("default metrics %+v\n%s", c.Metrics, c.String())
	}
	for _, a := range []string{"127.0.0.1:9469", ":9469", "[::1]:9469", "[fe80::1%eth0]:9469"} {
		c, err := Parse([]byte(minimal+"metrics:\n  address: \""+a+"\"\n"), "")
		if err != nil {
			t.Errorf("%s: %v", a, err)
			continue
		}
		again, err := Parse([]byte(c.String()), "")
		if err != nil || c.Metrics.Address != a || again.Metrics != c.Metrics {
			t.Errorf("%s: %+v, round trip %v %+v\n%s", a, c.Metrics, err, again, c.String())
		}
	}
	p, err := Parse([]byte(minimal+"metrics:\n  address: 127.0.0.1:9469\n  profiling: true\n"), "")
	if err != nil || !p.Metrics.Profiling || !strings.Contains(p.String(), "/debug/pprof/") {
		t.Errorf("profiling: %v %+v\n%s", err, p.Metrics, p)
	} else if again, err := Parse([]byte(p.String()), ""); err != nil || again.Metrics != p.Metrics {
		t.Errorf("profiling round trip: %v %+v", err, again)
	}
	if p.Metrics.PerNamespace != MetricsFull {
		t.Errorf("per_namespace left out: %q, want %q", p.Metrics.PerNamespace, MetricsFull)
	}
	p, err = Parse([]byte(minimal+"metrics:\n  address: 127.0.0.1:9469\n  per_namespace: counters\n"), "")
	if err != nil || p.Metrics.PerNamespace != MetricsCounters || !strings.Contains(p.String(), "per_namespace: counters") {
		t.Errorf("per_namespace: %v %+v\n%s", err, p.Metrics, p)
	} else if again, err := Parse([]byte(p.String()), ""); err != nil || again.Metrics != p.Metrics {
		t.Errorf("per_namespace round trip: %v %+v", err, again)
	}
	if p := mustParse(t, minimal); p.Metrics != (Metrics{}) {
		t.Errorf("no metrics section: %+v, want none", p.Metrics)
	}
	c := mustParse(t, minimal)
	cl := c.Clone()
	cl.Metrics.Address = "127.0.0.1:1"
	if err := cl.Resolve(); err != nil || c.Metrics.Address != "" {
		t.Errorf("Clone: %v %+v", err, c.Metrics)
	}
}

func TestParseFragments(t *testing.T) {
	s, err := ParseSubsystem([]byte("nqn: nqn.2024-01.com.example:x\nhosts: [nqn.2024-01.com.example:h]\nnamespaces:\n  - {nsid: 2, backend: file, path: a.img, size: 1GiB}\n"), "sub.yaml")
	if err != nil || s.NQN != "nqn.2024-01.com.example:x" || len(s.Hosts) != 1 || len(s.Namespaces) != 1 || s.Namespaces[0].Size != GiB || s.Namespaces[0].Path != "a.img" {
		t.Errorf("ParseSubsystem: %+v %v", s, err)
	}
	_, err = ParseNamespace([]byte("nsid: 1\nbackend: null\nsize: 1GiB\nlbasize: 4096\n"), "ns.yaml")
	if err == nil || !strings.Contains(err.Error(), `ns.yaml:4: lbasize: unknown field "lbasize"; did you mean lba_size?`) {
		t.Errorf("ParseNamespace with an unknown key: %v", err)
	}
	if _, err := ParseNamespace(nil, "empty.yaml"); err == nil {
		t.Errorf("ParseNamespace of nothing succeeded")
	}
}

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ file, text, want string }{
		{filepath.Join(dir, "target.yaml"), minimal, filepath.Join(dir, "target.state.json")},
		{filepath.Join(dir, "target"), minimal, filepath.Join(dir, "target.state.json")},
		{filepath.Join(dir, "t.yaml"), minimal + "state_file: sub/../st.json\n", filepath.Join(dir, "st.json")},
		{filepath.Join(dir, "t.yaml"), minimal + "state_file: /var/lib/gonvmf/s.json\n", "/var/lib/gonvmf/s.json"},
		{"", minimal, ""},
		{filepath.Join(dir, "t.yaml"), minimal + "state_file: none\n", "none"},
	} {
		c, err := Parse([]byte(tc.text), tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if c.StateFile != tc.want {
			t.Errorf("%s: state_file %q, want %q", tc.file, c.StateFile, tc.want)
		}
		again, err := Parse([]byte(c.String()), tc.file)
		if none := c.StateFile == "" && again.StateFile == StateFileNone; err != nil || again.StateFile != c.StateFile && !none {
			t.Errorf("%s: String does not round-trip state_file: %v %q", tc.file, err, again.StateFile)
		}
	}
	c := mustParse(t, minimal+"state_file: "+filepath.Join(dir, "missing", "s.json")+"\n")
	if err := c.CheckSystem(); err == nil || !strings.Contains(err.Error(), "state_file") || !strings.Contains(err.Error(), "mkdir -p") {
		t.Errorf("missing directory: %v", err)
	}
	c = mustParse(t, minimal+"state_file: "+dir+"\n")
	if err := c.CheckSystem(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	c = mustParse(t, minimal+"state_file: "+filepath.Join(dir, "ok.json")+"\n")
	if err := c.CheckSystem(); err != nil {
		t.Errorf("writable directory: %v", err)
	}
	// The default next to a configuration in a missing (or read-only) directory is not checked.
	c, err := Parse([]byte(minimal), filepath.Join(dir, "missing", "t.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckSystem(); err != nil {
		t.Errorf("default state file: %v", err)
	}
}

const haConfig = `
listeners:
  - address: 10.99.0.1
    port: 4421
    ana_states:
      1: inaccessible
      0x2: non-optimized
      3: optimized
subsystems:
  - nqn: nqn.2024-01.com.example:ha
    cntlid_min: 0x8000
    cntlid_max: 0xFFEF
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: null, size: 1GiB}
      - {nsid: 2, backend: null, size: 1GiB, ana_group: 2}
      - {nsid: 3, backend: file, path: /srv/ha.img, ana_group: 3, shared: true}
`

// TestANAAndControllerIDs: ANA states, groups, shared backing and controller ID ranges
// are read, defaulted, printed and read back.
func TestANAAndControllerIDs(t *testing.T) {
	c := mustParse(t, haConfig)
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
	l := &c.Listeners[0]
	var want [MaxANAGroup + 1]ANAState
	want[1], want[2], want[3] = ANAInaccessible, ANANonOptimized, ANAOptimized
	if l.ANAStates != want {
		t.Errorf("ana_states = %q", l.ANAStates[:4])
	}
	for g, st := range map[uint32]ANAState{0: ANAOptimized, 1: ANAInaccessible, 2: ANANonOptimized, 4: ANAOptimized, 129: ANAOptimized} {
		if got := l.State(g); got != st {
			t.Errorf("State(%d) = %q, want %q", g, got, st)
		}
	}
	s := c.Subsystems[0]
	if s.CNTLIDMin != 0x8000 || s.CNTLIDMax != 0xFFEF {
		t.Errorf("cntlid range %#x..%#x", s.CNTLIDMin, s.CNTLIDMax)
	}
	for i, g := range []uint32{1, 2, 3} {
		if s.Namespaces[i].ANAGroup != g || s.Namespaces[i].Shared != (i == 2) {
			t.Errorf("namespace %d: ana_group %d shared %t", i, s.Namespaces[i].ANAGroup, s.Namespaces[i].Shared)
		}
	}
	text := c.String()
	for _, line := range []string{"    ana_states:", "      1: inaccessible", "      2: non-optimized", "    cntlid_min: 32768",
		"    cntlid_max: 65519", "        ana_group: 3", "        shared: true"} {
		if !strings.Contains(text, line+"\n") && !strings.Contains(text, line+" ") {
			t.Errorf("resolved config lacks %q:\n%s", line, text)
		}
	}
	again, err := Parse([]byte(text), "resolved.yaml")
	if err != nil {
		t.Fatalf("the resolved config does not parse: %v\n%s", err, numbered(text))
	}
	if !reflect.DeepEqual(exported(c), exported(again)) {
		t.Errorf("round trip changed the config:\n%s\nbecame\n%s", text, again)
	}
	if n := c.Clone(); n.Listeners[0] != c.Listeners[0] {
		t.Errorf("clone differs")
	} else if n.Listeners[0].ANAStates[1] = ANAOptimized; c.Listeners[0].ANAStates[1] != ANAInaccessible {
		t.Errorf("changing the clone's ANA states changed the original")
	}
}

func TestANAWarnings(t *testing.T) {
	c := mustParse(t, strings.Replace(haConfig, "3: optimized", "9: optimized", 1))
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0].Error(), "test.yaml:8: listeners[0].ana_states.9: no namespace is in ANA group 9; check the group ID") {
		t.Errorf("warnings: %v", c.Warnings)
	}
	c = mustParse(t, haConfig+"transport:\n  max_io_size: 8KiB\n  in_capsule_data_size: 0\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0].Error(), "transport.max_io_size: ANA states are configured, but the Linux host reads the ANA log in one command of 8208 bytes") ||
		!strings.Contains(c.Warnings[0].Error(), "raise max_io_size to at least 16KiB") {
		t.Errorf("warnings: %v", c.Warnings)
	}
	// Without ANA in use (every group optimized, every namespace in group 1) a small
	// max_io_size is not worth a warning.
	c = mustParse(t, minimal+"transport:\n  max_io_size: 4KiB\n  in_capsule_data_size: 0\n")
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

// TestANAInCode: a Config built in Go gets the ANA and controller ID defaults, and bad
// states are errors naming the field.
func TestANAInCode(t *testing.T) {
	c := mustParse(t, minimal).Clone()
	c.Subsystems[0].CNTLIDMin, c.Subsystems[0].CNTLIDMax, c.Subsystems[0].Namespaces[0].ANAGroup = 0, 0, 0
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if s := c.Subsystems[0]; s.CNTLIDMin != 1 || s.CNTLIDMax != 0xFFEF || s.Namespaces[0].ANAGroup != 1 {
		t.Errorf("defaults: %+v", s)
	}
	c.Listeners[0].ANAStates[0] = ANAOptimized
	c.Listeners[0].ANAStates[5] = "broken"
	errs := Errors(c.Resolve())
	if len(errs) != 2 || errs[0].Field != "listeners[0].ana_states" || errs[1].Field != "listeners[0].ana_states.5" ||
		!strings.Contains(errs[1].Msg, `"broken" is not an ANA state`) {
		t.Errorf("errors: %v", errs)
	}
	if _, err := ParseANAState("Optimized"); err == nil || !strings.Contains(err.Error(), "use one of optimized, non-optimized") {
		t.Errorf("ParseANAState(Optimized) = %v", err)
	}
	for _, st := range ANAStateNames {
		if got, err := ParseANAState(string(st)); err != nil || got != st || !st.Valid() {
			t.Errorf("ParseANAState(%q) = %q, %v", st, got, err)
		}
	}
}

// TestHostNQNNotInForm: a host NQN the Linux host sends but the NQN form does not allow
// (blktests names its host "blktests-host") may be listed under a subsystem and given a
// secret under hosts: both warn, neither refuses — else such a host could be allowed but
// never authenticate.
func TestHostNQNNotInForm(t *testing.T) {
	text := `listeners:
  - address: 10.99.0.1
subsystems:
  - nqn: nqn.2024-01.com.example:auth
    auth_required: true
    hosts: [blktests-host]
    namespaces:
      - nsid: 1
        backend: null
        size: 1GiB
hosts:
  - nqn: blktests-host
    dhchap_secret: ` + goodSecret + "\n"
	c, err := Parse([]byte(text), "")
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, numbered(text))
	}
	n := 0
	for _, w := range c.Warnings {
		if strings.Contains(w.Error(), "not in the NVMe NQN form") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d warnings about the NQN form, want 2 (subsystem hosts, hosts): %v", n, c.Warnings)
	}
}

// TestAutoReopen: the auto_reopen section sets the policy field by field (the others keep
// their defaults), a longer backoff raises max_backoff's default with it, and the resolved
// section prints as YAML that parses back to the same policy.
func TestAutoReopen(t *testing.T) {
	c := mustParse(t, minimal+"auto_reopen:\n  attempts: 3\n  settle: 10m\n")
	if want := (AutoReopen{Attempts: 3, Backoff: time.Second, MaxBackoff: 30 * time.Second, Settle: 10 * time.Minute}); c.AutoReopen != want {
		t.Errorf("auto_reopen %+v, want %+v", c.AutoReopen, want)
	}
	c = mustParse(t, minimal+"auto_reopen:\n  backoff: 2m\n")
	if c.AutoReopen.MaxBackoff != 2*time.Minute {
		t.Errorf("max_backoff %v with backoff 2m and no max_backoff, want 2m", c.AutoReopen.MaxBackoff)
	}
	again := mustParse(t, c.String())
	if again.AutoReopen != c.AutoReopen {
		t.Errorf("auto_reopen %+v printed and parsed again is %+v", c.AutoReopen, again.AutoReopen)
	}
	// In code: zero fields take the defaults.
	code := &Config{AutoReopen: AutoReopen{Backoff: 200 * time.Millisecond}}
	if err := code.Resolve(); err != nil {
		t.Fatal(err)
	}
	if want := (AutoReopen{Attempts: 10, Backoff: 200 * time.Millisecond, MaxBackoff: 30 * time.Second, Settle: time.Minute}); code.AutoReopen != want {
		t.Errorf("auto_reopen resolved in code %+v, want %+v", code.AutoReopen, want)
	}
}

// TestKeepAliveDefaultFollowsLimits: a file that narrows the keep-alive limits without
// writing keep_alive_timeout gets the default moved into them, not an error about a field
// it never wrote; a keep_alive_timeout it writes outside them is still an error.
func TestKeepAliveDefaultFollowsLimits(t *testing.T) {
	c := mustParse(t, minimal+"limits:\n  max_keep_alive_timeout: 60s\n")
	if c.Transport.KeepAliveTimeout != 60*time.Second {
		t.Errorf("keep_alive_timeout %v with max_keep_alive_timeout 60s, want 60s", c.Transport.KeepAliveTimeout)
	}
	c = mustParse(t, minimal+"limits:\n  min_keep_alive_timeout: 5m\n  max_keep_alive_timeout: 10m\n")
	if c.Transport.KeepAliveTimeout != 5*time.Minute {
		t.Errorf("keep_alive_timeout %v with limits 5m..10m, want 5m", c.Transport.KeepAliveTimeout)
	}
	if _, err := Parse([]byte(minimal+"transport:\n  keep_alive_timeout: 2m\nlimits:\n  max_keep_alive_timeout: 60s\n"), "t.yaml"); err == nil ||
		!strings.Contains(err.Error(), "transport.keep_alive_timeout") {
		t.Errorf("an explicit keep_alive_timeout outside the limits: %v", err)
	}
}

// TestHostNQNUpperCaseUUID: a host NQN whose UUID is in upper case is valid, but admits no
// host that sends its NQN in lower case (they all do; NQNs are compared exactly): under a
// subsystem and under hosts it warns with the lower-case form, and a lower-case one does
// not.
func TestHostNQNUpperCaseUUID(t *testing.T) {
	const upper, lower = "nqn.2014-08.org.nvmexpress:uuid:8E5E5E4C-1f1b-4c39-9a0c-0a1b2c3d4e5f", "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"
	config := func(h string) string {
		return `subsystems:
  - nqn: nqn.2024-01.com.example:a
    hosts: [` + h + `]
    namespaces: [{nsid: 1, backend: null, size: 1GiB}]
hosts:
  - nqn: ` + h + `
    dhchap_secret: ` + goodSecret + "\n"
	}
	c, err := Parse([]byte(config(upper)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Error())
	}
	want := []string{
		`t.yaml:3: subsystems[0].hosts[0]: the UUID of "` + upper + `" has upper-case letters, and host NQNs are compared exactly: hosts send theirs in lower case (the Linux host's default, nvme gen-hostnqn); write it as the host's /etc/nvme/hostnqn has it, most likely ` + lower,
		`t.yaml:6: hosts[0].nqn: the UUID of "` + upper + `" has upper-case letters`,
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no warning %q in\n%s", w, strings.Join(got, "\n"))
		}
	}
	if c, err = Parse([]byte(config(lower)), "t.yaml"); err != nil || len(c.Warnings) != 0 {
		t.Errorf("lower case: %v %v", err, c.Warnings)
	}
}
