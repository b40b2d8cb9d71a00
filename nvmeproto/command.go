package nvmeproto

import (
	"encoding/binary"
	"fmt"
)

// Sizes of the fixed queue entries.
const (
	SQESize = 64 // submission queue entry (command)
	CQESize = 16 // completion queue entry (response)
)

// Command is a decoded 64-byte submission queue entry. Over Fabrics the data pointer is
// always SGL descriptor 1 (PSDT 01b); the PRP view of bytes 24..39 is not modelled.
type Command struct {
	Opcode uint8         // byte 0
	Flags  uint8         // byte 1: FUSE in bits 1:0, PSDT in bits 7:6
	CID    uint16        // bytes 2..3: command identifier
	NSID   uint32        // bytes 4..7 (byte 4 is the fctype of a Fabrics command)
	CDW2   uint32        // bytes 8..11
	CDW3   uint32        // bytes 12..15
	MPTR   uint64        // bytes 16..23: metadata pointer
	SGL    SGLDescriptor // bytes 24..39: SGL descriptor 1
	CDW10  uint32        // bytes 40..43
	CDW11  uint32        // bytes 44..47
	CDW12  uint32        // bytes 48..51
	CDW13  uint32        // bytes 52..55
	CDW14  uint32        // bytes 56..59
	CDW15  uint32        // bytes 60..63
}

// PSDT values (Command.Flags bits 7:6).
const (
	PSDTPRP       = 0 // PRPs (PCIe only)
	PSDTSGL       = 1 // SGL, metadata pointer is a buffer address
	PSDTSGLMetaSG = 2 // SGL, metadata pointer is an SGL segment
)

// ErrShort reports input shorter than the structure being decoded.
type ErrShort struct {
	What string // the structure, e.g. "SQE"
	Need int    // bytes needed
	Got  int    // bytes given
}

func (e *ErrShort) Error() string {
	return fmt.Sprintf("nvmeproto: %s needs %d bytes, got %d", e.What, e.Need, e.Got)
}

// Unmarshal decodes a submission queue entry from the first 64 bytes of b.
// It does not allocate unless b is short.
func (c *Command) Unmarshal(b []byte) error {
	if len(b) < SQESize {
		return &ErrShort{What: "SQE", Need: SQESize, Got: len(b)}
	}
	b = b[:SQESize]
	c.Opcode = b[0]
	c.Flags = b[1]
	c.CID = binary.LittleEndian.Uint16(b[2:])
	c.NSID = binary.LittleEndian.Uint32(b[4:])
	c.CDW2 = binary.LittleEndian.Uint32(b[8:])
	c.CDW3 = binary.LittleEndian.Uint32(b[12:])
	c.MPTR = binary.LittleEndian.Uint64(b[16:])
	c.SGL.decode(b[24:40])
	c.CDW10 = binary.LittleEndian.Uint32(b[40:])
	c.CDW11 = binary.LittleEndian.Uint32(b[44:])
	c.CDW12 = binary.LittleEndian.Uint32(b[48:])
	c.CDW13 = binary.LittleEndian.Uint32(b[52:])
	c.CDW14 = binary.LittleEndian.Uint32(b[56:])
	c.CDW15 = binary.LittleEndian.Uint32(b[60:])
	return nil
}

// Marshal encodes the command into the first 64 bytes of b, which must be at least
// SQESize long.
func (c *Command) Marshal(b []byte) {
	b = b[:SQESize]
	b[0] = c.Opcode
	b[1] = c.Flags
	binary.LittleEndian.PutUint16(b[2:], c.CID)
	binary.LittleEndian.PutUint32(b[4:], c.NSID)
	binary.LittleEndian.PutUint32(b[8:], c.CDW2)
	binary.LittleEndian.PutUint32(b[12:], c.CDW3)
	binary.LittleEndian.PutUint64(b[16:], c.MPTR)
	c.SGL.Marshal(b[24:40])
	binary.LittleEndian.PutUint32(b[40:], c.CDW10)
	binary.LittleEndian.PutUint32(b[44:], c.CDW11)
	binary.LittleEndian.PutUint32(b[48:], c.CDW12)
	binary.LittleEndian.PutUint32(b[52:], c.CDW13)
	binary.LittleEndian.PutUint32(b[56:], c.CDW14)
	binary.LittleEndian.PutUint32(b[60:], c.CDW15)
}

// PSDT returns the PRP or SGL for Data Transfer field (Flags bits 7:6).
func (c *Command) PSDT() uint8 { return c.Flags >> 6 }

// Fuse returns the fused-operation field (Flags bits 1:0).
func (c *Command) Fuse() uint8 { return c.Flags & 3 }

// FabricsType returns the fctype of a Fabrics command (opcode 0x7F): SQE byte 4.
func (c *Command) FabricsType() FabricsType { return FabricsType(c.NSID) }

// IsFabrics reports whether the command is a Fabrics command (opcode 0x7F).
func (c *Command) IsFabrics() bool { return c.Opcode == OpFabrics }

// Direction is the direction of a command's data transfer.
type Direction uint8

// Data transfer directions.
const (
	DirNone          Direction = 0 // no data
	DirHostToCtrl    Direction = 1 // host memory → controller (writes, Connect data)
	DirCtrlToHost    Direction = 2 // controller → host memory (reads, Identify, logs)
	DirBidirectional Direction = 3
)

func (d Direction) String() string {
	switch d {
	case DirNone:
		return "none"
	case DirHostToCtrl:
		return "host-to-controller"
	case DirCtrlToHost:
		return "controller-to-host"
	}
	return "bidirectional"
}

// DataDirection returns the direction of the command's data transfer: for Fabrics
// commands by fctype, for every other command from opcode bits 1:0 as the NVMe base
// specification defines them.
func (c *Command) DataDirection() Direction {
	if c.Opcode == OpFabrics {
		switch c.FabricsType() {
		case FabricsConnect, FabricsAuthSend:
			return DirHostToCtrl
		case FabricsAuthReceive:
			return DirCtrlToHost
		default:
			return DirNone
		}
	}
	return Direction(c.Opcode & 3)
}

// Completion is a decoded 16-byte completion queue entry.
type Completion struct {
	DW0    uint32 // bytes 0..3: command specific
	DW1    uint32 // bytes 4..7: command specific
	SQHD   uint16 // bytes 8..9: submission queue head pointer
	SQID   uint16 // bytes 10..11: submission queue identifier
	CID    uint16 // bytes 12..13: command identifier
	Status Status // bytes 14..15 bits 15:1 (bit 0 is the phase tag, unused on Fabrics)
}

// Marshal encodes the completion into the first 16 bytes of b, which must be at least
// CQESize long. The phase tag is written as 0.
func (c *Completion) Marshal(b []byte) {
	b = b[:CQESize]
	binary.LittleEndian.PutUint32(b[0:], c.DW0)
	binary.LittleEndian.PutUint32(b[4:], c.DW1)
	binary.LittleEndian.PutUint16(b[8:], c.SQHD)
	binary.LittleEndian.PutUint16(b[10:], c.SQID)
	binary.LittleEndian.PutUint16(b[12:], c.CID)
	binary.LittleEndian.PutUint16(b[14:], uint16(c.Status)<<1)
}

// Unmarshal decodes a completion from the first 16 bytes of b; the phase tag is dropped.
func (c *Completion) Unmarshal(b []byte) error {
	if len(b) < CQESize {
		return &ErrShort{What: "CQE", Need: CQESize, Got: len(b)}
	}
	b = b[:CQESize]
	c.DW0 = binary.LittleEndian.Uint32(b[0:])
	c.DW1 = binary.LittleEndian.Uint32(b[4:])
	c.SQHD = binary.LittleEndian.Uint16(b[8:])
	c.SQID = binary.LittleEndian.Uint16(b[10:])
	c.CID = binary.LittleEndian.Uint16(b[12:])
	c.Status = Status(binary.LittleEndian.Uint16(b[14:]) >> 1)
	return nil
}
