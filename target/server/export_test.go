package server

import "github.com/gonvmf/gonvmf/target"

// OverlapsListener exports overlapsListener to the package's external tests.
var OverlapsListener = overlapsListener

// SetReadHostKeys replaces the read of SetHostKeys's secrets, which happens before the
// change is serialized with the others, until the returned function runs.
func SetReadHostKeys(f func(t *target.Target, hostNQN string, ch target.HostKeysChange) (*target.HostKeysRead, error)) (restore func()) {
	old := readHostKeys
	readHostKeys = f
	return func() { readHostKeys = old }
}

// SetRemoveSubsystem replaces a reload's removal of a subsystem until the returned
// function runs.
func SetRemoveSubsystem(f func(t *target.Target, nqn string) error) (restore func()) {
	old := removeSubsystem
	removeSubsystem = f
	return func() { removeSubsystem = old }
}

// IsStopping reports whether Shutdown (or Close) has begun.
func (s *Server) IsStopping() bool { return s.isStopping() }
