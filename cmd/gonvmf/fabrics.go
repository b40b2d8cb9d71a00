package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/target/server"
	"github.com/urfave/cli/v2"
)

// The host-side commands (discover, identify, perf) share nvme-cli's transport flags:
// -t TRANSPORT -a TRADDR -s TRSVCID -n NQN --hostnqn --hostid --host-traddr, and its
// in-band authentication flags -S/--dhchap-secret, -C/--dhchap-ctrl-secret. With
// -t loop they build the target described by --config in this process and connect to it
// through the loop transport: the target's command path without any network. That
// target opens the configuration's backends, the same files, devices and rbd images a
// gonvmf serve of that file serves (shared: true namespaces are not even locked against
// it), so the file must be named on the command line: unlike serve and check, these
// commands do not take it from GONVMF_CONFIG, which a shell set up to run the target
// has set. perf asks for --allow-overwrite before it writes to such storage.

// fabricsFlags returns the transport flags; nqnUsage says what -n defaults to.
func fabricsFlags(nqnUsage string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: initiator.TransportRDMA,
			Usage: "transport `TYPE`: rdma, or loop for an in-process target built from --config"},
		&cli.StringFlag{Name: "traddr", Aliases: []string{"a"}, Usage: "target `ADDRESS` (rdma)"},
		&cli.StringFlag{Name: "trsvcid", Aliases: []string{"s"}, Value: "4420", Usage: "target `PORT` (rdma)"},
		&cli.StringFlag{Name: "host-traddr", Usage: "local `ADDRESS` to connect from (rdma)"},
		&cli.StringFlag{Name: "nqn", Aliases: []string{"n"}, Usage: "subsystem `NQN`" + nqnUsage},
		&cli.StringFlag{Name: "hostnqn", Usage: "host `NQN` (default: /etc/nvme/hostnqn, else the UUID form of the host ID)"},
		&cli.StringFlag{Name: "hostid", Usage: "host `UUID` (default: /etc/nvme/hostid, else random)"},
		&cli.DurationFlag{Name: "keep-alive-tmo", Aliases: []string{"k"}, DefaultText: "5s for I/O controllers, none for discovery",
			Usage: "keep alive timeout `DURATION` (0: the default)"},
		&cli.StringFlag{Name: "dhchap-secret", Aliases: []string{"S"}, EnvVars: []string{"GONVMF_DHCHAP_SECRET"},
			Usage: "DH-HMAC-CHAP host `SECRET` (DHHC-1:..., as nvme gen-dhchap-key prints), for subsystems that authenticate their hosts"},
		&cli.StringFlag{Name: "dhchap-ctrl-secret", Aliases: []string{"C"}, EnvVars: []string{"GONVMF_DHCHAP_CTRL_SECRET"},
			Usage: "DH-HMAC-CHAP controller `SECRET`: authenticate the controller too (bidirectional)"},
		&cli.DurationFlag{Name: "connect-timeout", Value: initiator.DefaultConnectTimeout, Usage: "bound each queue's connection to `DURATION`"},
		&cli.StringFlag{Name: "config", Aliases: []string{"c"},
			Usage: "with -t loop: the target configuration `FILE` to run in-process, on its backends' storage (GONVMF_CONFIG is not read)"},
	}
}

// session is a connected controller and, for the loop transport, the in-process target.
type session struct {
	ctrl *initiator.Controller
	srv  *server.Server
}

func (s *session) Close() error {
	var err error
	if s.ctrl != nil {
		err = s.ctrl.Close()
	}
	if s.srv != nil {
		s.srv.Close()
	}
	return err
}

// fabricsOptions turns the transport flags into initiator options (without dialing) and,
// for the loop transport, starts the in-process target. defNQN is used when -n is absent
// ("" = the loop configuration's first subsystem, or an error). checkLoop, if not nil,
// vets the loop target's configuration and the subsystem to connect to before the target
// opens any backend; its error is the command's.
func fabricsOptions(c *cli.Context, defNQN string, checkLoop func(cfg *conf.Config, subNQN string) error) (initiator.Options, *session, error) {
	if c.Args().Present() {
		return initiator.Options{}, nil, usageError("unexpected argument %q; see 'gonvmf %s --help'", c.Args().First(), c.Command.Name)
	}
	o := initiator.Options{
		Transport:      c.String("transport"),
		Addr:           c.String("traddr"),
		SrcAddr:        c.String("host-traddr"),
		SubNQN:         c.String("nqn"),
		HostNQN:        c.String("hostnqn"),
		KeepAlive:      c.Duration("keep-alive-tmo"),
		ConnectTimeout: c.Duration("connect-timeout"),
		Logger:         slog.Default(),

		DHCHAPSecret:     c.String("dhchap-secret"),
		DHCHAPCtrlSecret: c.String("dhchap-ctrl-secret"),
	}
	if o.DHCHAPCtrlSecret != "" && o.DHCHAPSecret == "" {
		return o, nil, usageError("-C/--dhchap-ctrl-secret needs -S/--dhchap-secret too")
	}
	for _, f := range []string{"dhchap-secret", "dhchap-ctrl-secret"} {
		if v := c.String(f); v != "" {
			if _, err := dhchap.ParseSecret(v); err != nil {
				return o, nil, usageError("--%s: %v", f, err)
			}
		}
	}
	if o.SubNQN == "" {
		o.SubNQN = defNQN
	}
	if o.HostNQN == "" {
		o.HostNQN = readConfigLine("/etc/nvme/hostnqn")
	}
	hostid := c.String("hostid")
	if hostid == "" {
		hostid = readConfigLine("/etc/nvme/hostid")
	}
	if hostid != "" {
		id, err := initiator.ParseUUID(hostid)
		if err != nil {
			return o, nil, usageError("--hostid %q: not a UUID", hostid)
		}
		o.HostID = id
	}
	s := &session{}
	switch o.Transport {
	case initiator.TransportRDMA:
		if o.Addr == "" {
			return o, nil, usageError("-a/--traddr ADDRESS is required with -t rdma")
		}
		var port int
		if _, err := fmt.Sscanf(c.String("trsvcid"), "%d", &port); err != nil || port <= 0 || port > 65535 {
			return o, nil, usageError("-s/--trsvcid %q: not a port number", c.String("trsvcid"))
		}
		o.Port = port
	case initiator.TransportLoop:
		path := c.String("config")
		if path == "" {
			return o, nil, usageError("-t loop needs --config FILE: the target to run in-process")
		}
		cfg, err := conf.Load(path)
		if err == nil {
			err = cfg.CheckBackends(missingBackends())
		}
		if err == nil {
			err = cfg.CheckSystem()
		}
		if err != nil {
			reportConfigErrors(c.App.ErrWriter, path, err)
			return o, nil, failed
		}
		if o.SubNQN == "" {
			if len(cfg.Subsystems) == 0 {
				return o, nil, usageError("%s serves no subsystem: add one under subsystems: to run it in-process with -t loop", path)
			}
			o.SubNQN = cfg.Subsystems[0].NQN
		}
		if checkLoop != nil {
			if err := checkLoop(cfg, o.SubNQN); err != nil {
				return o, nil, err
			}
		}
		if s.srv, err = server.New(cfg, server.Options{Logger: slog.Default(), Loop: true}); err != nil {
			return o, nil, fmt.Errorf("starting the in-process target from %s: %w", path, err)
		}
		p := s.srv.Loop()
		o.Loop = func(depth int) (initiator.LoopConn, error) {
			conn, err := p.Dial(depth)
			if err != nil {
				return nil, err
			}
			return conn, nil
		}
	default:
		return o, nil, usageError("-t/--transport %q: use rdma or loop", o.Transport)
	}
	if o.SubNQN == "" {
		s.Close()
		return o, nil, usageError("-n/--nqn NQN is required")
	}
	return o, s, nil
}

// dial connects with o; on failure it closes s and returns an error for the user.
func dial(ctx context.Context, o initiator.Options, s *session) error {
	ctrl, err := initiator.Dial(ctx, o)
	if err != nil {
		s.Close()
		return dialError(err)
	}
	s.ctrl = ctrl
	return nil
}

// dialError makes a connection failure a one-line message that says what to check.
func dialError(err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "initiator: ")
	switch {
	case errors.Is(err, initiator.ErrSubsystemNotFound) && errors.Is(err, initiator.ErrHostNotAllowed):
		msg += "; list the subsystems this host may access with 'gonvmf discover' (same --hostnqn); if it is not there, " +
			"check the NQN, or add the host NQN to the subsystem's allowed hosts"
	case errors.Is(err, initiator.ErrSubsystemNotFound):
		msg += "; list the target's subsystems with 'gonvmf discover'"
	case errors.Is(err, initiator.ErrHostNotAllowed):
		msg += "; add the host NQN to the subsystem's allowed hosts, or pass the right one with --hostnqn"
	case errors.Is(err, initiator.ErrUnreachable), errors.Is(err, initiator.ErrConnectRefused):
		msg += "; check -a/-s and that the target is running"
	}
	return cli.Exit(msg, exitFailure)
}

// readConfigLine returns the first line of a small configuration file, or "".
func readConfigLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// connectCtx bounds a connection attempt.
func connectCtx(c *cli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, 10*time.Minute)
}
