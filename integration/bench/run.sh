#!/bin/bash
# run.sh: gonvmf against the Linux kernel target (nvmet-rdma) in one Soft-RoCE guest boot:
# the same fio matrix, backends and link for both, perftest as the link's ceiling, CPU per
# I/O, queue-pair scaling; then a Markdown report with ratios and a PNG plot.
#
#   integration/bench/run.sh [--quick] [--runtime S] [--reps N] [--out DIR] [options]
#
#   --quick            CI/development size: 3 s jobs, 1 s ramp, 1 repetition, QD sweep 1 8 32 128,
#                      scaling 1 and 8 QPs, short perftest, 256 MiB file (~10 min on a busy machine)
#   --runtime S        fio runtime per job (default 8; quick 3)
#   --ramp S           fio ramp time per job (default 2; quick 1)
#   --reps N           repetitions, the two targets alternated (default 3; quick 1)
#   --out DIR          results (default $GONVMF_BUILD/bench/<time>; $GONVMF_BUILD/bench/latest
#                      points at the newest)
#   --qds "LIST"       4k randread queue-depth sweep (default "1 2 4 8 16 32 64 128")
#   --backends "LIST"  null file (default both)
#   --targets "LIST"   kernel gonvmf (default both)
#   --scale "LIST"     queue-pair counts of the scaling test (default "1 8 32"; "" skips it)
#   --scale-reps N     how many repetitions run the scaling test (default 1)
#   --perftest S       perftest's measured time per bandwidth test (default 3; 0 skips it)
#   --file-mb N        size of the backing file on the guest's ext4 disk (default 1024)
#   --mem MiB          guest memory (default 4096)
#   --no-build         use the gonvmf binary already in $GONVMF_BUILD/bin
#   --report-only DIR  only regenerate DIR/report.md and the plots from DIR/raw
#
# Environment: GONVMF_BUILD (default <repo>/build), GONVMF_VM_DIR (vm.sh's cache),
# GONVMF_VM_KERNEL (the guest kernel, as vm.sh's --kernel: e.g. 6.12; default Debian 12's),
# GONVMF_BENCH_TRANSPORT (a YAML flow mapping for gonvmf's transport section, e.g.
# '{busy_poll: true}'; default: gonvmf's defaults).
#
# Exit status: 0 when the guest run finished and the report was written; 1 when the report
# was written from partial results (the guest failed or timed out; see raw/guest.log);
# 2 for a usage error; 3 when no report could be written.
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$BENCH/../.." && pwd)
export GONVMF_BUILD=${GONVMF_BUILD:-$SRC/build}
VM=$SRC/integration/vm/vm.sh

# Everything is in main, which bash parses whole before running: editing this file while a
# benchmark runs cannot change the running one.
main() {
	usage() {
		echo "run.sh: $*" >&2
		echo "usage: integration/bench/run.sh [--quick] [--runtime S] [--ramp S] [--reps N] [--out DIR] [--qds LIST] [--backends LIST] [--targets LIST] [--scale LIST] [--scale-reps N] [--perftest S] [--file-mb N] [--mem MiB] [--no-build] | --report-only DIR  (see --help)" >&2
		exit 2
	}
	say() { echo "bench: $*"; }

	quick=0 build=1 report_only= out= mem=4096
	runtime= ramp= reps= qds= backends= targets= scale= scale_set=0 scale_reps=1 perftest= file_mb=
	while [ $# -gt 0 ]; do
		case $1 in
		--quick) quick=1; shift ;;
		--runtime) runtime=${2:?--runtime needs seconds}; shift 2 ;;
		--ramp) ramp=${2:?--ramp needs seconds}; shift 2 ;;
		--reps) reps=${2:?--reps needs a count}; shift 2 ;;
		--out) out=${2:?--out needs a directory}; shift 2 ;;
		--qds) qds=${2:?--qds needs a list}; shift 2 ;;
		--backends) backends=${2:?--backends needs a list}; shift 2 ;;
		--targets) targets=${2:?--targets needs a list}; shift 2 ;;
		--scale) [ $# -ge 2 ] || usage "--scale needs a list"; scale=$2; scale_set=1; shift 2 ;;
		--scale-reps) scale_reps=${2:?--scale-reps needs a count}; shift 2 ;;
		--perftest) perftest=${2:?--perftest needs seconds}; shift 2 ;;
		--file-mb) file_mb=${2:?--file-mb needs MiB}; shift 2 ;;
		--mem) mem=${2:?--mem needs MiB}; shift 2 ;;
		--no-build) build=0; shift ;;
		--report-only) report_only=${2:?--report-only needs a results directory}; shift 2 ;;
		-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
		*) usage "unknown argument '$1'" ;;
		esac
	done

	report() { # <dir>: report.md and the plots; 0 if written
		python3 "$BENCH/report.py" "$1"
	}

	if [ -n "$report_only" ]; then
		[ -d "$report_only/raw" ] || usage "$report_only has no raw/ results directory"
		report "$report_only" || exit 3
		exit 0
	fi

	if [ $quick = 1 ]; then
		: "${runtime:=3}" "${ramp:=1}" "${reps:=1}" "${qds:=1 8 32 128}" "${perftest:=3}" "${file_mb:=256}"
		[ $scale_set = 1 ] || scale="1 8"
	else
		: "${runtime:=8}" "${ramp:=2}" "${reps:=3}" "${qds:=1 2 4 8 16 32 64 128}" "${perftest:=3}" "${file_mb:=1024}"
		[ $scale_set = 1 ] || scale="1 8 32"
	fi
	: "${backends:=null file}" "${targets:=kernel gonvmf}"
	for v in runtime ramp reps scale_reps perftest file_mb mem; do
		[[ ${!v} =~ ^[0-9]+$ ]] || usage "--${v//_/-} must be a whole number, got '${!v}'"
	done
	[ "$runtime" -ge 2 ] || usage "--runtime must be at least 2 s (the CPU sample window is runtime - 0.8 s)"
	[ "$reps" -ge 1 ] || usage "--reps must be at least 1"
	for q in $qds $scale; do [[ $q =~ ^[0-9]+$ ]] && [ "$q" -ge 1 ] || usage "queue depths and QP counts must be positive numbers, got '$q'"; done
	for b in $backends; do case $b in null | file) ;; *) usage "unknown backend '$b' (null, file)" ;; esac; done
	for t in $targets; do case $t in kernel | gonvmf) ;; *) usage "unknown target '$t' (kernel, gonvmf)" ;; esac; done

	if [ -z "$out" ]; then
		out=$GONVMF_BUILD/bench/$(date +%Y%m%d-%H%M%S)$([ $quick = 1 ] && echo -quick)
	fi
	case $out in /tmp/*) usage "--out must not be under /tmp: the guest mounts a fresh tmpfs there" ;; esac
	mkdir -p "$out/raw/host" || usage "cannot create $out"
	out=$(cd "$out" && pwd)
	raw=$out/raw
	ln -sfn "$out" "$GONVMF_BUILD/bench/latest" 2> /dev/null || true
	t_start=$(date +%s)

	# ---- what the run is made of, and how long it may take ----
	njobs=$(for q in 1 32 $qds; do echo "randread-$q"; done | sort -u | wc -l)
	njobs=$((njobs + 5)) # randwrite 4k QD32, read and write 128k QD16, both again on vCPU 0 (the guest has 2)
	nb=$(wc -w <<< "$backends")
	nt=$(wc -w <<< "$targets")
	nconn=0
	for n in $scale; do nconn=$((nconn + (n + 1) / 2)); done
	# seconds, on an idle machine: boot and file, then per repetition the fio jobs (about 4 s of
	# fio start-up each under TCG), connects, perftest (4 tests), then the scaling test
	local srep=$((scale_reps < reps ? scale_reps : reps))
	est=$((90 + file_mb / 40 + reps * (nb * nt * (njobs * (runtime + ramp + 4) + 20) + (perftest > 0 ? 4 * (perftest + 9) : 0)) + srep * nt * (nconn * 3 + 10 * $(wc -w <<< "$scale"))))
	timeout=$((est * 2 + 300))
	say "plan: $reps rep(s) x backends [$backends] x targets [$targets] x $njobs fio jobs of ${runtime}+${ramp} s; QD sweep [$qds]; scaling [$scale] x $srep; perftest ${perftest} s"
	say "estimated guest time ~$((est / 60)) min (limit $((timeout / 60)) min); results in $out"

	# ---- host facts ----
	{
		echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "git_commit: $(git -C "$SRC" rev-parse HEAD 2> /dev/null || echo unknown)"
		echo "git_describe: $(git -C "$SRC" describe --always --dirty 2> /dev/null || echo unknown)"
		echo "git_dirty_files: $(git -C "$SRC" status --porcelain 2> /dev/null | wc -l)"
		echo "host_kernel: $(uname -r)"
		echo "host_cpu: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
		echo "host_cpus: $(nproc)"
		echo "host_load_start: $(cut -d' ' -f1-3 /proc/loadavg)"
		echo "qemu: $(qemu-system-x86_64 --version 2> /dev/null | head -n 1)"
		echo "go: $(go version 2> /dev/null || echo none)"
		echo "gnuplot: $(gnuplot --version 2> /dev/null || echo none)"
		echo "command: integration/bench/run.sh $([ $quick = 1 ] && echo --quick) --runtime $runtime --ramp $ramp --reps $reps --qds '$qds' --backends '$backends' --targets '$targets' --scale '$scale' --scale-reps $scale_reps --perftest $perftest --file-mb $file_mb"
	} > "$raw/host/machine.txt"

	# ---- gonvmf ----
	# GONVMF_BENCH_BIN empty: no usable binary (the guest reports why, from raw/host/build.txt).
	# A failed build does not delete $GONVMF_BUILD/bin/gonvmf: others may be using it.
	: > "$raw/host/build.txt"
	export GONVMF_BENCH_BIN=
	if [[ " $targets " == *" gonvmf "* ]]; then
		command -v go > /dev/null || PATH=$PATH:/usr/local/go/bin
		if [ $build = 0 ]; then
			echo "not built (--no-build); using $GONVMF_BUILD/bin/gonvmf" >> "$raw/host/build.txt"
			GONVMF_BENCH_BIN=$GONVMF_BUILD/bin/gonvmf
		elif ! ls "$SRC"/cmd/gonvmf/*.go > /dev/null 2>&1; then
			echo "cmd/gonvmf has no Go files yet: nothing to build" >> "$raw/host/build.txt"
		else
			say "go build -o $GONVMF_BUILD/bin/gonvmf ./cmd/gonvmf"
			if (cd "$SRC" && go build -o "$GONVMF_BUILD/bin/gonvmf" ./cmd/gonvmf) > "$raw/host/build.log" 2>&1; then
				echo "built $GONVMF_BUILD/bin/gonvmf from $(git -C "$SRC" describe --always --dirty 2> /dev/null)" >> "$raw/host/build.txt"
				GONVMF_BENCH_BIN=$GONVMF_BUILD/bin/gonvmf
			else
				say "building gonvmf failed (the bench goes on with the kernel target only):"
				sed 's/^/    /' "$raw/host/build.log" | tail -n 15
				echo "go build ./cmd/gonvmf failed: $(grep -v '^#' "$raw/host/build.log" | head -n 1 | xargs)" >> "$raw/host/build.txt"
			fi
		fi
	fi

	# ---- the guest ----
	export GONVMF_BENCH_RUNTIME=$runtime GONVMF_BENCH_RAMP=$ramp GONVMF_BENCH_REPS=$reps
	export GONVMF_BENCH_QDS=$qds GONVMF_BENCH_BACKENDS=$backends GONVMF_BENCH_TARGETS=$targets
	export GONVMF_BENCH_SCALE=$scale GONVMF_BENCH_SCALE_REPS=$scale_reps GONVMF_BENCH_PERFTEST=$perftest GONVMF_BENCH_FILE_MB=$file_mb
	export GONVMF_BENCH_TRANSPORT=${GONVMF_BENCH_TRANSPORT:-}
	disk=()
	[[ " $backends " == *" file "* ]] && disk=(--disk "$((file_mb + 512))M")
	vm_rc=0
	# The guest runs a copy: bash reads scripts as it goes, so an edit of guest-bench.sh during
	# a run would otherwise change the run; the copy also records what produced the results.
	cp "$BENCH/guest-bench.sh" "$raw/host/guest-bench.sh"
	"$VM" run --quiet --out "$raw" --timeout "$timeout" --mem "$mem" "${disk[@]}" "$raw/host/guest-bench.sh" || vm_rc=$?
	echo "host_load_end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw/host/machine.txt"
	echo "wall_seconds: $(($(date +%s) - t_start))" >> "$raw/host/machine.txt"
	echo "vm_exit: $vm_rc" >> "$raw/host/machine.txt"
	[ $vm_rc = 0 ] || say "the guest run ended with status $vm_rc (see $raw/guest.log); reporting what it measured"

	# ---- the report ----
	if ! report "$out"; then
		say "no report: see the messages above"
		exit 3
	fi
	say "done in $(($(date +%s) - t_start)) s: $out/report.md"
	[ $vm_rc = 0 ] || exit 1
	exit 0
}

main "$@"
