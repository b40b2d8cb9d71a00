package target

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Asymmetric Namespace Access (ANA).
//
// Every namespace is in one ANA group (conf.Namespace.ANAGroup) and every port gives each
// group a state (conf.Listener.ANAStates; optimized unless set). A controller reports the
// states of its own port: in the ANA log page (0Ch), and by completing I/O commands for a
// namespace whose group is inaccessible, in persistent loss or in change on that port with
// the matching Asymmetric Access status (SCT 3h, without DNR, so that a multipath host
// retries them on another path). A state change raises an ANA Change event on every
// controller of that port; a namespace moved to another group (SetNamespaceANAGroup)
// raises one on every controller of its subsystem. The ANA change count (log header
// CHGCNT) is one counter of the Target, bumped by every state change on any port and by
// every namespace added, removed or moved to another group at run time (which changes a
// group's NSID list); a group descriptor's CHGCNT is the count of the last change of that
// group as this port reports it.
//
// A change that leaves a group serving no I/O on a port (inaccessible, persistent loss,
// change), or a namespace in a group that serves none on some port, is complete only once
// the I/O commands that passed the ANA check under the old state have completed: until
// then a write admitted before the change may still reach the storage, after a failover
// orchestrator has made another target serve the group (a split-brain write). Each such
// change returns an ANAFence over the queues and namespaces it concerns, whose Wait
// drains them with the I/O fence (fence.go):
//
//   - a port's group set to a state that serves no I/O: the I/O queues connected through
//     the port, for the NSIDs of the namespaces in the group. Commands to namespaces of
//     other groups, which the change does not stop, are not waited for (another group's
//     backend may be slow or hung);
//   - a namespace moved into a group that serves no I/O on some port: its subsystem's I/O
//     queues connected through those ports, for its NSID.
//
// With moves concurrent to state changes: a port's change reads the namespaces' groups
// after it has published the new state, a move reads the ports' states after it has
// published the new group, and a command counts itself before it reads either. A Wait
// that returns nil therefore guarantees:
//
//   - a port's fence (group g): no command admitted through the port before the change,
//     to a namespace that was in g when the change read the groups, still executes;
//   - a move's fence (into g): no command to the namespace admitted before the move,
//     through a port where g served no I/O when the move read the states, still executes.
//
// A namespace moved into g while g is set to a state that serves no I/O on a port is
// covered by at least one of the two (a move that read the port's state before the
// change published it published the group before the change read it): once both Waits
// have returned nil, none of its commands admitted through that port under the old group
// or state still executes. A namespace that a concurrent move takes out of g is the
// move's: waited for when its new group serves no I/O on the port; when that group serves
// I/O there, its commands are that group's to serve, and none is waited for. The
// commands of a removed namespace are its removal's to wait for (RemoveNamespace: at
// most the queue-close timeout, logging those it gave up on). Those it gave up on may
// still reach its store until its backend closes: a port's fence of g waits for them too
// when the namespace was in g or a namespace in g has its NSID now, and a move's fence
// when the moved namespace has its NSID (the namespace added again on the same store; see
// fence.go) — except a memory or null namespace's, whose store no one else serves. The
// namespaces of a subsystem being removed, or removed with commands still in their
// backends, are removed namespaces of the subsystem added again with its NQN, if any.
//
// SetANAState and SetNamespaceANAGroup change, then wait; a caller that serializes
// changes with a lock of its own changes with ChangeANAState or MoveNamespaceANAGroup
// under it and waits after. The change stands whether or not the wait succeeds. This is
// what SPDK's nvmf_subsystem_listener_set_ana_state does by pausing the subsystem, which
// waits for its I/O in flight; the Linux target stores the state and returns.

// Identify Controller ANA fields.
const (
	// anaTransitionTime is ANATT in seconds: how long a group stays in the change state at
	// most. The Linux host resets a controller that reports a group in change for twice
	// as long. It is the Linux target's value; gonvmf never enters change by itself, only
	// when told to, so it is what an operator (or HA manager) must keep to.
	anaTransitionTime = 10
	// Every state; not ANACAPGRPIDStatic, as a namespace's ANAGRPID changes while it is
	// attached (SetNamespaceANAGroup). So does the Linux target's (its configfs ana_grpid
	// changes on an enabled namespace), and the Linux host takes each namespace's group
	// from the descriptor that lists it in every ANA log it reads.
	anaCapabilities = nvmeproto.ANACAPOptimized | nvmeproto.ANACAPNonOptimized | nvmeproto.ANACAPInaccessible |
		nvmeproto.ANACAPPersistentLoss | nvmeproto.ANACAPChange
)

// ErrInvalidANA: an ANA group or state out of range.
var ErrInvalidANA = fmt.Errorf("target: invalid ANA group or state")

// anaWire maps configuration states to their log page values.
func anaWire(s conf.ANAState) nvmeproto.ANAState {
	switch s {
	case conf.ANANonOptimized:
		return nvmeproto.ANANonOptimized
	case conf.ANAInaccessible:
		return nvmeproto.ANAInaccessible
	case conf.ANAPersistentLoss:
		return nvmeproto.ANAPersistentLoss
	case conf.ANAChange:
		return nvmeproto.ANAChange
	}
	return nvmeproto.ANAOptimized
}

func anaConf(s nvmeproto.ANAState) conf.ANAState {
	switch s {
	case nvmeproto.ANANonOptimized:
		return conf.ANANonOptimized
	case nvmeproto.ANAInaccessible:
		return conf.ANAInaccessible
	case nvmeproto.ANAPersistentLoss:
		return conf.ANAPersistentLoss
	case nvmeproto.ANAChange:
		return conf.ANAChange
	}
	return conf.ANAOptimized
}

// checkANAStates validates a port's initial states (those of a resolved configuration
// always pass).
func checkANAStates(states *[conf.MaxANAGroup + 1]conf.ANAState) error {
	if states[0] != "" {
		return fmt.Errorf("%w: ANA group 0 is reserved", ErrInvalidANA)
	}
	for g, st := range states {
		if st != "" && !st.Valid() {
			return fmt.Errorf("%w: group %d: %q is not an ANA state", ErrInvalidANA, g, st)
		}
	}
	return nil
}

// initANA sets the port's states from its configuration: every group optimized unless
// set. Called before the port is published.
func (p *Port) initANA() {
	for g := range p.ana {
		st := p.cfg.ANAStates[g]
		p.anaSet[g] = st != ""
		p.ana[g].Store(uint32(anaWire(st)))
	}
}

// anaStatus is the status an I/O command for a namespace of group g gets on this port:
// success where the group's state lets I/O through, else the Asymmetric Access status of
// its state. One atomic load: it runs for every I/O command.
func (p *Port) anaStatus(g uint32) nvmeproto.Status {
	if g > conf.MaxANAGroup {
		return nvmeproto.StatusSuccess // not reachable: namespaces are validated by conf
	}
	switch nvmeproto.ANAState(p.ana[g].Load()) {
	case nvmeproto.ANAOptimized, nvmeproto.ANANonOptimized:
		return nvmeproto.StatusSuccess
	case nvmeproto.ANAInaccessible:
		return nvmeproto.StatusANAInaccessible
	case nvmeproto.ANAPersistentLoss:
		return nvmeproto.StatusANAPersistentLoss
	}
	return nvmeproto.StatusANATransition
}

// ANAState returns the state this port reports for ANA group g (optimized unless set).
func (p *Port) ANAState(g uint32) conf.ANAState {
	if g == 0 || g > conf.MaxANAGroup {
		return conf.ANAOptimized
	}
	return anaConf(nvmeproto.ANAState(p.ana[g].Load()))
}

// ANAStates returns the states set on this port, by configuration or SetANAState,
// indexed by group ID as conf.Listener.ANAStates (groups never set are empty, which
// means optimized).
func (p *Port) ANAStates() [conf.MaxANAGroup + 1]conf.ANAState {
	var out [conf.MaxANAGroup + 1]conf.ANAState
	p.anaMu.Lock()
	defer p.anaMu.Unlock()
	for g := 1; g <= conf.MaxANAGroup; g++ {
		if p.anaSet[g] {
			out[g] = anaConf(nvmeproto.ANAState(p.ana[g].Load()))
		}
	}
	return out
}

// SetANAState changes the state this port reports for ANA group g (1..conf.MaxANAGroup).
// I/O commands that begin afterwards see the new state. When the state changes, the ANA
// change count goes up and every I/O controller connected through this port gets an ANA
// Change event (when it enabled them), after which the host rereads the ANA log. Setting
// the state a group already has changes nothing (but the group is listed in the log from
// then on, as one that was set). The empty state unsets the group: optimized, as a group
// never set (ANAStates leaves it out, and the log lists it only while a namespace is in
// it).
//
// When the new state serves no I/O (inaccessible, persistent loss, change) SetANAState
// returns only once every I/O command to the group's namespaces that the port's I/O
// queues admitted before the change has completed (see ANAFence.Wait): from then on no
// command sent through this port for the group's namespaces reaches their storage, and
// another target may serve the group. Commands to the namespaces of other groups are not
// waited for. It waits also when the group already had the state, so that a caller whose
// wait ended in an error can call again to wait again. The wait ends with ctx (at the
// latest after the queue-close timeout when ctx has no deadline): then the state is
// changed all the same, and the error (ErrANAInFlight, an *ANAInFlightError) says how
// many commands still execute, on which controllers.
func (p *Port) SetANAState(ctx context.Context, g uint32, state conf.ANAState) error {
	f, err := p.ChangeANAState(g, state)
	if err != nil {
		return err
	}
	return f.Wait(ctx)
}

// ChangeANAState is SetANAState without the wait: it changes the state, raises the
// events, and returns the fence that the change is complete after (nil when the new state
// serves I/O: nothing to wait for). For callers that change ANA states under a lock they
// must not hold while waiting (target/server); until the fence's Wait returns nil, I/O
// commands admitted under the old state may still reach the storage.
func (p *Port) ChangeANAState(g uint32, state conf.ANAState) (*ANAFence, error) {
	if g == 0 || g > conf.MaxANAGroup {
		return nil, fmt.Errorf("%w: group %d out of range 1..%d", ErrInvalidANA, g, conf.MaxANAGroup)
	}
	set := state != ""
	if !set {
		state = conf.ANAOptimized
	}
	if !state.Valid() {
		return nil, fmt.Errorf("%w: %q is not an ANA state", ErrInvalidANA, state)
	}
	t := p.t
	w := uint32(anaWire(state))
	p.anaMu.Lock()
	p.anaSet[g] = set
	old := p.ana[g].Load()
	if old == w {
		p.anaMu.Unlock()
		return p.anaFence(g, state), nil
	}
	cnt := t.anaChanged()
	p.anaChg[g] = cnt
	p.ana[g].Store(w)
	p.anaMu.Unlock()
	t.log.Info("ANA state changed", "port_id", p.id, "traddr", p.cfg.TrAddr, "trsvcid", p.cfg.TrSvcID, "group", g,
		"from", anaConf(nvmeproto.ANAState(old)), "to", state, "change_count", cnt)
	for _, c := range t.portControllers(p) {
		c.raiseEvent(eventANAChange)
	}
	return p.anaFence(g, state), nil
}

// anaFence returns the fence a change of group g to state on this port owes: nil when
// state serves I/O, else over the port's I/O queues for the namespaces in g (both read
// after the change was published: a queue is listed before it admits its first command,
// and a namespace moved into g since is the move's to wait for).
func (p *Port) anaFence(g uint32, state conf.ANAState) *ANAFence {
	if anaServes(anaWire(state)) {
		return nil
	}
	where := p.cfg.TrAddr
	if p.cfg.TrSvcID != "" {
		where = net.JoinHostPort(p.cfg.TrAddr, p.cfg.TrSvcID)
	}
	return &ANAFence{t: p.t, change: fmt.Sprintf("port %d (%s): ANA group %d set to %s", p.id, where, g, state),
		waits: p.t.portGroupWaits(p, g)}
}

// anaServes reports whether a group in state s serves I/O.
func anaServes(s nvmeproto.ANAState) bool {
	return s == nvmeproto.ANAOptimized || s == nvmeproto.ANANonOptimized
}

// SetNamespaceANAGroup moves a namespace to ANA group g (1..conf.MaxANAGroup) while hosts
// use it: from then on each port reports the namespace in g, with g's state (Identify
// Namespace ANAGRPID, the ANA log, the Asymmetric Access status of I/O commands that begin
// afterwards). The namespace is otherwise untouched — its backend, registrations and
// reservation, its controllers and their queues. When the group changes, the ANA change
// count goes up (the count of both groups' descriptors) and every controller of the
// subsystem gets an ANA Change event (when it enabled them), after which the host
// rereads the ANA log and finds the namespace under g. Moving a namespace to the group it
// is in changes nothing.
//
// When g serves no I/O on some port, SetNamespaceANAGroup returns only once every I/O
// command to the namespace that the subsystem's I/O queues connected through those ports
// admitted before the move has completed; as SetANAState, also when the namespace was in
// g already, and bounded by ctx (or the queue-close timeout) with the move standing and
// an *ANAInFlightError when the wait ends first. An unknown subsystem or namespace is
// ErrNoSuchSubsystem or ErrNoSuchNamespace, a group out of range ErrInvalidANA; then
// nothing changes.
func (t *Target) SetNamespaceANAGroup(ctx context.Context, subNQN string, nsid, g uint32) error {
	f, err := t.MoveNamespaceANAGroup(subNQN, nsid, g)
	if err != nil {
		return err
	}
	return f.Wait(ctx)
}

// MoveNamespaceANAGroup is SetNamespaceANAGroup without the wait: it moves the namespace,
// raises the events, and returns the fence that the move is complete after (nil when g
// serves I/O on every port), as ChangeANAState does.
func (t *Target) MoveNamespaceANAGroup(subNQN string, nsid, g uint32) (*ANAFence, error) {
	what := fmt.Sprintf("subsystem %q: namespace %d: ana_group %d", subNQN, nsid, g)
	if g == 0 || g > conf.MaxANAGroup {
		return nil, fmt.Errorf("target: %s: %w: group %d out of range 1..%d", what, ErrInvalidANA, g, conf.MaxANAGroup)
	}
	var s *subsystem
	var ns *namespace
	var from uint32
	var cnt uint64
	err := t.change(what, true, func(c *conf.Config) (err error) {
		var si, ni int
		if s, ns, si, ni, err = t.findNamespace(c, subNQN, nsid); err != nil {
			return err
		}
		c.Subsystems[si].Namespaces[ni].ANAGroup = g
		return nil
	}, func(*conf.Config) error {
		// One store moves it: a reader sees it in one group or the other. The count goes
		// up after, and the events follow: a host that read the log in between reads it
		// again.
		if from = ns.anaGroup.Swap(g); from != g {
			cnt = t.anaChanged()
			t.anaGrpChg[from].Store(cnt)
			t.anaGrpChg[g].Store(cnt)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if from != g {
		t.log.Info("namespace moved to another ANA group", "subsystem", subNQN, "nsid", nsid, "from", from, "to", g, "change_count", cnt)
		for _, c := range s.controllers() {
			c.raiseEvent(eventANAChange)
		}
	}
	// The ports' states are read after the move was published: a state changed to one
	// that serves no I/O since is that change's fence's to wait for. A removed namespace
	// with its NSID whose backend still executes commands is waited for with it, also
	// one of a removed subsystem with the NQN: the namespace may have been added again on
	// its store (fence.go).
	scope := t.fenceScope(s)
	keys := fenceKeys(scope, ns)
	var ws []fenceWait
	for _, q := range scopeIOQueues(scope, func(q *Queue) bool { return !anaServes(nvmeproto.ANAState(q.port.ana[g].Load())) }) {
		ws = append(ws, fenceWait{q, keys})
	}
	if len(ws) == 0 {
		return nil, nil
	}
	return &ANAFence{t: t, change: fmt.Sprintf("subsystem %q: namespace %d: ana_group %d → %d", subNQN, nsid, from, g), waits: ws}, nil
}

// ErrANAInFlight: an ANA change took effect, but I/O commands admitted under the previous
// state were still executing when the wait for them ended (an *ANAInFlightError).
var ErrANAInFlight = errors.New("target: I/O commands admitted under the previous ANA state are still executing")

// An ANAFence is what an ANA change (ChangeANAState, MoveNamespaceANAGroup) is complete
// after: the completion of the I/O commands to the namespaces it concerns that the queues
// it concerns admitted under the old state. A nil *ANAFence has nothing to wait for.
type ANAFence struct {
	t      *Target
	change string // for the error
	waits  []fenceWait
}

// Wait waits until every namespace data command (Read, Write, Compare, Flush, Write
// Zeroes, Dataset Management; reservation commands change no storage) to the fence's
// namespaces that the fence's queues admitted before Wait was called has completed, or
// until ctx is done — at the latest after the target's queue-close timeout when ctx has
// no deadline. Then it returns an *ANAInFlightError (errors.Is ErrANAInFlight and ctx's
// error) naming the controllers whose commands still execute; the change stands. Wait
// may be called again, to wait again.
func (f *ANAFence) Wait(ctx context.Context) error {
	if f == nil || len(f.waits) == 0 {
		return nil
	}
	start := time.Now()
	ctx, cancel := f.t.fenceContext(ctx)
	defer cancel()
	stuck := fenceQueues(ctx, f.waits)
	if len(stuck) == 0 {
		return nil
	}
	e := &ANAInFlightError{Change: f.change, Waited: since(start), Err: ctx.Err()}
	// By controller object, not by NQN and ID: a removed subsystem's controllers have the
	// IDs of the controllers of the subsystem added again with its NQN (fenceScope).
	at := map[*controller]int{}
	for _, sq := range stuck {
		var c *controller // nil: a queue not bound to a controller
		if b := sq.q.bind.Load(); b != nil {
			c = b.ctrl
		}
		i, ok := at[c]
		if !ok {
			i = len(e.Controllers)
			at[c] = i
			ci := ControllerInFlight{}
			if c != nil {
				ci = ControllerInFlight{Subsystem: c.subsys.nqn, ID: c.cntlid, HostNQN: c.hostNQN, Removed: c.subsysRemoved()}
			}
			e.Controllers = append(e.Controllers, ci)
		}
		e.Controllers[i].Commands += sq.commands
	}
	slices.SortStableFunc(e.Controllers, func(a, b ControllerInFlight) int {
		return cmp.Or(strings.Compare(a.Subsystem, b.Subsystem), cmp.Compare(a.ID, b.ID), compareBool(a.Removed, b.Removed))
	})
	return e
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// ANAInFlightError is the error of an ANAFence's Wait that ended with I/O commands
// admitted under the previous ANA state still executing.
type ANAInFlightError struct {
	Change      string               // what changed: the port and group and new state, or the namespace and its groups
	Waited      time.Duration        // how long Wait waited
	Controllers []ControllerInFlight // the controllers whose commands still execute, by subsystem, ID and Removed
	Err         error                // why the wait ended: the context's error
}

// ControllerInFlight counts one controller's I/O commands an ANAFence still waited for.
// Subsystem and ID name a controller of the subsystem registered under that NQN unless
// Removed is set: then the controller was one of a subsystem RemoveSubsystem took out
// (its commands still in its namespaces' backends), and a controller of the subsystem
// added again with the NQN, if any, may have the same ID.
type ControllerInFlight struct {
	Subsystem string
	ID        uint16 // CNTLID
	HostNQN   string
	Removed   bool // its subsystem is no longer the one registered under Subsystem
	Commands  int64
}

// Commands returns the number of commands still executing, on every controller.
func (e *ANAInFlightError) Commands() int64 {
	var n int64
	for _, c := range e.Controllers {
		n += c.Commands
	}
	return n
}

func (e *ANAInFlightError) Error() string {
	var b strings.Builder
	n := e.Commands()
	verb := "execute"
	if n == 1 {
		verb = "executes"
	}
	fmt.Fprintf(&b, "target: %s: the change took effect, but %s admitted under the previous state still %s after %v (%v): ",
		e.Change, plural(n, "I/O command"), verb, e.Waited, e.Err)
	for i, c := range e.Controllers {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d on controller %d of %s", c.Commands, c.ID, c.Subsystem)
		if c.Removed {
			b.WriteString(" (removed subsystem)")
		}
		fmt.Fprintf(&b, " (host %s)", c.HostNQN)
	}
	they := "they"
	if n == 1 {
		they = "it"
	}
	fmt.Fprintf(&b, "; %s may still reach the storage: before another target serves the group, repeat the change to wait "+
		"again, and check the backend, whose requests do not complete", they)
	return b.String()
}

// Unwrap makes errors.Is match ErrANAInFlight and the context's error.
func (e *ANAInFlightError) Unwrap() []error { return []error{ErrANAInFlight, e.Err} }

// plural is "1 thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// anaChanged bumps the ANA change count and returns the new value.
func (t *Target) anaChanged() uint64 { return t.anaChgcnt.Add(1) }

// anaGroupChanged records a change of group g's namespace list (a namespace added or
// removed at run time).
func (t *Target) anaGroupChanged(g uint32) {
	if g > conf.MaxANAGroup {
		return
	}
	t.anaGrpChg[g].Store(t.anaChanged())
}

// portControllers returns the I/O controllers connected through p.
func (t *Target) portControllers(p *Port) []*controller {
	t.mu.Lock()
	subs := slices.Clone(t.order)
	t.mu.Unlock()
	var out []*controller
	for _, s := range subs {
		for _, c := range s.controllers() {
			if c.port == p && !c.disc {
				out = append(out, c)
			}
		}
	}
	return out
}

// portGroupWaits returns, for every subsystem with namespaces in group g, its I/O queues
// connected through p that may still have commands in flight (its ioQueues: also those
// of controllers being reset or torn down, and queues closed without draining), each for
// those namespaces, and for the removed namespaces whose commands the fences still wait
// for (fencedRemoved) that were in g when removed or whose NSID a namespace in g now has:
// their commands may reach a store of the group. A subsystem RemoveSubsystem is removing,
// or removed with commands still in its namespaces' backends (Target.removedSubs), counts
// as well, and together with the subsystem added again with its NQN, if any (fenceScope):
// its namespaces that have an NSID a namespace in g has are waited for too. Each
// namespace's group is read once, now.
func (t *Target) portGroupWaits(p *Port, g uint32) []fenceWait {
	t.mu.Lock()
	subs := slices.Concat(t.order, t.removedSubs)
	t.mu.Unlock()
	slices.SortStableFunc(subs, func(a, b *subsystem) int { return strings.Compare(a.nqn, b.nqn) })
	var ws []fenceWait
	for len(subs) > 0 {
		n := 1
		for n < len(subs) && subs[n].nqn == subs[0].nqn {
			n++
		}
		scope := subs[:n] // the subsystems with one NQN
		subs = subs[n:]
		var keys []fenceKey
		var inG []uint32 // NSIDs of the namespaces in g
		var removed []*namespace
		for _, s := range scope {
			tab, rm := s.fencedRemoved()
			for _, ns := range tab { // also inactive ones: a failed reopen's stragglers
				if ns.anaGroup.Load() == g {
					keys = append(keys, ns.fenceKey())
					inG = append(inG, ns.nsid)
				}
			}
			removed = append(removed, rm...)
		}
		for _, ns := range removed {
			if ns.anaGroup.Load() == g || slices.Contains(inG, ns.nsid) {
				keys = append(keys, ns.fenceKey())
			}
		}
		if len(keys) == 0 {
			continue
		}
		for _, q := range scopeIOQueues(scope, func(q *Queue) bool { return q.port == p }) {
			ws = append(ws, fenceWait{q, keys})
		}
	}
	return ws
}

// anaLog builds the ANA log page for this controller: its port's state of every group
// that one of the subsystem's namespaces is in or that was set on the port, in group ID
// order, each with the IDs of the subsystem's namespaces in it (ascending, as the Linux
// host walks them) unless rgo (LSP bit 0, "return groups only").
func (c *controller) anaLog(rgo bool) []byte {
	t, p := c.t, c.port
	// The count is read first: a change racing with this read bumps it again, so the host
	// sees the newer state on its next read.
	log := nvmeproto.ANALog{ChangeCount: t.anaChgcnt.Load()}
	nss := c.subsys.activeNamespaces() // as the active namespace list has them
	// Each namespace's group is read once: one moving meanwhile is in exactly one group.
	groups := make([]uint32, len(nss))
	var listed [conf.MaxANAGroup + 1]bool
	for i, ns := range nss {
		groups[i] = ns.anaGroup.Load()
		listed[groups[i]] = true
	}
	p.anaMu.Lock()
	for g := 1; g <= conf.MaxANAGroup; g++ {
		if !listed[g] && !p.anaSet[g] {
			continue
		}
		d := nvmeproto.ANAGroupDescriptor{
			GroupID:     uint32(g),
			ChangeCount: max(p.anaChg[g], t.anaGrpChg[g].Load()),
			State:       nvmeproto.ANAState(p.ana[g].Load()),
		}
		for i, ns := range nss { // sorted by NSID
			if groups[i] == uint32(g) {
				d.NSIDs = append(d.NSIDs, ns.nsid)
			}
		}
		log.Groups = append(log.Groups, d)
	}
	p.anaMu.Unlock()
	b := make([]byte, log.Size(rgo))
	log.Marshal(b, rgo)
	return b
}
