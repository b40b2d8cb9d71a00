package target_test

import (
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestConnectRacesRemovalAndDenial: admin Connects racing the removal of their subsystem,
// or the host's removal from its allow list, either are refused or leave a queue that the
// change then tears down; nothing panics. (connectAdmin looked the subsystem up a second
// time and used the answer unchecked, nil once the subsystem was gone, and joined it
// without checking the host's access again, after DenyHost's disconnects had run.)
func TestConnectRacesRemovalAndDenial(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	const nqn = "nqn.2024-01.io.gonvmf:race"
	cs := conf.Subsystem{NQN: nqn, Hosts: []string{hostNQN, otherNQN}, Namespaces: []conf.Namespace{memNS(1, 64<<10)}}
	refused, survived := 0, 0
	for i := range 300 {
		if err := e.tgt.AddSubsystem(cs); err != nil {
			t.Fatalf("iteration %d: %v", i, err)
		}
		h := e.dial(32)
		start, changed := make(chan struct{}), make(chan error, 1)
		remove := i%2 == 0
		go func() {
			<-start
			if remove {
				changed <- e.tgt.RemoveSubsystem(nqn)
			} else {
				changed <- e.tgt.SetAllowedHosts(nqn, false, []string{otherNQN})
			}
		}()
		close(start)
		// Start the Connect at a different point of the change each time.
		for t0 := time.Now(); time.Since(t0) < time.Duration(i%50)*4*time.Microsecond; {
		}
		c := h.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, nqn, hostNQN)
		if err := <-changed; err != nil {
			t.Fatalf("iteration %d: %v", i, err)
		}
		if c.Status.Success() {
			survived++
			select {
			case <-h.conn.Done():
			case <-time.After(2 * time.Second):
				what := "the host was denied"
				if remove {
					what = "its subsystem was removed"
				}
				t.Fatalf("iteration %d: an admin queue connected as %s is still there 2 s later", i, what)
			}
		} else {
			refused++
			expect(t, "connect racing the change", c, nvmeproto.StatusConnectInvalidParameters)
		}
		h.conn.Close()
		if !remove {
			if err := e.tgt.RemoveSubsystem(nqn); err != nil {
				t.Fatalf("iteration %d: %v", i, err)
			}
		}
	}
	t.Logf("%d Connects refused, %d connected and torn down", refused, survived)
}
