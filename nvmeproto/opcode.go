package nvmeproto

import "fmt"

// Admin command opcodes.
const (
	OpDeleteIOSQ           uint8 = 0x00
	OpCreateIOSQ           uint8 = 0x01
	OpGetLogPage           uint8 = 0x02
	OpDeleteIOCQ           uint8 = 0x04
	OpCreateIOCQ           uint8 = 0x05
	OpIdentify             uint8 = 0x06
	OpAbort                uint8 = 0x08
	OpSetFeatures          uint8 = 0x09
	OpGetFeatures          uint8 = 0x0A
	OpAsyncEventRequest    uint8 = 0x0C
	OpNamespaceManagement  uint8 = 0x0D
	OpFirmwareCommit       uint8 = 0x10
	OpFirmwareDownload     uint8 = 0x11
	OpDeviceSelfTest       uint8 = 0x14
	OpNamespaceAttachment  uint8 = 0x15
	OpKeepAlive            uint8 = 0x18
	OpDirectiveSend        uint8 = 0x19
	OpDirectiveReceive     uint8 = 0x1A
	OpVirtualizationMgmt   uint8 = 0x1C
	OpNVMeMISend           uint8 = 0x1D
	OpNVMeMIReceive        uint8 = 0x1E
	OpDoorbellBufferConfig uint8 = 0x7C
	OpFabrics              uint8 = 0x7F // Fabrics commands, on admin and I/O queues
	OpFormatNVM            uint8 = 0x80
	OpSecuritySend         uint8 = 0x81
	OpSecurityReceive      uint8 = 0x82
	OpSanitize             uint8 = 0x84
	OpGetLBAStatus         uint8 = 0x86
)

// NVM command set I/O opcodes.
const (
	OpFlush               uint8 = 0x00
	OpWrite               uint8 = 0x01
	OpRead                uint8 = 0x02
	OpWriteUncorrectable  uint8 = 0x04
	OpCompare             uint8 = 0x05
	OpWriteZeroes         uint8 = 0x08
	OpDatasetManagement   uint8 = 0x09
	OpVerify              uint8 = 0x0C
	OpReservationRegister uint8 = 0x0D
	OpReservationReport   uint8 = 0x0E
	OpReservationAcquire  uint8 = 0x11
	OpReservationRelease  uint8 = 0x15
)

// FabricsType is the fctype of a Fabrics command (SQE byte 4).
type FabricsType uint8

// Fabrics command types.
const (
	FabricsPropertySet FabricsType = 0x00
	FabricsConnect     FabricsType = 0x01
	FabricsPropertyGet FabricsType = 0x04
	FabricsAuthSend    FabricsType = 0x05
	FabricsAuthReceive FabricsType = 0x06
	FabricsDisconnect  FabricsType = 0x08
)

func (t FabricsType) String() string {
	switch t {
	case FabricsPropertySet:
		return "Property Set"
	case FabricsConnect:
		return "Connect"
	case FabricsPropertyGet:
		return "Property Get"
	case FabricsAuthSend:
		return "Authentication Send"
	case FabricsAuthReceive:
		return "Authentication Receive"
	case FabricsDisconnect:
		return "Disconnect"
	}
	return fmt.Sprintf("fctype %#02x", uint8(t))
}

var adminOpNames = map[uint8]string{
	OpDeleteIOSQ: "Delete I/O Submission Queue", OpCreateIOSQ: "Create I/O Submission Queue",
	OpGetLogPage: "Get Log Page", OpDeleteIOCQ: "Delete I/O Completion Queue",
	OpCreateIOCQ: "Create I/O Completion Queue", OpIdentify: "Identify", OpAbort: "Abort",
	OpSetFeatures: "Set Features", OpGetFeatures: "Get Features",
	OpAsyncEventRequest: "Asynchronous Event Request", OpNamespaceManagement: "Namespace Management",
	OpFirmwareCommit: "Firmware Commit", OpFirmwareDownload: "Firmware Image Download",
	OpDeviceSelfTest: "Device Self-test", OpNamespaceAttachment: "Namespace Attachment",
	OpKeepAlive: "Keep Alive", OpDirectiveSend: "Directive Send", OpDirectiveReceive: "Directive Receive",
	OpVirtualizationMgmt: "Virtualization Management", OpNVMeMISend: "NVMe-MI Send",
	OpNVMeMIReceive: "NVMe-MI Receive", OpDoorbellBufferConfig: "Doorbell Buffer Config",
	OpFabrics: "Fabrics", OpFormatNVM: "Format NVM", OpSecuritySend: "Security Send",
	OpSecurityReceive: "Security Receive", OpSanitize: "Sanitize", OpGetLBAStatus: "Get LBA Status",
}

var ioOpNames = map[uint8]string{
	OpFlush: "Flush", OpWrite: "Write", OpRead: "Read", OpWriteUncorrectable: "Write Uncorrectable",
	OpCompare: "Compare", OpWriteZeroes: "Write Zeroes", OpDatasetManagement: "Dataset Management",
	OpVerify: "Verify", OpReservationRegister: "Reservation Register",
	OpReservationReport: "Reservation Report", OpReservationAcquire: "Reservation Acquire",
	OpReservationRelease: "Reservation Release", OpFabrics: "Fabrics",
}

// AdminOpName returns the name of an admin opcode, or a hex form if unknown.
func AdminOpName(op uint8) string {
	if n, ok := adminOpNames[op]; ok {
		return n
	}
	return fmt.Sprintf("admin opcode %#02x", op)
}

// IOOpName returns the name of an NVM I/O opcode, or a hex form if unknown.
func IOOpName(op uint8) string {
	if n, ok := ioOpNames[op]; ok {
		return n
	}
	return fmt.Sprintf("I/O opcode %#02x", op)
}
