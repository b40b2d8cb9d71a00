//go:build !linux || !cgo || nordma

package rdmacm

import (
	"context"
	"net/netip"
	"time"
)

// This file gives builds without RDMA support (no cgo, -tags nordma, other
// operating systems) the same API as the real implementation. Constructors
// return ErrNotSupported, so no object can exist and the methods are never
// reached; they return ErrNotSupported or zero values all the same.
// TestStubMatchesAPI keeps the two in step.

// CheckMemlock returns ErrNotSupported in builds without RDMA support.
func CheckMemlock(n uint64) error { return ErrNotSupported }

// Devices returns ErrNotSupported in builds without RDMA support.
func Devices() ([]DeviceInfo, error) { return nil, ErrNotSupported }

// OpenDevice returns ErrNotSupported in builds without RDMA support.
func OpenDevice(name string) (*Device, error) { return nil, ErrNotSupported }

// NewEventChannel returns ErrNotSupported in builds without RDMA support.
func NewEventChannel() (*EventChannel, error) { return nil, ErrNotSupported }

// Rescan does nothing in builds without RDMA support: it returns 0.
func Rescan() int { return 0 }

// Dial returns ErrNotSupported in builds without RDMA support.
func Dial(ctx context.Context, ch *EventChannel, dst netip.AddrPort, opt DialOptions) (*CMID, *Event, error) {
	return nil, nil, ErrNotSupported
}

// Device is an open RDMA device (unavailable in this build).
type Device struct{}

func (d *Device) Name() string                         { return "" }
func (d *Device) Removed() bool                        { return false }
func (d *Device) String() string                       { return "" }
func (d *Device) Query() (DeviceAttr, error)           { return DeviceAttr{}, ErrNotSupported }
func (d *Device) QueryPort(port int) (PortAttr, error) { return PortAttr{}, ErrNotSupported }
func (d *Device) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	return AsyncEvent{}, ErrNotSupported
}
func (d *Device) AllocPD() (*PD, error)          { return nil, ErrNotSupported }
func (d *Device) NewCQ(entries int) (*CQ, error) { return nil, ErrNotSupported }
func (d *Device) Close() error                   { return nil }

// PD is a protection domain (unavailable in this build).
type PD struct{}

func (pd *PD) Device() *Device                                  { return nil }
func (pd *PD) NewArena(size int, access Access) (*Arena, error) { return nil, ErrNotSupported }
func (pd *PD) NewSRQ(maxWR, maxSGE int) (*SRQ, error)           { return nil, ErrNotSupported }
func (pd *PD) Close() error                                     { return nil }

// SRQ is a shared receive queue (unavailable in this build).
type SRQ struct{}

func (s *SRQ) MaxWR() int                  { return 0 }
func (s *SRQ) PostRecv(wrs []RecvWR) error { return ErrNotSupported }
func (s *SRQ) Close() error                { return nil }

// Arena is registered memory (unavailable in this build).
type Arena struct{}

func (a *Arena) Bytes() []byte               { return nil }
func (a *Arena) Len() int                    { return 0 }
func (a *Arena) LKey() uint32                { return 0 }
func (a *Arena) RKey() uint32                { return 0 }
func (a *Arena) Addr(off int) uint64         { return 0 }
func (a *Arena) SGE(off, n int) SGE          { return SGE{} }
func (a *Arena) Offset(b []byte) (int, bool) { return 0, false }
func (a *Arena) Close() error                { return nil }

// CQ is a completion queue (unavailable in this build).
type CQ struct{}

func (cq *CQ) Entries() int                      { return 0 }
func (cq *CQ) Device() *Device                   { return nil }
func (cq *CQ) Poll(wc []Completion) (int, error) { return 0, ErrNotSupported }
func (cq *CQ) PollWait(wc []Completion, timeout time.Duration) (int, error) {
	return 0, ErrNotSupported
}
func (cq *CQ) Arm(solicitedOnly bool) error                          { return ErrNotSupported }
func (cq *CQ) Wait(timeout time.Duration) (notified bool, err error) { return false, ErrNotSupported }
func (cq *CQ) Wake()                                                 {}

// WakeFD returns -1 (unavailable in this build).
func (cq *CQ) WakeFD() int { return -1 }

// WaitThread blocks the calling thread until a completion event (unavailable in this build).
func (cq *CQ) WaitThread(timeout time.Duration) (notified bool, err error) {
	return false, ErrNotSupported
}
func (cq *CQ) Close() error { return nil }

// QP is a reliable-connected queue pair (unavailable in this build).
type QP struct{}

func (qp *QP) Num() uint32                 { return 0 }
func (qp *QP) Caps() QPCaps                { return QPCaps{} }
func (qp *QP) ID() *CMID                   { return nil }
func (qp *QP) PostSend(wrs []SendWR) error { return ErrNotSupported }
func (qp *QP) PostRecv(wrs []RecvWR) error { return ErrNotSupported }
func (qp *QP) Post(recvs []RecvWR, sends []SendWR) error {
	return ErrNotSupported
}
func (qp *QP) Close() error { return nil }

// EventChannel is an rdma_cm event channel (unavailable in this build).
type EventChannel struct{}

func (ch *EventChannel) CreateID() (*CMID, error) { return nil, ErrNotSupported }
func (ch *EventChannel) Listen(addr netip.AddrPort, backlog int) (*CMID, error) {
	return nil, ErrNotSupported
}
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) { return nil, ErrNotSupported }
func (ch *EventChannel) Close() error                                 { return nil }

// CMID is an rdma_cm identifier (unavailable in this build).
type CMID struct{}

func (id *CMID) Bind(addr netip.AddrPort) error { return ErrNotSupported }
func (id *CMID) Listen(backlog int) error       { return ErrNotSupported }
func (id *CMID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	return ErrNotSupported
}
func (id *CMID) ResolveRoute(timeout time.Duration) error   { return ErrNotSupported }
func (id *CMID) CreateQP(pd *PD, cfg QPConfig) (*QP, error) { return nil, ErrNotSupported }
func (id *CMID) Connect(p *ConnParam) error                 { return ErrNotSupported }
func (id *CMID) Accept(p *ConnParam) error                  { return ErrNotSupported }
func (id *CMID) Reject(privateData []byte) error            { return ErrNotSupported }
func (id *CMID) Disconnect() error                          { return ErrNotSupported }
func (id *CMID) Migrate(to *EventChannel) error             { return ErrNotSupported }
func (id *CMID) QP() *QP                                    { return nil }
func (id *CMID) DeviceName() string                         { return "" }
func (id *CMID) PortNum() int                               { return 0 }
func (id *CMID) OnDevice(d *Device) bool                    { return false }
func (id *CMID) LocalAddr() netip.AddrPort                  { return netip.AddrPort{} }
func (id *CMID) RemoteAddr() netip.AddrPort                 { return netip.AddrPort{} }
func (id *CMID) String() string                             { return "cm_id(unsupported)" }
func (id *CMID) Close() error                               { return nil }
