// Package target is the transport-independent NVMe over Fabrics controller: subsystems
// and namespaces from the configuration, the discovery subsystem, controllers created by
// Connect, controller properties and state (CC/CSTS, reset, shutdown, keep-alive),
// admin commands (Identify, Get Log Page, Set/Get Features, Asynchronous Event Request,
// Keep Alive, Abort) and NVM I/O commands (Read, Write, Flush, Write Zeroes, Dataset
// Management, Compare) executed on backend executors, reservations (Reservation
// Register, Acquire, Release, Report; the notification log page and features; Persist
// Through Power Loss in the configuration's state file — see reservation.go), and
// Asymmetric Namespace Access (ANA) states per port (see ana.go).
//
// Transports (RDMA; TCP later; the in-process loop transport in target/loop) own
// connections and data movement; this package owns command semantics. The two meet at
// Port, Queue, Request and TransportQueue.
//
// # Building a target
//
//	t, err := target.New(cfg)             // *conf.Config, resolved into a private copy; opens every namespace's backend
//	port, err := t.AddPort(target.PortConfig{TrType: target.TrTypeRDMA, AdrFam: target.AdrFamIPv4,
//	        TrAddr: "10.99.0.1", TrSvcID: "4420", Advertise: true, Keyed: true,
//	        InCapsuleDataSize: t.TransportConfig().InCapsuleDataSize, MaxSGLDescriptors: 1})
//	...
//	t.AddNamespace(nqn, ns) / t.InsertNamespace / t.RemoveNamespace(nqn, nsid) / t.ResizeNamespace / t.SetNamespaceReadOnly
//	t.AddSubsystem / t.InsertSubsystem / t.RemoveSubsystem / t.SetAllowedHosts / t.AllowHost / t.DenyHost
//	t.SetHostKeys / t.RemoveHostKeys / t.SetAuthRequired   // in-band authentication (auth.go)
//	r, err := t.ReadHostKeys(host, ch); r.Apply()          // SetHostKeys in two halves: read the secrets, then apply
//	                                                       // (a caller with a lock of its own takes it for Apply only)
//	t.Controllers() / t.Namespaces()      // inspection snapshots (hosts, queues; capacity, I/O counters)
//	t.Subsystems() / t.ConnectRejects()   // connections per subsystem, refused queues by reason
//	t.Config()                            // the running configuration, changes included
//	t.Close()
//
// Package target/server does this for a whole configuration — the target, and a transport
// endpoint for each listener — and is where gonvmf turns a configuration into running
// objects. The Target keeps the resolved configuration it runs: transports take their
// settings from it (TransportConfig, MaxTransferSize, Port.Limits) and never resolve
// defaults of their own, and run-time changes are validated by the conf package against it.
//
// Run-time changes are atomic (validated against the running configuration, applied whole
// or not at all) and tell hosts what changed: namespace changes raise Namespace Attribute
// Changed with the Changed Namespace List, subsystem and host changes the Discovery Log
// Page Change event with a new generation counter; a host taken off a subsystem's list is
// disconnected from it. Commands for a removed namespace get Invalid Namespace with DNR;
// those that meet a namespace ReopenNamespace is reopening get Namespace Not Ready
// without DNR, which hosts retry; such a namespace stays in the Active Namespace ID list,
// described as before (CNS 08h NSTAT: not ready), so that a host's rescan keeps it. I/O
// controllers report CRDT1 (1 s) and CRDT2 (the auto_reopen policy's waits over 3
// retries) in Identify Controller and implement Host Behavior Support (feature 16h); once
// a host has enabled ACRE there the status carries CRD 1, or CRD 2 when the reopen has
// lasted over 1.5 s or an automatic reopen's open failed, and the Linux host waits that
// delay before each of its 5 retries (see crdReopenLong). A backend that learns of a new size of its own store (an image
// resized elsewhere) reports it with ResizeNamespace(nqn, nsid, 0). A backend that its
// storage has fenced off (backend.ErrNeedsReopen: an rbd image whose RADOS client the
// cluster blocklisted), reported by a command's error or by the backend itself
// (Spec.OnNeedsReopen), is reopened by the target as ReopenNamespace would, with bounded
// retries and backoff (the configuration's auto_reopen, conf.AutoReopen, which
// SetAutoReopen changes; autoreopen.go): the host retries the failed command and those
// meanwhile (Namespace Not Ready), and they succeed on the new backend with no operator
// involved. A namespace has one reopen at a time: an operator's (ReopenNamespace, new
// open settings) begun during an automatic one takes it over, and its outcome stands.
//
// A transport registers one Port per listener it serves. Advertised ports are what the
// discovery log lists (one entry per subsystem the connecting host may access × port).
// A controller belongs to the port its admin queue connected through: its I/O queues
// must connect through that port too (another is refused, Connect Invalid Parameters at
// QID), so the ANA states and capabilities it reports are those its queues see.
// Port.Limits gives the numbers to size queues and buffers by before any command
// arrives: MaxQueueDepth (CAP.MQES+1: an I/O queue asking for more is sized to it),
// AdminQueueDepth (32: an admin queue asking for more is refused), MaxTransferSize (MDTS
// in bytes), InCapsuleDataSize.
//
// # Queues and requests: the transport contract
//
// One Queue is one NVMe submission/completion queue pair = one RDMA queue pair. When a
// transport accepts a connection it calls
//
//	q, err := port.NewQueue(tq, depth)   // tq implements TransportQueue; depth = receive slots
//
// (which fails with ErrTooManyQueues when the target holds limits.max_queues already:
// reject the connection), optionally tells the core the host's address (q.SetPeer, for
// logs) and the queue ID the transport connected it as (q.ExpectQID: a Connect naming
// another is refused), and preallocates depth Requests (one per receive slot; zero
// values, reused forever; a
// Request may be embedded in the transport's own slot struct, and Request.Context is
// free for the transport). For every command capsule received, on the queue's receive
// goroutine:
//
//	req.Cmd.Unmarshal(capsule[:64]); req.ICD = capsule[64:]    // transport
//	if q.Begin(req) {                                         // core: validate, describe data
//	    if req.Length > 0 && !req.InCapsule {
//	        req.Data = <registered buffer of ≥ req.Length bytes, 4 KiB aligned>
//	        if req.Dir == nvmeproto.DirHostToCtrl {
//	            <RDMA READ req.SGL segments into req.Data, in order; then:>
//	        }
//	    }
//	    q.Execute(req)        // or q.Fail(req, nvmeproto.StatusDataTransferError) if the READ failed
//	}
//
// and in TransportQueue.Complete(req) (called by the core exactly once per Begin):
//
//	if req.Dir == nvmeproto.DirCtrlToHost && req.Length > 0 && !req.InCapsule && req.CQE.Status.Success() {
//	    <RDMA WRITE req.Data[:req.Length] to the req.SGL segments, in order, chained before the SEND>
//	}
//	<SEND req.CQE (Completion.Marshal) as the response capsule>; <return req.Data to the pool>; <repost the receive>
//
// Who calls what, and where:
//
//   - Begin: transport, in arrival order (it advances the SQ head reported in SQHD).
//     It validates everything that can be checked before data moves: queue state (only
//     Connect on a new queue; Command Sequence Error otherwise), opcode, flags, namespace,
//     the SGL against the port's capabilities (see ParseSGL: keyed 0x40/0x4F, in-capsule
//     0x01 within the in-capsule data size, 0x31 lists of up to MSDBD keyed descriptors,
//     transfers up to MDTS), the transfer length against NLB, and the LBA range. If it
//     returns false the command is already completed (Complete was called inline) and
//     nothing else may be done with it. The Connect command's 1024 bytes of data are
//     host-to-controller data like any write (on the admin queue the Linux host never
//     sends them in-capsule).
//   - Execute: transport, any goroutine, once the data is in req.Data. It never blocks
//     on storage. Admin commands that may (Identify, Get Log Page, Get/Set Features) run
//     on the controller's admin worker goroutine, one at a time in the order Execute got
//     them, and complete from it; Connect, Property Get/Set (unless queued behind those),
//     Keep Alive, Abort and Asynchronous Event Request run inline. Authentication
//     Send/Receive (DH-HMAC-CHAP: a DH exponentiation takes up to tens of milliseconds)
//     run on the queue's authentication worker, admin and I/O queues alike, one at a
//     time per queue in the order Execute got them, and complete from it. I/O commands
//     are handed to the namespace's backend.Executor and complete on a worker goroutine
//     (or inline for the null and memory backends). A transport with its own event loop
//     may give a queue a backend.Ring (Queue.SetRing): reads and writes of O_DIRECT
//     files and block devices then run as asynchronous I/O and complete when the
//     transport reaps the ring.
//     Asynchronous Event Requests are held until an event.
//   - Fail: transport, instead of Execute, when it cannot move the data.
//   - TransportQueue.Complete: core, exactly once per Begin, from any goroutine —
//     inline from Begin/Execute/Fail, from a backend worker, the admin worker or an
//     authentication worker, from the goroutine that raised an asynchronous event or ran
//     Close — possibly concurrently for different requests of one queue. It must not
//     block on the queue's receive goroutine. After it returns the core does not touch
//     the Request again.
//   - TransportQueue.Disconnect(reason): core, any goroutine, possibly more than once,
//     must not block: the core wants the connection gone (keep-alive expiry
//     ErrKeepAliveExpired, no command long after a shutdown ErrShutdownIdle, reset
//     ErrControllerReset, shutdown ErrControllerShutdown,
//     admin queue gone ErrAdminQueueGone, Disconnect command ErrDisconnectCommand,
//     subsystem removed or target closed ErrClosed). From then on Begin completes every
//     command with Command Aborted due to SQ Deletion.
//   - Queue.Close: transport, once its connection is gone (after Disconnect, or when the
//     host went away). It completes held AERs, waits until every begun command has
//     completed (Complete keeps being called meanwhile, so Close must not run on a
//     goroutine that Complete waits for), and detaches the queue; closing an admin queue
//     destroys its controller and disconnects the controller's I/O queues. The wait is
//     bounded (WithQueueCloseTimeout, 30 s): when a backend request never completes,
//     Close logs it and returns false, and the transport must keep the memory that
//     request uses (Request, Data, ICD) until its Complete arrives, if ever; until then
//     the queue keeps its place in the limits below (Target.StuckQueues). Closing a
//     namespace (RemoveNamespace, ReopenNamespace, Close) waits as long for its commands,
//     then goes on (Close returns ErrNamespaceBusy) and closes its backend once they
//     complete. A controller reset and a shutdown wait as long, and no longer than their
//     host waits (see Concurrency). The target's stop (Target.Flush, then Close) waits
//     as long for a hung backend in all: the namespaces' flushes run concurrently, and
//     the closes after them do not wait again for a namespace whose flush was left
//     executing, nor for a queue's commands to it; every other close gets its whole wait.
//
// # Limits
//
// The core enforces the configuration's limits section on every transport: at most
// limits.max_queues queues (Port.NewQueue), a Fabrics Connect within
// limits.connect_timeout of NewQueue (else the queue is disconnected with
// ErrConnectTimeout), per host NQN at most limits.max_controllers_per_host controllers
// and limits.max_queues_per_host connected queues (Connect fails with Controller Busy,
// without DNR; Number of Queues grants no more I/O queues than the host has left), and a
// keep-alive timeout within limits.min/max_keep_alive_timeout (KATO 0:
// transport.keep_alive_timeout). A queue counts against max_queues and its host's limits
// until it has closed and its last command has completed: one whose commands are stuck
// in a backend (Queue.Close gave up waiting) still holds the transport's memory they use,
// so a host reconnecting to a hung backend again and again is refused (NewQueue's
// ErrTooManyQueues, Controller Busy) rather than piling up such queues and their buffers
// for every host. Limits that need the transport's view (per source address, response
// progress) are the transport's. Refusals are logged once per host and interval.
//
// Buffer ownership: Cmd, ICD and Data belong to the transport, which keeps them valid
// from Begin until Complete returns. The core reads Data for host-to-controller commands
// and writes Data[:Length] for controller-to-host ones; it keeps nothing after Complete.
// Data that is not 4 KiB aligned (in-capsule data at an odd offset) is copied through a
// per-Request bounce buffer, kept for the next command up to 16 KiB (a larger one, as a
// Compare's read, is dropped when its command completes). An RDMA transport avoids that
// copy for in-capsule writes by receiving each capsule into two SGEs: the 64-byte SQE,
// then a 4 KiB aligned buffer of InCapsuleDataSize bytes that becomes ICD.
//
// # Multipath: ANA and controller ID ranges
//
// Every namespace is in an ANA group and every Port reports a state per group (its
// listener's ana_states; Port.SetANAState changes one at run time, raising an ANA Change
// event on the port's controllers). Controllers report their own port's states in the ANA
// log page (0Ch) and refuse I/O for groups whose state serves none with the Asymmetric
// Access status of that state (SCT 3h, no DNR); see ana.go. A change to a state that
// serves no I/O, or a namespace moved into a group in such a state, returns once the I/O
// commands to the namespaces it stops that were admitted under the old state have
// completed (ANAFence, bounded by a context; fence.go), so that a failover orchestrator
// may then let another target serve the group. Identify Controller reports CMIC
// multi-port, multi-controller and ANA, and the ANA limits the Linux host sizes its log
// buffer by. Controller IDs come from the subsystem's cntlid_min..cntlid_max, so that
// two targets serving one subsystem (high availability) never give a host the same ID.
//
// # Performance
//
// The I/O path (Begin → Execute → backend → Complete) allocates nothing in steady state:
// requests are preallocated by the transport, the backend request and its completion
// callback are embedded in the Request and bound once, the namespace table is an
// immutable snapshot read with one atomic load, in-flight accounting is one atomic
// counter per queue plus, for the I/O fence of ANA changes and Preempt and Abort
// (fence.go), one per queue and namespace, found in the queue's immutable table sorted by
// NSID and generation and created on the queue's first command to the namespace, the ANA
// check is one atomic load of the port's state of the namespace's group, the reservation
// check one atomic load of the namespace's reservation snapshot (nil unless a host
// registered), and success paths use neither fmt nor errors.
// Admin commands may allocate.
//
// Every I/O command is counted where it completes, in its namespace's own memory: commands
// and bytes by class (read, write, flush, other), errors by class and status, and — while
// MeasureLatency is on (metrics are served) — a latency histogram from Begin to the
// completion. The counters are sharded by queue (SetCounterShard: one shard per RDMA poll
// group), so queues on different CPUs do not write one cache line; readers
// (Namespaces, Subsystems, ConnectRejects, the SMART log) sum the shards when asked.
// Removing a namespace drops its counters; one added again under its NSID starts at zero.
//
// # Concurrency
//
// Commands of one queue, and of different queues, execute concurrently. Controller state
// (CC/CSTS, the queue table, features, AERs and pending events, keep-alive, the error
// log) is behind the controller's mutex; the core never calls into the transport while
// holding it. The keep-alive timer runs on its own timer goroutine, independent of I/O:
// it ticks every KATO/2 and fails the controller after two ticks without a command
// (traffic based keep-alive, Identify CTRATT.TBKAS), i.e. between KATO and 1.5×KATO
// after the last command. An authentication step queued or running on one of the
// controller's queues counts as a command until it completes (auth.go): it may wait for
// an authentication slot longer than KATO, and the host sends nothing meanwhile. A reset (CC.EN 1→0) or shutdown (CC.SHN) disconnects the I/O
// queues at once and completes in the background once their in-flight commands have
// finished (a shutdown then flushes every namespace); the host polls CSTS.RDY /
// CSTS.SHST as the specification says. Its waits for backends are bounded, so that a hung
// backend does not keep the host waiting past what it allows: a reset waits at most the
// queue close timeout and 5 s (CAP.TO is 7.5 s), then clears CSTS.RDY without CSTS.CFS;
// a shutdown waits for the commands, then for the flushes, each at most the close
// timeout and together at most 50 s (RTD3E is 60 s), then reports SHST complete — with
// CSTS.CFS when commands were left executing or a flush had not finished. Either logs
// what it left at Error. The commands left complete later, or never, on their detached
// queues, which count against the limits until then; their completions change nothing
// of the controller. No later reset or shutdown of the controller waits for them again;
// a later shutdown reports CSTS.CFS while they still execute.
//
// # Logging
//
// log/slog (WithLogger). Refused Connects and rejected commands are logged at Warn with
// their values, rate limited per queue (a misbehaving host cannot flood the log);
// controller life-cycle events at Info; backend errors of single I/Os at Debug; a
// namespace failing (a sync of its backend failed) at Error, once.
//
// # Durability
//
// A backend error wrapping backend.ErrSync (fdatasync failed: writes reported complete may
// be lost, and the kernel says so only once) fails the namespace: writes, write zeroes,
// deallocate and flushes get Write Fault with DNR until ReopenNamespace (or a restart);
// reads still work. An automatic reopen (conf.AutoReopen) keeps the failure: a fenced
// backend reports ErrSync with ErrNeedsReopen when writes it reported complete may have
// been lost with the fenced client. FailedNamespaces lists such namespaces. A CC.SHN shutdown whose flush
// fails, or that leaves commands executing or a flush unfinished at its time limit, sets
// CSTS.CFS with SHST complete. With the volatile write cache disabled every
// write, write zeroes and deallocate is durable before it completes. An unknown
// subsystem, a host not admitted and a host lacking a required secret get the same
// Connect status (Invalid Parameters, SUBNQN).
package target
