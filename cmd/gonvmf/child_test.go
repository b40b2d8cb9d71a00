package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/server"
)

// childEnv, set in a test binary's environment, makes it run gonvmf with its arguments
// instead of the tests (TestMain calls childMain), for the tests that need a process of
// its own: real signals, real standard streams. Its value says how serve builds the
// target:
//
//	loop           in-process only (server.Options.Loop): serve without RDMA
//	stuck          never returns, like an rbd cluster connection that hangs
//	hungflush:DUR  loop, with the queue close timeout DUR, and the flush of every file
//	               namespace never returns, like a file on an NFS server that went away
const childEnv = "GONVMF_TEST_CHILD"

// childMain runs gonvmf and exits when the test binary was started by startChild; else it
// returns at once.
func childMain() {
	mode := os.Getenv(childEnv)
	switch {
	case mode == "":
		return
	case mode == "loop":
		newServer = func(cfg *conf.Config, o server.Options) (*server.Server, error) {
			o.Loop = true
			return server.New(cfg, o)
		}
	case mode == "stuck":
		newServer = func(*conf.Config, server.Options) (*server.Server, error) {
			time.Sleep(time.Hour)
			return nil, fmt.Errorf("%s=stuck: the hour is up", childEnv)
		}
	case strings.HasPrefix(mode, "hungflush:"):
		closeTimeout, err := time.ParseDuration(strings.TrimPrefix(mode, "hungflush:"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: %v\n", childEnv, mode, err)
			os.Exit(exitUsage)
		}
		newServer = func(cfg *conf.Config, o server.Options) (*server.Server, error) {
			o.Loop = true
			o.Target = append(o.Target, target.WithQueueCloseTimeout(closeTimeout), target.WithBackendOpener(openHungFlush))
			return server.New(cfg, o)
		}
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: use loop, stuck or hungflush:DURATION\n", childEnv, mode)
		os.Exit(exitUsage)
	}
	os.Exit(run(context.Background(), append([]string{"gonvmf"}, os.Args[1:]...), os.Stdout, os.Stderr))
}

// openHungFlush opens backends with backend.Open; the Flush of a file backend never
// returns (see childEnv's hungflush).
func openHungFlush(s backend.Spec) (backend.Backend, error) {
	b, err := backend.Open(s)
	if err != nil || s.Kind != backend.Kind(conf.BackendFile) {
		return b, err
	}
	return hungFlush{b}, nil
}

// hungFlush is a backend whose Flush never returns.
type hungFlush struct{ backend.Backend }

func (hungFlush) Flush() error { select {} }

// child is a gonvmf process started by startChild.
type child struct {
	cmd    *exec.Cmd
	stderr *os.File // the read end of the child's standard error
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// startChild starts the test binary as gonvmf with args, the target built as mode says
// (see childEnv); its standard error is a pipe the test reads from c.stderr. The process is
// killed when the test ends.
func startChild(t *testing.T, mode string, args ...string) *child {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	c := &child{cmd: cmd, stderr: r, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.exited
		r.Close()
	})
	return c
}

// wait returns cmd.Wait's error once the child exits, or fails t after d.
func (c *child) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-c.exited:
		return c.err
	case <-time.After(d):
		t.Fatalf("gonvmf %s did not exit within %v", strings.Join(c.cmd.Args[1:], " "), d)
		return nil
	}
}

// logTail collects what the child writes to standard error, for waiting on lines.
type logTail struct {
	mu    sync.Mutex
	text  strings.Builder
	lines chan struct{} // a line arrived (capacity 1)
	done  chan struct{} // closed when standard error has ended
}

// tail reads c's standard error into a logTail until it ends.
func (c *child) tail() *logTail {
	l := &logTail{lines: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(c.stderr)
		for sc.Scan() {
			l.mu.Lock()
			l.text.WriteString(sc.Text() + "\n")
			l.mu.Unlock()
			select {
			case l.lines <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// await waits until the log holds want, or fails t after d.
func (l *logTail) await(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for !strings.Contains(l.String(), want) {
		select {
		case <-l.lines:
		case <-deadline:
			t.Fatalf("no %q in the log within %v:\n%s", want, d, l.String())
		}
	}
}

// awaitFile waits until path exists, or fails t after d.
func awaitFile(t *testing.T, path string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, d)
		}
	}
}
