package initiator

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/rdmacm"
)

func TestUUID(t *testing.T) {
	u := [16]byte{0x3a, 0x6e, 0x1f, 0x52, 0x9b, 0x0c, 0x4d, 0x7e, 0x8f, 0x21, 0x5c, 0x4b, 0x3a, 0x2d, 0x1e, 0x0f}
	s := FormatUUID(u)
	if s != "3a6e1f52-9b0c-4d7e-8f21-5c4b3a2d1e0f" {
		t.Fatalf("FormatUUID = %s", s)
	}
	for _, in := range []string{s, strings.ToUpper(s), strings.ReplaceAll(s, "-", "")} {
		if got, err := ParseUUID(in); err != nil || got != u {
			t.Errorf("ParseUUID(%q) = %x, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "3a6e1f52", s + "00", strings.Replace(s, "3a", "zz", 1)} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) succeeded", bad)
		}
	}
	o, err := Options{Addr: "10.0.0.1", SubNQN: "nqn.2024-01.io.gonvmf:x"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.HostID[6]>>4 != 4 || o.HostID[8]>>6 != 2 || o.HostNQN != nvmeproto.UUIDNQNPrefix+FormatUUID(o.HostID) {
		t.Errorf("default host ID %x / NQN %s", o.HostID, o.HostNQN)
	}
}

func TestRejectError(t *testing.T) {
	dst := netip.MustParseAddrPort("10.99.0.1:4420")
	var priv [4]byte
	(&nvmeproto.RDMAConnRej{Status: nvmeproto.RDMARejectInvalidHSQSize}).Marshal(priv[:])
	for _, c := range []struct {
		ev   rdmacm.Event
		want string
	}{
		{rdmacm.Event{Type: rdmacm.EventRejected, Status: 28, Param: rdmacm.ConnParam{PrivateData: priv[:]}}, "rejected the queue: invalid host SQ size (nvme-rdma status 4)"},
		{rdmacm.Event{Type: rdmacm.EventRejected, Status: 28}, "rejected the connection"},
		{rdmacm.Event{Type: rdmacm.EventRejected, Status: 8}, "nothing listens on 10.99.0.1:4420"},
		{rdmacm.Event{Type: rdmacm.EventRejected, Status: 5}, "CM reason 5"},
	} {
		err := rejectError(dst, &c.ev)
		if !errors.Is(err, ErrConnectRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.ev.Status, err, c.want)
		}
	}
}

func TestConnectStatusError(t *testing.T) {
	o := &Options{Transport: TransportLoop, SubNQN: "nqn.2024-01.io.gonvmf:x", HostNQN: "nqn.2024-01.io.gonvmf:h"}
	for _, c := range []struct {
		st   nvmeproto.Status
		dw0  uint32
		is   error
		want string
	}{
		{nvmeproto.StatusConnectInvalidParameters, nvmeproto.ConnectInvalidParamDW0(nvmeproto.ConnectDataOffSubNQN, nvmeproto.ConnectIAttrData), ErrSubsystemNotFound, "has no subsystem nqn.2024-01.io.gonvmf:x, or host nqn.2024-01.io.gonvmf:h is not allowed"},
		{nvmeproto.StatusConnectInvalidParameters, nvmeproto.ConnectInvalidParamDW0(nvmeproto.ConnectDataOffHostNQN, nvmeproto.ConnectIAttrData), ErrHostNotAllowed, "refused host NQN"},
		{nvmeproto.StatusConnectInvalidHost, 0, ErrHostNotAllowed, "is not allowed"},
		{nvmeproto.StatusConnectInvalidParameters, nvmeproto.ConnectInvalidParamDW0(nvmeproto.ConnectSQEOffSQSize, nvmeproto.ConnectIAttrSQE), nil, "queue size"},
		{nvmeproto.StatusConnectControllerBusy, 0, nil, "Controller Busy"},
	} {
		ce := connectStatusError(o, 0, &StatusError{Op: "Connect", Status: c.st.WithDNR(), DW0: c.dw0})
		if (c.is != nil && !errors.Is(ce, c.is)) || !strings.Contains(ce.Error(), c.want) {
			t.Errorf("%v: %v", c.st, ce)
		}
	}
}
