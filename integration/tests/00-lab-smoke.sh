#!/bin/bash
# 00-lab-smoke: proves the harness. Soft-RoCE is up (PORT_ACTIVE, rping between two processes
# over $RXE_IP) and the Linux kernel target over rdma serves the Linux host: null_blk namespace,
# nvme discover, nvme connect, a 3 s fio randread 4k, disconnect, teardown.
# vm: --timeout 600
. "$SRC/integration/vm/guest-lib.sh"

check rxe-port-active sh -c 'ibv_devinfo -d "$RXE_DEV" | grep PORT_ACTIVE'

log "rping over $RXE_DEV ($RXE_IP)"
bg_start rping-server timeout 60 rping -s -a "$RXE_IP" -C 3 -v
server=$BG_PID
# The server listens only after its start-up, which takes seconds under TCG on a loaded
# machine: a client refused before then (REJECTED) tries again while the server runs.
rping_client() {
	local i
	for i in $(seq 40); do
		timeout 60 rping -c -a "$RXE_IP" -C 3 -v > "$OUT/rping-client.log" 2>&1 && return 0
		grep -q 'ping data' "$OUT/rping-client.log" && return 1 # connected, then failed
		kill -0 "$server" 2>/dev/null || return 1
		sleep 0.5
	done
	return 1
}
if rping_client && wait "$server" &&
	[ "$(grep -c 'ping data' "$OUT/rping-client.log")" = 3 ]; then
	pass rping
else
	fail rping "client: $(tail -n 1 "$OUT/rping-client.log"); server: $(tail -n 1 "$OUT/rping-server.log")"
fi

NQN=nqn.2024-01.io.gonvmf:smoke
log "Linux target over rdma: $NQN on null_blk"
dev=$(null_blk_setup 1) || {
	fail null_blk "no null_blk device"
	finish
}
on_exit nvmet_teardown
check nvmet-setup nvmet_setup "$NQN" "$dev" || finish
if nvme_discover > "$OUT/discover.txt" 2>&1 &&
	grep -q "subnqn: *$NQN" "$OUT/discover.txt"; then
	pass nvme-discover
else
	fail nvme-discover "$NQN not in the discovery log: $(tail -n 2 "$OUT/discover.txt" | tr '\n' ' ')"
fi
ns=$(nvme_connect "$NQN") && pass nvme-connect "$ns" || {
	fail nvme-connect "no namespace"
	finish
}
on_exit nvme_disconnect_all

log "fio randread 4k QD16, 3 s on $ns"
timeout 120 fio --name=rr4k --filename="$ns" --ioengine=libaio --direct=1 --rw=randread --bs=4k \
	--iodepth=16 --time_based --runtime=3 --norandommap --randrepeat=0 --lat_percentiles=1 \
	--output-format=json --output="$OUT/fio-rr4k.json" > "$OUT/fio.log" 2>&1
rc=$?
if [ $rc = 0 ] && python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
sys.exit(0 if j["error"] == 0 and j["read"]["total_ios"] > 0 else 1)' "$OUT/fio-rr4k.json"; then
	pass fio-randread "$(fio_summary "$OUT/fio-rr4k.json")"
else
	fail fio-randread "fio exited $rc: $(tail -n 2 "$OUT/fio.log" | tr '\n' ' ')"
fi

check nvme-disconnect nvme_disconnect_all
check nvmet-teardown nvmet_teardown
