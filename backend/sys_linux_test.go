package backend

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// sysCall is one recorded call to the system-call layer.
type sysCall struct {
	name   string // open, pread, pwrite, fallocate, fdatasync, ioctl
	fd     int
	direct bool   // open: O_DIRECT requested
	flag   int    // open: flags
	mode   uint32 // fallocate mode, ioctl request
	off, n int64
}

// faultSys wraps the real system calls, records them and injects faults, in the manner of
// pebble's fault-injecting filesystem.
type faultSys struct {
	realSys
	mu    sync.Mutex
	calls []sysCall

	refuseDirect bool             // open with O_DIRECT fails with EINVAL, like old tmpfs
	refuseDsync  bool             // open with O_DSYNC fails with EINVAL
	fallocErr    map[uint32]error // fallocate with this mode fails with this error
	ioctlErr     map[uint]error   // ioctlRange with this request fails
	preadErr     error            // every pread fails
	pwriteErr    error            // every pwrite fails
	fsyncErr     error            // every fdatasync fails
	chop         bool             // transfers move at most 512 bytes; every third call is EINTR
	n            int              // calls seen, for chop
	quiet        bool             // record nothing (benchmarks)
	dio          *[2]uint32       // dioAlign reports these memory and offset alignments
	noDIO        bool             // dioAlign reports nothing, as before Linux 6.1
	sector       *uint32          // devSectorSize reports this; 0: no block device
}

func (s *faultSys) record(c sysCall) {
	if s.quiet {
		return
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// count returns how many recorded calls satisfy match.
func (s *faultSys) count(match func(c sysCall) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if match(c) {
			n++
		}
	}
	return n
}

func (s *faultSys) reset() {
	s.mu.Lock()
	s.calls = nil
	s.mu.Unlock()
}

func (s *faultSys) open(path string, flag int, perm os.FileMode, direct bool) (*os.File, error) {
	s.record(sysCall{name: "open", direct: direct, flag: flag})
	if direct && s.refuseDirect {
		// What open(2) returns on a filesystem without O_DIRECT support; like the real
		// thing, O_CREAT has already created the file.
		if flag&os.O_CREATE != 0 {
			f, err := os.OpenFile(path, flag, perm)
			if err != nil {
				return nil, err
			}
			f.Close()
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: unix.EINVAL}
	}
	if flag&unix.O_DSYNC != 0 && s.refuseDsync {
		return nil, &os.PathError{Op: "open", Path: path, Err: unix.EINVAL}
	}
	return s.realSys.open(path, flag, perm, direct)
}

func (s *faultSys) chopped(p []byte) ([]byte, bool) {
	if !s.chop {
		return p, false
	}
	s.mu.Lock()
	s.n++
	eintr := s.n%3 == 0
	s.mu.Unlock()
	return p[:min(len(p), 512)], eintr
}

func (s *faultSys) pread(fd int, p []byte, off int64) (int, error) {
	s.record(sysCall{name: "pread", fd: fd, off: off, n: int64(len(p))})
	if s.preadErr != nil {
		return 0, s.preadErr
	}
	p, eintr := s.chopped(p)
	if eintr {
		return 0, unix.EINTR
	}
	return s.realSys.pread(fd, p, off)
}

func (s *faultSys) pwrite(fd int, p []byte, off int64) (int, error) {
	s.record(sysCall{name: "pwrite", fd: fd, off: off, n: int64(len(p))})
	if s.pwriteErr != nil {
		return 0, s.pwriteErr
	}
	p, eintr := s.chopped(p)
	if eintr {
		return 0, unix.EINTR
	}
	return s.realSys.pwrite(fd, p, off)
}

func (s *faultSys) fallocate(fd int, mode uint32, off, n int64) error {
	s.record(sysCall{name: "fallocate", fd: fd, mode: mode, off: off, n: n})
	if err := s.fallocErr[mode]; err != nil {
		return err
	}
	return s.realSys.fallocate(fd, mode, off, n)
}

func (s *faultSys) dioAlign(fd int) (mem, off uint32, ok bool) {
	switch {
	case s.noDIO:
		return 0, 0, false
	case s.dio != nil:
		return s.dio[0], s.dio[1], true
	}
	return s.realSys.dioAlign(fd)
}

func (s *faultSys) devSectorSize(fd int) (uint32, bool) {
	if s.sector != nil {
		return *s.sector, *s.sector != 0
	}
	return s.realSys.devSectorSize(fd)
}

func (s *faultSys) fdatasync(fd int) error {
	s.record(sysCall{name: "fdatasync", fd: fd})
	if s.fsyncErr != nil {
		return s.fsyncErr
	}
	return s.realSys.fdatasync(fd)
}

func (s *faultSys) ioctlRange(fd int, req uint, off, n uint64) error {
	s.record(sysCall{name: "ioctl", fd: fd, mode: uint32(req), off: int64(off), n: int64(n)})
	if err := s.ioctlErr[req]; err != nil {
		return err
	}
	return s.realSys.ioctlRange(fd, req, off, n)
}

// fsName names the filesystem type of dir.
func fsName(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return "other"
}

// directDir returns a temporary directory on a disk filesystem where O_DIRECT works for
// 512-byte blocks: t.TempDir() when it qualifies, else one under /var/tmp or the package
// directory. It skips the test, saying why, when there is none.
func directDir(t testing.TB) string {
	t.Helper()
	var tried []string
	for i, mk := range []func() (string, error){
		func() (string, error) { return t.TempDir(), nil },
		func() (string, error) { return os.MkdirTemp("/var/tmp", "gonvmf-backend-") },
		func() (string, error) { return os.MkdirTemp(".", ".gonvmf-backend-") },
	} {
		dir, err := mk()
		if err != nil {
			continue
		}
		if i > 0 {
			t.Cleanup(func() { os.RemoveAll(dir) })
		}
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		name := fsName(dir)
		if name != "tmpfs" && directWorks(dir) {
			t.Logf("O_DIRECT test directory %s (%s)", dir, name)
			return dir
		}
		tried = append(tried, dir+" ("+name+")")
	}
	t.Skipf("no disk filesystem with O_DIRECT support found (tried %v)", tried)
	return ""
}

// directWorks reports whether a 512-byte O_DIRECT write and read work in dir.
func directWorks(dir string) bool {
	p := filepath.Join(dir, "probe")
	defer os.Remove(p)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT, 0o600)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	b := alignedBuf(4096)
	if n, err := unix.Pwrite(fd, b[:512], 0); err != nil || n != 512 {
		return false
	}
	n, err := unix.Pread(fd, b[:512], 0)
	return err == nil && n == 512
}

// fdFlags returns fcntl(F_GETFL) of fd.
func fdFlags(t testing.TB, fd int) int {
	t.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatalf("F_GETFL: %v", err)
	}
	return fl
}
