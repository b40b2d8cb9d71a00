package target

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestResvChangeThroughReplacedNamespace: a reservation change made through the
// namespace object a reopen has just replaced is the new namespace's, never lost. Two
// commands reach the replaced object: a Reservation Register that took its reference
// before the reopen closed the namespace and still held it when the close gave up
// waiting (the close timeout), and a Set Features Reservation Persistence, which looks
// the namespace up without a reference, then changes it. Each was told it succeeded.
// The old code copied the state into the new namespace at the swap: both changes went to
// the discarded object, the registration was lost, and the state file said PTPL was on
// while the namespace said it was off.
func TestResvChangeThroughReplacedNamespace(t *testing.T) {
	const nqn = "nqn.2024-01.io.gonvmf:resv"
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		StateFile: filepath.Join(t.TempDir(), "state.json"),
		Subsystems: []conf.Subsystem{{NQN: nqn, AllowAnyHost: true, Namespaces: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendNull, Size: 1 << 20}}}},
	}
	tgt, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithQueueCloseTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	s := tgt.subsystem(nqn)
	// The parts of a controller the reservation commands use.
	c := &controller{t: tgt, subsys: s, hostID: rawHostID}
	reopen := func(old *namespace) {
		t.Helper()
		if err := tgt.ReopenNamespace(nqn, 1); err != nil {
			t.Fatalf("reopen: %v", err)
		}
		if s.lookup(1) == old {
			t.Fatal("the reopen did not replace the namespace")
		}
	}

	old := s.acquireNS(1) // as execResv does
	reopen(old)           // its close gives up waiting for the reference
	cmd := nvmeproto.Command{Opcode: nvmeproto.OpReservationRegister, NSID: 1}
	(&nvmeproto.ReservationCommand{Opcode: nvmeproto.OpReservationRegister, NSID: 1, Action: nvmeproto.ResvRegister}).ToCommand(&cmd)
	keys := make([]byte, nvmeproto.ResvRegisterDataSize)
	(&nvmeproto.ReservationKeys{Second: 0xA1}).Marshal(keys)
	if st := c.resvRegister(&Request{Cmd: cmd, Data: keys, Length: uint32(len(keys))}, old); st != nvmeproto.StatusSuccess {
		t.Fatalf("register through the replaced namespace: %v", st)
	}
	old.release()
	if rs := s.lookup(1).resv.state.Load(); rs.reg(&rawHostID) < 0 || rs.regs[rs.reg(&rawHostID)].key != 0xA1 {
		t.Errorf("the namespace after the reopen lacks the registration made through the one it replaced: %+v", rs)
	}

	old, st := c.resvFeatureNS(1, true) // Set Features 83h: the lookup
	if st != nvmeproto.StatusSuccess {
		t.Fatalf("Set Features 83h lookup: %v", st)
	}
	reopen(old)
	if st := c.setResvPersist(old, true); st != nvmeproto.StatusSuccess { // the change
		t.Fatalf("PTPL on through the replaced namespace: %v", st)
	}
	if rs := s.lookup(1).resv.state.Load(); rs == nil || !rs.ptpl {
		t.Errorf("the namespace after the reopen has PTPL off, the state file on: %+v", rs)
	}
	if rec, _ := tgt.resv.lookup(nqn, s.lookup(1)); rec == nil || rec.reg(&rawHostID) < 0 {
		t.Errorf("state file record %+v lacks the registration", rec)
	}
}
