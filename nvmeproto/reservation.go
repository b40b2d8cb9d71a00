package nvmeproto

import "fmt"

// Reservations (NVMe Base Specification 2.0, 7.3–7.6 and 8.19): the Reservation Register,
// Acquire, Release and Report I/O commands, their data, the Reservation Status data
// structures, the Reservation Notification log page (80h) and the Reservation
// Notification Mask (82h) and Reservation Persistence (83h) features.

// ResvType is a reservation type (Acquire/Release CDW10 bits 15:8, Report byte 4).
type ResvType uint8

// Reservation types. 0 in a Report means no reservation is held.
const (
	ResvNone                   ResvType = 0
	ResvWriteExclusive         ResvType = 1
	ResvExclusiveAccess        ResvType = 2
	ResvWriteExclusiveRegOnly  ResvType = 3
	ResvExclusiveAccessRegOnly ResvType = 4
	ResvWriteExclusiveAllRegs  ResvType = 5
	ResvExclusiveAccessAllRegs ResvType = 6
	resvTypeMax                         = ResvExclusiveAccessAllRegs
)

// Valid reports whether t is one of the six reservation types.
func (t ResvType) Valid() bool { return t >= ResvWriteExclusive && t <= resvTypeMax }

// AllRegistrants reports whether every registrant holds a reservation of this type.
func (t ResvType) AllRegistrants() bool {
	return t == ResvWriteExclusiveAllRegs || t == ResvExclusiveAccessAllRegs
}

// RegistrantsOnly reports whether this is a Registrants Only type.
func (t ResvType) RegistrantsOnly() bool {
	return t == ResvWriteExclusiveRegOnly || t == ResvExclusiveAccessRegOnly
}

// Allows reports whether a host may run a command of the read group (Read, Compare,
// Verify) or, with write, of the write group (Write, Write Zeroes, Write Uncorrectable,
// Dataset Management, Flush) on a namespace with a reservation of this type, given
// whether it holds the reservation and whether it is a registrant (spec 2.0, "Command
// Behavior in the Presence of a Reservation"). With ResvNone everything is allowed.
func (t ResvType) Allows(write, holder, registrant bool) bool {
	if t == ResvNone || holder {
		return true
	}
	switch t {
	case ResvWriteExclusive:
		return !write
	case ResvExclusiveAccess:
		return false
	case ResvWriteExclusiveRegOnly, ResvWriteExclusiveAllRegs:
		return registrant || !write
	case ResvExclusiveAccessRegOnly, ResvExclusiveAccessAllRegs:
		return registrant
	}
	return true // an unknown type restricts nothing
}

func (t ResvType) String() string {
	switch t {
	case ResvNone:
		return "none"
	case ResvWriteExclusive:
		return "write-exclusive"
	case ResvExclusiveAccess:
		return "exclusive-access"
	case ResvWriteExclusiveRegOnly:
		return "write-exclusive-registrants-only"
	case ResvExclusiveAccessRegOnly:
		return "exclusive-access-registrants-only"
	case ResvWriteExclusiveAllRegs:
		return "write-exclusive-all-registrants"
	case ResvExclusiveAccessAllRegs:
		return "exclusive-access-all-registrants"
	}
	return fmt.Sprintf("reservation type %d", uint8(t))
}

// RESCAP bits (Identify Namespace byte 31, I/O Command Set Independent byte 2).
const (
	RESCAPPTPL                   = 1 << 0 // Persist Through Power Loss supported
	RESCAPWriteExclusive         = 1 << 1
	RESCAPExclusiveAccess        = 1 << 2
	RESCAPWriteExclusiveRegOnly  = 1 << 3
	RESCAPExclusiveAccessRegOnly = 1 << 4
	RESCAPWriteExclusiveAllRegs  = 1 << 5
	RESCAPExclusiveAccessAllRegs = 1 << 6
	RESCAPIEKEY                  = 1 << 7 // Ignore Existing Key as defined in NVMe 1.3 and later
	RESCAPAllTypes               = RESCAPWriteExclusive | RESCAPExclusiveAccess | RESCAPWriteExclusiveRegOnly |
		RESCAPExclusiveAccessRegOnly | RESCAPWriteExclusiveAllRegs | RESCAPExclusiveAccessAllRegs
)

// Reservation Register actions (CDW10 bits 2:0, RREGA).
const (
	ResvRegister   = 0
	ResvUnregister = 1
	ResvReplace    = 2
)

// Change Persist Through Power Loss State (Register CDW10 bits 31:30, CPTPL).
const (
	CPTPLNoChange = 0
	CPTPLClear    = 2 // PTPL state 0: reservations and registrations end with a power loss
	CPTPLSet      = 3 // PTPL state 1: they persist
)

// Reservation Acquire actions (CDW10 bits 2:0, RACQA).
const (
	ResvAcquire         = 0
	ResvPreempt         = 1
	ResvPreemptAndAbort = 2
)

// Reservation Release actions (CDW10 bits 2:0, RRELA).
const (
	ResvRelease = 0
	ResvClear   = 1
)

// ReservationCommand is the command specific part of Reservation Register (0Dh), Acquire
// (11h) and Release (15h): CDW10 bits 2:0 the action (RREGA, RACQA, RRELA), bit 3 IEKEY
// (ignore existing key), bits 15:8 RTYPE (Acquire, Release), bits 31:30 CPTPL (Register).
// Reserved bits are not kept.
type ReservationCommand struct {
	Opcode uint8
	NSID   uint32
	Action uint8
	IEKEY  bool
	RType  ResvType // Acquire and Release
	CPTPL  uint8    // Register
}

// FromCommand decodes the fields of cmd. It does not check the opcode.
func (r *ReservationCommand) FromCommand(cmd *Command) {
	r.Opcode = cmd.Opcode
	r.NSID = cmd.NSID
	r.Action = uint8(cmd.CDW10 & 7)
	r.IEKEY = cmd.CDW10&(1<<3) != 0
	r.RType, r.CPTPL = 0, 0
	switch cmd.Opcode {
	case OpReservationRegister:
		r.CPTPL = uint8(cmd.CDW10 >> 30)
	case OpReservationAcquire, OpReservationRelease:
		r.RType = ResvType(cmd.CDW10 >> 8)
	}
}

// ToCommand sets cmd's opcode, NSID and CDW10; CDW11..15 are zeroed.
func (r *ReservationCommand) ToCommand(cmd *Command) {
	adminCommand(cmd, r.Opcode, r.NSID)
	cmd.CDW10 = uint32(r.Action & 7)
	if r.IEKEY {
		cmd.CDW10 |= 1 << 3
	}
	switch r.Opcode {
	case OpReservationRegister:
		cmd.CDW10 |= uint32(r.CPTPL&3) << 30
	case OpReservationAcquire, OpReservationRelease:
		cmd.CDW10 |= uint32(r.RType) << 8
	}
	cmd.CDW11, cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0, 0, 0
}

// Sizes of the reservation commands' data.
const (
	ResvRegisterDataSize = 16 // CRKEY, NRKEY
	ResvAcquireDataSize  = 16 // CRKEY, PRKEY
	ResvReleaseDataSize  = 8  // CRKEY
)

// ReservationKeys is the data of Reservation Register (bytes 0..7 CRKEY, the current
// reservation key; 8..15 NRKEY, the new one), Acquire (CRKEY; 8..15 PRKEY, the key to
// preempt) and Release (CRKEY only: 8 bytes; the Linux host sends 16 with the second
// key zero). Second is NRKEY or PRKEY.
type ReservationKeys struct {
	Current uint64
	Second  uint64
}

// Marshal encodes k into the first 16 bytes of b (8 when len(b) is 8: Release data).
func (k *ReservationKeys) Marshal(b []byte) {
	le.PutUint64(b[0:], k.Current)
	if len(b) >= 16 {
		le.PutUint64(b[8:], k.Second)
	}
}

// Unmarshal decodes the keys of a command's data: need is the data size of the
// command (ResvRegisterDataSize, ResvAcquireDataSize, ResvReleaseDataSize); bytes past it
// are ignored.
func (k *ReservationKeys) Unmarshal(b []byte, need int) error {
	if need != ResvReleaseDataSize && need != 16 {
		return fmt.Errorf("nvmeproto: reservation data size %d is neither 8 nor 16", need)
	}
	if err := short("reservation data", need, b); err != nil {
		return err
	}
	k.Current, k.Second = le.Uint64(b[0:]), 0
	if need == 16 {
		k.Second = le.Uint64(b[8:])
	}
	return nil
}

// ReservationReportCommand is the command specific part of Reservation Report (0Eh):
// CDW10 NUMD (dwords to transfer, 0's based), CDW11 bit 0 EDS (extended data structure:
// 128-bit host identifiers).
type ReservationReportCommand struct {
	NSID uint32
	NUMD uint32
	EDS  bool
}

// FromCommand decodes the fields of cmd. It does not check the opcode.
func (r *ReservationReportCommand) FromCommand(cmd *Command) {
	r.NSID = cmd.NSID
	r.NUMD = cmd.CDW10
	r.EDS = cmd.CDW11&1 != 0
}

// ToCommand sets cmd's opcode, NSID, CDW10 and CDW11; CDW12..15 are zeroed.
func (r *ReservationReportCommand) ToCommand(cmd *Command) {
	adminCommand(cmd, OpReservationReport, r.NSID)
	cmd.CDW10 = r.NUMD
	cmd.CDW11 = 0
	if r.EDS {
		cmd.CDW11 = 1
	}
	cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0, 0
}

// Length returns the transfer length in bytes, (NUMD+1)*4.
func (r *ReservationReportCommand) Length() uint64 { return (uint64(r.NUMD) + 1) * 4 }

// Reservation Status data structure sizes: the header, then one registered controller
// data structure per registrant (24 bytes, 64-bit host identifier) or, with EDS, the
// extended header and 64-byte entries (128-bit host identifier).
const (
	ResvStatusHeaderSize    = 24
	ResvStatusExtHeaderSize = 64
	ResvRegCtrlSize         = 24
	ResvRegCtrlExtSize      = 64
)

// RCSTS bit: the registrant holds the reservation.
const RCSTSHolder = 1 << 0

// ResvRegisteredController is one registered controller data structure. The basic form
// holds the low 8 bytes of HostID (a 64-bit host identifier); the extended form all 16.
// CNTLID is FFFFh when registrations belong to hosts rather than controllers (the
// dynamic controller model).
type ResvRegisteredController struct {
	CNTLID uint16
	RCSTS  uint8
	HostID [16]byte
	RKey   uint64
}

// ReservationStatus is the Reservation Status data structure (basic or extended):
// header bytes 0..3 GEN (generation, bumped by every Register, Preempt and Clear), 4
// RTYPE, 5..6 REGCTL (number of registered controllers), 9 PTPLS (persist through power
// loss state); then the registered controllers: basic 24-byte entries from byte 24 (0..1
// CNTLID, 2 RCSTS, 8..15 HOSTID, 16..23 RKEY) or extended 64-byte entries from byte 64
// (0..1 CNTLID, 2 RCSTS, 8..15 RKEY, 16..31 HOSTID).
//
// Marshal writes as many entries as fit and REGCTL counts them all, as a controller does
// for a short transfer; Unmarshal decodes the entries present in b, at most REGCTL.
type ReservationStatus struct {
	Gen         uint32
	RType       ResvType
	PTPLS       bool
	RegCtl      uint16 // decode: REGCTL as read; encode: len(Controllers) is written
	Controllers []ResvRegisteredController
}

// ReservationStatusSize returns the size of the data structure with n entries.
func ReservationStatusSize(n int, extended bool) int {
	if extended {
		return ResvStatusExtHeaderSize + n*ResvRegCtrlExtSize
	}
	return ResvStatusHeaderSize + n*ResvRegCtrlSize
}

// Marshal encodes s into b (which may be shorter or longer than the whole structure:
// what does not fit is left out, the rest of b is zeroed).
func (s *ReservationStatus) Marshal(b []byte, extended bool) {
	var full []byte
	n := ReservationStatusSize(len(s.Controllers), extended)
	if len(b) >= n {
		full = b[:n]
		clear(b[n:])
	} else {
		full = make([]byte, n)
	}
	clear(full)
	le.PutUint32(full[0:], s.Gen)
	full[4] = byte(s.RType)
	le.PutUint16(full[5:], uint16(len(s.Controllers)))
	full[9] = b2u8(s.PTPLS)
	for i, c := range s.Controllers {
		if extended {
			e := full[ResvStatusExtHeaderSize+i*ResvRegCtrlExtSize:]
			le.PutUint16(e[0:], c.CNTLID)
			e[2] = c.RCSTS
			le.PutUint64(e[8:], c.RKey)
			copy(e[16:32], c.HostID[:])
		} else {
			e := full[ResvStatusHeaderSize+i*ResvRegCtrlSize:]
			le.PutUint16(e[0:], c.CNTLID)
			e[2] = c.RCSTS
			copy(e[8:16], c.HostID[:8])
			le.PutUint64(e[16:], c.RKey)
		}
	}
	if len(b) < n {
		copy(b, full)
	}
}

// Unmarshal decodes a Reservation Status data structure from b: the header must be
// there; entries are decoded while they fit and REGCTL says there are more.
func (s *ReservationStatus) Unmarshal(b []byte, extended bool) error {
	hdr, size := ResvStatusHeaderSize, ResvRegCtrlSize
	if extended {
		hdr, size = ResvStatusExtHeaderSize, ResvRegCtrlExtSize
	}
	if err := short("Reservation Status data structure", hdr, b); err != nil {
		return err
	}
	s.Gen = le.Uint32(b[0:])
	s.RType = ResvType(b[4])
	s.RegCtl = le.Uint16(b[5:])
	s.PTPLS = b[9]&1 != 0
	s.Controllers = s.Controllers[:0]
	for i := 0; i < int(s.RegCtl) && hdr+(i+1)*size <= len(b); i++ {
		e := b[hdr+i*size:]
		c := ResvRegisteredController{CNTLID: le.Uint16(e[0:]), RCSTS: e[2]}
		if extended {
			c.RKey = le.Uint64(e[8:])
			copy(c.HostID[:], e[16:32])
		} else {
			copy(c.HostID[:8], e[8:16])
			c.RKey = le.Uint64(e[16:])
		}
		s.Controllers = append(s.Controllers, c)
	}
	return nil
}

// Reservation Notification log page types (byte 8).
const (
	ResvLogEmpty               = 0
	ResvLogRegistrationPreempt = 1 // the host's registration was preempted by another host
	ResvLogReservationReleased = 2 // a reservation held on the namespace was released
	ResvLogReservationPreempt  = 3 // a reservation held on the namespace was preempted
)

// ResvNotifyLogSize is the size of the Reservation Notification log page.
const ResvNotifyLogSize = 64

// ResvNotifyLog is the Reservation Notification log page (80h): bytes 0..7 the log page
// count (0 when empty; incremented per notification, skipping 0, and past the ones lost
// to overflow), 8 the type (ResvLog*), 9 the number of further pages available (at most
// 255), 12..15 the NSID.
type ResvNotifyLog struct {
	Count     uint64
	Type      uint8
	Available uint8
	NSID      uint32
}

// Marshal encodes l into the first ResvNotifyLogSize bytes of b.
func (l *ResvNotifyLog) Marshal(b []byte) {
	b = b[:ResvNotifyLogSize]
	clear(b)
	le.PutUint64(b[0:], l.Count)
	b[8] = l.Type
	b[9] = l.Available
	le.PutUint32(b[12:], l.NSID)
}

// Unmarshal decodes the log page from the first ResvNotifyLogSize bytes of b.
func (l *ResvNotifyLog) Unmarshal(b []byte) error {
	if err := short("Reservation Notification log page", ResvNotifyLogSize, b); err != nil {
		return err
	}
	l.Count = le.Uint64(b[0:])
	l.Type = b[8]
	l.Available = b[9]
	l.NSID = le.Uint32(b[12:])
	return nil
}

// Reservation Notification Mask feature (FID 82h, namespace specific) CDW11 / DW0 bits: a
// set bit suppresses that notification on this controller.
const (
	ResvMaskRegPreempted  = 1 << 1 // REGPRE: registration preempted
	ResvMaskResvReleased  = 1 << 2 // RESREL: reservation released
	ResvMaskResvPreempted = 1 << 3 // RESPRE: reservation preempted
	ResvMaskAll           = ResvMaskRegPreempted | ResvMaskResvReleased | ResvMaskResvPreempted
)

// ResvMaskBit returns the mask bit of a notification log page type (0 for others).
func ResvMaskBit(logType uint8) uint32 {
	switch logType {
	case ResvLogRegistrationPreempt:
		return ResvMaskRegPreempted
	case ResvLogReservationReleased:
		return ResvMaskResvReleased
	case ResvLogReservationPreempt:
		return ResvMaskResvPreempted
	}
	return 0
}

// Reservation Persistence feature (FID 83h, namespace specific) CDW11 / DW0 bit 0: PTPL,
// the Persist Through Power Loss state.
const ResvPersistPTPL = 1 << 0

// EventReservationLog tells the host that the Reservation Notification log page has
// entries (I/O command set specific event, information 0).
var EventReservationLog = MakeAsyncEvent(AETypeIOCS, AEIOCSReservationLog, LIDReservationNotify)
