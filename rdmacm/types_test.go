package rdmacm

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

func TestCheckMemlock(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	for _, c := range []struct {
		limit, locked, n uint64
		cap, ok          bool
	}{
		{64 * kib, 0, 256 * mib, false, false},
		{64 * kib, 0, 256 * mib, true, true},          // CAP_IPC_LOCK ignores the limit
		{rlimInfinity, 1 << 40, 1 << 40, false, true}, // unlimited
		{512 * mib, 0, 256 * mib, false, true},
		{512 * mib, 300 * mib, 256 * mib, false, false}, // what is already locked counts
		{256 * mib, 0, 256 * mib, false, true},          // exactly the limit
	} {
		err := checkMemlock(c.limit, c.locked, c.n, c.cap)
		if (err == nil) != c.ok {
			t.Errorf("checkMemlock(limit %d, locked %d, n %d, cap %v) = %v, want ok=%v", c.limit, c.locked, c.n, c.cap, err, c.ok)
		}
	}
	err := checkMemlock(64*kib, 0, 256*mib, false)
	if !errors.Is(err, ErrMemlock) {
		t.Errorf("%v is not ErrMemlock", err)
	}
	msg := err.Error()
	for _, want := range []string{"RLIMIT_MEMLOCK is 64 KiB", "256 MiB must be locked", "ulimit -l unlimited", "LimitMEMLOCK=infinity", "CAP_IPC_LOCK"} {
		if !strings.Contains(msg, want) {
			t.Errorf("memlock error %q does not say %q", msg, want)
		}
	}
}

func TestReadProcStatus(t *testing.T) {
	st := readProcStatus()
	t.Logf("%+v", st)
	if st.vmLck > 1<<50 || st.vmPin > 1<<50 {
		t.Errorf("implausible /proc/self/status values: %+v", st)
	}
}

func TestErrors(t *testing.T) {
	e := newError("rdma_bind_addr", syscall.ENODEV, "%v", "10.0.0.1:4420")
	if !errors.Is(e, ErrNoDevice) || !errors.Is(e, syscall.ENODEV) {
		t.Errorf("%v: want Is ErrNoDevice and ENODEV", e)
	}
	if s := e.Error(); !strings.Contains(s, "rdma_bind_addr(10.0.0.1:4420)") || !strings.Contains(s, "no such device") {
		t.Errorf("message %q", s)
	}
	if e := newError("ibv_alloc_pd", 0, "rxe0"); e.Errno != syscall.EIO || errors.Is(e, ErrNoDevice) {
		t.Errorf("errno 0 became %v", e.Errno)
	}
	pe := &PostError{Op: "ibv_post_send", QPNum: 17, Index: 3, ID: 0x42, Errno: syscall.ENOMEM}
	if !errors.Is(pe, syscall.ENOMEM) || !strings.Contains(pe.Error(), "work request 3 (id 0x42)") {
		t.Errorf("PostError: %v", pe)
	}
	c := Completion{ID: 5, QPNum: 9, Status: WCRemAccessErr, VendorErr: 0x81}
	var we *WCError
	if err := c.Err(); !errors.As(err, &we) || we.Status != WCRemAccessErr || !strings.Contains(err.Error(), "remote access error") {
		t.Errorf("Completion.Err() = %v", err)
	}
	if (&Completion{}).Err() != nil {
		t.Error("a successful completion has an error")
	}
	re := &RejectError{Reason: 28, PrivateData: []byte{0, 0, 5, 0, 0, 0}}
	if !strings.Contains(re.Error(), "private data 00 00 05,") {
		t.Errorf("RejectError: %v", re)
	}
}

func TestStrings(t *testing.T) {
	for typ := EventAddrResolved; typ <= EventTimewaitExit; typ++ {
		if s := typ.String(); strings.HasPrefix(s, "EventType(") || s == "" {
			t.Errorf("event %d has no name", typ)
		}
	}
	for typ := AsyncCQErr; typ <= AsyncWQFatal; typ++ {
		if s := typ.String(); strings.HasPrefix(s, "AsyncEventType(") {
			t.Errorf("async event %d has no name", typ)
		}
	}
	for _, c := range []struct{ got, want string }{
		{EventConnectRequest.String(), "CONNECT_REQUEST"},
		{EventType(99).String(), "EventType(99)"},
		{WCFlushErr.String(), "work request flushed"},
		{WCStatus(200).String(), "WCStatus(200)"},
		{OpRead.String(), "READ"},
		{WCRecvImm.String(), "RECV_RDMA_WITH_IMM"},
		{PortActive.String(), "ACTIVE"},
		{LinkLayerEthernet.String(), "Ethernet"},
		{GIDTypeRoCEv2.String(), "RoCEv2"},
		{AsyncEvent{Type: AsyncQPFatal, QPNum: 7}.String(), "QP_FATAL qp 7"},
		{AsyncEvent{Type: AsyncPortErr, Port: 1}.String(), "PORT_ERR port 1"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if !WCRecv.IsRecv() || !WCRecvImm.IsRecv() || WCSend.IsRecv() || WCRead.IsRecv() {
		t.Error("IsRecv")
	}
}

func TestSGL(t *testing.T) {
	var w SendWR
	w.SetSGL(SGE{Addr: 1, Length: 10}, SGE{Addr: 2, Length: 20})
	if w.NumSGE != 2 || w.Length() != 30 {
		t.Errorf("NumSGE %d Length %d", w.NumSGE, w.Length())
	}
	mustPanic(t, func() { w.SetSGL(make([]SGE, MaxSGE+1)...) })
	var r RecvWR
	r.SetSGL(SGE{Length: 64}, SGE{Length: 8192})
	if r.NumSGE != 2 {
		t.Errorf("RecvWR NumSGE %d", r.NumSGE)
	}
	mustPanic(t, func() { r.SetSGL(make([]SGE, MaxRecvSGE+1)...) })
	// Layouts C relies on (checked against the C headers at compile time
	// in layout_linux.go as well).
	if unsafe.Sizeof(SGE{}) != 16 || unsafe.Sizeof(Completion{}) != 48 || unsafe.Offsetof(SendWR{}.SGL) != 40 {
		t.Errorf("layout: SGE %d, Completion %d, SendWR.SGL at %d", unsafe.Sizeof(SGE{}), unsafe.Sizeof(Completion{}), unsafe.Offsetof(SendWR{}.SGL))
	}
}

func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	f()
}

func TestCompletionImm(t *testing.T) {
	var c Completion
	b := (*[4]byte)(unsafe.Pointer(&c.ImmBE))
	binary.BigEndian.PutUint32(b[:], 0x11223344) // as the wire (and ibv_wc) has it
	if c.Imm() != 0x11223344 {
		t.Errorf("Imm() = %#x", c.Imm())
	}
}

func TestGIDAddrs(t *testing.T) {
	gid := func(s string) (g [16]byte) { return netip.MustParseAddr(s).As16() }
	v4 := GIDEntry{GID: gid("::ffff:10.99.0.1"), Type: GIDTypeRoCEv2}
	if a, ok := v4.Addr(); !ok || a != netip.MustParseAddr("10.99.0.1") {
		t.Errorf("IPv4-mapped GID: %v %v", a, ok)
	}
	for _, g := range []GIDEntry{
		{GID: gid("fe80::1"), Type: GIDTypeRoCEv2},
		{GID: gid("::ffff:10.99.0.1"), Type: GIDTypeIB},
		{GID: gid("::"), Type: GIDTypeRoCEv1},
	} {
		if a, ok := g.Addr(); ok {
			t.Errorf("%+v: address %v", g, a)
		}
	}
	d := DeviceInfo{Ports: []PortAttr{
		{State: PortDown, GIDs: []GIDEntry{{GID: gid("::ffff:10.0.0.9"), Type: GIDTypeRoCEv2}}},
		{State: PortActive, GIDs: []GIDEntry{
			{GID: gid("2001:db8::1"), Type: GIDTypeRoCEv2},
			{GID: gid("::ffff:10.99.0.1"), Type: GIDTypeRoCEv1},
			{GID: gid("::ffff:10.99.0.1"), Type: GIDTypeRoCEv2},
		}},
	}}
	got := d.Addrs()
	want := []netip.Addr{netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("2001:db8::1")}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Addrs() = %v, want %v", got, want)
	}
	if mtuBytes(5) != 4096 || mtuBytes(1) != 256 || mtuBytes(0) != 0 {
		t.Error("mtuBytes")
	}
}
