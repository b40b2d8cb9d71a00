//go:build cgo && !nordma

package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// pollFD waits for a library-owned descriptor (CM event channel, completion
// channel, async event fd) to become readable through the Go runtime's
// netpoller, so a waiting goroutine does not hold an OS thread. It works on
// a non-blocking duplicate of the descriptor; the original stays owned by
// the library (and shares the non-blocking flag, which the library's calls
// then honour by returning EAGAIN).
type pollFD struct {
	f        *os.File
	rc       syscall.RawConn
	wake     atomic.Bool // a wakeup is pending (see interrupt)
	detached atomic.Bool // the duplicate is closed (see detach)
}

func newPollFD(fd int, name string) (*pollFD, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("rdmacm: set O_NONBLOCK on %s fd %d: %w", name, fd, err)
	}
	nfd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("rdmacm: dup %s fd %d: %w", name, fd, errno)
	}
	f := os.NewFile(uintptr(nfd), name)
	// SetReadDeadline fails for descriptors the netpoller could not take.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("rdmacm: %s fd %d cannot be polled: %w", name, fd, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("rdmacm: %s fd %d: %w", name, fd, err)
	}
	return &pollFD{f: f, rc: rc}, nil
}

// close wakes waiters, waits for a running read callback to return and
// closes the duplicate (unless detach did).
func (p *pollFD) close() error {
	if p.detached.Swap(true) {
		return nil
	}
	return p.f.Close()
}

// detach takes the descriptor out of the netpoller for good, for an owner that waits
// on it another way: while registered, every event on it wakes a thread blocked in
// the netpoller that finds nobody waiting (epoll is edge-triggered, and the runtime
// watches every registered descriptor). waitTimeout and interrupt must not be used
// afterwards; close becomes a no-op.
func (p *pollFD) detach() {
	if !p.detached.Swap(true) {
		p.f.Close()
	}
}

// interrupt makes the current or next waitTimeout return early.
func (p *pollFD) interrupt() {
	p.wake.Store(true)
	p.f.SetReadDeadline(time.Unix(1, 0))
}

// waitTimeout calls fn, and while it returns false sleeps until the fd is
// readable, the timeout (<= 0: none) passes or interrupt is called. It
// returns woken=true when fn returned true. It does not allocate.
func (p *pollFD) waitTimeout(timeout time.Duration, fn func(uintptr) bool) (done bool, err error) {
	if p.wake.Swap(false) {
		return false, nil
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if err := p.f.SetReadDeadline(dl); err != nil {
		return false, err
	}
	// An interrupt between the Swap above and SetReadDeadline had its
	// deadline overwritten: look at the flag again.
	if p.wake.Swap(false) {
		return false, nil
	}
	err = p.rc.Read(fn)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false, nil
	}
	return false, err
}

// waitCtx calls fn until it returns true, sleeping in the netpoller while
// it returns false, until ctx is done.
func (p *pollFD) waitCtx(ctx context.Context, fn func(uintptr) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, hasDL := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { p.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		if err := p.f.SetReadDeadline(dl); err != nil {
			return err
		}
		if ctx.Err() != nil { // cancelled before the deadline was reset
			return ctx.Err()
		}
		err := p.rc.Read(fn)
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if hasDL && !time.Now().Before(dl) {
			return context.DeadlineExceeded
		}
		// A stale interrupt or cancellation callback: wait again.
	}
}
