package conf

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Config is a resolved gonvmf configuration: after Load, Parse or Resolve every default is
// filled in, every namespace has its identifiers and absolute backing path, and everything
// below has been validated.
//
// The yaml tags name the YAML keys; decoding is done by this package (see Parse), not by
// yaml.Unmarshal, so that every error can name its line and field.
type Config struct {
	// Listeners and Subsystems may be empty: a target can start with nothing to serve and
	// be configured through the control API, and removing the last of either leaves a
	// configuration that saves and loads.
	Listeners  []Listener  `yaml:"listeners"`
	Subsystems []Subsystem `yaml:"subsystems"`
	Transport  Transport   `yaml:"transport"`
	// Hosts are the hosts that authenticate with DH-HMAC-CHAP, and their secrets.
	Hosts   []Host  `yaml:"hosts"`
	Control Control `yaml:"control"`
	// StateFile is where gonvmf keeps what must survive a restart: the reservations and
	// registrations of namespaces whose host asked for Persist Through Power Loss. A
	// relative path is relative to the configuration file's directory. Default: next to
	// the configuration file, its name with the extension replaced by .state.json
	// (target.yaml → target.state.json). StateFileNone ("none"), or "" in a Config built
	// in code, means no state file: namespaces then offer no Persist Through Power Loss.
	StateFile string  `yaml:"state_file"`
	Metrics   Metrics `yaml:"metrics"`
	Limits    Limits  `yaml:"limits"`
	// AutoReopen is how the target reopens by itself a namespace whose storage fenced it
	// off (an rbd image whose RADOS client the cluster blocklisted).
	AutoReopen AutoReopen `yaml:"auto_reopen"`

	// File is the file the configuration came from ("" when built in code). Errors name
	// it, and relative namespace paths are resolved against its directory.
	File string `yaml:"-"`
	// Warnings lists legal but probably unintended settings (same format as errors).
	Warnings []*FieldError `yaml:"-"`

	src *source // positions of the YAML nodes; nil when built in code
}

// Listener is an address the target accepts connections on. Every subsystem is reachable
// through every listener, and each listener also serves the discovery subsystem.
type Listener struct {
	// Transport is the NVMe-oF transport; only "rdma" exists so far. Default "rdma".
	Transport string `yaml:"transport"`
	// Address is the IPv4 or IPv6 address to bind (an RDMA-capable interface's address, or
	// 0.0.0.0 / :: for all). Required; host names are not resolved.
	Address string `yaml:"address"`
	// Port is the TCP-style port number (rdma_cm port space TCP). Default 4420.
	Port uint16 `yaml:"port"`
	// ANAStates is the Asymmetric Namespace Access state this listener reports for each
	// ANA group, indexed by the group ID (1..MaxANAGroup; index 0 is unused and stays
	// empty): what hosts connected through this listener are told about the path to the
	// namespaces of that group, and whether their I/O is served. An empty entry means
	// ANAOptimized. In a file it is a mapping of group ID to state, e.g.
	// ana_states: {1: optimized, 2: inaccessible}. (An array rather than a map keeps a
	// Listener comparable with ==.)
	ANAStates [MaxANAGroup + 1]ANAState `yaml:"ana_states"`
}

// ANAState is an Asymmetric Namespace Access state, written as the Linux target's
// configfs ana_state attribute writes it.
type ANAState string

// ANA states. Hosts send I/O to optimized paths, to non-optimized ones when no optimized
// path is left, and to none of the others: there I/O fails with the matching Asymmetric
// Access status and the host retries it on another path.
const (
	ANAOptimized      ANAState = "optimized"
	ANANonOptimized   ANAState = "non-optimized"
	ANAInaccessible   ANAState = "inaccessible"
	ANAPersistentLoss ANAState = "persistent-loss"
	ANAChange         ANAState = "change" // in transition: hosts wait (up to ANATT) for another state
)

// ANAStateNames lists the ANA states in the order the specification numbers them.
var ANAStateNames = []ANAState{ANAOptimized, ANANonOptimized, ANAInaccessible, ANAPersistentLoss, ANAChange}

// ParseANAState reads a state name (one of ANAStateNames); the error says which exist.
func ParseANAState(s string) (ANAState, error) {
	for _, st := range ANAStateNames {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("%q is not an ANA state; use one of %s", s, anaStateList())
}

func anaStateList() string {
	names := make([]string, len(ANAStateNames))
	for i, st := range ANAStateNames {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

// Valid reports whether s is one of the ANA states ("" is not).
func (s ANAState) Valid() bool { return slices.Contains(ANAStateNames, s) }

// State returns the state of ANA group g on this listener: ANAOptimized unless set.
func (l *Listener) State(g uint32) ANAState {
	if g == 0 || g > MaxANAGroup || l.ANAStates[g] == "" {
		return ANAOptimized
	}
	return l.ANAStates[g]
}

// Subsystem is an NVM subsystem: a set of namespaces and the hosts allowed to use them.
type Subsystem struct {
	// NQN names the subsystem: nqn.yyyy-mm.<reverse domain>:<name> or
	// nqn.2014-08.org.nvmexpress:uuid:<uuid>, at most 223 bytes. Required, unique.
	NQN string `yaml:"nqn"`
	// Serial is the controller serial number (Identify SN): printable ASCII, at most 20
	// bytes. Default DeriveSerial(NQN).
	Serial string `yaml:"serial"`
	// Model is the controller model number (Identify MN): printable ASCII, at most 40
	// bytes. Default DefaultModel.
	Model string `yaml:"model"`
	// CNTLIDMin and CNTLIDMax bound the controller IDs this target hands out for the
	// subsystem (as the Linux target's attr_cntlid_min/max). Two targets that serve the
	// same subsystem to one host (high availability) must use disjoint ranges: the host
	// refuses a second controller with an ID it already has. 1 <= CNTLIDMin <= CNTLIDMax
	// <= MaxCNTLID; defaults 1 and MaxCNTLID.
	CNTLIDMin uint16 `yaml:"cntlid_min"`
	CNTLIDMax uint16 `yaml:"cntlid_max"`
	// AllowAnyHost lets every host connect. It and Hosts are mutually exclusive, and one
	// of them is required: a subsystem nobody may connect to is a mistake.
	AllowAnyHost bool `yaml:"allow_any_host"`
	// Hosts lists the host NQNs allowed to connect.
	Hosts []string `yaml:"hosts"`
	// AuthRequired admits only hosts that authenticate (those with a secret in the
	// top-level hosts section); others are refused at Connect. Without it, hosts with a
	// secret authenticate and the others connect without. Default false.
	AuthRequired bool `yaml:"auth_required"`
	// Namespaces are the subsystem's namespaces, in the order written.
	Namespaces []Namespace `yaml:"namespaces"`
}

// Backend names, the values of Namespace.Backend.
const (
	BackendFile   = "file"   // a regular file, O_DIRECT
	BackendBlock  = "block"  // a block device, O_DIRECT
	BackendNull   = "null"   // reads return zeroes, writes are discarded: for benchmarks
	BackendMemory = "memory" // anonymous memory, lost when the target stops
	BackendRBD    = "rbd"    // a Ceph RBD image (the ceph build of gonvmf: make build-ceph)
)

// Namespace is one namespace of a subsystem.
type Namespace struct {
	// NSID is the namespace ID, 1..MaxNSID, unique in its subsystem. Required.
	NSID uint32 `yaml:"nsid"`
	// Backend is "file", "block", "null", "memory" or "rbd". Required.
	Backend string `yaml:"backend"`
	// Path is the backing file or block device (file and block only; required there).
	// A relative path in a file is taken relative to the file's directory; after Load it
	// is absolute.
	Path string `yaml:"path"`
	// Size is the capacity in bytes, a multiple of LBASize. Required for null and memory
	// (memory: at most MaxMemorySize); optional for file, where the file is created or
	// extended to Size (never truncated) and, when Size is 0, the file's own size is used;
	// not allowed for block and rbd, whose size is the device's or the image's.
	Size Size `yaml:"size"`
	// RBD is the Ceph RBD image of an rbd namespace (rbd only; required there).
	RBD RBD `yaml:"rbd"`
	// LBASize is the logical block size, 512 or 4096. Default 512.
	LBASize uint32 `yaml:"lba_size"`
	// ReadOnly makes the namespace write-protected.
	ReadOnly bool `yaml:"read_only"`
	// UUID, NGUID and EUI64 identify the namespace to hosts (Identify Namespace and the
	// namespace identification descriptors). When not given they are derived from the
	// subsystem NQN and NSID (DeriveUUID, DeriveNGUID, DeriveEUI64), so they are stable
	// across restarts and machines. They must be unique in the configuration: hosts treat
	// two namespaces with one identifier as two paths to the same namespace.
	UUID  [16]byte `yaml:"uuid"`
	NGUID [16]byte `yaml:"nguid"`
	EUI64 [8]byte  `yaml:"eui64"`
	// ANAGroup is the namespace's ANA group (Identify Namespace ANAGRPID), 1..MaxANAGroup;
	// each listener reports a state per group (Listener.ANAStates). Default 1. A reload
	// moves a running namespace to another group in place.
	ANAGroup uint32 `yaml:"ana_group"`
	// Shared lets another process open the same file or block device at the same time:
	// a second gonvmf serving the same subsystem from another listener (high
	// availability). A shared file is locked shared instead of exclusively, a shared block
	// device is opened without O_EXCL. The targets must then agree on who writes (ANA
	// states: only one optimized path per namespace). Default false.
	Shared bool `yaml:"shared"`
}

// RBD names a Ceph RBD image and how to reach its cluster.
type RBD struct {
	// Pool is the RADOS pool holding the image. Required.
	Pool string `yaml:"pool"`
	// RadosNamespace is the RADOS namespace inside the pool; empty: the pool's default.
	RadosNamespace string `yaml:"rados_namespace"`
	// Image is the image's name. Required.
	Image string `yaml:"image"`
	// CephConf is the cluster's ceph.conf; empty: librados's search ($CEPH_CONF,
	// /etc/ceph/ceph.conf). A relative path in a file is taken relative to the file's
	// directory; after Load it is absolute.
	CephConf string `yaml:"ceph_conf"`
	// User is the id of the Ceph client gonvmf connects as, without "client." (the rbd
	// tool's --id); empty: admin.
	User string `yaml:"user"`
	// Keyring is the keyring file with User's key; empty: what ceph.conf says. Relative
	// paths as for CephConf.
	Keyring string `yaml:"keyring"`
	// CreateSize, when set, creates the image with this many bytes if it does not exist
	// (an existing image keeps its size). A multiple of the namespace's LBA size; not with
	// read_only. 0: the image must exist.
	CreateSize Size `yaml:"create_size"`
}

// Name returns the image as the rbd tool writes it: pool/[rados_namespace/]image.
func (r *RBD) Name() string {
	if r.RadosNamespace != "" {
		return r.Pool + "/" + r.RadosNamespace + "/" + r.Image
	}
	return r.Pool + "/" + r.Image
}

// Transport holds the transport tuning shared by every listener. See the package
// documentation for the reasons behind each default.
type Transport struct {
	// QueueDepth is the most entries an I/O queue may have (CAP.MQES+1); hosts asking for
	// more are clamped. 16..1024, default 128.
	QueueDepth int `yaml:"queue_depth"`
	// InCapsuleDataSize is the write data a command capsule may carry inline (IOCCSZ =
	// (64 + InCapsuleDataSize)/16): 0 (none) or a multiple of 4 KiB up to 64 KiB and at
	// most MaxIOSize. Unlike the other fields, its zero value is not "the default" but
	// none: a Config built in Go that wants in-capsule data sets it (usually to
	// DefaultInCapsuleDataSize). A file that leaves it out gets DefaultInCapsuleDataSize
	// (8 KiB).
	InCapsuleDataSize int `yaml:"in_capsule_data_size"`
	// MaxIOSize is the largest data transfer of one command (MDTS = log2(MaxIOSize/4 KiB)).
	// A power of two from 4 KiB to 8 MiB. Default 128 KiB.
	MaxIOSize int `yaml:"max_io_size"`
	// BufferPoolSize is the registered memory for data buffers, shared by all queues. A
	// multiple of 4 KiB, at least MaxIOSize, at most 64 GiB. Default
	// min(QueueDepth × MaxIOSize, 1 GiB).
	BufferPoolSize Size `yaml:"buffer_pool_size"`
	// PollGroups is the number of completion-polling goroutines that queues are spread
	// over; 0 means one per CPU the Go scheduler uses (GOMAXPROCS; see NumPollGroups).
	// 0..256, default 0.
	PollGroups int `yaml:"poll_groups"`
	// SharedReceiveQueue is how many receive buffers (a command entry and the in-capsule
	// data area each) a poll group's I/O queues share: one shared receive queue per poll
	// group holds buffers for as many commands as its queues have entries, up to this many,
	// added as queues connect. 0 gives every I/O queue its own buffers, one per entry. 0
	// or 32..65536. Like InCapsuleDataSize, its zero value is "off", not the default: a
	// file that leaves it out gets DefaultSharedReceiveQueue (256).
	SharedReceiveQueue int `yaml:"shared_receive_queue"`
	// BusyPoll makes poll groups spin on their completion queues instead of sleeping on a
	// completion channel: lower latency, one busy CPU per poll group. Default false.
	BusyPoll bool `yaml:"busy_poll"`
	// MaxIOQueues is the most I/O queues a controller may have (Number of Queues feature).
	// 1..1024, default 16.
	MaxIOQueues int `yaml:"max_io_queues"`
	// KeepAliveTimeout is the keep-alive timeout of a controller whose host connects with
	// KATO 0 (nvme discover does; the specification's "no keep-alive"): such a controller
	// is still reclaimed once its host has sent nothing for this long. A Go duration,
	// 1s..1h and within [Limits.MinKeepAliveTimeout, Limits.MaxKeepAliveTimeout],
	// default 120s.
	KeepAliveTimeout time.Duration `yaml:"keep_alive_timeout"`
}

// Control configures the live control API that gonvmf ctl and orchestrators use to
// change a running target (gRPC; see target/control). It always listens on a Unix socket
// that only its owner (root) may use; it listens on TCP too only when TCP is set, and
// then requires mutual TLS.
type Control struct {
	// Socket is the path of the control API's Unix socket, created mode 0600 (its
	// directory 0700 when gonvmf creates it). Default DefaultControlSocket. A relative
	// path is relative to the configuration file's directory.
	Socket string `yaml:"socket"`
	// TCP is an address:port to serve the control API on as well, for a remote
	// orchestrator ("" = off, the default). It needs TLSCert, TLSKey and TLSClientCA:
	// clients must present a certificate signed by TLSClientCA.
	TCP string `yaml:"tcp"`
	// TLSCert and TLSKey are the PEM server certificate (chain) and private key for TCP.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// TLSClientCA is the PEM file of the certificate authorities that sign the clients'
	// certificates.
	TLSClientCA string `yaml:"tls_client_ca"`
}

// Metrics configures the Prometheus metrics endpoint (see target/metrics). It is off
// unless Address is set.
type Metrics struct {
	// Address is the address:port to serve metrics on over HTTP, at /metrics: an IP
	// address (IPv6 in brackets) or none for every address (":9469"); host names are not
	// resolved. "" (the default) serves none. The endpoint has no authentication: bind it
	// to a loopback or management address.
	Address string `yaml:"address"`
	// Profiling also serves the Go runtime's profiles (net/http/pprof) at /debug/pprof/ on
	// the same address: CPU and heap profiles, goroutine dumps, execution traces — for
	// diagnosing the target where it runs. A CPU profile or trace costs CPU while it is
	// taken; the endpoint has no authentication either. Default false.
	Profiling bool `yaml:"profiling"`
	// PerNamespace is what is exported of each namespace: MetricsFull (the default when
	// Address is set) its counters, gauges and latency histograms, 104 series per
	// namespace; MetricsCounters its counters and gauges only, 8 series, for targets
	// whose hundreds of namespaces would make the histograms' buckets too many series
	// for Prometheus. Error counters come on top of either, one series per class and
	// status seen. Unlike the rest of the section it changes on reload (the metrics
	// endpoint reads it at each scrape).
	PerNamespace string `yaml:"per_namespace"`
}

// Levels of Metrics.PerNamespace.
const (
	MetricsFull     = "full"
	MetricsCounters = "counters"
)

// Limits bound what hosts may take of the target, so that one host cannot starve, stall
// or lock out the others. Every field has a default; none can be switched off.
type Limits struct {
	// MaxQueues is the most queues (queue pairs: admin and I/O, of every host on every
	// listener, connected or not) the target holds at once — a closed queue until the
	// commands it left executing in a backend complete; a connection request beyond it is
	// rejected (nvme-rdma NO_RSC). 2..65536, default 1024.
	MaxQueues int `yaml:"max_queues"`
	// MaxQueuesPerAddress is the most queues from one source IP address, counted from the
	// connection request on — before the Fabrics Connect names the host. Beyond it
	// connection requests from that address are rejected (NO_RSC). 1..MaxQueues, default 256.
	MaxQueuesPerAddress int `yaml:"max_queues_per_address"`
	// MaxControllersPerHost is the most controllers one host NQN may have at once (over
	// every subsystem, discovery included); an admin queue Connect beyond it fails with
	// Controller Busy. 1..65536, default 64.
	MaxControllersPerHost int `yaml:"max_controllers_per_host"`
	// MaxQueuesPerHost is the most connected queues (admin and I/O) one host NQN may have
	// at once over all its controllers, its closed ones counting until the commands they
	// left executing in a backend complete. Number of Queues grants a controller no more I/O
	// queues than the host has left, and a Connect beyond it fails with Controller Busy.
	// 2..MaxQueues, default 256.
	MaxQueuesPerHost int `yaml:"max_queues_per_host"`
	// ConnectTimeout is how long a queue may stay connected at the transport level
	// without completing a Fabrics Connect; then it is torn down. 1s..10m, default 10s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MinKeepAliveTimeout and MaxKeepAliveTimeout bound the keep-alive timeout a host
	// asks for (Connect KATO, Set Features Keep Alive Timer): a smaller one is raised to
	// the minimum, a larger one lowered to the maximum (KATO 0 means
	// Transport.KeepAliveTimeout), so that the controller of a host that vanished is
	// always reclaimed. Get Features reports the value in effect. Min 100ms..1h, default
	// 1s; max 1s..24h, default 5m; min <= max.
	MinKeepAliveTimeout time.Duration `yaml:"min_keep_alive_timeout"`
	MaxKeepAliveTimeout time.Duration `yaml:"max_keep_alive_timeout"`
	// ResponseTimeout bounds how long the transport waits for a response it sent to
	// complete (an RDMA WRITE of read data and the response SEND, which a host that does
	// not post receive buffers can hold back forever under RNR retry): a queue whose
	// responses make no progress for this long is torn down, and the buffers they held
	// go back to the pool. 1s..10m, default 10s.
	ResponseTimeout time.Duration `yaml:"response_timeout"`
	// MaxQueueDataInFlight bounds the bytes of RDMA data one I/O queue has on the wire at
	// once (RDMA READs of write data, RDMA WRITEs of read data); its further transfers
	// wait for its earlier ones, and other queues' commands do not wait behind megabytes
	// of one queue's data. A transfer larger than it goes alone; transfers of 4 KiB or
	// less are not counted. 4KiB..1GiB, default 128KiB.
	MaxQueueDataInFlight int `yaml:"max_queue_data_in_flight"`
}

// AutoReopen is how the target reopens a namespace whose backend reports that it serves
// nothing more until it is opened again (backend.ErrNeedsReopen: an rbd image whose
// RADOS client the Ceph cluster blocklisted). The namespace is closed and its backend
// opened again at once; an open that fails is tried again after Backoff, doubled after
// every failure up to MaxBackoff, Attempts opens in all; after the last the namespace
// stays inactive until an operator reopens it (gonvmf ctl ns reopen). Hosts meanwhile get
// Namespace Not Ready, which they retry; the target's Identify Controller CRDT2, how long
// a host that enabled ACRE waits before retrying a command of a reopen that lasts, is the
// policy's waits between its opens over 4 retries. Every field has a default; a reload
// changes the policy while the target runs, reopens under way included (from their next
// open on).
type AutoReopen struct {
	// Attempts bounds the opens of one namespace in a row: those of one automatic reopen,
	// and of the reopens that follow it within Settle. 1..MaxReopenAttempts, default
	// DefaultReopenAttempts.
	Attempts int `yaml:"attempts"`
	// Backoff is the wait after the first failed open. MinReopenBackoff..MaxReopenBackoff,
	// default DefaultReopenBackoff.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff bounds the doubling of Backoff: Backoff..MaxReopenMaxBackoff, default
	// DefaultReopenMaxBackoff (Backoff when that is longer).
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Settle: a namespace that an automatic reopen opened and that reports again within
	// Settle (its storage fences it again at once: two targets fighting over an image)
	// counts its opens and backs off from where that reopen left off, instead of
	// starting afresh. MinReopenSettle..MaxReopenSettle, default DefaultReopenSettle.
	Settle time.Duration `yaml:"settle"`
}

// Defaults and limits. The package documentation explains each choice.
const (
	DefaultTransport            = "rdma"
	DefaultPort                 = 4420
	DefaultModel                = "gonvmf"
	DefaultLBASize              = 512
	DefaultQueueDepth           = 128
	MinQueueDepth               = 16
	MaxQueueDepth               = 1024
	DefaultInCapsuleDataSize    = 8 << 10
	MaxInCapsuleDataSize        = 64 << 10
	DefaultMaxIOSize            = 128 << 10
	MinMaxIOSize                = 4 << 10
	MaxMaxIOSize                = 8 << 20
	MaxDefaultBufferPoolSize    = 1 * GiB
	MaxBufferPoolSize           = 64 * GiB
	MaxPollGroups               = 256
	DefaultSharedReceiveQueue   = 256
	MinSharedReceiveQueue       = 32
	MaxSharedReceiveQueue       = 65536
	DefaultMaxIOQueues          = 16
	MaxMaxIOQueues              = 1024
	DefaultKeepAliveTimeout     = 120 * time.Second
	MinKeepAliveTimeout         = time.Second
	MaxKeepAliveTimeout         = time.Hour
	DefaultMaxQueues            = 1024
	MaxMaxQueues                = 65536
	DefaultMaxQueuesPerAddr     = 256
	DefaultMaxCtrlsPerHost      = 64
	MaxMaxCtrlsPerHost          = 65536
	DefaultMaxQueuesPerHost     = 256
	DefaultConnectTimeout       = 10 * time.Second
	MinConnectTimeout           = time.Second
	MaxConnectTimeout           = 10 * time.Minute
	DefaultMinKATO              = time.Second
	MinMinKATO                  = 100 * time.Millisecond
	MaxMinKATO                  = time.Hour
	DefaultMaxKATO              = 5 * time.Minute
	MinMaxKATO                  = time.Second
	MaxMaxKATO                  = 24 * time.Hour
	DefaultResponseTimeout      = 10 * time.Second
	MinResponseTimeout          = time.Second
	MaxResponseTimeout          = 10 * time.Minute
	DefaultMaxQueueDataInFlight = 128 << 10
	MinMaxQueueDataInFlight     = 4 << 10
	MaxMaxQueueDataInFlight     = 1 << 30
	DefaultReopenAttempts       = 10
	MaxReopenAttempts           = 100
	DefaultReopenBackoff        = time.Second
	MinReopenBackoff            = 100 * time.Millisecond
	MaxReopenBackoff            = 10 * time.Minute
	DefaultReopenMaxBackoff     = 30 * time.Second
	MaxReopenMaxBackoff         = time.Hour
	DefaultReopenSettle         = time.Minute
	MinReopenSettle             = time.Second
	MaxReopenSettle             = 24 * time.Hour
	MaxNSID                     = 1024
	MaxMemorySize               = 1 * TiB
	MaxNQNLength                = 223 // bytes, not counting the NUL of the 256-byte wire field
	MaxSerialLength             = 20
	MaxModelLength              = 40
	DefaultControlSocket        = "/run/gonvmf/gonvmf.sock"
	MaxSocketPathLength         = 107 // bytes: sun_path holds 108 with the NUL
	// MaxANAGroup is the largest ANA group ID (Identify ANAGRPMAX and NANAGRPID, as the
	// Linux target's NVMET_MAX_ANAGRPS); DefaultANAGroup the group of a namespace that
	// names none.
	MaxANAGroup     = 128
	DefaultANAGroup = 1
	// MinCNTLID and MaxCNTLID bound the controller IDs a subsystem may hand out (NVMe
	// reserves FFF0h and above); they are the defaults of cntlid_min and cntlid_max.
	MinCNTLID = 1
	MaxCNTLID = 0xFFEF
	// ANALogMaxSize is the ANA log buffer the Linux host allocates and reads in one Get
	// Log Page: header, MaxANAGroup group descriptors and MaxNSID namespace IDs (Identify
	// NANAGRPID and MNAN). A max_io_size below MinANAMaxIOSize cannot carry it.
	ANALogMaxSize   = 16 + 32*MaxANAGroup + 4*MaxNSID
	MinANAMaxIOSize = 16 << 10
	// DiscoveryNQN is the well-known NQN of the discovery subsystem.
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
)

// Load reads the configuration file at path, decodes it strictly (unknown fields are
// errors), fills in defaults and derived identifiers, and validates it. A syntax or
// validation error is a list of *FieldError joined with errors.Join; see FieldError.
// Load does not look at backing files or devices: CheckSystem does.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	return Parse(data, path)
}

// Parse is Load for a configuration already in memory; filename is used in error
// messages and to resolve relative namespace paths ("" leaves them relative).
func Parse(data []byte, filename string) (*Config, error) {
	c, errs := decode(data, filename)
	if c == nil {
		return nil, joinSorted(errs)
	}
	verrs, warns := c.resolve()
	c.Warnings = warns
	errs = append(errs, verrs...)
	if err := joinSorted(errs); err != nil {
		return nil, err
	}
	return c, nil
}

// Resolve fills in defaults and derived identifiers and validates c: what Parse does after
// decoding, for a Config built in code. A zero value means what its field's documentation
// says — the default for every field but Transport.InCapsuleDataSize (none) and
// Transport.PollGroups (one per CPU, counted as GOMAXPROCS, left as 0). It is idempotent:
// resolving a resolved Config changes nothing.
func (c *Config) Resolve() error {
	errs, warns := c.resolve()
	c.Warnings = warns
	return joinSorted(errs)
}

// Clone returns a deep copy of c that shares nothing with it. The copy keeps File but not
// the positions of the YAML c was read from: it is meant to be changed (a subsystem or
// namespace added or removed) and resolved again, and positions would then point at the
// wrong items, so errors about it name fields, not lines.
func (c *Config) Clone() *Config {
	n := &Config{
		Listeners:  slices.Clone(c.Listeners),
		Subsystems: slices.Clone(c.Subsystems),
		Transport:  c.Transport,
		Hosts:      slices.Clone(c.Hosts),
		Control:    c.Control,
		StateFile:  c.StateFile,
		Metrics:    c.Metrics,
		Limits:     c.Limits,
		AutoReopen: c.AutoReopen,
		File:       c.File,
	}
	for i := range n.Subsystems {
		s := &n.Subsystems[i]
		s.Hosts = slices.Clone(s.Hosts)
		s.Namespaces = slices.Clone(s.Namespaces)
	}
	for i := range n.Hosts {
		h := &n.Hosts[i]
		h.DHCHAPHashes = slices.Clone(h.DHCHAPHashes)
		h.DHCHAPDHGroups = slices.Clone(h.DHCHAPDHGroups)
	}
	for _, w := range c.Warnings {
		cw := *w
		n.Warnings = append(n.Warnings, &cw)
	}
	return n
}

// NumPollGroups is PollGroups with 0 resolved to one per CPU the Go scheduler uses:
// runtime.GOMAXPROCS, which is the CPU count, or a container's CPU limit where that is
// lower. Counting CPUs instead would give more groups than Ps under such a limit: more
// polling threads than the scheduler runs at once.
//
// Every group takes connections (the least loaded first), so a host's queues spread over
// as many threads as there are Ps, and Soft-RoCE's packet work, which Linux 6.1 does
// inside each post's system call, runs on as many CPUs. Measured in 6.1 guest boots
// (2 vCPUs, the Linux host, 8 repetitions, the builds alternated, medians of 4), two
// groups each taking queues against the second kept in reserve until the first was full,
// with null: 4 KiB reads 2,166 against 1,964 IOPS at QD1, 5,493 against 4,406 at QD8,
// 7,723 against 5,289 at QD32 (p99 12.5 against 14.4 ms) and 7,070 against 5,123 at
// QD64, 4 KiB writes at QD32 7,089 against 6,730, 128 KiB reads 474 against 370 (every
// repetition ahead) and writes 441 against 384, with less of gonvmf's CPU per I/O in
// every job; with a file (another boot) 128 KiB reads 456 against 412 and writes level,
// but 4 KiB reads 1,183 against 1,374 at QD1 and 3,633 against 4,495 at QD32 (the
// Linux target 1,210 and 2,057), writes level. On 6.12 (null, one boot) within the
// boot's spread. The reserve had won before poll groups kept one OS thread each
// (runtime.LockOSThread in the rdma package): 4 KiB reads 1.5× the IOPS at QD1 then.
func (t *Transport) NumPollGroups() int {
	if t.PollGroups > 0 {
		return t.PollGroups
	}
	return numProcs()
}
