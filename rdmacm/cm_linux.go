//go:build cgo && !nordma

package rdmacm

/*
#include <stdlib.h>
#include "verbs_linux.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// EventChannel delivers connection manager events for the CM IDs created
// on it (and for the IDs of connections requested through its listeners).
// Read it from one goroutine with GetEvent.
type EventChannel struct {
	node
	ch  *C.struct_rdma_event_channel
	pfd *pollFD

	// qpMu is held around the reading of an event and around the destruction of a QP of
	// one of the channel's IDs: librdmacm moves an ID's QP to its next state inside
	// rdma_get_cm_event (to RTS on CONNECT_RESPONSE, to error on REJECTED), on the reading
	// thread, and that QP must not be destroyed meanwhile (see QP.Close).
	qpMu sync.Mutex

	getMu   sync.Mutex         // one reader at a time; guards ev and pending
	ev      *C.gonvmf_cm_event // C memory the reader copies events into
	readRC  C.int
	readFn  func(uintptr) bool
	pending []*Event // read while Dial waited for another ID's event
}

// NewEventChannel opens an rdma_cm event channel. It fails with an error
// wrapping ErrNoDevice when libibverbs finds no RDMA device or the rdma_cm
// device is missing (module rdma_ucm).
func NewEventChannel() (*EventChannel, error) {
	c, errno := C.rdma_create_event_channel()
	if c == nil {
		e := errnoFrom(errno)
		switch e {
		case syscall.ENODEV, syscall.ENOENT, syscall.ENXIO, syscall.EPERM, syscall.ENOSYS:
			// librdmacm reports "no devices" as ENODEV and a missing or
			// incompatible rdma_ucm as EPERM/ENOENT.
			return nil, fmt.Errorf("%w (rdma_create_event_channel: %v)", ErrNoDevice, e)
		}
		return nil, newError("rdma_create_event_channel", e, "")
	}
	pfd, err := newPollFD(int(c.fd), "rdma_cm event channel")
	if err != nil {
		C.rdma_destroy_event_channel(c)
		return nil, err
	}
	ch := &EventChannel{ch: c, pfd: pfd}
	ch.ev = (*C.gonvmf_cm_event)(C.calloc(1, C.sizeof_gonvmf_cm_event))
	ch.readFn = func(uintptr) bool {
		ch.qpMu.Lock() // the descriptor is non-blocking: held for one event at most
		ch.readRC = C.gonvmf_get_cm_event(ch.ch, ch.ev)
		ch.qpMu.Unlock()
		return ch.readRC != 0
	}
	return ch, nil
}

// CreateID creates a CM ID for a reliable-connected QP (port space TCP,
// as NVMe-oF uses) whose events arrive on ch.
func (ch *EventChannel) CreateID() (*CMID, error) {
	if !ch.acquire() {
		return nil, ErrClosed
	}
	defer ch.release()
	id := &CMID{ch: ch}
	id.handle = cmids.add(id)
	var cid *C.struct_rdma_cm_id
	if rc := C.gonvmf_create_id(ch.ch, C.uintptr_t(id.handle), &cid); rc != 0 {
		cmids.remove(id.handle)
		return nil, newError("rdma_create_id", errnoOf(rc), "RDMA_PS_TCP")
	}
	id.id = cid
	ch.addKid(id)
	return id, nil
}

// Listen creates a CM ID bound to addr (port 0 picks a free port: see
// LocalAddr) and listening with the given backlog. Connection requests
// arrive as EventConnectRequest on ch.
func (ch *EventChannel) Listen(addr netip.AddrPort, backlog int) (*CMID, error) {
	id, err := ch.CreateID()
	if err != nil {
		return nil, err
	}
	if err := id.Bind(addr); err != nil {
		id.Close()
		return nil, err
	}
	if err := id.Listen(backlog); err != nil {
		id.Close()
		return nil, err
	}
	return id, nil
}

// GetEvent waits for the next event until ctx is done or the channel is
// closed (ErrClosed). The event is already acknowledged to librdmacm; its
// private data is a copy. A CONNECT_REQUEST's new ID belongs to the
// caller. It allocates (CM events are not on the I/O path).
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	ch.getMu.Lock()
	defer ch.getMu.Unlock()
	if len(ch.pending) > 0 {
		ev := ch.pending[0]
		ch.pending = slices.Delete(ch.pending, 0, 1)
		return ev, nil
	}
	return ch.readEvent(ctx)
}

// waitFor returns the next event for id, keeping events for other IDs for
// GetEvent.
func (ch *EventChannel) waitFor(ctx context.Context, id *CMID) (*Event, error) {
	ch.getMu.Lock()
	defer ch.getMu.Unlock()
	for i, ev := range ch.pending {
		if ev.ID == id {
			ch.pending = slices.Delete(ch.pending, i, i+1)
			return ev, nil
		}
	}
	for {
		ev, err := ch.readEvent(ctx)
		if err != nil {
			return nil, err
		}
		if ev.ID == id {
			return ev, nil
		}
		ch.pending = append(ch.pending, ev)
	}
}

// readEvent reads one event from the channel; getMu is held.
func (ch *EventChannel) readEvent(ctx context.Context) (*Event, error) {
	for {
		if ch.ev == nil {
			return nil, ErrClosed
		}
		if err := ch.pfd.waitCtx(ctx, ch.readFn); err != nil {
			if ch.isClosed() {
				return nil, ErrClosed
			}
			return nil, err
		}
		if ch.readRC < 0 {
			return nil, newError("rdma_get_cm_event", negErrno(ch.readRC), "")
		}
		if ev := ch.convert(); ev != nil {
			return ev, nil
		}
	}
}

// convert turns the C event into an Event, or returns nil for an event of
// an ID closed meanwhile.
func (ch *EventChannel) convert() *Event {
	e := ch.ev
	ev := &Event{
		Type:   EventType(e._type),
		Status: int(e.status),
		Param: ConnParam{
			ResponderResources: uint8(e.responder_resources),
			InitiatorDepth:     uint8(e.initiator_depth),
			FlowControl:        uint8(e.flow_control),
			RetryCount:         uint8(e.retry_count),
			RNRRetryCount:      uint8(e.rnr_retry_count),
			SRQ:                uint8(e.srq),
			QPNum:              uint32(e.qp_num),
		},
	}
	if n := int(e.private_data_len); n > 0 {
		ev.Param.PrivateData = C.GoBytes(unsafe.Pointer(&e.private_data[0]), C.int(n))
	}
	if ev.Type == EventConnectRequest {
		nid := e.id
		lis, ok := cmids.get(uintptr(e.listen_handle))
		if !ok || !ch.acquire() {
			// The listener is gone: refuse the request.
			C.gonvmf_reject(nid, nil, 0)
			C.gonvmf_destroy_id(nid)
			return nil
		}
		defer ch.release()
		id := &CMID{ch: ch, id: nid}
		id.handle = cmids.add(id)
		C.gonvmf_set_id_handle(nid, C.uintptr_t(id.handle))
		ch.addKid(id)
		ev.ID, ev.Listener = id, lis
		return ev
	}
	id, ok := cmids.get(uintptr(e.id_handle))
	if !ok {
		return nil
	}
	ev.ID = id
	return ev
}

// Close destroys the channel's CM IDs (and their QPs), then the channel. A
// waiting GetEvent returns ErrClosed.
func (ch *EventChannel) Close() error {
	if ch == nil {
		return nil
	}
	return ch.closeOnce(func() error {
		ch.pfd.close() // wakes GetEvent, waits for a running read
		ch.getMu.Lock()
		C.free(unsafe.Pointer(ch.ev))
		ch.ev = nil
		ch.pending = nil
		ch.getMu.Unlock()
		C.rdma_destroy_event_channel(ch.ch)
		return nil
	})
}

// CMID is an rdma_cm identifier: a listener, or one end of a connection
// with at most one QP.
type CMID struct {
	node
	id     *C.struct_rdma_cm_id
	handle uintptr

	opMu sync.Mutex // serializes CM calls on the ID; guards ch and qp
	ch   *EventChannel
	qp   *QP
}

// do runs a CM call on the ID.
func (id *CMID) do(f func() C.int, op, format string, args ...any) error {
	if !id.acquire() {
		return ErrClosed
	}
	id.opMu.Lock()
	rc := f()
	id.opMu.Unlock()
	id.release() // before formatting the error: String takes the lock
	if rc != 0 {
		return newError(op, errnoOf(rc), format, args...)
	}
	return nil
}

// Bind binds the ID to a local address (and so to the device that owns
// it, unless the address is a wildcard). An IPv6 address is bound IPv6-only
// (RDMA_OPTION_ID_AFONLY, as the Linux target binds): [::]:4420 and
// 0.0.0.0:4420 are two listeners that do not overlap.
func (id *CMID) Bind(addr netip.AddrPort) error {
	a := toCAddr(addr)
	return id.do(func() C.int { return C.gonvmf_bind(id.id, &a) }, "rdma_bind_addr", "%v", addr)
}

// Listen starts listening for connection requests on the bound address.
func (id *CMID) Listen(backlog int) error {
	return id.do(func() C.int { return C.gonvmf_listen(id.id, C.int(backlog)) }, "rdma_listen", "%v, %d", id, backlog)
}

// ResolveAddr starts resolving dst (and src, if valid) to a device;
// EventAddrResolved or EventAddrError follows.
func (id *CMID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	s := toCAddr(netip.AddrPortFrom(src, 0))
	d := toCAddr(dst)
	ms := C.int(timeout.Milliseconds())
	return id.do(func() C.int { return C.gonvmf_resolve_addr(id.id, &s, &d, ms) },
		"rdma_resolve_addr", "%v, %v, %v", src, dst, timeout)
}

// ResolveRoute starts resolving the route after EventAddrResolved;
// EventRouteResolved or EventRouteError follows.
func (id *CMID) ResolveRoute(timeout time.Duration) error {
	ms := C.int(timeout.Milliseconds())
	return id.do(func() C.int { return C.gonvmf_resolve_route(id.id, ms) }, "rdma_resolve_route", "%v, %v", id, timeout)
}

func connArgs(p *ConnParam) (unsafe.Pointer, C.uint8_t, error) {
	if len(p.PrivateData) > 255 {
		return nil, 0, fmt.Errorf("rdmacm: %d bytes of private data: at most 255", len(p.PrivateData))
	}
	return cBytes(p.PrivateData), C.uint8_t(len(p.PrivateData)), nil
}

// Connect sends a connection request after EventRouteResolved and
// CreateQP. EventEstablished (with the accept's private data),
// EventRejected, EventConnectError or EventUnreachable follows.
func (id *CMID) Connect(p *ConnParam) error {
	pd, n, err := connArgs(p)
	if err != nil {
		return err
	}
	return id.do(func() C.int {
		return C.gonvmf_connect(id.id, 0, pd, n, C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth),
			C.uint8_t(p.FlowControl), C.uint8_t(p.RetryCount), C.uint8_t(p.RNRRetryCount))
	}, "rdma_connect", "%v, private data %d bytes, responder resources %d, initiator depth %d",
		id, len(p.PrivateData), p.ResponderResources, p.InitiatorDepth)
}

// Accept accepts a connection request (the ID from EventConnectRequest,
// after CreateQP and posting receives). The QP is ready to post sends when
// Accept returns; EventEstablished follows.
func (id *CMID) Accept(p *ConnParam) error {
	pd, n, err := connArgs(p)
	if err != nil {
		return err
	}
	return id.do(func() C.int {
		return C.gonvmf_connect(id.id, 1, pd, n, C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth),
			C.uint8_t(p.FlowControl), C.uint8_t(p.RetryCount), C.uint8_t(p.RNRRetryCount))
	}, "rdma_accept", "%v, private data %d bytes, responder resources %d, initiator depth %d, rnr retry %d",
		id, len(p.PrivateData), p.ResponderResources, p.InitiatorDepth, p.RNRRetryCount)
}

// Reject rejects a connection request with private data (NVMe-oF: recfmt
// and sts). Close the ID afterwards.
func (id *CMID) Reject(privateData []byte) error {
	pd, n, err := connArgs(&ConnParam{PrivateData: privateData})
	if err != nil {
		return err
	}
	return id.do(func() C.int { return C.gonvmf_reject(id.id, pd, n) }, "rdma_reject", "%v, % x", id, privateData)
}

// Disconnect moves the QP to the error state (outstanding requests
// complete with WCFlushErr) and tells the peer; EventDisconnected follows
// on both sides.
func (id *CMID) Disconnect() error {
	return id.do(func() C.int { return C.gonvmf_disconnect(id.id) }, "rdma_disconnect", "%v", id)
}

// Migrate moves the ID's future events to another channel (e.g. from a
// listener's channel to a per-connection one).
func (id *CMID) Migrate(to *EventChannel) error {
	desc := id.String() // before taking the lock String takes
	if !id.acquire() {
		return ErrClosed
	}
	defer id.release()
	if !to.acquire() {
		return ErrClosed
	}
	defer to.release()
	id.opMu.Lock()
	defer id.opMu.Unlock()
	if rc := C.gonvmf_migrate_id(id.id, to.ch); rc != 0 {
		return newError("rdma_migrate_id", errnoOf(rc), "%s", desc)
	}
	id.ch.removeKid(id)
	id.ch = to
	to.addKid(id)
	return nil
}

// QP returns the ID's QP, or nil.
func (id *CMID) QP() *QP {
	id.opMu.Lock()
	defer id.opMu.Unlock()
	return id.qp
}

// DeviceName names the device the ID is bound to ("" before binding to a
// specific address or resolving one).
func (id *CMID) DeviceName() string {
	if !id.acquire() {
		return ""
	}
	defer id.release()
	return C.GoString(C.gonvmf_id_device_name(id.id))
}

// OnDevice reports whether the ID is bound to d's device context: the one a
// connection request arrived on, or an address was bound to. A device removed
// and added again under the same name has a new context, on which d's
// protection domain, queues and memory cannot be used.
func (id *CMID) OnDevice(d *Device) bool {
	if d == nil || !id.acquire() {
		return false
	}
	defer id.release()
	if !d.acquire() {
		return false
	}
	defer d.release()
	return id.id.verbs != nil && id.id.verbs == d.ctx
}

// PortNum returns the device port the ID is bound to (0 if none).
func (id *CMID) PortNum() int {
	if !id.acquire() {
		return 0
	}
	defer id.release()
	return int(id.id.port_num)
}

func (id *CMID) addr(peer C.int) netip.AddrPort {
	if !id.acquire() {
		return netip.AddrPort{}
	}
	defer id.release()
	var a C.gonvmf_addr
	C.gonvmf_get_addr(id.id, peer, &a)
	return fromCAddr(&a)
}

// LocalAddr returns the bound or resolved local address.
func (id *CMID) LocalAddr() netip.AddrPort { return id.addr(0) }

// RemoteAddr returns the peer's address.
func (id *CMID) RemoteAddr() netip.AddrPort { return id.addr(1) }

func (id *CMID) String() string {
	if id == nil {
		return "cm_id(nil)"
	}
	if !id.acquire() {
		return fmt.Sprintf("cm_id#%d(closed)", id.handle)
	}
	defer id.release()
	var l, r C.gonvmf_addr
	C.gonvmf_get_addr(id.id, 0, &l)
	C.gonvmf_get_addr(id.id, 1, &r)
	return fmt.Sprintf("cm_id#%d(%v->%v)", id.handle, fromCAddr(&l), fromCAddr(&r))
}

// Close destroys the ID's QP and the ID (rdma_destroy_id). Events for it
// that were not read yet are dropped.
func (id *CMID) Close() error {
	if id == nil {
		return nil
	}
	return id.closeOnce(func() error {
		id.opMu.Lock()
		rc := C.gonvmf_destroy_id(id.id)
		ch := id.ch
		id.opMu.Unlock()
		cmids.remove(id.handle)
		ch.removeKid(id)
		if rc != 0 {
			return newError("rdma_destroy_id", errnoOf(rc), "cm_id#%d", id.handle)
		}
		return nil
	})
}

// Dial connects to a listener at dst on a new CM ID whose events arrive on
// ch: it resolves the address and route, calls opt.CreateQP, connects, and
// waits for EventEstablished, whose Param carries the accept's private
// data. A rejection returns a *RejectError with the reject's private data.
// On any failure the ID is closed. Dial reads ch itself: other goroutines
// must not read ch meanwhile (events for other IDs are kept for GetEvent).
func Dial(ctx context.Context, ch *EventChannel, dst netip.AddrPort, opt DialOptions) (*CMID, *Event, error) {
	if opt.CreateQP == nil {
		return nil, nil, fmt.Errorf("rdmacm: Dial %v: DialOptions.CreateQP is required", dst)
	}
	timeout := opt.ResolveTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	id, err := ch.CreateID()
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			id.Close()
		}
	}()
	step := func(op string, want EventType) (*Event, error) {
		ev, err := ch.waitFor(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("rdmacm: dial %v: waiting for %v: %w", dst, want, err)
		}
		if ev.Type == want {
			return ev, nil
		}
		if ev.Type == EventRejected {
			return nil, &RejectError{Reason: ev.Status, PrivateData: ev.Param.PrivateData}
		}
		errno := syscall.Errno(0)
		if ev.Status < 0 {
			errno = syscall.Errno(-ev.Status)
		}
		return nil, newError(op, errno, "%v: got %v (status %d) instead of %v", dst, ev.Type, ev.Status, want)
	}
	if err := id.ResolveAddr(opt.Src, dst, timeout); err != nil {
		return nil, nil, err
	}
	if _, err := step("rdma_resolve_addr", EventAddrResolved); err != nil {
		return nil, nil, err
	}
	if err := id.ResolveRoute(timeout); err != nil {
		return nil, nil, err
	}
	if _, err := step("rdma_resolve_route", EventRouteResolved); err != nil {
		return nil, nil, err
	}
	if err := opt.CreateQP(id); err != nil {
		return nil, nil, fmt.Errorf("rdmacm: dial %v: CreateQP: %w", dst, err)
	}
	p := opt.Param
	if p.RetryCount == 0 {
		p.RetryCount = 7
	}
	if p.RNRRetryCount == 0 {
		p.RNRRetryCount = 7
	}
	if err := id.Connect(&p); err != nil {
		return nil, nil, err
	}
	ev, err := step("rdma_connect", EventEstablished)
	if err != nil {
		return nil, nil, err
	}
	ok = true
	return id, ev, nil
}
