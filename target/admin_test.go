package target_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// TestIdentifyControllerList: Identify CNS 13h lists the subsystem's controllers from
// CDW10.CNTID up, and CNS 12h the same controllers for an active namespace (every
// controller has every namespace attached) and none for an inactive one.
func TestIdentifyControllerList(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20), memNS(3, 1<<20)))
	admin, first := e.adminConnect(subNQN, hostNQN, 0)
	_, second := e.adminConnect(subNQN, otherNQN, 0)
	_, third := e.adminConnect(subNQN, hostNQN, 0)
	ctrlList := func(cns nvmeproto.CNS, nsid uint32, cntid uint16) (nvmeproto.ControllerList, nvmeproto.Completion) {
		t.Helper()
		cmd := sglCmd(nvmeproto.OpIdentify, nsid, nvmeproto.ControllerListSize)
		ic := nvmeproto.IdentifyCommand{NSID: nsid, CNS: cns, CNTID: cntid}
		ic.ToCommand(&cmd)
		buf := bytes.Repeat([]byte{0xA5}, nvmeproto.ControllerListSize)
		c := admin.do(&cmd, buf)
		var l nvmeproto.ControllerList
		if c.Status == nvmeproto.StatusSuccess {
			if err := l.Unmarshal(buf); err != nil {
				t.Fatalf("%v: %v", cns, err)
			}
			if n := 2 + 2*len(l); !bytes.Equal(buf[n:], make([]byte, len(buf)-n)) {
				t.Errorf("%v: bytes after the list not zero", cns)
			}
		}
		return l, c
	}
	all := nvmeproto.ControllerList{first, second, third}
	if !(first < second && second < third) {
		t.Fatalf("controller IDs %v not handed out in increasing order", all)
	}
	check := func(name string, cns nvmeproto.CNS, nsid uint32, cntid uint16, want nvmeproto.ControllerList) {
		t.Helper()
		l, c := ctrlList(cns, nsid, cntid)
		expectOK(t, name, c)
		if !slices.Equal(l, want) {
			t.Errorf("%s: controllers %v, want %v", name, l, want)
		}
	}
	check("CNS 13h from 0", nvmeproto.CNSControllerList, 0, 0, all)
	check("CNS 13h from the second", nvmeproto.CNSControllerList, 0, second, all[1:])
	check("CNS 13h from after the second", nvmeproto.CNSControllerList, 0, second+1, all[2:])
	check("CNS 13h from after the last", nvmeproto.CNSControllerList, 0, third+1, nil)
	check("CNS 12h of namespace 3", nvmeproto.CNSNSControllerList, 3, 0, all)
	check("CNS 12h of namespace 1 from the third", nvmeproto.CNSNSControllerList, 1, third, all[2:])
	check("CNS 12h of inactive namespace 2", nvmeproto.CNSNSControllerList, 2, 0, nil)
	for _, nsid := range []uint32{0, nvmeproto.NSIDAll} {
		_, c := ctrlList(nvmeproto.CNSNSControllerList, nsid, 0)
		expect(t, fmt.Sprintf("CNS 12h of NSID %#x", nsid), c, nvmeproto.StatusInvalidNamespace)
	}

	disc, _ := e.adminConnect(nvmeproto.DiscoveryNQN, hostNQN, 0)
	cmd := sglCmd(nvmeproto.OpIdentify, 0, nvmeproto.ControllerListSize)
	(&nvmeproto.IdentifyCommand{CNS: nvmeproto.CNSControllerList}).ToCommand(&cmd)
	expect(t, "CNS 13h on a discovery controller", disc.do(&cmd, make([]byte, nvmeproto.ControllerListSize)), nvmeproto.StatusInvalidField)
}

// TestNoTemperatureSensor: the controller reports no temperature (Composite Temperature
// 0 K) and no thresholds (WCTEMP = CCTEMP = 0), and does not implement the Temperature
// Threshold feature: the Linux host shows temp1_max and temp1_min, which read that
// feature, only for a non-zero WCTEMP, so WCTEMP must stay 0 while the feature is missing.
func TestNoTemperatureSensor(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	id := admin.identifyController()
	_, c := admin.getFeature(uint8(nvmeproto.FIDTemperatureThreshold), 0, uint32(nvmeproto.MakeTemperatureThreshold(0, 0, 0)), 0)
	if id.WCTEMP != 0 || id.CCTEMP != 0 {
		// Thresholds reported: the host will read and write them.
		expectOK(t, "get temperature threshold with WCTEMP set", c)
	} else {
		expect(t, "get temperature threshold", c, nvmeproto.StatusInvalidField)
	}
	b, c := admin.getLog(uint8(nvmeproto.LIDSMART), nvmeproto.NSIDAll, 0, nvmeproto.SMARTLogSize, 0, false)
	expectOK(t, "SMART log", c)
	var s nvmeproto.SMARTLog
	if err := s.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if s.CompositeTemperature != 0 || s.CriticalWarning&nvmeproto.SMARTWarnTemperature != 0 {
		t.Errorf("SMART composite temperature %d K, critical warning %#x: the target has no sensor", s.CompositeTemperature, s.CriticalWarning)
	}
}

func TestAdminStatuses(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20), fileNS(t, 3, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	id := func(cns nvmeproto.CNS, nsid uint32, csi nvmeproto.CSI) nvmeproto.Completion {
		_, c := admin.identify(cns, nsid, csi)
		return c
	}
	alive := func() {
		t.Helper()
		expectOK(t, "identify controller", id(nvmeproto.CNSController, 0, 0))
	}

	// Opcodes.
	for _, op := range []uint8{nvmeproto.OpFormatNVM, nvmeproto.OpCreateIOSQ, nvmeproto.OpNamespaceManagement, 0xC0, nvmeproto.OpDoorbellBufferConfig} {
		c := sglCmd(op, 0, 0)
		expect(t, nvmeproto.AdminOpName(op), admin.do(&c, nil), nvmeproto.StatusInvalidOpcode)
	}
	auth := nvmeproto.Command{Opcode: nvmeproto.OpFabrics, Flags: nvmeproto.PSDTSGL << 6, NSID: uint32(nvmeproto.FabricsAuthSend), SGL: keyed(0)}
	expect(t, "authentication send", admin.do(&auth, nil), nvmeproto.StatusInvalidOpcode)
	alive()

	// Identify.
	expect(t, "CNS 04h", id(nvmeproto.CNSNVMSetList, 0, 0), nvmeproto.StatusInvalidField)
	expect(t, "CNS 10h", id(nvmeproto.CNSAllocatedNSList, 0, 0), nvmeproto.StatusInvalidField)
	expect(t, "CNS 06h CSI ZNS", id(nvmeproto.CNSCSController, 0, nvmeproto.CSIZNS), nvmeproto.StatusInvalidField)
	expect(t, "CNS 05h CSI KV", id(nvmeproto.CNSCSNamespace, 1, nvmeproto.CSIKV), nvmeproto.StatusInvalidField)
	expect(t, "namespace NSID 0", id(nvmeproto.CNSNamespace, 0, 0), nvmeproto.StatusInvalidNamespace)
	expect(t, "namespace NSID all", id(nvmeproto.CNSNamespace, nvmeproto.NSIDAll, 0), nvmeproto.StatusInvalidNamespace)
	expect(t, "descriptors of inactive NSID", id(nvmeproto.CNSNSDescriptorList, 2, 0), nvmeproto.StatusInvalidNamespace)
	expect(t, "active list from NSID FFFFFFFE", id(nvmeproto.CNSActiveNSList, 0xFFFFFFFE, 0), nvmeproto.StatusInvalidNamespace)
	buf, c := admin.identify(nvmeproto.CNSNamespace, 2, 0) // inactive but valid: zeroes
	expectOK(t, "inactive namespace", c)
	if !bytes.Equal(buf, make([]byte, 4096)) {
		t.Error("identify of an inactive namespace is not all zeroes")
	}
	buf, c = admin.identify(nvmeproto.CNSActiveNSList, 1, 0) // NSIDs greater than 1
	expectOK(t, "active list from 1", c)
	if binary.LittleEndian.Uint32(buf) != 3 || binary.LittleEndian.Uint32(buf[4:]) != 0 {
		t.Errorf("active list after 1: % x", buf[:8])
	}
	for _, cns := range []nvmeproto.CNS{nvmeproto.CNSCSNamespace, nvmeproto.CNSCSIndependentNamespace} {
		buf, c = admin.identify(cns, 1, nvmeproto.CSINVM)
		expectOK(t, cns.String(), c)
		if cns == nvmeproto.CNSCSIndependentNamespace {
			var ind nvmeproto.IdentifyNamespaceIndependent
			ind.Unmarshal(buf)
			if ind.NSTAT&nvmeproto.NSTATReady == 0 {
				t.Error("CNS 08h: namespace not ready")
			}
		}
	}
	short := sglCmd(nvmeproto.OpIdentify, 0, 512)
	short.CDW10 = uint32(nvmeproto.CNSController)
	expect(t, "identify into 512 bytes", admin.do(&short, make([]byte, 512)), nvmeproto.StatusDataSGLLengthInvalid)
	alive()

	// Get Log Page.
	logc := func(lid uint8, nsid uint32, off uint64, n int) nvmeproto.Completion {
		_, c := admin.getLog(lid, nsid, off, n, 0, false)
		return c
	}
	expect(t, "log 06h", logc(0x06, 0, 0, 512), nvmeproto.StatusInvalidLogPage)
	expect(t, "log 70h on an I/O controller", logc(0x70, 0, 0, 1024), nvmeproto.StatusInvalidLogPage)
	expect(t, "log offset not dword aligned", logc(0x02, 0, 2, 256), nvmeproto.StatusInvalidField)
	expect(t, "log offset beyond the page", logc(0x02, 0, 1024, 256), nvmeproto.StatusInvalidField)
	expect(t, "SMART of a missing namespace", logc(0x02, 7, 0, 512), nvmeproto.StatusInvalidNamespace)
	gl := sglCmd(nvmeproto.OpGetLogPage, 0, 256)
	gl.CDW10 = 0x02 | (512/4-1)<<16 // NUMD says 512 bytes, the SGL 256
	expect(t, "log length != SGL length", admin.do(&gl, make([]byte, 256)), nvmeproto.StatusDataSGLLengthInvalid)
	idx := sglCmd(nvmeproto.OpGetLogPage, 0, 512)
	idx.CDW10 = 0x02 | (512/4-1)<<16
	idx.CDW14 = 1 << 23 // offset type: index
	expect(t, "log index offset", admin.do(&idx, make([]byte, 512)), nvmeproto.StatusInvalidField)
	// Offset and length honoured: two halves equal the whole, reading past the end gives zeroes.
	whole, c := admin.getLog(0x05, 0, 0, 4096, 0, false)
	expectOK(t, "effects log", c)
	a, _ := admin.getLog(0x05, 0, 0, 2048, 0, false)
	b, _ := admin.getLog(0x05, 0, 2048, 2048, 0, false)
	if !bytes.Equal(append(a, b...), whole) {
		t.Error("log halves differ from the whole log")
	}
	fw, c := admin.getLog(0x03, 0, 0, 1024, 0, false)
	expectOK(t, "firmware slot log, longer than the page", c)
	var fs nvmeproto.FirmwareSlotLog
	fs.Unmarshal(fw)
	if fs.ActiveSlot() != 1 || fs.FRS[0] == "" || !bytes.Equal(fw[512:], make([]byte, 512)) {
		t.Errorf("firmware slot log %+v", fs)
	}
	sup, c := admin.getLog(0x00, 0, 0, 1024, 0, false)
	expectOK(t, "supported log pages", c)
	var sl nvmeproto.SupportedLogPages
	sl.Unmarshal(sup)
	for _, l := range []nvmeproto.LID{0, 1, 2, 3, 4, 5} {
		if !sl.Supported(l) {
			t.Errorf("log %v not reported as supported", l)
		}
	}
	// The error log lists the failures above, newest first.
	el, c := admin.getLog(0x01, 0, 0, 1024, 0, false)
	expectOK(t, "error log", c)
	var e0, e1 nvmeproto.ErrorInfoEntry
	e0.Unmarshal(el)
	e1.Unmarshal(el[64:])
	if e0.ErrorCount == 0 || e0.ErrorCount != e1.ErrorCount+1 || e0.Status.Code() != nvmeproto.StatusInvalidField.Code() || e0.SQID != 0 {
		t.Errorf("error log entries %+v %+v", e0, e1)
	}
	alive()

	// Features.
	feat := func(fid uint8, dw11 uint32) nvmeproto.Completion { return admin.setFeature(fid, dw11, nil) }
	expect(t, "set unsupported FID 05h", feat(0x05, 0), nvmeproto.StatusInvalidField)
	expect(t, "set LBA range type", feat(0x03, 0), nvmeproto.StatusInvalidField)
	sv := sglCmd(nvmeproto.OpSetFeatures, 0, 0)
	sv.CDW10 = 0x01 | 1<<31
	expect(t, "save", admin.do(&sv, nil), nvmeproto.StatusFeatureNotSaveable)
	expect(t, "power state 1", feat(0x02, 1), nvmeproto.StatusInvalidField)
	expect(t, "number of queues 0xFFFF", feat(0x07, 0xFFFF), nvmeproto.StatusInvalidField)
	expect(t, "set host identifier (16 bytes, EXHID)", admin.setFeature(0x81, 1, make([]byte, 16)), nvmeproto.StatusCommandSequenceError)
	expect(t, "set host identifier", feat(0x81, 1), nvmeproto.StatusCommandSequenceError)
	expect(t, "timestamp without data", feat(0x0E, 0), nvmeproto.StatusDataSGLLengthInvalid)
	_, c = admin.getFeature(0x01, 4, 0, 0)
	expect(t, "get features SEL 4", c, nvmeproto.StatusInvalidField)
	_, c = admin.getFeature(0x81, 0, 0, 8)
	expect(t, "64-bit host identifier", c, nvmeproto.StatusInvalidField)
	hid, c := admin.getFeature(0x81, 0, 1, 16)
	expectOK(t, "128-bit host identifier", c)
	if [16]byte(hid) != hostID {
		t.Errorf("host identifier %x, want %x", hid, hostID)
	}

	expectOK(t, "set arbitration", feat(0x01, 0x03020103))
	expectOK(t, "set power state 0", feat(0x02, 0))
	if _, c = admin.getFeature(0x01, 0, 0, 0); c.DW0 != 0x03020103 {
		t.Errorf("arbitration %#x", c.DW0)
	}
	if _, c = admin.getFeature(0x01, 1, 0, 0); c.DW0 != 0 {
		t.Errorf("default arbitration %#x", c.DW0)
	}
	if _, c = admin.getFeature(0x07, 3, 0, 0); c.DW0&(1<<2) == 0 {
		t.Errorf("number of queues capabilities %#x: not changeable", c.DW0)
	}
	expectOK(t, "KATO 1234 ms", feat(0x0F, 1234))
	if _, c = admin.getFeature(0x0F, 0, 0, 0); c.DW0 != 1300 {
		t.Errorf("KATO %d, want 1234 rounded up to 1300", c.DW0)
	}
	expectOK(t, "KATO off", feat(0x0F, 0))
	// Volatile write cache exists (the file namespace has one); disable and re-enable.
	expectOK(t, "VWC off", feat(0x06, 0))
	if _, c = admin.getFeature(0x06, 0, 0, 0); c.DW0 != 0 {
		t.Errorf("VWC %#x after disabling", c.DW0)
	}
	expectOK(t, "VWC on", feat(0x06, 1))
	// AEC refuses events the controller does not have (TestSetFeaturesAsyncEventConfig).
	expect(t, "AEC all bits", feat(0x0B, 0xFFFFFFFF), nvmeproto.StatusInvalidField)
	if _, c = admin.getFeature(0x0B, 0, 0, 0); c.DW0 != 1<<8|1<<11 {
		t.Errorf("AEC %#x, want the namespace attribute and ANA change notices it started with", c.DW0)
	}
	// Timestamp: set, then read back close to it with origin "host".
	ts := nvmeproto.Timestamp{Millis: 1_700_000_000_000}
	tb := make([]byte, 8)
	ts.Marshal(tb)
	expectOK(t, "set timestamp", admin.setFeature(0x0E, 0, tb))
	tb, c = admin.getFeature(0x0E, 0, 0, 8)
	expectOK(t, "get timestamp", c)
	ts.Unmarshal(tb)
	if ts.Origin != nvmeproto.TimestampOriginHost || ts.Millis < 1_700_000_000_000 || ts.Millis > 1_700_000_000_000+10_000 {
		t.Errorf("timestamp %+v", ts)
	}
	alive()

	// AER limit and Abort.
	var aers []<-chan nvmeproto.Completion
	var cids []uint16
	for range 4 {
		a := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
		aers = append(aers, admin.submit(&a, nil))
		cids = append(cids, a.CID)
	}
	fifth := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	expect(t, "fifth AER", admin.do(&fifth, nil), nvmeproto.StatusAERLimitExceeded)
	ab := sglCmd(nvmeproto.OpAbort, 0, 0)
	ab.CDW10 = uint32(cids[1]) << 16
	c = admin.do(&ab, nil)
	expectOK(t, "abort AER", c)
	if c.DW0&1 != 0 {
		t.Error("abort of a held AER reported not aborted")
	}
	expect(t, "aborted AER", wait(t, aers[1]), nvmeproto.StatusAbortRequested)
	ab.CDW10 = 1 | 77<<16 // qid 1, unknown command
	c = admin.do(&ab, nil)
	expectOK(t, "abort unknown", c)
	if c.DW0&1 != 1 {
		t.Error("abort of an unknown command reported aborted")
	}

	// Properties.
	_, c = admin.propGet(0x24, false) // AQA does not exist over Fabrics
	expect(t, "get AQA", c, nvmeproto.StatusInvalidField)
	_, c = admin.propGet(nvmeproto.PropCAP, false)
	expect(t, "get CAP as 4 bytes", c, nvmeproto.StatusInvalidField)
	_, c = admin.propGet(nvmeproto.PropCC, true)
	expect(t, "get CC as 8 bytes", c, nvmeproto.StatusInvalidField)
	expect(t, "set CAP", admin.propSet(nvmeproto.PropCAP, 0), nvmeproto.StatusInvalidField)
	expect(t, "set CSTS", admin.propSet(nvmeproto.PropCSTS, 0), nvmeproto.StatusInvalidField)
	alive()
}

// TestEnableRefused: CC.EN=1 with an unsupported configuration sets CSTS.CFS.
func TestEnableRefused(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	for _, cc := range []nvmeproto.CC{
		nvmeproto.CC(0).WithEN(true).WithIOSQES(7).WithIOCQES(4),
		nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(5),
		nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithMPS(1),
		nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithAMS(1),
		nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithCSS(7),
	} {
		h := e.dial(32)
		expectOK(t, "connect", h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN))
		expectOK(t, "set CC", h.propSet(nvmeproto.PropCC, uint32(cc)))
		v, _ := h.propGet(nvmeproto.PropCSTS, false)
		if cs := nvmeproto.CSTS(v); !cs.CFS() || cs.RDY() {
			t.Errorf("%v: CSTS %v, want CFS and not RDY", cc, cs)
		}
		h.conn.Close()
	}
}

// TestKeepAliveAnsweredUnderBacklog: with every I/O slot stuck in a slow backend, Keep
// Alive on the admin queue still completes at once, and the keep-alive timer keeps the
// controller alive as long as the host sends it.
func TestKeepAliveAnsweredUnderBacklog(t *testing.T) {
	gate := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), gatedBackend(gate))
	t.Cleanup(gate.open) // before the target closes, which waits for I/O
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 500)
	q := e.ioConnect(1, cntlid, 32)
	var pending []<-chan nvmeproto.Completion
	for i := range 32 {
		w := rw(nvmeproto.OpWrite, 1, uint64(i), 1, 512)
		pending = append(pending, q.submit(&w, make([]byte, 512)))
	}
	gate.waitBlocked(t, 1)
	deadline := time.Now().Add(1500 * time.Millisecond) // three keep-alive timeouts
	for time.Now().Before(deadline) {
		ka := sglCmd(nvmeproto.OpKeepAlive, 0, 0)
		start := time.Now()
		expectOK(t, "keep alive", admin.do(&ka, nil))
		if d := time.Since(start); d > time.Second { // queued behind the I/O it would never complete
			t.Errorf("keep alive took %v with I/O backlogged", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-q.conn.Done():
		t.Fatalf("I/O queue torn down despite keep alives: %v", q.conn.Err())
	default:
	}
	gate.open()
	for _, ch := range pending {
		expectOK(t, "backlogged write", wait(t, ch))
	}
}

// TestNewErrors: a backend that cannot be opened fails New with an error naming the
// subsystem and namespace, and leaves nothing open.
func TestNewErrors(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20), conf.Namespace{NSID: 2, Backend: conf.BackendFile, Path: "/nonexistent/dir/ns.img", Size: 1 << 20})
	_, err := target.New(cfg, target.WithLogger(testLogger(t)))
	if err == nil || !strings.Contains(err.Error(), subNQN) || !strings.Contains(err.Error(), "namespace 2") {
		t.Fatalf("New: %v", err)
	}
	if _, err := target.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	bad := baseConfig(memNS(1, 1<<20))
	bad.Subsystems[0].NQN = "not\tan nqn" // a control character
	if _, err := target.New(bad); err == nil {
		t.Fatal("New accepted an invalid configuration")
	}
}

// TestCommandEffectsAdmin: the Commands Supported and Effects log marks every admin
// command the controller implements as supported and none with an effect: Set Features
// changes host settings, not controller capabilities (nvmet marks it supported only).
// The old code marked Set Features CCC, and the Linux host logged "controller
// capabilities changed, reset may be required" after every nvme set-feature.
func TestCommandEffectsAdmin(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	b, c := admin.getLog(uint8(nvmeproto.LIDCommandEffects), 0, 0, nvmeproto.CommandEffectsLogSize, 0, false)
	expectOK(t, "Commands Supported and Effects log", c)
	var l nvmeproto.CommandEffectsLog
	if err := l.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	for _, op := range []uint8{nvmeproto.OpGetLogPage, nvmeproto.OpIdentify, nvmeproto.OpAbort, nvmeproto.OpSetFeatures,
		nvmeproto.OpGetFeatures, nvmeproto.OpAsyncEventRequest, nvmeproto.OpKeepAlive} {
		if l.ACS[op] != nvmeproto.EffectCSUPP {
			t.Errorf("admin opcode %#x: effects %#x, want supported (%#x) only", op, l.ACS[op], nvmeproto.EffectCSUPP)
		}
	}
}

// TestGetLogPageUUIDIndex: the controller has no UUID List, so a Get Log Page naming a
// UUID index (CDW14 bits 6:0) is refused with Invalid Field in Command; index 0 (none)
// reads the page. The old code ignored the index and returned the page.
func TestGetLogPageUUIDIndex(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	smart := func(uuidx uint32) nvmeproto.Completion {
		var g nvmeproto.GetLogPageCommand
		g.LID, g.NSID, g.UUIDIndex = nvmeproto.LIDSMART, nvmeproto.NSIDAll, uint8(uuidx)
		g.SetLength(nvmeproto.SMARTLogSize)
		cmd := sglCmd(nvmeproto.OpGetLogPage, 0, nvmeproto.SMARTLogSize)
		g.ToCommand(&cmd)
		return admin.do(&cmd, make([]byte, nvmeproto.SMARTLogSize))
	}
	expectOK(t, "SMART log, no UUID index", smart(0))
	for _, uuidx := range []uint32{1, 5, 0x7F} {
		expect(t, "SMART log with a UUID index", smart(uuidx), nvmeproto.StatusInvalidField)
	}
}

// TestSetFeaturesAsyncEventConfig: Set Features Asynchronous Event Configuration accepts
// the notices the controller reports in OAES and, on an I/O controller, the SMART
// critical warnings 4:0 (mandatory; what the SPDK host always sets); any other bit is
// refused with Invalid Field in Command and changes nothing, as in nvmet. The old code
// accepted any value and silently dropped the bits it did not support.
func TestSetFeaturesAsyncEventConfig(t *testing.T) {
	const fidAEC = uint8(nvmeproto.FIDAsyncEventConfig)
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	for _, tc := range []struct {
		name    string
		sub     string
		ok      []uint32 // accepted, and read back
		refused []uint32
	}{
		{"I/O controller", subNQN,
			[]uint32{0x1F | uint32(nvmeproto.AECNamespaceAttr|nvmeproto.AECANAChange), uint32(nvmeproto.AECANAChange), 0},
			[]uint32{0xFFFFFFFF, 1 << 5, uint32(nvmeproto.AECFirmwareActivation), uint32(nvmeproto.AECDiscoveryLogChange)}},
		{"discovery controller", nvmeproto.DiscoveryNQN,
			[]uint32{uint32(nvmeproto.AECDiscoveryLogChange), 0},
			[]uint32{0x1F, uint32(nvmeproto.AECNamespaceAttr)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin, _ := e.adminConnect(tc.sub, hostNQN, 0)
			id := admin.identifyController()
			for _, v := range tc.ok {
				if v&^0x1F&^id.OAES != 0 {
					t.Fatalf("test value %#x has bits outside OAES %#x and the SMART warnings", v, id.OAES)
				}
				expectOK(t, "set AEC", admin.setFeature(fidAEC, v, nil))
				if _, c := admin.getFeature(fidAEC, nvmeproto.SelCurrent, 0, 0); c.DW0 != v {
					t.Errorf("AEC %#x after setting %#x", c.DW0, v)
				}
			}
			last := tc.ok[len(tc.ok)-1]
			for _, v := range tc.refused {
				expect(t, "set AEC with an unsupported bit", admin.setFeature(fidAEC, v, nil), nvmeproto.StatusInvalidField)
				if _, c := admin.getFeature(fidAEC, nvmeproto.SelCurrent, 0, 0); c.DW0 != last {
					t.Errorf("AEC %#x after the refused %#x, want %#x unchanged", c.DW0, v, last)
				}
			}
		})
	}
}
