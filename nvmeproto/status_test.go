package nvmeproto

import (
	"strings"
	"testing"
)

// CQE status field (reference §2): bit 0 phase, 8:1 SC, 11:9 SCT, 13:12 CRD, 14 MORE, 15 DNR.
func TestStatusBits(t *testing.T) {
	s := MakeStatus(SCTMediaError, 0x81) | 2<<11 | 1<<13 | 1<<14
	b := make([]byte, CQESize)
	(&Completion{Status: s}).Marshal(b)
	w := get(b, 14, 2)
	runChecks(t, []offsetCheck{
		{"phase bit 0", w & 1, 0}, {"SC bits 8:1", w >> 1 & 0xFF, 0x81}, {"SCT bits 11:9", w >> 9 & 7, 2},
		{"CRD bits 13:12", w >> 12 & 3, 2}, {"MORE bit 14", w >> 14 & 1, 1}, {"DNR bit 15", w >> 15, 1},
		{"Status.CRD", uint64(s.CRD()), 2}, {"Status.More", b64(s.More()), 1}, {"Status.DNR", b64(s.DNR()), 1},
	})
	if s.Code() != StatusUnrecoveredReadError || s.Success() || !StatusSuccess.Success() {
		t.Error("Code/Success")
	}
}

// WithCRD sets the Command Retry Delay field (the kernel's NVME_SC_CRD, 0x1800, in the
// status it keeps shifted right by one) and nothing else; it lands in CQE status bits
// 13:12, and String shows it.
func TestStatusWithCRD(t *testing.T) {
	s := StatusNSNotReady.WithCRD(1)
	if uint16(s) != 0x082|0x0800 || s.CRD() != 1 || s.DNR() || s.Code() != StatusNSNotReady {
		t.Errorf("Namespace Not Ready with CRD 1 = %#x (crd %d dnr %v)", uint16(s), s.CRD(), s.DNR())
	}
	b := make([]byte, CQESize)
	(&Completion{Status: s}).Marshal(b)
	if w := get(b, 14, 2); w>>12&3 != 1 || w>>1&0xFF != 0x82 || w>>15 != 0 {
		t.Errorf("CQE status word %#x: want CRD 1 in bits 13:12, SC 0x82, no DNR", w)
	}
	if got := StatusWriteFault.WithDNR().WithCRD(3).WithCRD(2); got.CRD() != 2 || !got.DNR() || got.Code() != StatusWriteFault {
		t.Errorf("WithCRD(2) over CRD 3 = %#x", uint16(got))
	}
	if got := StatusNSNotReady.WithCRD(1).WithCRD(0); got != StatusNSNotReady {
		t.Errorf("WithCRD(0) = %#x, want %#x", uint16(got), uint16(StatusNSNotReady))
	}
	if got := StatusNSNotReady.WithCRD(7); got.CRD() != 3 || got.More() {
		t.Errorf("WithCRD(7) = %#x: the field is 2 bits, nothing else may change", uint16(got))
	}
	if str := s.String(); !strings.Contains(str, "Namespace Not Ready") || !strings.Contains(str, "crd 1") || strings.Contains(str, "dnr") {
		t.Errorf("String() = %q", str)
	}
}

// Every named status has the (SCT, SC) pair the kernel's NVME_SC_* gives it.
func TestStatusValues(t *testing.T) {
	kernel := map[Status]uint16{
		StatusInvalidOpcode: 0x1, StatusInvalidField: 0x2, StatusCommandSequenceError: 0xc, StatusInvalidSGLSegmentDescriptor: 0xd,
		StatusInvalidNumberSGLDescriptors: 0xe, StatusDataSGLLengthInvalid: 0xf, StatusSGLDescriptorTypeInvalid: 0x11,
		StatusSGLOffsetInvalid: 0x16, StatusHostIDInconsistentFormat: 0x18, StatusKeepAliveExpired: 0x19, StatusKeepAliveInvalid: 0x1a,
		StatusNSWriteProtected: 0x20, StatusTransientTransportError: 0x22, StatusAdminCommandMediaNotReady: 0x24,
		StatusInvalidIOCommandSet: 0x2c, StatusLBAOutOfRange: 0x80, StatusNSNotReady: 0x82, StatusReservationConflict: 0x83,
		StatusInvalidQueueID: 0x101, StatusInvalidQueueSize: 0x102, StatusAERLimitExceeded: 0x105, StatusInvalidLogPage: 0x109,
		StatusFWNeedsConventionalRst: 0x10b, StatusInvalidQueueDeletion: 0x10c, StatusFeatureNotSaveable: 0x10d,
		StatusFeatureNotChangeable: 0x10e, StatusFeatureNotNSSpecific: 0x10f, StatusOverlappingRange: 0x114,
		StatusANAAttachFailed: 0x125, StatusIOCommandSetNotSupported: 0x129, StatusIOCommandSetNotEnabled: 0x12a,
		StatusIOCommandSetCombination: 0x12b, StatusConnectIncompatibleFormat: 0x180, StatusConnectControllerBusy: 0x181,
		StatusConnectInvalidParameters: 0x182, StatusConnectRestartDiscovery: 0x183, StatusConnectInvalidHost: 0x184,
		StatusDiscoveryRestart: 0x190, StatusAuthRequired: 0x191, StatusWriteToReadOnlyRange: 0x182,
		StatusZoneBoundaryError: 0x1b8, StatusInvalidZoneTransition: 0x1bf, StatusWriteFault: 0x280, StatusUnrecoveredReadError: 0x281,
		StatusAccessDenied: 0x286, StatusDeallocatedOrUnwritten: 0x287, StatusInternalPathError: 0x300,
		StatusANAInaccessible: 0x302, StatusANATransition: 0x303, StatusHostPathError: 0x370, StatusAbortedByHost: 0x371,
	}
	for s, v := range kernel {
		if uint16(s) != v {
			t.Errorf("%v = %#x, kernel %#x", s, uint16(s), v)
		}
	}
	for s, n := range statusNames {
		if n == "" || !strings.Contains(s.String(), n) {
			t.Errorf("%#x: name %q string %q", uint16(s), n, s.String())
		}
	}
	if StatusConnectInvalidParameters.Name() != "Connect Invalid Parameters" || StatusWriteToReadOnlyRange.NameNVM() != "Attempted Write to Read Only Range" {
		t.Error("command specific naming")
	}
	if !strings.Contains(MakeStatus(SCTVendor, 0xC0).String(), "unknown") {
		t.Error("unknown status string")
	}
}

// Reference §2 SGL types and subtypes.
func TestSGLTypes(t *testing.T) {
	types := map[SGLType]uint8{SGLTypeDataBlock: 0, SGLTypeSegment: 2, SGLTypeLastSegment: 3, SGLTypeKeyedDataBlock: 4, SGLTypeTransportDataBlock: 5}
	for ty, v := range types {
		if uint8(ty) != v || strings.HasPrefix(ty.String(), "SGL type") {
			t.Errorf("type %v = %d", ty, v)
		}
	}
	subs := map[SGLSubtype]uint8{SGLSubtypeAddress: 0, SGLSubtypeOffset: 1, SGLSubtypeTransport: 0xA, SGLSubtypeInvalidate: 0xF}
	for s, v := range subs {
		if uint8(s) != v || strings.HasPrefix(s.String(), "SGL subtype") {
			t.Errorf("subtype %v = %d", s, v)
		}
	}
	ids := map[uint8]uint8{SGLIDKeyedAddress: 0x40, SGLIDKeyedInvalidate: 0x4F, SGLIDDataOffset: 0x01, SGLIDLastSegOffset: 0x31, SGLIDTransportData: 0x5A}
	for id, v := range ids {
		if id != v {
			t.Errorf("id %#x want %#x", id, v)
		}
	}
	_, _ = SGLType(9).String(), SGLSubtype(7).String()
}

// Reference §2: 0x31 Last Segment/Offset points at a list of keyed descriptors in the ICD
// (count = length/16).
func TestDecodeSGLSegment(t *testing.T) {
	b := make([]byte, 3*SGLDescSize)
	for i := 0; i < 3; i++ {
		(&SGLDescriptor{Address: uint64(0x1000 * (i + 1)), Length: 4096, Key: uint32(i), Type: SGLTypeKeyedDataBlock}).Marshal(b[16*i:])
	}
	buf := make([]SGLDescriptor, 0, 16)
	ds, err := DecodeSGLSegment(buf, b)
	if err != nil || len(ds) != 3 || ds[2].Address != 0x3000 || ds[1].Key != 1 || !ds[0].Keyed() {
		t.Fatalf("%v %v", ds, err)
	}
	if _, err := DecodeSGLSegment(buf, b[:40]); err == nil {
		t.Error("partial descriptor accepted")
	}
	if n := testing.AllocsPerRun(100, func() { ds, _ = DecodeSGLSegment(buf, b) }); n != 0 {
		t.Errorf("allocates %v", n)
	}
}
