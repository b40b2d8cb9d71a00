// Package loop is an in-process transport for the target, like Linux's nvme-loop: a host
// in the same process submits command capsules to a Conn and gets completions back
// through the full target command path — SGL validation, data movement, controller
// state, backend execution — with no network in between. Tests, benchmarks and the Go
// initiator (wired up by cmd/gonvmf) use it.
//
// # Client contract
//
// The client-facing API uses only nvmeproto and standard types, so a host package that
// must not import target (the initiator) can declare an interface that *Conn satisfies:
//
//	type LoopConn interface {
//	    Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error
//	    SubmitCapsule(capsule, data []byte, done func(nvmeproto.Completion)) error
//	    Close() error
//	    Done() <-chan struct{}
//	    Err() error
//	}
//
// and take a dial function func(depth int) (LoopConn, error), which cmd/gonvmf builds as
// func(depth int) (initiator.LoopConn, error) { return port.Dial(depth) }.
//
// One Conn is one queue, the analogue of one RDMA queue pair: Dial(depth) is the
// transport connection (depth = hsqsize+1), after which the host sends a Fabrics Connect
// command on it like any other command (qid 0 for the admin queue, cntlid 0xFFFF; then
// the I/O queues with the cntlid the admin Connect returned).
//
// Host memory is the data slice given to Submit. Commands describe it with SGLs exactly
// as on RDMA, except that an address is a byte offset into data (there is no memory
// registration; keys are ignored):
//
//   - Keyed Data Block (0x40/0x4F) address A, length L: data[A:A+L]. A command without
//     data carries length 0.
//   - Data Block/Offset (0x01): in-capsule data. With Submit, data is the capsule's
//     in-capsule data (its length must not exceed the port's in-capsule data size).
//   - Last Segment/Offset (0x31): a descriptor list in the in-capsule data; use
//     SubmitCapsule, whose capsule is the 64-byte SQE followed by the in-capsule data
//     (as an RDMA Send), and whose data is the host memory the keyed descriptors in the
//     list address.
//
// For a host-to-controller command the Conn copies the host's data in before the command
// executes; for a controller-to-host command it copies the data out before calling done.
// data must not be modified while the command is outstanding.
//
// done is called exactly once for every Submit that returned nil, with the completion
// (by value: a Conn allocates nothing per command). It may run on the submitting
// goroutine before Submit returns (memory and null backends, errors found before
// execution, Keep Alive), on a backend worker goroutine, on the controller's admin worker
// goroutine (Identify, Get Log Page, Get/Set Features), or on whichever goroutine raised
// an asynchronous event; it must not block, and may call Submit. The command's slot is free
// again when done runs. A Conn holds at most depth commands; Submit returns an error
// when all slots are busy, after the Conn was closed or disconnected, or for a capsule
// the transport cannot receive. It never blocks.
//
// When the target tears the queue down (keep-alive expiry, controller reset or shutdown,
// admin queue gone, a Disconnect command, target closed) Done is closed and Err says why;
// commands still in flight complete as usual. Close disconnects from the host side and
// waits until every outstanding command's done has been called, so it must not be
// called from inside a done callback. Closing the admin queue's Conn ends the controller
// (its I/O queues are torn down), as losing the admin queue pair does on RDMA.
package loop

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// Errors Submit returns.
var (
	ErrQueueFull     = errors.New("loop: all queue slots are busy")
	ErrClosed        = errors.New("loop: connection closed")
	ErrCapsuleTooBig = errors.New("loop: in-capsule data larger than the port accepts")
	ErrShortCapsule  = errors.New("loop: capsule shorter than a 64-byte SQE")
)

// Options configure a loop Port.
type Options struct {
	// Name is the port's TRADDR in the discovery log (default "loop<n>").
	Name string
	// Advertise lists the port in the discovery log (TRTYPE loop).
	Advertise bool
	// MaxSGLDescriptors is MSDBD (0: target.MaxSGLDescriptors).
	MaxSGLDescriptors int
	// ANAStates are the port's initial ANA group states, as a listener's (see
	// target.PortConfig.ANAStates); target.Port.SetANAState changes them.
	ANAStates [conf.MaxANAGroup + 1]conf.ANAState
}

var portSeq atomic.Int64

// Port is a loop endpoint of a target.
type Port struct {
	tp     *target.Port
	limits target.Limits
}

// New registers a loop port with t. It receives the in-capsule data the target's
// configuration sets (transport.in_capsule_data_size).
func New(t *target.Target, o Options) (*Port, error) {
	msdbd := o.MaxSGLDescriptors
	if msdbd <= 0 {
		msdbd = target.MaxSGLDescriptors
	}
	name := o.Name
	if name == "" {
		name = "loop" + strconv.FormatInt(portSeq.Add(1), 10)
	}
	tp, err := t.AddPort(target.PortConfig{
		TrType: target.TrTypeLoop, AdrFam: target.AdrFamIntraHost, TrAddr: name, TrSvcID: "",
		Advertise: o.Advertise, Keyed: true, InCapsuleDataSize: t.TransportConfig().InCapsuleDataSize, MaxSGLDescriptors: msdbd,
		ANAStates: o.ANAStates,
	})
	if err != nil {
		return nil, err
	}
	return &Port{tp: tp, limits: tp.Limits()}, nil
}

// Close unregisters the port and disconnects its queues.
func (p *Port) Close() error { return p.tp.Close() }

// Target returns the target port (for its ID and limits).
func (p *Port) Target() *target.Port { return p.tp }

// Dial opens a queue that can hold depth commands (the RDMA hsqsize+1).
func (p *Port) Dial(depth int) (*Conn, error) {
	if depth < 1 || depth > 65536 {
		return nil, fmt.Errorf("loop: queue depth %d out of range 1..65536", depth)
	}
	c := &Conn{
		slots: make([]slot, depth),
		free:  make([]int32, 0, depth),
		done:  make(chan struct{}),
	}
	q, err := p.tp.NewQueue(c, depth)
	if err != nil {
		return nil, err
	}
	c.q = q
	icd := p.limits.InCapsuleDataSize
	for i := range c.slots {
		s := &c.slots[i]
		s.c, s.idx = c, int32(i)
		s.req.Context = s
		if icd > 0 {
			s.icd = aligned.Bytes(icd)
		}
		c.free = append(c.free, int32(i))
	}
	return c, nil
}

// Conn is one loop queue. See the package documentation for the contract.
type Conn struct {
	q      *target.Queue
	slots  []slot
	freeMu sync.Mutex
	free   []int32 // stack of free slot indices

	active atomic.Int64 // Submit calls in progress
	dead   atomic.Bool
	once   sync.Once
	done   chan struct{}
	errMu  sync.Mutex
	err    error
}

type slot struct {
	req  target.Request
	c    *Conn
	idx  int32
	host []byte
	cb   func(nvmeproto.Completion)
	buf  []byte // target-side data buffer, the stand-in for registered memory
	icd  []byte // receive buffer for in-capsule data
}

// Submit sends one command; see the package documentation.
func (c *Conn) Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error {
	s, err := c.acquire()
	if err != nil {
		return err
	}
	s.req.Cmd = *cmd
	s.req.ICD = nil
	if id := cmd.SGL.ID(); id == nvmeproto.SGLIDDataOffset && len(data) > 0 {
		if len(data) > len(s.icd) {
			c.releaseSlot(s)
			c.active.Add(-1)
			return ErrCapsuleTooBig
		}
		n := copy(s.icd, data)
		s.req.ICD = s.icd[:n]
		data = nil
	}
	c.run(s, data, done)
	return nil
}

// SubmitCapsule sends a raw command capsule (SQE followed by in-capsule data) with data
// as the host memory its keyed descriptors address.
func (c *Conn) SubmitCapsule(capsule, data []byte, done func(nvmeproto.Completion)) error {
	if len(capsule) < nvmeproto.SQESize {
		return ErrShortCapsule
	}
	s, err := c.acquire()
	if err != nil {
		return err
	}
	s.req.Cmd.Unmarshal(capsule) // cannot fail: 64 bytes are there
	s.req.ICD = nil
	if icd := capsule[nvmeproto.SQESize:]; len(icd) > 0 {
		if len(icd) > len(s.icd) {
			c.releaseSlot(s)
			c.active.Add(-1)
			return ErrCapsuleTooBig
		}
		n := copy(s.icd, icd)
		s.req.ICD = s.icd[:n]
	}
	c.run(s, data, done)
	return nil
}

func (c *Conn) acquire() (*slot, error) {
	c.active.Add(1)
	if c.dead.Load() {
		c.active.Add(-1)
		return nil, ErrClosed
	}
	c.freeMu.Lock()
	n := len(c.free)
	if n == 0 {
		c.freeMu.Unlock()
		c.active.Add(-1)
		return nil, ErrQueueFull
	}
	i := c.free[n-1]
	c.free = c.free[:n-1]
	c.freeMu.Unlock()
	return &c.slots[i], nil
}

func (c *Conn) releaseSlot(s *slot) {
	s.host, s.cb = nil, nil
	c.freeMu.Lock()
	c.free = append(c.free, s.idx)
	c.freeMu.Unlock()
}

// run moves the command through the target: validate, fetch data, execute.
func (c *Conn) run(s *slot, host []byte, done func(nvmeproto.Completion)) {
	defer c.active.Add(-1)
	s.host, s.cb = host, done
	r := &s.req
	if !c.q.Begin(r) {
		return // completed
	}
	if r.Length > 0 && !r.InCapsule {
		// Every segment must lie inside host memory: the loop's equivalent of an RDMA
		// access error on a bad remote address.
		for _, d := range r.SGL {
			if d.Address > uint64(len(host)) || uint64(d.Length) > uint64(len(host))-d.Address {
				c.q.Fail(r, nvmeproto.StatusDataTransferError)
				return
			}
		}
		if cap(s.buf) < int(r.Length) {
			s.buf = aligned.Bytes(int(r.Length))
		}
		r.Data = s.buf[:r.Length]
		if r.Dir == nvmeproto.DirHostToCtrl {
			off := 0
			for _, d := range r.SGL {
				off += copy(r.Data[off:], host[d.Address:d.Address+uint64(d.Length)])
			}
		}
	}
	c.q.Execute(r)
}

// Complete implements target.TransportQueue: copy controller-to-host data out, free the
// slot, call done.
func (c *Conn) Complete(r *target.Request) {
	s := r.Context.(*slot)
	if r.Length > 0 && !r.InCapsule && r.Dir == nvmeproto.DirCtrlToHost && r.CQE.Status.Success() {
		off := 0
		for _, d := range r.SGL {
			off += copy(s.host[d.Address:d.Address+uint64(d.Length)], r.Data[off:])
		}
	}
	cqe, cb := r.CQE, s.cb
	c.releaseSlot(s)
	cb(cqe)
}

// Disconnect implements target.TransportQueue: the target tears the queue down.
func (c *Conn) Disconnect(reason error) {
	if c.shut(reason) {
		go c.closeQueue()
	}
}

// shut marks the connection dead; it reports whether this call did.
func (c *Conn) shut(reason error) bool {
	first := false
	c.once.Do(func() {
		first = true
		c.errMu.Lock()
		c.err = reason
		c.errMu.Unlock()
		c.dead.Store(true)
		close(c.done)
	})
	return first
}

// closeQueue waits for Submit calls in progress, then closes the target queue (which
// waits for commands in flight).
func (c *Conn) closeQueue() {
	for c.active.Load() != 0 {
		runtime.Gosched()
	}
	c.q.Close()
}

// Close disconnects the queue from the host side and waits until every outstanding
// command has completed.
func (c *Conn) Close() error {
	c.shut(ErrClosed)
	c.closeQueue()
	return nil
}

// Done is closed when the connection is gone.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection is gone (nil while it is up).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Compile-time checks: Conn is a target transport queue, and has the client-facing
// method set the package documentation promises (which the initiator mirrors).
var (
	_ target.TransportQueue = (*Conn)(nil)
	_ interface {
		Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error
		SubmitCapsule(capsule, data []byte, done func(nvmeproto.Completion)) error
		Close() error
		Done() <-chan struct{}
		Err() error
	} = (*Conn)(nil)
)
