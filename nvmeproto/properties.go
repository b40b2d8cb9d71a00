package nvmeproto

import "fmt"

// Controller property offsets, the operands of Property Get/Set. They are the PCIe
// controller register offsets; Fabrics has no doorbells and no AQA/ASQ/ACQ.
const (
	PropCAP   = 0x00 // Controller Capabilities, 8 bytes
	PropVS    = 0x08 // Version, 4 bytes
	PropINTMS = 0x0C // Interrupt Mask Set (PCIe only)
	PropINTMC = 0x10 // Interrupt Mask Clear (PCIe only)
	PropCC    = 0x14 // Controller Configuration, 4 bytes
	PropCSTS  = 0x1C // Controller Status, 4 bytes
	PropNSSR  = 0x20 // NVM Subsystem Reset, 4 bytes
	PropAQA   = 0x24 // Admin Queue Attributes (PCIe only)
	PropASQ   = 0x28 // Admin Submission Queue Base Address (PCIe only)
	PropACQ   = 0x30 // Admin Completion Queue Base Address (PCIe only)
	PropNSSD  = 0x64 // NVM Subsystem Shutdown, 4 bytes
	PropCRTO  = 0x68 // Controller Ready Timeouts, 4 bytes
)

// NSSRValue is the value ("NVMe") whose write to NSSR starts an NVM subsystem reset.
const NSSRValue = 0x4E564D65

// PropertySize returns the size in bytes of the property at off: 8 for CAP, ASQ and ACQ,
// 4 for the other defined properties, 0 for an offset that names no property.
func PropertySize(off uint32) int {
	switch off {
	case PropCAP, PropASQ, PropACQ:
		return 8
	case PropVS, PropINTMS, PropINTMC, PropCC, PropCSTS, PropNSSR, PropAQA, PropNSSD, PropCRTO:
		return 4
	}
	return 0
}

// PropertyName returns the short name of the property at off ("CAP", "CC", ...), or a hex
// form for an unknown offset.
func PropertyName(off uint32) string {
	switch off {
	case PropCAP:
		return "CAP"
	case PropVS:
		return "VS"
	case PropINTMS:
		return "INTMS"
	case PropINTMC:
		return "INTMC"
	case PropCC:
		return "CC"
	case PropCSTS:
		return "CSTS"
	case PropNSSR:
		return "NSSR"
	case PropAQA:
		return "AQA"
	case PropASQ:
		return "ASQ"
	case PropACQ:
		return "ACQ"
	case PropNSSD:
		return "NSSD"
	case PropCRTO:
		return "CRTO"
	}
	return fmt.Sprintf("property %#x", off)
}

// CAP is the Controller Capabilities property (offset 00h, 8 bytes).
// Bits: 15:0 MQES (0's based), 16 CQR, 18:17 AMS, 31:24 TO (500 ms units), 35:32 DSTRD,
// 36 NSSRS, 44:37 CSS, 45 BPS, 47:46 CPS, 51:48 MPSMIN, 55:52 MPSMAX (page size is
// 2^(12+n)), 56 PMRS, 57 CMBS, 58 NSSS, 60:59 CRMS.
//
// Accessors return a field; With* methods return a copy with one field replaced, so a
// value is built as CAP(0).WithMQES(127).WithCQR(true).WithTO(15).WithCSS(CAPCSSNVM).
type CAP uint64

// CAP.CSS bits (command sets supported).
const (
	CAPCSSNVM     = 1 << 0 // NVM command set (also set by discovery controllers)
	CAPCSSIOCS    = 1 << 6 // one or more I/O command sets, chosen with CC.CSS = 110b
	CAPCSSNoIOCSS = 1 << 7 // admin commands only, no I/O command set
)

// CAP.AMS bits (arbitration mechanisms beyond round robin).
const (
	CAPAMSWeightedRoundRobin = 1 << 0
	CAPAMSVendor             = 1 << 1
)

// CAP.CRMS bits (controller ready modes supported).
const (
	CAPCRMSWithMedia        = 1 << 0 // CRWMS
	CAPCRMSIndependentMedia = 1 << 1 // CRIMS
)

// MQES returns the maximum queue entries supported, 0's based (bits 15:0).
func (c CAP) MQES() uint16 { return uint16(bits64(uint64(c), 0, 16)) }

// CQR reports contiguous queues required (bit 16).
func (c CAP) CQR() bool { return bits64(uint64(c), 16, 1) != 0 }

// AMS returns the arbitration mechanisms supported (bits 18:17), CAPAMS* bits.
func (c CAP) AMS() uint8 { return uint8(bits64(uint64(c), 17, 2)) }

// TO returns the worst-case time to ready, in 500 ms units (bits 31:24).
func (c CAP) TO() uint8 { return uint8(bits64(uint64(c), 24, 8)) }

// DSTRD returns the doorbell stride (bits 35:32).
func (c CAP) DSTRD() uint8 { return uint8(bits64(uint64(c), 32, 4)) }

// NSSRS reports NVM subsystem reset supported (bit 36).
func (c CAP) NSSRS() bool { return bits64(uint64(c), 36, 1) != 0 }

// CSS returns the command sets supported (bits 44:37), CAPCSS* bits.
func (c CAP) CSS() uint8 { return uint8(bits64(uint64(c), 37, 8)) }

// BPS reports boot partition support (bit 45).
func (c CAP) BPS() bool { return bits64(uint64(c), 45, 1) != 0 }

// CPS returns the controller power scope (bits 47:46).
func (c CAP) CPS() uint8 { return uint8(bits64(uint64(c), 46, 2)) }

// MPSMIN returns the memory page size minimum, 2^(12+n) bytes (bits 51:48).
func (c CAP) MPSMIN() uint8 { return uint8(bits64(uint64(c), 48, 4)) }

// MPSMAX returns the memory page size maximum, 2^(12+n) bytes (bits 55:52).
func (c CAP) MPSMAX() uint8 { return uint8(bits64(uint64(c), 52, 4)) }

// PMRS reports persistent memory region supported (bit 56).
func (c CAP) PMRS() bool { return bits64(uint64(c), 56, 1) != 0 }

// CMBS reports controller memory buffer supported (bit 57).
func (c CAP) CMBS() bool { return bits64(uint64(c), 57, 1) != 0 }

// NSSS reports NVM subsystem shutdown supported (bit 58).
func (c CAP) NSSS() bool { return bits64(uint64(c), 58, 1) != 0 }

// CRMS returns the controller ready modes supported (bits 60:59), CAPCRMS* bits.
func (c CAP) CRMS() uint8 { return uint8(bits64(uint64(c), 59, 2)) }

// Timeout returns TO in milliseconds.
func (c CAP) Timeout() int64 { return int64(c.TO()) * 500 }

// MinPageSize returns 2^(12+MPSMIN) bytes.
func (c CAP) MinPageSize() int { return 1 << (12 + c.MPSMIN()) }

// MaxPageSize returns 2^(12+MPSMAX) bytes.
func (c CAP) MaxPageSize() int { return 1 << (12 + c.MPSMAX()) }

// WithMQES returns c with MQES set to v: maximum queue entries supported, 0's based (bits 15:0).
func (c CAP) WithMQES(v uint16) CAP { return CAP(setBits64(uint64(c), 0, 16, uint64(v))) }

// WithCQR returns c with CQR set to v: contiguous queues required (bit 16).
func (c CAP) WithCQR(v bool) CAP { return CAP(setBit64(uint64(c), 16, v)) }

// WithAMS returns c with AMS set to v: arbitration mechanisms supported (bits 18:17), CAPAMS* bits.
func (c CAP) WithAMS(v uint8) CAP { return CAP(setBits64(uint64(c), 17, 2, uint64(v))) }

// WithTO returns c with TO set to v: worst-case time to ready, in 500 ms units (bits 31:24).
func (c CAP) WithTO(v uint8) CAP { return CAP(setBits64(uint64(c), 24, 8, uint64(v))) }

// WithDSTRD returns c with DSTRD set to v: doorbell stride (bits 35:32).
func (c CAP) WithDSTRD(v uint8) CAP { return CAP(setBits64(uint64(c), 32, 4, uint64(v))) }

// WithNSSRS returns c with NSSRS set to v: NVM subsystem reset supported (bit 36).
func (c CAP) WithNSSRS(v bool) CAP { return CAP(setBit64(uint64(c), 36, v)) }

// WithCSS returns c with CSS set to v: command sets supported (bits 44:37), CAPCSS* bits.
func (c CAP) WithCSS(v uint8) CAP { return CAP(setBits64(uint64(c), 37, 8, uint64(v))) }

// WithBPS returns c with BPS set to v: boot partition support (bit 45).
func (c CAP) WithBPS(v bool) CAP { return CAP(setBit64(uint64(c), 45, v)) }

// WithCPS returns c with CPS set to v: controller power scope (bits 47:46).
func (c CAP) WithCPS(v uint8) CAP { return CAP(setBits64(uint64(c), 46, 2, uint64(v))) }

// WithMPSMIN returns c with MPSMIN set to v: memory page size minimum, 2^(12+n) bytes (bits 51:48).
func (c CAP) WithMPSMIN(v uint8) CAP { return CAP(setBits64(uint64(c), 48, 4, uint64(v))) }

// WithMPSMAX returns c with MPSMAX set to v: memory page size maximum, 2^(12+n) bytes (bits 55:52).
func (c CAP) WithMPSMAX(v uint8) CAP { return CAP(setBits64(uint64(c), 52, 4, uint64(v))) }

// WithPMRS returns c with PMRS set to v: persistent memory region supported (bit 56).
func (c CAP) WithPMRS(v bool) CAP { return CAP(setBit64(uint64(c), 56, v)) }

// WithCMBS returns c with CMBS set to v: controller memory buffer supported (bit 57).
func (c CAP) WithCMBS(v bool) CAP { return CAP(setBit64(uint64(c), 57, v)) }

// WithNSSS returns c with NSSS set to v: NVM subsystem shutdown supported (bit 58).
func (c CAP) WithNSSS(v bool) CAP { return CAP(setBit64(uint64(c), 58, v)) }

// WithCRMS returns c with CRMS set to v: controller ready modes supported (bits 60:59), CAPCRMS* bits.
func (c CAP) WithCRMS(v uint8) CAP { return CAP(setBits64(uint64(c), 59, 2, uint64(v))) }

func (c CAP) String() string {
	return fmt.Sprintf("CAP{mqes=%d cqr=%t ams=%#x to=%d dstrd=%d nssrs=%t css=%#x bps=%t mpsmin=%d mpsmax=%d cmbs=%t pmrs=%t crms=%#x}",
		c.MQES(), c.CQR(), c.AMS(), c.TO(), c.DSTRD(), c.NSSRS(), c.CSS(), c.BPS(), c.MPSMIN(), c.MPSMAX(), c.CMBS(), c.PMRS(), c.CRMS())
}

// VS is the Version property (offset 08h) and the VER field of Identify Controller:
// bits 31:16 major, 15:8 minor, 7:0 tertiary.
type VS uint32

// Versions of the NVMe base specification.
const (
	VS1_0 VS = 0x00010000
	VS1_1 VS = 0x00010100
	VS1_2 VS = 0x00010200
	VS1_3 VS = 0x00010300
	VS1_4 VS = 0x00010400
	VS2_0 VS = 0x00020000
	VS2_1 VS = 0x00020100
)

// MakeVS builds a version value.
func MakeVS(major uint16, minor, tertiary uint8) VS {
	return VS(uint32(major)<<16 | uint32(minor)<<8 | uint32(tertiary))
}

// Major returns bits 31:16.
func (v VS) Major() uint16 { return uint16(v >> 16) }

// Minor returns bits 15:8.
func (v VS) Minor() uint8 { return uint8(v >> 8) }

// Tertiary returns bits 7:0.
func (v VS) Tertiary() uint8 { return uint8(v) }

func (v VS) String() string { return fmt.Sprintf("%d.%d.%d", v.Major(), v.Minor(), v.Tertiary()) }

// CC is the Controller Configuration property (offset 14h, 4 bytes).
// Bits: 0 EN, 6:4 CSS, 10:7 MPS, 13:11 AMS, 15:14 SHN, 19:16 IOSQES, 23:20 IOCQES,
// 24 CRIME.
type CC uint32

// CC.CSS values.
const (
	CCCSSNVM       = 0 // NVM command set
	CCCSSAllIOCS   = 6 // all supported I/O command sets
	CCCSSAdminOnly = 7 // admin command set only
)

// CC.AMS values.
const (
	CCAMSRoundRobin         = 0
	CCAMSWeightedRoundRobin = 1
	CCAMSVendor             = 7
)

// CC.SHN values.
const (
	CCSHNNone   = 0 // no notification
	CCSHNNormal = 1 // normal shutdown
	CCSHNAbrupt = 2 // abrupt shutdown
)

// Entry sizes (as powers of two) an NVM controller requires in CC.IOSQES / CC.IOCQES.
const (
	IOSQESNVM = 6 // 64-byte SQE
	IOCQESNVM = 4 // 16-byte CQE
)

// EN reports enable (bit 0).
func (c CC) EN() bool { return bits32(uint32(c), 0, 1) != 0 }

// CSS returns the I/O command set selected (bits 6:4), CCCSS* values.
func (c CC) CSS() uint8 { return uint8(bits32(uint32(c), 4, 3)) }

// MPS returns the memory page size, 2^(12+n) bytes (bits 10:7).
func (c CC) MPS() uint8 { return uint8(bits32(uint32(c), 7, 4)) }

// AMS returns the arbitration mechanism selected (bits 13:11), CCAMS* values.
func (c CC) AMS() uint8 { return uint8(bits32(uint32(c), 11, 3)) }

// SHN returns the shutdown notification (bits 15:14), CCSHN* values.
func (c CC) SHN() uint8 { return uint8(bits32(uint32(c), 14, 2)) }

// IOSQES returns the I/O submission queue entry size, 2^n bytes (bits 19:16).
func (c CC) IOSQES() uint8 { return uint8(bits32(uint32(c), 16, 4)) }

// IOCQES returns the I/O completion queue entry size, 2^n bytes (bits 23:20).
func (c CC) IOCQES() uint8 { return uint8(bits32(uint32(c), 20, 4)) }

// CRIME reports controller ready independent of media enable (bit 24).
func (c CC) CRIME() bool { return bits32(uint32(c), 24, 1) != 0 }

// PageSize returns the memory page size CC.MPS selects: 2^(12+MPS) bytes.
func (c CC) PageSize() int { return 1 << (12 + c.MPS()) }

// WithEN returns c with EN set to v: enable (bit 0).
func (c CC) WithEN(v bool) CC { return CC(setBit32(uint32(c), 0, v)) }

// WithCSS returns c with CSS set to v: I/O command set selected (bits 6:4), CCCSS* values.
func (c CC) WithCSS(v uint8) CC { return CC(setBits32(uint32(c), 4, 3, uint32(v))) }

// WithMPS returns c with MPS set to v: memory page size, 2^(12+n) bytes (bits 10:7).
func (c CC) WithMPS(v uint8) CC { return CC(setBits32(uint32(c), 7, 4, uint32(v))) }

// WithAMS returns c with AMS set to v: arbitration mechanism selected (bits 13:11), CCAMS* values.
func (c CC) WithAMS(v uint8) CC { return CC(setBits32(uint32(c), 11, 3, uint32(v))) }

// WithSHN returns c with SHN set to v: shutdown notification (bits 15:14), CCSHN* values.
func (c CC) WithSHN(v uint8) CC { return CC(setBits32(uint32(c), 14, 2, uint32(v))) }

// WithIOSQES returns c with IOSQES set to v: I/O submission queue entry size, 2^n bytes (bits 19:16).
func (c CC) WithIOSQES(v uint8) CC { return CC(setBits32(uint32(c), 16, 4, uint32(v))) }

// WithIOCQES returns c with IOCQES set to v: I/O completion queue entry size, 2^n bytes (bits 23:20).
func (c CC) WithIOCQES(v uint8) CC { return CC(setBits32(uint32(c), 20, 4, uint32(v))) }

// WithCRIME returns c with CRIME set to v: controller ready independent of media enable (bit 24).
func (c CC) WithCRIME(v bool) CC { return CC(setBit32(uint32(c), 24, v)) }

func (c CC) String() string {
	return fmt.Sprintf("CC{en=%t css=%d mps=%d ams=%d shn=%d iosqes=%d iocqes=%d crime=%t}",
		c.EN(), c.CSS(), c.MPS(), c.AMS(), c.SHN(), c.IOSQES(), c.IOCQES(), c.CRIME())
}

// CSTS is the Controller Status property (offset 1Ch, 4 bytes).
// Bits: 0 RDY, 1 CFS, 3:2 SHST, 4 NSSRO, 5 PP, 6 ST.
type CSTS uint32

// CSTS.SHST values.
const (
	CSTSSHSTNormal    = 0 // normal operation
	CSTSSHSTOccurring = 1 // shutdown processing occurring
	CSTSSHSTComplete  = 2 // shutdown processing complete
)

// CSTS single-bit fields.
const (
	CSTSBitRDY   = 1 << 0
	CSTSBitCFS   = 1 << 1
	CSTSBitNSSRO = 1 << 4
	CSTSBitPP    = 1 << 5
	CSTSBitST    = 1 << 6
)

const cstsSHSTShift, cstsSHSTWidth = 2, 2

// RDY reports ready (bit 0).
func (c CSTS) RDY() bool { return uint32(c)&CSTSBitRDY != 0 }

// CFS reports controller fatal status (bit 1).
func (c CSTS) CFS() bool { return uint32(c)&CSTSBitCFS != 0 }

// SHST returns the shutdown status (bits 3:2), CSTSSHST* values.
func (c CSTS) SHST() uint8 { return uint8(bits32(uint32(c), cstsSHSTShift, cstsSHSTWidth)) }

// NSSRO reports NVM subsystem reset occurred (bit 4).
func (c CSTS) NSSRO() bool { return uint32(c)&CSTSBitNSSRO != 0 }

// PP reports processing paused (bit 5).
func (c CSTS) PP() bool { return uint32(c)&CSTSBitPP != 0 }

// ST reports shutdown type: the shutdown is of the NVM subsystem (bit 6).
func (c CSTS) ST() bool { return uint32(c)&CSTSBitST != 0 }

// WithRDY returns c with RDY set to v: ready (bit 0).
func (c CSTS) WithRDY(v bool) CSTS { return CSTS(setBit32(uint32(c), 0, v)) }

// WithCFS returns c with CFS set to v: controller fatal status (bit 1).
func (c CSTS) WithCFS(v bool) CSTS { return CSTS(setBit32(uint32(c), 1, v)) }

// WithSHST returns c with SHST set to v: shutdown status (bits 3:2), CSTSSHST* values.
func (c CSTS) WithSHST(v uint8) CSTS {
	return CSTS(setBits32(uint32(c), cstsSHSTShift, cstsSHSTWidth, uint32(v)))
}

// WithNSSRO returns c with NSSRO set to v: NVM subsystem reset occurred (bit 4).
func (c CSTS) WithNSSRO(v bool) CSTS { return CSTS(setBit32(uint32(c), 4, v)) }

// WithPP returns c with PP set to v: processing paused (bit 5).
func (c CSTS) WithPP(v bool) CSTS { return CSTS(setBit32(uint32(c), 5, v)) }

// WithST returns c with ST set to v: shutdown type: the shutdown is of the NVM subsystem (bit 6).
func (c CSTS) WithST(v bool) CSTS { return CSTS(setBit32(uint32(c), 6, v)) }

func (c CSTS) String() string {
	return fmt.Sprintf("CSTS{rdy=%t cfs=%t shst=%d nssro=%t pp=%t}", c.RDY(), c.CFS(), c.SHST(), c.NSSRO(), c.PP())
}

// CRTO is the Controller Ready Timeouts property (offset 68h, 4 bytes): bits 15:0 CRWMT
// (ready with media timeout) and 31:16 CRIMT (ready independent of media timeout), both in
// 500 ms units.
type CRTO uint32

// MakeCRTO builds a CRTO value.
func MakeCRTO(crwmt, crimt uint16) CRTO { return CRTO(uint32(crwmt) | uint32(crimt)<<16) }

// CRWMT returns the controller ready with media timeout, 500 ms units (bits 15:0).
func (c CRTO) CRWMT() uint16 { return uint16(c) }

// CRIMT returns the controller ready independent of media timeout, 500 ms units (bits 31:16).
func (c CRTO) CRIMT() uint16 { return uint16(c >> 16) }
