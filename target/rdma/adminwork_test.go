package rdma

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// usageGatedNS is a thin-provisioned namespace whose Usage — the fstat and fstatfs that
// Identify Namespace makes a file backend do — waits until gate closes, as on a hung NFS
// mount or a disk that stopped answering.
type usageGatedNS struct {
	backend.Backend
	entered chan struct{}
	gate    chan struct{}
}

const gatedAllocated = 1 << 20 // bytes Usage reports allocated

func (u *usageGatedNS) Info() backend.Info {
	i := backend.Describe(u.Backend)
	i.ThinProvisioned = true
	return i
}

func (u *usageGatedNS) Usage() (allocated, available uint64, err error) {
	u.entered <- struct{}{}
	<-u.gate
	return gatedAllocated, 1 << 30, nil
}

// execWithin runs cmd (n bytes of data by keyed SGL, data placed first) and reports
// whether it completed within d.
func execWithin(t *testing.T, h *hostQueue, cmd nvmeproto.Command, data []byte, n int, d time.Duration) (nvmeproto.Completion, bool) {
	t.Helper()
	c := h.begin()
	copy(c.buf, data)
	cmd.SGL = c.keyedAt(0, n)
	if err := c.submit(&cmd, nil); err != nil {
		t.Fatalf("sending opcode %#x: %v", cmd.Opcode, err)
	}
	cqe, ok := c.wait(d)
	if ok {
		c.release()
	}
	return cqe, ok
}

// TestEngineBlockedAdminCommandSparesPollGroup: an admin command blocked on storage
// (Identify Namespace, in a file backend's fstat) does not stop the poll group that
// received it: I/O on another queue of the group completes, and the blocked admin queue
// itself answers Keep Alive. The Identify completes once the storage answers. The old
// code executed admin commands on the poll group's goroutine: every queue of the group
// stopped until the fstat returned.
func TestEngineBlockedAdminCommandSparesPollGroup(t *testing.T) {
	ns := &usageGatedNS{entered: make(chan struct{}, 8), gate: make(chan struct{})}
	opener := func(s backend.Spec) (backend.Backend, error) {
		b, err := backend.Open(s)
		if err != nil {
			return nil, err
		}
		ns.Backend = b
		return ns, nil
	}
	e := newEngine(t, engineOpts{
		nss:        []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 16 << 20}},
		targetOpts: []target.Option{target.WithBackendOpener(opener)},
	})
	release := sync.OnceFunc(func() { close(ns.gate) })
	t.Cleanup(release) // before the engine's cleanup, which needs the poll group
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 8)

	id := a.h.begin()
	idCmd := nvmeproto.Command{Opcode: nvmeproto.OpIdentify, NSID: 1, CDW10: uint32(nvmeproto.CNSNamespace)}
	idCmd.SGL = id.keyedAt(0, nvmeproto.IdentifySize)
	if err := id.submit(&idCmd, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ns.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Identify Namespace did not reach the backend's Usage")
	}

	data := pattern(4096, 7)
	c, ok := execWithin(t, io.h, rw(nvmeproto.OpWrite, 1, 64, 8), data, len(data), 5*time.Second)
	if !ok {
		t.Fatal("a write on another queue of the poll group did not complete while an admin command was blocked")
	}
	expectOK(t, "write while an admin command is blocked", c)
	c, ok = execWithin(t, a.h, nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive}, nil, 0, 5*time.Second)
	if !ok {
		t.Fatal("Keep Alive did not complete while an admin command was blocked")
	}
	expectOK(t, "Keep Alive while an admin command is blocked", c)
	if _, ok := id.wait(100 * time.Millisecond); ok {
		t.Fatal("Identify Namespace completed while its backend's Usage was blocked")
	}

	release()
	c, ok = id.wait(10 * time.Second)
	if !ok {
		t.Fatal("Identify Namespace did not complete once the backend answered")
	}
	expectOK(t, "Identify Namespace", c)
	if nuse := binary.LittleEndian.Uint64(id.buf[16:]); nuse != gatedAllocated/512 {
		t.Errorf("Identify Namespace NUSE %d blocks, want %d (what Usage reported)", nuse, gatedAllocated/512)
	}
	id.release()
	e.closeAll(io, a)
}
