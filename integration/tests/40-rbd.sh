#!/bin/bash
# 40-rbd: gonvmf's ceph build serves a Ceph RBD image to the Linux host over Soft-RoCE.
# The guest has no network to reach a cluster on the build machine, so a single-node Ceph
# cluster runs inside it (integration/ceph/cluster.sh: one mon, one memstore OSD, no mgr,
# on 127.0.0.1; about a minute under TCG). gonvmf serves an rbd namespace (its image made
# by create_size) next to a file namespace on the scratch disk; the host writes the rbd
# namespace with fio crc32c headers and reads it back, gonvmf restarts and the data is read
# back again from Ceph, and short 4 KiB random read and write runs on both namespaces give
# rbd/file ratios measured in one guest ($OUT/numbers.txt).
# vm: --timeout 1500 --disk 1G
GONVMF_BIN=${GONVMF_BUILD:?}/bin/gonvmf-ceph # guest-lib's gonvmf_start runs it
. "$SRC/integration/vm/guest-lib.sh"

GONVMF=$GONVMF_BIN
NQN=nqn.2024-01.io.gonvmf:rbd
PORT=4420
CFG=$SCRATCH/gonvmf-rbd.yaml
export GONVMF_CEPH_DIR=/tmp/ceph GONVMF_CEPH_STORE=memstore GONVMF_CEPH_MGR=0 GONVMF_CEPH_TIMEOUT=600
CLUSTER=$SRC/integration/ceph/cluster.sh

[ -x "$GONVMF" ] || {
	fail gonvmf-ceph-binary "no executable $GONVMF (integration/run-tests.sh builds it for suites named *rbd*)"
	finish
}
need_scratch

# ---- the cluster ----
log "starting a single-node Ceph cluster in $GONVMF_CEPH_DIR"
on_exit "$CLUSTER" stop
t0=$(date +%s)
if timeout -k 10 900 "$CLUSTER" start > "$OUT/ceph-env.txt" 2> "$OUT/ceph-start.log"; then
	pass ceph-start "up in $(($(date +%s) - t0)) s"
else
	fail ceph-start "$(tail -n 3 "$OUT/ceph-start.log" | tr '\n' ' ')"
	cp -r "$GONVMF_CEPH_DIR/log" "$OUT/ceph-log" 2> /dev/null
	finish
fi
. "$GONVMF_CEPH_DIR/env"

cat > "$CFG" << EOF
listeners:
  - address: $RXE_IP
    port: $PORT
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: rbd
        rbd:
          pool: $GONVMF_CEPH_POOL
          image: vol1
          ceph_conf: $CEPH_CONF
          user: $GONVMF_CEPH_USER
          keyring: $GONVMF_CEPH_KEYRING
          create_size: 256MiB
      - nsid: 2
        backend: file
        path: $SCRATCH/file.img
        size: 256MiB
EOF
cp "$CFG" "$OUT/gonvmf-rbd.yaml"
check gonvmf-check "$GONVMF" check -q --config "$CFG"

SERVE_N=0
# rbd_serve: gonvmf_start with this suite's configuration (log in $OUT/gonvmf-N.log).
rbd_serve() {
	SERVE_N=$((SERVE_N + 1))
	gonvmf_start "gonvmf-$SERVE_N" "$CFG" "$RXE_IP" "$PORT" || return 1
	sleep 1 # TCG: give the server a head start
}
# rbd_stop: SIGTERM; gonvmf must exit 0 after closing the image.
rbd_stop() { gonvmf_stop && grep -q "rbd image closed" "$GONVMF_LOG"; }
on_exit gonvmf_stop
on_exit nvme_disconnect_all

# connect: the Linux host connects; RBD_DEV and FILE_DEV are namespaces 1 and 2.
connect() {
	nvme_connect_new "$NQN" $PORT || return 1
	[ ${#NVME_NS_DEVS[@]} = 2 ] || nvme_ns_devs "$NQN"
	[ ${#NVME_NS_DEVS[@]} = 2 ] || {
		echo "the host shows ${#NVME_NS_DEVS[@]} namespaces of $NQN, want 2: ${NVME_NS_DEVS[*]}" >&2
		return 1
	}
	RBD_DEV=${NVME_NS_DEVS[0]} FILE_DEV=${NVME_NS_DEVS[1]}
}

fio_verify() { # <name> <dev> [--verify_only=1]
	local name=$1 dev=$2
	shift 2
	fio_verify_run "$name" 600 --filename="$dev" "$@" \
		--name=4k-qd16 --rw=randwrite --bs=4k --iodepth=16 --offset=0 --size=4M \
		--name=64k-qd8 --stonewall --rw=randwrite --bs=64k --iodepth=8 --offset=8M --size=16M \
		--name=1m-qd4 --stonewall --rw=write --bs=1M --iodepth=4 --offset=32M --size=32M
}

log "gonvmf serve: rbd image $GONVMF_CEPH_POOL/vol1 and a file on $RXE_IP:$PORT"
check gonvmf-start rbd_serve || finish
grep -q "rbd image created" "$GONVMF_LOG" && pass rbd-create "create_size made $GONVMF_CEPH_POOL/vol1" ||
	fail rbd-create "no 'rbd image created' in $GONVMF_LOG"
check nvme-connect connect || finish
log "rbd namespace: $RBD_DEV, file namespace: $FILE_DEV"
size=$(blockdev --getsize64 "$RBD_DEV")
[ "$size" = $((256 << 20)) ] && pass rbd-size "256 MiB, the image's size" || fail rbd-size "$size bytes, want 256 MiB"

check fio-verify-rbd fio_verify rbd "$RBD_DEV"

# The data lives in Ceph, not in gonvmf: restart gonvmf, reconnect, read it back.
check nvme-disconnect nvme_disconnect "$NQN"
check gonvmf-stop rbd_stop
check gonvmf-restart rbd_serve || finish
check nvme-reconnect connect || finish
check fio-verify-rbd-after-restart fio_verify rbd-again "$RBD_DEV" --verify_only=1

# ---- rbd next to a file namespace, in this guest ----
bench() { # <name> <dev> <rw>
	timeout -k 10 120 fio --output-format=json --output="$OUT/fio-bench-$1-$3.json" --filename="$2" \
		--ioengine=libaio --direct=1 --time_based --runtime=5 --ramp_time=1 --offset=0 --size=32M \
		--name="$1-$3" --rw="$3" --bs=4k --iodepth=16 > "$OUT/fio-bench-$1-$3.log" 2>&1 &&
		fio_summary "$OUT/fio-bench-$1-$3.json" >> "$OUT/numbers.txt"
}
check fio-prefill-file timeout -k 10 120 fio --name=prefill --filename="$FILE_DEV" --ioengine=libaio --direct=1 \
	--rw=write --bs=1M --iodepth=4 --offset=0 --size=32M --output="$OUT/fio-prefill-file.log"
for rw in randread randwrite; do
	check "fio-$rw-rbd" bench rbd "$RBD_DEV" $rw
	check "fio-$rw-file" bench file "$FILE_DEV" $rw
done
log "numbers (4 KiB, QD 16, 5 s, in this TCG guest):"
cat "$OUT/numbers.txt"
nvme_disconnect_all
check gonvmf-stop-final rbd_stop
finish
