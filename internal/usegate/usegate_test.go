package usegate

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestGate(t *testing.T) {
	var g Gate
	if !g.Enter() || !g.Enter() || g.Users() != 2 || g.Closed() {
		t.Fatalf("open gate: users %d closed %v", g.Users(), g.Closed())
	}
	if g.Leave() {
		t.Error("Leave of an open gate reported it drained")
	}
	if first, drained := g.Close(); !first || drained {
		t.Errorf("Close with a user in: first %v drained %v, want true false", first, drained)
	}
	if g.Enter() {
		t.Error("Enter after Close admitted a user")
	}
	if first, drained := g.Close(); first || drained {
		t.Errorf("second Close: first %v drained %v, want false false", first, drained)
	}
	if !g.Leave() || g.Users() != 0 || !g.Closed() {
		t.Errorf("the last Leave after Close did not report the gate drained (users %d)", g.Users())
	}
	var idle Gate
	if first, drained := idle.Close(); !first || !drained {
		t.Errorf("Close with no user: first %v drained %v, want true true", first, drained)
	}
}

// TestGateDrainedOnce: with users entering and leaving while the gate closes, exactly one
// of Close and the Leaves reports it drained.
func TestGateDrainedOnce(t *testing.T) {
	for range 200 {
		var g Gate
		var reports atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for g.Enter() {
					if g.Leave() {
						reports.Add(1)
					}
				}
			}()
		}
		if _, drained := g.Close(); drained {
			reports.Add(1)
		}
		wg.Wait()
		if n := reports.Load(); n != 1 {
			t.Fatalf("the gate was reported drained %d times, want once", n)
		}
	}
}
