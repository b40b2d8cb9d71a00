#!/bin/bash
# guest-bench.sh: the guest half of integration/bench/run.sh. Runs in ONE guest boot (vm.sh run)
# and measures the Linux kernel target (nvmet-rdma, configured through configfs) and gonvmf
# (`gonvmf serve --config FILE`) over the same Soft-RoCE link, with the same fio jobs, the same
# backend kinds and the same Linux host, alternating the two targets. It writes raw results
# only; the host turns them into the report (report.py). The host-side helpers (connecting,
# finding controllers and namespaces, starting and stopping gonvmf) are guest-lib.sh's.
#
# Settings come from the environment (run.sh sets them; vm.sh passes GONVMF_* into the guest):
#   GONVMF_BENCH_RUNTIME   fio time_based runtime per job, seconds (8)
#   GONVMF_BENCH_RAMP      fio ramp_time per job, seconds (2)
#   GONVMF_BENCH_REPS      repetitions; the target order flips every repetition (3)
#   GONVMF_BENCH_QDS       queue depths of the 4k randread sweep ("1 2 4 8 16 32 64 128")
#   GONVMF_BENCH_BACKENDS  "null file" (null: null_blk vs gonvmf's null backend; file: the same
#                          file on the ext4 scratch disk for both)
#   GONVMF_BENCH_TARGETS   "kernel gonvmf"
#   GONVMF_BENCH_SCALE     queue-pair counts of the scaling test ("1 8 32"; "" skips it)
#   GONVMF_BENCH_SCALE_REPS how many of the repetitions run the scaling test (1)
#   GONVMF_BENCH_PERFTEST  perftest's measured time per bandwidth test, seconds (3; 0 skips perftest)
#   GONVMF_BENCH_FILE_MB   size of the backing file (1024)
#   GONVMF_BENCH_BIN       the gonvmf binary ($GONVMF_BUILD/bin/gonvmf; empty: none, see
#                          $OUT/host/build.txt for why)
#   GONVMF_BENCH_TRANSPORT optional YAML flow mapping for gonvmf's transport section,
#                          e.g. "{busy_poll: true, poll_groups: 1}" (default: gonvmf's defaults)
#
# Raw results under $OUT (see integration/bench/README.md, "Raw results"):
#   params.env meta/ fio/ cpu/ perftest/ gonvmf/
#   runs.tsv sessions.tsv scaling.tsv gonvmf-status.txt
. "$SRC/integration/vm/guest-lib.sh"

RUNTIME=${GONVMF_BENCH_RUNTIME:-8}
RAMP=${GONVMF_BENCH_RAMP:-2}
REPS=${GONVMF_BENCH_REPS:-3}
QDS=${GONVMF_BENCH_QDS-1 2 4 8 16 32 64 128}
BACKENDS=${GONVMF_BENCH_BACKENDS:-null file}
TARGETS=${GONVMF_BENCH_TARGETS:-kernel gonvmf}
SCALE_QPS=${GONVMF_BENCH_SCALE-1 8 32}
SCALE_REPS=${GONVMF_BENCH_SCALE_REPS:-1}
PERF_DUR=${GONVMF_BENCH_PERFTEST:-3}
FILE_MB=${GONVMF_BENCH_FILE_MB:-1024}
GONVMF=${GONVMF_BENCH_BIN-$GONVMF_BUILD/bin/gonvmf}
GONVMF_BIN=$GONVMF # what guest-lib's gonvmf_start runs
GONVMF_TRANSPORT=${GONVMF_BENCH_TRANSPORT:-}
PORT=4420
NULL_GB=16
NCPU=$(nproc)
HZ=$(getconf CLK_TCK)
NQN_PREFIX=nqn.2024-01.io.gonvmf.bench
FILE=${SCRATCH:-/scratch}/gonvmf-bench.img

# The fio matrix (rw:bs:qd[:cpuN]): the named jobs, the 128k jobs again with fio's thread
# on vCPU 0 only, then the 4k randread queue-depth sweep. The Linux host gives each CPU its
# own I/O queue, so a job's I/O goes to the queue pair of the vCPU fio runs on; the
# unpinned 128k jobs measure how often fio moves between vCPUs (which depends on where each
# target's work runs) as much as the targets, and the pinned ones measure one queue pair.
MAIN_JOBS="randread:4k:1 randread:4k:32 randwrite:4k:32 read:128k:16 write:128k:16"
PIN_JOBS=
if [ "$NCPU" -gt 1 ]; then PIN_JOBS="read:128k:16:cpu0 write:128k:16:cpu0"; fi
JOBS=()
for j in $MAIN_JOBS $PIN_JOBS $(for q in $QDS; do echo "randread:4k:$q"; done); do
	[[ " ${JOBS[*]} " == *" $j "* ]] || JOBS+=("$j")
done
jobname() { # rw:bs:qd[:cpuN] -> rw-bs-qdN[-cpuN]
	local rw bs qd cpu
	IFS=: read -r rw bs qd cpu <<< "$1"
	echo "$rw-$bs-qd$qd${cpu:+-$cpu}"
}

mkdir -p "$OUT"/{meta,fio,cpu,perftest,gonvmf}
# gonvmf's serve logs live on the guest's tmpfs while it runs (see guest-lib's gonvmf_start:
# on the 9p results share each log line would cost a connect a round trip to the VM's host,
# where the kernel target's lines go to the kernel's ring buffer), and are copied to
# $OUT/gonvmf when it stops and when this script exits.
GONVMF_LOG_DIR=/tmp/bench-logs
mkdir -p "$GONVMF_LOG_DIR/gonvmf"
save_gonvmf_logs() { cp -p "$GONVMF_LOG_DIR"/gonvmf/*.log "$OUT/gonvmf/" 2> /dev/null || :; }
{
	printf 'RUNTIME=%s\nRAMP=%s\nREPS=%s\nQDS="%s"\nBACKENDS="%s"\nTARGETS="%s"\n' \
		"$RUNTIME" "$RAMP" "$REPS" "$QDS" "$BACKENDS" "$TARGETS"
	printf 'SCALE_REPS=%s\n' "$SCALE_REPS"
	printf 'SCALE_QPS="%s"\nPERF_DUR=%s\nFILE_MB=%s\nNULL_GB=%s\nNCPU=%s\nHZ=%s\n' \
		"$SCALE_QPS" "$PERF_DUR" "$FILE_MB" "$NULL_GB" "$NCPU" "$HZ"
	printf 'JOBS="%s"\nGONVMF_TRANSPORT="%s"\n' "${JOBS[*]}" "$GONVMF_TRANSPORT"
} > "$OUT/params.env"
printf 'rep\tbackend\ttarget\tjob\trw\tbs\tqd\tfio_rc\tjson\tcpu\n' > "$OUT/runs.tsv"
printf 'rep\tbackend\ttarget\torder\tstatus\tconnect_s\tio_queues\tqueue_size\tlba_bytes\tgonvmf_rss_start_kb\tgonvmf_rss_connected_kb\tgonvmf_rss_end_kb\tgonvmf_hwm_end_kb\treason\tverify\n' > "$OUT/sessions.tsv"
printf 'rep\ttarget\tqps_requested\tcontrollers\tio_queues_per_ctrl_requested\tio_queues_granted\tconnect_total_s\tconnect_first_s\tconnect_median_s\tconnect_max_s\tdisconnect_s\tgonvmf_rss_before_kb\tgonvmf_rss_after_kb\tguest_used_delta_kb\tslab_delta_kb\tstatus\n' > "$OUT/scaling.tsv"

# ---- small helpers ----

# Polling loops use builtins only (no fork, no exec): under TCG every process start costs
# tens of milliseconds of the same two vCPUs the measured connect needs. nap and since come
# from guest-lib.sh.
now() { echo "$EPOCHREALTIME"; }
meminfo_kb() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
guest_used_kb() { awk '/^MemTotal:/ { t = $2 } /^MemAvailable:/ { a = $2 } END { print t - a }' /proc/meminfo; }
rss_kb() { # <pid> [VmRSS|VmHWM]
	[ -n "$1" ] && [ -r "/proc/$1/status" ] && awk -v k="${2:-VmRSS}:" '$1 == k { print $2 }' "/proc/$1/status"
}
# pid_ticks <pid...>: sets TICKS to utime+stime (clock ticks) summed over the processes, all
# threads included, and UTICKS and STICKS to the two parts. The kernel scales a process's
# utime+stime to its threads' exact run time and splits that in the ratio of the ticks that
# found it in user and in system mode (cputime_adjust), so the split is a sample, the sum is
# not. Builtins only: the CPU sampler must not disturb what it measures.
pid_ticks() {
	local p line f
	TICKS=0 UTICKS=0 STICKS=0
	for p in "$@"; do
		read -r line 2> /dev/null < "/proc/$p/stat" || continue
		# after "pid (comm) " the fields start at field 3 (state): utime is field 14, stime 15
		f=(${line##*) }) # numbers and a state letter: nothing to glob
		UTICKS=$((UTICKS + f[11])) STICKS=$((STICKS + f[12]))
	done
	TICKS=$((UTICKS + STICKS))
}

# sched_sum <schedstat file...>: sets SCHED_NS (CPU time, ns), SCHED_WAIT (time runnable but
# waiting on a run queue, ns) and SCHED_CS (times a thread was switched in: context switches)
# summed over those threads' schedstat files (times are exact, kept by the scheduler; the
# third field counts the arrivals on a CPU). A file that is gone (its thread exited) counts
# nothing. Builtins only.
sched_sum() {
	local t a b c
	SCHED_NS=0 SCHED_WAIT=0 SCHED_CS=0
	for t in "$@"; do
		read -r a b c 2> /dev/null < "$t" || continue
		SCHED_NS=$((SCHED_NS + a)) SCHED_WAIT=$((SCHED_WAIT + b)) SCHED_CS=$((SCHED_CS + c))
	done
}

# task_sched <pid>: sched_sum over the process's threads (/proc/PID/task/*/schedstat).
task_sched() {
	if [ -n "$1" ]; then sched_sum /proc/"$1"/task/*/schedstat; else sched_sum; fi
}

# KSOFTIRQD: the schedstat files of the softirq threads (ksoftirqd/N, one per CPU), found once.
# Soft-RoCE's packet work and the Linux host's completions run as softirqs (tasklets); one
# raised outside interrupt context (a system call such as a userspace target's post, a
# kworker) wakes ksoftirqd, one raised inside a softirq runs in the same pass.
KSOFTIRQD=()
for _p in /proc/[0-9]*; do
	read -r _c 2> /dev/null < "$_p/comm" && [[ $_c == ksoftirqd/* ]] && KSOFTIRQD+=("$_p/schedstat")
done

# ---- system calls of the gonvmf process ----
# Counted in the kernel by a histogram trigger on the raw_syscalls:sys_enter tracepoint
# (tracefs, CONFIG_HIST_TRIGGERS; no BPF, no perf, no strace): one counter per system call
# number for every thread named gonvmf, read at each CPU sample. strace stops the process
# at every call; perf trace copies every event to user space; the trigger only increments a
# counter. It is set once for the whole run, so the tracepoint's small cost per system call
# (every process's, fio's included) is the same for both targets' runs; gonvmf's own calls
# pay it too, which measured below the guest's noise (this and the wake-up counter off in
# half the repetitions of one boot: gonvmf's CPU per I/O at 4k QD1 389 µs off, 384 on).
SYSCALL_TRIGGER='hist:keys=id.syscall:vals=hitcount:size=512 if comm == "gonvmf"'
SYSCALL_HIST=

# hist_on <event> <trigger> <meta key> <what>: sets a histogram trigger on the tracefs
# event (e.g. raw_syscalls/sys_enter) and HIST_ON to its hist file, and writes
# "<meta key>: <what>" to meta/guest.txt; where it cannot (no tracefs, no
# CONFIG_HIST_TRIGGERS) HIST_ON is empty, and the log and "<meta key>: unavailable" say why.
# hist_off <hist file> <trigger> removes it (nothing for an empty file).
hist_on() {
	local tr=/sys/kernel/tracing err=$OUT/meta/$3.err
	HIST_ON=
	[ -d "$tr/events" ] || mount -t tracefs nodev "$tr" 2> /dev/null
	if [ -w "$tr/events/$1/trigger" ] && echo "$2" > "$tr/events/$1/trigger" 2> "$err"; then
		HIST_ON=$tr/events/$1/hist
		echo "$3: $4" >> "$OUT/meta/guest.txt"
	else
		log "no $3: $(cat "$err" 2> /dev/null) (tracefs or CONFIG_HIST_TRIGGERS missing?)"
		echo "$3: unavailable" >> "$OUT/meta/guest.txt"
	fi
}
hist_off() { [ -z "$1" ] || echo "!$2" 2> /dev/null > "${1%hist}trigger"; }
# hist_clear <hist file> <trigger>: empties the histogram; the trigger stays and counts on
# (the same trigger with ":clear" before its filter). Reading a histogram costs the kernel
# time per entry, in the SCHED_FIFO sampler's system call (see cpu_windows): in the 6.1 guest
# 17-41 ms for gonvmf's system calls and 9-50 ms for the wake-ups, which keyed by pid gained
# entries all run long (every fio, kworker and gonvmf thread that ever woke a softirq
# thread). So every session clears both before its fio jobs, and a sample reads only the
# session's entries (then 5-10 and 6-23 ms in the same guest); the sampler's counts are
# differences inside one job.
hist_clear() {
	[ -n "$1" ] || return 0
	local head=${2%% if *}
	echo "$head:clear${2#"$head"}" 2> /dev/null >> "${1%hist}trigger" || log "cannot clear $1"
}
# hist_text <hist file>: sets HIST_LINES to the file's lines (blank ones left out), read in
# one pass. A histogram's file is generated anew whenever it is read from another offset than
# where the last read ended, and bash's read builtin seeks back after every line: read line by
# line, the lines would come from different generations of a table whose counts (and, sorted
# by count, whose order) change meanwhile. The text is split in memory (words split at
# newlines, globbing off: the lines hold brackets), not read again line by line from a
# here-string, which bash feeds through a pipe and its read builtin takes one byte per system
# call from: thousands of calls per sample, each slow under TCG, while the SCHED_FIFO sampler
# holds a vCPU (see cpu_windows). Builtins only.
hist_text() {
	local text= IFS=$'\n'
	read -r -d '' text < "$1" || :
	set -f
	HIST_LINES=($text)
	set +f
}

# sys_hist: sets SYS_TOTAL (system calls of gonvmf processes since the trigger was set or
# last cleared by hist_clear) and SYS_LIST (" name:count" per call). Builtins only.
sys_hist() {
	local l n name
	SYS_TOTAL=0 SYS_LIST=
	[ -n "$SYSCALL_HIST" ] || return 0
	hist_text "$SYSCALL_HIST"
	for l in "${HIST_LINES[@]}"; do
		case $l in "{ id: "*) ;; *) continue ;; esac
		name=${l#\{ id: } # "{ id: sys_write [  1] } hitcount:   3756"
		name=${name%% *}
		n=${l##*hitcount:}
		n=${n// /}
		SYS_TOTAL=$((SYS_TOTAL + n))
		SYS_LIST+=" ${name#sys_}:$n"
	done
}

# ---- wake-ups of the softirq threads, by waker ----
# A softirq raised outside interrupt context (a tasklet scheduled in a system call or a
# kworker) wakes ksoftirqd unless it is running already; one raised inside a softirq runs
# in the same pass. A histogram trigger on sched:sched_wakeup, for wake-ups of ksoftirqd/N,
# keyed by the waking task (the event's common_pid: the task that was running), counts them
# inside the kernel (no BPF, no perf), and wake_hist sorts the wakers at each sample. Keyed
# by task, not by kernel stack: a stack key costs an unwind at every counted wake-up, inside
# the waker's system call, and gonvmf's runs have up to fifty times as many of them as the
# kernel target's (4k QD32 reads). Set once for the whole run, like the system call trigger.
WAKE_TRIGGER='hist:keys=common_pid.execname:vals=hitcount:size=1024 if comm ~ "ksoftirqd*"'
WAKE_HIST=
# wake_hist: sets WAKE_LIST (" waker:count" per kind of waking task, counts since the
# trigger was set or last cleared), by the task's name:
#   fio     the Linux host's I/O path in fio's system calls (on 6.1 Soft-RoCE sends a
#           kernel post from a tasklet: the host's command posts)
#   gonvmf  gonvmf's threads: its post system calls, in which Soft-RoCE sends and, on the
#           loopback link, receives, completing the host's commands
#   kworker workqueues: the kernel target's command work and posts
#   other   anything else (the softirq threads themselves, idle)
# A wake-up from an interrupt's exit (a softirq pass out of budget hands its rest to
# ksoftirqd) counts for the task the interrupt found running. Builtins only.
wake_hist() {
	local l n who k
	local -A cnt=()
	WAKE_LIST=
	[ -n "$WAKE_HIST" ] || return 0
	hist_text "$WAKE_HIST"
	for l in "${HIST_LINES[@]}"; do
		case $l in "{ common_pid: "*) ;; *) continue ;; esac
		who=${l#\{ common_pid: } # "{ common_pid: fio             [       532] } hitcount:      27368"
		who=${who%% *}
		case $who in
		fio) k=fio ;;
		gonvmf) k=gonvmf ;;
		kworker/*) k=kworker ;;
		*) k=other ;;
		esac
		n=${l##*hitcount:}
		n=${n// /}
		cnt[$k]=$((${cnt[$k]:-0} + n))
	done
	for k in "${!cnt[@]}"; do
		WAKE_LIST+=" $k:${cnt[$k]}"
	done
}

# snap <target pid> <fio pid>: one CPU sample line:
#   epoch uptime user nice system idle iowait irq softirq steal fio_ticks target_ticks
#   target_syscalls target_cs target_ns fio_cs fio_ns guest_ctxt softirq_cs
#   target_wait softirq_wait fio_wait target_utime target_stime
# and, when system calls are counted and there is a target process, a second line
#   s epoch name:count ...
# and, when softirq wake-ups are counted, a third (both targets)
#   k epoch waker:count ...
# /proc/stat and /proc/uptime are read back to back: report.py takes busy time as the window's
# wall time times the vCPUs minus idle and iowait, which the kernel keeps exactly (NO_HZ);
# the busy fields are tick samples, and under TCG on a loaded machine most ticks are lost.
# Process times: utime+stime (/proc/PID/stat, ticks) and the scheduler's run time summed over
# the threads (schedstat, ns); context switches: the threads' arrivals on a CPU (schedstat)
# and the guest's total (ctxt of /proc/stat), and the softirq threads' (KSOFTIRQD); run-queue
# waits: the time the target's, the softirq threads' and fio's threads were runnable but not
# running (schedstat, ns); the target's utime and stime (ticks; pid_ticks says what their
# split is). The system calls are gonvmf's (sys_hist).
snap() {
	local up c k v fio fcs fns fwait scs swait ctxt=0
	while read -r k v; do
		case $k in
		cpu) c=($v) ;; # numbers: nothing to glob
		ctxt) ctxt=$v && break ;;
		esac
	done < /proc/stat
	read -r up _ < /proc/uptime
	local now=$EPOCHREALTIME
	pid_ticks "$2"
	fio=$TICKS
	sched_sum "${KSOFTIRQD[@]}"
	scs=$SCHED_CS swait=$SCHED_WAIT
	task_sched "$2"
	fcs=$SCHED_CS fns=$SCHED_NS fwait=$SCHED_WAIT
	task_sched "$1"
	pid_ticks ${1:+"$1"}
	SYS_TOTAL=0 SYS_LIST=
	[ -n "$1" ] && sys_hist
	echo "$now $up ${c[0]} ${c[1]} ${c[2]} ${c[3]} ${c[4]} ${c[5]} ${c[6]} ${c[7]} $fio $TICKS $SYS_TOTAL $SCHED_CS $SCHED_NS $fcs $fns $ctxt $scs $SCHED_WAIT $swait $fwait $UTICKS $STICKS"
	[ -n "$SYS_LIST" ] && echo "s $now$SYS_LIST"
	wake_hist
	[ -n "$WAKE_LIST" ] && echo "k $now$WAKE_LIST"
	return 0
}

# cpu_windows <target pid or ""> <fio pid> <file...>: CPU samples for each fio job, in job
# order. fio runs a session's jobs one after the other in one process (its start-up takes
# seconds under TCG) and runs its exec_prerun hook just before each job's I/O starts; the
# hook opens $GO_FIFO for writing, and opening a FIFO blocks until both ends are open, so
# the hook and this reader meet there (fio sends the hook's output to <job>.prerun.txt, not
# into the FIFO: the open is the signal). It takes two samples, 0.5 s after the ramp and
# 0.3 s before the runtime is over, and report.py measures between them (the first and the
# last sample inside fio's measured interval). The sampler runs SCHED_FIFO: in a guest
# saturated by fio and the target, an ordinary process wakes up seconds late. Each sample
# takes one vCPU for 15-50 ms under TCG (medians of one 6.1 boot over the summary's jobs: 19 ms
# beside the kernel target, 32 ms beside gonvmf, most of it the kernel printing the two
# histograms, see hist_clear; 40 and 66 ms before the histograms were cleared per session,
# and more when their text was parsed one byte per system call, see hist_text), and whatever
# runs there waits: a userspace target's polling thread stalls with it, the kernel target's
# softirq work does not (with a sample every 0.5 s, fio's p99 at 4k QD32 was 1.5-1.8x its
# unsampled value against gonvmf and 1.0-1.3x against the kernel target; with these two, of
# the older length, its p99.9 1.3-2x and its maximum about 40 ms against gonvmf, unchanged
# against the kernel target). So a job gets the two samples its window needs and no more,
# the same for both targets.
GO_FIFO=/tmp/gonvmf-bench-go
rm -f "$GO_FIFO" && mkfifo "$GO_FIFO"
cpu_windows() {
	local tpid=$1 fpid=$2 t0=$EPOCHREALTIME file go at
	shift 2
	chrt -f -p 10 "$BASHPID" > /dev/null 2>&1 || log "cannot make the CPU sampler SCHED_FIFO; its samples may come late"
	for file in "$@"; do
		read -r _ < "$GO_FIFO" # returns at EOF when the hook closes its end
		go=$EPOCHREALTIME
		{
			echo "# go $go ramp $RAMP runtime $RUNTIME fio_pid $fpid target_pid ${tpid:-none} after_s $(since "$t0")"
			for at in $((RAMP * 1000000 + 500000)) $(((RAMP + RUNTIME) * 1000000 - 300000)); do
				nap_until $((${go/./} + at))
				snap "$tpid" "$fpid"
			done
		} > "$file"
	done
}

# nap_until <epoch µs>: nap until then (at once if it is past). Builtins only.
nap_until() {
	local d=$(($1 - ${EPOCHREALTIME/./})) us
	[ $d -gt 0 ] || return 0
	printf -v us '%06d' $((d % 1000000))
	nap "$((d / 1000000)).$us"
}

# ---- the Linux host side ----

# host identity i (1..): a fixed host NQN and host ID, so that every run connects as the
# same host and the scaling test's controllers are distinct hosts of the subsystem.
hostnqn() { printf 'nqn.2014-08.org.nvmexpress:uuid:6f6e766d-6662-4000-8000-%012d' "$1"; }
hostid() { printf '6f6e766d-6662-4000-8000-%012d' "$1"; }

# connect_timed <nqn> <host index> <nr io queues>: nvme connect as that host, then wait until
# the new controller is live with its namespace and the namespace's block device exists
# (guest-lib's nvme_connect_new). Sets CONN_S (seconds from the start of nvme connect),
# CONN_CTRL (nvmeN), NS_DEV; CONN_ERR on failure.
connect_timed() {
	CONN_S= CONN_CTRL= NS_DEV= CONN_ERR=
	if ! nvme_connect_new "$1" "$PORT" --hostnqn="$(hostnqn "$2")" --hostid="$(hostid "$2")" -i "$3" 2> /dev/null; then
		CONN_ERR=$NVME_ERR
		return 1
	fi
	CONN_S=$NVME_CONNECT_S CONN_CTRL=$NVME_CTRL NS_DEV=${NVME_NS_DEVS[0]}
}

# fabrics_connect <nqn> <host index> <nr io queues>: like connect_timed, but writes the
# options to /dev/nvme-fabrics itself, as nvme-cli does: nvme-cli 2.3 refuses a second
# controller of a subsystem at the same address even from another host NQN and with
# --duplicate-connect (its lookup_ctrl ignores both; fixed upstream in nvme-cli PR #1993).
fabrics_connect() {
	local nqn=$1 h=$2 q=$3 before t0 fd
	nvme_ctrls "$nqn"
	before=" ${NVME_CTRLS[*]} "
	CONN_S= CONN_CTRL= NS_DEV= CONN_ERR=
	t0=$(now)
	if ! { exec {fd}<> /dev/nvme-fabrics &&
		printf 'nqn=%s,transport=rdma,traddr=%s,trsvcid=%s,hostnqn=%s,hostid=%s,nr_io_queues=%s' \
			"$nqn" "$RXE_IP" "$PORT" "$(hostnqn "$h")" "$(hostid "$h")" "$q" >&$fd &&
		read -r -t 60 _ <&$fd; } 2> "$OUT/.connect.log"; then
		[ -n "${fd:-}" ] && exec {fd}>&-
		CONN_ERR="write to /dev/nvme-fabrics failed: $(tail -n 1 "$OUT/.connect.log"); dmesg: $(dmesg | tail -n 3 | tr '\n' ' ')"
		return 1
	fi
	exec {fd}>&-
	if ! nvme_wait_ctrl "$nqn" "$before" 2> /dev/null; then
		CONN_ERR=$NVME_ERR
		return 1
	fi
	CONN_S=$(since "$t0") CONN_CTRL=$NVME_CTRL NS_DEV=${NVME_NS_DEVS[0]}
}

# ---- targets ----
# target_start <target> <backend> <tag>: sets NQN, TPID (gonvmf's pid, empty for the kernel)
# and TARGET_ERR on failure. target_stop <target> stops it.

backend_path() { # <backend>: what the kernel target exports
	case $1 in
	null) echo /dev/nullb0 ;;
	file) echo "$FILE" ;;
	esac
}

kernel_start() {
	NQN=$NQN_PREFIX:kernel-$2
	TPID=
	local err
	err=$(nvmet_setup "$NQN" "$(backend_path "$2")" "$PORT" 2>&1) || {
		TARGET_ERR="nvmet_setup: $err"
		return 1
	}
	[ -n "$err" ] && log "nvmet_setup: $err"
	return 0
}
kernel_stop() { nvmet_teardown "$NQN" || log "nvmet_teardown $NQN left something behind"; }

gonvmf_config() { # <backend> <file>
	{
		echo "# generated by integration/bench/guest-bench.sh"
		echo "listeners:"
		echo "  - transport: rdma"
		echo "    address: $RXE_IP"
		echo "    port: $PORT"
		echo "subsystems:"
		echo "  - nqn: $NQN"
		echo "    model: gonvmf bench"
		echo "    allow_any_host: true"
		echo "    namespaces:"
		echo "      - nsid: 1"
		case $1 in
		null)
			# the same size and block size as null_blk's /dev/nullb0
			echo "        backend: null"
			echo "        size: ${NULL_GB}GiB"
			echo "        lba_size: 512"
			;;
		file)
			# the kernel target exports a file on ext4 with 4 KiB blocks
			echo "        backend: file"
			echo "        path: $FILE"
			echo "        lba_size: 4096"
			;;
		esac
		[ -n "$GONVMF_TRANSPORT" ] && echo "transport: $GONVMF_TRANSPORT"
	} > "$2"
}
gonvmf_target_start() { # <target> <backend> <tag>: guest-lib's gonvmf_start on a generated config
	local be=$2 tag=$3 cfg
	NQN=$NQN_PREFIX:gonvmf-$be
	TPID=
	if [ -z "$GONVMF" ] || [ ! -x "$GONVMF" ]; then
		TARGET_ERR="no gonvmf binary: $(tail -n 1 "$OUT/host/build.txt" 2> /dev/null || echo "nothing at '$GONVMF'")"
		return 1
	fi
	cfg=$OUT/gonvmf/$be.yaml
	gonvmf_config "$be" "$cfg"
	if "$GONVMF" help check > /dev/null 2>&1; then
		"$GONVMF" check --config "$cfg" > "$OUT/gonvmf/check-$be.log" 2>&1 || {
			TARGET_ERR="gonvmf check --config $cfg failed: $(grep -v '^\s*$' "$OUT/gonvmf/check-$be.log" | tail -n 1)"
			return 1
		}
	fi
	"$GONVMF" help serve > /dev/null 2>&1 || {
		TARGET_ERR="$GONVMF has no serve command yet ($("$GONVMF" help serve 2>&1 | head -n 1))"
		return 1
	}
	if ! gonvmf_start "gonvmf/serve-$tag" "$cfg" "$RXE_IP" "$PORT" 2> /dev/null; then
		TARGET_ERR=$GONVMF_ERR
		return 1
	fi
	TPID=$GONVMF_PID
}
gonvmf_target_stop() {
	gonvmf_stop 15 || log "gonvmf did not stop cleanly (see the serve log)"
	save_gonvmf_logs
	TPID=
}
target_start() {
	TARGET_ERR=
	case $1 in
	kernel) kernel_start "$@" ;;
	gonvmf) gonvmf_target_start "$@" ;;
	esac
}
target_stop() {
	case $1 in
	kernel) kernel_stop ;;
	gonvmf) gonvmf_target_stop ;;
	esac
}
on_exit save_gonvmf_logs # runs last: after gonvmf_stop (on_exit runs in reverse)
on_exit gonvmf_stop
on_exit nvmet_teardown
on_exit nvme_disconnect_all

# gonvmf_usable <backend>: false (with GONVMF_REASON set) once gonvmf has failed to start
# for that backend: later repetitions don't try again.
declare -A GONVMF_REASON
target_usable() { [ "$1" != gonvmf ] || [ -z "${GONVMF_REASON[$2]:-}" ]; }

# ---- one target session: start, connect, every fio job, disconnect, stop ----

# run_jobs <tag> <rep> <backend> <target>: every job of the matrix on $NS_DEV, in one fio
# process (a job file of stonewalled sections), one JSON for the session.
run_jobs() {
	local tag=$1 spec rw bs qd cpu name jf json cpus=() names=() rc sp fpid wd t0
	jf=$OUT/fio/$tag.fio
	json=fio/$tag.json
	{
		echo "# generated by guest-bench.sh: the jobs of session $tag"
		echo "[global]"
		echo "filename=$NS_DEV"
		echo "ioengine=libaio"
		echo "direct=1"
		echo "numjobs=1"
		echo "time_based"
		echo "runtime=$RUNTIME"
		echo "ramp_time=$RAMP"
		echo "norandommap"
		echo "randrepeat=0"
		echo "lat_percentiles=1"
		echo "# fio's TSC clock test takes ~4 s under TCG and the guest kernel marks the TSC unstable"
		echo "clocksource=clock_gettime"
		echo "# one process (its CPU time is one /proc/PID/stat), jobs one after the other"
		echo "thread"
		echo "stonewall"
		echo "# tells the CPU sampler that a job's I/O starts now (see cpu_windows)"
		echo "exec_prerun=: > $GO_FIFO"
		for spec in "${JOBS[@]}"; do
			IFS=: read -r rw bs qd cpu <<< "$spec"
			name=$(jobname "$spec")
			names+=("$name")
			cpus+=("$OUT/cpu/$tag-$name.txt")
			printf '\n[%s]\nrw=%s\nbs=%s\niodepth=%s\n' "$name" "$rw" "$bs" "$qd"
			[ -z "$cpu" ] || echo "cpus_allowed=${cpu#cpu}"
		done
	} > "$jf"
	t0=$(now)
	# the subshell execs fio, so $! is fio's pid; fio writes the hooks' output to /tmp
	(cd /tmp && exec fio --output-format=json --output="$OUT/$json" "$jf" > "$OUT/fio/$tag.log" 2>&1) &
	fpid=$!
	cpu_windows "$TPID" "$fpid" "${cpus[@]}" &
	sp=$!
	# watchdog: fio still running past every job's time and some slack gets SIGTERM, then
	# SIGKILL 30 s later; killed itself as soon as fio is done. nap always returns 0; kill
	# may find fio gone (its status is ignored: a background job's does not count).
	local wd_s=$((${#JOBS[@]} * (RUNTIME + RAMP + 30) + 120))
	{
		nap "$wd_s"
		echo "fio still running after $wd_s s: the watchdog sent SIGTERM" > "$OUT/fio/$tag.watchdog"
		kill -TERM "$fpid"
		nap 30
		kill -KILL "$fpid"
	} > /dev/null 2>&1 &
	wd=$!
	wait "$fpid"
	rc=$?
	kill "$wd" 2> /dev/null
	if [ -s "$OUT/fio/$tag.watchdog" ]; then
		log "  $(cat "$OUT/fio/$tag.watchdog")"
	fi
	if [ $rc != 0 ]; then
		log "  fio exited $rc: $(tail -n 2 "$OUT/fio/$tag.log" | tr '\n' ' ')"
	else
		log "  ${#JOBS[@]} fio jobs done in $(since "$t0") s"
	fi
	kill "$sp" 2> /dev/null # still waiting for a job fio never started
	wait "$sp" 2> /dev/null
	local i
	for i in "${!JOBS[@]}"; do
		IFS=: read -r rw bs qd cpu <<< "${JOBS[i]}"
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$3" "$4" "${names[i]}" "$rw" "$bs" "$qd" "$rc" \
			"$json" "cpu/$tag-${names[i]}.txt" >> "$OUT/runs.tsv"
	done
	return 0
}

# verify_data <tag> <backend>: before the timed jobs of a target's first session, check that
# data arrives intact. file: fio writes 32 MiB in random 4k..128k blocks with crc32c
# checksums and reads them back. null: both targets' null devices store nothing and read
# zeroes, so fio only reads, 32 MiB in random 4k..128k blocks, and checks that every block
# is zeroes: a read that returned another command's buffer would not be. Sets vfy ("ok" or
# why not).
verify_data() {
	local tag=$1 be=$2 args rc what
	if [ "$be" = file ]; then
		args=(--rw=randwrite --verify=crc32c --do_verify=1)
		what="random writes with crc32c read back"
	else
		args=(--rw=randread --verify=pattern --verify_pattern=0)
		what="random reads checked for zeroes"
	fi
	timeout -k 5 300 fio --name=verify --filename="$NS_DEV" --ioengine=libaio --direct=1 --iodepth=16 \
		--bsrange=4k-128k --size=32M --randrepeat=0 --verify_fatal=1 --clocksource=clock_gettime "${args[@]}" \
		--output-format=json --output="$OUT/fio/$tag-verify.json" > "$OUT/fio/$tag-verify.log" 2>&1
	rc=$?
	if [ $rc = 0 ]; then
		vfy=ok
		pass "verify-$tag" "fio: 32 MiB of $what"
	else
		vfy="fio verify exited $rc: $(grep -v '^\s*$' "$OUT/fio/$tag-verify.log" | tail -n 1)"
		fail "verify-$tag" "$vfy"
	fi
}

session() { # <rep> <backend> <target> <order>
	local rep=$1 be=$2 tg=$3 order=$4 tag="r$1-$2-$3" rss0= rss1= rss2= hwm= q= qs= lba= vfy=
	log "== rep $rep, backend $be, target $tg (order $order)"
	row() { # <status> <connect_s> <reason>
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$be" "$tg" "$order" "$1" "$2" \
			"$q" "$qs" "$lba" "$rss0" "$rss1" "$rss2" "$hwm" "$3" "$vfy" >> "$OUT/sessions.tsv"
	}
	if ! target_usable "$tg" "$be"; then
		row unavailable "" "${GONVMF_REASON[$be]}"
		return 0
	fi
	if ! target_start "$tg" "$be" "$tag"; then
		log "$tg not available for $be: $TARGET_ERR"
		if [ "$tg" = gonvmf ]; then
			GONVMF_REASON[$be]=$TARGET_ERR
			skip "gonvmf-$be" "$TARGET_ERR"
		else
			fail "target-$tg-$be" "$TARGET_ERR"
		fi
		row unavailable "" "$TARGET_ERR"
		return 0
	fi
	rss0=$(rss_kb "$TPID")
	if ! connect_timed "$NQN" 1 "$NCPU"; then
		log "connect to $tg ($be) failed: $CONN_ERR"
		if [ "$tg" = gonvmf ]; then
			GONVMF_REASON[$be]="gonvmf serve runs but the Linux host cannot use it: $CONN_ERR"
			skip "gonvmf-$be" "${GONVMF_REASON[$be]}"
		else
			fail "connect-$tg-$be" "$CONN_ERR"
		fi
		row unavailable "" "$CONN_ERR"
		nvme_disconnect "$NQN"
		target_stop "$tg"
		return 0
	fi
	rss1=$(rss_kb "$TPID")
	q=$(($(cat "/sys/class/nvme/$CONN_CTRL/queue_count") - 1))
	qs=$(($(cat "/sys/class/nvme/$CONN_CTRL/sqsize") + 1))
	lba=$(cat "/sys/block/${NS_DEV#/dev/}/queue/logical_block_size")
	log "connected to $tg ($be) in $CONN_S s: $NS_DEV, $q I/O queues of $qs entries, $lba-byte blocks"
	nvme id-ctrl "/dev/$CONN_CTRL" > "$OUT/meta/id-ctrl-$tg-$be.txt" 2>&1
	if [ "$rep" = 1 ]; then
		verify_data "$tag" "$be"
	else
		vfy="not run (rep $rep)"
	fi
	hist_clear "$SYSCALL_HIST" "$SYSCALL_TRIGGER"
	hist_clear "$WAKE_HIST" "$WAKE_TRIGGER"
	run_jobs "$tag" "$rep" "$be" "$tg"
	rss2=$(rss_kb "$TPID")
	hwm=$(rss_kb "$TPID" VmHWM)
	if [ "$tg" = gonvmf ] && ! kill -0 "$TPID" 2> /dev/null; then
		row failed "$CONN_S" "gonvmf exited during the fio jobs: $(tail -n 1 "$GONVMF_LOG")"
		fail "gonvmf-$be-r$rep" "gonvmf exited during the fio jobs"
	else
		row ok "$CONN_S" ""
		pass "session-$tag" "connect $CONN_S s, $q I/O queues"
	fi
	nvme_disconnect "$NQN" || fail "disconnect-$tag" "controllers left behind"
	target_stop "$tg"
}

# ---- scaling: 1, 8, 32 I/O queue pairs ----
# The Linux host grants at most one I/O queue per online CPU per controller (-i is capped by
# num_online_cpus), so N queue pairs are ceil(N / NCPU) controllers of NCPU I/O queues each,
# every controller from its own host NQN.
scaling_unavailable() { # <rep> <target> <qps> <reason>
	printf '%s\t%s\t%s\t\t\t\t\t\t\t\t\t\t\t\t\t%s\n' "$1" "$2" "$3" "unavailable: $4" >> "$OUT/scaling.tsv"
}
scaling_target() { # <rep> <target>
	local rep=$1 tg=$2 n per k i t0 times used0 slab0 rss_a rss_b granted total first med max dis st c qc
	target_usable "$tg" "$SCALE_BE" || {
		for n in $SCALE_QPS; do
			scaling_unavailable "$rep" "$tg" "$n" "${GONVMF_REASON[$SCALE_BE]}"
		done
		return 0
	}
	if ! target_start "$tg" "$SCALE_BE" "r$rep-scaling-$tg"; then
		[ "$tg" = gonvmf ] && GONVMF_REASON[$SCALE_BE]=$TARGET_ERR
		for n in $SCALE_QPS; do
			scaling_unavailable "$rep" "$tg" "$n" "$TARGET_ERR"
		done
		return 0
	fi
	for n in $SCALE_QPS; do
		per=$((n < NCPU ? n : NCPU))
		k=$(((n + per - 1) / per))
		log "scaling: $tg, $n I/O queue pairs = $k controller(s) x $per"
		sleep 1
		used0=$(guest_used_kb)
		slab0=$(meminfo_kb Slab)
		rss_b=$(rss_kb "$TPID")
		times=()
		st=ok
		t0=$(now)
		for i in $(seq 1 "$k"); do
			if ! fabrics_connect "$NQN" "$i" "$per"; then
				st="failed at controller $i: $CONN_ERR"
				break
			fi
			times+=("$CONN_S")
		done
		total=$(since "$t0")
		granted=0
		nvme_ctrls "$NQN"
		for c in "${NVME_CTRLS[@]}"; do
			read -r qc < "/sys/class/nvme/$c/queue_count"
			granted=$((granted + qc - 1))
		done
		sleep 1
		rss_a=$(rss_kb "$TPID")
		local used1 slab1
		used1=$(guest_used_kb)
		slab1=$(meminfo_kb Slab)
		first=${times[0]:-}
		read -r med max < <(printf '%s\n' "${times[@]}" | grep . | sort -g | awk '{ v[++n] = $1 } END {
			if (n) print ((n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2), v[n] }')
		t0=$(now)
		nvme_disconnect "$NQN" || st="$st; disconnect left controllers behind"
		dis=$(since "$t0")
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$tg" "$n" "$k" "$per" "$granted" \
			"$total" "$first" "$med" "$max" "$dis" "$rss_b" "$rss_a" "$((used1 - used0))" "$((slab1 - slab0))" "$st" >> "$OUT/scaling.tsv"
		log "scaling: $tg $n QPs: $granted I/O queues granted, connect total $total s (first $first, median $med), rss ${rss_b:--} -> ${rss_a:--} kB, guest used +$((used1 - used0)) kB"
		[ "$st" = ok ] || { log "scaling: $tg: $st"; break; }
	done
	target_stop "$tg"
}

# ---- perftest: the link's ceiling ----
perftest_one() { # <rep> <test> <size> <args...>
	local rep=$1 t=$2 sz=$3 base sp rc i
	shift 3
	base=$OUT/perftest/r$rep-$t-$sz
	for _ in 1 2; do
		timeout 90 "$t" -d "$RXE_DEV" -F -R -s "$sz" "$@" > "$base.server.txt" 2>&1 &
		sp=$!
		# under TCG the server takes seconds to listen; a client that comes too early is
		# rejected (RDMA_CM_EVENT_REJECTED, no listener)
		for i in $(seq 60); do
			rdma resource show cm_id 2> /dev/null | grep -w LISTEN | grep -q -e "comm $t" -e ":18515 " && break
			nap 0.3
		done
		nap 0.5
		timeout 90 "$t" -d "$RXE_DEV" -F -R -s "$sz" "$@" "$RXE_IP" > "$base.txt" 2>&1
		rc=$?
		if [ $rc != 0 ]; then
			log "perftest $t -s $sz: client exited $rc: $(grep -v '^\s*$' "$base.txt" | tail -n 1)"
			kill "$sp" 2> /dev/null # a server without its client would wait for the timeout
		fi
		wait "$sp" 2> /dev/null
		# a result row, and not "inf": perftest's latency tests calibrate the CPU clock, which
		# can fail under TCG
		grep -A1 '#bytes' "$base.txt" | tail -n 1 | grep '[0-9]' | grep -q -v -w -e inf -e nan && break
		log "  $t $sz: no result; trying once more"
	done
	log "  $t $sz: $(grep -A1 '#bytes' "$base.txt" | tail -n 1 | xargs)"
}
perftest_rep() {
	[ "$PERF_DUR" -gt 0 ] || return 0
	log "== rep $1: perftest over $RXE_DEV"
	# -D: perftest measures between a 1 s warm-up and a 1 s cool-down margin (-f 1)
	# -Q 1: a completion per message, as fio has per I/O (perftest's default moderation of 100
	# leaves windows without any completion under TCG)
	local bw=(-D $((PERF_DUR + 2)) -f 1 -Q 1 --report_gbits)
	# with as many messages in flight as fio has I/Os
	perftest_one "$1" ib_write_bw 4096 "${bw[@]}" -t 32         # 4k reads at QD32: data goes by RDMA Write
	perftest_one "$1" ib_write_bw 131072 "${bw[@]}" -t 16       # 128k reads at QD16
	perftest_one "$1" ib_read_bw 131072 "${bw[@]}" -t 16 -o 16  # 128k writes at QD16: data comes by RDMA Read
	perftest_one "$1" ib_send_lat 8 -n $((PERF_DUR * 400))
}

timeout 60 modprobe -a nvmet nvmet-rdma nvme-rdma || {
	fail modprobe "nvmet nvmet-rdma nvme-rdma"
	exit 1
}

# ---- the machine ----
{
	echo "kernel: $(uname -r)"
	echo "vcpus: $NCPU"
	echo "guest_cpu: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
	echo "guest_mem_kb: $(meminfo_kb MemTotal)"
	echo "clk_tck: $HZ"
	# package versions from dpkg: fio --version alone takes seconds under TCG
	dpkg-query -W -f '${Package}: ${Version}\n' fio nvme-cli perftest rdma-core 2> /dev/null
	echo "rxe_active_mtu: $(ibv_devinfo -d "$RXE_DEV" | awk '/active_mtu/ { print $2 }')"
	echo "netdev_mtu: $RXE_MTU"
	echo "nvme_core_multipath: $(cat /sys/module/nvme_core/parameters/multipath 2> /dev/null)"
	echo "gonvmf: $([ -n "$GONVMF" ] && [ -x "$GONVMF" ] && "$GONVMF" --version 2>&1 | head -n 1 || echo "no binary")"
} > "$OUT/meta/guest.txt" 2>&1
hist_on raw_syscalls/sys_enter "$SYSCALL_TRIGGER" syscall_counting "hist trigger on raw_syscalls:sys_enter, comm == gonvmf"
SYSCALL_HIST=$HIST_ON
on_exit hist_off "$SYSCALL_HIST" "$SYSCALL_TRIGGER"
hist_on sched/sched_wakeup "$WAKE_TRIGGER" softirq_wakeups "hist trigger on sched:sched_wakeup by waking task, comm ~ ksoftirqd*"
WAKE_HIST=$HIST_ON
on_exit hist_off "$WAKE_HIST" "$WAKE_TRIGGER"
cat "$OUT/meta/guest.txt"

# ---- backends ----
READY_BACKENDS=()
for be in $BACKENDS; do
	case $be in
	null)
		if null_blk_setup "$NULL_GB" > /dev/null; then
			READY_BACKENDS+=(null)
		else
			fail backend-null "null_blk did not load"
		fi
		;;
	file)
		if [ -z "${SCRATCH:-}" ]; then
			fail backend-file "no scratch disk (run with vm.sh run --disk SIZE)"
			continue
		fi
		# Fully written once, so that neither target pays for allocating blocks.
		t0=$(now)
		if timeout 900 dd if=/dev/zero of="$FILE" bs=1M count="$FILE_MB" oflag=direct status=none; then
			log "backing file $FILE: $FILE_MB MiB written in $(since "$t0") s ($(stat -f -c %T "$SCRATCH"), block size $(stat -c %o "$FILE"))"
			READY_BACKENDS+=(file)
		else
			fail backend-file "cannot write $FILE_MB MiB to $FILE"
		fi
		;;
	*) fail backend "unknown backend $be (null, file)" ;;
	esac
done
[ ${#READY_BACKENDS[@]} -gt 0 ] || exit 1
# the scaling test connects to the null backend (storage plays no part in connecting)
SCALE_BE=${READY_BACKENDS[0]}
[[ " ${READY_BACKENDS[*]} " == *" null "* ]] && SCALE_BE=null
printf 'READY_BACKENDS="%s"\nSCALE_BACKEND=%s\n' "${READY_BACKENDS[*]}" "$SCALE_BE" >> "$OUT/params.env"

# ---- the runs: repetitions, backends, targets alternated ----
read -r -a TLIST <<< "$TARGETS"
for rep in $(seq 1 "$REPS"); do
	perftest_rep "$rep"
	order=("${TLIST[@]}")
	if [ $((rep % 2)) = 0 ]; then
		order=()
		for ((i = ${#TLIST[@]} - 1; i >= 0; i--)); do order+=("${TLIST[i]}"); done
	fi
	for be in "${READY_BACKENDS[@]}"; do
		n=0
		for tg in "${order[@]}"; do
			n=$((n + 1))
			session "$rep" "$be" "$tg" "$n"
		done
	done
	if [ -n "$SCALE_QPS" ] && [ "$rep" -le "$SCALE_REPS" ]; then
		for tg in "${order[@]}"; do scaling_target "$rep" "$tg"; done
	fi
done

# ---- whether gonvmf took part ----
{
	if [[ " $TARGETS " != *" gonvmf "* ]]; then
		echo "not measured (GONVMF_BENCH_TARGETS=\"$TARGETS\")"
	elif [ ${#GONVMF_REASON[@]} -eq 0 ]; then
		echo "available"
	else
		for be in "${!GONVMF_REASON[@]}"; do echo "unavailable $be: ${GONVMF_REASON[$be]}"; done
	fi
} > "$OUT/gonvmf-status.txt"
log "gonvmf: $(head -n 1 "$OUT/gonvmf-status.txt")"
[ -f "$FILE" ] && rm -f "$FILE"
rm -f "$OUT/.connect.log"
finish
