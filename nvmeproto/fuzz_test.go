package nvmeproto

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
)

// Fuzz targets for every decoder of network input. Each checks that the decoder never
// panics and that whatever it accepts re-encodes to something it decodes identically.
// Run them all with integration/fuzz.sh (FUZZ_PKGS=./nvmeproto). Seed corpora live in
// testdata/fuzz/<FuzzName>/ (regenerate with
// GONVMF_WRITE_CORPUS=1 go test -run TestWriteSeedCorpus ./nvmeproto).

// addSeeds adds seeds to f's corpus (they are also written to testdata/fuzz).
func addSeeds(f *testing.F, seeds [][]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
}

func FuzzConnectData(f *testing.F) {
	addSeeds(f, seedConnectData())
	f.Fuzz(func(t *testing.T, b []byte) {
		var d ConnectData
		if err := d.Unmarshal(b); err != nil {
			return
		}
		out := make([]byte, ConnectDataSize)
		d.Marshal(out)
		var d2 ConnectData
		if err := d2.Unmarshal(out); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		// NQNs of 256 bytes cannot be decoded (no NUL), so d's are at most 255 and survive.
		if d2 != d {
			t.Fatalf("re-decode: %+v vs %+v", d2, d)
		}
		_, _ = CheckNQN(d.SubNQN), CheckNQN(d.HostNQN)
	})
}

func seedConnectData() [][]byte {
	d := ConnectData{HostID: [16]byte{0xde, 0xad}, CNTLID: CNTLIDDynamic,
		SubNQN: "nqn.2024-01.io.gonvmf:sub1", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"}
	b := make([]byte, ConnectDataSize)
	d.Marshal(b)
	bad := bytes.Clone(b)
	for i := 256; i < 512; i++ {
		bad[i] = 'a'
	}
	return [][]byte{b, bad, b[:100], nil}
}

// stableEncoding checks that decode→encode reaches a fixed point after one round: the
// second encoding equals the first. (Decoders normalise some inputs, e.g. string padding,
// so the first encoding need not equal the input.)
func stableEncoding[T any](t *testing.T, b []byte, size int, unmarshal func(*T, []byte) error, marshal func(*T, []byte)) {
	t.Helper()
	var x T
	if err := unmarshal(&x, b); err != nil {
		return
	}
	e1 := make([]byte, size)
	marshal(&x, e1)
	var y T
	if err := unmarshal(&y, e1); err != nil {
		t.Fatalf("re-decode of own encoding failed: %v", err)
	}
	e2 := make([]byte, size)
	marshal(&y, e2)
	if !bytes.Equal(e1, e2) {
		t.Fatalf("encoding not stable")
	}
}

func FuzzIdentifyController(f *testing.F) {
	addSeeds(f, seedIdentifyController())
	f.Fuzz(func(t *testing.T, b []byte) {
		stableEncoding(t, b, IdentifySize, (*IdentifyController).Unmarshal, (*IdentifyController).Marshal)
	})
}

func seedIdentifyController() [][]byte {
	id := IdentifyController{VID: 0x1b36, SN: "serial", MN: "model", FR: "1.0", MDTS: 5, CNTLID: 1, VER: VS1_4,
		CNTRLTYPE: ControllerTypeIO, KAS: 10, SQES: SQESNVM, CQES: CQESNVM, MAXCMD: 128, NN: 4,
		SGLS: SGLSSupported | SGLSKeyedDataBlock | SGLSAddressAsOffset, SubNQN: "nqn.2024-01.io.gonvmf:s",
		IOCCSZ: 260, IORCSZ: 1, MSDBD: 1}
	b := make([]byte, IdentifySize)
	id.Marshal(b)
	ff := bytes.Repeat([]byte{0xFF}, IdentifySize)
	return [][]byte{b, ff, b[:2000]}
}

func seedIdentifyNamespace() [][]byte {
	n := IdentifyNamespace{NSZE: 1 << 30, NCAP: 1 << 30, NUSE: 1 << 30, NLBAF: 1, FLBAS: 1, NGUID: [16]byte{1}, EUI64: [8]byte{2}}
	n.LBAF[0], n.LBAF[1] = LBAFormatFor(512), LBAFormatFor(4096)
	b := make([]byte, IdentifySize)
	n.Marshal(b)
	return [][]byte{b, bytes.Repeat([]byte{0xFF}, IdentifySize), b[:128]}
}

func FuzzIdentifyNamespace(f *testing.F) {
	addSeeds(f, seedIdentifyNamespace())
	f.Fuzz(func(t *testing.T, b []byte) {
		stableEncoding(t, b, IdentifySize, (*IdentifyNamespace).Unmarshal, (*IdentifyNamespace).Marshal)
		var n IdentifyNamespace
		if n.Unmarshal(b) == nil {
			_ = n.LBASize()
		}
	})
}

func seedIdentifyMisc() [][]byte {
	return [][]byte{append([]byte{0}, make([]byte, IdentifySize)...),
		append([]byte{1}, bytes.Repeat([]byte{0xA5}, IdentifySize)...), {1, 2, 3}}
}

// FuzzIdentifyMisc covers the CNS 06h (NVM) and CNS 08h structures: byte 0 selects which.
func FuzzIdentifyMisc(f *testing.F) {
	addSeeds(f, seedIdentifyMisc())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		if b[0]&1 == 0 {
			stableEncoding(t, b[1:], IdentifySize, (*IdentifyControllerNVM).Unmarshal, (*IdentifyControllerNVM).Marshal)
		} else {
			stableEncoding(t, b[1:], IdentifySize, (*IdentifyNamespaceIndependent).Unmarshal, (*IdentifyNamespaceIndependent).Marshal)
		}
	})
}

func FuzzNSDescriptorList(f *testing.F) {
	addSeeds(f, seedNSDescriptorList())
	f.Fuzz(func(t *testing.T, b []byte) {
		var l NSDescriptorList
		if err := l.Unmarshal(b); err != nil {
			return
		}
		out := make([]byte, IdentifySize)
		l.Marshal(out)
		var l2 NSDescriptorList
		if err := l2.Unmarshal(out); err != nil || len(l2) != len(l) {
			t.Fatalf("re-decode: %v, %d vs %d descriptors", err, len(l2), len(l))
		}
		for i := range l {
			if l[i] != l2[i] {
				t.Fatalf("descriptor %d: %+v vs %+v", i, l[i], l2[i])
			}
		}
	})
}

func seedNSDescriptorList() [][]byte {
	l := NSDescriptorList{EUI64Descriptor([8]byte{1}), NGUIDDescriptor([16]byte{2}), UUIDDescriptor([16]byte{3}), CSIDescriptor(CSINVM)}
	b := make([]byte, IdentifySize)
	l.Marshal(b)
	return [][]byte{b, b[:60], {0x99, 0xFF, 0, 0}, {3, 16, 0, 0, 1}}
}

func seedNSIDList() [][]byte {
	b := make([]byte, IdentifySize)
	NSIDList{1, 2, 3, 0x10}.Marshal(b)
	return [][]byte{b, {1, 0, 0}}
}

func FuzzNSIDList(f *testing.F) {
	addSeeds(f, seedNSIDList())
	f.Fuzz(func(t *testing.T, b []byte) {
		var l NSIDList
		if err := l.Unmarshal(b); err != nil || len(l) > MaxNSIDListEntries {
			t.Fatalf("%v %d", err, len(l))
		}
		out := make([]byte, IdentifySize)
		l.Marshal(out)
		var l2 NSIDList
		if err := l2.Unmarshal(out); err != nil || len(l2) != len(l) {
			t.Fatal("re-decode")
		}
	})
}

func seedControllerList() [][]byte {
	b := make([]byte, ControllerListSize)
	ControllerList{1, 2, 0xFFEF}.Marshal(b)
	return [][]byte{b, {3, 0, 1, 0}, {0xFF, 0xFF}}
}

func FuzzControllerList(f *testing.F) {
	addSeeds(f, seedControllerList())
	f.Fuzz(func(t *testing.T, b []byte) {
		var l ControllerList
		if err := l.Unmarshal(b); err != nil {
			return
		}
		if len(l) > MaxControllerListEntries {
			t.Fatalf("%d identifiers", len(l))
		}
		out := make([]byte, ControllerListSize)
		l.Marshal(out)
		var l2 ControllerList
		if err := l2.Unmarshal(out); err != nil || !slices.Equal(l, l2) {
			t.Fatalf("re-decode: %v, %v vs %v", err, l2, l)
		}
	})
}

func seedRDMACM() [][]byte {
	req := make([]byte, RDMAConnReqSize)
	(&RDMAConnReq{QID: 1, HRQSize: 128, HSQSize: 127, CNTLID: 1}).Marshal(req)
	return [][]byte{append([]byte{0}, req...), append([]byte{1}, req...), {2, 0, 0, 6, 0}, append([]byte{0}, make([]byte, 148)...), {0, 1}}
}

// FuzzRDMACM covers the nvme-rdma CM private data decoders: byte 0 selects REQ (0),
// REP (1) or REJ (2); the rest is the private data.
func FuzzRDMACM(f *testing.F) {
	addSeeds(f, seedRDMACM())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		switch b[0] % 3 {
		case 0:
			stableEncoding(t, b[1:], RDMAConnReqSize, (*RDMAConnReq).Unmarshal, (*RDMAConnReq).Marshal)
		case 1:
			stableEncoding(t, b[1:], RDMAConnRepSize, (*RDMAConnRep).Unmarshal, (*RDMAConnRep).Marshal)
		case 2:
			stableEncoding(t, b[1:], RDMAConnRejSize, (*RDMAConnRej).Unmarshal, (*RDMAConnRej).Marshal)
			var r RDMAConnRej
			if r.Unmarshal(b[1:]) == nil {
				_ = r.Status.String()
			}
		}
	})
}

func seedDiscoveryLog() [][]byte {
	l := DiscoveryLog{GenCtr: 3, Entries: []DiscoveryLogEntry{{TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeNVMe,
		CNTLID: CNTLIDDynamic, ASQSZ: 32, TrSvcID: "4420", TrAddr: "10.0.0.1", SubNQN: "nqn.2024-01.io.gonvmf:s"}}}
	l.Entries[0].SetRDMA(RDMATSAS{QPType: 1, PrType: 1, CMS: 1})
	b := make([]byte, l.Size())
	l.Marshal(b)
	return [][]byte{b, b[:1024], b[:18], bytes.Repeat([]byte{0xFF}, 2048)}
}

func FuzzDiscoveryLog(f *testing.F) {
	addSeeds(f, seedDiscoveryLog())
	f.Fuzz(func(t *testing.T, b []byte) {
		stableEncoding(t, b, DiscoveryLogHeaderSize, (*DiscoveryLogHeader).Unmarshal, (*DiscoveryLogHeader).Marshal)
		if len(b) >= DiscoveryLogEntrySize {
			stableEncoding(t, b, DiscoveryLogEntrySize, (*DiscoveryLogEntry).Unmarshal, (*DiscoveryLogEntry).Marshal)
		}
		var l DiscoveryLog
		if err := l.Unmarshal(b); err != nil {
			return
		}
		if len(l.Entries) > (len(b)-DiscoveryLogHeaderSize)/DiscoveryLogEntrySize {
			t.Fatalf("%d entries from %d bytes", len(l.Entries), len(b))
		}
		out := make([]byte, l.Size())
		l.Marshal(out)
		var l2 DiscoveryLog
		if err := l2.Unmarshal(out); err != nil || len(l2.Entries) != len(l.Entries) {
			t.Fatal("re-decode")
		}
	})
}

func seedLogPages() [][]byte {
	var out [][]byte
	add := func(sel byte, b []byte) { out = append(out, append([]byte{sel}, b...)) }
	e := make([]byte, ErrorInfoEntrySize)
	(&ErrorInfoEntry{ErrorCount: 1, SQID: 1, CID: 2, Status: StatusInvalidField}).Marshal(e)
	add(0, e)
	s := make([]byte, SMARTLogSize)
	(&SMARTLog{CompositeTemperature: 300, DataUnitsRead: U128(5)}).Marshal(s)
	add(1, s)
	fw := make([]byte, FirmwareSlotLogSize)
	(&FirmwareSlotLog{AFI: 1, FRS: [7]string{"1.0"}}).Marshal(fw)
	add(2, fw)
	ce := make([]byte, CommandEffectsLogSize)
	(&CommandEffectsLog{}).Marshal(ce)
	add(3, ce)
	sl := make([]byte, SupportedLogPagesSize)
	(&SupportedLogPages{1, 1, 1}).Marshal(sl)
	add(4, sl)
	l := ANALog{ChangeCount: 1, Groups: []ANAGroupDescriptor{{GroupID: 1, State: ANAOptimized, NSIDs: []uint32{1}}}}
	a := make([]byte, l.Size(false))
	l.Marshal(a, false)
	add(5, a)
	add(6, make([]byte, ChangedNSListSize))
	add(5, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF})
	return out
}

// FuzzLogPages covers the log page decoders a host runs on controller data: byte 0
// selects the page.
func FuzzLogPages(f *testing.F) {
	addSeeds(f, seedLogPages())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		sel, b := b[0], b[1:]
		switch sel % 7 {
		case 0:
			stableEncoding(t, b, ErrorInfoEntrySize, (*ErrorInfoEntry).Unmarshal, (*ErrorInfoEntry).Marshal)
		case 1:
			stableEncoding(t, b, SMARTLogSize, (*SMARTLog).Unmarshal, (*SMARTLog).Marshal)
		case 2:
			stableEncoding(t, b, FirmwareSlotLogSize, (*FirmwareSlotLog).Unmarshal, (*FirmwareSlotLog).Marshal)
		case 3:
			stableEncoding(t, b, CommandEffectsLogSize, (*CommandEffectsLog).Unmarshal, (*CommandEffectsLog).Marshal)
		case 4:
			stableEncoding(t, b, SupportedLogPagesSize, (*SupportedLogPages).Unmarshal, (*SupportedLogPages).Marshal)
		case 5:
			var l ANALog
			if err := l.Unmarshal(b); err != nil {
				return
			}
			out := make([]byte, l.Size(false))
			l.Marshal(out, false)
			var l2 ANALog
			if err := l2.Unmarshal(out); err != nil || len(l2.Groups) != len(l.Groups) {
				t.Fatalf("re-decode: %v", err)
			}
		case 6:
			var l ChangedNSList
			if err := l.Unmarshal(b); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func seedFeatureData() [][]byte {
	ts := make([]byte, TimestampSize)
	(&Timestamp{Millis: 1700000000000, Origin: TimestampOriginHost}).Marshal(ts)
	hb := make([]byte, HostBehaviorSize)
	(&HostBehavior{ACRE: 1}).Marshal(hb)
	return [][]byte{append([]byte{0}, ts...), append([]byte{1}, hb...), {1, 1, 2}, {0, 0xFF}}
}

// FuzzFeatureData covers the feature data a target decodes from Set Features: byte 0
// selects Timestamp (0) or Host Behavior Support (1).
func FuzzFeatureData(f *testing.F) {
	addSeeds(f, seedFeatureData())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		if b[0]&1 == 0 {
			stableEncoding(t, b[1:], TimestampSize, (*Timestamp).Unmarshal, (*Timestamp).Marshal)
		} else {
			stableEncoding(t, b[1:], HostBehaviorSize, (*HostBehavior).Unmarshal, (*HostBehavior).Marshal)
		}
	})
}

func seedDSMRanges() [][]byte {
	b := make([]byte, 2*DSMRangeSize)
	(&DSMRange{NLB: 8, SLBA: 1}).Marshal(b)
	(&DSMRange{NLB: 1 << 31, SLBA: 1 << 40}).Marshal(b[16:])
	return [][]byte{append([]byte{1}, b...), {0xFF, 1, 2}, {0}}
}

// FuzzDSMRanges covers Dataset Management range decoding: byte 0 is NR (0's based),
// the rest the data.
func FuzzDSMRanges(f *testing.F) {
	addSeeds(f, seedDSMRanges())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		n := int(b[0]) + 1
		rs, err := DecodeDSMRanges(make([]DSMRange, 0, MaxDSMRanges), b[1:], n)
		if err != nil {
			if len(b)-1 >= n*DSMRangeSize {
				t.Fatalf("%d ranges in %d bytes rejected: %v", n, len(b)-1, err)
			}
			return
		}
		out := make([]byte, n*DSMRangeSize)
		for i := range rs {
			rs[i].Marshal(out[i*DSMRangeSize:])
		}
		if !bytes.Equal(out, b[1:1+n*DSMRangeSize]) {
			t.Fatal("re-encode differs")
		}
	})
}

func seedSGLDescriptor() [][]byte {
	k := make([]byte, SGLDescSize)
	(&SGLDescriptor{Address: 0x1122334455667788, Length: 0x21000, Key: 0xdeadbeef, Type: SGLTypeKeyedDataBlock, Subtype: SGLSubtypeInvalidate}).Marshal(k)
	o := make([]byte, SGLDescSize)
	(&SGLDescriptor{Length: 4096, Type: SGLTypeDataBlock, Subtype: SGLSubtypeOffset}).Marshal(o)
	return [][]byte{k, o, k[:15]}
}

func FuzzSGLDescriptor(f *testing.F) {
	addSeeds(f, seedSGLDescriptor())
	f.Fuzz(func(t *testing.T, b []byte) {
		var d SGLDescriptor
		if err := d.Unmarshal(b); err != nil {
			if len(b) >= SGLDescSize {
				t.Fatal("16 bytes rejected")
			}
			return
		}
		if d.Keyed() && d.Length > MaxKeyedLength {
			t.Fatalf("keyed length %#x exceeds 24 bits", d.Length)
		}
		out := make([]byte, SGLDescSize)
		d.Marshal(out)
		var d2 SGLDescriptor
		if err := d2.Unmarshal(out); err != nil || d2 != d {
			t.Fatalf("re-decode %+v vs %+v", d2, d)
		}
		_, _, _ = d.String(), d.Type.String(), d.Subtype.String()
		// The same bytes as a segment (descriptor list).
		ds, err := DecodeSGLSegment(nil, b)
		if (err == nil) != (len(b)%SGLDescSize == 0) || len(ds) != len(b)/SGLDescSize && err == nil {
			t.Fatalf("segment of %d bytes: %d descriptors, %v", len(b), len(ds), err)
		}
	})
}

func seedAuthMessage() [][]byte {
	b := make([]byte, AuthMessageHeaderSize)
	(&AuthMessageHeader{AuthType: AuthTypeDHHMACCHAP, AuthID: AuthMsgNegotiate, TID: 1}).Marshal(b)
	return [][]byte{b, b[:5], append(b, 0xFF, 0xFF)}
}

// FuzzAuthMessage covers the DH-HMAC-CHAP message header carried by Authentication Send.
func FuzzAuthMessage(f *testing.F) {
	addSeeds(f, seedAuthMessage())
	f.Fuzz(func(t *testing.T, b []byte) {
		stableEncoding(t, b, AuthMessageHeaderSize, (*AuthMessageHeader).Unmarshal, (*AuthMessageHeader).Marshal)
	})
}

// authMessage is the shape shared by the variable-length DH-HMAC-CHAP messages.
type authMessage interface {
	Size() int
	Marshal([]byte)
}

// stableAuthEncoding checks a variable-length message's decode→encode fixed point: what
// decode accepted encodes into Size() bytes, decodes again to an equal value, and
// encodes identically; the encoding is never longer than the input it came from.
func stableAuthEncoding[T any, P interface {
	*T
	authMessage
	Unmarshal([]byte) error
}](t *testing.T, b []byte) {
	t.Helper()
	x := P(new(T))
	if err := x.Unmarshal(b); err != nil {
		return
	}
	if x.Size() > len(b) {
		t.Fatalf("decoded a %d-byte message from %d bytes", x.Size(), len(b))
	}
	e1 := make([]byte, x.Size())
	x.Marshal(e1)
	y := P(new(T))
	if err := y.Unmarshal(e1); err != nil {
		t.Fatalf("re-decode of own encoding failed: %v", err)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("re-decode differs: %+v vs %+v", x, y)
	}
	e2 := make([]byte, y.Size())
	y.Marshal(e2)
	if !bytes.Equal(e1, e2) {
		t.Fatalf("encoding not stable")
	}
}

func encodeAuth(m authMessage) []byte {
	b := make([]byte, m.Size())
	m.Marshal(b)
	return b
}

func seedAuthNegotiate() [][]byte {
	b := encodeAuth(&AuthNegotiate{TID: 1, Protocols: []AuthProtocolDescriptor{{AuthID: AuthIDDHHMACCHAP,
		HashIDs: []AuthHashID{1, 2, 3}, DHGroupIDs: []AuthDHGroupID{0, 1, 2, 3, 4, 5}}}})
	two := encodeAuth(&AuthNegotiate{TID: 2, SCC: 1, Protocols: []AuthProtocolDescriptor{{AuthID: 1, HashIDs: []AuthHashID{1}}, {AuthID: 9}}})
	bad := bytes.Clone(b)
	bad[10] = 0xFF
	return [][]byte{b, two, bad, b[:40], append(bytes.Clone(b), 0xFF, 0xFF)}
}

// FuzzAuthNegotiate covers AUTH_Negotiate, which a target decodes from Authentication Send.
func FuzzAuthNegotiate(f *testing.F) {
	addSeeds(f, seedAuthNegotiate())
	f.Fuzz(func(t *testing.T, b []byte) { stableAuthEncoding[AuthNegotiate](t, b) })
}

func seedAuthChallenge() [][]byte {
	b := encodeAuth(&AuthChallenge{TID: 1, HashID: AuthHashSHA256, DHGroupID: AuthDHGroupFFDHE2048, SeqNum: 7,
		C1: bytes.Repeat([]byte{1}, 32), DHValue: bytes.Repeat([]byte{2}, 256)})
	null := encodeAuth(&AuthChallenge{TID: 2, HashID: AuthHashSHA512, SeqNum: 9, C1: bytes.Repeat([]byte{3}, 64)})
	return [][]byte{b, null, b[:100], null[:15]}
}

// FuzzAuthChallenge covers DH-HMAC-CHAP_Challenge, which an initiator decodes from
// Authentication Receive.
func FuzzAuthChallenge(f *testing.F) {
	addSeeds(f, seedAuthChallenge())
	f.Fuzz(func(t *testing.T, b []byte) { stableAuthEncoding[AuthChallenge](t, b) })
}

func seedAuthReply() [][]byte {
	b := encodeAuth(&AuthReply{TID: 1, CValid: true, SeqNum: 5, R1: bytes.Repeat([]byte{1}, 48),
		C2: bytes.Repeat([]byte{2}, 48), DHValue: bytes.Repeat([]byte{3}, 384)})
	uni := encodeAuth(&AuthReply{TID: 2, R1: bytes.Repeat([]byte{4}, 32)})
	return [][]byte{b, uni, b[:200], uni[:16]}
}

// FuzzAuthReply covers DH-HMAC-CHAP_Reply, which a target decodes from Authentication Send.
func FuzzAuthReply(f *testing.F) {
	addSeeds(f, seedAuthReply())
	f.Fuzz(func(t *testing.T, b []byte) { stableAuthEncoding[AuthReply](t, b) })
}

func seedAuthSuccess1() [][]byte {
	b := encodeAuth(&AuthSuccess1{TID: 1, HL: 32, RValid: true, R2: bytes.Repeat([]byte{9}, 32)})
	plain := encodeAuth(&AuthSuccess1{TID: 2, HL: 64})
	return [][]byte{b, plain, b[:40]}
}

// FuzzAuthSuccess1 covers DH-HMAC-CHAP_Success1, which an initiator decodes from
// Authentication Receive.
func FuzzAuthSuccess1(f *testing.F) {
	addSeeds(f, seedAuthSuccess1())
	f.Fuzz(func(t *testing.T, b []byte) { stableAuthEncoding[AuthSuccess1](t, b) })
}

func seedAuthSuccess2() [][]byte {
	b := make([]byte, AuthSuccess2Size)
	(&AuthSuccess2{TID: 3}).Marshal(b)
	return [][]byte{b, b[:15]}
}

// FuzzAuthSuccess2 covers DH-HMAC-CHAP_Success2, which a target decodes from
// Authentication Send.
func FuzzAuthSuccess2(f *testing.F) {
	addSeeds(f, seedAuthSuccess2())
	f.Fuzz(func(t *testing.T, b []byte) {
		stableEncoding(t, b, AuthSuccess2Size, (*AuthSuccess2).Unmarshal, (*AuthSuccess2).Marshal)
	})
}

func seedAuthFailure() [][]byte {
	f1 := make([]byte, AuthFailureSize)
	(&AuthFailure{AuthID: AuthMsgFailure1, TID: 4, Reason: AuthFailReasonFailed, Explanation: AuthFailFailed}).Marshal(f1)
	f2 := make([]byte, AuthFailureSize)
	(&AuthFailure{AuthID: AuthMsgFailure2, TID: 5, Reason: AuthFailReasonFailed, Explanation: AuthFailIncorrectPayload}).Marshal(f2)
	return [][]byte{f1, f2, f1[:7]}
}

// FuzzAuthFailure covers AUTH_Failure1 (initiator side) and AUTH_Failure2 (target side).
func FuzzAuthFailure(f *testing.F) {
	addSeeds(f, seedAuthFailure())
	f.Fuzz(func(t *testing.T, b []byte) {
		stableEncoding(t, b, AuthFailureSize, (*AuthFailure).Unmarshal, (*AuthFailure).Marshal)
	})
}

func seedReservation() [][]byte {
	var out [][]byte
	add := func(sel byte, b []byte) { out = append(out, append([]byte{sel}, b...)) }
	k := make([]byte, 16)
	(&ReservationKeys{Current: 1, Second: 2}).Marshal(k)
	add(0, k)
	add(1, k[:8])
	s := ReservationStatus{Gen: 3, RType: ResvWriteExclusive, Controllers: []ResvRegisteredController{{CNTLID: 0xFFFF, RCSTS: 1, RKey: 5}}}
	b := make([]byte, ReservationStatusSize(1, false))
	s.Marshal(b, false)
	add(2, b)
	e := make([]byte, ReservationStatusSize(1, true))
	s.Marshal(e, true)
	add(3, e)
	add(3, e[:70])
	l := make([]byte, ResvNotifyLogSize)
	(&ResvNotifyLog{Count: 1, Type: 2, NSID: 1}).Marshal(l)
	add(4, l)
	return out
}

// FuzzReservation covers the reservation decoders: byte 0 selects Register/Acquire data,
// Release data, the basic or extended Reservation Status data structure, or the
// Reservation Notification log page.
func FuzzReservation(f *testing.F) {
	addSeeds(f, seedReservation())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		sel, b := b[0], b[1:]
		switch sel % 5 {
		case 0, 1:
			need := ResvRegisterDataSize
			if sel%5 == 1 {
				need = ResvReleaseDataSize
			}
			var k ReservationKeys
			if k.Unmarshal(b, need) != nil {
				return
			}
			out := make([]byte, need)
			k.Marshal(out)
			var k2 ReservationKeys
			if err := k2.Unmarshal(out, need); err != nil || k2 != k {
				t.Fatalf("keys round trip: %+v %+v %v", k, k2, err)
			}
		case 2, 3:
			ext := sel%5 == 3
			var s ReservationStatus
			if s.Unmarshal(b, ext) != nil {
				return
			}
			if len(s.Controllers) > int(s.RegCtl) {
				t.Fatalf("%d entries, REGCTL %d", len(s.Controllers), s.RegCtl)
			}
			out := make([]byte, ReservationStatusSize(len(s.Controllers), ext))
			s.Marshal(out, ext)
			var s2 ReservationStatus
			if err := s2.Unmarshal(out, ext); err != nil || len(s2.Controllers) != len(s.Controllers) ||
				s2.Gen != s.Gen || s2.RType != s.RType || s2.PTPLS != s.PTPLS {
				t.Fatalf("status round trip: %v", err)
			}
			for i := range s.Controllers {
				c := s.Controllers[i]
				if !ext {
					clear(c.HostID[8:])
				}
				if s2.Controllers[i] != c {
					t.Fatalf("entry %d: %+v vs %+v", i, s2.Controllers[i], c)
				}
			}
		case 4:
			stableEncoding(t, b, ResvNotifyLogSize, (*ResvNotifyLog).Unmarshal, (*ResvNotifyLog).Marshal)
		}
	})
}
