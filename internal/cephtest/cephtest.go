// Package cephtest gives tests of the ceph build a running single-node Ceph cluster: the
// one integration/ceph/cluster.sh runs in $GONVMF_CEPH_DIR (default <repo>/build/ceph) if
// it is up — `make test-ceph` starts it once for every package — or else a private one
// it starts in a temporary directory on a free port and stops when the test binary ends.
//
// A test binary using it calls Main from its TestMain, and Get from each test that needs
// the cluster; the cluster starts (~5 s) only if a test asks for it.
package cephtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Cluster says how to reach the cluster: the values cluster.sh writes to $DIR/env.
type Cluster struct {
	Dir     string // the cluster's directory
	Conf    string // its ceph.conf (client.admin's keyring is set there)
	Pool    string // a pool for RBD images, size 1
	User    string // a client with 'profile rbd' on Pool only (without "client.")
	Keyring string // that client's keyring
}

var (
	once    sync.Once
	cluster *Cluster
	failure error
	private string // the directory of a cluster this process started
	script  string
)

// Main runs the tests and stops a cluster Get started; use it as
// `func TestMain(m *testing.M) { os.Exit(cephtest.Main(m)) }`.
func Main(m *testing.M) int {
	code := m.Run()
	if private != "" {
		if out, err := run("stop", private, ""); err != nil {
			fmt.Fprintf(os.Stderr, "cephtest: stopping the cluster in %s: %v\n%s", private, err, out)
		}
		os.RemoveAll(private)
	}
	return code
}

// Get returns the cluster, starting it on first use; it fails t if it cannot.
func Get(t testing.TB) *Cluster {
	t.Helper()
	once.Do(func() { cluster, failure = find() })
	if failure != nil {
		t.Fatalf("cephtest: no Ceph cluster: %v", failure)
	}
	return cluster
}

func find() (*Cluster, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script = filepath.Join(root, "integration", "ceph", "cluster.sh")
	dir := os.Getenv("GONVMF_CEPH_DIR")
	explicit := dir != ""
	if !explicit {
		dir = filepath.Join(root, "build", "ceph")
	}
	if _, err := run("status", dir, ""); err == nil {
		return load(dir)
	} else if explicit {
		return nil, fmt.Errorf("GONVMF_CEPH_DIR=%s names no running cluster (start it: %s start)", dir, script)
	}
	// A private cluster on a free port, so that packages tested in parallel do not meet.
	tmp, err := os.MkdirTemp("", "gonvmf-ceph-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	private = tmp
	if out, err := run("start", tmp, port); err != nil {
		return nil, fmt.Errorf("%s start: %v\n%s", script, err, out)
	}
	return load(tmp)
}

// Private starts a cluster of t's own (memstore, no mgr: ~3 s) on a free port, stopped
// when t ends: for a test that disturbs its daemons (stops the OSD), which the tests of
// other packages sharing the common cluster must not see.
func Private(t testing.TB) *Cluster {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(root, "integration", "ceph", "cluster.sh")
	dir, err := os.MkdirTemp("", "gonvmf-ceph-")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		if out, err := runScript(sh, "stop", dir, "", nil); err != nil {
			t.Errorf("stopping the private cluster in %s: %v\n%s", dir, err, out)
		}
		os.RemoveAll(dir)
	}
	if out, err := runScript(sh, "start", dir, port, []string{"GONVMF_CEPH_STORE=memstore", "GONVMF_CEPH_MGR=0"}); err != nil {
		stop()
		t.Fatalf("cephtest: starting a private cluster: %v\n%s", err, out)
	}
	t.Cleanup(stop)
	c, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func run(cmd, dir, port string) ([]byte, error) { return runScript(script, cmd, dir, port, nil) }

func runScript(sh, cmd, dir, port string, env []string) ([]byte, error) {
	c := exec.Command(sh, cmd)
	c.Env = append(os.Environ(), "GONVMF_CEPH_DIR="+dir)
	if port != "" {
		c.Env = append(c.Env, "GONVMF_CEPH_PORT="+port)
	}
	c.Env = append(c.Env, env...)
	return c.CombinedOutput()
}

func load(dir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "CEPH_CONF":
			c.Conf = v
		case "GONVMF_CEPH_POOL":
			c.Pool = v
		case "GONVMF_CEPH_USER":
			c.User = v
		case "GONVMF_CEPH_KEYRING":
			c.Keyring = v
		}
	}
	if c.Conf == "" || c.Pool == "" {
		return nil, fmt.Errorf("%s/env lacks CEPH_CONF or GONVMF_CEPH_POOL", dir)
	}
	return c, nil
}

func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/gonvmf/gonvmf\n")) {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", errors.New("not inside the gonvmf repository")
		}
		d = p
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// Rbd runs the rbd tool against the cluster as client.admin and returns its output.
func (c *Cluster) Rbd(args ...string) (string, error) {
	out, err := exec.Command("rbd", append([]string{"-c", c.Conf}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rbd %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Ceph runs the ceph tool against the cluster as client.admin and returns its output.
func (c *Cluster) Ceph(args ...string) (string, error) {
	out, err := exec.Command("ceph", append([]string{"-c", c.Conf}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ceph %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Watchers returns the addresses of the clients watching image (pool/[namespace/]name),
// as `rbd status` lists them: the RADOS clients that have it open.
func (c *Cluster) Watchers(image string) ([]string, error) {
	out, err := c.Rbd("status", image)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, f := range strings.Fields(out) {
		if a, ok := strings.CutPrefix(f, "watcher="); ok {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// Blocklist blocklists the RADOS client at addr (`ceph osd blocklist add`): the OSDs
// refuse its operations from the next OSD map on, for an hour, as they do those of an
// exclusive lock's owner whose lock a peer broke.
func (c *Cluster) Blocklist(addr string) error {
	_, err := c.Ceph("osd", "blocklist", "add", addr)
	return err
}
