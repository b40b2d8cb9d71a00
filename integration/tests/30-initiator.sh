#!/bin/bash
# 30-initiator: the Go initiator and gonvmf's host tools (discover, identify, perf) over
# Soft-RoCE, against the Linux kernel target (nvmet-rdma) and against gonvmf serve:
#   - discover output identical to nvme-cli's, identify, clear errors (unknown NQN, refused
#     host, nothing listening, unreachable address);
#   - gonvmf perf --verify (randrw, stamped blocks, read-back) on a file namespace;
#   - gonvmf perf next to fio (through the Linux host) on the same null_blk / null namespace:
#     4k randread QD32, 4k randwrite QD32, 128k read QD8; a table in $OUT/compare.txt;
#   - a target that disappears under perf (subsystem unlinked / gonvmf killed): perf exits 1
#     within 60 s;
#   - the initiator's TestRDMA* tests against gonvmf (GONVMF_INITIATOR_TARGET).
# GONVMF_PERF_SECONDS (default 5) sets each measurement's length.
# vm: --timeout 1500 --disk 2G
. "$SRC/integration/vm/guest-lib.sh"

G=$GONVMF_BIN # guest-lib's gonvmf_start runs it
SECS=${GONVMF_PERF_SECONDS:-5}
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:3a6e1f52-9b0c-4d7e-8f21-5c4b3a2d1e0f
KFILE=nqn.2024-01.io.gonvmf:k-file
KNULL=nqn.2024-01.io.gonvmf:k-null
KLOCK=nqn.2024-01.io.gonvmf:k-locked
GFILE=nqn.2024-01.io.gonvmf:g-file
GNULL=nqn.2024-01.io.gonvmf:g-null
GLOCK=nqn.2024-01.io.gonvmf:g-locked
GPORT=4430
export GONVMF_LOG_LEVEL=warn

need_gonvmf
timeout 60 modprobe nvme-rdma || fail modprobe "nvme-rdma"

# expect_fail NAME PATTERN CMD...: CMD must exit 1 with PATTERN in its output, within 120 s.
expect_fail() {
	local name=$1 pat=$2 rc=0 start
	shift 2
	start=$(date +%s)
	timeout -k 5 120 "$@" > "$OUT/$name.txt" 2>&1 || rc=$?
	if [ $rc = 1 ] && grep -q -- "$pat" "$OUT/$name.txt"; then
		pass "$name" "$(($(date +%s) - start)) s: $(grep -m1 -- "$pat" "$OUT/$name.txt" | cut -c1-200)"
	else
		fail "$name" "exit $rc, want 1 and '$pat': $(tail -n 2 "$OUT/$name.txt" | tr '\n' ' ' | cut -c1-300)"
	fi
}

# perf_json NAME ARGS...: gonvmf perf --json into $OUT/NAME.json; PASS when it exits 0.
perf_json() {
	local name=$1
	shift
	if timeout -k 5 $((SECS * 4 + 180)) "$G" perf --json --progress=false --hostnqn "$HOSTNQN" "$@" \
		> "$OUT/$name.json" 2> "$OUT/$name.err"; then
		pass "$name" "$(perf_line "$OUT/$name.json")"
	else
		fail "$name" "exit $?: $(tail -n 2 "$OUT/$name.err" | tr '\n' ' ' | cut -c1-300)"
		return 1
	fi
}

# perf_up <log> <pid>: the background perf printed its header (connected and identified: its
# I/O starts right after) or has exited.
perf_up() { grep -q '^perf: .* queue depth ' "$1" || ! kill -0 "$2" 2> /dev/null; }
# PERF_IO_SECS: how long perf's I/O runs before its target is taken away.
PERF_IO_SECS=5

perf_line() {
	python3 - "$1" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["total"]
v = r.get("verify")
print("%s %dB qd%d: iops=%.0f MiB/s=%.1f lat avg/p50/p99/p99.9 us=%.0f/%.0f/%.0f/%.0f cpu=%.0f%%%s" % (
    r["workload"], r["block_size"], r["queue_depth"], t["iops"], t["mib_s"], t["lat_us"]["avg"],
    t["lat_us"]["p50"], t["lat_us"]["p99"], t["lat_us"]["p99.9"], r["cpu_percent"],
    "" if not v else " verify: %d blocks, %d mismatches" % (v["blocks_checked"], v["mismatches"])))
PY
}

# compare LABEL NQN PORT: gonvmf perf and fio (Linux host) on the same namespace.
compare() {
	local label=$1 nqn=$2 port=$3 w rw bs qd dev a b
	for w in "randread 4k 32" "randwrite 4k 32" "read 128k 8"; do
		read -r rw bs qd <<< "$w"
		a=$(cpu_snapshot)
		perf_json "perf-$label-$rw-$bs" -t rdma -a "$RXE_IP" -s "$port" -n "$nqn" --rw "$rw" -o "$bs" -q "$qd" -j 1 -T "${SECS}s"
		b=$(cpu_snapshot)
		cpu_busy_pct "$a" "$b" > "$OUT/perf-$label-$rw-$bs.cpu"
	done
	nvme_connect_new "$nqn" "$port" --hostnqn "$HOSTNQN" || {
		fail "fio-$label" "nvme connect $nqn failed: $NVME_ERR"
		return
	}
	dev=${NVME_NS_DEVS[0]}
	for w in "randread 4k 32" "randwrite 4k 32" "read 128k 8"; do
		read -r rw bs qd <<< "$w"
		a=$(cpu_snapshot)
		if timeout -k 5 $((SECS * 4 + 120)) fio --name="$rw" --filename="$dev" --ioengine=libaio --direct=1 --rw="$rw" \
			--bs="$bs" --iodepth="$qd" --numjobs=1 --time_based --runtime="$SECS" --norandommap --randrepeat=0 \
			--lat_percentiles=1 --percentile_list=50:90:99:99.9 --output-format=json \
			--output="$OUT/fio-$label-$rw-$bs.json" > "$OUT/fio-$label-$rw-$bs.log" 2>&1; then
			pass "fio-$label-$rw-$bs" "$(fio_summary "$OUT/fio-$label-$rw-$bs.json")"
		else
			fail "fio-$label-$rw-$bs" "$(tail -n 2 "$OUT/fio-$label-$rw-$bs.log" | tr '\n' ' ')"
		fi
		b=$(cpu_snapshot)
		cpu_busy_pct "$a" "$b" > "$OUT/fio-$label-$rw-$bs.cpu"
	done
	check "nvme-disconnect-$label" nvme_disconnect_all
}

# table: gonvmf perf vs fio for every comparison run, into $OUT/compare.txt.
table() {
	python3 - "$OUT" << 'PY' | tee "$OUT/compare.txt"
import glob, json, os, sys
out = sys.argv[1]
def cpu(p):
    try: return float(open(p).read())
    except (OSError, ValueError): return float("nan")
print("%-8s %-16s %-6s %10s %9s %8s %8s %8s %8s %6s" % ("target", "workload", "tool", "IOPS", "MiB/s", "avg_us", "p50_us", "p99_us", "p99.9_us", "cpu%"))
for pj in sorted(glob.glob(os.path.join(out, "perf-*-*-*.json"))):
    name = os.path.basename(pj)[5:-5]
    label, rw, bs = name.split("-")
    try:
        t = json.load(open(pj))["total"]
        print("%-8s %-16s %-6s %10.0f %9.1f %8.0f %8.0f %8.0f %8.0f %6.0f" % (label, rw + " " + bs, "gonvmf", t["iops"], t["mib_s"],
            t["lat_us"]["avg"], t["lat_us"]["p50"], t["lat_us"]["p99"], t["lat_us"]["p99.9"], cpu(pj[:-5] + ".cpu")))
    except (OSError, ValueError, KeyError):
        pass
    fj = os.path.join(out, "fio-%s.json" % name)
    try:
        j = json.load(open(fj))["jobs"][0]
        s = j["write" if "write" in rw else "read"]
        p = s["lat_ns"]["percentile"]
        print("%-8s %-16s %-6s %10.0f %9.1f %8.0f %8.0f %8.0f %8.0f %6.0f" % (label, rw + " " + bs, "fio", s["iops"], s["bw_bytes"] / 1048576.0,
            s["lat_ns"]["mean"] / 1e3, p["50.000000"] / 1e3, p["99.000000"] / 1e3, p["99.900000"] / 1e3, cpu(fj[:-5] + ".cpu")))
    except (OSError, ValueError, KeyError, IndexError):
        pass
PY
}

# ---------------------------------------------------------------- Linux kernel target
log "Linux kernel target: file and null_blk namespaces on $RXE_IP:4420"
fallocate -l 256M "$SCRATCH/k-file.img"
nullb=$(null_blk_setup 4) || fail null_blk "no null_blk device"
on_exit nvmet_teardown
check nvmet-file nvmet_setup "$KFILE" "$SCRATCH/k-file.img" || finish
check nvmet-null nvmet_setup "$KNULL" "$nullb"
check nvmet-locked nvmet_setup "$KLOCK" "$nullb" 4421 && echo 0 > "$NVMET_CFG/subsystems/$KLOCK/attr_allow_any_host"
sleep 1

nvme_discover > "$OUT/k-nvme-discover.txt" 2>&1
if timeout -k 5 120 "$G" discover -a "$RXE_IP" -s 4420 --hostnqn "$HOSTNQN" > "$OUT/k-gonvmf-discover.txt" 2>&1; then
	if diff <(sed 's/ *$//' "$OUT/k-nvme-discover.txt") <(sed 's/ *$//' "$OUT/k-gonvmf-discover.txt") > "$OUT/k-discover.diff"; then
		pass k-discover "identical to nvme discover ($(grep -c '^=====Discovery Log Entry' "$OUT/k-gonvmf-discover.txt") entries)"
	else
		fail k-discover "differs from nvme discover: $(head -n 6 "$OUT/k-discover.diff" | tr '\n' ' ' | cut -c1-300)"
	fi
else
	fail k-discover "$(tail -n 1 "$OUT/k-gonvmf-discover.txt")"
fi
check k-discover-json sh -c "'$G' discover -a '$RXE_IP' --json > '$OUT/k-discover.json' && grep -q '\"subnqn\": \"$KFILE\"' '$OUT/k-discover.json'"
check k-identify sh -c "'$G' identify -a '$RXE_IP' -n '$KFILE' --hostnqn '$HOSTNQN' > '$OUT/k-identify.txt' && grep -q 'subnqn    : $KFILE' '$OUT/k-identify.txt' && grep -q '^Namespace 1: 256 MiB' '$OUT/k-identify.txt'"
check k-identify-json sh -c "'$G' identify -a '$RXE_IP' -n '$KNULL' --json > '$OUT/k-identify.json' && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d[\"namespaces\"][0][\"size_bytes\"] != 4<<30)' '$OUT/k-identify.json'"

expect_fail k-unknown-nqn "has no subsystem" "$G" identify -a "$RXE_IP" -n nqn.2024-01.io.gonvmf:nope
expect_fail k-refused-host "not allowed" "$G" identify -a "$RXE_IP" -s 4421 -n "$KLOCK" --hostnqn "$HOSTNQN"
expect_fail k-no-listener "nothing listens" "$G" identify -a "$RXE_IP" -s 4499 -n "$KFILE"
expect_fail k-unreachable "unreachable" "$G" identify -a 10.99.0.77 -n "$KFILE" --connect-timeout 5s

perf_json k-verify-randrw -t rdma -a "$RXE_IP" -n "$KFILE" --rw randrw -M 60 -o 8k -q 16 -j 2 --verify --size 32m -T "${SECS}s"
perf_json k-verify-write -t rdma -a "$RXE_IP" -n "$KFILE" --rw write -o 64k -q 4 --verify --size 32m --offset 64m -N 2000 --fua
compare kernel "$KNULL" 4420

log "kernel target: unlink the subsystem under perf"
bg_start k-gone "$G" perf -a "$RXE_IP" -n "$KNULL" --rw randread -q 16 -T 600s --progress=false
gone=$BG_PID
wait_for 120 perf_up "$OUT/k-gone.log" "$gone" || log "perf printed no header in 120 s"
nap $PERF_IO_SECS
rm -f "$NVMET_CFG/ports/4420/subsystems/$KNULL"
start=$(date +%s)
rc=0
timeout 90 tail --pid="$gone" -f /dev/null || rc=124
wait "$gone"
prc=$?
if [ $rc = 0 ] && [ $prc = 1 ] && grep -q "gonvmf: perf: .*controller failed" "$OUT/k-gone.log"; then
	pass k-target-gone "perf exited 1 $(($(date +%s) - start)) s after the subsystem was unlinked: $(grep -m1 'gonvmf: perf: ' "$OUT/k-gone.log" | cut -c1-200)"
else
	fail k-target-gone "perf status $prc (wait $rc): $(tail -n 2 "$OUT/k-gone.log" | tr '\n' ' ' | cut -c1-300)"
	kill "$gone" 2> /dev/null
fi
check nvmet-teardown nvmet_teardown

# ---------------------------------------------------------------- gonvmf serve
log "gonvmf serve on $RXE_IP:$GPORT"
fallocate -l 256M "$SCRATCH/g-file.img"
cat > "$OUT/gonvmf.yaml" << EOF
listeners:
  - address: $RXE_IP
    port: $GPORT
subsystems:
  - nqn: $GFILE
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: file
        path: $SCRATCH/g-file.img
        size: 256MiB
  - nqn: $GNULL
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: null
        size: 4GiB
  - nqn: $GLOCK
    hosts:
      - nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555
    namespaces:
      - nsid: 1
        backend: null
        size: 1GiB
EOF
if ! GONVMF_LOG_LEVEL=info gonvmf_start gonvmf-serve "$OUT/gonvmf.yaml" "$RXE_IP" "$GPORT" ||
	! wait_for 60 "$G" discover -a "$RXE_IP" -s "$GPORT" --connect-timeout 3s; then
	fail gonvmf-serve "gonvmf serve did not come up: ${GONVMF_ERR:-$(tail -n 3 "$OUT/gonvmf-serve.log" | tr '\n' ' ' | cut -c1-300)}"
	finish
fi
serve=$GONVMF_PID
pass gonvmf-serve
nvme_discover "$GPORT" > "$OUT/g-nvme-discover.txt" 2>&1
"$G" discover -a "$RXE_IP" -s "$GPORT" --hostnqn "$HOSTNQN" > "$OUT/g-gonvmf-discover.txt" 2>&1
if diff <(sed 's/ *$//' "$OUT/g-nvme-discover.txt") <(sed 's/ *$//' "$OUT/g-gonvmf-discover.txt") > "$OUT/g-discover.diff"; then
	pass g-discover "identical to nvme discover ($(grep -c '^=====Discovery Log Entry' "$OUT/g-gonvmf-discover.txt") entries)"
else
	fail g-discover "differs from nvme discover: $(head -n 6 "$OUT/g-discover.diff" | tr '\n' ' ' | cut -c1-300)"
fi
check g-identify sh -c "'$G' identify -a '$RXE_IP' -s $GPORT -n '$GFILE' > '$OUT/g-identify.txt' && grep -q '^Namespace 1: 256 MiB' '$OUT/g-identify.txt'"
expect_fail g-unknown-nqn "has no subsystem" "$G" identify -a "$RXE_IP" -s "$GPORT" -n nqn.2024-01.io.gonvmf:nope
expect_fail g-refused-host "not allowed" "$G" identify -a "$RXE_IP" -s "$GPORT" -n "$GLOCK" --hostnqn "$HOSTNQN"

perf_json g-verify-randrw -t rdma -a "$RXE_IP" -s "$GPORT" -n "$GFILE" --rw randrw -M 60 -o 8k -q 16 -j 2 --verify --size 32m -T "${SECS}s"
perf_json g-verify-write -t rdma -a "$RXE_IP" -s "$GPORT" -n "$GFILE" --rw write -o 64k -q 4 --verify --size 32m --offset 64m -N 2000 --fua
compare gonvmf "$GNULL" "$GPORT"

if [ -x "$GONVMF_BUILD/tests/initiator.test" ]; then
	log "initiator TestRDMA* against gonvmf"
	(cd "$SRC/initiator" && GONVMF_REQUIRE_RDMA=1 GONVMF_INITIATOR_TARGET="$GFILE@$RXE_IP:$GPORT" \
		timeout -k 5 600 "$GONVMF_BUILD/tests/initiator.test" -test.run '^TestRDMA(KernelTarget|Discovery|ConnectErrors)$' \
		-test.v -test.count=1) > "$OUT/g-initiator-tests.log" 2>&1
	rc=$?
	if [ $rc = 0 ]; then
		pass g-initiator-tests "$(grep -c '^--- PASS' "$OUT/g-initiator-tests.log") passed, $(grep -c '^--- SKIP' "$OUT/g-initiator-tests.log") skipped"
	else
		fail g-initiator-tests "exit $rc: $(grep -m2 -E '^--- FAIL|panic:' "$OUT/g-initiator-tests.log" | tr '\n' ' ')"
	fi
else
	skip g-initiator-tests "no $GONVMF_BUILD/tests/initiator.test (run-tests.sh builds it)"
fi

log "gonvmf: kill the target under perf"
bg_start g-gone "$G" perf -a "$RXE_IP" -s "$GPORT" -n "$GNULL" --rw randread -q 16 -T 600s --progress=false
gone=$BG_PID
wait_for 120 perf_up "$OUT/g-gone.log" "$gone" || log "perf printed no header in 120 s"
nap $PERF_IO_SECS
kill -9 "$serve"
start=$(date +%s)
rc=0
timeout 90 tail --pid="$gone" -f /dev/null || rc=124
wait "$gone"
prc=$?
if [ $rc = 0 ] && [ $prc = 1 ] && grep -q "gonvmf: perf: .*controller failed" "$OUT/g-gone.log"; then
	pass g-target-gone "perf exited 1 $(($(date +%s) - start)) s after gonvmf was killed: $(grep -m1 'gonvmf: perf: ' "$OUT/g-gone.log" | cut -c1-200)"
else
	fail g-target-gone "perf status $prc (wait $rc): $(tail -n 2 "$OUT/g-gone.log" | tr '\n' ' ' | cut -c1-300)"
	kill "$gone" 2> /dev/null
fi

table
finish
