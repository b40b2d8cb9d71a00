#!/bin/bash
# 26-durability-interop: what issue 17's durability and interop items look like from the
# Linux host.
#   - a subsystem named outside the NVMe NQN form (blktests' "blktests-subsystem-1") is
#     accepted with a portability warning, listed by nvme discover and connected to; an
#     unknown subsystem is refused;
#   - SIGTERM under fio load: gonvmf drains (the writes in flight are answered), exits 0,
#     and after a restart the host reconnects and fio finishes with every block verified;
#   - a sparse file namespace larger than its (128 MiB) filesystem reports thin
#     provisioning (NCAP < NSZE), and writing past the filesystem's room fails on the host
#     with ENOSPC ("No space left on device"), after which the namespace still reads.
# vm: --timeout 900 --disk 128M
. "$SRC/integration/vm/guest-lib.sh"

GONVMF=$GONVMF_BIN
NQN=blktests-subsystem-1
PORT=4420
CFG=$SCRATCH/gonvmf-25.yaml
DATA=$SCRATCH/data.img
THIN=$SCRATCH/thin.img

need_gonvmf
need_scratch

cat > "$CFG" << EOF
listeners:
  - address: $RXE_IP
    port: $PORT
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: file, path: $DATA, size: 32MiB}
      - {nsid: 2, backend: file, path: $THIN, size: 512MiB}
EOF
cp "$CFG" "$OUT/"

# ---- interop: a non-standard subsystem NQN ----
if "$GONVMF" check -q --config "$CFG" > "$OUT/check.txt" 2>&1 && grep -q "subsystems\[0\].nqn: .*not portable" "$OUT/check.txt"; then
	pass nqn-warning "$(grep -m1 'not portable' "$OUT/check.txt" | cut -c1-160)"
else
	fail nqn-warning "gonvmf check: $(tr '\n' ' ' < "$OUT/check.txt")"
fi

on_exit gonvmf_stop
on_exit nvme_disconnect_all
check gonvmf-start gonvmf_start gonvmf-1 "$CFG" "$RXE_IP" $PORT || finish
nap 1 # TCG: give the server a head start
timeout -k 5 60 modprobe nvme-rdma
if timeout -k 5 90 nvme discover -t rdma -a "$RXE_IP" -s $PORT > "$OUT/discover.txt" 2>&1 &&
	grep -q "subnqn: *$NQN\$" "$OUT/discover.txt"; then
	pass discover-nonstandard-nqn "lists $NQN"
else
	fail discover-nonstandard-nqn "$(tail -n 3 "$OUT/discover.txt" | tr '\n' ' ')"
fi
if timeout -k 5 60 nvme connect -t rdma -a "$RXE_IP" -s $PORT -n blktests-subsystem-2 > "$OUT/unknown.txt" 2>&1; then
	fail unknown-subsystem-refused "nvme connect to a subsystem that does not exist succeeded"
	nvme_disconnect blktests-subsystem-2
else
	pass unknown-subsystem-refused "$(tail -n 1 "$OUT/unknown.txt")"
fi
# ctrl-loss-tmo and reconnect-delay: the host waits for the restarted target below.
if ! nvme_connect_new "$NQN" $PORT --ctrl-loss-tmo=120 --reconnect-delay=1 || [ ${#NVME_NS_DEVS[@]} != 2 ]; then
	fail connect-nonstandard-nqn "${NVME_ERR:-expected 2 namespaces, got '${NVME_NS_DEVS[*]}'}"
	finish
fi
pass connect-nonstandard-nqn "${NVME_NS_DEVS[*]} in ${NVME_CONNECT_S}s"
DEV1=${NVME_NS_DEVS[0]} DEV2=${NVME_NS_DEVS[1]}

# ---- SIGTERM under load: drain, restart, fio goes on and verifies ----
# Sequential writes (128 blocks, 16 in flight: no two writes of one block in flight at
# once, which would make fio's verify ambiguous), verified as it goes.
log "fio write+verify on $DEV1; SIGTERM gonvmf while writes are in flight, restart it"
bg_start fio-drain timeout -k 10 300 fio --name=drain --filename="$DEV1" --ioengine=libaio --direct=1 \
	--rw=write --bs=128k --iodepth=16 --size=16M --time_based --runtime=20 --verify=crc32c \
	--verify_backlog=32 --verify_fatal=1 --output-format=json --output="$OUT/fio-drain.json"
FIO_PID=$BG_PID
# SIGTERM once fio is well under way: 100 writes completed (field 5 of the path device's
# stat: 6.1 keeps no statistics on the multipath head).
BLK=${DEV1#/dev/}
STAT=/sys/block/$BLK
for p in /sys/block/nvme*c*n1; do [ -e "$p/stat" ] && STAT=$p && break; done
for _ in $(seq 300); do
	read -r _ _ _ _ WRITES _ < "$STAT/stat"
	[ "${WRITES:-0}" -ge 100 ] && break
	nap 0.2
done
log "SIGTERM with $WRITES writes done, $(tr -s ' ' < "$STAT/inflight") (read write) in flight on the host (${STAT##*/})"
T0=$EPOCHREALTIME
if gonvmf_stop 60; then
	pass sigterm-exit-0 "gonvmf exited 0 $(since "$T0") s after SIGTERM"
else
	fail sigterm-exit-0 "gonvmf did not exit 0 after SIGTERM under load"
fi
# How many commands the target had begun at that instant depends on timing (under TCG the
# host's 16 are often in transit or in its completion queue): the drain must end with all
# of them answered, however many. TestRDMAShutdownAnswersInFlightWrites holds writes in a
# slow backend to check each gets its response.
DRAINED=$(grep -m1 'msg="drained' "$OUT/gonvmf-1.log")
if [[ $DRAINED =~ commands=([0-9]+) ]]; then
	pass drain-answers-in-flight "${BASH_REMATCH[1]} commands begun at SIGTERM, all answered before the disconnect"
else
	fail drain-answers-in-flight "no 'drained' line: $(grep -E 'drain|shutting' "$OUT/gonvmf-1.log" | tr '\n' ' ')"
fi
if grep -qE 'SIGSEGV|panic|fatal error' "$OUT/gonvmf-1.log"; then
	fail no-crash-at-shutdown "$(grep -m1 -E 'SIGSEGV|panic|fatal error' "$OUT/gonvmf-1.log")"
else
	pass no-crash-at-shutdown
fi
nap 2
check gonvmf-restart gonvmf_start gonvmf-2 "$CFG" "$RXE_IP" $PORT
if wait "$FIO_PID"; then
	if python3 - "$OUT/fio-drain.json" << 'PY'; then
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
if j["error"] != 0:
    sys.exit("fio error %d" % j["error"])
w, r = j["write"], j["read"]
print("written %.1f MiB, verified %.1f MiB" % (w["io_bytes"] / 1048576, r["io_bytes"] / 1048576))
if r["io_bytes"] == 0:
    sys.exit("nothing was verified")
PY
		pass fio-across-restart "$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print("write %.1f MiB verify-read %.1f MiB" % (j["write"]["io_bytes"]/1048576, j["read"]["io_bytes"]/1048576))' "$OUT/fio-drain.json")"
	else
		fail fio-across-restart "fio's report shows errors"
	fi
else
	fail fio-across-restart "fio failed: $(grep -E 'error|verify|bad' "$OUT/fio-drain.log" | head -n 3 | tr '\n' ' ')"
fi

# ---- thin provisioning and ENOSPC on a small filesystem ----
log "sparse 512 MiB namespace on a 128 MiB filesystem: $DEV2"
nvme id-ns "$DEV2" > "$OUT/id-ns-thin.txt" 2>&1
NSZE=$(awk '/^nsze/ {print $3}' "$OUT/id-ns-thin.txt")
NCAP=$(awk '/^ncap/ {print $3}' "$OUT/id-ns-thin.txt")
NSFEAT=$(awk '/^nsfeat/ {print $3}' "$OUT/id-ns-thin.txt")
if [ -n "$NSZE" ] && [ -n "$NCAP" ] && ((NCAP > 0 && NCAP < NSZE && (NSFEAT & 1) == 1)); then
	pass thin-provisioning-reported "nsze $NSZE ncap $NCAP nsfeat $NSFEAT"
else
	fail thin-provisioning-reported "nsze '$NSZE' ncap '$NCAP' nsfeat '$NSFEAT'"
fi
if timeout -k 10 300 dd if=/dev/zero of="$DEV2" bs=1M count=512 oflag=direct > "$OUT/dd-enospc.txt" 2>&1; then
	fail enospc-on-host "512 MiB written to a namespace on a 128 MiB filesystem"
elif grep -q "No space left on device" "$OUT/dd-enospc.txt"; then
	pass enospc-on-host "$(grep -m1 'No space' "$OUT/dd-enospc.txt"); $(grep -m1 copied "$OUT/dd-enospc.txt")"
else
	fail enospc-on-host "dd failed otherwise: $(tr '\n' ' ' < "$OUT/dd-enospc.txt"); dmesg: $(dmesg | tail -n 2 | tr '\n' ' ')"
fi
check read-after-enospc timeout -k 10 120 dd if="$DEV2" of=/dev/null bs=1M count=8 iflag=direct

check nvme-disconnect nvme_disconnect_all
check gonvmf-stop gonvmf_stop
grep -E 'level=(WARN|ERROR)' "$OUT"/gonvmf-*.log | head -n 20
finish
