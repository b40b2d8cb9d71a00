package nvmeproto

import (
	"encoding/binary"
	"fmt"
)

// SGLDescSize is the size of one SGL descriptor.
const SGLDescSize = 16

// SGLType is the descriptor type (byte 15 bits 7:4).
type SGLType uint8

// SGL descriptor types.
const (
	SGLTypeDataBlock          SGLType = 0x0
	SGLTypeBitBucket          SGLType = 0x1
	SGLTypeSegment            SGLType = 0x2
	SGLTypeLastSegment        SGLType = 0x3
	SGLTypeKeyedDataBlock     SGLType = 0x4
	SGLTypeTransportDataBlock SGLType = 0x5
	SGLTypeVendor             SGLType = 0xF
)

func (t SGLType) String() string {
	switch t {
	case SGLTypeDataBlock:
		return "Data Block"
	case SGLTypeBitBucket:
		return "Bit Bucket"
	case SGLTypeSegment:
		return "Segment"
	case SGLTypeLastSegment:
		return "Last Segment"
	case SGLTypeKeyedDataBlock:
		return "Keyed Data Block"
	case SGLTypeTransportDataBlock:
		return "Transport Data Block"
	case SGLTypeVendor:
		return "Vendor Specific"
	}
	return fmt.Sprintf("SGL type %#x", uint8(t))
}

// SGLSubtype is the descriptor sub type (byte 15 bits 3:0).
type SGLSubtype uint8

// SGL descriptor sub types.
const (
	SGLSubtypeAddress    SGLSubtype = 0x0
	SGLSubtypeOffset     SGLSubtype = 0x1
	SGLSubtypeTransport  SGLSubtype = 0xA
	SGLSubtypeInvalidate SGLSubtype = 0xF
)

func (s SGLSubtype) String() string {
	switch s {
	case SGLSubtypeAddress:
		return "Address"
	case SGLSubtypeOffset:
		return "Offset"
	case SGLSubtypeTransport:
		return "Transport"
	case SGLSubtypeInvalidate:
		return "Invalidate Key"
	}
	return fmt.Sprintf("SGL subtype %#x", uint8(s))
}

// Descriptor identifiers (byte 15) used over RDMA.
const (
	SGLIDKeyedAddress    = uint8(SGLTypeKeyedDataBlock)<<4 | uint8(SGLSubtypeAddress)       // 0x40: host memory
	SGLIDKeyedInvalidate = uint8(SGLTypeKeyedDataBlock)<<4 | uint8(SGLSubtypeInvalidate)    // 0x4F: host memory, invalidate key
	SGLIDDataOffset      = uint8(SGLTypeDataBlock)<<4 | uint8(SGLSubtypeOffset)             // 0x01: in-capsule data
	SGLIDLastSegOffset   = uint8(SGLTypeLastSegment)<<4 | uint8(SGLSubtypeOffset)           // 0x31: descriptor list in capsule
	SGLIDTransportData   = uint8(SGLTypeTransportDataBlock)<<4 | uint8(SGLSubtypeTransport) // 0x5A: NVMe/TCP
)

// MaxKeyedLength is the largest length a keyed descriptor can carry (24 bits).
const MaxKeyedLength = 1<<24 - 1

// SGLDescriptor is one decoded 16-byte SGL descriptor.
//
// Layout: bytes 0..7 address; for keyed data block descriptors (type 4) bytes 8..10 are
// the 24-bit length and bytes 11..14 the key; for every other type bytes 8..11 are the
// 32-bit length and bytes 12..14 are reserved. Byte 15 is type<<4 | subtype.
type SGLDescriptor struct {
	Address uint64
	Length  uint32 // 24 bits for keyed descriptors
	Key     uint32 // keyed descriptors only
	Type    SGLType
	Subtype SGLSubtype
}

// ID returns byte 15 of the descriptor: type<<4 | subtype.
func (d *SGLDescriptor) ID() uint8 { return uint8(d.Type)<<4 | uint8(d.Subtype)&0xF }

// Keyed reports whether the descriptor is a keyed data block descriptor.
func (d *SGLDescriptor) Keyed() bool { return d.Type == SGLTypeKeyedDataBlock }

func (d *SGLDescriptor) decode(b []byte) {
	_ = b[15]
	d.Address = binary.LittleEndian.Uint64(b[0:])
	d.Type = SGLType(b[15] >> 4)
	d.Subtype = SGLSubtype(b[15] & 0xF)
	if d.Type == SGLTypeKeyedDataBlock {
		d.Length = uint32(b[8]) | uint32(b[9])<<8 | uint32(b[10])<<16
		d.Key = binary.LittleEndian.Uint32(b[11:])
	} else {
		d.Length = binary.LittleEndian.Uint32(b[8:])
		d.Key = 0
	}
}

// Unmarshal decodes a descriptor from the first 16 bytes of b.
func (d *SGLDescriptor) Unmarshal(b []byte) error {
	if len(b) < SGLDescSize {
		return &ErrShort{What: "SGL descriptor", Need: SGLDescSize, Got: len(b)}
	}
	d.decode(b)
	return nil
}

// Marshal encodes the descriptor into the first 16 bytes of b. Reserved bytes are
// written as zero; a keyed descriptor's length is truncated to 24 bits.
func (d *SGLDescriptor) Marshal(b []byte) {
	_ = b[15]
	binary.LittleEndian.PutUint64(b[0:], d.Address)
	if d.Type == SGLTypeKeyedDataBlock {
		b[8] = byte(d.Length)
		b[9] = byte(d.Length >> 8)
		b[10] = byte(d.Length >> 16)
		binary.LittleEndian.PutUint32(b[11:], d.Key)
	} else {
		binary.LittleEndian.PutUint32(b[8:], d.Length)
		b[12], b[13], b[14] = 0, 0, 0
	}
	b[15] = d.ID()
}

func (d SGLDescriptor) String() string {
	if d.Keyed() {
		return fmt.Sprintf("SGL{id=%#02x addr=%#x len=%d key=%#x}", d.ID(), d.Address, d.Length, d.Key)
	}
	return fmt.Sprintf("SGL{id=%#02x addr=%#x len=%d}", d.ID(), d.Address, d.Length)
}

// DecodeSGLSegment decodes an SGL segment: the descriptor list a Segment or Last Segment
// descriptor points at (over RDMA, descriptor 0x31 points at such a list of keyed data
// block descriptors in the in-capsule data). b must hold a whole number of 16-byte
// descriptors. The descriptors are appended to dst[:0]; pass a slice with enough capacity
// (MSDBD) to avoid allocating. Descriptor types are not checked: that is the caller's
// policy (status SGL Descriptor Type Invalid).
func DecodeSGLSegment(dst []SGLDescriptor, b []byte) ([]SGLDescriptor, error) {
	dst = dst[:0]
	if len(b)%SGLDescSize != 0 {
		return dst, fmt.Errorf("nvmeproto: SGL segment of %d bytes is not a multiple of %d", len(b), SGLDescSize)
	}
	for off := 0; off < len(b); off += SGLDescSize {
		var d SGLDescriptor
		d.decode(b[off : off+SGLDescSize])
		dst = append(dst, d)
	}
	return dst, nil
}
