package rdma

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// hostLink is how a test host reaches the target: over a fake queue pair (unit tests) or
// a real one (TestRDMA*). Host memory is a registered buffer the target may RDMA READ
// and WRITE, named by base address and rkey.
type hostLink interface {
	// send delivers a command capsule (SQE plus in-capsule data) to the target.
	send(capsule []byte) error
	// memory returns the host memory commands point into.
	memory() (mem []byte, base uint64, rkey uint32)
	// close disconnects.
	close()
}

// hostQueue is one NVMe queue of a test host: it assigns command IDs (each with its own
// slice of host memory for data), sends capsules and matches responses.
type hostQueue struct {
	t     testing.TB
	link  hostLink
	mem   []byte
	base  uint64
	rkey  uint32
	slot  int // host memory bytes per command ID
	depth int

	mu      sync.Mutex
	waiters map[uint16]chan nvmeproto.Completion
	free    chan uint16
	gone    chan struct{}
	goneMu  sync.Once
}

// newHostQueue makes a queue of depth entries (depth-1 outstanding commands) over link;
// link delivers responses to onResponse.
func newHostQueue(t testing.TB, depth int, slot int) *hostQueue {
	h := &hostQueue{t: t, depth: depth, slot: slot,
		waiters: map[uint16]chan nvmeproto.Completion{},
		free:    make(chan uint16, depth),
		gone:    make(chan struct{}),
	}
	for i := 0; i < depth-1; i++ {
		h.free <- uint16(i)
	}
	return h
}

func (h *hostQueue) attach(l hostLink) {
	h.link = l
	h.mem, h.base, h.rkey = l.memory()
	if need := (h.depth - 1) * h.slot; len(h.mem) < need {
		panic(fmt.Sprintf("host memory %d bytes < %d", len(h.mem), need))
	}
}

// lost marks the connection gone: waiting commands fail.
func (h *hostQueue) lost() { h.goneMu.Do(func() { close(h.gone) }) }

// onResponse takes a response capsule.
func (h *hostQueue) onResponse(b []byte) {
	var c nvmeproto.Completion
	if err := c.Unmarshal(b); err != nil {
		h.t.Errorf("host: bad response capsule of %d bytes", len(b))
		return
	}
	h.mu.Lock()
	ch := h.waiters[c.CID]
	delete(h.waiters, c.CID)
	h.mu.Unlock()
	if ch == nil {
		h.t.Errorf("host: response for CID %d, which is not outstanding (status %v)", c.CID, c.Status)
		return
	}
	ch <- c
}

// hostCmd is a command in flight.
type hostCmd struct {
	h   *hostQueue
	cid uint16
	buf []byte // its host memory
	ch  chan nvmeproto.Completion
}

// keyedAt returns a keyed SGL descriptor for n bytes at offset off of the command's
// host memory.
func (c *hostCmd) keyedAt(off, n int) nvmeproto.SGLDescriptor {
	h := c.h
	return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Subtype: nvmeproto.SGLSubtypeAddress,
		Address: h.base + uint64(int(c.cid)*h.slot+off), Length: uint32(n), Key: h.rkey}
}

// begin reserves a command ID (waiting for a free one).
func (h *hostQueue) begin() *hostCmd {
	select {
	case cid := <-h.free:
		off := int(cid) * h.slot
		return &hostCmd{h: h, cid: cid, buf: h.mem[off : off+h.slot], ch: make(chan nvmeproto.Completion, 1)}
	case <-time.After(30 * time.Second):
		h.t.Fatalf("host: no free command ID for 30 s")
		return nil
	}
}

// submit sends cmd (CID set here) with optional in-capsule data.
func (c *hostCmd) submit(cmd *nvmeproto.Command, icd []byte) error {
	h := c.h
	cmd.CID = c.cid
	cmd.Flags = nvmeproto.PSDTSGL << 6
	capsule := make([]byte, nvmeproto.SQESize+len(icd))
	cmd.Marshal(capsule)
	copy(capsule[nvmeproto.SQESize:], icd)
	h.mu.Lock()
	h.waiters[c.cid] = c.ch
	h.mu.Unlock()
	if err := h.link.send(capsule); err != nil {
		h.mu.Lock()
		delete(h.waiters, c.cid)
		h.mu.Unlock()
		h.free <- c.cid
		return err
	}
	return nil
}

// wait returns the command's completion; release frees its ID (and host memory).
func (c *hostCmd) wait(timeout time.Duration) (nvmeproto.Completion, bool) {
	h := c.h
	select {
	case cqe := <-c.ch:
		return cqe, true
	case <-h.gone:
		return nvmeproto.Completion{}, false
	case <-time.After(timeout):
		return nvmeproto.Completion{}, false
	}
}

const hostTimeout = 30 * time.Second

func (c *hostCmd) release() { c.h.free <- c.cid }

// exec runs cmd with n bytes of data described by a keyed SGL: data (if any) is placed
// in host memory first; the returned slice is a copy of the host memory after the
// command completed.
func (h *hostQueue) exec(cmd nvmeproto.Command, data []byte, n int) (nvmeproto.Completion, []byte) {
	h.t.Helper()
	return h.execKeyed(cmd, data, n, nvmeproto.SGLSubtypeAddress)
}

// execKeyed is exec with the keyed descriptor's subtype sub (SGLSubtypeInvalidate: the
// host asks for its key to be invalidated).
func (h *hostQueue) execKeyed(cmd nvmeproto.Command, data []byte, n int, sub nvmeproto.SGLSubtype) (nvmeproto.Completion, []byte) {
	h.t.Helper()
	c := h.begin()
	copy(c.buf, data)
	cmd.SGL = c.keyedAt(0, n)
	if n == 0 {
		cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}
	}
	cmd.SGL.Subtype = sub
	if err := c.submit(&cmd, nil); err != nil {
		h.t.Fatalf("host: sending opcode %#x: %v", cmd.Opcode, err)
	}
	cqe, ok := c.wait(hostTimeout)
	if !ok {
		h.t.Fatalf("host: no completion for opcode %#x cid %d", cmd.Opcode, c.cid)
	}
	out := bytes.Clone(c.buf[:n])
	c.release()
	return cqe, out
}

// execInline runs a write-like cmd with its data in the capsule (Data Block/Offset).
func (h *hostQueue) execInline(cmd nvmeproto.Command, data []byte) nvmeproto.Completion {
	h.t.Helper()
	c := h.begin()
	cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeDataBlock, Subtype: nvmeproto.SGLSubtypeOffset, Length: uint32(len(data))}
	if err := c.submit(&cmd, data); err != nil {
		h.t.Fatalf("host: sending opcode %#x: %v", cmd.Opcode, err)
	}
	cqe, ok := c.wait(hostTimeout)
	if !ok {
		h.t.Fatalf("host: no completion for opcode %#x cid %d", cmd.Opcode, c.cid)
	}
	c.release()
	return cqe
}

const (
	testSubNQN  = "nqn.2024-01.io.gonvmf:rdma-test"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:2b5f4a1e-6c2d-4a8b-9a43-1f0e7c9d2b11"
)

// connect sends the Fabrics Connect (its 1024 bytes of data by keyed SGL, which the
// target fetches with an RDMA READ) and returns the completion.
func (h *hostQueue) connect(qid uint16, kato uint32, cntlid uint16, sub, host string) nvmeproto.Completion {
	h.t.Helper()
	var cmd nvmeproto.Command
	(&nvmeproto.ConnectCommand{QID: qid, SQSize: uint16(h.depth - 1), KATO: kato}).ToCommand(&cmd)
	data := make([]byte, nvmeproto.ConnectDataSize)
	(&nvmeproto.ConnectData{HostID: [16]byte{1, 2, 3}, CNTLID: cntlid, SubNQN: sub, HostNQN: host}).Marshal(data)
	c, _ := h.exec(cmd, data, len(data))
	return c
}

func (h *hostQueue) propGet(off uint32, size8 bool) uint64 {
	h.t.Helper()
	var cmd nvmeproto.Command
	p := nvmeproto.PropertyGetCommand{Offset: off}
	if size8 {
		p.Attrib = 1
	}
	p.ToCommand(&cmd)
	c, _ := h.exec(cmd, nil, 0)
	expectOK(h.t, fmt.Sprintf("property get %#x", off), c)
	return uint64(c.DW0) | uint64(c.DW1)<<32
}

func (h *hostQueue) propSet(off uint32, v uint32) {
	h.t.Helper()
	var cmd nvmeproto.Command
	(&nvmeproto.PropertySetCommand{Offset: off, Value: uint64(v)}).ToCommand(&cmd)
	c, _ := h.exec(cmd, nil, 0)
	expectOK(h.t, fmt.Sprintf("property set %#x", off), c)
}

// enable sets CC.EN (IOSQES 6, IOCQES 4) and waits for CSTS.RDY.
func (h *hostQueue) enable() {
	h.t.Helper()
	h.propSet(nvmeproto.PropCC, 1|6<<16|4<<20)
	deadline := time.Now().Add(10 * time.Second)
	for h.propGet(nvmeproto.PropCSTS, false)&1 == 0 {
		if time.Now().After(deadline) {
			h.t.Fatalf("CSTS.RDY not set")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// identify returns an Identify structure (4 KiB).
func (h *hostQueue) identify(cns uint8, nsid uint32) []byte {
	h.t.Helper()
	cmd := nvmeproto.Command{Opcode: nvmeproto.OpIdentify, NSID: nsid, CDW10: uint32(cns)}
	c, b := h.exec(cmd, nil, 4096)
	expectOK(h.t, fmt.Sprintf("identify cns %d", cns), c)
	return b
}

// rw builds a Read or Write of nlb blocks at slba.
func rw(op uint8, nsid uint32, slba uint64, nlb int) nvmeproto.Command {
	var cmd nvmeproto.Command
	(&nvmeproto.RWCommand{Opcode: op, NSID: nsid, SLBA: slba, NLB: uint16(nlb - 1)}).ToCommand(&cmd)
	return cmd
}

// pattern fills n bytes with data derived from seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}
