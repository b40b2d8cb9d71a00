package target

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gonvmf/gonvmf/conf"
)

// Errors of the limits (conf.Limits) the core enforces.
var (
	// ErrTooManyQueues: Port.NewQueue refused a queue because the target holds
	// limits.max_queues already. A transport rejects the connection (RDMA: NO_RSC).
	ErrTooManyQueues = errors.New("target: too many queues")
	// ErrConnectTimeout: the queue did not complete a Fabrics Connect within
	// limits.connect_timeout of its creation; the core disconnects it.
	ErrConnectTimeout = errors.New("target: no Connect within the connect timeout")
)

// DefaultQueueCloseTimeout is how long Queue.Close waits for the commands still executing
// on a closing queue (see WithQueueCloseTimeout).
const DefaultQueueCloseTimeout = 30 * time.Second

// WithQueueCloseTimeout bounds how long Queue.Close waits for commands still executing
// (a backend request that never completes: a hung disk or network file system). After it
// Close logs the commands left and returns; they complete later or never, and until they
// do the transport keeps the memory they use and the queue counts against the limits
// (Target.StuckQueues; default DefaultQueueCloseTimeout).
// Closing a namespace (RemoveNamespace, ReopenNamespace, Close) waits as long for its
// commands, then goes on — Close returns an error wrapping ErrNamespaceBusy — and leaves
// its backend open until they complete. A Reservation Acquire with Preempt and Abort waits
// as long for the preempted hosts' commands to its namespace, then fails with Internal
// Error. A controller reset (CC.EN 1→0) waits as long, and at most 5 s (CAP.TO is 7.5 s),
// for the commands of its I/O queues, then clears CSTS.RDY without them; a shutdown
// (CC.SHN) as long for them and again for its namespaces' flushes, together at most 50 s
// (RTD3E is 60 s), then reports SHST complete, with CSTS.CFS if it left either. The
// target's stop (Flush) waits as long for its namespaces' flushes, run concurrently, and
// the closes after it do not wait again for a backend whose flush it left executing.
func WithQueueCloseTimeout(d time.Duration) Option { return func(t *Target) { t.closeTimeout = d } }

// Limits returns the resolved limits (the configuration's limits section) the target and
// its transports enforce. They do not change while the Target runs.
func (t *Target) Limits() conf.Limits { return t.lim }

// admission counts what hosts hold against the limits: queues in total, and controllers
// and connected queues per host NQN. A queue counts from Port.NewQueue (its host's part
// from its Connect) until it has closed and its last command has completed
// (Queue.settle): a closed queue whose commands are still executing in a backend (stuck)
// still holds what they use — the transport's buffers, the backend's requests — so it
// keeps its place, and a host that reconnects again and again to a hung backend runs into
// its limits instead of piling up such queues for everyone.
type admission struct {
	mu     sync.Mutex
	queues int // queues created by Port.NewQueue and not yet settled
	stuck  int // of those, closed queues that wait for commands still executing
	hosts  map[string]*hostUse
}

// hostUse is what one host NQN holds.
type hostUse struct {
	ctrls, queues int
	stuck         int // of queues, closed ones that wait for commands still executing
}

// takeQueue counts a new queue against limits.max_queues. Refused, it returns how many
// of the queues the target holds are stuck.
func (t *Target) takeQueue() (ok bool, stuck int) {
	a := &t.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.queues >= t.lim.MaxQueues {
		return false, a.stuck
	}
	a.queues++
	return true, 0
}

// releaseQueue undoes takeQueue for a queue that never served a command.
func (t *Target) releaseQueue() {
	a := &t.adm
	a.mu.Lock()
	a.queues--
	a.mu.Unlock()
}

// noteStuck counts a closed queue of host ("": not connected) whose commands are still
// executing as stuck; it returns the stuck queues of the target and of the host.
func (t *Target) noteStuck(host string) (total, ofHost int) {
	a := &t.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stuck++
	if u := a.hosts[host]; u != nil && host != "" {
		u.stuck++
		ofHost = u.stuck
	}
	return a.stuck, ofHost
}

// settleQueue gives back what a closed queue whose commands have all completed held:
// its place in limits.max_queues, its host's queue (and controller, for an admin queue)
// when it was connected (b), and its count as stuck when noteStuck(stuckHost) counted it.
// It returns the stuck queues left.
func (t *Target) settleQueue(b *binding, stuck bool, stuckHost string) (stuckLeft int) {
	a := &t.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queues--
	if stuck {
		a.stuck--
		if u := a.hosts[stuckHost]; u != nil && stuckHost != "" {
			u.stuck--
		}
	}
	if b != nil {
		t.hostReleaseLocked(b.ctrl.hostNQN, b.qid == 0)
	}
	return a.stuck
}

// QueueCount returns the number of queues the target holds: created and not yet closed,
// and closed ones whose commands are still executing (StuckQueues).
func (t *Target) QueueCount() int {
	t.adm.mu.Lock()
	defer t.adm.mu.Unlock()
	return t.adm.queues
}

// StuckQueues returns the number of closed queues whose commands are still executing in a
// backend (Queue.Close gave up waiting for them). Each still counts against
// limits.max_queues and its host's limits until its last command completes.
func (t *Target) StuckQueues() int {
	t.adm.mu.Lock()
	defer t.adm.mu.Unlock()
	return t.adm.stuck
}

// stuckNote says, for a refusal, how many of the queues counted are stuck.
func stuckNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d of them closed but still counted until the commands they left executing in a backend complete", n)
}

// hostTake counts a controller (ctrl) and a connected queue for host against the
// per-host limits; it returns what is over the limit ("" when admitted).
func (t *Target) hostTake(host string, ctrl bool) string {
	a := &t.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.hosts[host]
	if u == nil {
		u = &hostUse{}
	}
	switch {
	case ctrl && u.ctrls >= t.lim.MaxControllersPerHost:
		return fmt.Sprintf("the host has %d controllers, limits.max_controllers_per_host (raise it if the host needs more)%s", u.ctrls, stuckNote(u.stuck))
	case u.queues >= t.lim.MaxQueuesPerHost:
		return fmt.Sprintf("the host has %d queues, limits.max_queues_per_host (raise it if the host needs more)%s", u.queues, stuckNote(u.stuck))
	}
	if a.hosts == nil {
		a.hosts = make(map[string]*hostUse)
	}
	a.hosts[host] = u
	u.queues++
	if ctrl {
		u.ctrls++
	}
	return ""
}

// hostRelease undoes hostTake.
func (t *Target) hostRelease(host string, ctrl bool) {
	t.adm.mu.Lock()
	defer t.adm.mu.Unlock()
	t.hostReleaseLocked(host, ctrl)
}

// hostReleaseLocked is hostRelease with adm.mu held.
func (t *Target) hostReleaseLocked(host string, ctrl bool) {
	a := &t.adm
	u := a.hosts[host]
	if u == nil {
		return
	}
	u.queues--
	if ctrl {
		u.ctrls--
	}
	if u.queues <= 0 && u.ctrls <= 0 {
		delete(a.hosts, host)
	}
}

// hostQueuesLeft is how many more queues host may connect.
func (t *Target) hostQueuesLeft(host string) int {
	a := &t.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	if u := a.hosts[host]; u != nil {
		n = u.queues
	}
	return max(t.lim.MaxQueuesPerHost-n, 0)
}

// HostUsage returns the controllers and queues host holds: connected ones, and closed
// ones whose commands are still executing (see StuckQueues).
func (t *Target) HostUsage(host string) (ctrls, queues int) {
	a := &t.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	if u := a.hosts[host]; u != nil {
		return u.ctrls, u.queues
	}
	return 0, 0
}

// keepAlive returns the keep-alive timeout in effect for a host's KATO of ms
// milliseconds: rounded up to the keep-alive granularity, then clamped to the limits;
// KATO 0 (the specification's "keep alive disabled") is transport.keep_alive_timeout,
// so that the controller of a host that vanished is reclaimed all the same.
func (t *Target) keepAlive(ms uint32) time.Duration {
	if ms == 0 {
		return t.tr.KeepAliveTimeout
	}
	return min(max(roundKATO(ms), t.lim.MinKeepAliveTimeout), t.lim.MaxKeepAliveTimeout)
}

// startConnectTimer disconnects q if it has not completed a Connect within
// limits.connect_timeout.
func (q *Queue) startConnectTimer() {
	d := q.t.lim.ConnectTimeout
	q.connectTimer = time.AfterFunc(d, func() {
		if q.bind.Load() != nil || q.closing() {
			return
		}
		q.connectMu.Lock()
		peer := q.peer
		q.connectMu.Unlock()
		if ok, n := q.t.refusals.Allow("connect-timeout " + peer); ok {
			q.log.Warn("queue sent no Connect in time: disconnecting", "peer", peer, "port", q.port.id,
				"connect_timeout", d, "suppressed", n)
		}
		q.t.rejects.add(RejectConnectTimeout)
		q.disconnect(ErrConnectTimeout)
	})
}

// stopConnectTimer stops the timer once the queue is bound or closing.
func (q *Queue) stopConnectTimer() {
	if q.connectTimer != nil {
		q.connectTimer.Stop()
	}
}

// SetPeer names the host's end of the queue (an address) in the core's log lines about
// the queue before its Connect names the host, and keys their rate limit.
func (q *Queue) SetPeer(peer string) {
	q.connectMu.Lock()
	q.peer = peer
	q.connectMu.Unlock()
}

// ExpectQID tells the core the queue ID the transport connected the queue as (RDMA: the
// qid of the CM private data, which sized the queue and chose its buffers): a Connect
// naming another queue ID is refused with Invalid Parameters (SQE, QID). Call it before
// the queue's first command.
func (q *Queue) ExpectQID(qid uint16) { q.expectQID = int32(qid) }
