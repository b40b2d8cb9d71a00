//go:build ceph && linux && cgo

package target_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"syscall"
	"testing"

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
