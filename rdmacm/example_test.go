package rdmacm_test

import (
	"context"
	"log"
	"net/netip"
	"time"

	"github.com/gonvmf/gonvmf/rdmacm"
)

// A passive side: accept connections on one channel, give every
// connection a QP on a shared CQ, and run the CQ's poll loop.
func Example_listener() {
	ctx := context.Background()
	if err := rdmacm.CheckMemlock(64 << 20); err != nil {
		log.Fatal(err) // says how to raise RLIMIT_MEMLOCK
	}
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		log.Fatal(err) // errors.Is(err, rdmacm.ErrNoDevice) without RDMA hardware
	}
	defer ch.Close() // closes the listener and every connection's CM ID and QP
	lis, err := ch.Listen(netip.MustParseAddrPort("10.99.0.1:4420"), 128)
	if err != nil {
		log.Fatal(err)
	}
	dev, err := rdmacm.OpenDevice(lis.DeviceName())
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	mem, _ := pd.NewArena(64<<20, 0) // receive buffers and I/O units
	cq, _ := dev.NewCQ(4096)
	go pollLoop(cq)

	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			if len(ev.Param.PrivateData) < 32 {
				ev.ID.Reject([]byte{0, 0, 1, 0}) // NVMe-oF: INVALID_LEN
				ev.ID.Close()
				continue
			}
			qp, err := ev.ID.CreateQP(pd, rdmacm.QPConfig{SendCQ: cq, RecvCQ: cq,
				MaxSendWR: 256, MaxRecvWR: 128, MaxSendSGE: 4, MaxRecvSGE: 2, MaxInlineData: 64})
			if err != nil {
				ev.ID.Reject([]byte{0, 0, 6, 0}) // NO_RSC
				ev.ID.Close()
				continue
			}
			recvs := make([]rdmacm.RecvWR, 128)
			for i := range recvs {
				recvs[i].ID = uint64(i)
				recvs[i].SetSGL(mem.SGE(i*8256, 8256)) // 64-byte command + 8 KiB in-capsule data
			}
			qp.PostRecv(recvs)
			ev.ID.Accept(&rdmacm.ConnParam{PrivateData: make([]byte, 32), RNRRetryCount: 7,
				InitiatorDepth: ev.Param.InitiatorDepth, ResponderResources: ev.Param.ResponderResources})
		case rdmacm.EventDisconnected:
			ev.ID.Disconnect() // answer the peer; the QP's requests flush
		case rdmacm.EventTimewaitExit, rdmacm.EventDeviceRemoval:
			ev.ID.Close()
		}
	}
}

func pollLoop(cq *rdmacm.CQ) {
	wcs := make([]rdmacm.Completion, 64)
	for {
		// Poll; when idle, arm, poll once more (a completion may have come in
		// before the arm), then sleep. cq.Wake() ends the sleep early.
		n, err := cq.PollWait(wcs, 100*time.Millisecond)
		if err != nil {
			return // closed
		}
		for _, wc := range wcs[:n] {
			_ = wc // dispatch on wc.QPNum and wc.ID
		}
	}
}
