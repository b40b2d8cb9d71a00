package flight

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestStartJoinsRunningCall: a Start for a key whose call runs joins it (the work runs
// once; Running returns it until it has returned, nil after), Wait bounded by its
// context gives up while the call goes on and counts as a waiter meanwhile, and once the
// call has returned the next Start runs the work again.
func TestStartJoinsRunningCall(t *testing.T) {
	var g Group[int]
	release := make(chan struct{})
	runs := 0
	work := func() (int, error) {
		runs++ // only one call for the key runs at a time
		<-release
		return runs, errors.New("done")
	}
	c := g.Start("k", work)
	if again := g.Start("k", work); again != c {
		t.Fatal("a Start for a key whose call runs started another")
	}
	if r := g.Running("k"); r != c {
		t.Fatalf("Running = %p while the call %p runs", r, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if g.Wait(ctx, c) {
		t.Fatal("Wait reported a held call returned")
	}
	waiting := make(chan bool)
	go func() { waiting <- g.Wait(context.Background(), c) }()
	deadline := time.Now().Add(10 * time.Second)
	for g.Waiting("k") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Waiting %d after 10 s, want the one Wait", g.Waiting("k"))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if !<-waiting {
		t.Fatal("Wait without a deadline reported the call not returned")
	}
	if v, err := c.Result(); v != 1 || err == nil {
		t.Errorf("Result %d, %v; want 1 and the work's error", v, err)
	}
	if g.Waiting("k") != 0 {
		t.Errorf("Waiting %d after the call returned, want 0", g.Waiting("k"))
	}
	if r := g.Running("k"); r != nil {
		t.Errorf("Running = %p after the call returned, want nil", r)
	}
	next := g.Start("k", func() (int, error) { return 2, nil })
	if next == c {
		t.Fatal("a Start after the call returned joined the returned one")
	}
	<-next.Done()
	if v, _ := next.Result(); v != 2 {
		t.Errorf("the next call's Result %d, want 2", v)
	}
}
