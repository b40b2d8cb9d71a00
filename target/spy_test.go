package target_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
)

// spy wraps a backend: it records every call, fails the test process's invariant if a
// request ever reaches outside the namespace, and can hold requests at a gate.
type spy struct {
	backend.Backend
	gate      *gate
	workers   int // 0: keep the inner backend's execution model
	flushes   atomic.Int64
	writes    atomic.Int64
	fuaWrites atomic.Int64
	violation atomic.Pointer[string]
}

func (s *spy) check(op string, slba, nlb uint64) {
	n := s.Backend.NumBlocks()
	if nlb > n || slba > n-nlb {
		msg := fmt.Sprintf("%s of %d blocks at %d outside a namespace of %d blocks", op, nlb, slba, n)
		s.violation.CompareAndSwap(nil, &msg)
	}
	if s.gate != nil {
		s.gate.pass()
	}
}

func (s *spy) ReadBlocks(buf []byte, slba uint64) error {
	s.check("read", slba, uint64(len(buf))/uint64(s.LBASize()))
	return s.Backend.ReadBlocks(buf, slba)
}

func (s *spy) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	s.writes.Add(1)
	if fua {
		s.fuaWrites.Add(1)
	}
	s.check("write", slba, uint64(len(buf))/uint64(s.LBASize()))
	return s.Backend.WriteBlocks(buf, slba, fua)
}

func (s *spy) WriteZeroes(slba, nlb uint64) error {
	s.writes.Add(1)
	s.check("write zeroes", slba, nlb)
	return s.Backend.WriteZeroes(slba, nlb)
}

func (s *spy) Deallocate(slba, nlb uint64) error {
	s.writes.Add(1)
	s.check("deallocate", slba, nlb)
	return s.Backend.Deallocate(slba, nlb)
}

func (s *spy) Flush() error {
	s.flushes.Add(1)
	return s.Backend.Flush()
}

func (s *spy) Info() backend.Info {
	i := backend.Describe(s.Backend)
	if s.workers > 0 {
		i.Inline, i.Workers = false, s.workers
	}
	return i
}

// spies collects the spies a target opened, by namespace size order of opening.
type spies struct {
	mu   sync.Mutex
	list []*spy
}

func (ss *spies) get(i int) *spy {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.list[i]
}

func (ss *spies) violations() []string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var out []string
	for _, s := range ss.list {
		if v := s.violation.Load(); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

// spyBackends opens backends normally and wraps each in a spy.
func spyBackends(ss *spies, g *gate, workers int) target.Option {
	return target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(spec)
		if err != nil {
			return nil, err
		}
		s := &spy{Backend: b, gate: g, workers: workers}
		ss.mu.Lock()
		ss.list = append(ss.list, s)
		ss.mu.Unlock()
		return s, nil
	})
}

// gatedBackend makes every backend call wait at g, on worker goroutines.
func gatedBackend(g *gate) target.Option { return spyBackends(&spies{}, g, 8) }

// gatedNamespace makes the reads and writes of the namespaces of the given size wait at
// g, on worker goroutines; the other namespaces' backends work as usual.
func gatedNamespace(g *gate, size conf.Size) target.Option {
	return target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(spec)
		if err != nil {
			return nil, err
		}
		s := &spy{Backend: b, workers: 8}
		if spec.Size == uint64(size) {
			s.gate = g
		}
		return s, nil
	})
}

// gate blocks backend calls until opened.
type gate struct {
	ch      chan struct{}
	once    sync.Once
	blocked atomic.Int64
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) pass() {
	g.blocked.Add(1)
	<-g.ch
	g.blocked.Add(-1)
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) waitBlocked(t testing.TB, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for g.blocked.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d backend calls blocked, want %d", g.blocked.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
