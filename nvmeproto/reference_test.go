package nvmeproto

import (
	"bytes"
	"strings"
	"testing"
)

// TestReference walks the team's protocol reference, ../shared/ref/nvmeof-rdma.md (the
// facts a target must get right, checked against the Linux and SPDK headers), section by
// section. Each subtest is named "§<section>/<field>@<offset>" so a reader can tick the
// reference off line by line. Offsets are checked on the encoding this package produces;
// the per-structure tests also check the decoders at the same offsets.
func TestReference(t *testing.T) {
	t.Run("§1", testRef1)
	t.Run("§2", testRef2)
	t.Run("§3", testRef3)
	t.Run("§4", testRef4)
	t.Run("§5", testRef5)
	t.Run("§6", testRef6)
	t.Run("§7", testRef7)
	t.Run("§8", testRef8)
}

func eq(t *testing.T, name string, got, want uint64) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		if got != want {
			t.Errorf("got %#x, want %#x", got, want)
		}
	})
}

// §1 Transport binding: port, CM private data REQ/REP/REJ, reject codes, queue sizing.
func testRef1(t *testing.T) {
	eq(t, "default port 4420", DefaultRDMAPort, 4420)
	req := bytes.Repeat([]byte{0xA5}, RDMAConnReqSize) // reused buffers: reserved bytes are written
	(&RDMAConnReq{RecFmt: 0, QID: 0x0102, HRQSize: 32, HSQSize: 31, CNTLID: 0x0304}).Marshal(req)
	eq(t, "REQ size 32", RDMAConnReqSize, 32)
	eq(t, "REQ recfmt@0 (must be 0)", get(req, 0, 2), 0)
	eq(t, "REQ qid@2", get(req, 2, 2), 0x0102)
	eq(t, "REQ hrqsize@4", get(req, 4, 2), 32)
	eq(t, "REQ hsqsize@6 (0's based)", get(req, 6, 2), 31)
	eq(t, "REQ cntlid@8", get(req, 8, 2), 0x0304)
	for i := 10; i < 32; i++ {
		if req[i] != 0 {
			t.Errorf("REQ reserved byte %d = %#x", i, req[i])
		}
	}
	var r RDMAConnReq
	if err := r.Unmarshal(append(req, make([]byte, 24)...)); err != nil {
		t.Errorf("REQ with padding beyond 32 bytes: %v", err)
	}
	rep := bytes.Repeat([]byte{0xA5}, RDMAConnRepSize)
	(&RDMAConnRep{CRQSize: 0x0506}).Marshal(rep)
	eq(t, "REP size 32", RDMAConnRepSize, 32)
	eq(t, "REP recfmt@0", get(rep, 0, 2), 0)
	eq(t, "REP crqsize@2", get(rep, 2, 2), 0x0506)
	eq(t, "REP reserved@4..31", get(rep, 4, 8)|get(rep, 12, 8)|get(rep, 20, 8)|get(rep, 28, 4), 0)
	rej := make([]byte, RDMAConnRejSize)
	(&RDMAConnRej{Status: RDMARejectInvalidHSQSize}).Marshal(rej)
	eq(t, "REJ size 4", RDMAConnRejSize, 4)
	eq(t, "REJ recfmt@0", get(rej, 0, 2), 0)
	eq(t, "REJ sts@2", get(rej, 2, 2), 4)
	for name, c := range map[string]struct {
		s RDMARejectStatus
		v uint64
	}{
		"INVALID_LEN": {RDMARejectInvalidLen, 1}, "INVALID_RECFMT": {RDMARejectInvalidRecFmt, 2}, "INVALID_QID": {RDMARejectInvalidQID, 3},
		"INVALID_HSQSIZE": {RDMARejectInvalidHSQSize, 4}, "INVALID_HRQSIZE": {RDMARejectInvalidHRQSize, 5}, "NO_RSC": {RDMARejectNoResources, 6},
		"INVALID_IRD": {RDMARejectInvalidIRD, 7}, "INVALID_ORD": {RDMARejectInvalidORD, 8}, "INVALID_CNTLID": {RDMARejectInvalidCNTLID, 9},
	} {
		eq(t, "reject "+name, uint64(c.s), c.v)
	}
}

// §2 Capsules: SQE, CQE, SQ flow control, SGL descriptor.
func testRef2(t *testing.T) {
	eq(t, "SQE 64 bytes", SQESize, 64)
	eq(t, "CQE 16 bytes (iorcsz 1)", CQESize, 16)
	c := Command{Opcode: 0x02, Flags: PSDTSGL << 6, CID: 0x0304, NSID: 0x05060708, MPTR: 0x1112131415161718,
		SGL:   SGLDescriptor{Address: 0x2122232425262728, Length: 0x2A2B2C, Key: 0x2D2E2F30, Type: SGLTypeKeyedDataBlock},
		CDW10: 0x41, CDW11: 0x42, CDW12: 0x43, CDW13: 0x44, CDW14: 0x45, CDW15: 0x46}
	b := make([]byte, SQESize)
	c.Marshal(b)
	eq(t, "SQE opcode@0", get(b, 0, 1), 0x02)
	eq(t, "SQE flags@1 PSDT bits 7:6 = 01b (SGL)", get(b, 1, 1)>>6, 1)
	eq(t, "SQE cid@2", get(b, 2, 2), 0x0304)
	eq(t, "SQE nsid@4", get(b, 4, 4), 0x05060708)
	eq(t, "SQE mptr@16", get(b, 16, 8), 0x1112131415161718)
	eq(t, "SQE sgl1@24 address", get(b, 24, 8), 0x2122232425262728)
	eq(t, "SQE sgl1@39 identifier", get(b, 39, 1), 0x40)
	for i, off := range []int{40, 44, 48, 52, 56, 60} {
		eq(t, "SQE cdw"+itoa(10+i)+"@"+itoa(off), get(b, off, 4), uint64(0x41+i))
	}

	cq := Completion{DW0: 0x01020304, DW1: 0x05060708, SQHD: 0x090A, SQID: 0x0B0C, CID: 0x0D0E,
		Status: MakeStatus(SCTCommandSpecific, 0x82) | 1<<11 | 1<<13 | 1<<14}
	cb := make([]byte, CQESize)
	cq.Marshal(cb)
	eq(t, "CQE dw0@0", get(cb, 0, 4), 0x01020304)
	eq(t, "CQE dw1@4", get(cb, 4, 4), 0x05060708)
	eq(t, "CQE sqhd@8", get(cb, 8, 2), 0x090A)
	eq(t, "CQE sqid@10", get(cb, 10, 2), 0x0B0C)
	eq(t, "CQE cid@12", get(cb, 12, 2), 0x0D0E)
	st := get(cb, 14, 2)
	eq(t, "CQE status@14 bit 0 phase (0 on fabrics)", st&1, 0)
	eq(t, "CQE status@14 bits 8:1 SC", st>>1&0xFF, 0x82)
	eq(t, "CQE status@14 bits 11:9 SCT", st>>9&7, 1)
	eq(t, "CQE status@14 bits 13:12 CRD", st>>12&3, 1)
	eq(t, "CQE status@14 bit 14 MORE", st>>14&1, 1)
	eq(t, "CQE status@14 bit 15 DNR", st>>15, 1)
	eq(t, "SQ flow control disabled by Connect cattr bit 2", ConnectCAttrDisableSQFlow, 1<<2)

	k := make([]byte, SGLDescSize)
	(&SGLDescriptor{Address: 0x0102030405060708, Length: 0x0A0B0C, Key: 0x11121314, Type: SGLTypeKeyedDataBlock, Subtype: SGLSubtypeInvalidate}).Marshal(k)
	eq(t, "SGL address@0..7", get(k, 0, 8), 0x0102030405060708)
	eq(t, "SGL keyed length@8..10 (24-bit)", get(k, 8, 3), 0x0A0B0C)
	eq(t, "SGL keyed key@11..14", get(k, 11, 4), 0x11121314)
	eq(t, "SGL id@15 type<<4|subtype", get(k, 15, 1), 0x4F)
	u := make([]byte, SGLDescSize)
	(&SGLDescriptor{Address: 0x40, Length: 0xA1A2A3A4, Type: SGLTypeDataBlock, Subtype: SGLSubtypeOffset}).Marshal(u)
	eq(t, "SGL unkeyed length@8..11", get(u, 8, 4), 0xA1A2A3A4)
	eq(t, "SGL unkeyed id@15 = 0x01 (in-capsule data)", get(u, 15, 1), 0x01)
	eq(t, "type 0 Data Block", uint64(SGLTypeDataBlock), 0)
	eq(t, "type 2 Segment", uint64(SGLTypeSegment), 2)
	eq(t, "type 3 Last Segment", uint64(SGLTypeLastSegment), 3)
	eq(t, "type 4 Keyed Data Block", uint64(SGLTypeKeyedDataBlock), 4)
	eq(t, "type 5 Transport Data Block", uint64(SGLTypeTransportDataBlock), 5)
	eq(t, "subtype 0x0 Address", uint64(SGLSubtypeAddress), 0)
	eq(t, "subtype 0x1 Offset", uint64(SGLSubtypeOffset), 1)
	eq(t, "subtype 0xA Transport", uint64(SGLSubtypeTransport), 0xA)
	eq(t, "subtype 0xF Invalidate", uint64(SGLSubtypeInvalidate), 0xF)
	eq(t, "0x40 keyed/address", uint64(SGLIDKeyedAddress), 0x40)
	eq(t, "0x4F keyed/invalidate", uint64(SGLIDKeyedInvalidate), 0x4F)
	eq(t, "0x01 data block/offset", uint64(SGLIDDataOffset), 0x01)
	eq(t, "0x31 last segment/offset", uint64(SGLIDLastSegOffset), 0x31)
	z := make([]byte, SGLDescSize)
	(&SGLDescriptor{Type: SGLTypeKeyedDataBlock}).Marshal(z)
	eq(t, "no data: keyed length 0 key 0", get(z, 8, 7), 0)
}

// §3 Fabrics commands.
func testRef3(t *testing.T) {
	eq(t, "fabrics opcode 0x7F", uint64(OpFabrics), 0x7F)
	for name, c := range map[string]struct {
		f FabricsType
		v uint64
	}{"Property Set 0x00": {FabricsPropertySet, 0}, "Connect 0x01": {FabricsConnect, 1}, "Property Get 0x04": {FabricsPropertyGet, 4},
		"Authentication Send 0x05": {FabricsAuthSend, 5}, "Authentication Receive 0x06": {FabricsAuthReceive, 6}, "Disconnect 0x08": {FabricsDisconnect, 8}} {
		eq(t, "fctype "+name, uint64(c.f), c.v)
	}
	var c Command
	(&ConnectCommand{RecFmt: 0, QID: 0x0102, SQSize: 0x0304, CAttr: 0x05, KATO: 0x06070809}).ToCommand(&c)
	b := make([]byte, SQESize)
	c.Marshal(b)
	eq(t, "fctype@4", get(b, 4, 1), 1)
	eq(t, "Connect recfmt@40", get(b, 40, 2), 0)
	eq(t, "Connect qid@42", get(b, 42, 2), 0x0102)
	eq(t, "Connect sqsize@44", get(b, 44, 2), 0x0304)
	eq(t, "Connect cattr@46", get(b, 46, 1), 0x05)
	eq(t, "Connect kato@48 (u32 ms)", get(b, 48, 4), 0x06070809)

	d := make([]byte, ConnectDataSize)
	(&ConnectData{HostID: [16]byte{0: 0xA0, 15: 0xAF}, CNTLID: 0xFFFF, SubNQN: "nqn.s", HostNQN: "nqn.h"}).Marshal(d)
	eq(t, "Connect data 1024 bytes", ConnectDataSize, 1024)
	eq(t, "Connect data hostid@0", get(d, 0, 1), 0xA0)
	eq(t, "Connect data hostid@15", get(d, 15, 1), 0xAF)
	eq(t, "Connect data cntlid@16 (0xFFFF allocate)", get(d, 16, 2), 0xFFFF)
	eq(t, "Connect data subnqn@256", get(d, 256, 6), uint64(get([]byte("nqn.s\x00"), 0, 6)))
	eq(t, "Connect data hostnqn@512 (NUL-terminated)", get(d, 512, 6), uint64(get([]byte("nqn.h\x00"), 0, 6)))

	eq(t, "Connect dw0 cntlid bits 15:0", uint64(ConnectSuccessDW0(0x1234, 0)), 0x1234)
	eq(t, "Connect dw0 authreq bits 31:16", uint64(ConnectSuccessDW0(0, 0x0006)), 0x00060000)
	eq(t, "Connect invalid dw0 IPO bits 15:0", uint64(ConnectInvalidParamDW0(42, 0)), 42)
	eq(t, "Connect invalid dw0 IATTR 0 = SQE", ConnectIAttrSQE, 0)
	eq(t, "Connect invalid dw0 IATTR 1 = data", uint64(ConnectInvalidParamDW0(0, ConnectIAttrData)), 0x10000)

	for name, c := range map[string]struct {
		s Status
		v uint64
	}{"0x80 incompatible format": {StatusConnectIncompatibleFormat, 0x80}, "0x81 controller busy": {StatusConnectControllerBusy, 0x81},
		"0x82 invalid parameters": {StatusConnectInvalidParameters, 0x82}, "0x83 restart discovery": {StatusConnectRestartDiscovery, 0x83},
		"0x84 invalid host": {StatusConnectInvalidHost, 0x84}, "0x85 invalid queue type": {StatusInvalidQueueType, 0x85}, "0x90 discovery restart": {StatusDiscoveryRestart, 0x90},
		"0x91 authentication required": {StatusAuthRequired, 0x91}} {
		eq(t, "status SCT 1 "+name, uint64(c.s), 0x100|c.v)
	}
	eq(t, "second Connect: Command Sequence Error", uint64(StatusCommandSequenceError), 0x0C)

	c = Command{}
	(&PropertySetCommand{Attrib: PropAttribSize8, Offset: PropCC, Value: 0x0102030405060708}).ToCommand(&c)
	c.Marshal(b)
	eq(t, "Property Set attrib@40 bit 0 (1 = 8 bytes)", get(b, 40, 1), 1)
	eq(t, "Property Set offset@44", get(b, 44, 4), 0x14)
	eq(t, "Property Set value@48..55", get(b, 48, 8), 0x0102030405060708)
	c = Command{}
	(&PropertyGetCommand{Attrib: PropAttribSize8, Offset: PropCAP}).ToCommand(&c)
	c.Marshal(b)
	eq(t, "Property Get attrib@40 (host reads CAP with attrib 1)", get(b, 40, 1), 1)
	eq(t, "Property Get offset@44", get(b, 44, 4), 0)
	eq(t, "Property Get attrib 0 = 4 bytes", uint64((&PropertyGetCommand{Attrib: 0}).Size()), 4)

	eq(t, "property CAP 0x00 (8 B)", PropCAP, 0x00)
	eq(t, "property CAP size 8", uint64(PropertySize(PropCAP)), 8)
	eq(t, "property VS 0x08", PropVS, 0x08)
	eq(t, "property CC 0x14", PropCC, 0x14)
	eq(t, "property CSTS 0x1C", PropCSTS, 0x1C)
	eq(t, "property NSSR 0x20", PropNSSR, 0x20)
	eq(t, "property CRTO 0x68", PropCRTO, 0x68)
	eq(t, "no doorbells/AQA/ASQ/ACQ on fabrics: PropertySize(0x1000)", uint64(PropertySize(0x1000)), 0)

	cp := CAP(0).WithMQES(127).WithCQR(true).WithTO(15).WithCSS(CAPCSSNVM).WithMPSMIN(0)
	eq(t, "CAP MQES bits 15:0 (0's based)", uint64(cp)&0xFFFF, 127)
	eq(t, "CAP CQR bit 16", uint64(cp)>>16&1, 1)
	eq(t, "CAP TO bits 31:24 (500 ms units, 15 usual)", uint64(cp)>>24&0xFF, 15)
	eq(t, "CAP CSS bit 37 (NVM)", uint64(cp)>>37&1, 1)
	eq(t, "CAP MPSMIN bits 51:48 = 0 (4 KiB)", uint64(cp)>>48&0xF, 0)
	eq(t, "CAP MPSMIN 0 = 4096-byte pages", uint64(cp.MinPageSize()), 4096)
	cc := CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)
	eq(t, "CC EN bit 0", uint64(cc)&1, 1)
	eq(t, "CC IOSQES=6 bits 19:16", uint64(cc)>>16&0xF, 6)
	eq(t, "CC IOCQES=4 bits 23:20", uint64(cc)>>20&0xF, 4)
	eq(t, "CC MPS=0 bits 10:7", uint64(cc)>>7&0xF, 0)
	eq(t, "CC AMS=0 bits 13:11", uint64(cc)>>11&7, 0)
	eq(t, "CC CSS bits 6:4", uint64(CC(0).WithCSS(7))>>4&7, 7)
	eq(t, "CC SHN bits 15:14", uint64(CC(0).WithSHN(CCSHNNormal))>>14&3, 1)
	cs := CSTS(0).WithRDY(true).WithCFS(true).WithSHST(CSTSSHSTComplete)
	eq(t, "CSTS RDY bit 0", uint64(cs)&1, 1)
	eq(t, "CSTS CFS bit 1", uint64(cs)>>1&1, 1)
	eq(t, "CSTS SHST bits 3:2 = complete (2)", uint64(cs)>>2&3, 2)
}

// §4 What the Linux host does: the identifiers it uses.
func testRef4(t *testing.T) {
	eq(t, "admin REQ hrqsize 32", 32, uint64((&RDMAConnReq{HRQSize: 32}).HRQSize))
	eq(t, "admin Connect cntlid 0xFFFF", CNTLIDDynamic, 0xFFFF)
	eq(t, "Identify Controller CNS 01h", uint64(CNSController), 0x01)
	eq(t, "Commands Supported and Effects log 05h", uint64(LIDCommandEffects), 0x05)
	eq(t, "ANA log 0Ch", uint64(LIDANA), 0x0C)
	eq(t, "CMIC.ANA bit 3", CMICANA, 1<<3)
	eq(t, "Identify CNS 06h", uint64(CNSCSController), 0x06)
	eq(t, "Set Features Timestamp 0Eh", uint64(FIDTimestamp), 0x0E)
	eq(t, "Set Features Host Behavior 16h", uint64(FIDHostBehaviorSupport), 0x16)
	eq(t, "SMART log 02h", uint64(LIDSMART), 0x02)
	eq(t, "Number of Queues FID 07h", uint64(FIDNumberOfQueues), 0x07)
	eq(t, "NSQA dw0 bits 15:0 / NCQA 31:16 (0's based)", uint64(MakeNumQueues(3, 4)), 0x00040003)
	eq(t, "Async Event Config FID 0Bh", uint64(FIDAsyncEventConfig), 0x0B)
	eq(t, "Async Event Request opcode 0Ch", uint64(OpAsyncEventRequest), 0x0C)
	eq(t, "Keep Alive opcode 18h", uint64(OpKeepAlive), 0x18)
	eq(t, "active NSID list CNS 02h", uint64(CNSActiveNSList), 0x02)
	eq(t, "Identify Namespace CNS 00h", uint64(CNSNamespace), 0x00)
	eq(t, "NS identification descriptors CNS 03h", uint64(CNSNSDescriptorList), 0x03)
	eq(t, "discovery log 70h", uint64(LIDDiscovery), 0x70)
	eq(t, "refuses without keyed SGLs: SGLS bit 2", SGLSKeyedDataBlock, 1<<2)
	eq(t, "inline writes need SGLS bit 20 (SAOS)", SGLSAddressAsOffset, 1<<20)
	eq(t, "inline capacity: (ioccsz*16 - 64) with ioccsz 4+n", uint64(4+256)*16-SQESize, 4096)
}

// §5 Identify Controller / Namespace / descriptors.
func testRef5(t *testing.T) {
	id := IdentifyController{VID: 0x0102, SSVID: 0x0304, SN: "SN", MN: "MN", FR: "FR", IEEE: [3]byte{0xA, 0xB, 0xC}, CMIC: 0x0D,
		MDTS: 0x0E, CNTLID: 0x1112, VER: 0x00010400, OAES: 0x21222324, CTRATT: 0x31323334, CNTRLTYPE: ControllerTypeDiscovery,
		ACL: 0x41, AERL: 0x42, LPA: 0x43, ELPE: 0x44, KAS: 0x5152, SQES: 0x66, CQES: 0x44, MAXCMD: 0x6162, NN: 0x71727374,
		ONCS: 0x8182, VWC: 0x07, SGLS: 0x91929394, SubNQN: "nqn.2024-01.x:y", IOCCSZ: 0xA1A2A3A4, IORCSZ: 0xB1B2B3B4,
		ICDOFF: 0xC1C2, FCATT: 0xD1, MSDBD: 0xE1}
	b := make([]byte, IdentifySize)
	id.Marshal(b)
	for _, c := range []struct {
		name      string
		off, size int
		want      uint64
	}{
		{"vid@0", 0, 2, 0x0102}, {"ssvid@2", 2, 2, 0x0304}, {"ieee@73", 73, 3, 0x0C0B0A}, {"cmic@76", 76, 1, 0x0D},
		{"mdts@77", 77, 1, 0x0E}, {"cntlid@78", 78, 2, 0x1112}, {"ver@80", 80, 4, 0x00010400}, {"oaes@92", 92, 4, 0x21222324},
		{"ctratt@96", 96, 4, 0x31323334}, {"cntrltype@111 (2 discovery)", 111, 1, 2}, {"acl@258", 258, 1, 0x41},
		{"aerl@259", 259, 1, 0x42}, {"lpa@261", 261, 1, 0x43}, {"elpe@262", 262, 1, 0x44}, {"kas@320", 320, 2, 0x5152},
		{"sqes@512 (0x66)", 512, 1, 0x66}, {"cqes@513 (0x44)", 513, 1, 0x44}, {"maxcmd@514", 514, 2, 0x6162},
		{"nn@516", 516, 4, 0x71727374}, {"oncs@520", 520, 2, 0x8182}, {"vwc@525", 525, 1, 0x07}, {"sgls@536", 536, 4, 0x91929394},
		{"ioccsz@1792", 1792, 4, 0xA1A2A3A4}, {"iorcsz@1796", 1796, 4, 0xB1B2B3B4}, {"icdoff@1800", 1800, 2, 0xC1C2},
		{"fcatt@1802", 1802, 1, 0xD1}, {"msdbd@1803", 1803, 1, 0xE1},
	} {
		eq(t, "Identify "+c.name, get(b, c.off, c.size), c.want)
	}
	eq(t, "Identify subnqn@768", get(b, 768, 8), get([]byte("nqn.2024"), 0, 8))
	eq(t, "Identify sn@4 (20 ASCII, space padded)", get(b, 4, 3), get([]byte("SN "), 0, 3))
	eq(t, "Identify sn@23 last byte space", get(b, 23, 1), ' ')
	eq(t, "Identify mn@24 (40)", get(b, 24, 3), get([]byte("MN "), 0, 3))
	eq(t, "Identify mn@63 last byte space", get(b, 63, 1), ' ')
	eq(t, "Identify fr@64 (8)", get(b, 64, 3), get([]byte("FR "), 0, 3))
	eq(t, "Identify fr@71 last byte space", get(b, 71, 1), ' ')
	eq(t, "cntrltype 1 = I/O", ControllerTypeIO, 1)
	eq(t, "kas in 100 ms units", uint64(RoundKATO(1, 1)), 100)

	n := IdentifyNamespace{NSZE: 0x0102030405060708, NCAP: 0x1112131415161718, NUSE: 0x2122232425262728, NSFEAT: 0x31,
		NLBAF: 1, FLBAS: 1, NMIC: 0x32, DLFEAT: DLFEATReadZeroes, NGUID: [16]byte{0: 0x41, 15: 0x4F}, EUI64: [8]byte{0: 0x51, 7: 0x58}}
	n.LBAF[0], n.LBAF[1] = LBAFormatFor(512), LBAFormatFor(4096)
	nb := make([]byte, IdentifySize)
	n.Marshal(nb)
	for _, c := range []struct {
		name      string
		off, size int
		want      uint64
	}{
		{"nsze@0", 0, 8, n.NSZE}, {"ncap@8", 8, 8, n.NCAP}, {"nuse@16", 16, 8, n.NUSE}, {"nsfeat@24", 24, 1, 0x31},
		{"nlbaf@25", 25, 1, 1}, {"flbas@26", 26, 1, 1}, {"nmic@30", 30, 1, 0x32}, {"dlfeat@33 (reads zeroes)", 33, 1, 1},
		{"nguid@104", 104, 1, 0x41}, {"nguid@119", 119, 1, 0x4F}, {"eui64@120", 120, 1, 0x51}, {"eui64@127", 127, 1, 0x58},
		{"lbaf0.lbads@130 = 9 (2^9 = 512)", 130, 1, 9}, {"lbaf1.lbads@134 = 12 (2^12 = 4096)", 134, 1, 12},
	} {
		eq(t, "Namespace "+c.name, get(nb, c.off, c.size), c.want)
	}

	l := NSDescriptorList{EUI64Descriptor([8]byte{1}), NGUIDDescriptor([16]byte{2}), UUIDDescriptor([16]byte{3}), CSIDescriptor(CSINVM)}
	db := make([]byte, IdentifySize)
	l.Marshal(db)
	eq(t, "CNS 03h type 1 EUI64 (8 B)@0", get(db, 0, 2), 0x0801)
	eq(t, "CNS 03h type 2 NGUID (16 B)@12", get(db, 12, 2), 0x1002)
	eq(t, "CNS 03h type 3 UUID (16 B)@32", get(db, 32, 2), 0x1003)
	eq(t, "CNS 03h type 4 CSI (1 B)@52", get(db, 52, 2), 0x0104)
}

// §6 Discovery.
func testRef6(t *testing.T) {
	t.Run("well-known NQN", func(t *testing.T) {
		if DiscoveryNQN != "nqn.2014-08.org.nvmexpress.discovery" || CheckNQN(DiscoveryNQN) != nil {
			t.Error(DiscoveryNQN)
		}
	})
	eq(t, "NQNs at most 223 bytes", MaxNQNLen, 223)
	t.Run("UUID host NQN form", func(t *testing.T) {
		if !strings.HasPrefix(UUIDNQNPrefix+"x", "nqn.2014-08.org.nvmexpress:uuid:") ||
			CheckNQN(UUIDNQNPrefix+"0f8fad5b-d9cb-469f-a165-70867728950e") != nil {
			t.Error(UUIDNQNPrefix)
		}
	})
	hb := make([]byte, DiscoveryLogHeaderSize)
	(&DiscoveryLogHeader{GenCtr: 0x0102030405060708, NumRec: 0x1112131415161718, RecFmt: 0x2122}).Marshal(hb)
	eq(t, "header 1024 bytes", DiscoveryLogHeaderSize, 1024)
	eq(t, "header genctr@0 u64", get(hb, 0, 8), 0x0102030405060708)
	eq(t, "header numrec@8 u64", get(hb, 8, 8), 0x1112131415161718)
	eq(t, "header recfmt@16 u16", get(hb, 16, 2), 0x2122)
	e := DiscoveryLogEntry{TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeNVMe, TReq: 0x04, PortID: 0x0506,
		CNTLID: 0xFFFF, ASQSZ: 32, EFlags: 0x0708, TrSvcID: "4420", SubNQN: "nqn.x", TrAddr: "10.0.0.1"}
	e.SetRDMA(RDMATSAS{QPType: RDMAQPTypeConnected, PrType: RDMAPrTypeNone, CMS: RDMACMSRDMACM, PKey: 0xABCD})
	eb := make([]byte, DiscoveryLogEntrySize)
	e.Marshal(eb)
	eq(t, "entry 1024 bytes", DiscoveryLogEntrySize, 1024)
	eq(t, "entry trtype@0 (1 RDMA)", get(eb, 0, 1), 1)
	eq(t, "trtype 3 TCP", uint64(TrTypeTCP), 3)
	eq(t, "entry adrfam@1 (1 IPv4)", get(eb, 1, 1), 1)
	eq(t, "adrfam 2 IPv6", uint64(AdrFamIPv6), 2)
	eq(t, "entry subtype@2 (2 NVMe subsystem)", get(eb, 2, 1), 2)
	eq(t, "subtype 1 referral", uint64(SubTypeReferral), 1)
	eq(t, "subtype 3 current discovery subsystem", uint64(SubTypeCurrentDiscovery), 3)
	eq(t, "entry treq@3", get(eb, 3, 1), 0x04)
	eq(t, "entry portid@4", get(eb, 4, 2), 0x0506)
	eq(t, "entry cntlid@6 (0xFFFF)", get(eb, 6, 2), 0xFFFF)
	eq(t, "entry asqsz@8 (32)", get(eb, 8, 2), 32)
	eq(t, "entry eflags@10", get(eb, 10, 2), 0x0708)
	eq(t, "entry trsvcid@32..63 (ASCII, space padded)", get(eb, 32, 5), get([]byte("4420 "), 0, 5))
	eq(t, "entry trsvcid@63 space", get(eb, 63, 1), ' ')
	eq(t, "entry subnqn@256..511", get(eb, 256, 6), get([]byte("nqn.x\x00"), 0, 6))
	eq(t, "entry traddr@512..767 (ASCII, space padded)", get(eb, 512, 8), get([]byte("10.0.0.1"), 0, 8))
	eq(t, "entry traddr@767 space", get(eb, 767, 1), ' ')
	eq(t, "entry TSAS qptype@768 (1 = RC)", get(eb, 768, 1), 1)
	eq(t, "entry TSAS prtype@769 (1 = none)", get(eb, 769, 1), 1)
	eq(t, "entry TSAS cms@770 (1 = RDMA_CM)", get(eb, 770, 1), 1)
	eq(t, "entry TSAS pkey@776", get(eb, 776, 2), 0xABCD)
	var g GetLogPageCommand
	var c Command
	c.CDW10 = uint32(LIDDiscovery) | 255<<16
	c.CDW12 = 1024
	g.FromCommand(&c)
	eq(t, "Get Log Page offset (LPOL) honoured", g.Offset, 1024)
	eq(t, "Get Log Page NUMD honoured (header = 1024 bytes)", g.Length(), 1024)
	eq(t, "discovery log change AEN", uint64(EventDiscoveryLogChange), 0x0070F002)
}

// §7 Keep Alive.
func testRef7(t *testing.T) {
	eq(t, "kas@320 in 100 ms units: 5000 ms kato with kas 10 stays 5000", uint64(RoundKATO(5000, 10)), 5000)
	eq(t, "kato in ms rounds up to the granularity", uint64(RoundKATO(5050, 10)), 6000)
	eq(t, "CTRATT TBKAS bit 6", CTRATTTBKAS, 1<<6)
	eq(t, "expiry status Keep Alive Timer Expired", uint64(StatusKeepAliveExpired), 0x19)
	eq(t, "Keep Alive Timer feature 0Fh", uint64(FIDKeepAliveTimer), 0x0F)
}

// §8 I/O commands.
func testRef8(t *testing.T) {
	for name, c := range map[string]struct{ op, v uint8 }{
		"Flush 0x00": {OpFlush, 0}, "Write 0x01": {OpWrite, 1}, "Read 0x02": {OpRead, 2}, "Write Uncorrectable 0x04": {OpWriteUncorrectable, 4},
		"Compare 0x05": {OpCompare, 5}, "Write Zeroes 0x08": {OpWriteZeroes, 8}, "Dataset Management 0x09": {OpDatasetManagement, 9},
		"Reservation Register 0x0D": {OpReservationRegister, 0x0D}, "Reservation Report 0x0E": {OpReservationReport, 0x0E},
		"Reservation Acquire 0x11": {OpReservationAcquire, 0x11}, "Reservation Release 0x15": {OpReservationRelease, 0x15},
	} {
		eq(t, "opcode "+name, uint64(c.op), uint64(c.v))
	}
	var c Command
	(&RWCommand{Opcode: OpRead, SLBA: 0x0102030405060708, NLB: 0x0A0B, Control: RWControlFUA}).ToCommand(&c)
	b := make([]byte, SQESize)
	c.Marshal(b)
	eq(t, "SLBA cdw10..11@40", get(b, 40, 8), 0x0102030405060708)
	eq(t, "NLB (0's based) cdw12 bits 15:0@48", get(b, 48, 2), 0x0A0B)
	eq(t, "FUA cdw12 bit 30", uint64(c.CDW12)>>30&1, 1)
	eq(t, "LBA Out of Range SCT 0 SC 0x80", uint64(StatusLBAOutOfRange), 0x080)
	eq(t, "Data SGL Length Invalid 0x0F", uint64(StatusDataSGLLengthInvalid), 0x00F)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var s []byte
	for ; n > 0; n /= 10 {
		s = append([]byte{byte('0' + n%10)}, s...)
	}
	return string(s)
}
