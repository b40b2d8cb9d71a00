package backend

import "os"

// sysOps is the system-call layer of the file and block backends. The real one calls the
// kernel; tests wrap it to inject faults (a filesystem that refuses O_DIRECT, fallocate
// modes that are not supported) and to see which descriptor and flags each operation
// used. Methods take raw descriptors so the I/O path allocates nothing.
type sysOps interface {
	// open opens path with flag (plus O_DIRECT when direct) and perm.
	open(path string, flag int, perm os.FileMode, direct bool) (*os.File, error)
	pread(fd int, p []byte, off int64) (int, error)
	pwrite(fd int, p []byte, off int64) (int, error)
	fallocate(fd int, mode uint32, off, n int64) error
	fdatasync(fd int) error
	// dioAlign returns the direct I/O memory and offset alignment the filesystem requires
	// for fd (statx STATX_DIOALIGN); ok is false when the kernel does not say.
	dioAlign(fd int) (mem, off uint32, ok bool)
	// devSectorSize returns the logical block size of the block device holding fd's file
	// (sysfs queue/logical_block_size of st_dev, or of its disk for a partition); ok is
	// false when the filesystem has no block device of its own (tmpfs, overlayfs, NFS,
	// btrfs) or sysfs does not say.
	devSectorSize(fd int) (size uint32, ok bool)
	// ioctlRange issues a block device ioctl that takes a {start, length} pair of byte
	// counts (BLKDISCARD, BLKZEROOUT).
	ioctlRange(fd int, req uint, off, n uint64) error
}
