// Package initiator is gonvmf's NVMe over Fabrics host: it connects to a controller over
// RDMA (rdma_cm and verbs, through package rdmacm) or, in-process, over the loop
// transport of gonvmf's own target, and gives programs the controller's admin functions
// and a block I/O API. gonvmf's discover, identify and perf tools are built on it, and
// its tests cross-check gonvmf's target against the Linux kernel target.
//
// # Connecting
//
//	ctrl, err := initiator.Dial(ctx, initiator.Options{
//	        Addr: "10.99.0.1", Port: 4420,                    // nvme-cli -a, -s
//	        SubNQN: "nqn.2024-01.io.example:disk0",          // -n
//	        HostNQN: hostnqn,                                 // --hostnqn (default: from HostID)
//	        Queues: 4, QueueSize: 128,                        // -i, -Q
//	})
//	defer ctrl.Close()
//
// Dial runs the Linux host's sequence (drivers/nvme/host/rdma.c and fabrics.c; summarized
// in ../shared/ref/nvmeof-rdma.md §4): rdma_cm
// connect of the admin queue with the nvme-rdma private data (qid 0, hrqsize 32,
// hsqsize 31); Fabrics Connect with the Connect data in registered memory behind a keyed
// SGL; Property Get CAP, Property Set CC.EN, polling CSTS.RDY within CAP.TO; Identify
// Controller (and the checks the Linux host makes: keyed SGLs, ICDOFF 0, KAS, capsule
// sizes, CNTLID); Set Features Number of Queues; an rdma_cm connection and Fabrics
// Connect per I/O queue; Keep Alive every KATO/2; Asynchronous Event Configuration and an
// outstanding Asynchronous Event Request; and the namespace scan (active namespace list,
// Identify Namespace, namespace identification descriptors). A refused connection ends
// with a *ConnectError that wraps ErrSubsystemNotFound, ErrHostNotAllowed or
// ErrConnectRefused.
//
// Close (or Shutdown with a context) waits for outstanding I/O, disconnects the I/O
// queues, shuts the controller down with CC.SHN and waits for CSTS.SHST, then disconnects
// the admin queue.
//
// Dialling nvmeproto.DiscoveryNQN connects to a discovery controller (no I/O queues,
// no keep-alive by default); DiscoveryLog reads its log page.
//
// # I/O
//
// Namespace gives a synchronous API with contexts: Read/Write (zero-copy, on a *Buffer of
// registered memory), ReadAt/WriteAt (any []byte, through bounce buffers), Flush,
// WriteZeroes and Deallocate; FUA is an IOFlags bit.
//
// IOQueue gives the asynchronous API for benchmarks: preallocate Requests and Buffers,
// Submit them, and resubmit from Done, which runs on the queue's completion goroutine;
// many commands are in flight per queue, and the path allocates nothing. Writes that fit
// the controller's in-capsule data size (Identify IOCCSZ, SGLS bit 20) travel inside the
// command capsule (a second SGE of the SEND); everything else is described by a keyed SGL
// (0x40) that the target RDMA READs or WRITEs.
//
// Buffers come from the controller's pool (GetBuffer, recycled) or from dedicated
// registered memory (AllocBuffer, cut with Slice). They are reference counted, so memory
// is never reused while a command could still transfer into it. The caller's part:
//
//   - A buffer is the command's from Submit until Done, or for the whole synchronous
//     call: do not touch its bytes meanwhile. Read, Write and AdminCommand with a buffer
//     return only once their command has ended, also when their context ended first
//     (they then wait at most the command timeout, after which the controller fails and
//     aborts the command): they never hand a buffer back while the controller may still
//     transfer into it. The copying calls (ReadAt, WriteAt) return when their context
//     ends, and their bounce buffer is not reused until the command has ended.
//   - Release may come at any time: the memory is freed, or returned to the pool, once
//     the last command using it has ended.
//   - Buffers stay valid across Close until released; GetBuffer and AllocBuffer fail
//     with ErrClosed once Close began.
//
// A command has ended when its completion arrived or its queue's teardown aborted it. On
// RDMA the teardown first moves the queue pair to the error state, after which the
// target's RDMA transfers into this host's memory fail. On the loop transport a command
// the in-process target has not finished 3 s after its queue died is aborted without
// it: the target may still write into the buffer when its backend returns; the buffer
// stays referenced (not freed, not reused by the pool) until then, but a caller that must
// not see such a write releases a buffer whose command failed with ErrDisconnected,
// ErrTimeout or ErrClosed on the loop transport rather than reusing it.
//
// # Retries
//
// A command the controller fails without Do Not Retry is sent again, as the Linux host
// does for block I/O (nvme_decide_disposition, nvme_retry_req in drivers/nvme/host/core.c):
// I/O commands (Read, Write, Flush, Write Zeroes, Deallocate; not admin and Fabrics
// commands, which the Linux host fails fast), at most Options.MaxRetries times (default
// 5, the Linux host's max_retries), each after the Command Retry Delay its status selects:
// CRD 1..3 the Identify Controller CRDT1..3 (100 ms units), CRD 0 none. Dial enables
// Advanced Command Retry (Set Features Host Behavior Support, ACRE) on a controller that
// reports CRDT1, as the Linux host does, so that the controller sets CRD: gonvmf's target
// answers Namespace Not Ready with CRD 1 while it reopens a namespace. Path-related
// statuses (SCT 3h: ANA states, path errors) are not retried: this host has a single
// path, and failing over is its caller's business. A command waiting for its delay keeps
// its slot and its buffer; Done and the synchronous calls see only the last attempt. A
// synchronous call's context stops the retries (a waiting retry ends at once with the
// last status), and so does Close (a waiting retry ends with ErrClosed). Retries allocate
// nothing (a queue's slots keep their timers), except after Authentication Required: the
// re-authentication the retry waits for allocates its goroutine, its DH-HMAC-CHAP
// messages and commands, and the list of the commands waiting for it.
//
// An I/O command failed with Authentication Required (without DNR: the controller wants
// the queue authenticated again) is retried only after the host has re-authenticated the
// controller, as the Linux host does (nvme_decide_disposition AUTHENTICATE, which runs
// its dhchap_auth_work): a new DH-HMAC-CHAP transaction on the admin queue, then on every
// I/O queue that authenticated at its Connect. One re-authentication runs at a time per
// controller, and every Authentication Required seen while it runs waits for it (one
// for an attempt sent before the last re-authentication succeeded is retried without
// another). An I/O queue that authenticates keeps a slot for its authentication
// commands, as the Linux host keeps a reserved tag, and authentication messages have
// registered memory of their own, not the pool's: a re-authentication runs even when
// the commands waiting for it hold every slot and every pool buffer. The retry counts
// against MaxRetries (negative: the status goes to the caller, and nothing
// re-authenticates). A failed re-authentication (the controller refused the secret, the
// host has none, a step failed) is a soft state, as in the Linux host
// (nvme_ctrl_auth_work): it is logged, the controller stays connected, and the commands
// waiting for it end, not retried again, with their Authentication Required status (a
// *StatusError) wrapped with the failure, which wraps ErrAuthFailed and names the queue
// whose transaction failed. The controller may then disconnect the queues that failed
// (gonvmf's target does after its AuthFailureGrace), which fails this controller; until
// then a command it refuses again starts a new re-authentication.
//
// # Memory registration
//
// On RDMA each region of registered memory is one memory region (MR) with one remote
// key, and a command's keyed SGL carries its buffer's address and length with the key of
// the region the buffer lies in. What the key lets the target do is wider than the
// command:
//
//   - data regions (each pool chunk, each AllocBuffer) are registered for remote read and
//     remote write, whatever the direction of the command that hands out their key: a
//     target serving a Write can also write the buffer, one serving a Read can read it;
//   - the key covers the whole region, not only the command's bytes: a command on a Slice
//     of a dedicated buffer exposes all of that buffer (pool chunks are regions of their
//     own, so a pool buffer exposes its chunk only);
//   - the key is valid for as long as the region is registered (until the buffer is
//     freed, the pool at Close), not only while the command is outstanding: nothing
//     invalidates it when the command completes, and a pool chunk's key is handed out
//     again with the chunk.
//
// The Linux host registers each request's pages in a fast-registration MR of their own,
// for remote read and write, and has the target invalidate its key with the response
// (drivers/nvme/host/rdma.c, nvme_rdma_map_sg_fr): its keys are as wide as the request,
// and no wider in time. Doing that here needs fast-registration work requests in package
// rdmacm, which it lacks. What this host narrows: a queue's control memory (Connect data,
// Dataset Management ranges, capsules, responses) is registered for remote read only,
// and the pool is one region per chunk. In-band authentication messages live in a 4 KiB
// region of their own (registered for remote read and write, as data regions are), made
// at the first authentication and freed at Close; an authentication step abandoned when
// its context ended keeps it until the command ends, and the next authentication makes
// a new one. A program that wants buffers out of one
// another's reach allocates them with separate AllocBuffer calls instead of slicing one.
// Each Controller registers its memory in a protection domain of its own, so no key of
// one Controller reaches another's memory.
//
// # Failure
//
// Every command has a timeout (CommandTimeout, AdminTimeout). A command that times out,
// a queue whose connection drops (rdma_cm DISCONNECTED, a failed work completion, the
// loop Conn torn down), or a failed Keep Alive fails the whole controller, as the Linux
// host's error recovery would before reconnecting (this host does not reconnect): every
// queue is disconnected, every outstanding command completes with an error wrapping
// ErrTimeout or ErrDisconnected, Done is closed and Err says why. Nothing waits forever.
//
// # Transports
//
// RDMA: one reliable-connected QP and one CQ per queue, polled by one goroutine per queue
// that sleeps on the CQ's completion channel when idle; capsules are SENT from registered
// memory (signaled; a command completes once both its send completion and its response
// arrived), responses are RECEIVED into registered buffers that are reposted in batches.
//
// Loop: cmd/gonvmf (or a test) passes a LoopDialer that opens target/loop Conns on an
// in-process target; host memory is addressed by offset into the buffer's region (the
// target is handed that region's memory), completions are handed to the queue's
// completion goroutine, so the target's command path can be measured natively.
// The initiator never imports the target: LoopConn is the structural interface
// target/loop's *Conn satisfies.
package initiator
