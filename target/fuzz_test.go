package target_test

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// fuzzCapsule encodes one record of FuzzLoopCapsules input: queue selector, length of the
// in-capsule data in 16-byte units, then the SQE and the in-capsule data.
func fuzzCapsule(admin bool, cmd nvmeproto.Command, icd []byte) []byte {
	b := []byte{0, byte(len(icd) / 16)}
	if admin {
		b[0] = 1
	}
	sqe := make([]byte, 64)
	cmd.Marshal(sqe)
	b = append(b, sqe...)
	return append(b, icd...)
}

// FuzzLoopCapsules feeds random command capsules through the loop transport to a
// connected controller's admin and I/O queues. It asserts that nothing panics, that every
// accepted capsule completes exactly once with its CID, that no backend request reaches
// outside its namespace, and that the I/O queue still works afterwards.
func FuzzLoopCapsules(f *testing.F) {
	w := rw(nvmeproto.OpWrite, 1, 10, 8, 4096)
	r := rw(nvmeproto.OpRead, 1, 10, 8, 4096)
	ic := rw(nvmeproto.OpWrite, 1, 0, 1, 0)
	ic.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeDataBlock, Subtype: nvmeproto.SGLSubtypeOffset, Length: 512}
	list := rw(nvmeproto.OpWrite, 1, 0, 2, 0)
	list.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeLastSegment, Subtype: nvmeproto.SGLSubtypeOffset, Length: 32}
	ld := make([]byte, 32)
	for i := range 2 {
		d := keyed(512)
		d.Address = uint64(1000 * i)
		d.Marshal(ld[16*i:])
	}
	dsm := sglCmd(nvmeproto.OpDatasetManagement, 1, 16)
	dsm.CDW11 = 4
	id := sglCmd(nvmeproto.OpIdentify, 0, 4096)
	id.CDW10 = 1
	glp := sglCmd(nvmeproto.OpGetLogPage, 0xFFFFFFFF, 512)
	glp.CDW10 = 2 | 127<<16
	reg := resvCmd(nvmeproto.OpReservationRegister, nvmeproto.ResvRegister, false, 0, 0, 16)
	reg.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeDataBlock, Subtype: nvmeproto.SGLSubtypeOffset, Length: 16}
	acq := resvCmd(nvmeproto.OpReservationAcquire, nvmeproto.ResvAcquire, false, nvmeproto.ResvExclusiveAccess, 0, 16)
	acq.SGL = reg.SGL
	rep := sglCmd(nvmeproto.OpReservationReport, 1, 4096)
	rep.CDW10, rep.CDW11 = 1023, 1
	// Host Behavior Support (16h): Set from host memory and from in-capsule data (ACRE 1),
	// then Get.
	shb := sglCmd(nvmeproto.OpSetFeatures, 0, nvmeproto.HostBehaviorSize)
	shb.CDW10 = uint32(nvmeproto.FIDHostBehaviorSupport)
	shbIC := shb
	shbIC.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeDataBlock, Subtype: nvmeproto.SGLSubtypeOffset, Length: nvmeproto.HostBehaviorSize}
	hb := make([]byte, nvmeproto.HostBehaviorSize)
	(&nvmeproto.HostBehavior{ACRE: 1}).Marshal(hb)
	ghb := sglCmd(nvmeproto.OpGetFeatures, 0, nvmeproto.HostBehaviorSize)
	ghb.CDW10 = uint32(nvmeproto.FIDHostBehaviorSupport)
	seeds := [][]byte{
		append(append(fuzzCapsule(true, shb, nil), fuzzCapsule(true, shbIC, hb)...), fuzzCapsule(true, ghb, nil)...),
		append(append(fuzzCapsule(false, reg, keys(0, 7, 16)), fuzzCapsule(false, acq, keys(7, 0, 16))...), fuzzCapsule(false, rep, nil)...),
		fuzzCapsule(false, w, nil),
		append(fuzzCapsule(false, w, nil), fuzzCapsule(false, r, nil)...),
		fuzzCapsule(false, ic, make([]byte, 512)),
		fuzzCapsule(false, list, ld),
		fuzzCapsule(false, dsm, nil),
		fuzzCapsule(true, id, nil),
		fuzzCapsule(true, glp, nil),
		append(fuzzCapsule(true, sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0), nil), fuzzCapsule(false, r, nil)...),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		ss := &spies{}
		e := newEnv(t, baseConfig(memNS(1, 1<<20), memNS(2, 64<<10)), spyBackends(ss, nil, 0))
		admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
		io := e.ioConnect(1, cntlid, 16)
		host := pattern(64<<10, 0x5A)

		var submitted, completed atomic.Int64
		var badCID atomic.Bool
		for n := 0; len(in) >= 2+64 && n < 64; n++ {
			q := io
			if in[0]&1 != 0 {
				q = admin
			}
			l := 64 + 16*int(in[1])
			if l > len(in)-2 {
				l = len(in) - 2
			}
			capsule := bytes.Clone(in[2 : 2+l])
			in = in[2+l:]
			cid := binary.LittleEndian.Uint16(capsule[2:])
			done := make(chan struct{})
			err := q.conn.SubmitCapsule(capsule, host, func(c nvmeproto.Completion) {
				if c.CID != cid {
					badCID.Store(true)
				}
				completed.Add(1)
				close(done)
			})
			if err != nil {
				continue // queue full, torn down, or a capsule too big to receive
			}
			submitted.Add(1)
			// With memory backends I/O completes inline, before SubmitCapsule returns;
			// admin commands complete from the controller's admin worker, or (held
			// Asynchronous Event Requests) at the latest when the queue closes.
			_ = done
		}
		if v := ss.violations(); len(v) > 0 {
			t.Fatalf("backend request outside the namespace: %v", v)
		}

		// The I/O queue keeps working unless the fuzzed commands tore it down.
		select {
		case <-io.conn.Done():
		default:
			d := pattern(4096, 7)
			w := rw(nvmeproto.OpWrite, 1, 100, 8, 4096)
			c, err1 := tryDo(io, &w, d)
			got := make([]byte, 4096)
			rd := rw(nvmeproto.OpRead, 1, 100, 8, 4096)
			c2, err2 := tryDo(io, &rd, got)
			select {
			case <-io.conn.Done(): // torn down meanwhile (a fuzzed keep-alive timeout)
			default:
				if err1 != nil || err2 != nil || !c.Status.Success() || !c2.Status.Success() || !bytes.Equal(got, d) {
					t.Fatalf("I/O queue broken after fuzzed commands: %v %v %v %v", err1, err2, c.Status, c2.Status)
				}
			}
		}
		// Closing waits for everything outstanding (held AERs complete as aborted).
		admin.conn.Close()
		io.conn.Close()
		if s, c := submitted.Load(), completed.Load(); s != c {
			t.Fatalf("%d capsules accepted, %d completions", s, c)
		}
		if badCID.Load() {
			t.Fatal("a completion carried the wrong CID")
		}
	})
}

// tryDo is hostQueue.do without failing the test when the queue refuses the command.
func tryDo(h *hostQueue, cmd *nvmeproto.Command, data []byte) (nvmeproto.Completion, error) {
	cmd.CID = h.nextCID()
	ch := make(chan nvmeproto.Completion, 1)
	if err := h.conn.Submit(cmd, data, func(c nvmeproto.Completion) { ch <- c }); err != nil {
		return nvmeproto.Completion{}, err
	}
	return wait(h.t, ch), nil
}
