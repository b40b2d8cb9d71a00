package target_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// ioEnv connects a controller with one I/O queue to a subsystem holding the namespaces.
func ioEnv(t *testing.T, nss ...conf.Namespace) (*env, *hostQueue, *hostQueue) {
	t.Helper()
	e := newEnv(t, baseConfig(nss...))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	return e, admin, e.ioConnect(1, cntlid, 32)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) ^ seed ^ byte(i>>8)
	}
	return b
}

func TestIOStatuses(t *testing.T) {
	ro := memNS(2, 1<<20)
	ro.ReadOnly = true
	_, _, q := ioEnv(t, memNS(1, 1<<20), ro) // 2048 blocks of 512 B
	const nblocks = 2048

	// A good write and read first, and after every error below (the queue keeps working).
	good := func() {
		t.Helper()
		d := pattern(4096, 1)
		w := rw(nvmeproto.OpWrite, 1, 8, 8, 4096)
		expectOK(t, "write", q.do(&w, d))
		got := make([]byte, 4096)
		r := rw(nvmeproto.OpRead, 1, 8, 8, 4096)
		expectOK(t, "read", q.do(&r, got))
		if !bytes.Equal(got, d) {
			t.Fatal("read back differs")
		}
	}
	good()

	cases := []struct {
		name string
		cmd  nvmeproto.Command
		data []byte
		want nvmeproto.Status
	}{
		{"unknown opcode", sglCmd(0x7E, 1, 0), nil, nvmeproto.StatusInvalidOpcode},
		{"admin opcode on I/O queue", sglCmd(nvmeproto.OpIdentify, 1, 0), nil, nvmeproto.StatusInvalidOpcode},
		{"write uncorrectable", sglCmd(nvmeproto.OpWriteUncorrectable, 1, 0), nil, nvmeproto.StatusInvalidOpcode},
		{"nsid 0", rw(nvmeproto.OpRead, 0, 0, 1, 512), make([]byte, 512), nvmeproto.StatusInvalidNamespace},
		{"nsid 99", rw(nvmeproto.OpRead, 99, 0, 1, 512), make([]byte, 512), nvmeproto.StatusInvalidNamespace},
		{"flush nsid all", sglCmd(nvmeproto.OpFlush, nvmeproto.NSIDAll, 0), nil, nvmeproto.StatusInvalidNamespace},
		{"lba beyond end", rw(nvmeproto.OpRead, 1, nblocks-1, 2, 1024), make([]byte, 1024), nvmeproto.StatusLBAOutOfRange},
		{"lba overflow", rw(nvmeproto.OpWrite, 1, 1<<64-1, 2, 1024), make([]byte, 1024), nvmeproto.StatusLBAOutOfRange},
		{"write zeroes beyond end", rw(nvmeproto.OpWriteZeroes, 1, nblocks, 1, 0), nil, nvmeproto.StatusLBAOutOfRange},
		{"transfer larger than MDTS", rw(nvmeproto.OpRead, 1, 0, 512, 512*512), make([]byte, 512*512), nvmeproto.StatusInvalidField},
		{"SGL length != NLB", rw(nvmeproto.OpRead, 1, 0, 8, 2048), make([]byte, 2048), nvmeproto.StatusDataSGLLengthInvalid},
		{"flush with data", sglCmd(nvmeproto.OpFlush, 1, 512), make([]byte, 512), nvmeproto.StatusDataSGLLengthInvalid},
		{"write to read-only", rw(nvmeproto.OpWrite, 2, 0, 1, 512), make([]byte, 512), nvmeproto.StatusNSWriteProtected},
		{"write zeroes to read-only", rw(nvmeproto.OpWriteZeroes, 2, 0, 1, 0), nil, nvmeproto.StatusNSWriteProtected},
		{"host memory too small", rw(nvmeproto.OpRead, 1, 0, 8, 4096), make([]byte, 100), nvmeproto.StatusDataTransferError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := q.do(&tc.cmd, tc.data)
			expect(t, tc.name, c, tc.want)
			if !c.Status.DNR() && tc.want != nvmeproto.StatusDataTransferError {
				t.Errorf("%s: DNR not set", tc.name)
			}
			good()
		})
	}

	// Bad command flags: fused, PRP data pointer.
	fused := rw(nvmeproto.OpRead, 1, 0, 1, 512)
	fused.Flags |= 1
	expect(t, "fused", q.do(&fused, make([]byte, 512)), nvmeproto.StatusInvalidField)
	prp := rw(nvmeproto.OpRead, 1, 0, 1, 512)
	prp.Flags = 0
	expect(t, "PRP", q.do(&prp, make([]byte, 512)), nvmeproto.StatusInvalidField)
	good()
}

func TestSGLStatuses(t *testing.T) {
	_, _, q := ioEnv(t, memNS(1, 1<<20))
	sgl := func(id uint8, addr uint64, n uint32) nvmeproto.SGLDescriptor {
		return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLType(id >> 4), Subtype: nvmeproto.SGLSubtype(id & 0xF), Address: addr, Length: n}
	}
	write := func(d nvmeproto.SGLDescriptor, nlb int) nvmeproto.Command {
		c := rw(nvmeproto.OpWrite, 1, 0, nlb, 0)
		c.SGL = d
		return c
	}
	// in-capsule data size is 8192 (baseConfig).
	cases := []struct {
		name string
		cmd  nvmeproto.Command
		data []byte
		want nvmeproto.Status
	}{
		{"data block address (0x00)", write(sgl(0x00, 0, 512), 1), make([]byte, 512), nvmeproto.StatusSGLDescriptorTypeInvalid},
		{"keyed bad subtype (0x41)", write(sgl(0x41, 0, 512), 1), make([]byte, 512), nvmeproto.StatusSGLDescriptorTypeInvalid},
		{"transport data block (0x5A) on loop", write(sgl(0x5A, 0, 512), 1), make([]byte, 512), nvmeproto.StatusSGLDescriptorTypeInvalid},
		{"segment (0x20)", write(sgl(0x20, 0, 32), 1), make([]byte, 512), nvmeproto.StatusSGLDescriptorTypeInvalid},
		{"bit bucket (0x10)", write(sgl(0x10, 0, 512), 1), make([]byte, 512), nvmeproto.StatusSGLDescriptorTypeInvalid},
		{"in-capsule beyond ICD size", write(sgl(0x01, 8192-256, 512), 1), make([]byte, 512), nvmeproto.StatusSGLOffsetInvalid},
		{"in-capsule longer than sent", write(sgl(0x01, 0, 1024), 2), make([]byte, 512), nvmeproto.StatusDataSGLLengthInvalid},
		{"keyed longer than MDTS", write(sgl(0x40, 0, 256<<10), 1), make([]byte, 256<<10), nvmeproto.StatusInvalidField},
	}
	rd := rw(nvmeproto.OpRead, 1, 0, 1, 0)
	rd.SGL = sgl(0x01, 0, 512)
	cases = append(cases, struct {
		name string
		cmd  nvmeproto.Command
		data []byte
		want nvmeproto.Status
	}{"in-capsule on a read", rd, make([]byte, 512), nvmeproto.StatusInvalidField})
	for _, tc := range cases {
		expect(t, tc.name, q.do(&tc.cmd, tc.data), tc.want)
	}

	// Last segment lists go through SubmitCapsule: SQE + descriptor list in the ICD.
	capsule := func(cmd nvmeproto.Command, descs ...nvmeproto.SGLDescriptor) []byte {
		cmd.CID = q.nextCID()
		b := make([]byte, 64+16*len(descs))
		cmd.SGL = sgl(0x31, 0, uint32(16*len(descs)))
		cmd.Marshal(b)
		for i, d := range descs {
			d.Marshal(b[64+16*i:])
		}
		return b
	}
	submitCapsule := func(b, host []byte) nvmeproto.Completion {
		ch := make(chan nvmeproto.Completion, 1)
		if err := q.conn.SubmitCapsule(b, host, func(c nvmeproto.Completion) { ch <- c }); err != nil {
			t.Fatal(err)
		}
		return wait(t, ch)
	}
	host := pattern(8192, 3)
	// Two keyed segments, scattered in host memory, written as 4 blocks then read back.
	w := rw(nvmeproto.OpWrite, 1, 100, 4, 0)
	expectOK(t, "write 0x31 list", submitCapsule(capsule(w, sgl(0x40, 4096, 1024), sgl(0x40, 0, 1024)), host))
	got := make([]byte, 2048)
	r := rw(nvmeproto.OpRead, 1, 100, 4, 2048)
	expectOK(t, "read back", q.do(&r, got))
	if !bytes.Equal(got[:1024], host[4096:5120]) || !bytes.Equal(got[1024:], host[:1024]) {
		t.Fatal("0x31 list write did not gather segments in order")
	}
	// Read through a list: scattered back out.
	out := make([]byte, 8192)
	expectOK(t, "read 0x31 list", submitCapsule(capsule(rw(nvmeproto.OpRead, 1, 100, 4, 0), sgl(0x4F, 6000, 1024), sgl(0x40, 10, 1024)), out))
	if !bytes.Equal(out[6000:7024], host[4096:5120]) || !bytes.Equal(out[10:1034], host[:1024]) {
		t.Fatal("0x31 list read did not scatter segments in order")
	}
	seventeen := make([]nvmeproto.SGLDescriptor, 17)
	for i := range seventeen {
		seventeen[i] = sgl(0x40, 0, 512)
	}
	expect(t, "17 descriptors > MSDBD 16", submitCapsule(capsule(rw(nvmeproto.OpWrite, 1, 0, 17, 0), seventeen...), host),
		nvmeproto.StatusInvalidNumberSGLDescriptors)
	expect(t, "data block inside a list", submitCapsule(capsule(rw(nvmeproto.OpWrite, 1, 0, 1, 0), sgl(0x01, 0, 512)), host),
		nvmeproto.StatusSGLDescriptorTypeInvalid)
	bad := capsule(rw(nvmeproto.OpWrite, 1, 0, 1, 0), sgl(0x40, 0, 512))
	binary.LittleEndian.PutUint32(bad[24+8:], 20) // list length not a multiple of 16
	expect(t, "list length 20", submitCapsule(bad, host), nvmeproto.StatusInvalidSGLSegmentDescriptor)
	bad = capsule(rw(nvmeproto.OpWrite, 1, 0, 1, 0), sgl(0x40, 0, 512))
	binary.LittleEndian.PutUint64(bad[24:], 8192) // list beyond the in-capsule data size
	expect(t, "list beyond ICD size", submitCapsule(bad, host), nvmeproto.StatusSGLOffsetInvalid)

	// In-capsule write at an unaligned offset (exercises the bounce buffer), read back.
	ic := rw(nvmeproto.OpWrite, 1, 200, 2, 0)
	ic.SGL = sgl(0x01, 512, 1024)
	icd := pattern(1536, 9)
	b := make([]byte, 64+len(icd))
	ic.CID = q.nextCID()
	ic.Marshal(b)
	copy(b[64:], icd)
	expectOK(t, "in-capsule write at offset 512", submitCapsule(b, nil))
	r = rw(nvmeproto.OpRead, 1, 200, 2, 1024)
	expectOK(t, "read back", q.do(&r, got[:1024]))
	if !bytes.Equal(got[:1024], icd[512:]) {
		t.Fatal("in-capsule data at an offset read back wrong")
	}
	// In-capsule through Submit (the data is the ICD).
	ic = rw(nvmeproto.OpWrite, 1, 300, 1, 0)
	ic.SGL = sgl(0x01, 0, 512)
	expectOK(t, "in-capsule write", q.do(&ic, icd[:512]))
}

func TestIOCommands(t *testing.T) {
	_, _, q := ioEnv(t, fileNS(t, 1, 1<<20))
	d := pattern(8192, 5)
	w := rw(nvmeproto.OpWrite, 1, 0, 16, 8192)
	w.CDW12 |= 1 << 30 // FUA
	expectOK(t, "FUA write", q.do(&w, d))

	// Compare: equal, then different.
	cmp := rw(nvmeproto.OpCompare, 1, 0, 16, 8192)
	expectOK(t, "compare equal", q.do(&cmp, d))
	d2 := bytes.Clone(d)
	d2[5000] ^= 1
	c := q.do(&cmp, d2)
	expect(t, "compare different", c, nvmeproto.StatusCompareFailure)
	if c.Status.SCT() != nvmeproto.SCTMediaError {
		t.Errorf("compare failure SCT %v", c.Status.SCT())
	}

	// Write Zeroes over blocks 2..3.
	wz := rw(nvmeproto.OpWriteZeroes, 1, 2, 2, 0)
	expectOK(t, "write zeroes", q.do(&wz, nil))
	got := make([]byte, 8192)
	r := rw(nvmeproto.OpRead, 1, 0, 16, 8192)
	expectOK(t, "read", q.do(&r, got))
	want := bytes.Clone(d)
	clear(want[1024:2048])
	if !bytes.Equal(got, want) {
		t.Fatal("write zeroes: wrong data")
	}

	// Dataset Management deallocate of blocks 8..15 and 0..1 (plus a zero-length range).
	ranges := make([]byte, 3*16)
	put := func(i int, slba uint64, nlb uint32) {
		binary.LittleEndian.PutUint32(ranges[16*i+4:], nlb)
		binary.LittleEndian.PutUint64(ranges[16*i+8:], slba)
	}
	put(0, 8, 8)
	put(1, 100, 0)
	put(2, 0, 2)
	dsm := sglCmd(nvmeproto.OpDatasetManagement, 1, len(ranges))
	dsm.CDW10 = 2      // 3 ranges
	dsm.CDW11 = 1 << 2 // deallocate
	expectOK(t, "deallocate", q.do(&dsm, ranges))
	expectOK(t, "read", q.do(&r, got))
	clear(want[4096:])
	clear(want[:1024])
	if !bytes.Equal(got, want) {
		t.Fatal("deallocate: blocks do not read as zeroes")
	}
	// DSM range beyond the end fails as a whole, with LBA Out of Range.
	put(0, 2047, 2)
	expect(t, "deallocate beyond end", q.do(&dsm, ranges), nvmeproto.StatusLBAOutOfRange)
	short := sglCmd(nvmeproto.OpDatasetManagement, 1, 16)
	short.CDW10, short.CDW11 = 2, 1<<2
	expect(t, "DSM data shorter than its ranges", q.do(&short, ranges[:16]), nvmeproto.StatusDataSGLLengthInvalid)
	hint := sglCmd(nvmeproto.OpDatasetManagement, 1, 16)
	expectOK(t, "DSM hints only", q.do(&hint, ranges[:16]))
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectOK(t, "flush", q.do(&fl, nil))
}

// TestSQHead checks SQHD in completions and SQ flow control disabled by Connect CATTR.
func TestSQHead(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 4) // 4 entries: head wraps 1,2,3,0
	var heads []uint16
	for range 6 {
		f := sglCmd(nvmeproto.OpFlush, 1, 0)
		heads = append(heads, q.do(&f, nil).SQHD)
	}
	// Connect consumed entry 0, so the flushes see heads 2,3,0,1,2,3.
	if want := []uint16{2, 3, 0, 1, 2, 3}; !equalU16(heads, want) {
		t.Errorf("SQHD %v, want %v", heads, want)
	}

	q2 := e.dial(8)
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(1024)}
	cc := nvmeproto.ConnectCommand{QID: 2, SQSize: 7, CAttr: nvmeproto.ConnectCAttrDisableSQFlow}
	cc.ToCommand(&cmd)
	d := nvmeproto.ConnectData{HostID: hostID, CNTLID: cntlid, SubNQN: subNQN, HostNQN: hostNQN}
	buf := make([]byte, 1024)
	d.Marshal(buf)
	c := q2.do(&cmd, buf)
	expectOK(t, "connect without SQ flow control", c)
	f := sglCmd(nvmeproto.OpFlush, 1, 0)
	if c := q2.do(&f, nil); c.SQHD != 0xFFFF || c.SQID != 2 {
		t.Errorf("SQHD %#x SQID %d, want 0xFFFF 2", c.SQHD, c.SQID)
	}
}

func equalU16(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWriteCacheAndFUA: FUA writes reach the backend as FUA; with the volatile write
// cache disabled (Set Features 06h) every write does.
func TestWriteCacheAndFUA(t *testing.T) {
	ss := &spies{}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)), spyBackends(ss, nil, 0))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	sp := ss.get(0)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expectOK(t, "write", q.do(&w, make([]byte, 512)))
	w.CDW12 |= 1 << 30
	expectOK(t, "FUA write", q.do(&w, make([]byte, 512)))
	if n := sp.fuaWrites.Load(); n != 1 {
		t.Fatalf("%d FUA writes reached the backend, want 1", n)
	}
	expectOK(t, "VWC off", admin.setFeature(0x06, 0, nil))
	w = rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expectOK(t, "write, cache off", q.do(&w, make([]byte, 512)))
	if n := sp.fuaWrites.Load(); n != 2 {
		t.Fatalf("write with the cache disabled was not FUA")
	}
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	before := sp.flushes.Load()
	expectOK(t, "flush", q.do(&fl, nil))
	if sp.flushes.Load() != before+1 {
		t.Fatal("Flush did not reach the backend")
	}
}

// TestWriteCacheReportedBeforeNamespaces: a controller whose subsystem has only
// namespaces without a volatile write cache (memory) reports one all the same, and its
// feature 06h exists: the Linux host reads VWC once, when it sets the controller up, and
// sends neither Flush nor FUA to one without — so a file namespace added afterwards (it
// has a cache) would lose the writes it acknowledged. The old code reported VWC 0 here
// (and refused feature 06h) and 1 once the file namespace was added.
func TestWriteCacheReportedBeforeNamespaces(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	vwc := func(when string) {
		t.Helper()
		id, c := admin.identify(nvmeproto.CNSController, 0, 0)
		expectOK(t, "Identify Controller "+when, c)
		if id[525]&1 == 0 {
			t.Errorf("Identify Controller %s: VWC %#x, want a volatile write cache present", when, id[525])
		}
	}
	vwc("with only a memory namespace")
	expectOK(t, "VWC off with only a memory namespace", admin.setFeature(0x06, 0, nil))
	if _, c := admin.getFeature(0x06, 0, 0, 0); c.Status != 0 || c.DW0 != 0 {
		t.Errorf("Get Features VWC after disabling: status %v DW0 %#x, want success and 0", c.Status, c.DW0)
	}
	if err := e.tgt.AddNamespace(subNQN, fileNS(t, 2, 1<<20)); err != nil {
		t.Fatal(err)
	}
	vwc("after a file namespace was added")
}
