#!/bin/bash
# demo.sh: gonvmf's main job in one command. It builds gonvmf, boots the Soft-RoCE qemu guest
# with a scratch disk, starts `gonvmf serve` with a file-backed namespace on that disk,
# connects the Linux host with `nvme connect -t rdma`, runs a short fio (128k sequential writes,
# then 4k random reads at queue depth 32), prints IOPS, bandwidth and latency, disconnects and
# stops gonvmf.
#
#   integration/demo.sh [--runtime S]      (make demo)
#
#   --runtime S   seconds per fio job (default 10)
#
# Exit status 0 when everything worked; non-zero (with the reason) otherwise. Needs the VM
# harness's host packages (integration/vm/setup-host.sh). Takes about a minute on an idle
# machine. The guest's logs stay in $GONVMF_VM_DIR/out/<time>-demo (printed at the end).
set -uo pipefail

# ---------------- guest side (run by vm.sh inside the guest) ----------------
guest() {
	. "$SRC/integration/vm/guest-lib.sh"
	local runtime=$1
	local nqn=nqn.2024-01.io.gonvmf:demo cfg=$SCRATCH/demo.yaml
	say() { echo "demo: $*"; }

	cat > "$cfg" << EOF
listeners:
  - address: $RXE_IP
    port: 4420
subsystems:
  - nqn: $nqn
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: file
        path: $SCRATCH/demo.img
        size: 1GiB
EOF
	cp "$cfg" "$OUT/demo.yaml"
	say "gonvmf serve --config demo.yaml (file namespace $SCRATCH/demo.img, 1 GiB, on rdma $RXE_IP:4420)"
	on_exit gonvmf_stop
	if ! gonvmf_start gonvmf "$cfg" 2> /dev/null || ! wait_for 10 grep -q "serving 1 subsystem on rdma" "$OUT/gonvmf.log"; then
		say "FAILED: gonvmf did not start: ${GONVMF_ERR:-$(tail -n 2 "$OUT/gonvmf.log")}"
		return 1
	fi
	grep -o 'msg="serving[^"]*"' "$OUT/gonvmf.log" | sed 's/^msg="/demo: gonvmf: /; s/"$//'
	sleep 1

	say "nvme connect -t rdma -a $RXE_IP -s 4420 -n $nqn"
	local ns
	if ! ns=$(nvme_connect "$nqn"); then
		say "FAILED: nvme connect: $(dmesg | tail -n 2 | tr '\n' ' ')"
		return 1
	fi
	on_exit nvme_disconnect_all
	ns=$(head -n 1 <<< "$ns")
	say "connected: $ns ($(nvme list 2> /dev/null | awk -v d="$ns" '$1 == d { print "model " $4 ", serial " $3 }'))"

	say "fio: 128k sequential write QD16 for ${runtime} s, then 4k random read QD32 for ${runtime} s"
	if ! timeout -k 10 $((4 * runtime + 120)) fio --filename="$ns" --ioengine=libaio --direct=1 \
		--time_based --runtime="$runtime" --ramp_time=1 --lat_percentiles=1 --size=512M \
		--output-format=json --output="$OUT/fio.json" \
		--name=write-128k-qd16 --rw=write --bs=128k --iodepth=16 \
		--name=randread-4k-qd32 --stonewall --rw=randread --bs=4k --iodepth=32 --norandommap --randrepeat=0 \
		> "$OUT/fio.log" 2>&1; then
		say "FAILED: fio: $(tail -n 3 "$OUT/fio.log" | tr '\n' ' ')"
		return 1
	fi
	python3 - "$OUT/fio.json" << 'PY' | sed 's/^/demo: /'
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
print("%-18s %10s %10s %12s %12s" % ("job", "IOPS", "MiB/s", "lat p50 us", "lat p99 us"))
for j in jobs:
    for d in ("write", "read"):
        s = j[d]
        if not s["io_bytes"]:
            continue
        p = (s.get("lat_ns") or {}).get("percentile") or s["clat_ns"].get("percentile", {})
        us = lambda k: "%.0f" % (p[k] / 1000) if k in p else "-"
        print("%-18s %10.0f %10.1f %12s %12s" % (j["jobname"], s["iops"], s["bw_bytes"] / 1048576, us("50.000000"), us("99.000000")))
    if j["error"]:
        sys.exit("fio job %s: error %d" % (j["jobname"], j["error"]))
PY
	say "nvme disconnect"
	nvme_disconnect_all || return 1
	gonvmf_stop 30 2> /dev/null
	local rc=$?
	if [ $rc != 0 ]; then
		say "FAILED: gonvmf exited $rc after SIGTERM"
		return 1
	fi
	say "gonvmf stopped (exit 0)"
	say "OK"
}

if [ "${1:-}" = --guest ]; then
	shift
	guest "${1:-10}"
	exit
fi

# ---------------- host side ----------------
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GONVMF_BUILD=${GONVMF_BUILD:-$SRC/build}
runtime=10
while [ $# -gt 0 ]; do
	case $1 in
	--runtime)
		runtime=${2:?--runtime needs seconds}
		shift 2
		;;
	-h | --help)
		sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "demo.sh: unknown argument '$1' (see --help)" >&2
		exit 2
		;;
	esac
done
[[ $runtime =~ ^[1-9][0-9]*$ ]] || {
	echo "demo.sh: --runtime must be a positive number of seconds" >&2
	exit 2
}
case $GONVMF_BUILD in /tmp/*)
	echo "demo.sh: GONVMF_BUILD=$GONVMF_BUILD is under /tmp, which the guest cannot see" >&2
	exit 2
	;;
esac
command -v go > /dev/null || PATH=$PATH:/usr/local/go/bin
start=$(date +%s)
echo "demo: building gonvmf -> $GONVMF_BUILD/bin/gonvmf"
(cd "$SRC" && go build -o "$GONVMF_BUILD/bin/gonvmf" ./cmd/gonvmf) || {
	echo "demo: FAILED: go build ./cmd/gonvmf" >&2
	exit 1
}
vmdir=${GONVMF_VM_DIR:-$HOME/.cache/gonvmf-vm}
out=$vmdir/out/$(date +%Y%m%d-%H%M%S)-demo
mkdir -p "$out"
echo "demo: booting the Soft-RoCE guest (qemu, TCG: everything runs ~50x slower than native)"
"$SRC/integration/vm/vm.sh" run --quiet --disk 2G --timeout $((4 * runtime + 300)) --out "$out" \
	"$SRC/integration/demo.sh" --guest "$runtime" > "$out/vm.log" 2>&1 &
vm=$!
# Follow the guest's progress lines while it runs (tail stops when vm.sh exits).
tail -n +1 -F --pid=$vm "$out/guest.log" 2> /dev/null | grep --line-buffered '^demo: '
wait $vm
rc=$?
if [ $rc = 0 ] && grep -q '^demo: OK$' "$out/guest.log"; then
	echo "demo: done in $(($(date +%s) - start)) s (TCG guest: compare numbers only within one guest). Logs: $out"
	exit 0
fi
echo "demo: FAILED (vm.sh exit $rc): $(tail -n 1 "$out/vm.log")" >&2
echo "demo: logs in $out (guest.log, gonvmf.log, fio.log, console.log)" >&2
exit 1
