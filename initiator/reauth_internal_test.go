package initiator

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
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

// pauseHandler logs to next; the first record whose message starts with prefix makes its
// caller signal paused and wait until resume is closed.
type pauseHandler struct {
	next slog.Handler
	*pausePoint
}

type pausePoint struct {
	prefix string
	once   atomic.Bool
	paused chan struct{}
	resume chan struct{}
}

func (h pauseHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h pauseHandler) Handle(ctx context.Context, rec slog.Record) error {
	if strings.HasPrefix(rec.Message, h.prefix) && h.once.CompareAndSwap(false, true) {
		close(h.paused)
		<-h.resume
	}
	if !h.next.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.next.Handle(ctx, rec)
}

func (h pauseHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return pauseHandler{h.next.WithAttrs(as), h.pausePoint}
}

func (h pauseHandler) WithGroup(name string) slog.Handler {
	return pauseHandler{h.next.WithGroup(name), h.pausePoint}
}

// TestReauthFailureEndsOnlyItsWaiters: a failed re-authentication ends the commands that
// still wait for it, and no other. Re-authentication 1 fails (the host has no secret)
// with two waiters, r and then r2. After it took its waiters and before it ends them,
// r leaves its wait (retryDue took it: a kick meant for an earlier command of the slot),
// is sent again, meets Authentication Required again and waits, the same *Request in the
// same slot, for re-authentication 2. Re-authentication 1 ends r2 and leaves r waiting
// for 2, which then ends it with its own failure.
func TestReauthFailureEndsOnlyItsWaiters(t *testing.T) {
	pp := &pausePoint{prefix: "re-authentication failed", paused: make(chan struct{}), resume: make(chan struct{})}
	c := dialLoop(t, loopDialer(t), func(o *Options) {
		o.Logger = slog.New(pauseHandler{testutil.Logger(t).Handler(), pp})
	})
	defer func() {
		select {
		case <-pp.resume:
		default:
			close(pp.resume)
		}
	}()
	q := c.io[0]
	// busy gives r a slot as if its attempt had been answered Authentication Required.
	busy := func(r *Request) *slot {
		s := &q.slots[<-q.free]
		s.req, r.slot = r, s
		s.cqe = nvmeproto.Completion{Status: nvmeproto.StatusAuthRequired}
		s.gotResp = true
		s.state.Store(slotBusy)
		return s
	}
	// waitAuth is what retry does with an attempt answered Authentication Required.
	waitAuth := func(s *slot, r *Request) {
		s.wait(r)
		c.awaitReauth(s, r, time.Hour, 0, r.opName())
	}
	done := func(ch chan error, what string) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not ended 10 s after its re-authentication failed", what)
			return nil
		}
	}
	rDone, r2Done := make(chan error, 1), make(chan error, 1)
	r := &Request{Op: OpFlush, Done: func(r *Request) { rDone <- r.Err }}
	r2 := &Request{Op: OpFlush, Done: func(r *Request) { r2Done <- r.Err }}
	s, s2 := busy(r), busy(r2)

	c.authMu.Lock() // re-authentication 1 waits for it: r and r2 both wait for 1
	waitAuth(s, r)
	waitAuth(s2, r2)
	c.authMu.Unlock()
	<-pp.paused // 1 failed and took its waiters, and logs its failure before ending them

	c.authMu.Lock() // re-authentication 2 waits for it
	unlock := sync.OnceFunc(c.authMu.Unlock)
	defer unlock()
	if got := s.take(); got != r {
		t.Fatalf("slot holds %p, want r (%p) waiting for re-authentication 1", got, r)
	}
	s.authWait.Store(0) // as retryDue, which then sends r again
	waitAuth(s, r)
	if got := s.authWait.Load(); got != 2 {
		t.Fatalf("r, answered Authentication Required again, waits for re-authentication %d, want 2", got)
	}
	close(pp.resume)
	if err := done(r2Done, "r2"); !errors.Is(err, ErrAuthFailed) {
		t.Errorf("r2, which waited for the failed re-authentication 1: %v, want it ended with ErrAuthFailed", err)
	}
	// Re-authentication 1 ends its waiters in order: it is done with r.
	if got, gen := s.retryReq.Load(), s.authWait.Load(); got != r || gen != 2 {
		t.Errorf("after re-authentication 1 failed: slot holds %p waiting for re-authentication %d, want r (%p) still waiting for 2", got, gen, r)
	}
	unlock()
	if err := done(rDone, "r"); !errors.Is(err, ErrAuthFailed) {
		t.Errorf("r, which waited for the failed re-authentication 2: %v, want it ended with ErrAuthFailed", err)
	}
}
