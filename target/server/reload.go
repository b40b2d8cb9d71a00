package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
)

// Reload brings the running target in line with next (a configuration file read again,
// on SIGHUP): it computes the difference from the running configuration and applies it
// with the same operations the control API uses, in an order that keeps every
// intermediate state valid —
//
//  1. listeners that are new start listening; hosts new to the hosts section, or whose
//     entry changed (secrets, hash functions, DH groups), get their new entry; the
//     auto_reopen policy changes (reopens under way follow it from their next open);
//     metrics.per_namespace changes (the metrics endpoint reads it from the target at
//     each scrape, so it exports the new level from its next one);
//  2. namespaces that are gone, or whose identity changed (backend, path, lba_size, uuid,
//     nguid, eui64, the rbd image or its cluster: hosts would see another namespace), are
//     removed, then subsystems that are gone (their hosts are disconnected), all at once:
//     each waits for its namespaces' commands in flight, at most the target's queue-close
//     timeout (target.RemoveSubsystem), and they wait together, so that the step waits
//     one queue-close timeout at most, not one for each subsystem;
//  3. new subsystems are added, then new (and re-created) namespaces;
//  4. subsystems stop requiring authentication, allowed hosts change (hosts taken off
//     a list are disconnected), subsystems start requiring authentication, namespaces'
//     open settings change (shared, rbd.user, rbd.keyring: the backend is reopened in
//     place, see target.SetNamespaceOpenSettings), namespaces' rbd.create_size and write
//     protection change (a create_size that goes, before write protection comes; one that
//     comes, after it goes), namespaces grow to a larger size;
//  5. listeners' ANA group states change to states that serve I/O (optimized, then
//     non-optimized; a group set before and no longer listed goes back to optimized),
//     namespaces move to another ANA group (ana_group), then listeners' states change to
//     those that do not serve I/O: a switchover within one target never leaves a group,
//     or a namespace moving between groups, without a path. A change that leaves a group
//     (or a moved namespace) serving no I/O on a listener waits, at most the target's
//     queue-close timeout, for the I/O commands admitted before it (target.ANAFence);
//     the changes are applied one after another, in this order, and then waited for
//     together, so that the step waits one queue-close timeout at most, not one for each
//     change. When some commands still execute then, the change stays applied and the
//     reload goes on, logging which;
//  6. entries gone from the hosts section are removed, listeners that are gone stop
//     (their queues are disconnected).
//
// A namespace that changes only in what steps 4 and 5 apply keeps running as it is: its
// data, its registrations and reservation, the hosts' connections and their commands in
// flight (those that meet a reopen for new open settings are answered Namespace Not
// Ready, which hosts retry). One that is removed and added again starts without
// registrations unless they persist (Persist Through Power Loss, in the state_file).
//
// Host key and auth_required changes apply as SetHostKeys and SetAuthRequired do: to
// new connections and re-authentications; established connections keep working until
// they reconnect. Settings that cannot change while the target runs are errors that
// change nothing: the transport section, the control section, the metrics section but
// its per_namespace, a subsystem's serial or model, a smaller namespace size. next is
// validated as a file is (an invalid next changes nothing and the error says why). When
// a step fails, the steps already applied are undone in reverse order (a namespace that
// grew stays grown; hosts disconnected by a removal reconnect; a subsystem or namespace
// removed returns to its place in the order) and the error names the step and the
// reason. Removals of subsystems applied at once (step 2, and those of subsystems whose
// memory namespaces are removed last) all run to their end: when any fails, those that
// took effect are undone too (last to first, before the steps before them) and the
// error names each removal that failed. Reload returns a description of each change
// applied, in order (none when next is what runs).
//
// Once Shutdown has begun (or Close), Reload applies no step: it checks before each one
// (once before removals it applies at once), and stops with an error wrapping ErrClosed
// that names the step it did not apply. The steps applied before that stay applied and
// are not undone: an undo is a change of the same kind (a backend opened again, a
// subsystem added back, hosts reconnecting) and would change what the stop drains and
// flushes just as the reload's next step would; what stays is drained, flushed and
// closed with the rest, and the configuration file read at the next start is what
// counts. A step in progress when Shutdown begins runs to its end, and so do the
// removals applied at once with it; those the stop's close of the target made fail
// (target.ErrClosed) count as not applied, and the reload stops in the same way, its
// error wrapping both ErrClosed and theirs.
func (s *Server) Reload(next *conf.Config) ([]string, error) {
	s.chg.Lock()
	defer s.chg.Unlock()
	s.mu.Lock()
	closed, stopping := s.closed, s.stopping
	cur := s.configLocked()
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if stopping {
		return nil, fmt.Errorf("server: reload: nothing applied: the server is shutting down: %w", ErrClosed)
	}
	nc := next.Clone()
	if err := nc.Resolve(); err != nil {
		return nil, fmt.Errorf("server: reload: %w", err)
	}
	steps, err := s.plan(cur, nc)
	if err != nil {
		return nil, fmt.Errorf("server: reload: %w", err)
	}
	var done []string
	var fenced []fencedStep // ANA changes applied, their fences not waited for yet
	for i, n := 0, 0; i < len(steps); i += n {
		st := steps[i]
		n = batchLen(steps[i:])
		if s.isStopping() {
			s.log.Warn("reload stopped: the server is shutting down; the changes applied before stay applied until it has stopped",
				"not_applied", st.what, "applied", i)
			return nil, fmt.Errorf("server: reload: %s and the %d steps after it not applied: the server is shutting down (the %d changes before it stay applied until it has stopped): %w",
				st.what, len(steps)-i-1, i, ErrClosed)
		}
		batch := steps[i : i+n]
		errs := make([]error, n)
		if st.change != nil { // never parallel: n is 1
			var f *target.ANAFence
			if f, errs[0] = st.change(); errs[0] == nil {
				fenced = append(fenced, fencedStep{st.what, f})
				continue
			}
			// The ANA changes applied before it (fenced) are undone below without their
			// fences waited for. A fence not waited for covers only commands admitted under
			// a state the undo restores, or none: a change's fence covers the commands
			// admitted under the state (group, for a move) it left, which its undo
			// restores, and a change to a state that serves I/O has none to cover. The
			// undo that leaves a state serving no I/O waits for its own fence
			// (setANAStateWait, SetNamespaceANAGroup).
		} else {
			done = s.waitFences(done, fenced)
			fenced = nil
			applyBatch(batch, errs)
		}
		var failed []error
		var failedWhat []string
		var applied []step // of batch, in its order
		for k, err := range errs {
			if errors.Is(err, target.ErrRemovedUnclean) {
				// The removal took effect: it is applied, and nothing is undone for it.
				s.log.Warn("reload: applied, but releasing what it held failed", "change", batch[k].what, "err", err)
				err = nil
			}
			if err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", batch[k].what, err))
				failedWhat = append(failedWhat, batch[k].what)
				continue
			}
			s.log.Info("reload: applied", "change", batch[k].what)
			applied = append(applied, batch[k])
		}
		if len(failed) == 0 {
			for _, a := range applied {
				done = append(done, a.what)
			}
			continue
		}
		if s.isStopping() && allClosed(errs) {
			// The stop closed the target under the batch: as for a step the stop comes
			// before, what was applied stays applied (an undo would fail on the closed
			// target anyway).
			s.log.Warn("reload stopped: the server shut down while it applied changes; the changes applied stay applied until it has stopped",
				"not_applied", strings.Join(failedWhat, "; "), "applied", i+len(applied))
			return nil, fmt.Errorf("server: reload: %s and the %d steps after it not applied: the server shut down meanwhile (the %d changes applied stay applied until it has stopped): %w",
				strings.Join(failedWhat, ", "), len(steps)-i-n, i+len(applied), errors.Join(ErrClosed, errors.Join(failed...)))
		}
		// Undone last to first: the steps of the batch that took effect, then those
		// before it.
		toUndo := slices.Concat(steps[:i], applied)
		var undo []error
		for j := len(toUndo) - 1; j >= 0; j-- {
			if toUndo[j].undo == nil {
				continue
			}
			if uerr := toUndo[j].undo(); uerr != nil {
				undo = append(undo, fmt.Errorf("undoing %s: %w", toUndo[j].what, uerr))
			}
		}
		err := errors.Join(failed...)
		s.log.Error("reload failed; the changes made were undone", "step", strings.Join(failedWhat, "; "), "err", err, "undo_errors", len(undo))
		err = fmt.Errorf("server: reload: %w", err)
		others := "changes before it" // what was undone
		if n > 1 {
			others = "other changes applied" // also those of its batch that took effect
		}
		if len(undo) > 0 {
			err = fmt.Errorf("%w; and undoing the %s failed: %w", err, others, errors.Join(undo...))
		} else if len(toUndo) > 0 {
			err = fmt.Errorf("%w (the %d %s were undone)", err, len(toUndo), others)
		}
		return nil, err
	}
	return s.waitFences(done, fenced), nil
}

// allClosed reports whether every error of errs that is not nil says the target was
// closed (target.ErrClosed).
func allClosed(errs []error) bool {
	for _, err := range errs {
		if err != nil && !errors.Is(err, target.ErrClosed) && !errors.Is(err, target.ErrRemovedUnclean) {
			return false
		}
	}
	return true
}

// removeSubsystem is target.Target.RemoveSubsystem, a reload's removal of a subsystem
// (tests replace it).
var removeSubsystem = (*target.Target).RemoveSubsystem

// isStopping reports whether Shutdown (or Close) has begun.
func (s *Server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping || s.closed
}

// step is one change of a reload and, where it can be undone, how. An ANA change has
// change instead of do: it applies the change and returns the fence the change is
// complete after (nil: nothing to wait for), which Reload waits for together with those
// of the ANA changes next to it (waitFences).
//
// A parallel step (a do, never a change) neither needs nor undoes what the other
// parallel steps of its group do, whichever of them runs first or fails: Reload runs the
// consecutive parallel steps of one group (a batch) at once (applyBatch) and goes on once
// all have returned. The steps of a batch that took effect are undone, last to first,
// when any of them fails, as the steps before it are. group is the step's group in the
// plan (plan sets it): parallel steps of groups next to each other are two batches, the
// second applied after the first, as the plan orders them.
type step struct {
	what     string
	do       func() error
	change   func() (*target.ANAFence, error)
	undo     func() error
	parallel bool
	group    int
}

// batchLen is the number of steps at the start of steps that Reload runs together: the
// parallel steps of one group there, or the first step alone.
func batchLen(steps []step) int {
	n := 1
	if steps[0].parallel {
		for n < len(steps) && steps[n].parallel && steps[n].group == steps[0].group {
			n++
		}
	}
	return n
}

// applyBatch runs the do of each step of batch at once, each on its own goroutine when
// there are several, and returns when all have; errs[k] is batch[k]'s error.
func applyBatch(batch []step, errs []error) {
	if len(batch) == 1 {
		errs[0] = batch[0].do()
		return
	}
	var wg sync.WaitGroup
	for k, st := range batch {
		wg.Go(func() { errs[k] = st.do() })
	}
	wg.Wait()
}

// fencedStep is an ANA change a reload applied and the fence it is complete after.
type fencedStep struct {
	what  string
	fence *target.ANAFence
}

// waitFences waits for the fences of the ANA changes fenced, applied one after another in
// their order, all at once, logs each change as applied and returns done with them
// appended. Each Wait is bounded by the target's queue-close timeout, so a run of changes
// waits that long at most, not that long for each. Waiting together is what waiting one
// after another guarantees: each fence is over the queues and namespaces its change read
// when it was applied, and is complete once the commands admitted before that change under
// the old state have completed, whatever the other changes and their fences; no change
// needs another's commands completed before it is applied — what the order of the
// changes keeps (every group, and every moving namespace, keeps a path) is the order in
// which they are applied, which stays. A Wait that ends with commands still executing
// leaves its change applied: undoing it would not call the commands back.
func (s *Server) waitFences(done []string, fenced []fencedStep) []string {
	errs := make([]error, len(fenced))
	var wg sync.WaitGroup
	for i, fs := range fenced {
		if fs.fence == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fs.fence.Wait(context.Background())
		}()
	}
	wg.Wait()
	for i, fs := range fenced {
		if errs[i] != nil {
			s.log.Warn("reload: applied, but I/O commands admitted under the previous ANA state still execute", "change", fs.what, "err", errs[i])
		}
		s.log.Info("reload: applied", "change", fs.what)
		done = append(done, fs.what)
	}
	return done
}

// plan computes the steps that turn the running configuration cur into next (both
// resolved), or the error that refuses next.
func (s *Server) plan(cur, next *conf.Config) ([]step, error) {
	var errs []string
	if d := fieldDiffs("transport", cur.Transport, next.Transport); len(d) > 0 {
		errs = append(errs, strings.Join(d, ", ")+": the transport settings size the buffer pool, queues and poll groups at start; restart gonvmf to change them")
	}
	if d := fieldDiffs("control", cur.Control, next.Control); len(d) > 0 {
		errs = append(errs, strings.Join(d, ", ")+": the control API listens where it started; restart gonvmf to change it")
	}
	{
		// per_namespace is read at each scrape (a step below); the rest of the section
		// sets the endpoint up.
		a, b := cur.Metrics, next.Metrics
		a.PerNamespace, b.PerNamespace = "", ""
		if d := fieldDiffs("metrics", a, b); len(d) > 0 {
			errs = append(errs, strings.Join(d, ", ")+": the metrics endpoint is set up at start; restart gonvmf to change it (per_namespace changes on reload)")
		}
	}
	// Any other top-level section: only what this function knows how to apply may change.
	{
		a, b := *cur.Clone(), *next.Clone()
		for _, c := range []*conf.Config{&a, &b} {
			c.Listeners, c.Subsystems, c.Hosts, c.Transport, c.Control, c.File, c.Warnings = nil, nil, nil, conf.Transport{}, conf.Control{}, "", nil
			c.Metrics, c.AutoReopen = conf.Metrics{}, conf.AutoReopen{}
		}
		if d := fieldDiffs("", a, b); len(d) > 0 {
			errs = append(errs, strings.Join(d, ", ")+": cannot change while gonvmf runs; restart it")
		}
	}

	var rmFirst, add, setKeys, rmNS, rmSub, addSub, addNS, authOff, hosts, authOn, reopen, createOff, ro, createOn, grow, anaUp, move, anaDown, rmVolatile, rmKeys, rmLis []step
	// A memory namespace's data lives in its open backend: removing it early and then
	// undoing the removal (a later step failed) would bring it back empty under the same
	// identifiers. Removals that free nothing the other steps need — a memory namespace
	// that is gone, a subsystem whose namespaces' paths nothing new takes — go after
	// every step that can fail for another reason, where nothing is undone after them
	// (a memory namespace moved to another NSID with its identifiers is not one of them).
	// What identifies a namespace and must be unique in a configuration (conf checks it
	// across subsystems): a removal whose namespaces share any of it with next must come
	// before the additions, or they are refused while it is still there.
	idents := func(n conf.Namespace) []string {
		ids := []string{"uuid:" + conf.FormatUUID(n.UUID), "nguid:" + conf.FormatNGUID(n.NGUID), "eui64:" + conf.FormatEUI64(n.EUI64)}
		if n.Path != "" {
			ids = append(ids, "path:"+n.Path)
		}
		if n.Backend == conf.BackendRBD {
			ids = append(ids, "rbd:"+n.RBD.Pool+"/"+n.RBD.RadosNamespace+"/"+n.RBD.Image)
		}
		return ids
	}
	nextIDs := map[string]bool{}
	for _, sub := range next.Subsystems {
		for _, n := range sub.Namespaces {
			for _, id := range idents(n) {
				nextIDs[id] = true
			}
		}
	}
	volatile := func(nss ...conf.Namespace) bool {
		mem := false
		for _, n := range nss {
			for _, id := range idents(n) {
				if nextIDs[id] {
					return false
				}
			}
			mem = mem || n.Backend == conf.BackendMemory
		}
		return mem
	}
	// Listeners.
	if s.tr != nil {
		anaUp, anaDown = s.anaSteps(cur, next)
		for _, l := range next.Listeners {
			if !slices.ContainsFunc(cur.Listeners, func(x conf.Listener) bool { return sameListener(x, l) }) {
				add = append(add, step{what: fmt.Sprintf("add listener %s %s port %d", l.Transport, l.Address, l.Port),
					do:   func() error { _, err := s.addListener(l); return err },
					undo: func() error { return s.removeListener(l) }})
			}
		}
		for _, l := range cur.Listeners {
			if !slices.ContainsFunc(next.Listeners, func(x conf.Listener) bool { return sameListener(x, l) }) {
				st := step{what: fmt.Sprintf("remove listener %s %s port %d", l.Transport, l.Address, l.Port),
					do:   func() error { return s.removeListener(l) },
					undo: func() error { _, err := s.addListener(l); return err }}
				// Listeners go after the rest (hosts keep a way in meanwhile), except one
				// that a new listener overlaps (a wildcard address and one of its family
				// on the same port): it goes before the additions, or they are refused.
				if slices.ContainsFunc(next.Listeners, func(x conf.Listener) bool { return overlapsListener(x, l) }) {
					rmFirst = append(rmFirst, st)
				} else {
					rmLis = append(rmLis, st)
				}
			}
		}
	}
	t := s.t
	if d := fieldDiffs("auto_reopen", cur.AutoReopen, next.AutoReopen); len(d) > 0 {
		from, to := cur.AutoReopen, next.AutoReopen
		setKeys = append(setKeys, step{what: strings.Join(d, ", "),
			do:   func() error { return t.SetAutoReopen(to) },
			undo: func() error { return t.SetAutoReopen(from) }})
	}
	// (Any other change of the metrics section is refused above, and plan then returns no step.)
	if x, y := cur.Metrics.PerNamespace, next.Metrics.PerNamespace; x != y {
		setKeys = append(setKeys, step{what: fmt.Sprintf("metrics.per_namespace %s → %s (%s)", x, y, perNamespaceText(y)),
			do:   func() error { return t.SetMetricsPerNamespace(y) },
			undo: func() error { return t.SetMetricsPerNamespace(x) }})
	}
	// The hosts section (descriptions show secrets redacted).
	for _, nh := range next.Hosts {
		i := slices.IndexFunc(cur.Hosts, func(x conf.Host) bool { return x.NQN == nh.NQN })
		if i < 0 {
			setKeys = append(setKeys, step{what: fmt.Sprintf("add host %s to the hosts section (%s)", nh.NQN, hostText(nh)),
				do:   func() error { _, err := t.SetHostKeys(nh.NQN, wholeHost(nh)); return err },
				undo: func() error { return t.RemoveHostKeys(nh.NQN) }})
			continue
		}
		ch := cur.Hosts[i]
		if ch.SameAs(&nh) {
			continue
		}
		setKeys = append(setKeys, step{what: fmt.Sprintf("host %s: %s", nh.NQN, hostDiff(ch, nh)),
			do:   func() error { _, err := t.SetHostKeys(nh.NQN, wholeHost(nh)); return err },
			undo: func() error { _, err := t.SetHostKeys(ch.NQN, wholeHost(ch)); return err }})
	}
	for _, ch := range cur.Hosts {
		if slices.ContainsFunc(next.Hosts, func(x conf.Host) bool { return x.NQN == ch.NQN }) {
			continue
		}
		rmKeys = append(rmKeys, step{what: fmt.Sprintf("remove host %s from the hosts section", ch.NQN),
			do:   func() error { return t.RemoveHostKeys(ch.NQN) },
			undo: func() error { _, err := t.SetHostKeys(ch.NQN, wholeHost(ch)); return err }})
	}
	// Subsystems.
	for _, cs := range cur.Subsystems {
		if slices.ContainsFunc(next.Subsystems, func(x conf.Subsystem) bool { return x.NQN == cs.NQN }) {
			continue
		}
		// The removals of subsystems run at once (parallel): each waits for its hosts'
		// commands in flight, up to the queue-close timeout, and one slow subsystem does
		// not hold the others' up. They are independent: RemoveSubsystem takes only its own
		// subsystem, and an undo puts its subsystem back before the first subsystem that
		// followed it and is there then, so the ones that took effect return to their
		// places in the order whichever others took effect too. A removal is one batch
		// with the others of its group: rmSub, or rmVolatile, whose subsystem removals
		// come first (its namespace removals follow, one after another). When one of
		// rmVolatile's fails, those of its batch that took effect are undone and their
		// memory namespaces come back empty, as the removals before a failing one's
		// always did; RemoveSubsystem fails there only when the target closes or the
		// subsystem was removed past the Server (through Target).
		st := step{what: fmt.Sprintf("remove subsystem %s", cs.NQN), parallel: true,
			do: func() error { return removeSubsystem(t, cs.NQN) },
			undo: func() error {
				now := t.Config().Subsystems
				return t.InsertSubsystem(restoreIndex(cur.Subsystems, now, cs.NQN, subsystemNQN), cs)
			}}
		if volatile(cs.Namespaces...) {
			rmVolatile = append(rmVolatile, st)
		} else {
			rmSub = append(rmSub, st)
		}
	}
	for _, ns := range next.Subsystems {
		i := slices.IndexFunc(cur.Subsystems, func(x conf.Subsystem) bool { return x.NQN == ns.NQN })
		if i < 0 {
			addSub = append(addSub, step{what: fmt.Sprintf("add subsystem %s (%d namespaces)", ns.NQN, len(ns.Namespaces)),
				do:   func() error { return t.AddSubsystem(ns) },
				undo: func() error { return t.RemoveSubsystem(ns.NQN) }})
			continue
		}
		cs := cur.Subsystems[i]
		nqn := cs.NQN
		if cs.Serial != ns.Serial {
			errs = append(errs, fmt.Sprintf("subsystem %s: serial %q → %q: hosts identify a subsystem's controllers by serial and model, which cannot change while they are connected; remove the subsystem and add it again, or restart", nqn, cs.Serial, ns.Serial))
		}
		if cs.Model != ns.Model {
			errs = append(errs, fmt.Sprintf("subsystem %s: model %q → %q: hosts identify a subsystem's controllers by serial and model, which cannot change while they are connected; remove the subsystem and add it again, or restart", nqn, cs.Model, ns.Model))
		}
		{ // Fields Reload does not know how to apply (fields added later).
			x, y := cs, ns
			for _, s := range []*conf.Subsystem{&x, &y} {
				s.NQN, s.Serial, s.Model, s.AllowAnyHost, s.Hosts, s.AuthRequired, s.Namespaces = "", "", "", false, nil, false, nil
			}
			if d := fieldDiffs("subsystem "+nqn, x, y); len(d) > 0 {
				errs = append(errs, strings.Join(d, ", ")+": cannot change while hosts are connected; remove the subsystem and add it again, or restart")
			}
		}
		if cs.AuthRequired != ns.AuthRequired {
			st := step{what: fmt.Sprintf("subsystem %s: auth_required %t → %t", nqn, cs.AuthRequired, ns.AuthRequired),
				do:   func() error { return t.SetAuthRequired(nqn, ns.AuthRequired) },
				undo: func() error { return t.SetAuthRequired(nqn, cs.AuthRequired) }}
			// Off before the host lists change, on after: each intermediate state is valid
			// (a host list under auth_required must have keys for every host).
			if ns.AuthRequired {
				authOn = append(authOn, st)
			} else {
				authOff = append(authOff, st)
			}
		}
		if cs.AllowAnyHost != ns.AllowAnyHost || !slices.Equal(cs.Hosts, ns.Hosts) {
			hosts = append(hosts, step{what: fmt.Sprintf("subsystem %s: hosts %s → %s", nqn, hostsText(cs), hostsText(ns)),
				do:   func() error { return t.SetAllowedHosts(nqn, ns.AllowAnyHost, ns.Hosts) },
				undo: func() error { return t.SetAllowedHosts(nqn, cs.AllowAnyHost, cs.Hosts) }})
		}
		for _, cn := range cs.Namespaces {
			j := slices.IndexFunc(ns.Namespaces, func(x conf.Namespace) bool { return x.NSID == cn.NSID })
			why := "gone"
			if j >= 0 {
				if why = identityChange(cn, ns.Namespaces[j]); why == "" {
					continue
				}
			}
			st := step{what: fmt.Sprintf("subsystem %s: remove namespace %d (%s)", nqn, cn.NSID, why),
				do: func() error { return t.RemoveNamespace(nqn, cn.NSID) },
				undo: func() error {
					var now []conf.Namespace
					subs := t.Config().Subsystems
					if k := slices.IndexFunc(subs, func(x conf.Subsystem) bool { return x.NQN == nqn }); k >= 0 {
						now = subs[k].Namespaces
					}
					return t.InsertNamespace(nqn, restoreIndex(cs.Namespaces, now, cn.NSID, namespaceID), cn)
				}}
			if j < 0 && volatile(cn) { // gone, its NSID not taken again
				rmVolatile = append(rmVolatile, st)
			} else {
				rmNS = append(rmNS, st)
			}
		}
		for _, nn := range ns.Namespaces {
			j := slices.IndexFunc(cs.Namespaces, func(x conf.Namespace) bool { return x.NSID == nn.NSID })
			if j < 0 || identityChange(cs.Namespaces[j], nn) != "" {
				addNS = append(addNS, step{what: fmt.Sprintf("subsystem %s: add namespace %d (%s)", nqn, nn.NSID, nsText(nn)),
					do:   func() error { return t.AddNamespace(nqn, nn) },
					undo: func() error { return t.RemoveNamespace(nqn, nn.NSID) }})
				continue
			}
			cn := cs.Namespaces[j]
			if d := openChange(cn, nn); d != "" {
				from, to := target.NamespaceOpenSettings(cn), target.NamespaceOpenSettings(nn)
				reopen = append(reopen, step{what: fmt.Sprintf("subsystem %s: namespace %d %s", nqn, nn.NSID, d),
					do:   func() error { return t.SetNamespaceOpenSettings(nqn, nn.NSID, to) },
					undo: func() error { return t.SetNamespaceOpenSettings(nqn, nn.NSID, from) }})
			}
			if x, y := cn.RBD.CreateSize, nn.RBD.CreateSize; x != y {
				st := step{what: fmt.Sprintf("subsystem %s: namespace %d rbd.create_size %s → %s", nqn, nn.NSID, createText(x), createText(y)),
					do:   func() error { return t.SetRBDCreateSize(nqn, nn.NSID, y) },
					undo: func() error { return t.SetRBDCreateSize(nqn, nn.NSID, x) }}
				// A read-only namespace has none: it goes before write protection comes, and
				// comes after it goes.
				if y == 0 {
					createOff = append(createOff, st)
				} else {
					createOn = append(createOn, st)
				}
			}
			if cn.ANAGroup != nn.ANAGroup {
				move = append(move, step{what: fmt.Sprintf("subsystem %s: namespace %d ana_group %d → %d", nqn, nn.NSID, cn.ANAGroup, nn.ANAGroup),
					change: func() (*target.ANAFence, error) { return t.MoveNamespaceANAGroup(nqn, nn.NSID, nn.ANAGroup) },
					undo:   func() error { return t.SetNamespaceANAGroup(context.Background(), nqn, nn.NSID, cn.ANAGroup) }})
			}
			if cn.ReadOnly != nn.ReadOnly {
				ro = append(ro, step{what: fmt.Sprintf("subsystem %s: namespace %d read_only %t → %t", nqn, nn.NSID, cn.ReadOnly, nn.ReadOnly),
					do:   func() error { return t.SetNamespaceReadOnly(nqn, nn.NSID, nn.ReadOnly) },
					undo: func() error { return t.SetNamespaceReadOnly(nqn, nn.NSID, cn.ReadOnly) }})
			}
			switch {
			case nn.Size == cn.Size || nn.Size == 0: // 0: a file's own size, or a block device's
			case nn.Size < cn.Size:
				errs = append(errs, fmt.Sprintf("subsystem %s: namespace %d: size %s is smaller than the %s it has: a namespace cannot shrink (hosts may have data in the blocks that would go); remove it and add it again to start over", nqn, nn.NSID, nn.Size, cn.Size))
			default:
				grow = append(grow, step{what: fmt.Sprintf("subsystem %s: namespace %d size %s → %s", nqn, nn.NSID, sizeText(cn.Size), nn.Size),
					do: func() error { return t.ResizeNamespace(nqn, nn.NSID, nn.Size) }})
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	var steps []step
	for g, group := range [][]step{rmFirst, add, setKeys, rmNS, rmSub, addSub, addNS, authOff, hosts, authOn, reopen, createOff, ro, createOn, grow, anaUp, move, anaDown, rmVolatile, rmKeys, rmLis} {
		for _, st := range group {
			st.group = g
			steps = append(steps, st)
		}
	}
	return steps, nil
}

// perNamespaceText says what the metrics endpoint exports of each namespace at level.
func perNamespaceText(level string) string {
	if level == conf.MetricsCounters {
		return "the next scrape exports each namespace's counters and gauges, without latency histograms"
	}
	return "the next scrape exports each namespace's counters, gauges and latency histograms"
}

// restoreIndex is where the item with key k, which the list cur had, goes back into the
// list as it runs now when a removal is undone: before the first item of now that
// followed it in cur, or last. Undone in reverse order, the removals and additions after
// this one have been undone or did not take effect (removals applied at once with it
// that failed): the items of cur in now are in cur's order, and items that cur had not
// are taken out after it, so each item returns to its index in cur.
func restoreIndex[T any, K comparable](cur, now []T, k K, key func(T) K) int {
	i := slices.IndexFunc(cur, func(x T) bool { return key(x) == k })
	after := map[K]bool{}
	for _, x := range cur[i+1:] {
		after[key(x)] = true
	}
	if j := slices.IndexFunc(now, func(x T) bool { return after[key(x)] }); j >= 0 {
		return j
	}
	return len(now)
}

func subsystemNQN(s conf.Subsystem) string { return s.NQN }
func namespaceID(n conf.Namespace) uint32  { return n.NSID }

// overlapsListener reports whether a and b, different listeners, cannot listen at once:
// the same transport and port, and one on the wildcard address of the other's family (as
// the configuration's validation says).
func overlapsListener(a, b conf.Listener) bool {
	if a.Transport != b.Transport || a.Port != b.Port {
		return false
	}
	x, errA := netip.ParseAddr(a.Address)
	y, errB := netip.ParseAddr(b.Address)
	if errA != nil || errB != nil {
		return false
	}
	x, y = x.Unmap(), y.Unmap()
	return x != y && x.Is4() == y.Is4() && (x.IsUnspecified() || y.IsUnspecified())
}

// wholeHost is the change that makes a host's entry h.
func wholeHost(h conf.Host) target.HostKeysChange {
	hashes, groups := slices.Clone(h.DHCHAPHashes), slices.Clone(h.DHCHAPDHGroups)
	return target.HostKeysChange{DHCHAPSecret: &h.DHCHAPSecret, DHCHAPCtrlSecret: &h.DHCHAPCtrlSecret,
		DHCHAPHashes: &hashes, DHCHAPDHGroups: &groups}
}

// hostText describes a host's entry with its secrets redacted.
func hostText(h conf.Host) string {
	t := "dhchap_secret " + conf.RedactSecret(h.DHCHAPSecret)
	if h.DHCHAPCtrlSecret != "" {
		t += ", dhchap_ctrl_secret " + conf.RedactSecret(h.DHCHAPCtrlSecret)
	}
	return t
}

// hostDiff describes how host entry b differs from a, secrets redacted.
func hostDiff(a, b conf.Host) string {
	var d []string
	secret := func(key, x, y string) {
		switch {
		case x == y:
		case y == "":
			d = append(d, key+" removed")
		case x == "":
			d = append(d, key+" added ("+conf.RedactSecret(y)+")")
		default:
			d = append(d, key+" replaced (now "+conf.RedactSecret(y)+")")
		}
	}
	secret("dhchap_secret", a.DHCHAPSecret, b.DHCHAPSecret)
	secret("dhchap_ctrl_secret", a.DHCHAPCtrlSecret, b.DHCHAPCtrlSecret)
	if x, y := a.Hashes(), b.Hashes(); !slices.Equal(x, y) {
		d = append(d, fmt.Sprintf("dhchap_hashes %v → %v", x, y))
	}
	if x, y := a.DHGroups(), b.DHGroups(); !slices.Equal(x, y) {
		d = append(d, fmt.Sprintf("dhchap_dhgroups %v → %v", x, y))
	}
	return strings.Join(d, ", ")
}

// anaSteps are the ANA state changes of the listeners served in both cur and next: up,
// those to states that serve I/O (optimized first), and down, those to states that do not.
func (s *Server) anaSteps(cur, next *conf.Config) (up, down []step) {
	type change struct {
		rank int // of the new state: optimized 0, non-optimized 1, change 2, ...
		st   step
	}
	var changes []change
	for _, nl := range next.Listeners {
		i := slices.IndexFunc(cur.Listeners, func(x conf.Listener) bool { return sameListener(x, nl) })
		if i < 0 {
			continue // a new listener starts with its states
		}
		cl := cur.Listeners[i]
		ip, err := netip.ParseAddr(cl.Address)
		if err != nil {
			continue // not reachable: both are resolved
		}
		addr := netip.AddrPortFrom(ip, cl.Port)
		for g := uint32(1); g <= conf.MaxANAGroup; g++ {
			// As written: a group set to optimized and one not set report the same
			// state, but only the first is in the configuration (and always in the log).
			rawFrom, rawTo := cl.ANAStates[g], nl.ANAStates[g]
			if rawFrom == rawTo {
				continue
			}
			from, to := cl.State(g), nl.State(g)
			rank := slices.Index([]conf.ANAState{conf.ANAOptimized, conf.ANANonOptimized, conf.ANAChange, conf.ANAInaccessible, conf.ANAPersistentLoss}, to)
			what := fmt.Sprintf("listener %s %s port %d: ANA group %d %s → %s", cl.Transport, cl.Address, cl.Port, g, from, to)
			if from == to {
				what = fmt.Sprintf("listener %s %s port %d: ANA group %d %s (%s)", cl.Transport, cl.Address, cl.Port, g, to,
					map[bool]string{true: "now set", false: "no longer set"}[rawTo != ""])
			}
			changes = append(changes, change{rank, step{what: what,
				change: func() (*target.ANAFence, error) { return s.setANAState(addr, g, rawTo) },
				undo:   func() error { return s.setANAStateWait(addr, g, rawFrom) }}})
		}
	}
	slices.SortStableFunc(changes, func(a, b change) int { return a.rank - b.rank })
	for _, c := range changes {
		if c.rank <= 1 {
			up = append(up, c.st)
		} else {
			down = append(down, c.st)
		}
	}
	return up, down
}

// setANAStateWait is setANAState and the wait for the commands admitted before it, at
// most the target's queue-close timeout: the undo of a reload's ANA change.
func (s *Server) setANAStateWait(listener netip.AddrPort, group uint32, state conf.ANAState) error {
	f, err := s.setANAState(listener, group, state)
	if err != nil {
		return err
	}
	return f.Wait(context.Background())
}

// identityChange says why the running namespace a cannot become b in place: a field
// that makes b another namespace. "" when they differ only in what Reload applies to a
// running namespace: a larger size, write protection, the ANA group, rbd.create_size
// (which only a missing image at the next open uses), and the open settings (openChange).
//
// Every field that names the store is identity: backend, path and the rbd image's pool,
// rados_namespace and image (another store holds other data), rbd.ceph_conf (which
// cluster: a pool and image of the same name elsewhere are another image), lba_size (the
// blocks hosts address change size) and uuid, nguid, eui64 (hosts would see another
// namespace).
func identityChange(a, b conf.Namespace) string {
	switch {
	case a.Backend != b.Backend:
		return fmt.Sprintf("backend %s → %s", a.Backend, b.Backend)
	case a.Path != b.Path:
		return fmt.Sprintf("path %s → %s", a.Path, b.Path)
	case a.LBASize != b.LBASize:
		return fmt.Sprintf("lba_size %d → %d", a.LBASize, b.LBASize)
	case a.UUID != b.UUID:
		return "uuid changed"
	case a.NGUID != b.NGUID:
		return "nguid changed"
	case a.EUI64 != b.EUI64:
		return "eui64 changed"
	}
	// The rest are compared as a whole: rbd's pool, rados_namespace, image and ceph_conf;
	// a field added to conf.Namespace later re-creates the namespace until Reload knows
	// better.
	x, y := a, b
	for _, n := range []*conf.Namespace{&x, &y} {
		n.Size, n.ReadOnly, n.ANAGroup, n.RBD.CreateSize = 0, false, 0, 0
		n.Shared, n.RBD.User, n.RBD.Keyring = false, "", ""
	}
	if d := fieldDiffs("rbd", x.RBD, y.RBD); len(d) > 0 {
		return strings.Join(d, ", ")
	}
	if !reflect.DeepEqual(x, y) {
		if d := fieldDiffs("", x, y); len(d) > 0 {
			return strings.Join(d, ", ")
		}
		return "settings changed"
	}
	return ""
}

// openChange describes how the open settings of a and b (shared, rbd.user, rbd.keyring)
// differ, "" when they do not.
func openChange(a, b conf.Namespace) string {
	var d []string
	if a.Shared != b.Shared {
		d = append(d, fmt.Sprintf("shared %t → %t", a.Shared, b.Shared))
	}
	if a.RBD.User != b.RBD.User {
		d = append(d, fmt.Sprintf("rbd.user %q → %q", a.RBD.User, b.RBD.User))
	}
	if a.RBD.Keyring != b.RBD.Keyring {
		d = append(d, fmt.Sprintf("rbd.keyring %q → %q", a.RBD.Keyring, b.RBD.Keyring))
	}
	return strings.Join(d, ", ")
}

func hostsText(s conf.Subsystem) string {
	if s.AllowAnyHost {
		return "any"
	}
	return "[" + strings.Join(s.Hosts, " ") + "]"
}

func nsText(n conf.Namespace) string {
	t := n.Backend
	if n.Path != "" {
		t += " " + n.Path
	}
	if n.Size != 0 {
		t += " " + n.Size.String()
	}
	return t
}

func createText(s conf.Size) string {
	if s == 0 {
		return "none"
	}
	return s.String()
}

func sizeText(s conf.Size) string {
	if s == 0 {
		return "(its store's)"
	}
	return s.String()
}

// fieldDiffs lists the fields (by YAML key, under prefix) whose values differ between the
// structs a and b, as "prefix.key: A → B" (strings quoted). A field that is a struct
// itself (a section, such as limits) is listed by the fields of it that differ,
// "prefix.section.key: A → B"; one whose differences are in no exported field (time.Time)
// is listed whole.
func fieldDiffs(prefix string, a, b any) []string {
	return appendFieldDiffs(nil, prefix, reflect.ValueOf(a), reflect.ValueOf(b))
}

func appendFieldDiffs(out []string, prefix string, va, vb reflect.Value) []string {
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		x, y := va.Field(i), vb.Field(i)
		if reflect.DeepEqual(x.Interface(), y.Interface()) {
			continue
		}
		key := f.Tag.Get("yaml")
		if key == "" || key == "-" {
			key = f.Name
		}
		if prefix != "" {
			key = prefix + "." + key
		}
		if x.Kind() == reflect.Struct {
			if sub := appendFieldDiffs(nil, key, x, y); len(sub) > 0 {
				out = append(out, sub...)
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", key, diffValue(x), diffValue(y)))
	}
	return out
}

// diffValue formats a field's value for fieldDiffs: strings quoted (an empty one is
// visible), everything else as %v prints it (a Size as 16MiB, a Duration as 10s).
func diffValue(v reflect.Value) string {
	if v.Kind() == reflect.String {
		return fmt.Sprintf("%q", v.Interface())
	}
	return fmt.Sprintf("%v", v.Interface())
}
