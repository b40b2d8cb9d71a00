// Package rdma is the target's NVMe over Fabrics RDMA transport: it joins the
// transport-independent core (package target) to RDMA devices through rdmacm, so that
// hosts — the Linux host's nvme-rdma, SPDK, gonvmf's initiator — connect with rdma_cm and
// move commands, responses and data over reliable-connected queue pairs.
//
//	tr, err := rdma.New(t)                         // t: *target.Target, whose resolved settings it uses
//	for _, l := range t.Config().Listeners {
//	        lis, err := tr.Listen(l)               // rdma_listen + target port (discovery log)
//	}
//	...
//	tr.Drain(ctx)                                  // orderly shutdown: no new connections or commands, answer those in flight
//	t.Flush()
//	tr.Close()                                     // stop listening, disconnect hosts, free RDMA resources
//	t.Close()
//
// Drain leaves the capsules that arrive meanwhile unanswered in their receive buffers
// (hosts resend them after reconnecting) and waits for every command already begun to
// complete and its response to be sent. Close never unmaps memory a request may still
// touch: while a connection is not released or a pool buffer is held (a backend call
// that never returned), the device's memory stays mapped until the process exits. Why
// each queue was torn down is logged at Info, rate limited per poll group.
//
// # Devices
//
// A device is set up (protection domain, buffer pool, poll groups) by the first listener
// bound to it or the first connection on it. When it is removed — rdma_cm's
// DEVICE_REMOVAL on one of its CM IDs, its leaving the device list (checked every 2 s),
// or a connection on a new device of the same name — it takes no new connections (rdma_cm
// disconnects those it has) and is released once the last is gone; every 2 s librdmacm
// is asked to look at the device list, which closes its context of a removed device, so
// that the kernel can finish removing it while the target runs — except the last device
// of the machine: with none listed librdmacm does not look, and the removal completes when
// a device is added or the process exits. A listener bound to its address listens again
// once an RDMA device has the address (a device added back, or the address moved), keeping
// its port in the discovery log meanwhile; connections on a device added back set it up
// anew.
//
// # Connections
//
// A CONNECT_REQUEST carries the host's nvme-rdma private data (32 bytes; the Linux host
// pads it to 56): recfmt must be 0, qid at most transport.max_io_queues, an admin queue
// at most 32 entries, a queue at least 2 entries, hrqsize non-zero, an I/O queue's cntlid
// a valid controller ID, and the host must serve RDMA READs. Otherwise the request is
// rejected with the nvme-rdma status naming the field (INVALID_RECFMT, INVALID_QID,
// INVALID_HSQSIZE, ...) and a log line with every value. The queue's depth is hsqsize+1
// capped by transport.queue_depth; the accept's private data reports it as crqsize. The
// accept asks for RNR retry 7 (retry forever) and an initiator depth of the host's
// responder resources capped by the device's max_qp_init_rd_atom.
//
// Each connection has one QP, receive buffers (a 64-byte command entry and, on I/O
// queues, a 4 KiB aligned in-capsule data area each, so in-capsule write data reaches the
// backend without a copy), registered memory for its response capsules, and twice as many
// request contexts as receive slots: a receive buffer goes back as soon as the core
// completes its command, while the context stays until the response's SEND completes. An
// admin queue has its own receive buffers, one per entry. The I/O queues of a poll group
// share one receive queue (transport.shared_receive_queue, an SRQ): it holds as many
// buffers as those queues have entries, up to the configured limit, added in chunks as
// queues connect and kept when they go; a command takes the next buffer whichever queue it
// arrives on, and the completion's QP number names its connection. A command that has to
// wait for pool buffers gives its shared buffer back at once (it has no in-capsule data,
// and Begin has copied what it needs), so a host flooding its queues past its share of
// the pool cannot drain the receive queue its poll group's other queues depend on; a
// queue that holds more buffers than it has entries (its commands waiting for RDMA READ
// credits, the data window or the backend keep theirs) is one whose host ignores its
// queue size, and is disconnected. A host that sends more commands than there are
// buffers is held back by RNR retries (the accept asks for retry count 7: for ever),
// never failed; a connect or keep-alive never waits for an I/O queue's buffer. With shared_receive_queue 0 every I/O queue has its
// own buffers, one per entry.
//
// # Requests
//
// Each command moves through a state machine owned by its poll group:
//
//	receive → Begin (core: validate, describe data) → take a pool buffer
//	        → [host-to-controller] RDMA READ(s) of the host's data → Execute (backend)
//	        → Complete → [controller-to-host] RDMA WRITE(s) chained before the response SEND
//	        → SEND completion: buffer and context free
//
// When the buffer pool, the RDMA READ credits (the negotiated initiator depth), the
// send queue or the queue's window of RDMA data on the wire (limits.max_queue_data_in_flight,
// eight of it while no other controller's queue contends in the group; conn.wireOut) run
// short, the request waits and continues when a completion frees what it needs; a
// transient shortage never fails a command. Admin commands have their own FIFO,
// served first, and part of the pool is reserved for them, so Keep Alive, Identify and
// Get Log Page never wait behind I/O; an admin queue holds at most two largest buffers
// (at least 32 pages) of the pool, its commands beyond that waiting for its own, so a
// host flooding its admin queue cannot take what the I/O queues need. I/O commands
// waiting for buffers queue per connection and are served round robin under fair
// shares of the pool (share.go): one host cannot hold up another's commands, nor take
// the whole pool. The admin Connect's 1024 bytes are fetched with an RDMA READ like any
// write data; in-capsule data (Data Block/Offset) is used where it arrived; keyed
// descriptors with the Address and Invalidate subtypes are served. When a command's one
// keyed descriptor has the Invalidate subtype — the Linux host registers a memory region
// per command and asks so — its response is a SEND with
// Invalidate of that key (on devices with the memory management extensions, Soft-RoCE
// among them), so that the host's device invalidates the key on arrival and the host
// completes the command without posting a local invalidation and waiting for it. A
// transfer larger than the device's largest message is split into several READs or
// WRITEs.
//
// # Buffer pool
//
// One mmap'd, locked arena per device (transport.buffer_pool_size), registered once and
// handed out as power-of-two runs of 4 KiB pages (a buddy allocator): every buffer is
// contiguous and aligned, so it is at once the RDMA READ/WRITE buffer and the backend's
// O_DIRECT buffer — data moves host memory → RDMA READ → pool → pwrite (and back) with
// no copy inside the target.
//
// A connection's own memory (response capsules; receive buffers when it has no shared
// receive queue) comes from slabs of 64 pages per device, registered once and kept until
// the device closes (qmem.go), and goes back to them when its QP is destroyed; only a
// connection needing more than half a slab gets an arena of its own. Connecting a queue
// thus costs no mmap, mlock or memory registration.
//
// # Poll groups
//
// transport.poll_groups goroutines per device (default one per P of the Go scheduler,
// GOMAXPROCS; a new queue goes to the one with the fewest connections that has room:
// device.pickGroup, and conf.Transport.NumPollGroups for the measurement), each polling one
// completion queue shared by the QPs spread over it, up to 64 completions per call, and
// posting each connection's staged work requests in one call per round (receives
// first, then RDMA READs, WRITEs and SENDs). Completions of the core, which may come from
// backend worker goroutines, reach the group through a lock-free list. When idle a group
// keeps polling for a while (DefaultSpin polls, offering its CPU to the kernel's other
// runnable threads every spinYieldPolls of them), then arms the completion queue and
// sleeps on its completion channel with its OS thread (one for the goroutine's life:
// runtime.LockOSThread, see group.run) blocked in poll(2)
// (rdmacm.CQ.WaitThread), so that a completion wakes the group's own thread and nothing
// else: on a host where the RDMA device itself runs on the CPUs (Soft-RoCE) busy polling
// would steal its cycles, and waking through the Go netpoller costs timers and thread
// hand-offs. transport.busy_poll makes groups spin instead. Groups run at the process's
// priority: running gonvmf at nice -10 or -20 (the kernel target's command work runs in
// ib-comp-wq's high-priority kworkers, at -20) took the 4k QD32 p99 from 12.5 ms to 13.2
// and 19.0 ms and 128 KiB reads from 521 to 494 and 434 IOPS, 4k QD1 unchanged (null,
// one guest boot, medians of 3), presumably because a spinning group then keeps its CPU
// from the host's and the device's threads that carry its next commands. The
// steady-state I/O path allocates nothing (TestEngineAllocations, BenchmarkEngine), so no
// garbage collection runs while I/O flows: Go's GOGC and GOMEMLIMIT defaults stay (a
// deployment that wants a memory ceiling may set GOMEMLIMIT without touching the I/O
// path's latency). Measured with
// the Linux host (null, one Soft-RoCE guest boot, 3 sessions each of 4k reads at QD1 and
// QD32 and writes at QD32, GODEBUG=gctrace=1): with the default GOGC no collection ran in
// any session, start and connect included; GOGC=off gave the same IOPS and p99 within the
// boot's spread (QD32 reads 8,171 against 7,930 IOPS, p99 13.8 against 15.0 ms; writes
// 8,294 against 8,034, p99 9.8 ms both; QD1 2,596 against 2,746, p99 1.3 against 1.0 ms)
// and would let a leak grow without bound; GOGC=10 collected 4 or 5 times per session,
// at start-up and, in one session, once more as the 4k QD1 reads ran, 2 MB of heap
// after the connect.
//
// Reads and writes of file and block namespaces opened with O_DIRECT run as Linux
// asynchronous I/O from the poll group itself (backend.Ring, one per group): the group
// queues a round's reads and writes and submits them with one io_submit at the end of
// the round, the kernel signals the group's wake-up eventfd when they complete, and the
// group takes the completions from the ring the kernel keeps in the process's memory,
// without a system call, as the kernel's target does with its file and block backends.
// No goroutine hand-off is on that path; other commands (and reads and writes when a
// group's ring is full) run on the namespace's worker goroutines, and so do those that
// would make io_submit sleep — a write into a hole of a sparse file (block allocation)
// or a full device queue: they are submitted with RWF_NOWAIT, and the kernel's EAGAIN
// hands them to the workers (Stats.AIOFallbacks). A poll group never waits for a backend.
//
// # Limits
//
// Connection requests beyond limits.max_queues, or from an address that holds
// limits.max_queues_per_address queue pairs, are rejected with NO_RSC (the core's limits
// — connect timeout, per-host controllers and queues, keep-alive bounds — apply too; the
// transport tells the core the CM qid, and a Connect naming another is refused). Each I/O
// connection has a share of the buffer pool (share.go). A poll group's watchdog
// (watchdog.go) tears down a connection whose responses make no progress for
// limits.response_timeout — a host that posts no receive buffers holds a SEND forever
// under RNR retry 7 — or for a couple of seconds while it holds more than its share, if
// another connection waited within its own at some time during that stall.
//
// # Faults
//
// A host that disconnects, a QP error (an error completion: a bad rkey, retries
// exhausted because the host vanished), keep-alive expiry (the core disconnects), a
// short capsule, or the target closing all end the connection the same way: the QP goes
// to the error state (rdma_disconnect), commands waiting for buffers, credits or slots
// fail, the device flushes what it holds (or, if it does not within 5 s, the QP is
// destroyed regardless), the core queue closes once its commands have completed, and the
// QP, CM ID and memory are released. Other connections are not affected. If the core gives
// up waiting for a command whose backend never completes it (target.Queue.Close's bound),
// the QP and its completion queue share are released, and the connection's memory once
// that command completes; until then the connection counts against limits.max_queues and
// max_queues_per_address here, and its queue against the core's limits. The pool
// buffers such commands hold are taken out of the pool the live I/O connections divide
// among themselves, from the release of the QP until each comes back: the live
// connections' shares shrink to what the pool can give them, and the watchdog's reclaim
// judges a connection against the shrunk share (share.go).
// PoolStats.ClosedHeldBytes and the buffer_pool_held_by_closed_queues_bytes metric count
// those buffers; the log line of a queue pair destroyed with commands still executing
// names its pages and the device's total.
package rdma
