package target

import (
	"sync/atomic"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// ConnectReject is why the target refused a queue: a Connect command it failed, or
// in-band authentication that failed or never finished. (A transport counts the
// connections it rejects before any command, such as RDMA CM rejects, itself.)
type ConnectReject uint8

// Reasons a queue was refused.
const (
	// RejectInvalidParameters: Connect Invalid Parameters other than an unknown
	// subsystem — malformed data, an unknown controller ID, a host NQN or ID differing
	// from the admin queue's, a queue larger than allowed, a queue ID beyond those granted.
	RejectInvalidParameters ConnectReject = iota
	// RejectUnknownSubsystem: the SUBNQN names no subsystem.
	RejectUnknownSubsystem
	// RejectHostNotAllowed: Connect Invalid Host — the host is not on the subsystem's
	// list, or has no secret where authentication is required.
	RejectHostNotAllowed
	// RejectAuthFailed: DH-HMAC-CHAP failed on the queue, or did not finish in time.
	RejectAuthFailed
	// RejectControllerBusy: no controller ID left.
	RejectControllerBusy
	// RejectInvalidState: Command Sequence Error — the controller is not enabled or shutting
	// down, or the queue ID (or the queue) is connected already.
	RejectInvalidState
	// RejectIncompatibleFormat: a Connect record format other than 0.
	RejectIncompatibleFormat
	// RejectInternal: the target could not set the queue up.
	RejectInternal
	// RejectHostLimit: Controller Busy because the host NQN holds
	// limits.max_controllers_per_host controllers or limits.max_queues_per_host queues.
	RejectHostLimit
	// RejectConnectTimeout: the queue sent no Connect within limits.connect_timeout and
	// was torn down.
	RejectConnectTimeout
	NumConnectRejects
)

var connectRejectNames = [NumConnectRejects]string{
	"invalid_parameters", "unknown_subsystem", "host_not_allowed", "authentication_failed",
	"controller_busy", "invalid_state", "incompatible_format", "internal_error",
	"host_limit", "connect_timeout",
}

// String returns the reason's name in snake_case (a metrics label value).
func (r ConnectReject) String() string {
	if r < NumConnectRejects {
		return connectRejectNames[r]
	}
	return "unknown"
}

// connectRejects counts refused queues by reason.
type connectRejects [NumConnectRejects]atomic.Uint64

func (c *connectRejects) add(r ConnectReject) { c[r%NumConnectRejects].Add(1) }

// reason classifies a refused Connect.
func (ce *connectError) reason() ConnectReject {
	if ce.hostLimit {
		return RejectHostLimit
	}
	switch ce.st.Code() {
	case nvmeproto.StatusConnectInvalidParameters.Code():
		if ce.iattr == nvmeproto.ConnectIAttrData && ce.ipo == nvmeproto.ConnectDataOffSubNQN {
			return RejectUnknownSubsystem
		}
		return RejectInvalidParameters
	case nvmeproto.StatusConnectInvalidHost.Code():
		return RejectHostNotAllowed
	case nvmeproto.StatusConnectControllerBusy.Code():
		return RejectControllerBusy
	case nvmeproto.StatusCommandSequenceError.Code():
		return RejectInvalidState
	case nvmeproto.StatusConnectIncompatibleFormat.Code():
		return RejectIncompatibleFormat
	}
	return RejectInternal
}

// ConnectRejects returns how many queues the target refused since it started, by reason
// (indexed by ConnectReject).
func (t *Target) ConnectRejects() [NumConnectRejects]uint64 {
	var out [NumConnectRejects]uint64
	for i := range out {
		out[i] = t.rejects[i].Load()
	}
	return out
}
