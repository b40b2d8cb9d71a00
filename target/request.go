package target

import (
	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Request is one command on its way through a Queue: the decoded SQE, the description of
// its data transfer, the buffer the data lives in, and the completion the core fills.
//
// Transports preallocate one Request per receive slot (queue depth) and reuse it for
// every command that arrives in that slot; the core keeps no reference to a Request
// after it has called TransportQueue.Complete for it. The zero value is ready to use.
//
// Field ownership through the life of a command:
//
//	transport, before Begin:  Cmd, ICD (and Context whenever it likes)
//	core, in Begin:           Dir, Length, InCapsule, SGL (and Data when InCapsule)
//	transport, before Execute: Data (len(Data) >= Length) filled with the host's data for
//	                          host-to-controller commands, an empty buffer otherwise
//	core, before Complete:    CQE, and for controller-to-host commands Data[:Length]
type Request struct {
	// Cmd is the submission queue entry, decoded by the transport from the capsule.
	Cmd nvmeproto.Command
	// ICD is the in-capsule data: the bytes of the command capsule after the 64-byte
	// SQE, as received (nil when the capsule had none). In-capsule data descriptors
	// (0x01) and descriptor lists (0x31) point into it. It must stay valid until Complete.
	ICD []byte

	// Dir is the direction of the command's data: DirHostToCtrl (write-like: the
	// transport fetches Length bytes from the host before Execute), DirCtrlToHost
	// (read-like: the transport sends Data[:Length] to the host after a successful
	// completion) or DirNone. Set by Begin; meaningful only when Length > 0.
	Dir nvmeproto.Direction
	// Length is the number of data bytes the command moves, from its SGL. Set by Begin.
	Length uint32
	// InCapsule reports that the data came in the capsule: Begin has pointed Data at
	// it inside ICD and the transport has nothing to fetch.
	InCapsule bool
	// SGL lists the host memory segments to move Length bytes to or from when the data
	// is not in-capsule: keyed descriptors (address, length, key) on RDMA, one Transport
	// Data Block on TCP. Their lengths sum to Length; data is laid out in Data in list
	// order. A descriptor's subtype tells an RDMA transport whether the host asked for
	// the key to be invalidated (SGLSubtypeInvalidate). Set by Begin; it aliases storage
	// inside the Request.
	SGL []nvmeproto.SGLDescriptor

	// Data is the command's data buffer, provided by the transport (registered memory
	// for RDMA) after Begin and before Execute, at least Length bytes long. For best
	// performance it starts on a backend.Alignment boundary (the core copies through a
	// private bounce buffer otherwise). The core reads it for host-to-controller
	// commands and writes Data[:Length] for controller-to-host commands; it does not
	// touch it after Complete.
	Data []byte

	// CQE is the completion, filled by the core (CID, SQID, SQHD, status, DW0/DW1)
	// before it calls TransportQueue.Complete.
	CQE nvmeproto.Completion

	// Context is free for the transport (typically a pointer to its own slot).
	Context any

	// Core-private state.
	q        *Queue
	ns       *namespace
	start    int64 // nanotime at Begin when the target measures latency, else 0
	sglStore [MaxSGLDescriptors]nvmeproto.SGLDescriptor
	br       backend.Request
	bounce   []byte // aligned scratch for unaligned Data and Compare reads, kept for reuse
	ranges   []backend.Range
	compare  bool
	bounced  bool
	fenceIn  *nsFence // where the command is counted for the I/O fence (fence.go); nil: nowhere
	fencePar uint8    // which of fenceIn's two counters
	fua      bool
}

// alignedBuf returns an aligned.Alignment-aligned slice of n bytes from r's scratch
// buffer, growing it when it is too small.
func (r *Request) alignedBuf(n int) []byte {
	if cap(r.bounce) < n {
		r.bounce = aligned.Bytes(n)
	}
	return r.bounce[:n]
}

// bounceKeep is the largest scratch buffer a Request keeps once its command is done.
// Larger ones (a Compare's read, an unaligned transfer larger than in-capsule data) are
// dropped then: what the core holds outside the transport's buffers is bounded by the
// commands in flight, each backed by a transport buffer of its size, and not by the
// largest transfer each of a transport's Requests ever made (a host sending Compares of
// the largest size on every slot of every queue).
const bounceKeep = 16 << 10

// dropBounce lets go of a scratch buffer larger than bounceKeep.
func (r *Request) dropBounce() {
	if cap(r.bounce) > bounceKeep {
		r.bounce = nil
	}
}
