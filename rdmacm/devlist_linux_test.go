package rdmacm_test

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/rdmacm"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// TestRDMADeviceListChurn removes and adds back a second RDMA device while
// librdmacm's device list is looked at from several threads, as a target's
// connection handling and device watch do — the process's main thread (whose
// malloc arena is the heap) and new threads (which glibc gives arenas of their
// own, far from the heap): librdmacm must keep listing both devices. rdma-core 44.0 (Debian 12) keeps its list sorted by a comparison that
// is wrong for ibv_device structures allocated far apart, which per-thread
// malloc arenas do (the package keeps one arena, mallocarena_linux.c): it then
// drops listed devices, and once it has dropped them all, its next call locks
// its mutex twice and every call after that hangs. Runs only in the VM
// harness's guest (it adds and deletes rxe3 on gonvmfch0).
func TestRDMADeviceListChurn(t *testing.T) {
	const dev, nd = "rxe3", "gonvmfch0"
	rdmatest.SoftRoCE(t, dev, nd, netip.MustParseAddr("10.99.203.1"))
	want := len(devices(t))
	if want < 2 {
		t.Fatalf("%d RDMA devices listed with %s added, want 2 or more", want, dev)
	}
	// rescan looks at the list from the main thread (main) or from a thread of its
	// own, which exits afterwards (a goroutine that ends locked to its thread takes
	// the thread with it).
	rescan := func(what string, main bool) int {
		t.Helper()
		got := make(chan int, 1)
		if main {
			onMainThread <- func() { got <- rdmacm.Rescan() }
		} else {
			go func() {
				runtime.LockOSThread()
				got <- rdmacm.Rescan()
			}()
		}
		select {
		case n := <-got:
			return n
		case <-time.After(20 * time.Second):
			// librdmacm is deadlocked: every later call hangs, this test's cleanup
			// and the other tests of this process included.
			fmt.Fprintf(os.Stderr, "%s: librdmacm's device list did not answer in 20 s: it is deadlocked\n", what)
			os.Exit(2)
		}
		return 0
	}
	if n := rescan("first look", true); n != want {
		t.Fatalf("librdmacm lists %d devices, libibverbs %d", n, want)
	}
	for round := 1; round <= 6; round++ {
		removed := rdmatest.DeleteRXE(dev, 30*time.Second)
	wait:
		for {
			select {
			case err := <-removed:
				if err != nil {
					t.Fatalf("round %d: %v (%s)", round, err, rdmatest.Holders(dev))
				}
				break wait
			case <-time.After(100 * time.Millisecond):
				rescan(fmt.Sprintf("round %d, %s being removed", round, dev), false) // librdmacm closes its context of dev
			}
		}
		if n := rescan(fmt.Sprintf("round %d, %s removed", round, dev), false); n != want-1 {
			t.Fatalf("round %d: librdmacm lists %d devices with %s removed, want %d", round, n, dev, want-1)
		}
		rdmatest.AddRXE(t, dev, nd)
		for i := 0; i < 3; i++ { // the first look finds dev: on the main thread every other round
			if n := rescan(fmt.Sprintf("round %d, %s added back", round, dev), (round+i)%2 == 0); n != want {
				t.Fatalf("round %d, look %d: librdmacm lists %d devices with %s added back, want %d", round, i, n, dev, want)
			}
		}
	}
}

// onMainThread runs functions on the process's main thread (TestMain).
var onMainThread = make(chan func())

func init() { runtime.LockOSThread() } // the main goroutine, TestMain's, keeps the main thread

func TestMain(m *testing.M) {
	// libibverbs allocates a device's ibv_device on the thread that first lists it:
	// the devices present now get theirs from the main thread's arena, as in a
	// gonvmf process, which lists them at start-up.
	rdmacm.Rescan()
	code := make(chan int)
	go func() { code <- m.Run() }()
	for {
		select {
		case f := <-onMainThread:
			f()
		case c := <-code:
			os.Exit(c)
		}
	}
}

func devices(t *testing.T) []rdmacm.DeviceInfo {
	t.Helper()
	d, err := rdmacm.Devices()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
