package rdmacm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
)

// Limits of the fixed-size scatter/gather arrays in work requests. A QP's
// MaxSendSGE/MaxRecvSGE may not exceed them.
const (
	MaxSGE     = 16 // SGEs per SendWR
	MaxRecvSGE = 4  // SGEs per RecvWR
)

// SGE is one scatter/gather element: a range of registered memory. Its
// layout is struct ibv_sge.
type SGE struct {
	Addr   uint64 // virtual address (see Arena.Addr)
	Length uint32 // bytes
	LKey   uint32 // local key of the memory region holding it
}

// Opcode is the operation of a [SendWR]. The values are enum ibv_wr_opcode.
type Opcode uint32

// Send queue operations.
const (
	OpWrite    Opcode = 0 // RDMA WRITE: local SGL -> remote (RemoteAddr, RKey)
	OpWriteImm Opcode = 1 // RDMA WRITE with immediate (consumes a receive at the peer)
	OpSend     Opcode = 2 // SEND: local SGL -> the peer's next receive buffer
	OpSendImm  Opcode = 3 // SEND with immediate
	OpRead     Opcode = 4 // RDMA READ: remote (RemoteAddr, RKey) -> local SGL
	// SEND with Invalidate: a SEND after which the peer's device invalidates the remote
	// key in Imm (one the peer registered for this exchange), so that the peer need not
	// post a local invalidation of its own. Only on devices with
	// [DeviceAttr.MemMgtExtensions].
	OpSendInv Opcode = 9
)

var opcodeNames = [...]string{"WRITE", "WRITE_IMM", "SEND", "SEND_IMM", "READ", 9: "SEND_INV"}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) && opcodeNames[o] != "" {
		return opcodeNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint32(o))
}

// SendFlags modify a [SendWR]. The values are enum ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	// FlagFence waits for earlier RDMA READs on the QP to complete first.
	FlagFence SendFlags = 1 << 0
	// FlagSignaled asks for a completion. Unsignaled requests complete
	// silently, but their send queue slots are freed only when a later
	// signaled request on the same QP completes: signal at least one request
	// per MaxSendWR.
	FlagSignaled SendFlags = 1 << 1
	// FlagSolicited sets the solicited-event bit (wakes a peer that armed its
	// CQ for solicited events only).
	FlagSolicited SendFlags = 1 << 2
	// FlagInline copies the data into the work request at post time; the
	// buffers may be reused as soon as the post returns and need no LKey.
	// Posting sets it by itself for SEND and WRITE requests of at most the
	// QP's MaxInlineData bytes.
	FlagInline SendFlags = 1 << 3
)

// SendWR is a send queue work request. It contains no pointers, so a slice
// of them can be passed to C; its layout is mirrored by gonvmf_send_wr in
// verbs_linux.h.
type SendWR struct {
	ID         uint64    // returned in the completion
	Op         Opcode    // operation
	Flags      SendFlags // FlagSignaled etc.
	RemoteAddr uint64    // OpWrite*/OpRead: remote virtual address
	RKey       uint32    // OpWrite*/OpRead: remote key
	Imm        uint32    // OpSendImm/OpWriteImm: immediate data (host order); OpSendInv: the key to invalidate
	NumSGE     uint32    // entries used in SGL
	_          uint32
	SGL        [MaxSGE]SGE // local buffers
}

// SetSGL sets the scatter/gather list; it panics with more than MaxSGE
// elements.
func (w *SendWR) SetSGL(sges ...SGE) {
	if len(sges) > MaxSGE {
		panic(fmt.Sprintf("rdmacm: %d SGEs in a SendWR, at most %d", len(sges), MaxSGE))
	}
	w.NumSGE = uint32(copy(w.SGL[:], sges))
}

// Length returns the total length of the SGL.
func (w *SendWR) Length() int {
	n := 0
	for i := 0; i < int(w.NumSGE) && i < MaxSGE; i++ {
		n += int(w.SGL[i].Length)
	}
	return n
}

// RecvWR is a receive queue work request (layout: gonvmf_recv_wr).
type RecvWR struct {
	ID     uint64 // returned in the completion
	NumSGE uint32 // entries used in SGL
	_      uint32
	SGL    [MaxRecvSGE]SGE // buffers the incoming SEND is scattered into
}

// SetSGL sets the scatter list; it panics with more than MaxRecvSGE elements.
func (w *RecvWR) SetSGL(sges ...SGE) {
	if len(sges) > MaxRecvSGE {
		panic(fmt.Sprintf("rdmacm: %d SGEs in a RecvWR, at most %d", len(sges), MaxRecvSGE))
	}
	w.NumSGE = uint32(copy(w.SGL[:], sges))
}

// WCStatus is the status of a completion (enum ibv_wc_status).
type WCStatus uint32

// Completion statuses (the common ones; see ibv_poll_cq(3) for all).
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocProtErr     WCStatus = 4
	WCFlushErr       WCStatus = 5 // the QP went to the error state (disconnect, teardown)
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10 // bad rkey/address/permissions at the peer
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12 // transport retries exhausted (peer gone)
	WCRNRRetryExcErr WCStatus = 13 // the peer had no receive posted, RNR retries exhausted
	WCRemAbortErr    WCStatus = 16
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "work request flushed", "memory window bind error", "bad response",
	"local access error", "remote invalid request", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation",
	"remote invalid RD request", "remote aborted", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout", "general error",
	"tag matching error", "tag matching rendezvous incomplete",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint32(s))
}

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
type WCOpcode uint32

// Completion opcodes.
const (
	WCSend       WCOpcode = 0
	WCWrite      WCOpcode = 1
	WCRead       WCOpcode = 2
	WCRecv       WCOpcode = 128
	WCRecvImm    WCOpcode = 129 // a receive consumed by an RDMA WRITE with immediate
	wcRecvMaskOp WCOpcode = 128
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCWrite:
		return "RDMA_WRITE"
	case WCRead:
		return "RDMA_READ"
	case WCRecv:
		return "RECV"
	case WCRecvImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint32(o))
}

// IsRecv reports whether the completion belongs to the receive queue.
func (o WCOpcode) IsRecv() bool { return o&wcRecvMaskOp != 0 }

// WCFlags are completion flags (enum ibv_wc_flags).
type WCFlags uint32

// Completion flags.
const (
	WCWithImm WCFlags = 1 << 1 // ImmBE holds immediate data
	WCWithInv WCFlags = 1 << 3 // the peer invalidated a key
)

// Completion is one work completion. Its layout is struct ibv_wc: [CQ.Poll]
// lets the provider write straight into the caller's slice.
type Completion struct {
	ID        uint64   // the work request's ID
	Status    WCStatus // WCSuccess or the error
	Opcode    WCOpcode // valid only when Status is WCSuccess
	VendorErr uint32   // provider-specific error detail
	ByteLen   uint32   // receives: bytes received
	ImmBE     uint32   // immediate data in network byte order (see Imm), or invalidated rkey
	QPNum     uint32   // local QP the request was posted on (tells QPs sharing a CQ apart)
	SrcQP     uint32   // UD only
	Flags     WCFlags
	PKeyIndex uint16
	SLID      uint16
	SL        uint8
	DLIDBits  uint8
	_         [2]byte
}

// Imm returns the immediate data in host order.
func (c *Completion) Imm() uint32 {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], c.ImmBE)
	return binary.BigEndian.Uint32(b[:])
}

// Err returns nil for a successful completion, or a *WCError.
func (c *Completion) Err() error {
	if c.Status == WCSuccess {
		return nil
	}
	return &WCError{ID: c.ID, QPNum: c.QPNum, Opcode: c.Opcode, Status: c.Status, VendorErr: c.VendorErr}
}

// Access are memory region access rights (enum ibv_access_flags).
type Access uint32

// Access rights. Local write is needed for anything the hardware writes
// into (receives, RDMA READ destinations); remote rights expose the memory to
// the peer's RDMA READ/WRITE through the region's RKey.
const (
	AccessLocalWrite  Access = 1 << 0
	AccessRemoteWrite Access = 1 << 1
	AccessRemoteRead  Access = 1 << 2
)

// EventType is a connection manager event (enum rdma_cm_event_type).
type EventType int

// CM events.
const (
	EventAddrResolved    EventType = 0
	EventAddrError       EventType = 1
	EventRouteResolved   EventType = 2
	EventRouteError      EventType = 3
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventDeviceRemoval   EventType = 11
	EventMulticastJoin   EventType = 12
	EventMulticastError  EventType = 13
	EventAddrChange      EventType = 14
	EventTimewaitExit    EventType = 15
)

var eventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
	"DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE",
	"TIMEWAIT_EXIT",
}

func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// MaxDepth in ConnParam.InitiatorDepth or ResponderResources asks for the
// device's maximum (librdmacm's RDMA_MAX_INIT_DEPTH/RDMA_MAX_RESP_RES); in
// Accept, InitiatorDepth MaxDepth means min(what the peer offered, device
// maximum).
const MaxDepth = 255

// ConnParam are the connection parameters of rdma_connect/rdma_accept, and
// what the peer sent, in events. An NVMe-oF host must offer
// ResponderResources > 0: the target reads the host's data with RDMA READ.
type ConnParam struct {
	// PrivateData: at most 56 bytes in a connect request over RoCE/IB, 196
	// in an accept, 148 in a reject. Received private data may be padded
	// with zeros by the transport.
	PrivateData []byte
	// ResponderResources: RDMA READs the peer may have outstanding at us
	// (our max_dest_rd_atomic). In a CONNECT_REQUEST event it is the
	// peer's initiator depth: what we should grant as ResponderResources.
	ResponderResources uint8
	// InitiatorDepth: RDMA READs we may have outstanding (our
	// max_rd_atomic). In a CONNECT_REQUEST event it is the peer's
	// responder resources: the most we may use as InitiatorDepth (an
	// NVMe-oF target accepts with min(this, Device max_qp_init_rd_atom)).
	InitiatorDepth uint8
	FlowControl    uint8
	RetryCount     uint8 // transport retries (connect only; 7 is the usual choice)
	RNRRetryCount  uint8 // receiver-not-ready retries; 7 = retry forever
	SRQ            uint8 // the peer uses an SRQ (events only)
	QPNum          uint32
}

// RejectConsumerDefined is the CM reject reason (Event.Status of
// EventRejected, RejectError.Reason) when the peer's application rejected
// the connection with rdma_reject (IB_CM_REJ_CONSUMER_DEFINED).
const RejectConsumerDefined = 28

// Event is one connection manager event.
type Event struct {
	Type EventType
	// Status: 0 on success; for *_ERROR and UNREACHABLE a negative errno;
	// for REJECTED the CM reject reason (RejectConsumerDefined: rejected by
	// the peer's application).
	Status int
	// ID is the CM ID the event is for. For CONNECT_REQUEST it is a new ID
	// for the incoming connection: the receiver owns it and must Accept or
	// Reject it and Destroy it when done (also after Reject).
	ID *CMID
	// Listener is the listening ID, for CONNECT_REQUEST.
	Listener *CMID
	// Param holds what the peer sent: private data and parameters of a
	// CONNECT_REQUEST, the accept's private data in ESTABLISHED on the
	// active side, the reject's private data in REJECTED.
	Param ConnParam
}

func (e *Event) String() string {
	return fmt.Sprintf("%v status %d id %v private data %d bytes", e.Type, e.Status, e.ID, len(e.Param.PrivateData))
}

// QPConfig sizes a reliable-connected queue pair.
type QPConfig struct {
	SendCQ *CQ // completions of the send queue; may be shared by many QPs
	RecvCQ *CQ // completions of the receive queue; may be SendCQ
	// MaxSendWR/MaxRecvWR: outstanding work requests per queue.
	MaxSendWR, MaxRecvWR int
	// MaxSendSGE/MaxRecvSGE: SGEs per request, at most MaxSGE/MaxRecvSGE
	// (0 means 1).
	MaxSendSGE, MaxRecvSGE int
	// MaxInlineData: SEND and RDMA WRITE requests of at most this many
	// bytes are posted inline (0: never).
	MaxInlineData int
	// SignalAll makes every send request generate a completion.
	SignalAll bool
	// SRQ, when set, is where the QP's messages find their receive buffers:
	// MaxRecvWR and MaxRecvSGE are then ignored (the SRQ's apply) and the QP
	// has no receive queue of its own.
	SRQ *SRQ
}

// QPCaps are the sizes a QP actually got (at least those requested).
type QPCaps struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInlineData          int
}

// DeviceAttr are a device's limits (struct ibv_device_attr).
type DeviceAttr struct {
	FirmwareVersion  string
	NodeGUID         uint64
	SysImageGUID     uint64
	VendorID         uint32 // 0xffffff for Soft-RoCE
	VendorPartID     uint32
	HWVersion        uint32
	MaxMRSize        uint64
	PageSizeCap      uint64
	MaxQP            int
	MaxQPWR          int    // work requests per queue
	CapFlags         uint32 // enum ibv_device_cap_flags (see the Cap* constants)
	MaxSGE           int    // SGEs per send/recv request
	MaxSGERD         int    // SGEs per RDMA READ
	MaxCQ            int
	MaxCQE           int // entries per CQ
	MaxMR            int
	MaxPD            int
	MaxQPRdAtom      int // RDMA READs a QP can serve for its peer (responder resources)
	MaxQPInitRdAtom  int // RDMA READs a QP can have outstanding (initiator depth)
	MaxSRQ           int
	MaxSRQWR         int
	MaxSRQSGE        int
	LocalCAAckDelay  int
	PhysPortCount    int
	MaxPKeys         int
	AtomicCapability int
}

// Device capability flags (DeviceAttr.CapFlags).
const (
	// CapMemMgtExtensions: the device supports the memory management extensions, among
	// them SEND with Invalidate ([OpSendInv]) and the remote invalidation it asks of the
	// peer.
	CapMemMgtExtensions uint32 = 1 << 21
)

// MemMgtExtensions reports whether the device supports the memory management extensions
// (CapMemMgtExtensions), SEND with Invalidate among them.
func (a *DeviceAttr) MemMgtExtensions() bool { return a.CapFlags&CapMemMgtExtensions != 0 }

// PortState is a port's logical state (enum ibv_port_state).
type PortState int

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortNop:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", int(s))
}

// LinkLayer of a port.
type LinkLayer int

// Link layers (IBV_LINK_LAYER_*).
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "unspecified"
}

// GIDType is the type of a GID table entry.
type GIDType int

// GID types (enum ibv_gid_type).
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCEv1"
	case GIDTypeRoCEv2:
		return "RoCEv2"
	}
	return fmt.Sprintf("GIDType(%d)", int(t))
}

// GIDEntry is a valid entry of a port's GID table.
type GIDEntry struct {
	Index  int
	GID    [16]byte
	Type   GIDType
	Netdev string // RoCE: the network interface the GID belongs to
}

// Addr returns the IP address a RoCE GID stands for (IPv4-mapped GIDs give
// an IPv4 address), or false for IB GIDs and link-local GIDs.
func (g GIDEntry) Addr() (netip.Addr, bool) {
	if g.Type == GIDTypeIB {
		return netip.Addr{}, false
	}
	a := netip.AddrFrom16(g.GID).Unmap()
	if !a.IsValid() || a.IsUnspecified() || a.IsLinkLocalUnicast() {
		return netip.Addr{}, false
	}
	return a, true
}

// PortAttr is a port's state and limits (struct ibv_port_attr), with its
// valid GID table entries.
type PortAttr struct {
	Port        int
	State       PortState
	MaxMTU      int // bytes
	ActiveMTU   int // bytes
	LinkLayer   LinkLayer
	MaxMsgSize  uint32
	GIDTableLen int
	LID         uint16
	ActiveWidth uint8 // raw IBV width code
	ActiveSpeed uint8 // raw IBV speed code
	PhysState   uint8
	GIDs        []GIDEntry
}

// mtuBytes converts enum ibv_mtu (1..5) to bytes.
func mtuBytes(m int) int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// DeviceInfo describes one RDMA device, as listed by [Devices].
type DeviceInfo struct {
	Name  string // e.g. "rxe0", "mlx5_0"
	Attr  DeviceAttr
	Ports []PortAttr
}

// Addrs returns the IP addresses of the device's active ports (from their
// RoCE GIDs), IPv4 first.
func (d *DeviceInfo) Addrs() []netip.Addr {
	var v4, v6 []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, p := range d.Ports {
		if p.State != PortActive {
			continue
		}
		for _, g := range p.GIDs {
			a, ok := g.Addr()
			if !ok || seen[a] {
				continue
			}
			seen[a] = true
			if a.Is4() {
				v4 = append(v4, a)
			} else {
				v6 = append(v6, a)
			}
		}
	}
	return append(v4, v6...)
}

// AsyncEventType is an asynchronous device/QP/CQ event (enum ibv_event_type).
type AsyncEventType int

// Asynchronous events.
const (
	AsyncCQErr            AsyncEventType = 0  // CQ overrun: completions were lost
	AsyncQPFatal          AsyncEventType = 1  // QP moved to the error state
	AsyncQPReqErr         AsyncEventType = 2  // the peer sent an invalid request
	AsyncQPAccessErr      AsyncEventType = 3  // the peer violated access rights
	AsyncCommEst          AsyncEventType = 4  // first packet received on a QP in RTR
	AsyncSQDrained        AsyncEventType = 5  // send queue drained
	AsyncPathMig          AsyncEventType = 6  // path migrated
	AsyncPathMigErr       AsyncEventType = 7  // path migration failed
	AsyncDeviceFatal      AsyncEventType = 8  // the device is dead: close everything on it
	AsyncPortActive       AsyncEventType = 9  // a port became active
	AsyncPortErr          AsyncEventType = 10 // a port went down
	AsyncLIDChange        AsyncEventType = 11
	AsyncPKeyChange       AsyncEventType = 12
	AsyncSMChange         AsyncEventType = 13
	AsyncSRQErr           AsyncEventType = 14
	AsyncSRQLimitReached  AsyncEventType = 15
	AsyncQPLastWQEReached AsyncEventType = 16 // never raised by Soft-RoCE
	AsyncClientReregister AsyncEventType = 17
	AsyncGIDChange        AsyncEventType = 18
	AsyncWQFatal          AsyncEventType = 19
)

var asyncNames = [...]string{
	"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED",
	"PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE",
	"PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED",
	"CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL",
}

func (t AsyncEventType) String() string {
	if t >= 0 && int(t) < len(asyncNames) {
		return asyncNames[t]
	}
	return fmt.Sprintf("AsyncEventType(%d)", int(t))
}

// AsyncEvent is one asynchronous event of a device.
type AsyncEvent struct {
	Type  AsyncEventType
	QPNum uint32 // QP events: the QP's number (0 otherwise)
	CQ    *CQ    // CQ events: the CQ, if it is still open
	Port  int    // port events: the port number
}

func (e AsyncEvent) String() string {
	switch {
	case e.QPNum != 0:
		return fmt.Sprintf("%v qp %d", e.Type, e.QPNum)
	case e.Port != 0:
		return fmt.Sprintf("%v port %d", e.Type, e.Port)
	}
	return e.Type.String()
}

// DialOptions configure [Dial].
type DialOptions struct {
	// Src is the local address to bind (optional: the route decides).
	Src netip.Addr
	// ResolveTimeout bounds address and route resolution each (default 2s).
	ResolveTimeout time.Duration
	// Param: private data (e.g. the NVMe-oF CM REQ), initiator depth,
	// responder resources, retry counts. Zero RetryCount/RNRRetryCount
	// mean 7.
	Param ConnParam
	// CreateQP is called once the route is resolved (id.DeviceName() then
	// names the device) to create the QP on the ID with [CMID.CreateQP] and
	// post initial receives. Required.
	CreateQP func(id *CMID) error
}
