// Package flight runs one call per key at a time, for work that may never return (a
// file's read on a hung mount): a Start for a key whose call is still running joins that
// call instead of running the work again. Each call runs on a goroutine of its own until
// its function returns, whoever still waits for it, so a key whose work hangs holds one
// goroutine (and the thread blocked in it) however often it is asked for meanwhile;
// callers bound their own waits (Call.Done, Group.Wait). A call that has returned is
// forgotten: the next Start for its key runs the work again.
package flight

import (
	"context"
	"sync"
)

// Group is a set of calls by key. The zero value is ready to use.
type Group[T any] struct {
	mu sync.Mutex
	m  map[string]*Call[T] // the calls running, by key
}

// Call is one run of a Group's work for a key.
type Call[T any] struct {
	done    chan struct{}
	val     T
	err     error // val and err are set before done closes
	waiters int   // Group.Wait calls waiting for it (under Group.mu)
}

// Start returns the call running for key, or runs fn as that call on a goroutine of its
// own.
func (g *Group[T]) Start(key string, fn func() (T, error)) *Call[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.m[key]; c != nil {
		return c
	}
	c := &Call[T]{done: make(chan struct{})}
	if g.m == nil {
		g.m = map[string]*Call[T]{}
	}
	g.m[key] = c
	go func() {
		c.val, c.err = fn()
		g.mu.Lock()
		delete(g.m, key)
		g.mu.Unlock()
		close(c.done)
	}()
	return c
}

// Running returns the call running for key, or nil when none runs.
func (g *Group[T]) Running(key string) *Call[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key]
}

// Done is closed once the call's function has returned.
func (c *Call[T]) Done() <-chan struct{} { return c.done }

// Result is what the call's function returned; only after Done is closed.
func (c *Call[T]) Result() (T, error) { return c.val, c.err }

// Wait waits until c, a call of g, has returned or ctx is done, and reports whether c
// has returned. While it waits it counts among c's waiters (Waiting).
func (g *Group[T]) Wait(ctx context.Context, c *Call[T]) bool {
	g.mu.Lock()
	c.waiters++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		c.waiters--
		g.mu.Unlock()
	}()
	select {
	case <-c.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Waiting is the number of Wait calls waiting for key's running call (0 when none runs).
func (g *Group[T]) Waiting(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.m[key]; c != nil {
		return c.waiters
	}
	return 0
}
