package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
	"github.com/gonvmf/gonvmf/target/server"
)

// Service implements the control API (controlpb.ControlServer) on a running Server: every
// mutating RPC is one of the Server's operations, and every answer is read from the
// running configuration and the target's inspection snapshots.
type Service struct {
	pb.UnimplementedControlServer
	srv *server.Server
	log *slog.Logger
}

// NewService returns the control API of srv.
func NewService(srv *server.Server, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{srv: srv, log: log.With("component", "control")}
}

// errStatus turns an operation's error into a gRPC status whose message is the error's
// text (it names the object and the reason).
func errStatus(err error) error {
	if err == nil {
		return nil
	}
	code := codes.FailedPrecondition
	switch {
	case errors.Is(err, target.ErrANAInFlight):
		// Applied, but not complete: gRPC's code for a change whose deadline passed first.
		code = codes.DeadlineExceeded
	case errors.Is(err, target.ErrInvalidANA):
		code = codes.InvalidArgument
	case errors.Is(err, target.ErrNoSuchSubsystem), errors.Is(err, target.ErrNoSuchNamespace),
		errors.Is(err, target.ErrNoSuchHost), errors.Is(err, target.ErrNoHostKeys), errors.Is(err, server.ErrNoSuchListener):
		code = codes.NotFound
	case errors.Is(err, target.ErrSubsystemExists), errors.Is(err, target.ErrNamespaceExists):
		code = codes.AlreadyExists
	case len(conf.Errors(err)) > 0:
		code = codes.InvalidArgument
	case errors.Is(err, target.ErrAllowsAnyHost), errors.Is(err, backend.ErrShrink):
		code = codes.FailedPrecondition
	case errors.Is(err, target.ErrClosed), errors.Is(err, server.ErrClosed):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// answerContext is ctx with its deadline brought forward by a tenth of the time left, at
// most a second, for a wait that ends with an error the client should still receive
// before its own deadline passes (an ANA change's wait for the I/O admitted before it).
func answerContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d.Add(-min(time.Until(d)/10, time.Second)))
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// logged logs a mutating operation's outcome and returns its status.
func (s *Service) logged(op string, err error, attrs ...any) error {
	if err != nil {
		s.log.Warn("control: "+op+" failed", append(attrs, "err", err)...)
		return errStatus(err)
	}
	s.log.Info("control: "+op, attrs...)
	return nil
}

// --- subsystems ---

func (s *Service) ListSubsystems(context.Context, *pb.ListSubsystemsRequest) (*pb.ListSubsystemsResponse, error) {
	cfg := s.srv.Config()
	ctrls := s.controllersBySubsystem()
	live := s.liveNamespaces()
	out := &pb.ListSubsystemsResponse{}
	for _, cs := range cfg.Subsystems {
		sub := SubsystemToPB(cs)
		sub.Controllers = uint32(ctrls[cs.NQN])
		for _, n := range sub.Namespaces {
			withLive(n, live[nsKey{cs.NQN, n.Nsid}])
		}
		out.Subsystems = append(out.Subsystems, sub)
	}
	return out, nil
}

func (s *Service) AddSubsystem(_ context.Context, r *pb.AddSubsystemRequest) (*pb.Subsystem, error) {
	cs, err := SubsystemFromPB(r.Subsystem)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if err := s.logged("subsystem added", s.srv.AddSubsystem(cs), "nqn", cs.NQN, "namespaces", len(cs.Namespaces)); err != nil {
		return nil, err
	}
	return s.subsystem(cs.NQN)
}

func (s *Service) RemoveSubsystem(_ context.Context, r *pb.RemoveSubsystemRequest) (*pb.RemoveSubsystemResponse, error) {
	n := s.controllersBySubsystem()[r.Nqn]
	if err := s.logged("subsystem removed", s.srv.RemoveSubsystem(r.Nqn), "nqn", r.Nqn, "controllers", n); err != nil {
		return nil, err
	}
	return &pb.RemoveSubsystemResponse{DisconnectedControllers: uint32(n)}, nil
}

// subsystem returns the running subsystem nqn.
func (s *Service) subsystem(nqn string) (*pb.Subsystem, error) {
	r, _ := s.ListSubsystems(context.Background(), nil)
	for _, sub := range r.Subsystems {
		if sub.Nqn == nqn {
			return sub, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "subsystem %q is not being served", nqn)
}

func (s *Service) controllersBySubsystem() map[string]int {
	m := map[string]int{}
	for _, c := range s.srv.Target().Controllers() {
		m[c.Subsystem]++
	}
	return m
}

// --- namespaces ---

type nsKey struct {
	nqn  string
	nsid uint32
}

func (s *Service) liveNamespaces() map[nsKey]target.NamespaceInfo {
	m := map[nsKey]target.NamespaceInfo{}
	for _, ns := range s.srv.Target().Namespaces() {
		m[nsKey{ns.Subsystem, ns.NSID}] = ns
	}
	return m
}

func (s *Service) ListNamespaces(_ context.Context, r *pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
	cfg := s.srv.Config()
	live := s.liveNamespaces()
	out := &pb.ListNamespacesResponse{}
	found := r.Subsystem == ""
	for _, cs := range cfg.Subsystems {
		if r.Subsystem != "" && cs.NQN != r.Subsystem {
			continue
		}
		found = true
		for _, ns := range cs.Namespaces {
			out.Namespaces = append(out.Namespaces, withLive(NamespaceToPB(cs.NQN, ns), live[nsKey{cs.NQN, ns.NSID}]))
		}
	}
	if !found {
		return nil, status.Errorf(codes.NotFound, "subsystem %q is not being served", r.Subsystem)
	}
	return out, nil
}

// namespace returns the running namespace nsid of subsystem nqn.
func (s *Service) namespace(nqn string, nsid uint32) (*pb.Namespace, error) {
	r, err := s.ListNamespaces(context.Background(), &pb.ListNamespacesRequest{Subsystem: nqn})
	if err != nil {
		return nil, err
	}
	for _, n := range r.Namespaces {
		if n.Nsid == nsid {
			return n, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "subsystem %q has no namespace %d", nqn, nsid)
}

func (s *Service) AddNamespace(_ context.Context, r *pb.AddNamespaceRequest) (*pb.Namespace, error) {
	ns, err := NamespaceFromPB(r.Namespace)
	if err != nil {
		return nil, invalid("subsystem %q: %v", r.Subsystem, err)
	}
	err = s.srv.AddNamespace(r.Subsystem, ns)
	if err := s.logged("namespace added", err, "subsystem", r.Subsystem, "nsid", ns.NSID, "backend", ns.Backend, "path", ns.Path, "size", ns.Size); err != nil {
		return nil, err
	}
	return s.namespace(r.Subsystem, ns.NSID)
}

func (s *Service) RemoveNamespace(_ context.Context, r *pb.RemoveNamespaceRequest) (*pb.RemoveNamespaceResponse, error) {
	if err := s.logged("namespace removed", s.srv.RemoveNamespace(r.Subsystem, r.Nsid), "subsystem", r.Subsystem, "nsid", r.Nsid); err != nil {
		return nil, err
	}
	return &pb.RemoveNamespaceResponse{}, nil
}

func (s *Service) ResizeNamespace(_ context.Context, r *pb.ResizeNamespaceRequest) (*pb.Namespace, error) {
	err := s.srv.ResizeNamespace(r.Subsystem, r.Nsid, conf.Size(r.Size))
	if err := s.logged("namespace resized", err, "subsystem", r.Subsystem, "nsid", r.Nsid, "size", conf.Size(r.Size)); err != nil {
		return nil, err
	}
	return s.namespace(r.Subsystem, r.Nsid)
}

func (s *Service) SetNamespaceReadOnly(_ context.Context, r *pb.SetNamespaceReadOnlyRequest) (*pb.Namespace, error) {
	err := s.srv.SetNamespaceReadOnly(r.Subsystem, r.Nsid, r.ReadOnly)
	if err := s.logged("namespace write protection set", err, "subsystem", r.Subsystem, "nsid", r.Nsid, "read_only", r.ReadOnly); err != nil {
		return nil, err
	}
	return s.namespace(r.Subsystem, r.Nsid)
}

// SetNamespaceANAGroup moves a namespace to another ANA group
// (server.Server.SetNamespaceANAGroup).
func (s *Service) SetNamespaceANAGroup(ctx context.Context, r *pb.SetNamespaceANAGroupRequest) (*pb.Namespace, error) {
	if r.AnaGroup == 0 || r.AnaGroup > conf.MaxANAGroup {
		return nil, invalid("subsystem %q: namespace %d: ana_group %d is not a group ID; use 1..%d", r.Subsystem, r.Nsid, r.AnaGroup, conf.MaxANAGroup)
	}
	wctx, cancel := answerContext(ctx)
	defer cancel()
	err := s.srv.SetNamespaceANAGroup(wctx, r.Subsystem, r.Nsid, r.AnaGroup)
	if err := s.logged("namespace moved to another ANA group", err, "subsystem", r.Subsystem, "nsid", r.Nsid, "ana_group", r.AnaGroup); err != nil {
		return nil, err
	}
	return s.namespace(r.Subsystem, r.Nsid)
}

// ReopenNamespace reopens a namespace's backend from the running configuration, which
// clears a sync failure; the answer says which failure was cleared.
func (s *Service) ReopenNamespace(_ context.Context, r *pb.ReopenNamespaceRequest) (*pb.ReopenNamespaceResponse, error) {
	var cleared string
	if info, ok := s.liveNamespaces()[nsKey{r.Subsystem, r.Nsid}]; ok && info.Failure != nil {
		cleared = info.Failure.Error()
	}
	err := s.srv.ReopenNamespace(r.Subsystem, r.Nsid)
	if err := s.logged("namespace reopened", err, "subsystem", r.Subsystem, "nsid", r.Nsid, "cleared_failure", cleared); err != nil {
		return nil, err
	}
	ns, err := s.namespace(r.Subsystem, r.Nsid)
	if err != nil {
		return nil, err
	}
	return &pb.ReopenNamespaceResponse{Namespace: ns, ClearedFailure: cleared}, nil
}

// --- hosts ---

func (s *Service) AllowHost(_ context.Context, r *pb.AllowHostRequest) (*pb.Subsystem, error) {
	if err := s.logged("host allowed", s.srv.AllowHost(r.Subsystem, r.HostNqn), "subsystem", r.Subsystem, "host", r.HostNqn); err != nil {
		return nil, err
	}
	return s.subsystem(r.Subsystem)
}

func (s *Service) DenyHost(_ context.Context, r *pb.DenyHostRequest) (*pb.Subsystem, error) {
	if err := s.logged("host denied", s.srv.DenyHost(r.Subsystem, r.HostNqn), "subsystem", r.Subsystem, "host", r.HostNqn); err != nil {
		return nil, err
	}
	return s.subsystem(r.Subsystem)
}

func (s *Service) SetHosts(_ context.Context, r *pb.SetHostsRequest) (*pb.Subsystem, error) {
	err := s.srv.SetAllowedHosts(r.Subsystem, r.AllowAnyHost, r.Hosts)
	if err := s.logged("hosts set", err, "subsystem", r.Subsystem, "allow_any_host", r.AllowAnyHost, "hosts", r.Hosts); err != nil {
		return nil, err
	}
	return s.subsystem(r.Subsystem)
}

// --- in-band authentication: the hosts section, auth_required ---

func (s *Service) ListHostKeys(context.Context, *pb.ListHostKeysRequest) (*pb.ListHostKeysResponse, error) {
	cfg := s.srv.Config()
	ctrls := map[string]int{}
	for _, c := range s.srv.Target().Controllers() {
		if !c.Discovery {
			ctrls[c.HostNQN]++
		}
	}
	out := &pb.ListHostKeysResponse{}
	for i := range cfg.Hosts {
		out.Hosts = append(out.Hosts, HostKeysToPB(cfg, &cfg.Hosts[i], ctrls[cfg.Hosts[i].NQN]))
	}
	return out, nil
}

func (s *Service) SetHostKeys(_ context.Context, r *pb.SetHostKeysRequest) (*pb.HostKeys, error) {
	ch := HostKeysChangeFromPB(r)
	fields := ch.Fields()
	if len(fields) == 0 {
		return nil, invalid("host %q: the request sets nothing; set dhchap_secret, dhchap_ctrl_secret, dhchap_hashes or dhchap_dhgroups", r.Nqn)
	}
	if ch.DHCHAPSecret != nil && strings.TrimSpace(*ch.DHCHAPSecret) == "" {
		return nil, invalid("host %q: dhchap_secret is empty: a host under hosts authenticates with a secret; give one, or remove the host's entry (RemoveHostKeys)", r.Nqn)
	}
	created, err := s.srv.SetHostKeys(r.Nqn, ch)
	// Field names only: the values are secrets.
	if err := s.logged("host keys set", err, "host", r.Nqn, "fields", fields, "new", created); err != nil {
		return nil, err
	}
	hs, _ := s.ListHostKeys(context.Background(), nil)
	for _, h := range hs.Hosts {
		if h.Nqn == r.Nqn {
			return h, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "host %q has no entry in the hosts section", r.Nqn)
}

func (s *Service) RemoveHostKeys(_ context.Context, r *pb.RemoveHostKeysRequest) (*pb.RemoveHostKeysResponse, error) {
	if err := s.logged("host keys removed", s.srv.RemoveHostKeys(r.Nqn), "host", r.Nqn); err != nil {
		return nil, err
	}
	return &pb.RemoveHostKeysResponse{}, nil
}

func (s *Service) SetAuthRequired(_ context.Context, r *pb.SetAuthRequiredRequest) (*pb.Subsystem, error) {
	err := s.srv.SetAuthRequired(r.Subsystem, r.AuthRequired)
	if err := s.logged("auth_required set", err, "subsystem", r.Subsystem, "auth_required", r.AuthRequired); err != nil {
		return nil, err
	}
	return s.subsystem(r.Subsystem)
}

// --- listeners ---

func (s *Service) ListListeners(context.Context, *pb.ListListenersRequest) (*pb.ListListenersResponse, error) {
	out := &pb.ListListenersResponse{}
	lis := s.srv.Listeners() // in the order of Config().Listeners (none when serving in-process)
	for i, l := range s.srv.Config().Listeners {
		pl := ListenerToPB(l)
		if i < len(lis) {
			pl.Device = lis[i].Device()
		}
		out.Listeners = append(out.Listeners, pl)
	}
	return out, nil
}

func (s *Service) AddListener(_ context.Context, r *pb.AddListenerRequest) (*pb.Listener, error) {
	l, err := ListenerFromPB(r.Listener)
	if err != nil {
		return nil, invalid("%v", err)
	}
	lis, err := s.srv.AddListener(l)
	if err := s.logged("listener added", err, "address", l.Address, "port", l.Port); err != nil {
		return nil, err
	}
	pl := &pb.Listener{Transport: "rdma", Address: lis.Addr().Addr().String(), Port: uint32(lis.Addr().Port()), Device: lis.Device()}
	pl.AnaStates = ListenerToPB(l).AnaStates
	return pl, nil
}

func (s *Service) RemoveListener(_ context.Context, r *pb.RemoveListenerRequest) (*pb.RemoveListenerResponse, error) {
	l, err := ListenerFromPB(r.Listener)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if err := s.logged("listener removed", s.srv.RemoveListener(l), "address", l.Address, "port", l.Port); err != nil {
		return nil, err
	}
	return &pb.RemoveListenerResponse{}, nil
}

// SetANAState sets one ANA group's state on one listener (server.Server.SetANAState).
func (s *Service) SetANAState(ctx context.Context, r *pb.SetANAStateRequest) (*pb.Listener, error) {
	l, err := ListenerFromPB(r.Listener)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if l.Port == 0 {
		l.Port = conf.DefaultPort
	}
	ip, err := netip.ParseAddr(l.Address)
	if err != nil {
		return nil, invalid("listener address %q is not an IP address", l.Address)
	}
	if r.Group == 0 || r.Group > conf.MaxANAGroup {
		return nil, invalid("ANA group %d is not a group ID; use 1..%d", r.Group, conf.MaxANAGroup)
	}
	st, err := conf.ParseANAState(r.State)
	if err != nil {
		return nil, invalid("%v", err)
	}
	addr := netip.AddrPortFrom(ip, l.Port)
	wctx, cancel := answerContext(ctx)
	defer cancel()
	err = s.srv.SetANAState(wctx, addr, r.Group, st)
	if err := s.logged("ANA state set", err, "listener", addr.String(), "group", r.Group, "state", st); err != nil {
		return nil, err
	}
	lis := s.srv.Listeners()
	for i, cl := range s.srv.Config().Listeners {
		if cip, err := netip.ParseAddr(cl.Address); err == nil && cip.Unmap() == ip.Unmap() && cl.Port == l.Port {
			pl := ListenerToPB(cl)
			if i < len(lis) {
				pl.Device = lis[i].Device()
			}
			return pl, nil
		}
	}
	return ListenerToPB(l), nil
}

// --- inspection ---

func (s *Service) ListControllers(_ context.Context, r *pb.ListControllersRequest) (*pb.ListControllersResponse, error) {
	out := &pb.ListControllersResponse{}
	for _, c := range s.srv.Target().Controllers() {
		if r.Subsystem != "" && c.Subsystem != r.Subsystem {
			continue
		}
		pc := &pb.Controller{
			Subsystem: c.Subsystem, Cntlid: uint32(c.ID), Discovery: c.Discovery, HostNqn: c.HostNQN,
			HostId: conf.FormatUUID(c.HostID), Listener: portText(c.Port), RemoteAddress: c.RemoteAddr,
			KeepAliveTimeoutMs: uint64(c.KeepAlive / time.Millisecond), ConnectedUnixNano: c.Connected.UnixNano(), Ready: c.Ready,
			Authenticated: c.Authenticated,
		}
		for _, q := range c.Queues {
			pc.Queues = append(pc.Queues, &pb.Queue{Qid: uint32(q.ID), Depth: uint32(q.Size), InFlight: uint32(q.InFlight), RemoteAddress: q.RemoteAddr})
		}
		out.Controllers = append(out.Controllers, pc)
	}
	return out, nil
}

func (s *Service) GetStats(context.Context, *pb.GetStatsRequest) (*pb.Stats, error) {
	st := s.srv.Stats()
	out := &pb.Stats{
		Transport: &pb.TransportStats{
			Connections: uint32(st.Connections), Completions: st.Completions, Polls: st.Polls, Sleeps: st.Sleeps,
			Wakeups: st.Wakeups, BufferWaits: st.BufferWaits, ReadCreditWaits: st.ReadWaits, SendQueueWaits: st.SendWaits,
		},
		DiscoveryGeneration: s.srv.Target().GenerationCounter(),
	}
	for _, g := range s.srv.GroupStats() {
		out.PollGroups = append(out.PollGroups, &pb.PollGroupStats{
			Device: g.Device, Group: uint32(g.Group), Connections: uint32(g.Connections), Polls: g.Polls, IdlePolls: g.IdlePolls,
			Completions: g.Completions, Sleeps: g.Sleeps, Wakeups: g.Wakeups, BufferWaits: g.BufferWaits,
			ReadCreditWaits: g.ReadWaits, SendQueueWaits: g.SendWaits,
		})
	}
	for _, p := range s.srv.PoolStats() {
		out.BufferPools = append(out.BufferPools, &pb.BufferPoolStats{Device: p.Device, TotalBytes: uint64(p.TotalBytes),
			FreeBytes: uint64(p.FreeBytes), LowestFreeBytes: uint64(p.LowestBytes)})
	}
	ns, _ := s.ListNamespaces(context.Background(), &pb.ListNamespacesRequest{})
	out.Namespaces = ns.Namespaces
	for _, c := range s.srv.Target().Controllers() {
		out.Controllers++
		out.Queues += uint32(len(c.Queues))
	}
	for r, n := range s.srv.Target().ConnectRejects() {
		out.ConnectRejects = append(out.ConnectRejects, &pb.RejectCount{Reason: target.ConnectReject(r).String(), Count: n})
	}
	for _, r := range s.srv.Rejects() {
		out.RdmaConnectRejects = append(out.RdmaConnectRejects, &pb.RejectCount{Reason: r.Reason, Count: r.Count})
	}
	return out, nil
}

func (s *Service) SaveConfig(context.Context, *pb.SaveConfigRequest) (*pb.SaveConfigResponse, error) {
	cfg := s.srv.SettledConfig()
	from := cfg.File
	cfg.File = ""
	head := fmt.Sprintf("# gonvmf running configuration, saved %s", time.Now().UTC().Format(time.RFC3339))
	if from != "" {
		head += " (started from " + from + ")"
	}
	return &pb.SaveConfigResponse{Yaml: head + "\n" + cfg.String()}, nil
}

func portText(p target.PortConfig) string {
	tr := map[uint8]string{target.TrTypeRDMA: "rdma", target.TrTypeTCP: "tcp", target.TrTypeLoop: "loop"}[p.TrType]
	if tr == "" {
		tr = fmt.Sprintf("trtype %d", p.TrType)
	}
	if p.TrSvcID == "" {
		return tr + " " + p.TrAddr
	}
	return fmt.Sprintf("%s %s:%s", tr, p.TrAddr, p.TrSvcID)
}
