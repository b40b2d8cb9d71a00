package initiator

import (
	"errors"
	"fmt"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Errors the initiator returns; test for them with errors.Is.
var (
	// ErrClosed: the controller was closed by Close or Shutdown.
	ErrClosed = errors.New("initiator: controller closed")
	// ErrQueueFull: Submit found every slot of the queue busy.
	ErrQueueFull = errors.New("initiator: queue full")
	// ErrTimeout: a command did not complete within its timeout; the controller is failed.
	ErrTimeout = errors.New("initiator: command timed out")
	// ErrDisconnected: the target or the fabric dropped a queue's connection.
	ErrDisconnected = errors.New("initiator: connection lost")
	// ErrSubsystemNotFound: the target has no subsystem with the NQN we asked for. A target
	// that hides its subsystems from hosts that may not access them gives the same answer
	// for both: the error then wraps ErrHostNotAllowed too.
	ErrSubsystemNotFound = errors.New("initiator: subsystem not found")
	// ErrHostNotAllowed: the subsystem does not allow our host NQN.
	ErrHostNotAllowed = errors.New("initiator: host not allowed")
	// ErrConnectRefused: nothing listens at the address (or the target refused the
	// connection at the transport level).
	ErrConnectRefused = errors.New("initiator: connection refused")
	// ErrUnreachable: the target's address did not answer within the connect timeout.
	ErrUnreachable = errors.New("initiator: target unreachable")
	// ErrNotSupported: the controller lacks something the request needs.
	ErrNotSupported = errors.New("initiator: not supported by the controller")
)

// StatusError is a command that completed with an error status.
type StatusError struct {
	Op     string // command name, e.g. "Read", "Identify", "Connect"
	QID    uint16
	CID    uint16
	Status nvmeproto.Status
	DW0    uint32
	ioCmd  bool // an NVM I/O command: name command-specific codes by the NVM command set
}

func (e *StatusError) Error() string {
	name := e.Status.Name()
	if e.ioCmd {
		name = e.Status.NameNVM()
	}
	if name == "" {
		name = "unknown status"
	}
	dnr := ""
	if e.Status.DNR() {
		dnr = ", do not retry"
	}
	return fmt.Sprintf("nvme %s on queue %d (cid %#x): %s (sct %#x sc %#02x%s)",
		e.Op, e.QID, e.CID, name, uint8(e.Status.SCT()), e.Status.SC(), dnr)
}

// Is matches a StatusError with the same status code (SCT and SC), so
// errors.Is(err, &StatusError{Status: nvmeproto.StatusLBAOutOfRange}) works.
func (e *StatusError) Is(target error) bool {
	t, ok := target.(*StatusError)
	return ok && t.Op == "" && t.Status.Code() == e.Status.Code()
}

// ConnectError is a refused Fabrics Connect or transport connection: it says which queue,
// which target and why. It wraps ErrSubsystemNotFound, ErrHostNotAllowed,
// ErrConnectRefused or the underlying error.
type ConnectError struct {
	Target  string // "rdma 10.99.0.1:4420"
	QID     uint16
	SubNQN  string
	HostNQN string
	Reason  string
	Err     error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("initiator: connect to %s on %s (queue %d) failed: %s", e.SubNQN, e.Target, e.QID, e.Reason)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// connectStatusError interprets a refused Connect completion.
func connectStatusError(o *Options, qid uint16, se *StatusError) *ConnectError {
	ce := &ConnectError{Target: o.target(), QID: qid, SubNQN: o.SubNQN, HostNQN: o.HostNQN, Err: se}
	ipo, iattr := nvmeproto.ParseConnectInvalidParamDW0(se.DW0)
	switch se.Status.Code() {
	case nvmeproto.StatusConnectInvalidHost.Code():
		ce.Reason = fmt.Sprintf("host %s is not allowed to access the subsystem (Connect Invalid Host)", o.HostNQN)
		ce.Err = errors.Join(ErrHostNotAllowed, se)
	case nvmeproto.StatusConnectInvalidParameters.Code():
		switch {
		case iattr == nvmeproto.ConnectIAttrData && ipo == nvmeproto.ConnectDataOffSubNQN:
			// Targets that hide which subsystems exist (gonvmf) answer a host that may not
			// access a subsystem as if it did not exist: the host cannot tell the two apart.
			ce.Reason = fmt.Sprintf("the target has no subsystem %s, or host %s is not allowed to access it (Connect Invalid Parameters: SUBNQN)",
				o.SubNQN, o.HostNQN)
			ce.Err = errors.Join(ErrSubsystemNotFound, ErrHostNotAllowed, se)
		case iattr == nvmeproto.ConnectIAttrData && ipo == nvmeproto.ConnectDataOffHostNQN:
			ce.Reason = fmt.Sprintf("the target refused host NQN %s (Connect Invalid Parameters: HOSTNQN)", o.HostNQN)
			ce.Err = errors.Join(ErrHostNotAllowed, se)
		case iattr == nvmeproto.ConnectIAttrData && ipo == nvmeproto.ConnectDataOffCNTLID:
			ce.Reason = "the target refused the controller ID (Connect Invalid Parameters: CNTLID)"
		case iattr == nvmeproto.ConnectIAttrSQE && ipo == nvmeproto.ConnectSQEOffSQSize:
			ce.Reason = "the target refused the queue size (Connect Invalid Parameters: SQSIZE)"
		case iattr == nvmeproto.ConnectIAttrSQE && ipo == nvmeproto.ConnectSQEOffQID:
			ce.Reason = "the target refused the queue ID (Connect Invalid Parameters: QID)"
		default:
			where := "SQE"
			if iattr == nvmeproto.ConnectIAttrData {
				where = "data"
			}
			ce.Reason = fmt.Sprintf("Connect Invalid Parameters at %s byte %d", where, ipo)
		}
	default:
		ce.Reason = se.Error()
	}
	return ce
}
