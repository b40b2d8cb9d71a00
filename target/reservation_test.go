package target_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// resvHost is one host (its own host NQN and host identifier) with a controller of the
// test subsystem: an admin queue and one I/O queue. Its commands go to namespace nsid.
type resvHost struct {
	t      testing.TB
	id     [16]byte
	admin  *hostQueue
	io     *hostQueue
	cntlid uint16
	nsid   uint32
}

// onNS returns the host with its commands going to namespace nsid.
func (h *resvHost) onNS(nsid uint32) *resvHost {
	o := *h
	o.nsid = nsid
	return &o
}

func hostIDOf(b byte) [16]byte {
	var id [16]byte
	for i := range id {
		id[i] = b ^ byte(i*17)
	}
	return id
}

// connectHost connects host number n (host NQN and identifier derived from n).
func (e *env) connectHost(n byte) *resvHost {
	e.t.Helper()
	nqn := fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000%02x", n)
	h := &resvHost{t: e.t, id: hostIDOf(n), nsid: 1}
	h.admin = e.dial(32)
	c := h.admin.connectWithID(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, nqn, h.id)
	expectOK(e.t, "admin connect", c)
	h.cntlid, _ = nvmeproto.ParseConnectSuccessDW0(c.DW0)
	h.admin.enable()
	h.io = e.dial(32)
	expectOK(e.t, "I/O connect", h.io.connectWithID(1, 31, 0, h.cntlid, subNQN, nqn, h.id))
	return h
}

// connectWithID is connect with a chosen host identifier.
func (h *hostQueue) connectWithID(qid, sqsize uint16, kato uint32, cntlid uint16, sub, host string, id [16]byte) nvmeproto.Completion {
	h.t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(nvmeproto.ConnectDataSize)}
	cc := nvmeproto.ConnectCommand{QID: qid, SQSize: sqsize, KATO: kato}
	cc.ToCommand(&cmd)
	d := nvmeproto.ConnectData{HostID: id, CNTLID: cntlid, SubNQN: sub, HostNQN: host}
	buf := make([]byte, nvmeproto.ConnectDataSize)
	d.Marshal(buf)
	return h.do(&cmd, buf)
}

func resvCmd(op uint8, action uint8, iekey bool, rtype nvmeproto.ResvType, cptpl uint8, n int) nvmeproto.Command {
	return resvCmdNS(1, op, action, iekey, rtype, cptpl, n)
}

func resvCmdNS(nsid uint32, op uint8, action uint8, iekey bool, rtype nvmeproto.ResvType, cptpl uint8, n int) nvmeproto.Command {
	cmd := sglCmd(op, nsid, n)
	rc := nvmeproto.ReservationCommand{Opcode: op, NSID: nsid, Action: action, IEKEY: iekey, RType: rtype, CPTPL: cptpl}
	rc.ToCommand(&cmd)
	return cmd
}

func keys(cur, second uint64, n int) []byte {
	b := make([]byte, n)
	(&nvmeproto.ReservationKeys{Current: cur, Second: second}).Marshal(b)
	return b
}

func (h *resvHost) register(action uint8, iekey bool, cptpl uint8, crkey, nrkey uint64) nvmeproto.Completion {
	h.t.Helper()
	cmd := resvCmdNS(h.nsid, nvmeproto.OpReservationRegister, action, iekey, 0, cptpl, 16)
	return h.io.do(&cmd, keys(crkey, nrkey, 16))
}

func (h *resvHost) acquire(action uint8, rtype nvmeproto.ResvType, crkey, prkey uint64) nvmeproto.Completion {
	h.t.Helper()
	cmd := resvCmdNS(h.nsid, nvmeproto.OpReservationAcquire, action, false, rtype, 0, 16)
	return h.io.do(&cmd, keys(crkey, prkey, 16))
}

// release sends 8 bytes of data, as nvme-cli does (the Linux kernel's pr_ops send 16).
func (h *resvHost) release(action uint8, rtype nvmeproto.ResvType, crkey uint64) nvmeproto.Completion {
	h.t.Helper()
	cmd := resvCmdNS(h.nsid, nvmeproto.OpReservationRelease, action, false, rtype, 0, 8)
	return h.io.do(&cmd, keys(crkey, 0, 8))
}

func (h *resvHost) report() nvmeproto.ReservationStatus {
	h.t.Helper()
	st, c := h.reportN(4096, true)
	expectOK(h.t, "report", c)
	return st
}

func (h *resvHost) reportN(n int, eds bool) (nvmeproto.ReservationStatus, nvmeproto.Completion) {
	h.t.Helper()
	cmd := sglCmd(nvmeproto.OpReservationReport, h.nsid, n)
	rr := nvmeproto.ReservationReportCommand{NSID: h.nsid, NUMD: uint32(n/4 - 1), EDS: eds}
	rr.ToCommand(&cmd)
	buf := make([]byte, n)
	c := h.io.do(&cmd, buf)
	var st nvmeproto.ReservationStatus
	if c.Status.Success() {
		if err := st.Unmarshal(buf, true); err != nil {
			h.t.Fatalf("report: %v", err)
		}
	}
	return st, c
}

// ioOp runs one command of the read or write group.
func (h *resvHost) ioOp(name string) nvmeproto.Completion {
	h.t.Helper()
	var cmd nvmeproto.Command
	var data []byte
	switch name {
	case "read", "write", "compare":
		op := map[string]uint8{"read": nvmeproto.OpRead, "write": nvmeproto.OpWrite, "compare": nvmeproto.OpCompare}[name]
		cmd = rw(op, h.nsid, 8, 1, 512)
		data = make([]byte, 512)
	case "flush":
		cmd = sglCmd(nvmeproto.OpFlush, h.nsid, 0)
	case "write-zeroes":
		cmd = rw(nvmeproto.OpWriteZeroes, h.nsid, 8, 1, 0)
	case "deallocate":
		cmd = sglCmd(nvmeproto.OpDatasetManagement, h.nsid, 16)
		cmd.CDW11 = nvmeproto.DSMAttrAD
		data = make([]byte, 16)
		(&nvmeproto.DSMRange{NLB: 1, SLBA: 16}).Marshal(data)
	default:
		h.t.Fatalf("unknown op %s", name)
	}
	return h.io.do(&cmd, data)
}

func expectStatus(t testing.TB, what string, c nvmeproto.Completion, want nvmeproto.Status) {
	t.Helper()
	if c.Status.Code() != want.Code() {
		t.Errorf("%s: status %v, want %v", what, c.Status, want)
	}
}

var conflict = nvmeproto.StatusReservationConflict

// TestResvAccessMatrix checks every reservation type against the holder, another
// registrant and a host that is not registered, for every command of the read group
// (Read, Compare) and the write group (Write, Write Zeroes, Dataset Management, Flush),
// against the specification's table (written out here, not derived from the code).
func TestResvAccessMatrix(t *testing.T) {
	// per type: registrant read, registrant write, non-registrant read, non-registrant write
	table := map[nvmeproto.ResvType][4]bool{
		nvmeproto.ResvWriteExclusive:         {true, false, true, false},
		nvmeproto.ResvExclusiveAccess:        {false, false, false, false},
		nvmeproto.ResvWriteExclusiveRegOnly:  {true, true, true, false},
		nvmeproto.ResvExclusiveAccessRegOnly: {true, true, false, false},
		nvmeproto.ResvWriteExclusiveAllRegs:  {true, true, true, false},
		nvmeproto.ResvExclusiveAccessAllRegs: {true, true, false, false},
	}
	reads := []string{"read", "compare"}
	writes := []string{"write", "write-zeroes", "deallocate", "flush"}
	for rtype := nvmeproto.ResvWriteExclusive; rtype <= nvmeproto.ResvExclusiveAccessAllRegs; rtype++ {
		t.Run(rtype.String(), func(t *testing.T) {
			e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)))
			holder, reg, other := e.connectHost(1), e.connectHost(2), e.connectHost(3)
			expectOK(t, "holder register", holder.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
			expectOK(t, "registrant register", reg.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
			// Before any reservation everyone may do everything.
			for _, op := range append(reads, writes...) {
				expectOK(t, "no reservation: other "+op, other.ioOp(op))
			}
			expectOK(t, "acquire", holder.acquire(nvmeproto.ResvAcquire, rtype, 0xA, 0))
			want := table[rtype]
			for _, tc := range []struct {
				who         string
				h           *resvHost
				read, write bool
			}{
				{"holder", holder, true, true},
				{"registrant", reg, want[0], want[1]},
				{"non-registrant", other, want[2], want[3]},
			} {
				for _, op := range reads {
					c := tc.h.ioOp(op)
					if tc.read {
						expectOK(t, tc.who+" "+op, c)
					} else {
						expectStatus(t, tc.who+" "+op, c, conflict)
					}
				}
				for _, op := range writes {
					c := tc.h.ioOp(op)
					if tc.write {
						expectOK(t, tc.who+" "+op, c)
					} else {
						expectStatus(t, tc.who+" "+op, c, conflict)
						if !c.Status.DNR() {
							t.Errorf("%s %s: conflict without DNR", tc.who, op)
						}
					}
				}
			}
			// The report: the holder (every registrant for all-registrants types) flagged.
			st := other.report()
			if st.RType != rtype || st.RegCtl != 2 || len(st.Controllers) != 2 {
				t.Fatalf("report: %+v", st)
			}
			for _, c := range st.Controllers {
				wantHolder := c.HostID == holder.id || rtype.AllRegistrants()
				if (c.RCSTS&nvmeproto.RCSTSHolder != 0) != wantHolder || c.CNTLID != nvmeproto.CNTLIDDynamic {
					t.Errorf("report entry %+v: holder %v", c, wantHolder)
				}
			}
			// Releasing lifts the restrictions.
			expectOK(t, "release", holder.release(nvmeproto.ResvRelease, rtype, 0xA))
			for _, op := range append(reads, writes...) {
				expectOK(t, "after release: other "+op, other.ioOp(op))
			}
		})
	}
}

func TestResvRegister(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)))
	a, b := e.connectHost(1), e.connectHost(2)
	expectStatus(t, "unregister unregistered", a.register(nvmeproto.ResvUnregister, false, 0, 0, 0), conflict)
	expectStatus(t, "replace unregistered", a.register(nvmeproto.ResvReplace, true, 0, 0, 5), conflict)
	expectOK(t, "register", a.register(nvmeproto.ResvRegister, false, 0, 0, 0x1111))
	expectOK(t, "register again with the same key", a.register(nvmeproto.ResvRegister, false, 0, 0, 0x1111))
	expectStatus(t, "register again with another key", a.register(nvmeproto.ResvRegister, false, 0, 0, 0x2222), conflict)
	expectStatus(t, "replace with a wrong key", a.register(nvmeproto.ResvReplace, false, 0, 0x9999, 0x2222), conflict)
	expectOK(t, "replace", a.register(nvmeproto.ResvReplace, false, 0, 0x1111, 0x2222))
	expectOK(t, "replace ignoring the key", a.register(nvmeproto.ResvReplace, true, 0, 0x9999, 0x3333))
	expectOK(t, "b registers the same key", b.register(nvmeproto.ResvRegister, false, 0, 0, 0x3333))
	st := a.report()
	if st.Gen != 5 || st.RegCtl != 2 || st.Controllers[0].HostID != a.id || st.Controllers[0].RKey != 0x3333 ||
		st.Controllers[1].HostID != b.id || st.PTPLS || st.RType != 0 {
		t.Fatalf("report after registrations: %+v", st)
	}
	expectStatus(t, "unregister with a wrong key", a.register(nvmeproto.ResvUnregister, false, 0, 0x1, 0), conflict)
	expectOK(t, "unregister", a.register(nvmeproto.ResvUnregister, false, 0, 0x3333, 0))
	expectOK(t, "b unregisters ignoring the key", b.register(nvmeproto.ResvUnregister, true, 0, 0x1, 0))
	if st := a.report(); st.RegCtl != 0 || st.Gen != 7 {
		t.Fatalf("report after unregistering: %+v", st)
	}
	expectStatus(t, "register action 3", a.register(3, false, 0, 0, 1), nvmeproto.StatusInvalidField)
	expectStatus(t, "CPTPL 01b", a.register(nvmeproto.ResvRegister, false, 1, 0, 1), nvmeproto.StatusInvalidField)
	// This target has no state file: no Persist Through Power Loss.
	expectStatus(t, "CPTPL 11b without a state file", a.register(nvmeproto.ResvRegister, false, nvmeproto.CPTPLSet, 0, 1), nvmeproto.StatusInvalidField)
	id, c := a.admin.identify(nvmeproto.CNSNamespace, 1, 0)
	expectOK(t, "identify namespace", c)
	var ns nvmeproto.IdentifyNamespace
	if err := ns.Unmarshal(id); err != nil || ns.RESCAP != nvmeproto.RESCAPAllTypes|nvmeproto.RESCAPIEKEY || ns.NMIC&nvmeproto.NMICShared == 0 {
		t.Errorf("RESCAP %#x NMIC %#x without a state file", ns.RESCAP, ns.NMIC)
	}
	id, c = a.admin.identify(nvmeproto.CNSController, 0, 0)
	expectOK(t, "identify controller", c)
	var ic nvmeproto.IdentifyController
	if err := ic.Unmarshal(id); err != nil || ic.ONCS&nvmeproto.ONCSReservations == 0 {
		t.Errorf("ONCS %#x lacks reservations", ic.ONCS)
	}
	// Data too short for the command.
	cmd := resvCmd(nvmeproto.OpReservationRegister, nvmeproto.ResvRegister, false, 0, 0, 8)
	expectStatus(t, "register with 8 bytes", a.io.do(&cmd, make([]byte, 8)), nvmeproto.StatusDataSGLLengthInvalid)
}

func TestResvReport(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)))
	a, b := e.connectHost(1), e.connectHost(2)
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "acquire", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	_, c := a.reportN(4096, false)
	expectStatus(t, "report without EDS", c, nvmeproto.StatusHostIDInconsistentFormat)
	// A transfer that holds the header and one entry: REGCTL still counts both.
	st, c := a.reportN(128, true)
	expectOK(t, "short report", c)
	if st.RegCtl != 2 || len(st.Controllers) != 1 || st.Controllers[0].RKey != 0xA || st.Controllers[0].RCSTS != nvmeproto.RCSTSHolder {
		t.Fatalf("short report: %+v", st)
	}
	cmd := sglCmd(nvmeproto.OpReservationReport, 1, 4096)
	(&nvmeproto.ReservationReportCommand{NSID: 1, NUMD: 15, EDS: true}).ToCommand(&cmd)
	expectStatus(t, "NUMD and SGL length differ", a.io.do(&cmd, make([]byte, 4096)), nvmeproto.StatusDataSGLLengthInvalid)
	cmd = sglCmd(nvmeproto.OpReservationReport, 2, 64)
	(&nvmeproto.ReservationReportCommand{NSID: 2, NUMD: 15, EDS: true}).ToCommand(&cmd)
	expectStatus(t, "report of a missing namespace", a.io.do(&cmd, make([]byte, 64)), nvmeproto.StatusInvalidNamespace)
}

func TestResvAcquireRelease(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)))
	a, b, c := e.connectHost(1), e.connectHost(2), e.connectHost(3)
	expectStatus(t, "acquire unregistered", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0, 0), conflict)
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectStatus(t, "acquire with a wrong key", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xB, 0), conflict)
	expectStatus(t, "acquire type 0", a.acquire(nvmeproto.ResvAcquire, 0, 0xA, 0), nvmeproto.StatusInvalidField)
	expectStatus(t, "acquire type 7", a.acquire(nvmeproto.ResvAcquire, 7, 0xA, 0), nvmeproto.StatusInvalidField)
	cmd := resvCmd(nvmeproto.OpReservationAcquire, nvmeproto.ResvAcquire, true, nvmeproto.ResvWriteExclusive, 0, 16)
	expectStatus(t, "acquire with IEKEY", a.io.do(&cmd, keys(0xA, 0, 16)), nvmeproto.StatusInvalidField)
	expectOK(t, "acquire", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusiveRegOnly, 0xA, 0))
	expectOK(t, "acquire again", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusiveRegOnly, 0xA, 0))
	expectStatus(t, "acquire another type", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvExclusiveAccess, 0xA, 0), conflict)
	expectStatus(t, "b acquires", b.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusiveRegOnly, 0xB, 0), conflict)
	gen := a.report().Gen
	expectStatus(t, "release by a non-registrant", c.release(nvmeproto.ResvRelease, nvmeproto.ResvWriteExclusiveRegOnly, 0), conflict)
	expectOK(t, "release by a registrant that does not hold it", b.release(nvmeproto.ResvRelease, nvmeproto.ResvWriteExclusiveRegOnly, 0xB))
	if st := a.report(); st.RType != nvmeproto.ResvWriteExclusiveRegOnly {
		t.Fatalf("b's release changed the reservation: %+v", st)
	}
	expectStatus(t, "release of another type", a.release(nvmeproto.ResvRelease, nvmeproto.ResvWriteExclusive, 0xA), nvmeproto.StatusInvalidField)
	expectOK(t, "release", a.release(nvmeproto.ResvRelease, nvmeproto.ResvWriteExclusiveRegOnly, 0xA))
	if st := a.report(); st.RType != 0 || st.RegCtl != 2 || st.Gen != gen {
		t.Fatalf("after release: %+v (gen before %d)", st, gen)
	}
	// Releasing a registrants-only reservation tells the other registrants.
	expectNotice(t, b, nvmeproto.ResvLogReservationReleased)
	expectNoNotice(t, a)

	// Clear: every registration and the reservation go; the others learn it was preempted.
	expectOK(t, "acquire WE", b.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xB, 0))
	expectStatus(t, "a writes under b's reservation", a.ioOp("write"), conflict)
	expectOK(t, "clear", a.release(nvmeproto.ResvClear, 0, 0xA))
	if st := a.report(); st.RType != 0 || st.RegCtl != 0 || st.Gen != gen+1 {
		t.Fatalf("after clear: %+v", st)
	}
	expectNotice(t, b, nvmeproto.ResvLogReservationPreempt)
	expectOK(t, "a writes after the clear", a.ioOp("write"))
	expectStatus(t, "release action 2", a.release(2, 0, 0xA), nvmeproto.StatusInvalidField)

	// Unregistering the holder of a registrants-only reservation releases it.
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "acquire EA-RO", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvExclusiveAccessRegOnly, 0xA, 0))
	expectStatus(t, "c reads", c.ioOp("read"), conflict)
	expectOK(t, "a unregisters", a.register(nvmeproto.ResvUnregister, false, 0, 0xA, 0))
	expectOK(t, "c reads after the holder left", c.ioOp("read"))
	expectNotice(t, b, nvmeproto.ResvLogReservationReleased)
	// All registrants: the reservation stays until the last registrant leaves.
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "acquire EA-AR", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvExclusiveAccessAllRegs, 0xA, 0))
	expectOK(t, "b acquires the same all-registrants type", b.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvExclusiveAccessAllRegs, 0xB, 0))
	expectOK(t, "a unregisters", a.register(nvmeproto.ResvUnregister, false, 0, 0xA, 0))
	expectStatus(t, "a reads after leaving", a.ioOp("read"), conflict)
	if st := b.report(); st.RType != nvmeproto.ResvExclusiveAccessAllRegs || st.RegCtl != 1 {
		t.Fatalf("all-registrants reservation after one left: %+v", st)
	}
	expectOK(t, "b unregisters", b.register(nvmeproto.ResvUnregister, false, 0, 0xB, 0))
	if st := b.report(); st.RType != 0 {
		t.Fatalf("all-registrants reservation without registrants: %+v", st)
	}
	expectOK(t, "a reads", a.ioOp("read"))
}

func TestResvPreempt(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)))
	a, b, c := e.connectHost(1), e.connectHost(2), e.connectHost(3)
	for _, h := range []*resvHost{a, b, c} {
		expectOK(t, "register", h.register(nvmeproto.ResvRegister, false, 0, 0, 0x10+uint64(h.id[0])))
	}
	ka, kb, kc := 0x10+uint64(a.id[0]), 0x10+uint64(b.id[0]), 0x10+uint64(c.id[0])
	expectStatus(t, "preempt a key nobody has", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, kb, 0x999), conflict)
	// Without a reservation, preempting removes registrations.
	expectOK(t, "b preempts c's registration", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, kb, kc))
	expectNotice(t, c, nvmeproto.ResvLogRegistrationPreempt)
	if st := a.report(); st.RegCtl != 2 || st.RType != 0 {
		t.Fatalf("after preempting a registration: %+v", st)
	}
	expectOK(t, "a acquires WE", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, ka, 0))
	expectStatus(t, "preempt with key 0", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, kb, 0), nvmeproto.StatusInvalidField)
	expectStatus(t, "preempt by a non-registrant", c.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, kc, ka), conflict)
	// Preempting the holder: a loses its registration, b holds a reservation of the new type.
	gen := a.report().Gen
	expectOK(t, "b preempts a", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvExclusiveAccess, kb, ka))
	st := b.report()
	if st.RType != nvmeproto.ResvExclusiveAccess || st.RegCtl != 1 || st.Controllers[0].HostID != b.id ||
		st.Controllers[0].RCSTS != nvmeproto.RCSTSHolder || st.Gen != gen+1 {
		t.Fatalf("after preempt: %+v", st)
	}
	expectNotice(t, a, nvmeproto.ResvLogRegistrationPreempt)
	expectStatus(t, "a writes", a.ioOp("write"), conflict)
	expectStatus(t, "a reads (exclusive access)", a.ioOp("read"), conflict)
	expectOK(t, "b writes", b.ioOp("write"))
	// The holder changes the type by preempting itself.
	expectOK(t, "b preempts itself", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, kb, kb))
	if st := b.report(); st.RType != nvmeproto.ResvWriteExclusive || st.RegCtl != 1 {
		t.Fatalf("after self preempt: %+v", st)
	}
	expectOK(t, "a reads (write exclusive)", a.ioOp("read"))
	// All registrants: PRKEY 0 takes everything over.
	expectOK(t, "a registers", a.register(nvmeproto.ResvRegister, false, 0, 0, ka))
	expectOK(t, "c registers", c.register(nvmeproto.ResvRegister, false, 0, 0, kc))
	expectOK(t, "b preempts itself to WE-AR", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusiveAllRegs, kb, kb))
	expectNotice(t, a, nvmeproto.ResvLogReservationReleased)
	expectOK(t, "a writes as a registrant", a.ioOp("write"))
	expectOK(t, "c preempts everybody (PRKEY 0)", c.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvExclusiveAccess, kc, 0))
	if st := c.report(); st.RType != nvmeproto.ResvExclusiveAccess || st.RegCtl != 1 || st.Controllers[0].HostID != c.id {
		t.Fatalf("after PRKEY 0 preempt of all registrants: %+v", st)
	}
	expectNotice(t, a, nvmeproto.ResvLogRegistrationPreempt)
	expectNotice(t, b, nvmeproto.ResvLogRegistrationPreempt)
	expectStatus(t, "a reads", a.ioOp("read"), conflict)
}

// TestResvPreemptAndAbort: the preempt-and-abort completes only once the preempted host's
// write that was already in the backend has completed; the host's new commands fail at once.
func TestResvPreemptAndAbort(t *testing.T) {
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)), gatedBackend(g))
	defer g.open() // before the cleanups, which wait for the gated write
	a, b := e.connectHost(1), e.connectHost(2)
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "a acquires", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	stuck := a.io.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)
	pa := resvCmd(nvmeproto.OpReservationAcquire, nvmeproto.ResvPreemptAndAbort, false, nvmeproto.ResvWriteExclusive, 0, 16)
	done := b.io.submit(&pa, keys(0xB, 0xA, 16))
	select {
	case c := <-done:
		t.Fatalf("preempt and abort completed (%v) while the preempted host's write was in flight", c.Status)
	case <-time.After(200 * time.Millisecond):
	}
	expectStatus(t, "a's new write", a.ioOp("write"), conflict)
	if st, c := a.reportN(4096, true); !c.Status.Success() || st.Controllers[0].HostID != b.id || st.RegCtl != 1 {
		t.Fatalf("state during the abort: %+v %v", st, c.Status)
	}
	g.open()
	expectOK(t, "a's write in flight", wait(t, stuck))
	expectOK(t, "preempt and abort", wait(t, done))
	// Nothing of a's was in flight: no wait.
	expectOK(t, "a registers again", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "preempt and abort with nothing in flight", b.acquire(nvmeproto.ResvPreemptAndAbort, nvmeproto.ResvWriteExclusive, 0xB, 0xA))
}

// preemptAbort submits b's Preempt and Abort of the hosts registered with key prkey,
// acquiring a Write Exclusive reservation with key crkey.
func (h *resvHost) preemptAbort(crkey, prkey uint64) <-chan nvmeproto.Completion {
	h.t.Helper()
	cmd := resvCmdNS(h.nsid, nvmeproto.OpReservationAcquire, nvmeproto.ResvPreemptAndAbort, false, nvmeproto.ResvWriteExclusive, 0, 16)
	return h.io.submit(&cmd, keys(crkey, prkey, 16))
}

// waitController polls the target until cond holds for controller cntlid (nil when the
// target no longer lists it).
func (e *env) waitController(cntlid uint16, what string, cond func(*target.ControllerInfo) bool) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ci *target.ControllerInfo
		for _, c := range e.tgt.Controllers() {
			if c.Subsystem == subNQN && c.ID == cntlid {
				ci = &c
			}
		}
		if cond(ci) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("controller %d: not %s after 5 s: %+v", cntlid, what, ci)
		}
		time.Sleep(time.Millisecond)
	}
}

// expectPending fails the test if ch delivers a completion within d.
func expectPending(t testing.TB, what string, ch <-chan nvmeproto.Completion, d time.Duration) {
	t.Helper()
	select {
	case c := <-ch:
		t.Fatalf("%s completed (%v) while a preempted host's write was still in the backend", what, c.Status)
	case <-time.After(d):
	}
}

// TestResvPreemptAndAbortVictimTornDown: a cluster fences a host when it stops answering,
// which is when the host's controller is going away (association lost: link down,
// keep-alive expired) or being reset, while its writes may still be in the backend on
// queues that have left the controller's table. The preempt-and-abort completes only
// once those writes have.
func TestResvPreemptAndAbortVictimTornDown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		teardown func(e *env, a *resvHost)
	}{
		{"association lost", func(e *env, a *resvHost) {
			a.admin.conn.Close() // the I/O queue is disconnected and drains in the background
			e.waitController(a.cntlid, "gone", func(ci *target.ControllerInfo) bool { return ci == nil })
		}},
		{"controller reset", func(e *env, a *resvHost) {
			expectOK(e.t, "CC.EN=0", a.admin.propSet(nvmeproto.PropCC, 0))
			e.waitController(a.cntlid, "without I/O queues", func(ci *target.ControllerInfo) bool {
				return ci != nil && len(ci.Queues) == 1
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)), gatedBackend(g))
			defer g.open() // before the cleanups, which wait for the gated write
			a, b := e.connectHost(1), e.connectHost(2)
			expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
			expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
			expectOK(t, "a acquires", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
			w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
			a.io.submit(&w, make([]byte, 512))
			g.waitBlocked(t, 1)
			tc.teardown(e, a)
			pa := b.preemptAbort(0xB, 0xA)
			expectPending(t, "preempt and abort", pa, 200*time.Millisecond)
			g.open()
			expectOK(t, "preempt and abort", wait(t, pa))
			if st := b.report(); st.RegCtl != 1 || st.Controllers[0].HostID != b.id || st.RType != nvmeproto.ResvWriteExclusive {
				t.Errorf("state after the preemption: %+v", st)
			}
		})
	}
}

// TestResvPreemptAndAbortEarlierCommand: the preempted host's write began before an
// earlier preempt-and-abort (of another host) drained the fences of the namespace on
// the queues it waited for; the second preempt-and-abort still waits for it.
func TestResvPreemptAndAbortEarlierCommand(t *testing.T) {
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)), gatedBackend(g))
	defer g.open()
	a, b, c := e.connectHost(1), e.connectHost(2), e.connectHost(3)
	for _, h := range []struct {
		h   *resvHost
		key uint64
	}{{a, 0xA}, {b, 0xB}, {c, 0xC}} {
		expectOK(t, "register", h.h.register(nvmeproto.ResvRegister, false, 0, 0, h.key))
	}
	expectOK(t, "b acquires WERO", b.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusiveRegOnly, 0xB, 0))
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	c.io.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)
	expectOK(t, "b preempts a, who has nothing in flight", wait(t, b.preemptAbort(0xB, 0xA)))
	pa := b.preemptAbort(0xB, 0xC)
	expectPending(t, "preempt and abort of c", pa, 200*time.Millisecond)
	g.open()
	expectOK(t, "preempt and abort of c", wait(t, pa))
}

// TestResvPreemptAndAbortHungVictim: a preempted host's write that never leaves the backend
// (a hung backend) — still there after its queue was given up on at the close timeout —
// makes the preempt-and-abort fail with Internal Error after the close timeout instead of
// reporting the host fenced; the preemption itself stands. Meanwhile another
// preempt-and-abort, of a host with nothing in flight, is not held up.
func TestResvPreemptAndAbortHungVictim(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)), gatedBackend(g),
		target.WithQueueCloseTimeout(closeTimeout))
	defer func() {
		// Before the cleanups: they close the target, which waits closeTimeout for the
		// namespace's commands — a's write, let go only now, must be done by then.
		g.open()
		for deadline := time.Now().Add(10 * time.Second); e.tgt.StuckQueues() != 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	a, b, c := e.connectHost(1), e.connectHost(2), e.connectHost(3)
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "register c", c.register(nvmeproto.ResvRegister, false, 0, 0, 0xC))
	expectOK(t, "a acquires", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	a.io.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)
	a.admin.conn.Close()
	e.waitController(a.cntlid, "gone", func(ci *target.ControllerInfo) bool { return ci == nil })
	time.Sleep(closeTimeout + 100*time.Millisecond) // a's I/O queue is released without its write

	start := time.Now()
	hung := b.preemptAbort(0xB, 0xA)
	expectOK(t, "preempt and abort of c, alongside", wait(t, b.preemptAbort(0xB, 0xC)))
	select {
	case cqe := <-hung:
		t.Fatalf("preempt and abort of a completed (%v) before the close timeout, with a's write in the backend", cqe.Status)
	default:
	}
	cqe := wait(t, hung)
	expectStatus(t, "preempt and abort of a", cqe, nvmeproto.StatusInternalError)
	if !cqe.Status.DNR() {
		t.Errorf("status %v without DNR: retried, it would find a unregistered (Reservation Conflict)", cqe.Status)
	}
	if d := time.Since(start); d < closeTimeout {
		t.Errorf("failed after %v, before the close timeout %v", d, closeTimeout)
	}
	if st := b.report(); st.RegCtl != 1 || st.Controllers[0].HostID != b.id || st.RType != nvmeproto.ResvWriteExclusive {
		t.Errorf("the preemption did not stand: %+v", st)
	}
	if g.blocked.Load() != 1 {
		t.Errorf("%d backend calls blocked, want a's write", g.blocked.Load())
	}
}

// TestResvPreemptAndAbortOtherNamespace: a preempt-and-abort waits for the preempted
// host's commands to the namespace it preempts on, not for its commands to other
// namespaces — here a write stuck in another namespace's hung backend — which cannot
// reach this one. The old code waited for every command on the host's queues and failed
// with Internal Error after the close timeout.
func TestResvPreemptAndAbortOtherNamespace(t *testing.T) {
	const closeTimeout = 2 * time.Second
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20), memNS(2, 2<<20)), target.WithLogger(testLogger(t)),
		gatedNamespace(g, 2<<20), target.WithQueueCloseTimeout(closeTimeout))
	defer g.open() // before the cleanups, which wait for the gated write
	a, b := e.connectHost(1), e.connectHost(2)
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "a acquires", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA, 0))
	expectOK(t, "a writes to namespace 1", a.ioOp("write"))
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	a.io.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)

	start := time.Now()
	expectOK(t, "preempt and abort on namespace 1", wait(t, b.preemptAbort(0xB, 0xA)))
	if d := time.Since(start); d >= closeTimeout/2 {
		t.Errorf("preempt and abort on namespace 1 took %v, held up by a's write to namespace 2", d)
	}
	expectStatus(t, "a writes to namespace 1 after the preemption", a.ioOp("write"), conflict)
	if g.blocked.Load() != 1 {
		t.Errorf("%d backend calls blocked, want a's write to namespace 2", g.blocked.Load())
	}
}

// TestResvPreemptAndAbortHungNamespace: a preempted host's write stuck in one namespace's
// hung backend holds up the preempt-and-aborts of that namespace only. Each of them fails
// with Internal Error (DNR) after the close timeout, the preemption standing, for as long
// as the write may still land; once it has completed, the next one succeeds. A
// preempt-and-abort of the same host on another namespace completes at once, even while
// one on the hung namespace is waiting. The old code drained whole queues, one
// preempt-and-abort at a time per queue: the one on the healthy namespace queued behind
// the one on the hung namespace, then waited for the stuck write itself, and failed.
func TestResvPreemptAndAbortHungNamespace(t *testing.T) {
	const closeTimeout = 1500 * time.Millisecond
	g := newGate()
	e := newEnv(t, baseConfig(memNS(1, 1<<20), memNS(2, 2<<20)), target.WithLogger(testLogger(t)),
		gatedNamespace(g, 2<<20), target.WithQueueCloseTimeout(closeTimeout))
	defer g.open()
	a, b := e.connectHost(1), e.connectHost(2)
	a2, b2 := a.onNS(2), b.onNS(2)
	for _, r := range []struct {
		h   *resvHost
		key uint64
	}{{a, 0xA}, {a2, 0xA}, {b, 0xB}, {b2, 0xB}} {
		expectOK(t, fmt.Sprintf("host %d registers on namespace %d", r.h.id[0], r.h.nsid),
			r.h.register(nvmeproto.ResvRegister, false, 0, 0, r.key))
	}
	expectOK(t, "a writes to namespace 1", a.ioOp("write"))
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	a.io.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)

	start := time.Now()
	hung := b2.preemptAbort(0xB, 0xA)
	expectPending(t, "preempt and abort on namespace 2", hung, 200*time.Millisecond)
	expectOK(t, "preempt and abort on namespace 1, alongside", wait(t, b.preemptAbort(0xB, 0xA)))
	select {
	case cqe := <-hung:
		t.Fatalf("preempt and abort on namespace 2 completed (%v) before the close timeout, with a's write in the backend", cqe.Status)
	default:
	}
	cqe := wait(t, hung)
	expectStatus(t, "preempt and abort on namespace 2", cqe, nvmeproto.StatusInternalError)
	if !cqe.Status.DNR() {
		t.Errorf("status %v without DNR", cqe.Status)
	}
	if d := time.Since(start); d < closeTimeout {
		t.Errorf("failed after %v, before the close timeout %v", d, closeTimeout)
	}
	if st := b2.report(); st.RegCtl != 1 || st.Controllers[0].HostID != b.id {
		t.Errorf("the preemption on namespace 2 did not stand: %+v", st)
	}

	// Preempted again, a's write is waited for again: it may still land.
	expectOK(t, "a registers again on namespace 2", a2.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	again := b2.preemptAbort(0xB, 0xA)
	expectPending(t, "second preempt and abort on namespace 2", again, 200*time.Millisecond)
	g.open()
	expectOK(t, "second preempt and abort on namespace 2, a's write completed", wait(t, again))
}

func expectNotice(t testing.TB, h *resvHost, typ uint8) {
	t.Helper()
	b, c := h.admin.getLog(uint8(nvmeproto.LIDReservationNotify), 0xFFFFFFFF, 0, nvmeproto.ResvNotifyLogSize, 0, false)
	expectOK(t, "get reservation notification log", c)
	var l nvmeproto.ResvNotifyLog
	if err := l.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if l.Type != typ || l.NSID != 1 || l.Count == 0 {
		t.Errorf("host %d: notification %+v, want type %d", h.id[0], l, typ)
	}
}

func expectNoNotice(t testing.TB, h *resvHost) {
	t.Helper()
	b, c := h.admin.getLog(uint8(nvmeproto.LIDReservationNotify), 0xFFFFFFFF, 0, nvmeproto.ResvNotifyLogSize, 0, false)
	expectOK(t, "get reservation notification log", c)
	var l nvmeproto.ResvNotifyLog
	if err := l.Unmarshal(b); err != nil || l != (nvmeproto.ResvNotifyLog{}) {
		t.Errorf("host %d: unexpected notification %+v", h.id[0], l)
	}
}

func TestResvNotifications(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)))
	a, b := e.connectHost(1), e.connectHost(2)
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev := a.admin.submit(&aer, nil)
	expectOK(t, "register a", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "register b", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "b preempts a", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, 0xB, 0xA))
	c := wait(t, ev)
	expectOK(t, "AER", c)
	if nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventReservationLog {
		t.Fatalf("AER DW0 %#x, want %#x", c.DW0, uint32(nvmeproto.EventReservationLog))
	}
	// Two more notifications while the event is masked (not yet read): one page each.
	expectOK(t, "a registers", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "b preempts a again", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, 0xB, 0xA))
	ev = a.admin.submit(&aer, nil)
	buf, cq := a.admin.getLog(uint8(nvmeproto.LIDReservationNotify), 0xFFFFFFFF, 0, nvmeproto.ResvNotifyLogSize, 0, false)
	expectOK(t, "log", cq)
	var l nvmeproto.ResvNotifyLog
	if err := l.Unmarshal(buf); err != nil || l.Count != 1 || l.Available != 1 || l.Type != nvmeproto.ResvLogRegistrationPreempt || l.NSID != 1 {
		t.Fatalf("first page %+v", l)
	}
	// Reading re-armed the event, and a page is still waiting: the host is told again.
	c = wait(t, ev)
	if nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventReservationLog {
		t.Fatalf("second AER DW0 %#x", c.DW0)
	}
	buf, _ = a.admin.getLog(uint8(nvmeproto.LIDReservationNotify), 0xFFFFFFFF, 0, nvmeproto.ResvNotifyLogSize, 0, false)
	if err := l.Unmarshal(buf); err != nil || l.Count != 2 || l.Available != 0 {
		t.Fatalf("second page %+v", l)
	}
	expectNoNotice(t, a)

	// The mask: registration preempted notices off for namespace 1.
	expectOK(t, "set mask", setNSFeature(a.admin, nvmeproto.FIDReservationMask, 1, nvmeproto.ResvMaskRegPreempted))
	if dw0, c := getNSFeature(a.admin, nvmeproto.FIDReservationMask, 1); !c.Status.Success() || dw0 != nvmeproto.ResvMaskRegPreempted {
		t.Fatalf("get mask: %#x %v", dw0, c.Status)
	}
	expectOK(t, "a registers", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "b preempts a", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, 0xB, 0xA))
	expectNoNotice(t, a)
	expectOK(t, "unmask all namespaces", setNSFeature(a.admin, nvmeproto.FIDReservationMask, nvmeproto.NSIDAll, 0))
	expectOK(t, "a registers", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "b preempts a", b.acquire(nvmeproto.ResvPreempt, nvmeproto.ResvWriteExclusive, 0xB, 0xA))
	expectNotice(t, a, nvmeproto.ResvLogRegistrationPreempt)
	expectStatus(t, "mask bit 0", setNSFeature(a.admin, nvmeproto.FIDReservationMask, 1, 1), nvmeproto.StatusInvalidField)
	expectStatus(t, "mask of a missing namespace", setNSFeature(a.admin, nvmeproto.FIDReservationMask, 9, 0), nvmeproto.StatusInvalidNamespace)
	_, cq = getNSFeature(a.admin, nvmeproto.FIDReservationMask, nvmeproto.NSIDAll)
	expectStatus(t, "get mask of all namespaces", cq, nvmeproto.StatusInvalidNamespace)
	// Supported log pages list 80h.
	buf, cq = a.admin.getLog(uint8(nvmeproto.LIDSupportedLogPages), 0, 0, nvmeproto.SupportedLogPagesSize, 0, false)
	expectOK(t, "supported log pages", cq)
	if buf[4*0x80] == 0 {
		t.Error("supported log pages lack 80h")
	}
}

func setNSFeature(h *hostQueue, fid nvmeproto.FID, nsid, dw11 uint32) nvmeproto.Completion {
	cmd := sglCmd(nvmeproto.OpSetFeatures, nsid, 0)
	cmd.CDW10, cmd.CDW11 = uint32(fid), dw11
	return h.do(&cmd, nil)
}

func getNSFeature(h *hostQueue, fid nvmeproto.FID, nsid uint32) (uint32, nvmeproto.Completion) {
	cmd := sglCmd(nvmeproto.OpGetFeatures, nsid, 0)
	cmd.CDW10 = uint32(fid)
	c := h.do(&cmd, nil)
	return c.DW0, c
}

// TestResvPTPL: with Persist Through Power Loss on, registrations and the reservation
// survive a restart of the target (a new Target on the same configuration and state
// file); turning it off forgets them at the next restart.
func TestResvPTPL(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(fileNS(t, 1, 1<<20))
	cfg.StateFile = filepath.Join(dir, "state.json")
	e := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	a, b := e.connectHost(1), e.connectHost(2)
	id, c := a.admin.identify(nvmeproto.CNSNamespace, 1, 0)
	expectOK(t, "identify", c)
	if id[31]&nvmeproto.RESCAPPTPL == 0 {
		t.Errorf("RESCAP %#x lacks PTPL with a state file", id[31])
	}
	expectOK(t, "a registers with PTPL", a.register(nvmeproto.ResvRegister, false, nvmeproto.CPTPLSet, 0, 0xAAAA_0000_0000_0001))
	expectOK(t, "b registers", b.register(nvmeproto.ResvRegister, false, 0, 0, 0xB))
	expectOK(t, "a acquires", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusiveRegOnly, 0xAAAA_0000_0000_0001, 0))
	if dw0, c := getNSFeature(a.admin, nvmeproto.FIDReservationPersist, 1); !c.Status.Success() || dw0 != 1 {
		t.Fatalf("get reservation persistence: %#x %v", dw0, c.Status)
	}
	before := a.report()
	data, err := os.ReadFile(cfg.StateFile)
	if err != nil || !strings.Contains(string(data), `"key": "0xaaaa000000000001"`) {
		t.Fatalf("state file: %v\n%s", err, data)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
	e.tgt.Close()

	e2 := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	a2, b2, c2 := e2.connectHost(1), e2.connectHost(2), e2.connectHost(3)
	after := b2.report()
	if after.Gen != before.Gen || after.RType != before.RType || !after.PTPLS || len(after.Controllers) != 2 ||
		after.Controllers[0] != before.Controllers[0] || after.Controllers[1] != before.Controllers[1] {
		t.Fatalf("after restart:\n%+v\nbefore:\n%+v", after, before)
	}
	expectOK(t, "b (registrant) writes", b2.ioOp("write"))
	expectStatus(t, "c (not registered) writes", c2.ioOp("write"), conflict)
	expectOK(t, "a (holder) writes", a2.ioOp("write"))
	// PTPL off: the file forgets the namespace, a restart forgets the registrations.
	expectOK(t, "PTPL off", setNSFeature(a2.admin, nvmeproto.FIDReservationPersist, 1, 0))
	var f struct{ Reservations []json.RawMessage }
	if data, err := os.ReadFile(cfg.StateFile); err != nil || json.Unmarshal(data, &f) != nil || len(f.Reservations) != 0 {
		t.Fatalf("state file after PTPL off: %v\n%s", err, data)
	}
	e2.tgt.Close()
	e3 := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	if st := e3.connectHost(1).report(); st.RegCtl != 0 || st.RType != 0 || st.PTPLS {
		t.Fatalf("after restart with PTPL off: %+v", st)
	}
}

// TestResvStateFileDirSyncFails: a change whose state file was renamed into place but
// whose directory fsync failed fails (Internal Error), and the file is put back as it was:
// it never holds a change the host was told failed.
func TestResvStateFileDirSyncFails(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(fileNS(t, 1, 1<<20))
	cfg.StateFile = filepath.Join(dir, "state.json")
	e := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	a := e.connectHost(1)
	expectOK(t, "a registers with PTPL", a.register(nvmeproto.ResvRegister, false, nvmeproto.CPTPLSet, 0, 0xA1))
	before, err := os.ReadFile(cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	fail := true
	restore := target.SetSyncDir(func(d *os.File) error {
		if fail {
			fail = false // the restoring write's fsync works
			return syscall.EIO
		}
		return d.Sync()
	})
	defer restore()
	expectStatus(t, "a acquires, the directory fsync failing", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0xA1, 0),
		nvmeproto.StatusInternalError)
	if after, err := os.ReadFile(cfg.StateFile); err != nil || !bytes.Equal(after, before) {
		t.Errorf("state file after the failed change:\n%s\nwant as before:\n%s", after, before)
	}
	if st := a.report(); st.RType != 0 {
		t.Errorf("reservation type %d after the failed acquire, want none", st.RType)
	}
}

func TestResvStateFile(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.StateFile = filepath.Join(dir, "state.json")
	uuid := conf.DeriveUUID(subNQN, 1)
	write := func(s string) {
		if err := os.WriteFile(cfg.StateFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(uuid, holder string) string {
		return `{"version": 1, "reservations": [{"subsystem": "` + subNQN + `", "nsid": 1, "uuid": "` + uuid +
			`", "generation": 7, "type": 1, "holder": "` + holder + `", "registrants": [{"host_id": "0101010101010101010101010101010a", "key": "0x5"}]}]}`
	}
	// Another volume's record under the same NSID is not applied.
	write(rec("11111111-2222-3333-4444-555555555555", "0101010101010101010101010101010a"))
	e := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	if st := e.connectHost(1).report(); st.RegCtl != 0 {
		t.Fatalf("a record of another UUID was restored: %+v", st)
	}
	e.tgt.Close()
	write(rec(conf.FormatUUID(uuid), "0101010101010101010101010101010a"))
	e = newEnv(t, cfg, target.WithLogger(testLogger(t)))
	if st := e.connectHost(1).report(); st.RegCtl != 1 || st.Gen != 7 || st.RType != 1 || st.Controllers[0].RKey != 5 {
		t.Fatalf("record not restored: %+v", st)
	}
	e.tgt.Close()
	for _, bad := range []string{
		`{"version": 2, "reservations": []}`,
		`{"version": 1, "reservations": [], "extra": 1}`,
		rec(conf.FormatUUID(uuid), "02"),
		rec(conf.FormatUUID(uuid), "0202020202020202020202020202020a"),
		`not json`,
	} {
		write(bad)
		if _, err := target.New(cfg); err == nil || !strings.Contains(err.Error(), cfg.StateFile) || !strings.Contains(err.Error(), "delete it") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestResvStateFileLocked: a second target on a state file in use refuses to start, naming
// the file, the holder and the fix, and starts once the first has closed; a failed start
// does not keep the lock. Without a file at start the lock is taken at the first write:
// the second target's write then fails (Internal Error) instead of dropping the first's
// records, and a target whose hosts persist nothing leaves no lock file.
func TestResvStateFileLocked(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.StateFile = filepath.Join(dir, "state.json")
	empty := []byte(`{"version": 1, "reservations": []}`)
	if err := os.WriteFile(cfg.StateFile, empty, 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := target.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = target.New(cfg)
	if err == nil {
		t.Fatal("a second target started on the state file in use")
	}
	for _, want := range []string{cfg.StateFile, fmt.Sprintf("process %d", os.Getpid()), "give each target its own state_file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// Another state file in the same directory is another lock.
	other := cfg.Clone()
	other.StateFile = filepath.Join(dir, "other.json")
	os.WriteFile(other.StateFile, empty, 0o600)
	if o, err := target.New(other); err != nil {
		t.Errorf("a target on another state file in the same directory: %v", err)
	} else {
		o.Close()
	}
	first.Close()
	os.WriteFile(cfg.StateFile, []byte("not json"), 0o600)
	if _, err := target.New(cfg); err == nil {
		t.Fatal("a bad state file was read")
	}
	os.WriteFile(cfg.StateFile, empty, 0o600)
	second, err := target.New(cfg)
	if err != nil {
		t.Fatalf("after the first target closed and a failed start: %v", err)
	}
	second.Close()

	// No file at start: no lock file until a host persists something.
	cfg.StateFile = filepath.Join(dir, "later.json")
	idle, err := target.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	idle.Close()
	if _, err := os.Stat(cfg.StateFile + ".lock"); err == nil {
		t.Errorf("a target that persisted nothing left %s.lock", cfg.StateFile)
	}
	ea := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	eb := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	a, b := ea.connectHost(1), eb.connectHost(2)
	expectOK(t, "a registers with PTPL on the first target", a.register(nvmeproto.ResvRegister, false, nvmeproto.CPTPLSet, 0, 0xA))
	expectStatus(t, "b registers with PTPL on the second target", b.register(nvmeproto.ResvRegister, false, nvmeproto.CPTPLSet, 0, 0xB),
		nvmeproto.StatusInternalError)
	data, err := os.ReadFile(cfg.StateFile)
	if err != nil || !strings.Contains(string(data), `"key": "0xa"`) || strings.Contains(string(data), `"key": "0xb"`) {
		t.Errorf("state file after both targets' writes: %v\n%s", err, data)
	}

	// A file that appears after start and cannot be read is never overwritten: every
	// write fails until it can be read (it may hold another target's records).
	cfg.StateFile = filepath.Join(dir, "appears.json")
	ec := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	h := ec.connectHost(3)
	os.WriteFile(cfg.StateFile, []byte("not json"), 0o600)
	for i := range 2 {
		expectStatus(t, fmt.Sprintf("register with PTPL, the file unreadable (%d)", i+1),
			h.register(nvmeproto.ResvRegister, false, nvmeproto.CPTPLSet, 0, 0xC), nvmeproto.StatusInternalError)
	}
	if data, _ := os.ReadFile(cfg.StateFile); string(data) != "not json" {
		t.Errorf("an unreadable state file was overwritten:\n%s", data)
	}
}

// TestResvHostIdentity: registrations belong to the host identifier of Connect, so a
// second controller of the same host (same host ID) holds what the first acquired, and a
// host with another identifier does not, whatever its host NQN.
func TestResvHostIdentity(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)))
	a := e.connectHost(1)
	a2 := e.connectHost(1) // the same host, a second controller
	if a2.cntlid == a.cntlid {
		t.Fatal("one controller for two connections")
	}
	expectOK(t, "register", a.register(nvmeproto.ResvRegister, false, 0, 0, 0xA))
	expectOK(t, "acquire EA", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvExclusiveAccess, 0xA, 0))
	expectOK(t, "the second controller writes", a2.ioOp("write"))
	expectOK(t, "the second controller releases with the host's key", a2.release(nvmeproto.ResvRelease, nvmeproto.ResvExclusiveAccess, 0xA))
	expectOK(t, "acquire EA again", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvExclusiveAccess, 0xA, 0))
	// Another host identifier under a's host NQN is another host.
	other := &resvHost{t: t, id: hostIDOf(9), nsid: 1}
	other.admin = e.dial(32)
	c := other.admin.connectWithID(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN,
		"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001", other.id)
	expectOK(t, "admin connect", c)
	other.cntlid, _ = nvmeproto.ParseConnectSuccessDW0(c.DW0)
	other.admin.enable()
	other.io = e.dial(32)
	expectOK(t, "I/O connect", other.io.connectWithID(1, 31, 0, other.cntlid, subNQN,
		"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001", other.id))
	expectStatus(t, "another host ID reads", other.ioOp("read"), conflict)
}

func TestResvStateFileNone(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.StateFile = conf.StateFileNone
	e := newEnv(t, cfg, target.WithLogger(testLogger(t)))
	a := e.connectHost(1)
	id, c := a.admin.identify(nvmeproto.CNSNamespace, 1, 0)
	expectOK(t, "identify", c)
	if id[31]&nvmeproto.RESCAPPTPL != 0 {
		t.Errorf("RESCAP %#x offers PTPL with state_file: none", id[31])
	}
	expectStatus(t, "CPTPL 11b", a.register(nvmeproto.ResvRegister, false, nvmeproto.CPTPLSet, 0, 1), nvmeproto.StatusInvalidField)
	if _, err := os.Stat("none"); err == nil {
		t.Error("a file named none was created")
	}
}

// TestResvSurvivesReopen: reopening a namespace (ReopenNamespace, after a failed sync) is
// not a power loss: registrations and the reservation stay.
func TestResvSurvivesReopen(t *testing.T) {
	ns := conf.Namespace{NSID: 1, Backend: conf.BackendNull, Size: 1 << 20} // a memory one is not reopened
	e := newEnv(t, baseConfig(ns), target.WithLogger(testLogger(t)))
	a := e.connectHost(1)
	expectOK(t, "register", a.register(nvmeproto.ResvRegister, false, 0, 0, 0x1111))
	expectOK(t, "acquire", a.acquire(nvmeproto.ResvAcquire, nvmeproto.ResvWriteExclusive, 0x1111, 0))
	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	st := a.report()
	if st.RegCtl != 1 || st.RType != nvmeproto.ResvWriteExclusive || st.Controllers[0].RKey != 0x1111 {
		t.Errorf("reservation after a reopen: %+v", st)
	}
	expectStatus(t, "the holder writes after the reopen", a.ioOp("write"), nvmeproto.StatusSuccess)
}
