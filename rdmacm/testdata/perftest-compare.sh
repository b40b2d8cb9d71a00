#!/bin/bash
# perftest-compare.sh: throughput of package rdmacm (BenchmarkRDMA{Send,Write,Read}) as a ratio
# to perftest (ib_send_bw, ib_write_bw, ib_read_bw) over the same Soft-RoCE device, in the
# same guest, alternating the two so that a busy host affects both alike.
#
#   perftest-compare.sh [TESTBIN]
#
# TESTBIN: the rdmacm test binary (go test -c ./rdmacm); default $GONVMF_BUILD/tests/rdmacm.test.
# Runs inside the VM (integration/vm/vm.sh run, which brings up rxe0 and exports RXE_IP and
# RXE_DEV). Outside the harness it sets up rxe0 on a dummy netdev itself (needs root and the
# rdma_rxe module). Environment: DUR or GONVMF_PERF_DUR (seconds per measurement, default 5),
# REPS or GONVMF_PERF_REPS (rounds, default 3; the summary gives the median ratio of each
# op/size), SIZES (bytes, default "4096 65536"), OPS (default "send write read"), OUT (where
# perftest-compare.tsv goes, default the current directory).
#
# Both sides use the same queue depths (128 outstanding sends, 512 posted receives, reads up to
# the device's initiator depth) and busy-poll; perftest's figure is "BW average" (its "BW peak"
# reads 0 under TCG). The ratio is rdmacm / perftest of the message rates (= of the bandwidths,
# the sizes being equal): 1.0 means no overhead.

# One { } block, parsed before it runs: editing this file cannot disturb a running copy.
{
set -uo pipefail

BIN=${1:-${GONVMF_BUILD:-}/tests/rdmacm.test}
DUR=${DUR:-${GONVMF_PERF_DUR:-5}}
REPS=${REPS:-${GONVMF_PERF_REPS:-3}}
HEADSTART=${HEADSTART:-3} # seconds between starting a perftest server and its client
SIZES=${SIZES:-4096 65536}
OPS=${OPS:-send write read}
OUTDIR=${OUT:-.}
TSV=$OUTDIR/perftest-compare.tsv

die() { echo "perftest-compare: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "no test binary at '$BIN' (build it with: go test -c -o BIN ./rdmacm)"
for t in ib_send_bw ib_write_bw ib_read_bw; do command -v $t > /dev/null || die "$t not found (Debian: perftest)"; done

if [ -z "${RXE_IP:-}" ]; then
	# Not under the harness: bring up rxe0 on dummy0 ourselves.
	RXE_IP=10.99.0.1 RXE_DEV=rxe0
	modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm || die "cannot load rdma_rxe/ib_uverbs/rdma_ucm"
	if ! ip link show dummy0 > /dev/null 2>&1; then
		modprobe dummy numdummies=0
		ip link add dummy0 type dummy && ip link set dummy0 mtu "${MTU:-9000}" up &&
			ip addr add $RXE_IP/24 dev dummy0 || die "cannot set up dummy0"
	fi
	rdma link show rxe0 > /dev/null 2>&1 || rdma link add rxe0 type rxe netdev dummy0 || die "cannot add rxe0"
	for _ in $(seq 50); do ibv_devinfo -d rxe0 2> /dev/null | grep -q PORT_ACTIVE && break; sleep 0.1; done
fi
DEV=${RXE_DEV:-rxe0}
echo "perftest-compare: device $DEV, address $RXE_IP, $DUR s per measurement, active_mtu $(ibv_devinfo -d "$DEV" | awk '/active_mtu/{print $2}')"

# perftest <op> <size>: prints "Gb/s Mpps" (BW average, message rate) of the client. Tries
# twice: under TCG on a busy host the server may not be listening yet after the head start.
perftest() {
	local tool=ib_$1_bw out try srv
	for try in 1 2; do
		timeout $((DUR + 60)) $tool -d "$DEV" -F --report_gbits -R -s "$2" -D "$DUR" > /tmp/perftest-server.log 2>&1 &
		srv=$!
		sleep $((HEADSTART * try)) # TCG: the server needs a head start
		out=$(timeout $((DUR + 60)) $tool -d "$DEV" -F --report_gbits -R -s "$2" -D "$DUR" "$RXE_IP" 2>&1)
		kill $srv 2> /dev/null
		wait $srv
		# (a 0 rate happens under TCG now and then: count it as a failed try)
		echo "$out" | awk -v s="$2" '$1 == s && NF >= 5 && $5 > 0 { print $4, $5; found = 1 } END { if (!found) exit 1 }' && return 0
		echo "perftest-compare: $tool -s $2, try $try: $(echo "$out" | tail -3 | tr '\n' ' ')" >&2
	done
	return 1
}

# gobench <op> <size>: prints "Gb/s Mpps" of BenchmarkRDMA<Op>/<size>.
gobench() {
	local name sub out
	name=BenchmarkRDMA${1^}
	sub=$(($2 / 1024))KiB
	out=$(cd "$(dirname "$0")/.." 2> /dev/null; "$BIN" -test.run '^$' -test.bench "^$name\$/^$sub\$" \
		-test.benchtime "${DUR}s" -test.timeout 10m 2>&1)
	echo "$out" | awk '/^Benchmark.*MB\/s/ {
		for (i = 1; i < NF; i++) { if ($(i+1) == "MB/s") mb = $i; if ($(i+1) == "msgs/s") m = $i }
		printf "%.4f %.6f\n", mb * 8 / 1000, m / 1e6; found = 1 } END { if (!found) exit 1 }' ||
		{ echo "$out" | tail -5 >&2; return 1; }
}

printf 'round\top\tsize\tperftest_Gbps\trdmacm_Gbps\tratio\tperftest_Mpps\trdmacm_Mpps\n' > "$TSV"
failed=0
for round in $(seq "$REPS"); do
	for op in $OPS; do
		for sz in $SIZES; do
			# Alternate which goes first, so a trend in the host's load hits both alike.
			if [ $((round % 2)) = 1 ]; then
				p=$(perftest "$op" "$sz") && g=$(gobench "$op" "$sz")
			else
				g=$(gobench "$op" "$sz") && p=$(perftest "$op" "$sz")
			fi
			if [ -z "${p:-}" ] || [ -z "${g:-}" ]; then
				echo "perftest-compare: round $round $op $sz: a measurement failed" >&2
				failed=1
				p= g=
				continue
			fi
			read -r pg pm <<< "$p"
			read -r gg gm <<< "$g"
			# perftest prints Gb/s with two decimals only: take the ratio of the
			# message rates (same message size, so the same as of bandwidths).
			ratio=$(awk -v a="$gm" -v b="$pm" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }')
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$op" "$sz" "$pg" "$gg" "$ratio" "$pm" "$gm" | tee -a "$TSV"
			p= g=
		done
	done
done
echo
column -t -s $'\t' "$TSV"
echo
# Median over the rounds, per op and size.
echo "op size perftest_Gbps(median) rdmacm_Gbps(median) ratio(median of rounds) rounds"
for op in $OPS; do
	for sz in $SIZES; do
		awk -F'\t' -v op="$op" -v sz="$sz" '
			function median(a, n,   i, j, t) {
				for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
				return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
			}
			$2 == op && $3 == sz { n++; p[n] = $4; g[n] = $5; r[n] = $6 }
			END { if (n) printf "%s %s %.4f %.4f %.2f %d\n", op, sz, median(p, n), median(g, n), median(r, n), n }' "$TSV"
	done
done | tee "$OUTDIR/perftest-compare-summary.txt"
exit $failed
}
