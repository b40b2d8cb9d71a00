package rdma

import (
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

func req(recfmt, qid, hrq, hsq, cntlid uint16, size int) []byte {
	b := make([]byte, size)
	if size >= nvmeproto.RDMAConnReqSize {
		(&nvmeproto.RDMAConnReq{RecFmt: recfmt, QID: qid, HRQSize: hrq, HSQSize: hsq, CNTLID: cntlid}).Marshal(b)
	}
	return b
}

func TestCheckConnReq(t *testing.T) {
	lim := connLimits{maxIOQueues: 16, adminDepth: 32, maxDepth: 128, deviceMaxIRD: 128, deviceMaxWR: 16384}
	for _, tc := range []struct {
		name    string
		priv    []byte
		hostIRD int
		lim     connLimits
		want    nvmeproto.RDMARejectStatus // 0: accepted
		depth   int
		ird     int
	}{
		{name: "linux admin, padded to 56", priv: req(0, 0, 32, 31, 0, 56), hostIRD: 128, want: 0, depth: 32, ird: 128},
		{name: "linux io", priv: req(0, 1, 128, 127, 1, 56), hostIRD: 128, want: 0, depth: 128, ird: 128},
		{name: "exactly 32 bytes", priv: req(0, 3, 64, 63, 5, 32), hostIRD: 16, want: 0, depth: 64, ird: 16},
		{name: "old host, cntlid 0", priv: req(0, 2, 32, 31, 0, 56), hostIRD: 4, want: 0, depth: 32, ird: 4},
		{name: "admin reconnect names its old cntlid", priv: req(0, 0, 32, 31, 7, 56), hostIRD: 1, want: 0, depth: 32, ird: 1},
		{name: "io queue larger than the maximum is capped", priv: req(0, 1, 1024, 1023, 1, 56), hostIRD: 128, want: 0, depth: 128, ird: 128},
		{name: "initiator depth capped by the device", priv: req(0, 1, 32, 31, 1, 56), hostIRD: 200,
			lim: connLimits{maxIOQueues: 16, adminDepth: 32, maxDepth: 128, deviceMaxIRD: 16, deviceMaxWR: 16384}, want: 0, depth: 32, ird: 16},
		{name: "queue capped by device work requests", priv: req(0, 1, 128, 127, 1, 56), hostIRD: 8,
			lim: connLimits{maxIOQueues: 16, adminDepth: 32, maxDepth: 128, deviceMaxIRD: 16, deviceMaxWR: 96}, want: 0, depth: 32, ird: 8},
		{name: "short", priv: req(0, 0, 32, 31, 0, 31), hostIRD: 128, want: nvmeproto.RDMARejectInvalidLen},
		{name: "empty", priv: nil, hostIRD: 128, want: nvmeproto.RDMARejectInvalidLen},
		{name: "recfmt 1", priv: req(1, 0, 32, 31, 0, 56), hostIRD: 128, want: nvmeproto.RDMARejectInvalidRecFmt},
		{name: "qid beyond max I/O queues", priv: req(0, 17, 32, 31, 1, 56), hostIRD: 128, want: nvmeproto.RDMARejectInvalidQID},
		{name: "admin queue of 64", priv: req(0, 0, 64, 63, 0, 56), hostIRD: 128, want: nvmeproto.RDMARejectInvalidHSQSize},
		{name: "queue of one entry", priv: req(0, 1, 1, 0, 1, 56), hostIRD: 128, want: nvmeproto.RDMARejectInvalidHSQSize},
		{name: "hrqsize 0", priv: req(0, 1, 0, 31, 1, 56), hostIRD: 128, want: nvmeproto.RDMARejectInvalidHRQSize},
		{name: "reserved cntlid", priv: req(0, 1, 32, 31, 0xFFF0, 56), hostIRD: 128, want: nvmeproto.RDMARejectInvalidCNTLID},
		{name: "host serves no READs", priv: req(0, 0, 32, 31, 0, 56), hostIRD: 0, want: nvmeproto.RDMARejectInvalidIRD},
		{name: "device too small", priv: req(0, 1, 32, 31, 1, 56), hostIRD: 8,
			lim: connLimits{maxIOQueues: 16, adminDepth: 32, maxDepth: 128, deviceMaxIRD: 16, deviceMaxWR: 3}, want: nvmeproto.RDMARejectNoResources},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lim
			if tc.lim.maxDepth != 0 {
				l = tc.lim
			}
			p, rej := checkConnReq(tc.priv, tc.hostIRD, l)
			if tc.want != 0 {
				if rej == nil {
					t.Fatalf("accepted (depth %d); want reject %v", p.depth, tc.want)
				}
				if rej.status != tc.want {
					t.Fatalf("rejected with %v (%s); want %v", rej.status, rej.msg, tc.want)
				}
				if rej.msg == "" {
					t.Errorf("reject without a reason")
				}
				return
			}
			if rej != nil {
				t.Fatalf("rejected: %v", rej)
			}
			if p.depth != tc.depth || p.ird != tc.ird {
				t.Errorf("depth %d, ird %d; want %d, %d", p.depth, p.ird, tc.depth, tc.ird)
			}
		})
	}
}

func TestRejectAndAcceptData(t *testing.T) {
	var rej nvmeproto.RDMAConnRej
	if err := rej.Unmarshal(rejectData(nvmeproto.RDMARejectInvalidHSQSize)); err != nil || rej.Status != nvmeproto.RDMARejectInvalidHSQSize || rej.RecFmt != 0 {
		t.Errorf("reject data decodes as %+v, %v", rej, err)
	}
	var rep nvmeproto.RDMAConnRep
	b := acceptData(128)
	if err := rep.Unmarshal(b); err != nil || rep.CRQSize != 128 || len(b) != nvmeproto.RDMAConnRepSize {
		t.Errorf("accept data %x decodes as %+v, %v", b, rep, err)
	}
}

// FuzzCheckConnReq: any private data is either accepted with sane queue parameters or
// rejected with a defined status; nothing panics.
func FuzzCheckConnReq(f *testing.F) {
	f.Add(req(0, 0, 32, 31, 0, 56), 128)
	f.Add(req(0, 1, 128, 127, 1, 56), 16)
	f.Add([]byte{1, 2, 3}, 0)
	lim := connLimits{maxIOQueues: 16, adminDepth: 32, maxDepth: 128, deviceMaxIRD: 128, deviceMaxWR: 16384}
	f.Fuzz(func(t *testing.T, priv []byte, ird int) {
		p, rej := checkConnReq(priv, ird, lim)
		if rej != nil {
			if rej.status < nvmeproto.RDMARejectInvalidLen || rej.status > nvmeproto.RDMARejectInvalidCNTLID {
				t.Fatalf("undefined reject status %d", rej.status)
			}
			return
		}
		if p.depth < 2 || p.depth > lim.maxDepth || (p.req.QID == 0 && p.depth > lim.adminDepth) {
			t.Fatalf("accepted depth %d for %+v", p.depth, p.req)
		}
		if p.ird < 1 || p.ird > lim.deviceMaxIRD {
			t.Fatalf("accepted initiator depth %d", p.ird)
		}
	})
}
