//go:build cgo && !nordma

package rdmacm

/*
#include <stdlib.h>
#include "verbs_linux.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"unsafe"
)

// Devices lists the RDMA devices with their attributes, port states and
// GID tables. It returns an error wrapping ErrNoDevice when there is none.
func Devices() ([]DeviceInfo, error) {
	var n C.int
	list, errno := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, fmt.Errorf("%w (ibv_get_device_list: %v)", ErrNoDevice, errno)
	}
	defer C.ibv_free_device_list(list)
	if n <= 0 {
		return nil, fmt.Errorf("%w (ibv_get_device_list found none)", ErrNoDevice)
	}
	devs := unsafe.Slice(list, int(n))
	infos := make([]DeviceInfo, 0, len(devs))
	for _, dev := range devs {
		name := C.GoString(C.ibv_get_device_name(dev))
		ctx, errno := C.ibv_open_device(dev)
		if ctx == nil {
			return nil, newError("ibv_open_device", errnoFrom(errno), "%s", name)
		}
		info, err := queryDevice(ctx, name)
		C.ibv_close_device(ctx)
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

func queryDevice(ctx *C.struct_ibv_context, name string) (DeviceInfo, error) {
	info := DeviceInfo{Name: name}
	var err error
	if info.Attr, err = queryDeviceAttr(ctx, name); err != nil {
		return info, err
	}
	for p := 1; p <= info.Attr.PhysPortCount; p++ {
		pa, err := queryPort(ctx, name, p)
		if err != nil {
			return info, err
		}
		info.Ports = append(info.Ports, pa)
	}
	return info, nil
}

func be64(v C.__be64) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(v))
	return binary.BigEndian.Uint64(b[:])
}

func queryDeviceAttr(ctx *C.struct_ibv_context, name string) (DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &a); rc != 0 {
		return DeviceAttr{}, newError("ibv_query_device", errnoOf(rc), "%s", name)
	}
	return DeviceAttr{
		FirmwareVersion:  C.GoString(&a.fw_ver[0]),
		NodeGUID:         be64(a.node_guid),
		SysImageGUID:     be64(a.sys_image_guid),
		VendorID:         uint32(a.vendor_id),
		VendorPartID:     uint32(a.vendor_part_id),
		HWVersion:        uint32(a.hw_ver),
		MaxMRSize:        uint64(a.max_mr_size),
		PageSizeCap:      uint64(a.page_size_cap),
		MaxQP:            int(a.max_qp),
		MaxQPWR:          int(a.max_qp_wr),
		CapFlags:         uint32(a.device_cap_flags),
		MaxSGE:           int(a.max_sge),
		MaxSGERD:         int(a.max_sge_rd),
		MaxCQ:            int(a.max_cq),
		MaxCQE:           int(a.max_cqe),
		MaxMR:            int(a.max_mr),
		MaxPD:            int(a.max_pd),
		MaxQPRdAtom:      int(a.max_qp_rd_atom),
		MaxQPInitRdAtom:  int(a.max_qp_init_rd_atom),
		MaxSRQ:           int(a.max_srq),
		MaxSRQWR:         int(a.max_srq_wr),
		MaxSRQSGE:        int(a.max_srq_sge),
		LocalCAAckDelay:  int(a.local_ca_ack_delay),
		PhysPortCount:    int(a.phys_port_cnt),
		MaxPKeys:         int(a.max_pkeys),
		AtomicCapability: int(a.atomic_cap),
	}, nil
}

func queryPort(ctx *C.struct_ibv_context, name string, port int) (PortAttr, error) {
	var a C.struct_ibv_port_attr
	if rc := C.gonvmf_query_port(ctx, C.uint8_t(port), &a); rc != 0 {
		return PortAttr{}, newError("ibv_query_port", errnoOf(rc), "%s, %d", name, port)
	}
	pa := PortAttr{
		Port:        port,
		State:       PortState(a.state),
		MaxMTU:      mtuBytes(int(a.max_mtu)),
		ActiveMTU:   mtuBytes(int(a.active_mtu)),
		LinkLayer:   LinkLayer(a.link_layer),
		MaxMsgSize:  uint32(a.max_msg_sz),
		GIDTableLen: int(a.gid_tbl_len),
		LID:         uint16(a.lid),
		ActiveWidth: uint8(a.active_width),
		ActiveSpeed: uint8(a.active_speed),
		PhysState:   uint8(a.phys_state),
	}
	if pa.GIDTableLen > 0 {
		ents := make([]C.struct_ibv_gid_entry, pa.GIDTableLen)
		n := C.gonvmf_query_gids(ctx, C.uint8_t(port), &ents[0], C.int(len(ents)))
		if n < 0 {
			return pa, newError("ibv_query_gid_table", negErrno(n), "%s, port %d", name, port)
		}
		for _, e := range ents[:n] {
			g := GIDEntry{Index: int(e.gid_index), Type: GIDType(e.gid_type)}
			raw := (*[16]byte)(unsafe.Pointer(&e.gid))
			g.GID = *raw
			if e.ndev_ifindex != 0 {
				if ifc, err := net.InterfaceByIndex(int(e.ndev_ifindex)); err == nil {
					g.Netdev = ifc.Name
				}
			}
			pa.GIDs = append(pa.GIDs, g)
		}
	}
	return pa, nil
}

// Device is an open RDMA device: the one librdmacm uses for CM IDs bound to
// it, so protection domains, CQs and QPs created here work with those IDs.
// Open a device once and share it; Close closes everything created on it.
type Device struct {
	node
	name string
	ctx  *C.struct_ibv_context
	ref  **C.struct_ibv_context // librdmacm's reference to the device, dropped by Close

	asyncOnce sync.Once
	async     *pollFD // set up by the first AsyncEvent
	asyncErr  error
	asyncMu   sync.Mutex            // one AsyncEvent reader at a time; guards asyncEv
	asyncEv   *C.gonvmf_async_event // C memory
	asyncRC   C.int
	asyncFn   func(uintptr) bool
}

// OpenDevice opens the device called name ("rxe0"), or the first device
// if name is empty.
func OpenDevice(name string) (*Device, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var e C.int
	var ref **C.struct_ibv_context
	ctx := C.gonvmf_cm_device(cname, &ref, &e)
	if ctx == nil {
		if name == "" {
			return nil, fmt.Errorf("%w (rdma_get_devices: %v)", ErrNoDevice, errnoOf(e))
		}
		return nil, fmt.Errorf("%w (no device named %q: %v)", ErrNoDevice, name, errnoOf(e))
	}
	return &Device{name: C.GoString(C.ibv_get_device_name(ctx.device)), ctx: ctx, ref: ref}, nil
}

// Name returns the device's name.
func (d *Device) Name() string { return d.name }

// Removed reports whether the device has left the system's list of devices (a device
// added again under the same name is another device). It reads the list (sysfs), so it
// is for occasional checks; false when the list cannot be read or d is closed.
func (d *Device) Removed() bool {
	if !d.acquire() {
		return false
	}
	defer d.release()
	return C.gonvmf_device_listed(d.ctx) == 0
}

func (d *Device) String() string { return d.name }

// Query returns the device's attributes and limits.
func (d *Device) Query() (DeviceAttr, error) {
	if !d.acquire() {
		return DeviceAttr{}, ErrClosed
	}
	defer d.release()
	return queryDeviceAttr(d.ctx, d.name)
}

// QueryPort returns the state and limits of a port (numbered from 1).
func (d *Device) QueryPort(port int) (PortAttr, error) {
	if !d.acquire() {
		return PortAttr{}, ErrClosed
	}
	defer d.release()
	return queryPort(d.ctx, d.name, port)
}

// AsyncEvent waits for the device's next asynchronous event (QP and CQ
// errors, port state changes, device fatal) until ctx is done or the
// Device is closed. Read them from one goroutine per device: each event is
// delivered once, to one of the Devices open on the same device.
func (d *Device) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	if !d.acquire() {
		return AsyncEvent{}, ErrClosed
	}
	d.asyncOnce.Do(func() {
		d.async, d.asyncErr = newPollFD(int(d.ctx.async_fd), d.name+" async events")
		if d.asyncErr != nil {
			return
		}
		d.asyncEv = (*C.gonvmf_async_event)(C.calloc(1, C.sizeof_gonvmf_async_event))
		d.asyncFn = func(uintptr) bool {
			d.asyncRC = C.gonvmf_get_async_event(d.ctx, d.asyncEv)
			return d.asyncRC != 0
		}
	})
	d.release()
	if d.asyncErr != nil {
		return AsyncEvent{}, d.asyncErr
	}
	d.asyncMu.Lock()
	defer d.asyncMu.Unlock()
	if d.asyncEv == nil {
		return AsyncEvent{}, ErrClosed
	}
	if err := d.async.waitCtx(ctx, d.asyncFn); err != nil {
		if d.isClosed() {
			return AsyncEvent{}, ErrClosed
		}
		return AsyncEvent{}, err
	}
	if d.asyncRC < 0 {
		return AsyncEvent{}, newError("ibv_get_async_event", negErrno(d.asyncRC), "%s", d.name)
	}
	ev := AsyncEvent{
		Type:  AsyncEventType(d.asyncEv._type),
		QPNum: uint32(d.asyncEv.qp_num),
		Port:  int(d.asyncEv.port),
	}
	if h := uintptr(d.asyncEv.cq_handle); h != 0 {
		ev.CQ, _ = cqs.get(h)
	}
	return ev, nil
}

// Rescan makes librdmacm look at the list of devices: it closes the context of
// every device that has been removed and that nothing references any more (no
// Device, CM ID or device list). librdmacm keeps a device's context open
// while the device is listed, referenced or not, and looks at the list only
// when asked (OpenDevice, a connection request, Device.Close): a process that
// let go of everything on a device before the device left the list keeps the
// context open — and the kernel's removal of a device that cannot detach its
// users (Soft-RoCE) waiting — until the next look. It returns the number of devices
// listed. With none listed librdmacm does not look (rdma-core 44): the context of the
// last device removed stays open until a device is listed again.
func Rescan() int { return int(C.gonvmf_cm_rescan()) }

// Close closes everything created on the device (QPs, CQs, memory
// regions, PDs), wakes AsyncEvent and then drops the Device's reference to
// librdmacm's context of the device. The reference keeps the context open,
// also after the device is removed: librdmacm closes a removed device's
// context once nothing references it (its CM IDs' references included) at its
// next look at the device list, which Close makes (see Rescan).
func (d *Device) Close() error {
	if d == nil {
		return nil
	}
	return d.closeOnce(func() error {
		if d.async != nil {
			d.async.close() // wakes AsyncEvent, waits for a running read
		}
		d.asyncMu.Lock()
		if d.asyncEv != nil {
			C.free(unsafe.Pointer(d.asyncEv))
			d.asyncEv = nil
		}
		d.asyncMu.Unlock()
		C.gonvmf_cm_device_put(d.ref)
		d.ref = nil
		return nil
	})
}
