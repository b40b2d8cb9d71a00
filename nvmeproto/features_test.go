package nvmeproto

import (
	"bytes"
	"testing"
)

// Set/Get Features SQE: 40 fid · cdw10 bit 31 SV · cdw10 bits 10:8 SEL · 44 cdw11 ·
// 56 uuid index (libnvme NVME_FEATURES_CDW10_*, NVME_SET_FEATURES_CDW10_SAVE_SHIFT 31,
// NVME_GET_FEATURES_CDW10_SEL_SHIFT 8).
func TestFeaturesCommandsGolden(t *testing.T) {
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpSetFeatures
		put(b, 4, 4, 1)
		b[40] = byte(FIDNumberOfQueues)
		b[43] = 0x80 // SV
		put(b, 44, 4, 0x00070007)
		put(b, 48, 4, 0x12)
		put(b, 52, 4, 0x13)
		put(b, 56, 4, 0x7F)
		put(b, 60, 4, 0x15)
	})
	var s SetFeaturesCommand
	s.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"set.nsid@4", uint64(s.NSID), 1}, {"set.fid@40", uint64(s.FID), 7}, {"set.sv@43 bit 7 (cdw10 31)", b64(s.SV), 1},
		{"set.cdw11@44", uint64(s.CDW11), 0x00070007}, {"set.cdw12@48", uint64(s.CDW12), 0x12},
		{"set.cdw13@52", uint64(s.CDW13), 0x13}, {"set.uuidindex@56", uint64(s.UUIDIndex), 0x7F}, {"set.cdw15@60", uint64(s.CDW15), 0x15},
	})
	var back Command
	s.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("Set Features encoding")
	}
	raw, cmd = sqe(t, func(b []byte) {
		b[0] = OpGetFeatures
		b[40] = byte(FIDAsyncEventConfig)
		b[41] = SelSupportedCap
		put(b, 44, 4, 0xAB)
		b[56] = 3
	})
	var g GetFeaturesCommand
	g.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"get.fid@40", uint64(g.FID), 0x0B}, {"get.sel@41 bits 2:0 (cdw10 10:8)", uint64(g.SEL), 3},
		{"get.cdw11@44", uint64(g.CDW11), 0xAB}, {"get.uuidindex@56", uint64(g.UUIDIndex), 3},
	})
	back = Command{}
	g.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("Get Features encoding")
	}
	fids := map[FID]uint8{FIDArbitration: 1, FIDPowerManagement: 2, FIDVolatileWriteCache: 6, FIDNumberOfQueues: 7,
		FIDAsyncEventConfig: 0x0B, FIDTimestamp: 0x0E, FIDKeepAliveTimer: 0x0F, FIDHostBehaviorSupport: 0x16, FIDHostIdentifier: 0x81}
	for f, v := range fids {
		if uint8(f) != v || f.String()[:7] == "feature" {
			t.Errorf("FID %v = %#x want %#x", f, uint8(f), v)
		}
	}
}

func TestFeatureDwords(t *testing.T) {
	nq := MakeNumQueues(3, 7)
	if nq != 0x00070003 || nq.NSQ() != 3 || nq.NCQ() != 7 {
		t.Errorf("NumQueues %#x", uint32(nq))
	}
	ar := MakeArbitration(7, 1, 2, 3)
	if ar != 0x03020107 || ar.AB() != 7 || ar.LPW() != 1 || ar.MPW() != 2 || ar.HPW() != 3 {
		t.Errorf("Arbitration %#x", uint32(ar))
	}
	pm := MakePowerManagement(31, 7)
	if pm != 0xFF || pm.PS() != 31 || pm.WH() != 7 || MakePowerManagement(2, 1) != 0x22 {
		t.Errorf("PowerManagement %#x", uint32(pm))
	}
	tt := MakeTemperatureThreshold(343, 15, 1)
	if tt != 0x1F0157 || tt.TMPTH() != 343 || tt.TMPSEL() != 15 || tt.THSEL() != 1 {
		t.Errorf("TemperatureThreshold %#x", uint32(tt))
	}
	er := ErrorRecovery(1<<16 | 50)
	if er.TLER() != 50 || !er.DULBE() {
		t.Error("ErrorRecovery")
	}
	if !VolatileWriteCache(1).WCE() || VolatileWriteCache(2).WCE() || !WriteAtomicity(1).DN() {
		t.Error("VWC/WA")
	}
	aec := AsyncEventConfig(0xFF) | AECNamespaceAttr | AECANAChange | AECDiscoveryLogChange
	if uint32(aec) != 0x800009FF || aec.SMART() != 0xFF || !aec.Has(AECNamespaceAttr|AECDiscoveryLogChange) || aec.Has(AECFirmwareActivation) {
		t.Errorf("AEC %#x", uint32(aec))
	}
	// Same bit positions as OAES in Identify and the kernel's NVME_AEN_CFG_*.
	if uint32(AECNamespaceAttr) != OAESNamespaceAttr || uint32(AECANAChange) != OAESANAChange ||
		uint32(AECDiscoveryLogChange) != OAESDiscoveryLogChange || uint32(AECFirmwareActivation) != OAESFirmwareActivation {
		t.Error("AEC/OAES bit mismatch")
	}
	for _, c := range []struct {
		kato, want uint32
		kas        uint16
	}{
		{5000, 5000, 10}, {5001, 6000, 10}, {0, 0, 10}, {150, 150, 0}, {1, 100, 1}, {0xFFFFFFFF, 0xFFFFFFFF / 1000 * 1000, 10},
	} {
		if got := RoundKATO(c.kato, c.kas); got != c.want {
			t.Errorf("RoundKATO(%d, %d) = %d, want %d", c.kato, c.kas, got, c.want)
		}
	}
}

func TestTimestampGolden(t *testing.T) {
	ts := Timestamp{Millis: 0x0000_0605_0403_0201, Synch: true, Origin: TimestampOriginHost}
	b := make([]byte, TimestampSize)
	ts.Marshal(b)
	if !bytes.Equal(b, []byte{1, 2, 3, 4, 5, 6, 1 | 1<<1, 0}) {
		t.Errorf("timestamp %x", b)
	}
	var got Timestamp
	if err := got.Unmarshal(b); err != nil || got != ts {
		t.Errorf("round trip %+v", got)
	}
	if got.Unmarshal(b[:7]) == nil {
		t.Error("short accepted")
	}
}

func TestHostBehaviorGolden(t *testing.T) {
	type x = HostBehavior
	runFieldCases(t, HostBehaviorSize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"acre@0", 0, 1, func(v *x) uint64 { return uint64(v.ACRE) }, func(v *x, n uint64) { v.ACRE = uint8(n) }},
		{"etdas@1", 1, 1, func(v *x) uint64 { return uint64(v.ETDAS) }, func(v *x, n uint64) { v.ETDAS = uint8(n) }},
		{"lbafee@2", 2, 1, func(v *x) uint64 { return uint64(v.LBAFEE) }, func(v *x, n uint64) { v.LBAFEE = uint8(n) }},
		{"hdisns@3", 3, 1, func(v *x) uint64 { return uint64(v.HDISNS) }, func(v *x, n uint64) { v.HDISNS = uint8(n) }},
		{"cdfe@4", 4, 2, func(v *x) uint64 { return uint64(v.CDFE) }, func(v *x, n uint64) { v.CDFE = uint16(n) }},
	})
	if HostBehaviorEnable != 1 { // include/linux/nvme.h NVME_ENABLE_ACRE
		t.Errorf("HostBehaviorEnable = %d, want 1", HostBehaviorEnable)
	}
}

// AER completion DW0: bits 2:0 type, 15:8 info, 23:16 log page (kernel nvme_handle_aen_notice).
func TestAsyncEvent(t *testing.T) {
	if EventNamespaceAttrChanged != 0x00040002 || EventANAChange != 0x000C0302 || EventDiscoveryLogChange != 0x0070F002 {
		t.Errorf("events %#x %#x %#x", uint32(EventNamespaceAttrChanged), uint32(EventANAChange), uint32(EventDiscoveryLogChange))
	}
	e := MakeAsyncEvent(AETypeSMART, AESMARTTemperature, LIDSMART)
	if e.Type() != AETypeSMART || e.Info() != 1 || e.LogPage() != LIDSMART || e.String() == "" {
		t.Error("AsyncEvent fields")
	}
}
