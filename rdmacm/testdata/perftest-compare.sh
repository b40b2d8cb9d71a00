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
# reads 0 under TCG). Two ratios rdmacm / perftest: of the message rates the tools report (= of
# the bandwidths, the sizes being equal), and of the packet rates the device's sent_pkts
# counter shows while each runs (over the sampling intervals with traffic), which does not
# depend on either tool's clock arithmetic. 1.0 means no overhead.

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

# The device's own packet counter gives a rate independent of either tool's arithmetic
# (perftest derives its figures from TSC cycles, which TCG does not keep steady).
CNT=/sys/class/infiniband/$DEV/ports/1/hw_counters/sent_pkts
[ -r "$CNT" ] || die "no packet counter $CNT"
SAMPLES=/tmp/perftest-compare.samples
# sample_start / sample_stop: sample the counter about every 0.25 s while a tool runs (with
# bash builtins only: forking is slow under TCG); sample_stop prints the packet rate over the
# intervals with traffic, leaving out the first and the last (ramp up and down).
FIFO=/tmp/perftest-compare.fifo
sample_start() {
	[ -p "$FIFO" ] || mkfifo "$FIFO"
	(
		exec 9<> "$FIFO" # never written: read -t on it is a sleep without a fork
		while :; do
			read -r v < "$CNT"
			echo "$EPOCHREALTIME $v"
			read -r -t 0.25 -u 9 || :
		done
	) > "$SAMPLES" &
	SAMPLER=$!
}
sample_stop() {
	kill "$SAMPLER" 2> /dev/null
	wait "$SAMPLER" 2> /dev/null
	awk 'NR > 1 && $2 > c && $1 > t { n++; dc[n] = $2 - c; dt[n] = $1 - t } { t = $1; c = $2 }
		END {
			a = 1; b = n
			if (n >= 3) { a = 2; b = n - 1 }
			for (i = a; i <= b; i++) { sc += dc[i]; st += dt[i] }
			if (st > 0) printf "%.1f\n", sc / st; else print 0
		}' "$SAMPLES"
}

# perftest <op> <size>: prints "Gb/s Mpps pkts/s": perftest's BW average and message rate, and
# the device's packet rate meanwhile. Tries twice: under TCG on a busy host the server may not
# be listening yet after the head start.
perftest() {
	local tool=ib_$1_bw out try srv pps
	for try in 1 2; do
		timeout $((DUR + 60)) $tool -d "$DEV" -F --report_gbits -R -s "$2" -D "$DUR" > /tmp/perftest-server.log 2>&1 &
		srv=$!
		sleep $((HEADSTART * try)) # TCG: the server needs a head start
		sample_start
		out=$(timeout $((DUR + 60)) $tool -d "$DEV" -F --report_gbits -R -s "$2" -D "$DUR" "$RXE_IP" 2>&1)
		pps=$(sample_stop)
		kill $srv 2> /dev/null
		wait $srv
		# (a 0 rate happens under TCG now and then: count it as a failed try)
		echo "$out" | awk -v s="$2" -v pps="$pps" '$1 == s && NF >= 5 && $5 > 0 && pps > 0 { print $4, $5, pps; found = 1 }
			END { if (!found) exit 1 }' && return 0
		echo "perftest-compare: $tool -s $2, try $try (packet rate $pps/s): $(echo "$out" | tail -3 | tr '\n' ' ')" >&2
	done
	return 1
}

# gobench <op> <size>: prints "Gb/s Mpps pkts/s" of BenchmarkRDMA<Op>/<size>.
gobench() {
	local name sub out pps
	name=BenchmarkRDMA${1^}
	sub=$(($2 / 1024))KiB
	sample_start
	out=$(cd "$(dirname "$0")/.." 2> /dev/null; "$BIN" -test.run '^$' -test.bench "^$name\$/^$sub\$" \
		-test.benchtime "${DUR}s" -test.timeout 10m 2>&1)
	pps=$(sample_stop)
	echo "$out" | awk -v pps="$pps" '/^Benchmark.*MB\/s/ && pps > 0 {
		for (i = 1; i < NF; i++) { if ($(i+1) == "MB/s") mb = $i; if ($(i+1) == "msgs/s") m = $i }
		printf "%.4f %.6f %s\n", mb * 8 / 1000, m / 1e6, pps; found = 1 } END { if (!found) exit 1 }' ||
		{ echo "$out" | tail -5 >&2; return 1; }
}

printf 'round\top\tsize\tperftest_Gbps\trdmacm_Gbps\tratio\tperftest_Mpps\trdmacm_Mpps\tperftest_pps\trdmacm_pps\tratio_pps\n' > "$TSV"
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
				p= g=
				continue
			fi
			read -r pg pm pp <<< "$p"
			read -r gg gm gp <<< "$g"
			# perftest prints Gb/s with two decimals only: the tools' ratio is of the
			# message rates (same message size, so the same as of bandwidths).
			ratio=$(awk -v a="$gm" -v b="$pm" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }')
			rpps=$(awk -v a="$gp" -v b="$pp" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }')
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$op" "$sz" "$pg" "$gg" "$ratio" "$pm" "$gm" \
				"$pp" "$gp" "$rpps" | tee -a "$TSV"
			p= g=
		done
	done
done
echo
column -t -s $'\t' "$TSV"
echo
# Median over the rounds, per op and size.
echo "medians: op size perftest_Gbps rdmacm_Gbps ratio(tools) perftest_pps rdmacm_pps ratio(packets) rounds"
for op in $OPS; do
	for sz in $SIZES; do
		awk -F'\t' -v op="$op" -v sz="$sz" '
			function median(a, n,   i, j, t) {
				for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
				return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
			}
			$2 == op && $3 == sz { n++; p[n] = $4; g[n] = $5; r[n] = $6; pp[n] = $9; gp[n] = $10; rp[n] = $11 }
			END { if (n) printf "%s %s %.4f %.4f %.2f %.0f %.0f %.2f %d\n", op, sz, median(p, n), median(g, n), median(r, n),
				median(pp, n), median(gp, n), median(rp, n), n }' "$TSV"
	done
done | tee "$OUTDIR/perftest-compare-summary.txt"
# Fail when an op and size got no measurement at all (single failed rounds happen under TCG).
for op in $OPS; do
	for sz in $SIZES; do
		awk -F'\t' -v op="$op" -v sz="$sz" '$2 == op && $3 == sz { n++ } END { exit !n }' "$TSV" ||
			{ echo "perftest-compare: no measurement of $op $sz" >&2; failed=1; }
	done
done
exit $failed
}
