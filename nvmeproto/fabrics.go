package nvmeproto

import (
	"fmt"
	"strings"
)

// NQN limits and well-known names (NVMe Base specification, "NVMe Qualified Names").
const (
	// NQNFieldSize is the size of every NQN field on the wire (Connect data, Identify
	// SUBNQN, discovery log entries). NQNs are NUL terminated inside it.
	NQNFieldSize = 256
	// MaxNQNLen is the longest NQN the specification allows, in bytes, excluding the NUL.
	MaxNQNLen = 223
	// DiscoveryNQN is the well-known NQN of a discovery subsystem.
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
	// UUIDNQNPrefix starts the UUID form of an NQN: the prefix followed by a UUID in
	// 8-4-4-4-12 hexadecimal form.
	UUIDNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"
)

// CheckNQN reports whether s can be used as an NQN on the wire: 1 to MaxNQNLen bytes
// with no control characters (a NUL would truncate it). That is all the Linux host and
// target ask; names like "testnqn" or "blktests-subsystem-1" pass. PortableNQN checks the
// form the specification prescribes. The error says why not.
func CheckNQN(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("nvmeproto: empty NQN")
	case len(s) > MaxNQNLen:
		return fmt.Errorf("nvmeproto: NQN %.40q... is %d bytes, longer than the %d allowed", s, len(s), MaxNQNLen)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("nvmeproto: NQN %q contains a NUL byte", s)
	case strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return fmt.Errorf("nvmeproto: NQN %q contains a control character", s)
	}
	return nil
}

// PortableNQN reports whether s is an NQN in the form the NVMe Base specification
// prescribes, which strict implementations (SPDK) insist on: CheckNQN's rules, and either
// "nqn.yyyy-mm.reverse-domain[:anything]" or the UUID form. The error says why not.
func PortableNQN(s string) error {
	if err := CheckNQN(s); err != nil {
		return err
	}
	if !strings.HasPrefix(s, "nqn.") {
		return fmt.Errorf("nvmeproto: NQN %q does not start with \"nqn.\"", s)
	}
	if rest, ok := strings.CutPrefix(s, UUIDNQNPrefix); ok {
		if !isUUIDString(rest) {
			return fmt.Errorf("nvmeproto: NQN %q: %q is not a UUID in 8-4-4-4-12 form", s, rest)
		}
		return nil
	}
	// nqn.yyyy-mm.<reverse domain>
	d := s[len("nqn."):]
	if len(d) < 8 || d[4] != '-' || d[7] != '.' || !isDigits(d[0:4]) || !isDigits(d[5:7]) {
		return fmt.Errorf("nvmeproto: NQN %q does not follow nqn.yyyy-mm.<reverse domain name>", s)
	}
	if dom, _, _ := strings.Cut(d[8:], ":"); dom == "" {
		return fmt.Errorf("nvmeproto: NQN %q has an empty domain name", s)
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isUUIDString(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// Controller IDs with special meaning in Connect.
const (
	CNTLIDMin     = 0x0001 // lowest controller ID a subsystem may assign
	CNTLIDMax     = 0xFFEF // highest controller ID a subsystem may assign
	CNTLIDStatic  = 0xFFFE // Connect data on the admin queue, static model: any controller
	CNTLIDDynamic = 0xFFFF // Connect data on the admin queue, dynamic model: allocate one
)

// ConnectCommand is the command specific part of a Connect SQE (fctype 01h):
// byte 40 RECFMT, 42 QID, 44 SQSIZE, 46 CATTR, 48 KATO.
// The SGL in bytes 24..39 describes the 1024-byte ConnectData.
type ConnectCommand struct {
	RecFmt uint16 // record format, 0
	QID    uint16 // 0 = admin queue
	SQSize uint16 // submission queue size, 0's based
	CAttr  uint8  // connect attributes; ConnectCAttrDisableSQFlow
	KATO   uint32 // keep alive timeout in milliseconds (admin queue only; 0 = disabled)
}

// ConnectCAttrDisableSQFlow is the CATTR bit by which the host asks the controller to
// disable SQ flow control: SQHD in completions is then reported as 0xFFFF.
const ConnectCAttrDisableSQFlow = 1 << 2

// Byte offsets of the Connect SQE fields, for the IPO of a Connect Invalid Parameters
// completion with IATTR = ConnectIAttrSQE.
const (
	ConnectSQEOffRecFmt = 40
	ConnectSQEOffQID    = 42
	ConnectSQEOffSQSize = 44
	ConnectSQEOffCAttr  = 46
	ConnectSQEOffKATO   = 48
)

// FromCommand decodes the Connect fields of cmd. It does not check the opcode or fctype.
func (c *ConnectCommand) FromCommand(cmd *Command) {
	c.RecFmt = uint16(cmd.CDW10)
	c.QID = uint16(cmd.CDW10 >> 16)
	c.SQSize = uint16(cmd.CDW11)
	c.CAttr = uint8(cmd.CDW11 >> 16)
	c.KATO = cmd.CDW12
}

// ToCommand sets cmd's opcode, fctype (clearing the rest of NSID) and the Connect fields
// in CDW10..CDW12, and zeroes the reserved CDW2, CDW3, MPTR and CDW13..15. CID, flags and
// the SGL are left for the caller. Every Fabrics and admin view's ToCommand works this way.
func (c *ConnectCommand) ToCommand(cmd *Command) {
	fabricsCommand(cmd, FabricsConnect)
	cmd.CDW10 = uint32(c.RecFmt) | uint32(c.QID)<<16
	cmd.CDW11 = uint32(c.SQSize) | uint32(c.CAttr)<<16
	cmd.CDW12 = c.KATO
	cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0
}

// DisableSQFlowControl reports whether CATTR asks for SQ flow control to be disabled.
func (c *ConnectCommand) DisableSQFlowControl() bool { return c.CAttr&ConnectCAttrDisableSQFlow != 0 }

// ConnectDataSize is the size of the Connect command's data.
const ConnectDataSize = 1024

// Byte offsets of the Connect data fields, for the IPO of a Connect Invalid Parameters
// completion with IATTR = ConnectIAttrData.
const (
	ConnectDataOffHostID  = 0
	ConnectDataOffCNTLID  = 16
	ConnectDataOffSubNQN  = 256
	ConnectDataOffHostNQN = 512
)

// ConnectData is the 1024-byte data of a Connect command:
// bytes 0..15 HOSTID, 16 CNTLID, 256..511 SUBNQN, 512..767 HOSTNQN (NUL terminated),
// everything else reserved.
type ConnectData struct {
	HostID  [16]byte
	CNTLID  uint16 // CNTLIDDynamic / CNTLIDStatic on the admin queue, the assigned ID on I/O queues
	SubNQN  string
	HostNQN string
}

// Marshal encodes d into the first ConnectDataSize bytes of b, zeroing reserved bytes.
// NQNs longer than 255 bytes are truncated (callers check them with CheckNQN first).
func (d *ConnectData) Marshal(b []byte) {
	b = b[:ConnectDataSize]
	clear(b)
	copy(b[0:16], d.HostID[:])
	le.PutUint16(b[16:], d.CNTLID)
	putNQN(b[256:512], d.SubNQN)
	putNQN(b[512:768], d.HostNQN)
}

// Unmarshal decodes Connect data from the first ConnectDataSize bytes of b. An NQN field
// without a terminating NUL is reported as a *FieldError carrying the field's offset.
func (d *ConnectData) Unmarshal(b []byte) error {
	if err := short("Connect data", ConnectDataSize, b); err != nil {
		return err
	}
	copy(d.HostID[:], b[0:16])
	d.CNTLID = le.Uint16(b[16:])
	var ok bool
	if d.SubNQN, ok = getNQN(b[256:512]); !ok {
		return &FieldError{Struct: "Connect data", Field: "SUBNQN", Offset: ConnectDataOffSubNQN, Reason: "no NUL terminator in 256 bytes"}
	}
	if d.HostNQN, ok = getNQN(b[512:768]); !ok {
		return &FieldError{Struct: "Connect data", Field: "HOSTNQN", Offset: ConnectDataOffHostNQN, Reason: "no NUL terminator in 256 bytes"}
	}
	return nil
}

// Connect response DW0: on success CNTLID in bits 15:0 and AUTHREQ in 31:16; with
// status Connect Invalid Parameters, IPO in 15:0 and IATTR in 23:16.
const (
	ConnectIAttrSQE  = 0 // IATTR: the invalid parameter is in the Connect SQE
	ConnectIAttrData = 1 // IATTR: the invalid parameter is in the Connect data

	AuthReqATR  = 1 << 1 // AUTHREQ: authentication transaction required
	AuthReqASCR = 1 << 2 // AUTHREQ: secure channel concatenation required
)

// ConnectSuccessDW0 builds DW0 of a successful Connect completion.
func ConnectSuccessDW0(cntlid, authreq uint16) uint32 { return uint32(cntlid) | uint32(authreq)<<16 }

// ConnectInvalidParamDW0 builds DW0 of a Connect Invalid Parameters completion: ipo is the
// byte offset of the offending field (ConnectSQEOff* or ConnectDataOff*), iattr says where
// it is (ConnectIAttrSQE or ConnectIAttrData).
func ConnectInvalidParamDW0(ipo uint16, iattr uint8) uint32 { return uint32(ipo) | uint32(iattr)<<16 }

// ParseConnectSuccessDW0 splits DW0 of a successful Connect completion.
func ParseConnectSuccessDW0(dw0 uint32) (cntlid, authreq uint16) {
	return uint16(dw0), uint16(dw0 >> 16)
}

// ParseConnectInvalidParamDW0 splits DW0 of a Connect Invalid Parameters completion.
func ParseConnectInvalidParamDW0(dw0 uint32) (ipo uint16, iattr uint8) {
	return uint16(dw0), uint8(dw0 >> 16)
}

// Property Get/Set ATTRIB values (SQE byte 40 bits 2:0).
const (
	PropAttribSize4 = 0 // 4-byte property
	PropAttribSize8 = 1 // 8-byte property
)

// PropertyGetCommand is the command specific part of a Property Get SQE (fctype 04h):
// byte 40 ATTRIB (bits 2:0 size), bytes 44..47 OFST. The value is returned in DW0 (and
// DW1 for 8-byte properties) of the completion.
type PropertyGetCommand struct {
	Attrib uint8
	Offset uint32
}

// Size returns the property size ATTRIB asks for: 4, 8, or 0 for a reserved encoding.
func (p *PropertyGetCommand) Size() int { return propSize(p.Attrib) }

// FromCommand decodes the Property Get fields of cmd. It does not check opcode or fctype.
func (p *PropertyGetCommand) FromCommand(cmd *Command) {
	p.Attrib = uint8(cmd.CDW10)
	p.Offset = cmd.CDW11
}

// ToCommand sets cmd's opcode, fctype and the Property Get fields; CDW12..15 are zeroed.
func (p *PropertyGetCommand) ToCommand(cmd *Command) {
	fabricsCommand(cmd, FabricsPropertyGet)
	cmd.CDW10 = uint32(p.Attrib)
	cmd.CDW11 = p.Offset
	cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0, 0
}

// PropertySetCommand is the command specific part of a Property Set SQE (fctype 00h):
// byte 40 ATTRIB, bytes 44..47 OFST, bytes 48..55 VALUE (only the low 4 bytes are
// meaningful for 4-byte properties).
type PropertySetCommand struct {
	Attrib uint8
	Offset uint32
	Value  uint64
}

// Size returns the property size ATTRIB asks for: 4, 8, or 0 for a reserved encoding.
func (p *PropertySetCommand) Size() int { return propSize(p.Attrib) }

// FromCommand decodes the Property Set fields of cmd. It does not check opcode or fctype.
func (p *PropertySetCommand) FromCommand(cmd *Command) {
	p.Attrib = uint8(cmd.CDW10)
	p.Offset = cmd.CDW11
	p.Value = uint64(cmd.CDW12) | uint64(cmd.CDW13)<<32
}

// ToCommand sets cmd's opcode, fctype and the Property Set fields; CDW14..15 are zeroed.
func (p *PropertySetCommand) ToCommand(cmd *Command) {
	fabricsCommand(cmd, FabricsPropertySet)
	cmd.CDW10 = uint32(p.Attrib)
	cmd.CDW11 = p.Offset
	cmd.CDW12 = uint32(p.Value)
	cmd.CDW13 = uint32(p.Value >> 32)
	cmd.CDW14, cmd.CDW15 = 0, 0
}

// fabricsCommand starts cmd as a Fabrics command of type t: opcode 7Fh, fctype in byte 4,
// bytes 5..23 (reserved) zeroed.
func fabricsCommand(cmd *Command, t FabricsType) {
	cmd.Opcode = OpFabrics
	cmd.NSID = uint32(t)
	cmd.CDW2, cmd.CDW3, cmd.MPTR = 0, 0, 0
}

// adminCommand starts cmd as an admin command: opcode and NSID set, the reserved CDW2,
// CDW3 and MPTR zeroed.
func adminCommand(cmd *Command, op uint8, nsid uint32) {
	cmd.Opcode = op
	cmd.NSID = nsid
	cmd.CDW2, cmd.CDW3, cmd.MPTR = 0, 0, 0
}

func propSize(attrib uint8) int {
	switch attrib & 7 {
	case PropAttribSize4:
		return 4
	case PropAttribSize8:
		return 8
	}
	return 0
}

// DisconnectCommand is the command specific part of a Disconnect SQE (fctype 08h,
// NVMe over Fabrics 1.1): bytes 40..41 RECFMT. Disconnect deletes the I/O queue it is
// submitted on; it has no data.
type DisconnectCommand struct {
	RecFmt uint16
}

// FromCommand decodes the Disconnect fields of cmd. It does not check opcode or fctype.
func (d *DisconnectCommand) FromCommand(cmd *Command) { d.RecFmt = uint16(cmd.CDW10) }

// ToCommand sets cmd's opcode, fctype and the Disconnect fields; CDW11..15 are zeroed.
func (d *DisconnectCommand) ToCommand(cmd *Command) {
	fabricsCommand(cmd, FabricsDisconnect)
	cmd.CDW10 = uint32(d.RecFmt)
	cmd.CDW11, cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0, 0, 0
}

// AuthSendCommand is the command specific part of an Authentication Send SQE (fctype
// 05h): byte 41 SPSP0, 42 SPSP1, 43 SECP, bytes 44..47 TL (transfer length in bytes of the
// host-to-controller data).
type AuthSendCommand struct {
	SPSP0, SPSP1, SECP uint8
	TL                 uint32
}

// FromCommand decodes the Authentication Send fields of cmd.
func (a *AuthSendCommand) FromCommand(cmd *Command) {
	a.SPSP0, a.SPSP1, a.SECP = uint8(cmd.CDW10>>8), uint8(cmd.CDW10>>16), uint8(cmd.CDW10>>24)
	a.TL = cmd.CDW11
}

// ToCommand sets cmd's opcode, fctype and the Authentication Send fields.
func (a *AuthSendCommand) ToCommand(cmd *Command) {
	fabricsCommand(cmd, FabricsAuthSend)
	cmd.CDW10 = uint32(a.SPSP0)<<8 | uint32(a.SPSP1)<<16 | uint32(a.SECP)<<24
	cmd.CDW11 = a.TL
	cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0, 0
}

// AuthReceiveCommand is the command specific part of an Authentication Receive SQE
// (fctype 06h): byte 41 SPSP0, 42 SPSP1, 43 SECP, bytes 44..47 AL (allocation length in
// bytes of the controller-to-host data).
type AuthReceiveCommand struct {
	SPSP0, SPSP1, SECP uint8
	AL                 uint32
}

// FromCommand decodes the Authentication Receive fields of cmd.
func (a *AuthReceiveCommand) FromCommand(cmd *Command) {
	a.SPSP0, a.SPSP1, a.SECP = uint8(cmd.CDW10>>8), uint8(cmd.CDW10>>16), uint8(cmd.CDW10>>24)
	a.AL = cmd.CDW11
}

// ToCommand sets cmd's opcode, fctype and the Authentication Receive fields.
func (a *AuthReceiveCommand) ToCommand(cmd *Command) {
	fabricsCommand(cmd, FabricsAuthReceive)
	cmd.CDW10 = uint32(a.SPSP0)<<8 | uint32(a.SPSP1)<<16 | uint32(a.SECP)<<24
	cmd.CDW11 = a.AL
	cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15 = 0, 0, 0, 0
}
