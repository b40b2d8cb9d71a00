package rdma

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
)

// TestRetiredDeviceReleasedByLastUser: a retired device is released once, when its last
// use ends, and not while a connection still uses it; it leaves the by-name tables at
// once (a new device of the same name takes them) but stays in the transport's totals
// until released.
func TestRetiredDeviceReleasedByLastUser(t *testing.T) {
	tr := &Transport{
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		devices: map[string]*device{},
		quit:    make(chan struct{}),
	}
	var released atomic.Int32
	newDev := func() *device {
		d := &device{name: "rxe9"}
		d.release = func() error { released.Add(1); return nil }
		return d
	}
	old := newDev()
	tr.devices["rxe9"] = old
	old.users = 2 // two connections

	tr.mu.Lock()
	tr.retire(old)
	tr.retire(old) // a second report of the same removal
	tr.mu.Unlock()
	if tr.devices["rxe9"] != nil {
		t.Fatalf("a retired device still takes new connections")
	}
	tr.devices["rxe9"] = newDev() // the device added back
	if got := len(tr.devicesByName()); got != 1 {
		t.Errorf("devices by name: %d, want 1 (the retired one shares the name)", got)
	}
	tr.mu.Lock()
	if got := len(tr.allDevices()); got != 2 {
		t.Errorf("devices in the totals: %d, want 2", got)
	}
	tr.mu.Unlock()

	tr.putDevice(old)
	tr.bg.Wait()
	if n := released.Load(); n != 0 {
		t.Fatalf("released with a connection still on it (%d releases)", n)
	}
	tr.putDevice(old)
	tr.bg.Wait()
	if n := released.Load(); n != 1 {
		t.Fatalf("%d releases after the last connection went, want 1", n)
	}
	tr.mu.Lock()
	if len(tr.retired) != 0 || len(tr.allDevices()) != 1 {
		t.Errorf("after its release: %d retired, %d in the totals; want 0, 1", len(tr.retired), len(tr.allDevices()))
	}
	tr.mu.Unlock()

	// Unused when retired: released at once. With the transport closed, left to Close.
	idle := newDev()
	tr.mu.Lock()
	tr.retire(idle)
	tr.mu.Unlock()
	tr.bg.Wait()
	if n := released.Load(); n != 2 {
		t.Errorf("an unused retired device: %d releases in all, want 2", n)
	}
	late := newDev()
	tr.mu.Lock()
	tr.closed = true
	tr.retire(late)
	tr.mu.Unlock()
	tr.bg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if n := released.Load(); n != 2 || late.closing || len(tr.allDevices()) != 2 {
		t.Errorf("retired after Close began: %d releases, closing %v, %d devices for Close; want 2, false, 2",
			n, late.closing, len(tr.allDevices()))
	}
}
