package control_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
	"github.com/gonvmf/gonvmf/target/loop"
)

// TestControlNamespaceANAGroup: SetNamespaceANAGroup moves a namespace to another ANA
// group (the host gets an ANA Change event; listings and the saved configuration show the
// group); unknown subsystems and namespaces are NotFound, groups out of range
// InvalidArgument. Moved into a group that serves no I/O on a port while a write that
// passed the ANA check there is in the backend, the call waits for it: when the call's
// deadline comes first the move stands and the answer, DeadlineExceeded, arrives before
// the client's deadline and names the controller and its command; called again, it
// returns once the write has completed.
func TestControlNamespaceANAGroup(t *testing.T) {
	cfg := testConfig(socketPath(t))
	gate := testutil.NewWriteGate()
	defer gate.Open() // before the cleanups, which wait for the held write
	s, cl := startOpener(t, cfg, gate.Opener())
	c := ctx(t)
	events := make(chan initiator.AsyncEvent, 8)
	host(t, s, subNQN, events)

	ns, err := cl.SetNamespaceANAGroup(c, &pb.SetNamespaceANAGroupRequest{Subsystem: subNQN, Nsid: 1, AnaGroup: 5})
	if err != nil || ns.AnaGroup != 5 || ns.Nsid != 1 || ns.Subsystem != subNQN {
		t.Fatalf("move to group 5: %v %v", ns, err)
	}
	if ev := waitEvent(t, events); ev.Event != nvmeproto.EventANAChange {
		t.Errorf("host event %+v, want ANA change", ev)
	}
	list, err := cl.ListNamespaces(c, &pb.ListNamespacesRequest{Subsystem: subNQN})
	if err != nil || len(list.Namespaces) != 1 || list.Namespaces[0].AnaGroup != 5 {
		t.Errorf("namespaces after the move: %v %v", list, err)
	}
	if saved, err := cl.SaveConfig(c, &pb.SaveConfigRequest{}); err != nil || !strings.Contains(saved.Yaml, "ana_group: 5") {
		t.Errorf("saved configuration without ana_group 5: %v\n%s", err, saved.GetYaml())
	}
	_, err = cl.SetNamespaceANAGroup(c, &pb.SetNamespaceANAGroupRequest{Subsystem: twoNQN, Nsid: 1, AnaGroup: 2})
	wantCode(t, "unknown subsystem", err, codes.NotFound, twoNQN)
	_, err = cl.SetNamespaceANAGroup(c, &pb.SetNamespaceANAGroupRequest{Subsystem: subNQN, Nsid: 9, AnaGroup: 2})
	wantCode(t, "unknown namespace", err, codes.NotFound, "9")
	for _, g := range []uint32{0, conf.MaxANAGroup + 1} {
		_, err = cl.SetNamespaceANAGroup(c, &pb.SetNamespaceANAGroupRequest{Subsystem: subNQN, Nsid: 1, AnaGroup: g})
		wantCode(t, fmt.Sprintf("group %d", g), err, codes.InvalidArgument, fmt.Sprintf("ana_group %d is not a group ID; use 1..128", g))
	}

	// A second port on which group 9 is inaccessible, and a host's write through it held
	// in the backend.
	var states [conf.MaxANAGroup + 1]conf.ANAState
	states[9] = conf.ANAInaccessible
	lp, err := loop.New(s.Target(), loop.Options{Name: "b", ANAStates: states})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	h, err := initiator.Dial(c, initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: hostNQN, Logger: quiet,
		Loop: func(depth int) (initiator.LoopConn, error) { return lp.Dial(depth) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	n1, _ := h.Namespace(1)
	written := make(chan error, 1)
	go func() {
		_, err := n1.WriteAt(c, make([]byte, 4096), 0, 0)
		written <- err
	}()
	gate.WaitHeld(t, 1)
	cntlid := uint32(0)
	ctrls, err := cl.ListControllers(c, &pb.ListControllersRequest{Subsystem: subNQN})
	for _, k := range ctrls.GetControllers() {
		if k.Listener == "loop b" {
			cntlid = k.Cntlid
		}
	}
	if err != nil || cntlid == 0 {
		t.Fatalf("no controller through port b: %v %v", ctrls, err)
	}

	short, cancel := context.WithTimeout(c, 500*time.Millisecond)
	defer cancel()
	_, err = cl.SetNamespaceANAGroup(short, &pb.SetNamespaceANAGroupRequest{Subsystem: subNQN, Nsid: 1, AnaGroup: 9})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(msg, "the change took effect") {
		t.Fatalf("move into group 9 with a 500 ms deadline: %v; want DeadlineExceeded from the target, not the client's own", err)
	}
	for _, want := range []string{"ana_group 5 → 9", "1 I/O command", fmt.Sprintf("1 on controller %d of %s (host %s)", cntlid, subNQN, hostNQN)} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if list, err := cl.ListNamespaces(c, &pb.ListNamespacesRequest{Subsystem: subNQN}); err != nil || list.Namespaces[0].AnaGroup != 9 {
		t.Errorf("namespaces after the wait ended: %v %v; want namespace 1 in group 9 (the move stands)", list, err)
	}

	type answer struct {
		ns  *pb.Namespace
		err error
	}
	again := make(chan answer, 1)
	go func() {
		ns, err := cl.SetNamespaceANAGroup(c, &pb.SetNamespaceANAGroupRequest{Subsystem: subNQN, Nsid: 1, AnaGroup: 9})
		again <- answer{ns, err}
	}()
	select {
	case a := <-again:
		t.Fatalf("the move repeated returned (%v, %v) with the write in the backend", a.ns, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	gate.Open()
	select {
	case err := <-written:
		if err != nil {
			t.Errorf("the write admitted before the move: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not complete within 10 s of the gate opening")
	}
	select {
	case a := <-again:
		if a.err != nil || a.ns.AnaGroup != 9 {
			t.Errorf("the move repeated once the write completed: %v %v", a.ns, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the move repeated did not return within 10 s of the write completing")
	}
}
