package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
	"github.com/gonvmf/gonvmf/target/metrics"
	"github.com/gonvmf/gonvmf/target/server"
)

const (
	subNQN  = "nqn.2024-01.io.gonvmf:metrics"
	hostNQN = "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// loopServer serves two namespaces in-process (a 1 MiB memory one, a read-only null one)
// and its metrics on a free port.
func loopServer(t *testing.T, opts ...metrics.Option) (*server.Server, *metrics.Server) {
	t.Helper()
	return loopServerWith(t, conf.Metrics{}, opts...)
}

// loopServerWith is loopServer whose configuration has the metrics section mc (its
// address is not where the metrics are served: that is a free port).
func loopServerWith(t *testing.T, mc conf.Metrics, opts ...metrics.Option) (*server.Server, *metrics.Server) {
	t.Helper()
	cfg := &conf.Config{
		Metrics:   mc,
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: subNQN, AllowAnyHost: true, Namespaces: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20},
			{NSID: 2, Backend: conf.BackendNull, Size: 1 << 30, ReadOnly: true},
		}}},
		Transport: conf.Transport{InCapsuleDataSize: conf.DefaultInCapsuleDataSize, MaxIOQueues: 2},
	}
	s, err := server.New(cfg, server.Options{Loop: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m, err := metrics.Start(s, "127.0.0.1:0", quiet, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return s, m
}

func dial(t *testing.T, s *server.Server, nqn string) (*initiator.Controller, error) {
	c, err := initiator.Dial(ctx(t), initiator.Options{Transport: initiator.TransportLoop, SubNQN: nqn, HostNQN: hostNQN, Logger: quiet,
		Queues: 2, Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// scrape fetches and parses the metrics.
func scrape(t *testing.T, m *metrics.Server) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + m.Addr().String() + metrics.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", metrics.Path, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// find returns the metric of family name whose labels include want, or nil.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m == nil:
		return math.NaN()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return math.NaN()
}

type L = map[string]string

func ns(nsid, op string) L { return L{"subsystem": subNQN, "nsid": nsid, "op": op} }

// TestScrape: known I/O through the loop transport shows in the scraped metrics with its
// names, labels and values: commands and bytes by class, errors by status, latency
// histograms (buckets from 10 µs), connections per subsystem and refused connections.
func TestScrape(t *testing.T) {
	s, m := loopServer(t)
	c, err := dial(t, s, subNQN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, s, subNQN+"-nope"); err == nil {
		t.Fatal("connected to an unknown subsystem")
	}
	n1, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := c.Namespace(2)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for i := range 8 {
		if _, err := n1.WriteAt(ctx(t), buf, int64(i)*4096, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := n1.ReadAt(ctx(t), buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := n1.WriteZeroes(ctx(t), 0, 8, 0); err != nil {
		t.Fatal(err)
	}
	b, err := c.GetBuffer(ctx(t), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Read(ctx(t), b, 1<<20); err == nil { // past the end
		t.Fatal("read past the end succeeded")
	}
	b.Release()
	for range 2 {
		if _, err := n2.WriteAt(ctx(t), buf, 0, 0); err == nil {
			t.Fatal("wrote a read-only namespace")
		}
	}

	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels L
		want   float64
	}{
		{"gonvmf_namespace_commands_total", ns("1", "write"), 8},
		{"gonvmf_namespace_commands_total", ns("1", "read"), 6},
		{"gonvmf_namespace_commands_total", ns("1", "flush"), 1},
		{"gonvmf_namespace_commands_total", ns("1", "other"), 1},
		{"gonvmf_namespace_commands_total", ns("2", "write"), 2},
		{"gonvmf_namespace_bytes_total", ns("1", "write"), 8 * 4096},
		{"gonvmf_namespace_bytes_total", ns("1", "read"), 5 * 4096},
		{"gonvmf_namespace_bytes_total", ns("2", "write"), 0},
		{"gonvmf_namespace_errors_total", L{"nsid": "1", "op": "read", "status": "lba_out_of_range"}, 1},
		{"gonvmf_namespace_errors_total", L{"nsid": "2", "op": "write", "status": "namespace_is_write_protected"}, 2},
		{"gonvmf_namespace_capacity_bytes", L{"subsystem": subNQN, "nsid": "2"}, 1 << 30},
		{"gonvmf_subsystem_controllers", L{"subsystem": subNQN}, 1},
		{"gonvmf_subsystem_queues", L{"subsystem": subNQN, "type": "admin"}, 1},
		{"gonvmf_subsystem_queues", L{"subsystem": subNQN, "type": "io"}, 2},
		{"gonvmf_subsystem_controllers", L{"subsystem": nvmeproto.DiscoveryNQN}, 0},
		{"gonvmf_connect_rejects_total", L{"reason": "unknown_subsystem"}, 1},
		{"gonvmf_connect_rejects_total", L{"reason": "host_not_allowed"}, 0},
	} {
		if got := value(find(fams, c.name, c.labels)); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if find(fams, "gonvmf_namespace_errors_total", L{"nsid": "1", "op": "write"}) != nil {
		t.Errorf("write errors on namespace 1")
	}
	for _, f := range []string{"gonvmf_poll_group_polls_total", "gonvmf_buffer_pool_size_bytes", "gonvmf_rdma_connect_rejects_total"} {
		if fams[f] != nil {
			t.Errorf("%s served in-process (no RDMA transport)", f)
		}
	}
	if fams["go_goroutines"] == nil || fams["process_cpu_seconds_total"] == nil {
		t.Errorf("no Go or process metrics")
	}

	// The latency histograms: buckets from 10 µs, doubling; as many observations as
	// commands (Start turned the measurement on before any I/O).
	h := find(fams, "gonvmf_namespace_command_duration_seconds", ns("1", "write"))
	if h == nil || h.Histogram == nil {
		t.Fatalf("no write latency histogram: %v", fams["gonvmf_namespace_command_duration_seconds"])
	}
	hist := h.Histogram
	if hist.GetSampleCount() != 8 || hist.GetSampleSum() <= 0 || hist.GetSampleSum() > 8*5 {
		t.Errorf("histogram count %d sum %v", hist.GetSampleCount(), hist.GetSampleSum())
	}
	bk := hist.Bucket // the text format lists +Inf last
	if len(bk) != target.LatencyBuckets+1 || bk[0].GetUpperBound() != 10e-6 || bk[1].GetUpperBound() != 20e-6 ||
		bk[target.LatencyBuckets-1].GetUpperBound() != 10.48576 || !math.IsInf(bk[target.LatencyBuckets].GetUpperBound(), 1) {
		t.Fatalf("buckets %v", bk)
	}
	for i := 1; i < len(bk); i++ {
		if bk[i].GetCumulativeCount() < bk[i-1].GetCumulativeCount() ||
			i < target.LatencyBuckets && math.Abs(bk[i].GetUpperBound()/bk[i-1].GetUpperBound()-2) > 1e-9 {
			t.Errorf("bucket %d: %v after %v", i, bk[i], bk[i-1])
		}
	}
	if bk[target.LatencyBuckets].GetCumulativeCount() != 8 {
		t.Errorf("+Inf bucket %v", bk[target.LatencyBuckets])
	}
	if r := find(fams, "gonvmf_namespace_command_duration_seconds", ns("1", "read")); r.GetHistogram().GetSampleCount() != 6 {
		t.Errorf("read histogram %v", r)
	}

	// Type and help of every gonvmf metric, and the Prometheus naming rules.
	for name, f := range fams {
		if !strings.HasPrefix(name, "gonvmf_") {
			continue
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
		counter := strings.HasSuffix(name, "_total")
		if counter != (f.GetType() == dto.MetricType_COUNTER) {
			t.Errorf("%s is a %v", name, f.GetType())
		}
	}
	problems, err := testutil.CollectAndLint(metrics.NewCollector(s))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestSeriesPerNamespace counts the series a scrape exports of each namespace, with the
// latency histograms (no metrics section, or metrics.per_namespace: full) and without
// them (metrics.per_namespace: counters): 104 and 8. Without them the counters still count.
func TestSeriesPerNamespace(t *testing.T) {
	for _, c := range []struct {
		name  string
		mc    conf.Metrics
		want  int
		hists bool
	}{
		{"default", conf.Metrics{}, 104, true},
		{"full", conf.Metrics{Address: "127.0.0.1:9469", PerNamespace: conf.MetricsFull}, metrics.NamespaceSeries, true},
		{"counters", conf.Metrics{Address: "127.0.0.1:9469", PerNamespace: conf.MetricsCounters}, 8, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, m := loopServerWith(t, c.mc)
			ctl, err := dial(t, s, subNQN)
			if err != nil {
				t.Fatal(err)
			}
			n1, err := ctl.Namespace(1)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			if _, err := n1.WriteAt(ctx(t), buf, 0, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := n1.ReadAt(ctx(t), buf, 0); err != nil {
				t.Fatal(err)
			}
			series := nsSeries(t, m)
			for _, nsid := range []string{"1", "2"} {
				if series[nsid] != c.want {
					t.Errorf("namespace %s: %d series, want %d", nsid, series[nsid], c.want)
				}
			}
			t.Logf("%s: %d series per namespace", c.name, series["1"])
			fams := scrape(t, m)
			if got := fams["gonvmf_namespace_command_duration_seconds"] != nil; got != c.hists {
				t.Errorf("latency histograms served: %v, want %v", got, c.hists)
			}
			if got := value(find(fams, "gonvmf_namespace_commands_total", ns("1", "write"))); got != 1 {
				t.Errorf("namespace 1: %v writes, want 1", got)
			}
			if got := value(find(fams, "gonvmf_namespace_bytes_total", ns("1", "read"))); got != 4096 {
				t.Errorf("namespace 1: %v bytes read, want 4096", got)
			}
		})
	}
	if want := 104 - 8; metrics.NamespaceHistogramSeries != want {
		t.Errorf("NamespaceHistogramSeries = %d, want %d", metrics.NamespaceHistogramSeries, want)
	}
}

// nsSeries scrapes m and counts the series of namespaces 1 and 2 of subNQN, by NSID.
func nsSeries(t *testing.T, m *metrics.Server) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + m.Addr().String() + metrics.Path)
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "#") || !strings.Contains(line, `subsystem="`+subNQN+`"`) {
			continue
		}
		for _, nsid := range []string{"1", "2"} {
			if strings.Contains(line, `nsid="`+nsid+`"`) {
				series[nsid]++
			}
		}
	}
	return series
}

// TestPerNamespaceReload: a reload that changes metrics.per_namespace is applied while the
// target runs — the next scrape exports 8 series per namespace after full → counters and
// 104 after counters → full, and the running configuration says so — and a reload whose
// later step fails undoes it with the rest. A reload that changes the address is still
// refused.
func TestPerNamespaceReload(t *testing.T) {
	s, m := loopServerWith(t, conf.Metrics{Address: "127.0.0.1:9469", PerNamespace: conf.MetricsFull})
	expect := func(when string, level string, want int) {
		t.Helper()
		series := nsSeries(t, m)
		for _, nsid := range []string{"1", "2"} {
			if series[nsid] != want {
				t.Errorf("%s: namespace %s: %d series, want %d", when, nsid, series[nsid], want)
			}
		}
		if got := s.Config().Metrics.PerNamespace; got != level {
			t.Errorf("%s: running per_namespace %q, want %q", when, got, level)
		}
	}
	expect("at start", conf.MetricsFull, metrics.NamespaceSeries)

	reload := func(level string) {
		t.Helper()
		next := s.Config()
		next.Metrics.PerNamespace = level
		changes, err := s.Reload(next)
		if err != nil {
			t.Fatalf("reload to per_namespace %s: %v", level, err)
		}
		if len(changes) != 1 || !strings.Contains(changes[0], "metrics.per_namespace") {
			t.Errorf("reload to per_namespace %s: changes %q, want the one of metrics.per_namespace", level, changes)
		}
	}
	reload(conf.MetricsCounters)
	expect("after full → counters", conf.MetricsCounters, 8)
	reload(conf.MetricsFull)
	expect("after counters → full", conf.MetricsFull, 104)

	// A later step fails (a file namespace whose directory does not exist): the change of
	// per_namespace is undone with the reload.
	next := s.Config()
	next.Metrics.PerNamespace = conf.MetricsCounters
	next.Subsystems[0].Namespaces = append(next.Subsystems[0].Namespaces, conf.Namespace{NSID: 9, Backend: conf.BackendFile,
		Path: filepath.Join(t.TempDir(), "no", "such", "dir.img"), Size: 1 << 20})
	if _, err := s.Reload(next); err == nil || !strings.Contains(err.Error(), "add namespace 9") {
		t.Fatalf("reload whose namespace 9 cannot be created: %v, want its step's error", err)
	}
	expect("after the undone reload", conf.MetricsFull, metrics.NamespaceSeries)

	next = s.Config()
	next.Metrics.Address, next.Metrics.PerNamespace = "127.0.0.1:9470", conf.MetricsCounters
	if _, err := s.Reload(next); err == nil || !strings.Contains(err.Error(), `metrics.address: "127.0.0.1:9469" → "127.0.0.1:9470"`) ||
		strings.Contains(err.Error(), "metrics.per_namespace") {
		t.Errorf("reload of another metrics address: %v, want it refused for the address alone", err)
	}
	expect("after the refused reload", conf.MetricsFull, metrics.NamespaceSeries)

	// Closed, the endpoint follows reloads no more; they still apply to the configuration.
	m.Close()
	reload(conf.MetricsCounters)
	if got := s.Config().Metrics.PerNamespace; got != conf.MetricsCounters {
		t.Errorf("reload after the endpoint closed: per_namespace %q, want %q", got, conf.MetricsCounters)
	}
}

// TestNamespacesComeAndGo: a namespace added at run time appears in the next scrape,
// one removed disappears with its counters, and added again it counts from zero; the
// same for subsystems.
func TestNamespacesComeAndGo(t *testing.T) {
	s, m := loopServer(t)
	c, err := dial(t, s, subNQN)
	if err != nil {
		t.Fatal(err)
	}
	n1, _ := c.Namespace(1)
	if _, err := n1.WriteAt(ctx(t), make([]byte, 4096), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNamespace(subNQN, conf.Namespace{NSID: 3, Backend: conf.BackendMemory, Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := value(find(scrape(t, m), "gonvmf_namespace_commands_total", ns("3", "read"))); got != 0 {
		t.Errorf("added namespace 3: %v", got)
	}
	if err := s.RemoveNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, m)
	if find(fams, "gonvmf_namespace_commands_total", L{"nsid": "1"}) != nil ||
		find(fams, "gonvmf_namespace_command_duration_seconds", L{"nsid": "1"}) != nil {
		t.Errorf("removed namespace 1 still served")
	}
	if err := s.AddNamespace(subNQN, conf.Namespace{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := value(find(scrape(t, m), "gonvmf_namespace_commands_total", ns("1", "write"))); got != 0 {
		t.Errorf("namespace 1 added again: %v writes", got)
	}

	other := subNQN + "-2"
	if err := s.AddSubsystem(conf.Subsystem{NQN: other, AllowAnyHost: true,
		Namespaces: []conf.Namespace{{NSID: 7, Backend: conf.BackendNull, Size: 1 << 20}}}); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, m)
	if find(fams, "gonvmf_subsystem_controllers", L{"subsystem": other}) == nil ||
		find(fams, "gonvmf_namespace_commands_total", L{"subsystem": other, "nsid": "7"}) == nil {
		t.Errorf("added subsystem not served")
	}
	if err := s.RemoveSubsystem(other); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, m)
	if find(fams, "gonvmf_subsystem_controllers", L{"subsystem": other}) != nil ||
		find(fams, "gonvmf_namespace_commands_total", L{"subsystem": other}) != nil {
		t.Errorf("removed subsystem still served")
	}
}

func TestStatusLabel(t *testing.T) {
	for st, want := range map[nvmeproto.Status]string{
		nvmeproto.StatusLBAOutOfRange:                   "lba_out_of_range",
		nvmeproto.StatusLBAOutOfRange.WithDNR():         "lba_out_of_range",
		nvmeproto.StatusInvalidNamespace:                "invalid_namespace_or_format",
		nvmeproto.StatusAbortSQDeletion:                 "command_aborted_due_to_sq_deletion",
		nvmeproto.MakeStatus(nvmeproto.SCTVendor, 0xC1): "sct_7_sc_0xc1",
		target.ErrorOverflow:                            "other",
	} {
		if got := target.StatusLabel(st); got != want {
			t.Errorf("StatusLabel(%#x) = %q, want %q", uint16(st), got, want)
		}
	}
}

// TestStartClose: Start measures latency until Close; a bad address is an error that
// names it.
func TestStartClose(t *testing.T) {
	s, m := loopServer(t)
	resp, err := http.Get("http://" + m.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), metrics.Path) {
		t.Errorf("index page %q", body)
	}
	if _, err := metrics.Start(s, m.Addr().String(), quiet); err == nil || !strings.Contains(err.Error(), m.Addr().String()) {
		t.Errorf("second Start on %s: %v", m.Addr(), err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := dial(t, s, subNQN)
	if err != nil {
		t.Fatal(err)
	}
	n1, _ := c.Namespace(1)
	if _, err := n1.WriteAt(ctx(t), make([]byte, 4096), 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Target().Namespaces() {
		if n.NSID == 1 && (n.IO[target.IOWrite].Commands != 1 || n.IO[target.IOWrite].Latency.Count != 0) {
			t.Errorf("after Close: %+v", n.IO[target.IOWrite])
		}
	}
	if _, err := http.Get("http://" + m.Addr().String() + metrics.Path); err == nil {
		t.Errorf("still serving after Close")
	}
}

// TestNamespaceFailedGauge: gonvmf_namespace_failed is 0 for a healthy namespace, 1 once a
// flush's fdatasync failed (EIO injected into a real file backend), next to the Write
// Fault the flush counted, and 0 again after ReopenNamespace.
func TestNamespaceFailedGauge(t *testing.T) {
	f := &backend.Faults{}
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: subNQN, AllowAnyHost: true, Namespaces: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendFile, Path: filepath.Join(t.TempDir(), "f"), Size: 1 << 20},
		}}},
		Transport: conf.Transport{InCapsuleDataSize: conf.DefaultInCapsuleDataSize},
	}
	s, err := server.New(cfg, server.Options{Loop: true, Logger: quiet, Target: []target.Option{
		target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
			spec.Faults = f
			return backend.Open(spec)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m, err := metrics.Start(s, "127.0.0.1:0", quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	c, err := dial(t, s, subNQN)
	if err != nil {
		t.Fatal(err)
	}
	n1, _ := c.Namespace(1)
	id := L{"subsystem": subNQN, "nsid": "1"}
	if v := value(find(scrape(t, m), "gonvmf_namespace_failed", id)); v != 0 {
		t.Errorf("healthy namespace: gonvmf_namespace_failed %v, want 0", v)
	}
	f.FailSyncs(syscall.EIO)
	if err := n1.Flush(ctx(t)); err == nil {
		t.Fatal("flush succeeded with fdatasync failing")
	}
	fams := scrape(t, m)
	if v := value(find(fams, "gonvmf_namespace_failed", id)); v != 1 {
		t.Errorf("after a failed flush: gonvmf_namespace_failed %v, want 1", v)
	}
	if v := value(find(fams, "gonvmf_namespace_errors_total", L{"nsid": "1", "op": "flush", "status": "write_fault"})); v != 1 {
		t.Errorf("flush write faults counted: %v, want 1", v)
	}
	if err := s.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	if v := value(find(scrape(t, m), "gonvmf_namespace_failed", id)); v != 0 {
		t.Errorf("after the reopen: gonvmf_namespace_failed %v, want 0", v)
	}
}

// TestStuckQueuesGauge: gonvmf_stuck_queues counts a queue that closed while a read was
// stuck in its backend, until the read completes.
func TestStuckQueuesGauge(t *testing.T) {
	gate := make(chan struct{})
	in := make(chan struct{}, 1)
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: subNQN, AllowAnyHost: true, Namespaces: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendMemory, Size: 1 << 20},
		}}},
		Transport: conf.Transport{InCapsuleDataSize: conf.DefaultInCapsuleDataSize},
	}
	s, err := server.New(cfg, server.Options{Loop: true, Logger: quiet, Target: []target.Option{
		target.WithQueueCloseTimeout(100 * time.Millisecond),
		target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
			b, err := backend.Open(spec)
			if err != nil {
				return nil, err
			}
			return &gatedReads{Backend: b, gate: gate, in: in}, nil
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m, err := metrics.Start(s, "127.0.0.1:0", quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var conns []*loop.Conn // the controller's: the admin queue, then its one I/O queue
	c, err := initiator.Dial(ctx(t), initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: hostNQN, Logger: quiet,
		Queues: 1, Loop: func(depth int) (initiator.LoopConn, error) {
			lc, err := s.Loop().Dial(depth)
			if err == nil {
				conns = append(conns, lc)
			}
			return lc, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	n1, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	if v := value(find(scrape(t, m), "gonvmf_stuck_queues", nil)); v != 0 {
		t.Errorf("gonvmf_stuck_queues %v before any queue closed, want 0", v)
	}
	read := make(chan error, 1)
	go func() {
		_, err := n1.ReadAt(ctx(t), make([]byte, 4096), 0)
		read <- err
	}()
	select {
	case <-in:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never reached the backend")
	}
	conns[len(conns)-1].Close() // the I/O queue goes; Close gives up on the read after 100 ms
	if v := value(find(scrape(t, m), "gonvmf_stuck_queues", nil)); v != 1 {
		close(gate)
		t.Fatalf("gonvmf_stuck_queues %v with a queue closed on a stuck read, want 1", v)
	}
	close(gate)
	<-read
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := value(find(scrape(t, m), "gonvmf_stuck_queues", nil))
		if v == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gonvmf_stuck_queues %v 10 s after the stuck read completed, want 0", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gatedReads holds reads until gate closes, signalling in when one arrives.
type gatedReads struct {
	backend.Backend
	gate chan struct{}
	in   chan struct{}
}

func (b *gatedReads) ReadBlocks(buf []byte, slba uint64) error {
	select {
	case b.in <- struct{}{}:
	default:
	}
	<-b.gate
	return b.Backend.ReadBlocks(buf, slba)
}

func (b *gatedReads) Info() backend.Info {
	i := backend.Describe(b.Backend)
	i.Inline = false // through the executor's workers, as a file would
	return i
}

// TestProfiling: with WithProfiling the Go runtime's profiles are served under
// ProfilePath next to the metrics (the index, a goroutine dump, a short CPU profile, the
// command line); without it, nothing is served there.
func TestProfiling(t *testing.T) {
	s, plain := loopServer(t)
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("http://" + plain.Addr().String() + metrics.ProfilePath); code != http.StatusNotFound {
		t.Errorf("without profiling: %s answered %d, want 404", metrics.ProfilePath, code)
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.Start(s, "127.0.0.1:0", quiet, metrics.WithProfiling())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	base := "http://" + m.Addr().String()
	for _, c := range []struct{ path, want string }{
		{"/", metrics.ProfilePath},
		{metrics.ProfilePath, "goroutine"},
		{metrics.ProfilePath + "goroutine?debug=1", "TestProfiling"},
		{metrics.ProfilePath + "cmdline", ""},
		{metrics.ProfilePath + "profile?seconds=1", ""},
		{metrics.Path, "gonvmf_"},
	} {
		code, body := get(base + c.path)
		if code != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("%s: status %d, body without %q (%d bytes)", c.path, code, c.want, len(body))
		}
	}
}

// TestLogDrops: WithLogDrops serves the count its function returns when scraped.
func TestLogDrops(t *testing.T) {
	s, plain := loopServer(t)
	if _, ok := scrape(t, plain)["gonvmf_log_lines_dropped_total"]; ok {
		t.Error("gonvmf_log_lines_dropped_total served without WithLogDrops")
	}
	var n atomic.Uint64
	m, err := metrics.Start(s, "127.0.0.1:0", quiet, metrics.WithLogDrops(n.Load))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, want := range []uint64{0, 7} {
		n.Store(want)
		mf := scrape(t, m)["gonvmf_log_lines_dropped_total"]
		if mf == nil || len(mf.Metric) != 1 || mf.Metric[0].GetCounter().GetValue() != float64(want) {
			t.Errorf("gonvmf_log_lines_dropped_total with %d dropped: %v", want, mf)
		}
	}
}

// TestReloads: WithReloads serves the reload counts, the last one's result and the time
// of the last successful load its function returns when scraped, and without it none.
func TestReloads(t *testing.T) {
	s, plain := loopServer(t)
	for _, name := range []string{"gonvmf_config_reloads_total", "gonvmf_config_last_reload_successful", "gonvmf_config_last_reload_success_timestamp_seconds"} {
		if _, ok := scrape(t, plain)[name]; ok {
			t.Errorf("%s served without WithReloads", name)
		}
	}
	var mu sync.Mutex
	r := metrics.Reloads{LastSuccess: time.Unix(1700000000, 500e6)}
	m, err := metrics.Start(s, "127.0.0.1:0", quiet, metrics.WithReloads(func() metrics.Reloads {
		mu.Lock()
		defer mu.Unlock()
		return r
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		r             metrics.Reloads
		success, fail float64
		ok            float64
		at            float64
	}{
		{metrics.Reloads{LastSuccess: time.Unix(1700000000, 500e6)}, 0, 0, 1, 1700000000.5},
		{metrics.Reloads{Succeeded: 2, Failed: 1, LastFailed: true, LastSuccess: time.Unix(1700000100, 0)}, 2, 1, 0, 1700000100},
		{metrics.Reloads{Succeeded: 3, Failed: 1, LastSuccess: time.Unix(1700000200, 0)}, 3, 1, 1, 1700000200},
	} {
		mu.Lock()
		r = c.r
		mu.Unlock()
		fams := scrape(t, m)
		got := func(name string, labels map[string]string) float64 {
			mt := find(fams, name, labels)
			if mt == nil {
				t.Fatalf("%+v: no %s %v", c.r, name, labels)
			}
			if mt.Counter != nil {
				return mt.Counter.GetValue()
			}
			return mt.GetGauge().GetValue()
		}
		if v := got("gonvmf_config_reloads_total", map[string]string{"result": "success"}); v != c.success {
			t.Errorf("%+v: reloads_total{result=success} %v, want %v", c.r, v, c.success)
		}
		if v := got("gonvmf_config_reloads_total", map[string]string{"result": "failure"}); v != c.fail {
			t.Errorf("%+v: reloads_total{result=failure} %v, want %v", c.r, v, c.fail)
		}
		if v := got("gonvmf_config_last_reload_successful", nil); v != c.ok {
			t.Errorf("%+v: last_reload_successful %v, want %v", c.r, v, c.ok)
		}
		if v := got("gonvmf_config_last_reload_success_timestamp_seconds", nil); v != c.at {
			t.Errorf("%+v: last_reload_success_timestamp_seconds %v, want %v", c.r, v, c.at)
		}
	}
	resp, err := http.Get("http://" + m.Addr().String() + metrics.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	problems, err := promlint.New(resp.Body).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "gonvmf_config_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}
