package control

import (
	"fmt"
	"slices"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
)

// NamespaceFromPB converts an API namespace to a configuration one; empty identifiers
// stay zero (derived when the namespace is added). Errors name the field.
func NamespaceFromPB(n *pb.Namespace) (conf.Namespace, error) {
	if n == nil {
		return conf.Namespace{}, fmt.Errorf("namespace: missing")
	}
	ns := conf.Namespace{NSID: n.Nsid, Backend: n.Backend, Path: n.Path, Size: conf.Size(n.Size), LBASize: n.LbaSize, ReadOnly: n.ReadOnly,
		ANAGroup: n.AnaGroup, Shared: n.Shared}
	if r := n.Rbd; r != nil {
		ns.RBD = conf.RBD{Pool: r.Pool, RadosNamespace: r.RadosNamespace, Image: r.Image, CephConf: r.CephConf,
			User: r.User, Keyring: r.Keyring, CreateSize: conf.Size(r.CreateSize)}
	}
	var err error
	if n.Uuid != "" {
		if ns.UUID, err = conf.ParseUUID(n.Uuid); err != nil {
			return ns, fmt.Errorf("namespace %d: uuid %q: %w", n.Nsid, n.Uuid, err)
		}
	}
	if n.Nguid != "" {
		if ns.NGUID, err = conf.ParseNGUID(n.Nguid); err != nil {
			return ns, fmt.Errorf("namespace %d: nguid %q: %w", n.Nsid, n.Nguid, err)
		}
	}
	if n.Eui64 != "" {
		if ns.EUI64, err = conf.ParseEUI64(n.Eui64); err != nil {
			return ns, fmt.Errorf("namespace %d: eui64 %q: %w", n.Nsid, n.Eui64, err)
		}
	}
	return ns, nil
}

// NamespaceToPB converts a configuration namespace to the API's.
func NamespaceToPB(subsystem string, ns conf.Namespace) *pb.Namespace {
	n := &pb.Namespace{
		Subsystem: subsystem, Nsid: ns.NSID, Backend: ns.Backend, Path: ns.Path, Size: uint64(ns.Size),
		LbaSize: ns.LBASize, ReadOnly: ns.ReadOnly,
		Uuid: conf.FormatUUID(ns.UUID), Nguid: conf.FormatNGUID(ns.NGUID), Eui64: conf.FormatEUI64(ns.EUI64),
		AnaGroup: ns.ANAGroup, Shared: ns.Shared,
	}
	if r := ns.RBD; r != (conf.RBD{}) {
		n.Rbd = &pb.RBD{Pool: r.Pool, RadosNamespace: r.RadosNamespace, Image: r.Image, CephConf: r.CephConf,
			User: r.User, Keyring: r.Keyring, CreateSize: uint64(r.CreateSize)}
	}
	return n
}

// SubsystemFromPB converts an API subsystem (with its namespaces) to a configuration one.
func SubsystemFromPB(s *pb.Subsystem) (conf.Subsystem, error) {
	if s == nil {
		return conf.Subsystem{}, fmt.Errorf("subsystem: missing")
	}
	if s.CntlidMin > conf.MaxCNTLID || s.CntlidMax > conf.MaxCNTLID {
		return conf.Subsystem{}, fmt.Errorf("subsystem %q: cntlid_min %d, cntlid_max %d: controller IDs are 1..%d", s.Nqn, s.CntlidMin, s.CntlidMax, conf.MaxCNTLID)
	}
	cs := conf.Subsystem{NQN: s.Nqn, Serial: s.Serial, Model: s.Model, AllowAnyHost: s.AllowAnyHost, Hosts: slices.Clone(s.Hosts),
		AuthRequired: s.AuthRequired, CNTLIDMin: uint16(s.CntlidMin), CNTLIDMax: uint16(s.CntlidMax)}
	for _, n := range s.Namespaces {
		ns, err := NamespaceFromPB(n)
		if err != nil {
			return cs, fmt.Errorf("subsystem %q: %w", s.Nqn, err)
		}
		cs.Namespaces = append(cs.Namespaces, ns)
	}
	return cs, nil
}

// SubsystemToPB converts a configuration subsystem to the API's.
func SubsystemToPB(cs conf.Subsystem) *pb.Subsystem {
	s := &pb.Subsystem{Nqn: cs.NQN, Serial: cs.Serial, Model: cs.Model, AllowAnyHost: cs.AllowAnyHost, Hosts: slices.Clone(cs.Hosts),
		AuthRequired: cs.AuthRequired, CntlidMin: uint32(cs.CNTLIDMin), CntlidMax: uint32(cs.CNTLIDMax)}
	for _, ns := range cs.Namespaces {
		s.Namespaces = append(s.Namespaces, NamespaceToPB(cs.NQN, ns))
	}
	return s
}

// Namespace states (pb.Namespace.State).
const (
	StateOK       = "ok"
	StateFailed   = "failed"
	StateInactive = "inactive"
)

// withLive adds what the running target knows to n: capacity, state and counters.
func withLive(n *pb.Namespace, info target.NamespaceInfo) *pb.Namespace {
	n.Blocks = info.Blocks
	n.State = StateOK
	switch {
	case info.Inactive, info.Subsystem == "": // closed, or not served at all
		n.State = StateInactive
	case info.Failure != nil:
		n.State = StateFailed
	}
	if info.Failure != nil {
		n.Failure = info.Failure.Error()
	}
	io := &info.IO
	n.Counters = &pb.NamespaceCounters{ReadCommands: info.ReadCommands, WriteCommands: info.WriteCommands,
		ReadBytes: info.ReadBytes, WriteBytes: info.WriteBytes,
		FlushCommands: io[target.IOFlush].Commands - io[target.IOFlush].Errors,
		OtherCommands: io[target.IOOther].Commands - io[target.IOOther].Errors}
	for _, e := range info.Errors {
		n.Counters.Errors = append(n.Counters.Errors, &pb.ErrorCount{Op: e.Class.String(), Status: target.StatusLabel(e.Status),
			StatusCode: uint32(e.Status), Count: e.Count})
	}
	for cl := range target.NumIOClasses {
		if h := &io[cl].Latency; h.Count > 0 {
			n.Counters.Latency = append(n.Counters.Latency, &pb.LatencyHistogram{Op: cl.String(), Count: h.Count,
				SumNs: uint64(h.Sum), Buckets: h.Buckets[:]})
		}
	}
	return n
}

// ListenerFromPB converts an API listener to a configuration one.
func ListenerFromPB(l *pb.Listener) (conf.Listener, error) {
	if l == nil {
		return conf.Listener{}, fmt.Errorf("listener: missing")
	}
	if l.Port > 65535 {
		return conf.Listener{}, fmt.Errorf("listener %s: port %d is not a valid port; use 1..65535", l.Address, l.Port)
	}
	cl := conf.Listener{Transport: l.Transport, Address: l.Address, Port: uint16(l.Port)}
	for _, a := range l.AnaStates {
		if a.GetGroup() == 0 || a.GetGroup() > conf.MaxANAGroup {
			return cl, fmt.Errorf("listener %s: ANA group %d is not a group ID; use 1..%d", l.Address, a.GetGroup(), conf.MaxANAGroup)
		}
		st, err := conf.ParseANAState(a.GetState())
		if err != nil {
			return cl, fmt.Errorf("listener %s: ANA group %d: %w", l.Address, a.GetGroup(), err)
		}
		cl.ANAStates[a.GetGroup()] = st
	}
	return cl, nil
}

// ListenerToPB converts a configuration listener (with the ANA states set on it) to the
// API's.
func ListenerToPB(l conf.Listener) *pb.Listener {
	pl := &pb.Listener{Transport: l.Transport, Address: l.Address, Port: uint32(l.Port)}
	for g := 1; g <= conf.MaxANAGroup; g++ {
		if st := l.ANAStates[g]; st != "" {
			pl.AnaStates = append(pl.AnaStates, &pb.ANAGroupState{Group: uint32(g), State: string(st)})
		}
	}
	return pl
}

// HostKeysChangeFromPB converts a SetHostKeys request to the change it asks for: the
// fields it sets.
func HostKeysChangeFromPB(r *pb.SetHostKeysRequest) target.HostKeysChange {
	var ch target.HostKeysChange
	ch.DHCHAPSecret, ch.DHCHAPCtrlSecret = r.DhchapSecret, r.DhchapCtrlSecret
	if r.DhchapHashes != nil {
		l := slices.Clone(r.DhchapHashes.Names)
		ch.DHCHAPHashes = &l
	}
	if r.DhchapDhgroups != nil {
		l := slices.Clone(r.DhchapDhgroups.Names)
		ch.DHCHAPDHGroups = &l
	}
	return ch
}

// HostKeysToPB describes host entry h of cfg with its secrets redacted (conf.RedactSecret)
// and its hash functions and DH groups resolved; controllers is how many it has connected.
func HostKeysToPB(cfg *conf.Config, h *conf.Host, controllers int) *pb.HostKeys {
	out := &pb.HostKeys{Nqn: h.NQN, DhchapSecret: conf.RedactSecret(h.DHCHAPSecret),
		DhchapCtrlSecret: conf.RedactSecret(h.DHCHAPCtrlSecret), Controllers: uint32(controllers)}
	for _, x := range h.Hashes() {
		out.DhchapHashes = append(out.DhchapHashes, x.String())
	}
	for _, x := range h.DHGroups() {
		out.DhchapDhgroups = append(out.DhchapDhgroups, x.String())
	}
	for _, s := range cfg.Subsystems {
		if s.AllowAnyHost || slices.Contains(s.Hosts, h.NQN) {
			out.Subsystems = append(out.Subsystems, s.NQN)
		}
	}
	return out
}
