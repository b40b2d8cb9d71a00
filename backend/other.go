//go:build !linux

package backend

import "fmt"

func openFile(s Spec) (Backend, error) {
	return nil, fmt.Errorf("backend: file backend %q: %w (linux only)", s.Path, ErrNotSupported)
}

func openBlock(s Spec) (Backend, error) {
	return nil, fmt.Errorf("backend: block backend %q: %w (linux only)", s.Path, ErrNotSupported)
}

// Ring is an asynchronous I/O context (Linux only).
type Ring struct{}

// NewRing fails: asynchronous I/O rings need Linux.
func NewRing(depth, notify int) (*Ring, error) {
	return nil, fmt.Errorf("backend: asynchronous I/O ring: %w (linux only)", ErrNotSupported)
}

func (g *Ring) InFlight() int                       { return 0 }
func (g *Ring) Fallbacks() uint64                   { return 0 }
func (g *Ring) Ready() bool                         { return false }
func (g *Ring) Reap() int                           { return 0 }
func (g *Ring) Flush() int                          { return 0 }
func (g *Ring) Pending() int                        { return 0 }
func (g *Ring) Close() error                        { return nil }
func (g *Ring) submit(e *Executor, r *Request) bool { return false }
