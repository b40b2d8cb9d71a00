package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target/loop"
	"github.com/gonvmf/gonvmf/target/server"
)

// rawHost is a host with one controller of the test subsystem over the server's loop
// port, sending commands as built here (the initiator has no reservation commands): an
// admin queue and one I/O queue.
type rawHost struct {
	t         *testing.T
	admin, io *rawQueue
	cntlid    uint16
}

// rawQueue is one loop queue with a synchronous do.
type rawQueue struct {
	t    *testing.T
	conn *loop.Conn
	cid  uint16
}

// connectRaw connects host number n (its host NQN and identifier derived from n) to
// subNQN: Connect, the enable sequence, an I/O queue.
func connectRaw(t *testing.T, s *server.Server, n byte) *rawHost {
	t.Helper()
	nqn := fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000%02x", n)
	var id [16]byte
	for i := range id {
		id[i] = n ^ byte(i*17)
	}
	dial := func() *rawQueue {
		c, err := s.Loop().Dial(32)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &rawQueue{t: t, conn: c}
	}
	h := &rawHost{t: t, admin: dial()}
	c := h.admin.connect(0, 0, nqn, id)
	h.cntlid, _ = nvmeproto.ParseConnectSuccessDW0(c.DW0)
	cc := nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)
	h.admin.ok("property set CC", h.admin.propSet(nvmeproto.PropCC, uint64(cc)))
	for deadline := time.Now().Add(5 * time.Second); ; {
		cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
		(&nvmeproto.PropertyGetCommand{Offset: nvmeproto.PropCSTS}).ToCommand(&cmd)
		c := h.admin.ok("property get CSTS", h.admin.do(&cmd, nil))
		if nvmeproto.CSTS(c.DW0).RDY() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %d: controller not ready: %v", n, nvmeproto.CSTS(c.DW0))
		}
		time.Sleep(time.Millisecond)
	}
	h.io = dial()
	h.io.connect(1, h.cntlid, nqn, id)
	return h
}

func keyed(n int) nvmeproto.SGLDescriptor {
	return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Subtype: nvmeproto.SGLSubtypeAddress, Length: uint32(n), Key: 0x1234}
}

func sglCmd(op uint8, nsid uint32, n int) nvmeproto.Command {
	return nvmeproto.Command{Opcode: op, Flags: nvmeproto.PSDTSGL << 6, NSID: nsid, SGL: keyed(n)}
}

// submit sends cmd (with the next CID) and returns where its completion arrives.
func (q *rawQueue) submit(cmd *nvmeproto.Command, data []byte) <-chan nvmeproto.Completion {
	q.t.Helper()
	q.cid++
	cmd.CID = q.cid
	ch := make(chan nvmeproto.Completion, 1)
	if err := q.conn.Submit(cmd, data, func(c nvmeproto.Completion) { ch <- c }); err != nil {
		q.t.Fatalf("submitting opcode %#x: %v", cmd.Opcode, err)
	}
	return ch
}

func (q *rawQueue) do(cmd *nvmeproto.Command, data []byte) nvmeproto.Completion {
	q.t.Helper()
	select {
	case c := <-q.submit(cmd, data):
		return c
	case <-time.After(10 * time.Second):
		q.t.Fatalf("opcode %#x: no completion in 10 s", cmd.Opcode)
	}
	panic("unreachable")
}

// ok fails the test unless c succeeded, and returns it.
func (q *rawQueue) ok(what string, c nvmeproto.Completion) nvmeproto.Completion {
	q.t.Helper()
	if !c.Status.Success() {
		q.t.Fatalf("%s: status %v", what, c.Status)
	}
	return c
}

func (q *rawQueue) connect(qid, cntlid uint16, host string, id [16]byte) nvmeproto.Completion {
	q.t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(nvmeproto.ConnectDataSize)}
	(&nvmeproto.ConnectCommand{QID: qid, SQSize: 31}).ToCommand(&cmd)
	if qid == 0 {
		cntlid = nvmeproto.CNTLIDDynamic
	}
	d := nvmeproto.ConnectData{HostID: id, CNTLID: cntlid, SubNQN: subNQN, HostNQN: host}
	buf := make([]byte, nvmeproto.ConnectDataSize)
	d.Marshal(buf)
	return q.ok(fmt.Sprintf("connect queue %d", qid), q.do(&cmd, buf))
}

func (q *rawQueue) propSet(off uint32, v uint64) nvmeproto.Completion {
	q.t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
	(&nvmeproto.PropertySetCommand{Offset: off, Value: v}).ToCommand(&cmd)
	return q.do(&cmd, nil)
}

// anaLog reads the ANA log page (clearing RAE: the ANA Change event is armed again).
func (h *rawHost) anaLog() nvmeproto.ANALog {
	h.t.Helper()
	const n = 8208 // the whole log at its largest (16 + 128 × 32 + 1024 × 4)
	cmd := sglCmd(nvmeproto.OpGetLogPage, nvmeproto.NSIDAll, n)
	cmd.CDW10 = uint32(nvmeproto.LIDANA) | uint32(n/4-1)<<16
	buf := make([]byte, n)
	h.admin.ok("get log page ANA", h.admin.do(&cmd, buf))
	var l nvmeproto.ANALog
	if err := l.Unmarshal(buf); err != nil {
		h.t.Fatalf("ANA log: %v", err)
	}
	return l
}

func (h *rawHost) identifyNS(nsid uint32) nvmeproto.IdentifyNamespace {
	h.t.Helper()
	cmd := sglCmd(nvmeproto.OpIdentify, nsid, nvmeproto.IdentifySize)
	(&nvmeproto.IdentifyCommand{NSID: nsid, CNS: nvmeproto.CNSNamespace}).ToCommand(&cmd)
	buf := make([]byte, nvmeproto.IdentifySize)
	h.admin.ok("identify namespace", h.admin.do(&cmd, buf))
	var id nvmeproto.IdentifyNamespace
	if err := id.Unmarshal(buf); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// resv sends reservation command op (Register, Acquire) with action, type and keys on
// namespace 1.
func (h *rawHost) resv(op, action uint8, rtype nvmeproto.ResvType, cur, second uint64) nvmeproto.Completion {
	h.t.Helper()
	cmd := sglCmd(op, 1, 16)
	(&nvmeproto.ReservationCommand{Opcode: op, NSID: 1, Action: action, RType: rtype}).ToCommand(&cmd)
	b := make([]byte, 16)
	(&nvmeproto.ReservationKeys{Current: cur, Second: second}).Marshal(b)
	return h.io.do(&cmd, b)
}

// report returns namespace 1's Reservation Report (extended data structure).
func (h *rawHost) report() nvmeproto.ReservationStatus {
	h.t.Helper()
	const n = 4096
	cmd := sglCmd(nvmeproto.OpReservationReport, 1, n)
	(&nvmeproto.ReservationReportCommand{NSID: 1, NUMD: n/4 - 1, EDS: true}).ToCommand(&cmd)
	buf := make([]byte, n)
	h.io.ok("reservation report", h.io.do(&cmd, buf))
	var st nvmeproto.ReservationStatus
	if err := st.Unmarshal(buf, true); err != nil {
		h.t.Fatalf("reservation report: %v", err)
	}
	return st
}

// rw reads or writes one 512-byte block at lba of namespace 1 (to or from p).
func (h *rawHost) rw(op uint8, lba uint64, p []byte) nvmeproto.Completion {
	h.t.Helper()
	cmd := sglCmd(op, 1, len(p))
	cmd.CDW10, cmd.CDW11 = uint32(lba), uint32(lba>>32)
	return h.io.do(&cmd, p)
}
