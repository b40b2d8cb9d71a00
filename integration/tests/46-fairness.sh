#!/bin/bash
# 46-fairness: one host cannot starve another. The Linux host runs fio 4k randread QD16 on
# a gonvmf null namespace (the quiet host) alone, then next to two others:
#  - a flooding host that plays fair: a second controller of the Linux host, another host
#    NQN on another subsystem of the same target, reading 128 KiB at QD128 as fast as it
#    can; its queues and the quiet ones share the poll groups and the buffer pool. The
#    quiet host must keep at least a quarter of its IOPS alone, with no I/O timeout.
#    Measured in TCG guests: 0.48 (twice) with limits.max_queue_data_in_flight at its
#    default, 128 KiB; 0.02-0.17 with no such bound (the flooder's whole queue posted at
#    once); 0.49 on the Linux target. 0.38-0.39 since d5fb514: the quiet host's IOPS
#    next to the flooder stayed (~1900), its IOPS alone rose by 40 %.
#  - nvmf-hog (integration/cmd/nvmf-hog), a hostile host that connects 8 I/O queues and
#    sends each 2 × 128 reads of 128 KiB at once while posting no receive buffer for their
#    responses — trying to hold the whole buffer pool. The quiet host must keep at least
#    half of its IOPS alone, with no I/O timeout, error recovery or reconnect; and gonvmf
#    must tear every hog queue down — those over their share of the pool as soon as
#    another queue waits within its own, the others once their responses have made no
#    progress for limits.response_timeout (30 s here) — which frees what they held.
# "Alone" is the mean of a run before and one after the others (the guest's speed drifts
# with the load of the machine it runs on). fairness.txt: IOPS, mean and p99 completion
# latency of the quiet host in each phase, the flooder's throughput, the ratios.
# vm: --timeout 900
. "$SRC/integration/vm/guest-lib.sh"

NQN=nqn.2024-01.io.gonvmf:fairness
FLOOD_NQN=nqn.2024-01.io.gonvmf:fairness-flood
FLOOD_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:f100df10-0df1-40df-800d-f100df100df1
FLOOD_HOSTID=f100df10-0df1-40df-800d-f100df100df1
HOG_NQN=nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b
PORT=4420
SECS=${GONVMF_FAIRNESS_SECS:-12}
CFG=/tmp/gonvmf-fairness.yaml
HOG=$GONVMF_BUILD/bin/nvmf-hog

[ -x "$HOG" ] || {
	fail nvmf-hog "no executable $HOG (integration/run-tests.sh builds integration/cmd/nvmf-hog)"
	finish
}

# The defaults that matter here: queue_depth 128, max_io_size 128 KiB, a 64 MiB pool.
cat > "$CFG" << EOF
listeners:
  - address: $RXE_IP
    port: $PORT
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: null, size: 4GiB}
  - nqn: $FLOOD_NQN
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: null, size: 4GiB}
limits:
  response_timeout: 30s
EOF
cp "$CFG" "$OUT/"
on_exit gonvmf_stop
on_exit nvme_disconnect_all
require gonvmf_start gonvmf "$CFG" "$RXE_IP" "$PORT"
nap 1
dmesg -C
nvme_connect_new "$NQN" "$PORT" || {
	fail connect "$NVME_ERR"
	finish
}
DEV=${NVME_NS_DEVS[0]}
log "Linux host: $NVME_CTRL, $DEV"

# fio_quiet <name>: the quiet host's 4k randread QD16 on $DEV for $SECS s; prints
# "IOPS MEAN_US P99_US" (completion latency).
fio_quiet() {
	timeout -k 10 $((SECS + 120)) fio --name="$1" --filename="$DEV" --ioengine=libaio --direct=1 \
		--rw=randread --bs=4k --iodepth=16 --time_based --runtime="$SECS" --ramp_time=2 \
		--output-format=json --output="$OUT/fio-$1.json" > "$OUT/fio-$1.log" 2>&1 || {
		echo "fio $1 failed: $(tail -n 2 "$OUT/fio-$1.log")" >&2
		return 1
	}
	python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))["jobs"][0]["read"]
c = r["clat_ns"]
print(round(r["iops"]), round(c["mean"] / 1000), round(c.get("percentile", {}).get("99.000000", 0) / 1000))' "$OUT/fio-$1.json"
}

# record <phase> <IOPS MEAN_US P99_US>: a line of fairness.txt (the ratios to the
# reference are added at the end).
record() {
	local iops mean p99
	read -r iops mean p99 <<< "$2"
	echo "$1 iops=${iops:-0} lat_mean_us=${mean:-n/a} lat_p99_us=${p99:-n/a}" >> "$OUT/fairness.txt"
}

q=$(fio_quiet solo) || {
	fail fio-solo "fio alone failed"
	finish
}
read -r solo solo_mean solo_p99 <<< "$q"
: > "$OUT/fairness.txt"
record solo "$q"
log "solo: $solo IOPS, latency mean $solo_mean us, p99 $solo_p99 us"

# ---- next to a flooding host that plays fair ----
fl= with=
if nvme_connect_new "$FLOOD_NQN" "$PORT" --hostnqn="$FLOOD_HOSTNQN" --hostid="$FLOOD_HOSTID"; then
	FDEV=${NVME_NS_DEVS[0]}
	log "flooding host: $NVME_CTRL, $FDEV"
	bg_start fio-flood timeout -k 10 $((SECS + 120)) fio --name=flood --filename="$FDEV" --ioengine=libaio \
		--direct=1 --rw=randread --bs=128k --iodepth=128 --time_based --runtime=$((SECS + 6)) \
		--output-format=json --output="$OUT/fio-flood.json"
	FLOOD_PID=$BG_PID
	nap 2
	if q=$(fio_quiet with-flood); then
		read -r fl fl_mean fl_p99 <<< "$q"
		record with-flood "$q"
		log "next to the flooding host: $fl IOPS, latency mean $fl_mean us, p99 $fl_p99 us (solo $solo, $solo_mean, $solo_p99)"
	else
		fl=
		fail fio-with-flood "fio next to the flooding host failed"
	fi
	wait "$FLOOD_PID"
	fbw=$(python3 -c 'import json,sys; r = json.load(open(sys.argv[1]))["jobs"][0]["read"]; print("%.1f MiB/s, %d IOPS" % (r["bw_bytes"] / 1048576.0, r["iops"]))' "$OUT/fio-flood.json" 2> /dev/null)
	echo "flood-host ${fbw:-n/a}" >> "$OUT/fairness.txt"
	log "the flooding host read ${fbw:-n/a}"
	nvme_disconnect "$FLOOD_NQN" || fail flood-disconnect "the flooding host's controller did not go away"
else
	fail flood-connect "$NVME_ERR"
fi

# ---- next to a hostile host ----
bg_start hog "$HOG" -a "$RXE_IP" -s "$PORT" -n "$NQN" -hostnqn "$HOG_NQN" -queues 8 -depth 128 -size 131072 -hold 600s
HOG_PID=$BG_PID
if ! wait_for 120 grep -q "queues loaded" "$OUT/hog.log"; then
	fail hog "nvmf-hog did not load its queues: $(tail -n 2 "$OUT/hog.log")"
	finish
fi
t_loaded=$EPOCHREALTIME
log "hog: $(grep 'granted' "$OUT/hog.log")"
with=
if q=$(fio_quiet with-hog); then
	read -r with with_mean with_p99 <<< "$q"
	record with-hog "$q"
else
	fail fio-with-hog "fio next to the hog failed"
fi
elapsed=$(since "$t_loaded")
log "with the hog: ${with:-0} IOPS, latency mean ${with_mean:-n/a} us, p99 ${with_p99:-n/a} us (solo $solo), fio ended ${elapsed%.*} s after the hog loaded"
# How long the hog held on: its queues over their share go once one of its own queues
# waits within its share (reclaim under pressure), the rest after the response timeout.
log "hog queues lost during the measurement: $(grep -c 'connection lost' "$OUT/hog.log") of 8"

# The watchdog: every hog queue is torn down once its responses made no progress for 30 s.
hog_all_lost() { [ "$(grep -c 'connection lost' "$OUT/hog.log")" -ge 8 ]; }
if wait_for 90 hog_all_lost; then
	pass response-timeout "the hog's 8 queues torn down, the first $(grep -m1 -o 'lost [0-9.]* s' "$OUT/hog.log" | cut -d' ' -f2) s after its reads"
else
	fail response-timeout "$(grep -c 'connection lost' "$OUT/hog.log") of 8 hog queues torn down 90 s after the fio run"
fi
check gonvmf-logged grep -q "responses made no progress" "$GONVMF_LOG"
kill "$HOG_PID" 2> /dev/null
wait "$HOG_PID" 2> /dev/null
# The Linux host is still fine afterwards; this run and the first bracket the others, so
# the reference is their mean (the guest's speed drifts with the host machine's load).
after=
if q=$(fio_quiet after); then
	read -r after after_mean after_p99 <<< "$q"
	record after "$q"
	pass after-hog "$after IOPS"
else
	fail after-hog "fio after the hog failed"
fi
ref=$(((solo + ${after:-$solo}) / 2))
echo "reference iops=$ref (mean of solo and after)" >> "$OUT/fairness.txt"
ratio() { echo "scale=2; ${1:-0} / $ref" | bc; }
echo "ratios with-flood=$(ratio "$fl") with-hog=$(ratio "$with")" >> "$OUT/fairness.txt"

# Next to a flooding host that plays fair the quiet host keeps a quarter of its IOPS
# (half of what was measured, for the guest's noise), and no I/O times out (below).
if [ -n "$fl" ] && [ $((fl * 4)) -ge "$ref" ]; then
	pass flood-share "$fl IOPS next to the flooding host, $ref alone ($(ratio "$fl")); latency mean $fl_mean us, p99 $fl_p99 us; alone $solo_mean us, $solo_p99 us"
else
	fail flood-share "${fl:-0} IOPS next to the flooding host, less than a quarter of $ref alone ($(ratio "$fl")): starved"
fi
if [ -n "$with" ] && [ $((with * 2)) -ge "$ref" ]; then
	pass fair-share "$with IOPS next to the hog, $ref alone ($(ratio "$with")); latency mean $with_mean us, p99 $with_p99 us"
else
	fail fair-share "${with:-0} IOPS next to the hog, less than half of $ref alone"
fi

dmesg > "$OUT/dmesg-fairness.txt"
if grep -E -i "timeout|error recovery|reconnect|resetting controller" "$OUT/dmesg-fairness.txt" | grep -v -i "keep.alive" > "$OUT/host-errors.txt"; then
	fail host-no-timeouts "the Linux host saw: $(head -n 2 "$OUT/host-errors.txt" | tr '\n' ' ')"
else
	pass host-no-timeouts
fi
finish
