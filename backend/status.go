package backend

import (
	"errors"
	"syscall"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Status maps the error of a request with operation op to the NVMe completion status the
// target returns:
//
//	nil                          Successful Completion
//	ErrSync                      Write Fault, DNR (completed writes may be lost: see ErrSync)
//	ErrNeedsReopen               Namespace Not Ready (the host retries it once the backend
//	                             has been reopened)
//	ErrLBAOutOfRange             LBA Out of Range, DNR
//	ErrReadOnly, EROFS           Namespace is Write Protected, DNR (EROFS: also librbd's
//	                             refusal while a peer keeps an rbd image's exclusive lock)
//	ENOSPC, EDQUOT               Capacity Exceeded, DNR (a sparse file on a full filesystem;
//	                             the Linux host turns it into ENOSPC for the application)
//	EIO on read                  Unrecovered Read Error
//	EIO on write, write zeroes
//	or flush                     Write Fault
//	ErrInvalidOp                 Invalid Command Opcode, DNR
//	ErrUnaligned                 Internal Error, DNR (the caller broke the buffer contract)
//	anything else                Internal Error
//
// Errors the host can fix by retrying (a transient EIO, ErrClosed during a controller
// reset, ErrNeedsReopen) leave DNR clear.
func Status(op Op, err error) nvmeproto.Status {
	switch {
	case err == nil:
		return nvmeproto.StatusSuccess
	case errors.Is(err, ErrSync):
		return nvmeproto.StatusWriteFault.WithDNR()
	case errors.Is(err, ErrNeedsReopen):
		return nvmeproto.StatusNSNotReady
	case errors.Is(err, ErrLBAOutOfRange):
		return nvmeproto.StatusLBAOutOfRange.WithDNR()
	case errors.Is(err, ErrReadOnly), errors.Is(err, syscall.EROFS):
		return nvmeproto.StatusNSWriteProtected.WithDNR()
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return nvmeproto.StatusCapacityExceeded.WithDNR()
	case errors.Is(err, ErrInvalidOp):
		return nvmeproto.StatusInvalidOpcode.WithDNR()
	case errors.Is(err, ErrUnaligned):
		return nvmeproto.StatusInternalError.WithDNR()
	case errors.Is(err, syscall.EIO):
		switch op {
		case OpRead:
			return nvmeproto.StatusUnrecoveredReadError
		case OpWrite, OpWriteZeroes, OpFlush:
			return nvmeproto.StatusWriteFault
		}
	}
	return nvmeproto.StatusInternalError
}
