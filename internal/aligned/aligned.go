// Package aligned allocates Go memory for direct I/O: buffers that start on a page
// boundary, as O_DIRECT reads and writes need. It is the one allocator of such memory in
// gonvmf — the core's bounce buffers, the loop transport's data and in-capsule buffers, the
// initiator's loop-transport memory, the backends' zero block and the tests' buffers.
// Registered memory (rdmacm.Arena) is mmap'd, hence page aligned, and does not come from
// here.
package aligned

import "unsafe"

// Alignment is the boundary in bytes that Bytes aligns to: the page size, which direct I/O
// needs on every Linux file system and block device gonvmf serves (backend.Alignment).
const Alignment = 4096

// Bytes returns n zeroed bytes starting on an Alignment boundary. Its capacity is n, so
// appending to it reallocates (without alignment) rather than reaching past the end.
func Bytes(n int) []byte {
	b := make([]byte, n+Alignment)
	off := 0
	if a := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (Alignment - 1)); a != 0 {
		off = Alignment - a
	}
	return b[off : off+n : off+n]
}

// Is reports whether b starts on an Alignment boundary.
func Is(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(Alignment-1) == 0
}
