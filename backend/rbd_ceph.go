//go:build ceph && linux && cgo

package backend

// The rbd backend: Ceph RBD images through librbd's asynchronous API.
//
// go-ceph (github.com/ceph/go-ceph) connects to the cluster and opens the pool's I/O
// context, and creates missing images; its rbd package has only synchronous I/O, one
// blocking call (and so one thread) per request in flight. The image itself is opened and
// driven by the small C layer below: rbd_aio_read2/write2/discard/write_zeroes/flush, whose
// completion callbacks run on librbd's threads. A callback never calls into Go: it pushes
// the finished operation on a lock-free stack in C memory (a completion queue) and
// signals the queue's eventfd when the stack was empty. Two kinds of goroutine own queues
// and take whole stacks at once:
//   - each RADOS connection's reaper goroutine, for requests submitted with
//     Executor.Submit (and the image watches);
//   - a Ring's owner (an RDMA poll group), for requests submitted with
//     Executor.SubmitRing: the eventfd is the ring's notify descriptor, so the poll group
//     sleeps on librbd's completions with its own, and completes the commands itself.
// So librbd's threads never wait for Go's scheduler, completions cross threads in
// batches, and the number of requests in flight is bounded by the callers, not by
// threads. C keeps no Go pointers: an operation is named by a 64-bit tag (connection id,
// slot index) and data buffers are the caller's, pinned for the operation's life when
// they are Go memory (the target's registered pool is not).

/*
#cgo LDFLAGS: -lrbd -lrados
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

typedef struct gonvmf_rbd_op gonvmf_rbd_op;

// A completion queue: a stack librbd's threads push finished operations on.
typedef struct {
	gonvmf_rbd_op *head;
	int efd; // signalled when head goes from NULL to an operation; -1: none
	// posting counts the threads inside gonvmf_rbd_post: an operation they pushed can be
	// taken (and its queue's owner see nothing in flight) before they signal efd, so the
	// queue is freed, and efd closed, only once it is 0 (gonvmf_rbd_posting).
	uint32_t posting;
} gonvmf_rbd_cq;

// One librbd operation in flight (or one image's watch).
struct gonvmf_rbd_op {
	gonvmf_rbd_op *next;
	gonvmf_rbd_cq *cq;  // where it completes
	uint64_t tag;       // the Go side's name for it
	int64_t ret;        // librbd's result
	uint32_t pending;   // watch: posted and not yet taken
};

static void gonvmf_rbd_post(gonvmf_rbd_op *op) {
	gonvmf_rbd_cq *cq = op->cq;
	int efd = cq->efd;
	__atomic_add_fetch(&cq->posting, 1, __ATOMIC_ACQ_REL);
	gonvmf_rbd_op *old = __atomic_load_n(&cq->head, __ATOMIC_RELAXED);
	do {
		op->next = old;
	} while (!__atomic_compare_exchange_n(&cq->head, &old, op, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
	if (old == NULL && efd >= 0) {
		uint64_t one = 1;
		while (write(efd, &one, sizeof one) < 0 && errno == EINTR) {
		}
	}
	__atomic_sub_fetch(&cq->posting, 1, __ATOMIC_RELEASE); // the last access to cq
}

static uint32_t gonvmf_rbd_posting(gonvmf_rbd_cq *cq) {
	return __atomic_load_n(&cq->posting, __ATOMIC_ACQUIRE);
}

static gonvmf_rbd_op *gonvmf_rbd_take(gonvmf_rbd_cq *cq) {
	return __atomic_exchange_n(&cq->head, NULL, __ATOMIC_ACQUIRE);
}

static void gonvmf_rbd_done(rbd_completion_t c, void *arg) {
	gonvmf_rbd_op *op = arg;
	op->ret = rbd_aio_get_return_value(c);
	rbd_aio_release(c);
	gonvmf_rbd_post(op);
}

static void gonvmf_rbd_updated(void *arg) {
	gonvmf_rbd_op *op = arg;
	if (__atomic_exchange_n(&op->pending, 1, __ATOMIC_ACQ_REL) == 0)
		gonvmf_rbd_post(op);
}

enum {
	GONVMF_RBD_READ,
	GONVMF_RBD_WRITE,
	GONVMF_RBD_DISCARD,
	GONVMF_RBD_WRITE_ZEROES,
	GONVMF_RBD_FLUSH,
};

// gonvmf_rbd_start starts one operation; op completes on cq unless it returns < 0.
static int gonvmf_rbd_start(rbd_image_t img, gonvmf_rbd_op *op, gonvmf_rbd_cq *cq, int kind,
		uint64_t off, uint64_t len, void *buf, int flags) {
	rbd_completion_t c;
	int r;
	op->cq = cq;
	op->next = NULL;
	op->ret = 0;
	r = rbd_aio_create_completion(op, gonvmf_rbd_done, &c);
	if (r < 0)
		return r;
	switch (kind) {
	case GONVMF_RBD_READ:
		r = rbd_aio_read2(img, off, len, buf, c, flags);
		break;
	case GONVMF_RBD_WRITE:
		r = rbd_aio_write2(img, off, len, buf, c, flags);
		break;
	case GONVMF_RBD_DISCARD:
		r = rbd_aio_discard(img, off, len, c);
		break;
	case GONVMF_RBD_WRITE_ZEROES:
		r = rbd_aio_write_zeroes(img, off, len, c, 0, 0);
		break;
	case GONVMF_RBD_FLUSH:
		r = rbd_aio_flush(img, c);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		rbd_aio_release(c);
	return r;
}

// gonvmf_rbd_complete completes op on cq with ret without librbd: an operation that rode
// on another's flush, or one librbd refused to start.
static void gonvmf_rbd_complete(gonvmf_rbd_op *op, gonvmf_rbd_cq *cq, int64_t ret) {
	op->cq = cq;
	op->next = NULL;
	op->ret = ret;
	gonvmf_rbd_post(op);
}

// gonvmf_rbd_cache_options reads the image's effective rbd_cache (into on: 1, 0, -1 not
// listed) and rbd_cache_policy (into policy: 0 writethrough, 1 writearound, 2 writeback,
// -1 other or not listed): the client's configuration with the pool's and the image's
// overrides (rbd config pool|image set) applied, as librbd uses them.
static int gonvmf_rbd_cache_options(rbd_image_t img, int *on, int *policy) {
	int max = 0, r, i;
	rbd_config_option_t *opts;
	*on = -1;
	*policy = -1;
	r = rbd_config_image_list(img, NULL, &max);
	if (r < 0 && r != -ERANGE)
		return r;
	if (max <= 0)
		return 0;
	opts = calloc(max, sizeof *opts);
	if (opts == NULL)
		return -ENOMEM;
	r = rbd_config_image_list(img, opts, &max);
	if (r < 0) {
		free(opts);
		return r;
	}
	for (i = 0; i < max; i++) {
		if (strcmp(opts[i].name, "rbd_cache") == 0)
			*on = strcmp(opts[i].value, "true") == 0;
		else if (strcmp(opts[i].name, "rbd_cache_policy") == 0)
			*policy = strcmp(opts[i].value, "writethrough") == 0 ? 0 :
				strcmp(opts[i].value, "writearound") == 0 ? 1 :
				strcmp(opts[i].value, "writeback") == 0 ? 2 : -1;
	}
	rbd_config_image_list_cleanup(opts, max);
	free(opts);
	return 0;
}

static int gonvmf_rbd_watch(rbd_image_t img, gonvmf_rbd_op *op, uint64_t *handle) {
	return rbd_update_watch(img, handle, gonvmf_rbd_updated, op);
}

static int gonvmf_rbd_open(rados_ioctx_t io, const char *name, rbd_image_t *img, int ro) {
	return ro ? rbd_open_read_only(io, name, img, NULL) : rbd_open(io, name, img, NULL);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"golang.org/x/sys/unix"
)

// RBDAvailable reports whether this build has the rbd backend (the ceph build).
const RBDAvailable = true

const (
	rbdChunk    = 256     // slots allocated at a time
	rbdWatchTag = 1 << 31 // in a tag's low half: an image's watch, not a slot
)

// rbdConnKey is what makes two images share a RADOS connection.
type rbdConnKey struct{ conf, user, keyring string }

// rbdConns are the process's RADOS connections.
var rbdConns struct {
	mu sync.Mutex
	// byKey holds the connection new opens with a key share; a retired connection (see
	// rbdConn.retire) is not in it any more, and lives on while its images hold it.
	byKey map[rbdConnKey]*rbdConn
	// dialing holds the dial in progress for a key, made without mu held: opens of that
	// key wait for it instead of dialing too, and opens of other keys do not wait at all.
	dialing map[rbdConnKey]*rbdDialing
	byID    sync.Map // uint32 -> *rbdConn, read by completion handlers
	next    uint32
}

// rbdDialing is a dial in progress; done is closed when it has ended, err (written
// before) its failure.
type rbdDialing struct {
	done chan struct{}
	err  error
}

// rbdConn is one RADOS connection, shared by every image opened with its key, with the
// completion queue and reaper goroutine of the requests submitted without a Ring, and
// the slots that name requests in flight to C.
type rbdConn struct {
	id   uint32
	key  rbdConnKey
	refs int // under rbdConns.mu
	conn *rados.Conn
	log  *slog.Logger
	// retired: the cluster has blocklisted the client; new opens do not share c.
	retired atomic.Bool

	cq      *C.gonvmf_rbd_cq
	efd     int
	stop    atomic.Bool
	stopped chan struct{}

	mu        sync.Mutex
	chunks    atomic.Pointer[[]*rbdSlots] // grows under mu; read without it
	free      []uint32
	images    map[uint32]*rbdImage // by id, for their watches
	nextImage uint32

	// cache says how librbd's client cache treats writes (see rbdCacheMode).
	cache rbdCacheMode
}

type rbdSlots struct {
	s   [rbdChunk]rbdSlot
	ops *C.gonvmf_rbd_op // rbdChunk operations in C memory, one per slot
}

// rbdSlot is one request in flight. It is owned by the submitter until the operation is
// started, then by whoever takes its completion (one goroutine at a time).
type rbdSlot struct {
	r    *Request
	e    *Executor
	img  *rbdImage
	ring *Ring            // whose goroutine completes it; nil: the connection's reaper
	cq   *C.gonvmf_rbd_cq // the completion queue of ring or the reaper
	op   *C.gonvmf_rbd_op
	idx  uint32
	step int // Deallocate: the range in flight
	// flushing: the request waits for a flush of the image (an OpFlush, or the flush
	// that makes a FUA write, write zeroes or deallocate durable); see rbdImage.flush.
	// rider: its completion is the result of a flush another request started.
	flushing, rider bool
	nextFlush       *rbdSlot // under rbdImage.fmu: the next request of a flush batch
	fault           int64    // tests: the -errno to complete the operation in flight with (Faults)
	flushGen        uint64   // a flush's lead: rbdImage.acked when the flush started
	pin             runtime.Pinner
	// seq is stored before each operation is started and loaded when it completes: the
	// hand-off happens in C (librbd, the queue's atomics), which the race detector does
	// not see; this makes it visible.
	seq atomic.Uint32
}

// rbdCacheMode is what librbd's client cache does with writes, from the client's
// rbd_cache and rbd_cache_policy.
type rbdCacheMode uint8

const (
	rbdCacheNone        rbdCacheMode = iota // rbd_cache false or writethrough: a completed write is durable
	rbdCacheWriteAround                     // writes complete before the OSDs commit them; FUA honoured
	rbdCacheWriteBack                       // writes complete from the cache; FUA is write + flush
)

// rbdConnect returns a reference to the connection opens with key share, dialing it if
// there is none. Only one dial per key runs at a time, without rbdConns.mu held; the
// opens that arrive meanwhile wait for it and share its connection, or its error.
func rbdConnect(key rbdConnKey, timeout time.Duration, log *slog.Logger) (*rbdConn, error) {
	rbdConns.mu.Lock()
	for {
		if c := rbdConns.byKey[key]; c != nil && !c.retired.Load() {
			c.refs++
			rbdConns.mu.Unlock()
			return c, nil
		}
		d := rbdConns.dialing[key]
		if d == nil {
			break
		}
		rbdConns.mu.Unlock()
		<-d.done
		if d.err != nil {
			return nil, d.err
		}
		// The connection may be gone again (its images closed, or retired): look again.
		rbdConns.mu.Lock()
	}
	d := &rbdDialing{done: make(chan struct{})}
	if rbdConns.dialing == nil {
		rbdConns.dialing = map[rbdConnKey]*rbdDialing{}
	}
	rbdConns.dialing[key] = d
	rbdConns.mu.Unlock()

	c, err := newRBDConn(key, timeout, log)
	rbdConns.mu.Lock()
	delete(rbdConns.dialing, key)
	d.err = err
	close(d.done)
	if err != nil {
		rbdConns.mu.Unlock()
		return nil, err
	}
	rbdConns.next++
	c.id = rbdConns.next
	if rbdConns.byKey == nil {
		rbdConns.byKey = map[rbdConnKey]*rbdConn{}
	}
	rbdConns.byKey[key] = c
	rbdConns.byID.Store(c.id, c)
	rbdConns.mu.Unlock()
	go c.reaper()
	return c, nil
}

// newRBDConn dials key's cluster and makes the connection's completion queue; the caller
// gives it its id and publishes it.
func newRBDConn(key rbdConnKey, timeout time.Duration, log *slog.Logger) (*rbdConn, error) {
	conn, err := rbdDial(key, timeout)
	if err != nil {
		return nil, err
	}
	c := &rbdConn{key: key, refs: 1, conn: conn, log: log, images: map[uint32]*rbdImage{}, stopped: make(chan struct{})}
	c.cache = rbdCacheModeOf(conn)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		conn.Shutdown()
		return nil, fmt.Errorf("backend: rbd: eventfd: %w", err)
	}
	c.efd = efd
	c.cq = newRBDQueue(efd)
	chunks := []*rbdSlots{}
	c.chunks.Store(&chunks)
	return c, nil
}

// rbdDial connects to the cluster key names.
func rbdDial(key rbdConnKey, timeout time.Duration) (*rados.Conn, error) {
	user := key.user
	if user == "" {
		user = "admin"
	}
	who := "client." + user
	conn, err := rados.NewConnWithUser(user)
	if err != nil {
		return nil, fmt.Errorf("backend: rbd: creating the RADOS handle for %s: %w", who, err)
	}
	fail := func(err error) (*rados.Conn, error) {
		rbdShutdown(conn)
		return nil, err
	}
	if key.conf != "" {
		if err := conn.ReadConfigFile(key.conf); err != nil {
			return fail(fmt.Errorf("backend: rbd: reading ceph.conf %s: %w: check the path (ceph_conf)", key.conf, err))
		}
	} else if err := conn.ReadDefaultConfigFile(); err != nil {
		return fail(fmt.Errorf("backend: rbd: no ceph.conf found ($CEPH_CONF, /etc/ceph/ceph.conf): %w: set ceph_conf", err))
	}
	if err := conn.ParseDefaultConfigEnv(); err != nil { // CEPH_ARGS
		return fail(fmt.Errorf("backend: rbd: parsing $CEPH_ARGS: %w", err))
	}
	if key.keyring != "" {
		if err := conn.SetConfigOption("keyring", key.keyring); err != nil {
			return fail(fmt.Errorf("backend: rbd: keyring %s: %w", key.keyring, err))
		}
	}
	secs := strconv.Itoa(max(1, int((timeout+time.Second-1)/time.Second)))
	for _, o := range []string{"client_mount_timeout", "rados_mon_op_timeout"} {
		if err := conn.SetConfigOption(o, secs); err != nil {
			return fail(fmt.Errorf("backend: rbd: setting %s: %w", o, err))
		}
	}
	if err := conn.Connect(); err != nil {
		mon, _ := conn.GetConfigOption("mon_host")
		kr, _ := conn.GetConfigOption("keyring")
		hint := "check that the monitors (mon_host " + mon + ") are up and reachable"
		switch -cephErrno(err) {
		case syscall.EACCES, syscall.EPERM, syscall.ENOENT, syscall.EINVAL:
			hint = "check " + who + "'s key in the keyring (" + kr + ") and its caps"
		}
		conf := key.conf
		if conf == "" {
			conf = "default"
		}
		return fail(fmt.Errorf("backend: rbd: connecting to the Ceph cluster as %s (ceph.conf %s): %w: %s", who, conf, err, hint))
	}
	// Pool I/O and image opens may wait for the OSDs for as long as they take; only the
	// monitor commands are bounded.
	return conn, nil
}

// rbdShutdown releases conn's RADOS handle, whether or not it ever connected. go-ceph's
// Shutdown does nothing for a handle that is not connected (a failed rados_connect, a
// ceph.conf that did not read), leaving it to a finalizer: the threads a failed
// rados_connect started (log, msgr-worker-*) and the handle's memory would stay until a
// garbage collection ran it. conn is not used again.
func rbdShutdown(conn *rados.Conn) {
	runtime.SetFinalizer(conn, nil)
	C.rados_shutdown(C.rados_t(unsafe.Pointer(conn.Cluster())))
}

// cephErrno returns the (negative) errno a go-ceph error carries, or 0.
func cephErrno(err error) syscall.Errno {
	var ce interface{ ErrorCode() int }
	if errors.As(err, &ce) {
		return syscall.Errno(ce.ErrorCode())
	}
	return 0
}

func rbdCacheModeOf(conn *rados.Conn) rbdCacheMode {
	on, _ := conn.GetConfigOption("rbd_cache")
	policy, _ := conn.GetConfigOption("rbd_cache_policy")
	switch {
	case on != "true" || policy == "writethrough":
		return rbdCacheNone
	case policy == "writeback":
		return rbdCacheWriteBack
	}
	return rbdCacheWriteAround
}

// imageCacheMode returns the cache mode librbd uses for img: the client's configuration
// with the pool's and the image's overrides (rbdCacheModeOf reads the client's only).
func imageCacheMode(img C.rbd_image_t) (rbdCacheMode, error) {
	var on, policy C.int
	if r := C.gonvmf_rbd_cache_options(img, &on, &policy); r < 0 {
		return 0, syscall.Errno(-r)
	}
	switch {
	case on == -1:
		return 0, errors.New("rbd_cache is not among the image's options")
	case on == 0 || policy == 0:
		return rbdCacheNone, nil
	case policy == 2:
		return rbdCacheWriteBack, nil
	case policy == 1:
		return rbdCacheWriteAround, nil
	}
	return rbdCacheWriteBack, nil // a policy not known here: assume the cache holds writes
}

func newRBDQueue(efd int) *C.gonvmf_rbd_cq {
	q := (*C.gonvmf_rbd_cq)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gonvmf_rbd_cq{}))))
	if q == nil {
		panic("backend: rbd: out of C memory")
	}
	q.efd = C.int(efd)
	return q
}

// queueReady reports whether q has completions to take.
func queueReady(q *C.gonvmf_rbd_cq) bool {
	return atomic.LoadPointer((*unsafe.Pointer)(unsafe.Pointer(&q.head))) != nil
}

// release drops a reference; the last one stops the reaper and disconnects.
func (c *rbdConn) release() {
	rbdConns.mu.Lock()
	c.refs--
	if c.refs > 0 {
		rbdConns.mu.Unlock()
		return
	}
	if rbdConns.byKey[c.key] == c {
		delete(rbdConns.byKey, c.key)
	}
	rbdConns.mu.Unlock()
	c.stop.Store(true)
	one := uint64(1)
	unix.Write(c.efd, (*[8]byte)(unsafe.Pointer(&one))[:])
	<-c.stopped
	rbdConns.byID.Delete(c.id)
	c.conn.Shutdown()
	for _, ch := range *c.chunks.Load() {
		C.free(unsafe.Pointer(ch.ops))
	}
	if !waitPosters(c.cq, time.Now().Add(5*time.Second)) {
		return // a librbd thread still posting: the queue and its eventfd stay (leaked)
	}
	C.free(unsafe.Pointer(c.cq))
	unix.Close(c.efd)
}

// rbdBlocklisted reports whether err says the cluster has blocklisted the RADOS client:
// EBLOCKLISTED, which is ESHUTDOWN (librbd breaking a dead owner's exclusive lock
// blocklists it, rbd_blocklist_on_break_lock; so does `ceph osd blocklist add`).
func rbdBlocklisted(err error) bool {
	return errors.Is(err, syscall.ESHUTDOWN) || -cephErrno(err) == syscall.ESHUTDOWN
}

// retire takes c out of rbdConns.byKey when err says its client is blocklisted
// (rbdBlocklisted): the cluster refuses every operation of that client for the
// blocklist entry's life (an hour by default), so images opened from then on with c's key
// get a new connection, whose client has a new address. The images already on c keep it
// and their references; each is fenced (see rbdImage.fence), which asks for it to be
// reopened (a namespace reopen moves it to the new connection). The caller holds a
// reference to c.
func (c *rbdConn) retire(err error) {
	if !rbdBlocklisted(err) {
		return
	}
	if !c.retired.Swap(true) {
		rbdConns.mu.Lock()
		if rbdConns.byKey[c.key] == c {
			delete(rbdConns.byKey, c.key)
		}
		rbdConns.mu.Unlock()
		addrs, _ := c.conn.GetAddrs()
		c.log.Warn("rbd: the cluster has blocklisted this RADOS client: its images fail until they are reopened, "+
			"and images opened from now on use a new client",
			"client", "client."+orDefault(c.key.user, "admin"), "addrs", addrs, "err", err)
	}
	// Every time: an image may have opened on c after c was retired.
	c.mu.Lock()
	var fence []*rbdImage
	for _, m := range c.images {
		if !m.fenced.Load() {
			fence = append(fence, m)
		}
	}
	c.mu.Unlock()
	for _, m := range fence {
		m.fence(err)
	}
}

// errFenced is why a request of a fenced image fails that librbd did not fail itself.
var errFenced = fmt.Errorf("the cluster has blocklisted the image's RADOS client: %w", syscall.ESHUTDOWN)

// fence records that the cluster has blocklisted m's RADOS client (cause says so): from
// now on every request of m fails with ErrNeedsReopen, until m is closed and the image
// opened again, on a new client. The OSDs refuse what the client had not written yet:
// when librbd's cache completed writes no successful flush has covered since (acked !=
// flushed), they may be lost, and m fails with a sync failure (ErrSync) as well. It
// reports this once, to Spec.OnNeedsReopen.
func (m *rbdImage) fence(cause error) {
	if m.fenced.Swap(true) {
		return
	}
	// fenced is set before acked is read, and ackVolatile adds to acked before it reads
	// fenced: a write the cache completes meanwhile is either counted here or refused.
	err := fmt.Errorf("backend: rbd image %s: %w: %w", m.name, ErrNeedsReopen, cause)
	if acked, flushed := m.acked.Load(), m.flushed.Load(); acked != flushed {
		m.syncFailed(fmt.Errorf("backend: rbd image %s: %d writes reported complete since the last flush: %w: %w: %w",
			m.name, acked-flushed, ErrSync, ErrNeedsReopen, cause))
	}
	close(m.fenceDecided)
	if p := m.syncErr.Load(); p != nil {
		if errors.Is(*p, ErrNeedsReopen) {
			err = *p
		} else {
			err = fmt.Errorf("%w (after a sync failure: %w)", err, *p)
		}
	}
	m.log.Warn("rbd: the cluster has blocklisted the image's RADOS client: its requests fail until it is reopened",
		"image", m.name, "writes_lost", errors.Is(err, ErrSync), "err", err)
	if m.onReopen != nil {
		m.onReopen(err)
	}
}

// fencedError is the error of s's request on a fenced image (e: librbd's, or errFenced):
// a flush's or a durable write's is the image's sync failure if it has one (writes may be
// lost), any other's ErrNeedsReopen.
func (m *rbdImage) fencedError(s *rbdSlot, e error) error {
	r := s.r
	durable := s.flushing || r.Op == OpFlush || r.FUA
	if durable && m.fenced.Load() {
		<-m.fenceDecided // fenced is set before the decision: wait for it
	}
	if p := m.syncErr.Load(); p != nil && durable {
		return *p
	}
	what := r.Op.String()
	if s.flushing {
		what = "flush"
	}
	return fmt.Errorf("backend: rbd image %s: %s: %w: %w", m.name, what, ErrNeedsReopen, e)
}

// waitPosters waits until no librbd thread is still inside gonvmf_rbd_post on q (it may
// have pushed an operation that was taken already, and not yet signalled the queue's
// eventfd), or until deadline. Queues are freed only after it.
func waitPosters(q *C.gonvmf_rbd_cq, deadline time.Time) bool {
	for C.gonvmf_rbd_posting(q) != 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Microsecond)
	}
	return true
}

// alloc takes a free slot, growing the table by a chunk when none is free.
func (c *rbdConn) alloc() *rbdSlot {
	c.mu.Lock()
	if len(c.free) == 0 {
		chunks := *c.chunks.Load()
		ch := &rbdSlots{ops: (*C.gonvmf_rbd_op)(C.calloc(rbdChunk, C.size_t(unsafe.Sizeof(C.gonvmf_rbd_op{}))))}
		if ch.ops == nil {
			c.mu.Unlock()
			panic("backend: rbd: out of C memory")
		}
		ops := unsafe.Slice(ch.ops, rbdChunk)
		base := uint32(len(chunks) * rbdChunk)
		for i := rbdChunk - 1; i >= 0; i-- {
			idx := base + uint32(i)
			ch.s[i].op, ch.s[i].idx = &ops[i], idx
			ops[i].tag = C.uint64_t(uint64(c.id)<<32 | uint64(idx))
			c.free = append(c.free, idx)
		}
		grown := append(chunks[:len(chunks):len(chunks)], ch)
		c.chunks.Store(&grown)
	}
	idx := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.mu.Unlock()
	return c.slot(idx)
}

func (c *rbdConn) slot(idx uint32) *rbdSlot {
	return &(*c.chunks.Load())[idx/rbdChunk].s[idx%rbdChunk]
}

func (c *rbdConn) freeSlot(s *rbdSlot) {
	s.r, s.e, s.img, s.ring, s.cq, s.step = nil, nil, nil, nil, nil, 0
	s.flushing, s.rider, s.nextFlush, s.fault, s.flushGen = false, false, nil, 0, 0
	c.mu.Lock()
	c.free = append(c.free, s.idx)
	c.mu.Unlock()
}

// reaper completes the requests submitted without a Ring, and handles image watches.
func (c *rbdConn) reaper() {
	defer close(c.stopped)
	var b [8]byte
	for {
		if h := C.gonvmf_rbd_take(c.cq); h != nil {
			rbdDrain(h)
			continue
		}
		if c.stop.Load() {
			return
		}
		if _, err := unix.Read(c.efd, b[:]); err != nil && err != unix.EINTR {
			c.log.Error("rbd: reading the completion eventfd failed", "err", err)
			time.Sleep(time.Millisecond)
		}
	}
}

// rbdDrain handles a stack of completed operations, oldest first; it returns the number of
// requests that ended.
func rbdDrain(h *C.gonvmf_rbd_op) int {
	var rev *C.gonvmf_rbd_op
	for h != nil {
		n := h.next
		h.next = rev
		rev, h = h, n
	}
	done := 0
	for op := rev; op != nil; {
		next := op.next
		tag := uint64(op.tag)
		v, ok := rbdConns.byID.Load(uint32(tag >> 32))
		if !ok {
			panic(fmt.Sprintf("backend: rbd: completion of connection %d, which is gone", tag>>32))
		}
		c := v.(*rbdConn)
		if low := uint32(tag); low&rbdWatchTag != 0 {
			c.watchEvent(low&^rbdWatchTag, op)
		} else if c.completed(c.slot(low), int64(op.ret)) {
			done++
		}
		op = next
	}
	return done
}

// ringExt is the part of a Ring that completes rbd requests: a completion queue signalling
// the ring's notify descriptor, created with the first rbd request. Owner goroutine only.
type ringExt struct {
	q        *C.gonvmf_rbd_cq
	inflight atomic.Int32
}

func (x *ringExt) queue(g *Ring) *C.gonvmf_rbd_cq {
	if x.q == nil {
		x.q = newRBDQueue(g.notify)
	}
	return x.q
}

func (x *ringExt) ready() bool   { return x.q != nil && queueReady(x.q) }
func (x *ringExt) inFlight() int { return int(x.inflight.Load()) }

func (x *ringExt) reap() int {
	if x.q == nil {
		return 0
	}
	h := C.gonvmf_rbd_take(x.q)
	if h == nil {
		return 0
	}
	return rbdDrain(h)
}

// close waits until deadline for the rbd requests in flight on the ring, completing
// them; it reports whether none is left (if one is, the queue stays allocated: librbd
// will still complete into it).
func (x *ringExt) close(deadline time.Time) bool {
	if x.q == nil {
		return true
	}
	for x.inflight.Load() > 0 {
		if x.reap() == 0 {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if !waitPosters(x.q, deadline) {
		return false
	}
	C.free(unsafe.Pointer(x.q))
	x.q = nil
	return true
}

// rbdImage is an open image: the Backend.
type rbdImage struct {
	lbaSize  uint32
	lbaShift uint
	readOnly bool
	blocks   atomic.Uint64

	c        *rbdConn
	id       uint32
	spec     RBDSpec
	name     string
	ioctx    *rados.IOContext
	img      C.rbd_image_t
	cache    rbdCacheMode // librbd's cache for this image (its pool's and its own settings applied)
	fuaFlush bool         // FUA writes are followed by a flush (writeback cache)
	vwc      bool         // librbd's cache completes writes, discards or write zeroes before the OSDs have them
	log      *slog.Logger
	onResize func(uint64)
	onReopen func(error) // Spec.OnNeedsReopen
	faults   *Faults     // tests: errors replacing librbd's results

	// fenced is set once the image knows the cluster has blocklisted its RADOS client
	// (see fence): from then on every request fails with ErrNeedsReopen, none is
	// acknowledged. acked counts the requests librbd's cache completed without making
	// them durable (writes, write zeroes and deallocates without FUA while vwc); flushed
	// is what acked was when the last successful flush started. acked != flushed when
	// the client is fenced: writes reported complete may be lost.
	fenced         atomic.Bool
	acked, flushed atomic.Uint64
	// fenceDecided is closed once fence has decided whether writes may be lost (and
	// recorded the sync failure if so): a flush or durable write that finds the image
	// fenced waits for it, so that it cannot report success-after-reopen for writes the
	// fence is about to declare lost.
	fenceDecided chan struct{}

	// The image's flushes run one at a time: librbd reports the failure of a write it
	// had completed early (write-around, write-back) to one flush only, and later ones
	// succeed. While one is in flight (fbusy) the requests that need a flush wait in a
	// list (fwaitHead..fwaitTail, linked by nextFlush) and then share the next flush,
	// which the completion of the one in flight starts. syncErr is the first flush
	// failure (ErrSync), recorded before any other flush can complete: every later flush
	// returns it without asking librbd. Only a new open clears it. A flush librbd refuses
	// for want of the exclusive lock (rbdLockRefused) is not a sync failure.
	fmu                  sync.Mutex
	fbusy                bool
	fwaitHead, fwaitTail *rbdSlot
	syncErr              atomic.Pointer[error]

	watch  *C.gonvmf_rbd_op // C memory; freed by Close or, if queued then, by the reaper
	handle C.uint64_t
	mu     sync.Mutex // guards img against Close for the watch's size refresh
	closed bool
	// sizeEvents counts the watch events no size read has covered yet. The event that
	// makes it 1 starts the image's one size reader (sizers, which Close waits for),
	// off the reaper: the read may wait for the OSDs (librbd refreshes the header), and
	// the reaper completes every other request of the connection. Events arriving during
	// a read make the reader read once more. Added to under c.mu, while m is in c.images.
	sizeEvents atomic.Int32
	sizers     sync.WaitGroup
}

func openRBD(s Spec) (Backend, error) {
	rs := s.RBD
	if err := rs.check(s); err != nil {
		return nil, err
	}
	lba, shift, err := checkLBASize(s.LBASize, 512)
	if err != nil {
		return nil, err
	}
	timeout := rs.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultRBDConnectTimeout
	}
	// An open that finds the shared client blocklisted retires that connection and is
	// tried once more, on a new one.
	for retry := true; ; retry = false {
		c, err := rbdConnect(rbdConnKey{rs.Conf, rs.User, rs.Keyring}, timeout, s.Logger)
		if err != nil {
			return nil, err
		}
		m := &rbdImage{lbaSize: lba, lbaShift: shift, readOnly: s.ReadOnly, c: c, spec: rs, name: rs.Name(),
			log: s.Logger, onResize: s.OnResize, onReopen: s.OnNeedsReopen, faults: s.Faults,
			fenceDecided: make(chan struct{})}
		err = m.open(timeout)
		if err == nil {
			return m, nil
		}
		if errors.Is(err, errOpenAbandoned) { // the open's goroutine releases c
			return nil, err
		}
		c.retire(err)
		c.release()
		if !retry || !rbdBlocklisted(err) {
			return nil, err
		}
		s.Logger.Info("rbd: retrying the open on a new RADOS client", "image", rs.Name(), "err", err)
	}
}

// open opens the pool's I/O context and the image (creating it when asked), reads its
// size and registers the watch.
func (m *rbdImage) open(timeout time.Duration) error {
	rs := m.spec
	ioctx, err := m.c.conn.OpenIOContext(rs.Pool)
	if err != nil {
		if errors.Is(err, rados.ErrNotFound) {
			return fmt.Errorf("backend: rbd image %s: pool %q does not exist: create it (ceph osd pool create %s && rbd pool init %s) or fix pool",
				m.name, rs.Pool, rs.Pool, rs.Pool)
		}
		return fmt.Errorf("backend: rbd image %s: opening pool %q: %w", m.name, rs.Pool, err)
	}
	ioctx.SetNamespace(rs.Namespace)
	m.ioctx = ioctx
	img, err := m.openImage(timeout)
	if errors.Is(err, syscall.ENOENT) && rs.CreateSize != 0 {
		if err = m.create(); err == nil {
			img, err = m.openImage(timeout)
		}
	}
	if err != nil {
		if !errors.Is(err, errOpenAbandoned) {
			ioctx.Destroy()
		}
		return err
	}
	m.img = img
	var size C.uint64_t
	if r := C.rbd_get_size(img, &size); r < 0 {
		m.closeImage()
		return fmt.Errorf("backend: rbd image %s: reading its size: %w", m.name, syscall.Errno(-r))
	}
	if uint64(size) < uint64(m.lbaSize) {
		m.closeImage()
		return fmt.Errorf("backend: rbd image %s: its size %d bytes is less than one %d-byte block: grow it (rbd resize)",
			m.name, uint64(size), m.lbaSize)
	}
	if uint64(size)%uint64(m.lbaSize) != 0 {
		m.log.Warn("rbd image size is not a multiple of the lba size: the last partial block is not served",
			"image", m.name, "size", uint64(size), "lba_size", m.lbaSize)
	}
	m.blocks.Store(uint64(size) >> m.lbaShift)
	m.cache = m.c.cache
	if mode, err := imageCacheMode(img); err == nil {
		m.cache = mode
	} else {
		m.log.Warn("rbd: cannot read the image's cache settings: using the client's", "image", m.name,
			"cache", m.cache.String(), "err", err)
	}
	m.vwc = m.cache != rbdCacheNone
	m.fuaFlush = m.cache == rbdCacheWriteBack

	m.c.mu.Lock()
	m.c.nextImage++
	m.id = m.c.nextImage & (rbdWatchTag - 1)
	m.c.images[m.id] = m
	m.c.mu.Unlock()
	m.watch = (*C.gonvmf_rbd_op)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gonvmf_rbd_op{}))))
	m.watch.cq = m.c.cq
	m.watch.tag = C.uint64_t(uint64(m.c.id)<<32 | uint64(rbdWatchTag|m.id))
	if r := C.gonvmf_rbd_watch(img, m.watch, &m.handle); r < 0 {
		// Not fatal: the namespace keeps its size until the next open. The image stays in
		// c.images, which retire fences.
		m.log.Warn("rbd: cannot watch the image for resizes", "image", m.name, "err", syscall.Errno(-r))
		C.free(unsafe.Pointer(m.watch))
		m.watch = nil
	}
	m.log.Info("rbd image open", "image", m.name, "size", uint64(size), "lba_size", m.lbaSize,
		"read_only", m.readOnly, "client", "client."+orDefault(rs.User, "admin"), "cache", m.cache.String())
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (c rbdCacheMode) String() string {
	switch c {
	case rbdCacheWriteAround:
		return "writearound"
	case rbdCacheWriteBack:
		return "writeback"
	}
	return "none"
}

// errOpenAbandoned: rbd_open did not answer in time; the goroutine still waiting for it
// owns the I/O context and the connection reference, and releases them when it answers.
var errOpenAbandoned = errors.New("no answer from the OSDs")

// openImage opens the image, giving up after timeout.
func (m *rbdImage) openImage(timeout time.Duration) (C.rbd_image_t, error) {
	type result struct {
		img C.rbd_image_t
		r   C.int
	}
	name := C.CString(m.spec.Image)
	ro := C.int(0)
	if m.readOnly {
		ro = 1
	}
	var (
		mu        sync.Mutex
		abandoned bool
	)
	ch := make(chan result, 1)
	io := C.rados_ioctx_t(m.ioctx.Pointer())
	go func() {
		defer C.free(unsafe.Pointer(name))
		var res result
		res.r = C.gonvmf_rbd_open(io, name, &res.img, ro)
		mu.Lock()
		defer mu.Unlock()
		if !abandoned {
			ch <- res
			return
		}
		if res.r >= 0 {
			C.rbd_close(res.img)
		}
		m.ioctx.Destroy()
		m.c.retire(syscall.Errno(-min(res.r, 0)))
		m.c.release()
		m.log.Info("rbd: an abandoned image open has ended", "image", m.name, "err", syscall.Errno(-min(res.r, 0)))
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var res result
	select {
	case res = <-ch:
	case <-t.C:
		mu.Lock()
		select {
		case res = <-ch: // it answered just now
		default:
			abandoned = true
		}
		mu.Unlock()
		if abandoned {
			return nil, fmt.Errorf("backend: rbd image %s: %w within %s: check `ceph -s` (are the OSDs up, the pool's PGs active?)",
				m.name, errOpenAbandoned, timeout)
		}
	}
	if res.r < 0 {
		return nil, m.openError(syscall.Errno(-res.r))
	}
	return res.img, nil
}

func (m *rbdImage) openError(e syscall.Errno) error {
	rs := m.spec
	switch e {
	case syscall.ENOENT:
		return fmt.Errorf("backend: rbd image %s: %w: no image %q in pool %q%s: create it (rbd create --size 10G %s) or set create_size",
			m.name, e, rs.Image, rs.Pool, nsSuffix(rs.Namespace), m.name)
	case syscall.EPERM, syscall.EACCES:
		return fmt.Errorf("backend: rbd image %s: %w: client.%s may not open it: give it caps (ceph auth caps client.%s mon 'profile rbd' osd 'profile rbd pool=%s')",
			m.name, e, orDefault(rs.User, "admin"), orDefault(rs.User, "admin"), rs.Pool)
	}
	return fmt.Errorf("backend: rbd image %s: opening it: %w", m.name, e)
}

func nsSuffix(ns string) string {
	if ns == "" {
		return ""
	}
	return fmt.Sprintf(" (namespace %q)", ns)
}

// create makes the image with rs.CreateSize bytes and the cluster's default features.
func (m *rbdImage) create() error {
	rs := m.spec
	opts := rbd.NewRbdImageOptions()
	defer opts.Destroy()
	err := rbd.CreateImage(m.ioctx, rs.Image, rs.CreateSize, opts)
	if err != nil && !errors.Is(err, rbd.ErrExist) {
		return fmt.Errorf("backend: rbd image %s: creating it with %d bytes: %w", m.name, rs.CreateSize, err)
	}
	if err == nil {
		m.log.Info("rbd image created", "image", m.name, "size", rs.CreateSize)
	}
	return nil
}

func (m *rbdImage) closeImage() {
	C.rbd_close(m.img)
	m.ioctx.Destroy()
}

func (m *rbdImage) LBASize() uint32   { return m.lbaSize }
func (m *rbdImage) NumBlocks() uint64 { return m.blocks.Load() }
func (m *rbdImage) ReadOnly() bool    { return m.readOnly }

func (m *rbdImage) Info() Info {
	return Info{
		Kind:               KindRBD,
		Path:               m.name,
		VolatileWriteCache: m.vwc,
		PhysicalBlockSize:  m.lbaSize,
		Async:              true,
	}
}

// Close unregisters the watch and closes the image; the connection goes with its last
// image.
func (m *rbdImage) Close() error {
	var err error
	if m.watch != nil {
		if r := C.rbd_update_unwatch(m.img, m.handle); r < 0 {
			err = fmt.Errorf("backend: rbd image %s: removing the watch: %w", m.name, syscall.Errno(-r))
		}
	}
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.c.mu.Lock()
	delete(m.c.images, m.id)
	// No callback can post the watch any more; if it is queued, the reaper frees it.
	if m.watch != nil && atomic.LoadUint32((*uint32)(unsafe.Pointer(&m.watch.pending))) == 0 {
		C.free(unsafe.Pointer(m.watch))
	}
	m.c.mu.Unlock()
	m.watch = nil
	m.sizers.Wait() // out of c.images: no reader starts any more
	if r := C.rbd_close(m.img); r < 0 && err == nil {
		err = fmt.Errorf("backend: rbd image %s: closing it: %w", m.name, syscall.Errno(-r))
	}
	m.ioctx.Destroy()
	m.c.retire(err)
	m.c.release()
	m.log.Info("rbd image closed", "image", m.name)
	return err
}

// watchEvent handles a header update of image id: its size reader reads the size.
func (c *rbdConn) watchEvent(id uint32, op *C.gonvmf_rbd_op) {
	c.mu.Lock()
	m := c.images[id]
	if m == nil { // closed meanwhile: the op is ours to free
		c.mu.Unlock()
		C.free(unsafe.Pointer(op))
		return
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&op.pending)), 0)
	if m.sizeEvents.Add(1) == 1 {
		m.sizers.Add(1)
		go m.sizeReader()
	}
	c.mu.Unlock()
}

// sizeReader reads the image's size until no watch event has arrived since its last read
// (see sizeEvents).
func (m *rbdImage) sizeReader() {
	defer m.sizers.Done()
	for {
		n := m.sizeEvents.Load()
		m.readSize()
		if m.sizeEvents.CompareAndSwap(n, 0) {
			return
		}
	}
}

// readSize reads the image's size after a header update: a resize changes the capacity.
func (m *rbdImage) readSize() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	if m.faults != nil {
		m.faults.sizeRead()
	}
	var size C.uint64_t
	r := C.rbd_get_size(m.img, &size)
	m.mu.Unlock()
	if r < 0 {
		m.log.Warn("rbd: reading the image size after an update failed", "image", m.name, "err", syscall.Errno(-r))
		m.c.retire(syscall.Errno(-r)) // librbd tells its update watchers when the cluster blocklists the client
		return
	}
	blocks := uint64(size) >> m.lbaShift
	old := m.blocks.Swap(blocks)
	if old == blocks {
		return
	}
	m.log.Info("rbd image resized", "image", m.name, "size", uint64(size), "blocks", blocks, "old_blocks", old)
	if m.onResize != nil {
		m.onResize(blocks)
	}
}

// check validates r against the image before it is started.
func (m *rbdImage) check(r *Request) error {
	n := m.blocks.Load()
	inRange := func(slba, nlb uint64) error {
		if nlb > n || slba > n-nlb {
			return rangeError(slba, nlb, n)
		}
		return nil
	}
	switch r.Op {
	case OpRead, OpWrite:
		if r.Op == OpWrite && m.readOnly {
			return ErrReadOnly
		}
		l := uint64(len(r.Buf))
		if l == 0 || l&uint64(m.lbaSize-1) != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(r.Buf)))&(Alignment-1) != 0 {
			return unalignedError(r.Buf, m.lbaSize)
		}
		if r.NLB != 0 && r.NLB != l>>m.lbaShift {
			return nlbMismatch(r, m.lbaSize)
		}
		return inRange(r.SLBA, l>>m.lbaShift)
	case OpFlush:
		return nil
	case OpWriteZeroes, OpDeallocate:
		if m.readOnly {
			return ErrReadOnly
		}
		if r.Op == OpDeallocate && len(r.Ranges) > 0 {
			for _, rg := range r.Ranges {
				if err := inRange(rg.SLBA, rg.NLB); err != nil {
					return err
				}
			}
			return nil
		}
		return inRange(r.SLBA, r.NLB)
	}
	return fmt.Errorf("%w %d", ErrInvalidOp, uint8(r.Op))
}

// start begins r (asyncStarter).
func (m *rbdImage) start(r *Request, e *Executor, g *Ring) {
	if err := m.check(r); err != nil {
		e.complete(r, err)
		return
	}
	s := m.c.alloc()
	s.r, s.e, s.img, s.ring, s.step = r, e, m, g, 0
	s.cq = m.c.cq
	if g != nil {
		s.cq = g.ext.queue(g)
	}
	if r.Op == OpRead || r.Op == OpWrite {
		// Pin does nothing for memory outside the Go heap (the target's registered pool).
		s.pin.Pin(unsafe.SliceData(r.Buf))
	}
	if g != nil {
		g.ext.inflight.Add(1)
	}
	if m.fenced.Load() {
		m.c.finish(s, m.fencedError(s, errFenced))
		return
	}
	if r.Op == OpDeallocate && len(r.Ranges) > 0 {
		s.step = m.nextRange(r, 0)
		if s.step == len(r.Ranges) { // every range is empty
			m.c.finish(s, nil)
			return
		}
	} else if (r.Op == OpDeallocate || r.Op == OpWriteZeroes) && r.NLB == 0 {
		m.c.finish(s, nil)
		return
	}
	var err error
	if r.Op == OpFlush {
		err = m.flush(s)
	} else {
		err = m.issue(s)
	}
	if err != nil {
		m.c.finish(s, err)
	}
}

// nextRange returns the index of the first range from i with blocks in it.
func (m *rbdImage) nextRange(r *Request, i int) int {
	for i < len(r.Ranges) && r.Ranges[i].NLB == 0 {
		i++
	}
	return i
}

// issue starts the operation s is at (not a flush: see flush).
func (m *rbdImage) issue(s *rbdSlot) error {
	r := s.r
	var (
		kind   C.int
		off, n uint64
		flags  C.int
		buf    unsafe.Pointer
	)
	switch r.Op {
	case OpRead:
		kind, off, n = C.GONVMF_RBD_READ, r.SLBA<<m.lbaShift, uint64(len(r.Buf))
		buf = unsafe.Pointer(unsafe.SliceData(r.Buf))
	case OpWrite:
		kind, off, n = C.GONVMF_RBD_WRITE, r.SLBA<<m.lbaShift, uint64(len(r.Buf))
		buf = unsafe.Pointer(unsafe.SliceData(r.Buf))
		if r.FUA {
			flags = C.LIBRADOS_OP_FLAG_FADVISE_FUA
		}
	case OpWriteZeroes:
		kind, off, n = C.GONVMF_RBD_WRITE_ZEROES, r.SLBA<<m.lbaShift, r.NLB<<m.lbaShift
	case OpDeallocate:
		kind, off, n = C.GONVMF_RBD_DISCARD, r.SLBA<<m.lbaShift, r.NLB<<m.lbaShift
		if len(r.Ranges) > 0 {
			rg := r.Ranges[s.step]
			off, n = rg.SLBA<<m.lbaShift, rg.NLB<<m.lbaShift
		}
	}
	if r.Op == OpWrite {
		s.fault = m.injected(false)
	}
	s.seq.Add(1)
	if rc := C.gonvmf_rbd_start(m.img, s.op, s.cq, kind, C.uint64_t(off), C.uint64_t(n), buf, flags); rc < 0 {
		m.c.retire(syscall.Errno(-rc))
		return m.ioError(s, syscall.Errno(-rc))
	}
	return nil
}

// flush makes s's request wait for a flush of the image: the one about to start if none
// is in flight, else the next one (see fmu). It returns the image's sync failure, if any,
// instead. Called by s's owner.
func (m *rbdImage) flush(s *rbdSlot) error {
	if p := m.syncErr.Load(); p != nil {
		return *p
	}
	s.flushing = true
	m.fmu.Lock()
	if m.fbusy {
		if m.fwaitTail == nil {
			m.fwaitHead = s
		} else {
			m.fwaitTail.nextFlush = s
		}
		m.fwaitTail = s
		m.fmu.Unlock()
		return nil
	}
	m.fbusy = true
	m.fmu.Unlock()
	m.startFlush(s)
	return nil
}

// startFlush starts a librbd flush for lead and the requests chained to it; any
// goroutine may call it. A flush librbd refuses to start completes with its error.
func (m *rbdImage) startFlush(lead *rbdSlot) {
	lead.flushGen = m.acked.Load() // what a success covers
	lead.fault = m.injected(true)
	lead.seq.Add(1)
	if rc := C.gonvmf_rbd_start(m.img, lead.op, lead.cq, C.GONVMF_RBD_FLUSH, 0, 0, nil, 0); rc < 0 {
		C.gonvmf_rbd_complete(lead.op, lead.cq, C.int64_t(rc))
	}
}

// flushDone ends the flush lead started, with librbd's result ret: the requests that
// shared it complete with ret on their own queues, and the requests that waited meanwhile
// share the next flush — or, if the image has failed, complete failing without one. A
// failure is recorded (syncErr) before this is called. Called by lead's owner.
func (m *rbdImage) flushDone(lead *rbdSlot, ret int64) {
	m.fmu.Lock()
	riders := lead.nextFlush
	lead.nextFlush = nil
	next := m.fwaitHead
	m.fwaitHead, m.fwaitTail = nil, nil
	var refused *rbdSlot
	if next != nil && m.syncErr.Load() != nil {
		refused, next = next, nil
	}
	m.fbusy = next != nil
	m.fmu.Unlock()
	rbdRide(riders, ret)
	rbdRide(refused, -int64(syscall.EIO)) // their completion returns syncErr
	if next != nil {
		m.startFlush(next)
	}
}

// rbdRide completes the chain of requests from s with the result of a flush they shared.
func rbdRide(s *rbdSlot, ret int64) {
	for s != nil {
		next := s.nextFlush
		s.nextFlush, s.rider = nil, true
		s.seq.Add(1)
		C.gonvmf_rbd_complete(s.op, s.cq, C.int64_t(ret))
		s = next
	}
}

// syncFailed records the image's first sync failure (see syncErr) and returns err.
func (m *rbdImage) syncFailed(err error) error {
	if m.syncErr.CompareAndSwap(nil, &err) {
		m.log.Error("backend: syncing to stable storage failed: writes reported complete may be lost; "+
			"every later flush fails until the namespace is reopened", "image", m.name, "err", err)
	}
	return err
}

// injected returns the -errno a test's Faults puts in place of librbd's result of the
// flush (sync) or write about to start, or 0. It is chosen as the operation starts, so
// that it belongs to that operation as librbd's own result would, whichever goroutine
// takes the completion and whenever.
func (m *rbdImage) injected(sync bool) int64 {
	if m.faults == nil {
		return 0
	}
	var err error
	if sync {
		err = m.faults.sync()
	} else {
		err = m.faults.write()
	}
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if !errors.As(err, &en) {
		en = syscall.EIO
	}
	return -int64(en)
}

// rbdLockRefused reports whether librbd's error e says it did not run the operation
// because it could not get the image's exclusive lock: EROFS, its answer while a peer
// holds the lock and refuses to give it up (the peer took it with rbd_lock_acquire). The
// operation stopped there, above librbd's cache: it wrote nothing and reports the fate of
// no earlier write, so a flush or FUA write failing with it is not a sync failure. The
// writes of ours the cache held were flushed when we gave the lock up.
func rbdLockRefused(e error) bool { return errors.Is(e, syscall.EROFS) }

func (m *rbdImage) ioError(s *rbdSlot, e error) error {
	r := s.r
	if rbdBlocklisted(e) { // the image is fenced (retire ran): not a sync failure of its own
		return m.fencedError(s, e)
	}
	if s.flushing {
		if rbdLockRefused(e) {
			return fmt.Errorf("backend: rbd image %s: flush refused without the exclusive lock: %w", m.name, e)
		}
		return fmt.Errorf("backend: rbd image %s: flush: %w: %w", m.name, ErrSync, e)
	}
	switch r.Op {
	case OpRead, OpWrite:
		err := fmt.Errorf("backend: rbd image %s: %s at byte %d, %d bytes: %w", m.name, r.Op, r.SLBA<<m.lbaShift, len(r.Buf), e)
		// A FUA write waits for the OSDs to commit it and may report the loss of writes
		// completed earlier, as a write through an O_DSYNC descriptor does: every error is
		// a sync failure except the refusal of a full cluster or pool (ENOSPC, EDQUOT) and
		// librbd's own for want of the exclusive lock (rbdLockRefused), which write nothing.
		if r.Op == OpWrite && r.FUA && !errors.Is(e, syscall.ENOSPC) && !errors.Is(e, syscall.EDQUOT) && !rbdLockRefused(e) {
			return m.syncFailed(fmt.Errorf("backend: rbd image %s: FUA write at byte %d, %d bytes: %w: %w",
				m.name, r.SLBA<<m.lbaShift, len(r.Buf), ErrSync, e))
		}
		return err
	case OpDeallocate:
		if len(r.Ranges) > 0 {
			rg := r.Ranges[s.step]
			return fmt.Errorf("backend: rbd image %s: discard at byte %d, %d bytes: %w", m.name, rg.SLBA<<m.lbaShift, rg.NLB<<m.lbaShift, e)
		}
	}
	return fmt.Errorf("backend: rbd image %s: %s at byte %d, %d bytes: %w", m.name, r.Op, r.SLBA<<m.lbaShift, r.NLB<<m.lbaShift, e)
}

// completed handles librbd's result of s's operation: the request's next step, or its end
// (reported true).
func (c *rbdConn) completed(s *rbdSlot, ret int64) bool {
	s.seq.Load()
	m, r := s.img, s.r
	if s.fault < 0 {
		ret, s.fault = s.fault, 0
	}
	if ret < 0 {
		c.retire(syscall.Errno(-ret))
	}
	if s.flushing {
		// A failed flush is a sync failure, recorded before flushDone lets another flush
		// complete, unless librbd refused it for want of the exclusive lock
		// (rbdLockRefused): then it and its riders fail with the refusal, and the image is
		// not failed.
		var err error
		if ret < 0 {
			err = m.ioError(s, syscall.Errno(-ret))
		}
		if !s.rider {
			if errors.Is(err, ErrSync) {
				m.syncFailed(err)
			} else if ret >= 0 {
				m.flushed.Store(s.flushGen) // flushes run one at a time: it only grows
			}
			m.flushDone(s, ret)
		}
		if p := m.syncErr.Load(); p != nil { // this flush's failure, or an earlier one
			err = *p
		}
		c.finish(s, err)
		return true
	}
	if ret < 0 {
		c.finish(s, m.ioError(s, syscall.Errno(-ret)))
		return true
	}
	// then is the request's next step: a flush to make it durable, if it needs one.
	then := func() bool {
		if !r.FUA {
			c.ackVolatile(s)
			return true
		}
		if err := m.flush(s); err != nil {
			c.finish(s, err)
			return true
		}
		return false
	}
	switch r.Op {
	case OpRead:
		if ret != int64(len(r.Buf)) {
			c.finish(s, m.ioError(s, fmt.Errorf("%d of %d bytes: %w", ret, len(r.Buf), io.ErrUnexpectedEOF)))
			return true
		}
	case OpWrite:
		if m.fuaFlush { // writeback: the FUA flag alone does not reach the OSDs
			return then()
		}
		if m.vwc && !r.FUA { // write-around: completed before the OSDs have it
			c.ackVolatile(s)
			return true
		}
	case OpWriteZeroes, OpDeallocate:
		if r.Op == OpDeallocate && len(r.Ranges) > 0 {
			if s.step = m.nextRange(r, s.step+1); s.step < len(r.Ranges) {
				if err := m.issue(s); err != nil {
					c.finish(s, err)
					return true
				}
				return false
			}
		}
		// librbd's cache (write-around as well as write-back) completes discards and
		// write zeroes before the OSDs have them, and they take no FUA flag.
		if m.vwc {
			return then()
		}
	}
	c.finish(s, nil)
	return true
}

// ackVolatile ends s's request, a write, write zeroes or deallocate librbd's cache
// completed without making it durable, counting it (acked). On a fenced image it fails:
// the OSDs refuse the client's writes, so the data may never reach them.
func (c *rbdConn) ackVolatile(s *rbdSlot) {
	m := s.img
	m.acked.Add(1)
	if m.fenced.Load() {
		c.finish(s, m.fencedError(s, errFenced))
		return
	}
	c.finish(s, nil)
}

// finish ends s's request and frees the slot.
func (c *rbdConn) finish(s *rbdSlot, err error) {
	r, e, g := s.r, s.e, s.ring
	s.pin.Unpin()
	c.freeSlot(s)
	if g != nil {
		g.ext.inflight.Add(-1)
	}
	e.complete(r, err)
}

// do runs r synchronously (the Backend methods).
func (m *rbdImage) do(r *Request) error {
	done := make(chan struct{})
	r.Done = func(*Request) { close(done) }
	m.start(r, nil, nil)
	<-done
	return r.Err
}

func (m *rbdImage) ReadBlocks(buf []byte, slba uint64) error {
	return m.do(&Request{Op: OpRead, SLBA: slba, Buf: buf})
}

func (m *rbdImage) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	return m.do(&Request{Op: OpWrite, SLBA: slba, Buf: buf, FUA: fua})
}

func (m *rbdImage) Flush() error { return m.do(&Request{Op: OpFlush}) }

func (m *rbdImage) Deallocate(slba, nlb uint64) error {
	return m.do(&Request{Op: OpDeallocate, SLBA: slba, NLB: nlb})
}

func (m *rbdImage) WriteZeroes(slba, nlb uint64) error {
	return m.do(&Request{Op: OpWriteZeroes, SLBA: slba, NLB: nlb})
}
