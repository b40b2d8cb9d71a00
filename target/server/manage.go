package server

import (
	"context"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
)

// The run-time operations of a Server. Each is one change of the target's running
// configuration, validated by the conf package against it and applied whole or not at
// all (see target.Target); the Server serializes them with one another and with Reload,
// so that a reload is never interleaved with another change. A control plane (the gRPC
// control API, SIGHUP) calls these rather than the Target's methods.

// AddSubsystem adds a subsystem with its namespaces (target.Target.AddSubsystem).
func (s *Server) AddSubsystem(cs conf.Subsystem) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.AddSubsystem(cs)
}

// RemoveSubsystem disconnects a subsystem's controllers and removes it
// (target.Target.RemoveSubsystem).
func (s *Server) RemoveSubsystem(nqn string) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.RemoveSubsystem(nqn)
}

// AddNamespace adds a namespace to a subsystem (target.Target.AddNamespace).
func (s *Server) AddNamespace(nqn string, ns conf.Namespace) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.AddNamespace(nqn, ns)
}

// RemoveNamespace removes a namespace once its commands in flight have finished
// (target.Target.RemoveNamespace).
func (s *Server) RemoveNamespace(nqn string, nsid uint32) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.RemoveNamespace(nqn, nsid)
}

// ResizeNamespace grows a namespace (target.Target.ResizeNamespace).
func (s *Server) ResizeNamespace(nqn string, nsid uint32, size conf.Size) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.ResizeNamespace(nqn, nsid, size)
}

// SetNamespaceReadOnly changes a namespace's write protection
// (target.Target.SetNamespaceReadOnly).
func (s *Server) SetNamespaceReadOnly(nqn string, nsid uint32, readOnly bool) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.SetNamespaceReadOnly(nqn, nsid, readOnly)
}

// SetNamespaceANAGroup moves a namespace to another ANA group
// (target.Target.SetNamespaceANAGroup). When the group serves no I/O on some listener, it
// returns once the I/O commands to the namespace that the subsystem's queues through those
// listeners admitted before the move have completed, as SetANAState does: bounded by ctx,
// after the move, out of the serialization of changes.
func (s *Server) SetNamespaceANAGroup(ctx context.Context, nqn string, nsid, group uint32) error {
	s.chg.Lock()
	f, err := s.t.MoveNamespaceANAGroup(nqn, nsid, group)
	s.chg.Unlock()
	if err != nil {
		return err
	}
	return f.Wait(ctx)
}

// SetAllowedHosts sets who may connect to a subsystem (target.Target.SetAllowedHosts).
func (s *Server) SetAllowedHosts(nqn string, allowAny bool, hosts []string) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.SetAllowedHosts(nqn, allowAny, hosts)
}

// AllowHost adds a host to a subsystem's allowed hosts (target.Target.AllowHost).
func (s *Server) AllowHost(nqn, host string) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.AllowHost(nqn, host)
}

// DenyHost takes a host off a subsystem's allowed hosts and disconnects its controllers
// there, returning once they are gone (target.Target.DenyHost).
func (s *Server) DenyHost(nqn, host string) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.DenyHost(nqn, host)
}

// SetHostKeys adds or changes a host's entry in the hosts section: its DH-HMAC-CHAP
// secrets, hash functions and DH groups (target.Target.SetHostKeys). New connections and
// re-authentications use it; authenticated connections keep working. The secrets are
// read (target.Target.ReadHostKeys, at most target.SecretReadTimeout) before the change
// is serialized with the others, so a secret file on a hung mount holds up no other
// change; the change then applies under the serialization (target.HostKeysRead.Apply),
// which reads the secrets again only if another change altered the entry meanwhile.
func (s *Server) SetHostKeys(hostNQN string, ch target.HostKeysChange) (created bool, err error) {
	r, err := readHostKeys(s.t, hostNQN, ch)
	if err != nil {
		return false, err
	}
	s.chg.Lock()
	defer s.chg.Unlock()
	return r.Apply()
}

// readHostKeys is target.Target.ReadHostKeys (tests replace it).
var readHostKeys = (*target.Target).ReadHostKeys

// RemoveHostKeys removes a host's entry from the hosts section
// (target.Target.RemoveHostKeys).
func (s *Server) RemoveHostKeys(hostNQN string) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.RemoveHostKeys(hostNQN)
}

// SetAuthRequired changes a subsystem's auth_required (target.Target.SetAuthRequired).
func (s *Server) SetAuthRequired(nqn string, required bool) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.SetAuthRequired(nqn, required)
}

// ReopenNamespace closes a namespace's backend and opens it again from the running
// configuration, which clears a failure (target.Target.ReopenNamespace).
func (s *Server) ReopenNamespace(nqn string, nsid uint32) error {
	s.chg.Lock()
	defer s.chg.Unlock()
	return s.t.ReopenNamespace(nqn, nsid)
}
