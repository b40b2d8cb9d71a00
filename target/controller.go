package target

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Controller constants reported in CAP and Identify Controller.
const (
	capTimeout       = 15 // CAP.TO in 500 ms units: 7.5 s for CSTS.RDY to follow CC.EN
	kas              = 1  // Identify KAS: keep-alive granularity in 100 ms units
	aerLimit         = 4  // Identify AERL+1: outstanding Asynchronous Event Requests
	abortLimit       = 4  // Identify ACL+1
	errorLogEntries  = 16
	maxChangedNSList = 1024
)

// rtd3e is Identify Controller RTD3E (µs): how long the host waits for CSTS.SHST to read
// complete after a shutdown notification. The shutdown (beginShutdown) drains the I/O
// queues and flushes every namespace's backend, which has no bound of its own: an rbd
// image with a large cache, or a file on a slow disk, can take longer than the 5 s the
// Linux host waits when RTD3E is 0 (nvme_core.shutdown_timeout). A host that gives up
// disconnects without learning whether the flush failed (CSTS.CFS). The Linux host uses
// RTD3E clamped to 5..60 s (nvme_init_identify), the Go initiator likewise: 60 s is the
// longest a host will wait, and a host polls CSTS, so a fast flush costs it nothing more.
const rtd3e = 60_000_000

// How long a reset or a shutdown waits for backends. A command cannot be taken back from
// a backend, and one that never returns (a hung network file system, an unreachable rbd
// cluster) must not keep the controller from answering its host: CSTS.RDY must clear
// within CAP.TO of CC.EN 1→0 (the Linux host polls (CAP.TO+1)/2 s, 8 s, then declares the
// controller dead and reconnects), and CSTS.SHST read complete within RTD3E of CC.SHN
// (the Linux host waits RTD3E clamped to 5..60 s). So a reset waits for the commands of
// the I/O queues it took at most the queue close timeout (WithQueueCloseTimeout) and
// never past resetLimit, two thirds into CAP.TO, which leaves the rest to the host's
// polls. A shutdown waits for them, then for every namespace's flush, each step at most
// the close timeout, and both together no longer than shutdownLimit, five sixths of
// RTD3E. Either then completes without what is still executing (see reset and
// finishShutdown).
const (
	resetLimit    = capTimeout * 500 * time.Millisecond * 2 / 3 // 5 s
	shutdownLimit = rtd3e * time.Microsecond * 5 / 6            // 50 s
)

// Command Retry Delay. A namespace being reopened answers Namespace Not Ready without DNR
// (see controller.unavailable); a host that enabled ACRE (Host Behavior Support, which
// the Linux host does when Identify Controller reports a non-zero CRDT1) gets a CRD with
// it and waits that CRDT before its retry; one that did not gets CRD 0, and the Linux
// host then retries at once. The Linux host retries such a command up to
// nvme_max_retries (5) times (nvme_decide_disposition, nvme_retry_req: the delay is
// crdt[CRD-1] × 100 ms, read from Identify Controller when it connects), so the 5
// delays a command gets are the time a reopen has before the error reaches the file
// system.
//
// A reopen starts with CRD 1 (CRDT1, 1 s): closing a file, block or rbd backend and
// opening it again takes milliseconds on healthy storage, and a command it catches waits
// at most a second longer. Once it has lasted reopenLongAfter (1.5 × CRDT1: a reopen
// shorter than that, as an rbd image's open on a healthy cluster, costs its commands at
// most one CRDT1; and the second retry of a command caught at its start is past it), or
// an automatic reopen's open has failed (it now waits for its backoff), the status
// carries CRD 2: CRDT2 is the auto_reopen policy's waits between all its opens spread
// over the 3 retries left (retryDelayLong), so that a command caught at the start — two
// retries after CRDT1, 3 after CRDT2 — is retried past the last of them. The price is
// that a command caught by a long reopen waits up to CRDT2 after the reopen ends. The opens' own time is not
// counted: an rbd open that waits for its connect timeout (30 s) each time outlasts it.
const (
	crdtReopen      = 10 // Identify Controller CRDT1, in 100 ms units
	crdReopen       = 1  // the CRD of Namespace Not Ready while a reopen is short: CRDT1
	crdReopenLong   = 2  // the CRD once it is long: CRDT2 (retryDelayLong)
	reopenLongAfter = crdtReopen * 100 * time.Millisecond * 3 / 2
	// longRetries are the retries of a command caught at a reopen's start that get CRDT2.
	longRetries = 3
)

// Asynchronous Event Configuration (feature 0Bh) bits this target implements.
const (
	aecNSAttr    = uint32(nvmeproto.AECNamespaceAttr)
	aecANA       = uint32(nvmeproto.AECANAChange)
	aecDiscovery = uint32(nvmeproto.AECDiscoveryLogChange)
)

// event is an asynchronous event kind.
type event struct {
	ae   nvmeproto.AsyncEvent
	aec  uint32 // enabling bit in Asynchronous Event Configuration
	mask uint32 // our masking bit: set when reported, cleared when the log page is read
}

var (
	eventNSChanged       = event{ae: nvmeproto.EventNamespaceAttrChanged, aec: aecNSAttr, mask: 1}
	eventDiscoveryChange = event{ae: nvmeproto.EventDiscoveryLogChange, aec: aecDiscovery, mask: 2}
	// Reservation notifications are masked per namespace by feature 82h, not by AEC.
	eventResvLog   = event{ae: nvmeproto.EventReservationLog, mask: 4}
	eventANAChange = event{ae: nvmeproto.EventANAChange, aec: aecANA, mask: 8}
)

// maskedEvents are the events that stay masked once reported until their log page is read.
var maskedEvents = []event{eventNSChanged, eventDiscoveryChange, eventResvLog, eventANAChange}

// controller is one NVMe controller: created by an admin-queue Connect, owning the
// queues connected to it and the state the host configures.
type controller struct {
	t       *Target
	subsys  *subsystem
	port    *Port
	cntlid  uint16
	hostNQN string
	hostID  [16]byte
	disc    bool
	auth    *ctrlAuth // nil: the host does not authenticate
	log     *slog.Logger
	created time.Time
	gone    chan struct{} // closed when it leaves its subsystem's table (removeController)

	adminWork workQueue // the admin worker (see execAdmin): runs adminStep

	kaSeen  atomic.Bool // a command arrived since the last keep-alive tick
	enabled atomic.Bool // CC.EN = 1 and CSTS.RDY = 1: admin commands are accepted
	wce     atomic.Bool // volatile write cache enabled (feature 06h)
	acre    atomic.Bool // advanced command retry enabled (feature 16h): statuses carry CRD
	// authBusy counts the Authentication Send/Receive commands of the controller's queues
	// queued for or running on an authentication worker; while it is not 0 the keep-alive
	// timer does not expire (see keepAliveTick).
	authBusy atomic.Int32

	mu         sync.Mutex
	cc         nvmeproto.CC
	csts       nvmeproto.CSTS
	queues     []*Queue // by qid; [0] is the admin queue
	ioQueues   int      // I/O queues granted by Number of Queues
	numQueues  uint32   // DW0 of the last Set Features Number of Queues (NSQA, NCQA); 0: none since reset
	resetGen   uint64   // bumped by every reset, to discard a stale reset's completion
	shutGen    uint64   // bumped by every shutdown notification and its withdrawal (SHN → 0)
	settling   []*Queue // I/O queues a reset or shutdown disconnected and waits for: their commands may still run
	abandoned  []*Queue // I/O queues a reset or shutdown gave up waiting for (see abandon); not waited for again
	resetting  bool     // EN went 1→0 and I/O queues are still draining
	shutdown   bool     // a shutdown was requested and no enable since
	dead       bool     // the admin queue is gone
	failReason error    // why the controller failed (CSTS.CFS), if it did

	kato     time.Duration // keep-alive timeout, 0 = none
	kaPeriod time.Duration // the timer's timeout: kato, or shutdownIdle(kato) after CC.SHN
	kaGen    uint64
	kaTimer  *time.Timer
	kaMiss   int

	arbitration uint32
	powerMgmt   uint32
	aec         uint32
	// The Timestamp feature reads tsBase plus the milliseconds since tsAt: the value the
	// host set (tsSet) and when, or 0 from the last Controller Level Reset (or creation).
	tsSet  bool
	tsBase uint64
	tsAt   time.Time

	aers      []*Request
	events    []event // raised while no AER was outstanding
	masked    uint32
	changedNS []uint32
	// changedGen counts the changes of changedNS; changedSnap is its value when the
	// Changed Namespace List was last read from offset 0 (see readConsumingLog).
	changedGen, changedSnap uint64

	errLog   [errorLogEntries]nvmeproto.ErrorInfoEntry
	errCount uint64

	resvLog     []nvmeproto.ResvNotifyLog // unread Reservation Notification log pages
	resvCount   uint64                    // the last log page count given
	resvMask    map[uint32]uint32         // Reservation Notification Mask by NSID
	resvMaskAll uint32                    // ... of namespaces not in resvMask
}

func newController(q *Queue, s *subsystem, hostNQN string, hostID [16]byte) *controller {
	c := &controller{
		t: q.t, subsys: s, port: q.port, hostNQN: hostNQN, hostID: hostID, disc: s.disc,
		created: time.Now(), gone: make(chan struct{}),
	}
	c.queues = make([]*Queue, q.t.tr.MaxIOQueues+1)
	c.adminWork.run = c.adminStep
	c.defaults()
	return c
}

// defaults sets the host-configurable state to its reset values. Called with mu held
// (or before the controller is published).
func (c *controller) defaults() {
	c.ioQueues = c.t.tr.MaxIOQueues
	if c.disc {
		c.ioQueues = 0
	}
	c.numQueues = 0
	c.arbitration = 0
	c.powerMgmt = 0
	c.aec = c.supportedAEC()
	c.tsSet, c.tsBase, c.tsAt = false, 0, time.Now()
	c.wce.Store(true)
	c.acre.Store(false)
	c.aers = nil
	c.events = nil
	c.masked = 0
	c.changedNS = nil
	c.resvLog = nil
	c.resvMask = nil
	c.resvMaskAll = 0
}

// supportedAEC is the notices the controller raises: its OAES, and the Asynchronous
// Event Configuration it starts with.
func (c *controller) supportedAEC() uint32 {
	if c.disc {
		return aecDiscovery
	}
	return aecNSAttr | aecANA
}

// aecSMART is the SMART / Health critical warnings (AEC bits 4:0) a host may enable on an
// I/O controller. Their events are mandatory; this controller never raises them (its
// SMART log has no critical warning), but accepts them, as nvmet does
// (NVMET_AEN_CFG_ALL): the SPDK host always enables them and, refused, configures no
// asynchronous events at all.
const aecSMART = uint32(nvmeproto.SMARTWarnSpare | nvmeproto.SMARTWarnTemperature | nvmeproto.SMARTWarnReliability |
	nvmeproto.SMARTWarnReadOnly | nvmeproto.SMARTWarnVolatileMem)

// settableAEC is the Asynchronous Event Configuration bits Set Features accepts.
func (c *controller) settableAEC() uint32 {
	if c.disc {
		return c.supportedAEC()
	}
	return c.supportedAEC() | aecSMART
}

// activity notes a command for traffic based keep-alive. It writes the shared flag only
// when it is clear, so busy queues on different CPUs do not fight over its cache line.
func (c *controller) activity() {
	if !c.kaSeen.Load() {
		c.kaSeen.Store(true)
	}
}

// Shutdown idle timeout: while a shutdown notification is in effect the keep-alive
// timeout is shutdownIdle(KATO) instead of KATO. The host that shut the controller down
// sends no more keep-alives, and the NVMe base specification has the controller disable
// the Keep Alive Timer from the time a shutdown is initiated (SPDK's nvmf_prop_set_cc
// stops it there), so an orderly shutdown must not end the controller: the host polls
// CSTS.SHST (commands, which reset the timer) and then disconnects (the Linux host at
// once). But a host that vanishes after its shutdown leaves a controller nothing else
// tears down (an idle RDMA queue pair to a dead host raises no error), so the timer still
// runs, with a timeout long beyond any shutdown sequence: shutdownIdleFactor times KATO,
// and at least shutdownIdleFactor times shutdownIdleFloor (a minute).
const shutdownIdleFactor = 4

var shutdownIdleFloor = 15 * time.Second

func shutdownIdle(kato time.Duration) time.Duration {
	return shutdownIdleFactor * max(kato, shutdownIdleFloor)
}

// startKeepAlive (re)arms the keep-alive timer for kato (0 disables it). Called with mu
// held. The timer ticks every period/2; two ticks in a row without a command (nor an
// authentication step queued or running: see keepAliveTick) expire it, so the controller
// fails between period and 1.5 period after the host's last command.
// The period is kato, or shutdownIdle(kato) while a shutdown notification is in effect
// (CC.SHN written and not withdrawn; see above). kato is kept: the period is kato again
// when CC.SHN returns to 0.
func (c *controller) startKeepAlive(kato time.Duration) {
	c.kato = kato
	c.kaGen++
	c.kaMiss = 0
	if c.kaTimer != nil {
		c.kaTimer.Stop()
		c.kaTimer = nil
	}
	if kato <= 0 || c.dead {
		return
	}
	c.kaPeriod = kato
	if c.cc.SHN() != nvmeproto.CCSHNNone {
		c.kaPeriod = shutdownIdle(kato)
	}
	c.kaSeen.Store(true)
	gen := c.kaGen
	c.kaTimer = time.AfterFunc(c.kaPeriod/2, func() { c.keepAliveTick(gen) })
}

func (c *controller) keepAliveTick(gen uint64) {
	c.mu.Lock()
	if gen != c.kaGen || c.dead {
		c.mu.Unlock()
		return
	}
	// Quiesced: the transport holds the host's commands back. authBusy: an authentication
	// step waits for an authentication slot or computes, and the host waits for its
	// answer, sending nothing meanwhile (the Linux host sends no Keep Alive while its
	// admin queue authenticates, inside its Connect); the wait for a slot has no bound
	// of its own (see auth.go), so it must not count against KATO.
	if c.kaSeen.Swap(false) || c.t.quiesced.Load() || c.authBusy.Load() > 0 {
		c.kaMiss = 0
	} else {
		c.kaMiss++
	}
	if c.kaMiss < 2 {
		c.kaTimer.Reset(c.kaPeriod / 2)
		c.mu.Unlock()
		return
	}
	kato, period, shut := c.kato, c.kaPeriod, c.cc.SHN() != nvmeproto.CCSHNNone
	c.mu.Unlock()
	if shut {
		c.log.Warn("no command since the controller's shutdown for longer than the shutdown idle timeout: the host is gone; tearing the controller down",
			"kato", kato, "timeout", period)
		c.fail(ErrShutdownIdle)
		return
	}
	c.log.Warn("keep alive timeout expired: failing the controller", "kato", kato)
	c.fail(ErrKeepAliveExpired)
}

// roundKATO converts a host's KATO in milliseconds to the timer value: rounded up to
// the KAS granularity.
func roundKATO(ms uint32) time.Duration {
	return time.Duration(nvmeproto.RoundKATO(ms, kas)) * time.Millisecond
}

// subsysRemoved reports whether c's subsystem is no longer the one registered under its
// NQN: RemoveSubsystem took it out of the target's table (its controllers' commands may
// still be in its namespaces' backends), and a subsystem added again with the NQN hands
// out controller IDs from the start of its range, c's among them.
func (c *controller) subsysRemoved() bool {
	return c.t.subsystem(c.subsys.nqn) != c.subsys
}

// fail is a fatal controller error: CSTS.CFS is set and every queue is disconnected.
func (c *controller) fail(reason error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.csts |= nvmeproto.CSTSBitCFS
	c.enabled.Store(false)
	if c.failReason == nil {
		c.failReason = reason
	}
	qs := c.liveQueues(1)
	admin := c.queues[0]
	c.mu.Unlock()
	c.log.Warn("controller failed", "reason", reason)
	for _, q := range qs {
		q.disconnect(reason)
	}
	if admin != nil {
		admin.disconnect(reason)
	}
}

// liveQueues returns the connected queues with qid >= from. Called with mu held.
func (c *controller) liveQueues(from int) []*Queue {
	var qs []*Queue
	for _, q := range c.queues[from:] {
		if q != nil {
			qs = append(qs, q)
		}
	}
	return qs
}

// adminQueueClosed ends the controller: the association is gone.
func (c *controller) adminQueueClosed() {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.enabled.Store(false)
	c.kaGen++
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	aers := c.aers
	c.aers = nil
	qs := c.liveQueues(1)
	reason := ErrAdminQueueGone
	if c.failReason != nil {
		reason = c.failReason
	}
	c.mu.Unlock()
	for _, r := range aers {
		r.q.finish(r, nvmeproto.StatusAbortSQDeletion)
	}
	for _, q := range qs {
		q.disconnect(reason)
	}
	c.subsys.removeController(c)
	c.log.Info("controller destroyed")
}

// queueClosed removes a closed queue from the queue table.
func (c *controller) queueClosed(q *Queue, qid uint16) {
	c.mu.Lock()
	if int(qid) < len(c.queues) && c.queues[qid] == q {
		c.queues[qid] = nil
	}
	c.mu.Unlock()
}

// setCC applies a host write of CC: enable, reset (EN 1→0) and shutdown notifications.
func (c *controller) setCC(v nvmeproto.CC) {
	c.mu.Lock()
	old := c.cc
	c.cc = v
	var after []func()
	if v.EN() && !old.EN() && !c.resetting {
		c.enable(v)
	}
	if !v.EN() && old.EN() {
		after = append(after, c.reset())
	}
	if v.SHN() != nvmeproto.CCSHNNone && old.SHN() == nvmeproto.CCSHNNone {
		c.startKeepAlive(c.kato) // the shutdown idle timeout
		after = append(after, c.beginShutdown())
	}
	if v.SHN() == nvmeproto.CCSHNNone && old.SHN() != nvmeproto.CCSHNNone {
		c.shutGen++ // a shutdown still draining does not report complete
		c.csts = c.csts.WithSHST(nvmeproto.CSTSSHSTNormal)
		c.startKeepAlive(c.kato)
	}
	c.mu.Unlock()
	for _, f := range after {
		f()
	}
}

// enable checks the host's configuration and sets CSTS.RDY, or CSTS.CFS when the
// configuration is one this controller cannot run. Called with mu held.
func (c *controller) enable(v nvmeproto.CC) {
	bad := ""
	switch {
	case v.MPS() != 0:
		bad = "MPS (only 4 KiB pages)"
	case v.AMS() != nvmeproto.CCAMSRoundRobin:
		bad = "AMS (only round robin)"
	case v.CSS() != nvmeproto.CCCSSNVM:
		bad = "CSS (only the NVM command set)"
	case !c.disc && v.IOSQES() != nvmeproto.IOSQESNVM:
		bad = "IOSQES (must be 6: 64-byte SQEs)"
	case !c.disc && v.IOCQES() != nvmeproto.IOCQESNVM:
		bad = "IOCQES (must be 4: 16-byte CQEs)"
	}
	if bad != "" {
		c.csts |= nvmeproto.CSTSBitCFS
		c.log.Warn("controller enable refused: unsupported CC field; setting CSTS.CFS", "field", bad, "cc", v.String())
		return
	}
	c.csts = c.csts.WithRDY(true)
	c.shutdown = false
	c.enabled.Store(true)
	c.log.Debug("controller enabled", "cc", v.String())
}

// takeIOQueues takes the I/O queues out of the queue table for a reset or shutdown:
// it returns them (to disconnect) and every queue a reset or shutdown took that may still
// have commands in flight, these included (to wait for), except those a reset or shutdown
// already gave up waiting for (abandoned). A reset and a shutdown written together, or
// one while the other drains, thus both wait for all of them. Called with mu held.
func (c *controller) takeIOQueues() (qs, wait []*Queue) {
	qs = c.liveQueues(1)
	for i := 1; i < len(c.queues); i++ {
		c.queues[i] = nil
	}
	c.settling = slices.DeleteFunc(c.settling, (*Queue).isDrained)
	c.abandoned = slices.DeleteFunc(c.abandoned, (*Queue).isDrained)
	c.settling = append(c.settling, qs...)
	return qs, slices.Clone(c.settling)
}

// abandon moves the queues of wait that still have commands in flight from settling to
// abandoned, once a reset or shutdown has waited its limit for them: a later reset does
// not wait for them again (nor log them again), and a later shutdown counts them without
// waiting (finishShutdown). Called with mu held.
func (c *controller) abandon(wait []*Queue) {
	for _, q := range wait {
		if i := slices.Index(c.settling, q); i >= 0 && !q.isDrained() {
			c.settling = slices.Delete(c.settling, i, i+1)
			c.abandoned = append(c.abandoned, q)
		}
	}
}

// stuckIO is what a reset or shutdown left executing: the queues that still had commands
// in flight when its wait ended, how many commands, and the namespaces of the data
// commands among them.
type stuckIO struct {
	queues, commands int
	nsids            []uint32
}

// logAttrs are the attributes of stuckIO's log line.
func (s stuckIO) logAttrs(waited time.Duration) []any {
	return []any{"queues", s.queues, "commands", s.commands, "nsids", s.nsids, "waited", waited}
}

// waitDrained waits until no queue of qs has a command in flight, at most limit, and
// returns what was still in flight then.
func waitDrained(qs []*Queue, limit time.Duration) stuckIO {
	t := time.NewTimer(limit)
	defer t.Stop()
	for i, q := range qs {
		select {
		case <-q.drained:
			continue
		case <-t.C:
		}
		return stuckOf(qs[i:])
	}
	return stuckIO{}
}

// stuckOf returns what the queues of qs still have in flight.
func stuckOf(qs []*Queue) (s stuckIO) {
	for _, q := range qs {
		if !q.isDrained() {
			s.queues++
			s.commands += q.users.Users()
			s.nsids = q.busyNSIDs(s.nsids)
		}
	}
	return s
}

// reset handles CC.EN 1→0: outstanding asynchronous event requests are aborted, I/O
// queues are disconnected, and once their commands in flight have completed (those of a
// shutdown's queues too) CSTS.RDY clears.
//
// The wait is bounded (min(close timeout, resetLimit)): once it has passed with commands
// still executing in a backend, the reset completes without them, logged at Error with
// how many there are, and abandons their queues: no later reset or shutdown of the
// controller waits for them again (see abandon). The queues are detached: a late
// completion reaches no host (the RDMA engine drops the completions of a torn-down
// connection) and changes nothing of the controller's state (see Queue.recordError; it
// counts in its namespace's statistics), and each such queue keeps its place in the
// limits until its last command completes (Queue.Close). CSTS.CFS is not set: a reset
// ends the commands outstanding without completing them (the host expects no completion
// for them), and the controller is sound — it serves the other namespaces, and the hung
// one once its backend answers. nvmet likewise sets CFS only for a fatal error, never at
// a reset (it clears RDY at once, without waiting for the queues at all).
//
// Called with mu held; the returned function runs after unlocking.
func (c *controller) reset() func() {
	c.enabled.Store(false)
	c.resetGen++
	gen := c.resetGen
	qs, wait := c.takeIOQueues()
	aers := c.aers
	c.defaults()
	c.resetting = true
	if len(wait) == 0 {
		c.resetDone()
	}
	c.log.Info("controller reset", "io_queues", len(qs))
	return func() {
		for _, r := range aers {
			r.q.finish(r, nvmeproto.StatusAbortSQDeletion)
		}
		for _, q := range qs {
			q.disconnect(ErrControllerReset)
		}
		if len(wait) == 0 {
			return
		}
		go func() {
			limit := min(c.t.closeTimeout, resetLimit)
			s := waitDrained(wait, limit)
			if s.queues > 0 {
				c.log.Error("controller reset: commands of its I/O queues still executing in a backend at the reset's time limit; "+
					"CSTS.RDY clears without them, and their queues count against the limits until they complete",
					s.logAttrs(limit)...)
			}
			c.mu.Lock()
			if s.queues > 0 {
				c.abandon(wait)
			}
			if c.resetGen == gen {
				c.resetDone()
			}
			c.mu.Unlock()
		}()
	}
}

// resetDone finishes a reset: CSTS.RDY clears, and an enable written meanwhile takes
// effect. With a shutdown notification still written (CC.SHN), its status (SHST, and CFS
// if its flush failed) stays: a host that wrote EN=0 with SHN waits for SHST complete.
// Otherwise CSTS reads 0. Called with mu held.
func (c *controller) resetDone() {
	c.resetting = false
	keep := nvmeproto.CSTS(0)
	if c.cc.SHN() != nvmeproto.CCSHNNone {
		keep = keep.WithSHST(c.csts.SHST()) | c.csts&nvmeproto.CSTSBitCFS
	}
	c.csts = keep
	if c.cc.EN() {
		c.enable(c.cc)
	}
}

// beginShutdown handles a shutdown notification: I/O queues are disconnected, their
// commands drain, every namespace's backend is flushed, then CSTS.SHST reads complete
// (finishShutdown). Called with mu held; the returned function runs after unlocking.
func (c *controller) beginShutdown() func() {
	c.csts = c.csts.WithSHST(nvmeproto.CSTSSHSTOccurring)
	c.shutdown = true
	c.shutGen++
	gen := c.shutGen
	qs, wait := c.takeIOQueues()
	earlier := slices.Clone(c.abandoned)
	c.log.Info("controller shutdown", "io_queues", len(qs))
	return func() {
		for _, q := range qs {
			q.disconnect(ErrControllerShutdown)
		}
		go c.finishShutdown(gen, wait, earlier)
	}
}

// finishShutdown waits for the commands of the queues in wait (also those of a reset still
// draining: their writes count), flushes every namespace, and reports SHST complete,
// unless shutdown notification gen was withdrawn meanwhile. The queues of earlier are
// those an earlier reset or shutdown of the controller gave up waiting for (abandoned):
// they are not waited for again.
//
// Each of the two waits is bounded by the close timeout, and both together by
// shutdownLimit, so that SHST reads complete before the host gives up. A shutdown that
// did not get its namespaces to a quiescent, durable state reports it, not only logs it:
// CSTS.CFS is set with SHST complete (shutdown processing is over, and it failed: the
// host must not assume its data is on stable storage) when a flush failed — a sync
// failure also fails the namespace (see namespace.fail), so the next association finds
// writes and flushes refused rather than a clean state — when a flush was still running
// at the limit, or when commands were still executing in a backend: those of wait at
// the limit, and those of earlier when the flush begins. Writes among them may reach
// the media after SHST reads complete, and no flush covered them —
// also those an earlier reset left (a reset reports nothing of them to the host, and the
// host may have written the same blocks again since), so they set CFS without being
// waited for again, logged at Warn (the reset that left them logged them at Error).
func (c *controller) finishShutdown(gen uint64, wait, earlier []*Queue) {
	start := time.Now()
	limit := min(c.t.closeTimeout, shutdownLimit)
	stuck := waitDrained(wait, limit)
	if stuck.queues > 0 {
		c.log.Error("controller shutdown: commands of its I/O queues still executing in a backend at the close timeout; "+
			"flushing without them, and the shutdown completes with CSTS.CFS",
			stuck.logAttrs(limit)...)
		c.mu.Lock()
		c.abandon(wait)
		c.mu.Unlock()
	}
	// Looked at before the flush: a command an earlier reset left that completes while the
	// flush runs may have written after the flush began, and nothing covers it.
	left := stuckOf(earlier)
	failed, unflushed := c.flushNamespaces(min(c.t.closeTimeout, shutdownLimit-time.Since(start)))
	if len(unflushed) > 0 {
		c.log.Error("controller shutdown: flushing namespaces did not finish in time; the shutdown completes with CSTS.CFS",
			"nsids", unflushed, "waited", time.Since(start).Round(time.Millisecond))
	}
	if left.queues > 0 {
		c.log.Warn("controller shutdown: commands an earlier reset or shutdown left executing in a backend still execute; "+
			"not waited for again, and the shutdown completes with CSTS.CFS",
			"queues", left.queues, "commands", left.commands, "nsids", left.nsids)
	}
	c.mu.Lock()
	if c.shutGen == gen {
		c.csts = c.csts.WithSHST(nvmeproto.CSTSSHSTComplete)
		if failed || len(unflushed) > 0 || stuck.queues > 0 || left.queues > 0 {
			c.csts |= nvmeproto.CSTSBitCFS
		}
	}
	c.mu.Unlock()
}

// flushNamespaces flushes every namespace of the subsystem, concurrently (a hung backend
// does not hold up the other namespaces' flushes), waiting at most limit (flushAll). It
// reports whether a flush failed (each failure is logged) and the NSIDs whose flush was
// still running at the limit; those go on until their backend returns.
func (c *controller) flushNamespaces(limit time.Duration) (failed bool, unfinished []uint32) {
	nss := c.subsys.namespaces()
	for i, o := range flushAll(nss, limit, false) {
		switch {
		case !o.done:
			unfinished = append(unfinished, nss[i].nsid)
		case o.err != nil:
			failed = true
			c.log.Error("flushing namespace at shutdown failed: reporting CSTS.CFS with the shutdown", "nsid", nss[i].nsid, "err", o.err)
		}
	}
	return failed, unfinished
}

// namespaceChanged records nsid in the Changed Namespace List and raises a Namespace
// Attribute Changed event.
func (c *controller) namespaceChanged(nsid uint32) {
	if c.disc {
		return
	}
	c.mu.Lock()
	// An NSID already listed changes nothing, even in a full list; one more than the list
	// holds turns it into the single entry FFFFFFFFh (more than 1024 changed), as in
	// nvmet_add_to_changed_ns_log.
	if len(c.changedNS) != 1 || c.changedNS[0] != 0xFFFFFFFF {
		i, found := slices.BinarySearch(c.changedNS, nsid)
		switch {
		case found:
		case len(c.changedNS) >= maxChangedNSList:
			c.changedNS = []uint32{0xFFFFFFFF}
			c.changedGen++
		default:
			c.changedNS = slices.Insert(c.changedNS, i, nsid)
			c.changedGen++
		}
	}
	c.mu.Unlock()
	c.raiseEvent(eventNSChanged)
}

// raiseEvent reports an asynchronous event: it completes an outstanding Asynchronous
// Event Request, or is kept until one arrives. Events the host disabled, or reported and
// not yet acknowledged by reading their log page, are not reported again.
func (c *controller) raiseEvent(ev event) {
	c.mu.Lock()
	if c.dead || ev.aec != 0 && c.aec&ev.aec == 0 || c.masked&ev.mask != 0 {
		c.mu.Unlock()
		return
	}
	c.masked |= ev.mask
	var r *Request
	if len(c.aers) > 0 {
		r = c.aers[0]
		c.aers = slices.Delete(c.aers, 0, 1)
	} else {
		c.events = append(c.events, ev)
	}
	c.mu.Unlock()
	if r != nil {
		c.log.Debug("asynchronous event", "event", ev.ae.String())
		r.CQE.DW0 = uint32(ev.ae)
		r.q.finish(r, nvmeproto.StatusSuccess)
	}
}

// logRead unmasks the event tied to a log page once the host has read it (without RAE).
func (c *controller) logRead(lid nvmeproto.LID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unmaskLocked(lid)
}

// unmaskLocked is logRead, called with mu held.
func (c *controller) unmaskLocked(lid nvmeproto.LID) {
	for _, ev := range maskedEvents {
		if ev.ae.LogPage() == lid {
			c.masked &^= ev.mask
		}
	}
}

// recordError adds a failed command to the Error Information log.
func (c *controller) recordError(sqid uint16, r *Request, st nvmeproto.Status) {
	c.mu.Lock()
	c.errCount++
	e := &c.errLog[c.errCount%errorLogEntries]
	*e = nvmeproto.ErrorInfoEntry{ErrorCount: c.errCount, SQID: sqid, CID: r.Cmd.CID, Status: st,
		ParamErrorLocation: 0xFFFF, NSID: r.Cmd.NSID}
	switch r.Cmd.Opcode {
	case nvmeproto.OpRead, nvmeproto.OpWrite, nvmeproto.OpCompare, nvmeproto.OpWriteZeroes:
		if sqid != 0 {
			e.LBA = uint64(r.Cmd.CDW11)<<32 | uint64(r.Cmd.CDW10)
		}
	}
	c.mu.Unlock()
}

// timestamp returns the Timestamp feature value in milliseconds and whether the host set
// it (otherwise it counts from the last Controller Level Reset). Called with mu held.
func (c *controller) timestamp(now time.Time) (uint64, bool) {
	return c.tsBase + uint64(now.Sub(c.tsAt).Milliseconds()), c.tsSet
}
