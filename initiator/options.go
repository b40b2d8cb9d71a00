package initiator

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"strconv"
	"time"

	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Transport names, as nvme-cli spells them (-t).
const (
	TransportRDMA = "rdma"
	TransportLoop = "loop"
)

// Defaults applied by Dial to zero Options fields.
const (
	DefaultQueueSize      = 128              // I/O queue entries, the Linux host's default
	DefaultKeepAlive      = 5 * time.Second  // KATO for I/O controllers (discovery: none)
	DefaultCommandTimeout = 30 * time.Second // I/O commands, the Linux host's io_timeout
	DefaultAdminTimeout   = 60 * time.Second // admin commands, the Linux host's admin_timeout
	DefaultBufferPoolSize = 4 << 20          // bytes of registered bounce/admin buffers
	DefaultConnectTimeout = 10 * time.Second // per queue transport connection
	AdminQueueSize        = 32               // admin queue entries (hsqsize 31), as the Linux host
	MaxQueueSize          = 1024             // largest I/O queue (the Linux host's range is 16..1024)
	DefaultMaxRetries     = 5                // retries of an I/O command, the Linux host's nvme_core.max_retries
	MaxRetriesLimit       = 255              // largest MaxRetries (nvme_core.max_retries is a byte too)
)

// maxKeepAlive is the longest KeepAlive: Connect carries KATO in 32 bits of milliseconds.
const maxKeepAlive = math.MaxUint32 * time.Millisecond

// LoopConn is one queue of an in-process loop transport. target/loop's *Conn satisfies
// it; the initiator does not import the target, so cmd/gonvmf (or a test) wires the two
// with a LoopDialer. See the target/loop package documentation for the contract: data is
// the host memory the command's SGL addresses by offset (or the in-capsule data for an
// SGL of type Data Block/Offset), done is called exactly once per accepted Submit and must
// not block, Done is closed when the target tears the queue down.
type LoopConn interface {
	Submit(cmd *nvmeproto.Command, data []byte, done func(nvmeproto.Completion)) error
	Close() error
	Done() <-chan struct{}
	Err() error
}

// LoopDialer opens one loop queue able to hold depth commands (the RDMA hsqsize+1).
type LoopDialer func(depth int) (LoopConn, error)

// Options configure Dial. Only SubNQN and the transport's address (Addr for RDMA, Loop
// for the loop transport) are required.
type Options struct {
	// Transport is TransportRDMA (default) or TransportLoop.
	Transport string
	// Addr is the target's IP address (nvme-cli -a, traddr); RDMA only.
	Addr string
	// Port is the target's port (nvme-cli -s, trsvcid); default 4420.
	Port int
	// SrcAddr optionally binds the local side (nvme-cli -w, host-traddr); RDMA only.
	SrcAddr string
	// Loop opens loop queues; required for TransportLoop.
	Loop LoopDialer

	// SubNQN is the subsystem to connect to (nvme-cli -n); nvmeproto.DiscoveryNQN for the
	// discovery controller.
	SubNQN string
	// HostNQN identifies this host (nvme-cli --hostnqn); default: the UUID form of HostID.
	HostNQN string
	// HostID is the 128-bit host identifier (--hostid); default: a random UUID.
	HostID [16]byte

	// Queues is the number of I/O queues to ask for (default 1); the controller may grant
	// fewer (Set Features Number of Queues). Discovery controllers get none.
	Queues int
	// QueueSize is the number of entries per I/O queue (default 128, at most 1024); it is
	// clamped to CAP.MQES+1, MAXCMD and the transport's receive queue size. A queue that
	// authenticates is opened one entry larger (within those limits) for its
	// authentication commands, so that IOQueue.Depth is QueueSize.
	QueueSize int
	// KeepAlive is the keep-alive timeout (KATO) sent in Connect; Keep Alive commands go
	// out every KeepAlive/2. Zero means DefaultKeepAlive for I/O controllers and none for
	// discovery controllers; negative disables keep-alive. At most 2^32-1 ms (about 49.7
	// days), what Connect's KATO carries.
	KeepAlive time.Duration
	// ConnectTimeout bounds each queue's transport connection (address and route
	// resolution, connection establishment); default 10 s.
	ConnectTimeout time.Duration
	// CommandTimeout bounds every I/O command (default 30 s) and AdminTimeout every admin
	// command (default 60 s); a timeout too long to represent from now (math.MaxInt64)
	// never expires. A command that times out fails the controller: every queue
	// is disconnected and every outstanding command completes with an error, as the Linux
	// host's error recovery does (without reconnecting).
	CommandTimeout time.Duration
	AdminTimeout   time.Duration
	// MaxRetries bounds how often an I/O command (Read, Write, Flush, Write Zeroes,
	// Deallocate) that the controller failed without Do Not Retry is sent again, as the
	// Linux host's nvme_core.max_retries does: 0 means DefaultMaxRetries (5), negative
	// disables retries, at most MaxRetriesLimit. Each retry waits the Command Retry Delay
	// the status selects (CRD 1..3: Identify Controller CRDT1..3, in 100 ms units; CRD 0:
	// none); Dial enables ACRE so that controllers that report CRDT1 set CRD. Admin,
	// Fabrics and path-related (SCT 3h) statuses are never retried: see the package
	// documentation. Authentication Required is retried after the controller has been
	// re-authenticated (see "Retries" in the package documentation).
	MaxRetries int
	// NoInCapsuleData disables in-capsule data for small writes even when the controller
	// offers it (Identify SGLS bit 20 and IOCCSZ).
	NoInCapsuleData bool
	// BufferPoolSize is the registered memory, in bytes, for the bounce buffers of the
	// copying I/O API and for admin data (default 4 MiB). It is cut into buffers of 128
	// KiB (an eighth of it below 1 MiB), each registered as a memory region of its own
	// (see "Memory registration" in the package documentation): Dial registers
	// BufferPoolSize/128 KiB regions per controller, which counts against the RDMA
	// device's max_mr (a few thousand on some devices) for large pools.
	BufferPoolSize int
	// OnAsyncEvent, if set, is called (on its own goroutine) for every asynchronous event
	// the controller reports, until Close begins. It may call Close: Close does not wait
	// for a callback that is running (or was due before Close began) to return.
	OnAsyncEvent func(AsyncEvent)
	// Logger receives connection life-cycle messages (default slog.Default()).
	Logger *slog.Logger

	// DHCHAPSecret is the host's DH-HMAC-CHAP secret (nvme-cli --dhchap-secret), in the
	// "DHHC-1:<hh>:<base64>:" form nvme gen-dhchap-key prints; used when the controller
	// requires in-band authentication. DHCHAPCtrlSecret (--dhchap-ctrl-secret), the
	// controller's secret, makes the host authenticate the controller too: with it, every
	// queue must be authenticated, and Dial fails (ErrAuthFailed) when the controller does
	// not require authentication, since it then never proves it holds the secret (the
	// Linux host connects anyway).
	DHCHAPSecret     string
	DHCHAPCtrlSecret string

	hostSecret, ctrlSecret *dhchap.Secret // parsed by withDefaults
}

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Transport == "" {
		o.Transport = TransportRDMA
	}
	switch o.Transport {
	case TransportRDMA:
		if o.Addr == "" {
			return o, errors.New("initiator: no target address: set Options.Addr (nvme-cli -a)")
		}
		if _, err := netip.ParseAddr(o.Addr); err != nil {
			return o, fmt.Errorf("initiator: target address %q is not an IP address: %w", o.Addr, err)
		}
		if o.SrcAddr != "" {
			if _, err := netip.ParseAddr(o.SrcAddr); err != nil {
				return o, fmt.Errorf("initiator: source address %q is not an IP address: %w", o.SrcAddr, err)
			}
		}
	case TransportLoop:
		if o.Loop == nil {
			return o, errors.New("initiator: transport loop needs Options.Loop (a dialer for an in-process target)")
		}
	default:
		return o, fmt.Errorf("initiator: unknown transport %q: use %q or %q", o.Transport, TransportRDMA, TransportLoop)
	}
	if o.Port == 0 {
		o.Port = nvmeproto.DefaultRDMAPort
	}
	if o.Port < 0 || o.Port > 65535 {
		return o, fmt.Errorf("initiator: port %d out of range 1..65535", o.Port)
	}
	if o.SubNQN == "" {
		return o, errors.New("initiator: no subsystem NQN: set Options.SubNQN (nvme-cli -n)")
	}
	if err := nvmeproto.CheckNQN(o.SubNQN); err != nil {
		return o, fmt.Errorf("initiator: subsystem NQN: %w", err)
	}
	if o.HostID == ([16]byte{}) {
		if _, err := rand.Read(o.HostID[:]); err != nil {
			return o, fmt.Errorf("initiator: generating a host ID: %w", err)
		}
		o.HostID[6] = o.HostID[6]&0x0F | 0x40 // version 4
		o.HostID[8] = o.HostID[8]&0x3F | 0x80 // variant 10
	}
	if o.HostNQN == "" {
		o.HostNQN = nvmeproto.UUIDNQNPrefix + FormatUUID(o.HostID)
	}
	if err := nvmeproto.CheckNQN(o.HostNQN); err != nil {
		return o, fmt.Errorf("initiator: host NQN: %w", err)
	}
	if o.Queues == 0 {
		o.Queues = 1
	}
	if o.Queues < 0 || o.Queues > 65535 {
		return o, fmt.Errorf("initiator: %d I/O queues: want 1..65535", o.Queues)
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.QueueSize < 2 || o.QueueSize > MaxQueueSize {
		return o, fmt.Errorf("initiator: queue size %d out of range 2..%d", o.QueueSize, MaxQueueSize)
	}
	if o.CommandTimeout == 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if o.AdminTimeout == 0 {
		o.AdminTimeout = DefaultAdminTimeout
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.MaxRetries > MaxRetriesLimit {
		return o, fmt.Errorf("initiator: Options.MaxRetries %d: want at most %d retries (0: the default %d, negative: none)",
			o.MaxRetries, MaxRetriesLimit, DefaultMaxRetries)
	}
	if o.CommandTimeout < 0 || o.AdminTimeout < 0 || o.ConnectTimeout < 0 {
		return o, errors.New("initiator: negative command timeout")
	}
	if o.KeepAlive.Round(time.Millisecond) > maxKeepAlive {
		return o, fmt.Errorf("initiator: keep-alive timeout (Options.KeepAlive) %v is longer than the %v Connect's KATO (32-bit milliseconds) carries",
			o.KeepAlive, maxKeepAlive)
	}
	if o.BufferPoolSize == 0 {
		o.BufferPoolSize = DefaultBufferPoolSize
	}
	if o.BufferPoolSize < 64<<10 {
		return o, fmt.Errorf("initiator: buffer pool of %d bytes: want at least 64 KiB", o.BufferPoolSize)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := o.parseSecrets(); err != nil {
		return o, err
	}
	return o, nil
}

// target names the target for messages: "rdma 10.99.0.1:4420" or "loop".
func (o *Options) target() string {
	if o.Transport == TransportLoop {
		return "loop"
	}
	return o.Transport + " " + netip.AddrPortFrom(netip.MustParseAddr(o.Addr), uint16(o.Port)).String()
}

// FormatUUID formats a 16-byte UUID in 8-4-4-4-12 hexadecimal form.
func FormatUUID(u [16]byte) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&15])
	}
	return string(b)
}

// ParseUUID parses a UUID in 8-4-4-4-12 hexadecimal form (or 32 hex digits).
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	h := make([]byte, 0, 32)
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			h = append(h, s[i])
		}
	}
	if len(h) != 32 {
		return u, fmt.Errorf("initiator: %q is not a UUID", s)
	}
	for i := range u {
		v, err := strconv.ParseUint(string(h[2*i:2*i+2]), 16, 8)
		if err != nil {
			return u, fmt.Errorf("initiator: %q is not a UUID", s)
		}
		u[i] = byte(v)
	}
	return u, nil
}
