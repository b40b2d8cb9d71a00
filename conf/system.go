package conf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gonvmf/gonvmf/internal/flight"
)

// CheckSystem checks, on this machine, what the text of a configuration cannot show:
//   - file namespaces: the path is a regular file that can be opened (read-write unless
//     read_only), no larger than size when size is given, and of a usable size when it is
//     not; or, when it does not exist yet, size is given and its directory exists and is
//     writable so that the target can create it;
//   - block namespaces: the path is a block device that can be opened, not empty, whose
//     logical block size is no larger than lba_size;
//   - no two writable namespaces reach the same file or device through different paths;
//   - rbd namespaces: the ceph_conf and keyring given can be read (the cluster itself is
//     not contacted);
//   - the state file can be written (stateFileCheck);
//   - the control listener's TLS certificate, key and client CAs can be loaded;
//   - memory namespaces and the buffer pool fit in this machine's RAM, and the buffer pool
//     can be pinned under RLIMIT_MEMLOCK;
//   - hosts' "file:" secrets: each file exists, belongs to this user, is closed to
//     others and holds a valid secret (checkSecretFile).
//
// It changes nothing (it opens files and devices and closes them again) and returns
// *FieldError values joined as Parse does. c must come from Load, Parse or Resolve.
//
// CheckSystem returns within systemCheckTimeout (10 s) of starting its checks, whatever
// the file systems do: every check that touches one (one per file, device or pair of TLS
// files) runs on a goroutine of its own, all of them at once, and CheckSystem waits for
// them together at most systemCheckTimeout. A check that has not answered by then (a
// hung NFS or FUSE mount) fails its field with an error that names the path, the time
// waited and the fix (the stat of the configuration file, for the warning that it holds a
// secret inline and is open to others, warns instead). Such a check goes on until its
// file system answers, and its result then reaches no one: only CheckSystem's own
// goroutine writes c and the errors. A check of the same path with the same settings
// while one runs (another CheckSystem, e.g. at each SIGHUP of gonvmf serve) joins it
// rather than starting another (fsChecks), so a hung path holds one
// goroutine, and the thread blocked in it, however often the configuration is checked
// meanwhile.
func (c *Config) CheckSystem() error {
	if c.src == nil {
		c.src = newSource()
	}
	v := &validator{c: c, src: c.src}
	// Every check that touches the file system starts before CheckSystem waits for any,
	// so that one bound covers them all; their results are taken in the configuration's
	// order.
	type nsChecks struct {
		ns     *Namespace
		p      string
		checks []*pendingCheck // its path's check (file, block) or its files' (rbd)
	}
	var nss []nsChecks
	var memTotal Size
	var memLast string
	for i := range c.Subsystems {
		for j := range c.Subsystems[i].Namespaces {
			ns := &c.Subsystems[i].Namespaces[j]
			p := fmt.Sprintf("subsystems[%d].namespaces[%d]", i, j)
			n := nsChecks{ns: ns, p: p}
			switch ns.Backend {
			case BackendFile:
				n.checks = []*pendingCheck{startCheck(fileCheck(ns), p, p+".path", ns.Path, "the backing file "+ns.Path)}
			case BackendBlock:
				n.checks = []*pendingCheck{startCheck(blockCheck(ns), p, p+".path", ns.Path, "the block device "+ns.Path)}
			case BackendMemory:
				memTotal += ns.Size
				memLast = p
			case BackendRBD:
				n.checks = startRBDChecks(ns, p)
			}
			nss = append(nss, n)
		}
	}
	state := v.startStateFileCheck()
	tlsChecks := v.startControlTLSChecks()
	secrets := v.startSecretChecks()
	w := newCheckWait(systemCheckTimeout)
	defer w.stop()

	type opened struct {
		fi       fs.FileInfo
		p        string
		readOnly bool
	}
	var seen []opened
	for _, n := range nss {
		for _, pc := range n.checks {
			fi := v.finish(pc, w)
			if fi == nil {
				continue
			}
			for _, o := range seen {
				if os.SameFile(o.fi, fi) && !(o.readOnly && n.ns.ReadOnly) {
					v.fail(n.p+".path", n.ns.Path, fmt.Sprintf("%s is the same file or device as the backing of %s", n.ns.Path, v.where(o.p)),
						"give each namespace its own file or device (only read-only namespaces may share one)")
					break
				}
			}
			seen = append(seen, opened{fi, n.p, n.ns.ReadOnly})
		}
	}
	v.finish(state, w)
	pool := c.Transport.BufferPoolSize
	if ram, ok := totalRAM(); ok {
		if memTotal > 0 && memTotal+pool > ram {
			v.fail(memLast+".size", "", fmt.Sprintf("memory namespaces (%s in all) and the buffer pool (%s) need more than this machine's %s of RAM",
				memTotal.Human(), pool.Human(), ram.Human()),
				"shrink the memory namespaces, or use backend: null for benchmarks that need no data")
		} else if pool > ram/2 {
			v.fail("transport.buffer_pool_size", pool.String(), fmt.Sprintf("%s is more than half of this machine's %s of RAM, and all of it is pinned", pool, ram.Human()),
				"lower buffer_pool_size")
		}
	}
	for _, pc := range tlsChecks {
		v.finish(pc, w)
	}
	if limit, ok := memlockLimit(); ok && limit < uint64(pool) {
		v.fail("transport.buffer_pool_size", pool.String(),
			fmt.Sprintf("RLIMIT_MEMLOCK is %s, less than the %s buffer pool that RDMA must pin", Size(limit).Human(), pool.Human()),
			"raise the limit (ulimit -l unlimited; LimitMEMLOCK=infinity in a systemd unit), run as root, or lower buffer_pool_size")
	}
	v.finishSecretChecks(secrets, w)
	c.Warnings = append(c.Warnings, v.warns...)
	return joinSorted(v.errs)
}

// CheckBackends reports every namespace whose backend this program lacks: missing maps a
// backend name to the reason and fix (cmd/gonvmf passes rbd when it was built without
// the ceph build tags). The errors are *FieldError values on the backend field, joined as
// Parse does; c must come from Load, Parse or Resolve.
func (c *Config) CheckBackends(missing map[string]string) error {
	if len(missing) == 0 {
		return nil
	}
	if c.src == nil {
		c.src = newSource()
	}
	v := &validator{c: c, src: c.src}
	for i := range c.Subsystems {
		for j, ns := range c.Subsystems[i].Namespaces {
			if fix, ok := missing[ns.Backend]; ok {
				v.fail(fmt.Sprintf("subsystems[%d].namespaces[%d].backend", i, j), ns.Backend,
					fmt.Sprintf("this gonvmf has no %s backend", ns.Backend), fix)
			}
		}
	}
	return joinSorted(v.errs)
}

// --- bounded file system checks ---

// systemCheckTimeout bounds the time CheckSystem waits for its checks that touch the file
// system (fsChecks, the secret files' among them): one bound for all of them, which run
// at once.
// Tests shorten it.
var systemCheckTimeout = 10 * time.Second

// fsProblem is one thing a file system check found wrong: the field at fault (relative to
// the field the check was started for: "" for that field itself, "size" for the
// namespace's size), its value, what is wrong and the fix.
type fsProblem struct{ field, val, msg, fix string }

// fsResult is what a file system check found: its problems, and the file or device it
// looked at (nil when none), for CheckSystem's same-file comparison.
type fsResult struct {
	fi       fs.FileInfo
	problems []fsProblem
}

func (r *fsResult) fail(field, val, msg, fix string) {
	r.problems = append(r.problems, fsProblem{field, val, msg, fix})
}

// fsCheck is one of CheckSystem's checks that touch the file system. run does the file
// system's work and touches nothing else: neither the Config nor the validator, which
// may have moved on when it returns. key names the check: its kind, its path and every
// setting its result depends on, so that two checks with one key are the same check.
type fsCheck struct {
	key string
	run func() fsResult
}

// fsChecks are CheckSystem's file system checks running in this process, by key: a check
// started while one with its key runs joins it (startCheck). A check that has returned
// is forgotten: the next one looks at the file system again.
var fsChecks flight.Group[fsResult]

// pendingCheck is a file system check CheckSystem started and takes the result of
// (finish).
type pendingCheck struct {
	call *flight.Call[fsResult]
	base string // the field the problems' fields are relative to
	// field and val are the field and value a check that does not answer fails; what is
	// what it names then ("the backing file /srv/disk0.img"), and fix the fix it gives
	// ("": look at the mount).
	field, val, what, fix string
}

// startCheck runs chk on a goroutine of its own, or joins the check with its key that is
// running (fsChecks).
func startCheck(chk fsCheck, base, field, val, what string) *pendingCheck {
	run := chk.run
	call := fsChecks.Start(chk.key, func() (fsResult, error) { return run(), nil })
	return &pendingCheck{call: call, base: base, field: field, val: val, what: what}
}

// finish waits for pc (nil: no check) within w and reports what it found, or that it did
// not answer, on v; it returns the file or device the check looked at, or nil.
func (v *validator) finish(pc *pendingCheck, w *checkWait) fs.FileInfo {
	if pc == nil {
		return nil
	}
	if !w.wait(pc.call.Done()) {
		fix := pc.fix
		if fix == "" {
			fix = "check the mount that holds it (a hung NFS or FUSE mount?), then run gonvmf check again"
		}
		v.fail(pc.field, pc.val, fmt.Sprintf("%s did not answer within %v: its stat, open or read is still pending", pc.what, w.d), fix)
		return nil
	}
	r, _ := pc.call.Result()
	for _, p := range r.problems {
		f := pc.base
		if p.field != "" {
			f += "." + p.field
		}
		v.fail(f, p.val, p.msg, p.fix)
	}
	return r.fi
}

// checkWait is CheckSystem's one bound on its waits for the checks it started: every
// wait ends once d has passed since newCheckWait.
type checkWait struct {
	d       time.Duration
	timer   *time.Timer
	expired bool
}

func newCheckWait(d time.Duration) *checkWait { return &checkWait{d: d, timer: time.NewTimer(d)} }

func (w *checkWait) stop() { w.timer.Stop() }

// wait waits for done to close, at most until the bound has passed, and reports whether
// it has closed.
func (w *checkWait) wait(done <-chan struct{}) bool {
	if !w.expired {
		select {
		case <-done:
			return true
		case <-w.timer.C:
			w.expired = true
		}
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// --- the checks ---

// startRBDChecks starts the checks of an rbd namespace's ceph_conf and keyring (those
// given): each must be a regular file the target's user may read.
func startRBDChecks(ns *Namespace, p string) []*pendingCheck {
	var checks []*pendingCheck
	for _, f := range []struct{ field, path, what string }{
		{"ceph_conf", ns.RBD.CephConf, "the cluster's ceph.conf"},
		{"keyring", ns.RBD.Keyring, fmt.Sprintf("client.%s's keyring", cmpOr(ns.RBD.User, "admin"))},
	} {
		if f.path == "" {
			continue
		}
		fp := p + ".rbd." + f.field
		checks = append(checks, startCheck(rbdFileCheck(f.path, f.what), fp, fp, f.path, f.what+" "+f.path))
	}
	return checks
}

// rbdFileCheck checks that path, what rbd reads ("the cluster's ceph.conf"), is a
// regular file that can be read.
func rbdFileCheck(path, what string) fsCheck {
	return fsCheck{key: "rbd\x00" + path + "\x00" + what, run: func() (r fsResult) {
		fi, err := os.Stat(path)
		if err == nil && !fi.Mode().IsRegular() {
			r.fail("", path, fmt.Sprintf("%s is not a regular file", path), "name "+what)
			return r
		}
		if err == nil {
			var fh *os.File
			if fh, err = os.Open(path); err == nil {
				fh.Close()
			}
		}
		if err != nil {
			r.fail("", path, fmt.Sprintf("cannot read %s: %v", path, err), "check the path of "+what+" and that the target's user may read it")
		}
		return r
	}}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// startControlTLSChecks starts loading the TCP control listener's certificate and key,
// and its client CAs, when the listener has TLS.
func (v *validator) startControlTLSChecks() []*pendingCheck {
	c := v.c.Control
	if c.TCP == "" || c.TLSCert == "" || c.TLSKey == "" || c.TLSClientCA == "" {
		return nil
	}
	return []*pendingCheck{
		startCheck(tlsPairCheck(c.TLSCert, c.TLSKey), "control.tls_cert", "control.tls_cert", c.TLSCert,
			fmt.Sprintf("the certificate %s or its key %s", c.TLSCert, c.TLSKey)),
		startCheck(clientCACheck(c.TLSClientCA), "control.tls_client_ca", "control.tls_client_ca", c.TLSClientCA,
			"the client CAs' file "+c.TLSClientCA),
	}
}

// tlsPairCheck loads the certificate in the file cert with its private key in the file
// key; its problems are the certificate's field's.
func tlsPairCheck(cert, key string) fsCheck {
	return fsCheck{key: "tls\x00" + cert + "\x00" + key, run: func() (r fsResult) {
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			r.fail("", cert, fmt.Sprintf("cannot load the certificate %s with the key %s: %v", cert, key, err),
				"give a PEM certificate and its PEM private key")
		}
		return r
	}}
}

// clientCACheck reads the PEM certificates of the file path.
func clientCACheck(path string) fsCheck {
	return fsCheck{key: "ca\x00" + path, run: func() (r fsResult) {
		pem, err := os.ReadFile(path)
		if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			err = errors.New("no PEM certificate in it")
		}
		if err != nil {
			r.fail("", path, fmt.Sprintf("cannot read the client CAs from %s: %v", path, err),
				"give a file of PEM certificates")
		}
		return r
	}}
}

// fileCheck checks a file namespace's path (see CheckSystem). Its problems are on the
// path ("path") or the size ("size"); it returns the file when it exists and is regular.
func fileCheck(ns *Namespace) fsCheck {
	path, size, lbaSize, readOnly := ns.Path, ns.Size, ns.LBASize, ns.ReadOnly
	key := fmt.Sprintf("file\x00%s\x00%d\x00%d\x00%t", path, uint64(size), lbaSize, readOnly)
	return fsCheck{key: key, run: func() (r fsResult) {
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			switch {
			case size == 0:
				r.fail("path", path, fmt.Sprintf("%s does not exist, and no size is given to create it with", path),
					"create the file, or add a size (e.g. size: 10GiB) so that the target creates it")
			case readOnly:
				r.fail("path", path, fmt.Sprintf("%s does not exist, and a read-only namespace does not create its file", path),
					"create the file first, or remove read_only")
			default:
				dir := filepath.Dir(path)
				if st, err := os.Stat(dir); err != nil || !st.IsDir() {
					r.fail("path", path, fmt.Sprintf("%s does not exist and neither does its directory %s", path, dir),
						fmt.Sprintf("create the directory (mkdir -p %s) or correct the path", dir))
				} else if err := writable(dir); err != nil {
					r.fail("path", path, fmt.Sprintf("%s does not exist and cannot be created in %s: %v", path, dir, err),
						"let the target's user write to the directory, or choose another path")
				}
			}
			return r
		case err != nil:
			r.fail("path", path, fmt.Sprintf("cannot look at %s: %v", path, err), "check the path and the permissions of its directories")
			return r
		case fi.IsDir():
			r.fail("path", path, fmt.Sprintf("%s is a directory", path), "name a file, e.g. "+filepath.Join(path, "disk0.img"))
			return r
		case isBlockDevice(fi):
			r.fail("path", path, fmt.Sprintf("%s is a block device", path), "use backend: block for block devices")
			return r
		case !fi.Mode().IsRegular():
			r.fail("path", path, fmt.Sprintf("%s is not a regular file (%s)", path, fi.Mode().Type()), "use a regular file, or backend: block for a block device")
			return r
		}
		have := Size(fi.Size())
		switch {
		case size == 0 && have == 0:
			r.fail("path", path, fmt.Sprintf("%s is empty and no size is given", path), "add a size (e.g. size: 10GiB) and the target extends the file to it")
		case size == 0 && have%Size(lbaSize) != 0:
			r.fail("path", path, fmt.Sprintf("%s is %d bytes, not a multiple of lba_size %d", path, uint64(have), lbaSize),
				fmt.Sprintf("add size: %s (the target extends the file to it)", (have/Size(lbaSize)+1)*Size(lbaSize)))
		case size != 0 && have > size:
			r.fail("size", size.String(), fmt.Sprintf("%s is %s (%d bytes), larger than size %s, and the target never truncates a file", path, have.Human(), uint64(have), size),
				fmt.Sprintf("remove size to use the whole file, or set size: %s", have))
		}
		if f := checkOpen(&r, path, readOnly); f != nil {
			f.Close()
		}
		r.fi = fi
		return r
	}}
}

// blockCheck checks a block namespace's path (see CheckSystem). Its problems are on the
// path ("path") or the LBA size ("lba_size"); it returns the device when it is one.
func blockCheck(ns *Namespace) fsCheck {
	path, lbaSize, readOnly := ns.Path, ns.LBASize, ns.ReadOnly
	key := fmt.Sprintf("block\x00%s\x00%d\x00%t", path, lbaSize, readOnly)
	return fsCheck{key: key, run: func() (r fsResult) {
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			r.fail("path", path, fmt.Sprintf("%s does not exist", path), "check the device name (lsblk lists block devices)")
			return r
		case err != nil:
			r.fail("path", path, fmt.Sprintf("cannot look at %s: %v", path, err), "check the path and the permissions of its directories")
			return r
		case !isBlockDevice(fi):
			r.fail("path", path, fmt.Sprintf("%s is not a block device", path), "name a block device (lsblk lists them), or use backend: file for a regular file")
			return r
		}
		r.fi = fi
		f := checkOpen(&r, path, readOnly)
		if f == nil {
			return r
		}
		defer f.Close()
		lbs, devSize, err := blockDeviceInfo(f)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
		case err != nil:
			r.fail("path", path, fmt.Sprintf("cannot read the geometry of %s: %v", path, err), "check that it is a working block device")
		case devSize == 0:
			r.fail("path", path, fmt.Sprintf("%s has no capacity", path), "use a device with media in it")
		case lbs > lbaSize:
			r.fail("lba_size", fmt.Sprint(lbaSize), fmt.Sprintf("lba_size %d is smaller than the %d-byte logical blocks of %s", lbaSize, lbs, path),
				fmt.Sprintf("set lba_size: %d", lbs))
		}
		return r
	}}
}

// checkOpen opens a namespace's backing file or device the way the target will
// (read-write unless readOnly) and returns it, or adds to r why it cannot.
func checkOpen(r *fsResult, path string, readOnly bool) *os.File {
	flag, mode := os.O_RDWR, "read-write"
	if readOnly {
		flag, mode = os.O_RDONLY, "read-only"
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		r.fail("path", path, fmt.Sprintf("cannot open %s %s: %v", path, mode, err),
			"give the target's user access to it, or set read_only: true if it needs only reading")
		return nil
	}
	return f
}

func isBlockDevice(fi fs.FileInfo) bool {
	return fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0
}

// startStateFileCheck starts the state file's check (stateFileCheck), if there is a state
// file; the directory is checked only for a state_file the configuration names.
func (v *validator) startStateFileCheck() *pendingCheck {
	p := v.c.StateFile
	if p == "" || p == StateFileNone {
		return nil
	}
	return startCheck(stateFileCheck(p, v.explicit("state_file")), "state_file", "state_file", p, "the state file "+p)
}

// stateFileCheck checks that the state file path can be written: it is a regular file or
// does not exist yet, and, when checkDir, its directory exists and is writable (it is
// replaced by renaming a new file into place). CheckSystem checks the directory only for
// a state_file the configuration names: the default one next to a configuration kept in
// a read-only place is no reason to refuse it (a host asking for Persist Through Power
// Loss then gets an error, logged with the path).
func stateFileCheck(path string, checkDir bool) fsCheck {
	return fsCheck{key: fmt.Sprintf("state\x00%s\x00%t", path, checkDir), run: func() (r fsResult) {
		if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
			r.fail("", path, fmt.Sprintf("%s is not a regular file", path), "give the path of a file gonvmf may create and replace, e.g. state_file: /var/lib/gonvmf/state.json")
			return r
		}
		if !checkDir {
			return r
		}
		dir := filepath.Dir(path)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			r.fail("", path, fmt.Sprintf("its directory %s does not exist", dir), "create it (mkdir -p "+dir+"), or choose another state_file")
			return r
		}
		if err := writable(dir); err != nil {
			r.fail("", path, fmt.Sprintf("its directory %s is not writable: %v", dir, err), "let the target's user write there, or choose another state_file")
		}
		return r
	}}
}
