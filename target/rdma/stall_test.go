package rdma

import (
	"bytes"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// listCmd sends op of nlb blocks at slba 0 of NSID 1 whose data is described by an
// in-capsule Last Segment list of the descriptors at the given offsets and lengths of
// the command's host memory, and returns its completion.
func listCmd(t *testing.T, h *hostQueue, op uint8, nlb int, offs, lens []int) (nvmeproto.Completion, *hostCmd) {
	t.Helper()
	cmd := h.begin()
	list := make([]byte, 16*len(offs))
	for i := range offs {
		d := cmd.keyedAt(offs[i], lens[i])
		d.Marshal(list[16*i:])
	}
	c := rw(op, 1, 0, nlb)
	c.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeLastSegment, Subtype: nvmeproto.SGLSubtypeOffset, Length: uint32(len(list))}
	if err := cmd.submit(&c, list); err != nil {
		t.Fatal(err)
	}
	cqe, ok := cmd.wait(5e9)
	if !ok {
		t.Fatalf("opcode %#x with a %d-descriptor list: no response (the response chain waits for send queue slots forever?)", op, len(offs))
	}
	return cqe, cmd
}

// TestEngineLongResponseChain: on the smallest queue (2 entries) a read whose SGL is a
// full in-capsule list (16 descriptors: 16 RDMA WRITEs and the SEND) completes, also
// after an unsignaled response took send queue slots; a response chain that could
// never be posted (small device messages) fails with Internal Error instead of waiting
// forever, and the queue keeps working. Found by FuzzEngineCapsules (seeds
// list-16-depth-2 and list-long-chain-depth-2): the response waited for send queue
// slots that nothing would free, and every later response of the queue behind it.
func TestEngineLongResponseChain(t *testing.T) {
	e := newEngine(t, engineOpts{icd: 4096, maxMsg: 4096})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 2)

	var offs, lens []int
	for i := 0; i < 16; i++ {
		offs, lens = append(offs, i*1024), append(lens, 512)
	}
	data := pattern(8192, 5)
	cmd := io.h.begin()
	for i := range offs {
		copy(cmd.buf[offs[i]:], data[i*512:(i+1)*512])
	}
	cmd.release()
	c, w := listCmd(t, io.h, nvmeproto.OpWrite, 16, offs, lens) // its response: one unsignaled SEND
	expectOK(t, "write through a 16-descriptor list", c)
	w.release()
	c, r := listCmd(t, io.h, nvmeproto.OpRead, 16, offs, lens)
	expectOK(t, "read through a 16-descriptor list", c)
	for i := range offs {
		if !bytes.Equal(r.buf[offs[i]:offs[i]+512], data[i*512:(i+1)*512]) {
			t.Errorf("descriptor %d: data differs", i)
		}
	}
	r.release()

	// 15 descriptors of 512 bytes and one of 64 KiB in 4 KiB messages: 31 WRITEs and
	// the SEND, more than half the send queue.
	offs[15], lens[15] = 16<<10, 64<<10
	c, r = listCmd(t, io.h, nvmeproto.OpRead, 15+128, offs, lens)
	r.release()
	if c.Status.Code() != nvmeproto.StatusInternalError.Code() {
		t.Errorf("read whose response chain cannot be posted: status %v, want Internal Error", c.Status)
	}
	c, _ = io.h.exec(rw(nvmeproto.OpRead, 1, 0, 8), nil, 4096)
	expectOK(t, "read after the refused one", c)
}

// TestEngineUnsignaledResponseStarvesNoBuffer: a read response sent unsignaled keeps its
// pool buffer until a later completion, which need not come. On a pool of two largest
// transfers (one of them the admin reserve) a 4 KiB read followed by a transfer of the
// pool's largest size left the second waiting for a buffer forever. Found by
// FuzzEngineCapsules (seed pool-small-4k-then-32k).
func TestEngineUnsignaledResponseStarvesNoBuffer(t *testing.T) {
	e := newEngine(t, engineOpts{poolSize: 64 << 10, maxIO: 32 << 10})
	_, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 16)
	c, _ := io.h.exec(rw(nvmeproto.OpRead, 2, 0, 8), nil, 4096)
	expectOK(t, "4 KiB read", c)
	cmd := io.h.begin()
	r := rw(nvmeproto.OpRead, 2, 0, 64)
	r.SGL = cmd.keyedAt(0, 32<<10)
	if err := cmd.submit(&r, nil); err != nil {
		t.Fatal(err)
	}
	c, ok := cmd.wait(5e9)
	if !ok {
		t.Fatalf("32 KiB read after a 4 KiB one: no response (waits for a buffer an unsignaled response holds)")
	}
	expectOK(t, "32 KiB read", c)
	cmd.release()
}
