// Package backend owns the storage behind a namespace: a regular file, a block device, a
// Ceph RBD image (in the ceph build), or for tests and benchmarks a null sink or a sparse
// in-memory store.
//
// A Backend reads and writes whole logical blocks between the device and buffers the caller
// provides. In the target those buffers are slices of the pinned, RDMA-registered buffer
// pool, which is also the O_DIRECT buffer: a backend never copies a caller buffer into a
// buffer of its own on the data path, and never keeps a reference to one after the call
// returns. Buffers must start at an Alignment boundary and hold a whole number of logical
// blocks; a backend checks that cheaply and returns ErrUnaligned otherwise.
//
// The file and block backends use synchronous pread/pwrite on descriptors opened with
// O_DIRECT, so an Executor runs them on a bounded pool of worker goroutines to keep many
// commands in flight; Executor.Submit never blocks (requests the workers cannot take yet
// wait in a queue linked through the caller's Requests), so an event loop serving many
// hosts is never held up by one slow backend. The null and memory backends never block,
// and the Executor runs their requests inline in the submitting goroutine. A caller with
// its own event loop can instead hand reads and writes of O_DIRECT files and block
// devices to a Ring (Linux native asynchronous I/O) with Executor.SubmitRing, and reap
// their completions itself: no worker goroutine, no hand-off between threads.
//
// The rbd backend (files rbd*.go; built with the tags ceph and pacific, as `make
// build-ceph` does, and otherwise an error naming that build) is asynchronous by nature:
// librbd's aio calls take every request, and their completions, which arrive on librbd's
// threads, are queued in C and taken in batches by one goroutine per RADOS connection — or,
// for requests submitted with SubmitRing, by the Ring's owner, woken through the Ring's
// eventfd like for its own completions. Images opened with the same cluster and client
// share one RADOS connection, until the cluster blocklists its client (ESHUTDOWN): images
// opened after that get a new one, and those on the old client fail every request with
// ErrNeedsReopen, which they report to Spec.OnNeedsReopen, until they are reopened. An
// image watch reports `rbd resize` to Spec.OnResize, from a goroutine of the image's own.
//
// Errors wrap ErrLBAOutOfRange, ErrReadOnly, ErrUnaligned, ErrSync, ErrNeedsReopen or an
// errno from the kernel; Status turns any of them into the NVMe completion status the
// target reports. A failed sync (ErrSync: fdatasync, or a write through the O_DSYNC
// descriptor; for rbd a flush, or a FUA write, except librbd's EROFS refusal for want of
// the exclusive lock, a FUA write's ENOSPC or EDQUOT, which write nothing, and a
// blocklisted client's ESHUTDOWN, which is ErrNeedsReopen and a sync failure only when
// the image's cache completed writes no flush covered) is sticky: the file, block and rbd
// backends remember it and fail every later Flush until they are opened again, since the
// kernel reports a writeback error only once, and so does librbd the failure of a write
// its cache had completed early. With Request.FUA every backend makes write zeroes and
// deallocate durable too (a flush after them where they could complete from a cache).
//
// The package imports nvmeproto for status codes and nothing else from gonvmf; the ceph
// build adds github.com/ceph/go-ceph (and links librados and librbd).
package backend
