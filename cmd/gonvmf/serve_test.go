package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/server"
	"github.com/urfave/cli/v2"
)

// TestServeWithoutRDMA: on a machine without an RDMA device serve fails after loading
// the configuration and says how to get one.
func TestServeWithoutRDMA(t *testing.T) {
	if devs, err := rdmacm.Devices(); err == nil && len(devs) > 0 {
		t.Skip("this machine has an RDMA device; TestRDMAServe covers serve here")
	}
	code, _, errOut := gonvmf(t, "serve", "--config", "../../conf/examples/null.yaml")
	if code != 1 || !strings.Contains(errOut, `msg="configuration loaded"`) ||
		!strings.Contains(errOut, "no RDMA device") || !strings.Contains(errOut, "rdma link add rxe0 type rxe netdev") {
		t.Errorf("serve: exit %d\n%s", code, errOut)
	}
}

// TestServeBadConfig: an invalid configuration is reported as check reports it, before
// anything starts.
func TestServeBadConfig(t *testing.T) {
	f := writeFile(t, "bad.yaml", badConfig)
	code, _, errOut := gonvmf(t, "serve", "--config", f)
	if code != 1 || !strings.Contains(errOut, f+":11: subsystems[0].namespaces[0].lba_size") || strings.Contains(errOut, "rdma") {
		t.Errorf("serve with a bad config: exit %d\n%s", code, errOut)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader on different goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func serveConfig(t *testing.T, addr string, port int) string {
	return writeFile(t, "serve.yaml", fmt.Sprintf(`listeners: [{address: %s, port: %d}]
subsystems:
  - nqn: nqn.2024-01.io.gonvmf:serve-test
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: null, size: 1GiB}
      - {nsid: 2, backend: memory, size: 64MiB}
transport: {buffer_pool_size: 16MiB, poll_groups: 1}
`, addr, port))
}

// TestRDMAServe runs serve as a user would (in the guest): it listens, refuses a second
// instance on the same port and an address that is on no RDMA device with errors that
// say so, and exits 0 on a signal after an orderly shutdown.
func TestRDMAServe(t *testing.T) {
	ip := rdmatest.Require(t)
	port := 4500 + int(time.Now().UnixNano()%400)
	cfg := serveConfig(t, ip, port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"gonvmf", "serve", "-c", cfg}, &out, &errOut) }()
	want := fmt.Sprintf("serving 1 subsystem on rdma %s:%d", ip, port)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errOut.String(), want) {
		select {
		case code := <-exited:
			t.Fatalf("serve exited %d before listening:\n%s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 30 s:\n%s", want, errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	code, _, e := gonvmf(t, "serve", "-c", serveConfig(t, ip, port))
	if code != 1 || !strings.Contains(e, "address already in use") {
		t.Errorf("second serve on port %d: exit %d\n%s", port, code, e)
	}
	code, _, e = gonvmf(t, "serve", "-c", serveConfig(t, "127.0.0.1", port))
	if code != 1 || !strings.Contains(e, "not on an RDMA device") || !strings.Contains(e, ip) {
		t.Errorf("serve on 127.0.0.1: exit %d\n%s", code, e)
	}

	cancel() // as SIGTERM does
	select {
	case code := <-exited:
		if code != 0 || !strings.Contains(errOut.String(), `msg=stopped`) {
			t.Errorf("serve exited %d after the signal:\n%s", code, errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop within 60 s of the signal:\n%s", errOut.String())
	}
}

// stuckWriter blocks every Write until its gate is closed.
type stuckWriter struct {
	gate chan struct{}
	syncBuffer
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	<-s.gate
	return s.syncBuffer.Write(p)
}

// TestServeLogDoesNotWaitForStderr: the logger serve runs with (asyncLogger) returns while
// standard error takes nothing, drops what its buffer cannot hold, and once standard error
// moves delivers the lines it kept, a warning that counts the dropped ones in the
// configured format, and (after the close function) everything logged before it.
func TestServeLogDoesNotWaitForStderr(t *testing.T) {
	stderr := &stuckWriter{gate: make(chan struct{})}
	app := newApp(io.Discard, stderr)
	if err := setupLogging(app, stderr, "info", "json"); err != nil {
		t.Fatal(err)
	}
	log, dropped, closeLog := asyncLogger(cli.NewContext(app, nil, nil))
	if slog.Default() != log {
		t.Error("asyncLogger did not make its logger the default")
	}
	const lines = 20000 // ~2 MB of JSON lines: four times the buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range lines {
			log.Info("queue connected", "i", i, "host", "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000000")
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("logging waited for a standard error that takes nothing")
	}
	close(stderr.gate)
	// Lines logged while the buffer is still full are dropped too: wait for the warning,
	// which the writer logs when it empties the buffer.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stderr.String(), "log lines dropped"); {
		if time.Now().After(deadline) {
			t.Fatal("no drop warning within 20 s of standard error moving")
		}
		time.Sleep(time.Millisecond)
	}
	log.Info("last line")
	closeLog()
	out := stderr.String()
	if !strings.HasSuffix(out, `"msg":"last line"}`+"\n") {
		t.Errorf("the line logged before closeLog is not the last one delivered:\n...%s", out[max(0, len(out)-300):])
	}
	kept := strings.Count(out, `"msg":"queue connected"`)
	var reported int
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "log lines dropped") {
			var rec struct {
				Level string
				Lines int
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Level != "WARN" {
				t.Errorf("drop warning %q: %v", l, err)
			}
			reported += rec.Lines
		}
	}
	if reported == 0 || kept+reported != lines {
		t.Errorf("%d lines delivered and %d reported dropped, want some dropped and %d in all", kept, reported, lines)
	}
	if n := dropped(); n != uint64(reported) {
		t.Errorf("the dropped count (gonvmf_log_lines_dropped_total) is %d, the warnings reported %d", n, reported)
	}
	if !strings.Contains(out, `"i":0,`) {
		t.Error("the first line, logged while the buffer was empty, was not delivered")
	}
}

// TestServeOutlivesItsLogReader: serve whose standard error loses its reader (a pipeline
// that exits, a journald that restarts) keeps serving: a reload that logs is applied, and
// SIGTERM still shuts it down in order, exit status 0 and its control socket removed.
func TestServeOutlivesItsLogReader(t *testing.T) {
	file := ctlConfig(t, "")
	sock := filepath.Join(filepath.Dir(file), "ctl.sock")
	c := startChild(t, "loop", "serve", "-c", file)
	awaitFile(t, sock, 30*time.Second)
	c.stderr.Close() // nothing reads serve's standard error any more

	text := readFileString(t, file)
	grown := strings.Replace(text, "{nsid: 1, backend: memory, size: 4MiB}",
		"{nsid: 1, backend: memory, size: 4MiB}\n      - {nsid: 2, backend: null, size: 1GiB}", 1)
	if err := os.WriteFile(file, []byte(grown), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil { // the reload logs to the broken pipe
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-c.exited:
			t.Fatalf("serve exited once its log had no reader: %v", c.err)
		default:
		}
		var ls struct{ Namespaces []struct{ Nsid int } }
		if _, out, _ := gonvmf(t, "ctl", "--socket", sock, "ns", "ls", "--json"); json.Unmarshal([]byte(out), &ls) == nil && len(ls.Namespaces) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reload's namespace 2 did not appear within 30 s")
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(t, 60*time.Second); err != nil {
		t.Errorf("serve after SIGTERM: %v, want exit status 0", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the control socket is left behind: %v", err)
	}
}

// TestServeSecondSignalWhileStarting: a target that takes long to start (an rbd cluster
// that does not answer) cannot be interrupted; the first SIGTERM meanwhile is noted, and
// the second abandons the start: serve exits 1 at once and says why.
func TestServeSecondSignalWhileStarting(t *testing.T) {
	c := startChild(t, "stuck", "serve", "-c", ctlConfig(t, ""))
	log := c.tail()
	log.await(t, `msg="configuration loaded"`, 30*time.Second)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	log.await(t, "terminated while the target starts: it stops as soon as it has started", 10*time.Second)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := c.wait(t, 10*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("serve after the second SIGTERM: %v, want exit status 1", err)
	}
	select {
	case <-log.done: // all of it, the exit's reason last
	case <-time.After(10 * time.Second):
		t.Fatalf("serve's standard error did not end with it:\n%s", log)
	}
	if !strings.Contains(log.String(), "gonvmf: start abandoned on a second terminated") {
		t.Errorf("serve's log does not say why it exited:\n%s", log)
	}
}

// TestServeReloadMetrics: serve's metrics count its SIGHUP reloads by result, say whether
// the last one failed, and when the configuration was last loaded (at the start, then by
// each reload that succeeded).
func TestServeReloadMetrics(t *testing.T) {
	addr := freeTCPAddr(t)
	file := ctlConfig(t, "metrics: {address: \""+addr+"\"}")
	start := time.Now()
	c := startChild(t, "loop", "serve", "-c", file)
	log := c.tail()
	log.await(t, "serving Prometheus metrics", 30*time.Second)
	scrape := func() map[string]float64 {
		t.Helper()
		m, err := scrapeConfigMetrics(addr)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	check := func(when string, success, failure, lastOK float64, loadedAfter time.Time) {
		t.Helper()
		m := scrape()
		for series, want := range map[string]float64{
			`gonvmf_config_reloads_total{result="success"}`: success,
			`gonvmf_config_reloads_total{result="failure"}`: failure,
			"gonvmf_config_last_reload_successful":          lastOK,
		} {
			if got, ok := m[series]; !ok || got != want {
				t.Errorf("%s: %s is %v (served: %v), want %v", when, series, got, ok, want)
			}
		}
		at := m["gonvmf_config_last_reload_success_timestamp_seconds"]
		if at < float64(loadedAfter.UnixNano())/1e9 || at > float64(time.Now().UnixNano())/1e9 {
			t.Errorf("%s: last_reload_success_timestamp_seconds %v, want between %v and now", when, at, loadedAfter.Unix())
		}
	}
	check("at the start", 0, 0, 1, start)

	text := readFileString(t, file)
	hup := func(content, want string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		log.await(t, want, 30*time.Second)
	}
	hup(strings.Replace(text, "size: 4MiB}", "size: 4MiB, lba_size: 1000}", 1), "reload refused: nothing changed")
	check("after an invalid file", 0, 1, 0, start)
	beforeReload := time.Now()
	hup(strings.Replace(text, "size: 4MiB}", "size: 8MiB}", 1), "reload: 1 change applied")
	check("after a reload that grew a namespace", 1, 1, 1, beforeReload)

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(t, 60*time.Second); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, log)
	}
}

// TestServeReloadPerNamespace: a SIGHUP whose file changes metrics.per_namespace is
// applied while serve runs, logged, and the next scrape exports 8 series of namespace 1
// after full → counters, 104 after counters → full.
func TestServeReloadPerNamespace(t *testing.T) {
	addr := freeTCPAddr(t)
	section := func(level string) string { return "metrics: {address: \"" + addr + "\", per_namespace: " + level + "}" }
	file := ctlConfig(t, section("full"))
	c := startChild(t, "loop", "serve", "-c", file)
	log := c.tail()
	log.await(t, "serving Prometheus metrics", 30*time.Second)
	series := func(when string, want int) {
		t.Helper()
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		text, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(line, "gonvmf_namespace_") && strings.Contains(line, `nsid="1"`) {
				n++
			}
		}
		if n != want {
			t.Errorf("%s: namespace 1 has %d series, want %d", when, n, want)
		}
	}
	series("at the start", 104)
	text := readFileString(t, file)
	reloads := 0
	hup := func(level string) {
		t.Helper()
		reloads++
		if err := os.WriteFile(file, []byte(strings.Replace(text, section("full"), section(level), 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); strings.Count(log.String(), "reload: 1 change applied") < reloads; time.Sleep(10 * time.Millisecond) {
			if l := log.String(); time.Now().After(deadline) || strings.Contains(l, "reload failed") || strings.Contains(l, "reload refused") {
				t.Fatalf("reload to per_namespace %s: not applied:\n%s", level, l)
			}
		}
		if !strings.Contains(log.String(), "metrics.per_namespace "+map[string]string{"full": "counters", "counters": "full"}[level]+" → "+level) {
			t.Errorf("reload to per_namespace %s: the log does not name the change:\n%s", level, log)
		}
	}
	hup("counters")
	series("after full → counters", 8)
	hup("full")
	series("after counters → full", 104)

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(t, 60*time.Second); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, log)
	}
}

// freeTCPAddr returns a loopback address:port nothing listens on now (a metrics
// address; the configuration refuses port 0).
func freeTCPAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrapeConfigMetrics scrapes the metrics served at addr and returns the gonvmf_config_
// series by name with labels.
func scrapeConfigMetrics(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of %s: %w", addr, err)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if series, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(series, "gonvmf_config_") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("metrics of %s: %q: %w", addr, line, err)
			}
			m[series] = f
		}
	}
	return m, nil
}

// scrapeAtLines is a slog.Handler that scrapes the metrics at addr while it handles a
// record whose message is one of lines, before the logger's caller goes on, and sends
// what it scraped on scraped; it keeps every message for the test's failure output.
type scrapeAtLines struct {
	addr    string
	lines   []string
	scraped chan map[string]float64
	mu      sync.Mutex
	log     strings.Builder
}

func (h *scrapeAtLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *scrapeAtLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *scrapeAtLines) WithGroup(string) slog.Handler            { return h }

func (h *scrapeAtLines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.log.WriteString(r.Message + "\n")
	h.mu.Unlock()
	if slices.Contains(h.lines, r.Message) {
		m, err := scrapeConfigMetrics(h.addr)
		if err != nil {
			m = map[string]float64{"scrape failed: " + err.Error(): 0}
		}
		h.scraped <- m
	}
	return nil
}

func (h *scrapeAtLines) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.log.String()
}

// TestServeReloadCountedBeforeItsLine: the metrics count a reload before serve logs the
// line that ends it, so that whoever sees that line and then scrapes (a test, an operator
// following the log) finds the reload counted. The log's handler scrapes while it handles
// the line, before reload goes on.
func TestServeReloadCountedBeforeItsLine(t *testing.T) {
	addr := freeTCPAddr(t)
	file := ctlConfig(t, "metrics: {address: \""+addr+"\"}")
	cfg, err := conf.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	saved := newServer
	newServer = func(cfg *conf.Config, o server.Options) (*server.Server, error) {
		o.Loop = true
		return server.New(cfg, o)
	}
	t.Cleanup(func() { newServer = saved })
	h := &scrapeAtLines{addr: addr, lines: []string{"reload refused: nothing changed", "reload: 1 change applied"},
		scraped: make(chan map[string]float64)}
	hup, term := make(chan os.Signal, 1), make(chan os.Signal, 1)
	served := make(chan error, 1)
	go func() { served <- serve(context.Background(), cfg, slog.New(h), hup, term) }()
	text := readFileString(t, file)
	for _, step := range []struct {
		content              string
		success, failure, ok float64
	}{
		{strings.Replace(text, "size: 4MiB}", "size: 4MiB, lba_size: 1000}", 1), 0, 1, 0},
		{strings.Replace(text, "size: 4MiB}", "size: 8MiB}", 1), 1, 1, 1},
	} {
		if err := os.WriteFile(file, []byte(step.content), 0o600); err != nil {
			t.Fatal(err)
		}
		hup <- syscall.SIGHUP
		var m map[string]float64
		select {
		case m = <-h.scraped:
		case err := <-served:
			t.Fatalf("serve returned %v during a reload:\n%s", err, h)
		case <-time.After(30 * time.Second):
			t.Fatalf("no reload ended within 30 s:\n%s", h)
		}
		want := map[string]float64{
			`gonvmf_config_reloads_total{result="success"}`: step.success,
			`gonvmf_config_reloads_total{result="failure"}`: step.failure,
			"gonvmf_config_last_reload_successful":          step.ok,
		}
		for series, v := range want {
			if got, ok := m[series]; !ok || got != v {
				t.Errorf("scraped as the reload's last line was logged: %v, want %v\nlog:\n%s", m, want, h)
				break
			}
		}
	}
	term <- syscall.SIGTERM
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not return within 60 s of SIGTERM:\n%s", h)
	}
}

// hungFlushConfig writes a configuration with a file namespace (1), whose flush hangs in
// the hungflush child mode, and a memory namespace (2); it returns the file, the
// namespace's image and the control socket.
func hungFlushConfig(t *testing.T) (file, img, sock string) {
	t.Helper()
	d, err := os.MkdirTemp("", "stop") // short: the control socket's path has a limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	img, sock, file = filepath.Join(d, "nfs.img"), filepath.Join(d, "ctl.sock"), filepath.Join(d, "target.yaml")
	text := `listeners: [{address: 10.99.0.1}]
subsystems:
  - nqn: ` + ctlNQN + `
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: file, path: ` + img + `, size: 1MiB}
      - {nsid: 2, backend: memory, size: 4MiB}
transport: {buffer_pool_size: 8MiB, poll_groups: 1}
control: {socket: ` + sock + `}
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, img, sock
}

// TestServeStopWithHungFlush: SIGTERM to serve with a namespace whose flush never returns
// (a file on an NFS server that went away): the stop waits for it at most the queue close
// timeout, logs an Error line naming it (subsystem, NSID, backend, path, time waited) and
// none for the working namespace, goes on, and serve exits 1, saying the flush did not
// finish. The old code flushed without a limit: serve hung in the flush, and exited only
// when its 60 s grace ran out, with no line saying what it waited for.
func TestServeStopWithHungFlush(t *testing.T) {
	const closeTimeout = 500 * time.Millisecond
	file, img, sock := hungFlushConfig(t)
	c := startChild(t, "hungflush:"+closeTimeout.String(), "serve", "-c", file)
	log := c.tail()
	awaitFile(t, sock, 30*time.Second)
	start := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := c.wait(t, 20*time.Second)
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("serve after SIGTERM with a hung flush: %v, want exit status 1", err)
	}
	if took > closeTimeout+5*time.Second {
		t.Errorf("serve exited %v after SIGTERM, want about the close timeout (%v)", took.Round(time.Millisecond), closeTimeout)
	}
	t.Logf("serve exited %v after SIGTERM: %v", took.Round(time.Millisecond), err)
	select {
	case <-log.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve's standard error did not end with it:\n%s", log)
	}
	var hung []string
	for l := range strings.Lines(log.String()) {
		if strings.Contains(l, "flush did not finish within the close timeout") {
			hung = append(hung, l)
		}
	}
	if len(hung) != 1 {
		t.Fatalf("%d lines about flushes that did not finish, want 1 (namespace 1):\n%s", len(hung), log)
	}
	for _, attr := range []string{"level=ERROR", "subsystem=" + ctlNQN, "nsid=1 ", "backend=file", "path=" + img, "waited="} {
		if !strings.Contains(hung[0], attr) {
			t.Errorf("the line about the hung flush lacks %s: %s", attr, hung[0])
		}
	}
	if !strings.Contains(log.String(), "gonvmf: a namespace's flush did not finish within the queue close timeout") {
		t.Errorf("serve's log does not end with why it exited 1:\n%s", log)
	}
}

// TestServeSecondSignalDuringStop: a second SIGTERM while the stop waits for a hung flush
// (here with a close timeout of an hour) ends serve at once, exit status 1, saying why.
func TestServeSecondSignalDuringStop(t *testing.T) {
	file, _, sock := hungFlushConfig(t)
	c := startChild(t, "hungflush:1h", "serve", "-c", file)
	log := c.tail()
	awaitFile(t, sock, 30*time.Second)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	log.await(t, "shutting down:", 10*time.Second)
	time.Sleep(100 * time.Millisecond) // into the flush
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := c.wait(t, 10*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("serve after a second SIGTERM during the stop: %v, want exit status 1", err)
	}
	select {
	case <-log.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve's standard error did not end with it:\n%s", log)
	}
	if !strings.Contains(log.String(), "gonvmf: shutdown interrupted by a second terminated") {
		t.Errorf("serve's log does not say why it exited:\n%s", log)
	}
}

// TestServeStopDuringHungReload: SIGTERM while a SIGHUP's reload waits in its
// configuration check (held here, as a secret file on a hung mount holds it) stops
// serve: its signal loop takes the signal, the stop waits for the reload at most
// reloadStopWait, says so, and goes on without it. The old code ran the reload in the
// signal loop, which took no signal until the check returned.
func TestServeStopDuringHungReload(t *testing.T) {
	file := ctlConfig(t, "")
	cfg, err := conf.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	savedNew, savedCheck, savedWait := newServer, checkReload, reloadStopWait
	newServer = func(cfg *conf.Config, o server.Options) (*server.Server, error) {
		o.Loop = true
		return server.New(cfg, o)
	}
	checkReload = func(*conf.Config) error {
		entered <- struct{}{}
		<-release
		return nil
	}
	reloadStopWait = 50 * time.Millisecond
	sv := startSignalledServe(cfg)
	out := sv.out
	checking := false // the reload is in its check (or after it)
	t.Cleanup(func() {
		close(release) // the reload then ends (abandoned, once serve has stopped)
		if checking {
			<-out.ended // the reload, which outlives serve, has returned
		}
		newServer, checkReload, reloadStopWait = savedNew, savedCheck, savedWait
	})
	sv.send(t, sv.hup, syscall.SIGHUP, "of its start")
	sv.awaitCheck(t, entered)
	checking = true
	sv.send(t, sv.term, syscall.SIGTERM, "while a reload waits in its configuration check")
	select {
	case err := <-sv.served:
		if err != nil {
			t.Errorf("serve after SIGTERM during a hung reload: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not return within 10 s of SIGTERM during a hung reload:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "shutting down without the reload in progress") {
		t.Errorf("serve's log does not say it stopped without the reload in progress:\n%s", out.String())
	}
}

// reloadLog is serve's log for the tests of a reload that the stop does not wait for:
// ended is closed once the log has the line that ends a reload (see reload).
type reloadLog struct {
	syncBuffer
	once  sync.Once
	ended chan struct{}
}

func newReloadLog() *reloadLog { return &reloadLog{ended: make(chan struct{})} }

var reloadEndLine = regexp.MustCompile(`msg="reload (abandoned|failed|refused)|msg="reload: [0-9]+ changes? applied"`)

func (l *reloadLog) Write(p []byte) (int, error) {
	n, err := l.syncBuffer.Write(p)
	if reloadEndLine.Match(p) {
		l.once.Do(func() { close(l.ended) })
	}
	return n, err
}

// await waits for the reload's end line, at most 10 s.
func (l *reloadLog) await(t *testing.T) {
	t.Helper()
	select {
	case <-l.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("the reload did not end within 10 s:\n%s", l.String())
	}
}

// signalledServe is serve run by startSignalledServe, with the channels of its signals.
type signalledServe struct {
	out       *reloadLog
	hup, term chan os.Signal // a send returns once serve took it
	served    chan error     // serve's result: whoever takes it puts it back
}

// startSignalledServe runs serve with cfg on a goroutine of its own, its log in out.
func startSignalledServe(cfg *conf.Config) *signalledServe {
	s := &signalledServe{out: newReloadLog(), hup: make(chan os.Signal), term: make(chan os.Signal), served: make(chan error, 1)}
	go func() {
		s.served <- serve(context.Background(), cfg, slog.New(slog.NewTextHandler(s.out, nil)), s.hup, s.term)
	}()
	return s
}

// send delivers sig on ch, and fails t if serve returned first or took none within 10 s.
func (s *signalledServe) send(t *testing.T, ch chan os.Signal, sig os.Signal, when string) {
	t.Helper()
	select {
	case ch <- sig:
	case err := <-s.served:
		s.served <- err
		t.Fatalf("serve returned %v before it took %v:\n%s", err, sig, s.out.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("serve took no %v within 10 s %s:\n%s", sig, when, s.out.String())
	}
}

// awaitCheck waits, at most 10 s, for a SIGHUP's reload to signal on entered that it is
// in its configuration check (a checkReload the test set).
func (s *signalledServe) awaitCheck(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("the reload did not reach its configuration check within 10 s:\n%s", s.out.String())
	}
}

// heldFlush is a backend whose Flush closes entered (once) and returns once release is
// closed.
type heldFlush struct {
	backend.Backend
	once    *sync.Once
	entered chan struct{}
	release <-chan struct{}
}

func (b heldFlush) Flush() error {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return b.Backend.Flush()
}

// TestServeReloadAbandonedDuringStop: a SIGHUP's reload whose configuration check the
// stop did not wait for, and which passes while Shutdown flushes (held here), applies
// nothing: it is abandoned and logged so, and the subsystem the edited file adds is not
// added to the target being stopped. The old code applied the reload's changes to the
// flushing target ("subsystem added", "reload: 1 change applied" after "shutting down").
func TestServeReloadAbandonedDuringStop(t *testing.T) {
	file := ctlConfig(t, "")
	cfg, err := conf.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const twoNQN = "nqn.2024-01.io.gonvmf:review-two"
	edited := strings.Replace(string(text), "\ntransport:", "\n  - nqn: "+twoNQN+"\n    allow_any_host: true\ntransport:", 1)
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	checking, releaseCheck := make(chan struct{}), make(chan struct{})
	flushing, releaseFlush := make(chan struct{}), make(chan struct{})
	var srv *server.Server // set by newServer, read after serve returned
	savedNew, savedCheck, savedWait := newServer, checkReload, reloadStopWait
	newServer = func(cfg *conf.Config, o server.Options) (*server.Server, error) {
		o.Loop = true
		once := new(sync.Once)
		o.Target = append(o.Target, target.WithBackendOpener(func(s backend.Spec) (backend.Backend, error) {
			b, err := backend.Open(s)
			if err != nil {
				return nil, err
			}
			return heldFlush{b, once, flushing, releaseFlush}, nil
		}))
		s, err := server.New(cfg, o)
		srv = s
		return s, err
	}
	checkReload = func(*conf.Config) error {
		checking <- struct{}{}
		<-releaseCheck
		return nil
	}
	reloadStopWait = 50 * time.Millisecond
	sv := startSignalledServe(cfg)
	out := sv.out
	var checkReleased, flushReleased, inCheck, stopped bool
	t.Cleanup(func() {
		if !checkReleased {
			close(releaseCheck)
		}
		if !flushReleased {
			close(releaseFlush)
		}
		if inCheck {
			<-out.ended // the reload, which outlives serve, has returned
		}
		if stopped {
			<-sv.served
		}
		newServer, checkReload, reloadStopWait = savedNew, savedCheck, savedWait
	})
	sv.send(t, sv.hup, syscall.SIGHUP, "of its start")
	sv.awaitCheck(t, checking)
	inCheck = true
	sv.send(t, sv.term, syscall.SIGTERM, "while a reload waits in its configuration check")
	stopped = true
	select {
	case <-flushing:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve's stop did not flush within 10 s:\n%s", out.String())
	}
	close(releaseCheck)
	checkReleased = true
	out.await(t)
	log := out.String()
	if !strings.Contains(log, `msg="reload abandoned: serve is stopping; nothing changed"`) {
		t.Errorf("the log does not say the reload was abandoned:\n%s", log)
	}
	for _, bad := range []string{"nqn=" + twoNQN, `msg="reload: applied"`, "change applied"} {
		if strings.Contains(log, bad) {
			t.Errorf("a reload applied changes during the stop (%q):\n%s", bad, log)
		}
	}
	close(releaseFlush)
	flushReleased = true
	select {
	case err := <-sv.served:
		sv.served <- err
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not return within 10 s of the flush's release:\n%s", out.String())
	}
	for _, sub := range srv.Config().Subsystems {
		if sub.NQN == twoNQN {
			t.Errorf("the reload added subsystem %s to the target being stopped", twoNQN)
		}
	}
}

// TestReloaderCoalesces: reloads run one at a time; any number of requests while one
// runs ask for one more after it; stop reports the reload in progress, and no reload
// asked for before it starts after it.
func TestReloaderCoalesces(t *testing.T) {
	runs := make(chan chan struct{})
	r := startReloader(func(<-chan struct{}) {
		release := make(chan struct{})
		runs <- release
		<-release
	})
	next := func(what string) chan struct{} {
		t.Helper()
		select {
		case release := <-runs:
			return release
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not start within 10 s", what)
			return nil
		}
	}
	r.request()
	first := next("the first reload")
	r.request()
	r.request()
	r.request()
	close(first)
	second := next("the reload asked for during the first")
	if n := len(r.pending); n != 0 {
		t.Errorf("%d more reloads asked for after the second started, want none: the three requests during the first ask for one", n)
	}
	r.request()
	if !r.stop() {
		t.Error("stop during a reload reports none in progress")
	}
	close(second)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the reloader did not return within 10 s of its stop and the end of the reload in progress (a reload asked for before the stop started after it?)")
	}
	idle := startReloader(func(<-chan struct{}) { t.Error("a reload ran that nobody asked for") })
	if idle.stop() {
		t.Error("stop of an idle reloader reports a reload in progress")
	}
	<-idle.done
}
