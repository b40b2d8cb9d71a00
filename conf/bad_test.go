package conf

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The YAML of each bad-config case marks the line the error must name with "# <-".
// base* are valid fragments the cases build on.
const (
	baseListeners = "listeners:\n  - address: 10.99.0.1\n"
	baseTransport = ""
)

// sub wraps namespace lines in a valid subsystem.
func sub(namespaces string) string {
	return baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    allow_any_host: true\n    namespaces:\n" + namespaces
}

const nullNS = "      - nsid: 1\n        backend: null\n        size: 1GiB\n"

var badConfigs = []struct {
	name  string
	yaml  string
	field string // the field path the error names
	value string // text the message must quote ("" for a missing field)
	fix   string // text of the fix
	count int    // errors expected in all (0 means 1)
}{
	// --- structure ---
	{"unknown field with suggestion", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        lbasize: 4096 # <-\n"),
		"subsystems[0].namespaces[0].lbasize", `"lbasize"`, "did you mean lba_size?", 0},
	{"unknown field dash spelling", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        read-only: true # <-\n"),
		"subsystems[0].namespaces[0].read-only", `"read-only"`, "did you mean read_only?", 0},
	{"unknown field no suggestion", baseListeners + "colour: blue # <-\n" + sub(nullNS)[len(baseListeners):],
		"colour", `"colour"`, "remove it; the fields here are listeners, subsystems, transport, hosts, control, state_file, metrics", 0},
	{"unknown transport field", sub(nullNS) + "transport:\n  queue_size: 64 # <-\n",
		"transport.queue_size", `"queue_size"`, "did you mean queue_depth?", 0},
	{"repeated key", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        size: 2GiB # <-\n"),
		"subsystems[0].namespaces[0].size", "size", "keep one of them", 0},
	{"list where a mapping belongs", sub(nullNS) + "transport: # <-\n  - queue_depth: 64\n",
		"transport", "expected a mapping of queue_depth", "write one 'key: value' per line", 0},
	{"mapping where a list belongs", "listeners: # <-\n  address: 10.99.0.1\n" + sub(nullNS)[len(baseListeners):],
		"listeners", "expected a list, got a mapping", "starting with '- '", 0},
	{"scalar where a namespace belongs", sub("      - 1 # <-\n"),
		"subsystems[0].namespaces[0]", "expected a mapping of nsid, backend", "write one 'key: value' per line", 0},
	{"list where a subsystem belongs", baseListeners + "subsystems:\n  - [a, b] # <-\n",
		"subsystems[0]", "expected a mapping of nqn, serial", "write one 'key: value' per line", 0},
	{"mapping where a host belongs", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    hosts:\n      - {nqn: x} # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].hosts[0]", "expected a single value, got a mapping", "same line as the key", 0},
	{"merge of a scalar", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        <<: 5 # <-\n"),
		"subsystems[0].namespaces[0].<<", "a merge key (<<) must refer to a mapping", "<<: *defaults", 0},
	{"yaml syntax error", "listeners:\n  - address: 10.99.0.1: 4420 # <-\n",
		"", "YAML syntax error: mapping values are not allowed", "fix the YAML syntax", 0},
	{"tab indentation", "listeners:\n\t- address: 10.99.0.1 # <-\n",
		"", "YAML syntax error", "indent with spaces, not tabs", 0},
	{"two documents", sub(nullNS) + "--- # <-\nlisteners: []\n",
		"", "more than one YAML document", "keep one document", 0},

	// --- listeners ---
	{"port out of range", "listeners:\n  - address: 10.99.0.1\n    port: 70000 # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].port", "70000 is not a valid port", "use a port from 1 to 65535", 0},
	{"port zero", "listeners:\n  - address: 10.99.0.1\n    port: 0 # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].port", "0 is not a valid port", "use a port from 1 to 65535", 0},
	{"port not a number", "listeners:\n  - address: 10.99.0.1\n    port: nvme # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].port", `"nvme" is not a whole number`, "use a port from 1 to 65535", 0},
	{"address not an IP", "listeners:\n  - address: storage.example.com # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].address", `"storage.example.com" is not an IP address`, "host names are not resolved", 0},
	{"address missing", "listeners:\n  - port: 4420 # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].address", "missing", "give the IPv4 or IPv6 address", 0},
	{"transport tcp", "listeners:\n  - transport: tcp # <-\n    address: 10.99.0.1\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].transport", `transport "tcp" is not supported yet`, "use rdma", 0},
	{"duplicate listener", "listeners:\n  - address: 10.99.0.1\n  - address: 10.99.0.1 # <-\n    port: 4420\n" + sub(nullNS)[len(baseListeners):],
		"listeners[1]", "10.99.0.1:4420 is already defined by listeners[0] (line 2)", "use another port", 0},
	{"wildcard overlap", "listeners:\n  - address: 0.0.0.0\n  - address: 10.99.0.1 # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[1]", "overlaps listeners[0] (line 2) at 0.0.0.0:4420", "use another port", 0},

	// --- subsystems ---
	{"nqn missing", baseListeners + "subsystems:\n  - allow_any_host: true # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].nqn", "missing", "nqn: nqn.2024-01.com.example:disk0", 0},
	{"nqn too long", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:" + strings.Repeat("x", 200) + " # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].nqn", "it is 224 bytes long, more than the 223", "use the form nqn.yyyy-mm.<reverse domain>:<name>", 0},
	{"nqn control character", baseListeners + "subsystems:\n  - nqn: \"blktests\\tsubsystem\" # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].nqn", "it contains a control character", "use the form nqn.yyyy-mm", 0},
	{"discovery nqn", baseListeners + "subsystems:\n  - nqn: nqn.2014-08.org.nvmexpress.discovery # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].nqn", "is the well-known discovery subsystem", "give the subsystem its own NQN", 0},
	{"duplicate nqn", sub(nullNS) + "  - nqn: nqn.2024-01.com.example:t # <-\n    allow_any_host: true\n",
		"subsystems[1].nqn", "nqn.2024-01.com.example:t is already the NQN of subsystems[0] (line 4)", "give each subsystem its own NQN", 0},
	{"serial too long", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    serial: ABCDEFGHIJKLMNOPQRSTU # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].serial", `"ABCDEFGHIJKLMNOPQRSTU" is 21 bytes long; a serial number has at most 20`, "shorten it to 20", 0},
	{"serial not ascii", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    serial: SÉRIE # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].serial", "other than printable ASCII", "use printable ASCII", 0},
	{"model too long", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    model: " + strings.Repeat("m", 41) + " # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].model", "is 41 bytes long; a model number has at most 40", "shorten it to 40", 0},
	{"allow_any_host and hosts", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    allow_any_host: true # <-\n    hosts: [nqn.2024-01.com.example:h1]\n    namespaces:\n" + nullNS,
		"subsystems[0].allow_any_host", "are both given", "remove hosts to let every host connect, or remove allow_any_host", 0},
	{"nobody may connect", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].hosts", "no host may connect", "set allow_any_host: true, or list the NQNs", 0},
	{"allow_any_host not a bool", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    allow_any_host: yes # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].allow_any_host", `"yes" is not a boolean`, "write true or false", 0},
	{"bad host nqn", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    hosts:\n      - \"host\\u007f1\" # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].hosts[0]", `is not a valid host NQN: it contains a control character`, "/etc/nvme/hostnqn", 0},
	{"duplicate host", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    hosts:\n      - nqn.2024-01.com.example:h1\n      - nqn.2024-01.com.example:h1 # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].hosts[1]", "is already listed as subsystems[0].hosts[0] (line 6)", "remove the repeated entry", 0},

	// --- namespaces ---
	{"duplicate nsid", sub(nullNS + "      - nsid: 1 # <-\n        backend: null\n        size: 1GiB\n"),
		"subsystems[0].namespaces[1].nsid", "nsid 1 is already used by subsystems[0].namespaces[0] (line 7)", "its own nsid", 0},
	{"nsid zero", sub("      - nsid: 0 # <-\n        backend: null\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].nsid", "0 is not a valid namespace ID", "use 1..1024", 0},
	{"nsid broadcast", sub("      - nsid: 0xFFFFFFFF # <-\n        backend: null\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].nsid", "is the broadcast NSID", "use 1..1024", 0},
	{"nsid too large", sub("      - nsid: 5000 # <-\n        backend: null\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].nsid", "5000 is not a valid namespace ID", "use 1..1024", 0},
	{"nsid missing", sub("      - backend: null # <-\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].nsid", "missing", "give each namespace a unique nsid", 0},
	// rbd
	{"rbd missing", sub("      - nsid: 1 # <-\n        backend: rbd\n"),
		"subsystems[0].namespaces[0].rbd", "missing", "rbd: {pool: rbd, image: vol1}", 0},
	{"rbd pool missing", sub("      - nsid: 1\n        backend: rbd\n        rbd: # <-\n          image: vol1\n"),
		"subsystems[0].namespaces[0].rbd.pool", "missing", "name the pool, e.g. pool: rbd", 0},
	{"rbd image missing", sub("      - nsid: 1\n        backend: rbd\n        rbd: # <-\n          pool: rbd\n"),
		"subsystems[0].namespaces[0].rbd.image", "missing", "name the image, e.g. image: vol1", 0},
	{"rbd image with a slash", sub("      - nsid: 1\n        backend: rbd\n        rbd:\n          pool: rbd\n          image: rbd/vol1 # <-\n"),
		"subsystems[0].namespaces[0].rbd.image", `"rbd/vol1" is not a valid image name`, "rbd ls -p POOL", 0},
	{"rbd unknown field", sub("      - nsid: 1\n        backend: rbd\n        rbd:\n          pool: rbd\n          image: vol1\n          size: 1GiB # <-\n"),
		"subsystems[0].namespaces[0].rbd.size", `"size"`, "the fields here are pool, rados_namespace, image, ceph_conf, user, keyring, create_size", 0},
	{"rbd user with client.", sub("      - nsid: 1\n        backend: rbd\n        rbd:\n          pool: rbd\n          image: vol1\n          user: client.gonvmf # <-\n"),
		"subsystems[0].namespaces[0].rbd.user", "without the client. of its name", "write user: gonvmf", 0},
	{"rbd with path", sub("      - nsid: 1\n        backend: rbd\n        path: /dev/rbd0 # <-\n        rbd: {pool: rbd, image: vol1}\n"),
		"subsystems[0].namespaces[0].path", "rbd namespaces have no backing file", "remove path", 0},
	{"rbd with size", sub("      - nsid: 1\n        backend: rbd\n        size: 10GiB # <-\n        rbd: {pool: rbd, image: vol1}\n"),
		"subsystems[0].namespaces[0].size", "take their size from the image", "rbd.create_size", 0},
	{"rbd create_size read-only", sub("      - nsid: 1\n        backend: rbd\n        read_only: true\n        rbd:\n          pool: rbd\n          image: vol1\n          create_size: 1GiB # <-\n"),
		"subsystems[0].namespaces[0].rbd.create_size", "a read-only namespace cannot create its image", "rbd create", 0},
	{"rbd create_size not a multiple", sub("      - nsid: 1\n        backend: rbd\n        lba_size: 4096\n        rbd:\n          pool: rbd\n          image: vol1\n          create_size: 1000000 # <-\n"),
		"subsystems[0].namespaces[0].rbd.create_size", "is not a multiple of the LBA size 4096", "use a multiple of 4096", 0},
	{"rbd on a file namespace", sub("      - nsid: 1\n        backend: file\n        path: /srv/a.img\n        rbd: {pool: rbd, image: vol1} # <-\n"),
		"subsystems[0].namespaces[0].rbd", "not of a file one", "set backend: rbd", 0},
	{"rbd image twice", sub("      - {nsid: 1, backend: rbd, rbd: {pool: rbd, image: vol1}}\n      - nsid: 2\n        backend: rbd\n        rbd:\n          pool: rbd\n          image: vol1 # <-\n"),
		"subsystems[0].namespaces[1].rbd.image", "image rbd/vol1 is already the backing of subsystems[0].namespaces[0] (line 7)", "its own image", 0},
	{"lba size 1024", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        lba_size: 1024 # <-\n"),
		"subsystems[0].namespaces[0].lba_size", "1024 is not a supported LBA size", "use 512 or 4096", 0},
	{"backend missing", sub("      - nsid: 1 # <-\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].backend", "missing", "set backend to file, block, null, memory or rbd", 0},
	{"backend unknown", sub("      - nsid: 1\n        backend: ramdisk # <-\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].backend", `"ramdisk" is not a backend`, "use file, block, null, memory or rbd", 0},
	{"backend capitalised", sub("      - nsid: 1\n        backend: File # <-\n        path: /x\n"),
		"subsystems[0].namespaces[0].backend", `"File" is not a backend`, "write it in lower case: file", 0},
	{"file path missing", sub("      - nsid: 1 # <-\n        backend: file\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].path", "missing", "file namespaces need the path of their backing file", 0},
	{"block path missing", sub("      - nsid: 1 # <-\n        backend: block\n"),
		"subsystems[0].namespaces[0].path", "missing", "block namespaces need the path of their backing device", 0},
	{"block with size", sub("      - nsid: 1\n        backend: block\n        path: /dev/sdb\n        size: 1GiB # <-\n"),
		"subsystems[0].namespaces[0].size", "block namespaces take their size from the device", "remove size", 0},
	{"null with path", sub("      - nsid: 1\n        backend: null\n        path: /x # <-\n        size: 1GiB\n"),
		"subsystems[0].namespaces[0].path", "null namespaces have no backing file", "remove path", 0},
	{"null size missing", sub("      - nsid: 1 # <-\n        backend: null\n"),
		"subsystems[0].namespaces[0].size", "missing", "null namespaces need a capacity, e.g. size: 10GiB", 0},
	{"memory size empty value", sub("      - nsid: 1\n        backend: memory\n        size: # <-\n"),
		"subsystems[0].namespaces[0].size", "missing", "memory namespaces need a capacity", 0},
	{"memory too large", sub("      - nsid: 1\n        backend: memory\n        size: 2TiB # <-\n"),
		"subsystems[0].namespaces[0].size", "2TiB is more than the 1TiB a memory namespace may have", "backend: null", 0},
	{"size not a multiple of the lba size", sub("      - nsid: 1\n        backend: null\n        size: 1000000 # <-\n"),
		"subsystems[0].namespaces[0].size", "1000000 (1000000 bytes) is not a multiple of the LBA size 512", "use 999936 or 1000448", 0},
	{"size not a multiple of 4096", sub("      - nsid: 1\n        backend: memory\n        size: 10GB # <-\n        lba_size: 4096\n"),
		"subsystems[0].namespaces[0].size", "(10000000000 bytes) is not a multiple of the LBA size 4096", "use 9999998976 or 10000003072", 0},
	{"size zero", sub("      - nsid: 1\n        backend: null\n        size: 0 # <-\n"),
		"subsystems[0].namespaces[0].size", "a namespace of 0 bytes holds nothing", "at least one block", 0},
	{"size ambiguous unit", sub("      - nsid: 1\n        backend: null\n        size: 10G # <-\n"),
		"subsystems[0].namespaces[0].size", `has the ambiguous unit "G"`, "10GiB", 0},
	{"size unknown unit", sub("      - nsid: 1\n        backend: null\n        size: 10 gigs # <-\n"),
		"subsystems[0].namespaces[0].size", `unknown unit "gigs"`, "whole number of bytes", 0},
	{"uuid malformed", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        uuid: 1234-5678 # <-\n"),
		"subsystems[0].namespaces[0].uuid", `"1234-5678" is not valid`, "8-4-4-4-12 hex digits", 0},
	{"uuid all zero", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        uuid: 00000000-0000-0000-0000-000000000000 # <-\n"),
		"subsystems[0].namespaces[0].uuid", "is all zeroes", "remove the field to derive", 0},
	{"nguid malformed", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        nguid: 0123456789abcdefXX23456789abcdef # <-\n"),
		"subsystems[0].namespaces[0].nguid", "an NGUID holds only hex digits", "32 hex digits", 0},
	{"eui64 wrong length", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        eui64: 0123456789 # <-\n"),
		"subsystems[0].namespaces[0].eui64", "an EUI-64 is 16 hex digits, this has 10", "16 hex digits", 0},
	{"duplicate uuid", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        uuid: 6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4c5b\n      - nsid: 2\n        backend: null\n        size: 1GiB\n        uuid: 6F1C2C3E-8A5B-4D2E-9A43-0B1F2E3D4C5B # <-\n"),
		"subsystems[0].namespaces[1].uuid", "6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4c5b is also the uuid of subsystems[0].namespaces[0] (line 7)", "remove the field to derive a unique one", 0},
	{"duplicate path", sub("      - nsid: 1\n        backend: file\n        path: /srv/a.img\n      - nsid: 2\n        backend: file\n        path: /srv/../srv/a.img # <-\n"),
		"subsystems[0].namespaces[1].path", "/srv/a.img is already the backing of subsystems[0].namespaces[0] (line 7)", "only read-only namespaces may share one", 0},
	{"read_only not a bool", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        read_only: 1 # <-\n"),
		"subsystems[0].namespaces[0].read_only", `"1" is not a boolean`, "write true or false", 0},

	{"ana group zero", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        ana_group: 0 # <-\n"),
		"subsystems[0].namespaces[0].ana_group", "0 is not a valid ANA group ID", "use 1..128", 0},
	{"ana group too large", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        ana_group: 129 # <-\n"),
		"subsystems[0].namespaces[0].ana_group", "129 is not a valid ANA group ID", "use 1..128", 0},
	{"shared not a bool", sub("      - nsid: 1\n        backend: null\n        size: 1GiB\n        shared: yes # <-\n"),
		"subsystems[0].namespaces[0].shared", `"yes" is not a boolean`, "write true or false", 0},

	// --- ANA states and controller ID ranges ---
	{"ana state unknown", "listeners:\n  - address: 10.99.0.1\n    ana_states:\n      1: standby # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states.1", `"standby" is not an ANA state`, "use one of optimized, non-optimized, inaccessible, persistent-loss, change", 0},
	{"ana state underscore", "listeners:\n  - address: 10.99.0.1\n    ana_states: {1: non_optimized} # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states.1", `"non_optimized" is not an ANA state`, "non-optimized", 0},
	{"ana state group zero", "listeners:\n  - address: 10.99.0.1\n    ana_states:\n      0: optimized # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states.0", "0 is not an ANA group ID", "use 1..128", 0},
	{"ana state group too large", "listeners:\n  - address: 10.99.0.1\n    ana_states:\n      200: optimized # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states.200", "200 is not a valid ANA group ID", "use 1..128", 0},
	{"ana state group not a number", "listeners:\n  - address: 10.99.0.1\n    ana_states:\n      one: optimized # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states.one", `"one" is not a whole number`, "use 1..128", 0},
	{"ana state group twice", "listeners:\n  - address: 10.99.0.1\n    ana_states:\n      1: optimized\n      0x1: inaccessible # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states.0x1", "ANA group 1 is given twice (as 1 and as 0x1)", "keep one of them", 0},
	{"ana states a list", "listeners:\n  - address: 10.99.0.1\n    ana_states: # <-\n      - optimized\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states", "expected a mapping of ANA group to state, got a list", "1: optimized", 0},
	{"ana state a mapping", "listeners:\n  - address: 10.99.0.1\n    ana_states:\n      1: {state: optimized} # <-\n" + sub(nullNS)[len(baseListeners):],
		"listeners[0].ana_states.1", "expected a single value, got a mapping", "same line as the key", 0},
	{"cntlid min above max", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    cntlid_min: 100 # <-\n    cntlid_max: 10\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].cntlid_min", "cntlid_min 100 is larger than cntlid_max 10", "at most cntlid_max", 0},
	{"cntlid max reserved", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    cntlid_max: 0xFFF0 # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].cntlid_max", "65520 is not a valid controller ID", "use 1..65519", 0},
	{"cntlid min zero", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    cntlid_min: 0 # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].cntlid_min", "0 is not a valid controller ID", "disjoint ranges", 0},
	{"cntlid too large for 16 bits", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    cntlid_max: 70000 # <-\n    allow_any_host: true\n    namespaces:\n" + nullNS,
		"subsystems[0].cntlid_max", "70000 is not a valid controller ID", "use 1..65519", 0},

	// --- transport ---
	{"queue depth too large", sub(nullNS) + "transport:\n  queue_depth: 4096 # <-\n",
		"transport.queue_depth", "4096 is out of range", "use 16..1024 entries", 0},
	{"queue depth negative", sub(nullNS) + "transport:\n  queue_depth: -1 # <-\n",
		"transport.queue_depth", "-1 is out of range", "use 16..1024 entries", 0},
	{"in-capsule size not 4K multiple", sub(nullNS) + "transport:\n  in_capsule_data_size: 1000 # <-\n",
		"transport.in_capsule_data_size", "1000 is not a supported in-capsule data size", "a multiple of 4KiB up to 64KiB", 0},
	{"in-capsule size too large", sub(nullNS) + "transport:\n  in_capsule_data_size: 128KiB # <-\n  max_io_size: 1MiB\n",
		"transport.in_capsule_data_size", "128KiB is not a supported in-capsule data size", "up to 64KiB", 0},
	{"in-capsule above max io", sub(nullNS) + "transport:\n  in_capsule_data_size: 16KiB # <-\n  max_io_size: 8KiB\n",
		"transport.in_capsule_data_size", "16KiB is larger than max_io_size 8KiB", "lower in_capsule_data_size or raise max_io_size", 0},
	{"max io not a power of two", sub(nullNS) + "transport:\n  max_io_size: 96KiB # <-\n",
		"transport.max_io_size", "96KiB is not a supported maximum I/O size", "a power of two from 4KiB to 8MiB", 0},
	{"max io too large", sub(nullNS) + "transport:\n  max_io_size: 16MiB # <-\n",
		"transport.max_io_size", "16MiB is not a supported maximum I/O size", "a power of two from 4KiB to 8MiB", 0},
	{"buffer pool below max io", sub(nullNS) + "transport:\n  max_io_size: 1MiB\n  buffer_pool_size: 512KiB # <-\n",
		"transport.buffer_pool_size", "512KiB is smaller than max_io_size 1MiB", "at least max_io_size", 0},
	{"buffer pool unaligned", sub(nullNS) + "transport:\n  buffer_pool_size: 1000000 # <-\n",
		"transport.buffer_pool_size", "1000000 is not a usable buffer pool size", "a multiple of 4KiB", 0},
	{"poll groups", sub(nullNS) + "transport:\n  poll_groups: 1000 # <-\n",
		"transport.poll_groups", "1000 is out of range", "use 0 (one per CPU) to 256", 0},
	{"shared receive queue too small", sub(nullNS) + "transport:\n  shared_receive_queue: 16 # <-\n",
		"transport.shared_receive_queue", "16 is out of range", "or 32..65536 buffers per poll group", 0},
	{"shared receive queue negative", sub(nullNS) + "transport:\n  shared_receive_queue: -1 # <-\n",
		"transport.shared_receive_queue", "-1 is out of range", "use 0 (every I/O queue its own receive buffers)", 0},
	{"max io queues zero", sub(nullNS) + "transport:\n  max_io_queues: 0 # <-\n",
		"transport.max_io_queues", "0 is out of range", "use 1..1024 I/O queues", 0},
	{"keep alive without unit", sub(nullNS) + "transport:\n  keep_alive_timeout: 120 # <-\n",
		"transport.keep_alive_timeout", `"120" has no unit`, "write 120s", 0},
	{"keep alive not a duration", sub(nullNS) + "transport:\n  keep_alive_timeout: forever # <-\n",
		"transport.keep_alive_timeout", `"forever" is not a duration`, "Go duration", 0},
	{"keep alive too short", sub(nullNS) + "transport:\n  keep_alive_timeout: 10ms # <-\n",
		"transport.keep_alive_timeout", "10ms is out of range", "use 1s to 1h0m0s", 0},
	{"busy poll not a bool", sub(nullNS) + "transport:\n  busy_poll: on # <-\n",
		"transport.busy_poll", `"on" is not a boolean`, "write true or false", 0},

	// --- hosts (in-band authentication) ---
	{"host without secret", sub(nullNS) + "hosts:\n  - nqn: " + authHost + " # <-\n",
		"hosts[0].dhchap_secret", "missing", "nvme gen-dhchap-key --nqn", 0},
	{"host NQN unusable", sub(nullNS) + "hosts:\n  - nqn: \"host\\t1\" # <-\n    dhchap_secret: " + goodSecret + "\n",
		"hosts[0].nqn", `is not a valid host NQN: it contains a control character`, "/etc/nvme/hostnqn", 0},
	{"host twice", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n  - nqn: " + authHost + " # <-\n    dhchap_secret: " + goodSecret + "\n",
		"hosts[1].nqn", "is already described by hosts[0] (line", "describe each host once", 0},
	{"secret with a bad CRC", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: \"DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7A:\" # <-\n",
		"hosts[0].dhchap_secret", "CRC-32 does not match", "nvme gen-dhchap-key prints, whole", 0},
	{"secret not DHHC-1", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: hunter2 # <-\n",
		"hosts[0].dhchap_secret", `starts with "DHHC-1:"`, "nvme gen-dhchap-key prints", 0},
	{"secret file without a path", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: \"file:\" # <-\n",
		"hosts[0].dhchap_secret", "file: names no file", "file:<path", 0},
	{"unknown hash", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n    dhchap_hashes: [sha256, md5] # <-\n",
		"hosts[0].dhchap_hashes[1]", `"md5" is not a DH-HMAC-CHAP hash function`, "sha256, sha384 or sha512", 0},
	{"hash twice", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n    dhchap_hashes: [sha256, hmac(sha256)] # <-\n",
		"hosts[0].dhchap_hashes[1]", "listed twice", "remove the repeated entry", 0},
	{"unknown DH group", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n    dhchap_dhgroups: [ffdhe1024] # <-\n",
		"hosts[0].dhchap_dhgroups[0]", `"ffdhe1024" is not a DH-HMAC-CHAP DH group`, "null, ffdhe2048", 0},
	{"no DH group", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n    dhchap_dhgroups: [] # <-\n",
		"hosts[0].dhchap_dhgroups", "no DH group is accepted", "remove dhchap_dhgroups", 0},
	{"auth required, listed host without secret", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    auth_required: true\n    hosts:\n      - " + authHost + " # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].hosts[0]", "authentication is required and it has no secret", "under the top-level hosts:", 0},
	{"auth required, nobody has a secret", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    allow_any_host: true\n    auth_required: true # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].auth_required", "no host can connect", "remove auth_required", 0},
	{"auth required not a bool", baseListeners + "subsystems:\n  - nqn: nqn.2024-01.com.example:t\n    allow_any_host: true\n    auth_required: yes # <-\n    namespaces:\n" + nullNS,
		"subsystems[0].auth_required", `"yes" is not a boolean`, "write true or false", 0},
	{"unquoted secret", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7/: # <-\n",
		"", "YAML syntax error", `quote the secret: dhchap_secret: "DHHC-1:...:"`, 0},
	{"unknown host field", sub(nullNS) + "hosts:\n  - nqn: " + authHost + "\n    dhchap_secret: " + goodSecret + "\n    dhchap_key: x # <-\n",
		"hosts[0].dhchap_key", `"dhchap_key"`, "the fields here are nqn, dhchap_secret, dhchap_ctrl_secret", 0},

	// --- control ---
	{"control tcp without tls", sub(nullNS) + "control: # <-\n  tcp: 127.0.0.1:4421\n",
		"control.tls_cert", "missing: the TCP control listener requires mutual TLS", "give tls_cert", 3},
	{"control tcp not an address", sub(nullNS) + "control:\n  tcp: localhost:4421 # <-\n  tls_cert: a\n  tls_key: b\n  tls_client_ca: c\n",
		"control.tcp", `"localhost:4421" is not an address:port`, "host names are not resolved", 0},
	{"control tls without tcp", sub(nullNS) + "control:\n  tls_key: /k.pem # <-\n",
		"control.tls_key", "tls_key is set but tcp is not", "set tcp:", 0},
	{"control socket too long", sub(nullNS) + "control:\n  socket: /" + strings.Repeat("s", 120) + " # <-\n",
		"control.socket", "a Unix socket path has at most 107", "choose a shorter path", 0},
	{"control unknown field", sub(nullNS) + "control:\n  sock: /x # <-\n",
		"control.sock", `"sock"`, "did you mean socket?", 0},

	// --- metrics ---
	{"metrics address a host name", sub(nullNS) + "metrics:\n  address: localhost:9469 # <-\n",
		"metrics.address", `"localhost:9469" is not an address:port`, "host names are not resolved", 0},
	{"metrics address without port", sub(nullNS) + "metrics:\n  address: 127.0.0.1 # <-\n",
		"metrics.address", `"127.0.0.1" is not an address:port`, "e.g. address: 127.0.0.1:9469", 0},
	{"metrics port 0", sub(nullNS) + "metrics:\n  address: \"[::1]:0\" # <-\n",
		"metrics.address", "has port 0", "give the port Prometheus scrapes", 0},
	{"metrics as a string", sub(nullNS) + "metrics: 127.0.0.1:9469 # <-\n",
		"metrics", "expected a mapping of address, profiling, per_namespace, got a string", "metrics: {address: 127.0.0.1:9469}", 0},
	{"metrics on the control port", sub(nullNS) + "control:\n  tcp: 127.0.0.1:4421\n  tls_cert: a\n  tls_key: b\n  tls_client_ca: c\nmetrics:\n  address: :4421 # <-\n",
		"metrics.address", `":4421" overlaps control.tcp "127.0.0.1:4421"`, "a port of its own", 0},
	{"metrics unknown field", sub(nullNS) + "metrics:\n  listen: :9469 # <-\n",
		"metrics.listen", `"listen"`, "the fields here are address, profiling, per_namespace", 0},
	{"metrics per_namespace unknown level", sub(nullNS) + "metrics:\n  address: 127.0.0.1:9469\n  per_namespace: none # <-\n",
		"metrics.per_namespace", `"none" is not a level of per-namespace metrics`, "per_namespace: counters (no latency histograms: 8 series per namespace)", 0},
	{"metrics per_namespace empty", sub(nullNS) + "metrics:\n  address: 127.0.0.1:9469\n  per_namespace: \"\" # <-\n",
		"metrics.per_namespace", `"" is not a level of per-namespace metrics`, "write per_namespace: full", 0},
	{"metrics per_namespace without address", sub(nullNS) + "metrics:\n  per_namespace: counters # <-\n",
		"metrics.per_namespace", "metrics.address is not set", "set metrics.address too", 0},
	{"metrics profiling without address", sub(nullNS) + "metrics:\n  profiling: true # <-\n",
		"metrics.profiling", "metrics.address is not set", "set metrics.address too", 0},
	{"metrics profiling not a boolean", sub(nullNS) + "metrics:\n  address: 127.0.0.1:9469\n  profiling: on please # <-\n",
		"metrics.profiling", `"on please"`, "true or false", 0},
	{"keep alive above the limit", sub(nullNS) + "transport:\n  keep_alive_timeout: 10m # <-\n",
		"transport.keep_alive_timeout", "10m0s is outside limits.min_keep_alive_timeout..limits.max_keep_alive_timeout (1s..5m0s)", "widen the limits", 0},

	// --- auto_reopen ---
	{"auto_reopen unknown key", sub(nullNS) + "auto_reopen:\n  retries: 5 # <-\n",
		"auto_reopen.retries", `"retries"`, "the fields here are attempts, backoff, max_backoff, settle", 0},
	{"auto_reopen not a mapping", sub(nullNS) + "auto_reopen: 5 # <-\n",
		"auto_reopen", "expected a mapping of attempts, backoff, max_backoff, settle", "write one 'key: value' per line", 0},
	{"auto_reopen attempts zero", sub(nullNS) + "auto_reopen:\n  attempts: 0 # <-\n",
		"auto_reopen.attempts", "0 is out of range", "use 1..100 opens (default 10)", 0},
	{"auto_reopen attempts too many", sub(nullNS) + "auto_reopen:\n  attempts: 1000 # <-\n",
		"auto_reopen.attempts", "1000 is out of range", "use 1..100 opens (default 10)", 0},
	{"auto_reopen backoff too short", sub(nullNS) + "auto_reopen:\n  backoff: 10ms # <-\n",
		"auto_reopen.backoff", "10ms is out of range", "use 100ms to 10m0s (default 1s)", 0},
	{"auto_reopen backoff without unit", sub(nullNS) + "auto_reopen:\n  backoff: 5 # <-\n",
		"auto_reopen.backoff", `"5" has no unit`, "write 5s", 0},
	{"auto_reopen max_backoff below backoff", sub(nullNS) + "auto_reopen:\n  backoff: 5s\n  max_backoff: 2s # <-\n",
		"auto_reopen.max_backoff", "2s is less than backoff 5s", "raise max_backoff to backoff or more", 0},
	{"auto_reopen max_backoff too long", sub(nullNS) + "auto_reopen:\n  max_backoff: 2h # <-\n",
		"auto_reopen.max_backoff", "2h0m0s is out of range", "use 100ms to 1h0m0s (default 30s)", 0},
	{"auto_reopen settle too short", sub(nullNS) + "auto_reopen:\n  settle: 0s # <-\n",
		"auto_reopen.settle", "0s is out of range", "use 1s to 24h0m0s (default 1m0s)", 0},

	// --- limits ---
	{"limits unknown key", sub(nullNS) + "limits:\n  max_queue: 10 # <-\n",
		"limits.max_queue", `"max_queue"`, "did you mean max_queues?", 0},
	{"max queues zero", sub(nullNS) + "limits:\n  max_queues: 0 # <-\n",
		"limits.max_queues", "0 is out of range", "use 2..65536 queues in total", 0},
	{"max queues too many", sub(nullNS) + "limits:\n  max_queues: 100000 # <-\n",
		"limits.max_queues", "100000 is out of range", "use 2..65536 queues in total", 0},
	{"per address above total", sub(nullNS) + "limits:\n  max_queues: 64\n  max_queues_per_address: 128 # <-\n",
		"limits.max_queues_per_address", "128 is more than max_queues 64", "lower max_queues_per_address or raise max_queues", 0},
	{"controllers per host zero", sub(nullNS) + "limits:\n  max_controllers_per_host: 0 # <-\n",
		"limits.max_controllers_per_host", "0 is out of range", "use 1..65536 controllers per host NQN", 0},
	{"queues per host one", sub(nullNS) + "limits:\n  max_queues_per_host: 1 # <-\n",
		"limits.max_queues_per_host", "1 is out of range", "an admin queue and at least one I/O queue", 0},
	{"queues per host above total", sub(nullNS) + "limits:\n  max_queues: 64\n  max_queues_per_address: 16\n  max_queues_per_host: 65 # <-\n",
		"limits.max_queues_per_host", "65 is more than max_queues 64", "lower max_queues_per_host or raise max_queues", 0},
	{"connect timeout too short", sub(nullNS) + "limits:\n  connect_timeout: 100ms # <-\n",
		"limits.connect_timeout", "100ms is out of range", "use 1s to 10m0s (default 10s)", 0},
	{"connect timeout without unit", sub(nullNS) + "limits:\n  connect_timeout: 10 # <-\n",
		"limits.connect_timeout", `"10" has no unit`, "write 10s", 0},
	{"response timeout too long", sub(nullNS) + "limits:\n  response_timeout: 1h # <-\n",
		"limits.response_timeout", "1h0m0s is out of range", "use 1s to 10m0s (default 10s)", 0},
	{"min kato too small", sub(nullNS) + "limits:\n  min_keep_alive_timeout: 10ms # <-\n",
		"limits.min_keep_alive_timeout", "10ms is out of range", "use 100ms to 1h0m0s (default 1s)", 0},
	{"max kato too large", sub(nullNS) + "limits:\n  max_keep_alive_timeout: 48h # <-\n",
		"limits.max_keep_alive_timeout", "48h0m0s is out of range", "use 1s to 24h0m0s (default 5m0s)", 0},
	{"min kato above max", sub(nullNS) + "limits:\n  min_keep_alive_timeout: 10s # <-\n  max_keep_alive_timeout: 5s\n",
		"limits.min_keep_alive_timeout", "10s is more than max_keep_alive_timeout 5s", "lower min_keep_alive_timeout or raise max_keep_alive_timeout", 0},
}

const (
	authHost   = "nqn.2014-08.org.nvmexpress:uuid:12345678-1234-1234-1234-123456789abc"
	goodSecret = `"DHHC-1:01:vpq37fuC3dXlrFdBeL3l55rZX5frlPLAL6XiWUcBs2JLmx7/:"`
)

// markedLine is the 1-based line holding "# <-".
func markedLine(t *testing.T, text string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "# <-") {
			return i + 1
		}
	}
	t.Fatalf("no '# <-' marker in\n%s", text)
	return 0
}

func TestBadConfigs(t *testing.T) {
	const file = "conf/bad.yaml"
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			line := markedLine(t, tc.yaml)
			c, err := Parse([]byte(tc.yaml), file)
			if err == nil {
				t.Fatalf("Parse accepted the config:\n%s\nresolved:\n%s", tc.yaml, c)
			}
			if c != nil {
				t.Errorf("Parse returned a Config with an error")
			}
			errs := Errors(err)
			want := max(tc.count, 1)
			if len(errs) != want {
				t.Errorf("got %d errors, want %d:\n%v", len(errs), want, err)
			}
			var fe *FieldError
			for _, e := range errs {
				if e.Field == tc.field && e.Line == line {
					fe = e
					break
				}
			}
			if fe == nil {
				t.Fatalf("no error for field %q at line %d; got:\n%v\nconfig:\n%s", tc.field, line, err, numbered(tc.yaml))
			}
			msg := fe.Error()
			prefix := fmt.Sprintf("%s:%d: ", file, line)
			if tc.field != "" {
				prefix += tc.field + ": "
			}
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			if !strings.Contains(fe.Msg, tc.value) {
				t.Errorf("message %q does not contain %q", fe.Msg, tc.value)
			}
			if !strings.Contains(fe.Fix, tc.fix) {
				t.Errorf("fix %q does not contain %q", fe.Fix, tc.fix)
			}
			if fe.Fix == "" {
				t.Errorf("error %q gives no fix", msg)
			}
			if !errors.As(err, &fe) {
				t.Errorf("errors.As cannot find a *FieldError in %T", err)
			}
		})
	}
}

func numbered(text string) string {
	var b strings.Builder
	for i, l := range strings.Split(text, "\n") {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, l)
	}
	return b.String()
}

// TestAllErrorsReported checks that validation goes on after the first problem and that
// the errors come sorted by line.
func TestAllErrorsReported(t *testing.T) {
	text := `listeners:
  - address: 10.99.0.1
    port: 99999
subsystems:
  - nqn: nqn.2024-01.com.example:t
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: null
        size: 1000
        lba_size: 1024
      - nsid: 1
        backend: file
transport:
  queue_depth: 7
`
	_, err := Parse([]byte(text), "x.yaml")
	errs := Errors(err)
	got := make([]string, len(errs))
	for i, e := range errs {
		got[i] = fmt.Sprintf("%d %s", e.Line, e.Field)
	}
	want := []string{
		"3 listeners[0].port",
		"11 subsystems[0].namespaces[0].lba_size",
		"12 subsystems[0].namespaces[1].nsid",
		"12 subsystems[0].namespaces[1].path",
		"15 transport.queue_depth",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s\nfull text:\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"), err)
	}
	// The size is not reported as a non-multiple of an LBA size that is itself invalid.
	if strings.Contains(err.Error(), "not a multiple") {
		t.Errorf("size reported against an invalid lba_size:\n%v", err)
	}
}

func TestEmptyFile(t *testing.T) {
	for _, text := range []string{"", "# only a comment\n", "---\n"} {
		_, err := Parse([]byte(text), "empty.yaml")
		if err == nil || !strings.HasPrefix(err.Error(), "empty.yaml:") || !strings.Contains(err.Error(), "conf/examples") {
			t.Errorf("Parse(%q) = %v, want an error naming the file and pointing at the examples", text, err)
		}
	}
}

func TestTopLevelNotMapping(t *testing.T) {
	_, err := Parse([]byte("- a\n- b\n"), "list.yaml")
	if err == nil || !strings.Contains(err.Error(), "list.yaml:1: the top level is a list") {
		t.Errorf("got %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("/nonexistent/gonvmf.yaml")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/gonvmf.yaml") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestSizeFixNearTheTop: a size that is no multiple of the LBA size within a block of
// 2^64 gets the multiple below as its fix, not one above that wraps around to 0.
func TestSizeFixNearTheTop(t *testing.T) {
	_, err := Parse([]byte("subsystems:\n  - nqn: nqn.2024-01.com.example:a\n    allow_any_host: true\n"+
		"    namespaces: [{nsid: 1, backend: null, size: 18446744073709551615}]\n"), "t.yaml")
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Field != "subsystems[0].namespaces[0].size" || errs[0].Fix != "use 18446744073709551104" {
		t.Errorf("errors %v, want one for the size with the fix \"use 18446744073709551104\"", err)
	}
}
