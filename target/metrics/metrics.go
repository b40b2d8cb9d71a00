// Package metrics serves a running gonvmf target's counters as Prometheus metrics
// (github.com/prometheus/client_golang): I/O per namespace (commands and bytes by class,
// errors by status, latency histograms), connections per subsystem, the RDMA poll groups
// and buffer pools, refused connections, and closed queues still held by commands stuck in
// a backend. The README's "Metrics" section lists every metric; names follow the
// Prometheus conventions (base units, _total, _seconds, _bytes).
//
//	m, err := metrics.Start(srv, cfg.Metrics.Address, log) // HTTP on address, /metrics
//	// with metrics.WithProfiling(), also /debug/pprof/ (conf.Metrics.Profiling);
//	// with metrics.WithLogDrops(w.Dropped), also gonvmf_log_lines_dropped_total;
//	// with metrics.WithReloads(stats), also gonvmf_config_reloads_total and the last reload's
//	// result and time
//	...
//	m.Close()
//
// # Costs and ownership
//
// The package owns no counters. The target counts each I/O command into its namespace's
// own sharded memory and the RDMA poll groups into theirs, without locks or allocation
// (see package target, "Performance"); the Collector reads those counters when Prometheus
// scrapes — target.Target.Namespaces, Subsystems and ConnectRejects, the server's
// GroupStats, PoolStats and Rejects — and builds constant metrics from them, so a scrape
// allocates and the I/O path does not. Start turns the target's latency histograms on
// (target.Target.MeasureLatency): two clock reads per I/O command.
//
// # Series per namespace
//
// Each namespace is NamespaceSeries series (the error counters add one per class and
// status seen): of them NamespaceHistogramSeries are its latency histograms, a bucket per
// bound of target.LatencyBound, +Inf, _sum and _count for each of the target.NumIOClasses
// classes. A target of hundreds of namespaces exports tens of thousands of series with
// them, so metrics.per_namespace "counters" (conf.MetricsCounters) drops them, leaving
// NamespaceSeries minus NamespaceHistogramSeries; the histograms are still measured, and
// `gonvmf ctl stats` shows their quantiles. No target-wide histogram replaces them: a sum
// over the namespaces served at a scrape falls when one is removed, which rate() takes for
// a counter reset.
//
// The target's running configuration is the one place the choice is kept: the Collector
// reads it at each scrape (target.Target.MetricsPerNamespace), so a reload of srv that
// changes metrics.per_namespace applies from the next scrape on.
//
// # Namespaces and subsystems that come and go
//
// Every scrape reports what is served at that moment: a namespace or subsystem added at
// run time appears in the next scrape, and one removed disappears from it with its
// counters (they are not carried over: a namespace added again under the same NSID starts
// from zero, which Prometheus's rate() and increase() treat as a counter reset).
package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/server"
)

// Path is where the metrics are served.
const Path = "/metrics"

// ProfilePath is where the Go runtime's profiles are served with WithProfiling.
const ProfilePath = "/debug/pprof/"

// Option configures Start.
type Option func(*options)

type options struct {
	profiling bool
	logDrops  func() uint64
	reloads   func() Reloads
}

// Series per namespace (see "Series per namespace"), without error counters.
const (
	// NamespaceHistogramSeries are the series of a namespace's latency histograms.
	NamespaceHistogramSeries = int(target.NumIOClasses) * (target.LatencyBuckets + 3)
	// NamespaceSeries are all of a namespace's series: capacity, failed, commands per
	// class, bytes read and written, and the histograms.
	NamespaceSeries = 2 + int(target.NumIOClasses) + 2 + NamespaceHistogramSeries
)

// Reloads is what a serving process tells of its configuration reloads (gonvmf serve's
// on SIGHUP), for WithReloads.
type Reloads struct {
	// Succeeded and Failed count the reloads since the process started: those applied,
	// and those refused or failed (an invalid file, a change that needs a restart, a step
	// that failed and was undone), which changed nothing.
	Succeeded, Failed uint64
	// LastFailed is whether the last reload failed (false before the first).
	LastFailed bool
	// LastSuccess is when the configuration was last loaded: by the last reload that
	// succeeded, or at the start.
	LastSuccess time.Time
}

// WithReloads also serves, read from reloads when scraped, the configuration reloads
// (the names and meanings of Prometheus's and Alertmanager's own):
// gonvmf_config_reloads_total{result="success"|"failure"},
// gonvmf_config_last_reload_successful (0 after a failed reload: alert on it) and
// gonvmf_config_last_reload_success_timestamp_seconds.
func WithReloads(reloads func() Reloads) Option { return func(o *options) { o.reloads = reloads } }

// WithLogDrops also serves gonvmf_log_lines_dropped_total, read from dropped when scraped:
// the log lines the process dropped because its log's destination did not take them (serve
// logs through an asynclog.Writer, whose Dropped this is meant for).
func WithLogDrops(dropped func() uint64) Option { return func(o *options) { o.logDrops = dropped } }

// WithProfiling also serves the Go runtime's profiles (net/http/pprof: CPU and heap
// profiles, goroutines, execution traces) at ProfilePath (conf.Metrics.Profiling). A CPU
// profile or trace costs CPU while it is taken.
func WithProfiling() Option { return func(o *options) { o.profiling = true } }

// Server serves the metrics over HTTP.
type Server struct {
	log  *slog.Logger
	srv  *server.Server
	ln   net.Listener
	hs   *http.Server
	done chan struct{}
}

// Start serves srv's metrics over HTTP on address (host:port; ":9469" for every address,
// port 0 for any free port: see Addr) at Path, and turns the target's latency histograms
// on. The process's Go runtime and process metrics (go_*, process_*) are served with them.
func Start(srv *server.Server, address string, log *slog.Logger, opts ...Option) (*Server, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if log == nil {
		log = slog.Default()
	}
	if address == "" {
		return nil, errors.New("metrics: no address to listen on")
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewCollector(srv)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.logDrops != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gonvmf_log_lines_dropped_total",
			Help: "Log lines dropped because the log's destination did not take them fast enough.",
		}, func() float64 { return float64(o.logDrops()) }))
	}
	if o.reloads != nil {
		reg.MustRegister(reloadCollector(o.reloads))
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("metrics: listening on %s: %w", address, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError), ErrorHandling: promhttp.ContinueOnError,
		Timeout: 30 * time.Second,
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "gonvmf: Prometheus metrics at %s\n", Path)
		if o.profiling {
			fmt.Fprintf(w, "gonvmf: Go runtime profiles at %s\n", ProfilePath)
		}
	})
	// Importing net/http/pprof also registers its handlers on http.DefaultServeMux, which
	// gonvmf never serves: the profiles are reachable only through this mux.
	if o.profiling {
		mux.HandleFunc(ProfilePath, pprof.Index) // and the named profiles under it
		mux.HandleFunc(ProfilePath+"cmdline", pprof.Cmdline)
		mux.HandleFunc(ProfilePath+"profile", pprof.Profile)
		mux.HandleFunc(ProfilePath+"symbol", pprof.Symbol)
		mux.HandleFunc(ProfilePath+"trace", pprof.Trace)
	}
	m := &Server{
		log: log.With("component", "metrics"), srv: srv, ln: ln, done: make(chan struct{}),
		hs: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
	}
	srv.Target().MeasureLatency(true)
	go func() {
		defer close(m.done)
		if err := m.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("serving metrics failed", "addr", ln.Addr().String(), "err", err)
		}
	}()
	m.log.Info("serving Prometheus metrics", "url", "http://"+ln.Addr().String()+Path)
	if o.profiling {
		m.log.Info("serving Go runtime profiles", "url", "http://"+ln.Addr().String()+ProfilePath)
	}
	return m, nil
}

// Addr is the address the metrics are served on.
func (m *Server) Addr() net.Addr { return m.ln.Addr() }

// Close stops serving (scrapes in progress are cut off) and turns the latency histograms
// off.
func (m *Server) Close() error {
	err := m.hs.Close()
	<-m.done
	m.srv.Target().MeasureLatency(false)
	return err
}

// reloadCollector serves a Reloads, read at each scrape.
type reloadCollector func() Reloads

var (
	reloadsTotal = desc("config_reloads_total", "Configuration reloads (SIGHUP) since the process started, by result: success (applied) or failure (refused or undone: nothing changed).",
		"result")
	reloadLastOK = desc("config_last_reload_successful", "1 when the last configuration reload succeeded (or none was made), 0 when it failed and the target runs a configuration other than its file's.")
	reloadLastAt = desc("config_last_reload_success_timestamp_seconds", "When the configuration was last loaded, by a successful reload or at the start, in seconds since the Unix epoch.")
)

func (c reloadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- reloadsTotal
	ch <- reloadLastOK
	ch <- reloadLastAt
}

func (c reloadCollector) Collect(ch chan<- prometheus.Metric) {
	r := c()
	ch <- prometheus.MustNewConstMetric(reloadsTotal, prometheus.CounterValue, float64(r.Succeeded), "success")
	ch <- prometheus.MustNewConstMetric(reloadsTotal, prometheus.CounterValue, float64(r.Failed), "failure")
	ok := 1.0
	if r.LastFailed {
		ok = 0
	}
	ch <- prometheus.MustNewConstMetric(reloadLastOK, prometheus.GaugeValue, ok)
	ch <- prometheus.MustNewConstMetric(reloadLastAt, prometheus.GaugeValue, float64(r.LastSuccess.UnixNano())/1e9)
}

// Collector is a prometheus.Collector of a server.Server's counters, read at each scrape.
type Collector struct {
	srv *server.Server
}

// NewCollector returns the Collector of srv. Each scrape serves the namespaces' latency
// histograms (gonvmf_namespace_command_duration_seconds, NamespaceHistogramSeries series
// per namespace) unless srv's running metrics.per_namespace is conf.MetricsCounters. It
// does not turn latency measurement on (Start does; see target.Target.MeasureLatency):
// without it the histograms stay empty.
func NewCollector(srv *server.Server) *Collector { return &Collector{srv: srv} }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("gonvmf_"+name, help, labels, nil)
}

var (
	nsLabels = []string{"subsystem", "nsid"}
	pgLabels = []string{"device", "group"}

	nsCommands = desc("namespace_commands_total", "I/O commands completed on the namespace, errors included, by class: read (Read, Compare), write, flush, other (Write Zeroes, Dataset Management).",
		append(nsLabels, "op")...)
	nsBytes = desc("namespace_bytes_total", "Bytes read (Read, Compare) and written by the namespace's successful commands.",
		append(nsLabels, "op")...)
	nsErrors = desc("namespace_errors_total", "I/O commands completed on the namespace with an error, by class and NVMe status.",
		append(nsLabels, "op", "status")...)
	nsLatency = desc("namespace_command_duration_seconds", "Time from a command's arrival at the target core to its completion, by class.",
		append(nsLabels, "op")...)
	nsCapacity = desc("namespace_capacity_bytes", "The namespace's capacity (Identify NSZE times the LBA size).", nsLabels...)
	nsFailed   = desc("namespace_failed", "1 when a sync of the namespace's backend failed (writes reported complete may be lost): writes and flushes get Write Fault until it is reopened (gonvmf ctl ns reopen); 0 otherwise.", nsLabels...)

	subControllers = desc("subsystem_controllers", "Controllers connected to the subsystem (host associations).", "subsystem")
	subQueues      = desc("subsystem_queues", "Queues connected to the subsystem's controllers, by type (admin, io).", "subsystem", "type")
	subErrors      = desc("subsystem_errors_total", "Commands on the subsystem's I/O queues that failed before reaching a namespace (no such namespace, a malformed command, a queue going away), by class and NVMe status.",
		"subsystem", "op", "status")

	pgQueuePairs  = desc("poll_group_queue_pairs", "RDMA queue pairs the poll group serves.", pgLabels...)
	pgPolls       = desc("poll_group_polls_total", "Completion queue polls of the poll group.", pgLabels...)
	pgIdlePolls   = desc("poll_group_idle_polls_total", "Polling rounds of the poll group that found nothing to do.", pgLabels...)
	pgCompletions = desc("poll_group_completions_total", "Work completions the poll group processed.", pgLabels...)
	pgSleeps      = desc("poll_group_sleeps_total", "Times the poll group slept on its completion channel.", pgLabels...)
	pgWakeups     = desc("poll_group_wakeups_total", "Sleeps of the poll group ended by a completion event.", pgLabels...)
	pgReadWaits   = desc("poll_group_read_credit_waits_total", "Commands that waited for an RDMA READ credit (the host's responder resources).", pgLabels...)
	pgSendWaits   = desc("poll_group_send_queue_waits_total", "Responses that waited for room in a send queue.", pgLabels...)
	pgStalled     = desc("poll_group_stalled_queue_teardowns_total", "Queues torn down because their responses made no progress: for limits.response_timeout (response_timeout), or for seconds while holding more than their share of the buffer pool as others waited (share_reclaim).",
		append(pgLabels, "reason")...)

	poolSize   = desc("buffer_pool_size_bytes", "Size of the device's registered data buffer pool.", "device")
	poolInUse  = desc("buffer_pool_in_use_bytes", "Bytes of the buffer pool held by commands now.", "device")
	poolPeak   = desc("buffer_pool_in_use_peak_bytes", "The most bytes of the buffer pool in use at once since the device was set up.", "device")
	poolWaits  = desc("buffer_pool_waits_total", "Commands that waited for buffer pool memory.", "device")
	poolClosed = desc("buffer_pool_held_by_closed_queues_bytes", "Bytes of the buffer pool held by closed I/O queues (commands stuck in a backend): out of the live queues' fair shares until they come back.", "device")

	stuckQueues = desc("stuck_queues", "Closed queues whose commands are still executing in a backend (a hung disk or network file system): each still counts against limits.max_queues and its host's limits, and holds the memory its commands use, until they complete.")

	rdmaRejects    = desc("rdma_connect_rejects_total", "RDMA connection requests rejected, by nvme-rdma reject status.", "reason")
	connectRejects = desc("connect_rejects_total", "Queues refused by the target: Connect commands failed, or in-band authentication failed, by reason.", "reason")
)

var allDescs = []*prometheus.Desc{
	nsCommands, nsBytes, nsErrors, nsLatency, nsCapacity, nsFailed,
	subControllers, subQueues, subErrors,
	pgQueuePairs, pgPolls, pgIdlePolls, pgCompletions, pgSleeps, pgWakeups, pgReadWaits, pgSendWaits, pgStalled,
	poolSize, poolInUse, poolPeak, poolWaits, poolClosed,
	stuckQueues, rdmaRejects, connectRejects,
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// latencyBounds are the histogram's upper bounds in seconds.
var latencyBounds = func() []float64 {
	b := make([]float64, target.LatencyBuckets)
	for i := range b {
		b[i] = float64(target.LatencyBound(i)) / 1e9 // exact decimal text: 1.31072, not Seconds()' 1.3107199999999999
	}
	return b
}()

// Collect implements prometheus.Collector: it reads every counter once.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	t := c.srv.Target()
	noNSHist := t.MetricsPerNamespace() == conf.MetricsCounters // once: every namespace of a scrape alike
	for _, ns := range t.Namespaces() {
		sub, nsid := ns.Subsystem, strconv.FormatUint(uint64(ns.NSID), 10)
		gauge(nsCapacity, float64(ns.Blocks)*float64(ns.LBASize), sub, nsid)
		failed := 0.0
		if ns.Failure != nil {
			failed = 1
		}
		gauge(nsFailed, failed, sub, nsid)
		for cl := range target.NumIOClasses {
			io := &ns.IO[cl]
			op := cl.String()
			counter(nsCommands, io.Commands, sub, nsid, op)
			if cl == target.IORead || cl == target.IOWrite {
				counter(nsBytes, io.Bytes, sub, nsid, op)
			}
			if noNSHist {
				continue
			}
			h := &io.Latency
			buckets := make(map[float64]uint64, len(latencyBounds))
			var cum uint64
			for i, le := range latencyBounds {
				cum += h.Buckets[i]
				buckets[le] = cum
			}
			ch <- prometheus.MustNewConstHistogram(nsLatency, h.Count, h.Sum.Seconds(), buckets, sub, nsid, op)
		}
		for _, e := range ns.Errors {
			counter(nsErrors, e.Count, sub, nsid, e.Class.String(), target.StatusLabel(e.Status))
		}
	}
	for _, s := range t.Subsystems() {
		gauge(subControllers, float64(s.Controllers), s.NQN)
		gauge(subQueues, float64(s.AdminQueues), s.NQN, "admin")
		gauge(subQueues, float64(s.IOQueues), s.NQN, "io")
		for _, e := range s.IOErrors {
			counter(subErrors, e.Count, s.NQN, e.Class.String(), target.StatusLabel(e.Status))
		}
	}
	gauge(stuckQueues, float64(t.StuckQueues()))
	for r, n := range t.ConnectRejects() {
		counter(connectRejects, n, target.ConnectReject(r).String())
	}

	waits := map[string]uint64{}
	for _, g := range c.srv.GroupStats() {
		group := strconv.Itoa(g.Group)
		gauge(pgQueuePairs, float64(g.Connections), g.Device, group)
		counter(pgPolls, g.Polls, g.Device, group)
		counter(pgIdlePolls, g.IdlePolls, g.Device, group)
		counter(pgCompletions, g.Completions, g.Device, group)
		counter(pgSleeps, g.Sleeps, g.Device, group)
		counter(pgWakeups, g.Wakeups, g.Device, group)
		counter(pgReadWaits, g.ReadWaits, g.Device, group)
		counter(pgSendWaits, g.SendWaits, g.Device, group)
		counter(pgStalled, g.ResponseTimeouts, g.Device, group, "response_timeout")
		counter(pgStalled, g.ShareReclaims, g.Device, group, "share_reclaim")
		waits[g.Device] += g.BufferWaits
	}
	for _, p := range c.srv.PoolStats() {
		gauge(poolSize, float64(p.TotalBytes), p.Device)
		gauge(poolInUse, float64(p.TotalBytes-p.FreeBytes), p.Device)
		gauge(poolPeak, float64(p.TotalBytes-p.LowestBytes), p.Device)
		counter(poolWaits, waits[p.Device], p.Device)
		gauge(poolClosed, float64(p.ClosedHeldBytes), p.Device)
	}
	for _, r := range c.srv.Rejects() {
		counter(rdmaRejects, r.Count, r.Reason)
	}
}
