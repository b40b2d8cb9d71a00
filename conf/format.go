package conf

import (
	"fmt"
	"math/bits"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// String writes the configuration as YAML with every default filled in and every derived
// value spelled out; comments give sizes for people (go-humanize) and say where values came
// from. Parsing the text again yields the same Config. gonvmf check prints it.
func (c *Config) String() string {
	var b strings.Builder
	// w writes one line; a comment after the value is aligned in a column.
	w := func(indent int, text, comment string) {
		line := strings.Repeat("  ", indent) + text
		if comment != "" {
			line = fmt.Sprintf("%-44s # %s", line, comment)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	if c.File != "" {
		w(0, "# gonvmf configuration resolved from "+c.File, "")
	}
	w(0, "listeners:", "")
	for _, l := range c.Listeners {
		w(1, "- transport: "+yamlString(l.Transport), "")
		w(1, "  address: "+yamlString(l.Address), "")
		w(1, fmt.Sprintf("  port: %d", l.Port), "")
		first := true
		for g := 1; g <= MaxANAGroup; g++ {
			if l.ANAStates[g] == "" {
				continue
			}
			if first {
				w(1, "  ana_states:", "ANA group: state; groups not listed are optimized")
				first = false
			}
			w(2, fmt.Sprintf("  %d: %s", g, yamlString(string(l.ANAStates[g]))), "")
		}
	}
	w(0, "subsystems:", "")
	for _, s := range c.Subsystems {
		w(1, "- nqn: "+yamlString(s.NQN), "")
		w(1, "  serial: "+yamlString(s.Serial), "")
		w(1, "  model: "+yamlString(s.Model), "")
		w(1, fmt.Sprintf("  cntlid_min: %d", s.CNTLIDMin), "")
		w(1, fmt.Sprintf("  cntlid_max: %d", s.CNTLIDMax), "")
		if s.AllowAnyHost {
			w(1, "  allow_any_host: true", "")
		} else {
			w(1, "  hosts:", "")
			for _, h := range s.Hosts {
				w(2, "  - "+yamlString(h), "")
			}
		}
		if s.AuthRequired {
			w(1, "  auth_required: true", "")
		}
		if len(s.Namespaces) == 0 {
			w(1, "  namespaces: []", "")
			continue
		}
		w(1, "  namespaces:", "")
		for _, ns := range s.Namespaces {
			w(2, fmt.Sprintf("  - nsid: %d", ns.NSID), "")
			w(2, "    backend: "+yamlString(ns.Backend), "")
			if ns.Path != "" {
				w(2, "    path: "+yamlString(ns.Path), "")
			}
			switch {
			case ns.Size != 0 && ns.LBASize != 0:
				w(2, "    size: "+ns.Size.String(), fmt.Sprintf("%s, %d blocks", ns.Size.Human(), uint64(ns.Size)/uint64(ns.LBASize)))
			case ns.Size != 0:
				w(2, "    size: "+ns.Size.String(), ns.Size.Human())
			case ns.Backend == BackendFile:
				w(2, "    # size: that of the file when the target starts", "")
			case ns.Backend == BackendBlock:
				w(2, "    # size: that of the device", "")
			case ns.Backend == BackendRBD:
				w(2, "    # size: that of the image", "")
			}
			if ns.Backend == BackendRBD {
				r := ns.RBD
				w(2, "    rbd:", "")
				w(2, "      pool: "+yamlString(r.Pool), "")
				if r.RadosNamespace != "" {
					w(2, "      rados_namespace: "+yamlString(r.RadosNamespace), "")
				}
				w(2, "      image: "+yamlString(r.Image), "")
				if r.CephConf != "" {
					w(2, "      ceph_conf: "+yamlString(r.CephConf), "")
				} else {
					w(2, "      # ceph_conf: librados's search ($CEPH_CONF, /etc/ceph/ceph.conf)", "")
				}
				if r.User != "" {
					w(2, "      user: "+yamlString(r.User), "")
				} else {
					w(2, "      # user: admin", "")
				}
				if r.Keyring != "" {
					w(2, "      keyring: "+yamlString(r.Keyring), "")
				} else {
					w(2, "      # keyring: as ceph.conf says", "")
				}
				if r.CreateSize != 0 {
					w(2, "      create_size: "+r.CreateSize.String(), r.CreateSize.Human())
				}
			}
			w(2, fmt.Sprintf("    lba_size: %d", ns.LBASize), "")
			w(2, fmt.Sprintf("    read_only: %t", ns.ReadOnly), "")
			w(2, "    uuid: "+FormatUUID(ns.UUID), "")
			w(2, "    nguid: "+FormatNGUID(ns.NGUID), "")
			w(2, "    eui64: "+FormatEUI64(ns.EUI64), "")
			w(2, fmt.Sprintf("    ana_group: %d", ns.ANAGroup), "")
			w(2, fmt.Sprintf("    shared: %t", ns.Shared), "")
		}
	}
	if len(c.Hosts) > 0 {
		w(0, "hosts:", "")
		for _, h := range c.Hosts {
			w(1, "- nqn: "+yamlString(h.NQN), "")
			w(1, "  dhchap_secret: "+yamlString(h.DHCHAPSecret), "")
			if h.DHCHAPCtrlSecret != "" {
				w(1, "  dhchap_ctrl_secret: "+yamlString(h.DHCHAPCtrlSecret), "")
			}
			var hs, gs []string
			for _, x := range h.Hashes() {
				hs = append(hs, x.String())
			}
			for _, x := range h.DHGroups() {
				gs = append(gs, x.String())
			}
			w(1, "  dhchap_hashes: ["+strings.Join(hs, ", ")+"]", "")
			w(1, "  dhchap_dhgroups: ["+strings.Join(gs, ", ")+"]", "")
		}
	}
	if c.StateFile == "" || c.StateFile == StateFileNone {
		w(0, "state_file: "+StateFileNone, "no Persist Through Power Loss for reservations")
	} else {
		w(0, "state_file: "+yamlString(c.StateFile), "reservations that persist through power loss")
	}
	t := c.Transport
	w(0, "transport:", "")
	w(1, fmt.Sprintf("queue_depth: %d", t.QueueDepth), "")
	icd := "off"
	if t.InCapsuleDataSize > 0 {
		icd = Size(t.InCapsuleDataSize).Human()
	}
	w(1, "in_capsule_data_size: "+sizeText(t.InCapsuleDataSize), icd)
	mdts := ""
	if t.MaxIOSize >= 4096 {
		mdts = fmt.Sprintf("%s, MDTS %d", Size(t.MaxIOSize).Human(), bits.Len(uint(t.MaxIOSize/4096))-1)
	}
	w(1, "max_io_size: "+sizeText(t.MaxIOSize), mdts)
	w(1, "buffer_pool_size: "+t.BufferPoolSize.String(), t.BufferPoolSize.Human())
	if t.PollGroups == 0 {
		w(1, "poll_groups: 0", fmt.Sprintf("one per CPU the Go scheduler uses (GOMAXPROCS): %d here", numProcs()))
	} else {
		w(1, fmt.Sprintf("poll_groups: %d", t.PollGroups), "")
	}
	if t.SharedReceiveQueue == 0 {
		w(1, "shared_receive_queue: 0", "off: every I/O queue has its own receive buffers")
	} else {
		w(1, fmt.Sprintf("shared_receive_queue: %d", t.SharedReceiveQueue), "receive buffers per poll group at most")
	}
	w(1, fmt.Sprintf("busy_poll: %t", t.BusyPoll), "")
	w(1, fmt.Sprintf("max_io_queues: %d", t.MaxIOQueues), "")
	w(1, "keep_alive_timeout: "+t.KeepAliveTimeout.String(), "")
	ctl := c.Control
	w(0, "control:", "")
	w(1, "socket: "+yamlString(ctl.Socket), "")
	if ctl.TCP != "" {
		w(1, "tcp: "+yamlString(ctl.TCP), "mutual TLS")
		w(1, "tls_cert: "+yamlString(ctl.TLSCert), "")
		w(1, "tls_key: "+yamlString(ctl.TLSKey), "")
		w(1, "tls_client_ca: "+yamlString(ctl.TLSClientCA), "")
	} else {
		w(1, "# tcp: off", "")
	}
	if m := c.Metrics; m.Address != "" {
		w(0, "metrics:", "")
		w(1, "address: "+yamlString(m.Address), "Prometheus metrics at http://"+m.Address+"/metrics")
		if m.Profiling {
			w(1, "profiling: true", "Go runtime profiles at http://"+m.Address+"/debug/pprof/")
		}
		switch m.PerNamespace {
		case MetricsFull:
			w(1, "per_namespace: full", "counters, gauges and latency histograms of each namespace")
		case MetricsCounters:
			w(1, "per_namespace: counters", "no latency histograms per namespace")
		}
	} else {
		w(0, "# metrics: off", "")
	}
	l := c.Limits
	w(0, "limits:", "")
	w(1, fmt.Sprintf("max_queues: %d", l.MaxQueues), "")
	w(1, fmt.Sprintf("max_queues_per_address: %d", l.MaxQueuesPerAddress), "")
	w(1, fmt.Sprintf("max_controllers_per_host: %d", l.MaxControllersPerHost), "")
	w(1, fmt.Sprintf("max_queues_per_host: %d", l.MaxQueuesPerHost), "")
	w(1, "connect_timeout: "+l.ConnectTimeout.String(), "")
	w(1, "min_keep_alive_timeout: "+l.MinKeepAliveTimeout.String(), "")
	w(1, "max_keep_alive_timeout: "+l.MaxKeepAliveTimeout.String(), "")
	w(1, "response_timeout: "+l.ResponseTimeout.String(), "")
	w(1, "max_queue_data_in_flight: "+sizeText(l.MaxQueueDataInFlight), "")
	a := c.AutoReopen
	w(0, "auto_reopen:", "a namespace whose storage fenced it off (rbd blocklist)")
	w(1, fmt.Sprintf("attempts: %d", a.Attempts), "")
	w(1, "backoff: "+a.Backoff.String(), "")
	w(1, "max_backoff: "+a.MaxBackoff.String(), "")
	w(1, "settle: "+a.Settle.String(), "")
	return b.String()
}

// plainSafe matches strings that YAML reads back as the same text without quotes. (The
// decoder takes scalars by their text whatever their tag, so null or 0123 need no quotes.)
var plainSafe = regexp.MustCompile(`^[A-Za-z0-9_./]([A-Za-z0-9_./:@+=, -]*[A-Za-z0-9_./@+=-])?$`)

func yamlString(s string) string {
	if plainSafe.MatchString(s) && !strings.Contains(s, ": ") && !strings.Contains(s, " #") {
		return s
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Value: s})
	if err != nil {
		return strconv.Quote(s)
	}
	return strings.TrimSuffix(string(out), "\n")
}
