// Package conf owns gonvmf's configuration: the YAML file that describes the listeners,
// the subsystems with their hosts and namespaces, and the transport tuning; its strict
// decoding; the defaults; the identifiers derived for namespaces; and validation with
// errors that name the file, the line, the field, the bad value and the fix.
//
// Load (or Parse) returns a resolved *Config: defaults are filled in, relative paths are
// made absolute against the file's directory, and every namespace has its UUID, NGUID and
// EUI-64. Unknown fields, repeated keys, values of the wrong type and every invalid setting
// are errors; all of them are reported at once, sorted by line, as *FieldError values joined
// with errors.Join:
//
//	conf/example.yaml:12: subsystems[0].namespaces[1].lba_size: 1024 is not a supported LBA size; use 512 or 4096
//
// (*Config).CheckSystem then checks what the text alone cannot show: that backing files
// and devices exist and fit, and that memory namespaces fit in RAM. (*Config).String
// prints the resolved configuration as YAML that parses back to the same Config.
//
// A Config built in Go is completed the same way by (*Config).Resolve. There every field's
// zero value means one thing, documented on the field: the default, except for
// Transport.InCapsuleDataSize (0: no in-capsule data; a file that leaves the key out gets
// 8 KiB) and Transport.PollGroups (0: one per CPU, counted as GOMAXPROCS). A resolved
// Config is what the rest of gonvmf is built from: target.New resolves a private Clone of
// the Config it is given, and nothing below it fills in a default again.
//
// conf/README.md is the configuration reference; conf/examples holds complete files.
//
// # Defaults and why
//
//   - listeners[].port 4420: the IANA port for NVMe over Fabrics, what nvme-cli assumes.
//   - listeners[].transport rdma: the only transport so far.
//   - subsystems[].serial: 20 hex digits hashed from the NQN, so each subsystem has its own
//     stable serial (hosts use it, with the model, to tell controllers apart).
//   - subsystems[].model "gonvmf".
//   - namespaces[].lba_size 512: what hosts and file systems expect by default; 4096
//     halves per-block overhead on devices and files built for it.
//   - namespaces[].uuid, nguid, eui64: derived from (subsystem NQN, nsid) when absent — a
//     version-5 UUID in gonvmf's own UUID namespace, and SHA-256 hashes in separate domains
//     for the NGUID and EUI-64 — so they survive restarts and moves between machines, and a
//     host (multipath, udev's /dev/disk/by-id, blktests) keeps recognising the namespace.
//   - subsystems[].cntlid_min 1, cntlid_max 0xFFEF: every controller ID NVMe allows (the
//     Linux target's defaults); two targets serving one subsystem split the range.
//   - namespaces[].ana_group 1, listeners[].ana_states every group optimized: a target
//     that is the only path to its namespaces reports them as the Linux target does by
//     default (group 1, optimized).
//   - namespaces[].shared false: a backing file is locked exclusively and a block device
//     opened with O_EXCL, so a second target cannot open it by mistake.
//   - transport.queue_depth 128: the Linux host's default I/O queue size; 16..1024 is the
//     range the Linux host accepts. The admin queue is always 32 entries (what hosts use).
//   - transport.in_capsule_data_size 8 KiB: 4 KiB and 8 KiB writes travel inside the
//     command capsule and skip an RDMA READ round trip. It must be a multiple of 4 KiB so that
//     in-capsule data lands in page-aligned receive buffers usable for O_DIRECT without a
//     copy; at most 64 KiB because every receive buffer carries that much (256 × (64 B +
//     size) per poll group at the defaults, queue_depth × (64 B + size) per queue without a
//     shared receive queue).
//   - transport.max_io_size 128 KiB: SPDK's default. Identify's MDTS expresses it as a power
//     of two of 4 KiB pages, hence the power-of-two rule; 8 MiB is Soft-RoCE's largest
//     message. Larger commands from the host are split by the host.
//   - transport.buffer_pool_size queue_depth × max_io_size, at most 1 GiB (16 MiB at the
//     defaults): one queue at full depth of the largest commands. The pool is pinned,
//     registered memory, shared by all queues, and commands that find it used up wait for
//     a buffer in order (never fail); it must hold at least one command of max_io_size, and
//     a pool smaller than one full queue draws a warning. Sized for a target whose memory
//     stays small with many connections (32 queue pairs: under 64 MiB resident, pool
//     included); raise it for many queues doing large I/O at once.
//   - transport.shared_receive_queue 256: buffers a poll group's I/O queues share, as
//     many as their entries up to 256 (2 MiB at the default in-capsule size), instead of
//     1 MiB per queue.
//   - transport.poll_groups 0: one completion poller per CPU the Go scheduler uses
//     (GOMAXPROCS: the CPU count, or a container's CPU limit), queues spread over all of
//     them (Transport.NumPollGroups has the measurement).
//   - transport.busy_poll false: sleep on completion channels; busy polling trades one CPU
//     per poll group for latency.
//   - transport.max_io_queues 16: enough for one queue per CPU on typical hosts without
//     letting a single host claim unbounded receive buffers.
//   - transport.keep_alive_timeout 120s: applied to controllers that connect with KATO 0,
//     as nvme discover does, so abandoned connections are reaped (the Linux target uses the
//     same value for discovery controllers, NVMET_DISC_KATO_MS).
//   - limits.max_queues 1024, max_queues_per_address 256, max_queues_per_host 256,
//     max_controllers_per_host 64: one address or host may hold a quarter of the queues,
//     so three others always find room; 64 controllers cover a host that reaches many
//     subsystems over several paths.
//   - limits.connect_timeout 10s: hosts send Connect right after the queue pair is
//     established (the Linux host within milliseconds); a queue pair that does not is a
//     host gone or hostile, and holds receive memory and a completion queue share.
//   - limits.min_keep_alive_timeout 1s, max_keep_alive_timeout 5m: below a second the
//     timer costs more than it saves; above five minutes a vanished host's resources stay
//     pinned too long. A host that asks for more is answered with the maximum (Get
//     Features reports it); it then has to send traffic or keep-alives within 5 minutes.
//   - limits.response_timeout 10s: a host posts its receive buffers as it handles
//     responses; one that has not done so for 10 s (RNR retry never ends by itself) is
//     holding the target's buffers hostage.
//   - limits.max_queue_data_in_flight 128KiB: one transfer of the default max_io_size per
//     I/O queue. A queue that streams large reads otherwise has all its data — 16 MiB at
//     queue depth 128 — posted at once, and a small command of another queue waits behind
//     it. Measured with 46-fairness in a TCG guest, a quiet host's 4k QD16 reads next to a
//     host reading 128 KiB at QD128 kept 0.02-0.03 of their IOPS unbounded, 0.16 at 1 MiB,
//     0.29 at 256 KiB and 0.48 (twice) at 128 KiB — the Linux target's 0.49 — while the
//     reader's throughput went from 49-78 MiB/s to 62, 44 and 30-31 MiB/s (an Intel
//     machine; on an AMD one 0.03-0.04 unbounded, 0.27-0.33 at 128 KiB measured in 5 s
//     blocks, the Linux target 0.25-0.33). On a link, 128 KiB per queue is 10 µs of a
//     100 Gb/s wire: a queue that waits one round trip between its transfers still moves
//     most of the link, and several queues fill it. Raise it for few queues on a fast,
//     long link. The window is there for the other hosts: while no queue of another
//     controller has had a command arrive in the poll group's last 64 rounds with work, a
//     queue may have 8 windows on the wire. A lone writer of 128 KiB otherwise waits the
//     round trip of an RDMA READ between its transfers: with 8 windows, 128 KiB QD16
//     writes were ahead in 8 of 8 same-position pairs (medians 403 and 412 → 447 and 466
//     IOPS, p99 85-87 → 58-65 ms; the Linux target 470; Linux host, null, one TCG guest);
//     128 KiB reads did not move (the post that builds their packets bounds them).
//     Transfers of a page (4 KiB) or less are not counted: a queue of them has at most
//     its depth in pages out, and counting them held 4k random reads deeper than 32 back
//     with nothing large on the wire (not counted: QD128 reads 5,495 → 7,387 IOPS; same
//     way of measuring, medians of 8). A 4k write from the Linux host comes in the
//     command capsule (transport.in_capsule_data_size) and moves no RDMA data.
//   - auto_reopen attempts 10, backoff 1s, max_backoff 30s, settle 1m: a blocklisted rbd
//     client is replaced by a new one at the first open, which usually succeeds within a
//     second; opens that keep failing (a cluster that refuses or does not answer) are
//     tried for about 2.5 minutes of waits before an operator is needed, and two targets
//     fencing each other's clients over one image back off instead of reopening as fast
//     as they are fenced.
//
// # Limits
//
// NSIDs 1..1024 (Identify Controller NN is 1024); NQNs at most 223 bytes; serial at most 20
// and model at most 40 printable ASCII characters; memory namespaces at most 1 TiB each
// and, checked by CheckSystem, together with the buffer pool no more than the machine's
// RAM; buffer pool at most 64 GiB.
package conf
