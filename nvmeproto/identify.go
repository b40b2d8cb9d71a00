package nvmeproto

import "fmt"

// IdentifySize is the size of every Identify data structure; the per-structure names
// below are the same value.
const IdentifySize = 4096

// Sizes of the Identify data structures (all IdentifySize).
const (
	IdentifyControllerSize           = IdentifySize
	IdentifyNamespaceSize            = IdentifySize
	IdentifyControllerNVMSize        = IdentifySize
	IdentifyNamespaceIndependentSize = IdentifySize
	NSIDListSize                     = IdentifySize
	ActiveNSListSize                 = IdentifySize
	NSDescriptorListSize             = IdentifySize
	ControllerListSize               = IdentifySize
)

// CNS is the Controller or Namespace Structure selector of an Identify command
// (CDW10 bits 7:0).
type CNS uint8

// CNS values.
const (
	CNSNamespace               CNS = 0x00 // Identify Namespace (NVM command set)
	CNSController              CNS = 0x01 // Identify Controller
	CNSActiveNSList            CNS = 0x02 // active namespace ID list
	CNSNSDescriptorList        CNS = 0x03 // namespace identification descriptor list
	CNSNVMSetList              CNS = 0x04 // NVM set list
	CNSCSNamespace             CNS = 0x05 // I/O command set specific Identify Namespace (by CSI)
	CNSCSController            CNS = 0x06 // I/O command set specific Identify Controller (by CSI)
	CNSCSActiveNSList          CNS = 0x07 // active namespace ID list of one I/O command set (by CSI)
	CNSCSIndependentNamespace  CNS = 0x08 // I/O command set independent Identify Namespace
	CNSAllocatedNSList         CNS = 0x10 // allocated namespace ID list
	CNSAllocatedNamespace      CNS = 0x11 // Identify Namespace of an allocated namespace
	CNSNSControllerList        CNS = 0x12 // controllers attached to a namespace
	CNSControllerList          CNS = 0x13 // controllers in the NVM subsystem
	CNSPrimaryControllerCaps   CNS = 0x14 // primary controller capabilities
	CNSSecondaryControllerList CNS = 0x15 // secondary controller list
	CNSNSGranularityList       CNS = 0x16 // namespace granularity list
	CNSUUIDList                CNS = 0x17 // UUID list
	CNSDomainList              CNS = 0x18 // domain list
	CNSEnduranceGroupList      CNS = 0x19 // endurance group list
	CNSCSAllocatedNSList       CNS = 0x1A // allocated namespace ID list of one I/O command set
	CNSCSAllocatedNamespace    CNS = 0x1B // I/O command set specific allocated namespace
	CNSIOCommandSet            CNS = 0x1C // I/O command set data structure
)

var cnsNames = map[CNS]string{
	CNSNamespace: "Identify Namespace", CNSController: "Identify Controller",
	CNSActiveNSList: "Active Namespace ID List", CNSNSDescriptorList: "Namespace Identification Descriptor List",
	CNSNVMSetList: "NVM Set List", CNSCSNamespace: "I/O Command Set Specific Identify Namespace",
	CNSCSController: "I/O Command Set Specific Identify Controller", CNSCSActiveNSList: "I/O Command Set Specific Active Namespace ID List",
	CNSCSIndependentNamespace: "I/O Command Set Independent Identify Namespace", CNSAllocatedNSList: "Allocated Namespace ID List",
	CNSAllocatedNamespace: "Identify Allocated Namespace", CNSNSControllerList: "Namespace Attached Controller List",
	CNSControllerList: "Controller List", CNSPrimaryControllerCaps: "Primary Controller Capabilities",
	CNSSecondaryControllerList: "Secondary Controller List", CNSNSGranularityList: "Namespace Granularity List",
	CNSUUIDList: "UUID List", CNSDomainList: "Domain List", CNSEnduranceGroupList: "Endurance Group List",
	CNSCSAllocatedNSList:    "I/O Command Set Specific Allocated Namespace ID List",
	CNSCSAllocatedNamespace: "I/O Command Set Specific Identify Allocated Namespace", CNSIOCommandSet: "Identify I/O Command Set",
}

func (c CNS) String() string {
	if n, ok := cnsNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CNS %#02x", uint8(c))
}

// CSI is a Command Set Identifier.
type CSI uint8

// Command set identifiers.
const (
	CSINVM CSI = 0x00 // NVM command set
	CSIKV  CSI = 0x01 // key value command set
	CSIZNS CSI = 0x02 // zoned namespace command set
)

func (c CSI) String() string {
	switch c {
	case CSINVM:
		return "NVM"
	case CSIKV:
		return "KV"
	case CSIZNS:
		return "ZNS"
	}
	return fmt.Sprintf("CSI %#02x", uint8(c))
}

// NSIDAll is the broadcast namespace ID.
const NSIDAll = 0xFFFFFFFF

// IdentifyCommand is the command specific part of an Identify SQE (opcode 06h):
// NSID (bytes 4..7), CDW10 bits 7:0 CNS and 31:16 CNTID, CDW11 bits 15:0 CNS specific
// identifier and 31:24 CSI, CDW14 bits 6:0 UUID index.
type IdentifyCommand struct {
	NSID          uint32
	CNS           CNS
	CNTID         uint16 // controller ID, for the controller list CNS values
	CNSSpecificID uint16 // NVM set / endurance group / domain ID, per CNS
	CSI           CSI
	UUIDIndex     uint8
}

// FromCommand decodes the Identify fields of cmd. It does not check the opcode.
func (i *IdentifyCommand) FromCommand(cmd *Command) {
	i.NSID = cmd.NSID
	i.CNS = CNS(cmd.CDW10)
	i.CNTID = uint16(cmd.CDW10 >> 16)
	i.CNSSpecificID = uint16(cmd.CDW11)
	i.CSI = CSI(cmd.CDW11 >> 24)
	i.UUIDIndex = uint8(cmd.CDW14 & 0x7F)
}

// ToCommand sets cmd's opcode, NSID and the Identify fields; CDW12, 13 and 15 are zeroed.
func (i *IdentifyCommand) ToCommand(cmd *Command) {
	adminCommand(cmd, OpIdentify, i.NSID)
	cmd.CDW10 = uint32(i.CNS) | uint32(i.CNTID)<<16
	cmd.CDW11 = uint32(i.CNSSpecificID) | uint32(i.CSI)<<24
	cmd.CDW12, cmd.CDW13, cmd.CDW15 = 0, 0, 0
	cmd.CDW14 = uint32(i.UUIDIndex & 0x7F)
}

// PowerStateDescriptorSize is the size of one power state descriptor in Identify
// Controller (32 of them start at byte 2048).
const PowerStateDescriptorSize = 32

// PowerStateDescriptor is one 32-byte power state descriptor:
// 0 MP, 3 flags (bit 0 MXPS, bit 1 NOPS), 4 ENLAT, 8 EXLAT, 12 RRT, 13 RRL, 14 RWT,
// 15 RWL, 16 IDLP, 18 IPS (bits 7:6), 20 ACTP, 22 APW (bits 2:0) and APS (bits 7:6).
type PowerStateDescriptor struct {
	MaxPower    uint16 // MP, in 0.01 W (or 0.0001 W with MXPS)
	Flags       uint8  // PowerStateMXPS | PowerStateNOPS
	EntryLat    uint32 // ENLAT, microseconds
	ExitLat     uint32 // EXLAT, microseconds
	RRT         uint8  // relative read throughput (bits 4:0)
	RRL         uint8  // relative read latency (bits 4:0)
	RWT         uint8  // relative write throughput (bits 4:0)
	RWL         uint8  // relative write latency (bits 4:0)
	IdlePower   uint16 // IDLP
	IdleScale   uint8  // IPS, byte 18 bits 7:6 (stored unshifted, 0..3)
	ActivePower uint16 // ACTP
	ActiveWork  uint8  // APW, byte 22 bits 2:0
	ActiveScale uint8  // APS, byte 22 bits 7:6 (stored unshifted, 0..3)
}

// Power state descriptor flag bits (byte 3).
const (
	PowerStateMXPS = 1 << 0 // max power scale is 0.0001 W
	PowerStateNOPS = 1 << 1 // non-operational state
)

func (p *PowerStateDescriptor) marshal(b []byte) {
	_ = b[31]
	clear(b[:32])
	le.PutUint16(b[0:], p.MaxPower)
	b[3] = p.Flags
	le.PutUint32(b[4:], p.EntryLat)
	le.PutUint32(b[8:], p.ExitLat)
	b[12], b[13], b[14], b[15] = p.RRT&0x1F, p.RRL&0x1F, p.RWT&0x1F, p.RWL&0x1F
	le.PutUint16(b[16:], p.IdlePower)
	b[18] = (p.IdleScale & 3) << 6
	le.PutUint16(b[20:], p.ActivePower)
	b[22] = p.ActiveWork&7 | (p.ActiveScale&3)<<6
}

func (p *PowerStateDescriptor) unmarshal(b []byte) {
	_ = b[31]
	p.MaxPower = le.Uint16(b[0:])
	p.Flags = b[3]
	p.EntryLat = le.Uint32(b[4:])
	p.ExitLat = le.Uint32(b[8:])
	p.RRT, p.RRL, p.RWT, p.RWL = b[12]&0x1F, b[13]&0x1F, b[14]&0x1F, b[15]&0x1F
	p.IdlePower = le.Uint16(b[16:])
	p.IdleScale = b[18] >> 6
	p.ActivePower = le.Uint16(b[20:])
	p.ActiveWork = b[22] & 7
	p.ActiveScale = b[22] >> 6
}

// Controller types (Identify Controller CNTRLTYPE, byte 111).
const (
	ControllerTypeIO        = 1 // I/O controller
	ControllerTypeDiscovery = 2 // discovery controller
	ControllerTypeAdmin     = 3 // administrative controller
)

// Discovery controller types (Identify Controller DCTYPE, byte 1806).
const (
	DCTypeNotReported = 0
	DCTypeDDC         = 1 // direct discovery controller
	DCTypeCDC         = 2 // central discovery controller
)

// CMIC bits (byte 76).
const (
	CMICMultiPort = 1 << 0 // may contain more than one port
	CMICMultiCtrl = 1 << 1 // may contain two or more controllers
	CMICSRIOV     = 1 << 2 // SR-IOV virtual function
	CMICANA       = 1 << 3 // asymmetric namespace access reporting
)

// ANACAP bits (byte 343): the ANA states the controller reports, and how ANA group IDs
// behave.
const (
	ANACAPOptimized      = 1 << 0 // reports ANA Optimized
	ANACAPNonOptimized   = 1 << 1 // reports ANA Non-Optimized
	ANACAPInaccessible   = 1 << 2 // reports ANA Inaccessible
	ANACAPPersistentLoss = 1 << 3 // reports ANA Persistent Loss
	ANACAPChange         = 1 << 4 // reports ANA Change
	ANACAPGRPIDStatic    = 1 << 6 // a namespace's ANAGRPID does not change while it is attached
	ANACAPGRPIDInNSMgmt  = 1 << 7 // Namespace Management accepts a non-zero ANAGRPID
)

// OAES bits (bytes 92..95): asynchronous events the controller supports.
const (
	OAESNamespaceAttr      = 1 << 8  // namespace attribute notices
	OAESFirmwareActivation = 1 << 9  // firmware activation notices
	OAESANAChange          = 1 << 11 // ANA change notices
	OAESPredictableLatency = 1 << 12 // predictable latency event aggregate log change notices
	OAESLBAStatus          = 1 << 13 // LBA status information notices
	OAESEnduranceGroup     = 1 << 14 // endurance group event aggregate log change notices
	OAESNormalShutdown     = 1 << 15 // normal NVM subsystem shutdown notices
	OAESZoneDescriptor     = 1 << 27 // zone descriptor changed notices
	OAESDiscoveryLogChange = 1 << 31 // discovery log page change notices
)

// CTRATT bits (bytes 96..99).
const (
	CTRATTHostID128         = 1 << 0  // 128-bit host identifier
	CTRATTNOPSPMode         = 1 << 1  // non-operational power state permissive mode
	CTRATTNVMSets           = 1 << 2  // NVM sets
	CTRATTReadRecovery      = 1 << 3  // read recovery levels
	CTRATTEnduranceGroups   = 1 << 4  // endurance groups
	CTRATTPredictableLat    = 1 << 5  // predictable latency mode
	CTRATTTBKAS             = 1 << 6  // traffic based keep alive
	CTRATTNSGranularity     = 1 << 7  // namespace granularity
	CTRATTSQAssociations    = 1 << 8  // SQ associations
	CTRATTUUIDList          = 1 << 9  // UUID list
	CTRATTMultiDomain       = 1 << 10 // multi-domain subsystem
	CTRATTFixedCapacityMgmt = 1 << 11 // fixed capacity management
	CTRATTVariableCapMgmt   = 1 << 12 // variable capacity management
	CTRATTDeleteEG          = 1 << 13 // delete endurance group
	CTRATTDeleteNVMSet      = 1 << 14 // delete NVM set
	CTRATTExtendedLBAFmt    = 1 << 15 // extended LBA formats supported
)

// OACS bits (bytes 256..257): optional admin commands supported.
const (
	OACSSecurity          = 1 << 0
	OACSFormat            = 1 << 1
	OACSFirmware          = 1 << 2
	OACSNSManagement      = 1 << 3
	OACSDeviceSelfTest    = 1 << 4
	OACSDirectives        = 1 << 5
	OACSNVMeMI            = 1 << 6
	OACSVirtualization    = 1 << 7
	OACSDoorbellBufConfig = 1 << 8
	OACSGetLBAStatus      = 1 << 9
	OACSLockdown          = 1 << 10
)

// FRMW bits (byte 260).
const (
	FRMWSlot1ReadOnly   = 1 << 0
	FRMWNumSlotsShift   = 1 // bits 3:1: number of firmware slots
	FRMWNumSlotsMask    = 7
	FRMWActivateNoReset = 1 << 4
)

// LPA bits (byte 261): log page attributes.
const (
	LPASMARTPerNamespace = 1 << 0 // SMART / Health log per namespace
	LPACommandEffects    = 1 << 1 // Commands Supported and Effects log
	LPAExtendedData      = 1 << 2 // extended Get Log Page (NUMDU, LPOL/LPOU)
	LPATelemetry         = 1 << 3 // telemetry host-initiated/controller-initiated logs
	LPAPersistentEvent   = 1 << 4 // persistent event log
	LPAMiscLogPages      = 1 << 5 // supported log pages, features/MI effects logs
	LPATelemetryDA4      = 1 << 6 // telemetry data area 4
)

// SQES / CQES values an NVM controller reports: required (bits 3:0) and maximum (7:4)
// entry sizes as powers of two.
const (
	SQESNVM = 0x66
	CQESNVM = 0x44
)

// ONCS bits (bytes 520..521): optional NVM commands supported.
const (
	ONCSCompare            = 1 << 0
	ONCSWriteUncorrectable = 1 << 1
	ONCSDatasetManagement  = 1 << 2
	ONCSWriteZeroes        = 1 << 3
	ONCSSaveSelect         = 1 << 4 // Save field in Set Features, Select field in Get Features
	ONCSReservations       = 1 << 5
	ONCSTimestamp          = 1 << 6
	ONCSVerify             = 1 << 7
	ONCSCopy               = 1 << 8
)

// FUSES bits (bytes 522..523).
const FUSESCompareAndWrite = 1 << 0

// FNA bits (byte 524).
const (
	FNAFormatAllNS    = 1 << 0
	FNASecureEraseAll = 1 << 1
	FNACryptoErase    = 1 << 2
)

// VWC bits (byte 525).
const (
	VWCPresent = 1 << 0 // a volatile write cache is present
	// Bits 2:1 report flush with NSID FFFFFFFFh: 10b not supported, 11b supported.
	VWCFlushAllNotSupported = 2 << 1
	VWCFlushAllSupported    = 3 << 1
)

// SGLS bits (bytes 536..539).
const (
	SGLSSupported          = 1 << 0  // bits 1:0 = 01b: SGLs supported, no alignment requirement
	SGLSDwordAligned       = 2 << 0  // bits 1:0 = 10b: SGLs supported, dword alignment
	SGLSKeyedDataBlock     = 1 << 2  // keyed SGL data block descriptor (required on RDMA)
	SGLSBitBucket          = 1 << 16 // SGL bit bucket descriptor
	SGLSByteAlignedMeta    = 1 << 17 // byte aligned contiguous metadata buffer
	SGLSOversizedData      = 1 << 18 // SGL longer than the data transfer is allowed
	SGLSMPTRSGL            = 1 << 19 // MPTR may point at an SGL
	SGLSAddressAsOffset    = 1 << 20 // SAOS: address field may be an offset (in-capsule data)
	SGLSTransportDataBlock = 1 << 21 // transport SGL data block descriptor
	SGLSSDTShift           = 8       // bits 15:8: SGL descriptor threshold
)

// FCATT bits (byte 1802).
const FCATTStaticModel = 1 << 0 // static controller model (0 = dynamic)

// OFCS bits (bytes 1804..1805): optional fabrics commands supported.
const OFCSDisconnect = 1 << 0

// IdentifyController is the Identify Controller data structure (CNS 01h, 4096 bytes).
// Field comments give the byte offset. Strings SN, MN and FR are ASCII, space padded;
// SubNQN is NUL padded. Fields newer than a host knows about are ignored by it, so a
// target fills the NVMe 1.4/2.0 fields it implements and leaves the rest zero.
type IdentifyController struct {
	VID       uint16                   // 0: PCI vendor ID
	SSVID     uint16                   // 2: PCI subsystem vendor ID
	SN        string                   // 4..23: serial number
	MN        string                   // 24..63: model number
	FR        string                   // 64..71: firmware revision
	RAB       uint8                    // 72: recommended arbitration burst
	IEEE      [3]byte                  // 73..75: IEEE OUI
	CMIC      uint8                    // 76: multi-path I/O and namespace sharing
	MDTS      uint8                    // 77: maximum data transfer size, 2^n units of CAP.MPSMIN (0 = no limit)
	CNTLID    uint16                   // 78: controller ID
	VER       VS                       // 80: version
	RTD3R     uint32                   // 84: RTD3 resume latency (µs)
	RTD3E     uint32                   // 88: RTD3 entry latency (µs)
	OAES      uint32                   // 92: optional asynchronous events supported
	CTRATT    uint32                   // 96: controller attributes
	RRLS      uint16                   // 100: read recovery levels supported
	CNTRLTYPE uint8                    // 111: controller type
	FGUID     [16]byte                 // 112..127: FRU GUID
	CRDT1     uint16                   // 128: command retry delay time 1 (100 ms units)
	CRDT2     uint16                   // 130
	CRDT3     uint16                   // 132
	NVMSR     uint8                    // 253: NVM subsystem report
	VWCI      uint8                    // 254: VPD write cycle information
	MEC       uint8                    // 255: management endpoint capabilities
	OACS      uint16                   // 256: optional admin command support
	ACL       uint8                    // 258: abort command limit (0's based)
	AERL      uint8                    // 259: asynchronous event request limit (0's based)
	FRMW      uint8                    // 260: firmware updates
	LPA       uint8                    // 261: log page attributes
	ELPE      uint8                    // 262: error log page entries (0's based)
	NPSS      uint8                    // 263: number of power states supported (0's based)
	AVSCC     uint8                    // 264: admin vendor specific command configuration
	APSTA     uint8                    // 265: autonomous power state transition attributes
	WCTEMP    uint16                   // 266: warning composite temperature threshold (K)
	CCTEMP    uint16                   // 268: critical composite temperature threshold (K)
	MTFA      uint16                   // 270: maximum time for firmware activation (100 ms units)
	HMPRE     uint32                   // 272: host memory buffer preferred size
	HMMIN     uint32                   // 276: host memory buffer minimum size
	TNVMCAP   Uint128                  // 280: total NVM capacity (bytes)
	UNVMCAP   Uint128                  // 296: unallocated NVM capacity (bytes)
	RPMBS     uint32                   // 312: replay protected memory block support
	EDSTT     uint16                   // 316: extended device self-test time (minutes)
	DSTO      uint8                    // 318: device self-test options
	FWUG      uint8                    // 319: firmware update granularity
	KAS       uint16                   // 320: keep alive support, granularity in 100 ms units (0 = not supported)
	HCTMA     uint16                   // 322: host controlled thermal management attributes
	MNTMT     uint16                   // 324: minimum thermal management temperature
	MXTMT     uint16                   // 326: maximum thermal management temperature
	SANICAP   uint32                   // 328: sanitize capabilities
	HMMINDS   uint32                   // 332: host memory buffer minimum descriptor entry size
	HMMAXD    uint16                   // 336: host memory maximum descriptors entries
	NSETIDMAX uint16                   // 338: NVM set identifier maximum
	ENDGIDMAX uint16                   // 340: endurance group identifier maximum
	ANATT     uint8                    // 342: ANA transition time (s)
	ANACAP    uint8                    // 343: ANA capabilities
	ANAGRPMAX uint32                   // 344: ANA group identifier maximum
	NANAGRPID uint32                   // 348: number of ANA group identifiers
	PELS      uint32                   // 352: persistent event log size (64 KiB units)
	DomainID  uint16                   // 356: domain identifier
	MEGCAP    Uint128                  // 368: max endurance group capacity
	SQES      uint8                    // 512: SQ entry size (required 3:0, max 7:4), SQESNVM
	CQES      uint8                    // 513: CQ entry size, CQESNVM
	MAXCMD    uint16                   // 514: maximum outstanding commands (fabrics)
	NN        uint32                   // 516: number of namespaces (largest NSID)
	ONCS      uint16                   // 520: optional NVM command support
	FUSES     uint16                   // 522: fused operation support
	FNA       uint8                    // 524: format NVM attributes
	VWC       uint8                    // 525: volatile write cache
	AWUN      uint16                   // 526: atomic write unit normal (0's based, blocks)
	AWUPF     uint16                   // 528: atomic write unit power fail (0's based, blocks)
	NVSCC     uint8                    // 530: I/O command set vendor specific command configuration
	NWPC      uint8                    // 531: namespace write protection capabilities
	ACWU      uint16                   // 532: atomic compare & write unit (0's based)
	OCFS      uint16                   // 534: optional copy formats supported
	SGLS      uint32                   // 536: SGL support
	MNAN      uint32                   // 540: maximum number of allowed namespaces
	MAXDNA    Uint128                  // 544: maximum domain namespace attachments
	MAXCNA    uint32                   // 560: maximum I/O controller namespace attachments
	SubNQN    string                   // 768..1023: NVM subsystem NQN
	IOCCSZ    uint32                   // 1792: I/O queue command capsule supported size, 16-byte units (≥ 4)
	IORCSZ    uint32                   // 1796: I/O queue response capsule supported size, 16-byte units (≥ 1)
	ICDOFF    uint16                   // 1800: in-capsule data offset, 16-byte units (0 on RDMA)
	FCATT     uint8                    // 1802: fabrics controller attributes
	MSDBD     uint8                    // 1803: maximum SGL data block descriptors (0 = no limit)
	OFCS      uint16                   // 1804: optional fabric commands support
	DCTYPE    uint8                    // 1806: discovery controller type
	PSD       [32]PowerStateDescriptor // 2048..3071: power state descriptors 0..31
	VS        [1024]byte               // 3072..4095: vendor specific
}

// Marshal encodes id into the first IdentifySize bytes of b, zeroing reserved bytes.
func (id *IdentifyController) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	le.PutUint16(b[0:], id.VID)
	le.PutUint16(b[2:], id.SSVID)
	putASCII(b[4:24], id.SN)
	putASCII(b[24:64], id.MN)
	putASCII(b[64:72], id.FR)
	b[72] = id.RAB
	copy(b[73:76], id.IEEE[:])
	b[76] = id.CMIC
	b[77] = id.MDTS
	le.PutUint16(b[78:], id.CNTLID)
	le.PutUint32(b[80:], uint32(id.VER))
	le.PutUint32(b[84:], id.RTD3R)
	le.PutUint32(b[88:], id.RTD3E)
	le.PutUint32(b[92:], id.OAES)
	le.PutUint32(b[96:], id.CTRATT)
	le.PutUint16(b[100:], id.RRLS)
	b[111] = id.CNTRLTYPE
	copy(b[112:128], id.FGUID[:])
	le.PutUint16(b[128:], id.CRDT1)
	le.PutUint16(b[130:], id.CRDT2)
	le.PutUint16(b[132:], id.CRDT3)
	b[253], b[254], b[255] = id.NVMSR, id.VWCI, id.MEC
	le.PutUint16(b[256:], id.OACS)
	b[258], b[259], b[260], b[261], b[262], b[263], b[264], b[265] =
		id.ACL, id.AERL, id.FRMW, id.LPA, id.ELPE, id.NPSS, id.AVSCC, id.APSTA
	le.PutUint16(b[266:], id.WCTEMP)
	le.PutUint16(b[268:], id.CCTEMP)
	le.PutUint16(b[270:], id.MTFA)
	le.PutUint32(b[272:], id.HMPRE)
	le.PutUint32(b[276:], id.HMMIN)
	putU128(b[280:], id.TNVMCAP)
	putU128(b[296:], id.UNVMCAP)
	le.PutUint32(b[312:], id.RPMBS)
	le.PutUint16(b[316:], id.EDSTT)
	b[318], b[319] = id.DSTO, id.FWUG
	le.PutUint16(b[320:], id.KAS)
	le.PutUint16(b[322:], id.HCTMA)
	le.PutUint16(b[324:], id.MNTMT)
	le.PutUint16(b[326:], id.MXTMT)
	le.PutUint32(b[328:], id.SANICAP)
	le.PutUint32(b[332:], id.HMMINDS)
	le.PutUint16(b[336:], id.HMMAXD)
	le.PutUint16(b[338:], id.NSETIDMAX)
	le.PutUint16(b[340:], id.ENDGIDMAX)
	b[342], b[343] = id.ANATT, id.ANACAP
	le.PutUint32(b[344:], id.ANAGRPMAX)
	le.PutUint32(b[348:], id.NANAGRPID)
	le.PutUint32(b[352:], id.PELS)
	le.PutUint16(b[356:], id.DomainID)
	putU128(b[368:], id.MEGCAP)
	b[512], b[513] = id.SQES, id.CQES
	le.PutUint16(b[514:], id.MAXCMD)
	le.PutUint32(b[516:], id.NN)
	le.PutUint16(b[520:], id.ONCS)
	le.PutUint16(b[522:], id.FUSES)
	b[524], b[525] = id.FNA, id.VWC
	le.PutUint16(b[526:], id.AWUN)
	le.PutUint16(b[528:], id.AWUPF)
	b[530], b[531] = id.NVSCC, id.NWPC
	le.PutUint16(b[532:], id.ACWU)
	le.PutUint16(b[534:], id.OCFS)
	le.PutUint32(b[536:], id.SGLS)
	le.PutUint32(b[540:], id.MNAN)
	putU128(b[544:], id.MAXDNA)
	le.PutUint32(b[560:], id.MAXCNA)
	putNQN(b[768:1024], id.SubNQN)
	le.PutUint32(b[1792:], id.IOCCSZ)
	le.PutUint32(b[1796:], id.IORCSZ)
	le.PutUint16(b[1800:], id.ICDOFF)
	b[1802], b[1803] = id.FCATT, id.MSDBD
	le.PutUint16(b[1804:], id.OFCS)
	b[1806] = id.DCTYPE
	for i := range id.PSD {
		id.PSD[i].marshal(b[2048+32*i:])
	}
	copy(b[3072:], id.VS[:])
}

// Unmarshal decodes Identify Controller data from the first IdentifySize bytes of b.
// An unterminated SUBNQN is taken whole (256 bytes) rather than rejected, as hosts do.
func (id *IdentifyController) Unmarshal(b []byte) error {
	if err := short("Identify Controller", IdentifySize, b); err != nil {
		return err
	}
	b = b[:IdentifySize]
	id.VID = le.Uint16(b[0:])
	id.SSVID = le.Uint16(b[2:])
	id.SN = getASCII(b[4:24])
	id.MN = getASCII(b[24:64])
	id.FR = getASCII(b[64:72])
	id.RAB = b[72]
	copy(id.IEEE[:], b[73:76])
	id.CMIC = b[76]
	id.MDTS = b[77]
	id.CNTLID = le.Uint16(b[78:])
	id.VER = VS(le.Uint32(b[80:]))
	id.RTD3R = le.Uint32(b[84:])
	id.RTD3E = le.Uint32(b[88:])
	id.OAES = le.Uint32(b[92:])
	id.CTRATT = le.Uint32(b[96:])
	id.RRLS = le.Uint16(b[100:])
	id.CNTRLTYPE = b[111]
	copy(id.FGUID[:], b[112:128])
	id.CRDT1 = le.Uint16(b[128:])
	id.CRDT2 = le.Uint16(b[130:])
	id.CRDT3 = le.Uint16(b[132:])
	id.NVMSR, id.VWCI, id.MEC = b[253], b[254], b[255]
	id.OACS = le.Uint16(b[256:])
	id.ACL, id.AERL, id.FRMW, id.LPA, id.ELPE, id.NPSS, id.AVSCC, id.APSTA =
		b[258], b[259], b[260], b[261], b[262], b[263], b[264], b[265]
	id.WCTEMP = le.Uint16(b[266:])
	id.CCTEMP = le.Uint16(b[268:])
	id.MTFA = le.Uint16(b[270:])
	id.HMPRE = le.Uint32(b[272:])
	id.HMMIN = le.Uint32(b[276:])
	id.TNVMCAP = getU128(b[280:])
	id.UNVMCAP = getU128(b[296:])
	id.RPMBS = le.Uint32(b[312:])
	id.EDSTT = le.Uint16(b[316:])
	id.DSTO, id.FWUG = b[318], b[319]
	id.KAS = le.Uint16(b[320:])
	id.HCTMA = le.Uint16(b[322:])
	id.MNTMT = le.Uint16(b[324:])
	id.MXTMT = le.Uint16(b[326:])
	id.SANICAP = le.Uint32(b[328:])
	id.HMMINDS = le.Uint32(b[332:])
	id.HMMAXD = le.Uint16(b[336:])
	id.NSETIDMAX = le.Uint16(b[338:])
	id.ENDGIDMAX = le.Uint16(b[340:])
	id.ANATT, id.ANACAP = b[342], b[343]
	id.ANAGRPMAX = le.Uint32(b[344:])
	id.NANAGRPID = le.Uint32(b[348:])
	id.PELS = le.Uint32(b[352:])
	id.DomainID = le.Uint16(b[356:])
	id.MEGCAP = getU128(b[368:])
	id.SQES, id.CQES = b[512], b[513]
	id.MAXCMD = le.Uint16(b[514:])
	id.NN = le.Uint32(b[516:])
	id.ONCS = le.Uint16(b[520:])
	id.FUSES = le.Uint16(b[522:])
	id.FNA, id.VWC = b[524], b[525]
	id.AWUN = le.Uint16(b[526:])
	id.AWUPF = le.Uint16(b[528:])
	id.NVSCC, id.NWPC = b[530], b[531]
	id.ACWU = le.Uint16(b[532:])
	id.OCFS = le.Uint16(b[534:])
	id.SGLS = le.Uint32(b[536:])
	id.MNAN = le.Uint32(b[540:])
	id.MAXDNA = getU128(b[544:])
	id.MAXCNA = le.Uint32(b[560:])
	id.SubNQN, _ = getNQN(b[768:1024])
	id.IOCCSZ = le.Uint32(b[1792:])
	id.IORCSZ = le.Uint32(b[1796:])
	id.ICDOFF = le.Uint16(b[1800:])
	id.FCATT, id.MSDBD = b[1802], b[1803]
	id.OFCS = le.Uint16(b[1804:])
	id.DCTYPE = b[1806]
	for i := range id.PSD {
		id.PSD[i].unmarshal(b[2048+32*i:])
	}
	copy(id.VS[:], b[3072:])
	return nil
}

// IdentifyControllerNVM is the NVM command set specific Identify Controller data structure
// (CNS 06h, CSI 00h): byte 0 VSL, 1 WZSL, 2 WUSL, 3 DMRL, 4 DMRSL, 8 DMSL.
type IdentifyControllerNVM struct {
	VSL   uint8  // verify size limit, 2^n units of CAP.MPSMIN (0 = no limit)
	WZSL  uint8  // write zeroes size limit, same units
	WUSL  uint8  // write uncorrectable size limit, same units
	DMRL  uint8  // dataset management ranges limit
	DMRSL uint32 // dataset management range size limit, logical blocks
	DMSL  uint64 // dataset management size limit, logical blocks
}

// Marshal encodes id into the first IdentifySize bytes of b, zeroing the rest.
func (id *IdentifyControllerNVM) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	b[0], b[1], b[2], b[3] = id.VSL, id.WZSL, id.WUSL, id.DMRL
	le.PutUint32(b[4:], id.DMRSL)
	le.PutUint64(b[8:], id.DMSL)
}

// Unmarshal decodes the structure from the first IdentifySize bytes of b.
func (id *IdentifyControllerNVM) Unmarshal(b []byte) error {
	if err := short("Identify Controller (NVM command set)", IdentifySize, b); err != nil {
		return err
	}
	id.VSL, id.WZSL, id.WUSL, id.DMRL = b[0], b[1], b[2], b[3]
	id.DMRSL = le.Uint32(b[4:])
	id.DMSL = le.Uint64(b[8:])
	return nil
}

// MaxControllerListEntries is the number of controller IDs a Controller List holds.
const MaxControllerListEntries = ControllerListSize/2 - 1

// ControllerList is the Controller List of Identify CNS 12h (controllers attached to a
// namespace) and CNS 13h (controllers in the NVM subsystem): bytes 0..1 the number of
// identifiers, then the controller IDs, two bytes each from byte 2, in increasing order;
// the rest of the 4096 bytes zero.
type ControllerList []uint16

// Marshal encodes the list into the first ControllerListSize bytes of b: the first 2047
// IDs (callers pass them sorted), their count, then zeroes.
func (l ControllerList) Marshal(b []byte) {
	b = b[:ControllerListSize]
	clear(b)
	n := min(len(l), MaxControllerListEntries)
	le.PutUint16(b[0:], uint16(n))
	for i, id := range l[:n] {
		le.PutUint16(b[2+2*i:], id)
	}
}

// Unmarshal decodes a list from b, which must hold the count and as many identifiers as
// it gives; a count above 2047 is an error. It reuses l's storage.
func (l *ControllerList) Unmarshal(b []byte) error {
	if err := short("Controller List", 2, b); err != nil {
		return err
	}
	n := int(le.Uint16(b))
	if n > MaxControllerListEntries {
		return &FieldError{Struct: "Controller List", Field: "number of identifiers", Offset: 0,
			Reason: fmt.Sprintf("%d is more than the %d that fit", n, MaxControllerListEntries)}
	}
	if err := short("Controller List", 2+2*n, b); err != nil {
		return err
	}
	out := (*l)[:0]
	for i := range n {
		out = append(out, le.Uint16(b[2+2*i:]))
	}
	*l = out
	return nil
}
