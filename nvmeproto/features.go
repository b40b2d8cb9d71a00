package nvmeproto

import "fmt"

// FID is a feature identifier (Set/Get Features CDW10 bits 7:0).
type FID uint8

// Feature identifiers.
const (
	FIDArbitration          FID = 0x01
	FIDPowerManagement      FID = 0x02
	FIDLBARangeType         FID = 0x03
	FIDTemperatureThreshold FID = 0x04
	FIDErrorRecovery        FID = 0x05
	FIDVolatileWriteCache   FID = 0x06
	FIDNumberOfQueues       FID = 0x07
	FIDInterruptCoalescing  FID = 0x08
	FIDInterruptVectorCfg   FID = 0x09
	FIDWriteAtomicity       FID = 0x0A
	FIDAsyncEventConfig     FID = 0x0B
	FIDAutoPowerStateTrans  FID = 0x0C
	FIDHostMemoryBuffer     FID = 0x0D
	FIDTimestamp            FID = 0x0E
	FIDKeepAliveTimer       FID = 0x0F
	FIDHostThermalMgmt      FID = 0x10
	FIDNonOpPowerState      FID = 0x11
	FIDReadRecoveryLevel    FID = 0x12
	FIDPredictableLatency   FID = 0x13
	FIDPredictableLatWindow FID = 0x14
	FIDLBAStatusAttributes  FID = 0x15
	FIDHostBehaviorSupport  FID = 0x16
	FIDSanitizeConfig       FID = 0x17
	FIDEnduranceGroupEvent  FID = 0x18
	FIDIOCommandSetProfile  FID = 0x19
	FIDSoftwareProgress     FID = 0x80
	FIDHostIdentifier       FID = 0x81
	FIDReservationMask      FID = 0x82
	FIDReservationPersist   FID = 0x83
	FIDNSWriteProtect       FID = 0x84
)

var fidNames = map[FID]string{
	FIDArbitration: "Arbitration", FIDPowerManagement: "Power Management", FIDLBARangeType: "LBA Range Type",
	FIDTemperatureThreshold: "Temperature Threshold", FIDErrorRecovery: "Error Recovery",
	FIDVolatileWriteCache: "Volatile Write Cache", FIDNumberOfQueues: "Number of Queues",
	FIDInterruptCoalescing: "Interrupt Coalescing", FIDInterruptVectorCfg: "Interrupt Vector Configuration",
	FIDWriteAtomicity: "Write Atomicity Normal", FIDAsyncEventConfig: "Asynchronous Event Configuration",
	FIDAutoPowerStateTrans: "Autonomous Power State Transition", FIDHostMemoryBuffer: "Host Memory Buffer",
	FIDTimestamp: "Timestamp", FIDKeepAliveTimer: "Keep Alive Timer", FIDHostThermalMgmt: "Host Controlled Thermal Management",
	FIDNonOpPowerState: "Non-Operational Power State Config", FIDReadRecoveryLevel: "Read Recovery Level Config",
	FIDPredictableLatency: "Predictable Latency Mode Config", FIDPredictableLatWindow: "Predictable Latency Mode Window",
	FIDLBAStatusAttributes: "LBA Status Information Attributes", FIDHostBehaviorSupport: "Host Behavior Support",
	FIDSanitizeConfig: "Sanitize Config", FIDEnduranceGroupEvent: "Endurance Group Event Configuration",
	FIDIOCommandSetProfile: "I/O Command Set Profile", FIDSoftwareProgress: "Software Progress Marker",
	FIDHostIdentifier: "Host Identifier", FIDReservationMask: "Reservation Notification Mask",
	FIDReservationPersist: "Reservation Persistence", FIDNSWriteProtect: "Namespace Write Protection Config",
}

func (f FID) String() string {
	if n, ok := fidNames[f]; ok {
		return n
	}
	return fmt.Sprintf("feature %#02x", uint8(f))
}

// Get Features SEL values (CDW10 bits 10:8).
const (
	SelCurrent      = 0
	SelDefault      = 1
	SelSaved        = 2
	SelSupportedCap = 3 // DW0 returns FeatureCap* bits
)

// Completion DW0 bits of Get Features with SEL = SelSupportedCap.
const (
	FeatureCapSaveable   = 1 << 0
	FeatureCapNSSpecific = 1 << 1
	FeatureCapChangeable = 1 << 2
)

// SetFeaturesCommand is the command specific part of a Set Features SQE (opcode 09h):
// NSID, CDW10 bits 7:0 FID and 31 SV (save), CDW11..13 and 15 feature specific,
// CDW14 bits 6:0 UUID index. Some features carry data (Timestamp, Host Behavior Support,
// Host Identifier, ...), described by the SGL.
type SetFeaturesCommand struct {
	NSID      uint32
	FID       FID
	SV        bool
	CDW11     uint32
	CDW12     uint32
	CDW13     uint32
	CDW15     uint32
	UUIDIndex uint8
}

// FromCommand decodes the Set Features fields of cmd. It does not check the opcode.
func (s *SetFeaturesCommand) FromCommand(cmd *Command) {
	s.NSID = cmd.NSID
	s.FID = FID(cmd.CDW10)
	s.SV = cmd.CDW10&(1<<31) != 0
	s.CDW11, s.CDW12, s.CDW13, s.CDW15 = cmd.CDW11, cmd.CDW12, cmd.CDW13, cmd.CDW15
	s.UUIDIndex = uint8(cmd.CDW14 & 0x7F)
}

// ToCommand sets cmd's opcode, NSID and the Set Features fields.
func (s *SetFeaturesCommand) ToCommand(cmd *Command) {
	adminCommand(cmd, OpSetFeatures, s.NSID)
	cmd.CDW10 = uint32(s.FID)
	if s.SV {
		cmd.CDW10 |= 1 << 31
	}
	cmd.CDW11, cmd.CDW12, cmd.CDW13, cmd.CDW15 = s.CDW11, s.CDW12, s.CDW13, s.CDW15
	cmd.CDW14 = uint32(s.UUIDIndex & 0x7F)
}

// GetFeaturesCommand is the command specific part of a Get Features SQE (opcode 0Ah):
// NSID, CDW10 bits 7:0 FID and 10:8 SEL, CDW11 feature specific, CDW14 bits 6:0 UUID
// index. The current value comes back in DW0 (and data, for some features).
type GetFeaturesCommand struct {
	NSID      uint32
	FID       FID
	SEL       uint8
	CDW11     uint32
	UUIDIndex uint8
}

// FromCommand decodes the Get Features fields of cmd. It does not check the opcode.
func (g *GetFeaturesCommand) FromCommand(cmd *Command) {
	g.NSID = cmd.NSID
	g.FID = FID(cmd.CDW10)
	g.SEL = uint8(bits32(cmd.CDW10, 8, 3))
	g.CDW11 = cmd.CDW11
	g.UUIDIndex = uint8(cmd.CDW14 & 0x7F)
}

// ToCommand sets cmd's opcode, NSID and the Get Features fields; CDW12, 13, 15 are zeroed.
func (g *GetFeaturesCommand) ToCommand(cmd *Command) {
	adminCommand(cmd, OpGetFeatures, g.NSID)
	cmd.CDW10 = uint32(g.FID) | uint32(g.SEL&7)<<8
	cmd.CDW11 = g.CDW11
	cmd.CDW12, cmd.CDW13, cmd.CDW15 = 0, 0, 0
	cmd.CDW14 = uint32(g.UUIDIndex & 0x7F)
}

// NumQueues is the Number of Queues feature (FID 07h) dword: in Set Features CDW11 the
// requested NSQR (bits 15:0) and NCQR (31:16); in the completion DW0 the allocated NSQA
// and NCQA. All counts are 0's based and exclude the admin queue.
type NumQueues uint32

// MakeNumQueues builds the dword from 0's based submission and completion queue counts.
func MakeNumQueues(nsq, ncq uint16) NumQueues { return NumQueues(uint32(nsq) | uint32(ncq)<<16) }

// NSQ returns the submission queue count, 0's based.
func (n NumQueues) NSQ() uint16 { return uint16(n) }

// NCQ returns the completion queue count, 0's based.
func (n NumQueues) NCQ() uint16 { return uint16(n >> 16) }

// Arbitration is the Arbitration feature (FID 01h) dword: bits 2:0 AB (burst, 2^n;
// 7 = no limit), 15:8 LPW, 23:16 MPW, 31:24 HPW (weights, 0's based).
type Arbitration uint32

// MakeArbitration builds the dword.
func MakeArbitration(ab, lpw, mpw, hpw uint8) Arbitration {
	return Arbitration(uint32(ab&7) | uint32(lpw)<<8 | uint32(mpw)<<16 | uint32(hpw)<<24)
}

// AB returns the arbitration burst (bits 2:0).
func (a Arbitration) AB() uint8 { return uint8(a & 7) }

// LPW returns the low priority weight (bits 15:8).
func (a Arbitration) LPW() uint8 { return uint8(a >> 8) }

// MPW returns the medium priority weight (bits 23:16).
func (a Arbitration) MPW() uint8 { return uint8(a >> 16) }

// HPW returns the high priority weight (bits 31:24).
func (a Arbitration) HPW() uint8 { return uint8(a >> 24) }

// PowerManagement is the Power Management feature (FID 02h) dword: bits 4:0 PS (power
// state), 7:5 WH (workload hint).
type PowerManagement uint32

// MakePowerManagement builds the dword.
func MakePowerManagement(ps, wh uint8) PowerManagement {
	return PowerManagement(uint32(ps&0x1F) | uint32(wh&7)<<5)
}

// PS returns the power state (bits 4:0).
func (p PowerManagement) PS() uint8 { return uint8(p & 0x1F) }

// WH returns the workload hint (bits 7:5).
func (p PowerManagement) WH() uint8 { return uint8(p>>5) & 7 }

// TemperatureThreshold is the Temperature Threshold feature (FID 04h) dword: bits 15:0
// TMPTH (kelvins), 19:16 TMPSEL (0 composite, 1..8 sensors, 15 all), 21:20 THSEL
// (0 over, 1 under).
type TemperatureThreshold uint32

// MakeTemperatureThreshold builds the dword.
func MakeTemperatureThreshold(kelvin uint16, sel, thsel uint8) TemperatureThreshold {
	return TemperatureThreshold(uint32(kelvin) | uint32(sel&0xF)<<16 | uint32(thsel&3)<<20)
}

// TMPTH returns the threshold in kelvins (bits 15:0).
func (t TemperatureThreshold) TMPTH() uint16 { return uint16(t) }

// TMPSEL returns the threshold temperature select (bits 19:16).
func (t TemperatureThreshold) TMPSEL() uint8 { return uint8(t>>16) & 0xF }

// THSEL returns the threshold type select (bits 21:20).
func (t TemperatureThreshold) THSEL() uint8 { return uint8(t>>20) & 3 }

// ErrorRecovery is the Error Recovery feature (FID 05h) dword: bits 15:0 TLER (time
// limited error recovery, 100 ms units), bit 16 DULBE (deallocated or unwritten logical
// block error enable).
type ErrorRecovery uint32

// TLER returns the time limited error recovery, 100 ms units (bits 15:0).
func (e ErrorRecovery) TLER() uint16 { return uint16(e) }

// DULBE reports the deallocated or unwritten logical block error enable (bit 16).
func (e ErrorRecovery) DULBE() bool { return e&(1<<16) != 0 }

// VolatileWriteCache is the Volatile Write Cache feature (FID 06h) dword: bit 0 WCE.
type VolatileWriteCache uint32

// VWCEnable is the WCE bit.
const VWCEnable VolatileWriteCache = 1

// WCE reports whether the write cache is enabled.
func (v VolatileWriteCache) WCE() bool { return v&VWCEnable != 0 }

// WriteAtomicity is the Write Atomicity Normal feature (FID 0Ah) dword: bit 0 DN
// (disable normal: only AWUPF applies).
type WriteAtomicity uint32

// DN reports the Disable Normal bit.
func (w WriteAtomicity) DN() bool { return w&1 != 0 }

// AsyncEventConfig is the Asynchronous Event Configuration feature (FID 0Bh) dword:
// bits 7:0 SMART / Health critical warnings (SMARTWarn* bits) and the notice enables below.
type AsyncEventConfig uint32

// Asynchronous Event Configuration notice enable bits (match OAES* in Identify).
const (
	AECNamespaceAttr      AsyncEventConfig = 1 << 8  // namespace attribute notices
	AECFirmwareActivation AsyncEventConfig = 1 << 9  // firmware activation notices
	AECTelemetryLog       AsyncEventConfig = 1 << 10 // telemetry log notices
	AECANAChange          AsyncEventConfig = 1 << 11 // ANA change notices
	AECPredictableLat     AsyncEventConfig = 1 << 12 // predictable latency event aggregate log change
	AECLBAStatus          AsyncEventConfig = 1 << 13 // LBA status information notices
	AECEnduranceGroup     AsyncEventConfig = 1 << 14 // endurance group event aggregate log change
	AECNormalShutdown     AsyncEventConfig = 1 << 15 // normal NVM subsystem shutdown
	AECZoneDescriptor     AsyncEventConfig = 1 << 27 // zone descriptor changed
	AECDiscoveryLogChange AsyncEventConfig = 1 << 31 // discovery log page change
)

// SMART returns the critical warning enables, bits 7:0.
func (a AsyncEventConfig) SMART() uint8 { return uint8(a) }

// Has reports whether every bit of mask is enabled.
func (a AsyncEventConfig) Has(mask AsyncEventConfig) bool { return a&mask == mask }

// HostIdentifier feature (FID 81h): CDW11 bit 0 EXHID selects the 128-bit form. The data
// is the host identifier, 8 or 16 bytes. Over Fabrics the host identifier comes from
// Connect, and a Set Features Host Identifier is a Command Sequence Error.
const (
	HostIDEXHID       = 1 << 0
	HostIDSize        = 8
	HostIDExtendedLen = 16
)

// TimestampSize is the size of the Timestamp feature data.
const TimestampSize = 8

// Timestamp origins (data byte 6 bits 3:1).
const (
	TimestampOriginReset = 0 // counting since the last reset
	TimestampOriginHost  = 1 // set by a host with Set Features
)

// Timestamp is the Timestamp feature (FID 0Eh) data: bytes 0..5 milliseconds since the
// Unix epoch, byte 6 bit 0 Synch (the count may have stopped) and bits 3:1 origin.
type Timestamp struct {
	Millis uint64 // 48 bits
	Synch  bool
	Origin uint8
}

// Marshal encodes t into the first TimestampSize bytes of b.
func (t *Timestamp) Marshal(b []byte) {
	b = b[:TimestampSize]
	for i := 0; i < 6; i++ {
		b[i] = byte(t.Millis >> (8 * i))
	}
	b[6] = b2u8(t.Synch) | (t.Origin&7)<<1
	b[7] = 0
}

// Unmarshal decodes the timestamp from the first TimestampSize bytes of b.
func (t *Timestamp) Unmarshal(b []byte) error {
	if err := short("Timestamp feature data", TimestampSize, b); err != nil {
		return err
	}
	t.Millis = 0
	for i := 0; i < 6; i++ {
		t.Millis |= uint64(b[i]) << (8 * i)
	}
	t.Synch = b[6]&1 != 0
	t.Origin = b[6] >> 1 & 7
	return nil
}

// HostBehaviorSize is the size of the Host Behavior Support feature data.
const HostBehaviorSize = 512

// HostBehaviorEnable is the value of an enabled one-byte field of HostBehavior (ACRE,
// LBAFEE; the kernel's NVME_ENABLE_ACRE): 0 disables, 1 enables, 2..255 are reserved.
const HostBehaviorEnable = 1

// HostBehavior is the Host Behavior Support feature (FID 16h) data: byte 0 ACRE (advanced
// command retry enable), 1 ETDAS (extended telemetry data area 4 supported), 2 LBAFEE
// (extended LBA formats enabled), 3 HDISNS, 4..5 CDFE.
type HostBehavior struct {
	ACRE   uint8
	ETDAS  uint8
	LBAFEE uint8
	HDISNS uint8
	CDFE   uint16
}

// Marshal encodes h into the first HostBehaviorSize bytes of b, zeroing reserved bytes.
func (h *HostBehavior) Marshal(b []byte) {
	b = b[:HostBehaviorSize]
	clear(b)
	b[0], b[1], b[2], b[3] = h.ACRE, h.ETDAS, h.LBAFEE, h.HDISNS
	le.PutUint16(b[4:], h.CDFE)
}

// Unmarshal decodes the data from b. Only the defined 6 bytes are required.
func (h *HostBehavior) Unmarshal(b []byte) error {
	if err := short("Host Behavior Support data", 6, b); err != nil {
		return err
	}
	h.ACRE, h.ETDAS, h.LBAFEE, h.HDISNS = b[0], b[1], b[2], b[3]
	h.CDFE = le.Uint16(b[4:])
	return nil
}

// Keep Alive Timer feature (FID 0Fh): CDW11 is KATO in milliseconds, the same unit as the
// Connect command's KATO.

// RoundKATO rounds a keep alive timeout in milliseconds up to the controller's keep alive
// granularity, KAS in 100 ms units (Identify Controller byte 320). A zero KATO (keep alive
// disabled) or zero KAS is returned unchanged.
func RoundKATO(katoMillis uint32, kas uint16) uint32 {
	if katoMillis == 0 || kas == 0 {
		return katoMillis
	}
	g := uint64(kas) * 100
	r := (uint64(katoMillis) + g - 1) / g * g
	if r > 0xFFFFFFFF {
		return 0xFFFFFFFF / uint32(g) * uint32(g)
	}
	return uint32(r)
}

// AsyncEventType is the type of an asynchronous event (AER completion DW0 bits 2:0).
type AsyncEventType uint8

// Asynchronous event types.
const (
	AETypeError     AsyncEventType = 0 // error status
	AETypeSMART     AsyncEventType = 1 // SMART / health status
	AETypeNotice    AsyncEventType = 2 // notice
	AETypeImmediate AsyncEventType = 3 // immediate
	AETypeIOCS      AsyncEventType = 6 // I/O command set specific status
	AETypeVendor    AsyncEventType = 7 // vendor specific
)

func (t AsyncEventType) String() string {
	switch t {
	case AETypeError:
		return "error"
	case AETypeSMART:
		return "smart"
	case AETypeNotice:
		return "notice"
	case AETypeImmediate:
		return "immediate"
	case AETypeIOCS:
		return "io-command-set"
	case AETypeVendor:
		return "vendor"
	}
	return fmt.Sprintf("event type %d", uint8(t))
}

// Asynchronous event information for AETypeNotice.
const (
	AENNamespaceAttrChanged = 0x00 // log page 04h (Changed Namespace List)
	AENFirmwareActivation   = 0x01 // firmware activation starting (log page 03h)
	AENTelemetryLogChanged  = 0x02 // log page 08h
	AENANAChange            = 0x03 // log page 0Ch
	AENPredictableLatChange = 0x04 // log page 0Bh
	AENLBAStatusAlert       = 0x05 // log page 0Eh
	AENEnduranceGroupChange = 0x06 // log page 0Fh
	AENDiscoveryLogChange   = 0xF0 // log page 70h
)

// Asynchronous event information for AETypeError.
const (
	AEErrInvalidDoorbell        = 0x00
	AEErrInvalidDoorbellValue   = 0x01
	AEErrDiagnosticFailure      = 0x02
	AEErrPersistentInternal     = 0x03
	AEErrTransientInternal      = 0x04
	AEErrFirmwareImageLoadError = 0x05
)

// Asynchronous event information for AETypeSMART.
const (
	AESMARTReliability   = 0x00
	AESMARTTemperature   = 0x01
	AESMARTSpareBelowThr = 0x02
)

// Asynchronous event information for AETypeIOCS.
const (
	AEIOCSReservationLog = 0x00
	AEIOCSSanitizeDone   = 0x01
)

// AsyncEvent is DW0 of an Asynchronous Event Request completion: bits 2:0 event type,
// 15:8 event information, 23:16 the log page to read (with RAE clear) to re-arm the event.
type AsyncEvent uint32

// MakeAsyncEvent builds the completion dword.
func MakeAsyncEvent(t AsyncEventType, info uint8, lid LID) AsyncEvent {
	return AsyncEvent(uint32(t&7) | uint32(info)<<8 | uint32(lid)<<16)
}

// Type returns the event type (bits 2:0).
func (a AsyncEvent) Type() AsyncEventType { return AsyncEventType(a & 7) }

// Info returns the event information (bits 15:8).
func (a AsyncEvent) Info() uint8 { return uint8(a >> 8) }

// LogPage returns the log page associated with the event (bits 23:16).
func (a AsyncEvent) LogPage() LID { return LID(a >> 16) }

func (a AsyncEvent) String() string {
	return fmt.Sprintf("async event{type=%v info=%#02x log=%v}", a.Type(), a.Info(), a.LogPage())
}

// Common asynchronous events.
var (
	// EventNamespaceAttrChanged tells the host to read the Changed Namespace List.
	EventNamespaceAttrChanged = MakeAsyncEvent(AETypeNotice, AENNamespaceAttrChanged, LIDChangedNSList)
	// EventANAChange tells the host to read the ANA log.
	EventANAChange = MakeAsyncEvent(AETypeNotice, AENANAChange, LIDANA)
	// EventDiscoveryLogChange tells a discovery host to read the discovery log again.
	EventDiscoveryLogChange = MakeAsyncEvent(AETypeNotice, AENDiscoveryLogChange, LIDDiscovery)
)
