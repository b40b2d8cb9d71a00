package initiator

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Namespace is an active namespace of a controller, with a synchronous I/O API that
// spreads commands over the controller's I/O queues. Its methods are safe for concurrent
// use; every one takes a context. When it ends first, the command is not retried any
// more (see Options.MaxRetries), and:
//
//   - the copying and buffer-less methods (ReadAt, WriteAt, Flush, WriteZeroes,
//     Deallocate) return its error at once, while the command itself stays outstanding
//     until the controller completes it; the bounce buffers it uses stay referenced (not
//     reused, not freed) until then;
//   - the zero-copy methods (Read, Write) return only once the command has ended, since
//     until then the controller may still transfer into (or out of) the caller's buffer:
//     when the call returns, the buffer is the caller's again. The wait after ctx ended
//     is bounded by the command timeout (Options.CommandTimeout), after which the
//     controller fails and its queues are torn down.
type Namespace struct {
	ctrl *Controller
	NSID uint32

	id   atomic.Pointer[nvmeproto.IdentifyNamespace]
	desc atomic.Pointer[nvmeproto.NSDescriptorList]
}

func (ns *Namespace) set(id *nvmeproto.IdentifyNamespace) { ns.id.Store(id) }

// Identify returns the namespace's Identify Namespace data from the last scan.
func (ns *Namespace) Identify() *nvmeproto.IdentifyNamespace { return ns.id.Load() }

// Descriptors returns the namespace identification descriptors (EUI-64, NGUID, UUID,
// CSI) from the last scan; empty if the controller reports none.
func (ns *Namespace) Descriptors() nvmeproto.NSDescriptorList {
	if d := ns.desc.Load(); d != nil {
		return *d
	}
	return nil
}

// UUID returns the namespace UUID descriptor, if the controller reports one.
func (ns *Namespace) UUID() ([16]byte, bool) {
	d, ok := ns.Descriptors().Find(nvmeproto.NIDTUUID)
	return d.ID, ok
}

// BlockSize returns the LBA data size in bytes.
func (ns *Namespace) BlockSize() int { return int(ns.Identify().LBASize()) }

// Blocks returns the namespace size in logical blocks (NSZE).
func (ns *Namespace) Blocks() uint64 { return ns.Identify().NSZE }

// Size returns the namespace size in bytes.
func (ns *Namespace) Size() int64 { return int64(ns.Blocks()) * int64(ns.BlockSize()) }

// Controller returns the namespace's controller.
func (ns *Namespace) Controller() *Controller { return ns.ctrl }

// queue picks an I/O queue round-robin.
func (ns *Namespace) queue() (*queue, error) {
	c := ns.ctrl
	if err := c.Err(); err != nil {
		return nil, err
	}
	if len(c.io) == 0 {
		return nil, fmt.Errorf("initiator: controller %d has no I/O queues", c.cntlid)
	}
	return c.io[int(c.rr.Add(1))%len(c.io)], nil
}

func (ns *Namespace) exec(ctx context.Context, r *Request) error {
	q, err := ns.queue()
	if err != nil {
		return err
	}
	r.NSID = ns.NSID
	return q.exec(ctx, r)
}

// blocks checks a byte length against the block size and returns it in blocks.
func (ns *Namespace) blocks(what string, n int) (uint32, error) {
	bs := ns.BlockSize()
	if n <= 0 || n%bs != 0 {
		return 0, fmt.Errorf("initiator: %s of %d bytes: not a positive multiple of the %d-byte block size", what, n, bs)
	}
	if n > ns.ctrl.maxXfer {
		return 0, fmt.Errorf("initiator: %s of %d bytes: larger than the controller's %d-byte transfer limit (MDTS)", what, n, ns.ctrl.maxXfer)
	}
	return uint32(n / bs), nil
}

// Read reads buf.Len() bytes (whole blocks, at most MaxTransferSize) at lba into buf
// without copying. It returns once the command has ended, also when ctx ends first (see
// Namespace): a read whose context ended returns nil if the command still completed
// successfully, and an error wrapping both its status and ctx.Err() if not.
func (ns *Namespace) Read(ctx context.Context, buf *Buffer, lba uint64) error {
	n, err := ns.blocks("Read", buf.Len())
	if err != nil {
		return err
	}
	return ns.exec(ctx, &Request{Op: OpRead, LBA: lba, Blocks: n, Buf: buf, ownBuf: true})
}

// Write writes buf (whole blocks, at most MaxTransferSize) at lba without copying; flags
// may hold FUA. Like Read, it returns once the command has ended.
func (ns *Namespace) Write(ctx context.Context, buf *Buffer, lba uint64, flags IOFlags) error {
	n, err := ns.blocks("Write", buf.Len())
	if err != nil {
		return err
	}
	return ns.exec(ctx, &Request{Op: OpWrite, LBA: lba, Blocks: n, Buf: buf, Flags: flags, ownBuf: true})
}

// ReadAt reads len(p) bytes at byte offset off (both multiples of the block size) through
// bounce buffers from the controller's pool, in commands of at most the pool's chunk
// size. It returns the bytes read before the first error.
func (ns *Namespace) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return ns.copyIO(ctx, OpRead, p, off, 0)
}

// WriteAt writes p at byte offset off (both multiples of the block size) through bounce
// buffers; flags may hold FUA.
func (ns *Namespace) WriteAt(ctx context.Context, p []byte, off int64, flags IOFlags) (int, error) {
	return ns.copyIO(ctx, OpWrite, p, off, flags)
}

func (ns *Namespace) copyIO(ctx context.Context, op Op, p []byte, off int64, flags IOFlags) (int, error) {
	bs := int64(ns.BlockSize())
	if off < 0 || off%bs != 0 || int64(len(p))%bs != 0 {
		return 0, fmt.Errorf("initiator: %v of %d bytes at offset %d: offset and length must be multiples of the %d-byte block size",
			op, len(p), off, bs)
	}
	if off+int64(len(p)) > ns.Size() {
		return 0, fmt.Errorf("initiator: %v of %d bytes at offset %d: beyond the end of the %d-byte namespace", op, len(p), off, ns.Size())
	}
	step := min(ns.ctrl.pool.ChunkSize(), ns.ctrl.maxXfer) / int(bs) * int(bs)
	done := 0
	for done < len(p) {
		n := min(step, len(p)-done)
		buf, err := ns.ctrl.pool.Get(ctx, n)
		if err != nil {
			return done, err
		}
		if op == OpWrite {
			copy(buf.Bytes(), p[done:done+n])
		}
		r := &Request{Op: op, LBA: uint64(off+int64(done)) / uint64(bs), Blocks: uint32(int64(n) / bs), Buf: buf, Flags: flags}
		err = ns.exec(ctx, r)
		if err == nil && op == OpRead {
			copy(p[done:done+n], buf.Bytes())
		}
		buf.Release()
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// Flush commits the namespace's volatile write cache to non-volatile media.
func (ns *Namespace) Flush(ctx context.Context) error {
	return ns.exec(ctx, &Request{Op: OpFlush})
}

// WriteZeroes zeroes blocks blocks at lba (in commands of at most 65536 blocks); flags may
// hold Unmap (deallocate as well) and FUA.
func (ns *Namespace) WriteZeroes(ctx context.Context, lba, blocks uint64, flags IOFlags) error {
	if ns.ctrl.id.ONCS&nvmeproto.ONCSWriteZeroes == 0 {
		return fmt.Errorf("%w: Write Zeroes (Identify ONCS bit 3)", ErrNotSupported)
	}
	for blocks > 0 {
		n := min(blocks, 1<<16)
		if err := ns.exec(ctx, &Request{Op: OpWriteZeroes, LBA: lba, Blocks: uint32(n), Flags: flags}); err != nil {
			return err
		}
		lba += n
		blocks -= n
	}
	return nil
}

// Deallocate deallocates (trims) blocks blocks at lba with Dataset Management.
func (ns *Namespace) Deallocate(ctx context.Context, lba, blocks uint64) error {
	if ns.ctrl.id.ONCS&nvmeproto.ONCSDatasetManagement == 0 {
		return fmt.Errorf("%w: Dataset Management (Identify ONCS bit 2)", ErrNotSupported)
	}
	for blocks > 0 {
		n := min(blocks, 1<<32-1)
		if err := ns.exec(ctx, &Request{Op: OpDeallocate, LBA: lba, Blocks: uint32(n)}); err != nil {
			return err
		}
		lba += n
		blocks -= n
	}
	return nil
}
