package target

import (
	"fmt"
	"slices"

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
// I/O commands that begin afterwards see the new state; commands already executing
// finish. When the state changes, the ANA change count goes up and every I/O controller
// connected through this port gets an ANA Change event (when it enabled them), after which
// the host rereads the ANA log. Setting the state a group already has changes nothing
// (but the group is listed in the log from then on, as one that was set). The empty
// state unsets the group: optimized, as a group never set (ANAStates leaves it out, and
// the log lists it only while a namespace is in it).
func (p *Port) SetANAState(g uint32, state conf.ANAState) error {
	if g == 0 || g > conf.MaxANAGroup {
		return fmt.Errorf("%w: group %d out of range 1..%d", ErrInvalidANA, g, conf.MaxANAGroup)
	}
	set := state != ""
	if !set {
		state = conf.ANAOptimized
	}
	if !state.Valid() {
		return fmt.Errorf("%w: %q is not an ANA state", ErrInvalidANA, state)
	}
	t := p.t
	w := uint32(anaWire(state))
	p.anaMu.Lock()
	p.anaSet[g] = set
	old := p.ana[g].Load()
	if old == w {
		p.anaMu.Unlock()
		return nil
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
	return nil
}

// SetNamespaceANAGroup moves a namespace to ANA group g (1..conf.MaxANAGroup) while hosts
// use it: from then on each port reports the namespace in g, with g's state (Identify
// Namespace ANAGRPID, the ANA log, the Asymmetric Access status of I/O commands that begin
// afterwards; commands already executing finish). The namespace is otherwise untouched —
// its backend, registrations and reservation, its controllers and their queues. When the
// group changes, the ANA change count goes up (the count of both groups' descriptors) and
// every controller of the subsystem gets an ANA Change event (when it enabled them), after
// which the host rereads the ANA log and finds the namespace under g. Moving a namespace
// to the group it is in changes nothing.
func (t *Target) SetNamespaceANAGroup(subNQN string, nsid, g uint32) error {
	what := fmt.Sprintf("subsystem %q: namespace %d: ana_group %d", subNQN, nsid, g)
	if g == 0 || g > conf.MaxANAGroup {
		return fmt.Errorf("target: %s: %w: group %d out of range 1..%d", what, ErrInvalidANA, g, conf.MaxANAGroup)
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
	if err != nil || from == g {
		return err
	}
	t.log.Info("namespace moved to another ANA group", "subsystem", subNQN, "nsid", nsid, "from", from, "to", g, "change_count", cnt)
	for _, c := range s.controllers() {
		c.raiseEvent(eventANAChange)
	}
	return nil
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
