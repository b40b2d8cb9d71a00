package nvmeproto

import (
	"strings"
	"testing"
)

// Reference §6: header 0 genctr u64 · 8 numrec u64 · 16 recfmt u16.
func TestDiscoveryLogHeaderGolden(t *testing.T) {
	type x = DiscoveryLogHeader
	runFieldCases(t, DiscoveryLogHeaderSize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"genctr@0", 0, 8, func(v *x) uint64 { return v.GenCtr }, func(v *x, n uint64) { v.GenCtr = n }},
		{"numrec@8", 8, 8, func(v *x) uint64 { return v.NumRec }, func(v *x, n uint64) { v.NumRec = n }},
		{"recfmt@16", 16, 2, func(v *x) uint64 { return uint64(v.RecFmt) }, func(v *x, n uint64) { v.RecFmt = uint16(n) }},
	})
	var h DiscoveryLogHeader
	if h.Unmarshal(make([]byte, 17)) == nil {
		t.Error("short header accepted")
	}
}

type dle = DiscoveryLogEntry

// Reference §6 entry offsets.
func TestDiscoveryLogEntryGolden(t *testing.T) {
	runFieldCases(t, DiscoveryLogEntrySize, (*dle).Marshal, (*dle).Unmarshal, []fieldCase[dle]{
		{"trtype@0", 0, 1, func(v *dle) uint64 { return uint64(v.TrType) }, func(v *dle, n uint64) { v.TrType = TransportType(n) }},
		{"adrfam@1", 1, 1, func(v *dle) uint64 { return uint64(v.AdrFam) }, func(v *dle, n uint64) { v.AdrFam = AddressFamily(n) }},
		{"subtype@2", 2, 1, func(v *dle) uint64 { return uint64(v.SubType) }, func(v *dle, n uint64) { v.SubType = SubsystemType(n) }},
		{"treq@3", 3, 1, func(v *dle) uint64 { return uint64(v.TReq) }, func(v *dle, n uint64) { v.TReq = uint8(n) }},
		{"portid@4", 4, 2, func(v *dle) uint64 { return uint64(v.PortID) }, func(v *dle, n uint64) { v.PortID = uint16(n) }},
		{"cntlid@6", 6, 2, func(v *dle) uint64 { return uint64(v.CNTLID) }, func(v *dle, n uint64) { v.CNTLID = uint16(n) }},
		{"asqsz@8", 8, 2, func(v *dle) uint64 { return uint64(v.ASQSZ) }, func(v *dle, n uint64) { v.ASQSZ = uint16(n) }},
		{"eflags@10", 10, 2, func(v *dle) uint64 { return uint64(v.EFlags) }, func(v *dle, n uint64) { v.EFlags = uint16(n) }},
		{"tsas.qptype@768", 768, 1, func(v *dle) uint64 { return uint64(v.RDMA().QPType) }, func(v *dle, n uint64) { v.SetRDMA(RDMATSAS{QPType: uint8(n)}) }},
		{"tsas.prtype@769", 769, 1, func(v *dle) uint64 { return uint64(v.RDMA().PrType) }, func(v *dle, n uint64) { v.SetRDMA(RDMATSAS{PrType: uint8(n)}) }},
		{"tsas.cms@770", 770, 1, func(v *dle) uint64 { return uint64(v.RDMA().CMS) }, func(v *dle, n uint64) { v.SetRDMA(RDMATSAS{CMS: uint8(n)}) }},
		{"tsas.pkey@776", 776, 2, func(v *dle) uint64 { return uint64(v.RDMA().PKey) }, func(v *dle, n uint64) { v.SetRDMA(RDMATSAS{PKey: uint16(n)}) }},
		{"tsas.raw@1016", 1016, 8, func(v *dle) uint64 { return get(v.TSAS[:], 248, 8) }, func(v *dle, n uint64) { put(v.TSAS[:], 248, 8, n) }},
	})
}

func TestDiscoveryLogEntryStrings(t *testing.T) {
	e := DiscoveryLogEntry{TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeNVMe, TReq: TReqSecureChannelNotSpecified,
		PortID: 1, CNTLID: CNTLIDDynamic, ASQSZ: 32, TrSvcID: "4420", SubNQN: "nqn.2024-01.io.gonvmf:sub1", TrAddr: "192.168.100.1"}
	e.SetRDMA(RDMATSAS{QPType: RDMAQPTypeConnected, PrType: RDMAPrTypeNone, CMS: RDMACMSRDMACM})
	b := make([]byte, DiscoveryLogEntrySize)
	e.Marshal(b)
	wantBytes(t, "trsvcid@32 (ASCII, space padded)", b, 32, []byte("4420"+strings.Repeat(" ", 28)))
	wantBytes(t, "subnqn@256 (NUL padded)", b, 256, append([]byte(e.SubNQN), make([]byte, 256-len(e.SubNQN))...))
	wantBytes(t, "traddr@512 (ASCII, space padded)", b, 512, []byte("192.168.100.1"+strings.Repeat(" ", 256-13)))
	wantBytes(t, "tsas@768 (RC, none, RDMA_CM)", b, 768, []byte{1, 1, 1, 0, 0, 0, 0, 0, 0, 0})
	wantBytes(t, "reserved@12..31", b, 12, make([]byte, 20))
	wantBytes(t, "reserved@64..255", b, 64, make([]byte, 192))
	var got DiscoveryLogEntry
	if err := got.Unmarshal(b); err != nil || got != e {
		t.Errorf("round trip: %+v %v", got, err)
	}
	// NUL padded TRADDR (as some targets send) decodes the same.
	clear(b[512+13 : 768])
	if err := got.Unmarshal(b); err != nil || got.TrAddr != "192.168.100.1" {
		t.Errorf("NUL padded traddr %q", got.TrAddr)
	}
	if got.Unmarshal(b[:1023]) == nil {
		t.Error("short entry accepted")
	}
	// Constants from the reference.
	if TrTypeRDMA != 1 || TrTypeTCP != 3 || AdrFamIPv4 != 1 || AdrFamIPv6 != 2 || SubTypeReferral != 1 ||
		SubTypeNVMe != 2 || SubTypeCurrentDiscovery != 3 || RDMAQPTypeConnected != 1 || RDMAPrTypeNone != 1 || RDMACMSRDMACM != 1 {
		t.Error("discovery constants")
	}
	_, _, _ = e.TrType.String(), e.AdrFam.String(), e.SubType.String()
}

func TestDiscoveryLog(t *testing.T) {
	l := DiscoveryLog{GenCtr: 9}
	for i := 0; i < 3; i++ {
		e := DiscoveryLogEntry{TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeNVMe, PortID: uint16(i), CNTLID: 0xFFFF,
			ASQSZ: 32, TrSvcID: "4420", TrAddr: "10.0.0.1", SubNQN: "nqn.2024-01.io.gonvmf:s" + string(rune('a'+i))}
		e.SetRDMA(RDMATSAS{QPType: 1, PrType: 1, CMS: 1})
		l.Entries = append(l.Entries, e)
	}
	b := make([]byte, l.Size())
	l.Marshal(b)
	if l.Size() != 4096 {
		t.Fatal(l.Size())
	}
	wantLE(t, "numrec@8", b, 8, 8, 3)
	wantBytes(t, "entry1.subnqn@1024+1024+256", b, 2048+256, []byte("nqn.2024-01.io.gonvmf:sb"))
	var got DiscoveryLog
	if err := got.Unmarshal(b); err != nil || got.GenCtr != 9 || len(got.Entries) != 3 || got.Entries[2] != l.Entries[2] {
		t.Fatalf("decode %v %d", err, len(got.Entries))
	}
	// The host reads the header alone first, then the rest.
	if err := got.Unmarshal(b[:1024]); err != nil || len(got.Entries) != 0 {
		t.Error("header only")
	}
	if err := got.Unmarshal(b[:3000]); err != nil || len(got.Entries) != 1 {
		t.Error("partial entries")
	}
	// NUMREC larger than the data is capped by the data.
	put(b, 8, 8, 1<<62)
	if err := got.Unmarshal(b); err != nil || len(got.Entries) != 3 {
		t.Error("huge numrec")
	}
}
