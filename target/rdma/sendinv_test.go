package rdma

import (
	"bytes"
	"slices"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestEngineSendInvalidate: the response to a command whose one keyed descriptor asks for
// its key to be invalidated (subtype Invalidate Key, as the Linux host sends) is a SEND
// with Invalidate of that key — for reads, writes and failed commands alike — and no other
// response is; on a device without SEND with Invalidate every response is a plain SEND.
func TestEngineSendInvalidate(t *testing.T) {
	for _, dev := range []struct {
		name  string
		noInv bool
	}{{"device-with-it", false}, {"device-without-it", true}} {
		t.Run(dev.name, func(t *testing.T) {
			e := newEngine(t, engineOpts{noSendInv: dev.noInv})
			_, cntlid := e.adminConnect(0)
			io := e.ioConnect(1, cntlid, 16)
			invalidated := func() []uint32 {
				io.ep.mu.Lock()
				defer io.ep.mu.Unlock()
				return slices.Clone(io.ep.invalidated)
			}
			data := bytes.Repeat([]byte{0x5A}, 4096)
			key := io.h.rkey
			steps := []struct {
				name   string
				cmd    nvmeproto.Command
				sub    nvmeproto.SGLSubtype
				n      int
				ok     bool
				inv    bool // the host asked for an invalidation the response should carry
				readOK bool // the data read back is data
			}{
				{"write, invalidate", rw(nvmeproto.OpWrite, 1, 8, 8), nvmeproto.SGLSubtypeInvalidate, 4096, true, true, false},
				{"read, invalidate", rw(nvmeproto.OpRead, 1, 8, 8), nvmeproto.SGLSubtypeInvalidate, 4096, true, true, true},
				{"read, address", rw(nvmeproto.OpRead, 1, 8, 8), nvmeproto.SGLSubtypeAddress, 4096, true, false, true},
				{"write, address", rw(nvmeproto.OpWrite, 1, 8, 8), nvmeproto.SGLSubtypeAddress, 4096, true, false, false},
				{"read out of range, invalidate", rw(nvmeproto.OpRead, 1, 1<<40, 8), nvmeproto.SGLSubtypeInvalidate, 4096, false, true, false},
				{"flush, no data", nvmeproto.Command{Opcode: nvmeproto.OpFlush, NSID: 1}, nvmeproto.SGLSubtypeInvalidate, 0, true, false, false},
			}
			for _, s := range steps {
				before := invalidated()
				var in []byte
				if s.cmd.Opcode == nvmeproto.OpWrite {
					in = data
				}
				cqe, got := io.h.execKeyed(s.cmd, in, s.n, s.sub)
				if cqe.Status.Success() != s.ok {
					t.Errorf("%s: status %v, want success %v", s.name, cqe.Status, s.ok)
				}
				if s.readOK && !bytes.Equal(got, data) {
					t.Errorf("%s: the data read back differs from what was written", s.name)
				}
				after := invalidated()
				want := before
				if s.inv && !dev.noInv {
					want = append(slices.Clone(before), key)
				}
				if !slices.Equal(after, want) {
					t.Errorf("%s: keys invalidated %#x, want %#x", s.name, after[len(before):], want[len(before):])
				}
			}
		})
	}
}
