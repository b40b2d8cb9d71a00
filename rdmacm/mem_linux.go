//go:build cgo && !nordma

package rdmacm

/*
#include <sys/resource.h>
#include "verbs_linux.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// CheckMemlock checks that the process may lock and register n more bytes:
// RLIMIT_MEMLOCK must cover what is already locked or pinned (VmLck, VmPin in
// /proc/self/status) plus n, unless the process has CAP_IPC_LOCK or the limit
// is unlimited. It returns a [*MemlockError] that says how to raise the
// limit. Call it at start-up with the size of the buffer pool; [PD.NewArena]
// calls it too, for every connection's memory, so the common cases (no limit,
// CAP_IPC_LOCK) cost one or two system calls and /proc is read only when the
// limit applies.
func CheckMemlock(n uint64) error {
	limit, err := memlockLimit()
	if err != nil {
		return err
	}
	if limit == rlimInfinity {
		return nil
	}
	if capIPCLockEffective() {
		return nil
	}
	st := readProcStatus()
	return checkMemlock(limit, max(st.vmLck, st.vmPin), n, st.capEff&(1<<capIPCLock) != 0)
}

func memlockLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(C.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0, fmt.Errorf("rdmacm: getrlimit(RLIMIT_MEMLOCK): %w", err)
	}
	if rl.Cur == uint64(C.RLIM_INFINITY) {
		return rlimInfinity, nil
	}
	return rl.Cur, nil
}

// PD is a protection domain: memory regions and QPs must share one to work
// together.
type PD struct {
	node
	dev *Device
	pd  *C.struct_ibv_pd
}

// AllocPD allocates a protection domain on the device.
func (d *Device) AllocPD() (*PD, error) {
	if !d.acquire() {
		return nil, ErrClosed
	}
	defer d.release()
	p, errno := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		return nil, newError("ibv_alloc_pd", errnoFrom(errno), "%s", d.name)
	}
	pd := &PD{dev: d, pd: p}
	d.addKid(pd)
	return pd, nil
}

// Device returns the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.dev }

// Close closes the QPs and arenas using the PD, then frees it.
func (pd *PD) Close() error {
	if pd == nil {
		return nil
	}
	return pd.closeOnce(func() error {
		pd.dev.removeKid(pd)
		if rc := C.ibv_dealloc_pd(pd.pd); rc != 0 {
			return newError("ibv_dealloc_pd", errnoOf(rc), "%s", pd.dev.name)
		}
		return nil
	})
}

// Arena is memory outside the Go heap (an anonymous private mapping,
// populated and locked) registered as one memory region. Slices of Bytes()
// are valid data buffers for work requests: describe them with SGE.
//
// The memory is unmapped by Close: slices of it must not be used after
// (they would fault).
type Arena struct {
	node
	pd   *PD
	mem  []byte
	mr   *C.struct_ibv_mr
	lkey uint32
	rkey uint32
	base uint64
}

// NewArena maps, locks and registers size bytes (rounded up to the page
// size) with the given access rights (local write is always added). It
// checks RLIMIT_MEMLOCK first and returns a *MemlockError saying how to
// raise it.
func (pd *PD) NewArena(size int, access Access) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("rdmacm: arena size %d: must be positive", size)
	}
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	if err := CheckMemlock(uint64(size)); err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: mmap %d bytes for an arena: %w", size, err)
	}
	if err := syscall.Mlock(mem); err != nil {
		syscall.Munmap(mem)
		if errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EAGAIN) {
			limit, _ := memlockLimit()
			return nil, fmt.Errorf("%w (mlock: %v)", &MemlockError{Limit: limit, Need: uint64(size)}, err)
		}
		return nil, fmt.Errorf("rdmacm: mlock %d bytes: %w", size, err)
	}
	// A fork must not copy-on-write pages the device DMAs into.
	_ = syscall.Madvise(mem, syscall.MADV_DONTFORK)
	access |= AccessLocalWrite
	if !pd.acquire() {
		syscall.Munmap(mem)
		return nil, ErrClosed
	}
	defer pd.release()
	var e C.int
	mr := C.gonvmf_reg_mr(pd.pd, unsafe.Pointer(&mem[0]), C.size_t(size), C.int(access), &e)
	if mr == nil {
		syscall.Munmap(mem)
		if errnoOf(e) == syscall.ENOMEM || errnoOf(e) == syscall.EPERM || errnoOf(e) == syscall.EFAULT {
			if err := CheckMemlock(uint64(size)); err != nil {
				return nil, fmt.Errorf("%w (ibv_reg_mr: %v)", err, errnoOf(e))
			}
		}
		return nil, newError("ibv_reg_mr", errnoOf(e), "%s, %d bytes, access %#x", pd.dev.name, size, uint32(access))
	}
	a := &Arena{pd: pd, mem: mem, mr: mr, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey),
		base: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	pd.addKid(a)
	return a, nil
}

// Bytes returns the whole arena.
func (a *Arena) Bytes() []byte { return a.mem }

// Len returns the arena's size in bytes.
func (a *Arena) Len() int { return len(a.mem) }

// LKey is the local key: put it in SGEs describing the arena.
func (a *Arena) LKey() uint32 { return a.lkey }

// RKey is the remote key: send it (with Addr) to a peer that may RDMA READ
// or WRITE the arena (needs AccessRemoteRead/AccessRemoteWrite).
func (a *Arena) RKey() uint32 { return a.rkey }

// Addr returns the virtual address of byte off, as used in SGEs and keyed
// SGL descriptors.
func (a *Arena) Addr(off int) uint64 {
	return a.base + uint64(off)
}

// SGE describes bytes [off, off+n) of the arena.
func (a *Arena) SGE(off, n int) SGE {
	if off < 0 || n < 0 || off+n > len(a.mem) {
		panic(fmt.Sprintf("rdmacm: SGE [%d, %d) outside arena of %d bytes", off, off+n, len(a.mem)))
	}
	return SGE{Addr: a.base + uint64(off), Length: uint32(n), LKey: a.lkey}
}

// Offset returns the offset of b's first byte in the arena, or false if b
// does not lie within it.
func (a *Arena) Offset(b []byte) (int, bool) {
	if len(b) == 0 || len(a.mem) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(a.mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(a.mem)) {
		return 0, false
	}
	return int(p - base), true
}

// Close deregisters the memory region and unmaps the memory.
func (a *Arena) Close() error {
	if a == nil {
		return nil
	}
	return a.closeOnce(func() error {
		a.pd.removeKid(a)
		var errs []error
		if rc := C.ibv_dereg_mr(a.mr); rc != 0 {
			errs = append(errs, newError("ibv_dereg_mr", errnoOf(rc), "%s, %d bytes", a.pd.dev.name, len(a.mem)))
		}
		if err := syscall.Munmap(a.mem); err != nil {
			errs = append(errs, fmt.Errorf("rdmacm: munmap arena: %w", err))
		}
		return errors.Join(errs...)
	})
}
