package nvmeproto

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

type ic = IdentifyController

func u8f(f func(*ic) *uint8) (func(*ic) uint64, func(*ic, uint64)) {
	return func(x *ic) uint64 { return uint64(*f(x)) }, func(x *ic, v uint64) { *f(x) = uint8(v) }
}
func u16f(f func(*ic) *uint16) (func(*ic) uint64, func(*ic, uint64)) {
	return func(x *ic) uint64 { return uint64(*f(x)) }, func(x *ic, v uint64) { *f(x) = uint16(v) }
}
func u32f(f func(*ic) *uint32) (func(*ic) uint64, func(*ic, uint64)) {
	return func(x *ic) uint64 { return uint64(*f(x)) }, func(x *ic, v uint64) { *f(x) = uint32(v) }
}
func u128lo(f func(*ic) *Uint128) (func(*ic) uint64, func(*ic, uint64)) {
	return func(x *ic) uint64 { return f(x).Lo }, func(x *ic, v uint64) { f(x).Lo = v }
}

func icCase(name string, off, size int, gs func() (func(*ic) uint64, func(*ic, uint64))) fieldCase[ic] {
	g, s := gs()
	return fieldCase[ic]{name: name, off: off, size: size, get: g, set: s}
}

// Reference §5 (and kernel struct nvme_id_ctrl / libnvme for the rest).
func TestIdentifyControllerGolden(t *testing.T) {
	cases := []fieldCase[ic]{
		icCase("vid@0", 0, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.VID }) }),
		icCase("ssvid@2", 2, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.SSVID }) }),
		icCase("rab@72", 72, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.RAB }) }),
		icCase("cmic@76", 76, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.CMIC }) }),
		icCase("mdts@77", 77, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.MDTS }) }),
		icCase("cntlid@78", 78, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.CNTLID }) }),
		{name: "ver@80", off: 80, size: 4, get: func(x *ic) uint64 { return uint64(x.VER) }, set: func(x *ic, v uint64) { x.VER = VS(v) }},
		icCase("rtd3r@84", 84, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.RTD3R }) }),
		icCase("rtd3e@88", 88, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.RTD3E }) }),
		icCase("oaes@92", 92, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.OAES }) }),
		icCase("ctratt@96", 96, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.CTRATT }) }),
		icCase("rrls@100", 100, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.RRLS }) }),
		icCase("cntrltype@111", 111, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.CNTRLTYPE }) }),
		icCase("crdt1@128", 128, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.CRDT1 }) }),
		icCase("crdt2@130", 130, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.CRDT2 }) }),
		icCase("crdt3@132", 132, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.CRDT3 }) }),
		icCase("nvmsr@253", 253, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.NVMSR }) }),
		icCase("vwci@254", 254, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.VWCI }) }),
		icCase("mec@255", 255, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.MEC }) }),
		icCase("oacs@256", 256, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.OACS }) }),
		icCase("acl@258", 258, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.ACL }) }),
		icCase("aerl@259", 259, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.AERL }) }),
		icCase("frmw@260", 260, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.FRMW }) }),
		icCase("lpa@261", 261, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.LPA }) }),
		icCase("elpe@262", 262, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.ELPE }) }),
		icCase("npss@263", 263, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.NPSS }) }),
		icCase("avscc@264", 264, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.AVSCC }) }),
		icCase("apsta@265", 265, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.APSTA }) }),
		icCase("wctemp@266", 266, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.WCTEMP }) }),
		icCase("cctemp@268", 268, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.CCTEMP }) }),
		icCase("mtfa@270", 270, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.MTFA }) }),
		icCase("hmpre@272", 272, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.HMPRE }) }),
		icCase("hmmin@276", 276, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.HMMIN }) }),
		icCase("tnvmcap@280", 280, 8, func() (func(*ic) uint64, func(*ic, uint64)) {
			return u128lo(func(x *ic) *Uint128 { return &x.TNVMCAP })
		}),
		{name: "tnvmcap.hi@288", off: 288, size: 8, get: func(x *ic) uint64 { return x.TNVMCAP.Hi }, set: func(x *ic, v uint64) { x.TNVMCAP.Hi = v }},
		icCase("unvmcap@296", 296, 8, func() (func(*ic) uint64, func(*ic, uint64)) {
			return u128lo(func(x *ic) *Uint128 { return &x.UNVMCAP })
		}),
		icCase("rpmbs@312", 312, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.RPMBS }) }),
		icCase("edstt@316", 316, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.EDSTT }) }),
		icCase("dsto@318", 318, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.DSTO }) }),
		icCase("fwug@319", 319, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.FWUG }) }),
		icCase("kas@320", 320, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.KAS }) }),
		icCase("hctma@322", 322, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.HCTMA }) }),
		icCase("mntmt@324", 324, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.MNTMT }) }),
		icCase("mxtmt@326", 326, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.MXTMT }) }),
		icCase("sanicap@328", 328, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.SANICAP }) }),
		icCase("hmminds@332", 332, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.HMMINDS }) }),
		icCase("hmmaxd@336", 336, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.HMMAXD }) }),
		icCase("nsetidmax@338", 338, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.NSETIDMAX }) }),
		icCase("endgidmax@340", 340, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.ENDGIDMAX }) }),
		icCase("anatt@342", 342, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.ANATT }) }),
		icCase("anacap@343", 343, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.ANACAP }) }),
		icCase("anagrpmax@344", 344, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.ANAGRPMAX }) }),
		icCase("nanagrpid@348", 348, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.NANAGRPID }) }),
		icCase("pels@352", 352, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.PELS }) }),
		icCase("domainid@356", 356, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.DomainID }) }),
		icCase("megcap@368", 368, 8, func() (func(*ic) uint64, func(*ic, uint64)) { return u128lo(func(x *ic) *Uint128 { return &x.MEGCAP }) }),
		icCase("sqes@512", 512, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.SQES }) }),
		icCase("cqes@513", 513, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.CQES }) }),
		icCase("maxcmd@514", 514, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.MAXCMD }) }),
		icCase("nn@516", 516, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.NN }) }),
		icCase("oncs@520", 520, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.ONCS }) }),
		icCase("fuses@522", 522, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.FUSES }) }),
		icCase("fna@524", 524, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.FNA }) }),
		icCase("vwc@525", 525, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.VWC }) }),
		icCase("awun@526", 526, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.AWUN }) }),
		icCase("awupf@528", 528, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.AWUPF }) }),
		icCase("nvscc@530", 530, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.NVSCC }) }),
		icCase("nwpc@531", 531, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.NWPC }) }),
		icCase("acwu@532", 532, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.ACWU }) }),
		icCase("ocfs@534", 534, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.OCFS }) }),
		icCase("sgls@536", 536, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.SGLS }) }),
		icCase("mnan@540", 540, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.MNAN }) }),
		icCase("maxdna@544", 544, 8, func() (func(*ic) uint64, func(*ic, uint64)) { return u128lo(func(x *ic) *Uint128 { return &x.MAXDNA }) }),
		icCase("maxcna@560", 560, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.MAXCNA }) }),
		icCase("ioccsz@1792", 1792, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.IOCCSZ }) }),
		icCase("iorcsz@1796", 1796, 4, func() (func(*ic) uint64, func(*ic, uint64)) { return u32f(func(x *ic) *uint32 { return &x.IORCSZ }) }),
		icCase("icdoff@1800", 1800, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.ICDOFF }) }),
		icCase("fcatt@1802", 1802, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.FCATT }) }),
		icCase("msdbd@1803", 1803, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.MSDBD }) }),
		icCase("ofcs@1804", 1804, 2, func() (func(*ic) uint64, func(*ic, uint64)) { return u16f(func(x *ic) *uint16 { return &x.OFCS }) }),
		icCase("dctype@1806", 1806, 1, func() (func(*ic) uint64, func(*ic, uint64)) { return u8f(func(x *ic) *uint8 { return &x.DCTYPE }) }),
		{name: "ieee@73", off: 73, size: 3, get: func(x *ic) uint64 { return get(x.IEEE[:], 0, 3) }, set: func(x *ic, v uint64) { put(x.IEEE[:], 0, 3, v) }},
		{name: "fguid@112", off: 112, size: 8, get: func(x *ic) uint64 { return get(x.FGUID[:], 0, 8) }, set: func(x *ic, v uint64) { put(x.FGUID[:], 0, 8, v) }},
		{name: "psd0.mp@2048", off: 2048, size: 2, get: func(x *ic) uint64 { return uint64(x.PSD[0].MaxPower) }, set: func(x *ic, v uint64) { x.PSD[0].MaxPower = uint16(v) }},
		{name: "psd0.flags@2051", off: 2051, size: 1, get: func(x *ic) uint64 { return uint64(x.PSD[0].Flags) }, set: func(x *ic, v uint64) { x.PSD[0].Flags = uint8(v) }},
		{name: "psd0.enlat@2052", off: 2052, size: 4, get: func(x *ic) uint64 { return uint64(x.PSD[0].EntryLat) }, set: func(x *ic, v uint64) { x.PSD[0].EntryLat = uint32(v) }},
		{name: "psd0.exlat@2056", off: 2056, size: 4, get: func(x *ic) uint64 { return uint64(x.PSD[0].ExitLat) }, set: func(x *ic, v uint64) { x.PSD[0].ExitLat = uint32(v) }},
		{name: "psd0.idlp@2064", off: 2064, size: 2, get: func(x *ic) uint64 { return uint64(x.PSD[0].IdlePower) }, set: func(x *ic, v uint64) { x.PSD[0].IdlePower = uint16(v) }},
		{name: "psd0.actp@2068", off: 2068, size: 2, get: func(x *ic) uint64 { return uint64(x.PSD[0].ActivePower) }, set: func(x *ic, v uint64) { x.PSD[0].ActivePower = uint16(v) }},
		{name: "psd1.mp@2080", off: 2080, size: 2, get: func(x *ic) uint64 { return uint64(x.PSD[1].MaxPower) }, set: func(x *ic, v uint64) { x.PSD[1].MaxPower = uint16(v) }},
		{name: "psd31.mp@3040", off: 3040, size: 2, get: func(x *ic) uint64 { return uint64(x.PSD[31].MaxPower) }, set: func(x *ic, v uint64) { x.PSD[31].MaxPower = uint16(v) }},
		{name: "vs@3072", off: 3072, size: 8, get: func(x *ic) uint64 { return get(x.VS[:], 0, 8) }, set: func(x *ic, v uint64) { put(x.VS[:], 0, 8, v) }},
	}
	runFieldCases(t, IdentifySize, (*ic).Marshal, (*ic).Unmarshal, cases)
}

func TestIdentifyControllerStrings(t *testing.T) {
	id := IdentifyController{SN: "SN123", MN: "gonvmf", FR: "1.0", SubNQN: "nqn.2024-01.io.gonvmf:sub1"}
	b := make([]byte, IdentifySize)
	id.Marshal(b)
	wantBytes(t, "sn@4 (20 ASCII, space padded)", b, 4, []byte("SN123"+strings.Repeat(" ", 15)))
	wantBytes(t, "mn@24 (40 ASCII, space padded)", b, 24, []byte("gonvmf"+strings.Repeat(" ", 34)))
	wantBytes(t, "fr@64 (8 ASCII, space padded)", b, 64, []byte("1.0     "))
	wantBytes(t, "subnqn@768 (NUL padded)", b, 768, append([]byte(id.SubNQN), make([]byte, 256-len(id.SubNQN))...))
	var got IdentifyController
	if err := got.Unmarshal(b); err != nil || got.SN != id.SN || got.MN != id.MN || got.FR != id.FR || got.SubNQN != id.SubNQN {
		t.Errorf("round trip %q %q %q %q %v", got.SN, got.MN, got.FR, got.SubNQN, err)
	}
	// Over-long and non-ASCII strings are truncated / sanitised, never overflow.
	id = IdentifyController{SN: strings.Repeat("x", 30) + "\x01", MN: "é"}
	id.Marshal(b)
	if string(b[4:24]) != strings.Repeat("x", 20) || b[24] != '?' || b[25] != '?' || b[26] != ' ' {
		t.Errorf("sanitising: %q %q", b[4:24], b[24:28])
	}
	if err := got.Unmarshal(b[:4095]); err == nil {
		t.Error("short Identify accepted")
	}
}

func TestIdentifyControllerRoundTrip(t *testing.T) {
	id := IdentifyController{VID: 0x1b36, SSVID: 0x1af4, SN: "0123456789abcdefghij", MN: "gonvmf", FR: "0.1",
		RAB: 6, IEEE: [3]byte{1, 2, 3}, CMIC: CMICMultiCtrl | CMICANA, MDTS: 5, CNTLID: 7, VER: VS1_4,
		OAES: OAESNamespaceAttr | OAESDiscoveryLogChange, CTRATT: CTRATTTBKAS, CNTRLTYPE: ControllerTypeIO,
		ACL: 3, AERL: 3, FRMW: 3, LPA: LPACommandEffects | LPAExtendedData, ELPE: 127, KAS: 10, SQES: SQESNVM, CQES: CQESNVM,
		MAXCMD: 128, NN: 32, ONCS: ONCSDatasetManagement | ONCSWriteZeroes, VWC: VWCPresent | VWCFlushAllSupported,
		SGLS: SGLSSupported | SGLSKeyedDataBlock | SGLSAddressAsOffset, MNAN: 32, SubNQN: "nqn.2024-01.io.gonvmf:x",
		IOCCSZ: 4 + 512, IORCSZ: 1, MSDBD: 1, OFCS: OFCSDisconnect, TNVMCAP: Uint128{Lo: 5, Hi: 6}}
	id.PSD[0] = PowerStateDescriptor{MaxPower: 2500, Flags: PowerStateMXPS, EntryLat: 1, ExitLat: 2, RRT: 1, RRL: 2, RWT: 3, RWL: 4,
		IdlePower: 5, IdleScale: 2, ActivePower: 6, ActiveWork: 7, ActiveScale: 1}
	id.VS[1023] = 0xEE
	b := make([]byte, IdentifySize)
	id.Marshal(b)
	if b[2066] != 2<<6 || b[2070] != 7|1<<6 || b[2060] != 1 || b[2063] != 4 {
		t.Errorf("psd byte fields: ips %#x apw/aps %#x rrt %#x rwl %#x", b[2066], b[2070], b[2060], b[2063])
	}
	var got IdentifyController
	if err := got.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, id)
	}
}

func TestIdentifyCommandGolden(t *testing.T) {
	// Kernel struct nvme_identify: 40 cns · 42 ctrlid · 47 csi; NSID at 4.
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpIdentify
		put(b, 4, 4, 0x01020304)
		b[40] = byte(CNSCSController)
		put(b, 42, 2, 0xBEEF)
		put(b, 44, 2, 0x1234)
		b[47] = byte(CSIZNS)
		b[56] = 0x05
	})
	var id IdentifyCommand
	id.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"nsid@4", uint64(id.NSID), 0x01020304}, {"cns@40", uint64(id.CNS), 0x06}, {"cntid@42", uint64(id.CNTID), 0xBEEF},
		{"cnsspecificid@44", uint64(id.CNSSpecificID), 0x1234}, {"csi@47", uint64(id.CSI), 2}, {"uuidindex@56", uint64(id.UUIDIndex), 5},
	})
	var back Command
	id.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("ToCommand encoding differs")
	}
	for c, v := range map[CNS]uint8{CNSNamespace: 0, CNSController: 1, CNSActiveNSList: 2, CNSNSDescriptorList: 3,
		CNSCSNamespace: 5, CNSCSController: 6, CNSCSActiveNSList: 7, CNSCSIndependentNamespace: 8} {
		if uint8(c) != v || strings.HasPrefix(c.String(), "CNS ") {
			t.Errorf("CNS %v = %d, want %d", c, uint8(c), v)
		}
	}
}

func TestIdentifyControllerNVMGolden(t *testing.T) {
	type x = IdentifyControllerNVM
	runFieldCases(t, IdentifySize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"vsl@0", 0, 1, func(v *x) uint64 { return uint64(v.VSL) }, func(v *x, n uint64) { v.VSL = uint8(n) }},
		{"wzsl@1", 1, 1, func(v *x) uint64 { return uint64(v.WZSL) }, func(v *x, n uint64) { v.WZSL = uint8(n) }},
		{"wusl@2", 2, 1, func(v *x) uint64 { return uint64(v.WUSL) }, func(v *x, n uint64) { v.WUSL = uint8(n) }},
		{"dmrl@3", 3, 1, func(v *x) uint64 { return uint64(v.DMRL) }, func(v *x, n uint64) { v.DMRL = uint8(n) }},
		{"dmrsl@4", 4, 4, func(v *x) uint64 { return uint64(v.DMRSL) }, func(v *x, n uint64) { v.DMRSL = uint32(n) }},
		{"dmsl@8", 8, 8, func(v *x) uint64 { return v.DMSL }, func(v *x, n uint64) { v.DMSL = n }},
	})
	var v x
	if v.Unmarshal(make([]byte, 100)) == nil {
		t.Error("short accepted")
	}
}

type ns = IdentifyNamespace

func nsU8(name string, off int, f func(*ns) *uint8) fieldCase[ns] {
	return fieldCase[ns]{name, off, 1, func(x *ns) uint64 { return uint64(*f(x)) }, func(x *ns, v uint64) { *f(x) = uint8(v) }}
}
func nsU16(name string, off int, f func(*ns) *uint16) fieldCase[ns] {
	return fieldCase[ns]{name, off, 2, func(x *ns) uint64 { return uint64(*f(x)) }, func(x *ns, v uint64) { *f(x) = uint16(v) }}
}
func nsU32(name string, off int, f func(*ns) *uint32) fieldCase[ns] {
	return fieldCase[ns]{name, off, 4, func(x *ns) uint64 { return uint64(*f(x)) }, func(x *ns, v uint64) { *f(x) = uint32(v) }}
}
func nsU64(name string, off int, f func(*ns) *uint64) fieldCase[ns] {
	return fieldCase[ns]{name, off, 8, func(x *ns) uint64 { return *f(x) }, func(x *ns, v uint64) { *f(x) = v }}
}

// Reference §5 namespace fields (nguid 104..119, eui64 120..127, lbaf[]), offsets per the
// NVM command set specification and kernel struct nvme_id_ns.
func TestIdentifyNamespaceGolden(t *testing.T) {
	cases := []fieldCase[ns]{
		nsU64("nsze@0", 0, func(x *ns) *uint64 { return &x.NSZE }),
		nsU64("ncap@8", 8, func(x *ns) *uint64 { return &x.NCAP }),
		nsU64("nuse@16", 16, func(x *ns) *uint64 { return &x.NUSE }),
		nsU8("nsfeat@24", 24, func(x *ns) *uint8 { return &x.NSFEAT }),
		nsU8("nlbaf@25", 25, func(x *ns) *uint8 { return &x.NLBAF }),
		nsU8("flbas@26", 26, func(x *ns) *uint8 { return &x.FLBAS }),
		nsU8("mc@27", 27, func(x *ns) *uint8 { return &x.MC }),
		nsU8("dpc@28", 28, func(x *ns) *uint8 { return &x.DPC }),
		nsU8("dps@29", 29, func(x *ns) *uint8 { return &x.DPS }),
		nsU8("nmic@30", 30, func(x *ns) *uint8 { return &x.NMIC }),
		nsU8("rescap@31", 31, func(x *ns) *uint8 { return &x.RESCAP }),
		nsU8("fpi@32", 32, func(x *ns) *uint8 { return &x.FPI }),
		nsU8("dlfeat@33", 33, func(x *ns) *uint8 { return &x.DLFEAT }),
		nsU16("nawun@34", 34, func(x *ns) *uint16 { return &x.NAWUN }),
		nsU16("nawupf@36", 36, func(x *ns) *uint16 { return &x.NAWUPF }),
		nsU16("nacwu@38", 38, func(x *ns) *uint16 { return &x.NACWU }),
		nsU16("nabsn@40", 40, func(x *ns) *uint16 { return &x.NABSN }),
		nsU16("nabo@42", 42, func(x *ns) *uint16 { return &x.NABO }),
		nsU16("nabspf@44", 44, func(x *ns) *uint16 { return &x.NABSPF }),
		nsU16("noiob@46", 46, func(x *ns) *uint16 { return &x.NOIOB }),
		{"nvmcap@48", 48, 8, func(x *ns) uint64 { return x.NVMCAP.Lo }, func(x *ns, v uint64) { x.NVMCAP.Lo = v }},
		{"nvmcap.hi@56", 56, 8, func(x *ns) uint64 { return x.NVMCAP.Hi }, func(x *ns, v uint64) { x.NVMCAP.Hi = v }},
		nsU16("npwg@64", 64, func(x *ns) *uint16 { return &x.NPWG }),
		nsU16("npwa@66", 66, func(x *ns) *uint16 { return &x.NPWA }),
		nsU16("npdg@68", 68, func(x *ns) *uint16 { return &x.NPDG }),
		nsU16("npda@70", 70, func(x *ns) *uint16 { return &x.NPDA }),
		nsU16("nows@72", 72, func(x *ns) *uint16 { return &x.NOWS }),
		nsU16("mssrl@74", 74, func(x *ns) *uint16 { return &x.MSSRL }),
		nsU32("mcl@76", 76, func(x *ns) *uint32 { return &x.MCL }),
		nsU8("msrc@80", 80, func(x *ns) *uint8 { return &x.MSRC }),
		nsU32("anagrpid@92", 92, func(x *ns) *uint32 { return &x.ANAGRPID }),
		nsU8("nsattr@99", 99, func(x *ns) *uint8 { return &x.NSATTR }),
		nsU16("nvmsetid@100", 100, func(x *ns) *uint16 { return &x.NVMSETID }),
		nsU16("endgid@102", 102, func(x *ns) *uint16 { return &x.ENDGID }),
		{"nguid@104", 104, 8, func(x *ns) uint64 { return get(x.NGUID[:], 0, 8) }, func(x *ns, v uint64) { put(x.NGUID[:], 0, 8, v) }},
		{"nguid.hi@112..119", 112, 8, func(x *ns) uint64 { return get(x.NGUID[:], 8, 8) }, func(x *ns, v uint64) { put(x.NGUID[:], 8, 8, v) }},
		{"eui64@120..127", 120, 8, func(x *ns) uint64 { return get(x.EUI64[:], 0, 8) }, func(x *ns, v uint64) { put(x.EUI64[:], 0, 8, v) }},
		{"lbaf0.ms@128", 128, 2, func(x *ns) uint64 { return uint64(x.LBAF[0].MS) }, func(x *ns, v uint64) { x.LBAF[0].MS = uint16(v) }},
		{"lbaf0.lbads@130", 130, 1, func(x *ns) uint64 { return uint64(x.LBAF[0].LBADS) }, func(x *ns, v uint64) { x.LBAF[0].LBADS = uint8(v) }},
		{"lbaf1.lbads@134", 134, 1, func(x *ns) uint64 { return uint64(x.LBAF[1].LBADS) }, func(x *ns, v uint64) { x.LBAF[1].LBADS = uint8(v) }},
		{"lbaf63.ms@380", 380, 2, func(x *ns) uint64 { return uint64(x.LBAF[63].MS) }, func(x *ns, v uint64) { x.LBAF[63].MS = uint16(v) }},
		{"vs@3840", 3840, 8, func(x *ns) uint64 { return get(x.VS[:], 0, 8) }, func(x *ns, v uint64) { put(x.VS[:], 0, 8, v) }},
	}
	runFieldCases(t, IdentifySize, (*ns).Marshal, (*ns).Unmarshal, cases)
}

func TestIdentifyNamespaceLBA(t *testing.T) {
	n := IdentifyNamespace{NSZE: 1 << 20, NCAP: 1 << 20, NUSE: 1 << 20, NLBAF: 1, FLBAS: 1, DLFEAT: DLFEATReadZeroes | DLFEATWriteZeroesDeallo}
	n.LBAF[0] = LBAFormatFor(512)
	n.LBAF[1] = LBAFormatFor(4096)
	n.LBAF[1].RP = 2
	n.LBAF[2] = LBAFormat{RP: 0xFF} // RP is 2 bits: the encoder masks
	b := make([]byte, IdentifySize)
	n.Marshal(b)
	wantBytes(t, "lbaf1@132 (ms, lbads 12, rp 2 in byte 3 bits 1:0)", b, 132, []byte{0, 0, 12, 2})
	wantBytes(t, "lbaf2.rp@139 masked", b, 139, []byte{3})
	n.LBAF[2] = LBAFormat{RP: 3}
	if n.LBAF[0].LBADS != 9 || n.LBAF[1].LBADS != 12 || n.LBASize() != 4096 || n.FormatIndex() != 1 {
		t.Errorf("lbaf %+v size %d", n.LBAF[:2], n.LBASize())
	}
	n.NLBAF, n.FLBAS = 63, 0x40|0x02 // index 0x22
	if n.FormatIndex() != 0x22 {
		t.Errorf("extended index %#x", n.FormatIndex())
	}
	if (LBAFormat{LBADS: 40}).DataSize() != 0 || (LBAFormat{}).DataSize() != 0 {
		t.Error("bad lbads")
	}
	var got IdentifyNamespace
	n.Marshal(b)
	if err := got.Unmarshal(b); err != nil || got != n {
		t.Error("round trip")
	}
	if got.Unmarshal(b[:10]) == nil {
		t.Error("short accepted")
	}
}

func TestIdentifyNamespaceIndependentGolden(t *testing.T) {
	type x = IdentifyNamespaceIndependent
	runFieldCases(t, IdentifySize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"nsfeat@0", 0, 1, func(v *x) uint64 { return uint64(v.NSFEAT) }, func(v *x, n uint64) { v.NSFEAT = uint8(n) }},
		{"nmic@1", 1, 1, func(v *x) uint64 { return uint64(v.NMIC) }, func(v *x, n uint64) { v.NMIC = uint8(n) }},
		{"rescap@2", 2, 1, func(v *x) uint64 { return uint64(v.RESCAP) }, func(v *x, n uint64) { v.RESCAP = uint8(n) }},
		{"fpi@3", 3, 1, func(v *x) uint64 { return uint64(v.FPI) }, func(v *x, n uint64) { v.FPI = uint8(n) }},
		{"anagrpid@4", 4, 4, func(v *x) uint64 { return uint64(v.ANAGRPID) }, func(v *x, n uint64) { v.ANAGRPID = uint32(n) }},
		{"nsattr@8", 8, 1, func(v *x) uint64 { return uint64(v.NSATTR) }, func(v *x, n uint64) { v.NSATTR = uint8(n) }},
		{"nvmsetid@10", 10, 2, func(v *x) uint64 { return uint64(v.NVMSETID) }, func(v *x, n uint64) { v.NVMSETID = uint16(n) }},
		{"endgid@12", 12, 2, func(v *x) uint64 { return uint64(v.ENDGID) }, func(v *x, n uint64) { v.ENDGID = uint16(n) }},
		{"nstat@14", 14, 1, func(v *x) uint64 { return uint64(v.NSTAT) }, func(v *x, n uint64) { v.NSTAT = uint8(n) }},
	})
}

func TestNSIDList(t *testing.T) {
	l := NSIDList{1, 2, 7}
	b := make([]byte, IdentifySize)
	for i := range b {
		b[i] = 0xFF
	}
	l.Marshal(b)
	wantLE(t, "entry0@0", b, 0, 4, 1)
	wantLE(t, "entry1@4", b, 4, 4, 2)
	wantLE(t, "entry2@8", b, 8, 4, 7)
	wantLE(t, "terminator@12", b, 12, 4, 0)
	if b[4095] != 0 {
		t.Error("tail not zeroed")
	}
	var got NSIDList
	if err := got.Unmarshal(b); err != nil || len(got) != 3 || got[2] != 7 {
		t.Errorf("decode %v %v", got, err)
	}
	big := make(NSIDList, 2000)
	for i := range big {
		big[i] = uint32(i + 1)
	}
	big.Marshal(b)
	if err := got.Unmarshal(b); err != nil || len(got) != 1024 || got[1023] != 1024 {
		t.Errorf("full list %d", len(got))
	}
	if err := got.Unmarshal(b[:7]); err != nil || len(got) != 1 {
		t.Errorf("short input %v", got)
	}
}

// Controller List (Identify CNS 12h/13h; libnvme struct nvme_ctrl_list): bytes 1:0 the
// number of identifiers, then up to 2047 two-byte identifiers.
func TestControllerListGolden(t *testing.T) {
	eq(t, "size 4096", ControllerListSize, 4096)
	eq(t, "2047 entries", MaxControllerListEntries, 2047)
	b := make([]byte, ControllerListSize)
	for i := range b {
		b[i] = 0xFF
	}
	ControllerList{1, 2, 0x0102}.Marshal(b)
	wantLE(t, "count@0", b, 0, 2, 3)
	wantLE(t, "id0@2", b, 2, 2, 1)
	wantLE(t, "id1@4", b, 4, 2, 2)
	wantLE(t, "id2@6", b, 6, 2, 0x0102)
	wantLE(t, "unused@8", b, 8, 2, 0)
	if b[4095] != 0 {
		t.Error("tail not zeroed")
	}
	var got ControllerList
	if err := got.Unmarshal(b); err != nil || len(got) != 3 || got[2] != 0x0102 {
		t.Errorf("decode %v %v", got, err)
	}
	big := make(ControllerList, 3000)
	for i := range big {
		big[i] = uint16(i + 1)
	}
	big.Marshal(b)
	wantLE(t, "full count@0", b, 0, 2, 2047)
	wantLE(t, "last id@4094", b, 4094, 2, 2047)
	if err := got.Unmarshal(b); err != nil || len(got) != 2047 || got[2046] != 2047 {
		t.Errorf("full list %d %v", len(got), err)
	}
	if err := got.Unmarshal(b[:10]); err == nil {
		t.Error("count 2047 in 10 bytes decoded")
	}
	if err := got.Unmarshal([]byte{0xFF, 0x07}); err == nil {
		t.Error("count 2047 with no identifiers decoded")
	}
	over := make([]byte, ControllerListSize)
	over[0], over[1] = 0x00, 0x08 // 2048
	if err := got.Unmarshal(over); err == nil {
		t.Error("count 2048 decoded")
	}
	if err := got.Unmarshal([]byte{0, 0}); err != nil || len(got) != 0 {
		t.Errorf("empty list: %v %v", got, err)
	}
}

// Reference §5: CNS 03h descriptors type 1 EUI64 (8 B), 2 NGUID (16 B), 3 UUID (16 B), 4 CSI (1 B).
func TestNSDescriptorListGolden(t *testing.T) {
	eui := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	var nguid, uuid [16]byte
	for i := range nguid {
		nguid[i], uuid[i] = byte(0x20+i), byte(0x40+i)
	}
	l := NSDescriptorList{EUI64Descriptor(eui), NGUIDDescriptor(nguid), UUIDDescriptor(uuid), CSIDescriptor(CSINVM), {Type: 0x77}}
	b := make([]byte, IdentifySize)
	l.Marshal(b)
	wantBytes(t, "eui64 header@0 (nidt 1, nidl 8)", b, 0, []byte{1, 8, 0, 0})
	wantBytes(t, "eui64@4", b, 4, eui[:])
	wantBytes(t, "nguid header@12 (nidt 2, nidl 16)", b, 12, []byte{2, 16, 0, 0})
	wantBytes(t, "nguid@16", b, 16, nguid[:])
	wantBytes(t, "uuid header@32 (nidt 3, nidl 16)", b, 32, []byte{3, 16, 0, 0})
	wantBytes(t, "uuid@36", b, 36, uuid[:])
	wantBytes(t, "csi header@52 (nidt 4, nidl 1)", b, 52, []byte{4, 1, 0, 0, 0})
	wantBytes(t, "terminator@57", b, 57, []byte{0, 0, 0, 0})
	var got NSDescriptorList
	if err := got.Unmarshal(b); err != nil || len(got) != 4 {
		t.Fatalf("decode %v %v", got, err)
	}
	if d, ok := got.Find(NIDTUUID); !ok || !bytes.Equal(d.Bytes(), uuid[:]) {
		t.Error("find uuid")
	}
	if d, ok := got.Find(NIDTEUI64); !ok || !bytes.Equal(d.Bytes(), eui[:]) {
		t.Error("find eui64")
	}
	// Unknown types are skipped; wrong lengths and overruns are errors.
	b2 := make([]byte, 64)
	copy(b2, []byte{0x99, 3, 0, 0, 1, 2, 3, 4, 1, 0, 0, 0xA})
	if err := got.Unmarshal(b2); err != nil || len(got) != 1 || got[0].Type != NIDTCSI || got[0].ID[0] != 0xA {
		t.Errorf("unknown skip: %v %v", got, err)
	}
	if err := got.Unmarshal([]byte{3, 8, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}); !errors.Is(err, ErrBadDescriptor) {
		t.Errorf("bad uuid length: %v", err)
	}
	if err := got.Unmarshal([]byte{3, 16, 0, 0, 1, 2}); !errors.Is(err, ErrBadDescriptor) {
		t.Errorf("overrun: %v", err)
	}
}
