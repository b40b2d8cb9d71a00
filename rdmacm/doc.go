// Package rdmacm is gonvmf's thin, allocation-free binding to librdmacm and
// libibverbs: the only place in the module that crosses into C.
//
// It owns:
//
//   - devices: listing ([Devices]), opening ([OpenDevice]) and querying RDMA
//     devices, their limits and port state;
//   - the connection manager: [EventChannel] and [CMID] (bind, listen,
//     CONNECT_REQUEST with private data, accept/reject with private data,
//     resolve address and route, connect, disconnect) and [Dial], which
//     drives the active side of a connection to ESTABLISHED;
//   - memory: [Arena], memory mapped outside the Go heap, locked and
//     registered once as one memory region, so slices of it can be handed to
//     the hardware; [CheckMemlock] checks RLIMIT_MEMLOCK up front;
//   - completion queues with a completion channel ([CQ]) and reliable-connected
//     queue pairs sized by the caller ([QP]);
//   - posting chains of work requests ([SendWR], [RecvWR]) in one cgo call
//     and polling many completions per call into a caller-provided array
//     ([Completion]);
//   - asynchronous device and QP events ([Device.AsyncEvent]);
//   - teardown: every object has an idempotent Close that first closes the
//     objects that depend on it (QPs before CQs and PDs, memory regions before
//     PDs, CM IDs before their event channel).
//
// # Build tags
//
// The real implementation needs cgo and the rdma-core headers and libraries
// (Debian: libibverbs-dev, librdmacm-dev) and is built with
// "linux && cgo && !nordma". Every other build (CGO_ENABLED=0, -tags nordma,
// other operating systems) gets the same API whose constructors return
// [ErrNotSupported], so the rest of the module builds and tests without
// rdma-core.
//
// # Hot path
//
// Work requests and completions are plain Go structs without pointers. A
// post passes the caller's slice to C for the duration of the call only (cgo
// pointer rules); C converts at most 64 work requests at a time on its stack
// and posts them as one chain. Completions are polled straight into the
// caller's []Completion, whose layout is struct ibv_wc. Neither posting nor
// polling allocates: keep WR and completion arrays in long-lived structs and
// data in an [Arena]. Nor does cgo check a pointer on them: the QP, SRQ or CQ
// goes to C as an integer (its address in C memory), the arrays as pointers to
// types without pointers, which cgo does not check.
//
// # Threading
//
// Posting to one QP and polling one CQ are safe from several goroutines
// (verbs providers lock internally), but the intended use is one goroutine
// per CQ ("poll group") that polls in batches, posts, and when idle arms the
// CQ and sleeps in [CQ.Wait]. Waiting on the completion channel, the CM event
// channel and the async event fd uses the Go runtime's netpoller on
// non-blocking descriptors, so a waiting goroutine does not occupy an OS
// thread. The one cgo call of this package that blocks is [CQ.WaitThread]: for
// a goroutine that owns a CQ and nothing else, it sleeps in poll(2) on the
// completion channel and a wake-up eventfd ([CQ.WakeFD]), so that a completion
// wakes that thread directly, without the netpoller's timers and hand-offs. The
// first WaitThread takes the completion channel out of the netpoller (an event
// would otherwise also wake the runtime thread blocked in epoll_pwait, with nobody
// to hand it to); [CQ.Wait] on that CQ fails from then on.
//
// Close may be called from any goroutine: it wakes goroutines waiting on the
// object, waits for posts and polls in progress to return, and makes later
// calls fail with [ErrClosed]. Closing an object while the hardware still
// owns its buffers is safe for the process (destroying the QP first stops
// the hardware), but completions of the outstanding work are lost.
//
// # Process-wide effect: one malloc arena
//
// Linking this package (its cgo build) limits the process to one glibc malloc
// arena (mallopt M_ARENA_MAX 1, set by a C constructor before main): rdma-core
// 44.0's librdmacm, Debian 12's, sorts its device list with a comparison that
// is wrong for ibv_device structures more than 2 GiB apart, which per-thread
// arenas make them, and then drops live devices from its list; with all of
// them dropped its next call deadlocks on its own mutex (fixed in rdma-core
// 44.12). It affects only memory that C code allocates with malloc — Go's heap
// is its own — and neither this package nor rdma-core mallocs on a hot path.
// A program that links it and mallocs heavily from many threads in C pays
// with contention on the one arena.
//
// # Soft-RoCE (rdma_rxe)
//
// rxe needs a netdev with a unicast address (not lo); it never raises
// IBV_EVENT_QP_LAST_WQE_REACHED; a CQ overrun raises CQ_ERR repeatedly until
// the QP is destroyed; device removal waits until every process with the
// device open exits. It honours SEND with Invalidate ([OpSendInv]). README.md
// in this directory has the details, the rules for users and the test commands.
package rdmacm
