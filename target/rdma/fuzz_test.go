package rdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/aligned"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/target"
)

// FuzzEngineCapsules fuzzes the RDMA transport's handling of received command capsules:
// the engine (poll group, request state machine, buffer pool) with the real target core,
// over the fake fabric of fake_test.go.
//
// Each iteration connects an admin and an I/O queue, then delivers a sequence of
// fuzzer-chosen capsules of fuzzer-chosen lengths (short, exactly 64 bytes, with
// in-capsule data, longer than the receive buffer) to either queue. It asserts that:
//
//   - nothing panics;
//   - every capsule of at least 64 bytes gets exactly one response (with its CID and
//     SQID), unless its connection is torn down — and a connection is torn down only for a
//     reason the Linux target shares (a capsule shorter than an SQE, a capsule longer
//     than the receive buffer, an RDMA READ/WRITE the host's memory refused) or because
//     the core asked (Disconnect command, controller reset/shutdown, keep-alive);
//   - every RDMA READ and WRITE belongs to an outstanding command, goes the command's data
//     direction, stays inside one keyed descriptor that command's capsule described
//     (address, length and key), moves no more than the descriptors' total, and uses only
//     the pool buffer of its own request context;
//   - host memory outside what read-like commands described keeps its canary pattern;
//   - the namespace is modified only by the LBA ranges of writes the host sent (and the
//     deallocate ranges it asked for), never outside it: the rest keeps its canary;
//   - a fresh keyed write and read work afterwards if the I/O queue is still up;
//   - when the connections close the buffer pool is whole again and no goroutine is left.
//
// Input: a byte b choosing the I/O queue's depth (2 + (b&15)%15 entries; the send
// queue, sized from it, limits the response chains that fit) and the buffer pool's size
// (2 + (b>>4)%7 largest transfers: small pools make commands wait for buffers), then a
// sequence of records, each a control byte, a length byte and the capsule's bytes (see
// fuzzRecord).
func FuzzEngineCapsules(f *testing.F) {
	// The seeds are the checked-in corpus, testdata/fuzz/FuzzEngineCapsules/seed-*,
	// built by engineCapsuleSeeds (see TestEngineCapsuleSeedCorpus).
	f.Fuzz(func(t *testing.T, in []byte) {
		runEngineCapsules(t, in)
	})
}

// Record control byte.
const (
	fzAdmin  = 1 << 0 // deliver on the admin queue (else the I/O queue)
	fzFixKey = 1 << 1 // set the host's rkey in the capsule's keyed descriptors
	fzRebase = 1 << 2 // keyed descriptor addresses are offsets into host memory
	fzWait   = 1 << 3 // wait for the response (or the teardown) before the next record
	// bits 4..5: how the length byte b sizes the capsule
	fzLenICD   = 0 << 4 // 64 + 16*b bytes (b = 0: exactly an SQE)
	fzLenShort = 1 << 4 // b%64 bytes: shorter than an SQE
	fzLenOver  = 2 << 4 // the receive buffer's size + 1 + b: longer than it
	fzLenOdd   = 3 << 4 // 64 + b bytes
)

// Fuzz harness geometry: small, so that fuzzed LBAs and offsets hit it and an iteration
// takes about a millisecond.
const (
	fzHostBytes  = 256 << 10 // host memory commands may point into
	fzICD        = 4096      // in-capsule data per I/O receive slot
	fzMaxIO      = 32 << 10  // MDTS
	fzMaxMsg     = 8 << 10   // largest RDMA message: 32 KiB transfers take 4 READs/WRITEs
	fzNSBytes    = 256 << 10 // NSID 1: memory, 512-byte blocks, checked
	fzLBA        = 512
	fzMaxRecords = 24
	fzCIDBase    = 0x8000 // fuzzed capsules' CIDs (the connect helpers use small ones)
	fzWaitTime   = 2 * time.Second
)

var (
	fzHostPattern = pattern(fzHostBytes, 0xC1)
	fzNSPattern   = pattern(fzNSBytes, 0xC2)
)

// fzCmd is a fuzzed command the host sent, as the host sees it.
type fzCmd struct {
	q     *fzQueue
	cid   uint16
	cmd   nvmeproto.Command
	dir   nvmeproto.Direction
	descs []nvmeproto.SGLDescriptor // keyed descriptors the capsule names (SQE or list)
	total uint64                    // their lengths' sum
	moved [2]uint64                 // bytes RDMA READ, RDMA WRITTEN
	done  chan struct{}             // closed at its response
	resp  nvmeproto.Completion
	held  bool // an Asynchronous Event Request: may stay outstanding
	late  bool // its response did not come in time (reported once)
}

// fzQueue is one of the two connections, as the fuzzing host sees it.
type fzQueue struct {
	name     string
	qid      uint16
	fc       *fconn
	ep       *fzEP
	recvSize int

	out          map[uint16]*fzCmd // outstanding, by CID (guarded by fuzzState.mu)
	maxOut       int               // the most commands outstanding at once (guarded by fuzzState.mu)
	shortSent    bool              // a capsule shorter than an SQE was sent
	overSent     bool              // a capsule longer than the receive buffer was sent
	refused      bool              // the host's memory refused an RDMA READ/WRITE
	disconnected bool              // a Fabrics Disconnect was sent
}

// fuzzState is one iteration's host side.
type fuzzState struct {
	t  *testing.T
	mu sync.Mutex
	// everything sent, for the canary checks
	sent       []*fzCmd
	violations []string
	ns         *fzNS
}

func (fz *fuzzState) violate(format string, args ...any) {
	if len(fz.violations) < 20 {
		fz.violations = append(fz.violations, fmt.Sprintf(format, args...))
	}
}

// fzEP wraps a fake queue pair: it checks every RDMA READ and WRITE the engine posts
// against the command it belongs to before the fake executes it.
type fzEP struct {
	*fakeEP
	fz *fuzzState
	q  *fzQueue // set once the queue is connected (guarded by fz.mu)
}

func (e *fzEP) PostSend(wrs []rdmacm.SendWR) error {
	e.fz.mu.Lock()
	if q := e.q; q != nil {
		for i := range wrs {
			switch wrs[i].Op {
			case rdmacm.OpRead, rdmacm.OpWrite:
				e.checkWR(q, &wrs[i])
			case rdmacm.OpSendInv:
				e.checkInv(q, &wrs[i])
			}
		}
	}
	e.fz.mu.Unlock()
	return e.fakeEP.PostSend(wrs)
}

func (e *fzEP) Post(recvs []rdmacm.RecvWR, sends []rdmacm.SendWR) error {
	if err := e.fakeEP.PostRecv(recvs); err != nil {
		return err
	}
	return e.PostSend(sends)
}

// checkInv checks a SEND with Invalidate: the key it invalidates is one the command's
// capsule named with the Invalidate Key subtype.
func (e *fzEP) checkInv(q *fzQueue, w *rdmacm.SendWR) {
	c := q.fc.c
	idx := int(w.ID>>8) & 0xFFFF
	if idx >= len(c.ctxs) || c.ctxs[idx] == nil {
		e.fz.violate("%s: SEND with Invalidate with work request id %#x naming context %d of %d", q.name, w.ID, idx, len(c.ctxs))
		return
	}
	cid := c.ctxs[idx].req.Cmd.CID
	s := q.out[cid]
	if s == nil {
		e.fz.violate("%s: SEND with Invalidate of key %#x for CID %#x, which has no outstanding command", q.name, w.Imm, cid)
		return
	}
	for _, d := range s.descs {
		if d.ID() == nvmeproto.SGLIDKeyedInvalidate && d.Key == w.Imm {
			return
		}
	}
	e.fz.violate("%s: SEND with Invalidate of key %#x for CID %#x, whose descriptors %v do not ask for it", q.name, w.Imm, cid, s.descs)
}

// checkWR checks an RDMA READ or WRITE. It runs on the poll group's goroutine (PostSend
// is called by the group's flush), which owns the connection's contexts.
func (e *fzEP) checkWR(q *fzQueue, w *rdmacm.SendWR) {
	fz := e.fz
	op, want, mi := "READ", nvmeproto.DirHostToCtrl, 0
	if w.Op == rdmacm.OpWrite {
		op, want, mi = "WRITE", nvmeproto.DirCtrlToHost, 1
	}
	c := q.fc.c
	idx := int(w.ID>>8) & 0xFFFF
	if idx >= len(c.ctxs) || c.ctxs[idx] == nil {
		fz.violate("%s: RDMA %s with work request id %#x naming context %d of %d (%d allocated)", q.name, op, w.ID, idx, len(c.ctxs), c.nctx)
		return
	}
	x := c.ctxs[idx]
	cid := x.req.Cmd.CID
	s := q.out[cid]
	if s == nil {
		fz.violate("%s: RDMA %s of %d bytes at %#x for CID %#x, which has no outstanding command", q.name, op, w.SGL[0].Length, w.RemoteAddr, cid)
		return
	}
	if s.dir != want {
		fz.violate("%s: RDMA %s for CID %#x, opcode %#x, whose data direction is %d", q.name, op, cid, s.cmd.Opcode, s.dir)
	}
	if w.NumSGE != 1 {
		fz.violate("%s: RDMA %s for CID %#x with %d local SGEs", q.name, op, cid, w.NumSGE)
		return
	}
	n := uint64(w.SGL[0].Length)
	// Local side: inside this context's own pool buffer.
	p := c.pool
	lo := p.reg.base + uint64(x.bufOff)
	if !x.hasBuf || w.SGL[0].LKey != p.reg.lkey || w.SGL[0].Addr < lo || w.SGL[0].Addr+n > lo+uint64(pageSize<<x.bufOrder) {
		fz.violate("%s: RDMA %s for CID %#x: local SGE %#x+%d (lkey %#x) outside its pool buffer %#x+%d (has %v)",
			q.name, op, cid, w.SGL[0].Addr, n, w.SGL[0].LKey, lo, pageSize<<x.bufOrder, x.hasBuf)
	}
	// Remote side: inside one descriptor the host described, with its key.
	in := false
	for _, d := range s.descs {
		if d.Key == w.RKey && w.RemoteAddr >= d.Address && w.RemoteAddr-d.Address <= uint64(d.Length) &&
			n <= uint64(d.Length)-(w.RemoteAddr-d.Address) {
			in = true
			break
		}
	}
	if !in {
		fz.violate("%s: RDMA %s for CID %#x of %d bytes at %#x key %#x outside the descriptors %v", q.name, op, cid, n, w.RemoteAddr, w.RKey, s.descs)
	}
	s.moved[mi] += n
	if s.moved[mi] > s.total {
		fz.violate("%s: RDMA %ss for CID %#x moved %d bytes; its descriptors describe %d", q.name, op, cid, s.moved[mi], s.total)
	}
	if e.fakeEP.host(w.RemoteAddr, w.SGL[0].Length, w.RKey) == nil {
		q.refused = true // the fake fails it with a remote access error: the QP breaks
	}
}

// onResp takes a response capsule (on the group's goroutine, from the fake's PostSend).
func (fz *fuzzState) onResp(q *fzQueue, b []byte) {
	var c nvmeproto.Completion
	if err := c.Unmarshal(b); err != nil {
		fz.mu.Lock()
		fz.violate("%s: response capsule of %d bytes: %v", q.name, len(b), err)
		fz.mu.Unlock()
		return
	}
	if c.CID < fzCIDBase { // the connect helpers' commands
		q.fc.h.onResponse(b)
		return
	}
	fz.mu.Lock()
	defer fz.mu.Unlock()
	s := q.out[c.CID]
	if s == nil {
		fz.violate("%s: response for CID %#x (status %v), which is not outstanding: a second response?", q.name, c.CID, c.Status)
		return
	}
	delete(q.out, c.CID)
	if c.SQID != q.qid {
		fz.violate("%s: response for CID %#x carries SQID %d", q.name, c.CID, c.SQID)
	}
	s.resp = c
	close(s.done)
}

// broken reports whether the queue pair is in the error state or destroyed.
func (q *fzQueue) broken() bool {
	q.ep.fakeEP.mu.Lock()
	defer q.ep.fakeEP.mu.Unlock()
	return q.ep.fakeEP.err || q.ep.fakeEP.dead
}

// fzNS wraps NSID 1's memory backend and records every modification.
type fzNS struct {
	backend.Backend
	mu  sync.Mutex
	ops []fzOp
}

type fzOp struct {
	op        string
	slba, nlb uint64
}

func (s *fzNS) note(op string, slba, nlb uint64) {
	s.mu.Lock()
	s.ops = append(s.ops, fzOp{op, slba, nlb})
	s.mu.Unlock()
}

func (s *fzNS) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	s.note("write", slba, uint64(len(buf))/fzLBA)
	return s.Backend.WriteBlocks(buf, slba, fua)
}

func (s *fzNS) WriteZeroes(slba, nlb uint64) error {
	s.note("write zeroes", slba, nlb)
	return s.Backend.WriteZeroes(slba, nlb)
}

func (s *fzNS) Deallocate(slba, nlb uint64) error {
	s.note("deallocate", slba, nlb)
	return s.Backend.Deallocate(slba, nlb)
}

func (s *fzNS) Info() backend.Info { return backend.Describe(s.Backend) }

// describedKeyed returns the keyed descriptors a capsule names: SGL1 if keyed, or the
// entries of an in-capsule Last Segment list (whatever the target makes of them).
func describedKeyed(capsule []byte) []nvmeproto.SGLDescriptor {
	var d nvmeproto.SGLDescriptor
	d.Unmarshal(capsule[24:40])
	switch {
	case d.Type == nvmeproto.SGLTypeKeyedDataBlock:
		return []nvmeproto.SGLDescriptor{d}
	case d.Type == nvmeproto.SGLTypeLastSegment || d.Type == nvmeproto.SGLTypeSegment:
		icd := capsule[64:]
		var out []nvmeproto.SGLDescriptor
		for off := d.Address; off < uint64(len(icd)) && off < d.Address+uint64(d.Length); off += 16 {
			if off+16 > uint64(len(icd)) {
				break
			}
			var e nvmeproto.SGLDescriptor
			e.Unmarshal(icd[off:])
			if e.Type == nvmeproto.SGLTypeKeyedDataBlock {
				out = append(out, e)
			}
		}
		return out
	}
	return nil
}

// fixKeyed rewrites a capsule's keyed descriptors (SGL1, or a Last Segment list's
// entries): the host's key, and addresses taken as offsets into host memory.
func fixKeyed(capsule []byte, ctl byte, base uint64, key uint32) {
	fix := func(b []byte) {
		if b[15]>>4 != byte(nvmeproto.SGLTypeKeyedDataBlock) {
			return
		}
		if ctl&fzRebase != 0 {
			binary.LittleEndian.PutUint64(b, base+binary.LittleEndian.Uint64(b))
		}
		if ctl&fzFixKey != 0 {
			binary.LittleEndian.PutUint32(b[11:], key)
		}
	}
	sgl := capsule[24:40]
	fix(sgl)
	if t := nvmeproto.SGLType(sgl[15] >> 4); t == nvmeproto.SGLTypeLastSegment || t == nvmeproto.SGLTypeSegment {
		off := binary.LittleEndian.Uint64(sgl)
		n := uint64(binary.LittleEndian.Uint32(sgl[8:]))
		icd := capsule[64:]
		for o := off; o < uint64(len(icd)) && o < off+n && o+16 <= uint64(len(icd)); o += 16 {
			fix(icd[o : o+16])
		}
	}
}

func runEngineCapsules(t *testing.T, in []byte) {
	baseGoroutines := runtime.NumGoroutine()
	fz := &fuzzState{t: t}
	opener := func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil || s.Kind != backend.KindMemory {
			return b, err
		}
		fz.ns = &fzNS{Backend: b}
		return fz.ns, nil
	}
	depth, poolBytes, srq := 16, 8*fzMaxIO, 0
	if len(in) > 0 {
		depth = 2 + int(in[0]&15)%15
		poolBytes = (2 + int(in[0]>>4)%7) * fzMaxIO
		if in[0]&1 != 0 { // half the inputs: the I/O queue on a shared receive queue
			srq = 64
		}
		in = in[1:]
	}
	var eps []*fzEP
	e := newEngine(t, engineOpts{
		icd: fzICD, maxIO: fzMaxIO, poolSize: poolBytes, maxMsg: fzMaxMsg, hostBytes: fzHostBytes, ird: 4, srq: srq,
		nss: []conf.Namespace{
			{NSID: 1, Backend: conf.BackendMemory, Size: fzNSBytes},
			{NSID: 2, Backend: conf.BackendNull, Size: 1 << 20},
		},
		targetOpts: []target.Option{target.WithBackendOpener(opener)},
		wrapEP: func(ep *fakeEP) endpoint {
			w := &fzEP{fakeEP: ep, fz: fz}
			eps = append(eps, w)
			return w
		},
	})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, depth)
	if len(eps) != 2 || fz.ns == nil {
		t.Fatalf("harness: %d queue pairs, namespace spy %v", len(eps), fz.ns != nil)
	}
	// Canaries: host memory and the namespace hold known patterns.
	copy(io.ep.hostMem, fzHostPattern)
	copy(a.ep.hostMem, fzHostPattern)
	nsInit := aligned.Bytes(fzNSBytes)
	copy(nsInit, fzNSPattern)
	if err := fz.ns.Backend.WriteBlocks(nsInit, 0, false); err != nil {
		t.Fatal(err)
	}

	qs := [2]*fzQueue{
		{name: "I/O queue", qid: 1, fc: io, ep: eps[1], recvSize: nvmeproto.SQESize + fzICD, out: map[uint16]*fzCmd{}},
		{name: "admin queue", qid: 0, fc: a, ep: eps[0], recvSize: nvmeproto.SQESize, out: map[uint16]*fzCmd{}},
	}
	for _, q := range qs {
		fz.mu.Lock()
		q.ep.q = q
		fz.mu.Unlock()
		q.fc.ep.mu.Lock()
		q.fc.ep.onResp = func(b []byte) { fz.onResp(q, b) }
		q.fc.ep.mu.Unlock()
	}

	// The fuzzed sequence.
	next := uint16(fzCIDBase)
	for n := 0; len(in) >= 2 && n < fzMaxRecords; n++ {
		ctl, b := in[0], int(in[1])
		in = in[2:]
		q := qs[0]
		if ctl&fzAdmin != 0 {
			q = qs[1]
		}
		var l int
		switch ctl & (3 << 4) {
		case fzLenICD:
			l = nvmeproto.SQESize + 16*b
		case fzLenShort:
			l = b % nvmeproto.SQESize
		case fzLenOver:
			l = q.recvSize + 1 + b
		case fzLenOdd:
			l = nvmeproto.SQESize + b
		}
		capsule := make([]byte, l)
		k := copy(capsule, in)
		in = in[k:]
		if q.broken() {
			continue // the host sees its QP in the error state
		}
		if l < nvmeproto.SQESize {
			q.shortSent = true
			fz.send(q, capsule, nil)
			continue
		}
		if l > q.recvSize {
			q.overSent = true
			fz.send(q, capsule, nil)
			continue
		}
		binary.LittleEndian.PutUint16(capsule[2:], next)
		next++
		fixKeyed(capsule, ctl, q.ep.hostBase, q.ep.hostKey)
		s := fz.newCmd(q, capsule)
		if s.cmd.Opcode == nvmeproto.OpFabrics && s.cmd.FabricsType() == nvmeproto.FabricsDisconnect {
			q.disconnected = true
		}
		if fz.send(q, capsule, s) && ctl&fzWait != 0 && !s.held {
			fz.wait(q, s)
		}
	}
	for _, q := range qs {
		fz.waitAll(q)
	}

	// A fresh write and read on the I/O queue, if it is still up.
	if q := qs[0]; !q.broken() && !q.fc.c.closeReq.Load() {
		fz.freshIO(q)
	}

	e.closeAll(io, a) // also checks that the buffer pool is whole
	if n := e.g.m.forcedDrains.Load(); n > 0 {
		// The fake flushes everything a closing queue pair holds: a drain that waited
		// for drainTimeout missed the moment the connection held nothing any more.
		fz.violate("%d connections were drained by force after %v, not when their last work request was flushed", n, drainTimeout)
	}
	if testing.Verbose() {
		fz.summary(qs[:])
	}
	fz.mu.Lock()
	for _, q := range qs {
		fz.checkTeardown(q)
	}
	fz.mu.Unlock()
	fz.checkHostMemory(qs[:])
	fz.checkNamespace()

	e.tgt.Close()
	e.g.stop()
	<-e.g.stopped
	e.cq.close()
	fz.mu.Lock()
	v := slices.Clone(fz.violations)
	fz.mu.Unlock()
	if len(v) > 0 {
		t.Fatalf("%d violations:\n%s", len(v), strings.Join(v, "\n"))
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseGoroutines {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after the engine stopped, %d before:\n%s", runtime.NumGoroutine(), baseGoroutines, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// summary logs what happened to each command (go test -v).
func (fz *fuzzState) summary(qs []*fzQueue) {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	for _, s := range fz.sent {
		st := "no response"
		select {
		case <-s.done:
			st = s.resp.Status.String()
		default:
		}
		fz.t.Logf("%s cid %#x opcode %#x sgl %v: %s (moved %v)", s.q.name, s.cid, s.cmd.Opcode, s.cmd.SGL, st, s.moved)
	}
	for _, q := range qs {
		fz.t.Logf("%s: teardown reason %v (short %v over %v refused %v)", q.name, q.fc.c.reason(), q.shortSent, q.overSent, q.refused)
	}
}

// newCmd records a capsule of at least 64 bytes as a command the host sends.
func (fz *fuzzState) newCmd(q *fzQueue, capsule []byte) *fzCmd {
	s := &fzCmd{q: q, done: make(chan struct{})}
	s.cmd.Unmarshal(capsule[:nvmeproto.SQESize])
	s.cid = s.cmd.CID
	s.dir = s.cmd.DataDirection()
	s.descs = describedKeyed(capsule)
	for _, d := range s.descs {
		s.total += uint64(d.Length)
	}
	s.held = q.qid == 0 && s.cmd.Opcode == nvmeproto.OpAsyncEventRequest
	return s
}

// send delivers a capsule (s describes it, nil for a short or oversized one), waiting
// while the target has no receive posted. It reports whether the capsule was delivered.
func (fz *fuzzState) send(q *fzQueue, capsule []byte, s *fzCmd) bool {
	if s != nil {
		fz.mu.Lock()
		if q.out[s.cid] != nil {
			fz.violate("harness: CID %#x reused", s.cid)
		}
		q.out[s.cid] = s
		q.maxOut = max(q.maxOut, len(q.out))
		fz.sent = append(fz.sent, s)
		fz.mu.Unlock()
	}
	deadline := time.Now().Add(fzWaitTime)
	for {
		err := q.fc.ep.hostSend(capsule)
		if err == nil {
			return true
		}
		if errors.Is(err, errRNR) && !q.broken() {
			if time.Now().After(deadline) {
				fz.mu.Lock()
				fz.violate("%s: no receive posted for %v with the connection up (outstanding %d)", q.name, fzWaitTime, len(q.out))
				fz.mu.Unlock()
				break
			}
			time.Sleep(20 * time.Microsecond)
			continue
		}
		break // the QP is in the error state: the host knows the capsule was not sent
	}
	if s != nil {
		fz.mu.Lock()
		delete(q.out, s.cid)
		fz.mu.Unlock()
	}
	return false
}

// wait waits for s's response, or for its connection to break.
func (fz *fuzzState) wait(q *fzQueue, s *fzCmd) bool {
	deadline := time.After(fzWaitTime)
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return true
		case <-tick.C:
			if q.broken() {
				return false
			}
		case <-deadline:
			fz.mu.Lock()
			s.late = true
			fz.violate("%s: no response to CID %#x (opcode %#x, SGL %v) within %v, connection up", q.name, s.cid, s.cmd.Opcode, s.cmd.SGL, fzWaitTime)
			fz.mu.Unlock()
			return false
		}
	}
}

// waitAll waits for the responses of every outstanding command of q but held AERs.
func (fz *fuzzState) waitAll(q *fzQueue) {
	fz.mu.Lock()
	var pending []*fzCmd
	for _, s := range q.out {
		if !s.held && !s.late {
			pending = append(pending, s)
		}
	}
	fz.mu.Unlock()
	slices.SortFunc(pending, func(a, b *fzCmd) int { return int(a.cid) - int(b.cid) })
	for _, s := range pending {
		if !fz.wait(q, s) {
			return
		}
	}
}

// freshIO writes 4 KiB with a keyed SGL and reads it back.
func (fz *fuzzState) freshIO(q *fzQueue) {
	const slba, n, src, dst = 16, 4096, 192 << 10, 224 << 10
	run := func(op uint8, off int) (*fzCmd, bool) {
		cmd := rw(op, 1, slba, n/fzLBA)
		cmd.Flags = nvmeproto.PSDTSGL << 6
		cmd.CID = 0xF000 + uint16(op) // distinct from the fuzzed CIDs
		cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Subtype: nvmeproto.SGLSubtypeAddress,
			Address: q.ep.hostBase + uint64(off), Length: n, Key: q.ep.hostKey}
		capsule := make([]byte, nvmeproto.SQESize)
		cmd.Marshal(capsule)
		s := fz.newCmd(q, capsule)
		if !fz.send(q, capsule, s) || !fz.wait(q, s) {
			return s, false
		}
		return s, true
	}
	q.ep.fakeEP.mu.Lock()
	want := bytes.Clone(q.ep.hostMem[src : src+n])
	q.ep.fakeEP.mu.Unlock()
	w, ok := run(nvmeproto.OpWrite, src)
	if !ok {
		return // torn down meanwhile: checkTeardown judges why
	}
	r, ok := run(nvmeproto.OpRead, dst)
	if !ok {
		return
	}
	q.ep.fakeEP.mu.Lock()
	got := bytes.Clone(q.ep.hostMem[dst : dst+n])
	q.ep.fakeEP.mu.Unlock()
	fz.mu.Lock()
	defer fz.mu.Unlock()
	if !w.resp.Status.Success() || !r.resp.Status.Success() {
		// Allowed only on a queue being deleted (the core tears I/O queues down after
		// their admin queue, on its own goroutine): then the connection goes.
		fz.mu.Unlock()
		gone := false
		for deadline := time.Now().Add(fzWaitTime); !gone && time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
			gone = q.broken()
		}
		fz.mu.Lock()
		if !gone {
			fz.violate("%s: fresh write/read after the fuzzed capsules failed with the connection up: %v, %v", q.name, w.resp.Status, r.resp.Status)
		}
		return
	}
	if !bytes.Equal(got, want) {
		fz.violate("%s: fresh write/read after the fuzzed capsules: data differs", q.name)
	}
}

// checkTeardown judges why a connection went away before the host closed it.
func (fz *fuzzState) checkTeardown(q *fzQueue) {
	err := q.fc.c.reason()
	switch {
	case err == nil, errors.Is(err, errHostDisconnect):
		// closed by the host at the end
	case errors.Is(err, errShortCapsule):
		if !q.shortSent {
			fz.violate("%s: torn down for a short capsule the host did not send", q.name)
		}
	case errors.Is(err, errQueueOverrun):
		// The fuzzing host sends without waiting for responses; on a shared receive queue
		// nothing but this check stops one that has more commands outstanding than its
		// queue has entries.
		if q.maxOut <= q.fc.c.cfg.depth {
			fz.violate("%s: torn down for sending more commands than the queue has entries, with at most %d outstanding of %d",
				q.name, q.maxOut, q.fc.c.cfg.depth)
		}
	case errors.Is(err, errQPError):
		if !q.overSent && !q.refused {
			fz.violate("%s: queue pair error with every capsule fitting the receive buffer and every RDMA access allowed", q.name)
		}
	case errors.Is(err, target.ErrDisconnectCommand):
		if !q.disconnected {
			fz.violate("%s: torn down for a Disconnect command the host did not send", q.name)
		}
	case errors.Is(err, target.ErrAdminQueueGone), errors.Is(err, target.ErrControllerReset),
		errors.Is(err, target.ErrControllerShutdown), errors.Is(err, target.ErrKeepAliveExpired):
		// the core's decision, after fuzzed admin commands
	default:
		fz.violate("%s: torn down: %v", q.name, err)
	}
}

// checkHostMemory checks that host memory outside the descriptors of read-like commands
// holds its canary.
func (fz *fuzzState) checkHostMemory(qs []*fzQueue) {
	for _, q := range qs {
		base, key := q.ep.hostBase, q.ep.hostKey
		type span struct{ lo, hi uint64 }
		var spans []span
		fz.mu.Lock()
		for _, s := range fz.sent {
			if s.q != q || s.dir != nvmeproto.DirCtrlToHost {
				continue
			}
			for _, d := range s.descs {
				if d.Key != key || d.Address < base || d.Address-base >= fzHostBytes {
					continue
				}
				lo := d.Address - base
				spans = append(spans, span{lo, min(lo+uint64(d.Length), fzHostBytes)})
			}
		}
		fz.mu.Unlock()
		slices.SortFunc(spans, func(a, b span) int { return int(a.lo) - int(b.lo) })
		q.ep.fakeEP.mu.Lock()
		mem := bytes.Clone(q.ep.hostMem)
		q.ep.fakeEP.mu.Unlock()
		at := uint64(0)
		check := func(lo, hi uint64) {
			if lo < hi && !bytes.Equal(mem[lo:hi], fzHostPattern[lo:hi]) {
				i := lo
				for mem[i] == fzHostPattern[i] {
					i++
				}
				fz.mu.Lock()
				fz.violate("%s: host memory at offset %d, outside every read-like command's descriptors, was written", q.name, i)
				fz.mu.Unlock()
			}
		}
		for _, s := range spans {
			check(at, s.lo)
			at = max(at, s.hi)
		}
		check(at, fzHostBytes)
	}
}

// checkNamespace checks NSID 1: every modification inside the namespace and matching a
// write the host sent, and blocks no write covered still holding their canary.
func (fz *fuzzState) checkNamespace() {
	const nblocks = fzNSBytes / fzLBA
	touched := make([]bool, nblocks)
	mark := func(slba, nlb uint64) {
		for b := slba; b < slba+nlb && b < nblocks; b++ {
			touched[b] = true
		}
	}
	fz.mu.Lock()
	defer fz.mu.Unlock()
	type rng struct{ slba, nlb uint64 }
	sent := map[rng]bool{}
	for _, s := range fz.sent {
		c := &s.cmd
		if c.NSID != 1 || (c.Opcode != nvmeproto.OpWrite && c.Opcode != nvmeproto.OpWriteZeroes) {
			continue
		}
		r := rng{uint64(c.CDW11)<<32 | uint64(c.CDW10), uint64(c.CDW12&0xFFFF) + 1}
		sent[r] = true
		if r.slba < nblocks {
			mark(r.slba, r.nlb)
		}
	}
	fz.ns.mu.Lock()
	ops := slices.Clone(fz.ns.ops)
	fz.ns.mu.Unlock()
	for _, o := range ops {
		if o.nlb > nblocks || o.slba > nblocks-o.nlb {
			fz.violate("namespace: %s of %d blocks at LBA %d outside the namespace of %d blocks", o.op, o.nlb, o.slba, nblocks)
			continue
		}
		if o.op == "deallocate" {
			mark(o.slba, o.nlb) // ranges the host sent in a Dataset Management command's data
			continue
		}
		if !sent[rng{o.slba, o.nlb}] {
			fz.violate("namespace: %s of %d blocks at LBA %d matches no write the host sent", o.op, o.nlb, o.slba)
		}
	}
	got := aligned.Bytes(fzNSBytes)
	if err := fz.ns.Backend.ReadBlocks(got, 0); err != nil {
		fz.violate("namespace: reading it back: %v", err)
		return
	}
	for b := 0; b < nblocks; b++ {
		lo, hi := b*fzLBA, (b+1)*fzLBA
		if !touched[b] && !bytes.Equal(got[lo:hi], fzNSPattern[lo:hi]) {
			fz.violate("namespace: LBA %d changed though no write covered it", b)
			return
		}
	}
}

// ---- seeds ----

// fuzzRecord encodes one record of FuzzEngineCapsules input: the control byte, the
// length byte and the capsule. The length byte is derived from the capsule for the
// in-capsule-data sizes (a multiple of 16 bytes after the SQE); other sizes use the
// length modes directly.
func fuzzRecord(ctl byte, cmd nvmeproto.Command, icd []byte) []byte {
	if len(icd)%16 != 0 || len(icd)/16 > 255 {
		panic("fuzzRecord: in-capsule data must be a multiple of 16 bytes up to 4080")
	}
	sqe := make([]byte, nvmeproto.SQESize)
	cmd.Flags |= nvmeproto.PSDTSGL << 6
	cmd.Marshal(sqe)
	out := []byte{ctl | fzLenICD, byte(len(icd) / 16)}
	out = append(out, sqe...)
	return append(out, icd...)
}

// keyedOff is a keyed descriptor for n bytes at offset off of host memory (with
// fzRebase|fzFixKey the harness makes it an address with the host's key).
func keyedOff(off, n int) nvmeproto.SGLDescriptor {
	return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Subtype: nvmeproto.SGLSubtypeAddress, Address: uint64(off), Length: uint32(n)}
}

type fuzzSeed struct {
	name string
	data []byte
}

func engineCapsuleSeeds() []fuzzSeed {
	const good = fzFixKey | fzRebase | fzWait
	cat := func(recs ...[]byte) []byte { return append([]byte{6<<4 | 14}, bytes.Join(recs, nil)...) } // depth 16, pool 256 KiB
	depth := func(d int, seed []byte) []byte { seed[0] = seed[0]&0xF0 | byte(d-2); return seed }
	pool := func(mdts int, seed []byte) []byte { seed[0] = seed[0]&0x0F | byte(mdts-2)<<4; return seed }
	withSGL := func(c nvmeproto.Command, d nvmeproto.SGLDescriptor) nvmeproto.Command { c.SGL = d; return c }
	inCapsule := func(off, n int) nvmeproto.SGLDescriptor {
		return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeDataBlock, Subtype: nvmeproto.SGLSubtypeOffset, Address: uint64(off), Length: uint32(n)}
	}
	list := func(off int, ds ...nvmeproto.SGLDescriptor) ([]byte, nvmeproto.SGLDescriptor) {
		b := make([]byte, off+16*len(ds))
		for i := range ds {
			ds[i].Marshal(b[off+16*i:])
		}
		return b, nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeLastSegment, Subtype: nvmeproto.SGLSubtypeOffset, Address: uint64(off), Length: uint32(16 * len(ds))}
	}
	admin := func(op uint8, cdw10 uint32, nsid uint32, n int) nvmeproto.Command {
		c := nvmeproto.Command{Opcode: op, NSID: nsid, CDW10: cdw10}
		c.SGL = keyedOff(64<<10, n)
		if n == 0 {
			c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}
		}
		return c
	}
	fabrics := func(ft nvmeproto.FabricsType) nvmeproto.Command {
		return nvmeproto.Command{Opcode: nvmeproto.OpFabrics, NSID: uint32(ft), SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}}
	}
	raw := func(ctl byte, b byte, capsule []byte) []byte { return append([]byte{ctl, b}, capsule...) }

	wr := withSGL(rw(nvmeproto.OpWrite, 1, 8, 8), keyedOff(0, 4096))
	rd := withSGL(rw(nvmeproto.OpRead, 1, 8, 8), keyedOff(8192, 4096))
	big := withSGL(rw(nvmeproto.OpWrite, 1, 64, 64), keyedOff(32<<10, 32<<10)) // 4 READs of 8 KiB
	bigRd := withSGL(rw(nvmeproto.OpRead, 1, 64, 64), keyedOff(96<<10, 32<<10))
	inv := withSGL(rw(nvmeproto.OpRead, 1, 8, 8), keyedOff(16<<10, 4096))
	inv.SGL.Subtype = nvmeproto.SGLSubtypeInvalidate
	lw, lwd := list(0, keyedOff(0, 1024), keyedOff(40<<10, 3072))
	lr, lrd := list(32, keyedOff(128<<10, 2048), keyedOff(0, 0), keyedOff(136<<10, 2048))
	var d16, dl []nvmeproto.SGLDescriptor
	for i := 0; i < 16; i++ {
		d16 = append(d16, keyedOff(160<<10+i*1024, 512))
		dl = append(dl, keyedOff(160<<10+i*1024, 512))
	}
	dl[15] = keyedOff(200<<10, 24<<10)
	l16, l16d := list(0, d16...)
	ll, lld := list(0, dl...)
	dsmRanges := make([]byte, 32)
	binary.LittleEndian.PutUint32(dsmRanges[4:], 8)    // 8 blocks
	binary.LittleEndian.PutUint64(dsmRanges[8:], 100)  // at 100
	binary.LittleEndian.PutUint32(dsmRanges[20:], 1)   // 1 block
	binary.LittleEndian.PutUint64(dsmRanges[24:], 511) // at the last LBA
	dsm := withSGL(nvmeproto.Command{Opcode: nvmeproto.OpDatasetManagement, NSID: 1, CDW10: 1, CDW11: 1 << 2}, inCapsule(0, 32))
	wz := rw(nvmeproto.OpWriteZeroes, 1, 200, 16)
	wz.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}
	flush := nvmeproto.Command{Opcode: nvmeproto.OpFlush, NSID: 1, SGL: nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}}
	cmp := withSGL(rw(nvmeproto.OpCompare, 1, 8, 8), keyedOff(0, 4096))
	var connect nvmeproto.Command
	(&nvmeproto.ConnectCommand{QID: 1, SQSize: 15}).ToCommand(&connect)
	connect.SGL = keyedOff(0, nvmeproto.ConnectDataSize)
	propGet := fabrics(nvmeproto.FabricsPropertyGet)
	propGet.CDW10, propGet.CDW11 = 1, nvmeproto.PropCAP // 8 bytes
	sqe := func(c nvmeproto.Command) []byte {
		b := make([]byte, 64)
		c.Flags |= nvmeproto.PSDTSGL << 6
		c.Marshal(b)
		return b
	}
	garbage := pattern(64+256, 0x77)

	seeds := []fuzzSeed{
		{"keyed-write-read", cat(fuzzRecord(good, wr, nil), fuzzRecord(good, rd, nil))},
		{"keyed-32k-split", cat(fuzzRecord(good, big, nil), fuzzRecord(good, bigRd, nil))},
		{"keyed-invalidate", cat(fuzzRecord(good, inv, nil))},
		{"in-capsule-write", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpWrite, 1, 300, 1), inCapsule(0, 512)), pattern(512, 1)),
			fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 300, 1), keyedOff(0, 512)), nil))},
		{"in-capsule-offset", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpWrite, 1, 301, 2), inCapsule(16, 1024)), pattern(1040, 2)))},
		{"in-capsule-full", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpWrite, 1, 400, 7), inCapsule(0, 3584)), pattern(4080, 3)))},
		{"in-capsule-short", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpWrite, 1, 0, 8), inCapsule(0, 4096)), pattern(1024, 4)))},
		{"in-capsule-read", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 0, 1), inCapsule(0, 512)), make([]byte, 512)))},
		{"sgl-list-write-read", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpWrite, 1, 40, 8), lwd), lw),
			fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 40, 8), lrd), lr))},
		{"dsm-write-zeroes-flush-compare", cat(fuzzRecord(good, dsm, dsmRanges), fuzzRecord(good, wz, nil),
			fuzzRecord(good, flush, nil), fuzzRecord(good, cmp, nil))},
		{"no-wait-burst", cat(fuzzRecord(fzFixKey|fzRebase, wr, nil), fuzzRecord(fzFixKey|fzRebase, big, nil),
			fuzzRecord(fzFixKey|fzRebase, rd, nil), fuzzRecord(fzFixKey|fzRebase, bigRd, nil),
			fuzzRecord(fzFixKey|fzRebase, withSGL(rw(nvmeproto.OpRead, 2, 0, 64), keyedOff(0, 32<<10)), nil),
			fuzzRecord(fzFixKey|fzRebase, withSGL(rw(nvmeproto.OpRead, 2, 0, 64), keyedOff(64<<10, 32<<10)), nil),
			fuzzRecord(fzFixKey|fzRebase, withSGL(rw(nvmeproto.OpRead, 2, 0, 64), keyedOff(128<<10, 32<<10)), nil))},
		{"admin-identify-log-features", cat(
			fuzzRecord(good|fzAdmin, admin(nvmeproto.OpIdentify, 1, 0, 4096), nil),
			fuzzRecord(good|fzAdmin, admin(nvmeproto.OpIdentify, 0, 1, 4096), nil),
			fuzzRecord(good|fzAdmin, admin(nvmeproto.OpGetLogPage, 2|127<<16, 0xFFFFFFFF, 512), nil),
			fuzzRecord(good|fzAdmin, admin(nvmeproto.OpGetFeatures, 7, 0, 0), nil),
			fuzzRecord(good|fzAdmin, admin(nvmeproto.OpKeepAlive, 0, 0, 0), nil))},
		{"admin-aer", cat(fuzzRecord(good|fzAdmin, admin(nvmeproto.OpAsyncEventRequest, 0, 0, 0), nil),
			fuzzRecord(good|fzAdmin, admin(nvmeproto.OpAsyncEventRequest, 0, 0, 0), nil),
			fuzzRecord(good, rd, nil))},
		{"fabrics-property-get", cat(fuzzRecord(good|fzAdmin, propGet, nil))},
		{"fabrics-connect-again", cat(fuzzRecord(good, connect, nil))},
		{"fabrics-disconnect-io", cat(fuzzRecord(good, fabrics(nvmeproto.FabricsDisconnect), nil), fuzzRecord(good, rd, nil))},
		{"bad-rkey", cat(fuzzRecord(fzRebase|fzWait, wr, nil), fuzzRecord(good, rd, nil))},
		{"host-memory-edge", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 8, 8), keyedOff(fzHostBytes-2048, 4096)), nil))},
		{"sgl-shorter-than-nlb", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 8, 8), keyedOff(0, 512)), nil))},
		{"over-mdts", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 0, 128), keyedOff(0, 64<<10)), nil))},
		{"lba-out-of-range", cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpWrite, 1, 510, 8), keyedOff(0, 4096)), nil))},
		{"short-capsule", cat(raw(fzLenShort|fzWait, 32, sqe(rd)[:32]), fuzzRecord(good, rd, nil))},
		{"over-receive-io", cat(raw(fzLenOver|fzWait, 0, sqe(wr)))},
		{"over-receive-admin", cat(raw(fzLenOver|fzWait|fzAdmin, 0, sqe(admin(nvmeproto.OpKeepAlive, 0, 0, 0))))},
		{"odd-length", cat(raw(fzLenOdd|good, 7, append(sqe(wr), 1, 2, 3, 4, 5, 6, 7)))},
		{"garbage", cat(raw(fzLenICD|fzWait, 16, garbage))},
		{"garbage-admin", cat(raw(fzLenICD|fzWait|fzAdmin, 0, garbage))},
		// 4 KiB held by an unsignaled response; the pool outside its reserve is then
		// one page short of a 32 KiB transfer.
		{"pool-small-4k-then-32k", pool(2, cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 2, 0, 8), keyedOff(0, 4096)), nil),
			fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 2, 0, 64), keyedOff(32<<10, 32<<10)), nil)))},
		{"admin-short-cascade", cat(raw(fzLenShort|fzWait|fzAdmin, 23, sqe(admin(nvmeproto.OpKeepAlive, 0, 0, 0))[:23]),
			fuzzRecord(good, wr, nil))},
		// 16 descriptors: a response chain of 16 WRITEs and the SEND, on the smallest queue.
		{"list-16-depth-2", depth(2, cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpWrite, 1, 48, 16), l16d), l16),
			fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 48, 16), l16d), l16)))},
		// 15 descriptors and a 24 KiB one: 19 WRITEs (8 KiB messages) and the SEND.
		{"list-long-chain-depth-2", depth(2, cat(fuzzRecord(good, withSGL(rw(nvmeproto.OpRead, 1, 0, 63), lld), ll)))},
	}
	return seeds
}

// -update-seeds rewrites testdata/fuzz/FuzzEngineCapsules/seed-* from engineCapsuleSeeds.
var updateSeeds = flag.Bool("update-seeds", false, "rewrite the FuzzEngineCapsules seed corpus")

// TestEngineCapsuleSeedCorpus checks that the checked-in seed corpus is the one
// engineCapsuleSeeds builds (run with -update-seeds after changing it).
func TestEngineCapsuleSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzEngineCapsules")
	for _, s := range engineCapsuleSeeds() {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
		p := filepath.Join(dir, "seed-"+s.name)
		if *updateSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Errorf("%s: missing or out of date (err %v): run go test -run TestEngineCapsuleSeedCorpus -update-seeds", p, err)
		}
	}
}
