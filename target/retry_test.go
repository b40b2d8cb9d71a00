package target_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

const fidHostBehavior = uint8(nvmeproto.FIDHostBehaviorSupport)

// hostBehavior encodes Host Behavior Support data.
func hostBehavior(hb nvmeproto.HostBehavior) []byte {
	b := make([]byte, nvmeproto.HostBehaviorSize)
	hb.Marshal(b)
	return b
}

// getACRE reads the Host Behavior Support feature with SEL sel and returns its ACRE.
func getACRE(t *testing.T, admin *hostQueue, sel uint8) uint8 {
	t.Helper()
	b, c := admin.getFeature(fidHostBehavior, sel, 0, nvmeproto.HostBehaviorSize)
	expectOK(t, "get host behavior support", c)
	var hb nvmeproto.HostBehavior
	if err := hb.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if hb != (nvmeproto.HostBehavior{ACRE: hb.ACRE}) {
		t.Errorf("host behavior support %+v: only ACRE is supported", hb)
	}
	return hb.ACRE
}

// expectRetryable is expect that also wants DNR clear and the CRD field crd.
func expectRetryable(t *testing.T, what string, c nvmeproto.Completion, want nvmeproto.Status, crd uint8) {
	t.Helper()
	expect(t, what, c, want)
	if c.Status.DNR() || c.Status.CRD() != crd {
		t.Errorf("%s: %v, want no DNR and CRD %d", what, c.Status, crd)
	}
}

// TestHostBehaviorSupport: an I/O controller reports CRDT1 and CRDT2 (so that the Linux
// host enables ACRE; see TestReopenRetryDelays), and Set/Get Features Host Behavior Support (16h) keep ACRE per controller with
// the 512-byte data the feature moves: reserved values, fields for what the controller
// does not advertise and the wrong data length are refused and change nothing; reserved
// bytes are ignored; a controller reset disables ACRE again; a discovery controller has
// neither. The old code reported CRDT1 0 and answered the feature with Invalid Field.
func TestHostBehaviorSupport(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	id := admin.identifyController()
	if id.CRDT1 != 10 || id.CRDT2 != 504 || id.CRDT3 != 0 {
		t.Errorf("CRDT1..3 = %d, %d, %d; want 10 (1 s), 504 (50.4 s), 0", id.CRDT1, id.CRDT2, id.CRDT3)
	}

	if v := getACRE(t, admin, nvmeproto.SelCurrent); v != 0 {
		t.Errorf("ACRE %d after connect, want 0", v)
	}
	expectOK(t, "enable ACRE", admin.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})))
	if v := getACRE(t, admin, nvmeproto.SelCurrent); v != 1 {
		t.Errorf("ACRE %d after enabling it, want 1", v)
	}
	for _, sel := range []uint8{nvmeproto.SelDefault, nvmeproto.SelSaved} {
		if v := getACRE(t, admin, sel); v != 0 {
			t.Errorf("SEL %d: ACRE %d, want 0", sel, v)
		}
	}
	_, c := admin.getFeature(fidHostBehavior, nvmeproto.SelSupportedCap, 0, 0)
	if expectOK(t, "supported capabilities", c); c.DW0 != nvmeproto.FeatureCapChangeable {
		t.Errorf("capabilities %#x, want changeable only", c.DW0)
	}

	for _, bad := range []struct {
		what string
		hb   nvmeproto.HostBehavior
	}{
		{"ACRE 2 (reserved)", nvmeproto.HostBehavior{ACRE: 2}},
		{"ACRE FFh (reserved)", nvmeproto.HostBehavior{ACRE: 0xFF}},
		{"ETDAS 1 (no telemetry data area 4)", nvmeproto.HostBehavior{ETDAS: 1}},
		{"LBAFEE 1 (no extended LBA formats)", nvmeproto.HostBehavior{LBAFEE: 1}},
		{"HDISNS 1 (no dispersed namespaces)", nvmeproto.HostBehavior{HDISNS: 1}},
		{"CDFE 1 (no Copy)", nvmeproto.HostBehavior{CDFE: 1}},
	} {
		expectDNR(t, bad.what, admin.setFeature(fidHostBehavior, 0, hostBehavior(bad.hb)), nvmeproto.StatusInvalidField)
	}
	expectDNR(t, "511 bytes of data", admin.setFeature(fidHostBehavior, 0, make([]byte, 511)), nvmeproto.StatusDataSGLLengthInvalid)
	expectDNR(t, "no data", admin.setFeature(fidHostBehavior, 0, nil), nvmeproto.StatusDataSGLLengthInvalid)
	_, c = admin.getFeature(fidHostBehavior, nvmeproto.SelCurrent, 0, 4096)
	expectDNR(t, "get into 4096 bytes", c, nvmeproto.StatusDataSGLLengthInvalid)
	sv := sglCmd(nvmeproto.OpSetFeatures, 0, nvmeproto.HostBehaviorSize)
	sv.CDW10 = uint32(fidHostBehavior) | 1<<31
	expectDNR(t, "save", admin.do(&sv, hostBehavior(nvmeproto.HostBehavior{})), nvmeproto.StatusFeatureNotSaveable)
	if v := getACRE(t, admin, nvmeproto.SelCurrent); v != 1 {
		t.Errorf("ACRE %d after the refused commands, want 1 still", v)
	}

	d := hostBehavior(nvmeproto.HostBehavior{})
	d[100] = 0xA5
	expectOK(t, "disable ACRE, reserved byte 100 set", admin.setFeature(fidHostBehavior, 0, d))
	if v := getACRE(t, admin, nvmeproto.SelCurrent); v != 0 {
		t.Errorf("ACRE %d after disabling it, want 0", v)
	}

	expectOK(t, "enable ACRE again", admin.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})))
	expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4))))
	waitFor(t, func() bool {
		v, _ := admin.propGet(nvmeproto.PropCSTS, false)
		return !nvmeproto.CSTS(v).RDY()
	})
	admin.enable()
	if v := getACRE(t, admin, nvmeproto.SelCurrent); v != 0 {
		t.Errorf("ACRE %d after a controller reset, want 0 (the reset value)", v)
	}

	disc, _ := e.adminConnect(nvmeproto.DiscoveryNQN, hostNQN, 0)
	if id := disc.identifyController(); id.CRDT1 != 0 || id.CRDT2 != 0 {
		t.Errorf("discovery controller CRDT1 %d, CRDT2 %d; want 0, 0", id.CRDT1, id.CRDT2)
	}
	expectDNR(t, "host behavior support on a discovery controller",
		disc.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})), nvmeproto.StatusInvalidField)
}

// TestReopenAnswersNamespaceNotReady: while ReopenNamespace has closed a namespace and
// is opening its backend again, its commands get Namespace Not Ready without DNR — CRD 0,
// or CRD 1 (CRDT1) once the host has enabled ACRE — so that the host retries them rather
// than failing them to the file system; a namespace that does not exist still gets
// Invalid Namespace with DNR; once the reopen is done the commands succeed. The old code
// answered Invalid Namespace with DNR during the reopen.
func TestReopenAnswersNamespaceNotReady(t *testing.T) {
	opening, release := make(chan struct{}), make(chan struct{})
	opens := 0
	opener := func(s backend.Spec) (backend.Backend, error) {
		if opens++; opens == 2 { // the reopen
			close(opening)
			<-release
		}
		return backend.Open(s)
	}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)), target.WithBackendOpener(opener))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	data := pattern(4096, 5)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write", q.do(&w, data))

	finish := heldReopen(t, e, 1, opening, release)

	got := make([]byte, 4096)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	expectRetryable(t, "read during the reopen", q.do(&r, got), nvmeproto.StatusNSNotReady, 0)
	expectRetryable(t, "write during the reopen", q.do(&w, data), nvmeproto.StatusNSNotReady, 0)
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectRetryable(t, "flush during the reopen", q.do(&fl, nil), nvmeproto.StatusNSNotReady, 0)
	r7 := rw(nvmeproto.OpRead, 7, 0, 8, 4096)
	expectDNR(t, "read of NSID 7 during the reopen", q.do(&r7, got), nvmeproto.StatusInvalidNamespace)

	expectOK(t, "enable ACRE", admin.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})))
	expectRetryable(t, "read during the reopen, ACRE enabled", q.do(&r, got), nvmeproto.StatusNSNotReady, 1)
	expectRetryable(t, "write during the reopen, ACRE enabled", q.do(&w, data), nvmeproto.StatusNSNotReady, 1)
	c := q.do(&r7, got)
	expectDNR(t, "read of NSID 7, ACRE enabled", c, nvmeproto.StatusInvalidNamespace)
	if c.Status.CRD() != 0 {
		t.Errorf("Invalid Namespace with CRD %d: a status with DNR carries none", c.Status.CRD())
	}

	if err := finish(); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	expectOK(t, "read after the reopen", q.do(&r, got))
	if string(got) != string(data) {
		t.Error("the data written before the reopen is not there after it")
	}
}

// TestTNVMCAPDuringReopen: Identify Controller TNVMCAP is the capacity of the namespaces
// Identify reports — those the Active Namespace ID list (CNS 02h) names, with the NVMCAP
// Identify Namespace gives — before, during and after a reopen.
func TestTNVMCAPDuringReopen(t *testing.T) {
	opening, release := make(chan struct{}), make(chan struct{})
	opens := 0
	opener := func(s backend.Spec) (backend.Backend, error) {
		if s.Kind == backend.KindFile {
			if opens++; opens == 2 { // the reopen
				close(opening)
				<-release
			}
		}
		return backend.Open(s)
	}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20), memNS(2, 2<<20)), target.WithBackendOpener(opener))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	// capacities returns TNVMCAP and the sum of the NVMCAPs of the active namespaces.
	capacities := func() (tnvmcap, active uint64) {
		id := admin.identifyController()
		b, c := admin.identify(nvmeproto.CNSActiveNSList, 0, 0)
		expectOK(t, "active namespace list", c)
		var l nvmeproto.NSIDList
		if err := l.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		for _, nsid := range l {
			b, c := admin.identify(nvmeproto.CNSNamespace, nsid, 0)
			expectOK(t, "identify namespace", c)
			var ns nvmeproto.IdentifyNamespace
			if err := ns.Unmarshal(b); err != nil {
				t.Fatal(err)
			}
			active += ns.NVMCAP.Lo
		}
		return id.TNVMCAP.Lo, active
	}
	if tn, act := capacities(); tn != act || tn != 3<<20 {
		t.Fatalf("before the reopen: TNVMCAP %d, active namespaces %d bytes; want both %d", tn, act, 3<<20)
	}

	finish := heldReopen(t, e, 1, opening, release)
	if tn, act := capacities(); tn != act {
		t.Errorf("during the reopen of namespace 1: TNVMCAP %d, active namespaces %d bytes", tn, act)
	}
	if err := finish(); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if tn, act := capacities(); tn != act || tn != 3<<20 {
		t.Errorf("after the reopen: TNVMCAP %d, active namespaces %d bytes; want both %d", tn, act, 3<<20)
	}
}

// TestReopenKeepsNamespaceActive: a namespace being reopened stays in the Active
// Namespace ID list (CNS 02h), Identify Namespace (CNS 00h) describes it as before the
// reopen, the I/O Command Set Independent Identify Namespace (CNS 08h) reports it not
// ready, and TNVMCAP counts it: a host rescanning meanwhile (another namespace changed,
// as when a blocklisted RADOS client fences several rbd namespaces and the first one
// back raises Namespace Attribute Changed) removes the block device of every NSID the
// list leaves out. Once the reopen fails the namespace is gone from the list. The old
// code left NSID 2 out of the list and answered zeroes for it during the reopen.
func TestReopenKeepsNamespaceActive(t *testing.T) {
	opening, release := make(chan struct{}), make(chan struct{})
	opens := 0
	opener := func(s backend.Spec) (backend.Backend, error) {
		if s.Kind == backend.KindFile {
			if opens++; opens == 3 { // the reopen of namespace 2
				close(opening)
				<-release
				return nil, errors.New("injected: the backing file is gone")
			}
		}
		return backend.Open(s)
	}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20), fileNS(t, 2, 2<<20)), target.WithBackendOpener(opener))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	active := func() nvmeproto.NSIDList {
		b, c := admin.identify(nvmeproto.CNSActiveNSList, 0, 0)
		expectOK(t, "active namespace list", c)
		var l nvmeproto.NSIDList
		if err := l.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		return l
	}
	identifyNS := func(cns nvmeproto.CNS) []byte {
		b, c := admin.identify(cns, 2, 0)
		expectOK(t, "identify namespace 2", c)
		return b
	}
	tnvmcap := func() uint64 {
		id := admin.identifyController()
		return id.TNVMCAP.Lo
	}
	nstat := func() uint8 {
		var id nvmeproto.IdentifyNamespaceIndependent
		if err := id.Unmarshal(identifyNS(nvmeproto.CNSCSIndependentNamespace)); err != nil {
			t.Fatal(err)
		}
		return id.NSTAT
	}
	before := identifyNS(nvmeproto.CNSNamespace)
	if got := nstat(); got != nvmeproto.NSTATReady {
		t.Fatalf("namespace 2 before the reopen: NSTAT %#x, want ready", got)
	}

	finish := heldReopen(t, e, 2, opening, release)
	if l := active(); !slices.Equal(l, nvmeproto.NSIDList{1, 2}) {
		t.Errorf("active namespace list during the reopen of 2: %v, want [1 2]", l)
	}
	// The same as before, but for the usage of the (sparse) file, which is not asked
	// while the backend is closed: NCAP = NUSE = NSZE.
	var was, now nvmeproto.IdentifyNamespace
	if err := was.Unmarshal(before); err != nil {
		t.Fatal(err)
	}
	if err := now.Unmarshal(identifyNS(nvmeproto.CNSNamespace)); err != nil {
		t.Fatal(err)
	}
	was.NCAP, was.NUSE = was.NSZE, was.NSZE
	if now != was || now.NSZE != 2<<20/512 {
		t.Errorf("Identify Namespace 2 during its reopen: NSZE %d NCAP %d NUSE %d NSFEAT %#x NVMCAP %d; want as before it, NSZE %d NSFEAT %#x NVMCAP %d",
			now.NSZE, now.NCAP, now.NUSE, now.NSFEAT, now.NVMCAP.Lo, was.NSZE, was.NSFEAT, was.NVMCAP.Lo)
	}
	if got := nstat(); got&nvmeproto.NSTATReady != 0 {
		t.Errorf("namespace 2 during its reopen: NSTAT %#x, want not ready", got)
	}
	if tn := tnvmcap(); tn != 3<<20 {
		t.Errorf("TNVMCAP during the reopen of 2: %d, want %d", tn, 3<<20)
	}

	if err := finish(); err == nil {
		t.Fatal("the reopen succeeded with the opener failing")
	}
	if l := active(); !slices.Equal(l, nvmeproto.NSIDList{1}) {
		t.Errorf("active namespace list after the failed reopen of 2: %v, want [1]", l)
	}
	if got := identifyNS(nvmeproto.CNSNamespace); !bytes.Equal(got, make([]byte, len(got))) {
		t.Error("Identify Namespace 2 after its failed reopen is not all zeroes")
	}
	if tn := tnvmcap(); tn != 1<<20 {
		t.Errorf("TNVMCAP after the failed reopen of 2: %d, want %d", tn, 1<<20)
	}
}

// TestReopenRetryDelays: the delays after which a host retries Namespace Not Ready span a
// reopen that lasts. Identify Controller reports CRDT1 1 s and CRDT2 the auto_reopen
// policy's waits between its opens over 3 retries (50.4 s at the defaults; it follows a
// policy SetAutoReopen sets, and is never below CRDT1); a reopen's commands get CRD 1 at
// first and CRD 2 once it has lasted more than 1.5 s (CRD 0 without ACRE), and an
// automatic reopen whose open failed answers CRD 2 at once. The Linux host retries a
// command 5 times, each after crdt[CRD-1] × 100 ms: with CRD 1 throughout, a reopen had
// 5 s before the file system saw an error, an rbd automatic reopen up to 2.5 minutes. The
// old code reported CRDT2 0 and answered CRD 1 however long the reopen lasted.
func TestReopenRetryDelays(t *testing.T) {
	t.Run("identify", func(t *testing.T) {
		e := newEnv(t, baseConfig(memNS(1, 1<<20)))
		admin, _ := e.adminConnect(subNQN, hostNQN, 0)
		for _, c := range []struct {
			p     conf.AutoReopen
			crdt2 uint16
		}{
			{conf.AutoReopen{}, 504}, // 1+2+4+8+16+4×30 s = 151 s, over 3 retries
			{conf.AutoReopen{Attempts: 3, Backoff: 10 * time.Second, MaxBackoff: 10 * time.Second}, 67}, // 20 s
			{conf.AutoReopen{Attempts: 2, Backoff: 100 * time.Millisecond}, 10},                         // 100 ms: CRDT1 at least
			{conf.AutoReopen{Attempts: 100, Backoff: 10 * time.Minute, MaxBackoff: time.Hour}, 65535},   // past the field
		} {
			if err := e.tgt.SetAutoReopen(c.p); err != nil {
				t.Fatal(err)
			}
			id := admin.identifyController()
			if id.CRDT1 != 10 || id.CRDT2 != c.crdt2 || id.CRDT3 != 0 {
				t.Errorf("auto_reopen %+v: CRDT1..3 = %d, %d, %d; want 10, %d, 0", c.p, id.CRDT1, id.CRDT2, id.CRDT3, c.crdt2)
			}
		}
	})
	t.Run("reopen", func(t *testing.T) {
		opening, release := make(chan struct{}), make(chan struct{})
		opens := 0
		opener := func(s backend.Spec) (backend.Backend, error) {
			if opens++; opens == 2 { // the reopen
				close(opening)
				<-release
			}
			return backend.Open(s)
		}
		e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)), target.WithBackendOpener(opener))
		admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
		q := e.ioConnect(1, cntlid, 8)
		expectOK(t, "enable ACRE", admin.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})))
		got := make([]byte, 4096)
		r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
		began := time.Now()
		finish := heldReopen(t, e, 1, opening, release)
		c := q.do(&r, got)
		if time.Since(began) < 1400*time.Millisecond { // else the machine is too slow to tell
			expectRetryable(t, "read as the reopen begins", c, nvmeproto.StatusNSNotReady, 1)
		}
		time.Sleep(time.Until(began.Add(900 * time.Millisecond)))
		c = q.do(&r, got)
		if time.Since(began) < 1400*time.Millisecond {
			expectRetryable(t, "read 0.9 s into the reopen", c, nvmeproto.StatusNSNotReady, 1)
		}
		time.Sleep(time.Until(began.Add(1600 * time.Millisecond)))
		expectRetryable(t, "read 1.6 s into the reopen", q.do(&r, got), nvmeproto.StatusNSNotReady, 2)
		expectOK(t, "disable ACRE", admin.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{})))
		expectRetryable(t, "read 1.6 s into the reopen, ACRE disabled", q.do(&r, got), nvmeproto.StatusNSNotReady, 0)
		if err := finish(); err != nil {
			t.Fatalf("reopen: %v", err)
		}
		expectOK(t, "read after the reopen", q.do(&r, got))
	})
	t.Run("automatic reopen retrying", func(t *testing.T) {
		f := &fencing{}
		p := conf.AutoReopen{Attempts: 3, Backoff: 5 * time.Second, MaxBackoff: 5 * time.Second, Settle: time.Hour}
		e := newEnv(t, reopenConfig(p, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
		admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
		q := e.ioConnect(1, cntlid, 8)
		expectOK(t, "enable ACRE", admin.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})))
		f.failOpens(100)
		fenced := time.Now()
		f.fence(false, true)
		f.waitOpens(t, 2) // the first open failed: 5 s to the next
		r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
		c := q.do(&r, make([]byte, 4096))
		expectRetryable(t, fmt.Sprintf("read %v after the fence, the reopen's first open failed", time.Since(fenced).Round(time.Millisecond)),
			c, nvmeproto.StatusNSNotReady, 2)
	})
}

// heldReopen starts ReopenNamespace of nsid and returns once the reopen has closed the
// namespace and is opening its backend again, which the test's opener holds (it closes
// opening, then waits for release). finish lets the open go on and returns the reopen's
// result; if the test ends without calling it, the cleanup does, so that the reopen does
// not outlive the test's target.
func heldReopen(t *testing.T, e *env, nsid uint32, opening <-chan struct{}, release chan struct{}) (finish func() error) {
	t.Helper()
	reopened := make(chan error, 1)
	go func() { reopened <- e.tgt.ReopenNamespace(subNQN, nsid) }()
	select {
	case <-opening:
	case err := <-reopened:
		t.Fatalf("the reopen of namespace %d returned %v without opening the backend", nsid, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("the reopen of namespace %d did not open the backend", nsid)
	}
	var once sync.Once
	var err error
	finish = func() error {
		once.Do(func() {
			close(release)
			err = <-reopened
		})
		return err
	}
	t.Cleanup(func() { finish() })
	return finish
}
