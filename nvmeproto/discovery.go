package nvmeproto

import "fmt"

// Discovery log page (LID 70h): a 1024-byte header followed by NUMREC 1024-byte entries.
const (
	DiscoveryLogHeaderSize = 1024
	DiscoveryLogEntrySize  = 1024
	// TSASSize is the size of the transport specific address subtype of an entry.
	TSASSize = 256
	// TrSvcIDSize and TrAddrSize are the sizes of the TRSVCID and TRADDR fields.
	TrSvcIDSize = 32
	TrAddrSize  = 256
)

// DiscoveryLogSize returns the size in bytes of a discovery log with n entries.
func DiscoveryLogSize(n int) int { return DiscoveryLogHeaderSize + n*DiscoveryLogEntrySize }

// DiscoveryLogHeader is the header of the discovery log page:
// 0 GENCTR · 8 NUMREC · 16 RECFMT · 18..1023 reserved.
type DiscoveryLogHeader struct {
	GenCtr uint64 // generation counter, changes whenever the log changes
	NumRec uint64 // number of entries
	RecFmt uint16 // record format, 0
}

// Marshal encodes h into the first DiscoveryLogHeaderSize bytes of b, zeroing reserved bytes.
func (h *DiscoveryLogHeader) Marshal(b []byte) {
	b = b[:DiscoveryLogHeaderSize]
	clear(b)
	le.PutUint64(b[0:], h.GenCtr)
	le.PutUint64(b[8:], h.NumRec)
	le.PutUint16(b[16:], h.RecFmt)
}

// Unmarshal decodes the header from the first bytes of b. Only the 18 defined bytes are
// required, so a host that read a truncated header can still decode it.
func (h *DiscoveryLogHeader) Unmarshal(b []byte) error {
	if err := short("discovery log header", 18, b); err != nil {
		return err
	}
	h.GenCtr = le.Uint64(b[0:])
	h.NumRec = le.Uint64(b[8:])
	h.RecFmt = le.Uint16(b[16:])
	return nil
}

// TransportType is the TRTYPE of a discovery log entry.
type TransportType uint8

// Transport types.
const (
	TrTypeRDMA      TransportType = 1
	TrTypeFC        TransportType = 2
	TrTypeTCP       TransportType = 3
	TrTypeIntraHost TransportType = 254 // loopback
)

func (t TransportType) String() string {
	switch t {
	case TrTypeRDMA:
		return "rdma"
	case TrTypeFC:
		return "fc"
	case TrTypeTCP:
		return "tcp"
	case TrTypeIntraHost:
		return "loop"
	}
	return fmt.Sprintf("trtype %d", uint8(t))
}

// AddressFamily is the ADRFAM of a discovery log entry.
type AddressFamily uint8

// Address families.
const (
	AdrFamPCI       AddressFamily = 0
	AdrFamIPv4      AddressFamily = 1
	AdrFamIPv6      AddressFamily = 2
	AdrFamIB        AddressFamily = 3
	AdrFamFC        AddressFamily = 4
	AdrFamIntraHost AddressFamily = 254
)

func (a AddressFamily) String() string {
	switch a {
	case AdrFamPCI:
		return "pci"
	case AdrFamIPv4:
		return "ipv4"
	case AdrFamIPv6:
		return "ipv6"
	case AdrFamIB:
		return "ib"
	case AdrFamFC:
		return "fc"
	case AdrFamIntraHost:
		return "loop"
	}
	return fmt.Sprintf("adrfam %d", uint8(a))
}

// SubsystemType is the SUBTYPE of a discovery log entry.
type SubsystemType uint8

// Subsystem types.
const (
	SubTypeReferral         SubsystemType = 1 // another discovery subsystem
	SubTypeNVMe             SubsystemType = 2 // an NVM subsystem with I/O controllers
	SubTypeCurrentDiscovery SubsystemType = 3 // the discovery subsystem reporting the log
)

func (s SubsystemType) String() string {
	switch s {
	case SubTypeReferral:
		return "discovery referral"
	case SubTypeNVMe:
		return "nvme subsystem"
	case SubTypeCurrentDiscovery:
		return "current discovery subsystem"
	}
	return fmt.Sprintf("subtype %d", uint8(s))
}

// TREQ (transport requirements) values: bits 1:0 secure channel, bit 2 SQ flow control.
const (
	TReqSecureChannelNotSpecified = 0
	TReqSecureChannelRequired     = 1
	TReqSecureChannelNotRequired  = 2
	TReqSecureChannelMask         = 3
	TReqDisableSQFlow             = 1 << 2 // the controller supports disabling SQ flow control
)

// EFLAGS (entry flags) bits.
const (
	EFlagDupRetInfo = 1 << 0 // duplicate returned information
	EFlagEPCSD      = 1 << 1 // explicit persistent connection support for discovery
	EFlagNCC        = 1 << 2 // no CDC connectivity
)

// RDMA TSAS values.
const (
	RDMAQPTypeConnected = 1 // reliable connected
	RDMAQPTypeDatagram  = 2 // reliable datagram

	RDMAPrTypeNone   = 1 // no provider specified
	RDMAPrTypeIB     = 2
	RDMAPrTypeRoCE   = 3
	RDMAPrTypeRoCEv2 = 4
	RDMAPrTypeIWARP  = 5

	RDMACMSRDMACM = 1 // sockets based endpoint addressing (rdma_cm)
)

// RDMATSAS is the RDMA transport specific address subtype: byte 0 QPTYPE, 1 PRTYPE, 2 CMS,
// 8..9 PKEY (entry bytes 768, 769, 770 and 776).
type RDMATSAS struct {
	QPType uint8
	PrType uint8
	CMS    uint8
	PKey   uint16
}

// TCP TSAS SECTYPE values (TSAS byte 0 for TRTYPE tcp).
const (
	TCPSecTypeNone  = 0
	TCPSecTypeTLS12 = 1
	TCPSecTypeTLS13 = 2
)

// DiscoveryLogEntry is one 1024-byte discovery log entry:
// 0 TRTYPE · 1 ADRFAM · 2 SUBTYPE · 3 TREQ · 4 PORTID · 6 CNTLID · 8 ASQSZ · 10 EFLAGS ·
// 32..63 TRSVCID (ASCII, space padded) · 256..511 SUBNQN (NUL padded) ·
// 512..767 TRADDR (ASCII, space padded) · 768..1023 TSAS.
type DiscoveryLogEntry struct {
	TrType  TransportType
	AdrFam  AddressFamily
	SubType SubsystemType
	TReq    uint8
	PortID  uint16
	CNTLID  uint16 // CNTLIDDynamic for the dynamic controller model
	ASQSZ   uint16 // admin max SQ size (at least 32)
	EFlags  uint16
	TrSvcID string // e.g. "4420"
	SubNQN  string
	TrAddr  string // e.g. "192.168.1.10"
	TSAS    [TSASSize]byte
}

// RDMA returns the TSAS interpreted as the RDMA subtype.
func (e *DiscoveryLogEntry) RDMA() RDMATSAS {
	return RDMATSAS{QPType: e.TSAS[0], PrType: e.TSAS[1], CMS: e.TSAS[2], PKey: le.Uint16(e.TSAS[8:])}
}

// SetRDMA sets the TSAS to the RDMA subtype t (zeroing the rest of it).
func (e *DiscoveryLogEntry) SetRDMA(t RDMATSAS) {
	clear(e.TSAS[:])
	e.TSAS[0], e.TSAS[1], e.TSAS[2] = t.QPType, t.PrType, t.CMS
	le.PutUint16(e.TSAS[8:], t.PKey)
}

// Marshal encodes e into the first DiscoveryLogEntrySize bytes of b, zeroing reserved bytes.
func (e *DiscoveryLogEntry) Marshal(b []byte) {
	b = b[:DiscoveryLogEntrySize]
	clear(b)
	b[0], b[1], b[2], b[3] = byte(e.TrType), byte(e.AdrFam), byte(e.SubType), e.TReq
	le.PutUint16(b[4:], e.PortID)
	le.PutUint16(b[6:], e.CNTLID)
	le.PutUint16(b[8:], e.ASQSZ)
	le.PutUint16(b[10:], e.EFlags)
	putASCII(b[32:64], e.TrSvcID)
	putNQN(b[256:512], e.SubNQN)
	putASCII(b[512:768], e.TrAddr)
	copy(b[768:], e.TSAS[:])
}

// Unmarshal decodes an entry from the first DiscoveryLogEntrySize bytes of b. TRSVCID
// and TRADDR lose their space (or NUL) padding; an unterminated SUBNQN is taken whole.
func (e *DiscoveryLogEntry) Unmarshal(b []byte) error {
	if err := short("discovery log entry", DiscoveryLogEntrySize, b); err != nil {
		return err
	}
	e.TrType, e.AdrFam, e.SubType, e.TReq = TransportType(b[0]), AddressFamily(b[1]), SubsystemType(b[2]), b[3]
	e.PortID = le.Uint16(b[4:])
	e.CNTLID = le.Uint16(b[6:])
	e.ASQSZ = le.Uint16(b[8:])
	e.EFlags = le.Uint16(b[10:])
	e.TrSvcID = getASCII(b[32:64])
	e.SubNQN, _ = getNQN(b[256:512])
	e.TrAddr = getASCII(b[512:768])
	copy(e.TSAS[:], b[768:1024])
	return nil
}

// DiscoveryLog is a whole discovery log page.
type DiscoveryLog struct {
	GenCtr  uint64
	Entries []DiscoveryLogEntry
}

// Size returns the encoded size of the log.
func (l *DiscoveryLog) Size() int { return DiscoveryLogSize(len(l.Entries)) }

// Marshal encodes the whole log (header with NUMREC = len(Entries), then the entries) into
// the first Size() bytes of b. A target answering a Get Log Page copies the requested
// window (offset, length) out of this encoding.
func (l *DiscoveryLog) Marshal(b []byte) {
	h := DiscoveryLogHeader{GenCtr: l.GenCtr, NumRec: uint64(len(l.Entries))}
	h.Marshal(b)
	for i := range l.Entries {
		l.Entries[i].Marshal(b[DiscoveryLogSize(i):])
	}
}

// Unmarshal decodes a log page: the header, then as many of its NUMREC entries as b holds
// completely (a host may have read fewer than NUMREC). It returns an error only if the
// header is short.
func (l *DiscoveryLog) Unmarshal(b []byte) error {
	var h DiscoveryLogHeader
	if err := h.Unmarshal(b); err != nil {
		return err
	}
	l.GenCtr = h.GenCtr
	n := uint64(0)
	if len(b) > DiscoveryLogHeaderSize {
		n = uint64(len(b)-DiscoveryLogHeaderSize) / DiscoveryLogEntrySize
	}
	if h.NumRec < n {
		n = h.NumRec
	}
	l.Entries = l.Entries[:0]
	for i := 0; i < int(n); i++ {
		var e DiscoveryLogEntry
		if err := e.Unmarshal(b[DiscoveryLogSize(i):]); err != nil {
			return err
		}
		l.Entries = append(l.Entries, e)
	}
	return nil
}
