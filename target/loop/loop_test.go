package loop_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/testutil"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target/loop"
)

const (
	sub  = "nqn.2024-01.io.gonvmf:loop"
	host = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1f1b-4c39-9a0c-0a1b2c3d4e5f"
)

// hostID is host's identifier (the target refuses 0h).
var hostID = [16]byte{0x0c, 0x0c, 0x0c, 0x0c, 0x1f, 0x1b, 0x4c, 0x39, 0x9a, 0x0c, 0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}

func newPort(t *testing.T, o loop.Options) *loop.Port {
	t.Helper()
	cfg := &conf.Config{
		Listeners: []conf.Listener{{Address: "10.99.0.1"}},
		Subsystems: []conf.Subsystem{{NQN: sub, AllowAnyHost: true,
			Namespaces: []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 4 << 20}}}},
		Transport: conf.Transport{InCapsuleDataSize: 4096},
	}
	_, p := testutil.LoopTarget(t, cfg, o)
	return p
}

func keyed(n int) nvmeproto.SGLDescriptor {
	return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Length: uint32(n)}
}

// do submits and waits; it returns Submit's error or the completion.
func do(c *loop.Conn, cmd *nvmeproto.Command, data []byte) (nvmeproto.Completion, error) {
	ch := make(chan nvmeproto.Completion, 1)
	if err := c.Submit(cmd, data, func(cqe nvmeproto.Completion) { ch <- cqe }); err != nil {
		return nvmeproto.Completion{}, err
	}
	select {
	case cqe := <-ch:
		return cqe, nil
	case <-time.After(5 * time.Second):
		return nvmeproto.Completion{}, errors.New("timeout")
	}
}

func mustOK(t *testing.T, what string, c nvmeproto.Completion, err error) {
	t.Helper()
	if err != nil || !c.Status.Success() {
		t.Fatalf("%s: %v %v", what, err, c.Status)
	}
}

func connect(t *testing.T, c *loop.Conn, qid uint16, sqsize uint16, cntlid uint16) uint16 {
	t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(1024)}
	cc := nvmeproto.ConnectCommand{QID: qid, SQSize: sqsize}
	cc.ToCommand(&cmd)
	d := nvmeproto.ConnectData{HostID: hostID, CNTLID: cntlid, SubNQN: sub, HostNQN: host}
	b := make([]byte, 1024)
	d.Marshal(b)
	cqe, err := do(c, &cmd, b)
	mustOK(t, "connect", cqe, err)
	return uint16(cqe.DW0)
}

func enable(t *testing.T, c *loop.Conn) {
	t.Helper()
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6}
	ps := nvmeproto.PropertySetCommand{Offset: nvmeproto.PropCC, Value: uint64(nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4))}
	ps.ToCommand(&cmd)
	cqe, err := do(c, &cmd, nil)
	mustOK(t, "enable", cqe, err)
}

func TestConnErrors(t *testing.T) {
	p := newPort(t, loop.Options{})
	if _, err := p.Dial(0); err == nil {
		t.Error("Dial(0) succeeded")
	}
	c, err := p.Dial(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SubmitCapsule(make([]byte, 63), nil, func(nvmeproto.Completion) {}); !errors.Is(err, loop.ErrShortCapsule) {
		t.Errorf("short capsule: %v", err)
	}
	if err := c.SubmitCapsule(make([]byte, 64+4097), nil, func(nvmeproto.Completion) {}); !errors.Is(err, loop.ErrCapsuleTooBig) {
		t.Errorf("big capsule: %v", err)
	}
	ic := nvmeproto.Command{Opcode: nvmeproto.OpWrite, SGL: nvmeproto.SGLDescriptor{Subtype: nvmeproto.SGLSubtypeOffset, Length: 8192}}
	if err := c.Submit(&ic, make([]byte, 8192), func(nvmeproto.Completion) {}); !errors.Is(err, loop.ErrCapsuleTooBig) {
		t.Errorf("big in-capsule data: %v", err)
	}
	connect(t, c, 0, 2, 0xFFFF)
	enable(t, c)
	// Three held AERs fill the three slots.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var statuses []nvmeproto.Status
	for i := range 3 {
		aer := nvmeproto.Command{Opcode: nvmeproto.OpAsyncEventRequest, Flags: nvmeproto.PSDTSGL << 6, CID: uint16(10 + i)}
		wg.Add(1)
		if err := c.Submit(&aer, nil, func(cqe nvmeproto.Completion) {
			mu.Lock()
			statuses = append(statuses, cqe.Status)
			mu.Unlock()
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	ka := nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive, Flags: nvmeproto.PSDTSGL << 6}
	if err := c.Submit(&ka, nil, func(nvmeproto.Completion) {}); !errors.Is(err, loop.ErrQueueFull) {
		t.Errorf("fourth command on a depth-3 queue: %v", err)
	}
	// Close completes the held commands before returning.
	c.Close()
	wg.Wait()
	for _, s := range statuses {
		if s.Code() != nvmeproto.StatusAbortSQDeletion.Code() {
			t.Errorf("held AER completed with %v", s)
		}
	}
	if err := c.Submit(&ka, nil, func(nvmeproto.Completion) {}); !errors.Is(err, loop.ErrClosed) {
		t.Errorf("submit after close: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed")
	}
	if !errors.Is(c.Err(), loop.ErrClosed) {
		t.Errorf("Err %v", c.Err())
	}
}

// TestConcurrentSubmit: one Conn used from several goroutines; every command completes
// once with its data.
func TestConcurrentSubmit(t *testing.T) {
	p := newPort(t, loop.Options{})
	admin, _ := p.Dial(32)
	cntlid := connect(t, admin, 0, 31, 0xFFFF)
	enable(t, admin)
	q, _ := p.Dial(64)
	connect(t, q, 1, 63, cntlid)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := range 200 {
				slba := uint64(g*1600 + i*8)
				w := nvmeproto.Command{Opcode: nvmeproto.OpWrite, Flags: nvmeproto.PSDTSGL << 6, NSID: 1, SGL: keyed(4096),
					CDW10: uint32(slba), CDW12: 7}
				buf[0], buf[4095] = byte(g), byte(i)
				if c, err := do(q, &w, buf); err != nil || !c.Status.Success() {
					t.Errorf("write: %v %v", err, c.Status)
					return
				}
				r := w
				r.Opcode = nvmeproto.OpRead
				got := make([]byte, 4096)
				if c, err := do(q, &r, got); err != nil || !c.Status.Success() || got[0] != byte(g) || got[4095] != byte(i) {
					t.Errorf("read: %v %v", err, c.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
}
