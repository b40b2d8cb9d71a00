package backend

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/ncw/directio"
	"golang.org/x/sys/unix"
)

// realSys is sysOps on the kernel.
type realSys struct{}

func (realSys) open(path string, flag int, perm os.FileMode, direct bool) (*os.File, error) {
	if direct {
		return directio.OpenFile(path, flag, perm)
	}
	return os.OpenFile(path, flag, perm)
}

func (realSys) pread(fd int, p []byte, off int64) (int, error)  { return unix.Pread(fd, p, off) }
func (realSys) pwrite(fd int, p []byte, off int64) (int, error) { return unix.Pwrite(fd, p, off) }
func (realSys) fdatasync(fd int) error                          { return unix.Fdatasync(fd) }

func (realSys) dioAlign(fd int) (mem, off uint32, ok bool) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &stx); err != nil || stx.Mask&unix.STATX_DIOALIGN == 0 {
		return 0, 0, false
	}
	return stx.Dio_mem_align, stx.Dio_offset_align, true
}

func (realSys) devSectorSize(fd int) (uint32, bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0, false
	}
	return sysfsSectorSize("/sys", st.Dev)
}

// sysfsSectorSize returns the logical block size of block device dev from the sysfs
// mounted at sysfs; ok is false when dev is not a block device there (a filesystem's
// anonymous device, major 0) or the size is not a power of two of at least 512.
func sysfsSectorSize(sysfs string, dev uint64) (uint32, bool) {
	data, err := readQueueAttr(sysfs, dev, "logical_block_size")
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	if err != nil || n < 512 || n&(n-1) != 0 {
		return 0, false
	}
	return uint32(n), true
}

// readQueueAttr reads the request queue attribute name (queue/name) of block device dev
// from the sysfs mounted at sysfs. A partition has no queue of its own: its disk's, one
// directory up from the partition's, is read instead.
func readQueueAttr(sysfs string, dev uint64, name string) ([]byte, error) {
	d := fmt.Sprintf("%s/dev/block/%d:%d", sysfs, unix.Major(dev), unix.Minor(dev))
	data, err := os.ReadFile(d + "/queue/" + name)
	if err != nil {
		data, err = os.ReadFile(d + "/../queue/" + name)
	}
	return data, err
}

func (realSys) fallocate(fd int, mode uint32, off, n int64) error {
	return unix.Fallocate(fd, mode, off, n)
}

func (realSys) ioctlRange(fd int, req uint, off, n uint64) error {
	r := [2]uint64{off, n}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&r)))
	if e != 0 {
		return e
	}
	return nil
}

// faultSysOps is the real system-call layer with the errors a Faults injects.
type faultSysOps struct {
	realSys
	f *Faults
}

func (s faultSysOps) pwrite(fd int, p []byte, off int64) (int, error) {
	if err := s.f.write(); err != nil {
		return 0, err
	}
	return s.realSys.pwrite(fd, p, off)
}

func (s faultSysOps) fdatasync(fd int) error {
	if err := s.f.sync(); err != nil {
		return err
	}
	return s.realSys.fdatasync(fd)
}

// sysFor returns the system-call layer for s: the test's, one with injected faults, or
// the kernel's.
func sysFor(s Spec) sysOps {
	switch {
	case s.sys != nil:
		return s.sys
	case s.Faults != nil:
		return faultSysOps{f: s.Faults}
	}
	return realSys{}
}

// notSupported reports whether err says the kernel or filesystem lacks the operation.
func notSupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTTY)
}

// zeroBufSize is the size of the shared zero buffer that write zeroes falls back to.
const zeroBufSize = 256 << 10

// zeroBuf returns a zero-filled buffer aligned for O_DIRECT, shared by every backend and
// never written to, so writing zeroes needs no per-request allocation.
var zeroBuf = sync.OnceValue(func() []byte { return aligned.Bytes(zeroBufSize) })
