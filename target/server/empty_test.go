package server_test

import (
	"testing"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
)

// TestNothingServed: a server starts with no subsystems, and once the last one is removed
// every kind of change still works and the running configuration still saves to a file
// that loads (each change validates the whole running configuration, which once had to
// have a subsystem: after `ctl subsystem rm` of the last one, host keys and listeners
// could no longer be changed).
func TestNothingServed(t *testing.T) {
	cfg := config("10.99.0.1", 0)
	cfg.Subsystems = nil
	s := loopServer(t, cfg)
	const host = "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"
	if err := s.AddSubsystem(conf.Subsystem{NQN: twoNQN, AllowAnyHost: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveSubsystem(twoNQN); err != nil {
		t.Fatal(err)
	}
	secret := "DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7/:"
	if _, err := s.SetHostKeys(host, target.HostKeysChange{DHCHAPSecret: &secret}); err != nil {
		t.Errorf("setting a host's keys with no subsystem: %v", err)
	}
	if err := s.RemoveHostKeys(host); err != nil {
		t.Errorf("removing a host's keys with no subsystem: %v", err)
	}
	if err := s.AddSubsystem(conf.Subsystem{NQN: twoNQN, AllowAnyHost: true}); err != nil {
		t.Errorf("adding a subsystem again: %v", err)
	}
	if err := s.RemoveSubsystem(twoNQN); err != nil {
		t.Fatal(err)
	}
	saved := s.Config().String()
	if c, err := conf.Parse([]byte(saved), "saved.yaml"); err != nil || len(c.Subsystems) != 0 {
		t.Errorf("the running configuration saved with no subsystem: %v\n%s", err, saved)
	}
}
