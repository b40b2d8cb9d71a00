//go:build ceph && linux && cgo

package target_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/cephtest"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

func TestMain(m *testing.M) { os.Exit(cephtest.Main(m)) }

// rbdNS is an rbd namespace on a new 8 MiB image of the test cluster, removed when t ends.
func rbdNS(t *testing.T, nsid uint32) conf.Namespace {
	t.Helper()
	c := cephtest.Get(t)
	var b [4]byte
	rand.Read(b[:])
	image := "target-durability-" + hex.EncodeToString(b[:])
	if _, err := c.Rbd("create", "--size", "8M", c.Pool+"/"+image); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Rbd("rm", "--no-progress", c.Pool+"/"+image) })
	return conf.Namespace{NSID: nsid, Backend: conf.BackendRBD,
		RBD: conf.RBD{Pool: c.Pool, Image: image, CephConf: c.Conf, User: c.User, Keyring: c.Keyring}}
}

// TestRBDNamespaceDurability: an rbd namespace keeps the durability rules of a file one.
// With the write cache disabled (VWC=0) write zeroes and deallocate are followed by a
// librbd flush (librbd's default write-around cache completes them before the OSDs have
// them); a failed librbd flush fails the namespace (Write Fault with DNR for flushes and
// writes, reads still served) until it is reopened; so does a failed FUA write.
func TestRBDNamespaceDurability(t *testing.T) {
	f := &backend.Faults{}
	e := newEnv(t, baseConfig(rbdNS(t, 1)), faultyBackends(f))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)

	wz := rw(nvmeproto.OpWriteZeroes, 1, 16, 8, 0)
	dsm, ranges := dsmDeallocate(32, 8)
	run := func(what string, want int) {
		t.Helper()
		before := f.Syncs()
		expectOK(t, "write zeroes, "+what, q.do(&wz, nil))
		expectOK(t, "deallocate, "+what, q.do(&dsm, ranges))
		if n := f.Syncs() - before; n != want {
			t.Errorf("write zeroes and deallocate, %s: %d librbd flushes, want %d", what, n, want)
		}
	}
	run("cache on", 0)
	expectOK(t, "VWC off", admin.setFeature(0x06, 0, nil))
	run("cache off", 2)
	expectOK(t, "VWC on", admin.setFeature(0x06, 1, nil))

	data := pattern(4096, 5)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write", q.do(&w, data))
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectOK(t, "flush", q.do(&fl, nil))
	f.FailSyncs(syscall.EIO)
	expectDNR(t, "flush with the librbd flush failing", q.do(&fl, nil), nvmeproto.StatusWriteFault)
	syncs := f.Syncs()
	expectDNR(t, "flush after the failure", q.do(&fl, nil), nvmeproto.StatusWriteFault)
	expectDNR(t, "write after the failure", q.do(&w, data), nvmeproto.StatusWriteFault)
	if n := f.Syncs() - syncs; n != 0 {
		t.Errorf("%d librbd flushes after the failure", n)
	}
	got := make([]byte, 4096)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	expectOK(t, "read after the failure", q.do(&r, got))
	if fns := e.tgt.FailedNamespaces(); len(fns) != 1 || !errors.Is(fns[0].Reason, backend.ErrSync) {
		t.Fatalf("FailedNamespaces = %+v, want namespace 1 failing with ErrSync", fns)
	}
	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	expectOK(t, "write after reopening", q.do(&w, data))
	expectOK(t, "flush after reopening", q.do(&fl, nil))

	fua := w
	fua.CDW12 |= 1 << 30
	f.FailWrites(syscall.EIO, 1)
	expectDNR(t, "FUA write failing with EIO", q.do(&fua, data), nvmeproto.StatusWriteFault)
	expectDNR(t, "flush after it", q.do(&fl, nil), nvmeproto.StatusWriteFault)
	if fns := e.tgt.FailedNamespaces(); len(fns) != 1 {
		t.Errorf("FailedNamespaces after a failed FUA write = %+v", fns)
	}
}

// blocklisted blocklists the RADOS client serving the rbd namespace cn (`ceph osd
// blocklist add` with the address `rbd status` lists, as an operator fencing a gateway,
// or a peer breaking its exclusive lock, does), then runs op(i), i = 1, 2, ..., until the
// namespace has recovered: op succeeds after failing, or succeeds once another client
// watches the image. It fails t if that takes more than 30 s, and returns the statuses of
// the failures.
func blocklisted(t *testing.T, cn conf.Namespace, op func(i int) nvmeproto.Completion) []nvmeproto.Status {
	t.Helper()
	c := cephtest.Get(t)
	image := cn.RBD.Pool + "/" + cn.RBD.Image
	ws, err := c.Watchers(image)
	if err != nil || len(ws) != 1 {
		t.Fatalf("watchers of %s: %v, %v; want the target's client only", image, ws, err)
	}
	old := ws[0]
	if err := c.Blocklist(old); err != nil {
		t.Fatal(err)
	}
	recovered := func() bool {
		ws, err := c.Watchers(image)
		return err == nil && slices.ContainsFunc(ws, func(w string) bool { return w != old })
	}
	var failed []nvmeproto.Status
	deadline := time.Now().Add(30 * time.Second)
	for i := 1; ; i++ {
		st := op(i).Status
		if !st.Success() {
			failed = append(failed, st)
		} else if len(failed) > 0 || recovered() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace has not recovered 30 s after its client %s was blocklisted: %d commands failed, the last with %v",
				old, len(failed), failed[max(0, len(failed)-1):])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !recovered() {
		t.Errorf("no client but the blocklisted %s watches %s after the recovery", old, image)
	}
	return failed
}

// expectNotReady wants every status in failed to be Namespace Not Ready without DNR: what
// the host retries.
func expectNotReady(t *testing.T, what string, failed []nvmeproto.Status) {
	t.Helper()
	for _, st := range failed {
		if st.Code() != nvmeproto.StatusNSNotReady.Code() || st.DNR() {
			t.Errorf("%s: a command failed with %v, want Namespace Not Ready without DNR (retried by the host)", what, st)
			return
		}
	}
}

// TestRBDNamespaceRecoversFromBlocklist: when the cluster blocklists the RADOS client of an
// rbd namespace, the target reopens the namespace on a new client by itself: commands
// meanwhile fail with Namespace Not Ready without DNR (the host retries them), then
// succeed, with no operator reopen; every write reported complete, before the blocklist
// or after, reads back. With the host's write cache off (every write FUA), and with it
// on and the writes flushed before the blocklist.
func TestRBDNamespaceRecoversFromBlocklist(t *testing.T) {
	t.Run("write-cache-off", func(t *testing.T) {
		ns := rbdNS(t, 1)
		e := newEnv(t, baseConfig(ns))
		admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
		q := e.ioConnect(1, cntlid, 8)
		expectOK(t, "VWC off", admin.setFeature(0x06, 0, nil))
		written := map[uint64][]byte{}
		write := func(slba uint64, seed byte) nvmeproto.Completion {
			data := pattern(4096, seed)
			w := rw(nvmeproto.OpWrite, 1, slba, 8, 4096)
			c := q.do(&w, data)
			if c.Status.Success() {
				written[slba] = data
			}
			return c
		}
		expectOK(t, "write before the blocklist", write(0, 1))
		failed := blocklisted(t, ns, func(i int) nvmeproto.Completion { return write(uint64(8*i), byte(i+1)) })
		expectNotReady(t, "writes after the blocklist", failed)
		got := make([]byte, 4096)
		for slba, data := range written {
			r := rw(nvmeproto.OpRead, 1, slba, 8, 4096)
			expectOK(t, "read back", q.do(&r, got))
			if !bytes.Equal(got, data) {
				t.Errorf("the write at LBA %d was reported complete, and reads back other data", slba)
			}
		}
		if fns := e.tgt.FailedNamespaces(); len(fns) != 0 {
			t.Errorf("FailedNamespaces = %+v; nothing reported complete was lost", fns)
		}
	})
	t.Run("write-cache-on-flushed", func(t *testing.T) {
		ns := rbdNS(t, 1)
		e := newEnv(t, baseConfig(ns))
		_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
		q := e.ioConnect(1, cntlid, 8)
		data := pattern(4096, 9)
		w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
		expectOK(t, "write before the blocklist", q.do(&w, data))
		fl := sglCmd(nvmeproto.OpFlush, 1, 0)
		expectOK(t, "flush before the blocklist", q.do(&fl, nil))
		got := make([]byte, 4096)
		r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
		failed := blocklisted(t, ns, func(int) nvmeproto.Completion { return q.do(&r, got) })
		expectNotReady(t, "reads after the blocklist", failed)
		if !bytes.Equal(got, data) {
			t.Error("the flushed write reads back other data after the recovery")
		}
		w2 := rw(nvmeproto.OpWrite, 1, 8, 8, 4096)
		expectOK(t, "write after the recovery", q.do(&w2, data))
		expectOK(t, "flush after the recovery", q.do(&fl, nil))
		if fns := e.tgt.FailedNamespaces(); len(fns) != 0 {
			t.Errorf("FailedNamespaces = %+v; nothing reported complete was lost", fns)
		}
	})
}

// TestRBDBlocklistUnflushedWrite: a write the host's write cache holds unflushed when the
// namespace's client is blocklisted may be lost (librbd's cache completed it before the
// OSDs had it): a later flush does not report success unless the write reads back, and
// if it fails (Write Fault with DNR) the namespace stays failed through its automatic
// reopen — reads are served again, writes are refused — until an operator reopens it.
func TestRBDBlocklistUnflushedWrite(t *testing.T) {
	ns := rbdNS(t, 1)
	e := newEnv(t, baseConfig(ns))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	data := pattern(4096, 11)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write before the blocklist", q.do(&w, data))
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	var flushed nvmeproto.Completion
	blocklisted(t, ns, func(int) nvmeproto.Completion {
		flushed = q.do(&fl, nil)
		if flushed.Status.Code() == nvmeproto.StatusWriteFault.Code() {
			return nvmeproto.Completion{} // final: the recovery is what reads see
		}
		return flushed
	})
	got := make([]byte, 4096)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c := q.do(&r, got)
		if c.Status.Success() {
			break
		}
		if c.Status.Code() != nvmeproto.StatusNSNotReady.Code() || c.Status.DNR() || time.Now().After(deadline) {
			t.Fatalf("read after the blocklist: %v; want Namespace Not Ready until it succeeds, within 30 s", c.Status)
		}
	}
	if flushed.Status.Success() {
		if !bytes.Equal(got, data) {
			t.Fatal("a flush after the blocklist succeeded, and the write it covers reads back other data")
		}
		t.Log("the write reached the OSDs before the blocklist took effect: the flush succeeded")
		return
	}
	expectDNR(t, "flush after the blocklist", flushed, nvmeproto.StatusWriteFault)
	if fns := e.tgt.FailedNamespaces(); len(fns) != 1 || !errors.Is(fns[0].Reason, backend.ErrSync) {
		t.Fatalf("FailedNamespaces = %+v, want namespace 1 failed", fns)
	}
	expectDNR(t, "write after the automatic reopen", q.do(&w, data), nvmeproto.StatusWriteFault)
	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	expectOK(t, "write after the operator's reopen", q.do(&w, data))
	expectOK(t, "flush after the operator's reopen", q.do(&fl, nil))
}
