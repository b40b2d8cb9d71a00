package target_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
)

// heldCloseTimeout is the queue-close timeout of the heldCloses tests: long enough that
// no close gives up during a test, so a namespace's close ends only when the test lets
// its backend's Close return.
const heldCloseTimeout = time.Hour

// heldCloses opens backends whose Close reports its namespace on entered, then waits
// until the test releases that namespace, closes the backend, reports the namespace on
// returned and fails with an error naming the namespace. A namespace of nsid has size
// nsid MiB: that is how its backend knows it.
type heldCloses struct {
	n        int
	entered  chan uint32
	returned chan uint32
	gates    map[uint32]chan struct{}
	once     map[uint32]*sync.Once
}

// newHeldCloses returns heldCloses for namespaces 1 to n, and their configurations. The
// caller defers releaseAll: its target's Close, or a close it left waiting, may need it.
func newHeldCloses(n int) (*heldCloses, []conf.Namespace) {
	h := &heldCloses{n: n, entered: make(chan uint32, n), returned: make(chan uint32, n),
		gates: map[uint32]chan struct{}{}, once: map[uint32]*sync.Once{}}
	var nss []conf.Namespace
	for nsid := uint32(1); nsid <= uint32(n); nsid++ {
		h.gates[nsid] = make(chan struct{})
		h.once[nsid] = new(sync.Once)
		nss = append(nss, memNS(nsid, conf.Size(nsid)<<20))
	}
	return h, nss
}

func (h *heldCloses) open(spec backend.Spec) (backend.Backend, error) {
	b, err := backend.Open(spec)
	if err != nil {
		return nil, err
	}
	nsid := uint32(spec.Size >> 20)
	return &heldCloseBackend{Backend: b, h: h, nsid: nsid}, nil
}

// release lets the Close of namespace nsid's backend return.
func (h *heldCloses) release(nsid uint32) { h.once[nsid].Do(func() { close(h.gates[nsid]) }) }

// releaseInReverse lets the backends of namespaces n to 1 return from Close, each once the
// one before has: last to first.
func (h *heldCloses) releaseInReverse(t *testing.T) {
	t.Helper()
	for nsid := uint32(h.n); nsid >= 1; nsid-- {
		h.release(nsid)
		if got := <-h.returned; got != nsid {
			t.Fatalf("namespace %d's backend returned from Close, only namespace %d's was let go", got, nsid)
		}
	}
}

func (h *heldCloses) releaseAll() {
	for nsid := range h.gates {
		h.release(nsid)
	}
}

// waitEntered waits until the backends of all n namespaces are in Close at once (none
// returns before the test releases it), at most 5 s.
func (h *heldCloses) waitEntered(t *testing.T, what string) {
	t.Helper()
	var in []uint32
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for len(in) < h.n {
		select {
		case nsid := <-h.entered:
			in = append(in, nsid)
		case <-deadline.C:
			t.Fatalf("%s: after 5 s only the backends of namespaces %v are closing, want all %d closing at once (a close waits for the one before?)",
				what, in, h.n)
		}
	}
}

// closeHeld runs closeAll, which closes every namespace: it waits until all n backends are
// in Close at once, checks that closeAll has not returned, lets them return last to first,
// and checks that closeAll's error names each namespace's close error in namespace order.
// It returns that error.
func (h *heldCloses) closeHeld(t *testing.T, what string, closeAll func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- closeAll() }()
	h.waitEntered(t, what)
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) with every namespace's backend still closing", what, err)
	default:
	}
	h.releaseInReverse(t)
	err := <-done
	if err == nil {
		t.Fatalf("%s, every backend failing to close: no error", what)
	}
	msg := err.Error()
	at := -1
	for nsid := 1; nsid <= h.n; nsid++ {
		i := strings.Index(msg, fmt.Sprintf("injected: namespace %d's backend", nsid))
		if i < 0 || i < at {
			t.Fatalf("%s: %v; want the close errors of namespaces 1 to %d in namespace order", what, err, h.n)
		}
		at = i
	}
	return err
}

// heldCloseBackend is a backend of a heldCloses.
type heldCloseBackend struct {
	backend.Backend
	h    *heldCloses
	nsid uint32
}

func (b *heldCloseBackend) Close() error {
	b.h.entered <- b.nsid
	<-b.h.gates[b.nsid]
	b.Backend.Close()
	b.h.returned <- b.nsid
	return fmt.Errorf("injected: namespace %d's backend failed to close", b.nsid)
}

// TestRemoveSubsystemClosesNamespacesAtOnce: RemoveSubsystem closes a subsystem's
// namespaces at once, so it waits about one queue-close timeout however many have a
// backend that does not close: the backends of all 8 namespaces are in Close together, each
// held by the test (the close timeout, an hour, never ends one), and RemoveSubsystem
// returns only once they are let go. Released last to first, the close errors still come
// in namespace order, joined in an error wrapping ErrRemovedUnclean. The old code closed
// one namespace after the other: namespace 2's close began only after namespace 1's
// returned — after its backend's Close or the timeout — 8 timeouts for 8 stuck namespaces.
func TestRemoveSubsystemClosesNamespacesAtOnce(t *testing.T) {
	const n = 8
	h, nss := newHeldCloses(n)
	defer h.releaseAll()
	e := newEnv(t, baseConfig(nss...), target.WithBackendOpener(h.open), target.WithQueueCloseTimeout(heldCloseTimeout))
	err := h.closeHeld(t, "RemoveSubsystem", func() error { return e.tgt.RemoveSubsystem(subNQN) })
	if !errors.Is(err, target.ErrRemovedUnclean) || !strings.Contains(err.Error(), subNQN) {
		t.Fatalf("RemoveSubsystem, every backend failing to close: %v; want ErrRemovedUnclean naming %s", err, subNQN)
	}
}

// TestCloseClosesSubsystemsAtOnce: Target.Close closes every subsystem's namespaces at
// once, so it waits about one queue-close timeout however many subsystems have a backend
// that does not close: the backends of two subsystems' 4 namespaces each are in Close
// together, each held by the test (the close timeout, an hour, never ends one), and Close
// returns only once they are let go. Released last to first, the close errors still come
// in the subsystems' order, each's in namespace order. The old code closed one subsystem
// after the other: the second's namespaces began closing only after the first's had
// closed or timed out.
func TestCloseClosesSubsystemsAtOnce(t *testing.T) {
	const n = 8
	h, nss := newHeldCloses(n)
	defer h.releaseAll()
	cfg := baseConfig(nss[:n/2]...)
	cfg.Subsystems = append(cfg.Subsystems, conf.Subsystem{NQN: "nqn.2024-01.io.gonvmf:two", AllowAnyHost: true, Namespaces: nss[n/2:]})
	e := newEnv(t, cfg, target.WithBackendOpener(h.open), target.WithQueueCloseTimeout(heldCloseTimeout))
	h.closeHeld(t, "Close", e.tgt.Close)
}

// closeStillWaiting is how long a test lets Target.Close run before it takes Close's not
// having returned for waiting: Close with nothing to wait for returns in far less. It only
// bounds how long a test looks for a Close that returns too early; no outcome of a correct
// Close depends on it.
const closeStillWaiting = 200 * time.Millisecond

// removals are the removals whose closes Target.Close waits for: of the subsystem, and of
// its namespace 1 (under the configuration lock, which Close does not take).
var removals = []struct {
	name   string
	remove func(*target.Target) error
}{
	{"RemoveSubsystem", func(tgt *target.Target) error { return tgt.RemoveSubsystem(subNQN) }},
	{"RemoveNamespace", func(tgt *target.Target) error { return tgt.RemoveNamespace(subNQN, 1) }},
}

// TestCloseWaitsForRemovalsClose: Target.Close, called while a removal is closing a
// namespace whose backend's Close the test holds (the close timeout, an hour, never ends
// it), does not return while it is held, returns only after that backend's Close has
// returned, and does not report the backend's close error, which the removal does. The old
// code's Close returned at once — the namespace was off every table it closed — and then
// closed the reservation state file while the backend was still closing.
func TestCloseWaitsForRemovalsClose(t *testing.T) {
	for _, r := range removals {
		t.Run(r.name, func(t *testing.T) {
			h, nss := newHeldCloses(1)
			defer h.releaseAll()
			e := newEnv(t, baseConfig(nss...), target.WithBackendOpener(h.open), target.WithQueueCloseTimeout(heldCloseTimeout))
			removed := make(chan error, 1)
			go func() { removed <- r.remove(e.tgt) }()
			h.waitEntered(t, r.name)
			closed := make(chan error, 1)
			go func() { closed <- e.tgt.Close() }()
			select {
			case err := <-closed:
				t.Fatalf("Close returned (%v) while the backend of the namespace %s is closing was still in its Close", err, r.name)
			case <-time.After(closeStillWaiting):
			}
			h.release(1)
			err := <-closed
			select {
			case <-h.returned:
			default:
				t.Fatalf("Close returned (%v) before the backend of the namespace %s closes returned from its Close", err, r.name)
			}
			if err != nil {
				t.Errorf("Close, the backend %s closed failing: %v; want nil (the removal reports it)", r.name, err)
			}
			if err := <-removed; r.name == "RemoveSubsystem" && !errors.Is(err, target.ErrRemovedUnclean) {
				t.Errorf("%s, its backend failing to close: %v; want ErrRemovedUnclean", r.name, err)
			}
		})
	}
}

// TestCloseGivesUpOnRemovalsClose: Target.Close, called while a removal's close of a
// namespace is held in its backend's Close past the close timeout (shortened here), gives
// up on it as on its own namespaces: it returns with the backend still in Close, and an
// error wrapping ErrNamespaceBusy that names the namespace. The old code's Close returned
// nil at once: it did not look at the removed namespace at all.
func TestCloseGivesUpOnRemovalsClose(t *testing.T) {
	for _, r := range removals {
		t.Run(r.name, func(t *testing.T) {
			h, nss := newHeldCloses(1)
			defer h.releaseAll()
			e := newEnv(t, baseConfig(nss...), target.WithBackendOpener(h.open), target.WithQueueCloseTimeout(20*time.Millisecond))
			removed := make(chan error, 1)
			go func() { removed <- r.remove(e.tgt) }()
			h.waitEntered(t, r.name)
			err := e.tgt.Close()
			if !errors.Is(err, target.ErrNamespaceBusy) || !strings.Contains(err.Error(), fmt.Sprintf("namespace 1 of %q", subNQN)) {
				t.Errorf("Close, the backend of the namespace %s closes held past the close timeout: %v; want ErrNamespaceBusy naming namespace 1 of %s", r.name, err, subNQN)
			}
			select {
			case <-h.returned:
				t.Fatal("the held backend returned from Close before the test let it go")
			default:
			}
			h.release(1)
			if err := <-removed; err != nil && !errors.Is(err, target.ErrRemovedUnclean) {
				t.Errorf("%s: %v", r.name, err)
			}
		})
	}
}

// TestCloseOwnAndRemovedAtOnce: Target.Close closes a subsystem's own namespaces and, at
// the same time, waits for the close a removal began, and reports each namespace it gives
// up on once. Namespace 2's removal gave up on its backend, held in Close (RemoveNamespace
// returned after the close timeout, shortened to 400ms here); namespace 1 is still the
// subsystem's, and its backend is held in Close too. Close gives up on both after one
// close timeout: it returns after at least 400ms and before 800ms, both backends still
// held, with an error wrapping ErrNamespaceBusy that names namespace 1 once and namespace
// 2 once. Closing its own namespaces before waiting for the removed ones would take two
// timeouts, 800ms or more whatever the machine's speed; waiting for its own namespaces as
// for removed ones too would name namespace 1 twice.
func TestCloseOwnAndRemovedAtOnce(t *testing.T) {
	const timeout = 400 * time.Millisecond
	h, nss := newHeldCloses(2)
	defer h.releaseAll()
	e := newEnv(t, baseConfig(nss...), target.WithBackendOpener(h.open), target.WithQueueCloseTimeout(timeout))
	if err := e.tgt.RemoveNamespace(subNQN, 2); err != nil {
		t.Fatalf("RemoveNamespace(2), its backend held in Close past the close timeout: %v; want nil (removed all the same)", err)
	}
	select {
	case nsid := <-h.entered:
		if nsid != 2 {
			t.Fatalf("namespace %d's backend is closing, only namespace 2 was removed", nsid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("namespace 2's backend is not in Close 5 s after its removal returned")
	}

	start := time.Now()
	err := e.tgt.Close()
	elapsed := time.Since(start)
	select {
	case nsid := <-h.returned:
		t.Fatalf("namespace %d's backend returned from Close before the test let it go", nsid)
	default:
	}
	if !errors.Is(err, target.ErrNamespaceBusy) {
		t.Fatalf("Close, namespace 1's backend and removed namespace 2's held in Close: %v; want ErrNamespaceBusy", err)
	}
	for nsid := 1; nsid <= 2; nsid++ {
		if n := strings.Count(err.Error(), fmt.Sprintf("namespace %d of %q", nsid, subNQN)); n != 1 {
			t.Errorf("Close: %v; names namespace %d %d times, want once", err, nsid, n)
		}
	}
	if elapsed < timeout || elapsed >= 2*timeout {
		t.Errorf("Close gave up on its own namespace 1 and removed namespace 2 after %v; want one close timeout of %v for both (less than %v)",
			elapsed, timeout, 2*timeout)
	}
}
