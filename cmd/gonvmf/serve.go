package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/control"
	"github.com/gonvmf/gonvmf/target/metrics"
	"github.com/gonvmf/gonvmf/target/server"
	"github.com/urfave/cli/v2"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the NVMe-oF target described by a configuration file",
		Description: `serve loads and checks the configuration (as check does), opens every namespace's
backend, listens on every listener with the RDMA transport and serves hosts until it
gets SIGINT or SIGTERM. Then it drains: it stops listening and starts no new command
(hosts resend those after reconnecting), lets the commands in flight finish and answers
them (at most 10 s), flushes every namespace, disconnects the hosts and closes the
backends, and exits 0. The flushes run all at once, and serve waits for them at most the
queue close timeout (30 s): a namespace whose backend hangs (a file on an NFS server that
went away, an rbd cluster gone) gets an Error line with its subsystem, NSID, backend,
path and the time waited, and the stop goes on without it; closing does not wait for
that backend again. serve exits 1 if a flush failed or did not finish (writes reported
complete may not be durable), and then with the backend left open to the kernel. A
second signal ends the stop at once (exit 1), and so does a stop still running after
60 s. A signal while the target starts (opening an rbd namespace waits for its
cluster) stops it as soon as it has started; a second one abandons the start (exit 1).

While it runs, gonvmf ctl changes it through the control API (control.socket in the
configuration, /run/gonvmf/gonvmf.sock by default), Prometheus scrapes its metrics at
http://<metrics.address>/metrics when the configuration has a metrics section, and SIGHUP re-reads the
configuration file and applies the difference with the same operations: subsystems,
namespaces, hosts and listeners come and go, namespaces grow or change write
protection. A reload runs beside the signals: SIGINT or SIGTERM during one stops serve,
which waits for the reload at most 5 s, and SIGHUPs during one ask for one more reload
after it. A reload whose check passes once the stop has begun applies nothing (the log
says it was abandoned). The check (as check does) waits for the files and devices it
looks at (the namespaces', the state file, the TLS files, hosts' secret files) at most
10 s: one that does not answer (on a hung mount) fails the reload, or serve's start. A
file that is invalid, or that changes what cannot change while hosts are connected (the
transport section, for one), changes nothing; the log says why, and the metrics count it
(gonvmf_config_reloads_total{result="failure"}, gonvmf_config_last_reload_successful 0).

Hosts connect with the Linux NVMe host, for example
  nvme discover -t rdma -a 10.99.0.1 -s 4420
  nvme connect  -t rdma -a 10.99.0.1 -s 4420 -n <subsystem NQN>

Its log goes to standard error through a 512 KiB buffer that a goroutine of its own
writes out, so that a destination that falls behind (journald under load, a full pipe)
never stalls I/O: lines that find the buffer full are dropped, and a warning counts them.
A destination that goes away (its reader exits) does not stop serve: its lines are lost.

It needs an RDMA device that owns the listeners' addresses (for Soft-RoCE:
modprobe rdma_rxe; rdma link add rxe0 type rxe netdev IF) and an RLIMIT_MEMLOCK that
covers the buffer pool (root, or ulimit -l unlimited).`,
		Flags: []cli.Flag{configFlag()},
		Action: func(c *cli.Context) error {
			// SIGHUP's default action ends the process: take it from the start, so that a
			// reload asked for while the target starts (systemctl reload, logrotate) is a
			// reload once it runs rather than the end of it.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			// The Go runtime ends a process whose write to standard output or error finds
			// the pipe's reader gone (SIGPIPE) unless the process takes SIGPIPE itself:
			// a target must outlive its log's reader (a restarted journald, a closed
			// terminal, a pipeline that exits), and drain and flush when told to stop.
			// Taken, the write fails with EPIPE instead, which the log writers drop. The
			// channel is not read: a signal that finds it full is dropped, which is all
			// SIGPIPE is for here. signal.Notify rather than signal.Ignore: an ignored
			// signal stays ignored in the programs a process starts.
			signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
			// SIGINT and SIGTERM, from the start too: the first stops the target (once it
			// has started), the next one ends serve at once (see serve).
			term := make(chan os.Signal, 1)
			signal.Notify(term, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(term)
			cfg, err := loadConfig(c, true)
			if err != nil {
				return err
			}
			log, logDrops, closeLog := asyncLogger(c)
			defer closeLog()
			namespaces := 0
			for _, s := range cfg.Subsystems {
				namespaces += len(s.Namespaces)
			}
			log.Info("configuration loaded", "file", cfg.File, "listeners", len(cfg.Listeners),
				"subsystems", len(cfg.Subsystems), "namespaces", namespaces)
			if len(cfg.Listeners) == 0 || len(cfg.Subsystems) == 0 {
				log.Warn("nothing is served until listeners and subsystems are added: gonvmf ctl listener add / subsystem add, or add them to the file and send SIGHUP",
					"listeners", len(cfg.Listeners), "subsystems", len(cfg.Subsystems), "control_socket", cfg.Control.Socket)
			}
			if err := serve(c.Context, cfg, log, hup, term, metrics.WithLogDrops(logDrops)); err != nil {
				return cli.Exit(err.Error(), exitFailure)
			}
			return nil
		},
	}
}

// newServer builds the target serve runs: server.New, which the tests replace to serve
// without RDMA (Options.Loop) or to start slowly.
var newServer = server.New

// shutdownGrace bounds the orderly shutdown; a second signal ends it at once. drainTimeout
// bounds its first step, waiting for the commands in flight: well under the hosts' I/O
// timeout (30 s on Linux), which the commands held back meanwhile count against. The
// flushes, and the closes' waits for what a hung backend holds, end within the target's
// queue close timeout (30 s, see target.Target.Flush): a stop with a hung backend takes
// at most about 40 s and what closing the other backends takes. shutdownGrace is the
// backstop for what is not bounded so (a backend's Close that hangs), and ends the
// process before systemd's default stop timeout (TimeoutStopSec, 90 s) kills it.
const (
	shutdownGrace = 60 * time.Second
	drainTimeout  = 10 * time.Second
)

// serve runs the target until ctx is done or a signal arrives on term, then shuts it down
// in order; a signal on hup reloads the configuration file, on a goroutine of its own
// (reloader), so that no reload holds up the stop. A second signal on term ends
// the shutdown, or the start (see startServer), at once with an error. mopts are added to
// the metrics server's options when the configuration serves metrics.
func serve(ctx context.Context, cfg *conf.Config, log *slog.Logger, hup, term <-chan os.Signal, mopts ...metrics.Option) error {
	reloads := &reloadStats{r: metrics.Reloads{LastSuccess: time.Now()}}
	mopts = append(mopts, metrics.WithReloads(reloads.get))
	s, stop, err := startServer(cfg, log, term)
	if err != nil {
		return err
	}
	nqns := make([]string, len(cfg.Subsystems))
	namespaces := 0
	for i, s := range cfg.Subsystems {
		nqns[i] = s.NQN
		namespaces += len(s.Namespaces)
	}
	for _, lis := range s.Listeners() {
		dev := lis.Device()
		if dev == "" {
			dev = "any"
		}
		log.Info(fmt.Sprintf("serving %s on rdma %s", count(len(nqns), "subsystem"), lis.Addr()),
			"subsystems", strings.Join(nqns, ","), "namespaces", namespaces, "device", dev,
			"discovery", "nvme discover -t rdma -a "+lis.Addr().Addr().String()+" -s "+fmt.Sprint(lis.Addr().Port()))
	}
	ctl, err := control.Start(s, s.Config().Control, log)
	if err != nil {
		s.Close()
		return err
	}
	var met *metrics.Server
	if mc := s.Config().Metrics; mc.Address != "" {
		opts := mopts
		if mc.Profiling {
			opts = append(opts, metrics.WithProfiling())
		}
		if met, err = metrics.Start(s, mc.Address, log, opts...); err != nil {
			ctl.Close()
			s.Close()
			return err
		}
	}
	rl := startReloader(func(stopping <-chan struct{}) { reload(s, cfg.File, log, reloads, stopping) })
	for !stop {
		select {
		case <-ctx.Done():
			stop = true
		case <-term:
			stop = true
		case <-hup:
			rl.request()
		}
	}
	// A second signal, or a shutdown that takes too long, ends the process at once; it
	// counts from here, closing the control and metrics servers included.
	if rl.stop() {
		log.Info("shutting down: waiting for the reload in progress", "at_most", reloadStopWait)
		select {
		case <-rl.done:
		case s := <-term:
			return fmt.Errorf("shutdown interrupted by a second %v while it waited for the reload in progress", s)
		case <-time.After(reloadStopWait):
			log.Warn("shutting down without the reload in progress: it did not finish in time; it applies nothing from now on but the step it may be in the middle of",
				"waited", reloadStopWait)
		}
	}
	ctl.Close()
	if met != nil {
		met.Close()
	}

	log.Info("shutting down: no new connections or commands; draining the commands in flight, flushing, then disconnecting hosts")
	done := make(chan error, 1)
	st := s.Stats()
	log.Info("transport statistics", "connections", st.Connections, "completions", st.Completions,
		"polls", st.Polls, "sleeps", st.Sleeps, "event_wakeups", st.Wakeups, "buffer_waits", st.BufferWaits, "read_credit_waits", st.ReadWaits,
		"send_queue_waits", st.SendWaits, "pool_bytes", st.PoolTotalBytes, "pool_lowest_free_bytes", st.PoolLowestBytes)
	go func() {
		dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		done <- s.Shutdown(dctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			log.Error("shutdown finished with errors", "err", err)
		}
		log.Info("stopped")
		var why []string
		if errors.Is(err, backend.ErrSync) {
			why = append(why, "a namespace failed to sync")
		}
		if errors.Is(err, target.ErrFlushUnfinished) {
			why = append(why, "a namespace's flush did not finish within the queue close timeout (its backend hangs)")
		}
		if len(why) > 0 {
			return fmt.Errorf("%s, so writes it reported complete may be lost: %w", strings.Join(why, ", and "), err)
		}
		return nil
	case s := <-term:
		return fmt.Errorf("shutdown interrupted by a second %v", s)
	case <-time.After(shutdownGrace):
		return fmt.Errorf("shutdown did not finish within %v (the log's last lines show the step it reached)", shutdownGrace)
	}
}

// startServer builds the target with newServer, which cannot be interrupted and may take
// long: an rbd namespace waits for its cluster up to its connection timeout. A signal on
// term meanwhile makes serve stop the target as soon as it has started (stop); a second
// one abandons the start: startServer returns an error at once, and the process exits
// with newServer still running, leaving the backends it opened to the kernel to close.
func startServer(cfg *conf.Config, log *slog.Logger, term <-chan os.Signal) (s *server.Server, stop bool, err error) {
	type result struct {
		s   *server.Server
		err error
	}
	started := make(chan result, 1)
	go func() {
		s, err := newServer(cfg, server.Options{Logger: log})
		started <- result{s, err}
	}()
	for {
		select {
		case r := <-started:
			return r.s, stop, r.err
		case sig := <-term:
			if stop {
				return nil, true, fmt.Errorf("start abandoned on a second %v: gonvmf exits with its backends open as far as they got", sig)
			}
			stop = true
			log.Warn(fmt.Sprintf("%v while the target starts: it stops as soon as it has started (opening backends cannot be interrupted); a second signal abandons the start", sig))
		}
	}
}

// reloadStats counts serve's reloads for its metrics (metrics.WithReloads).
type reloadStats struct {
	mu sync.Mutex
	r  metrics.Reloads
}

// record counts a reload that succeeded (ok) or failed.
func (st *reloadStats) record(ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.r.LastFailed = !ok
	if ok {
		st.r.Succeeded++
		st.r.LastSuccess = time.Now()
	} else {
		st.r.Failed++
	}
}

func (st *reloadStats) get() metrics.Reloads {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.r
}

// reloadStopWait bounds the time serve's stop waits for a reload in progress (see
// reloader).
var reloadStopWait = 5 * time.Second

// reloader runs serve's SIGHUP reloads on a goroutine of its own, one at a time, so that
// serve's signal loop takes every signal at once however long a reload takes: a
// configuration check that waits for a file on a hung mount (a secret's, a backend's), a
// backend slow to open. A SIGHUP while a reload runs asks for one more reload after it;
// any number of them meanwhile ask for that one (coalesced), which reads the file as it
// is when it starts.
//
// serve's stop (stop) starts no reload after it, and waits for the one in progress at
// most reloadStopWait (or until a second signal): a reload applying its changes is let
// finish, so that what it adds is drained, flushed and closed with the rest. One still
// running after that is not waited for: the stop goes on and the process exits without
// it. Such a reload applies nothing more: one still in its configuration check is
// abandoned when the check returns (reload sees the stop on the channel run gets), and
// one inside server.Server.Reload applies no step after Shutdown has begun (its error
// wraps server.ErrClosed); only the step it is in the middle of then runs to its end.
type reloader struct {
	pending chan struct{} // holds a reload asked for and not started yet
	done    chan struct{} // closed when the goroutine returns

	mu      sync.Mutex
	quit    chan struct{} // closed by stop, under mu
	running bool          // a reload is in progress (under mu)
}

// startReloader starts the goroutine that runs the reloads: each is a call of run, whose
// argument is closed once the stop has begun.
func startReloader(run func(stopping <-chan struct{})) *reloader {
	r := &reloader{pending: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.quit:
				return
			case <-r.pending:
			}
			r.mu.Lock()
			select {
			case <-r.quit: // both were ready, and select took pending
				r.mu.Unlock()
				return
			default:
			}
			r.running = true
			r.mu.Unlock()
			run(r.quit)
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
		}
	}()
	return r
}

// request asks for a reload: it starts at once, or after the one in progress (joining
// one already asked for). It never blocks.
func (r *reloader) request() {
	select {
	case r.pending <- struct{}{}:
	default:
	}
}

// stop starts no more reloads and reports whether one is in progress; done closes once
// it has ended (at once when none is).
func (r *reloader) stop() (inProgress bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.quit)
	return r.running
}

// checkReload checks a reloaded configuration against this build and the system as
// check does (tests replace it).
var checkReload = func(cfg *conf.Config) error {
	if err := cfg.CheckBackends(missingBackends()); err != nil {
		return err
	}
	return cfg.CheckSystem()
}

// reload re-reads the configuration file (SIGHUP) and applies its difference from the
// running configuration; an invalid file, or one that cannot be applied, changes nothing
// and is logged with the reasons. The reload is counted in stats before the line that
// ends it ("reload: N changes applied", "reload refused: nothing changed", "reload
// failed", "reload abandoned") is logged: whoever reads that line and then scrapes the
// metrics sees it counted. Once stopping is closed (serve's stop has begun) a reload whose
// check passes applies nothing: it is abandoned and counted as failed.
func reload(s *server.Server, file string, log *slog.Logger, stats *reloadStats, stopping <-chan struct{}) {
	log.Info("SIGHUP: reloading the configuration", "file", file)
	cfg, err := conf.Load(file)
	if err == nil {
		err = checkReload(cfg)
	}
	if err != nil {
		for _, e := range conf.Errors(err) {
			log.Error("reload: invalid configuration", "problem", e.Error())
		}
		if len(conf.Errors(err)) == 0 {
			log.Error("reload: cannot read the configuration", "err", err)
		}
		stats.record(false)
		log.Error("reload refused: nothing changed", "file", file)
		return
	}
	for _, w := range cfg.Warnings {
		log.Warn("reload: configuration warning", "warning", w.Error())
	}
	select {
	case <-stopping:
		stats.record(false)
		log.Error("reload abandoned: serve is stopping; nothing changed", "file", file)
		return
	default:
	}
	changes, err := s.Reload(cfg)
	if err != nil {
		stats.record(false)
		log.Error("reload failed", "file", file, "err", err)
		return
	}
	stats.record(true)
	log.Info(fmt.Sprintf("reload: %s applied", count(len(changes), "change")), "file", file)
}
