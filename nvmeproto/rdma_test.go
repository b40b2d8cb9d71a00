package nvmeproto

import (
	"bytes"
	"errors"
	"testing"
)

// Reference §1, CM private data.
func TestCMPrivateDataReqGolden(t *testing.T) {
	type x = RDMAConnReq
	runFieldCases(t, RDMAConnReqSize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"recfmt@0", 0, 2, func(v *x) uint64 { return uint64(v.RecFmt) }, func(v *x, n uint64) { v.RecFmt = uint16(n) }},
		{"qid@2", 2, 2, func(v *x) uint64 { return uint64(v.QID) }, func(v *x, n uint64) { v.QID = uint16(n) }},
		{"hrqsize@4", 4, 2, func(v *x) uint64 { return uint64(v.HRQSize) }, func(v *x, n uint64) { v.HRQSize = uint16(n) }},
		{"hsqsize@6", 6, 2, func(v *x) uint64 { return uint64(v.HSQSize) }, func(v *x, n uint64) { v.HSQSize = uint16(n) }},
		{"cntlid@8", 8, 2, func(v *x) uint64 { return uint64(v.CNTLID) }, func(v *x, n uint64) { v.CNTLID = uint16(n) }},
	})
	// The Linux host's admin queue request: recfmt 0, qid 0, hrqsize 32, hsqsize 31.
	linux := []byte{0, 0, 0, 0, 32, 0, 31, 0}
	padded := append(append([]byte(nil), linux...), make([]byte, 56-len(linux))...) // IB/RoCE CM pads to 56
	var r RDMAConnReq
	if err := r.Unmarshal(padded); err != nil || r != (RDMAConnReq{HRQSize: 32, HSQSize: 31}) {
		t.Errorf("padded request: %+v %v", r, err)
	}
	var es *ErrShort
	if err := r.Unmarshal(padded[:31]); !errors.As(err, &es) {
		t.Errorf("31-byte request: %v", err)
	}
	b := bytes.Repeat([]byte{0xEE}, 40)
	(&RDMAConnReq{QID: 3, HRQSize: 128, HSQSize: 127, CNTLID: 5}).Marshal(b)
	wantBytes(t, "reserved@10..31", b, 10, make([]byte, 22))
	if b[32] != 0xEE {
		t.Error("wrote past 32 bytes")
	}
}

func TestCMPrivateDataRepGolden(t *testing.T) {
	type x = RDMAConnRep
	runFieldCases(t, RDMAConnRepSize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"recfmt@0", 0, 2, func(v *x) uint64 { return uint64(v.RecFmt) }, func(v *x, n uint64) { v.RecFmt = uint16(n) }},
		{"crqsize@2", 2, 2, func(v *x) uint64 { return uint64(v.CRQSize) }, func(v *x, n uint64) { v.CRQSize = uint16(n) }},
	})
	var r RDMAConnRep
	if r.Unmarshal(make([]byte, 31)) == nil {
		t.Error("short reply accepted")
	}
}

func TestCMPrivateDataRejGolden(t *testing.T) {
	type x = RDMAConnRej
	runFieldCases(t, RDMAConnRejSize, (*x).Marshal, (*x).Unmarshal, []fieldCase[x]{
		{"recfmt@0", 0, 2, func(v *x) uint64 { return uint64(v.RecFmt) }, func(v *x, n uint64) { v.RecFmt = uint16(n) }},
		{"sts@2", 2, 2, func(v *x) uint64 { return uint64(v.Status) }, func(v *x, n uint64) { v.Status = RDMARejectStatus(n) }},
	})
	codes := map[RDMARejectStatus]uint16{RDMARejectInvalidLen: 1, RDMARejectInvalidRecFmt: 2, RDMARejectInvalidQID: 3,
		RDMARejectInvalidHSQSize: 4, RDMARejectInvalidHRQSize: 5, RDMARejectNoResources: 6, RDMARejectInvalidIRD: 7,
		RDMARejectInvalidORD: 8, RDMARejectInvalidCNTLID: 9}
	for s, v := range codes {
		if uint16(s) != v || s.String() == "" || s.String()[:6] == "reject" {
			t.Errorf("reject %v = %d, want %d", s, uint16(s), v)
		}
	}
	var r RDMAConnRej
	if r.Unmarshal([]byte{0, 0, 4}) == nil {
		t.Error("short reject accepted")
	}
	if err := r.Unmarshal([]byte{0, 0, 4, 0, 9, 9}); err != nil || r.Status != RDMARejectInvalidHSQSize {
		t.Error("padded reject")
	}
	_ = RDMARejectStatus(77).String()
}
