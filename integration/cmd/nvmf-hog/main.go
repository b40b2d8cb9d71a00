// Command nvmf-hog is a hostile NVMe over Fabrics RDMA host, for gonvmf's fairness tests
// (integration/tests/46-fairness.sh). It plays by the wire format but takes more than its
// share: it creates a controller like any host (admin queue, Connect, CC.EN, Number of
// Queues, keep-alive), connects its I/O queues, and on each sends twice the queue depth
// of large reads at once — more than the queue has room for — while posting no receive
// buffer for their responses after the Connect's. A target that keeps a read's buffer
// until the response SEND completes then has those buffers held forever (the SENDs are
// answered RNR NAK, retried without end under RNR retry 7), and keep-alive stays
// satisfied by the admin queue.
//
//	nvmf-hog -a 10.99.0.1 -s 4420 -n NQN [-hostnqn NQN] [-queues 8] [-depth 128]
//	         [-size 128KiB] [-nsid 1] [-lba 512] [-hold 60s]
//
// It prints "hog: N queues loaded" once every read is sent, a line for each queue the
// target tears down, and exits after -hold (0: until SIGINT/SIGTERM) with status 0, or 1
// if it could not set up.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
)

func main() {
	addr := flag.String("a", "10.99.0.1", "target address")
	port := flag.Uint("s", 4420, "target port")
	sub := flag.String("n", "", "subsystem NQN (required)")
	host := flag.String("hostnqn", "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b", "host NQN")
	queues := flag.Int("queues", 8, "I/O queues")
	depth := flag.Int("depth", 128, "I/O queue size (hsqsize+1); 2×depth reads are sent per queue")
	size := flag.Int("size", 128<<10, "bytes per read")
	nsid := flag.Uint("nsid", 1, "namespace to read")
	lba := flag.Int("lba", 512, "the namespace's LBA size")
	kato := flag.Duration("kato", 5*time.Second, "keep-alive timeout")
	hold := flag.Duration("hold", 0, "how long to hold the target's buffers (0: until a signal)")
	flag.Parse()
	if *sub == "" || *queues < 1 || *depth < 2 || *size < *lba || *size%*lba != 0 {
		flag.Usage()
		os.Exit(2)
	}
	ip, err := netip.ParseAddr(*addr)
	if err != nil {
		fail("address: %v", err)
	}
	ap := netip.AddrPortFrom(ip, uint16(*port))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *hold > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *hold+time.Duration(*queues)*10*time.Second)
		defer cancel()
	}

	admin, err := dial(ap, 0, 32, 32, true, 4096)
	if err != nil {
		fail("admin queue: %v", err)
	}
	defer admin.close()
	cntlid, err := admin.connect(0, 32, uint32(kato.Milliseconds()), nvmeproto.CNTLIDDynamic, *sub, *host)
	if err != nil {
		fail("admin connect: %v", err)
	}
	cc := nvmeproto.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)
	if _, err := admin.exec(func(cmd *nvmeproto.Command) {
		(&nvmeproto.PropertySetCommand{Offset: nvmeproto.PropCC, Value: uint64(cc)}).ToCommand(cmd)
	}); err != nil {
		fail("enable: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := admin.exec(func(cmd *nvmeproto.Command) {
			(&nvmeproto.PropertyGetCommand{Offset: nvmeproto.PropCSTS}).ToCommand(cmd)
		})
		if err != nil {
			fail("CSTS: %v", err)
		}
		if nvmeproto.CSTS(c.DW0).RDY() {
			break
		}
		if time.Now().After(deadline) {
			fail("CSTS.RDY not set")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := admin.exec(func(cmd *nvmeproto.Command) {
		(&nvmeproto.SetFeaturesCommand{FID: nvmeproto.FIDNumberOfQueues,
			CDW11: uint32(nvmeproto.MakeNumQueues(uint16(*queues-1), uint16(*queues-1)))}).ToCommand(cmd)
	})
	if err != nil {
		fail("number of queues: %v", err)
	}
	granted := min(*queues, int(nvmeproto.NumQueues(c.DW0).NSQ())+1)
	fmt.Printf("hog: controller %d, %d of %d I/O queues granted\n", cntlid, granted, *queues)
	go admin.keepAlive(ctx, *kato/2)

	var lost sync.WaitGroup
	ios := make([]*rawQ, 0, granted)
	defer func() {
		for _, q := range ios {
			q.close()
		}
	}()
	start := time.Now()
	for qid := 1; qid <= granted; qid++ {
		// One receive buffer: the Connect's response. None after it.
		q, err := dial(ap, uint16(qid), *depth, 1, false, *size)
		if err != nil {
			fmt.Printf("hog: I/O queue %d: %v; holding on with %d queues\n", qid, err, len(ios))
			break
		}
		if _, err := q.connect(uint16(qid), *depth, 0, cntlid, *sub, *host); err != nil {
			// A target whose pool the earlier queues hold cannot even serve this Connect.
			fmt.Printf("hog: I/O queue %d connect: %v; holding on with %d queues\n", qid, err, len(ios))
			q.close()
			break
		}
		ios = append(ios, q)
		nlb := *size / *lba
		for i := 0; i < 2**depth; i++ {
			var cmd nvmeproto.Command
			(&nvmeproto.RWCommand{Opcode: nvmeproto.OpRead, NSID: uint32(*nsid), SLBA: uint64(i * nlb), NLB: uint16(nlb - 1)}).ToCommand(&cmd)
			cmd.SGL = q.keyed(q.dataOff, *size)
			if err := q.send(&cmd, nil); err != nil {
				fail("I/O queue %d: sending read %d: %v", qid, i, err)
			}
		}
		lost.Add(1)
		go func() {
			defer lost.Done()
			select {
			case <-q.lost:
				fmt.Printf("hog: queue %d: connection lost %.1f s after its reads were sent (the target tore it down)\n",
					qid, time.Since(start).Seconds())
			case <-ctx.Done():
			}
		}()
	}
	fmt.Printf("hog: %d queues loaded: %d reads of %d bytes each, no receive buffers for their responses\n",
		len(ios), 2**depth, *size)
	if *hold > 0 {
		select {
		case <-time.After(*hold):
		case <-ctx.Done():
		}
	} else {
		<-ctx.Done()
	}
	stop()
	fmt.Printf("hog: done after %.1f s; %d of %d queues still connected\n", time.Since(start).Seconds(), connected(ios), len(ios))
}

func connected(qs []*rawQ) int {
	n := 0
	for _, q := range qs {
		select {
		case <-q.lost:
		default:
			n++
		}
	}
	return n
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nvmf-hog: "+format+"\n", args...)
	os.Exit(1)
}

// rawQ is one queue pair of the host: capsules go out as SENDs from their own slots,
// responses arrive in receive buffers (reposted only if repost), and a data area is
// registered for the target's RDMA READs and WRITEs.
type rawQ struct {
	ch     *rdmacm.EventChannel
	dev    *rdmacm.Device
	pd     *rdmacm.PD
	cq     *rdmacm.CQ
	mem    *rdmacm.Arena
	id     *rdmacm.CMID
	qp     *rdmacm.QP
	repost bool

	slots   int // capsule slots (one per command ever in flight)
	capOff  int
	rspOff  int
	dataOff int

	mu      sync.Mutex
	next    uint16
	waiters map[uint16]chan nvmeproto.Completion
	sendMu  sync.Mutex
	lost    chan struct{}
	lostOne sync.Once
	stop    atomic.Bool
	done    chan struct{}
}

func dial(addr netip.AddrPort, qid uint16, depth, recvs int, repost bool, data int) (*rawQ, error) {
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		return nil, err
	}
	q := &rawQ{ch: ch, repost: repost, slots: 2*depth + 4, waiters: map[uint16]chan nvmeproto.Completion{},
		lost: make(chan struct{}), done: make(chan struct{})}
	q.capOff = 0
	q.rspOff = align(q.slots * nvmeproto.SQESize)
	q.dataOff = align(q.rspOff + depth*nvmeproto.CQESize)
	size := align(q.dataOff + max(data, nvmeproto.ConnectDataSize))
	priv := make([]byte, nvmeproto.RDMAConnReqSize)
	(&nvmeproto.RDMAConnReq{QID: qid, HRQSize: uint16(depth), HSQSize: uint16(depth - 1)}).Marshal(priv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, _, err := rdmacm.Dial(ctx, ch, addr, rdmacm.DialOptions{
		Param: rdmacm.ConnParam{PrivateData: priv, ResponderResources: 16, RNRRetryCount: 7},
		CreateQP: func(id *rdmacm.CMID) error {
			var err error
			if q.dev, err = rdmacm.OpenDevice(id.DeviceName()); err != nil {
				return err
			}
			if q.pd, err = q.dev.AllocPD(); err != nil {
				return err
			}
			if q.cq, err = q.dev.NewCQ(2*q.slots + depth); err != nil {
				return err
			}
			if q.mem, err = q.pd.NewArena(size, rdmacm.AccessRemoteRead|rdmacm.AccessRemoteWrite); err != nil {
				return err
			}
			if q.qp, err = id.CreateQP(q.pd, rdmacm.QPConfig{SendCQ: q.cq, RecvCQ: q.cq,
				MaxSendWR: q.slots, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
				return err
			}
			wrs := make([]rdmacm.RecvWR, recvs)
			for i := range wrs {
				wrs[i].ID = uint64(i)
				wrs[i].SetSGL(q.mem.SGE(q.rspOff+i*nvmeproto.CQESize, nvmeproto.CQESize))
			}
			return q.qp.PostRecv(wrs)
		},
	})
	if err != nil {
		q.release()
		return nil, err
	}
	q.id = id
	go q.poll()
	go q.watchCM()
	return q, nil
}

// watchCM marks the queue lost when the target disconnects it (a queue pair with nothing
// posted sees no flushed completion then: the rdma_cm event is the only news).
func (q *rawQ) watchCM() {
	for {
		ev, err := q.ch.GetEvent(context.Background())
		if err != nil {
			return // the channel was closed
		}
		switch ev.Type {
		case rdmacm.EventDisconnected, rdmacm.EventDeviceRemoval, rdmacm.EventConnectError, rdmacm.EventUnreachable:
			q.lostOne.Do(func() { close(q.lost) })
		}
	}
}

func align(n int) int { return (n + 4095) &^ 4095 }

// poll takes completions: responses go to their waiters; an error completion (the
// target disconnected) marks the queue lost.
func (q *rawQ) poll() {
	defer close(q.done)
	wcs := make([]rdmacm.Completion, 32)
	for !q.stop.Load() {
		n, err := q.cq.PollWait(wcs, 50*time.Millisecond)
		if err != nil {
			return
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdmacm.WCSuccess {
				q.lostOne.Do(func() { close(q.lost) })
				continue
			}
			if !wc.Opcode.IsRecv() {
				continue
			}
			off := q.rspOff + int(wc.ID)*nvmeproto.CQESize
			var c nvmeproto.Completion
			if int(wc.ByteLen) >= nvmeproto.CQESize && c.Unmarshal(q.mem.Bytes()[off:off+nvmeproto.CQESize]) == nil {
				q.mu.Lock()
				ch := q.waiters[c.CID]
				delete(q.waiters, c.CID)
				q.mu.Unlock()
				if ch != nil {
					ch <- c
				}
			}
			if q.repost {
				var w [1]rdmacm.RecvWR
				w[0].ID = wc.ID
				w[0].SetSGL(q.mem.SGE(off, nvmeproto.CQESize))
				q.qp.PostRecv(w[:])
			}
		}
	}
}

// keyed describes n bytes at off of the queue's memory for the target.
func (q *rawQ) keyed(off, n int) nvmeproto.SGLDescriptor {
	return nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock, Subtype: nvmeproto.SGLSubtypeAddress,
		Address: q.mem.Addr(off), Length: uint32(n), Key: q.mem.RKey()}
}

// send sends cmd (its CID assigned here); with wait, the response is delivered to wait.
func (q *rawQ) send(cmd *nvmeproto.Command, wait chan nvmeproto.Completion) error {
	q.mu.Lock()
	cid := q.next
	q.next++
	if wait != nil {
		q.waiters[cid] = wait
	}
	q.mu.Unlock()
	slot := int(cid) % q.slots
	cmd.CID = cid
	cmd.Flags = nvmeproto.PSDTSGL << 6
	off := q.capOff + slot*nvmeproto.SQESize
	cmd.Marshal(q.mem.Bytes()[off : off+nvmeproto.SQESize])
	var w [1]rdmacm.SendWR
	w[0].ID = uint64(cid)
	w[0].Op = rdmacm.OpSend
	w[0].Flags = rdmacm.FlagSignaled
	w[0].SetSGL(q.mem.SGE(off, nvmeproto.SQESize))
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	return q.qp.PostSend(w[:])
}

var errNoResponse = errors.New("no response within 10 s")

// exec sends a command built by build and waits for its response.
func (q *rawQ) exec(build func(*nvmeproto.Command)) (nvmeproto.Completion, error) {
	var cmd nvmeproto.Command
	build(&cmd)
	if cmd.SGL.Type == 0 && cmd.SGL.Length == 0 {
		cmd.SGL = nvmeproto.SGLDescriptor{Type: nvmeproto.SGLTypeKeyedDataBlock}
	}
	ch := make(chan nvmeproto.Completion, 1)
	if err := q.send(&cmd, ch); err != nil {
		return nvmeproto.Completion{}, err
	}
	select {
	case c := <-ch:
		if !c.Status.Success() {
			return c, fmt.Errorf("status %v", c.Status)
		}
		return c, nil
	case <-q.lost:
		return nvmeproto.Completion{}, errors.New("connection lost")
	case <-time.After(10 * time.Second):
		return nvmeproto.Completion{}, errNoResponse
	}
}

// connect sends the Fabrics Connect (its data at the start of the data area).
func (q *rawQ) connect(qid uint16, entries int, kato uint32, cntlid uint16, sub, host string) (uint16, error) {
	data := q.mem.Bytes()[q.dataOff : q.dataOff+nvmeproto.ConnectDataSize]
	var hostID [16]byte
	binary.BigEndian.PutUint64(hostID[8:], 0x0b0b)
	(&nvmeproto.ConnectData{HostID: hostID, CNTLID: cntlid, SubNQN: sub, HostNQN: host}).Marshal(data)
	c, err := q.exec(func(cmd *nvmeproto.Command) {
		(&nvmeproto.ConnectCommand{QID: qid, SQSize: uint16(entries - 1), KATO: kato}).ToCommand(cmd)
		cmd.SGL = q.keyed(q.dataOff, nvmeproto.ConnectDataSize)
	})
	if err != nil {
		return 0, err
	}
	id, _ := nvmeproto.ParseConnectSuccessDW0(c.DW0)
	return id, nil
}

// keepAlive sends Keep Alive every period until ctx ends.
func (q *rawQ) keepAlive(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := q.exec(func(cmd *nvmeproto.Command) { cmd.Opcode = nvmeproto.OpKeepAlive }); err != nil {
				fmt.Printf("hog: keep alive: %v\n", err)
				return
			}
		}
	}
}

func (q *rawQ) close() {
	q.id.Disconnect()
	q.stop.Store(true)
	q.cq.Wake()
	<-q.done
	q.release()
}

func (q *rawQ) release() {
	if q.qp != nil {
		q.qp.Close()
	}
	if q.id != nil {
		q.id.Close()
	}
	if q.mem != nil {
		q.mem.Close()
	}
	if q.cq != nil {
		q.cq.Close()
	}
	if q.pd != nil {
		q.pd.Close()
	}
	if q.dev != nil {
		q.dev.Close()
	}
	q.ch.Close()
}
