package conf

import (
	"os"

	"golang.org/x/sys/unix"
)

// blockDeviceInfo returns a block device's logical block size and capacity in bytes.
func blockDeviceInfo(f *os.File) (lbs uint32, size uint64, err error) {
	fd := int(f.Fd())
	n, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
	if err != nil {
		return 0, 0, err
	}
	sz, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil {
		return 0, 0, err
	}
	return uint32(n), sz, nil
}

// totalRAM returns the machine's physical memory.
func totalRAM() (Size, bool) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, false
	}
	return Size(uint64(si.Totalram) * uint64(si.Unit)), true
}

// memlockLimit returns RLIMIT_MEMLOCK when it limits this process (root is exempt through
// CAP_IPC_LOCK).
func memlockLimit() (uint64, bool) {
	if os.Geteuid() == 0 {
		return 0, false
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return 0, false
	}
	return rl.Cur, true
}

// writable reports whether this process may create files in dir.
func writable(dir string) error { return unix.Access(dir, unix.W_OK|unix.X_OK) }
