package nvmeproto

import (
	"bytes"
	"testing"
)

// Reference §8: Read/Write: SLBA cdw10..11, NLB (0's based) cdw12 bits 15:0, FUA cdw12 bit 30.
func TestRWCommandGolden(t *testing.T) {
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpWrite
		put(b, 4, 4, 1)
		put(b, 40, 8, 0x0000_0012_3456_789A) // SLBA, bytes 40..47 = cdw10..11
		put(b, 48, 2, 7)                     // NLB 0's based
		put(b, 50, 2, 1<<14|1<<15|0xF<<10|1<<9|2<<4)
		put(b, 52, 1, 0x5)
		put(b, 54, 2, 0xBEEF)
		put(b, 56, 4, 0xCAFEF00D)
		put(b, 60, 2, 0x1111)
		put(b, 62, 2, 0x2222)
	})
	var r RWCommand
	r.FromCommand(cmd)
	runChecks(t, []offsetCheck{
		{"opcode@0", uint64(r.Opcode), 1}, {"nsid@4", uint64(r.NSID), 1},
		{"slba@40 (cdw10..11)", r.SLBA, 0x123456789A}, {"nlb@48 (cdw12 15:0)", uint64(r.NLB), 7}, {"blocks", uint64(r.Blocks()), 8},
		{"fua (cdw12 bit 30)", b64(r.FUA()), 1}, {"lr (cdw12 bit 31)", b64(r.LR()), 1},
		{"prinfo (cdw12 29:26)", uint64(r.PRINFO()), 0xF}, {"deac (cdw12 bit 25)", b64(r.DEAC()), 1},
		{"dtype (cdw12 23:20)", uint64(r.DTYPE()), 2}, {"dsm@52", uint64(r.DSM), 5}, {"dspec@54", uint64(r.DSPEC), 0xBEEF},
		{"reftag@56", uint64(r.RefTag), 0xCAFEF00D}, {"apptag@60", uint64(r.AppTag), 0x1111}, {"appmask@62", uint64(r.AppMask), 0x2222},
	})
	if cmd.CDW12&(1<<30) == 0 {
		t.Error("FUA is not cdw12 bit 30")
	}
	var back Command
	r.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("ToCommand encoding")
	}
	for _, c := range []struct {
		slba uint64
		nlb  uint16
		nsze uint64
		ok   bool
	}{{0, 0, 1, true}, {0, 0, 0, false}, {9, 0, 10, true}, {9, 1, 10, false}, {^uint64(0), 0xFFFF, ^uint64(0), false}, {1, 0xFFFF, 1 << 20, true}} {
		r := RWCommand{SLBA: c.slba, NLB: c.nlb}
		if r.InRange(c.nsze) != c.ok {
			t.Errorf("InRange(slba %d nlb %d nsze %d) = %v", c.slba, c.nlb, c.nsze, !c.ok)
		}
	}
	// Reference §8 statuses.
	if StatusLBAOutOfRange.SCT() != SCTGeneric || StatusLBAOutOfRange.SC() != 0x80 || StatusDataSGLLengthInvalid.SC() != 0x0F {
		t.Error("§8 statuses")
	}
	// Reference §8 opcodes.
	ops := map[uint8]uint8{OpFlush: 0, OpWrite: 1, OpRead: 2, OpWriteUncorrectable: 4, OpCompare: 5, OpWriteZeroes: 8,
		OpDatasetManagement: 9, OpReservationRegister: 0x0D, OpReservationReport: 0x0E, OpReservationAcquire: 0x11, OpReservationRelease: 0x15}
	for got, want := range ops {
		if got != want {
			t.Errorf("opcode %#x want %#x", got, want)
		}
	}
}

func TestDSMGolden(t *testing.T) {
	raw, cmd := sqe(t, func(b []byte) {
		b[0] = OpDatasetManagement
		put(b, 4, 4, 2)
		b[40] = 2 // 3 ranges
		put(b, 44, 4, DSMAttrAD)
	})
	var d DatasetManagementCommand
	d.FromCommand(cmd)
	if d.NR != 2 || d.Ranges() != 3 || d.DataLength() != 48 || d.Attributes != DSMAttrAD || d.NSID != 2 {
		t.Errorf("%+v", d)
	}
	var back Command
	d.ToCommand(&back)
	if !bytes.Equal(marshalSQE(&back), raw) {
		t.Error("ToCommand")
	}
	type x = DSMRange
	runFieldCases(t, DSMRangeSize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"cattr@0", 0, 4, func(v *x) uint64 { return uint64(v.Attributes) }, func(v *x, n uint64) { v.Attributes = uint32(n) }},
		{"nlb@4", 4, 4, func(v *x) uint64 { return uint64(v.NLB) }, func(v *x, n uint64) { v.NLB = uint32(n) }},
		{"slba@8", 8, 8, func(v *x) uint64 { return v.SLBA }, func(v *x, n uint64) { v.SLBA = n }},
	})
	data := make([]byte, 48)
	for i := 0; i < 3; i++ {
		(&DSMRange{NLB: uint32(i + 1), SLBA: uint64(100 * i)}).Marshal(data[16*i:])
	}
	buf := make([]DSMRange, 0, MaxDSMRanges)
	rs, err := DecodeDSMRanges(buf, data, 3)
	if err != nil || len(rs) != 3 || rs[2].SLBA != 200 || rs[1].NLB != 2 || &rs[0] != &buf[:1][0] {
		t.Errorf("decode %v %v", rs, err)
	}
	if _, err := DecodeDSMRanges(buf, data, 4); err == nil {
		t.Error("short data accepted")
	}
	if _, err := DecodeDSMRanges(buf, data, 0); err == nil {
		t.Error("0 ranges accepted")
	}
	if n := testing.AllocsPerRun(100, func() { rs, _ = DecodeDSMRanges(buf, data, 3) }); n != 0 {
		t.Errorf("DecodeDSMRanges allocates %v", n)
	}
}

// The per-command views are on the I/O path: decoding must not allocate.
func TestViewsDoNotAllocate(t *testing.T) {
	b := make([]byte, SQESize)
	b[0] = OpRead
	var c Command
	var rw RWCommand
	var cc ConnectCommand
	var g GetLogPageCommand
	var id IdentifyCommand
	var ps PropertySetCommand
	var sf SetFeaturesCommand
	var d DatasetManagementCommand
	n := testing.AllocsPerRun(1000, func() {
		_ = c.Unmarshal(b)
		rw.FromCommand(&c)
		cc.FromCommand(&c)
		g.FromCommand(&c)
		id.FromCommand(&c)
		ps.FromCommand(&c)
		sf.FromCommand(&c)
		d.FromCommand(&c)
		c.Marshal(b)
	})
	if n != 0 {
		t.Errorf("views allocate %v times per command", n)
	}
	var cq Completion
	cb := make([]byte, CQESize)
	if n := testing.AllocsPerRun(1000, func() { cq.Marshal(cb); _ = cq.Unmarshal(cb) }); n != 0 {
		t.Errorf("completion allocates %v", n)
	}
}

// Fabrics and admin views zero the reserved CDW2, CDW3 and MPTR so a reused Command does
// not leak stale bytes into reserved fields; they leave CID, flags and the SGL alone.
func TestToCommandClearsReserved(t *testing.T) {
	views := map[string]interface{ ToCommand(*Command) }{
		"Connect": &ConnectCommand{}, "PropertyGet": &PropertyGetCommand{}, "PropertySet": &PropertySetCommand{},
		"Disconnect": &DisconnectCommand{}, "AuthSend": &AuthSendCommand{}, "AuthReceive": &AuthReceiveCommand{},
		"Identify": &IdentifyCommand{}, "GetLogPage": &GetLogPageCommand{}, "SetFeatures": &SetFeaturesCommand{},
		"GetFeatures": &GetFeaturesCommand{}, "DatasetManagement": &DatasetManagementCommand{},
	}
	for name, v := range views {
		c := Command{CID: 7, Flags: 0x40, CDW2: 1, CDW3: 2, MPTR: 3, NSID: 0xFFFFFFFF, SGL: SGLDescriptor{Address: 9}}
		v.ToCommand(&c)
		if c.CDW2 != 0 || c.CDW3 != 0 || c.MPTR != 0 || c.CID != 7 || c.Flags != 0x40 || c.SGL.Address != 9 {
			t.Errorf("%s: %+v", name, c)
		}
		if c.Opcode == OpFabrics && c.NSID > 0xFF {
			t.Errorf("%s: fctype bytes 5..7 not cleared: %#x", name, c.NSID)
		}
	}
}
