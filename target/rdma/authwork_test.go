package rdma

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

const authHostNQN = "nqn.2014-08.org.nvmexpress:uuid:7d0c5a52-95c1-4f6e-8d3e-0b7b2a9c4e61"

// oneHostKeys gives host its keys on testSubNQN; other hosts have none.
type oneHostKeys struct {
	host string
	keys *dhchap.HostKeys
}

func (k oneHostKeys) HostAuth(sub, host string) (authenticates, required bool) {
	return sub == testSubNQN && host == k.host && k.keys != nil, false
}

func (k oneHostKeys) HostKeys(_ context.Context, sub, host string) (*dhchap.HostKeys, error) {
	if sub == testSubNQN && host == k.host {
		return k.keys, nil
	}
	return nil, nil
}

// authCmd is Authentication Send (n bytes of message) or Receive (allocation length n).
func authCmd(send bool, n int) nvmeproto.Command {
	var cmd nvmeproto.Command
	if send {
		(&nvmeproto.AuthSendCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: 1, SPSP1: 1, TL: uint32(n)}).ToCommand(&cmd)
	} else {
		(&nvmeproto.AuthReceiveCommand{SECP: nvmeproto.AuthSECPDHHMACCHAP, SPSP0: 1, SPSP1: 1, AL: uint32(n)}).ToCommand(&cmd)
	}
	return cmd
}

// TestEngineAuthenticationBlockedInDHSparesPollGroup: while an admin queue's
// authentication is held in the target's DH computation (as ffdhe8192 takes tens of
// milliseconds, far more on a loaded machine), the poll group that received its
// Authentication Send goes on serving its other queues: another host's write and Keep
// Alive complete. The Authentication Send completes once the computation does, and the
// transaction ends with the queue authenticated, its Authentication Receive data written
// to the host by the group. The old code computed on the poll group's goroutine: every
// queue of the group stopped until the computation returned.
func TestEngineAuthenticationBlockedInDHSparesPollGroup(t *testing.T) {
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	keys := oneHostKeys{authHostNQN, &dhchap.HostKeys{Host: key, DHGroups: []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupFFDHE2048}}}
	e := newEngine(t, engineOpts{
		nss:        []conf.Namespace{{NSID: 1, Backend: conf.BackendMemory, Size: 16 << 20}},
		targetOpts: []target.Option{target.WithAuthKeys(keys)},
	})
	entered, gate := make(chan struct{}, 8), make(chan struct{})
	restore := dhchap.SetControllerDHHook(func(nvmeproto.AuthDHGroupID) {
		entered <- struct{}{}
		<-gate
	})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(func() { // before the engine's cleanup, which needs the poll group
		release()
		restore()
	})
	a, cntlid := e.adminConnect(0)
	io := e.ioConnect(1, cntlid, 8)

	b := e.dial(0, 32)
	c := b.h.connect(0, 0, nvmeproto.CNTLIDDynamic, testSubNQN, authHostNQN)
	expectOK(t, "admin connect of the authenticating host", c)
	if _, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0); atr != nvmeproto.AuthReqATR {
		t.Fatalf("Connect AUTHREQ %#x, want ATR", atr)
	}
	host, _ := dhchap.NewHost(dhchap.HostConfig{Secret: key, HostNQN: authHostNQN, SubNQN: testSubNQN}, 1)
	neg := host.Negotiate()
	send := b.h.begin()
	copy(send.buf, neg)
	sendCmd := authCmd(true, len(neg))
	sendCmd.SGL = send.keyedAt(0, len(neg))
	if err := send.submit(&sendCmd, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the AUTH_Negotiate did not reach the target's DH computation")
	}

	data := pattern(4096, 3)
	c, ok := execWithin(t, io.h, rw(nvmeproto.OpWrite, 1, 64, 8), data, len(data), 5*time.Second)
	if !ok {
		t.Fatal("a write on another queue of the poll group did not complete while an authentication computed")
	}
	expectOK(t, "write while an authentication computes", c)
	c, ok = execWithin(t, a.h, nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive}, nil, 0, 5*time.Second)
	if !ok {
		t.Fatal("Keep Alive on another queue of the poll group did not complete while an authentication computed")
	}
	expectOK(t, "Keep Alive while an authentication computes", c)
	if c, ok := send.wait(0); ok {
		t.Fatalf("Authentication Send completed (status %v) while its DH computation was held", c.Status)
	}

	release()
	c, ok = send.wait(10 * time.Second)
	if !ok {
		t.Fatal("Authentication Send did not complete once the DH computation returned")
	}
	expectOK(t, "Authentication Send (Negotiate)", c)
	send.release()
	c, ch := b.h.exec(authCmd(false, 4096), nil, 4096)
	expectOK(t, "Authentication Receive (Challenge)", c)
	reply, err := host.Challenge(ch)
	if err != nil {
		t.Fatalf("host: %v", err)
	}
	c, _ = b.h.exec(authCmd(true, len(reply)), reply, len(reply))
	expectOK(t, "Authentication Send (Reply)", c)
	c, s1 := b.h.exec(authCmd(false, 4096), nil, 4096)
	expectOK(t, "Authentication Receive (Success1)", c)
	if s2, err := host.Success1(s1); err != nil || s2 != nil {
		t.Fatalf("host: Success1: %v (Success2 %x)", err, s2)
	}
	b.h.propGet(nvmeproto.PropCAP, true) // fails unless the queue is authenticated
	e.closeAll(b, io, a)
}
