package nvmeproto

import (
	"bytes"
	"testing"
)

// Reservation Register / Acquire / Release SQE (kernel struct nvme_common_command; libnvme
// nvme_resv_*): 40 cdw10: bits 2:0 action, 3 IEKEY, 15:8 RTYPE (Acquire, Release),
// 31:30 CPTPL (Register).
func TestReservationCommandGolden(t *testing.T) {
	_, cmd := sqe(t, func(b []byte) {
		b[0] = OpReservationRegister
		put(b, 4, 4, 7)
		put(b, 40, 4, 0b010|1<<3|3<<30|0xAB<<8) // RTYPE bits are not Register's
	})
	var r ReservationCommand
	r.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"register nsid@4", uint64(r.NSID), 7},
		{"register rrega@40 bits 2:0", uint64(r.Action), ResvReplace},
		{"register iekey@40 bit 3", b64(r.IEKEY), 1},
		{"register cptpl@43 bits 7:6", uint64(r.CPTPL), CPTPLSet},
		{"register rtype ignored", uint64(r.RType), 0},
	})
	var back Command
	r.ToCommand(&back)
	if back.CDW10 != 0b010|1<<3|3<<30 {
		t.Errorf("register cdw10 %#x", back.CDW10)
	}

	_, cmd = sqe(t, func(b []byte) {
		b[0] = OpReservationAcquire
		put(b, 4, 4, 1)
		put(b, 40, 4, 0b010|uint64(ResvExclusiveAccessAllRegs)<<8|3<<30)
	})
	r.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"acquire racqa@40", uint64(r.Action), ResvPreemptAndAbort},
		{"acquire iekey", b64(r.IEKEY), 0},
		{"acquire rtype@41", uint64(r.RType), 6},
		{"acquire cptpl ignored", uint64(r.CPTPL), 0},
	})
	r.ToCommand(&back)
	if back.CDW10 != 0b010|6<<8 || back.Opcode != OpReservationAcquire {
		t.Errorf("acquire cdw10 %#x opcode %#x", back.CDW10, back.Opcode)
	}

	_, cmd = sqe(t, func(b []byte) {
		b[0] = OpReservationRelease
		put(b, 40, 4, 0b001|uint64(ResvWriteExclusive)<<8)
	})
	r.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"release rrela@40", uint64(r.Action), ResvClear},
		{"release rtype@41", uint64(r.RType), 1},
	})
}

// Reservation Report SQE: 40 cdw10 NUMD (0's based), 44 cdw11 bit 0 EDS.
func TestReservationReportCommandGolden(t *testing.T) {
	_, cmd := sqe(t, func(b []byte) {
		b[0] = OpReservationReport
		put(b, 4, 4, 1)
		put(b, 40, 4, 1023)
		put(b, 44, 4, 1)
	})
	var r ReservationReportCommand
	r.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"nsid@4", uint64(r.NSID), 1},
		{"numd@40", uint64(r.NUMD), 1023},
		{"eds@44 bit 0", b64(r.EDS), 1},
		{"length", r.Length(), 4096},
	})
	var back Command
	r.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back)[40:48], marshalSQE(cmd)[40:48]) || back.Opcode != OpReservationReport {
		t.Error("round trip")
	}
}

// Register/Acquire data: 0 CRKEY, 8 NRKEY/PRKEY. Release data: 0 CRKEY (8 bytes).
func TestReservationKeysGolden(t *testing.T) {
	b := make([]byte, 16)
	put(b, 0, 8, 0x1122334455667788)
	put(b, 8, 8, 0x99AABBCCDDEEFF00)
	var k ReservationKeys
	if err := k.Unmarshal(b, ResvRegisterDataSize); err != nil {
		t.Fatal(err)
	}
	runChecks(t, []offsetCheck{
		{"crkey@0", k.Current, 0x1122334455667788},
		{"nrkey@8", k.Second, 0x99AABBCCDDEEFF00},
	})
	if err := k.Unmarshal(b[:8], ResvReleaseDataSize); err != nil || k.Current != 0x1122334455667788 || k.Second != 0 {
		t.Errorf("release data: %+v %v", k, err)
	}
	if err := k.Unmarshal(b[:15], ResvAcquireDataSize); err == nil {
		t.Error("15 bytes of acquire data decoded")
	}
	out := make([]byte, 16)
	(&ReservationKeys{Current: 0x1122334455667788, Second: 0x99AABBCCDDEEFF00}).Marshal(out)
	if !bytes.Equal(out, b) {
		t.Errorf("marshal %x", out)
	}
}

// Reservation Status data structure (kernel struct nvme_reservation_status{,_ext}).
func TestReservationStatusGolden(t *testing.T) {
	s := ReservationStatus{Gen: 0x01020304, RType: ResvExclusiveAccessRegOnly, PTPLS: true,
		Controllers: []ResvRegisteredController{
			{CNTLID: 0xFFFF, RCSTS: RCSTSHolder, HostID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, RKey: 0xAAAA},
			{CNTLID: 3, HostID: [16]byte{0xF0}, RKey: 0xBBBB},
		}}
	ext := make([]byte, ReservationStatusSize(2, true))
	if len(ext) != 64+128 {
		t.Fatalf("extended size %d", len(ext))
	}
	s.Marshal(ext, true)
	wantLE(t, "gen@0", ext, 0, 4, 0x01020304)
	wantLE(t, "rtype@4", ext, 4, 1, 4)
	wantLE(t, "regctl@5", ext, 5, 2, 2)
	wantLE(t, "ptpls@9", ext, 9, 1, 1)
	wantLE(t, "ext[0].cntlid@64", ext, 64, 2, 0xFFFF)
	wantLE(t, "ext[0].rcsts@66", ext, 66, 1, 1)
	wantLE(t, "ext[0].rkey@72", ext, 72, 8, 0xAAAA)
	wantBytes(t, "ext[0].hostid@80", ext, 80, s.Controllers[0].HostID[:])
	wantLE(t, "ext[1].cntlid@128", ext, 128, 2, 3)
	wantLE(t, "ext[1].rkey@136", ext, 136, 8, 0xBBBB)
	wantLE(t, "ext[1].hostid@144", ext, 144, 1, 0xF0)
	var got ReservationStatus
	if err := got.Unmarshal(ext, true); err != nil || len(got.Controllers) != 2 || got.Controllers[0] != s.Controllers[0] ||
		got.Controllers[1] != s.Controllers[1] || got.Gen != s.Gen || got.RType != s.RType || !got.PTPLS || got.RegCtl != 2 {
		t.Errorf("extended decode: %+v %v", got, err)
	}

	basic := make([]byte, ReservationStatusSize(2, false))
	s.Marshal(basic, false)
	wantLE(t, "regctl@5 basic", basic, 5, 2, 2)
	wantLE(t, "basic[0].cntlid@24", basic, 24, 2, 0xFFFF)
	wantLE(t, "basic[0].rcsts@26", basic, 26, 1, 1)
	wantBytes(t, "basic[0].hostid@32", basic, 32, s.Controllers[0].HostID[:8])
	wantLE(t, "basic[0].rkey@40", basic, 40, 8, 0xAAAA)
	wantLE(t, "basic[1].cntlid@48", basic, 48, 2, 3)
	wantLE(t, "basic[1].rkey@64", basic, 64, 8, 0xBBBB)

	// A short transfer holds what fits; REGCTL still counts every registrant.
	short := bytes.Repeat([]byte{0xEE}, 100)
	s.Marshal(short, true)
	wantLE(t, "short regctl", short, 5, 2, 2)
	wantLE(t, "short ext[0].rkey", short, 72, 8, 0xAAAA)
	if err := got.Unmarshal(short, true); err != nil || got.RegCtl != 2 || len(got.Controllers) != 0 {
		t.Errorf("short decode: %+v %v", got, err)
	}
	long := bytes.Repeat([]byte{0xEE}, 300)
	s.Marshal(long, true)
	if !bytes.Equal(long[192:], make([]byte, 108)) {
		t.Error("bytes past the structure not zeroed")
	}
	if err := got.Unmarshal(ext[:63], true); err == nil {
		t.Error("63-byte extended header decoded")
	}
}

// Reservation Notification log page (kernel struct nvme_pr_log).
func TestResvNotifyLogGolden(t *testing.T) {
	b := bytes.Repeat([]byte{0xEE}, ResvNotifyLogSize)
	l := ResvNotifyLog{Count: 0x0102030405060708, Type: ResvLogReservationPreempt, Available: 5, NSID: 9}
	l.Marshal(b)
	wantLE(t, "count@0", b, 0, 8, 0x0102030405060708)
	wantLE(t, "type@8", b, 8, 1, 3)
	wantLE(t, "available@9", b, 9, 1, 5)
	wantLE(t, "reserved@10", b, 10, 2, 0)
	wantLE(t, "nsid@12", b, 12, 4, 9)
	if !bytes.Equal(b[16:], make([]byte, 48)) {
		t.Error("reserved bytes 16..63 not zero")
	}
	var got ResvNotifyLog
	if err := got.Unmarshal(b); err != nil || got != l {
		t.Errorf("decode %+v %v", got, err)
	}
}

func TestResvTypeAccess(t *testing.T) {
	// The spec's table: registrant and non-registrant read/write access per type.
	type acc struct{ regR, regW, othR, othW bool }
	want := map[ResvType]acc{
		ResvWriteExclusive:         {true, false, true, false},
		ResvExclusiveAccess:        {false, false, false, false},
		ResvWriteExclusiveRegOnly:  {true, true, true, false},
		ResvExclusiveAccessRegOnly: {true, true, false, false},
		ResvWriteExclusiveAllRegs:  {true, true, true, false},
		ResvExclusiveAccessAllRegs: {true, true, false, false},
	}
	for typ, w := range want {
		got := acc{typ.Allows(false, false, true), typ.Allows(true, false, true), typ.Allows(false, false, false), typ.Allows(true, false, false)}
		if got != w {
			t.Errorf("%v: got %+v want %+v", typ, got, w)
		}
		if !typ.Allows(true, true, true) || !typ.Valid() {
			t.Errorf("%v: holder denied or type invalid", typ)
		}
	}
	if ResvType(7).Valid() || ResvNone.Valid() || !ResvNone.Allows(true, false, false) {
		t.Error("type 0/7")
	}
	if EventReservationLog != 0x800006 {
		t.Errorf("event %#x", uint32(EventReservationLog))
	}
}
