package initiator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/internal/usegate"
)

// region is memory the controller can reach: on RDMA an rdmacm.Arena registered with
// remote read and write access (a queue's control region: remote read only; commands
// carry base+offset and rkey in a keyed SGL), on the loop transport plain memory
// addressed by offset (base 0).
type region struct {
	mem   []byte
	base  uint64 // transport address of mem[0]
	rkey  uint32
	lkey  uint32
	close func() error // releases the memory; nil for Go memory
	once  sync.Once
}

func (r *region) release() error {
	var err error
	r.once.Do(func() {
		if r.close != nil {
			err = r.close()
		}
	})
	return err
}

// goRegion returns n bytes of Go memory aligned to 4 KiB (the loop transport's memory).
func goRegion(n int) *region { return &region{mem: aligned.Bytes(n)} }

// Buffer is a piece of memory registered with the controller's transport, the only
// memory commands can move data to and from without a copy. Get one from the controller's
// pool (Controller.GetBuffer: bounded sizes, recycled) or allocate dedicated memory
// (Controller.AllocBuffer), and cut it into pieces with Slice.
//
// A Buffer is reference counted: every command using it holds a reference until it
// completes, so Release (which returns pooled memory to the pool and unmaps dedicated
// memory) takes effect only once no command can still transfer into it — also when a
// caller gave up waiting on a command (context cancelled).
type Buffer struct {
	reg    *region
	off    int
	b      []byte
	refs   atomic.Int32
	pool   *BufferPool // pooled chunk: returned here at refs 0
	idx    int32       // chunk index in pool
	parent *Buffer     // Slice: the buffer this one shares memory with
}

// Bytes returns the buffer's memory. Do not modify it while a write command using the
// buffer is outstanding, and do not read it before a read command completes.
func (b *Buffer) Bytes() []byte { return b.b }

// Len returns the buffer's length in bytes.
func (b *Buffer) Len() int { return len(b.b) }

// Slice returns a Buffer for bytes [off, off+n) of b, sharing its memory. The slice holds
// a reference to b until it is released itself. It allocates the new Buffer header: cut
// buffers once, at setup, not per I/O.
func (b *Buffer) Slice(off, n int) *Buffer {
	if off < 0 || n < 0 || off+n > len(b.b) {
		panic(fmt.Sprintf("initiator: Buffer.Slice(%d, %d) of a %d-byte buffer", off, n, len(b.b)))
	}
	b.refs.Add(1)
	s := &Buffer{reg: b.reg, off: b.off + off, b: b.b[off : off+n : off+n], parent: b}
	s.refs.Store(1)
	return s
}

// Release drops the caller's reference. Pooled memory goes back to the pool and dedicated
// memory is freed once no command uses the buffer any more. Do not use the buffer after
// Release.
func (b *Buffer) Release() { b.unref() }

func (b *Buffer) ref() { b.refs.Add(1) }

func (b *Buffer) unref() {
	n := b.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		panic("initiator: Buffer released more often than referenced")
	}
	switch {
	case b.parent != nil:
		b.parent.unref()
	case b.pool != nil:
		b.pool.put(b)
	default:
		b.reg.release()
	}
}

// addr returns the transport address of byte i of the buffer.
func (b *Buffer) addr(i int) uint64 { return b.reg.base + uint64(b.off+i) }

// BufferPool hands out fixed-size chunks of registered memory, each its own region: a
// command on a pool buffer exposes that chunk to the controller, not the others (see the
// package documentation on memory registration).
//
// The regions, and the transport they are registered with, outlive every registered buffer:
// users counts the pool's users (a Get in progress, a buffer handed out and not yet
// returned, a dedicated buffer of Controller.AllocBuffer not yet freed) and close closes
// it. Neither Get nor AllocBuffer admits a user after close, so the memory is released
// exactly once, by close or by the last user to leave after it, whichever finds the gate
// drained.
type BufferPool struct {
	regs    []*region // one per chunk
	chunk   int
	bufs    []Buffer
	free    chan int32
	closed  chan struct{}
	users   usegate.Gate
	release func() // set by close; frees regs (and what must outlive them)
}

// newBufferPool makes a pool of one chunk per region; every region has at least chunk
// bytes.
func newBufferPool(regs []*region, chunk int) *BufferPool {
	n := len(regs)
	p := &BufferPool{regs: regs, chunk: chunk, bufs: make([]Buffer, n), free: make(chan int32, n), closed: make(chan struct{})}
	for i, reg := range regs {
		b := &p.bufs[i]
		b.reg, b.pool, b.idx = reg, p, int32(i)
		b.b = reg.mem[:chunk:chunk]
		p.free <- int32(i)
	}
	return p
}

// ChunkSize is the largest buffer Get returns.
func (p *BufferPool) ChunkSize() int { return p.chunk }

// Get returns a buffer of n bytes (at most ChunkSize), waiting for one to be released
// while all are in use, until ctx ends. Once the controller is closed it returns an
// error wrapping ErrClosed.
func (p *BufferPool) Get(ctx context.Context, n int) (*Buffer, error) {
	if n <= 0 || n > p.chunk {
		return nil, fmt.Errorf("initiator: buffer of %d bytes: the pool hands out 1..%d", n, p.chunk)
	}
	if !p.users.Enter() {
		return nil, fmt.Errorf("initiator: pool buffer of %d bytes: %w", n, ErrClosed)
	}
	var i int32
	select {
	case i = <-p.free:
	default:
		select {
		case i = <-p.free:
		case <-ctx.Done():
			p.leave()
			return nil, fmt.Errorf("initiator: waiting for a pool buffer of %d bytes: %w", n, ctx.Err())
		case <-p.closed:
			p.leave()
			return nil, fmt.Errorf("initiator: waiting for a pool buffer of %d bytes: %w", n, ErrClosed)
		}
	}
	b := &p.bufs[i]
	b.b = b.reg.mem[:n:n]
	b.refs.Store(1)
	return b, nil
}

// put takes back a buffer whose last reference was dropped; its user leaves.
func (p *BufferPool) put(b *Buffer) {
	p.free <- b.idx
	p.leave()
}

// leave ends a user; the last one after close frees the memory.
func (p *BufferPool) leave() {
	if p.users.Leave() {
		p.release()
	}
}

// close refuses new users (Get fails with ErrClosed, waiting ones too) and runs release
// once no buffer is out: now, or when the last one is returned. Called once (teardown).
func (p *BufferPool) close(release func()) {
	p.release = release
	_, drained := p.users.Close()
	close(p.closed)
	if drained {
		release()
	}
}
