package initiator

import (
	"fmt"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Op is the operation of an I/O Request.
type Op uint8

// I/O operations.
const (
	OpRead        Op = iota + 1 // Read Blocks blocks at LBA into Buf
	OpWrite                     // Write Buf to Blocks blocks at LBA (FUA with IOFlags FUA)
	OpFlush                     // Flush the namespace's volatile write cache
	OpWriteZeroes               // Write Zeroes to Blocks blocks at LBA (at most 65536)
	OpDeallocate                // Dataset Management, deallocate Blocks blocks at LBA
	opCommand                   // a raw command in Request.cmd (admin and Fabrics)
)

var opNames = [...]string{"", "Read", "Write", "Flush", "Write Zeroes", "Deallocate", "Command"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// IOFlags modify an I/O Request.
type IOFlags uint8

// I/O flags.
const (
	// FUA (force unit access): a write completes only once the data is on
	// non-volatile media.
	FUA IOFlags = 1 << iota
	// Unmap asks Write Zeroes to deallocate the blocks as well (DEAC).
	Unmap
)

// Request is one asynchronous I/O command for IOQueue.Submit. Requests are caller-owned
// and reusable: allocate them (with their Buffers and a Done function bound once) at
// setup and resubmit them from Done, and the I/O path allocates nothing.
type Request struct {
	Op     Op
	NSID   uint32
	LBA    uint64 // starting LBA
	Blocks uint32 // number of logical blocks, 1..65536 (not 0's based)
	Flags  IOFlags
	// Buf holds the data of a Read or Write: the whole buffer is transferred, so its
	// length must be Blocks × the namespace's LBA size.
	Buf *Buffer
	// Done is called once per successful Submit, when the command completed or failed,
	// on the queue's completion goroutine. It must not block; it may Submit (also this
	// Request again). A command the controller failed without Do Not Retry is retried
	// (Options.MaxRetries) before Done is called: Done sees the last attempt's result, and
	// Buf stays the command's, unchanged by the host, until then.
	Done func(*Request)
	// User is free for the caller (e.g. a pointer to its own per-I/O state).
	User any

	// Results, valid in Done.
	Status nvmeproto.Status // the completion status (zero when Err is a transport error)
	DW0    uint32           // completion dword 0
	Err    error            // nil on success; a *StatusError, or why the command could not complete

	dw1       uint32
	cmd       nvmeproto.Command // opCommand: the SQE (CID, flags and SGL are set by the queue)
	dir       nvmeproto.Direction
	noTimeout bool   // held by the controller indefinitely (Asynchronous Event Request)
	reserved  bool   // an authentication command: takes the queue's authSlot if it has one
	name      string // opCommand: the command's name for errors

	// The synchronous API's (queue.execWait) bookkeeping; the asynchronous API leaves it
	// alone. stop ends retries: its caller's context ended, so no attempt is sent after
	// it is set, and a retry waiting for its delay ends at once (see slot.retryDue). Only
	// execWait sets it, whose Done may run on any goroutine: finish runs off the
	// completion goroutine only for stopped requests.
	stop   atomic.Bool
	slot   *slot // the slot submit put the request in; read only by execWait
	ownBuf bool  // Buf is the caller's: execWait returns only once the command ended
}

// opName returns the name errors use for the request.
func (r *Request) opName() string {
	if r.Op == opCommand {
		return r.name
	}
	return r.Op.String()
}
