package nvmeproto

import (
	"bytes"
	"testing"
)

func TestCommandGolden(t *testing.T) {
	b := make([]byte, SQESize)
	for i := range b {
		b[i] = byte(i)
	}
	var c Command
	if err := c.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"opcode@0", uint64(c.Opcode), 0x00},
		{"flags@1", uint64(c.Flags), 0x01},
		{"cid@2", uint64(c.CID), 0x0302},
		{"nsid@4", uint64(c.NSID), 0x07060504},
		{"fctype@4", uint64(c.FabricsType()), 0x04},
		{"cdw2@8", uint64(c.CDW2), 0x0b0a0908},
		{"cdw3@12", uint64(c.CDW3), 0x0f0e0d0c},
		{"mptr@16", c.MPTR, 0x1716151413121110},
		{"sgl.addr@24", c.SGL.Address, 0x1f1e1d1c1b1a1918},
		{"sgl.id@39", uint64(c.SGL.ID()), 0x27},
		{"sgl.len@32 (unkeyed, 4 bytes)", uint64(c.SGL.Length), 0x23222120},
		{"cdw10@40", uint64(c.CDW10), 0x2b2a2928},
		{"cdw11@44", uint64(c.CDW11), 0x2f2e2d2c},
		{"cdw12@48", uint64(c.CDW12), 0x33323130},
		{"cdw13@52", uint64(c.CDW13), 0x37363534},
		{"cdw14@56", uint64(c.CDW14), 0x3b3a3938},
		{"cdw15@60", uint64(c.CDW15), 0x3f3e3d3c},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %#x, want %#x", ck.name, ck.got, ck.want)
		}
	}
	// Unkeyed descriptors leave bytes 36..38 reserved: re-encoding zeroes them.
	out := make([]byte, SQESize)
	c.Marshal(out)
	want := append([]byte(nil), b...)
	want[36], want[37], want[38] = 0, 0, 0
	if !bytes.Equal(out, want) {
		t.Errorf("round trip:\n got %x\nwant %x", out, want)
	}
	if err := c.Unmarshal(b[:63]); err == nil {
		t.Error("short SQE accepted")
	}
}

func TestKeyedSGLGolden(t *testing.T) {
	b := []byte{
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // address
		0x00, 0x10, 0x02, // length 0x021000 (24-bit)
		0xef, 0xbe, 0xad, 0xde, // key
		0x4f, // keyed data block, invalidate
	}
	var d SGLDescriptor
	if err := d.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if d.Address != 0x1122334455667788 || d.Length != 0x021000 || d.Key != 0xdeadbeef ||
		d.Type != SGLTypeKeyedDataBlock || d.Subtype != SGLSubtypeInvalidate || !d.Keyed() || d.ID() != SGLIDKeyedInvalidate {
		t.Fatalf("decoded %+v", d)
	}
	out := make([]byte, 16)
	d.Marshal(out)
	if !bytes.Equal(out, b) {
		t.Errorf("round trip %x, want %x", out, b)
	}
}

func TestCompletionGolden(t *testing.T) {
	c := Completion{DW0: 0x04030201, DW1: 0x08070605, SQHD: 0x0a09, SQID: 0x0c0b, CID: 0x0e0d,
		Status: StatusConnectInvalidHost.WithDNR()}
	b := make([]byte, CQESize)
	c.Marshal(b)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb, 0xc, 0xd, 0xe,
		0x08, 0x83} // (0x4000|0x184)<<1 = 0x8308
	if !bytes.Equal(b, want) {
		t.Fatalf("got %x want %x", b, want)
	}
	var d Completion
	b[14] |= 1 // phase tag is ignored
	if err := d.Unmarshal(b); err != nil || d != c {
		t.Fatalf("decoded %+v err %v", d, err)
	}
	if s := d.Status; s.SCT() != SCTCommandSpecific || s.SC() != 0x84 || !s.DNR() || s.Code() != StatusConnectInvalidHost {
		t.Errorf("status fields of %v", s)
	}
}

func TestDataDirection(t *testing.T) {
	cases := []struct {
		op   uint8
		fct  FabricsType
		want Direction
	}{
		{OpWrite, 0, DirHostToCtrl}, {OpRead, 0, DirCtrlToHost}, {OpFlush, 0, DirNone},
		{OpIdentify, 0, DirCtrlToHost}, {OpGetLogPage, 0, DirCtrlToHost}, {OpDatasetManagement, 0, DirHostToCtrl},
		{OpFabrics, FabricsConnect, DirHostToCtrl}, {OpFabrics, FabricsPropertyGet, DirNone},
		{OpFabrics, FabricsPropertySet, DirNone}, {OpFabrics, FabricsAuthReceive, DirCtrlToHost},
	}
	for _, tc := range cases {
		c := Command{Opcode: tc.op, NSID: uint32(tc.fct)}
		if got := c.DataDirection(); got != tc.want {
			t.Errorf("opcode %#x fctype %v: %v, want %v", tc.op, tc.fct, got, tc.want)
		}
	}
}

func FuzzCommand(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Add([]byte{0x02, 0x40, 1, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if err := c.Unmarshal(b); err != nil {
			return
		}
		out := make([]byte, SQESize)
		c.Marshal(out)
		var d Command
		if err := d.Unmarshal(out); err != nil || d != c {
			t.Fatalf("re-decode mismatch %+v vs %+v", d, c)
		}
		_ = c.DataDirection()
		_ = c.SGL.String()
	})
}

func FuzzCompletion(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Completion
		if err := c.Unmarshal(b); err != nil {
			return
		}
		_ = c.Status.String()
		out := make([]byte, CQESize)
		c.Marshal(out)
		var d Completion
		if err := d.Unmarshal(out); err != nil || d != c {
			t.Fatalf("re-decode mismatch")
		}
	})
}
