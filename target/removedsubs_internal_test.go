package target

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
)

// removedSubsCloseTimeout is the queue-close timeout of the targets of the removedSubs
// tests: how long a removal waits for a namespace a command still holds.
const removedSubsCloseTimeout = 50 * time.Millisecond

const removedSubsNQN = "nqn.2024-01.io.gonvmf:removed"

// removedSubsConfig is a subsystem with one memory namespace (its commands reach no store
// another target serves, but it stays on the removed lists all the same until its backend
// has closed).
func removedSubsConfig() conf.Subsystem {
	return conf.Subsystem{NQN: removedSubsNQN, AllowAnyHost: true,
		Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}}}
}

func newRemovedSubsTarget(t *testing.T) *Target {
	t.Helper()
	cfg := &conf.Config{Listeners: []conf.Listener{{Address: "10.99.0.1"}}, Subsystems: []conf.Subsystem{removedSubsConfig()}}
	tgt, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithQueueCloseTimeout(removedSubsCloseTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	return tgt
}

// holdNamespace takes a reference to namespace 1 of the subsystem registered under
// removedSubsNQN, as a command executing in its backend does: its close waits for it, and
// gives up after the close timeout with the backend open until the returned release.
func holdNamespace(t *testing.T, tgt *Target) (release func()) {
	t.Helper()
	s := tgt.subsystem(removedSubsNQN)
	if s == nil {
		t.Fatalf("no subsystem %s", removedSubsNQN)
	}
	ns := s.lookup(1)
	if ns == nil || !ns.acquire() {
		t.Fatalf("namespace 1 of %s cannot be held", removedSubsNQN)
	}
	var once sync.Once
	release = func() { once.Do(ns.release) }
	t.Cleanup(release) // before the target's Close, which waits for it
	return release
}

// removedSubsNow returns a copy of the target's removed subsystems.
func (t *Target) removedSubsNow() []*subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*subsystem(nil), t.removedSubs...)
}

// waitRemovedSubs waits until the target lists n removed subsystems, at most 5 s.
func waitRemovedSubs(t *testing.T, tgt *Target, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(tgt.removedSubsNow()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d removed subsystems listed after 5 s, want %d", what, len(tgt.removedSubsNow()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemovedSubsEmptyAfterReAdd: a subsystem removed with a command holding its
// namespace, added again and removed again with a command holding the new namespace, is
// listed twice among the removed subsystems (two with one NQN), each until its own
// namespace's backend has closed; then the list is empty.
func TestRemovedSubsEmptyAfterReAdd(t *testing.T) {
	tgt := newRemovedSubsTarget(t)
	first := tgt.subsystem(removedSubsNQN)
	releaseFirst := holdNamespace(t, tgt)
	if err := tgt.RemoveSubsystem(removedSubsNQN); err != nil {
		t.Fatalf("RemoveSubsystem, its namespace held: %v", err)
	}
	if rs := tgt.removedSubsNow(); len(rs) != 1 || rs[0] != first {
		t.Fatalf("%d removed subsystems after the removal, its namespace held; want the removed one", len(rs))
	}
	if err := tgt.AddSubsystem(removedSubsConfig()); err != nil {
		t.Fatalf("AddSubsystem again: %v", err)
	}
	second := tgt.subsystem(removedSubsNQN)
	releaseSecond := holdNamespace(t, tgt)
	if err := tgt.RemoveSubsystem(removedSubsNQN); err != nil {
		t.Fatalf("RemoveSubsystem again, its new namespace held: %v", err)
	}
	if rs := tgt.removedSubsNow(); len(rs) != 2 || rs[0] != first || rs[1] != second {
		t.Fatalf("%d removed subsystems after the second removal; want both with the NQN", len(rs))
	}

	releaseFirst()
	waitRemovedSubs(t, tgt, 1, "the first removed subsystem's namespace released")
	if rs := tgt.removedSubsNow(); rs[0] != second {
		t.Fatal("the first removed subsystem's namespace released: the second subsystem left the list, the first stayed")
	}
	releaseSecond()
	waitRemovedSubs(t, tgt, 0, "both removed subsystems' namespaces released")
}

// TestRemovedSubsEmptyAfterRemovedNamespace: a subsystem whose only namespace was removed
// before (RemoveNamespace gave up on a command holding it) is removed with nothing in its
// table; it stays among the removed subsystems until that namespace's backend has closed,
// then leaves.
func TestRemovedSubsEmptyAfterRemovedNamespace(t *testing.T) {
	tgt := newRemovedSubsTarget(t)
	release := holdNamespace(t, tgt)
	if err := tgt.RemoveNamespace(removedSubsNQN, 1); err != nil {
		t.Fatalf("RemoveNamespace(1), held: %v", err)
	}
	if err := tgt.RemoveSubsystem(removedSubsNQN); err != nil {
		t.Fatalf("RemoveSubsystem, no namespace left: %v", err)
	}
	if n := len(tgt.removedSubsNow()); n != 1 {
		t.Fatalf("%d removed subsystems, its removed namespace's backend still open; want 1", n)
	}
	release()
	waitRemovedSubs(t, tgt, 0, "the removed namespace released")
}

// TestRemovedSubsEmptyAfterConcurrentClose: Target.Close and RemoveSubsystem run at once,
// with a command holding the namespace and without; whichever closes the subsystem, the
// removed subsystems are none once the namespace's backend has closed. The runs at once
// rarely hit Close closing the subsystem between RemoveSubsystem's lookup and its unlink,
// which then lists a subsystem closed already, maybe with nothing left to close: the last
// runs make that order (the subsystem's close, as Close's, before RemoveSubsystem).
func TestRemovedSubsEmptyAfterConcurrentClose(t *testing.T) {
	for _, held := range []bool{false, true} {
		tgt := newRemovedSubsTarget(t)
		release := func() {}
		if held {
			release = holdNamespace(t, tgt)
		}
		s := tgt.subsystem(removedSubsNQN)
		err := s.close() // Close's close of it, after RemoveSubsystem found it
		if held != errors.Is(err, ErrNamespaceBusy) {
			t.Fatalf("the subsystem's close, namespace held %t: %v", held, err)
		}
		if err := tgt.RemoveSubsystem(removedSubsNQN); err != nil {
			t.Fatalf("RemoveSubsystem of the closed subsystem: %v", err)
		}
		tgt.Close()
		release()
		waitRemovedSubs(t, tgt, 0, fmt.Sprintf("closed before RemoveSubsystem's unlink, namespace held %t, released", held))
	}
	for i := range 20 {
		held := i%2 == 0
		tgt := newRemovedSubsTarget(t)
		release := func() {}
		if held {
			release = holdNamespace(t, tgt)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var removeErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			removeErr = tgt.RemoveSubsystem(removedSubsNQN)
		}()
		go func() {
			defer wg.Done()
			<-start
			if i%4 >= 2 {
				time.Sleep(time.Duration(i) * 100 * time.Microsecond)
			}
			tgt.Close()
		}()
		close(start)
		wg.Wait()
		if removeErr != nil && !errors.Is(removeErr, ErrClosed) && !errors.Is(removeErr, ErrNoSuchSubsystem) {
			t.Errorf("run %d: RemoveSubsystem during Close: %v", i, removeErr)
		}
		release()
		waitRemovedSubs(t, tgt, 0, "Close and RemoveSubsystem done, the namespace released")
	}
}
