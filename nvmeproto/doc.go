// Package nvmeproto owns the NVMe and NVMe over Fabrics wire formats: submission and
// completion queue entries, status codes, SGL descriptors, Fabrics commands, controller
// properties, Identify data structures, log pages, feature dwords and the nvme-rdma CM
// private data.
//
// Every structure is encoded and decoded explicitly as little-endian bytes at the offsets
// the NVMe Base, NVM Command Set and NVMe over Fabrics specifications give; nothing here
// uses reflection. Decoders of network input return an error for short or malformed input
// and never panic.
//
// The package has three kinds of types:
//
//   - Queue entries and per-command views, used on a target's I/O path: Command (SQE),
//     Completion (CQE), SGLDescriptor, and views that decode one command's dwords in place,
//     without allocating: ConnectCommand, PropertyGetCommand, PropertySetCommand,
//     DisconnectCommand, AuthSendCommand, AuthReceiveCommand, IdentifyCommand,
//     GetLogPageCommand, SetFeaturesCommand, GetFeaturesCommand, RWCommand,
//     DatasetManagementCommand. Each view has FromCommand(*Command) and ToCommand(*Command).
//   - Data structures moved by commands (Identify, log pages, Connect data, feature data),
//     each with a size constant, Marshal(b []byte) into a caller buffer and, where it can
//     arrive from the network, Unmarshal(b []byte) error: ConnectData, IdentifyController,
//     IdentifyNamespace, IdentifyControllerNVM, IdentifyNamespaceIndependent, NSIDList,
//     NSDescriptorList, ControllerList, DiscoveryLogHeader, DiscoveryLogEntry, DiscoveryLog,
//     SupportedLogPages, ErrorInfoEntry, SMARTLog, FirmwareSlotLog, ChangedNSList,
//     CommandEffectsLog, ANALog, Timestamp, HostBehavior, DSMRange, RDMAConnReq,
//     RDMAConnRep, RDMAConnRej, and the DH-HMAC-CHAP messages of in-band authentication
//     (AuthMessageHeader, AuthNegotiate, AuthChallenge, AuthReply, AuthSuccess1,
//     AuthSuccess2, AuthFailure; variable-length ones also have Size()). These may
//     allocate (strings, lists).
//   - Bit-field dwords with accessors and With*/Make* builders: CAP, VS, CC, CSTS, CRTO,
//     NumQueues, Arbitration, PowerManagement, TemperatureThreshold, ErrorRecovery,
//     VolatileWriteCache, AsyncEventConfig, AsyncEvent, Status.
//
// Strings follow the specification: Identify SN/MN/FR and the discovery TRSVCID/TRADDR are
// ASCII padded with spaces; NQN fields are NUL terminated and NUL padded. Encoders
// truncate strings that do not fit; CheckNQN validates an NQN before it is used.
//
// Golden tests pin every field offset (TestReference walks the project's protocol
// reference section by section), and every decoder of network input has a fuzz target
// whose seed corpus is checked in under testdata/fuzz.
//
// The package does no I/O and imports nothing else from gonvmf.
package nvmeproto
