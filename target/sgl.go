package target

import (
	"encoding/binary"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// MaxSGLDescriptors is the largest number of keyed descriptors a command may carry in an
// in-capsule Last Segment list (SGL identifier 0x31). A port may accept fewer
// (PortConfig.MaxSGLDescriptors, reported to hosts as Identify Controller MSDBD).
const MaxSGLDescriptors = 16

// SGLCaps says which SGL descriptors a transport can move data for. ParseSGL checks a
// command against it.
type SGLCaps struct {
	// Keyed: Keyed Data Block descriptors (0x40 address, 0x4F address with invalidate),
	// which name host memory by address and remote key (RDMA).
	Keyed bool
	// TransportData: Transport Data Block descriptors (0x5A), whose data travels in
	// transport PDUs (NVMe/TCP).
	TransportData bool
	// InCapsuleDataSize is the number of bytes of in-capsule data the transport receives
	// after the 64-byte SQE; 0 means no in-capsule data. Data Block/Offset descriptors
	// (0x01) must fit in it, and so must a Last Segment/Offset list (0x31).
	InCapsuleDataSize int
	// MaxSGLDescriptors is the largest descriptor count of a Last Segment list (MSDBD);
	// 0 or 1 means lists are not accepted.
	MaxSGLDescriptors int
	// MaxTransferSize is the largest data transfer of one command in bytes (MDTS).
	MaxTransferSize uint32
}

// ParseSGL validates the data pointer (SGL descriptor 1) of req.Cmd against caps and,
// when it is acceptable, describes the data transfer in req: Length (total bytes),
// InCapsule and Data (in-capsule data, a slice of req.ICD), or SGL (the host memory
// segments to move by RDMA). It does not look at the opcode beyond the data direction.
//
// It returns Successful Completion or the status the command must complete with:
// SGL Descriptor Type Invalid (an unsupported type or subtype), SGL Offset Invalid
// (in-capsule data or a descriptor list beyond the in-capsule data size), Data SGL Length
// Invalid (in-capsule data the capsule does not hold), Invalid SGL Segment Descriptor (a
// list whose length is not a whole number of descriptors), Invalid Number of SGL
// Descriptors (more than caps.MaxSGLDescriptors), and Invalid Field in Command for a
// transfer larger than caps.MaxTransferSize or in-capsule data on a controller-to-host
// command; and Data SGL Length Invalid for data described for a command that has none
// (its opcode's data direction is "none"). Every error status has DNR set.
//
// Begin calls ParseSGL with its port's capabilities; a transport may call it itself to
// size buffers before it has a Queue. It does not allocate.
func ParseSGL(req *Request, caps *SGLCaps) nvmeproto.Status {
	if req.Cmd.SGL.Length == 0 && req.Cmd.DataDirection() == nvmeproto.DirNone {
		// No data either way: the descriptor's type does not matter (hosts send a keyed
		// descriptor of length 0 over RDMA, a transport one over TCP, zeroes elsewhere).
		req.Length, req.InCapsule, req.SGL = 0, false, nil
		return nvmeproto.StatusSuccess
	}
	st := parseSGL(req, caps)
	if st == nvmeproto.StatusSuccess && req.Length > 0 && req.Cmd.DataDirection() == nvmeproto.DirNone {
		return nvmeproto.StatusDataSGLLengthInvalid.WithDNR() // data for a command that has none
	}
	return st
}

func parseSGL(req *Request, caps *SGLCaps) nvmeproto.Status {
	req.Length = 0
	req.InCapsule = false
	req.SGL = nil
	d := &req.Cmd.SGL
	switch d.ID() {
	case nvmeproto.SGLIDKeyedAddress, nvmeproto.SGLIDKeyedInvalidate:
		if !caps.Keyed {
			return nvmeproto.StatusSGLDescriptorTypeInvalid.WithDNR()
		}
		if d.Length == 0 {
			return nvmeproto.StatusSuccess
		}
		if d.Length > caps.MaxTransferSize {
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		req.sglStore[0] = *d
		req.SGL = req.sglStore[:1]
		req.Length = d.Length
		return nvmeproto.StatusSuccess

	case nvmeproto.SGLIDTransportData:
		if !caps.TransportData {
			return nvmeproto.StatusSGLDescriptorTypeInvalid.WithDNR()
		}
		if d.Length > caps.MaxTransferSize {
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		req.Length = d.Length
		if d.Length > 0 {
			req.sglStore[0] = *d
			req.SGL = req.sglStore[:1]
		}
		return nvmeproto.StatusSuccess

	case nvmeproto.SGLIDDataOffset:
		if caps.InCapsuleDataSize <= 0 {
			return nvmeproto.StatusSGLDescriptorTypeInvalid.WithDNR()
		}
		if d.Length == 0 {
			return nvmeproto.StatusSuccess
		}
		if req.Cmd.DataDirection() != nvmeproto.DirHostToCtrl {
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		end := d.Address + uint64(d.Length)
		if d.Address > uint64(caps.InCapsuleDataSize) || end > uint64(caps.InCapsuleDataSize) {
			return nvmeproto.StatusSGLOffsetInvalid.WithDNR()
		}
		if end > uint64(len(req.ICD)) {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		if d.Length > caps.MaxTransferSize {
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		req.InCapsule = true
		req.Length = d.Length
		req.Data = req.ICD[d.Address:end:end]
		return nvmeproto.StatusSuccess

	case nvmeproto.SGLIDLastSegOffset:
		if !caps.Keyed || caps.InCapsuleDataSize <= 0 {
			return nvmeproto.StatusSGLDescriptorTypeInvalid.WithDNR()
		}
		if d.Length == 0 || d.Length%nvmeproto.SGLDescSize != 0 {
			return nvmeproto.StatusInvalidSGLSegmentDescriptor.WithDNR()
		}
		n := int(d.Length / nvmeproto.SGLDescSize)
		if n > caps.MaxSGLDescriptors || n > MaxSGLDescriptors {
			return nvmeproto.StatusInvalidNumberSGLDescriptors.WithDNR()
		}
		end := d.Address + uint64(d.Length)
		if d.Address > uint64(caps.InCapsuleDataSize) || end > uint64(caps.InCapsuleDataSize) {
			return nvmeproto.StatusSGLOffsetInvalid.WithDNR()
		}
		if end > uint64(len(req.ICD)) {
			return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
		}
		// The length is a whole number of descriptors and n ≤ cap(sglStore): no error,
		// no allocation.
		list, _ := nvmeproto.DecodeSGLSegment(req.sglStore[:0], req.ICD[d.Address:end])
		var total uint64
		k := 0
		for _, e := range list {
			switch e.ID() {
			case nvmeproto.SGLIDKeyedAddress, nvmeproto.SGLIDKeyedInvalidate:
			default:
				return nvmeproto.StatusSGLDescriptorTypeInvalid.WithDNR()
			}
			if e.Length == 0 {
				continue
			}
			total += uint64(e.Length)
			req.sglStore[k] = e
			k++
		}
		if total > uint64(caps.MaxTransferSize) {
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		req.Length = uint32(total)
		if k > 0 {
			req.SGL = req.sglStore[:k]
		}
		return nvmeproto.StatusSuccess
	}
	return nvmeproto.StatusSGLDescriptorTypeInvalid.WithDNR()
}

// le is the byte order of every NVMe structure.
var le = binary.LittleEndian
