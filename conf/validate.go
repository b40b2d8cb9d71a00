package conf

import (
	"fmt"
	"math/bits"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// numProcs is how many goroutines the Go scheduler runs at once (GOMAXPROCS: the CPUs the
// process may use, or its container's CPU limit where that is lower, which Go follows since
// 1.25). Poll groups are counted against it, not against runtime.NumCPU: no more polling
// threads than the scheduler runs at once.
var numProcs = func() int { return runtime.GOMAXPROCS(0) }

// Range texts shared by decoding (values too large for their Go type) and validation.
func portRange(v string) (string, string) {
	return v + " is not a valid port", "use a port from 1 to 65535 (4420 is the NVMe-oF default)"
}

func nsidRange(v string) (string, string) {
	msg := v + " is not a valid namespace ID"
	if x, err := parseInt(v); err == nil && x == 0xFFFFFFFF {
		msg = v + " is the broadcast NSID (all namespaces), not a namespace ID"
	}
	return msg, fmt.Sprintf("use 1..%d, unique within the subsystem", MaxNSID)
}

func lbaSizeRange(v string) (string, string) {
	return v + " is not a supported LBA size", "use 512 or 4096"
}

func queueDepthRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use %d..%d entries per I/O queue (default %d, the Linux host's default queue size)", MinQueueDepth, MaxQueueDepth, DefaultQueueDepth)
}

func icdRange(v string) (string, string) {
	return v + " is not a supported in-capsule data size", "use 0 (off) or a multiple of 4KiB up to 64KiB, no larger than max_io_size (default 8KiB)"
}

func maxIORange(v string) (string, string) {
	return v + " is not a supported maximum I/O size", "use a power of two from 4KiB to 8MiB (MDTS counts 4 KiB pages in powers of two), e.g. 128KiB or 1MiB"
}

func srqRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 0 (every I/O queue its own receive buffers) or %d..%d buffers per poll group (default %d)",
		MinSharedReceiveQueue, MaxSharedReceiveQueue, DefaultSharedReceiveQueue)
}

func pollGroupsRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 0 (one per CPU) to %d", MaxPollGroups)
}

func anaGroupRange(v string) (string, string) {
	return v + " is not a valid ANA group ID", fmt.Sprintf("use 1..%d (default %d)", MaxANAGroup, DefaultANAGroup)
}

func cntlidRange(v string) (string, string) {
	return v + " is not a valid controller ID", fmt.Sprintf("use %d..%d (0x%X); give two targets that serve one subsystem disjoint ranges", MinCNTLID, MaxCNTLID, MaxCNTLID)
}

func maxIOQueuesRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 1..%d I/O queues per controller (default %d)", MaxMaxIOQueues, DefaultMaxIOQueues)
}

func maxQueuesRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 2..%d queues in total (default %d)", MaxMaxQueues, DefaultMaxQueues)
}

func perAddressRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 1..max_queues queues per source address (default %d)", DefaultMaxQueuesPerAddr)
}

func dataInFlightRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use %s..%s per I/O queue (default %s)",
		Size(MinMaxQueueDataInFlight), Size(MaxMaxQueueDataInFlight), Size(DefaultMaxQueueDataInFlight))
}

func ctrlsPerHostRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 1..%d controllers per host NQN (default %d)", MaxMaxCtrlsPerHost, DefaultMaxCtrlsPerHost)
}

func queuesPerHostRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 2..max_queues queues per host NQN (default %d): an admin queue and at least one I/O queue", DefaultMaxQueuesPerHost)
}

func reopenAttemptsRange(v string) (string, string) {
	return v + " is out of range", fmt.Sprintf("use 1..%d opens (default %d)", MaxReopenAttempts, DefaultReopenAttempts)
}

type validator struct {
	c     *Config
	src   *source
	errs  []*FieldError
	warns []*FieldError
	// katoDefault: transport.keep_alive_timeout was not given and took its default,
	// which limits() moves into the keep-alive limits rather than refuse.
	katoDefault bool
}

// resolve fills in defaults and derived values and validates c.
func (c *Config) resolve() (errs, warns []*FieldError) {
	if c.src == nil {
		c.src = newSource()
	}
	v := &validator{c: c, src: c.src}
	v.transport()
	v.control()
	v.metrics()
	v.limits()
	v.autoReopen()
	v.listeners()
	v.hosts()
	v.subsystems()
	v.stateFile()
	v.ana()
	return v.errs, v.warns
}

// position returns where p, or the closest enclosing field or item that was written, is.
func (v *validator) position(p string) (int, int) {
	for {
		if pos, ok := v.src.pos[p]; ok {
			return pos.line, pos.col
		}
		if p == "" {
			return 0, 0
		}
		p = p[:max(strings.LastIndexAny(p, ".["), 0)]
	}
}

// explicit reports whether the file gave p a value.
func (v *validator) explicit(p string) bool { return v.src.written(p) }

// skip reports whether p's value, or that of an enclosing field or item, failed to decode
// (and was reported then).
func (v *validator) skip(p string) bool {
	for {
		if v.src.bad[p] {
			return true
		}
		if p == "" {
			return false
		}
		p = p[:max(strings.LastIndexAny(p, ".["), 0)]
	}
}

func (v *validator) fail(p, value, msg, fix string) {
	v.errs = append(v.errs, v.fieldError(p, value, msg, fix))
}

// failKeys is fail with a fix that names configuration keys: each {} in fix stands for
// one of keys, which the error's Fix writes as the file does and FixText as its caller
// chooses.
func (v *validator) failKeys(p, value, msg, fix string, keys ...FixKey) {
	e := v.fieldError(p, value, msg, "")
	e.fixTmpl, e.FixKeys = fix, keys
	e.Fix = e.FixText(fileKey(p))
	v.errs = append(v.errs, e)
}

// rbdExample is the example image of a fix that names the rbd mapping rp.
func rbdExample(rp string) FixKey {
	return FixKey{Field: rp, Sub: []FixKey{{Field: rp + ".pool", Value: "rbd"}, {Field: rp + ".image", Value: "vol1"}}}
}

func (v *validator) warn(p, value, msg, fix string) {
	v.warns = append(v.warns, v.fieldError(p, value, msg, fix))
}

func (v *validator) fieldError(p, value, msg, fix string) *FieldError {
	line, col := v.position(p)
	return &FieldError{File: v.c.File, Line: line, Column: col, Field: p, Value: value, Msg: msg, Fix: fix}
}

func (v *validator) failRange(p, value string, rng rangeText) {
	msg, fix := rng(value)
	v.fail(p, value, msg, fix)
}

// where names an earlier item for "already used by" messages.
func (v *validator) where(p string) string {
	if line, _ := v.position(p); line > 0 {
		return fmt.Sprintf("%s (line %d)", p, line)
	}
	return p
}

// --- transport ---

// defaultZero sets *f to d when it is zero because the file left the field out (an
// explicit 0 stays, for the range check to report).
func defaultZero[T comparable](v *validator, f *T, path string, d T) {
	var zero T
	if *f == zero && !v.explicit(path) {
		*f = d
	}
}

func (v *validator) transport() {
	t := &v.c.Transport
	const tp = "transport."
	defaultZero(v, &t.QueueDepth, tp+"queue_depth", DefaultQueueDepth)
	// in_capsule_data_size has no default here: 0 means none (decode gives a file that
	// leaves it out DefaultInCapsuleDataSize).
	defaultZero(v, &t.MaxIOSize, tp+"max_io_size", DefaultMaxIOSize)
	defaultZero(v, &t.MaxIOQueues, tp+"max_io_queues", DefaultMaxIOQueues)
	v.katoDefault = t.KeepAliveTimeout == 0 && !v.explicit(tp+"keep_alive_timeout")
	defaultZero(v, &t.KeepAliveTimeout, tp+"keep_alive_timeout", DefaultKeepAliveTimeout)

	qdOK := t.QueueDepth >= MinQueueDepth && t.QueueDepth <= MaxQueueDepth
	if !qdOK && !v.skip(tp+"queue_depth") {
		v.failRange(tp+"queue_depth", strconv.Itoa(t.QueueDepth), queueDepthRange)
	}
	mioOK := t.MaxIOSize >= MinMaxIOSize && t.MaxIOSize <= MaxMaxIOSize && bits.OnesCount(uint(t.MaxIOSize)) == 1
	if !mioOK && !v.skip(tp+"max_io_size") {
		v.failRange(tp+"max_io_size", sizeText(t.MaxIOSize), maxIORange)
	}
	icd := t.InCapsuleDataSize
	if (icd < 0 || icd%4096 != 0 || icd > MaxInCapsuleDataSize) && !v.skip(tp+"in_capsule_data_size") {
		v.failRange(tp+"in_capsule_data_size", sizeText(icd), icdRange)
	} else if mioOK && icd > t.MaxIOSize && !v.skip(tp+"in_capsule_data_size") {
		v.fail(tp+"in_capsule_data_size", sizeText(icd),
			fmt.Sprintf("%s is larger than max_io_size %s", sizeText(icd), sizeText(t.MaxIOSize)),
			"lower in_capsule_data_size or raise max_io_size: a command never carries more data than max_io_size")
	}

	pp := tp + "buffer_pool_size"
	if t.BufferPoolSize == 0 && !v.explicit(pp) && qdOK && mioOK {
		t.BufferPoolSize = min(Size(t.QueueDepth)*Size(t.MaxIOSize), MaxDefaultBufferPoolSize)
	}
	if !v.skip(pp) && (t.BufferPoolSize != 0 || v.explicit(pp)) {
		bp := t.BufferPoolSize
		switch {
		case bp%4096 != 0 || bp == 0 || bp > MaxBufferPoolSize:
			v.fail(pp, bp.String(), fmt.Sprintf("%s is not a usable buffer pool size", bp),
				"use a multiple of 4KiB from max_io_size up to 64GiB (default: queue_depth × max_io_size, at most 1GiB)")
		case mioOK && bp < Size(t.MaxIOSize):
			v.fail(pp, bp.String(), fmt.Sprintf("%s is smaller than max_io_size %s, so a command of the largest size could never get a buffer", bp, sizeText(t.MaxIOSize)),
				"raise buffer_pool_size to at least max_io_size (better: queue_depth × max_io_size or more)")
		case qdOK && mioOK && bp < Size(t.QueueDepth)*Size(t.MaxIOSize):
			v.warn(pp, bp.String(), fmt.Sprintf("%s holds less than one full queue of the largest commands (%d × %s)", bp, t.QueueDepth, sizeText(t.MaxIOSize)),
				"large I/O at full queue depth will wait for buffers; raise buffer_pool_size if that matters")
		}
	}

	if (t.PollGroups < 0 || t.PollGroups > MaxPollGroups) && !v.skip(tp+"poll_groups") {
		v.failRange(tp+"poll_groups", strconv.Itoa(t.PollGroups), pollGroupsRange)
	}
	if s := t.SharedReceiveQueue; (s < 0 || (s > 0 && s < MinSharedReceiveQueue) || s > MaxSharedReceiveQueue) && !v.skip(tp+"shared_receive_queue") {
		v.failRange(tp+"shared_receive_queue", strconv.Itoa(s), srqRange)
	}
	if (t.MaxIOQueues < 1 || t.MaxIOQueues > MaxMaxIOQueues) && !v.skip(tp+"max_io_queues") {
		v.failRange(tp+"max_io_queues", strconv.Itoa(t.MaxIOQueues), maxIOQueuesRange)
	}
	if (t.KeepAliveTimeout < MinKeepAliveTimeout || t.KeepAliveTimeout > MaxKeepAliveTimeout) && !v.skip(tp+"keep_alive_timeout") {
		v.fail(tp+"keep_alive_timeout", t.KeepAliveTimeout.String(), t.KeepAliveTimeout.String()+" is out of range",
			fmt.Sprintf("use %v to %v (default %v), e.g. 120s", MinKeepAliveTimeout, MaxKeepAliveTimeout, time.Duration(DefaultKeepAliveTimeout)))
	}
}

// --- limits ---

func (v *validator) limits() {
	l := &v.c.Limits
	const lp = "limits."
	def := func(f *int, name string, d int) { defaultZero(v, f, lp+name, d) }
	defDur := func(f *time.Duration, name string, d time.Duration) { defaultZero(v, f, lp+name, d) }
	def(&l.MaxQueues, "max_queues", DefaultMaxQueues)
	mqOK := l.MaxQueues >= 2 && l.MaxQueues <= MaxMaxQueues
	mq := DefaultMaxQueues // what the per-address and per-host defaults may not exceed
	if mqOK {
		mq = l.MaxQueues
	}
	def(&l.MaxQueuesPerAddress, "max_queues_per_address", min(DefaultMaxQueuesPerAddr, mq))
	def(&l.MaxControllersPerHost, "max_controllers_per_host", DefaultMaxCtrlsPerHost)
	def(&l.MaxQueuesPerHost, "max_queues_per_host", min(DefaultMaxQueuesPerHost, max(mq, 2)))
	defDur(&l.ConnectTimeout, "connect_timeout", DefaultConnectTimeout)
	defDur(&l.MinKeepAliveTimeout, "min_keep_alive_timeout", DefaultMinKATO)
	defDur(&l.MaxKeepAliveTimeout, "max_keep_alive_timeout", DefaultMaxKATO)
	defDur(&l.ResponseTimeout, "response_timeout", DefaultResponseTimeout)
	def(&l.MaxQueueDataInFlight, "max_queue_data_in_flight", DefaultMaxQueueDataInFlight)

	if !mqOK && !v.skip(lp+"max_queues") {
		v.failRange(lp+"max_queues", strconv.Itoa(l.MaxQueues), maxQueuesRange)
	}
	switch {
	case v.skip(lp + "max_queues_per_address"):
	case l.MaxQueuesPerAddress < 1 || l.MaxQueuesPerAddress > MaxMaxQueues:
		v.failRange(lp+"max_queues_per_address", strconv.Itoa(l.MaxQueuesPerAddress), perAddressRange)
	case mqOK && l.MaxQueuesPerAddress > l.MaxQueues:
		v.fail(lp+"max_queues_per_address", strconv.Itoa(l.MaxQueuesPerAddress),
			fmt.Sprintf("%d is more than max_queues %d", l.MaxQueuesPerAddress, l.MaxQueues),
			"lower max_queues_per_address or raise max_queues: one address can never hold more than every queue")
	case mqOK && l.MaxQueuesPerAddress == l.MaxQueues:
		v.warn(lp+"max_queues_per_address", strconv.Itoa(l.MaxQueuesPerAddress),
			"one source address may take every queue the target has, locking out the others",
			"set max_queues_per_address below max_queues (default: a quarter of the default max_queues)")
	}
	if (l.MaxQueueDataInFlight < MinMaxQueueDataInFlight || l.MaxQueueDataInFlight > MaxMaxQueueDataInFlight) &&
		!v.skip(lp+"max_queue_data_in_flight") {
		v.failRange(lp+"max_queue_data_in_flight", sizeText(l.MaxQueueDataInFlight), dataInFlightRange)
	}
	if (l.MaxControllersPerHost < 1 || l.MaxControllersPerHost > MaxMaxCtrlsPerHost) && !v.skip(lp+"max_controllers_per_host") {
		v.failRange(lp+"max_controllers_per_host", strconv.Itoa(l.MaxControllersPerHost), ctrlsPerHostRange)
	}
	switch {
	case v.skip(lp + "max_queues_per_host"):
	case l.MaxQueuesPerHost < 2 || l.MaxQueuesPerHost > MaxMaxQueues:
		v.failRange(lp+"max_queues_per_host", strconv.Itoa(l.MaxQueuesPerHost), queuesPerHostRange)
	case mqOK && l.MaxQueuesPerHost > l.MaxQueues:
		v.fail(lp+"max_queues_per_host", strconv.Itoa(l.MaxQueuesPerHost),
			fmt.Sprintf("%d is more than max_queues %d", l.MaxQueuesPerHost, l.MaxQueues),
			"lower max_queues_per_host or raise max_queues: one host can never hold more than every queue")
	}
	durRange := func(name string, d, lo, hi, def time.Duration) bool {
		if v.skip(lp + name) {
			return false
		}
		if d < lo || d > hi {
			v.fail(lp+name, d.String(), d.String()+" is out of range",
				fmt.Sprintf("use %v to %v (default %v)", lo, hi, def))
			return false
		}
		return true
	}
	durRange("connect_timeout", l.ConnectTimeout, MinConnectTimeout, MaxConnectTimeout, DefaultConnectTimeout)
	durRange("response_timeout", l.ResponseTimeout, MinResponseTimeout, MaxResponseTimeout, DefaultResponseTimeout)
	minOK := durRange("min_keep_alive_timeout", l.MinKeepAliveTimeout, MinMinKATO, MaxMinKATO, DefaultMinKATO)
	maxOK := durRange("max_keep_alive_timeout", l.MaxKeepAliveTimeout, MinMaxKATO, MaxMaxKATO, DefaultMaxKATO)
	if minOK && maxOK && l.MinKeepAliveTimeout > l.MaxKeepAliveTimeout {
		v.fail(lp+"min_keep_alive_timeout", l.MinKeepAliveTimeout.String(),
			fmt.Sprintf("%v is more than max_keep_alive_timeout %v", l.MinKeepAliveTimeout, l.MaxKeepAliveTimeout),
			"lower min_keep_alive_timeout or raise max_keep_alive_timeout")
		return
	}
	kp := "transport.keep_alive_timeout"
	if v.katoDefault && minOK && maxOK {
		// The default follows the limits a file sets (as max_queues_per_address's follows
		// max_queues): a file that narrows them need not also write keep_alive_timeout.
		v.c.Transport.KeepAliveTimeout = min(max(v.c.Transport.KeepAliveTimeout, l.MinKeepAliveTimeout), l.MaxKeepAliveTimeout)
	}
	if kato := v.c.Transport.KeepAliveTimeout; minOK && maxOK && !v.skip(kp) && kato >= MinKeepAliveTimeout && kato <= MaxKeepAliveTimeout &&
		(kato < l.MinKeepAliveTimeout || kato > l.MaxKeepAliveTimeout) {
		v.fail(kp, kato.String(),
			fmt.Sprintf("%v is outside limits.min_keep_alive_timeout..limits.max_keep_alive_timeout (%v..%v)", kato, l.MinKeepAliveTimeout, l.MaxKeepAliveTimeout),
			"choose a keep_alive_timeout within the limits, or widen the limits")
	}
}

// --- auto_reopen ---

func (v *validator) autoReopen() {
	a := &v.c.AutoReopen
	const ap = "auto_reopen."
	defaultZero(v, &a.Attempts, ap+"attempts", DefaultReopenAttempts)
	defaultZero(v, &a.Backoff, ap+"backoff", DefaultReopenBackoff)
	// The default follows a longer backoff: a file that raises backoff need not also
	// write max_backoff.
	defaultZero(v, &a.MaxBackoff, ap+"max_backoff", max(DefaultReopenMaxBackoff, a.Backoff))
	defaultZero(v, &a.Settle, ap+"settle", DefaultReopenSettle)
	if (a.Attempts < 1 || a.Attempts > MaxReopenAttempts) && !v.skip(ap+"attempts") {
		v.failRange(ap+"attempts", strconv.Itoa(a.Attempts), reopenAttemptsRange)
	}
	durRange := func(name string, d, lo, hi, def time.Duration) bool {
		if v.skip(ap + name) {
			return false
		}
		if d < lo || d > hi {
			v.fail(ap+name, d.String(), d.String()+" is out of range", fmt.Sprintf("use %v to %v (default %v)", lo, hi, def))
			return false
		}
		return true
	}
	bOK := durRange("backoff", a.Backoff, MinReopenBackoff, MaxReopenBackoff, DefaultReopenBackoff)
	mOK := durRange("max_backoff", a.MaxBackoff, MinReopenBackoff, MaxReopenMaxBackoff, DefaultReopenMaxBackoff)
	durRange("settle", a.Settle, MinReopenSettle, MaxReopenSettle, DefaultReopenSettle)
	if bOK && mOK && a.MaxBackoff < a.Backoff {
		v.fail(ap+"max_backoff", a.MaxBackoff.String(), fmt.Sprintf("%v is less than backoff %v", a.MaxBackoff, a.Backoff),
			"raise max_backoff to backoff or more (it bounds the doubling of backoff), or lower backoff")
	}
}

// sizeText writes a byte count the way a user would have written it.
func sizeText(n int) string {
	if n < 0 {
		return strconv.Itoa(n)
	}
	return Size(n).String()
}

// --- control ---

func (v *validator) control() {
	c := &v.c.Control
	const cp = "control."
	if c.Socket == "" && !v.explicit(cp+"socket") {
		c.Socket = DefaultControlSocket
	}
	written := c.Socket
	c.Socket = v.rel(c.Socket)
	resolved := ""
	if written != c.Socket {
		resolved = fmt.Sprintf(" (%s resolved against the configuration's directory)", written)
	}
	switch {
	case v.skip(cp + "socket"):
	case c.Socket == "":
		v.fail(cp+"socket", "", "the control socket path is empty", "remove socket to use "+DefaultControlSocket+", or give a path")
	case len(c.Socket) > MaxSocketPathLength:
		v.fail(cp+"socket", c.Socket, fmt.Sprintf("%q%s is %d bytes long; a Unix socket path has at most %d", c.Socket, resolved, len(c.Socket), MaxSocketPathLength),
			"choose a shorter path, e.g. "+DefaultControlSocket)
	}
	c.TLSCert, c.TLSKey, c.TLSClientCA = v.rel(c.TLSCert), v.rel(c.TLSKey), v.rel(c.TLSClientCA)
	if c.TCP == "" {
		for _, f := range []struct{ key, val string }{{"tls_cert", c.TLSCert}, {"tls_key", c.TLSKey}, {"tls_client_ca", c.TLSClientCA}} {
			if f.val != "" {
				v.fail(cp+f.key, f.val, f.key+" is set but tcp is not, and only the TCP control listener uses TLS",
					"set tcp: <address>:<port> to serve the control API over TCP, or remove "+f.key)
			}
		}
		return
	}
	if ap, err := netip.ParseAddrPort(c.TCP); err != nil || ap.Port() == 0 {
		v.fail(cp+"tcp", c.TCP, fmt.Sprintf("%q is not an address:port", c.TCP),
			"write an IP address and a port, e.g. tcp: 10.0.0.5:4421 (IPv6: [fd00::1]:4421); host names are not resolved")
	}
	for _, f := range []struct{ key, val, what string }{
		{"tls_cert", c.TLSCert, "the server's PEM certificate"},
		{"tls_key", c.TLSKey, "the server's PEM private key"},
		{"tls_client_ca", c.TLSClientCA, "the PEM certificate authorities that sign the clients' certificates"},
	} {
		if f.val == "" && !v.skip(cp+f.key) {
			v.fail(cp+f.key, "", "missing: the TCP control listener requires mutual TLS",
				fmt.Sprintf("give %s: the path of %s", f.key, f.what))
		}
	}
}

// --- metrics ---

func (v *validator) metrics() {
	a := v.c.Metrics.Address
	if a == "" && v.c.Metrics.Profiling {
		v.fail("metrics.profiling", "true", "profiling is served on the metrics address, and metrics.address is not set",
			"set metrics.address too, e.g. address: 127.0.0.1:9469, or remove profiling")
	}
	pn := &v.c.Metrics.PerNamespace
	switch {
	case v.skip("metrics.per_namespace"):
	case a == "" && v.explicit("metrics.per_namespace"):
		v.fail("metrics.per_namespace", *pn, "per_namespace chooses what the metrics endpoint exports, and metrics.address is not set",
			"set metrics.address too, e.g. address: 127.0.0.1:9469, or remove per_namespace")
	case a != "":
		defaultZero(v, pn, "metrics.per_namespace", MetricsFull)
		if *pn != MetricsFull && *pn != MetricsCounters {
			v.fail("metrics.per_namespace", *pn, fmt.Sprintf("%q is not a level of per-namespace metrics", *pn),
				"write per_namespace: full (counters, gauges and latency histograms: 104 series per namespace) or per_namespace: counters (no latency histograms: 8 series per namespace)")
		}
	}
	if a == "" || v.skip("metrics.address") {
		return
	}
	const fix = "write an IP address and a port, e.g. address: 127.0.0.1:9469 (IPv6: [::1]:9469, every address: :9469); host names are not resolved"
	ap, ok := parseListenAddr(a)
	if !ok {
		v.fail("metrics.address", a, fmt.Sprintf("%q is not an address:port", a), fix)
		return
	}
	if ap.Port() == 0 {
		v.fail("metrics.address", a, fmt.Sprintf("%q has port 0", a), "give the port Prometheus scrapes, e.g. address: 127.0.0.1:9469")
		return
	}
	if ctl, ok := parseListenAddr(v.c.Control.TCP); ok && ctl.Port() == ap.Port() &&
		(ctl.Addr() == ap.Addr() || ctl.Addr().IsUnspecified() || ap.Addr().IsUnspecified()) {
		v.fail("metrics.address", a, fmt.Sprintf("%q overlaps control.tcp %q", a, v.c.Control.TCP),
			"give the metrics endpoint a port of its own")
	}
}

// parseListenAddr parses an address:port to listen on; ":port" means every address
// (returned as the IPv6 unspecified address).
func parseListenAddr(s string) (netip.AddrPort, bool) {
	if strings.HasPrefix(s, ":") {
		p, err := strconv.ParseUint(s[1:], 10, 16)
		return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(p)), err == nil
	}
	ap, err := netip.ParseAddrPort(s)
	return ap, err == nil
}

// --- listeners ---

// listeners checks the listeners. None is valid: the control API adds them at run time
// (and removes the last one), and what it leaves must save to a file that loads; serve
// says so in its log. So are no subsystems (subsystems).
func (v *validator) listeners() {
	c := v.c
	type entry struct {
		ap netip.AddrPort
		p  string
	}
	var seen []entry
	for i := range c.Listeners {
		l := &c.Listeners[i]
		p := fmt.Sprintf("listeners[%d]", i)
		if l.Transport == "" && !v.explicit(p+".transport") {
			l.Transport = DefaultTransport
		}
		switch l.Transport {
		case "rdma":
		case "tcp", "fc", "loop":
			v.fail(p+".transport", l.Transport, fmt.Sprintf("transport %q is not supported yet", l.Transport), "use rdma")
		default:
			v.fail(p+".transport", l.Transport, fmt.Sprintf("%q is not an NVMe-oF transport", l.Transport), "use rdma")
		}
		if l.Port == 0 && !v.explicit(p+".port") && !v.skip(p+".port") {
			l.Port = DefaultPort
		}
		if l.Port == 0 && !v.skip(p+".port") {
			v.failRange(p+".port", "0", portRange)
		}
		v.listenerANA(l, p)
		if l.Address == "" {
			if !v.skip(p + ".address") {
				v.fail(p+".address", "", "missing",
					"give the IPv4 or IPv6 address of an RDMA-capable interface, e.g. address: 10.99.0.1 (0.0.0.0 or :: listens on all)")
			}
			continue
		}
		addr, err := netip.ParseAddr(l.Address)
		if err != nil {
			v.fail(p+".address", l.Address, fmt.Sprintf("%q is not an IP address", l.Address),
				"write an IPv4 or IPv6 address such as 10.99.0.1 or fd00::1; host names are not resolved")
			continue
		}
		if l.Port == 0 {
			continue
		}
		ap := netip.AddrPortFrom(addr.Unmap(), l.Port)
		for _, e := range seen {
			switch {
			case e.ap == ap:
				v.fail(p, ap.String(), fmt.Sprintf("listener %s is already defined by %s", ap, v.where(e.p)), "remove one of them, or use another port")
			case e.ap.Port() == ap.Port() && e.ap.Addr().Is4() == ap.Addr().Is4() &&
				(e.ap.Addr().IsUnspecified() || ap.Addr().IsUnspecified()):
				v.fail(p, ap.String(), fmt.Sprintf("listener %s overlaps %s at %s: a wildcard address listens on every address of its family", ap, v.where(e.p), e.ap),
					"remove one of them, or use another port")
			default:
				continue
			}
			break
		}
		seen = append(seen, entry{ap, p})
	}
}

// listenerANA checks the ANA states of a listener built in Go (a file's are checked as
// they are decoded).
func (v *validator) listenerANA(l *Listener, p string) {
	if l.ANAStates[0] != "" {
		v.fail(p+".ana_states", string(l.ANAStates[0]), "ANA group 0 is reserved: ANAStates[0] must stay empty",
			fmt.Sprintf("set states of groups 1..%d only", MaxANAGroup))
	}
	for g := 1; g <= MaxANAGroup; g++ {
		st := l.ANAStates[g]
		gp := fmt.Sprintf("%s.ana_states.%d", p, g)
		if st != "" && !st.Valid() && !v.skip(gp) {
			v.fail(gp, string(st), fmt.Sprintf("%q is not an ANA state", st), "use one of "+anaStateList())
		}
	}
}

// ana warns about ANA settings that are legal but probably not meant: a listener state
// for a group no namespace is in, and ANA in use with a max_io_size too small for the
// Linux host to read the ANA log in one command (it then ignores ANA states).
func (v *validator) ana() {
	used := map[uint32]bool{}
	inUse := false
	for _, s := range v.c.Subsystems {
		for _, ns := range s.Namespaces {
			used[ns.ANAGroup] = true
			inUse = inUse || ns.ANAGroup != DefaultANAGroup
		}
	}
	for i := range v.c.Listeners {
		l := &v.c.Listeners[i]
		for g := 1; g <= MaxANAGroup; g++ {
			if l.ANAStates[g] == "" {
				continue
			}
			inUse = inUse || l.ANAStates[g] != ANAOptimized
			if !used[uint32(g)] {
				v.warn(fmt.Sprintf("listeners[%d].ana_states.%d", i, g), string(l.ANAStates[g]),
					fmt.Sprintf("no namespace is in ANA group %d", g), "check the group ID, or set ana_group on the namespaces meant")
			}
		}
	}
	if t := v.c.Transport; inUse && t.MaxIOSize >= MinMaxIOSize && t.MaxIOSize < MinANAMaxIOSize {
		v.warn("transport.max_io_size", sizeText(t.MaxIOSize),
			fmt.Sprintf("ANA states are configured, but the Linux host reads the ANA log in one command of %d bytes and ignores ANA when max_io_size is smaller", ANALogMaxSize),
			fmt.Sprintf("raise max_io_size to at least %s", Size(MinANAMaxIOSize)))
	}
}

// --- subsystems and namespaces ---

type idOwners struct {
	nqn   map[string]string
	uuid  map[[16]byte]string
	nguid map[[16]byte]string
	eui64 map[[8]byte]string
	path  map[string]struct {
		p        string
		readOnly bool
	}
}

func (v *validator) subsystems() {
	c := v.c
	own := &idOwners{
		nqn: map[string]string{}, uuid: map[[16]byte]string{}, nguid: map[[16]byte]string{},
		eui64: map[[8]byte]string{}, path: map[string]struct {
			p        string
			readOnly bool
		}{},
	}
	for i := range c.Subsystems {
		v.subsystem(&c.Subsystems[i], fmt.Sprintf("subsystems[%d]", i), own)
	}
}

func (v *validator) subsystem(s *Subsystem, p string, own *idOwners) {
	nqnOK := false
	switch {
	case s.NQN == "":
		if !v.skip(p + ".nqn") {
			v.fail(p+".nqn", "", "missing", "name the subsystem, e.g. nqn: "+nqnExample)
		}
	case s.NQN == DiscoveryNQN:
		v.fail(p+".nqn", s.NQN, fmt.Sprintf("%s is the well-known discovery subsystem, which gonvmf serves on every listener by itself", s.NQN),
			"give the subsystem its own NQN, e.g. "+nqnExample)
	default:
		if prob := nqnUnusable(s.NQN); prob != "" {
			v.fail(p+".nqn", s.NQN, fmt.Sprintf("%q is not a valid NQN: %s", s.NQN, prob),
				"use the form nqn.yyyy-mm.<reverse domain>:<name>, e.g. "+nqnExample)
		} else if prev, dup := own.nqn[s.NQN]; dup {
			v.fail(p+".nqn", s.NQN, fmt.Sprintf("%s is already the NQN of %s", s.NQN, v.where(prev)), "give each subsystem its own NQN")
		} else {
			own.nqn[s.NQN] = p
			nqnOK = true
			if prob := nqnProblem(s.NQN); prob != "" {
				v.warn(p+".nqn", s.NQN, fmt.Sprintf("%q is not in the NVMe NQN form (%s): the Linux host and target accept it, "+
					"but it is not portable (SPDK and other strict hosts refuse it)", s.NQN, prob),
					"for a name every host accepts use nqn.yyyy-mm.<reverse domain>:<name>, e.g. "+nqnExample)
			}
		}
	}

	if s.Serial == "" && !v.explicit(p+".serial") && s.NQN != "" {
		s.Serial = DeriveSerial(s.NQN)
	}
	if s.Serial != "" || v.explicit(p+".serial") {
		v.asciiField(p+".serial", s.Serial, MaxSerialLength, "serial number", "remove serial to derive one from the NQN")
	}
	if s.Model == "" && !v.explicit(p+".model") {
		s.Model = DefaultModel
	}
	v.asciiField(p+".model", s.Model, MaxModelLength, "model number", "remove model to use "+DefaultModel)

	minOK, maxOK := true, true
	if s.CNTLIDMin == 0 && !v.explicit(p+".cntlid_min") {
		s.CNTLIDMin = MinCNTLID
	}
	if s.CNTLIDMax == 0 && !v.explicit(p+".cntlid_max") {
		s.CNTLIDMax = MaxCNTLID
	}
	for _, f := range []struct {
		name string
		val  uint16
		ok   *bool
	}{{"cntlid_min", s.CNTLIDMin, &minOK}, {"cntlid_max", s.CNTLIDMax, &maxOK}} {
		if (f.val < MinCNTLID || f.val > MaxCNTLID) && !v.skip(p+"."+f.name) {
			v.failRange(p+"."+f.name, strconv.Itoa(int(f.val)), cntlidRange)
			*f.ok = false
		}
	}
	if minOK && maxOK && s.CNTLIDMin > s.CNTLIDMax && !v.skip(p+".cntlid_min") && !v.skip(p+".cntlid_max") {
		v.fail(p+".cntlid_min", strconv.Itoa(int(s.CNTLIDMin)),
			fmt.Sprintf("cntlid_min %d is larger than cntlid_max %d", s.CNTLIDMin, s.CNTLIDMax), "make cntlid_min at most cntlid_max")
	}

	switch {
	case s.AllowAnyHost && len(s.Hosts) > 0:
		v.fail(p+".allow_any_host", "true", "allow_any_host: true and a hosts list are both given, so it is unclear who may connect",
			"remove hosts to let every host connect, or remove allow_any_host to admit only the listed hosts")
	case !s.AllowAnyHost && len(s.Hosts) == 0 && !v.skip(p+".hosts") && !v.skip(p+".allow_any_host"):
		v.fail(p+".hosts", "", "no host may connect: allow_any_host is not true and hosts is empty",
			"set allow_any_host: true, or list the NQNs of the hosts that may connect (each host's /etc/nvme/hostnqn)")
	}
	hosts := map[string]string{}
	for j, h := range s.Hosts {
		hp := fmt.Sprintf("%s.hosts[%d]", p, j)
		if v.skip(hp) {
			continue
		}
		if h == DiscoveryNQN {
			v.fail(hp, h, "the discovery NQN names a subsystem, not a host", "use the host's own NQN (its /etc/nvme/hostnqn)")
			continue
		}
		if prob := nqnUnusable(h); prob != "" {
			v.fail(hp, h, fmt.Sprintf("%q is not a valid host NQN: %s", h, prob),
				"use the host's NQN as in its /etc/nvme/hostnqn, e.g. nqn.2014-08.org.nvmexpress:uuid:<uuid>")
			continue
		}
		if prob := nqnProblem(h); prob != "" {
			v.warn(hp, h, fmt.Sprintf("%q is not in the NVMe NQN form (%s): the Linux host accepts it, but it is not portable", h, prob),
				"check it is the host's NQN as in its /etc/nvme/hostnqn (usually nqn.2014-08.org.nvmexpress:uuid:<uuid>)")
		}
		if msg, fix := hostNQNCaseWarning(h); msg != "" {
			v.warn(hp, h, msg, fix)
		}
		if prev, dup := hosts[h]; dup {
			v.fail(hp, h, fmt.Sprintf("host %s is already listed as %s", h, v.where(prev)), "remove the repeated entry")
			continue
		}
		hosts[h] = hp
	}
	v.subsystemAuth(s, p)

	if len(s.Namespaces) == 0 && !v.skip(p+".namespaces") {
		v.warn(p+".namespaces", "", "the subsystem has no namespaces: hosts can connect but will see no storage",
			"add namespaces, or remove the subsystem")
	}
	nsids := map[uint32]string{}
	for j := range s.Namespaces {
		v.namespace(&s.Namespaces[j], s.NQN, nqnOK, fmt.Sprintf("%s.namespaces[%d]", p, j), nsids, own)
	}
}

func (v *validator) asciiField(p, s string, max int, what, fix string) {
	if v.skip(p) {
		return
	}
	switch {
	case s == "":
		v.fail(p, s, "the "+what+" is empty", fix)
	case len(s) > max:
		v.fail(p, s, fmt.Sprintf("%q is %d bytes long; a %s has at most %d", s, len(s), what, max), fmt.Sprintf("shorten it to %d printable ASCII characters, or %s", max, fix))
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }):
		v.fail(p, s, fmt.Sprintf("%q contains characters other than printable ASCII, which a %s cannot hold", s, what), "use printable ASCII characters only, or "+fix)
	}
}

// rbd validates an rbd namespace's image and cluster.
func (v *validator) rbd(ns *Namespace, p string, lbaOK bool, own *idOwners) {
	r := &ns.RBD
	rp := p + ".rbd"
	if r.Pool == "" && r.Image == "" && !v.explicit(rp) {
		if !v.skip(rp) {
			v.failKeys(rp, "", "missing", "name the image, e.g. {}", rbdExample(rp))
		}
		return
	}
	nameOK := true
	name := func(field, val, what, eg string, bad string) {
		fp := rp + "." + field
		switch {
		case v.skip(fp):
			nameOK = false
		case val == "":
			if eg != "" {
				v.failKeys(fp, "", "missing", "name the "+what+", e.g. {}", FixKey{Field: fp, Value: eg})
				nameOK = false
			}
		case strings.ContainsAny(val, bad) || strings.ContainsFunc(val, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			v.fail(fp, val, fmt.Sprintf("%q is not a valid %s name: it contains a space, a control character or one of %q", val, what, bad),
				"use the name the rbd tool shows (rbd ls -p POOL)")
			nameOK = false
		}
	}
	name("pool", r.Pool, "pool", "rbd", "/@")
	name("rados_namespace", r.RadosNamespace, "RADOS namespace", "", "/@")
	name("image", r.Image, "image", "vol1", "/@")
	name("user", r.User, "Ceph client", "", "/@")
	if id, ok := strings.CutPrefix(r.User, "client."); ok && id != "" && !v.skip(rp+".user") {
		v.failKeys(rp+".user", r.User, "user is the client's id, without the client. of its name (as the rbd tool's --id)",
			"write {}", FixKey{Field: rp + ".user", Value: id})
	}
	for _, f := range []struct {
		field string
		val   *string
	}{{"ceph_conf", &r.CephConf}, {"keyring", &r.Keyring}} {
		if *f.val == "" {
			continue
		}
		*f.val = v.rel(*f.val)
	}
	if (r.CreateSize != 0 || v.explicit(rp+".create_size")) && !v.skip(rp+".create_size") {
		switch {
		case ns.ReadOnly:
			v.failKeys(rp+".create_size", r.CreateSize.String(), "a read-only namespace cannot create its image",
				"create the image first (rbd create), or remove {}", FixKey{Field: p + ".read_only"})
		case r.CreateSize == 0:
			v.failKeys(rp+".create_size", "0", "an image of 0 bytes holds nothing", "give a size, e.g. {}, or remove {}",
				FixKey{Field: rp + ".create_size", Value: "10GiB"}, FixKey{Field: rp + ".create_size"})
		case lbaOK && r.CreateSize%Size(ns.LBASize) != 0:
			v.fail(rp+".create_size", r.CreateSize.String(), fmt.Sprintf("%s (%d bytes) is not a multiple of the LBA size %d",
				r.CreateSize, uint64(r.CreateSize), ns.LBASize), fmt.Sprintf("use a multiple of %d, e.g. 10GiB", ns.LBASize))
		}
	}
	if !nameOK {
		return
	}
	// One image, one namespace (only read-only namespaces may share one), as for files.
	key := "rbd:" + r.CephConf + "\x00" + r.Name()
	if prev, dup := own.path[key]; dup && !(prev.readOnly && ns.ReadOnly) {
		v.fail(rp+".image", r.Image, fmt.Sprintf("image %s is already the backing of %s", r.Name(), v.where(prev.p)),
			"give each namespace its own image (only read-only namespaces may share one)")
	} else if !dup {
		own.path[key] = struct {
			p        string
			readOnly bool
		}{p, ns.ReadOnly}
	}
}

func (v *validator) namespace(ns *Namespace, nqn string, nqnOK bool, p string, nsids map[uint32]string, own *idOwners) {
	// nsid
	nsidOK := false
	switch {
	case v.skip(p + ".nsid"):
	case ns.NSID == 0 && !v.explicit(p+".nsid"):
		v.fail(p+".nsid", "", "missing", fmt.Sprintf("give each namespace a unique nsid from 1 to %d", MaxNSID))
	case ns.NSID == 0 || ns.NSID > MaxNSID:
		v.failRange(p+".nsid", strconv.FormatUint(uint64(ns.NSID), 10), nsidRange)
	default:
		if prev, dup := nsids[ns.NSID]; dup {
			v.fail(p+".nsid", strconv.FormatUint(uint64(ns.NSID), 10),
				fmt.Sprintf("nsid %d is already used by %s", ns.NSID, v.where(prev)), "give each namespace of a subsystem its own nsid")
		} else {
			nsids[ns.NSID] = p
			nsidOK = true
		}
	}

	// lba_size
	if ns.LBASize == 0 && !v.explicit(p+".lba_size") {
		ns.LBASize = DefaultLBASize
	}
	lbaOK := ns.LBASize == 512 || ns.LBASize == 4096
	if !lbaOK && !v.skip(p+".lba_size") {
		v.failRange(p+".lba_size", strconv.FormatUint(uint64(ns.LBASize), 10), lbaSizeRange)
	}

	// ana_group
	if ns.ANAGroup == 0 && !v.explicit(p+".ana_group") {
		ns.ANAGroup = DefaultANAGroup
	}
	if (ns.ANAGroup == 0 || ns.ANAGroup > MaxANAGroup) && !v.skip(p+".ana_group") {
		v.failRange(p+".ana_group", strconv.FormatUint(uint64(ns.ANAGroup), 10), anaGroupRange)
	}

	// backend, path, size, rbd
	sizeWritten := ns.Size != 0 || v.explicit(p+".size")
	if ns.Backend != BackendRBD && ns.Backend != "" && (ns.RBD != (RBD{}) || v.explicit(p+".rbd")) {
		v.failKeys(p+".rbd", "", fmt.Sprintf("rbd describes the image of an rbd namespace, not of a %s one", ns.Backend),
			"remove {}, or set {}", FixKey{Field: p + ".rbd"}, FixKey{Field: p + ".backend", Value: BackendRBD})
	}
	switch ns.Backend {
	case BackendFile, BackendBlock:
		if ns.Path == "" {
			if !v.skip(p + ".path") {
				eg := "/var/lib/gonvmf/disk0.img"
				if ns.Backend == BackendBlock {
					eg = "/dev/nvme0n1"
				}
				v.failKeys(p+".path", "", "missing", fmt.Sprintf("%s namespaces need the path of their backing %s, e.g. {}",
					ns.Backend, map[string]string{BackendFile: "file", BackendBlock: "device"}[ns.Backend]), FixKey{Field: p + ".path", Value: eg})
			}
		} else {
			ns.Path = v.rel(ns.Path)
			if prev, dup := own.path[ns.Path]; dup && !(prev.readOnly && ns.ReadOnly) {
				v.fail(p+".path", ns.Path, fmt.Sprintf("%s is already the backing of %s", ns.Path, v.where(prev.p)),
					"give each namespace its own file or device (only read-only namespaces may share one)")
			} else if !dup {
				own.path[ns.Path] = struct {
					p        string
					readOnly bool
				}{p, ns.ReadOnly}
			}
		}
		if ns.Backend == BackendBlock && sizeWritten && !v.skip(p+".size") {
			v.failKeys(p+".size", ns.Size.String(), "block namespaces take their size from the device", "remove {}", FixKey{Field: p + ".size"})
			sizeWritten = false
		}
	case BackendNull, BackendMemory:
		if ns.Path != "" {
			v.failKeys(p+".path", ns.Path, fmt.Sprintf("%s namespaces have no backing file", ns.Backend), "remove {}, or use {}",
				FixKey{Field: p + ".path"}, FixKey{Field: p + ".backend", Value: BackendFile})
		}
		if !sizeWritten && !v.skip(p+".size") {
			v.failKeys(p+".size", "", "missing", ns.Backend+" namespaces need a capacity, e.g. {}", FixKey{Field: p + ".size", Value: "10GiB"})
		}
		if ns.Backend == BackendMemory && ns.Size > MaxMemorySize {
			v.failKeys(p+".size", ns.Size.String(), fmt.Sprintf("%s is more than the %s a memory namespace may have", ns.Size, Size(MaxMemorySize)),
				"use a smaller size, or {} for benchmarks that need no data", FixKey{Field: p + ".backend", Value: BackendNull})
		}
	case BackendRBD:
		if ns.Path != "" {
			v.failKeys(p+".path", ns.Path, "rbd namespaces have no backing file: their image is named in rbd",
				"remove {}, and write {}", FixKey{Field: p + ".path"}, rbdExample(p+".rbd"))
		}
		if sizeWritten && !v.skip(p+".size") {
			v.failKeys(p+".size", ns.Size.String(), "rbd namespaces take their size from the image",
				"remove {}: to create a missing image write {}, to grow one use rbd resize", FixKey{Field: p + ".size"}, FixKey{Field: p + ".rbd.create_size"})
			sizeWritten = false
		}
		v.rbd(ns, p, lbaOK, own)
	case "":
		if !v.skip(p + ".backend") {
			v.fail(p+".backend", "", "missing", "set backend to file, block, null, memory or rbd")
		}
	default:
		fix := "use file, block, null, memory or rbd"
		if lb := strings.ToLower(strings.TrimSpace(ns.Backend)); contains([]string{BackendFile, BackendBlock, BackendNull, BackendMemory, BackendRBD}, lb) {
			fix = "write it in lower case: " + lb
		}
		v.fail(p+".backend", ns.Backend, fmt.Sprintf("%q is not a backend", ns.Backend), fix)
	}
	if sizeWritten && !v.skip(p+".size") {
		switch {
		case ns.Size == 0:
			v.fail(p+".size", "0", "a namespace of 0 bytes holds nothing", fmt.Sprintf("give a size of at least one block (%d bytes), e.g. 1GiB", ns.LBASize))
		case lbaOK && ns.Size%Size(ns.LBASize) != 0:
			down := uint64(ns.Size) / uint64(ns.LBASize) * uint64(ns.LBASize)
			up := down + uint64(ns.LBASize) // wraps around for a size within a block of 2^64
			var fix string
			switch {
			case down == 0:
				fix = fmt.Sprintf("use %d", up)
			case up < down:
				fix = fmt.Sprintf("use %d", down)
			default:
				fix = fmt.Sprintf("use %d or %d", down, up)
			}
			v.fail(p+".size", ns.Size.String(), fmt.Sprintf("%s (%d bytes) is not a multiple of the LBA size %d", ns.Size, uint64(ns.Size), ns.LBASize), fix)
		}
	}

	// identifiers
	if !nqnOK || !nsidOK {
		return // derived identifiers would be meaningless; the NQN or NSID error says why
	}
	if ns.UUID == ([16]byte{}) && !v.skip(p+".uuid") {
		ns.UUID = DeriveUUID(nqn, ns.NSID)
	}
	if ns.NGUID == ([16]byte{}) && !v.skip(p+".nguid") {
		ns.NGUID = DeriveNGUID(nqn, ns.NSID)
	}
	if ns.EUI64 == ([8]byte{}) && !v.skip(p+".eui64") {
		ns.EUI64 = DeriveEUI64(nqn, ns.NSID)
	}
	const twoPaths = "hosts would take both for one namespace reached by two paths; remove the field to derive a unique one"
	if prev, dup := own.uuid[ns.UUID]; dup {
		v.fail(p+".uuid", FormatUUID(ns.UUID), fmt.Sprintf("uuid %s is also the uuid of %s", FormatUUID(ns.UUID), v.where(prev)), twoPaths)
	} else if ns.UUID != ([16]byte{}) {
		own.uuid[ns.UUID] = p
	}
	if prev, dup := own.nguid[ns.NGUID]; dup {
		v.fail(p+".nguid", FormatNGUID(ns.NGUID), fmt.Sprintf("nguid %s is also the nguid of %s", FormatNGUID(ns.NGUID), v.where(prev)), twoPaths)
	} else if ns.NGUID != ([16]byte{}) {
		own.nguid[ns.NGUID] = p
	}
	if prev, dup := own.eui64[ns.EUI64]; dup {
		v.fail(p+".eui64", FormatEUI64(ns.EUI64), fmt.Sprintf("eui64 %s is also the eui64 of %s", FormatEUI64(ns.EUI64), v.where(prev)), twoPaths)
	} else if ns.EUI64 != ([8]byte{}) {
		own.eui64[ns.EUI64] = p
	}
}

// StateFileNone as state_file turns the state file off: no Persist Through Power Loss.
const StateFileNone = "none"

// DefaultStateFile returns the state file of a configuration read from file: next to it,
// its extension replaced by .state.json.
func DefaultStateFile(file string) string {
	base := filepath.Base(file)
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	return filepath.Join(filepath.Dir(file), base+".state.json")
}

// rel resolves a path of the configuration: a relative one against the configuration
// file's directory, made absolute, so that resolving the result again (a copy of the
// configuration, a change at run time) leaves it as it is — a relative configuration
// path with a directory in it (conf/t.yaml) would otherwise be prefixed once more each
// time. Without a file, a relative path stays relative.
func (v *validator) rel(p string) string {
	if p == "" {
		return ""
	}
	if filepath.IsAbs(p) || v.c.File == "" {
		return filepath.Clean(p)
	}
	p = filepath.Join(filepath.Dir(v.c.File), p)
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return p
}

// stateFile resolves state_file: the default next to the configuration file, relative
// paths against its directory.
func (v *validator) stateFile() {
	c := v.c
	switch {
	case c.StateFile == StateFileNone:
		return
	case c.StateFile == "" && c.File != "":
		c.StateFile = v.rel(filepath.Base(DefaultStateFile(c.File)))
	case c.StateFile == "":
		return
	default:
		c.StateFile = v.rel(c.StateFile)
	}
}
