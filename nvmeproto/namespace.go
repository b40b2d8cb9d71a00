package nvmeproto

import (
	"errors"
	"fmt"
)

// LBAFormat is one LBA format descriptor of Identify Namespace (4 bytes each, from byte
// 128): bytes 0..1 MS, byte 2 LBADS, byte 3 bits 1:0 RP.
type LBAFormat struct {
	MS    uint16 // metadata size in bytes
	LBADS uint8  // LBA data size, as a power of two (9 = 512, 12 = 4096)
	RP    uint8  // relative performance (0 best .. 3 degraded)
}

// LBAFormatFor returns the format of an LBA of size bytes with no metadata.
// size must be a power of two.
func LBAFormatFor(size uint32) LBAFormat {
	var n uint8
	for s := size; s > 1; s >>= 1 {
		n++
	}
	return LBAFormat{LBADS: n}
}

// DataSize returns the LBA data size in bytes, 0 if LBADS is 0 (format not available) or
// too large to represent.
func (f LBAFormat) DataSize() uint32 {
	if f.LBADS == 0 || f.LBADS > 31 {
		return 0
	}
	return 1 << f.LBADS
}

// NSFEAT bits (Identify Namespace byte 24).
const (
	NSFEATThinProvisioning = 1 << 0
	NSFEATAtomics          = 1 << 1 // NAWUN, NAWUPF, NACWU are valid
	NSFEATDeallocError     = 1 << 2 // DULBE supported
	NSFEATUIDReuse         = 1 << 3 // NGUID/EUI64 are never reused
	NSFEATOptPerf          = 1 << 4 // NPWG, NPWA, NPDG, NPDA, NOWS are valid
)

// FLBAS bits (byte 26).
const (
	FLBASIndexMask   = 0x0F // bits 3:0: low bits of the format index
	FLBASExtended    = 0x10 // metadata transferred at the end of the data LBA
	FLBASIndexHiMask = 0x60 // bits 6:5: high bits of the format index (more than 16 formats)
)

// NMIC bits (byte 30).
const NMICShared = 1 << 0 // namespace may be attached to two or more controllers

// DLFEAT values (byte 33).
const (
	DLFEATReadZeroes        = 0x01 // bits 2:0 = 001b: deallocated blocks read as zeroes
	DLFEATReadOnes          = 0x02 // bits 2:0 = 010b: deallocated blocks read as all ones
	DLFEATWriteZeroesDeallo = 1 << 3
	DLFEATGuardCRC          = 1 << 4
)

// NSATTR bits (byte 99).
const NSATTRWriteProtected = 1 << 0

// IdentifyNamespace is the NVM command set Identify Namespace data structure (CNS 00h,
// 4096 bytes). Field comments give the byte offset.
type IdentifyNamespace struct {
	NSZE     uint64        // 0: namespace size, logical blocks
	NCAP     uint64        // 8: namespace capacity
	NUSE     uint64        // 16: namespace utilization
	NSFEAT   uint8         // 24: namespace features
	NLBAF    uint8         // 25: number of LBA formats (0's based)
	FLBAS    uint8         // 26: formatted LBA size
	MC       uint8         // 27: metadata capabilities
	DPC      uint8         // 28: end-to-end data protection capabilities
	DPS      uint8         // 29: end-to-end data protection type settings
	NMIC     uint8         // 30: multi-path I/O and namespace sharing
	RESCAP   uint8         // 31: reservation capabilities
	FPI      uint8         // 32: format progress indicator
	DLFEAT   uint8         // 33: deallocate logical block features
	NAWUN    uint16        // 34: atomic write unit normal (0's based)
	NAWUPF   uint16        // 36: atomic write unit power fail (0's based)
	NACWU    uint16        // 38: atomic compare & write unit (0's based)
	NABSN    uint16        // 40: atomic boundary size normal
	NABO     uint16        // 42: atomic boundary offset
	NABSPF   uint16        // 44: atomic boundary size power fail
	NOIOB    uint16        // 46: optimal I/O boundary, logical blocks
	NVMCAP   Uint128       // 48: NVM capacity, bytes
	NPWG     uint16        // 64: preferred write granularity (0's based)
	NPWA     uint16        // 66: preferred write alignment (0's based)
	NPDG     uint16        // 68: preferred deallocate granularity (0's based)
	NPDA     uint16        // 70: preferred deallocate alignment (0's based)
	NOWS     uint16        // 72: optimal write size (0's based)
	MSSRL    uint16        // 74: maximum single source range length (Copy)
	MCL      uint32        // 76: maximum copy length
	MSRC     uint8         // 80: maximum source range count (0's based)
	ANAGRPID uint32        // 92: ANA group identifier
	NSATTR   uint8         // 99: namespace attributes
	NVMSETID uint16        // 100: NVM set identifier
	ENDGID   uint16        // 102: endurance group identifier
	NGUID    [16]byte      // 104..119: namespace globally unique identifier
	EUI64    [8]byte       // 120..127: IEEE extended unique identifier
	LBAF     [64]LBAFormat // 128..383: LBA formats 0..63
	VS       [256]byte     // 3840..4095: vendor specific
}

// FormatIndex returns the index of the LBA format in use, from FLBAS bits 3:0 and (when
// more than 16 formats are reported) bits 6:5.
func (ns *IdentifyNamespace) FormatIndex() int {
	i := int(ns.FLBAS & FLBASIndexMask)
	if ns.NLBAF >= 16 {
		i |= int(ns.FLBAS&FLBASIndexHiMask) >> 1
	}
	return i
}

// LBASize returns the data size of the LBA format in use, in bytes.
func (ns *IdentifyNamespace) LBASize() uint32 { return ns.LBAF[ns.FormatIndex()].DataSize() }

// Marshal encodes ns into the first IdentifySize bytes of b, zeroing reserved bytes.
func (ns *IdentifyNamespace) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	le.PutUint64(b[0:], ns.NSZE)
	le.PutUint64(b[8:], ns.NCAP)
	le.PutUint64(b[16:], ns.NUSE)
	b[24], b[25], b[26], b[27], b[28], b[29], b[30], b[31], b[32], b[33] =
		ns.NSFEAT, ns.NLBAF, ns.FLBAS, ns.MC, ns.DPC, ns.DPS, ns.NMIC, ns.RESCAP, ns.FPI, ns.DLFEAT
	le.PutUint16(b[34:], ns.NAWUN)
	le.PutUint16(b[36:], ns.NAWUPF)
	le.PutUint16(b[38:], ns.NACWU)
	le.PutUint16(b[40:], ns.NABSN)
	le.PutUint16(b[42:], ns.NABO)
	le.PutUint16(b[44:], ns.NABSPF)
	le.PutUint16(b[46:], ns.NOIOB)
	putU128(b[48:], ns.NVMCAP)
	le.PutUint16(b[64:], ns.NPWG)
	le.PutUint16(b[66:], ns.NPWA)
	le.PutUint16(b[68:], ns.NPDG)
	le.PutUint16(b[70:], ns.NPDA)
	le.PutUint16(b[72:], ns.NOWS)
	le.PutUint16(b[74:], ns.MSSRL)
	le.PutUint32(b[76:], ns.MCL)
	b[80] = ns.MSRC
	le.PutUint32(b[92:], ns.ANAGRPID)
	b[99] = ns.NSATTR
	le.PutUint16(b[100:], ns.NVMSETID)
	le.PutUint16(b[102:], ns.ENDGID)
	copy(b[104:120], ns.NGUID[:])
	copy(b[120:128], ns.EUI64[:])
	for i, f := range ns.LBAF {
		o := 128 + 4*i
		le.PutUint16(b[o:], f.MS)
		b[o+2] = f.LBADS
		b[o+3] = f.RP & 3
	}
	copy(b[3840:], ns.VS[:])
}

// Unmarshal decodes Identify Namespace data from the first IdentifySize bytes of b.
func (ns *IdentifyNamespace) Unmarshal(b []byte) error {
	if err := short("Identify Namespace", IdentifySize, b); err != nil {
		return err
	}
	b = b[:IdentifySize]
	ns.NSZE = le.Uint64(b[0:])
	ns.NCAP = le.Uint64(b[8:])
	ns.NUSE = le.Uint64(b[16:])
	ns.NSFEAT, ns.NLBAF, ns.FLBAS, ns.MC, ns.DPC, ns.DPS, ns.NMIC, ns.RESCAP, ns.FPI, ns.DLFEAT =
		b[24], b[25], b[26], b[27], b[28], b[29], b[30], b[31], b[32], b[33]
	ns.NAWUN = le.Uint16(b[34:])
	ns.NAWUPF = le.Uint16(b[36:])
	ns.NACWU = le.Uint16(b[38:])
	ns.NABSN = le.Uint16(b[40:])
	ns.NABO = le.Uint16(b[42:])
	ns.NABSPF = le.Uint16(b[44:])
	ns.NOIOB = le.Uint16(b[46:])
	ns.NVMCAP = getU128(b[48:])
	ns.NPWG = le.Uint16(b[64:])
	ns.NPWA = le.Uint16(b[66:])
	ns.NPDG = le.Uint16(b[68:])
	ns.NPDA = le.Uint16(b[70:])
	ns.NOWS = le.Uint16(b[72:])
	ns.MSSRL = le.Uint16(b[74:])
	ns.MCL = le.Uint32(b[76:])
	ns.MSRC = b[80]
	ns.ANAGRPID = le.Uint32(b[92:])
	ns.NSATTR = b[99]
	ns.NVMSETID = le.Uint16(b[100:])
	ns.ENDGID = le.Uint16(b[102:])
	copy(ns.NGUID[:], b[104:120])
	copy(ns.EUI64[:], b[120:128])
	for i := range ns.LBAF {
		o := 128 + 4*i
		ns.LBAF[i] = LBAFormat{MS: le.Uint16(b[o:]), LBADS: b[o+2], RP: b[o+3] & 3}
	}
	copy(ns.VS[:], b[3840:])
	return nil
}

// IdentifyNamespaceIndependent is the I/O command set independent Identify Namespace data
// structure (CNS 08h): byte 0 NSFEAT, 1 NMIC, 2 RESCAP, 3 FPI, 4 ANAGRPID, 8 NSATTR,
// 10 NVMSETID, 12 ENDGID, 14 NSTAT.
type IdentifyNamespaceIndependent struct {
	NSFEAT   uint8
	NMIC     uint8
	RESCAP   uint8
	FPI      uint8
	ANAGRPID uint32
	NSATTR   uint8
	NVMSETID uint16
	ENDGID   uint16
	NSTAT    uint8 // bit 0: namespace ready
}

// NSTATReady is the NSTAT bit reporting the namespace is ready.
const NSTATReady = 1 << 0

// Marshal encodes id into the first IdentifySize bytes of b, zeroing the rest.
func (id *IdentifyNamespaceIndependent) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	b[0], b[1], b[2], b[3] = id.NSFEAT, id.NMIC, id.RESCAP, id.FPI
	le.PutUint32(b[4:], id.ANAGRPID)
	b[8] = id.NSATTR
	le.PutUint16(b[10:], id.NVMSETID)
	le.PutUint16(b[12:], id.ENDGID)
	b[14] = id.NSTAT
}

// Unmarshal decodes the structure from the first IdentifySize bytes of b.
func (id *IdentifyNamespaceIndependent) Unmarshal(b []byte) error {
	if err := short("Identify Namespace (command set independent)", IdentifySize, b); err != nil {
		return err
	}
	id.NSFEAT, id.NMIC, id.RESCAP, id.FPI = b[0], b[1], b[2], b[3]
	id.ANAGRPID = le.Uint32(b[4:])
	id.NSATTR = b[8]
	id.NVMSETID = le.Uint16(b[10:])
	id.ENDGID = le.Uint16(b[12:])
	id.NSTAT = b[14]
	return nil
}

// MaxNSIDListEntries is the number of NSIDs that fit in a 4096-byte namespace list.
const MaxNSIDListEntries = IdentifySize / 4

// ActiveNSList is the active namespace ID list of Identify CNS 02h / 07h.
type ActiveNSList = NSIDList

// NSIDList is a namespace ID list (Identify CNS 02h/07h, and the Changed Namespace List
// log page): up to 1024 NSIDs, in increasing order, the rest of the 4096 bytes zero.
type NSIDList []uint32

// Marshal encodes the list into the first IdentifySize bytes of b: the first 1024 NSIDs
// (callers pass them sorted and non-zero), then zeroes.
func (l NSIDList) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	for i, id := range l {
		if i == MaxNSIDListEntries {
			break
		}
		le.PutUint32(b[4*i:], id)
	}
}

// Unmarshal decodes a list from b (up to IdentifySize bytes; shorter input is read as far
// as it goes), stopping at the first zero entry. It reuses l's storage.
func (l *NSIDList) Unmarshal(b []byte) error {
	if len(b) > IdentifySize {
		b = b[:IdentifySize]
	}
	out := (*l)[:0]
	for i := 0; i+4 <= len(b); i += 4 {
		id := le.Uint32(b[i:])
		if id == 0 {
			break
		}
		out = append(out, id)
	}
	*l = out
	return nil
}

// NIDT is a namespace identifier type (namespace identification descriptor byte 0).
type NIDT uint8

// Namespace identifier types and their lengths.
const (
	NIDTEUI64 NIDT = 0x01 // 8 bytes
	NIDTNGUID NIDT = 0x02 // 16 bytes
	NIDTUUID  NIDT = 0x03 // 16 bytes
	NIDTCSI   NIDT = 0x04 // 1 byte
)

// Len returns the NIDL the specification fixes for the type, 0 for an unknown type.
func (t NIDT) Len() int {
	switch t {
	case NIDTEUI64:
		return 8
	case NIDTNGUID, NIDTUUID:
		return 16
	case NIDTCSI:
		return 1
	}
	return 0
}

func (t NIDT) String() string {
	switch t {
	case NIDTEUI64:
		return "EUI64"
	case NIDTNGUID:
		return "NGUID"
	case NIDTUUID:
		return "UUID"
	case NIDTCSI:
		return "CSI"
	}
	return fmt.Sprintf("NIDT %#02x", uint8(t))
}

// NSDescriptor is one namespace identification descriptor: byte 0 NIDT, byte 1 NIDL,
// bytes 4.. the identifier (NIDL bytes).
type NSDescriptor struct {
	Type NIDT
	ID   [16]byte // the first Type.Len() bytes are meaningful
}

// EUI64Descriptor returns an EUI64 descriptor.
func EUI64Descriptor(id [8]byte) NSDescriptor {
	d := NSDescriptor{Type: NIDTEUI64}
	copy(d.ID[:], id[:])
	return d
}

// NGUIDDescriptor returns an NGUID descriptor.
func NGUIDDescriptor(id [16]byte) NSDescriptor { return NSDescriptor{Type: NIDTNGUID, ID: id} }

// UUIDDescriptor returns a UUID descriptor.
func UUIDDescriptor(id [16]byte) NSDescriptor { return NSDescriptor{Type: NIDTUUID, ID: id} }

// CSIDescriptor returns a command set identifier descriptor.
func CSIDescriptor(csi CSI) NSDescriptor { return NSDescriptor{Type: NIDTCSI, ID: [16]byte{byte(csi)}} }

// Bytes returns the meaningful identifier bytes.
func (d *NSDescriptor) Bytes() []byte { return d.ID[:d.Type.Len()] }

// NSDescriptorList is the namespace identification descriptor list (Identify CNS 03h).
type NSDescriptorList []NSDescriptor

// ErrBadDescriptor reports a malformed namespace identification descriptor list.
var ErrBadDescriptor = errors.New("nvmeproto: malformed namespace identification descriptor")

// Marshal encodes the list into the first IdentifySize bytes of b and zeroes the rest.
// Descriptors of unknown type are skipped.
func (l NSDescriptorList) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	off := 0
	for i := range l {
		n := l[i].Type.Len()
		if n == 0 || off+4+n > len(b) {
			continue
		}
		b[off] = byte(l[i].Type)
		b[off+1] = byte(n)
		copy(b[off+4:], l[i].ID[:n])
		off += 4 + n
	}
}

// Unmarshal decodes a descriptor list from b (up to IdentifySize bytes), stopping at a
// descriptor with NIDT 0 or at the end of b. Descriptors of unknown type are skipped, as
// hosts do; a known type with the wrong NIDL, or a descriptor running past the end of the
// data, is an error wrapping ErrBadDescriptor.
func (l *NSDescriptorList) Unmarshal(b []byte) error {
	if len(b) > IdentifySize {
		b = b[:IdentifySize]
	}
	out := (*l)[:0]
	defer func() { *l = out }()
	for off := 0; off+4 <= len(b); {
		t, n := NIDT(b[off]), int(b[off+1])
		if t == 0 {
			break
		}
		if off+4+n > len(b) {
			return fmt.Errorf("%w: %v at byte %d has length %d past the end of the data", ErrBadDescriptor, t, off, n)
		}
		if want := t.Len(); want != 0 {
			if n != want {
				return fmt.Errorf("%w: %v at byte %d has length %d, want %d", ErrBadDescriptor, t, off, n, want)
			}
			d := NSDescriptor{Type: t}
			copy(d.ID[:], b[off+4:off+4+n])
			out = append(out, d)
		}
		off += 4 + n
	}
	return nil
}

// Find returns the first descriptor of type t.
func (l NSDescriptorList) Find(t NIDT) (NSDescriptor, bool) {
	for _, d := range l {
		if d.Type == t {
			return d, true
		}
	}
	return NSDescriptor{}, false
}
