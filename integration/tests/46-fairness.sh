#!/bin/bash
# 46-fairness: one host cannot starve another. The Linux host runs fio 4k randread QD16 on
# a gonvmf null namespace, alone and then next to nvmf-hog (integration/cmd/nvmf-hog), a
# hostile host of its own NQN that connects 8 I/O queues and sends each 2 × 128 reads of
# 128 KiB at once while posting no receive buffer for their responses — trying to hold
# the whole buffer pool. The Linux host must keep at least half of its solo IOPS, with no
# I/O timeout, error recovery or reconnect; and gonvmf must tear every hog queue down —
# those over their share of the pool as soon as another queue waits within its own, the
# others once their responses have made no progress for limits.response_timeout (30 s
# here) — which frees what they held.
# vm: --timeout 900
. "$SRC/integration/vm/guest-lib.sh"

NQN=nqn.2024-01.io.gonvmf:fairness
HOG_NQN=nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b
PORT=4420
SECS=${GONVMF_FAIRNESS_SECS:-15}
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

# fio_iops <name>: 4k randread QD16 on $DEV for $SECS s; prints the IOPS.
fio_iops() {
	timeout -k 10 $((SECS + 120)) fio --name="$1" --filename="$DEV" --ioengine=libaio --direct=1 \
		--rw=randread --bs=4k --iodepth=16 --time_based --runtime="$SECS" --ramp_time=2 \
		--output-format=json --output="$OUT/fio-$1.json" > "$OUT/fio-$1.log" 2>&1 || {
		echo "fio $1 failed: $(tail -n 2 "$OUT/fio-$1.log")" >&2
		return 1
	}
	python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"]))' "$OUT/fio-$1.json"
}

solo=$(fio_iops solo) || {
	fail fio-solo "fio alone failed"
	finish
}
log "solo: $solo IOPS"

bg_start hog "$HOG" -a "$RXE_IP" -s "$PORT" -n "$NQN" -hostnqn "$HOG_NQN" -queues 8 -depth 128 -size 131072 -hold 600s
HOG_PID=$BG_PID
if ! wait_for 120 grep -q "queues loaded" "$OUT/hog.log"; then
	fail hog "nvmf-hog did not load its queues: $(tail -n 2 "$OUT/hog.log")"
	finish
fi
t_loaded=$EPOCHREALTIME
log "hog: $(grep 'granted' "$OUT/hog.log")"
with=$(fio_iops with-hog) || fail fio-with-hog "fio next to the hog failed"
elapsed=$(since "$t_loaded")
log "with the hog: ${with:-0} IOPS (solo $solo), fio ended ${elapsed%.*} s after the hog loaded"
echo "solo_iops=$solo with_hog_iops=${with:-0} ratio=$(echo "scale=2; ${with:-0} / $solo" | bc)" > "$OUT/fairness.txt"
if [ -n "$with" ] && [ $((with * 2)) -ge "$solo" ]; then
	pass fair-share "$with IOPS next to the hog, $solo alone ($(echo "scale=2; $with / $solo" | bc))"
else
	fail fair-share "${with:-0} IOPS next to the hog, less than half of $solo alone"
fi
# How long the hog held on: its queues over their share go once one of its own queues
# waits within its share (reclaim under pressure), the rest after the response timeout.
log "hog queues lost during the measurement: $(grep -c 'connection lost' "$OUT/hog.log") of 8"

dmesg > "$OUT/dmesg-fairness.txt"
if grep -E -i "timeout|error recovery|reconnect|resetting controller" "$OUT/dmesg-fairness.txt" | grep -v -i "keep.alive" > "$OUT/host-errors.txt"; then
	fail host-no-timeouts "the Linux host saw: $(head -n 2 "$OUT/host-errors.txt" | tr '\n' ' ')"
else
	pass host-no-timeouts
fi

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
# The Linux host is still fine afterwards.
after=$(fio_iops after) && pass after-hog "$after IOPS" || fail after-hog "fio after the hog failed"
finish
