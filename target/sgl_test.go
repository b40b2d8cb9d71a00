package target

import (
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

func desc(id uint8, addr uint64, n uint32) nvmeproto.SGLDescriptor {
	return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLType(id >> 4), Subtype: nvmeproto.SGLSubtype(id & 0xF), Address: addr, Length: n, Key: 7}
}

func list(ds ...nvmeproto.SGLDescriptor) []byte {
	b := make([]byte, 16*len(ds))
	for i, d := range ds {
		d.Marshal(b[16*i:])
	}
	return b
}

// TestParseSGL pins what ParseSGL accepts for each transport capability and what it
// tells the transport (Length, InCapsule, Data, SGL).
func TestParseSGL(t *testing.T) {
	rdma := SGLCaps{Keyed: true, InCapsuleDataSize: 8192, MaxSGLDescriptors: 4, MaxTransferSize: 128 << 10}
	noICD := SGLCaps{Keyed: true, MaxSGLDescriptors: 1, MaxTransferSize: 128 << 10}
	tcp := SGLCaps{TransportData: true, InCapsuleDataSize: 8192, MaxTransferSize: 128 << 10}
	const write, read, flush = nvmeproto.OpWrite, nvmeproto.OpRead, nvmeproto.OpFlush
	icd := make([]byte, 4096)
	cases := []struct {
		name   string
		caps   SGLCaps
		op     uint8
		d      nvmeproto.SGLDescriptor
		icd    []byte
		want   nvmeproto.Status
		length uint32
		inCap  bool
		nsgl   int
	}{
		{"keyed", rdma, read, desc(0x40, 0x1000, 4096), nil, 0, 4096, false, 1},
		{"keyed invalidate", rdma, write, desc(0x4F, 0x1000, 512), nil, 0, 512, false, 1},
		{"keyed no data", rdma, flush, desc(0x40, 0, 0), nil, 0, 0, false, 0},
		{"keyed data on a no-data command", rdma, flush, desc(0x40, 0, 512), nil, nvmeproto.StatusDataSGLLengthInvalid, 0, false, 0},
		{"keyed beyond MDTS", rdma, read, desc(0x40, 0, 128<<10+1), nil, nvmeproto.StatusInvalidField, 0, false, 0},
		{"keyed at MDTS", rdma, read, desc(0x40, 0, 128<<10), nil, 0, 128 << 10, false, 1},
		{"keyed on TCP", tcp, read, desc(0x40, 0, 512), nil, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"transport data block on TCP", tcp, read, desc(0x5A, 0, 512), nil, 0, 512, false, 1},
		{"transport data block on RDMA", rdma, read, desc(0x5A, 0, 512), nil, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"in-capsule", rdma, write, desc(0x01, 0, 4096), icd, 0, 4096, true, 0},
		{"in-capsule at offset", rdma, write, desc(0x01, 1024, 512), icd, 0, 512, true, 0},
		{"in-capsule without ICD support", noICD, write, desc(0x01, 0, 512), icd, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"in-capsule beyond ICD size", rdma, write, desc(0x01, 8000, 512), icd, nvmeproto.StatusSGLOffsetInvalid, 0, false, 0},
		{"in-capsule offset overflow", rdma, write, desc(0x01, 1<<64-256, 512), icd, nvmeproto.StatusSGLOffsetInvalid, 0, false, 0},
		{"in-capsule beyond received", rdma, write, desc(0x01, 0, 8192), icd, nvmeproto.StatusDataSGLLengthInvalid, 0, false, 0},
		{"in-capsule on a read", rdma, read, desc(0x01, 0, 512), icd, nvmeproto.StatusInvalidField, 0, false, 0},
		{"data block address", rdma, write, desc(0x00, 0, 512), nil, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"segment", rdma, write, desc(0x20, 0, 32), nil, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"last segment address", rdma, write, desc(0x30, 0, 32), nil, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"keyed transport subtype", rdma, write, desc(0x4A, 0, 32), nil, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"vendor", rdma, write, desc(0xF0, 0, 32), nil, nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"list of 2", rdma, write, desc(0x31, 0, 32), list(desc(0x40, 0, 512), desc(0x4F, 4096, 1024)), 0, 1536, false, 2},
		{"list with a zero-length entry", rdma, read, desc(0x31, 16, 48), append(make([]byte, 16), list(desc(0x40, 0, 512), desc(0x40, 0, 0), desc(0x40, 9, 512))...), 0, 1024, false, 2},
		{"list beyond MSDBD", rdma, write, desc(0x31, 0, 80), list(make([]nvmeproto.SGLDescriptor, 5)...), nvmeproto.StatusInvalidNumberSGLDescriptors, 0, false, 0},
		{"list without ICD support", noICD, write, desc(0x31, 0, 16), list(desc(0x40, 0, 512)), nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"list length 0", rdma, write, desc(0x31, 0, 0), nil, nvmeproto.StatusInvalidSGLSegmentDescriptor, 0, false, 0},
		{"list length 24", rdma, write, desc(0x31, 0, 24), list(desc(0x40, 0, 512), desc(0x40, 0, 512)), nvmeproto.StatusInvalidSGLSegmentDescriptor, 0, false, 0},
		{"list beyond ICD size", rdma, write, desc(0x31, 8192, 16), nil, nvmeproto.StatusSGLOffsetInvalid, 0, false, 0},
		{"list beyond received", rdma, write, desc(0x31, 0, 32), list(desc(0x40, 0, 512)), nvmeproto.StatusDataSGLLengthInvalid, 0, false, 0},
		{"list holding in-capsule", rdma, write, desc(0x31, 0, 16), list(desc(0x01, 0, 512)), nvmeproto.StatusSGLDescriptorTypeInvalid, 0, false, 0},
		{"list beyond MDTS", rdma, write, desc(0x31, 0, 32), list(desc(0x40, 0, 64<<10), desc(0x40, 0, 64<<10+512)), nvmeproto.StatusInvalidField, 0, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r Request
			r.Cmd = nvmeproto.Command{Opcode: tc.op, Flags: nvmeproto.PSDTSGL << 6, SGL: tc.d}
			r.ICD = tc.icd
			st := ParseSGL(&r, &tc.caps)
			if st.Code() != tc.want.Code() {
				t.Fatalf("status %v, want %v", st, tc.want)
			}
			if st != nvmeproto.StatusSuccess {
				if !st.DNR() {
					t.Error("error without DNR")
				}
				return
			}
			if r.Length != tc.length || r.InCapsule != tc.inCap || len(r.SGL) != tc.nsgl {
				t.Fatalf("length %d in-capsule %v sgl %d, want %d %v %d", r.Length, r.InCapsule, len(r.SGL), tc.length, tc.inCap, tc.nsgl)
			}
			if tc.inCap && (len(r.Data) != int(tc.length) || &r.Data[0] != &tc.icd[tc.d.Address]) {
				t.Error("in-capsule Data does not point into ICD at the offset")
			}
			var sum uint32
			for _, d := range r.SGL {
				sum += d.Length
			}
			if len(r.SGL) > 0 && sum != r.Length {
				t.Errorf("SGL lengths sum to %d, Length %d", sum, r.Length)
			}
		})
	}
}

// TestParseSGLAllocs: validation is on the I/O path and must not allocate.
func TestParseSGLAllocs(t *testing.T) {
	caps := SGLCaps{Keyed: true, InCapsuleDataSize: 8192, MaxSGLDescriptors: 16, MaxTransferSize: 1 << 20}
	var r Request
	r.ICD = list(desc(0x40, 0, 512), desc(0x40, 0, 512), desc(0x40, 0, 512))
	r.Cmd = nvmeproto.Command{Opcode: nvmeproto.OpWrite, SGL: desc(0x31, 0, 48)}
	if n := testing.AllocsPerRun(100, func() { ParseSGL(&r, &caps) }); n != 0 {
		t.Errorf("ParseSGL allocates %.1f times", n)
	}
}
