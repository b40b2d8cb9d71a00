package target_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// faultyBackends opens every namespace's backend with f injecting faults into its system
// calls (a real file backend on a disk that fails when told).
func faultyBackends(f *backend.Faults) target.Option {
	return target.WithBackendOpener(func(spec backend.Spec) (backend.Backend, error) {
		spec.Faults = f
		return backend.Open(spec)
	})
}

// expectDNR is expect that also wants DNR set.
func expectDNR(t *testing.T, what string, c nvmeproto.Completion, want nvmeproto.Status) {
	t.Helper()
	expect(t, what, c, want)
	if !c.Status.DNR() {
		t.Errorf("%s: %v without DNR: the host would retry it", what, c.Status)
	}
}

func dsmDeallocate(slba uint64, nlb uint32) (nvmeproto.Command, []byte) {
	cmd := sglCmd(nvmeproto.OpDatasetManagement, 1, 16)
	cmd.CDW11 = 1 << 2 // AD
	r := make([]byte, 16)
	binary.LittleEndian.PutUint32(r[4:], nlb)
	binary.LittleEndian.PutUint64(r[8:], slba)
	return cmd, r
}

// TestFlushFailureFailsNamespace: after an fdatasync fails (EIO, injected once: the
// kernel would let the next one succeed), Flush gets Write Fault with DNR, and so does
// every later flush, write, write zeroes and deallocate of the namespace — no success
// may cover writes that may be lost — while reads still work. FailedNamespaces lists it;
// ReopenNamespace puts it back into service.
func TestFlushFailureFailsNamespace(t *testing.T) {
	f := &backend.Faults{}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)), faultyBackends(f))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	data := pattern(4096, 3)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write", q.do(&w, data))
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectOK(t, "flush", q.do(&fl, nil))

	expectOK(t, "write", q.do(&w, data))
	f.FailSyncs(syscall.EIO)
	expectDNR(t, "flush with fdatasync failing", q.do(&fl, nil), nvmeproto.StatusWriteFault)
	syncs := f.Syncs()
	expectDNR(t, "flush after the failure", q.do(&fl, nil), nvmeproto.StatusWriteFault)
	expectDNR(t, "write after the failure", q.do(&w, data), nvmeproto.StatusWriteFault)
	wz := rw(nvmeproto.OpWriteZeroes, 1, 16, 8, 0)
	expectDNR(t, "write zeroes after the failure", q.do(&wz, nil), nvmeproto.StatusWriteFault)
	dsm, ranges := dsmDeallocate(16, 8)
	expectDNR(t, "deallocate after the failure", q.do(&dsm, ranges), nvmeproto.StatusWriteFault)
	if n := f.Syncs(); n != syncs {
		t.Errorf("%d more fdatasync calls after the failure; the kernel would have said all is well", n-syncs)
	}
	got := make([]byte, 4096)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	expectOK(t, "read after the failure", q.do(&r, got))
	fns := e.tgt.FailedNamespaces()
	if len(fns) != 1 || fns[0].SubNQN != subNQN || fns[0].NSID != 1 || !errors.Is(fns[0].Reason, backend.ErrSync) {
		t.Fatalf("FailedNamespaces = %+v, want namespace 1 failing with ErrSync", fns)
	}

	if nis := e.tgt.Namespaces(); len(nis) != 1 || !errors.Is(nis[0].Failure, backend.ErrSync) {
		t.Errorf("Namespaces() = %+v, want namespace 1 with its failure", nis)
	}

	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	if fns := e.tgt.FailedNamespaces(); len(fns) != 0 || e.tgt.Namespaces()[0].Failure != nil {
		t.Errorf("FailedNamespaces after reopening = %+v", fns)
	}
	expectOK(t, "write after reopening", q.do(&w, data))
	expectOK(t, "flush after reopening", q.do(&fl, nil))
	expectOK(t, "read after reopening", q.do(&r, got))
	// The controller learns that the namespace changed.
	buf, c := admin.getLog(uint8(nvmeproto.LIDChangedNSList), 0, 0, 4096, 0, false)
	expectOK(t, "changed namespace list", c)
	if binary.LittleEndian.Uint32(buf) != 1 {
		t.Errorf("changed namespace list starts with %d, want 1", binary.LittleEndian.Uint32(buf))
	}
	if err := e.tgt.ReopenNamespace(subNQN, 7); !errors.Is(err, target.ErrNoSuchNamespace) {
		t.Errorf("reopening NSID 7: %v, want ErrNoSuchNamespace", err)
	}
}

// TestReopenRefusesMemoryNamespace: a memory namespace's data lives in its open backend
// (and it never fails a sync): ReopenNamespace refuses it, and the data stays.
func TestReopenRefusesMemoryNamespace(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	data := pattern(4096, 9)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write", q.do(&w, data))
	if err := e.tgt.ReopenNamespace(subNQN, 1); !errors.Is(err, target.ErrVolatileNamespace) {
		t.Errorf("reopening a memory namespace: %v, want ErrVolatileNamespace", err)
	}
	got := make([]byte, 4096)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	expectOK(t, "read after the refused reopen", q.do(&r, got))
	if !bytes.Equal(got, data) {
		t.Errorf("the memory namespace's data changed")
	}
}

// TestFUAWriteSyncFailureFailsNamespace: with the write cache disabled every write is FUA;
// one whose sync fails fails the namespace as a failed Flush does.
func TestFUAWriteSyncFailureFailsNamespace(t *testing.T) {
	f := &backend.Faults{}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)), faultyBackends(f))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	w.CDW12 |= 1 << 30 // FUA
	f.FailWrites(syscall.EIO, 1)
	expectDNR(t, "FUA write failing with EIO", q.do(&w, pattern(4096, 1)), nvmeproto.StatusWriteFault)
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectDNR(t, "flush after it", q.do(&fl, nil), nvmeproto.StatusWriteFault)
}

// TestShutdownReportsFlushFailure: a flush that fails during a CC.SHN shutdown is reported
// in CSTS (CFS set with SHST complete), not only logged, and the namespace is failed for
// the next association.
func TestShutdownReportsFlushFailure(t *testing.T) {
	f := &backend.Faults{}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)), faultyBackends(f))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write", q.do(&w, pattern(4096, 2)))
	f.FailSyncs(syscall.EIO)
	cc := nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithSHN(nvmeproto.CCSHNNormal)
	expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(cc)))
	var csts nvmeproto.CSTS
	waitFor(t, func() bool {
		v, _ := admin.propGet(nvmeproto.PropCSTS, false)
		csts = nvmeproto.CSTS(v)
		return csts.SHST() == nvmeproto.CSTSSHSTComplete
	})
	if !csts.CFS() {
		t.Errorf("CSTS %v after a shutdown whose flush failed: want CFS set", csts)
	}
	if f.Syncs() == 0 {
		t.Fatal("the shutdown did not flush")
	}
	if fns := e.tgt.FailedNamespaces(); len(fns) != 1 {
		t.Errorf("FailedNamespaces = %+v, want the namespace whose shutdown flush failed", fns)
	}
}

// TestShutdownCleanNoCFS: a shutdown whose flushes succeed leaves CFS clear.
func TestShutdownCleanNoCFS(t *testing.T) {
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	cc := nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithSHN(nvmeproto.CCSHNNormal)
	expectOK(t, "CC.SHN=1", admin.propSet(nvmeproto.PropCC, uint32(cc)))
	var csts nvmeproto.CSTS
	waitFor(t, func() bool {
		v, _ := admin.propGet(nvmeproto.PropCSTS, false)
		csts = nvmeproto.CSTS(v)
		return csts.SHST() == nvmeproto.CSTSSHSTComplete
	})
	if csts.CFS() {
		t.Errorf("CSTS %v after a clean shutdown", csts)
	}
}

// TestWriteCacheOffSyncsZeroesAndDeallocate: with the volatile write cache disabled
// (Set Features 06h), Write Zeroes and Dataset Management deallocate are durable when
// they complete: each is followed by an fdatasync. With the cache enabled they are not,
// except a Write Zeroes with FUA (CDW12 bit 30, as for writes).
func TestWriteCacheOffSyncsZeroesAndDeallocate(t *testing.T) {
	f := &backend.Faults{}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)), faultyBackends(f))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	wz := rw(nvmeproto.OpWriteZeroes, 1, 16, 8, 0)
	dsm, ranges := dsmDeallocate(32, 8)
	run := func(what string, want int) {
		t.Helper()
		before := f.Syncs()
		expectOK(t, "write zeroes, "+what, q.do(&wz, nil))
		if n := f.Syncs() - before; n != want {
			t.Errorf("write zeroes, %s: %d fdatasync calls, want %d", what, n, want)
		}
		before = f.Syncs()
		expectOK(t, "deallocate, "+what, q.do(&dsm, ranges))
		if n := f.Syncs() - before; n != want {
			t.Errorf("deallocate, %s: %d fdatasync calls, want %d", what, n, want)
		}
	}
	run("cache on", 0)
	fua := rw(nvmeproto.OpWriteZeroes, 1, 48, 8, 0)
	fua.CDW12 |= 1 << 30
	before := f.Syncs()
	expectOK(t, "write zeroes with FUA, cache on", q.do(&fua, nil))
	if n := f.Syncs() - before; n != 1 {
		t.Errorf("write zeroes with FUA, cache on: %d fdatasync calls, want 1", n)
	}
	expectOK(t, "VWC off", admin.setFeature(0x06, 0, nil))
	run("cache off", 1)
	expectOK(t, "VWC on", admin.setFeature(0x06, 1, nil))
	run("cache on again", 0)
}

// TestThinProvisionedIdentify: a sparse file namespace is reported thin provisioned, with
// NUSE what the file has allocated and NCAP what it can still grow to.
func TestThinProvisionedIdentify(t *testing.T) {
	e := newEnv(t, baseConfig(fileNS(t, 1, 64<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	idns := func() nvmeproto.IdentifyNamespace {
		t.Helper()
		buf, c := admin.identify(nvmeproto.CNSNamespace, 1, 0)
		expectOK(t, "identify namespace", c)
		var id nvmeproto.IdentifyNamespace
		if err := id.Unmarshal(buf); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := idns()
	if id.NSFEAT&nvmeproto.NSFEATThinProvisioning == 0 {
		t.Fatalf("NSFEAT %#x: thin provisioning not reported for a sparse file", id.NSFEAT)
	}
	const nsze = 64 << 20 / 512
	if id.NSZE != nsze || id.NUSE > 64 || id.NCAP < id.NUSE || id.NCAP > nsze || id.NCAP == 0 {
		t.Fatalf("fresh sparse file: NSZE %d NCAP %d NUSE %d; want NSZE %d, NUSE about 0, NUSE <= NCAP <= NSZE, NCAP > 0", id.NSZE, id.NCAP, id.NUSE, nsze)
	}
	w := rw(nvmeproto.OpWrite, 1, 0, 256, 128<<10)
	for i := 0; i < 8; i++ { // 1 MiB
		w.CDW10 = uint32(i * 256)
		expectOK(t, "write", q.do(&w, pattern(128<<10, byte(i))))
	}
	id2 := idns()
	if id2.NUSE < id.NUSE+2048 || id2.NCAP < id2.NUSE {
		t.Errorf("after writing 1 MiB: NUSE %d (was %d), NCAP %d; want NUSE grown by at least 2048 blocks, NCAP >= NUSE", id2.NUSE, id.NUSE, id2.NCAP)
	}
}

// TestCapacityExceededOnFullFilesystem: a sparse file namespace larger than its (small,
// tmpfs) filesystem reports the filesystem's room as NCAP, and a write the filesystem
// cannot hold fails with Capacity Exceeded and DNR — the status the Linux host turns into
// ENOSPC for the application — while the namespace keeps working. Needs root (mount).
func TestCapacityExceededOnFullFilesystem(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a 1 MiB tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting the test's tmpfs: %v", err)
		}
	})
	p := filepath.Join(dir, "ns.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, baseConfig(conf.Namespace{NSID: 1, Backend: conf.BackendFile, Path: p, Size: 8 << 20}))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	buf, c := admin.identify(nvmeproto.CNSNamespace, 1, 0)
	expectOK(t, "identify namespace", c)
	var id nvmeproto.IdentifyNamespace
	if err := id.Unmarshal(buf); err != nil {
		t.Fatal(err)
	}
	if id.NSZE != 8<<20/512 || id.NCAP > 1<<20/512 || id.NCAP == 0 {
		t.Errorf("8 MiB namespace on a 1 MiB filesystem: NSZE %d NCAP %d; want NCAP at most %d", id.NSZE, id.NCAP, 1<<20/512)
	}
	w := rw(nvmeproto.OpWrite, 1, 0, 128, 64<<10)
	var last nvmeproto.Completion
	n := 0
	for ; n < 32; n++ { // 2 MiB at most
		w.CDW10 = uint32(n * 128)
		last = q.do(&w, pattern(64<<10, byte(n)))
		if !last.Status.Success() {
			break
		}
	}
	if n == 32 {
		t.Fatal("2 MiB written to a 1 MiB filesystem")
	}
	expectDNR(t, "write beyond the filesystem's room", last, nvmeproto.StatusCapacityExceeded)
	r := rw(nvmeproto.OpRead, 1, 0, 128, 64<<10)
	expectOK(t, "read after running out of space", q.do(&r, make([]byte, 64<<10)))
	fl := sglCmd(nvmeproto.OpFlush, 1, 0)
	expectOK(t, "flush after running out of space", q.do(&fl, nil))
	// Deallocating gives the room back: the write succeeds.
	dsm, ranges := dsmDeallocate(0, 128*uint32(n))
	expectOK(t, "deallocate", q.do(&dsm, ranges))
	w.CDW10 = uint32(n * 128)
	expectOK(t, "write after deallocating", q.do(&w, pattern(64<<10, 9)))
}

// TestReopenKeepsRunningConfiguration: a namespace grown at run time is reopened at its
// new size (from the running configuration, not the one it was added with), and a reopen
// of a namespace that never failed is harmless.
func TestReopenKeepsRunningConfiguration(t *testing.T) {
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20)))
	if err := e.tgt.ResizeNamespace(subNQN, 1, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	if nis := e.tgt.Namespaces(); len(nis) != 1 || nis[0].Blocks != 4<<20/512 {
		t.Errorf("after a resize to 4 MiB and a reopen: %+v", nis)
	}
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 4<<20/512-8, 8, 4096)
	expectOK(t, "write at the end of the grown namespace", q.do(&w, pattern(4096, 7)))
}

// TestReopenFailsNamespaceInactive: a reopen whose backend cannot be opened leaves the
// namespace inactive, and says so consistently: it is not in the active namespace list
// (Identify Namespace already reported it as not allocated), the hosts are told it
// changed, and its commands get Invalid Namespace with DNR — not the Namespace Not Ready
// of a reopen under way, since nothing will bring it back by itself. The old code kept it
// in the active list, and raised no event.
func TestReopenFailsNamespaceInactive(t *testing.T) {
	opens := 0
	opener := func(s backend.Spec) (backend.Backend, error) {
		if s.Kind != backend.KindFile {
			return backend.Open(s)
		}
		opens++
		if opens > 1 {
			return nil, fmt.Errorf("injected: the backing file is gone")
		}
		return backend.Open(s)
	}
	e := newEnv(t, baseConfig(fileNS(t, 1, 1<<20), memNS(2, 1<<20)), target.WithBackendOpener(opener))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	expectOK(t, "enable ACRE", admin.setFeature(uint8(nvmeproto.FIDHostBehaviorSupport), 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})))
	if err := e.tgt.ReopenNamespace(subNQN, 1); err == nil {
		t.Fatal("the reopen succeeded with the opener failing")
	}
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	c := q.do(&r, make([]byte, 4096))
	if expectDNR(t, "read of the inactive namespace", c, nvmeproto.StatusInvalidNamespace); c.Status.CRD() != 0 {
		t.Errorf("read of the inactive namespace: CRD %d with DNR", c.Status.CRD())
	}
	buf, c := admin.identify(nvmeproto.CNSActiveNSList, 0, 0)
	expectOK(t, "active namespace list", c)
	if first := binary.LittleEndian.Uint32(buf); first != 2 {
		t.Errorf("active namespace list starts with %d, want 2 (1 is inactive)", first)
	}
	buf, c = admin.getLog(uint8(nvmeproto.LIDChangedNSList), 0, 0, 4096, 0, false)
	expectOK(t, "changed namespace list", c)
	if binary.LittleEndian.Uint32(buf) != 1 {
		t.Errorf("changed namespace list starts with %d, want 1", binary.LittleEndian.Uint32(buf))
	}
	// The ANA log lists the active namespaces: not 1.
	l, _ := anaLog(t, admin, false, false)
	for _, g := range l.Groups {
		if slices.Contains(g.NSIDs, 1) {
			t.Errorf("ANA group %d lists NSID 1, which is not active: %v", g.GroupID, g.NSIDs)
		}
	}
}
