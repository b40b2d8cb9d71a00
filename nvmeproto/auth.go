package nvmeproto

import "fmt"

// In-band authentication messages (NVMe Base 2.0 §8.13, "DH-HMAC-CHAP"), carried as the
// data of Authentication Send (host → controller) and Authentication Receive (controller →
// host) with SECP AuthSECPDHHMACCHAP. Every message starts with the 6-byte
// AuthMessageHeader. Layouts (byte offsets, little-endian):
//
//	AUTH_Negotiate       0 type 00h · 1 id 00h · 4 T_ID · 6 SC_C · 7 NAPD · 8.. NAPD 64-byte
//	                     protocol descriptors: 0 AUTHID · 2 HALEN · 3 DHLEN · 4..33 hash IDs ·
//	                     34..63 DH group IDs
//	DH-HMAC-CHAP_Challenge 0 type 01h · 1 id 01h · 4 T_ID · 6 HL · 8 HASHID · 9 DHGID ·
//	                     10 DHVLEN · 12 SEQNUM · 16 C1 (HL bytes) · DH value (DHVLEN bytes)
//	DH-HMAC-CHAP_Reply   0 type 01h · 1 id 02h · 4 T_ID · 6 HL · 8 CVALID · 10 DHVLEN ·
//	                     12 SEQNUM · 16 R1 (HL) · C2 (HL, present even when CVALID is 0) ·
//	                     DH value (DHVLEN)
//	DH-HMAC-CHAP_Success1 0 type 01h · 1 id 03h · 4 T_ID · 6 HL · 8 RVALID · 16 R2 (HL bytes,
//	                     only when RVALID)
//	DH-HMAC-CHAP_Success2 0 type 01h · 1 id 04h · 4 T_ID · 16 bytes in all
//	AUTH_Failure1/2      0 type 00h · 1 id F1h/F0h · 4 T_ID · 6 reason code · 7 explanation
//
// Decoders accept trailing bytes after the message (a host receives into a buffer as
// large as its allocation length, and a controller pads its answer to it) and copy every
// variable-length field out of the input, so the input buffer may be reused.

// Authentication protocol identifiers carried in the Authentication Send/Receive SQE.
const (
	AuthSECPDHHMACCHAP = 0xE9 // SECP: NVMe in-band authentication (DH-HMAC-CHAP)
	AuthSPSP0          = 0x01 // SPSP0 for SECP E9h
	AuthSPSP1          = 0x01 // SPSP1 for SECP E9h
)

// AuthMessageHeaderSize is the size of the header that starts every DH-HMAC-CHAP message.
const AuthMessageHeaderSize = 6

// AuthMessageHeader is the common header of the in-band authentication messages carried
// by Authentication Send/Receive: byte 0 AUTH_TYPE, 1 AUTH_ID, 4..5 T_ID.
type AuthMessageHeader struct {
	AuthType uint8  // AuthTypeCommon or AuthTypeDHHMACCHAP
	AuthID   uint8  // AuthMsg* message identifier
	TID      uint16 // transaction identifier
}

// AUTH_TYPE and AUTH_ID values of DH-HMAC-CHAP messages. Negotiate and the two Failure
// messages are common messages (AUTH_TYPE 00h); the others are DH-HMAC-CHAP messages.
const (
	AuthTypeCommon     = 0x00
	AuthTypeDHHMACCHAP = 0x01

	AuthMsgNegotiate = 0x00
	AuthMsgChallenge = 0x01
	AuthMsgReply     = 0x02
	AuthMsgSuccess1  = 0x03
	AuthMsgSuccess2  = 0x04
	AuthMsgFailure2  = 0xF0
	AuthMsgFailure1  = 0xF1
)

// Marshal encodes the header into the first AuthMessageHeaderSize bytes of b.
func (h *AuthMessageHeader) Marshal(b []byte) {
	b = b[:AuthMessageHeaderSize]
	b[0], b[1], b[2], b[3] = h.AuthType, h.AuthID, 0, 0
	le.PutUint16(b[4:], h.TID)
}

// Unmarshal decodes the header from the first AuthMessageHeaderSize bytes of b.
func (h *AuthMessageHeader) Unmarshal(b []byte) error {
	if err := short("authentication message header", AuthMessageHeaderSize, b); err != nil {
		return err
	}
	h.AuthType, h.AuthID, h.TID = b[0], b[1], le.Uint16(b[4:])
	return nil
}

// AuthMessageName names the message with the given AUTH_TYPE and AUTH_ID, for logs.
func AuthMessageName(authType, authID uint8) string {
	switch {
	case authType == AuthTypeCommon && authID == AuthMsgNegotiate:
		return "AUTH_Negotiate"
	case authType == AuthTypeCommon && authID == AuthMsgFailure1:
		return "AUTH_Failure1"
	case authType == AuthTypeCommon && authID == AuthMsgFailure2:
		return "AUTH_Failure2"
	case authType == AuthTypeDHHMACCHAP && authID == AuthMsgChallenge:
		return "DH-HMAC-CHAP_Challenge"
	case authType == AuthTypeDHHMACCHAP && authID == AuthMsgReply:
		return "DH-HMAC-CHAP_Reply"
	case authType == AuthTypeDHHMACCHAP && authID == AuthMsgSuccess1:
		return "DH-HMAC-CHAP_Success1"
	case authType == AuthTypeDHHMACCHAP && authID == AuthMsgSuccess2:
		return "DH-HMAC-CHAP_Success2"
	}
	return fmt.Sprintf("authentication message %02xh/%02xh", authType, authID)
}

// AuthHashID identifies a hash function of DH-HMAC-CHAP (the HASHID of a Challenge and
// the hash identifier list of a Negotiate protocol descriptor).
type AuthHashID uint8

// Hash functions of DH-HMAC-CHAP.
const (
	AuthHashSHA256 AuthHashID = 0x01
	AuthHashSHA384 AuthHashID = 0x02
	AuthHashSHA512 AuthHashID = 0x03
)

// Size returns the digest size in bytes of h (the HL of its messages), 0 if h is not a
// defined hash function.
func (h AuthHashID) Size() int {
	switch h {
	case AuthHashSHA256:
		return 32
	case AuthHashSHA384:
		return 48
	case AuthHashSHA512:
		return 64
	}
	return 0
}

func (h AuthHashID) String() string {
	switch h {
	case AuthHashSHA256:
		return "sha256"
	case AuthHashSHA384:
		return "sha384"
	case AuthHashSHA512:
		return "sha512"
	}
	return fmt.Sprintf("hash %#02x", uint8(h))
}

// AuthDHGroupID identifies a Diffie-Hellman group of DH-HMAC-CHAP (the DHGID of a
// Challenge and the DH group identifier list of a Negotiate protocol descriptor).
type AuthDHGroupID uint8

// DH groups of DH-HMAC-CHAP: the NULL group (no DH exchange) and the RFC 7919 groups.
const (
	AuthDHGroupNull      AuthDHGroupID = 0x00
	AuthDHGroupFFDHE2048 AuthDHGroupID = 0x01
	AuthDHGroupFFDHE3072 AuthDHGroupID = 0x02
	AuthDHGroupFFDHE4096 AuthDHGroupID = 0x03
	AuthDHGroupFFDHE6144 AuthDHGroupID = 0x04
	AuthDHGroupFFDHE8192 AuthDHGroupID = 0x05
)

// ValueSize returns the size in bytes of a DH value (public value) of group g: the size of
// its prime, 0 for the NULL group and for groups that are not defined.
func (g AuthDHGroupID) ValueSize() int {
	switch g {
	case AuthDHGroupFFDHE2048:
		return 256
	case AuthDHGroupFFDHE3072:
		return 384
	case AuthDHGroupFFDHE4096:
		return 512
	case AuthDHGroupFFDHE6144:
		return 768
	case AuthDHGroupFFDHE8192:
		return 1024
	}
	return 0
}

// Valid reports whether g is a defined DH group (the NULL group included).
func (g AuthDHGroupID) Valid() bool { return g == AuthDHGroupNull || g.ValueSize() != 0 }

func (g AuthDHGroupID) String() string {
	switch g {
	case AuthDHGroupNull:
		return "null"
	case AuthDHGroupFFDHE2048:
		return "ffdhe2048"
	case AuthDHGroupFFDHE3072:
		return "ffdhe3072"
	case AuthDHGroupFFDHE4096:
		return "ffdhe4096"
	case AuthDHGroupFFDHE6144:
		return "ffdhe6144"
	case AuthDHGroupFFDHE8192:
		return "ffdhe8192"
	}
	return fmt.Sprintf("DH group %#02x", uint8(g))
}

// Secure channel concatenation values (SC_C of AUTH_Negotiate).
const (
	AuthSCNone          = 0x00 // no secure channel concatenation
	AuthSCNewTLSPSK     = 0x02 // generate a TLS PSK for a new secure channel
	AuthSCReplaceTLSPSK = 0x03 // replace the TLS PSK of the current secure channel
)

// Sizes of the fixed parts of the authentication messages.
const (
	AuthNegotiateHeaderSize = 8  // AUTH_Negotiate up to its protocol descriptors
	AuthProtocolDescSize    = 64 // one AUTH_Negotiate protocol descriptor
	AuthChallengeHeaderSize = 16 // Challenge up to C1
	AuthReplyHeaderSize     = 16 // Reply up to R1
	AuthSuccess1HeaderSize  = 16 // Success1 up to R2
	AuthSuccess2Size        = 16
	AuthFailureSize         = 8

	// AuthIDDHHMACCHAP is the AUTHID of a DH-HMAC-CHAP protocol descriptor.
	AuthIDDHHMACCHAP = 0x01
	// AuthMaxHashIDs and AuthMaxDHGroupIDs bound HALEN and DHLEN of a descriptor.
	AuthMaxHashIDs    = 30
	AuthMaxDHGroupIDs = 30
)

// AuthProtocolDescriptor is one 64-byte protocol descriptor of AUTH_Negotiate: byte 0
// AUTHID, 2 HALEN, 3 DHLEN, 4..33 the hash function identifiers (HALEN used), 34..63 the
// DH group identifiers (DHLEN used).
type AuthProtocolDescriptor struct {
	AuthID     uint8 // AuthIDDHHMACCHAP
	HashIDs    []AuthHashID
	DHGroupIDs []AuthDHGroupID
}

// AuthNegotiate is the AUTH_Negotiate message (host → controller), which starts an
// authentication transaction and lists what the host supports.
type AuthNegotiate struct {
	TID       uint16
	SCC       uint8 // AuthSC*
	Protocols []AuthProtocolDescriptor
}

// Size returns the encoded size of n.
func (n *AuthNegotiate) Size() int {
	return AuthNegotiateHeaderSize + AuthProtocolDescSize*min(len(n.Protocols), 255)
}

// Marshal encodes n into the first n.Size() bytes of b. Identifier lists longer than 30
// are truncated, at most 255 descriptors are written.
func (n *AuthNegotiate) Marshal(b []byte) {
	protos := n.Protocols
	if len(protos) > 255 {
		protos = protos[:255]
	}
	b = b[:AuthNegotiateHeaderSize+AuthProtocolDescSize*len(protos)]
	clear(b)
	(&AuthMessageHeader{AuthType: AuthTypeCommon, AuthID: AuthMsgNegotiate, TID: n.TID}).Marshal(b)
	b[6], b[7] = n.SCC, uint8(len(protos))
	for i, p := range protos {
		d := b[AuthNegotiateHeaderSize+i*AuthProtocolDescSize:][:AuthProtocolDescSize]
		d[0] = p.AuthID
		hs, gs := p.HashIDs, p.DHGroupIDs
		if len(hs) > AuthMaxHashIDs {
			hs = hs[:AuthMaxHashIDs]
		}
		if len(gs) > AuthMaxDHGroupIDs {
			gs = gs[:AuthMaxDHGroupIDs]
		}
		d[2], d[3] = uint8(len(hs)), uint8(len(gs))
		for j, h := range hs {
			d[4+j] = uint8(h)
		}
		for j, g := range gs {
			d[4+AuthMaxHashIDs+j] = uint8(g)
		}
	}
}

// Unmarshal decodes an AUTH_Negotiate message. It checks AUTH_TYPE/AUTH_ID, that all NAPD
// descriptors are present and that no HALEN or DHLEN exceeds 30.
func (n *AuthNegotiate) Unmarshal(b []byte) error {
	const what = "AUTH_Negotiate"
	if err := short(what, AuthNegotiateHeaderSize, b); err != nil {
		return err
	}
	if err := checkAuthHeader(what, b, AuthTypeCommon, AuthMsgNegotiate); err != nil {
		return err
	}
	napd := int(b[7])
	if err := short(what, AuthNegotiateHeaderSize+napd*AuthProtocolDescSize, b); err != nil {
		return err
	}
	n.TID, n.SCC = le.Uint16(b[4:]), b[6]
	n.Protocols = make([]AuthProtocolDescriptor, napd)
	for i := range n.Protocols {
		off := AuthNegotiateHeaderSize + i*AuthProtocolDescSize
		d := b[off : off+AuthProtocolDescSize]
		halen, dhlen := int(d[2]), int(d[3])
		if halen > AuthMaxHashIDs {
			return &FieldError{Struct: what, Field: "HALEN", Offset: off + 2, Reason: fmt.Sprintf("%d hash identifiers, at most %d fit", halen, AuthMaxHashIDs)}
		}
		if dhlen > AuthMaxDHGroupIDs {
			return &FieldError{Struct: what, Field: "DHLEN", Offset: off + 3, Reason: fmt.Sprintf("%d DH group identifiers, at most %d fit", dhlen, AuthMaxDHGroupIDs)}
		}
		p := AuthProtocolDescriptor{AuthID: d[0], HashIDs: make([]AuthHashID, halen), DHGroupIDs: make([]AuthDHGroupID, dhlen)}
		for j := range p.HashIDs {
			p.HashIDs[j] = AuthHashID(d[4+j])
		}
		for j := range p.DHGroupIDs {
			p.DHGroupIDs[j] = AuthDHGroupID(d[4+AuthMaxHashIDs+j])
		}
		n.Protocols[i] = p
	}
	return nil
}

// AuthChallenge is the DH-HMAC-CHAP_Challenge message (controller → host).
type AuthChallenge struct {
	TID       uint16
	HashID    AuthHashID
	DHGroupID AuthDHGroupID
	SeqNum    uint32 // S1
	C1        []byte // challenge, HL bytes
	DHValue   []byte // controller's DH public value; empty for the NULL group
}

// Size returns the encoded size of c.
func (c *AuthChallenge) Size() int {
	return AuthChallengeHeaderSize + min(len(c.C1), 0xFF) + min(len(c.DHValue), 0xFFFF)
}

// Marshal encodes c into the first c.Size() bytes of b. HL is len(c.C1) (at most 255) and
// DHVLEN len(c.DHValue) (at most 65535).
func (c *AuthChallenge) Marshal(b []byte) {
	c1, dh := trunc(c.C1, 0xFF), trunc(c.DHValue, 0xFFFF)
	b = b[:AuthChallengeHeaderSize+len(c1)+len(dh)]
	clear(b[:AuthChallengeHeaderSize])
	(&AuthMessageHeader{AuthType: AuthTypeDHHMACCHAP, AuthID: AuthMsgChallenge, TID: c.TID}).Marshal(b)
	b[6], b[8], b[9] = uint8(len(c1)), uint8(c.HashID), uint8(c.DHGroupID)
	le.PutUint16(b[10:], uint16(len(dh)))
	le.PutUint32(b[12:], c.SeqNum)
	copy(b[AuthChallengeHeaderSize:], c1)
	copy(b[AuthChallengeHeaderSize+len(c1):], dh)
}

// Unmarshal decodes a DH-HMAC-CHAP_Challenge message: it checks AUTH_TYPE/AUTH_ID and
// that HL and DHVLEN bytes follow the header. It does not judge HASHID, DHGID or HL.
func (c *AuthChallenge) Unmarshal(b []byte) error {
	const what = "DH-HMAC-CHAP_Challenge"
	if err := short(what, AuthChallengeHeaderSize, b); err != nil {
		return err
	}
	if err := checkAuthHeader(what, b, AuthTypeDHHMACCHAP, AuthMsgChallenge); err != nil {
		return err
	}
	hl, dhvlen := int(b[6]), int(le.Uint16(b[10:]))
	if err := short(what, AuthChallengeHeaderSize+hl+dhvlen, b); err != nil {
		return err
	}
	c.TID, c.HashID, c.DHGroupID, c.SeqNum = le.Uint16(b[4:]), AuthHashID(b[8]), AuthDHGroupID(b[9]), le.Uint32(b[12:])
	c.C1 = clone(b[AuthChallengeHeaderSize : AuthChallengeHeaderSize+hl])
	c.DHValue = clone(b[AuthChallengeHeaderSize+hl : AuthChallengeHeaderSize+hl+dhvlen])
	return nil
}

// AuthReply is the DH-HMAC-CHAP_Reply message (host → controller).
type AuthReply struct {
	TID     uint16
	CValid  bool   // C2 is a challenge for bidirectional authentication (byte 8 bit 0)
	SeqNum  uint32 // S2; 0 when the host does not authenticate the controller
	R1      []byte // the host's response, HL bytes
	C2      []byte // the host's challenge; always HL bytes on the wire (zeros unless CValid)
	DHValue []byte // host's DH public value; empty for the NULL group
}

// Size returns the encoded size of r.
func (r *AuthReply) Size() int {
	return AuthReplyHeaderSize + 2*min(len(r.R1), 0xFF) + min(len(r.DHValue), 0xFFFF)
}

// Marshal encodes r into the first r.Size() bytes of b. HL is len(r.R1); C2 is written
// into its HL bytes (zero-padded or truncated to HL).
func (r *AuthReply) Marshal(b []byte) {
	r1, dh := trunc(r.R1, 0xFF), trunc(r.DHValue, 0xFFFF)
	hl := len(r1)
	b = b[:AuthReplyHeaderSize+2*hl+len(dh)]
	clear(b[:AuthReplyHeaderSize+2*hl])
	(&AuthMessageHeader{AuthType: AuthTypeDHHMACCHAP, AuthID: AuthMsgReply, TID: r.TID}).Marshal(b)
	b[6], b[8] = uint8(hl), b2u8(r.CValid)
	le.PutUint16(b[10:], uint16(len(dh)))
	le.PutUint32(b[12:], r.SeqNum)
	copy(b[AuthReplyHeaderSize:], r1)
	copy(b[AuthReplyHeaderSize+hl:AuthReplyHeaderSize+2*hl], r.C2)
	copy(b[AuthReplyHeaderSize+2*hl:], dh)
}

// Unmarshal decodes a DH-HMAC-CHAP_Reply message: it checks AUTH_TYPE/AUTH_ID and that
// 2×HL + DHVLEN bytes follow the header.
func (r *AuthReply) Unmarshal(b []byte) error {
	const what = "DH-HMAC-CHAP_Reply"
	if err := short(what, AuthReplyHeaderSize, b); err != nil {
		return err
	}
	if err := checkAuthHeader(what, b, AuthTypeDHHMACCHAP, AuthMsgReply); err != nil {
		return err
	}
	hl, dhvlen := int(b[6]), int(le.Uint16(b[10:]))
	if err := short(what, AuthReplyHeaderSize+2*hl+dhvlen, b); err != nil {
		return err
	}
	r.TID, r.CValid, r.SeqNum = le.Uint16(b[4:]), b[8]&1 != 0, le.Uint32(b[12:])
	p := b[AuthReplyHeaderSize:]
	r.R1, r.C2, r.DHValue = clone(p[:hl]), clone(p[hl:2*hl]), clone(p[2*hl:2*hl+dhvlen])
	return nil
}

// AuthSuccess1 is the DH-HMAC-CHAP_Success1 message (controller → host): the host is
// authenticated; R2 answers the host's challenge when the host asked for it.
type AuthSuccess1 struct {
	TID    uint16
	HL     uint8  // hash length of the transaction (sent even without R2)
	RValid bool   // R2 is present (byte 8 bit 0)
	R2     []byte // the controller's response, HL bytes, only when RValid
}

// Size returns the encoded size of s.
func (s *AuthSuccess1) Size() int {
	if s.RValid {
		return AuthSuccess1HeaderSize + int(s.HL)
	}
	return AuthSuccess1HeaderSize
}

// Marshal encodes s into the first s.Size() bytes of b; with RValid, R2 is written into
// HL bytes (zero-padded or truncated).
func (s *AuthSuccess1) Marshal(b []byte) {
	b = b[:s.Size()]
	clear(b)
	(&AuthMessageHeader{AuthType: AuthTypeDHHMACCHAP, AuthID: AuthMsgSuccess1, TID: s.TID}).Marshal(b)
	b[6], b[8] = s.HL, b2u8(s.RValid)
	if s.RValid {
		copy(b[AuthSuccess1HeaderSize:], s.R2)
	}
}

// Unmarshal decodes a DH-HMAC-CHAP_Success1 message: it checks AUTH_TYPE/AUTH_ID and,
// with RVALID, that HL bytes of R2 follow the header.
func (s *AuthSuccess1) Unmarshal(b []byte) error {
	const what = "DH-HMAC-CHAP_Success1"
	if err := short(what, AuthSuccess1HeaderSize, b); err != nil {
		return err
	}
	if err := checkAuthHeader(what, b, AuthTypeDHHMACCHAP, AuthMsgSuccess1); err != nil {
		return err
	}
	s.TID, s.HL, s.RValid, s.R2 = le.Uint16(b[4:]), b[6], b[8]&1 != 0, nil
	if s.RValid {
		if err := short(what, AuthSuccess1HeaderSize+int(s.HL), b); err != nil {
			return err
		}
		s.R2 = clone(b[AuthSuccess1HeaderSize : AuthSuccess1HeaderSize+int(s.HL)])
	}
	return nil
}

// AuthSuccess2 is the DH-HMAC-CHAP_Success2 message (host → controller): the controller
// is authenticated (sent only in bidirectional authentication).
type AuthSuccess2 struct {
	TID uint16
}

// Marshal encodes s into the first AuthSuccess2Size bytes of b.
func (s *AuthSuccess2) Marshal(b []byte) {
	b = b[:AuthSuccess2Size]
	clear(b)
	(&AuthMessageHeader{AuthType: AuthTypeDHHMACCHAP, AuthID: AuthMsgSuccess2, TID: s.TID}).Marshal(b)
}

// Unmarshal decodes a DH-HMAC-CHAP_Success2 message.
func (s *AuthSuccess2) Unmarshal(b []byte) error {
	const what = "DH-HMAC-CHAP_Success2"
	if err := short(what, AuthSuccess2Size, b); err != nil {
		return err
	}
	if err := checkAuthHeader(what, b, AuthTypeDHHMACCHAP, AuthMsgSuccess2); err != nil {
		return err
	}
	s.TID = le.Uint16(b[4:])
	return nil
}

// AuthFailReason is the reason code of AUTH_Failure1/2 (byte 6).
type AuthFailReason uint8

// AuthFailReasonFailed is the only defined reason code: authentication failure (the
// explanation says why).
const AuthFailReasonFailed AuthFailReason = 0x01

// AuthFailExplanation is the reason code explanation of AUTH_Failure1/2 (byte 7).
type AuthFailExplanation uint8

// Reason code explanations of AUTH_Failure1/2.
const (
	AuthFailFailed            AuthFailExplanation = 0x01 // authentication failed (wrong response)
	AuthFailProtocolUnusable  AuthFailExplanation = 0x02 // authentication protocol not usable
	AuthFailConcatMismatch    AuthFailExplanation = 0x03 // secure channel concatenation mismatch
	AuthFailHashUnusable      AuthFailExplanation = 0x04 // hash function not usable
	AuthFailDHGroupUnusable   AuthFailExplanation = 0x05 // DH group not usable
	AuthFailIncorrectPayload  AuthFailExplanation = 0x06 // incorrect payload
	AuthFailIncorrectProtocol AuthFailExplanation = 0x07 // incorrect protocol message
)

func (e AuthFailExplanation) String() string {
	switch e {
	case AuthFailFailed:
		return "authentication failed"
	case AuthFailProtocolUnusable:
		return "authentication protocol not usable"
	case AuthFailConcatMismatch:
		return "secure channel concatenation mismatch"
	case AuthFailHashUnusable:
		return "hash function not usable"
	case AuthFailDHGroupUnusable:
		return "DH group not usable"
	case AuthFailIncorrectPayload:
		return "incorrect payload"
	case AuthFailIncorrectProtocol:
		return "incorrect protocol message"
	}
	return fmt.Sprintf("reason code explanation %#02x", uint8(e))
}

// AuthFailure is the AUTH_Failure1 (controller → host, AuthID AuthMsgFailure1) or
// AUTH_Failure2 (host → controller, AuthMsgFailure2) message.
type AuthFailure struct {
	AuthID      uint8 // AuthMsgFailure1 or AuthMsgFailure2
	TID         uint16
	Reason      AuthFailReason
	Explanation AuthFailExplanation
}

// Marshal encodes f into the first AuthFailureSize bytes of b.
func (f *AuthFailure) Marshal(b []byte) {
	b = b[:AuthFailureSize]
	(&AuthMessageHeader{AuthType: AuthTypeCommon, AuthID: f.AuthID, TID: f.TID}).Marshal(b)
	b[6], b[7] = uint8(f.Reason), uint8(f.Explanation)
}

// Unmarshal decodes an AUTH_Failure1 or AUTH_Failure2 message.
func (f *AuthFailure) Unmarshal(b []byte) error {
	const what = "AUTH_Failure"
	if err := short(what, AuthFailureSize, b); err != nil {
		return err
	}
	if b[0] != AuthTypeCommon {
		return &FieldError{Struct: what, Field: "AUTH_TYPE", Offset: 0, Reason: fmt.Sprintf("%#02x, want %#02x", b[0], AuthTypeCommon)}
	}
	if b[1] != AuthMsgFailure1 && b[1] != AuthMsgFailure2 {
		return &FieldError{Struct: what, Field: "AUTH_ID", Offset: 1, Reason: fmt.Sprintf("%#02x is neither Failure1 (F1h) nor Failure2 (F0h)", b[1])}
	}
	f.AuthID, f.TID, f.Reason, f.Explanation = b[1], le.Uint16(b[4:]), AuthFailReason(b[6]), AuthFailExplanation(b[7])
	return nil
}

func checkAuthHeader(what string, b []byte, authType, authID uint8) error {
	if b[0] != authType {
		return &FieldError{Struct: what, Field: "AUTH_TYPE", Offset: 0, Reason: fmt.Sprintf("%#02x, want %#02x", b[0], authType)}
	}
	if b[1] != authID {
		return &FieldError{Struct: what, Field: "AUTH_ID", Offset: 1, Reason: fmt.Sprintf("%#02x, want %#02x", b[1], authID)}
	}
	return nil
}

func trunc(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
