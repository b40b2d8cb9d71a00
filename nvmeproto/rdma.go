package nvmeproto

import "fmt"

// nvme-rdma CM private data (NVMe over Fabrics RDMA transport binding), exchanged in the
// rdma_cm CONNECT_REQUEST, ESTABLISHED (accept) and REJECTED events.

// Sizes of the nvme-rdma CM private data structures.
const (
	RDMAConnReqSize = 32
	RDMAConnRepSize = 32
	RDMAConnRejSize = 4
)

// RDMARecFmt is the only defined record format of the nvme-rdma private data (1.0).
const RDMARecFmt = 0

// DefaultRDMAPort is the IANA port of NVMe over Fabrics on RDMA (RDMA_PS_TCP port space).
const DefaultRDMAPort = 4420

// RDMAConnReq is the private data of the host's CM connect request:
// 0 RECFMT · 2 QID · 4 HRQSIZE · 6 HSQSIZE · 8 CNTLID · 10..31 reserved.
type RDMAConnReq struct {
	RecFmt  uint16
	QID     uint16 // 0 = admin queue
	HRQSize uint16 // host receive queue size (number of response capsules it can take)
	HSQSize uint16 // host send queue size, 0's based (the NVMe SQ size)
	CNTLID  uint16 // controller ID for I/O queues (newer hosts; 0 from older ones)
}

// Marshal encodes r into the first RDMAConnReqSize bytes of b, zeroing reserved bytes.
func (r *RDMAConnReq) Marshal(b []byte) {
	b = b[:RDMAConnReqSize]
	clear(b)
	le.PutUint16(b[0:], r.RecFmt)
	le.PutUint16(b[2:], r.QID)
	le.PutUint16(b[4:], r.HRQSize)
	le.PutUint16(b[6:], r.HSQSize)
	le.PutUint16(b[8:], r.CNTLID)
}

// Unmarshal decodes the request from the first RDMAConnReqSize bytes of b. Longer input is
// accepted: the CM may deliver the private data padded to its maximum (56 bytes for an
// IB/RoCE connect request behind rdma_cm's header). Input shorter than 32 bytes is an
// *ErrShort (reject with RDMARejectInvalidLen).
func (r *RDMAConnReq) Unmarshal(b []byte) error {
	if err := short("nvme-rdma CM request", RDMAConnReqSize, b); err != nil {
		return err
	}
	r.RecFmt = le.Uint16(b[0:])
	r.QID = le.Uint16(b[2:])
	r.HRQSize = le.Uint16(b[4:])
	r.HSQSize = le.Uint16(b[6:])
	r.CNTLID = le.Uint16(b[8:])
	return nil
}

// RDMAConnRep is the private data the controller returns when accepting:
// 0 RECFMT · 2 CRQSIZE · 4..31 reserved.
type RDMAConnRep struct {
	RecFmt  uint16
	CRQSize uint16 // controller receive queue size (command capsules it can take)
}

// Marshal encodes r into the first RDMAConnRepSize bytes of b, zeroing reserved bytes.
func (r *RDMAConnRep) Marshal(b []byte) {
	b = b[:RDMAConnRepSize]
	clear(b)
	le.PutUint16(b[0:], r.RecFmt)
	le.PutUint16(b[2:], r.CRQSize)
}

// Unmarshal decodes the reply from the first RDMAConnRepSize bytes of b; longer input is
// accepted.
func (r *RDMAConnRep) Unmarshal(b []byte) error {
	if err := short("nvme-rdma CM reply", RDMAConnRepSize, b); err != nil {
		return err
	}
	r.RecFmt = le.Uint16(b[0:])
	r.CRQSize = le.Uint16(b[2:])
	return nil
}

// RDMARejectStatus is the STS of an nvme-rdma CM reject.
type RDMARejectStatus uint16

// Reject status codes.
const (
	RDMARejectInvalidLen     RDMARejectStatus = 0x01 // invalid private data length
	RDMARejectInvalidRecFmt  RDMARejectStatus = 0x02 // invalid RECFMT
	RDMARejectInvalidQID     RDMARejectStatus = 0x03 // invalid QID
	RDMARejectInvalidHSQSize RDMARejectStatus = 0x04 // invalid HSQSIZE
	RDMARejectInvalidHRQSize RDMARejectStatus = 0x05 // invalid HRQSIZE
	RDMARejectNoResources    RDMARejectStatus = 0x06 // no resources
	RDMARejectInvalidIRD     RDMARejectStatus = 0x07 // invalid IRD
	RDMARejectInvalidORD     RDMARejectStatus = 0x08 // invalid ORD
	RDMARejectInvalidCNTLID  RDMARejectStatus = 0x09 // invalid CNTLID (SPDK; not in every kernel)
)

func (s RDMARejectStatus) String() string {
	switch s {
	case RDMARejectInvalidLen:
		return "invalid length"
	case RDMARejectInvalidRecFmt:
		return "invalid record format"
	case RDMARejectInvalidQID:
		return "invalid queue ID"
	case RDMARejectInvalidHSQSize:
		return "invalid host SQ size"
	case RDMARejectInvalidHRQSize:
		return "invalid host RQ size"
	case RDMARejectNoResources:
		return "no resources"
	case RDMARejectInvalidIRD:
		return "invalid IRD"
	case RDMARejectInvalidORD:
		return "invalid ORD"
	case RDMARejectInvalidCNTLID:
		return "invalid controller ID"
	}
	return fmt.Sprintf("reject status %#x", uint16(s))
}

// RDMAConnRej is the private data of a controller's CM reject: 0 RECFMT · 2 STS.
type RDMAConnRej struct {
	RecFmt uint16
	Status RDMARejectStatus
}

// Marshal encodes r into the first RDMAConnRejSize bytes of b.
func (r *RDMAConnRej) Marshal(b []byte) {
	b = b[:RDMAConnRejSize]
	le.PutUint16(b[0:], r.RecFmt)
	le.PutUint16(b[2:], uint16(r.Status))
}

// Unmarshal decodes the reject from the first RDMAConnRejSize bytes of b; longer input is
// accepted.
func (r *RDMAConnRej) Unmarshal(b []byte) error {
	if err := short("nvme-rdma CM reject", RDMAConnRejSize, b); err != nil {
		return err
	}
	r.RecFmt = le.Uint16(b[0:])
	r.Status = RDMARejectStatus(le.Uint16(b[2:]))
	return nil
}
