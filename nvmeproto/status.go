package nvmeproto

import "fmt"

// StatusCodeType is the SCT field of a completion status.
type StatusCodeType uint8

// Status code types.
const (
	SCTGeneric         StatusCodeType = 0
	SCTCommandSpecific StatusCodeType = 1
	SCTMediaError      StatusCodeType = 2
	SCTPathRelated     StatusCodeType = 3
	SCTVendor          StatusCodeType = 7
)

func (t StatusCodeType) String() string {
	switch t {
	case SCTGeneric:
		return "generic"
	case SCTCommandSpecific:
		return "command specific"
	case SCTMediaError:
		return "media and data integrity"
	case SCTPathRelated:
		return "path related"
	case SCTVendor:
		return "vendor specific"
	}
	return fmt.Sprintf("sct %d", uint8(t))
}

// Status is the 15-bit status field of a completion queue entry, as it sits in CQE bits
// 31:17 of dword 3 shifted right by one (the phase tag is not part of it):
// bits 7:0 SC, 10:8 SCT, 12:11 CRD, 13 More, 14 DNR.
type Status uint16

// MakeStatus builds a status from a code type and a code.
func MakeStatus(sct StatusCodeType, sc uint8) Status {
	return Status(uint16(sct&7)<<8 | uint16(sc))
}

// SC returns the status code.
func (s Status) SC() uint8 { return uint8(s) }

// SCT returns the status code type.
func (s Status) SCT() StatusCodeType { return StatusCodeType(s>>8) & 7 }

// CRD returns the command retry delay index.
func (s Status) CRD() uint8 { return uint8(s>>11) & 3 }

// More reports whether more status information is in the error log.
func (s Status) More() bool { return s&(1<<13) != 0 }

// DNR reports whether the host should not retry the command.
func (s Status) DNR() bool { return s&(1<<14) != 0 }

// WithDNR returns s with the Do Not Retry bit set.
func (s Status) WithDNR() Status { return s | 1<<14 }

// WithCRD returns s with the Command Retry Delay field set to crd (0..3; higher bits are
// dropped): 0 asks for no delay, 1..3 for the delay Identify Controller CRDT1..CRDT3
// gives. A controller sets it only on a status without DNR, and only while the host has
// enabled ACRE (Host Behavior Support feature); otherwise it is 0.
func (s Status) WithCRD(crd uint8) Status { return s&^(3<<11) | Status(crd&3)<<11 }

// Code returns s without CRD, More and DNR: the (SCT, SC) pair that names the status.
func (s Status) Code() Status { return s & 0x7FF }

// Success reports whether the status is Successful Completion.
func (s Status) Success() bool { return s.Code() == 0 }

// Name returns the specification's name for the (SCT, SC) pair. Command specific codes
// 0x80..0xBF mean different things for different commands; Name gives the Fabrics
// (Connect) meaning there and NameNVM the NVM command set meaning.
func (s Status) Name() string {
	if n, ok := statusNames[s.Code()]; ok {
		return n
	}
	return ""
}

// NameNVM is like Name but prefers the NVM command set meaning of command specific
// codes (for example 0x80 Conflicting Attributes rather than Connect Incompatible Format).
func (s Status) NameNVM() string {
	if n, ok := nvmStatusNames[s.Code()]; ok {
		return n
	}
	return s.Name()
}

func (s Status) String() string {
	n := s.Name()
	if n == "" {
		n = "unknown status"
	}
	str := fmt.Sprintf("%s (sct %#x sc %#02x)", n, uint8(s.SCT()), s.SC())
	if crd := s.CRD(); crd != 0 {
		str += fmt.Sprintf(" crd %d", crd)
	}
	if s.DNR() {
		str += " dnr"
	}
	return str
}

// Generic command status (SCT 0).
var (
	StatusSuccess                     = MakeStatus(SCTGeneric, 0x00)
	StatusInvalidOpcode               = MakeStatus(SCTGeneric, 0x01)
	StatusInvalidField                = MakeStatus(SCTGeneric, 0x02)
	StatusCIDConflict                 = MakeStatus(SCTGeneric, 0x03)
	StatusDataTransferError           = MakeStatus(SCTGeneric, 0x04)
	StatusAbortedPowerLoss            = MakeStatus(SCTGeneric, 0x05)
	StatusInternalError               = MakeStatus(SCTGeneric, 0x06)
	StatusAbortRequested              = MakeStatus(SCTGeneric, 0x07)
	StatusAbortSQDeletion             = MakeStatus(SCTGeneric, 0x08)
	StatusAbortFailedFused            = MakeStatus(SCTGeneric, 0x09)
	StatusAbortMissingFused           = MakeStatus(SCTGeneric, 0x0A)
	StatusInvalidNamespace            = MakeStatus(SCTGeneric, 0x0B)
	StatusCommandSequenceError        = MakeStatus(SCTGeneric, 0x0C)
	StatusInvalidSGLSegmentDescriptor = MakeStatus(SCTGeneric, 0x0D)
	StatusInvalidNumberSGLDescriptors = MakeStatus(SCTGeneric, 0x0E)
	StatusDataSGLLengthInvalid        = MakeStatus(SCTGeneric, 0x0F)
	StatusMetadataSGLLengthInvalid    = MakeStatus(SCTGeneric, 0x10)
	StatusSGLDescriptorTypeInvalid    = MakeStatus(SCTGeneric, 0x11)
	StatusInvalidUseOfCMB             = MakeStatus(SCTGeneric, 0x12)
	StatusPRPOffsetInvalid            = MakeStatus(SCTGeneric, 0x13)
	StatusAtomicWriteUnitExceeded     = MakeStatus(SCTGeneric, 0x14)
	StatusOperationDenied             = MakeStatus(SCTGeneric, 0x15)
	StatusSGLOffsetInvalid            = MakeStatus(SCTGeneric, 0x16)
	StatusHostIDInconsistentFormat    = MakeStatus(SCTGeneric, 0x18)
	StatusKeepAliveExpired            = MakeStatus(SCTGeneric, 0x19)
	StatusKeepAliveInvalid            = MakeStatus(SCTGeneric, 0x1A)
	StatusAbortPreempt                = MakeStatus(SCTGeneric, 0x1B)
	StatusSanitizeFailed              = MakeStatus(SCTGeneric, 0x1C)
	StatusSanitizeInProgress          = MakeStatus(SCTGeneric, 0x1D)
	StatusSGLDataBlockGranularity     = MakeStatus(SCTGeneric, 0x1E)
	StatusCommandNotSupportedCMBQueue = MakeStatus(SCTGeneric, 0x1F)
	StatusNSWriteProtected            = MakeStatus(SCTGeneric, 0x20)
	StatusCommandInterrupted          = MakeStatus(SCTGeneric, 0x21)
	StatusTransientTransportError     = MakeStatus(SCTGeneric, 0x22)
	StatusProhibitedByLockdown        = MakeStatus(SCTGeneric, 0x23)
	StatusAdminCommandMediaNotReady   = MakeStatus(SCTGeneric, 0x24)
	StatusInvalidIOCommandSet         = MakeStatus(SCTGeneric, 0x2C)
	StatusLBAOutOfRange               = MakeStatus(SCTGeneric, 0x80)
	StatusCapacityExceeded            = MakeStatus(SCTGeneric, 0x81)
	StatusNSNotReady                  = MakeStatus(SCTGeneric, 0x82)
	StatusReservationConflict         = MakeStatus(SCTGeneric, 0x83)
	StatusFormatInProgress            = MakeStatus(SCTGeneric, 0x84)
)

// Command specific status (SCT 1).
var (
	StatusCQInvalid              = MakeStatus(SCTCommandSpecific, 0x00)
	StatusInvalidQueueID         = MakeStatus(SCTCommandSpecific, 0x01)
	StatusInvalidQueueSize       = MakeStatus(SCTCommandSpecific, 0x02)
	StatusAbortLimitExceeded     = MakeStatus(SCTCommandSpecific, 0x03)
	StatusAERLimitExceeded       = MakeStatus(SCTCommandSpecific, 0x05)
	StatusInvalidFirmwareSlot    = MakeStatus(SCTCommandSpecific, 0x06)
	StatusInvalidFirmwareImage   = MakeStatus(SCTCommandSpecific, 0x07)
	StatusInvalidInterruptVector = MakeStatus(SCTCommandSpecific, 0x08)
	StatusInvalidLogPage         = MakeStatus(SCTCommandSpecific, 0x09)
	StatusInvalidFormat          = MakeStatus(SCTCommandSpecific, 0x0A)
	StatusFWNeedsConventionalRst = MakeStatus(SCTCommandSpecific, 0x0B)
	StatusInvalidQueueDeletion   = MakeStatus(SCTCommandSpecific, 0x0C)
	StatusFeatureNotSaveable     = MakeStatus(SCTCommandSpecific, 0x0D)
	StatusFeatureNotChangeable   = MakeStatus(SCTCommandSpecific, 0x0E)
	StatusFeatureNotNSSpecific   = MakeStatus(SCTCommandSpecific, 0x0F)
	StatusFWNeedsSubsystemReset  = MakeStatus(SCTCommandSpecific, 0x10)
	StatusFWNeedsControllerReset = MakeStatus(SCTCommandSpecific, 0x11)
	StatusFWNeedsMaxTimeViolat   = MakeStatus(SCTCommandSpecific, 0x12)
	StatusFWActivationProhibited = MakeStatus(SCTCommandSpecific, 0x13)
	StatusOverlappingRange       = MakeStatus(SCTCommandSpecific, 0x14)
	StatusNSInsufficientCapacity = MakeStatus(SCTCommandSpecific, 0x15)
	StatusNSIDUnavailable        = MakeStatus(SCTCommandSpecific, 0x16)
	StatusNSAlreadyAttached      = MakeStatus(SCTCommandSpecific, 0x18)
	StatusNSIsPrivate            = MakeStatus(SCTCommandSpecific, 0x19)
	StatusNSNotAttached          = MakeStatus(SCTCommandSpecific, 0x1A)
	StatusThinProvNotSupported   = MakeStatus(SCTCommandSpecific, 0x1B)
	StatusControllerListInvalid  = MakeStatus(SCTCommandSpecific, 0x1C)
	StatusSelfTestInProgress     = MakeStatus(SCTCommandSpecific, 0x1D)
	StatusBootPartitionWriteProh = MakeStatus(SCTCommandSpecific, 0x1E)
	StatusInvalidControllerID    = MakeStatus(SCTCommandSpecific, 0x1F)
	StatusInvalidSecondaryState  = MakeStatus(SCTCommandSpecific, 0x20)
	StatusInvalidCtrlResources   = MakeStatus(SCTCommandSpecific, 0x21)
	StatusInvalidResourceID      = MakeStatus(SCTCommandSpecific, 0x22)
	StatusSanitizeProhibitedPMR  = MakeStatus(SCTCommandSpecific, 0x23)
	StatusANAGroupIDInvalid      = MakeStatus(SCTCommandSpecific, 0x24)
	StatusANAAttachFailed        = MakeStatus(SCTCommandSpecific, 0x25)
	// Identify I/O Command Set and Set Features I/O Command Set Profile.
	StatusIOCommandSetNotSupported = MakeStatus(SCTCommandSpecific, 0x29)
	StatusIOCommandSetNotEnabled   = MakeStatus(SCTCommandSpecific, 0x2A)
	StatusIOCommandSetCombination  = MakeStatus(SCTCommandSpecific, 0x2B)

	// Fabrics (Connect and discovery) command specific codes.
	StatusConnectIncompatibleFormat = MakeStatus(SCTCommandSpecific, 0x80)
	StatusConnectControllerBusy     = MakeStatus(SCTCommandSpecific, 0x81)
	StatusConnectInvalidParameters  = MakeStatus(SCTCommandSpecific, 0x82)
	StatusConnectRestartDiscovery   = MakeStatus(SCTCommandSpecific, 0x83)
	StatusConnectInvalidHost        = MakeStatus(SCTCommandSpecific, 0x84)
	StatusInvalidQueueType          = MakeStatus(SCTCommandSpecific, 0x85) // e.g. Disconnect on the admin queue
	StatusDiscoveryRestart          = MakeStatus(SCTCommandSpecific, 0x90)
	StatusAuthRequired              = MakeStatus(SCTCommandSpecific, 0x91)

	// NVM command set command specific codes.
	StatusConflictingAttributes = MakeStatus(SCTCommandSpecific, 0x80)
	StatusInvalidProtectionInfo = MakeStatus(SCTCommandSpecific, 0x81)
	StatusWriteToReadOnlyRange  = MakeStatus(SCTCommandSpecific, 0x82)

	// Zoned namespace command set command specific codes.
	StatusZoneBoundaryError     = MakeStatus(SCTCommandSpecific, 0xB8)
	StatusZoneFull              = MakeStatus(SCTCommandSpecific, 0xB9)
	StatusZoneReadOnly          = MakeStatus(SCTCommandSpecific, 0xBA)
	StatusZoneOffline           = MakeStatus(SCTCommandSpecific, 0xBB)
	StatusZoneInvalidWrite      = MakeStatus(SCTCommandSpecific, 0xBC)
	StatusTooManyActiveZones    = MakeStatus(SCTCommandSpecific, 0xBD)
	StatusTooManyOpenZones      = MakeStatus(SCTCommandSpecific, 0xBE)
	StatusInvalidZoneTransition = MakeStatus(SCTCommandSpecific, 0xBF)
)

// Media and data integrity errors (SCT 2).
var (
	StatusWriteFault             = MakeStatus(SCTMediaError, 0x80)
	StatusUnrecoveredReadError   = MakeStatus(SCTMediaError, 0x81)
	StatusGuardCheckError        = MakeStatus(SCTMediaError, 0x82)
	StatusAppTagCheckError       = MakeStatus(SCTMediaError, 0x83)
	StatusRefTagCheckError       = MakeStatus(SCTMediaError, 0x84)
	StatusCompareFailure         = MakeStatus(SCTMediaError, 0x85)
	StatusAccessDenied           = MakeStatus(SCTMediaError, 0x86)
	StatusDeallocatedOrUnwritten = MakeStatus(SCTMediaError, 0x87)
)

// Path related status (SCT 3).
var (
	StatusInternalPathError   = MakeStatus(SCTPathRelated, 0x00)
	StatusANAPersistentLoss   = MakeStatus(SCTPathRelated, 0x01)
	StatusANAInaccessible     = MakeStatus(SCTPathRelated, 0x02)
	StatusANATransition       = MakeStatus(SCTPathRelated, 0x03)
	StatusControllerPathError = MakeStatus(SCTPathRelated, 0x60)
	StatusHostPathError       = MakeStatus(SCTPathRelated, 0x70)
	StatusAbortedByHost       = MakeStatus(SCTPathRelated, 0x71)
)

var statusNames = map[Status]string{
	StatusSuccess:                     "Successful Completion",
	StatusInvalidOpcode:               "Invalid Command Opcode",
	StatusInvalidField:                "Invalid Field in Command",
	StatusCIDConflict:                 "Command ID Conflict",
	StatusDataTransferError:           "Data Transfer Error",
	StatusAbortedPowerLoss:            "Commands Aborted due to Power Loss Notification",
	StatusInternalError:               "Internal Error",
	StatusAbortRequested:              "Command Abort Requested",
	StatusAbortSQDeletion:             "Command Aborted due to SQ Deletion",
	StatusAbortFailedFused:            "Command Aborted due to Failed Fused Command",
	StatusAbortMissingFused:           "Command Aborted due to Missing Fused Command",
	StatusInvalidNamespace:            "Invalid Namespace or Format",
	StatusCommandSequenceError:        "Command Sequence Error",
	StatusInvalidSGLSegmentDescriptor: "Invalid SGL Segment Descriptor",
	StatusInvalidNumberSGLDescriptors: "Invalid Number of SGL Descriptors",
	StatusDataSGLLengthInvalid:        "Data SGL Length Invalid",
	StatusMetadataSGLLengthInvalid:    "Metadata SGL Length Invalid",
	StatusSGLDescriptorTypeInvalid:    "SGL Descriptor Type Invalid",
	StatusInvalidUseOfCMB:             "Invalid Use of Controller Memory Buffer",
	StatusPRPOffsetInvalid:            "PRP Offset Invalid",
	StatusAtomicWriteUnitExceeded:     "Atomic Write Unit Exceeded",
	StatusOperationDenied:             "Operation Denied",
	StatusSGLOffsetInvalid:            "SGL Offset Invalid",
	StatusHostIDInconsistentFormat:    "Host Identifier Inconsistent Format",
	StatusKeepAliveExpired:            "Keep Alive Timer Expired",
	StatusKeepAliveInvalid:            "Keep Alive Timeout Invalid",
	StatusAbortPreempt:                "Command Aborted due to Preempt and Abort",
	StatusSanitizeFailed:              "Sanitize Failed",
	StatusSanitizeInProgress:          "Sanitize In Progress",
	StatusSGLDataBlockGranularity:     "SGL Data Block Granularity Invalid",
	StatusCommandNotSupportedCMBQueue: "Command Not Supported for Queue in CMB",
	StatusNSWriteProtected:            "Namespace is Write Protected",
	StatusCommandInterrupted:          "Command Interrupted",
	StatusTransientTransportError:     "Transient Transport Error",
	StatusProhibitedByLockdown:        "Command Prohibited by Command and Feature Lockdown",
	StatusAdminCommandMediaNotReady:   "Admin Command Media Not Ready",
	StatusIOCommandSetNotSupported:    "I/O Command Set Not Supported",
	StatusIOCommandSetNotEnabled:      "I/O Command Set Not Enabled",
	StatusIOCommandSetCombination:     "I/O Command Set Combination Rejected",
	StatusInvalidIOCommandSet:         "Invalid I/O Command Set",
	StatusLBAOutOfRange:               "LBA Out of Range",
	StatusCapacityExceeded:            "Capacity Exceeded",
	StatusNSNotReady:                  "Namespace Not Ready",
	StatusReservationConflict:         "Reservation Conflict",
	StatusFormatInProgress:            "Format In Progress",

	StatusCQInvalid:              "Completion Queue Invalid",
	StatusInvalidQueueID:         "Invalid Queue Identifier",
	StatusInvalidQueueSize:       "Invalid Queue Size",
	StatusAbortLimitExceeded:     "Abort Command Limit Exceeded",
	StatusAERLimitExceeded:       "Asynchronous Event Request Limit Exceeded",
	StatusInvalidFirmwareSlot:    "Invalid Firmware Slot",
	StatusInvalidFirmwareImage:   "Invalid Firmware Image",
	StatusInvalidInterruptVector: "Invalid Interrupt Vector",
	StatusInvalidLogPage:         "Invalid Log Page",
	StatusInvalidFormat:          "Invalid Format",
	StatusFWNeedsConventionalRst: "Firmware Activation Requires Conventional Reset",
	StatusInvalidQueueDeletion:   "Invalid Queue Deletion",
	StatusFeatureNotSaveable:     "Feature Identifier Not Saveable",
	StatusFeatureNotChangeable:   "Feature Not Changeable",
	StatusFeatureNotNSSpecific:   "Feature Not Namespace Specific",
	StatusFWNeedsSubsystemReset:  "Firmware Activation Requires NVM Subsystem Reset",
	StatusFWNeedsControllerReset: "Firmware Activation Requires Controller Level Reset",
	StatusFWNeedsMaxTimeViolat:   "Firmware Activation Requires Maximum Time Violation",
	StatusFWActivationProhibited: "Firmware Activation Prohibited",
	StatusOverlappingRange:       "Overlapping Range",
	StatusNSInsufficientCapacity: "Namespace Insufficient Capacity",
	StatusNSIDUnavailable:        "Namespace Identifier Unavailable",
	StatusNSAlreadyAttached:      "Namespace Already Attached",
	StatusNSIsPrivate:            "Namespace Is Private",
	StatusNSNotAttached:          "Namespace Not Attached",
	StatusThinProvNotSupported:   "Thin Provisioning Not Supported",
	StatusControllerListInvalid:  "Controller List Invalid",
	StatusSelfTestInProgress:     "Device Self-test In Progress",
	StatusBootPartitionWriteProh: "Boot Partition Write Prohibited",
	StatusInvalidControllerID:    "Invalid Controller Identifier",
	StatusInvalidSecondaryState:  "Invalid Secondary Controller State",
	StatusInvalidCtrlResources:   "Invalid Number of Controller Resources",
	StatusInvalidResourceID:      "Invalid Resource Identifier",
	StatusSanitizeProhibitedPMR:  "Sanitize Prohibited While Persistent Memory Region is Enabled",
	StatusANAGroupIDInvalid:      "ANA Group Identifier Invalid",
	StatusANAAttachFailed:        "ANA Attach Failed",

	StatusZoneBoundaryError:     "Zone Boundary Error",
	StatusZoneFull:              "Zone Is Full",
	StatusZoneReadOnly:          "Zone Is Read Only",
	StatusZoneOffline:           "Zone Is Offline",
	StatusZoneInvalidWrite:      "Zone Invalid Write",
	StatusTooManyActiveZones:    "Too Many Active Zones",
	StatusTooManyOpenZones:      "Too Many Open Zones",
	StatusInvalidZoneTransition: "Invalid Zone State Transition",

	StatusConnectIncompatibleFormat: "Connect Incompatible Format",
	StatusConnectControllerBusy:     "Connect Controller Busy",
	StatusConnectInvalidParameters:  "Connect Invalid Parameters",
	StatusConnectRestartDiscovery:   "Connect Restart Discovery",
	StatusConnectInvalidHost:        "Connect Invalid Host",
	StatusInvalidQueueType:          "Invalid Queue Type",
	StatusDiscoveryRestart:          "Discovery Restart",
	StatusAuthRequired:              "Authentication Required",

	StatusWriteFault:             "Write Fault",
	StatusUnrecoveredReadError:   "Unrecovered Read Error",
	StatusGuardCheckError:        "End-to-end Guard Check Error",
	StatusAppTagCheckError:       "End-to-end Application Tag Check Error",
	StatusRefTagCheckError:       "End-to-end Reference Tag Check Error",
	StatusCompareFailure:         "Compare Failure",
	StatusAccessDenied:           "Access Denied",
	StatusDeallocatedOrUnwritten: "Deallocated or Unwritten Logical Block",

	StatusInternalPathError:   "Internal Path Error",
	StatusANAPersistentLoss:   "Asymmetric Access Persistent Loss",
	StatusANAInaccessible:     "Asymmetric Access Inaccessible",
	StatusANATransition:       "Asymmetric Access Transition",
	StatusControllerPathError: "Controller Pathing Error",
	StatusHostPathError:       "Host Pathing Error",
	StatusAbortedByHost:       "Command Aborted By Host",
}

var nvmStatusNames = map[Status]string{
	StatusConflictingAttributes: "Conflicting Attributes",
	StatusInvalidProtectionInfo: "Invalid Protection Information",
	StatusWriteToReadOnlyRange:  "Attempted Write to Read Only Range",
}
