package target_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

// inBackground runs f on a goroutine and delivers its error.
func inBackground(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// expectBlocked fails the test if ch delivers within d.
func expectBlocked(t testing.TB, what string, ch <-chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) while a write admitted before it was still in the backend", what, err)
	case <-time.After(d):
	}
}

func waitErr(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no return within 10 s")
	}
	panic("unreachable")
}

// TestANAStateWaitsForAdmittedIO: a failover orchestrator sets a group inaccessible here
// before it makes another target serve it; SetANAState returns only once a write that
// passed the ANA check before the change has left the backend, or the write could land
// after the other target has started serving (a split-brain write). The new state applies
// at once meanwhile: a new write is refused and the host gets its ANA Change event. A
// change to a state that serves I/O does not wait.
func TestANAStateWaitsForAdmittedIO(t *testing.T) {
	g := newGate()
	e := newEnv(t, anaConfig(), target.WithLogger(testLogger(t)), gatedBackend(g))
	defer g.open() // before the cleanups, which wait for the gated write
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 16)
	p := e.port.Target()
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev := admin.submit(&aer, nil)
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	held := q.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)

	if err := p.SetANAState(context.Background(), 2, conf.ANANonOptimized); err != nil {
		t.Fatalf("SetANAState(non-optimized): %v", err)
	}
	if c := wait(t, ev); nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventANAChange {
		t.Fatalf("event %v, want ANA change", nvmeproto.AsyncEvent(c.DW0))
	}
	anaLog(t, admin, false, false) // unmasks the event
	aer = sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ev = admin.submit(&aer, nil)

	done := inBackground(func() error { return p.SetANAState(context.Background(), 2, conf.ANAInaccessible) })
	expectBlocked(t, "SetANAState(inaccessible)", done, 300*time.Millisecond)
	if c := wait(t, ev); nvmeproto.AsyncEvent(c.DW0) != nvmeproto.EventANAChange {
		t.Errorf("event %v during the wait, want ANA change", nvmeproto.AsyncEvent(c.DW0))
	}
	w = rw(nvmeproto.OpWrite, 3, 0, 1, 512)
	expect(t, "write begun during the wait", q.do(&w, make([]byte, 512)), nvmeproto.StatusANAInaccessible)
	select {
	case c := <-held:
		t.Fatalf("the write in the backend completed (%v) before the gate opened", c.Status)
	default:
	}
	g.open()
	expectOK(t, "the write admitted before the change", wait(t, held))
	if err := waitErr(t, done); err != nil {
		t.Fatalf("SetANAState(inaccessible): %v", err)
	}
}

// TestANAStateWaitEnds: the wait ends with the context, or after the queue-close timeout
// when the context has none; the change stands, and the error says how many commands
// still execute on which controller. Setting the state again waits again, and a context
// deadline longer than the close timeout is waited out.
func TestANAStateWaitEnds(t *testing.T) {
	const closeTimeout = 300 * time.Millisecond
	g := newGate()
	e := newEnv(t, anaConfig(), target.WithLogger(testLogger(t)), gatedBackend(g), target.WithQueueCloseTimeout(closeTimeout))
	defer g.open()
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 16)
	p := e.port.Target()
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	held := q.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)

	start := time.Now()
	err := p.SetANAState(context.Background(), 2, conf.ANAChange)
	if d := time.Since(start); d < closeTimeout {
		t.Errorf("SetANAState returned after %v, before the close timeout %v, with a write in the backend", d, closeTimeout)
	}
	var ie *target.ANAInFlightError
	if !errors.As(err, &ie) || !errors.Is(err, target.ErrANAInFlight) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SetANAState(change) = %v, want an ANAInFlightError (ErrANAInFlight, deadline exceeded)", err)
	}
	want := target.ControllerInFlight{Subsystem: subNQN, ID: cntlid, HostNQN: hostNQN, Commands: 1}
	if ie.Commands() != 1 || len(ie.Controllers) != 1 || ie.Controllers[0] != want {
		t.Errorf("still executing: %d commands on %+v, want %+v", ie.Commands(), ie.Controllers, want)
	}
	for _, s := range []string{"port 1 (loop", "): ANA group 2 set to change", "the change took effect",
		"1 I/O command admitted under the previous state still executes",
		fmt.Sprintf("1 on controller %d of %s (host %s)", cntlid, subNQN, hostNQN)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if st := p.ANAState(2); st != conf.ANAChange {
		t.Errorf("state %q after the wait ended, want change (the change stands)", st)
	}
	w = rw(nvmeproto.OpWrite, 2, 8, 1, 512)
	expect(t, "write after the wait ended", q.do(&w, make([]byte, 512)), nvmeproto.StatusANATransition)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.SetANAState(ctx, 2, conf.ANAInaccessible); !errors.Is(err, target.ErrANAInFlight) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("SetANAState with a 50 ms context: %v, want ErrANAInFlight", err)
	}

	long, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := inBackground(func() error { return p.SetANAState(long, 2, conf.ANAInaccessible) })
	expectBlocked(t, "SetANAState of the state the group has, with a 10 s context", done, closeTimeout+200*time.Millisecond)
	g.open()
	expectOK(t, "the write admitted before the first change", wait(t, held))
	if err := waitErr(t, done); err != nil {
		t.Fatalf("SetANAState once the write completed: %v", err)
	}
}

// TestANAStateWaitsForItsPort: only the queues connected through the port whose state
// changes are waited for.
func TestANAStateWaitsForItsPort(t *testing.T) {
	g := newGate()
	e := newEnv(t, anaConfig(), target.WithLogger(testLogger(t)), gatedBackend(g))
	defer g.open()
	other := e.secondPort(loop.Options{})
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512)
	held := e.ioConnect(1, cntlid, 16).submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)
	if err := other.port.Target().SetANAState(context.Background(), 2, conf.ANAInaccessible); err != nil {
		t.Errorf("SetANAState on the other port: %v", err)
	}
	g.open()
	expectOK(t, "write", wait(t, held))
}

// TestANAStateWaitsForItsGroup: a port's change waits for the commands to the namespaces
// of the group it changes, not for those to other groups' namespaces on the same queues
// (another group's backend may be hung, and its failover is not this one's); a namespace
// moved into a group that serves no I/O is waited for alone. The old fence drained whole
// queues: the change of group 1 and the move of namespace 3 waited for a write to
// namespace 2 (group 2) until their context ended, and failed with ErrANAInFlight.
func TestANAStateWaitsForItsGroup(t *testing.T) {
	g := newGate()
	e := newEnv(t, anaConfig(), target.WithLogger(testLogger(t)), gatedBackend(g))
	defer g.open()
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 16)
	p := e.port.Target()
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512) // namespace 2: group 2
	held2 := q.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)

	quick := func(what string, f func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		if err := f(ctx); err != nil {
			t.Errorf("%s, with a write to namespace 2 (group 2) in the backend: %v", what, err)
			return
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %v, held up by a write to namespace 2 (group 2)", what, d)
		}
	}
	quick("SetANAState(1, inaccessible)", func(ctx context.Context) error {
		return p.SetANAState(ctx, 1, conf.ANAInaccessible)
	})
	w = rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	expect(t, "write to namespace 1 after the change", q.do(&w, make([]byte, 512)), nvmeproto.StatusANAInaccessible)
	quick("SetANAState(5, inaccessible), a group without namespaces", func(ctx context.Context) error {
		return p.SetANAState(ctx, 5, conf.ANAInaccessible)
	})
	quick("moving namespace 3 to group 5 (inaccessible)", func(ctx context.Context) error {
		return e.tgt.SetNamespaceANAGroup(ctx, subNQN, 3, 5)
	})

	// Group 1's own command is waited for, on the same queue.
	if err := p.SetANAState(context.Background(), 1, conf.ANAOptimized); err != nil {
		t.Fatal(err)
	}
	w = rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	held1 := q.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 2)
	done := inBackground(func() error { return p.SetANAState(context.Background(), 1, conf.ANAInaccessible) })
	expectBlocked(t, "SetANAState(1, inaccessible)", done, 300*time.Millisecond)
	g.open()
	expectOK(t, "the write to namespace 1", wait(t, held1))
	expectOK(t, "the write to namespace 2", wait(t, held2))
	if err := waitErr(t, done); err != nil {
		t.Fatalf("SetANAState(1, inaccessible) once the writes completed: %v", err)
	}
}

// TestANAStateWithNamespaceMove: a namespace moving into a group while the group's state
// on the port changes to one that serves no I/O is waited for by the change or by the
// move (see ana.go). In each order, and with each held between its start and its
// publication while the other runs, the one that reads the other's change after
// publishing its own waits for a write admitted to the namespace before both: the change
// reads the namespaces' groups after publishing the state, the move reads the ports'
// states after publishing the group.
func TestANAStateWithNamespaceMove(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20), memNS(2, 2<<20))
	cfg.Subsystems[0].Namespaces[1].ANAGroup = 2
	g := newGate()
	e := newEnv(t, cfg, target.WithLogger(testLogger(t)), gatedNamespace(g, 2<<20))
	defer g.open()
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 16)
	p := e.port.Target()
	w := rw(nvmeproto.OpWrite, 2, 0, 1, 512) // namespace 2, group 2: optimized
	held := q.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)

	// waits reports whether f's Wait waits for the held write.
	waits := func(f *target.ANAFence) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		err := f.Wait(ctx)
		if err != nil && !errors.Is(err, target.ErrANAInFlight) {
			t.Fatalf("Wait: %v", err)
		}
		return err != nil
	}
	change := func() *target.ANAFence {
		f, err := p.ChangeANAState(1, conf.ANAInaccessible)
		if err != nil {
			t.Error(err)
		}
		return f
	}
	move := func() *target.ANAFence {
		f, err := e.tgt.MoveNamespaceANAGroup(subNQN, 2, 1)
		if err != nil {
			t.Error(err)
		}
		return f
	}
	// during runs f on a goroutine while hold holds it, runs other meanwhile (once f has had
	// the time to reach the hold), then lets f go on.
	during := func(hold func() func(), f, other func() *target.ANAFence) (fromF, fromOther *target.ANAFence) {
		release := hold()
		ch := make(chan *target.ANAFence, 1)
		go func() { ch <- f() }()
		time.Sleep(100 * time.Millisecond)
		fromOther = other()
		release()
		return <-ch, fromOther
	}
	reset := func() {
		t.Helper()
		if err := p.SetANAState(context.Background(), 1, conf.ANAOptimized); err != nil {
			t.Fatal(err)
		}
		if err := e.tgt.SetNamespaceANAGroup(context.Background(), subNQN, 2, 2); err != nil {
			t.Fatal(err)
		}
	}
	check := func(order string, cf, mf *target.ANAFence, changeWaits bool) {
		t.Helper()
		if changeWaits {
			if mf != nil {
				t.Errorf("%s: the move returned a fence, want none (group 1 served I/O when it read the states)", order)
			}
			if !waits(cf) {
				t.Errorf("%s: the change of group 1 did not wait for the write to namespace 2, in group 1 when it read the groups", order)
			}
			return
		}
		if waits(cf) {
			t.Errorf("%s: the change of group 1 waited for the write to namespace 2, in group 2 when it read the groups", order)
		}
		if !waits(mf) {
			t.Errorf("%s: the move of namespace 2 did not wait for its write, with group 1 inaccessible when it read the states", order)
		}
	}

	mf := move()
	check("move, then change", change(), mf, true)
	reset()
	cf := change()
	check("change, then move", cf, move(), false)
	reset()
	cf, mf = during(func() func() { return target.HoldANAStates(p) }, change, move)
	check("change held before it publishes, move", cf, mf, true)
	reset()
	mf, cf = during(func() func() { return target.HoldChanges(e.tgt) }, move, change)
	check("move held before it publishes, change", cf, mf, false)

	g.open()
	expectOK(t, "the held write", wait(t, held))
}

// TestANANamespaceMoveWaitsForAdmittedIO: moving a namespace into a group that serves no
// I/O on a port waits for the I/O commands admitted before the move on the subsystem's
// queues through that port; a move into a group that serves I/O everywhere does not wait.
// The move stands when the wait ends first.
func TestANANamespaceMoveWaitsForAdmittedIO(t *testing.T) {
	var states [conf.MaxANAGroup + 1]conf.ANAState
	states[7] = conf.ANAPersistentLoss
	g := newGate()
	e := newEnv(t, anaConfig(), target.WithLogger(testLogger(t)), gatedBackend(g))
	defer g.open()
	ep := e.secondPort(loop.Options{ANAStates: states})
	admin, cntlid := ep.adminConnect(subNQN, hostNQN, 0)
	q := ep.ioConnect(1, cntlid, 16)
	w := rw(nvmeproto.OpWrite, 1, 0, 1, 512)
	held := q.submit(&w, make([]byte, 512))
	g.waitBlocked(t, 1)

	if err := e.tgt.SetNamespaceANAGroup(context.Background(), subNQN, 1, 2); err != nil {
		t.Fatalf("move to group 2 (optimized on every port): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := e.tgt.SetNamespaceANAGroup(ctx, subNQN, 1, 7)
	var ie *target.ANAInFlightError
	if !errors.As(err, &ie) || ie.Commands() != 1 || len(ie.Controllers) != 1 || ie.Controllers[0].ID != cntlid {
		t.Fatalf("move to group 7 (persistent loss on the host's port) with a 100 ms context: %v, want 1 command of controller %d", err, cntlid)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("subsystem %q: namespace 1: ana_group 2 → 7", subNQN)) {
		t.Errorf("error %q does not name the move", err)
	}
	b, c := admin.identify(nvmeproto.CNSNamespace, 1, 0)
	expectOK(t, "identify namespace 1", c)
	var id nvmeproto.IdentifyNamespace
	if err := id.Unmarshal(b); err != nil || id.ANAGRPID != 7 {
		t.Errorf("ANAGRPID %d (%v) after the wait ended, want 7 (the move stands)", id.ANAGRPID, err)
	}
	done := inBackground(func() error { return e.tgt.SetNamespaceANAGroup(context.Background(), subNQN, 1, 7) })
	expectBlocked(t, "moving the namespace to group 7 again", done, 300*time.Millisecond)
	g.open()
	expectOK(t, "the write admitted before the move", wait(t, held))
	if err := waitErr(t, done); err != nil {
		t.Fatalf("move once the write completed: %v", err)
	}
}

// landing is a memory backend that counts the writes executing in it and records one
// that begins while fenced is set.
type landing struct {
	backend.Backend
	executing atomic.Int64
	fenced    atomic.Bool
	late      atomic.Int64
}

func (l *landing) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	l.executing.Add(1)
	defer l.executing.Add(-1)
	if l.fenced.Load() {
		l.late.Add(1)
	}
	time.Sleep(200 * time.Microsecond)
	return l.Backend.WriteBlocks(buf, slba, fua)
}

func (l *landing) Info() backend.Info {
	i := backend.Describe(l.Backend)
	i.Inline, i.Workers = false, 8
	return i
}

// completed waits for a completion on a goroutine other than the test's.
func completed(t testing.TB, ch <-chan nvmeproto.Completion) {
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Error("timed out waiting for a completion")
	}
}

// TestANAStateFenceUnderLoad: writers keep a namespace's queues busy while its group goes
// inaccessible and back; whenever SetANAState(inaccessible) has returned, no write is
// executing in the backend and none begins until the group serves I/O again.
func TestANAStateFenceUnderLoad(t *testing.T) {
	l := &landing{}
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithLogger(testLogger(t)),
		target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
			b, err := backend.Open(spec)
			l.Backend = b
			return l, err
		}))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	p := e.port.Target()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		q := e.ioConnect(uint16(i+1), cntlid, 16)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inflight []<-chan nvmeproto.Completion
			for {
				select {
				case <-stop:
					for _, ch := range inflight {
						completed(t, ch)
					}
					return
				default:
				}
				if len(inflight) == 8 {
					completed(t, inflight[0])
					inflight = inflight[1:]
				}
				w := rw(nvmeproto.OpWrite, 1, uint64(i*8), 1, 512)
				inflight = append(inflight, q.submit(&w, make([]byte, 512)))
			}
		}()
	}
	busy := 0 // rounds that began with writes executing in the backend
	for round := range 20 {
		time.Sleep(2 * time.Millisecond)
		if l.executing.Load() > 0 {
			busy++
		}
		if err := p.SetANAState(context.Background(), 1, conf.ANAInaccessible); err != nil {
			t.Fatal(err)
		}
		l.fenced.Store(true)
		if n := l.executing.Load(); n != 0 {
			t.Errorf("round %d: %d writes executing in the backend after SetANAState(inaccessible) returned", round, n)
		}
		time.Sleep(time.Millisecond)
		l.fenced.Store(false)
		if err := p.SetANAState(context.Background(), 1, conf.ANAOptimized); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if n := l.late.Load(); n != 0 {
		t.Errorf("%d writes began in the backend after SetANAState(inaccessible) returned", n)
	}
	if busy == 0 {
		t.Errorf("no round began with a write in the backend: the test did not load the namespace")
	}
}
