#!/bin/bash
# 20-linux-host-e2e: `gonvmf serve` with file, null and memory namespaces serves the Linux
# host over Soft-RoCE: nvme discover (only the subsystems the host may use), nvme connect with
# the default queue count and with -i 1, nvme list / id-ctrl / id-ns / smart-log / get-feature,
# fio with verify=crc32c (write, then verify) at 4k, 64k and 1M blocks from QD1 to QD32 on the
# file namespace, nvme disconnect, reconnect and verify again, restart gonvmf and verify that
# the data persisted, short fio runs on the null and memory namespaces, and a host NQN the
# subsystem does not allow is refused.
# vm: --timeout 1500 --disk 2G
. "$SRC/integration/vm/guest-lib.sh"

GONVMF=$GONVMF_BIN # guest-lib's gonvmf_start runs it
NQN=nqn.2024-01.io.gonvmf:e2e
NQN_OTHER=nqn.2024-01.io.gonvmf:e2e-restricted
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5d1c0a2e-7b3f-4c11-9d2a-0e6f1b2c3d4e
STRANGER=nqn.2014-08.org.nvmexpress:uuid:0badc0de-1111-4222-8333-944455556666
PORT=4420
CFG=$SCRATCH/gonvmf-e2e.yaml
IMG=$SCRATCH/gonvmf-e2e.img

need_gonvmf
need_scratch

cat > "$CFG" << EOF
listeners:
  - address: $RXE_IP
    port: $PORT
subsystems:
  - nqn: $NQN
    hosts: [$HOSTNQN]
    namespaces:
      - {nsid: 1, backend: file, path: $IMG, size: 1GiB}
      - {nsid: 2, backend: null, size: 2GiB}
      - {nsid: 3, backend: memory, size: 128MiB}
  - nqn: $NQN_OTHER
    hosts: [$STRANGER]
    namespaces:
      - {nsid: 1, backend: null, size: 1GiB}
EOF
cp "$CFG" "$OUT/gonvmf-e2e.yaml"
check gonvmf-check "$GONVMF" check -q --config "$CFG"

SERVE_N=0
# e2e_serve: gonvmf_start with this suite's configuration (log in $OUT/gonvmf-N.log), and
# its start-up line names both subsystems and the listener.
e2e_serve() {
	SERVE_N=$((SERVE_N + 1))
	gonvmf_start "gonvmf-$SERVE_N" "$CFG" "$RXE_IP" "$PORT" || return 1
	wait_for 10 grep -q "serving 2 subsystems on rdma $RXE_IP:$PORT" "$GONVMF_LOG" || {
		echo "gonvmf listens but did not log 'serving 2 subsystems on rdma $RXE_IP:$PORT': $(tail -n 3 "$GONVMF_LOG")" >&2
		return 1
	}
	sleep 1 # TCG: give the server a head start
}
# e2e_stop: SIGTERM; gonvmf must exit 0 within 60 s after an orderly shutdown.
e2e_stop() { gonvmf_stop && grep -q 'msg=stopped' "$GONVMF_LOG"; }
on_exit gonvmf_stop
on_exit nvme_disconnect_all

# fio verify jobs on the file namespace: each job writes its own region with crc32c
# headers, then reads it back and checks it. With VERIFY_ONLY=1 nothing is written: the
# same regions are read and checked against what an earlier run wrote.
fio_verify() { # <name> <dev> [--verify_only=1]
	local name=$1 dev=$2
	shift 2
	fio_verify_run "$name" 900 --filename="$dev" "$@" \
		--name=4k-qd1 --rw=randwrite --bs=4k --iodepth=1 --offset=0 --size=8M \
		--name=4k-qd32 --stonewall --rw=randwrite --bs=4k --iodepth=32 --offset=16M --size=32M \
		--name=64k-qd16 --stonewall --rw=randwrite --bs=64k --iodepth=16 --offset=64M --size=48M \
		--name=1m-qd8 --stonewall --rw=write --bs=1M --iodepth=8 --offset=128M --size=64M \
		--name=1m-qd32 --stonewall --rw=write --bs=1M --iodepth=32 --offset=192M --size=64M
}

# ---- start, discover ----
log "gonvmf serve: file ($IMG), null and memory namespaces on $RXE_IP:$PORT"
check gonvmf-start e2e_serve || finish
timeout -k 5 60 modprobe nvme-rdma

if timeout -k 5 90 nvme discover -t rdma -a "$RXE_IP" -s $PORT --hostnqn=$HOSTNQN > "$OUT/discover.txt" 2>&1 &&
	grep -q "subnqn: *$NQN\$" "$OUT/discover.txt" && ! grep -q "subnqn: *$NQN_OTHER\$" "$OUT/discover.txt" &&
	grep -q "trtype: *rdma" "$OUT/discover.txt"; then
	pass nvme-discover "lists $NQN, not $NQN_OTHER"
else
	fail nvme-discover "$(tail -n 5 "$OUT/discover.txt" | tr '\n' ' ')"
fi

# ---- connect with the default queue count ----
log "nvme connect (default queues)"
mapfile -t NS < <(nvme_connect "$NQN" $PORT --hostnqn=$HOSTNQN)
if [ ${#NS[@]} = 3 ]; then
	pass nvme-connect "${NS[*]}"
else
	fail nvme-connect "expected 3 namespaces, got '${NS[*]}'"
	finish
fi
nvme_ctrls "$NQN"
CTRLNAME=${NVME_CTRLS[0]}
CTRL=/dev/$CTRLNAME
echo "controller $CTRL; queues: $(cat /sys/class/nvme/$CTRLNAME/queue_count 2> /dev/null || echo '?') (incl. admin)"
check nvme-list sh -c "nvme list > '$OUT/nvme-list.txt' 2>&1 && grep -c '${NS[0]}' '$OUT/nvme-list.txt' && cat '$OUT/nvme-list.txt'"
if nvme id-ctrl "$CTRL" > "$OUT/id-ctrl.txt" 2>&1 && grep -q "^subnqn *: $NQN" "$OUT/id-ctrl.txt" &&
	grep -q "^mn *: gonvmf" "$OUT/id-ctrl.txt"; then
	pass nvme-id-ctrl "$(grep -E '^(mn|sn|fr|mdts|sgls|ioccsz|kas) ' "$OUT/id-ctrl.txt" | tr -s ' ' | tr '\n' ';')"
else
	fail nvme-id-ctrl "$(tail -n 3 "$OUT/id-ctrl.txt" | tr '\n' ' ')"
fi
if nvme id-ns "${NS[0]}" > "$OUT/id-ns.txt" 2>&1 && grep -q "^nsze *: 0x200000" "$OUT/id-ns.txt"; then
	pass nvme-id-ns "nsze 0x200000 (1 GiB of 512-byte blocks)"
else
	fail nvme-id-ns "$(grep -E '^(nsze|ncap|lbaf)' "$OUT/id-ns.txt" | head -n 3 | tr '\n' ' ')"
fi
check nvme-smart-log nvme smart-log "$CTRL"
check nvme-get-feature-queues nvme get-feature "$CTRL" --feature-id=7 -H
check nvme-get-feature-kato nvme get-feature "$CTRL" --feature-id=0xf

# ---- fio verify on the file namespace ----
log "fio write + verify (crc32c) on ${NS[0]}"
check fio-verify fio_verify write "${NS[0]}"
log "fio on the null (${NS[1]}) and memory (${NS[2]}) namespaces"
check fio-null timeout -k 10 300 fio --name=null-rr --filename="${NS[1]}" --ioengine=libaio --direct=1 \
	--rw=randread --bs=4k --iodepth=32 --time_based --runtime=3 --output="$OUT/fio-null.txt"
check fio-memory-verify timeout -k 10 300 fio --name=mem --filename="${NS[2]}" --ioengine=libaio --direct=1 \
	--rw=randwrite --bs=16k --iodepth=16 --size=32M --verify=crc32c --verify_fatal=1 --output="$OUT/fio-memory.txt"


# ---- remote invalidation: the host posts no local invalidation ----
# The Linux host registers a memory region per command and asks for its key to be
# invalidated (Keyed SGL subtype Invalidate Key); gonvmf answers with SEND with Invalidate,
# so Soft-RoCE invalidates the key on arrival (rxe_invalidate_mr, once per I/O) and
# nvme-rdma never runs the completion handler of a local invalidation
# (nvme_rdma_inv_rkey_done). Counted with kprobes over a short fio run of reads, 4k to
# 128k, on the null namespace (reads: the host sends small writes in the capsule, with no
# key); skipped where the guest kernel has no kprobe events or no such symbols.
remote_invalidation() { # <dev>
	local T=/sys/kernel/tracing f ios
	local -A n
	[ -e $T/kprobe_events ] || mount -t tracefs nodev $T 2> /dev/null
	for f in nvme_rdma_inv_rkey_done rxe_invalidate_mr; do
		if [ ! -w $T/kprobe_events ] || ! grep -qw $f /proc/kallsyms; then
			skip remote-invalidation "no kprobe events or no $f in this kernel"
			return 0
		fi
		echo "p:gonvmf_e2e/$f $f" >> $T/kprobe_events || {
			fail remote-invalidation "cannot place a kprobe on $f"
			return 0
		}
	done
	echo 1 > $T/events/gonvmf_e2e/enable
	timeout -k 10 300 fio --name=inv --filename="$1" --ioengine=libaio --direct=1 --rw=randread \
		--bsrange=4k-128k --iodepth=8 --time_based --runtime=2 --output-format=json \
		--output="$OUT/fio-inv.json" > /dev/null 2>&1
	echo 0 > $T/events/gonvmf_e2e/enable
	for f in nvme_rdma_inv_rkey_done rxe_invalidate_mr; do
		n[$f]=$(awk -v e=$f '$1 == e { print $2 }' $T/kprobe_profile)
		echo "-:gonvmf_e2e/$f" >> $T/kprobe_events
	done
	ios=$(python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0]; print(j['read']['total_ios']+j['write']['total_ios'])" \
		"$OUT/fio-inv.json" 2> /dev/null || echo 0)
	echo "fio I/Os $ios, local invalidations ${n[nvme_rdma_inv_rkey_done]}, keys invalidated ${n[rxe_invalidate_mr]}"
	if [ "${ios:-0}" -lt 100 ]; then
		fail remote-invalidation "fio completed ${ios:-0} I/Os (see $OUT/fio-inv.json)"
	elif [ "${n[rxe_invalidate_mr]:-0}" -lt "$ios" ]; then
		fail remote-invalidation "Soft-RoCE invalidated ${n[rxe_invalidate_mr]:-0} keys for $ios I/Os: the host did not ask for invalidation"
	elif [ "${n[nvme_rdma_inv_rkey_done]:-x}" != 0 ]; then
		fail remote-invalidation "the host posted ${n[nvme_rdma_inv_rkey_done]:-?} local invalidations for $ios I/Os: responses did not invalidate its keys"
	else
		pass remote-invalidation "$ios I/Os, ${n[rxe_invalidate_mr]} keys invalidated remotely, no local invalidation"
	fi
}
remote_invalidation "${NS[1]}"

check nvme-disconnect nvme_disconnect_all

# ---- reconnect with one I/O queue, verify again ----
log "nvme connect -i 1, verify what was written"
mapfile -t NS < <(nvme_connect "$NQN" $PORT --hostnqn=$HOSTNQN -i 1)
if [ ${#NS[@]} = 3 ]; then
	nvme_ctrls "$NQN"
	CTRLNAME=${NVME_CTRLS[0]}
	pass nvme-connect-1-queue "queue_count $(cat /sys/class/nvme/$CTRLNAME/queue_count 2> /dev/null || echo '?')"
	check fio-verify-after-reconnect fio_verify reconnect "${NS[0]}" --verify_only=1
else
	fail nvme-connect-1-queue "expected 3 namespaces, got '${NS[*]}'"
fi
check nvme-disconnect-2 nvme_disconnect_all

# ---- restart gonvmf: the data persisted ----
log "restart gonvmf, verify again"
check gonvmf-sigterm e2e_stop
check gonvmf-restart e2e_serve || finish
mapfile -t NS < <(nvme_connect "$NQN" $PORT --hostnqn=$HOSTNQN)
if [ ${#NS[@]} = 3 ]; then
	pass nvme-connect-after-restart "${NS[*]}"
	check fio-verify-after-restart fio_verify restart "${NS[0]}" --verify_only=1
else
	fail nvme-connect-after-restart "expected 3 namespaces, got '${NS[*]}'"
fi
check nvme-disconnect-3 nvme_disconnect_all

# ---- a host the subsystem does not allow ----
log "connect as a host that is not allowed"
if timeout -k 5 60 nvme connect -t rdma -a "$RXE_IP" -s $PORT -n "$NQN" --hostnqn=$STRANGER > "$OUT/refused.txt" 2>&1; then
	fail host-refused "nvme connect as $STRANGER succeeded"
	nvme_disconnect_all
elif grep -rqsx "$NQN" /sys/class/nvme/nvme*/subsysnqn; then
	fail host-refused "a controller of $NQN exists after the refused connect"
else
	pass host-refused "$(tail -n 1 "$OUT/refused.txt")"
fi

check gonvmf-sigterm-final e2e_stop
grep -E 'level=(WARN|ERROR)' "$OUT"/gonvmf-*.log | head -n 20
finish
