package initiator_test

import (
	"testing"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
)

// cycle submits one request and waits for its Done, reusing everything.
type cycle struct {
	q    *initiator.IOQueue
	r    initiator.Request
	done chan struct{}
}

func newCycle(t testing.TB, c *initiator.Controller, op initiator.Op, n int) *cycle {
	buf, err := c.AllocBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	cy := &cycle{q: c.IOQueue(0), done: make(chan struct{}, 1)}
	cy.r = initiator.Request{Op: op, NSID: 1, Blocks: uint32(n / 512), Buf: buf, Done: func(*initiator.Request) { cy.done <- struct{}{} }}
	return cy
}

func (cy *cycle) run(t testing.TB) {
	if err := cy.q.Submit(&cy.r); err != nil {
		t.Fatal(err)
	}
	<-cy.done
	if cy.r.Err != nil {
		t.Fatal(cy.r.Err)
	}
}

// TestLoopIOAllocs: the asynchronous I/O path (initiator and target through the loop
// transport, null backend) allocates nothing per command in steady state.
func TestLoopIOAllocs(t *testing.T) {
	e := newEnv(t, func(c *conf.Config) { c.Subsystems[0].Namespaces[0].Backend = conf.BackendNull })
	c := e.dial(t, nil)
	for _, tc := range []struct {
		op initiator.Op
		n  int
	}{{initiator.OpRead, 4096}, {initiator.OpWrite, 4096}, {initiator.OpWrite, 64 << 10}} {
		cy := newCycle(t, c, tc.op, tc.n)
		for range 100 {
			cy.run(t) // warm up
		}
		if a := testing.AllocsPerRun(1000, func() { cy.run(t) }); a > 0.05 {
			t.Errorf("%v of %d bytes: %.2f allocations per command", tc.op, tc.n, a)
		}
	}
}

// BenchmarkLoopRead4K is one command at a time through initiator, loop and target.
func BenchmarkLoopRead4K(b *testing.B) {
	e := newEnv(b, func(c *conf.Config) { c.Subsystems[0].Namespaces[0].Backend = conf.BackendNull })
	c := e.dial(b, nil)
	cy := newCycle(b, c, initiator.OpRead, 4096)
	b.ReportAllocs()
	for b.Loop() {
		cy.run(b)
	}
}
