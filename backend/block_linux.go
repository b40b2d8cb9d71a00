package backend

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// blockBackend serves a namespace from a block device opened with O_DIRECT and O_EXCL
// (so a mounted or otherwise claimed device is refused; without O_EXCL when Spec.Shared). Deallocate is BLKDISCARD, write
// zeroes BLKZEROOUT, FUA writes go through an O_DSYNC descriptor (the kernel sends them
// with FUA or follows them with a cache flush) and Flush is fdatasync (a cache flush).
type blockBackend struct {
	fdStore
	discard  atomic.Bool // BLKDISCARD works
	zeroout  atomic.Bool // BLKZEROOUT works
	pbs      uint32
	vwc      bool
	workers  int
	resizeMu sync.Mutex // one Resize at a time; guards devBytes after open
	devBytes uint64
}

func openBlock(s Spec) (Backend, error) {
	if s.Path == "" {
		return nil, errors.New("backend: block backend needs a path")
	}
	st, err := os.Stat(s.Path)
	if err != nil {
		return nil, fmt.Errorf("backend: block device: %w", err)
	}
	if st.Mode()&fs.ModeDevice == 0 || st.Mode()&fs.ModeCharDevice != 0 {
		if st.Mode().IsRegular() {
			return nil, fmt.Errorf("backend: %q is a regular file, not a block device; use backend kind %q", s.Path, KindFile)
		}
		return nil, fmt.Errorf("backend: %q is not a block device (mode %v)", s.Path, st.Mode())
	}
	sys := sysFor(s)
	flag := unix.O_RDWR
	if s.ReadOnly {
		flag = unix.O_RDONLY
	}
	excl := unix.O_EXCL
	if s.Shared {
		excl = 0
	}
	f, err := sys.open(s.Path, flag|excl, 0, true)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("backend: block device %q is in use (mounted, or claimed by another program; a second target serving it too needs shared: true on both): %w", s.Path, err)
		}
		return nil, fmt.Errorf("backend: open block device: %w", err)
	}
	b := &blockBackend{
		fdStore: fdStore{
			sys:    sys,
			path:   s.Path,
			log:    s.Logger,
			f:      f,
			fd:     int(f.Fd()),
			syncFD: -1,
			direct: true,
		},
		workers: s.Workers,
	}
	b.init(0, 0, 0, s.ReadOnly)
	if b.workers <= 0 {
		b.workers = DefaultWorkers
	}
	if err := b.setup(s, flag); err != nil {
		b.closeFiles()
		return nil, err
	}
	return b, nil
}

func (b *blockBackend) setup(s Spec, flag int) error {
	devBytes, err := unix.IoctlGetUint64(b.fd, unix.BLKGETSIZE64)
	if err != nil {
		return fmt.Errorf("backend: BLKGETSIZE64 on %q: %w", s.Path, err)
	}
	lss, err := unix.IoctlGetInt(b.fd, unix.BLKSSZGET)
	if err != nil {
		return fmt.Errorf("backend: BLKSSZGET on %q: %w", s.Path, err)
	}
	pbs, err := unix.IoctlGetUint32(b.fd, unix.BLKPBSZGET)
	if err != nil {
		return fmt.Errorf("backend: BLKPBSZGET on %q: %w", s.Path, err)
	}
	lba, shift, err := checkLBASize(s.LBASize, uint32(lss))
	if err != nil {
		return err
	}
	if lba < uint32(lss) {
		return fmt.Errorf("backend: lba size %d is smaller than the logical sector size %d of %q; set the lba size to %d or more",
			lba, lss, s.Path, lss)
	}
	b.lbaSize, b.lbaShift, b.devBytes = lba, shift, devBytes
	b.pbs = max(pbs, lba)
	size := s.Size
	if size == 0 {
		size = devBytes &^ uint64(lba-1)
	} else if size > devBytes {
		return fmt.Errorf("backend: size %d is larger than block device %q (%d bytes)", size, s.Path, devBytes)
	}
	nblocks, err := checkSize(KindBlock, size, lba)
	if err != nil {
		return err
	}
	b.nblocks.Store(nblocks)
	b.vwc = writeCache(b.fd)
	if !s.ReadOnly {
		// Not O_EXCL: this process already holds the exclusive claim (or shares the device).
		if f, err := b.sys.open(s.Path, flag|unix.O_DSYNC, 0, true); err != nil {
			b.log.Warn("backend: cannot open an O_DSYNC descriptor; FUA writes use fdatasync", "path", s.Path, "err", err)
		} else {
			b.syncF, b.syncFD = f, int(f.Fd())
		}
		b.discard.Store(true)
		b.zeroout.Store(true)
	}
	b.log.Info("backend: opened block device", "path", s.Path, "bytes", size, "device_bytes", devBytes,
		"lba_size", lba, "logical_sector", lss, "physical_sector", pbs, "read_only", s.ReadOnly, "write_cache", b.vwc)
	return nil
}

// writeCache reports whether the device has a volatile write cache, from
// /sys/dev/block/MAJ:MIN/queue/write_cache; true when that cannot be read.
func writeCache(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return true
	}
	data, err := readQueueAttr("/sys", st.Rdev, "write_cache")
	if err != nil {
		return true
	}
	return !bytes.HasPrefix(bytes.TrimSpace(data), []byte("write through"))
}

// Deallocate discards the range (BLKDISCARD). A device without discard support makes
// it a no-op, which the advisory deallocate allows.
func (b *blockBackend) Deallocate(slba, nlb uint64) error {
	if err := b.checkModify(slba, nlb); err != nil || nlb == 0 || !b.discard.Load() {
		return err
	}
	off, n := slba<<b.lbaShift, nlb<<b.lbaShift
	err := b.ioctlRange(unix.BLKDISCARD, off, n)
	switch {
	case err == nil:
		return nil
	case notSupported(err):
		if b.discard.CompareAndSwap(true, false) {
			b.log.Info("backend: block device does not support discard; deallocate does nothing", "path", b.path)
		}
		return nil
	}
	return fmt.Errorf("backend: BLKDISCARD %s at byte %d, %d bytes: %w", b.path, off, n, err)
}

// WriteZeroes uses BLKZEROOUT (which the kernel carries out with Write Zeroes, or by
// writing zero pages itself), and writes the shared zero buffer if the ioctl is missing.
func (b *blockBackend) WriteZeroes(slba, nlb uint64) error {
	if err := b.checkModify(slba, nlb); err != nil || nlb == 0 {
		return err
	}
	off, n := slba<<b.lbaShift, nlb<<b.lbaShift
	if b.zeroout.Load() {
		err := b.ioctlRange(unix.BLKZEROOUT, off, n)
		if err == nil {
			return nil
		}
		if !notSupported(err) {
			return fmt.Errorf("backend: BLKZEROOUT %s at byte %d, %d bytes: %w", b.path, off, n, err)
		}
		if b.zeroout.CompareAndSwap(true, false) {
			b.log.Info("backend: BLKZEROOUT not supported; write zeroes writes zero buffers", "path", b.path, "err", err)
		}
	}
	return b.writeZeroBufs(int64(off), int64(n))
}

func (b *blockBackend) Close() error { return b.closeFiles() }

// Resize takes the device's current size (size 0), after the device was grown (an LVM
// volume extended, a virtual disk resized); it cannot grow a device itself, so a size
// other than 0 or the device's size is refused.
func (b *blockBackend) Resize(size uint64) (uint64, error) {
	b.resizeMu.Lock()
	defer b.resizeMu.Unlock()
	devBytes, err := unix.IoctlGetUint64(b.fd, unix.BLKGETSIZE64)
	if err != nil {
		return 0, fmt.Errorf("backend: BLKGETSIZE64 on %q: %w", b.path, err)
	}
	avail := devBytes &^ uint64(b.lbaSize-1)
	switch {
	case size == 0:
		size = avail
	case size > avail:
		return 0, fmt.Errorf("backend: resize %s to %d bytes: the device has %d bytes; grow the device first, then resize without a size", b.path, size, devBytes)
	}
	n, err := b.growTo(size)
	if err != nil {
		return 0, fmt.Errorf("%w (block device %s now has %d bytes)", err, b.path, devBytes)
	}
	if n != b.nblocks.Load() {
		b.log.Info("backend: namespace grown", "path", b.path, "from_bytes", b.nblocks.Load()<<b.lbaShift, "to_bytes", size, "device_bytes", devBytes)
		b.devBytes = devBytes
		b.nblocks.Store(n)
	}
	return n, nil
}

func (b *blockBackend) Info() Info {
	return Info{
		Kind:               KindBlock,
		Path:               b.path,
		Direct:             true,
		VolatileWriteCache: b.vwc,
		PhysicalBlockSize:  b.pbs,
		Workers:            b.workers,
	}
}
