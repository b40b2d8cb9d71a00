package nvmeproto

// NVM command set I/O command views. They decode in place from a Command and allocate
// nothing: they sit on a target's I/O path.

// Control bits of Read/Write/Compare/Write Zeroes/Verify (CDW12 bits 31:16, as
// RWCommand.Control holds them).
const (
	RWControlLR     = 1 << 15 // CDW12 bit 31: limited retry
	RWControlFUA    = 1 << 14 // CDW12 bit 30: force unit access
	RWControlDEAC   = 1 << 9  // CDW12 bit 25: Write Zeroes: deallocate
	RWControlSTC    = 1 << 8  // CDW12 bit 24: storage tag check
	rwPRINFOShift   = 10      // CDW12 bits 29:26: protection information
	rwDTYPEShift    = 4       // CDW12 bits 23:20: directive type
	RWPRINFOPRACT   = 1 << 3  // PRINFO bit: protection information action
	RWPRINFOGuard   = 1 << 2  // PRINFO bit: check guard
	RWPRINFOAppTag  = 1 << 1  // PRINFO bit: check application tag
	RWPRINFORefTag  = 1 << 0  // PRINFO bit: check reference tag
	RWDTYPEStreams  = 1       // directive type: streams
	RWDTYPEDataPlcm = 2       // directive type: data placement
)

// RWCommand is the command specific part of the NVM commands that address a range of
// logical blocks: Read (02h), Write (01h), Compare (05h), Write Zeroes (08h), Write
// Uncorrectable (04h), Verify (0Ch). CDW10..11 SLBA, CDW12 bits 15:0 NLB (0's based)
// and 31:16 control (LR, FUA, PRINFO, DEAC, DTYPE), CDW13 DSM (7:0) and DSPEC (31:16),
// CDW14 reference tag, CDW15 application tag (15:0) and mask (31:16).
type RWCommand struct {
	Opcode  uint8
	NSID    uint32
	SLBA    uint64
	NLB     uint16 // number of logical blocks, 0's based
	Control uint16 // RWControl* bits, PRINFO, DTYPE
	DSM     uint8  // dataset management hints
	DSPEC   uint16 // directive specific
	RefTag  uint32
	AppTag  uint16
	AppMask uint16
}

// FromCommand decodes the fields of cmd. It does not check the opcode.
func (r *RWCommand) FromCommand(cmd *Command) {
	r.Opcode = cmd.Opcode
	r.NSID = cmd.NSID
	r.SLBA = uint64(cmd.CDW10) | uint64(cmd.CDW11)<<32
	r.NLB = uint16(cmd.CDW12)
	r.Control = uint16(cmd.CDW12 >> 16)
	r.DSM = uint8(cmd.CDW13)
	r.DSPEC = uint16(cmd.CDW13 >> 16)
	r.RefTag = cmd.CDW14
	r.AppTag = uint16(cmd.CDW15)
	r.AppMask = uint16(cmd.CDW15 >> 16)
}

// ToCommand sets cmd's opcode, NSID and CDW10..15 from r.
func (r *RWCommand) ToCommand(cmd *Command) {
	cmd.Opcode = r.Opcode
	cmd.NSID = r.NSID
	cmd.CDW10 = uint32(r.SLBA)
	cmd.CDW11 = uint32(r.SLBA >> 32)
	cmd.CDW12 = uint32(r.NLB) | uint32(r.Control)<<16
	cmd.CDW13 = uint32(r.DSM) | uint32(r.DSPEC)<<16
	cmd.CDW14 = r.RefTag
	cmd.CDW15 = uint32(r.AppTag) | uint32(r.AppMask)<<16
}

// Blocks returns the number of logical blocks, NLB+1.
func (r *RWCommand) Blocks() uint32 { return uint32(r.NLB) + 1 }

// FUA reports force unit access (CDW12 bit 30).
func (r *RWCommand) FUA() bool { return r.Control&RWControlFUA != 0 }

// LR reports limited retry (CDW12 bit 31).
func (r *RWCommand) LR() bool { return r.Control&RWControlLR != 0 }

// DEAC reports the Write Zeroes deallocate bit (CDW12 bit 25).
func (r *RWCommand) DEAC() bool { return r.Control&RWControlDEAC != 0 }

// PRINFO returns the protection information field (CDW12 bits 29:26).
func (r *RWCommand) PRINFO() uint8 { return uint8(r.Control>>rwPRINFOShift) & 0xF }

// DTYPE returns the directive type (CDW12 bits 23:20).
func (r *RWCommand) DTYPE() uint8 { return uint8(r.Control>>rwDTYPEShift) & 0xF }

// InRange reports whether the command's blocks lie within a namespace of nsze blocks,
// without overflowing.
func (r *RWCommand) InRange(nsze uint64) bool {
	n := uint64(r.Blocks())
	return r.SLBA < nsze && n <= nsze-r.SLBA
}

// Dataset Management attributes (CDW11).
const (
	DSMAttrIDR = 1 << 0 // integral dataset for read
	DSMAttrIDW = 1 << 1 // integral dataset for write
	DSMAttrAD  = 1 << 2 // deallocate
)

// DSMRangeSize is the size of one Dataset Management range.
const DSMRangeSize = 16

// MaxDSMRanges is the most ranges one Dataset Management command carries.
const MaxDSMRanges = 256

// DatasetManagementCommand is the command specific part of Dataset Management (09h):
// CDW10 bits 7:0 NR (number of ranges, 0's based), CDW11 attributes (DSMAttr*).
// The data is NR+1 DSMRanges.
type DatasetManagementCommand struct {
	NSID       uint32
	NR         uint8
	Attributes uint32
}

// FromCommand decodes the fields of cmd. It does not check the opcode.
func (d *DatasetManagementCommand) FromCommand(cmd *Command) {
	d.NSID = cmd.NSID
	d.NR = uint8(cmd.CDW10)
	d.Attributes = cmd.CDW11
}

// ToCommand sets cmd's opcode, NSID and CDW10..11; CDW12..15 are zeroed.
func (d *DatasetManagementCommand) ToCommand(cmd *Command) {
	adminCommand(cmd, OpDatasetManagement, d.NSID)
	cmd.CDW10 = uint32(d.NR)
	cmd.CDW11 = d.Attributes
	cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0, 0
}

// Ranges returns the number of ranges, NR+1.
func (d *DatasetManagementCommand) Ranges() int { return int(d.NR) + 1 }

// DataLength returns the length of the command's data in bytes.
func (d *DatasetManagementCommand) DataLength() int { return d.Ranges() * DSMRangeSize }

// DSMRange is one Dataset Management range: bytes 0..3 context attributes, 4..7 length
// in logical blocks (not 0's based), 8..15 starting LBA.
type DSMRange struct {
	Attributes uint32
	NLB        uint32
	SLBA       uint64
}

// Marshal encodes r into the first DSMRangeSize bytes of b.
func (r *DSMRange) Marshal(b []byte) {
	b = b[:DSMRangeSize]
	le.PutUint32(b[0:], r.Attributes)
	le.PutUint32(b[4:], r.NLB)
	le.PutUint64(b[8:], r.SLBA)
}

// Unmarshal decodes a range from the first DSMRangeSize bytes of b.
func (r *DSMRange) Unmarshal(b []byte) error {
	if err := short("Dataset Management range", DSMRangeSize, b); err != nil {
		return err
	}
	r.Attributes = le.Uint32(b[0:])
	r.NLB = le.Uint32(b[4:])
	r.SLBA = le.Uint64(b[8:])
	return nil
}

// DecodeDSMRanges decodes n ranges from b, appending them to dst[:0] (pass a slice with
// capacity MaxDSMRanges to avoid allocating). It fails if b holds fewer than n ranges or
// n is outside 1..MaxDSMRanges.
func DecodeDSMRanges(dst []DSMRange, b []byte, n int) ([]DSMRange, error) {
	dst = dst[:0]
	if n < 1 || n > MaxDSMRanges {
		return dst, &FieldError{Struct: "Dataset Management", Field: "NR", Offset: 40, Reason: "range count out of 1..256"}
	}
	if err := short("Dataset Management ranges", n*DSMRangeSize, b); err != nil {
		return dst, err
	}
	for i := 0; i < n; i++ {
		o := i * DSMRangeSize
		dst = append(dst, DSMRange{Attributes: le.Uint32(b[o:]), NLB: le.Uint32(b[o+4:]), SLBA: le.Uint64(b[o+8:])})
	}
	return dst, nil
}
