package target_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"testing"

	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// oneHostKeys gives hostNQN a key on subNQN.
type oneHostKeys struct{ keys *dhchap.HostKeys }

func (k oneHostKeys) HostAuth(sub, host string) (authenticates, required bool) {
	return sub == subNQN && host == hostNQN && k.keys != nil, true
}

func (k oneHostKeys) HostKeys(_ context.Context, sub, host string) (*dhchap.HostKeys, error) {
	if sub == subNQN && host == hostNQN {
		return k.keys, nil
	}
	return nil, nil
}

func authCmd(send bool, n int) nvmeproto.Command {
	cmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(n)}
	if send {
		(&nvmeproto.AuthSendCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: 1, SPSP1: 1, TL: uint32(n)}).ToCommand(&cmd)
	} else {
		(&nvmeproto.AuthReceiveCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: 1, SPSP1: 1, AL: uint32(n)}).ToCommand(&cmd)
	}
	return cmd
}

// FuzzAuthCapsules sends arbitrary commands and authentication messages to an admin queue
// that must authenticate, from a host that does not know the key: nothing panics, every
// command completes once, and nothing but Authentication Send/Receive ever succeeds.
func FuzzAuthCapsules(f *testing.F) {
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		f.Fatal(err)
	}
	wrong, _ := dhchap.GenerateSecret(rand.Reader, 0, 32)
	h, _ := dhchap.NewHost(dhchap.HostConfig{Secret: wrong, HostNQN: hostNQN, SubNQN: subNQN}, 1)
	neg := h.Negotiate()
	reply := make([]byte, 16+64)
	(&nvmeproto.AuthReply{TID: 1, R1: make([]byte, 32)}).Marshal(reply)
	id := sglCmd(nvmeproto.OpIdentify, 0, 4096)
	id.CDW10 = 1
	record := func(cmd nvmeproto.Command, data []byte) []byte {
		b := make([]byte, 64, 64+2+len(data))
		cmd.Marshal(b)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(data)))
		return append(b, data...)
	}
	f.Add(bytes.Join([][]byte{record(authCmd(true, len(neg)), neg), record(authCmd(false, 4096), nil),
		record(authCmd(true, len(reply)), reply), record(authCmd(false, 4096), nil), record(id, nil)}, nil))
	f.Add(record(authCmd(false, 8), nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithAuthKeys(oneHostKeys{&dhchap.HostKeys{Host: key,
			DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull}}}))
		q := e.dial(32)
		c := q.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, hostNQN)
		expectOK(t, "admin connect", c)
		if _, ar := nvmeproto.ParseConnectSuccessDW0(c.DW0); ar != nvmeproto.AuthReqATR {
			t.Fatalf("AUTHREQ %#x", ar)
		}
		host := make([]byte, 16<<10)
		for n := 0; len(in) >= 66 && n < 16; n++ {
			var cmd nvmeproto.Command
			_ = cmd.Unmarshal(in[:64])
			l := min(int(binary.LittleEndian.Uint16(in[64:])), len(in)-66, len(host))
			copy(host, in[66:66+l])
			in = in[66+l:]
			if cmd.Opcode == nvmeproto.OpFabrics && cmd.FabricsType() == nvmeproto.FabricsConnect {
				continue // a second Connect is covered elsewhere
			}
			if cmd.Opcode == nvmeproto.OpAsyncEventRequest {
				continue // held until the queue closes
			}
			cmd.CID = q.nextCID()
			ch := make(chan nvmeproto.Completion, 1)
			if err := q.conn.Submit(&cmd, host, func(c nvmeproto.Completion) { ch <- c }); err != nil {
				return // the target tore the queue down
			}
			c := wait(t, ch)
			auth := cmd.Opcode == nvmeproto.OpFabrics &&
				(cmd.FabricsType() == nvmeproto.FabricsAuthSend || cmd.FabricsType() == nvmeproto.FabricsAuthReceive)
			if c.Status.Success() && !auth {
				t.Fatalf("%#x/%#x succeeded on an unauthenticated queue", cmd.Opcode, cmd.FabricsType())
			}
		}
		q.conn.Close()
	})
}
