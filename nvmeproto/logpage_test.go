package nvmeproto

import (
	"bytes"
	"testing"
)

// Get Log Page SQE (kernel struct nvme_get_log_page_command; libnvme NVME_LOG_CDW*):
// 40 lid · 41 lsp (bits 14:8) + rae (bit 15) · 42 numdl · 44 numdu · 46 lsi · 48 lpol ·
// 52 lpou · 56 uuid index (bits 6:0), ot (bit 23) · 59 csi.
func TestGetLogPageCommandGolden(t *testing.T) {
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpGetLogPage
		put(b, 4, 4, NSIDAll)
		b[40] = byte(LIDDiscovery)
		b[41] = 0x7F | 0x80 // LSP 7 bits + RAE
		put(b, 42, 2, 0x00FF)
		put(b, 44, 2, 0x0001)
		put(b, 46, 2, 0xABCD)
		put(b, 48, 4, 0x400)
		put(b, 52, 4, 0x2)
		put(b, 56, 4, 0x05|1<<23|uint64(CSIZNS)<<24)
	})
	var g GetLogPageCommand
	g.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"nsid@4", uint64(g.NSID), NSIDAll},
		{"lid@40", uint64(g.LID), 0x70},
		{"lsp@41 bits 6:0 (cdw10 14:8)", uint64(g.LSP), 0x7F},
		{"rae@41 bit 7 (cdw10 15)", b64(g.RAE), 1},
		{"numd = numdu@44 << 16 | numdl@42", uint64(g.NUMD), 0x100FF},
		{"length bytes", g.Length(), (0x100FF + 1) * 4},
		{"lsi@46", uint64(g.LSI), 0xABCD},
		{"offset = lpou@52 << 32 | lpol@48", g.Offset, 0x2_0000_0400},
		{"uuidindex@56", uint64(g.UUIDIndex), 5},
		{"ot@58 bit 7 (cdw14 23)", b64(g.OT), 1},
		{"csi@59", uint64(g.CSI), 2},
	})
	var back Command
	g.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("ToCommand encoding differs")
	}
	g.SetLength(1024)
	if g.NUMD != 255 || g.Length() != 1024 {
		t.Error("SetLength(1024)")
	}
	g.SetLength(5)
	if g.NUMD != 1 {
		t.Error("SetLength rounds up")
	}
	g.SetLength(0)
	if g.NUMD != 0 {
		t.Error("SetLength(0)")
	}
	// The Linux host reads the discovery header as NUMD 255 (1024 bytes), offset 0.
	if LIDDiscovery != 0x70 || LIDCommandEffects != 0x05 || LIDANA != 0x0C || LIDSMART != 0x02 || LIDChangedNSList != 0x04 {
		t.Error("LID constants")
	}
	_ = LID(0x33).String()
}

func TestSupportedLogPages(t *testing.T) {
	var s SupportedLogPages
	s.Set(LIDSMART, 0)
	s.Set(LIDANA, LogIOS|0x1234<<16)
	b := make([]byte, SupportedLogPagesSize)
	s.Marshal(b)
	wantLE(t, "lid02@8", b, 8, 4, 1)
	wantLE(t, "lid0C@48", b, 48, 4, 0x12340003)
	var got SupportedLogPages
	if err := got.Unmarshal(b); err != nil || got != s || !got.Supported(LIDANA) || got.Supported(LIDErrorInfo) {
		t.Error("round trip")
	}
	if got.Unmarshal(b[:1023]) == nil {
		t.Error("short accepted")
	}
}

func TestErrorInfoEntryGolden(t *testing.T) {
	type x = ErrorInfoEntry
	runFieldCases(t, ErrorInfoEntrySize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"errorcount@0", 0, 8, func(v *x) uint64 { return v.ErrorCount }, func(v *x, n uint64) { v.ErrorCount = n }},
		{"sqid@8", 8, 2, func(v *x) uint64 { return uint64(v.SQID) }, func(v *x, n uint64) { v.SQID = uint16(n) }},
		{"cid@10", 10, 2, func(v *x) uint64 { return uint64(v.CID) }, func(v *x, n uint64) { v.CID = uint16(n) }},
		{"status@12 (<<1 | phase)", 12, 2, func(v *x) uint64 { return uint64(v.Status)<<1 | b64(v.PhaseTag) },
			func(v *x, n uint64) { v.Status, v.PhaseTag = Status(n>>1), n&1 != 0 }},
		{"parmerrloc@14", 14, 2, func(v *x) uint64 { return uint64(v.ParamErrorLocation) }, func(v *x, n uint64) { v.ParamErrorLocation = uint16(n) }},
		{"lba@16", 16, 8, func(v *x) uint64 { return v.LBA }, func(v *x, n uint64) { v.LBA = n }},
		{"nsid@24", 24, 4, func(v *x) uint64 { return uint64(v.NSID) }, func(v *x, n uint64) { v.NSID = uint32(n) }},
		{"vs@28", 28, 1, func(v *x) uint64 { return uint64(v.VendorInfoPage) }, func(v *x, n uint64) { v.VendorInfoPage = uint8(n) }},
		{"trtype@29", 29, 1, func(v *x) uint64 { return uint64(v.TrType) }, func(v *x, n uint64) { v.TrType = TransportType(n) }},
		{"cs@32", 32, 8, func(v *x) uint64 { return v.CommandSpecific }, func(v *x, n uint64) { v.CommandSpecific = n }},
		{"trtype_spec@40", 40, 2, func(v *x) uint64 { return uint64(v.TrTypeSpecific) }, func(v *x, n uint64) { v.TrTypeSpecific = uint16(n) }},
	})
	if ParamErrorLocation(44, 3) != 0x032C {
		t.Error("ParamErrorLocation")
	}
	e := ErrorInfoEntry{Status: StatusInvalidField.WithDNR()}
	b := make([]byte, 64)
	e.Marshal(b)
	wantLE(t, "status field of Invalid Field+DNR", b, 12, 2, 0x8004)
}

func TestSMARTLogGolden(t *testing.T) {
	type x = SMARTLog
	c := func(name string, off int, f func(*x) *Uint128) fieldCase[x] {
		return fieldCase[x]{name, off, 8, func(v *x) uint64 { return f(v).Lo }, func(v *x, n uint64) { f(v).Lo = n }}
	}
	runFieldCases(t, SMARTLogSize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"critical_warning@0", 0, 1, func(v *x) uint64 { return uint64(v.CriticalWarning) }, func(v *x, n uint64) { v.CriticalWarning = uint8(n) }},
		{"temperature@1", 1, 2, func(v *x) uint64 { return uint64(v.CompositeTemperature) }, func(v *x, n uint64) { v.CompositeTemperature = uint16(n) }},
		{"avail_spare@3", 3, 1, func(v *x) uint64 { return uint64(v.AvailableSpare) }, func(v *x, n uint64) { v.AvailableSpare = uint8(n) }},
		{"spare_thresh@4", 4, 1, func(v *x) uint64 { return uint64(v.AvailableSpareThreshold) }, func(v *x, n uint64) { v.AvailableSpareThreshold = uint8(n) }},
		{"percent_used@5", 5, 1, func(v *x) uint64 { return uint64(v.PercentageUsed) }, func(v *x, n uint64) { v.PercentageUsed = uint8(n) }},
		{"endu_grp_crit_warn@6", 6, 1, func(v *x) uint64 { return uint64(v.EnduranceGroupWarning) }, func(v *x, n uint64) { v.EnduranceGroupWarning = uint8(n) }},
		c("data_units_read@32", 32, func(v *x) *Uint128 { return &v.DataUnitsRead }),
		{"data_units_read.hi@40", 40, 8, func(v *x) uint64 { return v.DataUnitsRead.Hi }, func(v *x, n uint64) { v.DataUnitsRead.Hi = n }},
		c("data_units_written@48", 48, func(v *x) *Uint128 { return &v.DataUnitsWritten }),
		c("host_reads@64", 64, func(v *x) *Uint128 { return &v.HostReadCommands }),
		c("host_writes@80", 80, func(v *x) *Uint128 { return &v.HostWriteCommands }),
		c("ctrl_busy_time@96", 96, func(v *x) *Uint128 { return &v.ControllerBusyTime }),
		c("power_cycles@112", 112, func(v *x) *Uint128 { return &v.PowerCycles }),
		c("power_on_hours@128", 128, func(v *x) *Uint128 { return &v.PowerOnHours }),
		c("unsafe_shutdowns@144", 144, func(v *x) *Uint128 { return &v.UnsafeShutdowns }),
		c("media_errors@160", 160, func(v *x) *Uint128 { return &v.MediaErrors }),
		c("num_err_log_entries@176", 176, func(v *x) *Uint128 { return &v.NumErrLogEntries }),
		{"warning_temp_time@192", 192, 4, func(v *x) uint64 { return uint64(v.WarningTempTime) }, func(v *x, n uint64) { v.WarningTempTime = uint32(n) }},
		{"critical_comp_time@196", 196, 4, func(v *x) uint64 { return uint64(v.CriticalTempTime) }, func(v *x, n uint64) { v.CriticalTempTime = uint32(n) }},
		{"temp_sensor1@200", 200, 2, func(v *x) uint64 { return uint64(v.TempSensor[0]) }, func(v *x, n uint64) { v.TempSensor[0] = uint16(n) }},
		{"temp_sensor8@214", 214, 2, func(v *x) uint64 { return uint64(v.TempSensor[7]) }, func(v *x, n uint64) { v.TempSensor[7] = uint16(n) }},
		{"thm_temp1_trans_count@216", 216, 4, func(v *x) uint64 { return uint64(v.TMT1TransitionCount) }, func(v *x, n uint64) { v.TMT1TransitionCount = uint32(n) }},
		{"thm_temp2_trans_count@220", 220, 4, func(v *x) uint64 { return uint64(v.TMT2TransitionCount) }, func(v *x, n uint64) { v.TMT2TransitionCount = uint32(n) }},
		{"thm_temp1_total_time@224", 224, 4, func(v *x) uint64 { return uint64(v.TMT1TotalTime) }, func(v *x, n uint64) { v.TMT1TotalTime = uint32(n) }},
		{"thm_temp2_total_time@228", 228, 4, func(v *x) uint64 { return uint64(v.TMT2TotalTime) }, func(v *x, n uint64) { v.TMT2TotalTime = uint32(n) }},
	})
	if DataUnits(0) != U128(0) || DataUnits(1) != U128(1) || DataUnits(512000) != U128(1) || DataUnits(512001) != U128(2) {
		t.Error("DataUnits")
	}
	u := Uint128{Lo: ^uint64(0)}.Add64(1)
	if u != (Uint128{Hi: 1}) || u.String() != "18446744073709551616" || U128(42).String() != "42" || !(Uint128{}).IsZero() {
		t.Errorf("Uint128 carry: %v", u)
	}
}

func TestFirmwareSlotLogGolden(t *testing.T) {
	f := FirmwareSlotLog{AFI: 1 | 2<<4, FRS: [7]string{"1.0", "", "2.0-rc1x"}}
	b := make([]byte, FirmwareSlotLogSize)
	f.Marshal(b)
	wantLE(t, "afi@0", b, 0, 1, 0x21)
	wantBytes(t, "frs1@8", b, 8, []byte("1.0     "))
	wantBytes(t, "frs2@16 (empty slot zero)", b, 16, make([]byte, 8))
	wantBytes(t, "frs3@24", b, 24, []byte("2.0-rc1x"))
	var got FirmwareSlotLog
	if err := got.Unmarshal(b); err != nil || got != f || got.ActiveSlot() != 1 || got.NextSlot() != 2 {
		t.Errorf("round trip %+v", got)
	}
	if got.Unmarshal(b[:511]) == nil {
		t.Error("short accepted")
	}
}

func TestChangedNSList(t *testing.T) {
	b := make([]byte, ChangedNSListSize)
	ChangedNSList{3, 9}.Marshal(b)
	wantLE(t, "entry0@0", b, 0, 4, 3)
	wantLE(t, "entry1@4", b, 4, 4, 9)
	var got ChangedNSList
	if err := got.Unmarshal(b); err != nil || len(got) != 2 {
		t.Error("decode")
	}
	many := make(ChangedNSList, 1025)
	for i := range many {
		many[i] = uint32(i + 1)
	}
	many.Marshal(b)
	wantLE(t, "overflow@0", b, 0, 4, 0xFFFFFFFF)
	wantLE(t, "overflow terminator@4", b, 4, 4, 0)
}

func TestCommandEffectsLogGolden(t *testing.T) {
	var c CommandEffectsLog
	c.ACS[OpIdentify] = EffectCSUPP
	c.ACS[0xFF] = 0xA
	c.IOCS[OpWrite] = EffectCSUPP | EffectLBCC
	c.IOCS[0xFF] = 0xB
	b := bytes.Repeat([]byte{0xEE}, CommandEffectsLogSize)
	c.Marshal(b)
	wantLE(t, "acs[06h]@24", b, 24, 4, 1)
	wantLE(t, "acs[FFh]@1020", b, 1020, 4, 0xA)
	wantLE(t, "iocs[01h]@1028", b, 1028, 4, 3)
	wantLE(t, "iocs[FFh]@2044", b, 2044, 4, 0xB)
	wantBytes(t, "reserved@2048..4095", b, 2048, make([]byte, 2048))
	var got CommandEffectsLog
	if err := got.Unmarshal(b); err != nil || got != c {
		t.Error("round trip")
	}
	if EffectCSEPerNS != 1<<16 || EffectUUIDSelection != 1<<19 {
		t.Error("effect bits")
	}
}

// Kernel struct nvme_ana_rsp_hdr / nvme_ana_group_desc.
func TestANALogGolden(t *testing.T) {
	l := ANALog{ChangeCount: 0x77, Groups: []ANAGroupDescriptor{
		{GroupID: 1, ChangeCount: 5, State: ANAOptimized, NSIDs: []uint32{1, 2}},
		{GroupID: 2, ChangeCount: 6, State: ANAInaccessible},
	}}
	b := make([]byte, l.Size(false))
	if n := l.Marshal(b, false); n != 16+32+8+32 {
		t.Fatalf("size %d", n)
	}
	wantLE(t, "chgcnt@0", b, 0, 8, 0x77)
	wantLE(t, "ngrps@8", b, 8, 2, 2)
	wantLE(t, "grp0.grpid@16", b, 16, 4, 1)
	wantLE(t, "grp0.nnsids@20", b, 20, 4, 2)
	wantLE(t, "grp0.chgcnt@24", b, 24, 8, 5)
	wantLE(t, "grp0.state@32", b, 32, 1, 1)
	wantLE(t, "grp0.nsid0@48", b, 48, 4, 1)
	wantLE(t, "grp0.nsid1@52", b, 52, 4, 2)
	wantLE(t, "grp1.grpid@56", b, 56, 4, 2)
	wantLE(t, "grp1.state@72", b, 72, 1, 3)
	var got ANALog
	if err := got.Unmarshal(b); err != nil || len(got.Groups) != 2 || got.Groups[0].NSIDs[1] != 2 || got.Groups[1].State != ANAInaccessible {
		t.Fatalf("decode %+v %v", got, err)
	}
	rgo := make([]byte, l.Size(true))
	l.Marshal(rgo, true)
	if len(rgo) != 16+64 || get(rgo, 20, 4) != 0 {
		t.Error("RGO form carries NSIDs")
	}
	// Claims more than the data holds: error, no huge allocation.
	put(b, 20, 4, 0xFFFFFFFF)
	if got.Unmarshal(b) == nil {
		t.Error("oversized nnsids accepted")
	}
	put(b, 8, 2, 50)
	put(b, 20, 4, 2)
	if got.Unmarshal(b) == nil {
		t.Error("oversized ngrps accepted")
	}
	_ = ANAChange.String()
}

// TestGetLogPageSetLength: NUMD is 0's based in dwords, so the largest transfer (NUMD
// 0xFFFFFFFF) is 2^34 bytes; lengths beyond it are clamped to it, partial dwords round up.
func TestGetLogPageSetLength(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		numd uint32
	}{{0, 0}, {1, 0}, {4, 0}, {5, 1}, {4096, 1023}, {1 << 34, 0xFFFFFFFF}, {1<<34 + 4, 0xFFFFFFFF}, {1 << 40, 0xFFFFFFFF}, {^uint64(0), 0xFFFFFFFF}} {
		var g GetLogPageCommand
		g.SetLength(c.n)
		if g.NUMD != c.numd {
			t.Errorf("SetLength(%d): NUMD %#x, want %#x", c.n, g.NUMD, c.numd)
		}
	}
}
