package target_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

// TestLinuxConnectSequence drives the exact sequence the Linux host performs on
// `nvme connect -t rdma` (reference §4), then writes and reads back data on a file
// namespace through the I/O queues it connected.
func TestLinuxConnectSequence(t *testing.T) {
	cfg := baseConfig(fileNS(t, 1, 8<<20), memNS(2, 4<<20))
	e := newEnv(t, cfg)

	// 1-2: admin queue, Connect with cntlid 0xFFFF and the default 5 s KATO.
	admin := e.dial(32)
	c := admin.connect(0, 31, 5000, nvmeproto.CNTLIDDynamic, subNQN, hostNQN)
	expectOK(t, "admin connect", c)
	cntlid, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
	if cntlid < nvmeproto.CNTLIDMin || cntlid > nvmeproto.CNTLIDMax {
		t.Fatalf("cntlid %#x out of range", cntlid)
	}
	if c.SQID != 0 {
		t.Errorf("connect SQID %d, want 0", c.SQID)
	}

	// 3: CAP, CC.EN=1, poll CSTS.RDY, VS.
	capv, c := admin.propGet(nvmeproto.PropCAP, true)
	expectOK(t, "get CAP", c)
	capr := nvmeproto.CAP(capv)
	if capr.MQES() != 127 || capr.MPSMIN() != 0 || capr.CSS()&nvmeproto.CAPCSSNVM == 0 || capr.TO() == 0 || !capr.CQR() {
		t.Errorf("CAP %v: want MQES 127, MPSMIN 0, CSS NVM, TO != 0, CQR", capr)
	}
	admin.enable()
	vs, _ := admin.propGet(nvmeproto.PropVS, false)
	if nvmeproto.VS(vs) < nvmeproto.VS1_4 {
		t.Errorf("VS %v < 1.4", nvmeproto.VS(vs))
	}

	// 4: Identify Controller and the checks the host makes on it.
	buf, c := admin.identify(nvmeproto.CNSController, 0, 0)
	expectOK(t, "identify controller", c)
	var id nvmeproto.IdentifyController
	if err := id.Unmarshal(buf); err != nil {
		t.Fatal(err)
	}
	switch {
	case id.SGLS&nvmeproto.SGLSKeyedDataBlock == 0:
		t.Error("Mandatory keyed sgls are not supported!")
	case id.SGLS&3 != nvmeproto.SGLSSupported:
		t.Errorf("SGLS %#x: SGL support bits", id.SGLS)
	case id.SGLS&nvmeproto.SGLSAddressAsOffset == 0:
		t.Error("SGL offset (in-capsule data) not reported")
	case id.ICDOFF != 0:
		t.Error("icdoff is not supported!")
	case id.KAS == 0:
		t.Error("Mandatory keep alive unsupported")
	case id.IOCCSZ != (64+8192)/16 || id.IORCSZ != 1:
		t.Errorf("ioccsz %d iorcsz %d", id.IOCCSZ, id.IORCSZ)
	case id.CNTLID != cntlid:
		t.Errorf("Identify cntlid %d != Connect cntlid %d", id.CNTLID, cntlid)
	case id.MDTS != 5:
		t.Errorf("mdts %d, want 5 (128 KiB in 4 KiB pages)", id.MDTS)
	case id.MAXCMD != 128 || id.SQES != 0x66 || id.CQES != 0x44:
		t.Errorf("maxcmd %d sqes %#x cqes %#x", id.MAXCMD, id.SQES, id.CQES)
	case id.CNTRLTYPE != nvmeproto.ControllerTypeIO || id.SubNQN != subNQN || id.NN < 2:
		t.Errorf("cntrltype %d subnqn %q nn %d", id.CNTRLTYPE, id.SubNQN, id.NN)
	case id.SN != conf.DeriveSerial(subNQN) || id.MN != conf.DefaultModel || id.FR != target.FirmwareRevision:
		t.Errorf("sn %q mn %q fr %q", id.SN, id.MN, id.FR)
	case id.CTRATT&nvmeproto.CTRATTTBKAS == 0:
		t.Error("TBKAS not reported")
	case min(max(id.RTD3E/1_000_000, 5), 60) != 60: // the host's shutdown timeout, in seconds
		// The shutdown flushes every namespace; the host must wait for it as long as it
		// will (nvme_init_identify clamps RTD3E to 5..60 s), not its default 5 s.
		t.Errorf("RTD3E %d µs: the host waits %d s for a shutdown, want 60", id.RTD3E, min(max(id.RTD3E/1_000_000, 5), 60))
	case id.ONCS&(nvmeproto.ONCSWriteZeroes|nvmeproto.ONCSDatasetManagement|nvmeproto.ONCSCompare) == 0:
		t.Errorf("oncs %#x", id.ONCS)
	case id.MSDBD < 1 || id.VER < nvmeproto.VS1_4 || id.LPA&nvmeproto.LPACommandEffects == 0:
		t.Errorf("msdbd %d ver %v lpa %#x", id.MSDBD, id.VER, id.LPA)
	}
	// ... Command Effects log, Identify CNS 06h, Set Features Timestamp, SMART log.
	eff, c := admin.getLog(0x05, 0, 0, 4096, 0, false)
	expectOK(t, "command effects log", c)
	if binary.LittleEndian.Uint32(eff[1024+4*int(nvmeproto.OpWrite):])&3 != 3 {
		t.Errorf("command effects: write not supported/LBCC")
	}
	_, c = admin.identify(nvmeproto.CNSCSController, 0, nvmeproto.CSINVM)
	expectOK(t, "identify CNS 06h", c)
	ts := make([]byte, 8)
	binary.LittleEndian.PutUint64(ts, uint64(time.Now().UnixMilli()))
	expectOK(t, "set timestamp", admin.setFeature(0x0E, 0, ts))
	_, c = admin.getLog(0x02, nvmeproto.NSIDAll, 0, 512, 0, false)
	expectOK(t, "SMART log", c)

	// 5: Number of Queues: ask for 8, get the 4 configured.
	c = admin.setFeature(0x07, 7|7<<16, nil)
	expectOK(t, "set number of queues", c)
	if c.DW0 != 3|3<<16 {
		t.Fatalf("number of queues dw0 %#x, want 3|3<<16", c.DW0)
	}
	// Unequal halves: Get (current) returns what the Set completion allocated.
	c = admin.setFeature(0x07, 0|2<<16, nil)
	expectOK(t, "set number of queues 1 SQ, 3 CQs", c)
	if _, g := admin.getFeature(0x07, 0, 0, 0); g.DW0 != c.DW0 || c.DW0 != 0|2<<16 {
		t.Fatalf("number of queues: set dw0 %#x, get dw0 %#x, want both %#x", c.DW0, g.DW0, 0|2<<16)
	}
	expectOK(t, "set number of queues 8", admin.setFeature(0x07, 7|7<<16, nil))

	// 6: I/O queues 1..4.
	ioqs := make([]*hostQueue, 4)
	for i := range ioqs {
		ioqs[i] = e.ioConnect(uint16(i+1), cntlid, 128)
	}

	// 7: Async Event Config, an outstanding AER, keep alive.
	expectOK(t, "set AEC", admin.setFeature(0x0B, 1<<8, nil))
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	aerCh := admin.submit(&aer, nil)
	ka := sglCmd(nvmeproto.OpKeepAlive, 0, 0)
	expectOK(t, "keep alive", admin.do(&ka, nil))

	// 8: namespace scan.
	buf, c = admin.identify(nvmeproto.CNSActiveNSList, 0, 0)
	expectOK(t, "active ns list", c)
	var list nvmeproto.NSIDList
	if err := list.Unmarshal(buf); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0] != 1 || list[1] != 2 {
		t.Fatalf("active namespaces %v, want [1 2]", list)
	}
	for _, nsid := range list {
		buf, c = admin.identify(nvmeproto.CNSNamespace, nsid, 0)
		expectOK(t, "identify namespace", c)
		var ns nvmeproto.IdentifyNamespace
		if err := ns.Unmarshal(buf); err != nil {
			t.Fatal(err)
		}
		wantBlocks := uint64(8 << 20 / 512)
		if nsid == 2 {
			wantBlocks = 4 << 20 / 512
		}
		if ns.NSZE != wantBlocks || ns.LBASize() != 512 || ns.NGUID != conf.DeriveNGUID(subNQN, nsid) {
			t.Errorf("ns %d: nsze %d lba %d nguid %x", nsid, ns.NSZE, ns.LBASize(), ns.NGUID)
		}
		buf, c = admin.identify(nvmeproto.CNSNSDescriptorList, nsid, 0)
		expectOK(t, "identify descriptors", c)
		var dl nvmeproto.NSDescriptorList
		if err := dl.Unmarshal(buf); err != nil {
			t.Fatal(err)
		}
		u, ok := dl.Find(nvmeproto.NIDTUUID)
		if !ok || [16]byte(u.Bytes()) != conf.DeriveUUID(subNQN, nsid) {
			t.Errorf("ns %d: UUID descriptor %v %v", nsid, u, ok)
		}
		if d, ok := dl.Find(nvmeproto.NIDTCSI); !ok || d.Bytes()[0] != byte(nvmeproto.CSINVM) {
			t.Errorf("ns %d: CSI descriptor missing", nsid)
		}
	}

	// Data: write a pattern through queue 1, read it back through queue 3.
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	w := rw(nvmeproto.OpWrite, 1, 100, len(data)/512, len(data))
	expectOK(t, "write", ioqs[0].do(&w, data))
	got := make([]byte, len(data))
	r := rw(nvmeproto.OpRead, 1, 100, len(data)/512, len(data))
	c = ioqs[2].do(&r, got)
	expectOK(t, "read", c)
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs from what was written")
	}
	if c.SQID != 3 {
		t.Errorf("read completion SQID %d, want 3", c.SQID)
	}
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectOK(t, "flush", ioqs[1].do(&fl, nil))

	// SMART counters reflect the I/O.
	smart, c := admin.getLog(0x02, nvmeproto.NSIDAll, 0, 512, 0, false)
	expectOK(t, "SMART log", c)
	if rd, wr := binary.LittleEndian.Uint64(smart[64:]), binary.LittleEndian.Uint64(smart[80:]); rd != 1 || wr != 1 {
		t.Errorf("SMART host read/write commands %d/%d, want 1/1", rd, wr)
	}
	if du := binary.LittleEndian.Uint64(smart[32:]); du != 1 { // 128 units of 512 B, rounded up to 1 thousand
		t.Errorf("SMART data units read %d, want 1", du)
	}

	select {
	case c := <-aerCh:
		t.Fatalf("AER completed without an event: %+v", c)
	default:
	}
}

// TestLinuxDiscoverSequence drives `nvme discover`: connect to the discovery subsystem
// with KATO 0, Identify Controller, then Get Log Page 70h header first and whole log next.
func TestLinuxDiscoverSequence(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Subsystems = append(cfg.Subsystems, conf.Subsystem{
		NQN: "nqn.2024-01.io.gonvmf:private", Hosts: []string{otherNQN}, Namespaces: []conf.Namespace{memNS(1, 1<<20)},
	})
	e := newEnv(t, cfg)
	rdma, err := e.tgt.AddPort(target.PortConfig{TrType: target.TrTypeRDMA, AdrFam: target.AdrFamIPv4,
		TrAddr: "10.99.0.1", TrSvcID: "4420", Advertise: true, Keyed: true, InCapsuleDataSize: e.tgt.TransportConfig().InCapsuleDataSize})
	if err != nil {
		t.Fatal(err)
	}

	admin, cntlid := e.adminConnect(nvmeproto.DiscoveryNQN, hostNQN, 0)
	buf, c := admin.identify(nvmeproto.CNSController, 0, 0)
	expectOK(t, "identify controller", c)
	var id nvmeproto.IdentifyController
	if err := id.Unmarshal(buf); err != nil {
		t.Fatal(err)
	}
	if id.CNTRLTYPE != nvmeproto.ControllerTypeDiscovery || id.CNTLID != cntlid || id.SubNQN != nvmeproto.DiscoveryNQN ||
		id.SGLS&nvmeproto.SGLSKeyedDataBlock == 0 || id.KAS == 0 || id.LPA&nvmeproto.LPAExtendedData == 0 {
		t.Errorf("discovery identify: cntrltype %d cntlid %d subnqn %q sgls %#x kas %d lpa %#x",
			id.CNTRLTYPE, id.CNTLID, id.SubNQN, id.SGLS, id.KAS, id.LPA)
	}
	// KATO 0 on a discovery controller gets the long default.
	_, c = admin.getFeature(0x0F, 0, 0, 0)
	expectOK(t, "get KATO", c)
	if c.DW0 != uint32(conf.DefaultKeepAliveTimeout/time.Millisecond) {
		t.Errorf("discovery KATO %d ms, want %d", c.DW0, conf.DefaultKeepAliveTimeout/time.Millisecond)
	}

	hdr, c := admin.getLog(0x70, 0, 0, nvmeproto.DiscoveryLogHeaderSize, 0, true)
	expectOK(t, "discovery log header", c)
	var h nvmeproto.DiscoveryLogHeader
	if err := h.Unmarshal(hdr); err != nil {
		t.Fatal(err)
	}
	if h.NumRec != 1 {
		t.Fatalf("numrec %d, want 1 (one accessible subsystem x one advertised port)", h.NumRec)
	}
	full, c := admin.getLog(0x70, 0, 0, nvmeproto.DiscoveryLogSize(int(h.NumRec)), 0, true)
	expectOK(t, "discovery log", c)
	var h2 nvmeproto.DiscoveryLogHeader
	h2.Unmarshal(full)
	if h2.GenCtr != h.GenCtr {
		t.Fatalf("genctr changed between reads: %d -> %d", h.GenCtr, h2.GenCtr)
	}
	var ent nvmeproto.DiscoveryLogEntry
	if err := ent.Unmarshal(full[nvmeproto.DiscoveryLogHeaderSize:]); err != nil {
		t.Fatal(err)
	}
	if ent.TrType != nvmeproto.TrTypeRDMA || ent.AdrFam != nvmeproto.AdrFamIPv4 || ent.SubType != nvmeproto.SubTypeNVMe ||
		ent.SubNQN != subNQN || ent.TrAddr != "10.99.0.1" || ent.TrSvcID != "4420" || ent.PortID != rdma.ID() ||
		ent.CNTLID != nvmeproto.CNTLIDDynamic || ent.ASQSZ != 32 || ent.TReq != nvmeproto.TReqDisableSQFlow {
		t.Errorf("discovery entry %+v", ent)
	}
	if ts := ent.RDMA(); ts.QPType != nvmeproto.RDMAQPTypeConnected || ts.CMS != nvmeproto.RDMACMSRDMACM || ts.PrType != nvmeproto.RDMAPrTypeNone {
		t.Errorf("RDMA TSAS %+v", ts)
	}
	// The second half of the log by offset equals the entry.
	tail, c := admin.getLog(0x70, 0, nvmeproto.DiscoveryLogHeaderSize, nvmeproto.DiscoveryLogEntrySize, 0, true)
	expectOK(t, "discovery log at offset", c)
	if !bytes.Equal(tail, full[nvmeproto.DiscoveryLogHeaderSize:]) {
		t.Error("log read at an offset differs from the whole log")
	}

	// The other host sees the private subsystem too.
	e2admin, _ := e.adminConnect(nvmeproto.DiscoveryNQN, otherNQN, 0)
	hdr, _ = e2admin.getLog(0x70, 0, 0, nvmeproto.DiscoveryLogHeaderSize, 0, true)
	h.Unmarshal(hdr)
	if h.NumRec != 2 {
		t.Errorf("other host: numrec %d, want 2", h.NumRec)
	}
	// Discovery controllers refuse I/O-controller commands and pages.
	_, c = admin.identify(nvmeproto.CNSActiveNSList, 0, 0)
	expect(t, "discovery identify CNS 02h", c, nvmeproto.StatusInvalidField)
	_, c = admin.getLog(0x02, 0, 0, 512, 0, false)
	expect(t, "discovery SMART log", c, nvmeproto.StatusInvalidLogPage)
}

// TestConnectErrors covers every refused-Connect path.
func TestConnectErrors(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Subsystems[0].AllowAnyHost = false
	cfg.Subsystems[0].Hosts = []string{hostNQN}
	e := newEnv(t, cfg)

	type ipo struct {
		off   uint16
		iattr uint8
	}
	check := func(what string, c nvmeproto.Completion, want nvmeproto.Status, where *ipo) {
		t.Helper()
		expect(t, what, c, want)
		if where != nil {
			off, iattr := nvmeproto.ParseConnectInvalidParamDW0(c.DW0)
			if off != where.off || iattr != where.iattr {
				t.Errorf("%s: IPO %d IATTR %d, want %d %d", what, off, iattr, where.off, where.iattr)
			}
		}
	}

	h := e.dial(32)
	// A disallowed host and an unknown subsystem look the same to the host (status, DNR,
	// IPO, IATTR): it cannot tell which subsystems exist.
	disallowed := h.connect(0, 31, 0, 0xFFFF, subNQN, otherNQN)
	check("disallowed host", disallowed, nvmeproto.StatusConnectInvalidParameters, &ipo{256, 1})
	unknown := h.connect(0, 31, 0, 0xFFFF, "nqn.2024-01.io.gonvmf:nope", hostNQN)
	check("unknown subsystem", unknown, nvmeproto.StatusConnectInvalidParameters, &ipo{256, 1})
	if disallowed.Status != unknown.Status || disallowed.DW0 != unknown.DW0 || disallowed.DW1 != unknown.DW1 {
		t.Errorf("disallowed host: %v dw0 %#x dw1 %#x; unknown subsystem: %v dw0 %#x dw1 %#x: they must not differ",
			disallowed.Status, disallowed.DW0, disallowed.DW1, unknown.Status, unknown.DW0, unknown.DW1)
	}
	check("host NQN with a control character", h.connect(0, 31, 0, 0xFFFF, subNQN, "bad\x01host"),
		nvmeproto.StatusConnectInvalidParameters, &ipo{512, 1})
	// NVMe over Fabrics 1.1, 3.3: "If the Host Identifier is cleared to 0h, then a status
	// value of Connect Invalid Parameters is returned."
	check("host identifier 0h", h.connectWithID(0, 31, 0, 0xFFFF, subNQN, hostNQN, [16]byte{}),
		nvmeproto.StatusConnectInvalidParameters, &ipo{0, 1})
	check("host identifier 0h, discovery", h.connectWithID(0, 31, 0, 0xFFFF, nvmeproto.DiscoveryNQN, hostNQN, [16]byte{}),
		nvmeproto.StatusConnectInvalidParameters, &ipo{0, 1})
	check("admin cntlid not 0xFFFF", h.connect(0, 31, 0, 5, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{16, 1})
	check("sqsize 0", h.connect(0, 0, 0, 0xFFFF, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{44, 0})
	bigq := e.dial(64)
	check("admin sqsize > 31", bigq.connect(0, 63, 0, 0xFFFF, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{44, 0})
	check("sqsize beyond the transport depth", h.connect(0, 40, 0, 0xFFFF, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{44, 0})

	// Record format.
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(1024)}
	cc := nvmeproto.ConnectCommand{RecFmt: 1, SQSize: 31}
	cc.ToCommand(&cmd)
	d := nvmeproto.ConnectData{CNTLID: 0xFFFF, SubNQN: subNQN, HostNQN: hostNQN}
	data := make([]byte, 1024)
	d.Marshal(data)
	check("record format 1", h.do(&cmd, data), nvmeproto.StatusConnectIncompatibleFormat, nil)
	// NQN without a terminator.
	cc.RecFmt = 0
	cc.ToCommand(&cmd)
	bad := bytes.Clone(data)
	for i := 256; i < 512; i++ {
		bad[i] = 'x'
	}
	check("unterminated SUBNQN", h.do(&cmd, bad), nvmeproto.StatusConnectInvalidParameters, &ipo{256, 1})
	// Wrong data length.
	cmd.SGL = keyed(512)
	check("connect data 512 bytes", h.do(&cmd, data[:512]), nvmeproto.StatusDataSGLLengthInvalid, nil)
	// Anything before Connect is a sequence error.
	pg := sglCmd(nvmeproto.OpIdentify, 0, 4096)
	check("identify before connect", h.do(&pg, make([]byte, 4096)), nvmeproto.StatusCommandSequenceError, nil)

	// Now a good connect on the same queue works, and a second one is a sequence error.
	c := h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN)
	expectOK(t, "admin connect", c)
	cntlid := uint16(c.DW0)
	check("second connect", h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN), nvmeproto.StatusCommandSequenceError, nil)

	// I/O queue before the controller is enabled.
	q1 := e.dial(128)
	check("I/O connect before enable", q1.connect(1, 127, 0, cntlid, subNQN, hostNQN), nvmeproto.StatusCommandSequenceError, nil)
	// Admin commands before enable.
	check("identify before enable", h.do(&pg, make([]byte, 4096)), nvmeproto.StatusCommandSequenceError, nil)
	h.enable()
	expectOK(t, "number of queues", h.setFeature(0x07, 1|1<<16, nil)) // 2 queues

	check("I/O connect unknown cntlid", q1.connect(1, 127, 0, cntlid+1, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{16, 1})
	check("I/O connect other host", q1.connect(1, 127, 0, cntlid, subNQN, otherNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{256, 1})
	check("I/O qid beyond granted", q1.connect(3, 127, 0, cntlid, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{42, 0})
	big := e.dial(256)
	check("I/O sqsize beyond MQES", big.connect(1, 255, 0, cntlid, subNQN, hostNQN),
		nvmeproto.StatusConnectInvalidParameters, &ipo{44, 0})
	expectOK(t, "I/O connect", q1.connect(1, 127, 0, cntlid, subNQN, hostNQN))
	check("I/O connect again on the queue", q1.connect(1, 127, 0, cntlid, subNQN, hostNQN), nvmeproto.StatusCommandSequenceError, nil)
	q1b := e.dial(128)
	check("I/O connect to a connected qid", q1b.connect(1, 127, 0, cntlid, subNQN, hostNQN), nvmeproto.StatusCommandSequenceError, nil)
	check("number of queues after I/O queues exist", h.setFeature(0x07, 1|1<<16, nil), nvmeproto.StatusCommandSequenceError, nil)
	expectOK(t, "I/O connect qid 2", q1b.connect(2, 127, 0, cntlid, subNQN, hostNQN))

	// A controller ID is unique: a second admin connect gets another one.
	h2 := e.dial(32)
	c = h2.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN)
	expectOK(t, "second controller", c)
	if uint16(c.DW0) == cntlid {
		t.Errorf("two controllers share cntlid %d", cntlid)
	}
}

// TestNonStandardNQNs: a subsystem and a host named outside the NVMe NQN form (as the
// Linux target allows: blktests' "blktests-subsystem-1", "testnqn") connect and work; a
// host of the allow list connects, another does not.
func TestNonStandardNQNs(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Subsystems[0].NQN = "blktests-subsystem-1"
	cfg.Subsystems[0].AllowAnyHost = false
	cfg.Subsystems[0].Hosts = []string{"testhost"}
	e := newEnv(t, cfg)
	h, _ := e.adminConnect("blktests-subsystem-1", "testhost", 0)
	buf, c := h.identify(nvmeproto.CNSController, 0, 0)
	expectOK(t, "identify controller", c)
	var id nvmeproto.IdentifyController
	if err := id.Unmarshal(buf); err != nil {
		t.Fatal(err)
	}
	if id.SubNQN != "blktests-subsystem-1" {
		t.Errorf("SUBNQN %q", id.SubNQN)
	}
	o := e.dial(32)
	expect(t, "connect from a host not listed", o.connect(0, 31, 0, 0xFFFF, "blktests-subsystem-1", "otherhost"),
		nvmeproto.StatusConnectInvalidParameters)
}

// TestConnectRefusalsLookAlike: every host the subsystem does not admit — not in its
// hosts list, or without a secret where authentication is required — gets the answer an
// unknown subsystem gets, so no host can find out which subsystems exist.
func TestConnectRefusalsLookAlike(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithAuthKeys(oneHostKeys{nil})) // required, nobody has a key
	h := e.dial(32)
	unknown := h.connect(0, 31, 0, 0xFFFF, "nqn.2024-01.io.gonvmf:nope", hostNQN)
	noSecret := h.connect(0, 31, 0, 0xFFFF, subNQN, hostNQN)
	expect(t, "unknown subsystem", unknown, nvmeproto.StatusConnectInvalidParameters)
	if noSecret.Status != unknown.Status || noSecret.DW0 != unknown.DW0 {
		t.Errorf("host without a secret where authentication is required: %v dw0 %#x; unknown subsystem: %v dw0 %#x",
			noSecret.Status, noSecret.DW0, unknown.Status, unknown.DW0)
	}
}

// TestIOConnectOtherPort: an I/O queue must connect through the port (listener) of its
// controller's admin queue — the controller reports that port's ANA states and
// capabilities. One arriving through another port is refused with Connect Invalid
// Parameters pointing at QID (as SPDK refuses it); the refusal neither takes the qid
// nor disturbs the controller, whose admin queue and same-port I/O queues keep working.
func TestIOConnectOtherPort(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	other := e.secondPort(loop.Options{})
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	expectOK(t, "number of queues", admin.setFeature(0x07, 1|1<<16, nil))

	foreign := other.dial(8)
	c := foreign.connect(1, 7, 0, cntlid, subNQN, hostNQN)
	expect(t, "I/O connect through another port", c, nvmeproto.StatusConnectInvalidParameters)
	if !c.Status.DNR() {
		t.Errorf("I/O connect through another port: %v without DNR", c.Status)
	}
	if off, iattr := nvmeproto.ParseConnectInvalidParamDW0(c.DW0); off != nvmeproto.ConnectSQEOffQID || iattr != nvmeproto.ConnectIAttrSQE {
		t.Errorf("I/O connect through another port: IPO %d IATTR %d, want %d (QID) %d (SQE)",
			off, iattr, nvmeproto.ConnectSQEOffQID, nvmeproto.ConnectIAttrSQE)
	}
	if n := e.tgt.ConnectRejects()[target.RejectInvalidParameters]; n != 1 {
		t.Errorf("invalid parameters rejects %d, want 1", n)
	}

	// The qid the refused queue named is still free on the controller's own port.
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expectOK(t, "write through the admin queue's port", e.ioConnect(1, cntlid, 8).do(&w, make([]byte, 512)))
	_, c = admin.identify(nvmeproto.CNSController, 0, 0)
	expectOK(t, "identify after the refusal", c)
	// The other port serves controllers of its own.
	otherAdmin, otherID := other.adminConnect(subNQN, hostNQN, 0)
	expectOK(t, "number of queues on the other port", otherAdmin.setFeature(0x07, 1|1<<16, nil))
	r := rw(nvmeproto.OpRead, 1, 0, 1, 512)
	expectOK(t, "read through the other port's controller", other.ioConnect(1, otherID, 8).do(&r, make([]byte, 512)))
}
