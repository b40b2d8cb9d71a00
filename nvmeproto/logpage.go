package nvmeproto

import "fmt"

// LID is a log page identifier (Get Log Page CDW10 bits 7:0).
type LID uint8

// Log page identifiers.
const (
	LIDSupportedLogPages      LID = 0x00
	LIDErrorInfo              LID = 0x01
	LIDSMART                  LID = 0x02 // SMART / Health Information
	LIDFirmwareSlot           LID = 0x03
	LIDChangedNSList          LID = 0x04 // Changed Namespace List
	LIDCommandEffects         LID = 0x05 // Commands Supported and Effects
	LIDDeviceSelfTest         LID = 0x06
	LIDTelemetryHost          LID = 0x07
	LIDTelemetryController    LID = 0x08
	LIDEnduranceGroupInfo     LID = 0x09
	LIDPredictableLatencySet  LID = 0x0A
	LIDPredictableLatencyAggr LID = 0x0B
	LIDANA                    LID = 0x0C // Asymmetric Namespace Access
	LIDPersistentEvent        LID = 0x0D
	LIDLBAStatus              LID = 0x0E
	LIDEnduranceGroupAggr     LID = 0x0F
	LIDMediaUnitStatus        LID = 0x10
	LIDSupportedCapConfig     LID = 0x11
	LIDFeatureIDsEffects      LID = 0x12 // Feature Identifiers Supported and Effects
	LIDMICommandsEffects      LID = 0x13 // NVMe-MI Commands Supported and Effects
	LIDLockdown               LID = 0x14 // Command and Feature Lockdown
	LIDBootPartition          LID = 0x15
	LIDDiscovery              LID = 0x70
	LIDHostDiscovery          LID = 0x71
	LIDAVEDiscovery           LID = 0x72
	LIDPullModelDDCRequest    LID = 0x73
	LIDReservationNotify      LID = 0x80 // Reservation Notification
	LIDSanitizeStatus         LID = 0x81
	LIDChangedZoneList        LID = 0xBF // zoned namespace command set
)

var lidNames = map[LID]string{
	LIDSupportedLogPages: "Supported Log Pages", LIDErrorInfo: "Error Information", LIDSMART: "SMART / Health Information",
	LIDFirmwareSlot: "Firmware Slot Information", LIDChangedNSList: "Changed Namespace List",
	LIDCommandEffects: "Commands Supported and Effects", LIDDeviceSelfTest: "Device Self-test",
	LIDTelemetryHost: "Telemetry Host-Initiated", LIDTelemetryController: "Telemetry Controller-Initiated",
	LIDEnduranceGroupInfo: "Endurance Group Information", LIDPredictableLatencySet: "Predictable Latency Per NVM Set",
	LIDPredictableLatencyAggr: "Predictable Latency Event Aggregate", LIDANA: "Asymmetric Namespace Access",
	LIDPersistentEvent: "Persistent Event Log", LIDLBAStatus: "LBA Status Information",
	LIDEnduranceGroupAggr: "Endurance Group Event Aggregate", LIDMediaUnitStatus: "Media Unit Status",
	LIDSupportedCapConfig: "Supported Capacity Configuration List", LIDFeatureIDsEffects: "Feature Identifiers Supported and Effects",
	LIDMICommandsEffects: "NVMe-MI Commands Supported and Effects", LIDLockdown: "Command and Feature Lockdown",
	LIDBootPartition: "Boot Partition", LIDDiscovery: "Discovery", LIDHostDiscovery: "Host Discovery",
	LIDAVEDiscovery: "AVE Discovery", LIDPullModelDDCRequest: "Pull Model DDC Request",
	LIDReservationNotify: "Reservation Notification", LIDSanitizeStatus: "Sanitize Status", LIDChangedZoneList: "Changed Zone List",
}

func (l LID) String() string {
	if n, ok := lidNames[l]; ok {
		return n
	}
	return fmt.Sprintf("log page %#02x", uint8(l))
}

// ANA log page LSP bit: return groups only (no NSID lists).
const LSPANARGO = 1 << 0

// GetLogPageCommand is the command specific part of a Get Log Page SQE (opcode 02h):
// NSID, CDW10 bits 7:0 LID, 14:8 LSP, 15 RAE, 31:16 NUMDL; CDW11 bits 15:0 NUMDU,
// 31:16 LSI; CDW12 LPOL; CDW13 LPOU; CDW14 bits 6:0 UUID index, 23 OT, 31:24 CSI.
type GetLogPageCommand struct {
	NSID      uint32
	LID       LID
	LSP       uint8  // log specific parameter (7 bits in NVMe 2.0; 4 bits before)
	RAE       bool   // retain asynchronous event
	NUMD      uint32 // number of dwords to return, 0's based: NUMDU<<16 | NUMDL
	LSI       uint16 // log specific identifier
	Offset    uint64 // log page offset LPOU:LPOL, in bytes (an index if OT)
	UUIDIndex uint8
	OT        bool // offset type: Offset is an index into a list of entries
	CSI       CSI
}

// Length returns the transfer length in bytes: (NUMD+1)*4.
func (g *GetLogPageCommand) Length() uint64 { return (uint64(g.NUMD) + 1) * 4 }

// SetLength sets NUMD for a transfer of n bytes (rounded up to whole dwords; n ≥ 1).
func (g *GetLogPageCommand) SetLength(n uint64) {
	n = min(n, 1<<34) // NUMD 0xFFFFFFFF: 2^34 bytes, the most a command can ask for
	d := max((n+3)/4, 1)
	g.NUMD = uint32(d - 1)
}

// FromCommand decodes the Get Log Page fields of cmd. It does not check the opcode.
func (g *GetLogPageCommand) FromCommand(cmd *Command) {
	g.NSID = cmd.NSID
	g.LID = LID(cmd.CDW10)
	g.LSP = uint8(bits32(cmd.CDW10, 8, 7))
	g.RAE = cmd.CDW10&(1<<15) != 0
	g.NUMD = cmd.CDW10>>16 | (cmd.CDW11&0xFFFF)<<16
	g.LSI = uint16(cmd.CDW11 >> 16)
	g.Offset = uint64(cmd.CDW12) | uint64(cmd.CDW13)<<32
	g.UUIDIndex = uint8(cmd.CDW14 & 0x7F)
	g.OT = cmd.CDW14&(1<<23) != 0
	g.CSI = CSI(cmd.CDW14 >> 24)
}

// ToCommand sets cmd's opcode, NSID and the Get Log Page fields; CDW15 is zeroed.
func (g *GetLogPageCommand) ToCommand(cmd *Command) {
	adminCommand(cmd, OpGetLogPage, g.NSID)
	cmd.CDW10 = uint32(g.LID) | uint32(g.LSP&0x7F)<<8 | g.NUMD<<16
	if g.RAE {
		cmd.CDW10 |= 1 << 15
	}
	cmd.CDW11 = g.NUMD>>16 | uint32(g.LSI)<<16
	cmd.CDW12 = uint32(g.Offset)
	cmd.CDW13 = uint32(g.Offset >> 32)
	cmd.CDW14 = uint32(g.UUIDIndex&0x7F) | uint32(g.CSI)<<24
	if g.OT {
		cmd.CDW14 |= 1 << 23
	}
	cmd.CDW15 = 0
}

// SupportedLogPagesSize is the size of the Supported Log Pages log page.
const SupportedLogPagesSize = 1024

// SupportedLogPages is the Supported Log Pages log page (LID 00h): one dword per LID,
// bit 0 LSUPP (supported), bit 1 IOS (index offset supported), bits 31:16 LIDSP.
type SupportedLogPages [256]uint32

// Supported Log Pages entry bits.
const (
	LogLSUPP = 1 << 0
	LogIOS   = 1 << 1
)

// Set marks lid supported with the given extra bits (LogIOS, LIDSP<<16).
func (s *SupportedLogPages) Set(lid LID, extra uint32) { s[lid] = LogLSUPP | extra }

// Supported reports whether lid is marked supported.
func (s *SupportedLogPages) Supported(lid LID) bool { return s[lid]&LogLSUPP != 0 }

// Marshal encodes the page into the first SupportedLogPagesSize bytes of b.
func (s *SupportedLogPages) Marshal(b []byte) {
	b = b[:SupportedLogPagesSize]
	for i, v := range s {
		le.PutUint32(b[4*i:], v)
	}
}

// Unmarshal decodes the page from the first SupportedLogPagesSize bytes of b.
func (s *SupportedLogPages) Unmarshal(b []byte) error {
	if err := short("Supported Log Pages log", SupportedLogPagesSize, b); err != nil {
		return err
	}
	for i := range s {
		s[i] = le.Uint32(b[4*i:])
	}
	return nil
}

// ErrorInfoEntrySize is the size of one Error Information log entry.
const ErrorInfoEntrySize = 64

// ErrorInfoEntry is one Error Information log entry (LID 01h):
// 0 error count · 8 SQID · 10 CID · 12 status (bits 15:1) and phase tag (bit 0) ·
// 14 parameter error location · 16 LBA · 24 NSID · 28 vendor specific info available ·
// 29 transport type · 32 command specific info · 40 transport type specific info.
type ErrorInfoEntry struct {
	ErrorCount         uint64 // unique, increasing; 0 = entry unused
	SQID               uint16
	CID                uint16
	Status             Status
	PhaseTag           bool
	ParamErrorLocation uint16 // ParamErrorLocation(byte, bit), 0xFFFF if not applicable
	LBA                uint64
	NSID               uint32
	VendorInfoPage     uint8 // log page with vendor specific information, 0 if none
	TrType             TransportType
	CommandSpecific    uint64
	TrTypeSpecific     uint16
}

// ParamErrorLocation builds the parameter error location of the byte (0..63 in the SQE, or
// in the data) and bit (0..7) in error: bits 7:0 byte, 10:8 bit.
func ParamErrorLocation(byteOff, bit int) uint16 { return uint16(byteOff&0xFF | (bit&7)<<8) }

// Marshal encodes e into the first ErrorInfoEntrySize bytes of b, zeroing reserved bytes.
func (e *ErrorInfoEntry) Marshal(b []byte) {
	b = b[:ErrorInfoEntrySize]
	clear(b)
	le.PutUint64(b[0:], e.ErrorCount)
	le.PutUint16(b[8:], e.SQID)
	le.PutUint16(b[10:], e.CID)
	sf := uint16(e.Status) << 1
	if e.PhaseTag {
		sf |= 1
	}
	le.PutUint16(b[12:], sf)
	le.PutUint16(b[14:], e.ParamErrorLocation)
	le.PutUint64(b[16:], e.LBA)
	le.PutUint32(b[24:], e.NSID)
	b[28] = e.VendorInfoPage
	b[29] = byte(e.TrType)
	le.PutUint64(b[32:], e.CommandSpecific)
	le.PutUint16(b[40:], e.TrTypeSpecific)
}

// Unmarshal decodes an entry from the first ErrorInfoEntrySize bytes of b.
func (e *ErrorInfoEntry) Unmarshal(b []byte) error {
	if err := short("Error Information log entry", ErrorInfoEntrySize, b); err != nil {
		return err
	}
	e.ErrorCount = le.Uint64(b[0:])
	e.SQID = le.Uint16(b[8:])
	e.CID = le.Uint16(b[10:])
	sf := le.Uint16(b[12:])
	e.Status, e.PhaseTag = Status(sf>>1), sf&1 != 0
	e.ParamErrorLocation = le.Uint16(b[14:])
	e.LBA = le.Uint64(b[16:])
	e.NSID = le.Uint32(b[24:])
	e.VendorInfoPage = b[28]
	e.TrType = TransportType(b[29])
	e.CommandSpecific = le.Uint64(b[32:])
	e.TrTypeSpecific = le.Uint16(b[40:])
	return nil
}

// SMARTLogSize is the size of the SMART / Health Information log page.
const SMARTLogSize = 512

// SMART critical warning bits (byte 0).
const (
	SMARTWarnSpare       = 1 << 0 // available spare below threshold
	SMARTWarnTemperature = 1 << 1 // temperature outside a threshold
	SMARTWarnReliability = 1 << 2 // reliability degraded by media errors
	SMARTWarnReadOnly    = 1 << 3 // media placed in read only mode
	SMARTWarnVolatileMem = 1 << 4 // volatile memory backup device failed
	SMARTWarnPMR         = 1 << 5 // persistent memory region became read only
)

// SMARTLog is the SMART / Health Information log page (LID 02h, 512 bytes). Counters are
// 128-bit. Temperatures are in kelvins.
type SMARTLog struct {
	CriticalWarning         uint8     // 0
	CompositeTemperature    uint16    // 1
	AvailableSpare          uint8     // 3: percent
	AvailableSpareThreshold uint8     // 4: percent
	PercentageUsed          uint8     // 5
	EnduranceGroupWarning   uint8     // 6: endurance group critical warning summary
	DataUnitsRead           Uint128   // 32: thousands of 512-byte units, rounded up
	DataUnitsWritten        Uint128   // 48
	HostReadCommands        Uint128   // 64
	HostWriteCommands       Uint128   // 80
	ControllerBusyTime      Uint128   // 96: minutes
	PowerCycles             Uint128   // 112
	PowerOnHours            Uint128   // 128
	UnsafeShutdowns         Uint128   // 144
	MediaErrors             Uint128   // 160
	NumErrLogEntries        Uint128   // 176
	WarningTempTime         uint32    // 192: minutes
	CriticalTempTime        uint32    // 196: minutes
	TempSensor              [8]uint16 // 200..215
	TMT1TransitionCount     uint32    // 216
	TMT2TransitionCount     uint32    // 220
	TMT1TotalTime           uint32    // 224
	TMT2TotalTime           uint32    // 228
}

// DataUnits converts a byte count into SMART data units: thousands of 512-byte units,
// rounded up.
func DataUnits(bytes uint64) Uint128 {
	const unit = 512 * 1000
	n := bytes / unit
	if bytes%unit != 0 {
		n++
	}
	return U128(n)
}

// Marshal encodes s into the first SMARTLogSize bytes of b, zeroing reserved bytes.
func (s *SMARTLog) Marshal(b []byte) {
	b = b[:SMARTLogSize]
	clear(b)
	b[0] = s.CriticalWarning
	le.PutUint16(b[1:], s.CompositeTemperature)
	b[3], b[4], b[5], b[6] = s.AvailableSpare, s.AvailableSpareThreshold, s.PercentageUsed, s.EnduranceGroupWarning
	for i, c := range s.counters() {
		putU128(b[32+16*i:], *c)
	}
	le.PutUint32(b[192:], s.WarningTempTime)
	le.PutUint32(b[196:], s.CriticalTempTime)
	for i, t := range s.TempSensor {
		le.PutUint16(b[200+2*i:], t)
	}
	le.PutUint32(b[216:], s.TMT1TransitionCount)
	le.PutUint32(b[220:], s.TMT2TransitionCount)
	le.PutUint32(b[224:], s.TMT1TotalTime)
	le.PutUint32(b[228:], s.TMT2TotalTime)
}

// Unmarshal decodes the page from the first SMARTLogSize bytes of b.
func (s *SMARTLog) Unmarshal(b []byte) error {
	if err := short("SMART / Health log", SMARTLogSize, b); err != nil {
		return err
	}
	s.CriticalWarning = b[0]
	s.CompositeTemperature = le.Uint16(b[1:])
	s.AvailableSpare, s.AvailableSpareThreshold, s.PercentageUsed, s.EnduranceGroupWarning = b[3], b[4], b[5], b[6]
	for i, c := range s.counters() {
		*c = getU128(b[32+16*i:])
	}
	s.WarningTempTime = le.Uint32(b[192:])
	s.CriticalTempTime = le.Uint32(b[196:])
	for i := range s.TempSensor {
		s.TempSensor[i] = le.Uint16(b[200+2*i:])
	}
	s.TMT1TransitionCount = le.Uint32(b[216:])
	s.TMT2TransitionCount = le.Uint32(b[220:])
	s.TMT1TotalTime = le.Uint32(b[224:])
	s.TMT2TotalTime = le.Uint32(b[228:])
	return nil
}

// counters returns the 128-bit counters in wire order (bytes 32, 48, ..., 176).
func (s *SMARTLog) counters() [10]*Uint128 {
	return [10]*Uint128{&s.DataUnitsRead, &s.DataUnitsWritten, &s.HostReadCommands, &s.HostWriteCommands,
		&s.ControllerBusyTime, &s.PowerCycles, &s.PowerOnHours, &s.UnsafeShutdowns, &s.MediaErrors, &s.NumErrLogEntries}
}

// FirmwareSlotLogSize is the size of the Firmware Slot Information log page.
const FirmwareSlotLogSize = 512

// FirmwareSlotLog is the Firmware Slot Information log page (LID 03h): byte 0 AFI
// (bits 2:0 active slot, 6:4 slot activated at the next reset), bytes 8..63 the revisions
// of slots 1..7 (8 ASCII bytes each, space padded; empty = no firmware).
type FirmwareSlotLog struct {
	AFI uint8
	FRS [7]string
}

// ActiveSlot returns AFI bits 2:0.
func (f *FirmwareSlotLog) ActiveSlot() int { return int(f.AFI & 7) }

// NextSlot returns AFI bits 6:4 (0 = no change at the next reset).
func (f *FirmwareSlotLog) NextSlot() int { return int(f.AFI >> 4 & 7) }

// Marshal encodes the page into the first FirmwareSlotLogSize bytes of b. Empty slots are
// written as zeroes.
func (f *FirmwareSlotLog) Marshal(b []byte) {
	b = b[:FirmwareSlotLogSize]
	clear(b)
	b[0] = f.AFI
	for i, r := range f.FRS {
		if r != "" {
			putASCII(b[8+8*i:16+8*i], r)
		}
	}
}

// Unmarshal decodes the page from the first FirmwareSlotLogSize bytes of b.
func (f *FirmwareSlotLog) Unmarshal(b []byte) error {
	if err := short("Firmware Slot Information log", FirmwareSlotLogSize, b); err != nil {
		return err
	}
	f.AFI = b[0]
	for i := range f.FRS {
		f.FRS[i] = getASCII(b[8+8*i : 16+8*i])
	}
	return nil
}

// ChangedNSListSize is the size of the Changed Namespace List log page.
const ChangedNSListSize = 4096

// ChangedNSListOverflow is the single entry reported when more than 1024 namespaces changed.
const ChangedNSListOverflow = 0xFFFFFFFF

// ChangedNSList is the Changed Namespace List log page (LID 04h): up to 1024 NSIDs in
// increasing order, zero padded.
type ChangedNSList []uint32

// Marshal encodes the list into the first ChangedNSListSize bytes of b. More than 1024
// entries are reported as the single entry ChangedNSListOverflow.
func (l ChangedNSList) Marshal(b []byte) {
	if len(l) > MaxNSIDListEntries {
		NSIDList{ChangedNSListOverflow}.Marshal(b)
		return
	}
	NSIDList(l).Marshal(b)
}

// Unmarshal decodes the list from b (up to ChangedNSListSize bytes), stopping at the first
// zero entry. Overflow shows as a single ChangedNSListOverflow entry.
func (l *ChangedNSList) Unmarshal(b []byte) error { return (*NSIDList)(l).Unmarshal(b) }

// CommandEffectsLogSize is the size of the Commands Supported and Effects log page.
const CommandEffectsLogSize = 4096

// Commands Supported and Effects entry bits.
const (
	EffectCSUPP         = 1 << 0 // command supported
	EffectLBCC          = 1 << 1 // logical block content change
	EffectNCC           = 1 << 2 // namespace capability change
	EffectNIC           = 1 << 3 // namespace inventory change
	EffectCCC           = 1 << 4 // controller capability change
	EffectCSEShift      = 16     // bits 18:16: command submission and execution
	EffectCSEPerNS      = 1 << 16
	EffectCSEPerCtrl    = 2 << 16
	EffectUUIDSelection = 1 << 19 // UUID selection supported
)

// CommandEffectsLog is the Commands Supported and Effects log page (LID 05h):
// bytes 0..1023 ACS (admin opcodes), 1024..2047 IOCS (I/O opcodes), one dword each.
type CommandEffectsLog struct {
	ACS  [256]uint32
	IOCS [256]uint32
}

// Marshal encodes the page into the first CommandEffectsLogSize bytes of b.
func (c *CommandEffectsLog) Marshal(b []byte) {
	b = b[:CommandEffectsLogSize]
	clear(b[2048:])
	for i := range c.ACS {
		le.PutUint32(b[4*i:], c.ACS[i])
		le.PutUint32(b[1024+4*i:], c.IOCS[i])
	}
}

// Unmarshal decodes the page from the first CommandEffectsLogSize bytes of b.
func (c *CommandEffectsLog) Unmarshal(b []byte) error {
	if err := short("Commands Supported and Effects log", CommandEffectsLogSize, b); err != nil {
		return err
	}
	for i := range c.ACS {
		c.ACS[i] = le.Uint32(b[4*i:])
		c.IOCS[i] = le.Uint32(b[1024+4*i:])
	}
	return nil
}

// ANAState is the asymmetric access state of an ANA group.
type ANAState uint8

// ANA states.
const (
	ANAOptimized      ANAState = 0x01
	ANANonOptimized   ANAState = 0x02
	ANAInaccessible   ANAState = 0x03
	ANAPersistentLoss ANAState = 0x04
	ANAChange         ANAState = 0x0F
)

func (s ANAState) String() string {
	switch s {
	case ANAOptimized:
		return "optimized"
	case ANANonOptimized:
		return "non-optimized"
	case ANAInaccessible:
		return "inaccessible"
	case ANAPersistentLoss:
		return "persistent-loss"
	case ANAChange:
		return "change"
	}
	return fmt.Sprintf("ANA state %#x", uint8(s))
}

// Sizes of the ANA log page header and group descriptor (without its NSID list).
const (
	ANALogHeaderSize       = 16
	ANAGroupDescriptorSize = 32
)

// ANAGroupDescriptor is one ANA group descriptor: 0 ANAGRPID · 4 NNSIDS · 8 CHGCNT ·
// 16 state (bits 3:0) · 32.. NNSIDS namespace IDs.
type ANAGroupDescriptor struct {
	GroupID     uint32
	ChangeCount uint64
	State       ANAState
	NSIDs       []uint32
}

// ANALog is the Asymmetric Namespace Access log page (LID 0Ch): header 0 CHGCNT ·
// 8 NGRPS, then NGRPS group descriptors.
type ANALog struct {
	ChangeCount uint64
	Groups      []ANAGroupDescriptor
}

// Size returns the encoded size; with rgo (LSP bit 0, "return groups only") the
// descriptors carry no NSID lists.
func (l *ANALog) Size(rgo bool) int {
	n := ANALogHeaderSize
	for i := range l.Groups {
		n += ANAGroupDescriptorSize
		if !rgo {
			n += 4 * len(l.Groups[i].NSIDs)
		}
	}
	return n
}

// Marshal encodes the log into the first Size(rgo) bytes of b and returns that size.
func (l *ANALog) Marshal(b []byte, rgo bool) int {
	n := l.Size(rgo)
	b = b[:n]
	clear(b)
	le.PutUint64(b[0:], l.ChangeCount)
	le.PutUint16(b[8:], uint16(len(l.Groups)))
	off := ANALogHeaderSize
	for i := range l.Groups {
		g := &l.Groups[i]
		le.PutUint32(b[off:], g.GroupID)
		le.PutUint64(b[off+8:], g.ChangeCount)
		b[off+16] = byte(g.State) & 0x0F
		off += ANAGroupDescriptorSize
		if rgo {
			continue
		}
		le.PutUint32(b[off-ANAGroupDescriptorSize+4:], uint32(len(g.NSIDs)))
		for _, id := range g.NSIDs {
			le.PutUint32(b[off:], id)
			off += 4
		}
	}
	return n
}

// Unmarshal decodes an ANA log page from b. It fails if b is too short for the number of
// groups and NSIDs the page claims.
func (l *ANALog) Unmarshal(b []byte) error {
	if err := short("ANA log header", ANALogHeaderSize, b); err != nil {
		return err
	}
	l.ChangeCount = le.Uint64(b[0:])
	ngrps := int(le.Uint16(b[8:]))
	l.Groups = l.Groups[:0]
	off := ANALogHeaderSize
	for i := 0; i < ngrps; i++ {
		if len(b)-off < ANAGroupDescriptorSize {
			return fmt.Errorf("nvmeproto: ANA log: group %d of %d at byte %d: %w", i, ngrps, off,
				&ErrShort{What: "ANA group descriptor", Need: off + ANAGroupDescriptorSize, Got: len(b)})
		}
		g := ANAGroupDescriptor{
			GroupID:     le.Uint32(b[off:]),
			ChangeCount: le.Uint64(b[off+8:]),
			State:       ANAState(b[off+16] & 0x0F),
		}
		nn := uint64(le.Uint32(b[off+4:]))
		off += ANAGroupDescriptorSize
		if nn > uint64(len(b)-off)/4 {
			return fmt.Errorf("nvmeproto: ANA log: group %d claims %d NSIDs but %d bytes remain", i, nn, len(b)-off)
		}
		if nn > 0 {
			g.NSIDs = make([]uint32, nn)
			for j := range g.NSIDs {
				g.NSIDs[j] = le.Uint32(b[off:])
				off += 4
			}
		}
		l.Groups = append(l.Groups, g)
	}
	return nil
}
