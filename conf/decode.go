package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// position is where a field's value sits in the file.
type position struct{ line, col int }

// source remembers, for each field path that was written in the file, where it was written,
// so that validation can name the line; and which fields failed to decode, so that
// validation does not report them twice.
type source struct {
	pos  map[string]position // every field and list item written in the file
	null map[string]bool     // fields written without a value ("size:"): they take the default
	bad  map[string]bool     // fields whose value could not be decoded
}

func newSource() *source {
	return &source{pos: map[string]position{}, null: map[string]bool{}, bad: map[string]bool{}}
}

// written reports whether the file gave p a value.
func (s *source) written(p string) bool {
	_, ok := s.pos[p]
	return ok && !s.null[p]
}

type decoder struct {
	file string
	src  *source
	errs []*FieldError
}

// Known YAML keys of each mapping, in the order the documentation lists them.
var (
	configKeys    = []string{"listeners", "subsystems", "transport", "hosts", "control", "state_file", "metrics", "limits", "auto_reopen"}
	listenerKeys  = []string{"transport", "address", "port", "ana_states"}
	subsystemKeys = []string{"nqn", "serial", "model", "cntlid_min", "cntlid_max", "allow_any_host", "hosts", "auth_required", "namespaces"}
	namespaceKeys = []string{"nsid", "backend", "path", "size", "rbd", "lba_size", "read_only", "uuid", "nguid", "eui64",
		"ana_group", "shared"}
	rbdKeys       = []string{"pool", "rados_namespace", "image", "ceph_conf", "user", "keyring", "create_size"}
	transportKeys = []string{"queue_depth", "in_capsule_data_size", "max_io_size", "buffer_pool_size",
		"poll_groups", "shared_receive_queue", "busy_poll", "max_io_queues", "keep_alive_timeout"}
	controlKeys = []string{"socket", "tcp", "tls_cert", "tls_key", "tls_client_ca"}
	metricsKeys = []string{"address", "profiling", "per_namespace"}
	limitsKeys  = []string{"max_queues", "max_queues_per_address", "max_controllers_per_host", "max_queues_per_host",
		"connect_timeout", "min_keep_alive_timeout", "max_keep_alive_timeout", "response_timeout",
		"max_queue_data_in_flight"}
	autoReopenKeys = []string{"attempts", "backoff", "max_backoff", "settle"}
)

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decode turns YAML text into a Config, recording positions. It returns a nil Config only
// when the text is not a usable YAML document at all.
func decode(data []byte, file string) (*Config, []*FieldError) {
	d := &decoder{file: file, src: newSource()}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		d.add(nil, "", "", "the file is empty", "describe the listeners and subsystems to serve; conf/examples has complete files")
		return nil, d.errs
	}
	if err != nil {
		d.syntaxError(err)
		if e := d.errs[len(d.errs)-1]; e.Line > 0 && bytes.Contains(lineOf(data, e.Line), []byte("DHHC-1:")) {
			// nvme gen-dhchap-key's secrets end with ':', which YAML reads as a mapping.
			e.Fix = `quote the secret: dhchap_secret: "DHHC-1:...:" (it ends with ':', which YAML takes for a key)`
		}
		return nil, d.errs
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.add(&extra, "", "", "the file holds more than one YAML document", "keep one document: remove the second '---' and what follows it, or merge the documents")
	} else if !errors.Is(err, io.EOF) {
		d.syntaxError(err)
		return nil, d.errs
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	root = deref(root)
	if isNull(root) {
		d.add(root, "", "", "the file holds no settings", "describe the listeners and subsystems to serve; conf/examples has complete files")
		return nil, d.errs
	}
	if root.Kind != yaml.MappingNode {
		d.add(root, "", "", fmt.Sprintf("the top level is a %s, not a mapping", kindName(root)), "start the file with the keys listeners:, subsystems: and (optionally) transport: and limits:")
		return nil, d.errs
	}
	c := &Config{File: file, src: d.src}
	d.src.pos[""] = position{root.Line, root.Column}
	d.mapping(root, "", configKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "listeners":
			d.sequence(v, p, func(n *yaml.Node, p string) {
				var l Listener
				d.listener(n, p, &l)
				c.Listeners = append(c.Listeners, l)
			})
		case "subsystems":
			d.sequence(v, p, func(n *yaml.Node, p string) {
				var s Subsystem
				d.subsystem(n, p, &s)
				c.Subsystems = append(c.Subsystems, s)
			})
		case "transport":
			d.transport(v, p, &c.Transport)
		case "hosts":
			d.sequence(v, p, func(n *yaml.Node, p string) {
				var h Host
				d.host(n, p, &h)
				c.Hosts = append(c.Hosts, h)
			})
		case "control":
			d.control(v, p, &c.Control)
		case "state_file":
			d.str(v, p, &c.StateFile)
		case "metrics":
			d.metrics(v, p, &c.Metrics)
		case "limits":
			d.limits(v, p, &c.Limits)
		case "auto_reopen":
			d.autoReopen(v, p, &c.AutoReopen)
		}
	})
	// The defaults a file gets that a Config built in Go does not: there a zero
	// InCapsuleDataSize or SharedReceiveQueue means none, in a file that is written
	// in_capsule_data_size: 0 (shared_receive_queue: 0).
	if p := "transport.in_capsule_data_size"; !d.src.written(p) && !d.src.bad[p] {
		c.Transport.InCapsuleDataSize = DefaultInCapsuleDataSize
	}
	if p := "transport.shared_receive_queue"; !d.src.written(p) && !d.src.bad[p] {
		c.Transport.SharedReceiveQueue = DefaultSharedReceiveQueue
	}
	return c, d.errs
}

// lineOf returns line n (1-based) of data.
func lineOf(data []byte, n int) []byte {
	lines := bytes.Split(data, []byte("\n"))
	if n < 1 || n > len(lines) {
		return nil
	}
	return lines[n-1]
}

// ParseSubsystem decodes one subsystem — a mapping with the keys of a subsystems[] item,
// namespaces included — as strictly as Parse decodes a file (unknown keys, bad values),
// without defaults or validation: those come when the subsystem is added to a running
// configuration (gonvmf ctl subsystem add --yaml). Paths stay as written.
func ParseSubsystem(data []byte, filename string) (Subsystem, error) {
	var s Subsystem
	err := decodeFragment(data, filename, "subsystem", func(d *decoder, n *yaml.Node) { d.subsystem(n, "", &s) })
	return s, err
}

// ParseNamespace is ParseSubsystem for one namespace (the keys of a namespaces[] item).
func ParseNamespace(data []byte, filename string) (Namespace, error) {
	var ns Namespace
	err := decodeFragment(data, filename, "namespace", func(d *decoder, n *yaml.Node) { d.namespace(n, "", &ns) })
	return ns, err
}

func decodeFragment(data []byte, file, what string, fn func(*decoder, *yaml.Node)) error {
	d := &decoder{file: file, src: newSource()}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		d.syntaxError(err)
		return joinSorted(d.errs)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root = deref(root); isNull(root) {
		d.add(nil, "", "", "no "+what+" is described", "write the "+what+"'s fields as in the configuration file")
		return joinSorted(d.errs)
	}
	fn(d, root)
	return joinSorted(d.errs)
}

func (d *decoder) syntaxError(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	d.errs = append(d.errs, &FieldError{File: d.file, Line: line, Msg: "YAML syntax error: " + msg,
		Fix: "fix the YAML syntax (indent with spaces, not tabs; quote values that contain ': ' or start with a special character)"})
}

func (d *decoder) listener(n *yaml.Node, path string, l *Listener) {
	d.mapping(n, path, listenerKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "transport":
			d.str(v, p, &l.Transport)
		case "address":
			d.str(v, p, &l.Address)
		case "port":
			if x, ok := d.uint(v, p, math.MaxUint16, portRange); ok {
				l.Port = uint16(x)
			}
		case "ana_states":
			d.anaStates(v, p, &l.ANAStates)
		}
	})
}

// anaStates decodes a mapping of ANA group ID to state ({1: optimized, 2: inaccessible}).
// Each entry's path is the mapping's path and the group as written ("ana_states.2").
func (d *decoder) anaStates(n *yaml.Node, path string, out *[MaxANAGroup + 1]ANAState) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.bad(n, path, nodeText(n), fmt.Sprintf("expected a mapping of ANA group to state, got a %s", kindName(n)),
			"write one 'group: state' per line, e.g. 1: optimized")
		return
	}
	seen := map[uint64]string{}
	for _, f := range d.fields(n, path, map[*yaml.Node]bool{n: true}) {
		key := f.key.Value
		p := join(path, key)
		d.src.pos[p] = position{f.key.Line, f.key.Column}
		g, ok := d.uint(f.key, p, MaxANAGroup, anaGroupRange)
		if !ok {
			continue
		}
		if g == 0 {
			d.bad(f.key, p, key, fmt.Sprintf("%s is not an ANA group ID", key), fmt.Sprintf("use 1..%d (0 is reserved)", MaxANAGroup))
			continue
		}
		if prev, dup := seen[g]; dup {
			d.bad(f.key, p, key, fmt.Sprintf("ANA group %d is given twice (as %s and as %s)", g, prev, key), "keep one of them")
			continue
		}
		seen[g] = key
		s, ok := d.scalar(f.val, p)
		if !ok {
			continue
		}
		st, err := ParseANAState(s)
		if err != nil {
			d.bad(f.val, p, s, fmt.Sprintf("%q is not an ANA state", s), "use one of "+anaStateList())
			continue
		}
		out[g] = st
	}
}

func (d *decoder) subsystem(n *yaml.Node, path string, s *Subsystem) {
	d.mapping(n, path, subsystemKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "nqn":
			d.str(v, p, &s.NQN)
		case "serial":
			d.str(v, p, &s.Serial)
		case "model":
			d.str(v, p, &s.Model)
		case "cntlid_min":
			if x, ok := d.uint(v, p, math.MaxUint16, cntlidRange); ok {
				s.CNTLIDMin = uint16(x)
			}
		case "cntlid_max":
			if x, ok := d.uint(v, p, math.MaxUint16, cntlidRange); ok {
				s.CNTLIDMax = uint16(x)
			}
		case "allow_any_host":
			d.boolean(v, p, &s.AllowAnyHost)
		case "auth_required":
			d.boolean(v, p, &s.AuthRequired)
		case "hosts":
			d.sequence(v, p, func(n *yaml.Node, p string) {
				var h string
				d.str(n, p, &h)
				s.Hosts = append(s.Hosts, h)
			})
		case "namespaces":
			d.sequence(v, p, func(n *yaml.Node, p string) {
				var ns Namespace
				d.namespace(n, p, &ns)
				s.Namespaces = append(s.Namespaces, ns)
			})
		}
	})
}

func (d *decoder) namespace(n *yaml.Node, path string, ns *Namespace) {
	d.mapping(n, path, namespaceKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "nsid":
			if x, ok := d.uint(v, p, math.MaxUint32, nsidRange); ok {
				ns.NSID = uint32(x)
			}
		case "backend":
			d.str(v, p, &ns.Backend)
		case "path":
			d.str(v, p, &ns.Path)
		case "size":
			d.size(v, p, &ns.Size)
		case "rbd":
			d.rbd(v, p, &ns.RBD)
		case "lba_size":
			if x, ok := d.uint(v, p, math.MaxUint32, lbaSizeRange); ok {
				ns.LBASize = uint32(x)
			}
		case "read_only":
			d.boolean(v, p, &ns.ReadOnly)
		case "uuid":
			d.id(v, p, ns.UUID[:], func(s string) ([]byte, error) { b, err := ParseUUID(s); return b[:], err }, "write a UUID as 8-4-4-4-12 hex digits, e.g. 6ba7b810-9dad-11d1-80b4-00c04fd430c8, or remove the field to derive one")
		case "nguid":
			d.id(v, p, ns.NGUID[:], func(s string) ([]byte, error) { b, err := ParseNGUID(s); return b[:], err }, "write an NGUID as 32 hex digits, e.g. 0123456789abcdef0123456789abcdef, or remove the field to derive one")
		case "eui64":
			d.id(v, p, ns.EUI64[:], func(s string) ([]byte, error) { b, err := ParseEUI64(s); return b[:], err }, "write an EUI-64 as 16 hex digits, e.g. 0123456789abcdef, or remove the field to derive one")
		case "ana_group":
			if x, ok := d.uint(v, p, math.MaxUint32, anaGroupRange); ok {
				ns.ANAGroup = uint32(x)
			}
		case "shared":
			d.boolean(v, p, &ns.Shared)
		}
	})
}

func (d *decoder) rbd(n *yaml.Node, path string, r *RBD) {
	d.mapping(n, path, rbdKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "pool":
			d.str(v, p, &r.Pool)
		case "rados_namespace":
			d.str(v, p, &r.RadosNamespace)
		case "image":
			d.str(v, p, &r.Image)
		case "ceph_conf":
			d.str(v, p, &r.CephConf)
		case "user":
			d.str(v, p, &r.User)
		case "keyring":
			d.str(v, p, &r.Keyring)
		case "create_size":
			d.size(v, p, &r.CreateSize)
		}
	})
}

func (d *decoder) transport(n *yaml.Node, path string, t *Transport) {
	d.mapping(n, path, transportKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "queue_depth":
			d.int(v, p, &t.QueueDepth, queueDepthRange)
		case "in_capsule_data_size":
			d.intSize(v, p, &t.InCapsuleDataSize, icdRange)
		case "max_io_size":
			d.intSize(v, p, &t.MaxIOSize, maxIORange)
		case "buffer_pool_size":
			d.size(v, p, &t.BufferPoolSize)
		case "poll_groups":
			d.int(v, p, &t.PollGroups, pollGroupsRange)
		case "shared_receive_queue":
			d.int(v, p, &t.SharedReceiveQueue, srqRange)
		case "busy_poll":
			d.boolean(v, p, &t.BusyPoll)
		case "max_io_queues":
			d.int(v, p, &t.MaxIOQueues, maxIOQueuesRange)
		case "keep_alive_timeout":
			d.duration(v, p, &t.KeepAliveTimeout)
		}
	})
}

func (d *decoder) control(n *yaml.Node, path string, c *Control) {
	d.mapping(n, path, controlKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "socket":
			d.str(v, p, &c.Socket)
		case "tcp":
			d.str(v, p, &c.TCP)
		case "tls_cert":
			d.str(v, p, &c.TLSCert)
		case "tls_key":
			d.str(v, p, &c.TLSKey)
		case "tls_client_ca":
			d.str(v, p, &c.TLSClientCA)
		}
	})
}

func (d *decoder) metrics(n *yaml.Node, path string, m *Metrics) {
	if v := deref(n); v.Kind == yaml.ScalarNode && !isNull(v) {
		d.bad(v, path, v.Value, fmt.Sprintf("expected a mapping of %s, got a string", strings.Join(metricsKeys, ", ")),
			"write the address under it: metrics: {address: "+v.Value+"}")
		return
	}
	d.mapping(n, path, metricsKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "address":
			d.str(v, p, &m.Address)
		case "profiling":
			d.boolean(v, p, &m.Profiling)
		case "per_namespace":
			d.str(v, p, &m.PerNamespace)
		}
	})
}

func (d *decoder) limits(n *yaml.Node, path string, l *Limits) {
	d.mapping(n, path, limitsKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "max_queues":
			d.int(v, p, &l.MaxQueues, maxQueuesRange)
		case "max_queues_per_address":
			d.int(v, p, &l.MaxQueuesPerAddress, perAddressRange)
		case "max_controllers_per_host":
			d.int(v, p, &l.MaxControllersPerHost, ctrlsPerHostRange)
		case "max_queues_per_host":
			d.int(v, p, &l.MaxQueuesPerHost, queuesPerHostRange)
		case "connect_timeout":
			d.duration(v, p, &l.ConnectTimeout)
		case "min_keep_alive_timeout":
			d.duration(v, p, &l.MinKeepAliveTimeout)
		case "max_keep_alive_timeout":
			d.duration(v, p, &l.MaxKeepAliveTimeout)
		case "response_timeout":
			d.duration(v, p, &l.ResponseTimeout)
		case "max_queue_data_in_flight":
			d.intSize(v, p, &l.MaxQueueDataInFlight, dataInFlightRange)
		}
	})
}

func (d *decoder) autoReopen(n *yaml.Node, path string, a *AutoReopen) {
	d.mapping(n, path, autoReopenKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "attempts":
			d.int(v, p, &a.Attempts, reopenAttemptsRange)
		case "backoff":
			d.duration(v, p, &a.Backoff)
		case "max_backoff":
			d.duration(v, p, &a.MaxBackoff)
		case "settle":
			d.duration(v, p, &a.Settle)
		}
	})
}

// --- structure ---

type keyValue struct{ key, val *yaml.Node }

// mapping walks the fields of a mapping node: it rejects unknown and repeated keys, applies
// merge keys (<<), records each field's position and calls fn for each known field.
func (d *decoder) mapping(n *yaml.Node, path string, known []string, fn func(key string, v *yaml.Node, p string)) {
	n = deref(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.bad(n, path, nodeText(n), fmt.Sprintf("expected a mapping of %s, got a %s", strings.Join(known, ", "), kindName(n)),
			"write one 'key: value' per line, indented under "+lastElem(path))
		return
	}
	for _, f := range d.fields(n, path, map[*yaml.Node]bool{n: true}) {
		key := f.key.Value
		p := join(path, key)
		if !contains(known, key) {
			d.add(f.key, p, key, fmt.Sprintf("unknown field %q", key), unknownFix(key, known))
			continue
		}
		d.src.pos[p] = position{f.key.Line, f.key.Column}
		if v := deref(f.val); isNull(v) {
			d.src.null[p] = true // "key:" with no value means "use the default"
			continue
		}
		fn(key, f.val, p)
	}
}

// fields lists a mapping's key/value pairs with merge keys expanded: explicit keys first,
// then keys from merged mappings that the mapping does not set itself. Each mapping is
// expanded once (visited), so merge chains cost linear time and cycles end.
func (d *decoder) fields(n *yaml.Node, path string, visited map[*yaml.Node]bool) []keyValue {
	var out []keyValue
	var merges []*yaml.Node
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.add(k, path, "", fmt.Sprintf("a %s is used as a key", kindName(k)), "keys are plain names such as nsid or backend")
			continue
		}
		if k.Tag == "!!merge" || k.Value == "<<" {
			merges = append(merges, v)
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			d.add(k, join(path, k.Value), k.Value, fmt.Sprintf("field %q is given twice (first on line %d)", k.Value, prev.Line), "keep one of them")
			continue
		}
		seen[k.Value] = k
		out = append(out, keyValue{k, v})
	}
	for _, m := range merges {
		m = deref(m)
		var srcs []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			srcs = []*yaml.Node{m}
		case yaml.SequenceNode:
			for _, s := range m.Content {
				srcs = append(srcs, deref(s))
			}
		default:
			srcs = []*yaml.Node{m} // reported below
		}
		for _, s := range srcs {
			if s == nil || s.Kind != yaml.MappingNode {
				d.add(s, join(path, "<<"), nodeText(s), "a merge key (<<) must refer to a mapping or a list of mappings", "merge an anchored mapping, e.g. <<: *defaults")
				continue
			}
			if visited[s] {
				continue
			}
			visited[s] = true
			for _, f := range d.fields(s, path, visited) {
				if _, ok := seen[f.key.Value]; !ok {
					seen[f.key.Value] = f.key
					out = append(out, f)
				}
			}
		}
	}
	return out
}

// sequence calls fn for each item of a list, with the item's path ("x[3]").
func (d *decoder) sequence(n *yaml.Node, path string, fn func(n *yaml.Node, p string)) {
	n = deref(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.bad(n, path, nodeText(n), fmt.Sprintf("expected a list, got a %s", kindName(n)), "write each item on its own line starting with '- '")
		return
	}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.src.pos[p] = position{item.Line, item.Column}
		fn(item, p)
	}
}

// --- scalars ---

// scalar returns the text of a scalar node; the YAML tag does not matter (so backend: null
// and serial: 0123 read as written).
func (d *decoder) scalar(n *yaml.Node, p string) (string, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		d.bad(n, p, "", fmt.Sprintf("expected a single value, got a %s", kindName(n)), "write the value on the same line as the key")
		return "", false
	}
	return n.Value, true
}

func (d *decoder) str(n *yaml.Node, p string, out *string) {
	if s, ok := d.scalar(n, p); ok {
		*out = s
	}
}

func (d *decoder) boolean(n *yaml.Node, p string, out *bool) {
	s, ok := d.scalar(n, p)
	if !ok {
		return
	}
	switch s {
	case "true", "True", "TRUE":
		*out = true
	case "false", "False", "FALSE":
		*out = false
	default:
		d.bad(n, p, s, fmt.Sprintf("%q is not a boolean", s), "write true or false")
	}
}

// rangeText describes a field's valid range: the problem statement for a value outside it
// and the fix. Decoding and validation share them so that a value too large for its Go
// type and a value outside the valid range read the same.
type rangeText func(value string) (msg, fix string)

func parseInt(s string) (int64, error) {
	t := strings.TrimPrefix(s, "+")
	neg := strings.HasPrefix(t, "-")
	t = strings.TrimPrefix(t, "-")
	base := 10
	switch {
	case strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X"):
		base, t = 16, t[2:]
	case strings.HasPrefix(t, "0o"):
		base, t = 8, t[2:]
	}
	u, err := strconv.ParseUint(t, base, 63)
	if err != nil {
		return 0, err
	}
	if neg {
		return -int64(u), nil
	}
	return int64(u), nil
}

// uint decodes an unsigned integer no larger than max.
func (d *decoder) uint(n *yaml.Node, p string, max uint64, rng rangeText) (uint64, bool) {
	s, ok := d.scalar(n, p)
	if !ok {
		return 0, false
	}
	x, err := parseInt(s)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			msg, fix := rng(s)
			d.bad(n, p, s, msg, fix)
			return 0, false
		}
		_, fix := rng(s)
		d.bad(n, p, s, fmt.Sprintf("%q is not a whole number", s), fix)
		return 0, false
	}
	if x < 0 || uint64(x) > max {
		msg, fix := rng(s)
		d.bad(n, p, s, msg, fix)
		return 0, false
	}
	return uint64(x), true
}

func (d *decoder) int(n *yaml.Node, p string, out *int, rng rangeText) {
	if x, ok := d.uint(n, p, math.MaxInt32, rng); ok {
		*out = int(x)
	}
}

func (d *decoder) size(n *yaml.Node, p string, out *Size) {
	s, ok := d.scalar(n, p)
	if !ok {
		return
	}
	v, err := ParseSize(s)
	if err != nil {
		d.bad(n, p, s, err.Error(), sizeSyntaxHint)
		return
	}
	*out = v
}

func (d *decoder) intSize(n *yaml.Node, p string, out *int, rng rangeText) {
	var v Size
	d.size(n, p, &v)
	if d.src.bad[p] {
		return
	}
	if v > math.MaxInt32 {
		msg, fix := rng(v.String())
		d.bad(n, p, v.String(), msg, fix)
		return
	}
	*out = int(v)
}

func (d *decoder) duration(n *yaml.Node, p string, out *time.Duration) {
	s, ok := d.scalar(n, p)
	if !ok {
		return
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		fix := "write a Go duration such as 120s, 2m or 1m30s"
		if _, ierr := strconv.ParseUint(s, 10, 64); ierr == nil {
			d.bad(n, p, s, fmt.Sprintf("%q has no unit", s), fmt.Sprintf("write %ss for seconds (%s)", s, fix))
			return
		}
		d.bad(n, p, s, fmt.Sprintf("%q is not a duration", s), fix)
		return
	}
	*out = v
}

func (d *decoder) id(n *yaml.Node, p string, out []byte, parse func(string) ([]byte, error), fix string) {
	s, ok := d.scalar(n, p)
	if !ok {
		return
	}
	b, err := parse(s)
	if err != nil {
		d.bad(n, p, s, fmt.Sprintf("%q is not valid: %v", s, err), fix)
		return
	}
	zero := true
	for _, x := range b {
		zero = zero && x == 0
	}
	if zero {
		d.bad(n, p, s, fmt.Sprintf("%q is all zeroes, which NVMe reserves for \"no identifier\"", s), "remove the field to derive an identifier, or give a non-zero one")
		return
	}
	copy(out, b)
}

// --- errors ---

func (d *decoder) add(n *yaml.Node, p, value, msg, fix string) {
	e := &FieldError{File: d.file, Field: p, Value: value, Msg: msg, Fix: fix}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// bad reports a value that could not be decoded and marks its field so that validation
// leaves it alone.
func (d *decoder) bad(n *yaml.Node, p, value, msg, fix string) {
	d.src.bad[p] = true
	if pos, ok := d.src.pos[p]; ok {
		d.errs = append(d.errs, &FieldError{File: d.file, Line: pos.line, Column: pos.col, Field: p, Value: value, Msg: msg, Fix: fix})
		return
	}
	d.add(n, p, value, msg, fix)
}

// --- helpers ---

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 ||
		n.Kind == yaml.ScalarNode && n.Tag == "!!null" && (n.Value == "" || n.Value == "~")
}

func kindName(n *yaml.Node) string {
	switch deref(n).Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value"
	}
	return "nothing"
}

func nodeText(n *yaml.Node) string {
	if n = deref(n); n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func lastElem(path string) string {
	if path == "" {
		return "the top level"
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:] + ":"
	}
	return path + ":"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// unknownFix suggests the known field closest to an unknown one.
func unknownFix(key string, known []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", 3
	first := func(s string) string { f, _, _ := strings.Cut(strings.ToLower(s), "_"); return f }
	var sameFirst []string
	for _, k := range known {
		if first(k) == first(key) {
			sameFirst = append(sameFirst, k)
		}
	}
	if len(sameFirst) == 1 {
		best, bestDist = sameFirst[0], 2
	}
	for _, k := range known {
		if norm(k) == norm(key) {
			best, bestDist = k, 0
			break
		}
		if dist := editDistance(strings.ToLower(key), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	list := "the fields here are " + strings.Join(known, ", ")
	if best != "" {
		return fmt.Sprintf("did you mean %s? (%s)", best, list)
	}
	return "remove it; " + list
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
