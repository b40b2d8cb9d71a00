package initiator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// transport opens queues and registered memory for a controller.
type transport interface {
	// openQueue connects the transport for q (queue ID q.qid, q.depth entries; cntlid
	// is 0xFFFF for the admin queue), sets q.tr and q.ctl, and returns the usable depth.
	openQueue(ctx context.Context, q *queue, cntlid uint16) (int, error)
	// newRegion returns n bytes of memory the controller can read and write.
	newRegion(n int) (*region, error)
	close() error
}

// Controller is a connection to one NVMe-oF controller: an admin queue and its I/O
// queues. It is safe for concurrent use. Create it with Dial and end it with Close (or
// Shutdown); once it fails (a queue lost its connection, a command timed out, keep-alive
// failed) every call returns the error, and Done is closed.
type Controller struct {
	opts Options
	log  *slog.Logger
	tr   transport

	admin *queue
	io    []*queue
	ioq   []*IOQueue
	pool  *BufferPool

	cntlid  uint16
	cap     nvmeproto.CAP
	vs      nvmeproto.VS
	id      nvmeproto.IdentifyController
	disc    bool
	maxXfer int // bytes per command (MDTS)
	icd     int // in-capsule data bytes on I/O queues
	kato    time.Duration
	crdt    [3]time.Duration // Command Retry Delay Times (Identify CRDT1..3)
	acre    bool             // Host Behavior Support ACRE enabled: failed statuses carry CRD

	authMu  sync.Mutex        // serializes re-authentications (Reauthenticate, reauthenticate)
	authTID atomic.Uint32     // transaction IDs of in-band authentication
	authSeq dhchap.SeqCounter // sequence numbers (S2) of in-band authentication
	authBuf *Buffer           // authentication messages (authBuffer); under authMu after Dial

	// The re-authentication commands failed with Authentication Required wait for (see
	// awaitReauth): at most one runs; reauthGen numbers them. reauthSeq numbers every
	// re-authentication, Reauthenticate's too, in the order they run (reauthBegin), and
	// reauthDone is the number of the last one that succeeded (written under reauthMu).
	reauthMu      sync.Mutex
	reauthRunning bool
	reauthGen     uint64
	reauthSeq     uint64
	reauthWaiters []reauthWaiter
	reauthDone    atomic.Uint64

	start time.Time
	clock atomic.Int64 // nanoseconds since start, updated by the watchdog

	allocated atomic.Int64 // bytes of dedicated buffers not freed yet (AllocatedBytes)

	nsMu sync.Mutex // serializes scans
	ns   atomic.Pointer[[]*Namespace]
	rr   atomic.Uint32

	closing atomic.Bool
	failMu  sync.Mutex
	err     error
	done    chan struct{}
	stop    chan struct{} // ends the keep-alive, watchdog and AER goroutines
	bg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

// AsyncEvent is an asynchronous event the controller reported (Asynchronous Event
// Request completion).
type AsyncEvent struct {
	Event nvmeproto.AsyncEvent
	// Changed lists the namespaces a Namespace Attribute Changed notice reported (from the
	// Changed Namespace List log page); the controller rescans namespaces before the
	// callback runs.
	Changed []uint32
}

// Dial connects to a controller: the admin queue and its Fabrics Connect, CAP, CC.EN and
// CSTS.RDY, Identify Controller, the number of I/O queues, the I/O queues, keep-alive, an
// outstanding Asynchronous Event Request and, for I/O controllers, the namespace scan.
// ctx bounds the whole connection; afterwards it is not used.
func Dial(ctx context.Context, o Options) (*Controller, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: o, log: o.Logger.With("target", o.target(), "subnqn", o.SubNQN),
		start: time.Now(), done: make(chan struct{}), stop: make(chan struct{})}
	c.disc = o.SubNQN == nvmeproto.DiscoveryNQN
	switch o.Transport {
	case TransportLoop:
		c.tr = &loopTransport{dial: o.Loop}
	default:
		if c.tr, err = newRDMATransport(&c.opts); err != nil {
			return nil, err
		}
	}
	c.bg.Add(1)
	go c.watchdog()
	if err := c.connect(ctx); err != nil {
		c.teardown()
		return nil, err
	}
	return c, nil
}

// connect runs the Linux host's connect sequence (../shared/ref/nvmeof-rdma.md §4).
func (c *Controller) connect(ctx context.Context) error {
	o := &c.opts
	kato := o.KeepAlive
	if kato == 0 && !c.disc {
		kato = DefaultKeepAlive
	}
	if kato < 0 {
		kato = 0
	}
	c.kato = kato.Round(time.Millisecond)
	aq, err := c.openQueue(ctx, 0, AdminQueueSize, nvmeproto.CNTLIDDynamic)
	if err != nil {
		return err
	}
	c.closeMu.Lock()
	c.admin = aq
	c.closeMu.Unlock()
	// Registered memory for admin data (authentication's included) and bounce buffers,
	// a region per chunk.
	chunk := min(128<<10, o.BufferPoolSize/8) &^ 4095
	regs := make([]*region, o.BufferPoolSize/chunk)
	for i := range regs {
		if regs[i], err = c.tr.newRegion(chunk); err != nil {
			for _, r := range regs[:i] {
				r.release()
			}
			return fmt.Errorf("initiator: buffer pool chunk %d of %d (%d bytes each, a memory region each): %w; "+
				"lower Options.BufferPoolSize, or raise the locked-memory limit (ulimit -l) or the device's max_mr", i+1, len(regs), chunk, err)
		}
	}
	c.pool = newBufferPool(regs, chunk)
	if c.cntlid, err = c.fabricsConnect(ctx, aq, nvmeproto.CNTLIDDynamic); err != nil {
		return err
	}

	if err := c.enable(ctx); err != nil {
		return err
	}
	if err := c.identify(ctx); err != nil {
		return err
	}
	if err := c.enableACRE(ctx); err != nil {
		return err
	}
	if c.kato > 0 {
		c.bg.Add(1)
		go c.keepAlive()
	}
	if !c.disc && o.Queues > 0 {
		if err := c.openIOQueues(ctx); err != nil {
			return err
		}
	}
	c.startAER(ctx)
	if !c.disc {
		if err := c.Rescan(ctx); err != nil {
			return err
		}
	}
	c.log.Info("controller connected", "cntlid", c.cntlid, "io_queues", len(c.io), "queue_size", c.ioDepth(),
		"mdts", c.maxXfer, "in_capsule", c.icd, "kato", c.kato, "acre", c.acre, "crdt1", c.crdt[0])
	return nil
}

// openQueue connects the transport of a new queue and sends its Fabrics Connect.
func (c *Controller) openQueue(ctx context.Context, qid uint16, depth int, cntlid uint16) (*queue, error) {
	timeout := c.opts.CommandTimeout
	if qid == 0 {
		timeout = c.opts.AdminTimeout
	}
	q := newQueue(c, qid, depth, timeout)
	usable, err := c.tr.openQueue(ctx, q, cntlid)
	if err != nil {
		ce := &ConnectError{Target: c.opts.target(), QID: qid, SubNQN: c.opts.SubNQN, HostNQN: c.opts.HostNQN,
			Reason: strings.TrimPrefix(err.Error(), "initiator: "), Err: err}
		return nil, ce
	}
	q.connBuf = &Buffer{reg: q.ctl, off: ctlConnectOff, b: q.ctl.mem[ctlConnectOff : ctlConnectOff+nvmeproto.ConnectDataSize]}
	q.connBuf.refs.Store(1) // never released: the control region lives as long as the queue
	q.start(usable)
	return q, nil
}

// fabricsConnect sends the Fabrics Connect command on q; it returns the controller ID.
func (c *Controller) fabricsConnect(ctx context.Context, q *queue, cntlid uint16) (uint16, error) {
	o := &c.opts
	d := nvmeproto.ConnectData{HostID: o.HostID, CNTLID: cntlid, SubNQN: o.SubNQN, HostNQN: o.HostNQN}
	d.Marshal(q.connBuf.b)
	cc := nvmeproto.ConnectCommand{QID: q.qid, SQSize: uint16(q.usable - 1)}
	if q.qid == 0 {
		cc.KATO = uint32(c.kato / time.Millisecond)
	}
	r := &Request{Op: opCommand, name: "Connect", Buf: q.connBuf, dir: nvmeproto.DirHostToCtrl}
	cc.ToCommand(&r.cmd)
	if err := q.exec(ctx, r); err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			return 0, connectStatusError(o, q.qid, se)
		}
		return 0, &ConnectError{Target: o.target(), QID: q.qid, SubNQN: o.SubNQN, HostNQN: o.HostNQN, Reason: err.Error(), Err: err}
	}
	id, authreq := nvmeproto.ParseConnectSuccessDW0(r.DW0)
	if authreq&nvmeproto.AuthReqASCR != 0 {
		return 0, &ConnectError{Target: o.target(), QID: q.qid, SubNQN: o.SubNQN, HostNQN: o.HostNQN,
			Reason: fmt.Sprintf("the controller requires a secure channel (AUTHREQ %#x: TLS), which this host does not implement", authreq),
			Err:    ErrNotSupported}
	}
	if authreq&nvmeproto.AuthReqATR != 0 {
		if q.qid != 0 {
			if err := q.reserveAuthSlot(); err != nil {
				return 0, &ConnectError{Target: o.target(), QID: q.qid, SubNQN: o.SubNQN, HostNQN: o.HostNQN,
					Reason: strings.TrimPrefix(err.Error(), "initiator: "), Err: err}
			}
		}
		if err := c.authenticate(ctx, q); err != nil {
			return 0, err
		}
		q.authed = true
	} else if o.ctrlSecret != nil {
		// Bidirectional authentication was asked for: a controller that does not
		// authenticate the queue never proves it holds the controller secret.
		return 0, &ConnectError{Target: o.target(), QID: q.qid, SubNQN: o.SubNQN, HostNQN: o.HostNQN,
			Reason: fmt.Sprintf("a controller secret (--dhchap-ctrl-secret) is configured, but the controller did not require authentication (Connect AUTHREQ %#x), so it cannot prove it holds that secret; remove the controller secret to accept a controller that does not authenticate",
				authreq),
			Err: ErrAuthFailed}
	}
	if q.qid == 0 {
		return id, nil
	}
	return cntlid, nil
}

// enable reads CAP, sets CC.EN and waits for CSTS.RDY.
func (c *Controller) enable(ctx context.Context) error {
	v, err := c.propGet(ctx, nvmeproto.PropCAP)
	if err != nil {
		return err
	}
	c.cap = nvmeproto.CAP(v)
	if c.cap.MPSMIN() != 0 {
		return fmt.Errorf("initiator: controller minimum page size %d is larger than the host's 4096 (CAP.MPSMIN %d)",
			c.cap.MinPageSize(), c.cap.MPSMIN())
	}
	css := uint8(nvmeproto.CCCSSNVM)
	if c.cap.CSS()&nvmeproto.CAPCSSIOCS != 0 {
		css = nvmeproto.CCCSSAllIOCS
	}
	cc := nvmeproto.CC(0).WithCSS(css).WithMPS(0).WithAMS(nvmeproto.CCAMSRoundRobin).WithIOSQES(6).WithIOCQES(4).WithEN(true)
	if err := c.propSet(ctx, nvmeproto.PropCC, uint64(cc)); err != nil {
		return err
	}
	if err := c.waitCSTS(ctx, "ready", time.Duration(c.cap.TO())*500*time.Millisecond, func(s nvmeproto.CSTS) bool { return s.RDY() }); err != nil {
		return err
	}
	v, err = c.propGet(ctx, nvmeproto.PropVS)
	if err != nil {
		return err
	}
	c.vs = nvmeproto.VS(v)
	return nil
}

// waitCSTS polls CSTS until ok (bounded by limit, at least 1 s) or a fatal status.
func (c *Controller) waitCSTS(ctx context.Context, what string, limit time.Duration, ok func(nvmeproto.CSTS) bool) error {
	limit = max(limit, time.Second)
	deadline := time.Now().Add(limit)
	wait := time.Millisecond
	for {
		v, err := c.propGet(ctx, nvmeproto.PropCSTS)
		if err != nil {
			return err
		}
		s := nvmeproto.CSTS(v)
		if s.CFS() {
			return fmt.Errorf("initiator: controller fatal status while waiting for it to be %s (CSTS %v)", what, s)
		}
		if ok(s) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("initiator: %w: controller not %s after %v (CSTS %v)", ErrTimeout, what, limit, s)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("initiator: waiting for the controller to be %s: %w", what, ctx.Err())
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// identify reads Identify Controller and checks what the host needs.
func (c *Controller) identify(ctx context.Context) error {
	buf, err := c.pool.Get(ctx, nvmeproto.IdentifySize)
	if err != nil {
		return err
	}
	defer buf.Release()
	ic := nvmeproto.IdentifyCommand{CNS: nvmeproto.CNSController}
	if err := c.adminData(ctx, "Identify Controller", func(cmd *nvmeproto.Command) { ic.ToCommand(cmd) }, buf, nvmeproto.DirCtrlToHost); err != nil {
		return err
	}
	if err := c.id.Unmarshal(buf.Bytes()); err != nil {
		return fmt.Errorf("initiator: decoding Identify Controller: %w", err)
	}
	id := &c.id
	if id.CNTRLTYPE == nvmeproto.ControllerTypeDiscovery {
		c.disc = true
	}
	if id.CNTLID != c.cntlid {
		return fmt.Errorf("initiator: Identify reports controller ID %#x, Connect returned %#x", id.CNTLID, c.cntlid)
	}
	if c.opts.Transport == TransportRDMA && id.SGLS&nvmeproto.SGLSKeyedDataBlock == 0 {
		return errors.New("initiator: the controller does not support keyed SGL data blocks (Identify SGLS bit 2), mandatory on RDMA")
	}
	if id.ICDOFF != 0 {
		return fmt.Errorf("initiator: in-capsule data offset %d is not supported (Identify ICDOFF must be 0)", id.ICDOFF)
	}
	if !c.disc {
		if c.kato > 0 && id.KAS == 0 {
			return errors.New("initiator: the controller does not support keep alive (Identify KAS 0), mandatory for I/O controllers")
		}
		if id.IOCCSZ < 4 || id.IORCSZ < 1 {
			return fmt.Errorf("initiator: I/O capsule sizes IOCCSZ %d / IORCSZ %d below the minimum 4 / 1", id.IOCCSZ, id.IORCSZ)
		}
	}
	c.maxXfer = 1 << 20 // no MDTS limit: cap at 1 MiB per command
	if id.MDTS != 0 && id.MDTS < 20 {
		c.maxXfer = min(c.maxXfer, 4096<<id.MDTS)
	}
	if !c.opts.NoInCapsuleData && id.SGLS&nvmeproto.SGLSAddressAsOffset != 0 && id.IOCCSZ*16 > nvmeproto.SQESize {
		c.icd = int(min(id.IOCCSZ*16-nvmeproto.SQESize, 1<<20))
	}
	return nil
}

// enableACRE sets Advanced Command Retry Enable (Set Features Host Behavior Support, 16h)
// when Identify Controller reports a Command Retry Delay Time (CRDT1 not 0), as the
// Linux host's nvme_configure_host_options does: the controller then sets CRD in the
// statuses a host may retry, and retry waits the delay it selects. A controller that
// refuses the feature leaves CRD 0 (retries without delay), and the connection goes on,
// as the Linux host's does.
func (c *Controller) enableACRE(ctx context.Context) error {
	id := &c.id
	c.crdt = [3]time.Duration{time.Duration(id.CRDT1) * 100 * time.Millisecond,
		time.Duration(id.CRDT2) * 100 * time.Millisecond, time.Duration(id.CRDT3) * 100 * time.Millisecond}
	if id.CRDT1 == 0 {
		return nil
	}
	buf, err := c.pool.Get(ctx, nvmeproto.HostBehaviorSize)
	if err != nil {
		return err
	}
	defer buf.Release()
	hb := nvmeproto.HostBehavior{ACRE: nvmeproto.HostBehaviorEnable}
	hb.Marshal(buf.Bytes())
	sf := nvmeproto.SetFeaturesCommand{FID: nvmeproto.FIDHostBehaviorSupport}
	err = c.adminData(ctx, "Set Features (Host Behavior Support)", func(cmd *nvmeproto.Command) { sf.ToCommand(cmd) }, buf, nvmeproto.DirHostToCtrl)
	var se *StatusError
	if errors.As(err, &se) {
		c.log.Info("controller refused advanced command retry (ACRE): failed commands are retried without its delays", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	c.acre = true
	return nil
}

// retryDelay is the Command Retry Delay a status's CRD selects: none for 0, CRDT1..3
// for 1..3.
func (c *Controller) retryDelay(crd uint8) time.Duration {
	if crd == 0 || crd > 3 {
		return 0
	}
	return c.crdt[crd-1]
}

// ioDepth returns the I/O queue size asked for (Options.QueueSize), within the
// controller's limit (ioDepthLimit).
func (c *Controller) ioDepth() int {
	return max(min(c.opts.QueueSize, c.ioDepthLimit()), 2)
}

// ioDepthLimit returns the largest I/O queue the controller takes: CAP.MQES+1 entries,
// and no more than Identify MAXCMD commands.
func (c *Controller) ioDepthLimit() int {
	d := int(c.cap.MQES()) + 1
	if c.id.MAXCMD != 0 {
		d = min(d, int(c.id.MAXCMD))
	}
	return d
}

// openIOQueues negotiates the number of I/O queues and connects them.
func (c *Controller) openIOQueues(ctx context.Context) error {
	want := c.opts.Queues
	sf := nvmeproto.SetFeaturesCommand{FID: nvmeproto.FIDNumberOfQueues,
		CDW11: uint32(nvmeproto.MakeNumQueues(uint16(want-1), uint16(want-1)))}
	r, err := c.admin1(ctx, "Set Features (Number of Queues)", func(cmd *nvmeproto.Command) { sf.ToCommand(cmd) })
	if err != nil {
		return err
	}
	nq := nvmeproto.NumQueues(r.DW0)
	n := min(want, int(nq.NSQ())+1, int(nq.NCQ())+1)
	if n < want {
		c.log.Info("controller granted fewer I/O queues", "asked", want, "granted", n)
	}
	// I/O queues authenticate when the admin queue did (the controller asks the host, not
	// the queue). Such a queue keeps one entry for its authentication commands
	// (reserveAuthSlot): open it one entry larger, so that Depth is the size asked for.
	depth := c.ioDepth()
	entries := depth
	if c.admin.authed {
		if limit := c.ioDepthLimit(); depth < limit {
			entries = depth + 1
		} else {
			c.log.Info("I/O queues hold one command less than asked: the host keeps one entry of each for authentication commands, and the controller allows no larger queue",
				"asked", depth, "depth", depth-1, "controller_limit", limit)
		}
	}
	for i := 1; i <= n; i++ {
		q, err := c.openQueue(ctx, uint16(i), entries, c.cntlid)
		if err != nil {
			return err
		}
		q.icdMax = c.icd
		c.closeMu.Lock()
		c.io = append(c.io, q)
		c.closeMu.Unlock()
		if _, err := c.fabricsConnect(ctx, q, c.cntlid); err != nil {
			return err
		}
		if entries > depth && q.authSlot == nil && q.usable > depth {
			// Opened for authentication, which this queue's Connect did not ask for:
			// the extra entry stays unused (Depth is what was asked for).
			if err := q.reserveAuthSlot(); err != nil {
				return err
			}
		}
		q.size = q.usable
		if q.authSlot != nil {
			q.size++
		}
		q.size = min(q.size, depth)
		c.ioq = append(c.ioq, &IOQueue{q: q})
	}
	return nil
}

// admin1 runs an admin command without data.
func (c *Controller) admin1(ctx context.Context, name string, build func(*nvmeproto.Command)) (*Request, error) {
	r := &Request{Op: opCommand, name: name}
	build(&r.cmd)
	return r, c.admin.exec(ctx, r)
}

// adminData runs an admin command moving data through buf.
func (c *Controller) adminData(ctx context.Context, name string, build func(*nvmeproto.Command), buf *Buffer, dir nvmeproto.Direction) error {
	r := &Request{Op: opCommand, name: name, Buf: buf, dir: dir}
	build(&r.cmd)
	return c.admin.exec(ctx, r)
}

func (c *Controller) propGet(ctx context.Context, off uint32) (uint64, error) {
	p := nvmeproto.PropertyGetCommand{Offset: off}
	if nvmeproto.PropertySize(off) == 8 {
		p.Attrib = nvmeproto.PropAttribSize8
	}
	r, err := c.admin1(ctx, "Property Get "+nvmeproto.PropertyName(off), func(cmd *nvmeproto.Command) { p.ToCommand(cmd) })
	if err != nil {
		return 0, err
	}
	return uint64(r.DW0) | uint64(r.dw1)<<32, nil
}

func (c *Controller) propSet(ctx context.Context, off uint32, v uint64) error {
	p := nvmeproto.PropertySetCommand{Offset: off, Value: v}
	if nvmeproto.PropertySize(off) == 8 {
		p.Attrib = nvmeproto.PropAttribSize8
	}
	_, err := c.admin1(ctx, "Property Set "+nvmeproto.PropertyName(off), func(cmd *nvmeproto.Command) { p.ToCommand(cmd) })
	return err
}

// keepAlive sends Keep Alive every KATO/2 until the controller stops; a failed or late
// Keep Alive fails the controller.
func (c *Controller) keepAlive() {
	defer c.bg.Done()
	t := time.NewTicker(c.kato / 2)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.kato)
		_, err := c.admin1(ctx, "Keep Alive", func(cmd *nvmeproto.Command) { *cmd = nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive} })
		cancel()
		if err != nil && !c.closing.Load() {
			c.fail(fmt.Errorf("initiator: keep alive failed: %w", err))
			return
		}
	}
}

// watchdog advances the controller clock and fails the controller when a command
// outlives its timeout.
func (c *Controller) watchdog() {
	defer c.bg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.stop:
			return
		}
		now := int64(time.Since(c.start))
		c.clock.Store(now)
		for _, q := range c.queues() {
			if desc := q.expired(now); desc != "" {
				c.fail(fmt.Errorf("%w: %s", ErrTimeout, desc))
				break
			}
		}
	}
}

// queues returns the admin queue and the I/O queues connected so far.
func (c *Controller) queues() []*queue {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	qs := make([]*queue, 0, 1+len(c.io))
	if c.admin != nil {
		qs = append(qs, c.admin)
	}
	return append(qs, c.io...)
}

// startAER configures asynchronous events and keeps one Asynchronous Event Request
// outstanding.
func (c *Controller) startAER(ctx context.Context) {
	const supported = nvmeproto.OAESNamespaceAttr | nvmeproto.OAESFirmwareActivation | nvmeproto.OAESANAChange | nvmeproto.OAESDiscoveryLogChange
	mask := c.id.OAES & supported
	if !c.disc {
		// The SMART / health critical warnings every I/O controller has (NVMe 1.3: bits
		// 4:0); a controller may refuse the others (nvmet and gonvmf do).
		mask |= nvmeproto.SMARTWarnSpare | nvmeproto.SMARTWarnTemperature | nvmeproto.SMARTWarnReliability |
			nvmeproto.SMARTWarnReadOnly | nvmeproto.SMARTWarnVolatileMem
	}
	if mask != 0 {
		sf := nvmeproto.SetFeaturesCommand{FID: nvmeproto.FIDAsyncEventConfig, CDW11: mask}
		if _, err := c.admin1(ctx, "Set Features (Asynchronous Event Configuration)", func(cmd *nvmeproto.Command) { sf.ToCommand(cmd) }); err != nil {
			c.log.Debug("asynchronous event configuration refused", "err", err)
		}
	}
	c.submitAER()
}

func (c *Controller) submitAER() {
	if c.closing.Load() {
		return
	}
	r := &Request{Op: opCommand, name: "Asynchronous Event Request", noTimeout: true, Done: c.onAER}
	r.cmd.Opcode = nvmeproto.OpAsyncEventRequest
	if err := c.admin.submit(context.Background(), r, true); err != nil {
		c.log.Debug("asynchronous event request not submitted", "err", err)
	}
}

// onAER runs on the admin completion goroutine: hand the event off, never block here.
func (c *Controller) onAER(r *Request) {
	if r.Err != nil {
		var se *StatusError
		if errors.As(r.Err, &se) && !c.closing.Load() {
			c.log.Debug("asynchronous event request failed", "err", r.Err)
		}
		return
	}
	ev := nvmeproto.AsyncEvent(r.DW0)
	c.bg.Add(1)
	go func() {
		ae, ok := c.handleAER(ev)
		// The callback runs outside bg: it may call Close, whose teardown waits for bg.
		// Close does not wait for it; only a callback due before Close began can run.
		c.bg.Done()
		if ok && c.opts.OnAsyncEvent != nil {
			c.opts.OnAsyncEvent(ae)
		}
	}()
}

// handleAER reads the event's log page (re-arming the event), rescans namespaces after a
// change notice and resubmits the Asynchronous Event Request. It reports whether the
// event is for the callback: false once the controller is closing.
func (c *Controller) handleAER(ev nvmeproto.AsyncEvent) (AsyncEvent, bool) {
	c.log.Info("asynchronous event", "event", ev.String())
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.AdminTimeout)
	defer cancel()
	ae := AsyncEvent{Event: ev}
	if lid := ev.LogPage(); lid != 0 && !c.closing.Load() {
		// Reading the log page (RAE clear) re-arms the event.
		size := 4096
		if lid == nvmeproto.LIDDiscovery {
			size = nvmeproto.DiscoveryLogHeaderSize
		}
		b := make([]byte, size)
		if err := c.GetLogPage(ctx, lid, nvmeproto.NSIDAll, 0, b); err != nil {
			c.log.Debug("reading the event's log page", "lid", lid, "err", err)
		} else if lid == nvmeproto.LIDChangedNSList {
			var l nvmeproto.ChangedNSList
			if l.Unmarshal(b) == nil {
				ae.Changed = l
			}
		}
		if lid == nvmeproto.LIDChangedNSList && !c.disc {
			if err := c.Rescan(ctx); err != nil {
				c.log.Warn("namespace rescan after a change notice failed", "err", err)
			}
		}
	}
	c.submitAER()
	return ae, !c.closing.Load()
}

// fail marks the controller failed and fails every queue.
func (c *Controller) fail(err error) {
	c.failMu.Lock()
	if c.err != nil {
		c.failMu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	c.failMu.Unlock()
	if !errors.Is(err, ErrClosed) {
		c.log.Error("controller failed", "err", err)
	}
	// I/O queues first: tearing the admin queue down makes the target drop the I/O
	// queues, and their commands should report this error, not that consequence.
	qs := c.queues()
	for i := len(qs) - 1; i >= 0; i-- {
		qs[i].fail(err)
	}
}

// queueFailed is called when a queue dies on its own.
func (c *Controller) queueFailed(err error) {
	if !c.closing.Load() {
		c.fail(err)
	}
}

// Err returns why the controller failed or ErrClosed after Close; nil while it works.
func (c *Controller) Err() error {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	return c.err
}

// Done is closed when the controller fails or is closed.
func (c *Controller) Done() <-chan struct{} { return c.done }

// Close shuts the controller down (Shutdown, bounded by the admin timeout) and frees
// everything. It is idempotent.
//
// After Close, GetBuffer and AllocBuffer fail with ErrClosed. Buffers still held, from the
// pool or dedicated (AllocBuffer), stay valid until released: the pool's memory and the
// transport they are registered with (on RDMA the protection domain and the device) are
// freed when the last of them is released, at once when none is out.
func (c *Controller) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.AdminTimeout, 30*time.Second))
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown refuses new I/O (IOQueue.Submit and the Namespace methods fail with
// ErrClosed), stops retries (an attempt that fails from now on ends the command with its
// status; a command waiting for a retry delay ends with ErrClosed), waits for outstanding
// I/O to complete (for at most half the time left before ctx's deadline, so the rest
// remains for the controller shutdown), disconnects
// the I/O queues, shuts the controller down (CC.SHN normal, then CSTS.SHST complete),
// disconnects the admin queue and frees the memory (see Close). It is idempotent.
func (c *Controller) Shutdown(ctx context.Context) error {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return nil
	}
	c.closed = true
	c.closeMu.Unlock()
	c.closing.Store(true)
	var err error
	if c.Err() == nil {
		// Let outstanding I/O finish (closing refuses new I/O, so resubmission does not
		// keep a queue busy), within half the time left: the rest is for CC.SHN.
		var drainEnd time.Time
		if dl, ok := ctx.Deadline(); ok {
			drainEnd = time.Now().Add(time.Until(dl) / 2)
		}
		for _, q := range c.io {
			// Commands waiting for a retry delay are not waited for: closing stops
			// retries, and the queue's teardown ends them with ErrClosed.
			for len(q.free)+int(q.waiting.Load()) < q.usable && !q.dead.Load() && ctx.Err() == nil && (drainEnd.IsZero() || time.Now().Before(drainEnd)) {
				time.Sleep(time.Millisecond)
			}
		}
		for _, q := range c.io {
			q.fail(ErrClosed)
			<-q.exited
		}
		err = c.shutdownController(ctx)
	}
	c.teardown()
	return err
}

// shutdownController sets CC.SHN and waits for CSTS.SHST complete.
func (c *Controller) shutdownController(ctx context.Context) error {
	v, err := c.propGet(ctx, nvmeproto.PropCC)
	if err != nil {
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	cc := nvmeproto.CC(v).WithSHN(nvmeproto.CCSHNNormal)
	if err := c.propSet(ctx, nvmeproto.PropCC, uint64(cc)); err != nil {
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	limit := 5 * time.Second
	if e := time.Duration(c.id.RTD3E) * time.Microsecond; e > limit {
		limit = min(e, 60*time.Second)
	}
	if err := c.waitCSTS(ctx, "shut down", limit, func(s nvmeproto.CSTS) bool { return s.SHST() == nvmeproto.CSTSSHSTComplete }); err != nil {
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	return nil
}

// teardown fails every queue, waits for their completion goroutines and frees the
// transport and memory (the pool's and the transport's once no pool buffer is out).
func (c *Controller) teardown() {
	c.closing.Store(true)
	c.fail(ErrClosed)
	close(c.stop)
	for _, q := range c.queues() {
		q.fail(ErrClosed)
		if q.tr != nil {
			<-q.exited
			q.tr.close()
		}
	}
	c.bg.Wait()
	c.releaseAuthBuffer()
	if c.pool == nil {
		c.closeTransport()
		return
	}
	// A caller may still hold a pool buffer (or be copying into one it got before
	// Close) or a dedicated buffer: the pool memory, and the transport they are
	// registered with, are freed when the last one is released.
	c.pool.close(func() {
		for _, r := range c.pool.regs {
			if err := r.release(); err != nil {
				c.log.Debug("releasing the buffer pool", "err", err)
			}
		}
		c.closeTransport()
	})
}

func (c *Controller) closeTransport() {
	if err := c.tr.close(); err != nil {
		c.log.Debug("closing the transport", "err", err)
	}
}

// ID returns the controller ID.
func (c *Controller) ID() uint16 { return c.cntlid }

// Identify returns the Identify Controller data read at connection time.
func (c *Controller) Identify() *nvmeproto.IdentifyController { return &c.id }

// CAP returns the Controller Capabilities property.
func (c *Controller) CAP() nvmeproto.CAP { return c.cap }

// Version returns the Version property.
func (c *Controller) Version() nvmeproto.VS { return c.vs }

// IsDiscovery reports whether this is a discovery controller.
func (c *Controller) IsDiscovery() bool { return c.disc }

// KeepAliveTimeout returns the KATO in use (0: no keep-alive).
func (c *Controller) KeepAliveTimeout() time.Duration { return c.kato }

// MaxTransferSize returns the largest data transfer of one command in bytes (MDTS).
func (c *Controller) MaxTransferSize() int { return c.maxXfer }

// InCapsuleDataSize returns the largest write sent inside the command capsule on I/O
// queues (0: in-capsule data not used).
func (c *Controller) InCapsuleDataSize() int { return c.icd }

// IOQueues returns the number of I/O queues.
func (c *Controller) IOQueues() int { return len(c.ioq) }

// IOQueue returns I/O queue i, 0 ≤ i < IOQueues() (queue ID i+1).
func (c *Controller) IOQueue(i int) *IOQueue { return c.ioq[i] }

// GetBuffer returns a buffer of n bytes (at most BufferChunkSize) from the controller's
// pool of registered memory, waiting for one while all are in use. After Close it fails
// with ErrClosed.
func (c *Controller) GetBuffer(ctx context.Context, n int) (*Buffer, error) {
	return c.pool.Get(ctx, n)
}

// BufferChunkSize returns the largest buffer GetBuffer hands out.
func (c *Controller) BufferChunkSize() int { return c.pool.ChunkSize() }

// AllocBuffer allocates n bytes of dedicated registered memory (page aligned; on RDMA
// pinned and registered with remote access: see the package documentation for what that
// exposes). Release frees it once no command uses it; it stays valid across Close until
// then (see Close). Once Close or Shutdown began it fails with an error wrapping
// ErrClosed; on a failed controller, with the controller's error.
func (c *Controller) AllocBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("initiator: dedicated buffer of %d bytes: want a positive size", n)
	}
	// A dedicated buffer is a user of the pool's gate, as a pool buffer is: the
	// transport it is registered with is closed after the last one is released, and
	// none is registered once the gate closed.
	if c.closing.Load() || !c.pool.users.Enter() {
		return nil, fmt.Errorf("initiator: dedicated buffer of %d bytes: %w", n, ErrClosed)
	}
	if err := c.Err(); err != nil {
		c.pool.leave()
		return nil, fmt.Errorf("initiator: dedicated buffer of %d bytes: %w", n, err)
	}
	reg, err := c.tr.newRegion(n)
	if err != nil {
		c.pool.leave()
		return nil, fmt.Errorf("initiator: dedicated buffer of %d bytes: %w", n, err)
	}
	size := int64(len(reg.mem))
	c.allocated.Add(size)
	free := reg.close
	reg.close = func() error {
		c.allocated.Add(-size)
		var err error
		if free != nil {
			err = free()
		}
		c.pool.leave()
		return err
	}
	b := &Buffer{reg: reg, b: reg.mem[:n:n]}
	b.refs.Store(1)
	return b, nil
}

// AllocatedBytes returns the size of the dedicated memory (AllocBuffer, page rounded on
// RDMA) not freed yet: a buffer counts until its last reference is dropped (Release, its
// Slices' Release, and the completion of every command that used it), also after Close.
// A count that does not return to its earlier value after the work that allocated is done
// is a leak.
func (c *Controller) AllocatedBytes() int64 { return c.allocated.Load() }

// AdminCommand runs an admin command and returns its completion. buf, if not nil, holds
// the data (direction from the opcode); CID, flags and SGL are set here. A completion with
// an error status is returned together with a *StatusError. When the command did not
// complete (ctx ended first, it could not be submitted) the Completion is zero. With a
// buf, AdminCommand returns only once the command has ended, also when ctx ends first,
// as Namespace.Read does: until then the controller may transfer into buf.
func (c *Controller) AdminCommand(ctx context.Context, cmd *nvmeproto.Command, buf *Buffer) (nvmeproto.Completion, error) {
	r := &Request{Op: opCommand, name: nvmeproto.AdminOpName(cmd.Opcode), cmd: *cmd, Buf: buf, dir: cmd.DataDirection(), ownBuf: buf != nil}
	completed, err := c.admin.execWait(ctx, r)
	if !completed {
		return nvmeproto.Completion{}, err // r may still complete later: do not read it
	}
	return nvmeproto.Completion{DW0: r.DW0, DW1: r.dw1, Status: r.Status}, err
}
