package backend

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

func TestStatus(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("backend: something at byte 4096: %w", err) }
	cases := []struct {
		op   Op
		err  error
		want nvmeproto.Status
	}{
		{OpRead, nil, nvmeproto.StatusSuccess},
		{OpRead, rangeError(10, 5, 12), nvmeproto.StatusLBAOutOfRange.WithDNR()},
		{OpWrite, ErrReadOnly, nvmeproto.StatusNSWriteProtected.WithDNR()},
		{OpWrite, wrap(syscall.EROFS), nvmeproto.StatusNSWriteProtected.WithDNR()},
		{OpWrite, wrap(syscall.ENOSPC), nvmeproto.StatusCapacityExceeded.WithDNR()},
		{OpWriteZeroes, wrap(syscall.EDQUOT), nvmeproto.StatusCapacityExceeded.WithDNR()},
		{OpRead, wrap(syscall.EIO), nvmeproto.StatusUnrecoveredReadError},
		{OpWrite, wrap(syscall.EIO), nvmeproto.StatusWriteFault},
		{OpWriteZeroes, wrap(syscall.EIO), nvmeproto.StatusWriteFault},
		{OpFlush, wrap(syscall.EIO), nvmeproto.StatusWriteFault},
		{OpDeallocate, wrap(syscall.EIO), nvmeproto.StatusInternalError},
		// A failed sync may have lost completed writes: never retried into silence.
		{OpFlush, fmt.Errorf("backend: fdatasync f: %w: %w", ErrSync, syscall.EIO), nvmeproto.StatusWriteFault.WithDNR()},
		{OpFlush, fmt.Errorf("backend: fdatasync f: %w: %w", ErrSync, syscall.ENOSPC), nvmeproto.StatusWriteFault.WithDNR()},
		{OpWrite, fmt.Errorf("%w: %w", ErrSync, wrap(syscall.EIO)), nvmeproto.StatusWriteFault.WithDNR()},
		{OpWriteZeroes, fmt.Errorf("backend: fdatasync f: %w: %w", ErrSync, syscall.EIO), nvmeproto.StatusWriteFault.WithDNR()},
		// A fenced backend: retried once it has been reopened, unless writes may be lost.
		{OpRead, fmt.Errorf("rbd: read: %w: %w", ErrNeedsReopen, syscall.ESHUTDOWN), nvmeproto.StatusNSNotReady},
		{OpWrite, fmt.Errorf("rbd: write: %w: %w", ErrNeedsReopen, syscall.EIO), nvmeproto.StatusNSNotReady},
		{OpFlush, fmt.Errorf("rbd: flush: %w: %w: %w", ErrSync, ErrNeedsReopen, syscall.ESHUTDOWN), nvmeproto.StatusWriteFault.WithDNR()},
		{OpRead, wrap(ErrUnaligned), nvmeproto.StatusInternalError.WithDNR()},
		{Op(42), fmt.Errorf("%w 42", ErrInvalidOp), nvmeproto.StatusInvalidOpcode.WithDNR()},
		{OpRead, ErrClosed, nvmeproto.StatusInternalError},
		{OpRead, wrap(syscall.EBADF), nvmeproto.StatusInternalError},
		{OpRead, errors.New("anything"), nvmeproto.StatusInternalError},
	}
	for _, c := range cases {
		if got := Status(c.op, c.err); got != c.want {
			t.Errorf("Status(%v, %v) = %v, want %v", c.op, c.err, got, c.want)
		}
	}
	if s := OpWriteZeroes.String(); s != "write zeroes" {
		t.Errorf("OpWriteZeroes.String() = %q", s)
	}
	if s := Op(9).String(); s != "op(9)" {
		t.Errorf("Op(9).String() = %q", s)
	}
}
