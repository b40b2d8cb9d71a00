#!/bin/bash
# vm: --timeout 600
# 47-log-stall: a log reader that stops reading cannot stall I/O. gonvmf serve's standard
# error is a pipe of 4 KiB (F_SETPIPE_SZ) that is held open and never read — as journald's
# stream or a `gonvmf serve 2>&1 | tool` whose tool hangs would be —, so it is full after a
# few log lines. The Linux host reads from one subsystem (fio 4k randread QD16, the quiet
# host) while a second host NQN connects to another subsystem and disconnects again,
# $CYCLES times. Each Connect and teardown is logged from the poll group that runs the
# queue ("controller created", "queue connected", "queue torn down"). With a synchronous
# log handler the first line that did not fit blocked that group's thread in write(2):
# the Connect got no response and every queue of the group stopped. serve logs through a
# buffer that a goroutine of its own writes out (internal/asynclog), so here:
#  - every one of the second host's connects completes within 20 s, and its disconnects too;
#  - the quiet host's fio runs to its end without an I/O error, no second of it without
#    I/O, and the Linux host logs no timeout, reset or reconnect;
#  - once the pipe is read, the lines that waited arrive, none dropped (the 512 KiB buffer
#    holds them all): a "controller created" line for every connect, and gonvmf stops
#    with status 0.
. "$SRC/integration/vm/guest-lib.sh"

NQN=nqn.2024-01.io.gonvmf:logstall
CHURN_NQN=nqn.2024-01.io.gonvmf:logstall-churn
CHURN_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:c4c4c4c4-0c4c-4c4c-8c4c-c4c4c4c4c4c4
CHURN_HOSTID=c4c4c4c4-0c4c-4c4c-8c4c-c4c4c4c4c4c4
PORT=4420
CYCLES=${GONVMF_LOGSTALL_CYCLES:-6}
CFG=/tmp/gonvmf-logstall.yaml

cat > "$CFG" << EOF
listeners:
  - address: $RXE_IP
    port: $PORT
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: null, size: 4GiB}
  - nqn: $CHURN_NQN
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: null, size: 1GiB}
EOF
cp "$CFG" "$OUT/"

# serve's output goes to the pipe. HOLD is a reader that never reads, and a writer, so that
# the drain below sees no end of file until the script closes it.
PIPE=/tmp/logstall.pipe
mkfifo "$PIPE"
exec {HOLD}<> "$PIPE"
size=$(python3 -c 'import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_NONBLOCK)
print(fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 4096))' "$PIPE") || {
	fail pipe "cannot shrink the pipe to 4 KiB"
	finish
}
log "gonvmf's standard error: a pipe of $size bytes that nobody reads"

# drain: read the pipe into $OUT/gonvmf.log from now on (once). Registered to run before
# gonvmf_stop, which quotes the log's tail (GONVMF_LOG) when gonvmf fails to stop.
DRAIN_PID=
drain() {
	[ -n "$DRAIN_PID" ] && return 0
	cat "$PIPE" {HOLD}>&- > "$OUT/gonvmf.log" & # without HOLD, a writer that would keep it from the end
	DRAIN_PID=$!
	GUEST_LIB_BG+=("$DRAIN_PID")
}
on_exit gonvmf_stop 30
on_exit drain
on_exit nvme_disconnect_all
# gonvmf_start would read its log (the pipe) to say why gonvmf did not start, and wait for
# ever: the suite starts gonvmf itself.
"$GONVMF_BIN" serve --config "$CFG" > "$PIPE" 2>&1 &
GONVMF_PID=$!
GUEST_LIB_BG+=("$GONVMF_PID")
GONVMF_LOG=$OUT/gonvmf.log
up_or_gone() { gonvmf_listening "$RXE_IP" "$PORT" || ! kill -0 "$GONVMF_PID" 2> /dev/null; }
if ! wait_for 60 up_or_gone || ! gonvmf_listening "$RXE_IP" "$PORT"; then
	drain
	nap 1
	fail start "gonvmf serve shows no RDMA listener on $RXE_IP:$PORT: $(tail -n 2 "$OUT/gonvmf.log" | tr '\n' ' ')"
	finish
fi
nap 1
dmesg -C
nvme_connect_new "$NQN" "$PORT" || {
	fail connect "$NVME_ERR"
	finish
}
DEV=${NVME_NS_DEVS[0]}
log "quiet host: $NVME_CTRL, $DEV"

RUNTIME=$((CYCLES * 4 + 10))
bg_start fio-quiet timeout -k 10 $((RUNTIME + 120)) fio --name=quiet --filename="$DEV" --ioengine=libaio \
	--direct=1 --rw=randread --bs=4k --iodepth=16 --time_based --runtime="$RUNTIME" \
	--write_iops_log="$OUT/fio-quiet" --log_avg_msec=1000 --output-format=json --output="$OUT/fio-quiet.json"
QUIET_PID=$BG_PID
nap 3

connected=0 slowest=0
for i in $(seq 1 "$CYCLES"); do
	t0=$EPOCHREALTIME
	if ! nvme_connect_new "$CHURN_NQN" "$PORT" --hostnqn="$CHURN_HOSTNQN" --hostid="$CHURN_HOSTID" 2> /dev/null; then
		fail churn-connect "connect $i of $CYCLES failed after $(since "$t0") s: $NVME_ERR"
		break
	fi
	s=$(since "$t0")
	if ! nvme_disconnect "$CHURN_NQN" 20; then
		fail churn-disconnect "disconnect $i of $CYCLES: the controller was still there 20 s later"
		break
	fi
	[ "$(echo "$s > $slowest" | bc)" = 1 ] && slowest=$s
	connected=$i
	log "second host: connect $i in $s s"
done
if [ "$connected" = "$CYCLES" ]; then
	if [ "$(echo "$slowest <= 20" | bc)" = 1 ]; then
		pass churn "the second host connected and disconnected $CYCLES times, the slowest connect $slowest s"
	else
		fail churn "the slowest of $CYCLES connects took $slowest s, over 20 s"
	fi
fi

# The quiet host: fio ends by itself after RUNTIME s.
if ! wait_for $((RUNTIME + 130)) bash -c "! kill -0 $QUIET_PID"; then
	fail quiet-run "the quiet host's fio did not end $((RUNTIME + 130)) s after it started"
fi
wait "$QUIET_PID"
quiet=$(fio_read "$OUT/fio-quiet.json" '"%d %d %.0f" % (j["error"], r["total_ios"], r["iops"])')
read -r qerr qios qiops <<< "$quiet"
if [ "${qerr:-x}" = 0 ] && [ "${qios:-0}" -gt 0 ]; then
	pass quiet-run "the quiet host's fio ran $RUNTIME s without error: $qios reads, $qiops IOPS"
else
	fail quiet-run "the quiet host's fio (error, reads, IOPS): ${quiet:-nothing}; $(tail -n 2 "$OUT/fio-quiet.log" | tr '\n' ' ')"
fi
# Every second of the run did I/O (fio writes a sample per second, or one for a longer
# window when its own thread did not run; a window with no I/O averages to 0).
zeros=$(awk -F, '$2 + 0 == 0 { n++ } END { print n + 0 }' "$OUT"/fio-quiet_iops.*.log 2> /dev/null)
samples=$(cat "$OUT"/fio-quiet_iops.*.log 2> /dev/null | wc -l)
if [ "$samples" -ge $((RUNTIME / 2)) ] && [ "$zeros" = 0 ]; then
	pass quiet-steady "$samples one-second samples, none without I/O"
else
	fail quiet-steady "$zeros of $samples one-second samples of the quiet host had no I/O (need ≥ $((RUNTIME / 2)) samples, none empty)"
fi
host_no_timeouts logstall

# Read the pipe: what waited arrives, then gonvmf stops cleanly.
nvme_disconnect "$NQN" || fail disconnect "the quiet host's controller did not go away"
drain
created() { [ "$(grep -c 'msg="controller created"' "$OUT/gonvmf.log")" -ge $((connected + 1)) ]; }
if wait_for 30 created; then
	pass log-delivered "$(grep -c 'msg="controller created"' "$OUT/gonvmf.log") \"controller created\" lines after the pipe was read ($((connected + 1)) connects)"
else
	fail log-delivered "$(grep -c 'msg="controller created"' "$OUT/gonvmf.log") \"controller created\" lines 30 s after the pipe was read, want $((connected + 1))"
fi
if gonvmf_stop 30; then
	pass stop "gonvmf exited 0 after SIGTERM"
else
	fail stop "gonvmf did not stop cleanly: see gonvmf.log"
fi
exec {HOLD}>&- # the drain sees the end of file now that gonvmf has gone
if ! wait_for 20 bash -c "! kill -0 $DRAIN_PID"; then
	fail drain "reading the pipe did not end 20 s after gonvmf exited: another process holds it open"
	kill "$DRAIN_PID" 2> /dev/null
fi
wait "$DRAIN_PID" 2> /dev/null
# The test means something only if the log outgrew the pipe several times over.
bytes=$(stat -c %s "$OUT/gonvmf.log")
if [ "$bytes" -ge $((4 * size)) ]; then
	pass log-outgrew-pipe "gonvmf logged $bytes bytes into the $size-byte pipe"
else
	fail log-outgrew-pipe "gonvmf logged only $bytes bytes, under 4 × the $size-byte pipe: raise CYCLES"
fi
check no-drops bash -c "! grep -q 'log lines dropped' '$OUT/gonvmf.log'"
check stopped-logged grep -q 'msg=stopped' "$OUT/gonvmf.log"
finish
