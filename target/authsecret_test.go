package target_test

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// heldSecretFile holds the target's reads of one secret file (a file on a hung mount)
// until released; other secrets are read as usual. Each held read is counted and reported
// on entered.
type heldSecretFile struct {
	reads   atomic.Int32
	entered chan struct{}
	mu      sync.Mutex
	gate    chan struct{} // closed: reads pass
}

// holdSecretFile holds the reads of path by targets created from now on until release;
// restore removes the hold for targets created after it.
func holdSecretFile(path string) (h *heldSecretFile, restore func()) {
	h = &heldSecretFile{entered: make(chan struct{}, 16), gate: make(chan struct{})}
	restore = target.SetSecretFileLoad(func(v string) (*dhchap.Secret, error) {
		h.mu.Lock()
		gate := h.gate
		h.mu.Unlock()
		if v == conf.SecretFilePrefix+path && !isDone(gate) {
			h.reads.Add(1)
			h.entered <- struct{}{}
			<-gate
		}
		return conf.LoadSecret(v)
	})
	return h, restore
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// release lets the held reads, and all that follow, through.
func (h *heldSecretFile) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !isDone(h.gate) {
		close(h.gate)
	}
}

// hold makes the reads that start from now on wait again.
func (h *heldSecretFile) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if isDone(h.gate) {
		h.gate = make(chan struct{})
	}
}

// writeSecretFile writes s to a new secret file (mode 0600) and returns its path.
func writeSecretFile(t *testing.T, s *dhchap.Secret) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "host.key")
	if err := os.WriteFile(path, []byte(s.Encode()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// authConnect sends an admin queue Connect of host on a new queue, which must succeed
// and ask for authentication.
func authConnect(t *testing.T, e *env, host string) *hostQueue {
	t.Helper()
	q := e.dial(32)
	c := q.connect(0, 31, 0, nvmeproto.CNTLIDDynamic, subNQN, host)
	expectOK(t, "admin Connect of the host with a secret file", c)
	if _, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0); atr != nvmeproto.AuthReqATR {
		t.Fatalf("Connect AUTHREQ %#x, want ATR", atr)
	}
	return q
}

// expectFailure1 receives the transaction's next message on q, which must be
// AUTH_Failure1 (authentication failed, explanation want) for transaction tid.
func expectFailure1(t *testing.T, q *hostQueue, tid uint16, want nvmeproto.AuthFailExplanation) {
	t.Helper()
	msg, c := q.authReceive()
	expectOK(t, "Authentication Receive after the AUTH_Negotiate", c)
	var f nvmeproto.AuthFailure
	if err := f.Unmarshal(msg); err != nil || f.AuthID != nvmeproto.AuthMsgFailure1 {
		t.Fatalf("Authentication Receive returned %x (%v), want AUTH_Failure1", msg[:8], err)
	}
	if f.TID != tid || f.Reason != nvmeproto.AuthFailReasonFailed || f.Explanation != want {
		t.Fatalf("AUTH_Failure1 T_ID %d, reason %#x, explanation %v; want T_ID %d, reason %#x, explanation %v",
			f.TID, f.Reason, f.Explanation, tid, nvmeproto.AuthFailReasonFailed, want)
	}
}

// expectInterrupted checks that an AUTH_Negotiate whose host's secret could not be read
// in time completed with Command Interrupted, without DNR (the host may retry).
func expectInterrupted(t *testing.T, what string, c nvmeproto.Completion) {
	t.Helper()
	if c.Status != nvmeproto.StatusCommandInterrupted {
		t.Fatalf("%s completed with %v (DNR %v), want %v without DNR: a secret read that times out must leave the host free to reconnect",
			what, c.Status, c.Status.DNR(), nvmeproto.StatusCommandInterrupted)
	}
}

// expectAuthDisconnect waits for the target to disconnect q for failing to authenticate.
func expectAuthDisconnect(t *testing.T, q *hostQueue) {
	t.Helper()
	select {
	case <-q.conn.Done():
		if !errors.Is(q.conn.Err(), target.ErrAuthFailed) {
			t.Errorf("queue disconnected with %v, want %v", q.conn.Err(), target.ErrAuthFailed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("queue whose authentication failed still connected 10 s later")
	}
}

// TestAuthSecretReadHungSparesPollGroup: a host whose secret file's read hangs (a hung
// NFS mount) holds up neither the goroutine that executes its Connect — an RDMA poll
// group, which serves other hosts' queues — nor anyone else. One goroutine plays the poll
// group: it submits the host's admin Connect, then another host's write and Keep Alive,
// which complete; the Connect completes at once and asks for authentication. The
// host's AUTH_Negotiate waits for the read on its authentication worker, as does a second
// controller's, which joins the same read rather than starting another; after
// SecretReadTimeout both complete with Command Interrupted without DNR (a slow file system
// is transient: the host may reconnect, which an AUTH_Failure1 would forbid), the target
// logs the file, the error and the timeout, and disconnects the queues. Once the file
// system answers, the host authenticates.
func TestAuthSecretReadHungSparesPollGroup(t *testing.T) {
	defer func(d time.Duration) { target.SecretReadTimeout = d }(target.SecretReadTimeout)
	target.SecretReadTimeout = 300 * time.Millisecond
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	path := writeSecretFile(t, key)
	held, restore := holdSecretFile(path)
	defer restore()
	defer held.release() // before the cleanups close the target
	var logs logBuffer
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Hosts = []conf.Host{{NQN: otherNQN, DHCHAPSecret: conf.SecretFilePrefix + path, DHCHAPDHGroups: []string{"null"}}}
	held.release() // New reads the file
	e := newEnv(t, cfg, target.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	held.hold()
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0) // no secret: no authentication
	io := e.ioConnect(1, cntlid, 8)

	// The poll group: the Connect of the host whose file hangs, then the other host's I/O.
	hung := e.dial(32)
	connCmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(nvmeproto.ConnectDataSize)}
	(&nvmeproto.ConnectCommand{QID: 0, SQSize: 31}).ToCommand(&connCmd)
	connCmd.CID = hung.nextCID()
	connData := make([]byte, nvmeproto.ConnectDataSize)
	(&nvmeproto.ConnectData{HostID: hostID, CNTLID: nvmeproto.CNTLIDDynamic, SubNQN: subNQN, HostNQN: otherNQN}).Marshal(connData)
	wr := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	wr.CID = io.nextCID()
	ka := nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive, Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
	ka.CID = admin.nextCID()
	connDone, wrDone, kaDone := make(chan nvmeproto.Completion, 1), make(chan nvmeproto.Completion, 1), make(chan nvmeproto.Completion, 1)
	errc := make(chan error, 3)
	go func() {
		errc <- hung.conn.Submit(&connCmd, connData, func(c nvmeproto.Completion) { connDone <- c })
		errc <- io.conn.Submit(&wr, make([]byte, 4096), func(c nvmeproto.Completion) { wrDone <- c })
		errc <- admin.conn.Submit(&ka, nil, func(c nvmeproto.Completion) { kaDone <- c })
	}()
	for _, w := range []struct {
		what string
		ch   chan nvmeproto.Completion
	}{{"the other host's write", wrDone}, {"the other host's Keep Alive", kaDone}} {
		select {
		case c := <-w.ch:
			expectOK(t, w.what+" submitted after the Connect of a host whose secret file hangs", c)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s, submitted on the poll group after the Connect of a host whose secret file hangs, did not complete in 5 s: the Connect holds the poll group (secret reads: %d)",
				w.what, held.reads.Load())
		}
	}
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatalf("Submit: %v", err)
		}
	}
	c := wait(t, connDone)
	expectOK(t, "admin Connect of the host whose secret file hangs", c)
	if _, atr := nvmeproto.ParseConnectSuccessDW0(c.DW0); atr != nvmeproto.AuthReqATR {
		t.Fatalf("Connect AUTHREQ %#x, want ATR", atr)
	}
	if n := held.reads.Load(); n != 0 {
		t.Errorf("Connect read the secret file (%d reads): it must decide from memory", n)
	}

	// Its AUTH_Negotiate waits for the read, off the transport's goroutine; a second
	// controller's joins the same read.
	host, _ := dhchap.NewHost(dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}, 1)
	neg := host.Negotiate()
	negDone := submitDataOffGoroutine(t, hung, authCmd(true, len(neg)), neg, 5*time.Second)
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the AUTH_Negotiate did not read the secret file")
	}
	second := authConnect(t, e, otherNQN)
	host2, _ := dhchap.NewHost(dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}, 2)
	neg2 := host2.Negotiate()
	negDone2 := submitDataOffGoroutine(t, second, authCmd(true, len(neg2)), neg2, 5*time.Second)
	expectOK(t, "the other host's write while a secret file's read hangs", io.do(&wr, make([]byte, 4096)))

	expectInterrupted(t, "AUTH_Negotiate whose secret file's read hangs", wait(t, negDone))
	expectInterrupted(t, "second controller's AUTH_Negotiate whose secret file's read hangs", wait(t, negDone2))
	if n := held.reads.Load(); n != 1 {
		t.Errorf("%d reads of the hung secret file, want 1: the second AUTH_Negotiate must wait for the read in flight", n)
	}
	if l := logs.line("cannot read the host's DH-HMAC-CHAP secret"); !strings.Contains(l, path) || !strings.Contains(l, "deadline exceeded") || !strings.Contains(l, "timeout=") {
		t.Errorf("log line %q does not name the file %s, the error and the timeout", l, path)
	}
	expectAuthDisconnect(t, hung)
	expectAuthDisconnect(t, second)

	// Once the file system answers, the host authenticates.
	held.release()
	q := authConnect(t, e, otherNQN)
	host3, _ := dhchap.NewHost(dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}, 3)
	expectOK(t, "AUTH_Negotiate once the secret file reads", q.authSend(host3.Negotiate()))
	q.finishAuth(host3)
	if _, c := q.propGet(nvmeproto.PropVS, false); c.Status.Code() != 0 {
		t.Errorf("Property Get on the authenticated queue: %v", c.Status)
	}
}

// TestAuthSecretUnreadable: a host whose secret file is missing, or holds no valid
// secret, is admitted at Connect (which asks for authentication: the host has a secret
// configured), and its authentication fails with AUTH_Failure1, authentication protocol
// not usable (as the Linux target answers for a key it cannot use); the target logs the
// file and the error (and no timeout: none expired), and disconnects the queue.
func TestAuthSecretUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(path string) error
		err   string
	}{
		{"missing", os.Remove, "no such file or directory"},
		{"invalid", func(path string) error { return os.WriteFile(path, []byte("DHHC-1:01:bm90IGEga2V5:\n"), 0o600) }, "base64 decodes to 9 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
			if err != nil {
				t.Fatal(err)
			}
			path := writeSecretFile(t, key)
			var logs logBuffer
			cfg := baseConfig(memNS(1, 1<<20))
			cfg.Hosts = []conf.Host{{NQN: otherNQN, DHCHAPSecret: conf.SecretFilePrefix + path}}
			e := newEnv(t, cfg, target.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err := tc.spoil(path); err != nil {
				t.Fatal(err)
			}
			q := authConnect(t, e, otherNQN)
			host, _ := dhchap.NewHost(dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}, 7)
			expectOK(t, "AUTH_Negotiate", q.authSend(host.Negotiate()))
			expectFailure1(t, q, 7, nvmeproto.AuthFailProtocolUnusable)
			if l := logs.line("cannot read the host's DH-HMAC-CHAP secret"); !strings.Contains(l, path) || !strings.Contains(l, tc.err) {
				t.Errorf("log line %q does not name the file %s and the error (%q)", l, path, tc.err)
			} else if strings.Contains(l, "timeout=") {
				t.Errorf("log line %q names a timeout, but the read failed without one", l)
			}
			expectAuthDisconnect(t, q)
		})
	}
}

// TestAuthReauthSecretReadHungHoldsNoSlot: admin queues whose re-authentication waits for
// a hung secret file hold no authentication slot (nor their queue's authentication
// lock), so other hosts still authenticate. With two slots (one per host), two hosts
// whose secret is the same file re-authenticate their admin queues while the file's read
// hangs; a third host's authentication completes meanwhile. After SecretReadTimeout both
// re-authentications' AUTH_Negotiates complete with Command Interrupted without DNR, and
// their queues are disconnected (the host reconnects), having shared one read.
func TestAuthReauthSecretReadHungHoldsNoSlot(t *testing.T) {
	defer target.SetAuthSlots(2)()
	defer func(d time.Duration) { target.SecretReadTimeout = d }(target.SecretReadTimeout)
	target.SecretReadTimeout = 7 * time.Second // longer than the 5 s the third host is given
	const (
		hostB = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-000000000000"
		hostC = "nqn.2014-08.org.nvmexpress:uuid:77777777-8888-9999-aaaa-bbbbbbbbbbbb"
	)
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	keyC, _ := dhchap.GenerateSecret(rand.Reader, 0, 32)
	path := writeSecretFile(t, key)
	held, restore := holdSecretFile(path)
	defer restore()
	defer held.release() // before the cleanups close the target
	held.release()       // the first authentications read the file at once
	cfg := baseConfig(memNS(1, 1<<20))
	null := []string{"null"}
	cfg.Hosts = []conf.Host{
		{NQN: otherNQN, DHCHAPSecret: conf.SecretFilePrefix + path, DHCHAPDHGroups: null},
		{NQN: hostB, DHCHAPSecret: conf.SecretFilePrefix + path, DHCHAPDHGroups: null},
		{NQN: hostC, DHCHAPSecret: keyC.Encode(), DHCHAPDHGroups: null},
	}
	e := newEnv(t, cfg)
	type authHost struct {
		q   *hostQueue
		cfg dhchap.HostConfig
	}
	var hung []authHost
	for _, nqn := range []string{otherNQN, hostB} {
		h := authHost{authConnect(t, e, nqn), dhchap.HostConfig{Secret: key, HostNQN: nqn, SubNQN: subNQN}}
		host, _ := dhchap.NewHost(h.cfg, 1)
		expectOK(t, "AUTH_Negotiate", h.q.authSend(host.Negotiate()))
		h.q.finishAuth(host)
		hung = append(hung, h)
	}

	held.hold()
	var done []<-chan nvmeproto.Completion
	for i, h := range hung {
		host, _ := dhchap.NewHost(h.cfg, 2)
		neg := host.Negotiate()
		done = append(done, submitDataOffGoroutine(t, h.q, authCmd(true, len(neg)), neg, 5*time.Second))
		if i == 0 {
			select {
			case <-held.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the first re-authentication did not read the secret file within 10 s")
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); target.SecretReadWaiters(e.tgt, path) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d re-authentications wait for the hung secret file's read after 10 s, want 2",
				target.SecretReadWaiters(e.tgt, path))
		}
	}

	c := authConnect(t, e, hostC)
	hc, _ := dhchap.NewHost(dhchap.HostConfig{Secret: keyC, HostNQN: hostC, SubNQN: subNQN}, 1)
	neg := hc.Negotiate()
	select {
	case r := <-submitDataOffGoroutine(t, c, authCmd(true, len(neg)), neg, 5*time.Second):
		expectOK(t, "another host's AUTH_Negotiate while two re-authentications wait for a hung secret file", r)
	case <-time.After(5 * time.Second):
		t.Fatalf("another host's AUTH_Negotiate did not complete while two re-authentications wait for a hung secret file: they hold the authentication slots (reads of the file: %d)",
			held.reads.Load())
	}
	c.finishAuth(hc)

	for i, h := range hung {
		expectInterrupted(t, "re-authentication's AUTH_Negotiate whose secret file's read hangs", wait(t, done[i]))
		expectAuthDisconnect(t, h.q)
	}
	if n := held.reads.Load(); n != 1 {
		t.Errorf("%d reads of the hung secret file, want 1 (shared)", n)
	}
}

// noHostSecret admits every host as one that authenticates, and has no secret for any
// (a key store that lost the host between Connect and its AUTH_Negotiate).
type noHostSecret struct{}

func (noHostSecret) HostAuth(sub, host string) (authenticates, required bool) { return true, false }

func (noHostSecret) HostKeys(context.Context, string, string) (*dhchap.HostKeys, error) {
	return nil, nil
}

// TestAuthNoHostSecret: when the AuthKeys return no secret for a host that Connect asked
// to authenticate, its AUTH_Negotiate is answered with AUTH_Failure1 (authentication
// failed), and the log says that the AuthKeys returned no secret for that host — whatever
// the AuthKeys are, not only the configuration's hosts section.
func TestAuthNoHostSecret(t *testing.T) {
	var logs logBuffer
	e := newEnv(t, baseConfig(memNS(1, 1<<20)), target.WithAuthKeys(noHostSecret{}),
		target.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	q := authConnect(t, e, otherNQN)
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := dhchap.NewHost(dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}, 1)
	expectOK(t, "AUTH_Negotiate", q.authSend(host.Negotiate()))
	expectFailure1(t, q, 1, nvmeproto.AuthFailFailed)
	want := "AuthKeys returned no host secret for host " + otherNQN
	if l := logs.line("authentication failed"); !strings.Contains(l, want) {
		t.Errorf("log line %q does not say %q", l, want)
	}
	expectAuthDisconnect(t, q)
}

// TestAuthReauthKeyRemovedWhileWaitingForSlot: an admin queue re-authentication that
// waits for its host's authentication slot uses the keys the configuration holds when it
// runs. Host H has two controllers and one slot; the first controller's re-authentication
// holds the slot (its DH computation held), the second's loads the keys and waits for the
// slot; the operator removes H's keys (RemoveHostKeys). The second re-authentication then
// fails with AUTH_Failure1 (authentication failed) and its queue is disconnected.
func TestAuthReauthKeyRemovedWhileWaitingForSlot(t *testing.T) {
	defer target.SetAuthSlots(2)() // one per host
	key, err := dhchap.GenerateSecret(rand.Reader, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.Hosts = []conf.Host{{NQN: otherNQN, DHCHAPSecret: key.Encode(), DHCHAPDHGroups: []string{"ffdhe2048"}}}
	e := newEnv(t, cfg)
	hcfg := dhchap.HostConfig{Secret: key, HostNQN: otherNQN, SubNQN: subNQN}
	var qs []*hostQueue
	for range 2 {
		q := authConnect(t, e, otherNQN)
		host, _ := dhchap.NewHost(hcfg, 1)
		expectOK(t, "AUTH_Negotiate", q.authSend(host.Negotiate()))
		q.finishAuth(host)
		qs = append(qs, q)
	}

	dh := holdDH(t)
	reauth := func(q *hostQueue) <-chan nvmeproto.Completion {
		host, _ := dhchap.NewHost(hcfg, 2)
		neg := host.Negotiate()
		return submitDataOffGoroutine(t, q, authCmd(true, len(neg)), neg, 10*time.Second)
	}
	doneA := reauth(qs[0])
	dh.wait(t) // the first re-authentication holds the host's slot
	doneB := reauth(qs[1])
	deadline := time.Now().Add(10 * time.Second)
	for target.AuthSlotUsers(e.tgt, otherNQN) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the second re-authentication did not wait for its host's slot within 10 s (%d steps hold or wait)",
				target.AuthSlotUsers(e.tgt, otherNQN))
		}
		time.Sleep(time.Millisecond)
	}
	if err := e.tgt.RemoveHostKeys(otherNQN); err != nil {
		t.Fatal(err)
	}
	dh.release()

	expectOK(t, "the first re-authentication's AUTH_Negotiate", wait(t, doneA))
	expectOK(t, "the second re-authentication's AUTH_Negotiate", wait(t, doneB))
	expectFailure1(t, qs[1], 2, nvmeproto.AuthFailFailed)
	expectAuthDisconnect(t, qs[1])
}

// handOver lets the held reads through and holds those that start from now on.
func (h *heldSecretFile) handOver() {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.gate
	h.gate = make(chan struct{})
	if !isDone(old) {
		close(old)
	}
}
