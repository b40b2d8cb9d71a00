package backend

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// How fileBackend.WriteZeroes zeroes a range; it steps down when the filesystem says an
// fallocate mode is not supported, and stays there.
const (
	zeroByRange uint32 = iota // fallocate(FALLOC_FL_ZERO_RANGE|FALLOC_FL_KEEP_SIZE)
	zeroByPunch               // fallocate(FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE)
	zeroByWrite               // pwrite of the shared zero buffer
)

// fileBackend stores a namespace in a regular file, through O_DIRECT where the
// filesystem allows it and through the page cache otherwise. FUA writes go to a second
// descriptor opened with O_DSYNC. Deallocate punches holes; write zeroes uses ZERO_RANGE,
// then PUNCH_HOLE, then plain writes, whichever the filesystem supports.
type fileBackend struct {
	fdStore
	zeroMode atomic.Uint32
	punch    atomic.Bool // PUNCH_HOLE works
	dlfeat   bool        // promised at open: deallocated blocks read as zeroes
	pbs      uint32
	workers  int
	resizeMu sync.Mutex // one Resize at a time
}

func openFile(s Spec) (Backend, error) {
	lba, shift, err := checkLBASize(s.LBASize, 512)
	if err != nil {
		return nil, err
	}
	if s.Path == "" {
		return nil, errors.New("backend: file backend needs a path")
	}
	if s.Size != 0 {
		if _, err := checkSize(KindFile, s.Size, lba); err != nil {
			return nil, err
		}
	}
	sys := sysFor(s)
	create := false
	st, err := os.Stat(s.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if s.ReadOnly {
			return nil, fmt.Errorf("backend: file %q does not exist; a read-only namespace needs an existing file", s.Path)
		}
		if s.Size == 0 {
			return nil, fmt.Errorf("backend: file %q does not exist and size is 0; set a size to create it", s.Path)
		}
		create = true
	case err != nil:
		return nil, fmt.Errorf("backend: file: %w", err)
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		return nil, fmt.Errorf("backend: %q is a block device; use backend kind %q", s.Path, KindBlock)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("backend: %q is not a regular file (mode %v)", s.Path, st.Mode())
	}

	flag := unix.O_RDWR
	if s.ReadOnly {
		flag = unix.O_RDONLY
	}
	if create {
		flag |= unix.O_CREAT
	}
	f, direct, err := openMaybeDirect(sys, s.Logger, s.Path, flag, lba)
	if err != nil {
		return nil, err
	}
	b := &fileBackend{
		fdStore: fdStore{
			sys:    sys,
			path:   s.Path,
			log:    s.Logger,
			f:      f,
			fd:     int(f.Fd()),
			syncFD: -1,
			direct: direct,
		},
		workers: s.Workers,
	}
	b.init(lba, shift, 0, s.ReadOnly)
	if b.workers <= 0 {
		b.workers = DefaultWorkers
	}
	if err := b.setup(s, flag&^unix.O_CREAT); err != nil {
		b.closeFiles()
		return nil, err
	}
	return b, nil
}

// openMaybeDirect opens path with O_DIRECT and falls back to buffered I/O, with a
// warning, when the filesystem refuses O_DIRECT (EINVAL from open, as tmpfs before Linux
// 6.6 does) or needs a direct I/O alignment the namespace cannot meet (dioUnfit).
func openMaybeDirect(sys sysOps, log *slog.Logger, path string, flag int, lba uint32) (*os.File, bool, error) {
	f, err := sys.open(path, flag, 0o600, true)
	if err == nil {
		why := dioUnfit(sys, f, lba)
		if why == "" {
			return f, true, nil
		}
		f.Close()
		log.Warn("backend: filesystem cannot do O_DIRECT for this namespace; using buffered I/O", "path", path, "reason", why)
	} else if errors.Is(err, unix.EINVAL) {
		log.Warn("backend: filesystem refuses O_DIRECT; using buffered I/O", "path", path, "err", err)
	} else {
		return nil, false, fmt.Errorf("backend: open file: %w", err)
	}
	f, err = sys.open(path, flag, 0o600, false)
	if err != nil {
		return nil, false, fmt.Errorf("backend: open file: %w", err)
	}
	return f, false, nil
}

// dioUnfit returns why direct I/O on f cannot serve lba-sized blocks from
// Alignment-aligned buffers, or "" when it can. The alignment direct I/O needs comes from
// statx STATX_DIOALIGN (Linux 6.1; not every filesystem reports it). Without it, it is
// the logical block size of the disk holding the file, for both offsets and buffers, as
// the kernel's direct I/O paths before 6.1 required. A filesystem without a disk of its
// own (tmpfs, overlayfs, NFS, btrfs, whose st_dev is anonymous) on such a kernel tells
// neither: direct I/O is then assumed to take 512-byte blocks, and if it does not, every
// request it refuses fails with EINVAL.
func dioUnfit(sys sysOps, f *os.File, lba uint32) string {
	fd := int(f.Fd())
	mem, off, ok := sys.dioAlign(fd)
	src := "statx"
	if !ok {
		lbs, ok := sys.devSectorSize(fd)
		if !ok {
			return ""
		}
		mem, off, src = lbs, lbs, "the logical block size of the file's disk"
	}
	switch {
	case off == 0:
		return "statx reports no direct I/O support"
	case off > lba:
		why := fmt.Sprintf("direct I/O needs offsets aligned to %d bytes (%s), more than the lba size %d", off, src, lba)
		if off <= 4096 && mem <= Alignment {
			why += "; an lba size of 4096 keeps direct I/O"
		}
		return why
	case mem > Alignment:
		return fmt.Sprintf("direct I/O needs buffers aligned to %d bytes (%s), more than %d", mem, src, Alignment)
	}
	return ""
}

// setup locks the file, sizes the namespace, opens the FUA descriptor and probes hole
// punching.
func (b *fileBackend) setup(s Spec, flag int) error {
	how := unix.LOCK_EX
	if s.ReadOnly || s.Shared {
		how = unix.LOCK_SH
	}
	if err := unix.Flock(b.fd, how|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			if s.Shared {
				return fmt.Errorf("backend: file %q is in use by another process that holds it exclusively (flock); only shared and read-only namespaces may share a file", s.Path)
			}
			return fmt.Errorf("backend: file %q is in use by another process (flock); a second target serving it too needs shared: true on both", s.Path)
		}
		return fmt.Errorf("backend: flock %q: %w", s.Path, err)
	}
	st, err := b.f.Stat()
	if err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	fileSize := uint64(st.Size())
	size := s.Size
	if size == 0 {
		size = fileSize &^ uint64(b.lbaSize-1)
		if size == 0 {
			return fmt.Errorf("backend: file %q is %d bytes, less than one %d-byte block; set a size", s.Path, fileSize, b.lbaSize)
		}
		if size != fileSize {
			b.log.Warn("backend: file size is not a multiple of the lba size; the tail is not used",
				"path", s.Path, "file_bytes", fileSize, "lba_size", b.lbaSize)
		}
	}
	nblocks, err := checkSize(KindFile, size, b.lbaSize)
	if err != nil {
		return err
	}
	b.nblocks.Store(nblocks)
	switch {
	case fileSize < size && s.ReadOnly:
		return fmt.Errorf("backend: file %q is %d bytes, smaller than size %d, and a read-only namespace cannot extend it", s.Path, fileSize, size)
	case fileSize < size:
		if err := b.f.Truncate(int64(size)); err != nil {
			return fmt.Errorf("backend: extend file to %d bytes: %w", size, err)
		}
		b.log.Info("backend: extended file", "path", s.Path, "from_bytes", fileSize, "to_bytes", size)
		fileSize = size
	case fileSize > size:
		b.log.Info("backend: namespace uses the start of a larger file", "path", s.Path, "file_bytes", fileSize, "namespace_bytes", size)
	}
	b.pbs = b.lbaSize
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if bs := uint32(sys.Blksize); bs > b.lbaSize && bs <= 1<<20 && bs&(bs-1) == 0 {
			b.pbs = bs
		}
	}
	if s.ReadOnly {
		b.logOpen()
		return nil
	}

	if f, err := b.sys.open(s.Path, flag|unix.O_DSYNC, 0, b.direct); err != nil {
		b.log.Warn("backend: cannot open an O_DSYNC descriptor; FUA writes use fdatasync", "path", s.Path, "err", err)
	} else {
		b.syncF, b.syncFD = f, int(f.Fd())
	}

	// Probe hole punching past the end of the file, where it cannot touch data.
	probe := (fileSize + Alignment - 1) &^ (Alignment - 1)
	switch err := b.fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(probe), Alignment); {
	case err == nil:
		b.punch.Store(true)
		b.dlfeat = true
	case notSupported(err):
		b.log.Info("backend: filesystem cannot punch holes; deallocate does nothing", "path", s.Path)
	default:
		b.log.Warn("backend: hole punching probe failed; deallocate does nothing", "path", s.Path, "err", err)
	}
	b.logOpen()
	return nil
}

func (b *fileBackend) logOpen() {
	fua := "o_dsync"
	if b.syncF == nil {
		fua = "fdatasync"
	}
	b.log.Info("backend: opened file", "path", b.path, "bytes", b.nblocks.Load()<<b.lbaShift, "lba_size", b.lbaSize,
		"direct", b.direct, "read_only", b.readOnly, "fua", fua, "punch_hole", b.punch.Load())
}

// Deallocate punches a hole (the file keeps its size). When the filesystem cannot punch
// holes it does nothing, which the advisory deallocate allows, unless the namespace
// promised zeroes (a filesystem that stopped punching after the open-time probe
// succeeded): then the range is zeroed another way.
func (b *fileBackend) Deallocate(slba, nlb uint64) error {
	if err := b.checkModify(slba, nlb); err != nil || nlb == 0 {
		return err
	}
	off, n := int64(slba<<b.lbaShift), int64(nlb<<b.lbaShift)
	if b.punch.Load() {
		err := b.fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err == nil {
			return nil
		}
		if !notSupported(err) {
			return fmt.Errorf("backend: punch hole in %s at byte %d, %d bytes: %w", b.path, off, n, err)
		}
		if b.punch.CompareAndSwap(true, false) {
			b.log.Warn("backend: filesystem stopped punching holes", "path", b.path, "err", err)
		}
	}
	if b.dlfeat {
		return b.zero(off, n)
	}
	return nil
}

// WriteZeroes zeroes the range with the cheapest method the filesystem supports.
func (b *fileBackend) WriteZeroes(slba, nlb uint64) error {
	if err := b.checkModify(slba, nlb); err != nil || nlb == 0 {
		return err
	}
	return b.zero(int64(slba<<b.lbaShift), int64(nlb<<b.lbaShift))
}

func (b *fileBackend) zero(off, n int64) error {
	for {
		mode := b.zeroMode.Load()
		var err error
		switch mode {
		case zeroByRange:
			err = b.fallocate(unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		case zeroByPunch:
			if !b.punch.Load() {
				b.zeroMode.CompareAndSwap(mode, zeroByWrite)
				continue
			}
			err = b.fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		default:
			return b.writeZeroBufs(off, n)
		}
		if err == nil {
			return nil
		}
		if !notSupported(err) {
			return fmt.Errorf("backend: zero %s at byte %d, %d bytes: %w", b.path, off, n, err)
		}
		if b.zeroMode.CompareAndSwap(mode, mode+1) {
			b.log.Info("backend: fallocate mode not supported; write zeroes falls back", "path", b.path, "mode", zeroModeName(mode), "err", err)
		}
	}
}

func zeroModeName(m uint32) string {
	switch m {
	case zeroByRange:
		return "zero_range"
	case zeroByPunch:
		return "punch_hole"
	}
	return "write"
}

func (b *fileBackend) Close() error { return b.closeFiles() }

// Resize grows the namespace to size bytes, extending the file (sparse) when it is
// smaller; with size 0 it takes the file's current size (grown by someone else), rounded
// down to whole blocks. The file is never truncated.
func (b *fileBackend) Resize(size uint64) (uint64, error) {
	b.resizeMu.Lock()
	defer b.resizeMu.Unlock()
	st, err := b.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("backend: resize %s: %w", b.path, err)
	}
	fileSize := uint64(st.Size())
	if size == 0 {
		size = fileSize &^ uint64(b.lbaSize-1)
	}
	n, err := b.growTo(size)
	if err != nil {
		return 0, fmt.Errorf("%w (file %s)", err, b.path)
	}
	if n == b.nblocks.Load() {
		return n, nil
	}
	if fileSize < size {
		if b.readOnly {
			return 0, fmt.Errorf("backend: resize %s to %d bytes: the file is %d bytes and a read-only namespace cannot extend it", b.path, size, fileSize)
		}
		if err := b.f.Truncate(int64(size)); err != nil {
			return 0, fmt.Errorf("backend: extend %s to %d bytes: %w", b.path, size, err)
		}
	}
	b.log.Info("backend: namespace grown", "path", b.path, "from_bytes", b.nblocks.Load()<<b.lbaShift, "to_bytes", size, "file_bytes", max(fileSize, size))
	b.nblocks.Store(n)
	return n, nil
}

func (b *fileBackend) Info() Info {
	return Info{
		Kind:                  KindFile,
		Path:                  b.path,
		Direct:                b.direct,
		DeallocateReadsZeroes: b.dlfeat,
		VolatileWriteCache:    true,
		PhysicalBlockSize:     b.pbs,
		Workers:               b.workers,
		ThinProvisioned:       true,
	}
}

// Usage returns the bytes allocated to the file (up to the namespace size) and the bytes
// its filesystem can still allocate to an unprivileged writer (statfs f_bavail; gonvmf
// running as root may get the reserved blocks too, so this errs low).
func (b *fileBackend) Usage() (allocated, available uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(b.fd, &st); err != nil {
		return 0, 0, fmt.Errorf("backend: fstat %s: %w", b.path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(b.fd, &fs); err != nil {
		return 0, 0, fmt.Errorf("backend: statfs %s: %w", b.path, err)
	}
	allocated = min(uint64(st.Blocks)*512, b.NumBlocks()<<b.lbaShift)
	return allocated, fs.Bavail * uint64(fs.Bsize), nil
}
