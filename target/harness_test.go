package target_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/loop"
)

const (
	subNQN   = "nqn.2024-01.io.gonvmf:test"
	hostNQN  = "nqn.2014-08.org.nvmexpress:uuid:8e5e5e4c-1f1b-4c39-9a0c-0a1b2c3d4e5f"
	otherNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
)

var hostID = [16]byte{0x8e, 0x5e, 0x5e, 0x4c, 0x1f, 0x1b, 0x4c, 0x39, 0x9a, 0x0c, 0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}

// The helpers shared with other packages' tests.
var (
	testLogger = testutil.Logger
	expect     = testutil.Expect
	expectOK   = testutil.ExpectOK
)

// baseConfig is a configuration with one subsystem (allow any host) holding the given
// namespaces, and one RDMA listener (not opened by these tests).
func baseConfig(nss ...conf.Namespace) *conf.Config {
	return &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{
			NQN: subNQN, AllowAnyHost: true, Namespaces: nss,
		}},
		Transport: conf.Transport{QueueDepth: 128, MaxIOQueues: 4, InCapsuleDataSize: 8192, MaxIOSize: 128 << 10},
		// The keep-alive tests use KATOs below the default minimum (1 s) to run fast.
		Limits: conf.Limits{MinKeepAliveTimeout: 100 * time.Millisecond},
	}
}

func memNS(nsid uint32, size conf.Size) conf.Namespace {
	return conf.Namespace{NSID: nsid, Backend: conf.BackendMemory, Size: size}
}

func fileNS(t testing.TB, nsid uint32, size conf.Size) conf.Namespace {
	p := filepath.Join(t.TempDir(), "ns.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return conf.Namespace{NSID: nsid, Backend: conf.BackendFile, Path: p, Size: size}
}

// env is a target with one loop port.
type env struct {
	t    testing.TB
	tgt  *target.Target
	port *loop.Port
}

func newEnv(t testing.TB, cfg *conf.Config, opts ...target.Option) *env {
	t.Helper()
	tgt, p := testutil.LoopTarget(t, cfg, loop.Options{}, opts...)
	return &env{t: t, tgt: tgt, port: p}
}

// hostQueue is a host-side queue over a loop Conn, with synchronous helpers.
type hostQueue struct {
	t    testing.TB
	conn *loop.Conn
	mu   sync.Mutex
	cid  uint16
}

func (e *env) dial(depth int) *hostQueue {
	e.t.Helper()
	c, err := e.port.Dial(depth)
	if err != nil {
		e.t.Fatalf("Dial: %v", err)
	}
	h := &hostQueue{t: e.t, conn: c}
	e.t.Cleanup(func() { c.Close() })
	return h
}

func (h *hostQueue) nextCID() uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cid++
	return h.cid
}

// submit sends cmd (with a fresh CID) and returns a channel delivering its completion.
func (h *hostQueue) submit(cmd *nvmeproto.Command, data []byte) <-chan nvmeproto.Completion {
	h.t.Helper()
	cmd.CID = h.nextCID()
	ch := make(chan nvmeproto.Completion, 1)
	if err := h.conn.Submit(cmd, data, func(c nvmeproto.Completion) { ch <- c }); err != nil {
		h.t.Fatalf("Submit: %v", err)
	}
	return ch
}

func wait(t testing.TB, ch <-chan nvmeproto.Completion) nvmeproto.Completion {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a completion")
	}
	panic("unreachable")
}

// do sends cmd and waits for its completion.
func (h *hostQueue) do(cmd *nvmeproto.Command, data []byte) nvmeproto.Completion {
	h.t.Helper()
	want := h.cid + 1
	c := wait(h.t, h.submit(cmd, data))
	if c.CID != want {
		h.t.Fatalf("completion CID %d, want %d", c.CID, want)
	}
	return c
}

// keyed returns a keyed SGL descriptor for n bytes at the start of the host buffer.
func keyed(n int) nvmeproto.SGLDescriptor {
	return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Subtype: nvmeproto.SGLSubtypeAddress, Length: uint32(n), Key: 0x1234}
}

func sglCmd(op uint8, nsid uint32, n int) nvmeproto.Command {
	return nvmeproto.Command{Opcode: op, Flags: nvmeproto.PSDTSGL << 6, NSID: nsid, SGL: keyed(n)}
}

// connect sends a Fabrics Connect.
func (h *hostQueue) connect(qid, sqsize uint16, kato uint32, cntlid uint16, sub, host string) nvmeproto.Completion {
	h.t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(nvmeproto.ConnectDataSize)}
	cc := nvmeproto.ConnectCommand{QID: qid, SQSize: sqsize, KATO: kato}
	cc.ToCommand(&cmd)
	d := nvmeproto.ConnectData{HostID: hostID, CNTLID: cntlid, SubNQN: sub, HostNQN: host}
	buf := make([]byte, nvmeproto.ConnectDataSize)
	d.Marshal(buf)
	return h.do(&cmd, buf)
}

func (h *hostQueue) propGet(off uint32, size8 bool) (uint64, nvmeproto.Completion) {
	h.t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
	pg := nvmeproto.PropertyGetCommand{Offset: off}
	if size8 {
		pg.Attrib = nvmeproto.PropAttribSize8
	}
	pg.ToCommand(&cmd)
	c := h.do(&cmd, nil)
	return uint64(c.DW0) | uint64(c.DW1)<<32, c
}

func (h *hostQueue) propSet(off uint32, v uint32) nvmeproto.Completion {
	h.t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
	ps := nvmeproto.PropertySetCommand{Offset: off, Value: uint64(v)}
	ps.ToCommand(&cmd)
	return h.do(&cmd, nil)
}

func (h *hostQueue) identify(cns nvmeproto.CNS, nsid uint32, csi nvmeproto.CSI) ([]byte, nvmeproto.Completion) {
	h.t.Helper()
	cmd := sglCmd(nvmeproto.OpIdentify, nsid, nvmeproto.IdentifySize)
	ic := nvmeproto.IdentifyCommand{NSID: nsid, CNS: cns, CSI: csi}
	ic.ToCommand(&cmd)
	buf := make([]byte, nvmeproto.IdentifySize)
	return buf, h.do(&cmd, buf)
}

// identifyController reads and decodes the Identify Controller data (the test fails if it
// cannot).
func (h *hostQueue) identifyController() nvmeproto.IdentifyController {
	h.t.Helper()
	b, c := h.identify(nvmeproto.CNSController, 0, 0)
	expectOK(h.t, "identify controller", c)
	var id nvmeproto.IdentifyController
	if err := id.Unmarshal(b); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// getLog reads n bytes of log page lid from byte offset off.
func (h *hostQueue) getLog(lid uint8, nsid uint32, off uint64, n int, lsp uint8, rae bool) ([]byte, nvmeproto.Completion) {
	h.t.Helper()
	cmd := sglCmd(nvmeproto.OpGetLogPage, nsid, n)
	numd := uint32(n/4 - 1)
	cmd.CDW10 = uint32(lid) | uint32(lsp)<<8 | numd<<16
	if rae {
		cmd.CDW10 |= 1 << 15
	}
	cmd.CDW11 = numd >> 16
	cmd.CDW12, cmd.CDW13 = uint32(off), uint32(off>>32)
	buf := make([]byte, n)
	return buf, h.do(&cmd, buf)
}

func (h *hostQueue) setFeature(fid uint8, dw11 uint32, data []byte) nvmeproto.Completion {
	h.t.Helper()
	cmd := sglCmd(nvmeproto.OpSetFeatures, 0, len(data))
	cmd.CDW10, cmd.CDW11 = uint32(fid), dw11
	return h.do(&cmd, data)
}

func (h *hostQueue) getFeature(fid uint8, sel uint8, dw11 uint32, n int) ([]byte, nvmeproto.Completion) {
	h.t.Helper()
	cmd := sglCmd(nvmeproto.OpGetFeatures, 0, n)
	cmd.CDW10, cmd.CDW11 = uint32(fid)|uint32(sel)<<8, dw11
	buf := make([]byte, n)
	return buf, h.do(&cmd, buf)
}

// enable performs the host's enable sequence: CAP, CC.EN=1, poll CSTS.RDY, VS.
func (h *hostQueue) enable() {
	h.t.Helper()
	capv, c := h.propGet(nvmeproto.PropCAP, true)
	expectOK(h.t, "property get CAP", c)
	cc := nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)
	expectOK(h.t, "property set CC", h.propSet(nvmeproto.PropCC, uint32(cc)))
	deadline := time.Now().Add(time.Duration(nvmeproto.CAP(capv).Timeout()) * time.Millisecond)
	for {
		v, c := h.propGet(nvmeproto.PropCSTS, false)
		expectOK(h.t, "property get CSTS", c)
		if nvmeproto.CSTS(v).RDY() {
			break
		}
		if nvmeproto.CSTS(v).CFS() || time.Now().After(deadline) {
			h.t.Fatalf("controller not ready: %v", nvmeproto.CSTS(v))
		}
		time.Sleep(time.Millisecond)
	}
	_, c = h.propGet(nvmeproto.PropVS, false)
	expectOK(h.t, "property get VS", c)
}

// adminConnect dials an admin queue, connects and enables it; returns the queue and cntlid.
func (e *env) adminConnect(sub, host string, kato uint32) (*hostQueue, uint16) {
	e.t.Helper()
	h := e.dial(32)
	c := h.connect(0, 31, kato, nvmeproto.CNTLIDDynamic, sub, host)
	expectOK(e.t, "admin connect", c)
	cntlid, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
	h.enable()
	return h, cntlid
}

// ioConnect dials and connects I/O queue qid.
func (e *env) ioConnect(qid uint16, cntlid uint16, depth int) *hostQueue {
	e.t.Helper()
	h := e.dial(depth)
	expectOK(e.t, "I/O connect", h.connect(qid, uint16(depth-1), 0, cntlid, subNQN, hostNQN))
	return h
}

func rw(op uint8, nsid uint32, slba uint64, nlb int, bytes int) nvmeproto.Command {
	cmd := sglCmd(op, nsid, bytes)
	cmd.CDW10, cmd.CDW11 = uint32(slba), uint32(slba>>32)
	cmd.CDW12 = uint32(nlb - 1)
	return cmd
}
