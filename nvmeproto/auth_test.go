package nvmeproto

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// Golden tests for the DH-HMAC-CHAP messages. Offsets as in the Linux kernel's
// include/linux/nvme.h (struct nvmf_auth_dhchap_*_data) and NVMe Base 2.0 §8.13; every
// expected encoding below is built byte by byte with put(), independently of the encoder.

func TestAuthNegotiateGolden(t *testing.T) {
	// What the Linux host sends: one DH-HMAC-CHAP descriptor, SHA-256/384/512, and the
	// NULL group plus ffdhe2048..8192.
	want := make([]byte, 8+64)
	put(want, 0, 1, AuthTypeCommon)
	put(want, 1, 1, AuthMsgNegotiate)
	put(want, 4, 2, 0xBEEF) // T_ID
	put(want, 6, 1, 0)      // SC_C
	put(want, 7, 1, 1)      // NAPD
	put(want, 8+0, 1, 1)    // AUTHID
	put(want, 8+2, 1, 3)    // HALEN
	put(want, 8+3, 1, 6)    // DHLEN
	for i, v := range []uint64{1, 2, 3} {
		put(want, 8+4+i, 1, v)
	}
	for i, v := range []uint64{0, 1, 2, 3, 4, 5} {
		put(want, 8+34+i, 1, v) // DH IDs start at idlist[30] = descriptor byte 34
	}
	n := AuthNegotiate{TID: 0xBEEF, SCC: AuthSCNone, Protocols: []AuthProtocolDescriptor{{
		AuthID:     AuthIDDHHMACCHAP,
		HashIDs:    []AuthHashID{AuthHashSHA256, AuthHashSHA384, AuthHashSHA512},
		DHGroupIDs: []AuthDHGroupID{AuthDHGroupNull, AuthDHGroupFFDHE2048, AuthDHGroupFFDHE3072, AuthDHGroupFFDHE4096, AuthDHGroupFFDHE6144, AuthDHGroupFFDHE8192},
	}}}
	if n.Size() != 72 {
		t.Fatalf("size %d", n.Size())
	}
	got := make([]byte, n.Size())
	for i := range got {
		got[i] = 0xAA // Marshal must clear reserved bytes
	}
	n.Marshal(got)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	var d AuthNegotiate
	if err := d.Unmarshal(append(want, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	runChecks(t, []offsetCheck{
		{"tid@4", uint64(d.TID), 0xBEEF}, {"sc_c@6", uint64(d.SCC), 0}, {"napd@7", uint64(len(d.Protocols)), 1},
		{"authid@8", uint64(d.Protocols[0].AuthID), 1}, {"halen@10", uint64(len(d.Protocols[0].HashIDs)), 3},
		{"dhlen@11", uint64(len(d.Protocols[0].DHGroupIDs)), 6},
		{"hash[2]@14", uint64(d.Protocols[0].HashIDs[2]), 3}, {"dh[5]@47", uint64(d.Protocols[0].DHGroupIDs[5]), 5},
	})
	if !reflect.DeepEqual(d, n) {
		t.Errorf("round trip %+v", d)
	}

	// Bad input.
	bad := bytes.Clone(want)
	bad[10] = 31
	var fe *FieldError
	if err := d.Unmarshal(bad); !errors.As(err, &fe) || fe.Offset != 10 {
		t.Errorf("HALEN 31: %v", err)
	}
	bad = bytes.Clone(want)
	bad[11] = 31
	if err := d.Unmarshal(bad); !errors.As(err, &fe) || fe.Offset != 11 {
		t.Errorf("DHLEN 31: %v", err)
	}
	var es *ErrShort
	if err := d.Unmarshal(want[:71]); !errors.As(err, &es) {
		t.Errorf("truncated descriptor: %v", err)
	}
	bad = bytes.Clone(want)
	bad[0] = AuthTypeDHHMACCHAP
	if err := d.Unmarshal(bad); !errors.As(err, &fe) || fe.Offset != 0 {
		t.Errorf("wrong AUTH_TYPE: %v", err)
	}
	bad = bytes.Clone(want)
	bad[1] = AuthMsgReply
	if err := d.Unmarshal(bad); !errors.As(err, &fe) || fe.Offset != 1 {
		t.Errorf("wrong AUTH_ID: %v", err)
	}
}

func TestAuthChallengeGolden(t *testing.T) {
	c1 := bytes.Repeat([]byte{0xC1}, 48)
	dh := bytes.Repeat([]byte{0xD7}, 384)
	want := make([]byte, 16+48+384)
	put(want, 0, 1, AuthTypeDHHMACCHAP)
	put(want, 1, 1, AuthMsgChallenge)
	put(want, 4, 2, 0x0102)      // T_ID
	put(want, 6, 1, 48)          // HL
	put(want, 8, 1, 2)           // HASHID sha384
	put(want, 9, 1, 2)           // DHGID ffdhe3072
	put(want, 10, 2, 384)        // DHVLEN
	put(want, 12, 4, 0xA1B2C3D4) // SEQNUM
	copy(want[16:], c1)
	copy(want[16+48:], dh)
	c := AuthChallenge{TID: 0x0102, HashID: AuthHashSHA384, DHGroupID: AuthDHGroupFFDHE3072, SeqNum: 0xA1B2C3D4, C1: c1, DHValue: dh}
	got := bytes.Repeat([]byte{0xAA}, c.Size())
	c.Marshal(got)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	var d AuthChallenge
	if err := d.Unmarshal(append(bytes.Clone(want), make([]byte, 100)...)); err != nil {
		t.Fatal(err)
	}
	runChecks(t, []offsetCheck{
		{"tid@4", uint64(d.TID), 0x0102}, {"hl@6", uint64(len(d.C1)), 48}, {"hashid@8", uint64(d.HashID), 2},
		{"dhgid@9", uint64(d.DHGroupID), 2}, {"dhvlen@10", uint64(len(d.DHValue)), 384}, {"seqnum@12", uint64(d.SeqNum), 0xA1B2C3D4},
		{"cval@16", uint64(d.C1[0]), 0xC1}, {"dhv@64", uint64(d.DHValue[0]), 0xD7},
	})
	if !reflect.DeepEqual(d, c) {
		t.Error("round trip")
	}
	// NULL group: no DH value.
	c = AuthChallenge{TID: 1, HashID: AuthHashSHA256, C1: c1[:32]}
	got = make([]byte, c.Size())
	c.Marshal(got)
	if len(got) != 48 || get(got, 10, 2) != 0 {
		t.Errorf("null group challenge %x", got)
	}
	var es *ErrShort
	if err := d.Unmarshal(want[:len(want)-1]); !errors.As(err, &es) {
		t.Errorf("truncated DH value: %v", err)
	}
	if err := d.Unmarshal(want[:15]); !errors.As(err, &es) {
		t.Errorf("truncated header: %v", err)
	}
	// The input may be reused: decoded fields do not alias it.
	buf := bytes.Clone(want)
	_ = d.Unmarshal(buf)
	clear(buf)
	if d.C1[0] != 0xC1 || d.DHValue[0] != 0xD7 {
		t.Error("decoded fields alias the input")
	}
}

func TestAuthReplyGolden(t *testing.T) {
	r1 := bytes.Repeat([]byte{0x11}, 32)
	c2 := bytes.Repeat([]byte{0x22}, 32)
	dh := bytes.Repeat([]byte{0xD7}, 256)
	want := make([]byte, 16+64+256)
	put(want, 0, 1, AuthTypeDHHMACCHAP)
	put(want, 1, 1, AuthMsgReply)
	put(want, 4, 2, 0x0304)      // T_ID
	put(want, 6, 1, 32)          // HL
	put(want, 8, 1, 1)           // CVALID
	put(want, 10, 2, 256)        // DHVLEN
	put(want, 12, 4, 0x01020304) // SEQNUM (S2)
	copy(want[16:], r1)
	copy(want[48:], c2)
	copy(want[80:], dh)
	r := AuthReply{TID: 0x0304, CValid: true, SeqNum: 0x01020304, R1: r1, C2: c2, DHValue: dh}
	got := bytes.Repeat([]byte{0xAA}, r.Size())
	r.Marshal(got)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	var d AuthReply
	if err := d.Unmarshal(append(bytes.Clone(want), 0)); err != nil {
		t.Fatal(err)
	}
	runChecks(t, []offsetCheck{
		{"tid@4", uint64(d.TID), 0x0304}, {"hl@6", uint64(len(d.R1)), 32}, {"cvalid@8", uint64(b2u8(d.CValid)), 1},
		{"dhvlen@10", uint64(len(d.DHValue)), 256}, {"seqnum@12", uint64(d.SeqNum), 0x01020304},
		{"rval@16", uint64(d.R1[0]), 0x11}, {"c2@16+hl", uint64(d.C2[0]), 0x22}, {"dhv@16+2hl", uint64(d.DHValue[0]), 0xD7},
	})
	if !reflect.DeepEqual(d, r) {
		t.Error("round trip")
	}
	// Unidirectional: C2 still occupies HL zero bytes, SEQNUM 0, CVALID 0.
	r = AuthReply{TID: 5, R1: r1}
	got = bytes.Repeat([]byte{0xAA}, r.Size())
	r.Marshal(got)
	if len(got) != 16+64 || got[8] != 0 || get(got, 12, 4) != 0 || !bytes.Equal(got[48:80], make([]byte, 32)) {
		t.Errorf("unidirectional reply %x", got)
	}
	var es *ErrShort
	if err := d.Unmarshal(want[:16+64+255]); !errors.As(err, &es) {
		t.Errorf("truncated DH value: %v", err)
	}
}

func TestAuthSuccessFailureGolden(t *testing.T) {
	r2 := bytes.Repeat([]byte{0x33}, 64)
	want := make([]byte, 16+64)
	put(want, 0, 1, AuthTypeDHHMACCHAP)
	put(want, 1, 1, AuthMsgSuccess1)
	put(want, 4, 2, 0x0506)
	put(want, 6, 1, 64) // HL
	put(want, 8, 1, 1)  // RVALID
	copy(want[16:], r2)
	s := AuthSuccess1{TID: 0x0506, HL: 64, RValid: true, R2: r2}
	got := bytes.Repeat([]byte{0xAA}, s.Size())
	s.Marshal(got)
	if !bytes.Equal(got, want) {
		t.Fatalf("success1 encoding\n got %x\nwant %x", got, want)
	}
	var d AuthSuccess1
	if err := d.Unmarshal(want); err != nil || !reflect.DeepEqual(d, s) {
		t.Fatalf("success1 round trip: %v %+v", err, d)
	}
	runChecks(t, []offsetCheck{{"tid@4", uint64(d.TID), 0x0506}, {"hl@6", uint64(d.HL), 64}, {"rvalid@8", uint64(b2u8(d.RValid)), 1}, {"rval@16", uint64(d.R2[63]), 0x33}})
	// Without R2: 16 bytes, HL still set (as the Linux target sends it).
	s = AuthSuccess1{TID: 7, HL: 32}
	got = make([]byte, s.Size())
	s.Marshal(got)
	if len(got) != 16 || got[6] != 32 || got[8] != 0 {
		t.Errorf("success1 without R2 %x", got)
	}
	if err := d.Unmarshal(got); err != nil || d.RValid || d.R2 != nil || d.HL != 32 {
		t.Errorf("success1 without R2 decoded %+v %v", d, err)
	}
	var es *ErrShort
	if err := d.Unmarshal(want[:79]); !errors.As(err, &es) {
		t.Errorf("truncated R2: %v", err)
	}

	want2 := make([]byte, 16)
	put(want2, 0, 1, AuthTypeDHHMACCHAP)
	put(want2, 1, 1, AuthMsgSuccess2)
	put(want2, 4, 2, 0x0708)
	s2 := AuthSuccess2{TID: 0x0708}
	got = bytes.Repeat([]byte{0xAA}, AuthSuccess2Size)
	s2.Marshal(got)
	if !bytes.Equal(got, want2) {
		t.Errorf("success2 %x", got)
	}
	var d2 AuthSuccess2
	if err := d2.Unmarshal(want2); err != nil || d2 != s2 {
		t.Errorf("success2 round trip %v", err)
	}
	if err := d2.Unmarshal(want2[:15]); !errors.As(err, &es) {
		t.Errorf("short success2: %v", err)
	}

	for _, id := range []uint8{AuthMsgFailure1, AuthMsgFailure2} {
		want := make([]byte, 8)
		put(want, 0, 1, AuthTypeCommon)
		put(want, 1, 1, uint64(id))
		put(want, 4, 2, 0x090A)
		put(want, 6, 1, 1) // reason code: authentication failure
		put(want, 7, 1, 7) // explanation: incorrect protocol message
		f := AuthFailure{AuthID: id, TID: 0x090A, Reason: AuthFailReasonFailed, Explanation: AuthFailIncorrectProtocol}
		got := bytes.Repeat([]byte{0xAA}, AuthFailureSize)
		f.Marshal(got)
		if !bytes.Equal(got, want) {
			t.Errorf("failure %#x: %x", id, got)
		}
		var d AuthFailure
		if err := d.Unmarshal(want); err != nil || d != f {
			t.Errorf("failure %#x round trip %v", id, err)
		}
	}
	var f AuthFailure
	var fe *FieldError
	if err := f.Unmarshal([]byte{0, AuthMsgNegotiate, 0, 0, 0, 0, 1, 1}); !errors.As(err, &fe) || fe.Offset != 1 {
		t.Errorf("failure with Negotiate's AUTH_ID: %v", err)
	}
	if err := f.Unmarshal([]byte{1, AuthMsgFailure1, 0, 0, 0, 0, 1, 1}); !errors.As(err, &fe) || fe.Offset != 0 {
		t.Errorf("failure with AUTH_TYPE 1: %v", err)
	}
}

func TestAuthIDs(t *testing.T) {
	for _, c := range []struct {
		h    AuthHashID
		size int
		name string
	}{{1, 32, "sha256"}, {2, 48, "sha384"}, {3, 64, "sha512"}, {0, 0, "hash 0x00"}, {4, 0, "hash 0x04"}} {
		if c.h.Size() != c.size || c.h.String() != c.name {
			t.Errorf("hash %d: %d %q", c.h, c.h.Size(), c.h.String())
		}
	}
	for _, c := range []struct {
		g     AuthDHGroupID
		size  int
		name  string
		valid bool
	}{{0, 0, "null", true}, {1, 256, "ffdhe2048", true}, {2, 384, "ffdhe3072", true}, {3, 512, "ffdhe4096", true},
		{4, 768, "ffdhe6144", true}, {5, 1024, "ffdhe8192", true}, {6, 0, "DH group 0x06", false}} {
		if c.g.ValueSize() != c.size || c.g.String() != c.name || c.g.Valid() != c.valid {
			t.Errorf("group %d: %d %q %v", c.g, c.g.ValueSize(), c.g.String(), c.g.Valid())
		}
	}
	for e, name := range map[AuthFailExplanation]string{1: "authentication failed", 2: "authentication protocol not usable",
		3: "secure channel concatenation mismatch", 4: "hash function not usable", 5: "DH group not usable",
		6: "incorrect payload", 7: "incorrect protocol message", 8: "reason code explanation 0x08"} {
		if e.String() != name {
			t.Errorf("explanation %d: %q", e, e.String())
		}
	}
	if AuthMessageName(0, 0) != "AUTH_Negotiate" || AuthMessageName(1, 2) != "DH-HMAC-CHAP_Reply" ||
		AuthMessageName(0, 0xF1) != "AUTH_Failure1" || AuthMessageName(1, 0xF1) != "authentication message 01h/f1h" {
		t.Error("AuthMessageName")
	}
	// AUTHREQ bits of the Connect response (DW0 bits 31:16).
	if AuthReqATR != 2 || AuthReqASCR != 4 {
		t.Error("AUTHREQ bits")
	}
}

// TestAuthOversizedFields: fields longer than their length byte can say are truncated,
// and Size says what Marshal writes — no byte of a reused buffer past the message is left
// for a reader of Size() bytes, and the decoded message has the same Size.
func TestAuthOversizedFields(t *testing.T) {
	protos := make([]AuthProtocolDescriptor, 300)
	for i := range protos {
		protos[i] = AuthProtocolDescriptor{AuthID: AuthTypeDHHMACCHAP, HashIDs: []AuthHashID{AuthHashSHA256}}
	}
	msgs := []struct {
		name string
		m    interface {
			Size() int
			Marshal([]byte)
		}
		decode func([]byte) (int, error)
	}{
		{"negotiate with 300 descriptors", &AuthNegotiate{TID: 1, Protocols: protos}, func(b []byte) (int, error) {
			var n AuthNegotiate
			err := n.Unmarshal(b)
			return n.Size(), err
		}},
		{"challenge with a 300-byte C1", &AuthChallenge{TID: 2, C1: make([]byte, 300), DHValue: make([]byte, 70000)}, func(b []byte) (int, error) {
			var c AuthChallenge
			err := c.Unmarshal(b)
			return c.Size(), err
		}},
		{"reply with a 300-byte R1", &AuthReply{TID: 3, R1: make([]byte, 300), DHValue: make([]byte, 70000)}, func(b []byte) (int, error) {
			var r AuthReply
			err := r.Unmarshal(b)
			return r.Size(), err
		}},
	}
	for _, tc := range msgs {
		n := tc.m.Size()
		b := bytes.Repeat([]byte{0xEE}, n+16)
		tc.m.Marshal(b)
		if !bytes.Equal(b[n:], bytes.Repeat([]byte{0xEE}, 16)) {
			t.Errorf("%s: Marshal wrote past Size() = %d", tc.name, n)
		}
		got, err := tc.decode(b[:n])
		if err != nil {
			t.Errorf("%s: decoding what Marshal wrote into Size() = %d bytes: %v", tc.name, n, err)
			continue
		}
		if got != n {
			t.Errorf("%s: Size() %d, the decoded message's %d (Marshal wrote less than Size says)", tc.name, n, got)
		}
	}
	// SC_C as the Linux host sends it (NVME_AUTH_SECP_NEWTLSPSK, _REPLACETLSPSK).
	if AuthSCNone != 0 || AuthSCNewTLSPSK != 0x02 || AuthSCReplaceTLSPSK != 0x03 {
		t.Errorf("SC_C values %#x %#x %#x, want 0 2 3", AuthSCNone, AuthSCNewTLSPSK, AuthSCReplaceTLSPSK)
	}
}
