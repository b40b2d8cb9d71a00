package backend

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// fdStore is the part of the file and block backends that moves data: positional reads
// and writes on a descriptor, FUA, flush and zero-filling, with short transfers and EINTR
// handled. Only errors allocate.
type fdStore struct {
	geometry
	sys    sysOps
	path   string
	log    *slog.Logger
	f      *os.File
	fd     int
	syncF  *os.File // opened with O_DSYNC for FUA writes; nil means FUA by fdatasync
	syncFD int
	direct bool

	// syncMu serializes fdatasync calls: of two concurrent calls the kernel reports a
	// writeback error to one only, and the other must not succeed before the first has
	// recorded it. syncErr is the first sync failure (ErrSync); every later Flush returns
	// it without asking the kernel, which would say all is well. Only a new open clears it.
	syncMu  sync.Mutex
	syncErr atomic.Pointer[error]

	// blocking is set once the kernel refused a non-blocking (RWF_NOWAIT) request to
	// the store: a file without them is refused by io_submit, and a device whose queue
	// does not take REQ_NOWAIT (some bio-based stacks) ends each such request with
	// EOPNOTSUPP when it completes. A Ring then leaves the store's requests to the
	// executor's workers.
	blocking atomic.Bool
}

func (s *fdStore) ReadBlocks(buf []byte, slba uint64) error {
	if _, err := s.checkBuf(buf, slba); err != nil {
		return err
	}
	return s.readFull(buf, int64(slba<<s.lbaShift))
}

func (s *fdStore) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	if _, err := s.checkWrite(buf, slba); err != nil {
		return err
	}
	off := int64(slba << s.lbaShift)
	if fua && s.syncF != nil {
		// The O_DSYNC descriptor: the data and the metadata needed to read it back
		// (allocation, size) are on stable media when pwrite returns.
		return s.syncWriteError(s.writeFull(s.syncFD, buf, off))
	}
	if err := s.writeFull(s.fd, buf, off); err != nil {
		return err
	}
	if fua {
		return s.datasync()
	}
	return nil
}

func (s *fdStore) Flush() error {
	if s.readOnly {
		return nil
	}
	return s.datasync()
}

func (s *fdStore) datasync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if p := s.syncErr.Load(); p != nil {
		return *p
	}
	for {
		err := s.sys.fdatasync(s.fd)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return s.syncFailed(fmt.Errorf("backend: fdatasync %s: %w: %w", s.path, ErrSync, err))
		}
		return nil
	}
}

// syncFailed records the first sync failure (see syncErr) and returns err.
func (s *fdStore) syncFailed(err error) error {
	if s.syncErr.CompareAndSwap(nil, &err) {
		s.log.Error("backend: syncing to stable storage failed: writes reported complete may be lost; "+
			"every later flush fails until the namespace is reopened", "path", s.path, "err", err)
	}
	return err
}

// syncWriteError classifies the error of a write through the O_DSYNC descriptor. Such a
// write syncs, and the sync can report the loss of earlier writes (a failed writeback,
// a journal commit that failed), which the kernel then clears: every error is ErrSync
// except a direct write refused for lack of space, which fails before anything is
// written or synced.
func (s *fdStore) syncWriteError(err error) error {
	if err == nil || errors.Is(err, ErrSync) {
		return err
	}
	if s.direct && (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)) {
		return err
	}
	return s.syncFailed(fmt.Errorf("%w: %w", ErrSync, err))
}

func (s *fdStore) readFull(buf []byte, off int64) error {
	for len(buf) > 0 {
		n, err := s.sys.pread(s.fd, buf, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("backend: read %s at byte %d, %d bytes: %w", s.path, off, len(buf), err)
		}
		if n == 0 {
			// Only when the file shrank under us: the namespace size was checked at open.
			return fmt.Errorf("backend: read %s at byte %d, %d bytes: %w (file truncated?)", s.path, off, len(buf), io.ErrUnexpectedEOF)
		}
		buf = buf[n:]
		off += int64(n)
	}
	return nil
}

func (s *fdStore) writeFull(fd int, buf []byte, off int64) error {
	for len(buf) > 0 {
		n, err := s.sys.pwrite(fd, buf, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("backend: write %s at byte %d, %d bytes: %w", s.path, off, len(buf), err)
		}
		if n == 0 {
			return fmt.Errorf("backend: write %s at byte %d, %d bytes: %w", s.path, off, len(buf), io.ErrShortWrite)
		}
		buf = buf[n:]
		off += int64(n)
	}
	return nil
}

// writeZeroBufs zeroes n bytes at off by writing the shared zero buffer: the fallback
// when the filesystem or device has no cheaper way.
func (s *fdStore) writeZeroBufs(off, n int64) error {
	z := zeroBuf()
	for n > 0 {
		l := min(n, int64(len(z)))
		if err := s.writeFull(s.fd, z[:l], off); err != nil {
			return err
		}
		off += l
		n -= l
	}
	return nil
}

func (s *fdStore) fallocate(mode uint32, off, n int64) error {
	for {
		err := s.sys.fallocate(s.fd, mode, off, n)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func (s *fdStore) ioctlRange(req uint, off, n uint64) error {
	for {
		err := s.sys.ioctlRange(s.fd, req, off, n)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// closeFiles closes both descriptors and reports the first error.
func (s *fdStore) closeFiles() error {
	var err error
	if s.syncF != nil {
		err = s.syncF.Close()
		s.syncF = nil
	}
	if s.f != nil {
		if e := s.f.Close(); err == nil {
			err = e
		}
		s.f = nil
	}
	if err != nil {
		return fmt.Errorf("backend: close %s: %w", s.path, err)
	}
	return nil
}
