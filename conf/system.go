package conf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
//   - memory namespaces and the buffer pool fit in this machine's RAM, and the buffer pool
//     can be pinned under RLIMIT_MEMLOCK;
//   - hosts' "file:" secrets: each file exists, belongs to this user, is closed to
//     others and holds a valid secret (checkSecrets).
//
// It changes nothing (it opens files and devices and closes them again) and returns
// *FieldError values joined as Parse does. c must come from Load, Parse or Resolve.
//
// Only the secret files' checks are bounded in time (secretCheckTimeout): a secret file
// that does not answer fails its field. The other checks (the namespaces' files and
// devices, the state files, rbd's ceph_conf and keyring, the TLS files) stat, open and
// read on the calling goroutine and block as long as their file system does: a backend
// on a hung mount holds CheckSystem, and so gonvmf check, serve's start and a reload's
// check, until the mount answers.
func (c *Config) CheckSystem() error {
	if c.src == nil {
		c.src = newSource()
	}
	v := &validator{c: c, src: c.src}
	type opened struct {
		fi       fs.FileInfo
		p        string
		readOnly bool
	}
	var seen []opened
	var memTotal Size
	var memLast string
	for i := range c.Subsystems {
		for j := range c.Subsystems[i].Namespaces {
			ns := &c.Subsystems[i].Namespaces[j]
			p := fmt.Sprintf("subsystems[%d].namespaces[%d]", i, j)
			var fi fs.FileInfo
			switch ns.Backend {
			case BackendFile:
				fi = v.checkFile(ns, p)
			case BackendBlock:
				fi = v.checkBlock(ns, p)
			case BackendMemory:
				memTotal += ns.Size
				memLast = p
			case BackendRBD:
				v.checkRBD(ns, p)
			}
			if fi == nil {
				continue
			}
			for _, o := range seen {
				if os.SameFile(o.fi, fi) && !(o.readOnly && ns.ReadOnly) {
					v.fail(p+".path", ns.Path, fmt.Sprintf("%s is the same file or device as the backing of %s", ns.Path, v.where(o.p)),
						"give each namespace its own file or device (only read-only namespaces may share one)")
					break
				}
			}
			seen = append(seen, opened{fi, p, ns.ReadOnly})
		}
	}
	v.checkStateFile()
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
	v.checkControlTLS()
	if limit, ok := memlockLimit(); ok && limit < uint64(pool) {
		v.fail("transport.buffer_pool_size", pool.String(),
			fmt.Sprintf("RLIMIT_MEMLOCK is %s, less than the %s buffer pool that RDMA must pin", Size(limit).Human(), pool.Human()),
			"raise the limit (ulimit -l unlimited; LimitMEMLOCK=infinity in a systemd unit), run as root, or lower buffer_pool_size")
	}
	v.checkSecrets()
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

func (v *validator) checkRBD(ns *Namespace, p string) {
	for _, f := range []struct{ field, path, what string }{
		{"ceph_conf", ns.RBD.CephConf, "the cluster's ceph.conf"},
		{"keyring", ns.RBD.Keyring, fmt.Sprintf("client.%s's keyring", cmpOr(ns.RBD.User, "admin"))},
	} {
		if f.path == "" {
			continue
		}
		fp := p + ".rbd." + f.field
		fi, err := os.Stat(f.path)
		if err == nil && !fi.Mode().IsRegular() {
			v.fail(fp, f.path, fmt.Sprintf("%s is not a regular file", f.path), "name "+f.what)
			continue
		}
		if err == nil {
			var fh *os.File
			if fh, err = os.Open(f.path); err == nil {
				fh.Close()
			}
		}
		if err != nil {
			v.fail(fp, f.path, fmt.Sprintf("cannot read %s: %v", f.path, err), "check the path of "+f.what+" and that the target's user may read it")
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkControlTLS loads the TCP control listener's certificate, key and client CAs.
func (v *validator) checkControlTLS() {
	c := v.c.Control
	if c.TCP == "" || c.TLSCert == "" || c.TLSKey == "" || c.TLSClientCA == "" {
		return
	}
	if _, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey); err != nil {
		v.fail("control.tls_cert", c.TLSCert, fmt.Sprintf("cannot load the certificate %s with the key %s: %v", c.TLSCert, c.TLSKey, err),
			"give a PEM certificate and its PEM private key")
	}
	pem, err := os.ReadFile(c.TLSClientCA)
	if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
		err = errors.New("no PEM certificate in it")
	}
	if err != nil {
		v.fail("control.tls_client_ca", c.TLSClientCA, fmt.Sprintf("cannot read the client CAs from %s: %v", c.TLSClientCA, err),
			"give a file of PEM certificates")
	}
}

func (v *validator) checkFile(ns *Namespace, p string) fs.FileInfo {
	pp := p + ".path"
	fi, err := os.Stat(ns.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		switch {
		case ns.Size == 0:
			v.fail(pp, ns.Path, fmt.Sprintf("%s does not exist, and no size is given to create it with", ns.Path),
				"create the file, or add a size (e.g. size: 10GiB) so that the target creates it")
		case ns.ReadOnly:
			v.fail(pp, ns.Path, fmt.Sprintf("%s does not exist, and a read-only namespace does not create its file", ns.Path),
				"create the file first, or remove read_only")
		default:
			dir := filepath.Dir(ns.Path)
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				v.fail(pp, ns.Path, fmt.Sprintf("%s does not exist and neither does its directory %s", ns.Path, dir),
					fmt.Sprintf("create the directory (mkdir -p %s) or correct the path", dir))
			} else if err := writable(dir); err != nil {
				v.fail(pp, ns.Path, fmt.Sprintf("%s does not exist and cannot be created in %s: %v", ns.Path, dir, err),
					"let the target's user write to the directory, or choose another path")
			}
		}
		return nil
	case err != nil:
		v.fail(pp, ns.Path, fmt.Sprintf("cannot look at %s: %v", ns.Path, err), "check the path and the permissions of its directories")
		return nil
	case fi.IsDir():
		v.fail(pp, ns.Path, fmt.Sprintf("%s is a directory", ns.Path), "name a file, e.g. "+filepath.Join(ns.Path, "disk0.img"))
		return nil
	case isBlockDevice(fi):
		v.fail(pp, ns.Path, fmt.Sprintf("%s is a block device", ns.Path), "use backend: block for block devices")
		return nil
	case !fi.Mode().IsRegular():
		v.fail(pp, ns.Path, fmt.Sprintf("%s is not a regular file (%s)", ns.Path, fi.Mode().Type()), "use a regular file, or backend: block for a block device")
		return nil
	}
	have := Size(fi.Size())
	switch {
	case ns.Size == 0 && have == 0:
		v.fail(pp, ns.Path, fmt.Sprintf("%s is empty and no size is given", ns.Path), "add a size (e.g. size: 10GiB) and the target extends the file to it")
	case ns.Size == 0 && have%Size(ns.LBASize) != 0:
		v.fail(pp, ns.Path, fmt.Sprintf("%s is %d bytes, not a multiple of lba_size %d", ns.Path, uint64(have), ns.LBASize),
			fmt.Sprintf("add size: %s (the target extends the file to it)", (have/Size(ns.LBASize)+1)*Size(ns.LBASize)))
	case ns.Size != 0 && have > ns.Size:
		v.fail(p+".size", ns.Size.String(), fmt.Sprintf("%s is %s (%d bytes), larger than size %s, and the target never truncates a file", ns.Path, have.Human(), uint64(have), ns.Size),
			fmt.Sprintf("remove size to use the whole file, or set size: %s", have))
	}
	v.checkOpen(ns, pp)
	return fi
}

func (v *validator) checkBlock(ns *Namespace, p string) fs.FileInfo {
	pp := p + ".path"
	fi, err := os.Stat(ns.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.fail(pp, ns.Path, fmt.Sprintf("%s does not exist", ns.Path), "check the device name (lsblk lists block devices)")
		return nil
	case err != nil:
		v.fail(pp, ns.Path, fmt.Sprintf("cannot look at %s: %v", ns.Path, err), "check the path and the permissions of its directories")
		return nil
	case !isBlockDevice(fi):
		v.fail(pp, ns.Path, fmt.Sprintf("%s is not a block device", ns.Path), "name a block device (lsblk lists them), or use backend: file for a regular file")
		return nil
	}
	f := v.checkOpen(ns, pp)
	if f == nil {
		return fi
	}
	defer f.Close()
	lbs, size, err := blockDeviceInfo(f)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		v.fail(pp, ns.Path, fmt.Sprintf("cannot read the geometry of %s: %v", ns.Path, err), "check that it is a working block device")
	case size == 0:
		v.fail(pp, ns.Path, fmt.Sprintf("%s has no capacity", ns.Path), "use a device with media in it")
	case lbs > ns.LBASize:
		v.fail(p+".lba_size", fmt.Sprint(ns.LBASize), fmt.Sprintf("lba_size %d is smaller than the %d-byte logical blocks of %s", ns.LBASize, lbs, ns.Path),
			fmt.Sprintf("set lba_size: %d", lbs))
	}
	return fi
}

// checkOpen opens the backing file the way the target will (read-write unless read_only)
// and returns it, or reports why it cannot.
func (v *validator) checkOpen(ns *Namespace, pp string) *os.File {
	flag := os.O_RDWR
	if ns.ReadOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(ns.Path, flag, 0)
	if err != nil {
		mode := "read-write"
		if ns.ReadOnly {
			mode = "read-only"
		}
		v.fail(pp, ns.Path, fmt.Sprintf("cannot open %s %s: %v", ns.Path, mode, err),
			"give the target's user access to it, or set read_only: true if it needs only reading")
		return nil
	}
	if ns.Backend == BackendFile {
		f.Close()
		return nil
	}
	return f
}

func isBlockDevice(fi fs.FileInfo) bool {
	return fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0
}

// checkStateFile checks that the state file can be written: it is a regular file or does
// not exist yet, and its directory exists and is writable (it is replaced by renaming a
// new file into place). The directory is checked only for a state_file the configuration
// names: the default one next to a configuration kept in a read-only place is no reason
// to refuse it (a host asking for Persist Through Power Loss then gets an error, logged
// with the path).
func (v *validator) checkStateFile() {
	p := v.c.StateFile
	if p == "" || p == StateFileNone {
		return
	}
	if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() {
		v.fail("state_file", p, fmt.Sprintf("%s is not a regular file", p), "give the path of a file gonvmf may create and replace, e.g. state_file: /var/lib/gonvmf/state.json")
		return
	}
	if !v.explicit("state_file") {
		return
	}
	dir := filepath.Dir(p)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		v.fail("state_file", p, fmt.Sprintf("its directory %s does not exist", dir), "create it (mkdir -p "+dir+"), or choose another state_file")
		return
	}
	if err := writable(dir); err != nil {
		v.fail("state_file", p, fmt.Sprintf("its directory %s is not writable: %v", dir, err), "let the target's user write there, or choose another state_file")
	}
}
