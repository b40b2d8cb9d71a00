// Package usegate counts the users of something that closes: Enter admits a user until
// Close, and the caller learns exactly once — from Close or from the last Leave — that the
// gate is closed with no user left, to free or signal what the users held.
package usegate

import "sync/atomic"

// closedBit marks a closed gate; the bits below it count the users.
const closedBit = 1 << 62

// Gate is a count of users and a closed flag in one word. The zero value is open with no
// users; it must not be copied after first use.
type Gate struct {
	state atomic.Int64
}

// Enter admits a user; false once the gate is closed.
func (g *Gate) Enter() bool {
	for {
		s := g.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if g.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// Leave ends a user admitted by Enter. It reports whether it was the last one of a closed
// gate: the gate has drained, and this call is the one to act on it.
func (g *Gate) Leave() (drained bool) { return g.state.Add(-1) == closedBit }

// Close refuses new users. first reports whether this call closed the gate; drained
// whether no user was in (then Close is the one call to act on the drained gate, and no
// Leave will report it).
func (g *Gate) Close() (first, drained bool) {
	old := g.state.Or(closedBit)
	return old&closedBit == 0, old == 0
}

// Closed reports whether Close has run.
func (g *Gate) Closed() bool { return g.state.Load()&closedBit != 0 }

// Users returns the number of users in.
func (g *Gate) Users() int { return int(g.state.Load() &^ closedBit) }
