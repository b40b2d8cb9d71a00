package nvmeproto

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Reference §3: Connect SQE 40 recfmt · 42 qid · 44 sqsize · 46 cattr · 48 kato.
func TestConnectCommandGolden(t *testing.T) {
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpFabrics
		b[4] = byte(FabricsConnect)
		put(b, 40, 2, 0x0102)
		put(b, 42, 2, 0x0304)
		put(b, 44, 2, 0x0506)
		put(b, 46, 1, 0x07)
		put(b, 48, 4, 0x0a0b0c0d)
	})
	var c ConnectCommand
	c.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"opcode@0", uint64(cmd.Opcode), 0x7F},
		{"fctype@4", uint64(cmd.FabricsType()), 0x01},
		{"recfmt@40", uint64(c.RecFmt), 0x0102},
		{"qid@42", uint64(c.QID), 0x0304},
		{"sqsize@44", uint64(c.SQSize), 0x0506},
		{"cattr@46", uint64(c.CAttr), 0x07},
		{"kato@48", uint64(c.KATO), 0x0a0b0c0d},
	})
	if !c.DisableSQFlowControl() {
		t.Error("cattr 0x07 has bit 2 (disable SQ flow control) set")
	}
	var back Command
	c.ToCommand(&back)
	if got := marshalSQE(&back); !bytes.Equal(got, raw) {
		t.Errorf("ToCommand encoding\n got %x\nwant %x", got, raw)
	}
	if ConnectSQEOffQID != 42 || ConnectSQEOffSQSize != 44 || ConnectSQEOffKATO != 48 ||
		ConnectSQEOffRecFmt != 40 || ConnectSQEOffCAttr != 46 {
		t.Error("ConnectSQEOff* constants disagree with the reference")
	}
}

// Reference §3: Connect data 0..15 hostid · 16 cntlid · 256..511 subnqn · 512..767 hostnqn.
func TestConnectDataGolden(t *testing.T) {
	d := ConnectData{
		HostID:  [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		CNTLID:  CNTLIDDynamic,
		SubNQN:  "nqn.2024-01.io.gonvmf:sub1",
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
	}
	b := bytes.Repeat([]byte{0xAA}, ConnectDataSize+8)
	d.Marshal(b)
	wantBytes(t, "hostid@0", b, 0, d.HostID[:])
	wantLE(t, "cntlid@16", b, 16, 2, 0xFFFF)
	wantBytes(t, "subnqn@256", b, 256, append([]byte(d.SubNQN), 0))
	wantBytes(t, "hostnqn@512", b, 512, append([]byte(d.HostNQN), 0))
	wantBytes(t, "reserved@18..255", b, 18, make([]byte, 238))
	wantBytes(t, "reserved@768..1023", b, 768, make([]byte, 256))
	if b[ConnectDataSize] != 0xAA {
		t.Error("Marshal wrote past 1024 bytes")
	}
	var got ConnectData
	if err := got.Unmarshal(b); err != nil || got != d {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if ConnectDataOffCNTLID != 16 || ConnectDataOffSubNQN != 256 || ConnectDataOffHostNQN != 512 || ConnectDataOffHostID != 0 {
		t.Error("ConnectDataOff* constants disagree with the reference")
	}
}

func TestConnectDataErrors(t *testing.T) {
	var d ConnectData
	var es *ErrShort
	if err := d.Unmarshal(make([]byte, 1023)); !errors.As(err, &es) {
		t.Errorf("short data: %v", err)
	}
	b := make([]byte, ConnectDataSize)
	for i := 256; i < 512; i++ {
		b[i] = 'x'
	}
	var fe *FieldError
	if err := d.Unmarshal(b); !errors.As(err, &fe) || fe.Offset != 256 {
		t.Errorf("unterminated subnqn: %v", err)
	}
	clear(b[256:512])
	for i := 512; i < 768; i++ {
		b[i] = 'y'
	}
	if err := d.Unmarshal(b); !errors.As(err, &fe) || fe.Offset != 512 {
		t.Errorf("unterminated hostnqn: %v", err)
	}
	// A 255-byte NQN is truncated on encode so the terminator survives.
	long := ConnectData{SubNQN: strings.Repeat("s", 300)}
	long.Marshal(b)
	if err := d.Unmarshal(b); err != nil || len(d.SubNQN) != 255 {
		t.Errorf("long nqn: len %d, %v", len(d.SubNQN), err)
	}
}

func TestConnectDW0(t *testing.T) {
	if got := ConnectSuccessDW0(0x1234, AuthReqATR); got != 0x00021234 {
		t.Errorf("success dw0 %#x", got)
	}
	if c, a := ParseConnectSuccessDW0(0x00061234); c != 0x1234 || a != AuthReqATR|AuthReqASCR {
		t.Errorf("parse success %#x %#x", c, a)
	}
	// Kernel: NVME_CONNECT_AUTHREQ_ATR is bit 17 and ASCR bit 18 of DW0.
	if ConnectSuccessDW0(0, AuthReqATR) != 1<<17 || ConnectSuccessDW0(0, AuthReqASCR) != 1<<18 {
		t.Error("AUTHREQ bits")
	}
	if got := ConnectInvalidParamDW0(ConnectDataOffSubNQN, ConnectIAttrData); got != 0x00010100 {
		t.Errorf("invalid param dw0 %#x", got)
	}
	if ipo, ia := ParseConnectInvalidParamDW0(0x0001002a); ipo != 42 || ia != 1 {
		t.Errorf("parse invalid %d %d", ipo, ia)
	}
}

// Reference §3: Property Get/Set 40 attrib · 44 offset · Set value at 48..55.
func TestPropertyCommandsGolden(t *testing.T) {
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpFabrics
		b[4] = byte(FabricsPropertySet)
		b[40] = PropAttribSize8
		put(b, 44, 4, PropCAP)
		put(b, 48, 8, 0x1122334455667788)
	})
	var s PropertySetCommand
	s.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"set.attrib@40", uint64(s.Attrib), 1},
		{"set.offset@44", uint64(s.Offset), 0},
		{"set.value@48", s.Value, 0x1122334455667788},
		{"set.size", uint64(s.Size()), 8},
	})
	var back Command
	s.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("Property Set ToCommand encoding differs")
	}

	raw, cmd = sqe(t, func(b []byte) {
		b[0] = OpFabrics
		b[4] = byte(FabricsPropertyGet)
		b[40] = PropAttribSize4
		put(b, 44, 4, PropCSTS)
	})
	var g PropertyGetCommand
	g.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"get.attrib@40", uint64(g.Attrib), 0},
		{"get.offset@44", uint64(g.Offset), 0x1C},
		{"get.size", uint64(g.Size()), 4},
	})
	back = Command{}
	g.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("Property Get ToCommand encoding differs")
	}
	if (&PropertyGetCommand{Attrib: 2}).Size() != 0 {
		t.Error("reserved attrib size")
	}
}

// Reference §3: Properties 0x00 CAP (8 B) · 0x08 VS · 0x14 CC · 0x1C CSTS · 0x20 NSSR · 0x68 CRTO.
func TestPropertyOffsets(t *testing.T) {
	runChecks(t, []offsetCheck{
		{"CAP@0x00", PropCAP, 0x00}, {"VS@0x08", PropVS, 0x08}, {"CC@0x14", PropCC, 0x14},
		{"CSTS@0x1C", PropCSTS, 0x1C}, {"NSSR@0x20", PropNSSR, 0x20}, {"CRTO@0x68", PropCRTO, 0x68},
		{"size(CAP)", uint64(PropertySize(PropCAP)), 8}, {"size(CC)", uint64(PropertySize(PropCC)), 4},
		{"size(VS)", uint64(PropertySize(PropVS)), 4}, {"size(CSTS)", uint64(PropertySize(PropCSTS)), 4},
		{"size(0x04)", uint64(PropertySize(0x04)), 0},
	})
	if PropertyName(PropCSTS) != "CSTS" || PropertyName(0x99) == "" {
		t.Error("PropertyName")
	}
}

func TestCAPFields(t *testing.T) {
	c := CAP(0).WithMQES(1023).WithCQR(true).WithAMS(CAPAMSWeightedRoundRobin).WithTO(15).
		WithDSTRD(2).WithNSSRS(true).WithCSS(CAPCSSNVM | CAPCSSIOCS).WithBPS(true).WithCPS(1).
		WithMPSMIN(0).WithMPSMAX(4).WithPMRS(true).WithCMBS(true).WithNSSS(true).WithCRMS(CAPCRMSWithMedia)
	// Bit positions from the NVMe base specification (and kernel NVME_CAP_* macros).
	want := uint64(1023) | 1<<16 | 1<<17 | 15<<24 | 2<<32 | 1<<36 | uint64(0x41)<<37 | 1<<45 | 1<<46 |
		0<<48 | 4<<52 | 1<<56 | 1<<57 | 1<<58 | 1<<59
	if uint64(c) != want {
		t.Fatalf("CAP %#x, want %#x", uint64(c), want)
	}
	runChecks(t, []offsetCheck{
		{"MQES bits 15:0", uint64(c.MQES()), 1023}, {"CQR bit 16", b64(c.CQR()), 1},
		{"AMS bits 18:17", uint64(c.AMS()), 1}, {"TO bits 31:24", uint64(c.TO()), 15},
		{"DSTRD bits 35:32", uint64(c.DSTRD()), 2}, {"NSSRS bit 36", b64(c.NSSRS()), 1},
		{"CSS bits 44:37 (NVM = bit 37)", uint64(c.CSS()), 0x41}, {"BPS bit 45", b64(c.BPS()), 1},
		{"CPS bits 47:46", uint64(c.CPS()), 1}, {"MPSMIN bits 51:48", uint64(c.MPSMIN()), 0},
		{"MPSMAX bits 55:52", uint64(c.MPSMAX()), 4}, {"PMRS bit 56", b64(c.PMRS()), 1},
		{"CMBS bit 57", b64(c.CMBS()), 1}, {"NSSS bit 58", b64(c.NSSS()), 1}, {"CRMS bits 60:59", uint64(c.CRMS()), 1},
		{"timeout ms", uint64(c.Timeout()), 7500}, {"min page", uint64(c.MinPageSize()), 4096},
		{"max page", uint64(c.MaxPageSize()), 65536},
	})
	if CAP(0).WithCSS(CAPCSSNVM) != 1<<37 {
		t.Error("reference: CSS bit 37 (NVM)")
	}
	// With* replaces only its field.
	if c.WithMQES(0).WithTO(0) != CAP(want&^0xFF00FFFF) {
		t.Error("With* clobbered other fields")
	}
	_ = c.String()
}

func b64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func TestCCCSTSVSFields(t *testing.T) {
	cc := CC(0).WithEN(true).WithCSS(CCCSSAllIOCS).WithMPS(1).WithAMS(CCAMSVendor).WithSHN(CCSHNAbrupt).
		WithIOSQES(IOSQESNVM).WithIOCQES(IOCQESNVM).WithCRIME(true)
	if want := uint32(1 | 6<<4 | 1<<7 | 7<<11 | 2<<14 | 6<<16 | 4<<20 | 1<<24); uint32(cc) != want {
		t.Fatalf("CC %#x want %#x", uint32(cc), want)
	}
	runChecks(t, []offsetCheck{
		{"EN bit 0", b64(cc.EN()), 1}, {"CSS bits 6:4", uint64(cc.CSS()), 6}, {"MPS bits 10:7", uint64(cc.MPS()), 1},
		{"AMS bits 13:11", uint64(cc.AMS()), 7}, {"SHN bits 15:14", uint64(cc.SHN()), 2},
		{"IOSQES bits 19:16", uint64(cc.IOSQES()), 6}, {"IOCQES bits 23:20", uint64(cc.IOCQES()), 4},
		{"CRIME bit 24", b64(cc.CRIME()), 1}, {"page size", uint64(cc.PageSize()), 8192},
	})
	// The Linux host enables with EN=1, IOSQES=6, IOCQES=4: 0x00460001.
	if CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4) != 0x00460001 {
		t.Error("Linux host CC value")
	}
	cs := CSTS(0).WithRDY(true).WithCFS(true).WithSHST(CSTSSHSTComplete).WithNSSRO(true).WithPP(true).WithST(true)
	if uint32(cs) != 1|2|2<<2|1<<4|1<<5|1<<6 {
		t.Fatalf("CSTS %#x", uint32(cs))
	}
	runChecks(t, []offsetCheck{
		{"RDY bit 0", b64(cs.RDY()), 1}, {"CFS bit 1", b64(cs.CFS()), 1}, {"SHST bits 3:2", uint64(cs.SHST()), 2},
		{"NSSRO bit 4", b64(cs.NSSRO()), 1}, {"PP bit 5", b64(cs.PP()), 1}, {"ST bit 6", b64(cs.ST()), 1},
	})
	if cs.WithRDY(false).RDY() || !cs.WithRDY(false).CFS() {
		t.Error("WithRDY(false)")
	}
	v := MakeVS(1, 4, 2)
	if v != 0x00010402 || v.Major() != 1 || v.Minor() != 4 || v.Tertiary() != 2 || v.String() != "1.4.2" || VS1_3 != MakeVS(1, 3, 0) {
		t.Errorf("VS %v", v)
	}
	cr := MakeCRTO(0x10, 0x20)
	if cr != 0x00200010 || cr.CRWMT() != 0x10 || cr.CRIMT() != 0x20 {
		t.Error("CRTO")
	}
	_, _ = cc.String(), cs.String()
}

func TestDisconnectAuthGolden(t *testing.T) {
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpFabrics
		b[4] = byte(FabricsDisconnect)
		put(b, 40, 2, 0x1234) // RECFMT (0 on the wire; another value pins the offset)
	})
	var d DisconnectCommand
	d.FromCommand(cmd)
	var back Command
	d.ToCommand(&back)
	if d.RecFmt != 0x1234 || !bytes.Equal(marshalSQE(&back), raw) {
		t.Errorf("Disconnect: RECFMT %#x, want 0x1234 (bytes 40..41); re-encoded equal %v", d.RecFmt, bytes.Equal(marshalSQE(&back), raw))
	}

	// Kernel nvmf_auth_send_command: 41 spsp0 · 42 spsp1 · 43 secp · 44 tl.
	raw, cmd = sqe(t, func(b []byte) {
		b[0] = OpFabrics
		b[4] = byte(FabricsAuthSend)
		b[41], b[42], b[43] = AuthSPSP0, AuthSPSP1, AuthSECPDHHMACCHAP
		put(b, 44, 4, 0x1234)
	})
	var as AuthSendCommand
	as.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"send.spsp0@41", uint64(as.SPSP0), 1}, {"send.spsp1@42", uint64(as.SPSP1), 1},
		{"send.secp@43", uint64(as.SECP), 0xE9}, {"send.tl@44", uint64(as.TL), 0x1234},
	})
	back = Command{}
	as.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("Auth Send encoding")
	}
	raw, cmd = sqe(t, func(b []byte) {
		b[0] = OpFabrics
		b[4] = byte(FabricsAuthReceive)
		b[41], b[42], b[43] = 2, 3, 4
		put(b, 44, 4, 0xabcd)
	})
	var ar AuthReceiveCommand
	ar.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"recv.spsp0@41", uint64(ar.SPSP0), 2}, {"recv.spsp1@42", uint64(ar.SPSP1), 3},
		{"recv.secp@43", uint64(ar.SECP), 4}, {"recv.al@44", uint64(ar.AL), 0xabcd},
	})
	back = Command{}
	ar.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) || back.DataDirection() != DirCtrlToHost {
		t.Error("Auth Receive encoding")
	}

	h := AuthMessageHeader{AuthType: AuthTypeDHHMACCHAP, AuthID: AuthMsgChallenge, TID: 0x0102}
	hb := make([]byte, AuthMessageHeaderSize)
	h.Marshal(hb)
	if !bytes.Equal(hb, []byte{1, 1, 0, 0, 2, 1}) {
		t.Errorf("auth header %x", hb)
	}
	var h2 AuthMessageHeader
	if err := h2.Unmarshal(hb); err != nil || h2 != h {
		t.Error("auth header round trip")
	}
	if h2.Unmarshal(hb[:5]) == nil {
		t.Error("short auth header accepted")
	}
}

func TestCheckNQN(t *testing.T) {
	portable := []string{DiscoveryNQN, "nqn.2024-01.io.gonvmf:sub1", "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
		"nqn.2016-06.io.spdk:cnode1", "nqn." + "2020-01.a" + strings.Repeat("b", MaxNQNLen-13)}
	// What the Linux host and target accept, and SPDK does not.
	usable := []string{"testnqn", "blktests-subsystem-1", "iqn.2020-01.com.x", "nqn.20-01.x", "nqn.2020-01.",
		"nqn.2014-08.org.nvmexpress:uuid:xyz", "a b/ü", strings.Repeat("x", MaxNQNLen)}
	broken := []string{"", "nqn.2020-01.a" + strings.Repeat("b", MaxNQNLen), "nqn.2020-01.a\x00b", "test\nnqn", "x\x7f",
		strings.Repeat("x", MaxNQNLen+1)}
	for _, s := range portable {
		if err := CheckNQN(s); err != nil {
			t.Errorf("CheckNQN(%q): %v", s, err)
		}
		if err := PortableNQN(s); err != nil {
			t.Errorf("PortableNQN(%q): %v", s, err)
		}
	}
	for _, s := range usable {
		if err := CheckNQN(s); err != nil {
			t.Errorf("CheckNQN(%q): %v", s, err)
		}
		if err := PortableNQN(s); err == nil {
			t.Errorf("PortableNQN(%q) accepted", s)
		}
	}
	for _, s := range broken {
		if err := CheckNQN(s); err == nil {
			t.Errorf("CheckNQN(%q) accepted", s)
		}
		if err := PortableNQN(s); err == nil {
			t.Errorf("PortableNQN(%q) accepted", s)
		}
	}
}
