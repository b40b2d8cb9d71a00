package rdma

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm/rdmatest"
)

// TestRDMADeviceReadded removes an RDMA device the transport has set up, then adds it
// back under the same name, the target running throughout: with a listener bound to the
// device's address and a host connected (rdma_cm reports the removal), and with only a
// wildcard listener and no connection left on the device (nothing reports it: the
// transport finds the device gone from the device list). Either way the removal completes
// while the target runs (Soft-RoCE cannot detach a process from a removed device: the
// kernel waits until the process has closed everything it opened on it, so the transport
// must release the device once its connections are gone), and hosts connect again to the
// device added back, through the same listener. Runs only in the VM harness's guest: it
// adds and deletes a Soft-RoCE device (rxe2 on gonvmfrd0).
func TestRDMADeviceReadded(t *testing.T) {
	t.Run("bound", func(t *testing.T) { testDeviceReadded(t, false) })
	t.Run("wildcard-idle", func(t *testing.T) { testDeviceReadded(t, true) })
}

func testDeviceReadded(t *testing.T, wildcard bool) {
	const dev, nd = "rxe2", "gonvmfrd0"
	ip := netip.MustParseAddr("10.99.202.1")
	rdmatest.SoftRoCE(t, dev, nd, ip) // its cleanup runs after the transport's Close
	first, most, every := relistenFirst, relistenMax, deviceCheckEvery
	relistenFirst, relistenMax, deviceCheckEvery = 50*time.Millisecond, 500*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { relistenFirst, relistenMax, deviceCheckEvery = first, most, every })

	listenOn, want := ip, dev
	if wildcard {
		listenOn, want = netip.IPv4Unspecified(), ""
	}
	e := newRDMAEnvAt(t, listenOn, conf.Transport{}, conf.Limits{})
	e.addr = netip.AddrPortFrom(ip, e.addr.Port())
	if got := e.lis.Device(); got != want {
		t.Fatalf("listening on %q, want %q", got, want)
	}
	use := func(round int) {
		t.Helper()
		_, cntlid := e.adminConnect(0)
		io := e.ioConnect(1, cntlid, 32)
		data := pattern(4096, byte(round))
		c, _ := io.exec(rw(nvmeproto.OpWrite, 1, uint64(round*8), 8), data, len(data))
		expectOK(t, "write", c)
		c, got := io.exec(rw(nvmeproto.OpRead, 1, uint64(round*8), 8), nil, len(data))
		expectOK(t, "read", c)
		if !bytes.Equal(got, data) {
			t.Fatalf("round %d: read back differs", round)
		}
	}
	use(0)
	if wildcard { // the hosts leave before the removal: no connection reports it
		for _, l := range e.links {
			l.close()
		}
		e.links = nil
		e.waitConns(0, 20*time.Second)
	}

	removed := rdmatest.DeleteRXE(dev, 30*time.Second)
	e.waitConns(0, 20*time.Second) // DEVICE_REMOVAL closed them
	for _, l := range e.links {    // the host's side lets go of the device too
		l.close()
	}
	e.links = nil
	if err := <-removed; err != nil {
		t.Fatalf("%v: the target still holds the removed device (%s)", err, rdmatest.Holders(dev))
	}
	if ps := e.tr.PoolStats(); len(ps) != 0 {
		t.Errorf("buffer pools after the removal: %+v, want none", ps)
	}

	rdmatest.AddRXE(t, dev, nd)
	deadline := time.Now().Add(20 * time.Second)
	for {
		q, err := e.tryDial(0, 32, 0)
		if err == nil {
			q.link.close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection to %v on %s added back: %v", e.addr, dev, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := e.lis.Device(); got != want {
		t.Errorf("listening on %q after the device came back, want %q", got, want)
	}
	use(1)
	if ps := e.tr.PoolStats(); len(ps) != 1 || ps[0].Device != dev {
		t.Errorf("buffer pools with the device back: %+v, want one of %s", ps, dev)
	}
	e.expectPoolFree()
}
