package initiator

import (
	"testing"
	"time"
)

// TestAwaitReauthStaleRequest: a command failed with Authentication Required whose
// request left the slot's retryReq before awaitReauth ran (its caller's context ended,
// retryDue ended it, and the slot now holds another request waiting for its own retry
// delay) waits for nothing: no re-authentication starts, and the slot is not marked as
// waiting for one (which would let that re-authentication arm the other request's
// timer with the stale delay).
func TestAwaitReauthStaleRequest(t *testing.T) {
	c := dialLoop(t, loopDialer(t), nil)
	q := c.io[0]
	s := &q.slots[<-q.free] // kept from submitters for the test
	stale, other := &Request{Op: OpFlush}, &Request{Op: OpFlush}
	s.req = other
	s.wait(other)
	defer func() {
		s.take()
		s.req = nil
		q.free <- s.idx
	}()
	c.awaitReauth(s, stale, time.Hour, 0, stale.opName())
	c.reauthMu.Lock()
	gen, waiters := c.reauthGen, len(c.reauthWaiters)
	c.reauthMu.Unlock()
	if gen != 0 || waiters != 0 || s.authWait.Load() != 0 {
		t.Errorf("awaitReauth for a request no longer in the slot: %d re-authentications started, %d waiters, slot waits for %d; want none",
			gen, waiters, s.authWait.Load())
	}
}
