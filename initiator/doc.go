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
// is never reused while a command could still transfer into it.
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
// in-process target; host memory is addressed by offset, completions are handed to the
// queue's completion goroutine, so the target's command path can be measured natively.
// The initiator never imports the target: LoopConn is the structural interface
// target/loop's *Conn satisfies.
package initiator
