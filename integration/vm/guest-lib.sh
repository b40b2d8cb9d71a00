# shellcheck shell=bash
# guest-lib.sh: helpers for guest scripts run by vm.sh (source it: . "$SRC/integration/vm/guest-lib.sh").
#
# When a script starts, vm.sh has already brought up Soft-RoCE: $RXE_DEV (rxe0) on dummy0 with
# $RXE_IP. $OUT is the results directory (/out, on the host afterwards), $SRC the repo,
# $GONVMF_BUILD the host build directory, $SCRATCH an ext4 mount when run with --disk.
#
# Checks report one machine-readable line each, in guest.log and in $OUT/results.txt:
#   RESULT PASS <name>
#   RESULT FAIL <name>: <reason>
#   RESULT SKIP <name>: <reason>
# A script that recorded a failure exits non-zero even if its last command succeeded.
# Everything here is bounded by a timeout: a guest script must fail, never hang.

[ "${GONVMF_GUEST:-}" = 1 ] || echo "guest-lib.sh: not inside the gonvmf VM (GONVMF_GUEST unset); run the script with integration/vm/vm.sh run" >&2

GUEST_LIB_PASS=0
GUEST_LIB_FAIL=0
GUEST_LIB_SKIP=0
GUEST_LIB_CLEANUP=()
GUEST_LIB_BG=()
NVMET_CFG=/sys/kernel/config/nvmet
NVMET_DEFAULT_PORT=4420

# log <message>: a timestamped progress line (seconds of guest uptime).
log() { echo "=== [$(cut -d' ' -f1 /proc/uptime)] $*"; }

_result() {
	echo "RESULT $*"
	[ -n "${OUT:-}" ] && echo "RESULT $*" >> "$OUT/results.txt"
	return 0
}
# pass <name> [detail...]; fail <name> <reason...>; skip <name> <reason...>
# Names are single words (the second field of the RESULT line); details follow a colon.
pass() {
	GUEST_LIB_PASS=$((GUEST_LIB_PASS + 1))
	local name=$1
	shift
	_result "PASS $name${*:+: $*}"
}
fail() {
	GUEST_LIB_FAIL=$((GUEST_LIB_FAIL + 1))
	local name=$1
	shift
	_result "FAIL $name: ${*:-failed}"
}
skip() {
	GUEST_LIB_SKIP=$((GUEST_LIB_SKIP + 1))
	local name=$1
	shift
	_result "SKIP $name: ${*:-skipped}"
}

# check <name> <command...>: runs the command (output into the log); PASS if it exits 0,
# FAIL with its status and last output line otherwise. Returns the command's status.
check() {
	local name=$1 rc=0 f
	shift
	f=$(mktemp)
	"$@" > "$f" 2>&1 || rc=$?
	cat "$f"
	if [ $rc = 0 ]; then
		pass "$name"
	else
		fail "$name" "'$*' exited $rc: $(tail -n 1 "$f")"
	fi
	rm -f "$f"
	return $rc
}

# on_exit <command...>: run at exit (last registered first); cleanup that must not be skipped.
on_exit() { GUEST_LIB_CLEANUP+=("$(printf '%q ' "$@")"); }

# finish: end the script: status 1 if any check failed, else 0. The same tally and status
# are applied when a script simply ends (the EXIT trap below).
finish() { exit 0; }

_guest_lib_exit() {
	local rc=$? i
	trap - EXIT
	for ((i = ${#GUEST_LIB_CLEANUP[@]} - 1; i >= 0; i--)); do
		eval "${GUEST_LIB_CLEANUP[i]}" || true
	done
	for i in "${GUEST_LIB_BG[@]}"; do kill "$i" 2> /dev/null; done
	echo "RESULTS pass=$GUEST_LIB_PASS fail=$GUEST_LIB_FAIL skip=$GUEST_LIB_SKIP"
	if [ $rc = 0 ] && [ $GUEST_LIB_FAIL -gt 0 ]; then rc=1; fi
	exit $rc
}
trap _guest_lib_exit EXIT

# require <command...>: fail the script now (exit 1) when a prerequisite check fails.
require() {
	"$@" && return 0
	fail "require" "prerequisite '$*' failed"
	exit 1
}

# cpu_snapshot: prints "busy total" jiffies summed over all CPUs from /proc/stat.
# cpu_busy_pct <snapshot before> <snapshot after>: busy share of the interval in percent.
cpu_snapshot() { awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6 }' /proc/stat; }
cpu_busy_pct() {
	awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
		t = y[2] - x[2]; printf("%.1f\n", (t > 0) ? 100 * (y[1] - x[1]) / t : 0) }'
}

# bg_start <name> <command...>: start a background process with output in $OUT/<name>.log;
# it is killed at exit if still running. Sets BG_PID. Under TCG give servers 1-2 s before
# starting their clients.
bg_start() {
	local name=$1
	shift
	"$@" > "${OUT:-/tmp}/$name.log" 2>&1 &
	BG_PID=$!
	GUEST_LIB_BG+=("$BG_PID")
}

# wait_for <seconds> <command...>: poll the command every 0.2 s until it succeeds.
wait_for() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@" > /dev/null 2>&1; do
		[ "$(date +%s)" -lt $deadline ] || return 1
		sleep 0.2
	done
}

# null_blk_setup [size_GiB] [module params...]: load null_blk with one device (default
# 16 GiB, no data kept) and print its path (/dev/nullb0).
null_blk_setup() {
	local gb=${1:-16}
	shift || true
	if [ ! -b /dev/nullb0 ]; then
		timeout 60 modprobe null_blk nr_devices=1 gb="$gb" "$@" || {
			echo "null_blk_setup: modprobe null_blk failed" >&2
			return 1
		}
	fi
	wait_for 10 test -b /dev/nullb0 || {
		echo "null_blk_setup: /dev/nullb0 did not appear" >&2
		return 1
	}
	echo /dev/nullb0
}

# nvmet_setup <nqn> <block device or file> [port]: export it as namespace 1 of subsystem <nqn>
# from the Linux kernel target over rdma on $RXE_IP:<port> (default 4420), any host allowed.
# A file on a filesystem without O_DIRECT (tmpfs, the 9p root) falls back to buffered I/O;
# NVMET_BUFFERED_IO=1 asks for buffered I/O on a file from the start.
nvmet_setup() {
	local nqn=${1:?nvmet_setup: need an NQN} path=${2:?nvmet_setup: need a device or file} port=${3:-$NVMET_DEFAULT_PORT}
	local s=$NVMET_CFG/subsystems/$nqn p=$NVMET_CFG/ports/$port
	[ -e "$path" ] || {
		echo "nvmet_setup: $path does not exist" >&2
		return 1
	}
	timeout 60 modprobe -a nvmet nvmet-rdma || {
		echo "nvmet_setup: modprobe nvmet nvmet-rdma failed" >&2
		return 1
	}
	mkdir "$s" || {
		echo "nvmet_setup: cannot create subsystem $nqn" >&2
		return 1
	}
	echo 1 > "$s/attr_allow_any_host"
	mkdir "$s/namespaces/1"
	echo -n "$path" > "$s/namespaces/1/device_path"
	if [ "${NVMET_BUFFERED_IO:-0}" = 1 ] && [ -f "$path" ]; then
		echo 1 > "$s/namespaces/1/buffered_io"
	fi
	if ! echo 1 > "$s/namespaces/1/enable" 2> /dev/null; then
		if [ -f "$path" ]; then
			echo "nvmet_setup: enabling $path with O_DIRECT failed; using buffered_io=1" >&2
			echo 1 > "$s/namespaces/1/buffered_io" && echo 1 > "$s/namespaces/1/enable"
		fi || {
			echo "nvmet_setup: cannot enable namespace 1 ($path): $(dmesg | tail -n 2 | tr '\n' ' ')" >&2
			return 1
		}
	fi
	if [ ! -d "$p" ]; then
		mkdir "$p" &&
			echo rdma > "$p/addr_trtype" &&
			echo ipv4 > "$p/addr_adrfam" &&
			echo "$RXE_IP" > "$p/addr_traddr" &&
			echo "$port" > "$p/addr_trsvcid" || {
			echo "nvmet_setup: cannot configure port $port on $RXE_IP" >&2
			return 1
		}
	fi
	ln -s "$s" "$p/subsystems/$nqn" || {
		echo "nvmet_setup: cannot enable $nqn on port $port (see dmesg)" >&2
		return 1
	}
}

# nvmet_teardown [nqn]: remove that subsystem (default: every subsystem) and every port left
# without subsystems; hosts still connected to it are disconnected first.
nvmet_teardown() {
	[ -d $NVMET_CFG ] || return 0
	local nqns=("$@") nqn s l p
	if [ ${#nqns[@]} -eq 0 ]; then
		for s in "$NVMET_CFG"/subsystems/*; do [ -d "$s" ] && nqns+=("${s##*/}"); done
	fi
	for nqn in "${nqns[@]}"; do
		s=$NVMET_CFG/subsystems/$nqn
		[ -d "$s" ] || continue
		if grep -qsx "$nqn" /sys/class/nvme/nvme*/subsysnqn; then
			timeout 60 nvme disconnect -n "$nqn" > /dev/null
		fi
		for l in "$NVMET_CFG"/ports/*/subsystems/"$nqn"; do [ -L "$l" ] && rm -f "$l"; done
		for l in "$s"/namespaces/*; do
			[ -d "$l" ] || continue
			echo 0 > "$l/enable"
			rmdir "$l"
		done
		rmdir "$s"
	done
	for p in "$NVMET_CFG"/ports/*; do
		[ -d "$p" ] || continue
		[ -z "$(ls -A "$p/subsystems")" ] && rmdir "$p"
	done
	[ -z "$(ls -A "$NVMET_CFG/subsystems")" ]
}

# nvme_discover [port]: the discovery log of $RXE_IP:<port> (default 4420) over rdma.
nvme_discover() {
	timeout -k 5 60 modprobe nvme-rdma || {
		echo "nvme_discover: modprobe nvme-rdma failed" >&2
		return 1
	}
	timeout -k 5 90 nvme discover -t rdma -a "$RXE_IP" -s "${1:-$NVMET_DEFAULT_PORT}"
}

# ---- the Linux host's controllers and namespaces ----
# The helpers that poll use shell builtins only (no fork, no exec): under TCG every process
# start costs tens of milliseconds of the vCPUs a measured connect needs. Results come back
# in variables (NVME_*), so call them directly, not in $(...).
GUEST_LIB_SYS=${GUEST_LIB_SYS:-/sys} # sysfs and the device directory (tests point them
GUEST_LIB_DEV=${GUEST_LIB_DEV:-/dev} # at a fake tree)

# nap <seconds>: sleep without starting a process (a read with a timeout on a FIFO that
# nobody writes, opened once when this library is sourced).
GUEST_LIB_NAP_FD=
_guest_lib_nap_fifo=$(mktemp -u "${TMPDIR:-/tmp}/guest-lib-nap.XXXXXX") && mkfifo "$_guest_lib_nap_fifo" &&
	exec {GUEST_LIB_NAP_FD}<> "$_guest_lib_nap_fifo"
rm -f "$_guest_lib_nap_fifo"
nap() {
	if [ -n "$GUEST_LIB_NAP_FD" ]; then
		read -r -t "$1" -u "$GUEST_LIB_NAP_FD" _ || :
	else
		sleep "$1"
	fi
}

# since <a $EPOCHREALTIME value>: prints the seconds since then, with 3 decimals.
since() {
	local d=$((${EPOCHREALTIME/./} - ${1/./}))
	printf '%d.%03d' $((d / 1000000)) $((d % 1000000 / 1000))
}

# nvme_ctrls <nqn>: sets NVME_CTRLS to the Linux host's controllers (nvmeN) of that
# subsystem; returns 1 when it has none.
nvme_ctrls() {
	local c v
	NVME_CTRLS=()
	for c in "$GUEST_LIB_SYS"/class/nvme/nvme*; do
		read -r v 2> /dev/null < "$c/subsysnqn" && [ "$v" = "$1" ] && NVME_CTRLS+=("${c##*/}")
	done
	[ ${#NVME_CTRLS[@]} -gt 0 ]
}

# nvme_ns_devs <nqn>: sets NVME_NS_DEVS to the namespace block devices (/dev/nvmeXnY) of
# that subsystem, by NSID; returns 1 when there are none. With native multipath these are
# the subsystem's heads (the per-controller paths nvmeXcYnZ are hidden); without, each
# controller's namespaces.
nvme_ns_devs() {
	local b v nsid i j n
	local -a ids=() devs=()
	NVME_NS_DEVS=()
	for b in "$GUEST_LIB_SYS"/block/nvme*; do
		case ${b##*/} in nvme*c*) continue ;; esac
		# the head's device is the subsystem, a plain namespace's its controller
		read -r v 2> /dev/null < "$b/device/subsysnqn" && [ "$v" = "$1" ] && [ -b "$GUEST_LIB_DEV/${b##*/}" ] || continue
		read -r nsid 2> /dev/null < "$b/nsid" || nsid=0
		ids+=("$nsid")
		devs+=("$GUEST_LIB_DEV/${b##*/}")
	done
	n=${#ids[@]}
	for ((i = 1; i < n; i++)); do # insertion sort by NSID, then name
		for ((j = i; j > 0; j--)); do
			((ids[j - 1] > ids[j])) || { ((ids[j - 1] == ids[j])) && [[ ${devs[j - 1]} > ${devs[j]} ]]; } || break
			v=${ids[j]} ids[j]=${ids[j - 1]} ids[j - 1]=$v
			v=${devs[j]} devs[j]=${devs[j - 1]} devs[j - 1]=$v
		done
	done
	NVME_NS_DEVS=("${devs[@]}")
	[ "$n" -gt 0 ]
}

# nvme_wait_ctrl <nqn> "<controllers before>" [timeout_s]: wait (default 60 s) until a
# controller of the subsystem that is not in the list (" nvme0 nvme1 ", as nvme_ctrls gave
# before connecting) is live with its namespaces, and their block devices exist. Sets
# NVME_CTRL (nvmeN) and NVME_NS_DEVS; on timeout sets NVME_ERR, prints it and returns 1.
nvme_wait_ctrl() {
	local nqn=$1 before=$2 c st ns polls=0 deadline=$((${EPOCHREALTIME%.*} + ${3:-60}))
	NVME_CTRL= NVME_ERR=
	while :; do
		if [ -z "$NVME_CTRL" ] && nvme_ctrls "$nqn"; then
			for c in "${NVME_CTRLS[@]}"; do [[ $before == *" $c "* ]] || NVME_CTRL=$c; done
		fi
		if [ -n "$NVME_CTRL" ] && read -r st 2> /dev/null < "$GUEST_LIB_SYS/class/nvme/$NVME_CTRL/state" && [ "$st" = live ]; then
			ns=("$GUEST_LIB_SYS"/class/nvme/"$NVME_CTRL"/nvme*n*)
			[ -e "${ns[0]}" ] && nvme_ns_devs "$nqn" && return 0
		fi
		if [ "${EPOCHREALTIME%.*}" -ge $deadline ]; then
			NVME_ERR="no live controller with a namespace of $nqn ${3:-60} s after connecting (controller '$NVME_CTRL'); dmesg: $(dmesg | tail -n 3 | tr '\n' ' ')"
			echo "nvme_wait_ctrl: $NVME_ERR" >&2
			return 1
		fi
		# Steps of 10 ms for the first 2 s: guest-bench times connects to this wait's end,
		# and steps of 100 ms would round a connect of ~300 ms up by as much as a third.
		if ((polls++ < 200)); then nap 0.01; else nap 0.1; fi
	done
}

# nvme_connect_new <nqn> <port> [nvme-connect options...]: connect the Linux host over rdma
# to $RXE_IP:<port> and wait until the new controller is live with its namespaces (see
# nvme_wait_ctrl). Sets NVME_CTRL, NVME_NS_DEVS and NVME_CONNECT_S (seconds from the start
# of nvme connect until then); on failure sets NVME_ERR, prints it and returns 1.
nvme_connect_new() {
	local nqn=${1:?nvme_connect_new: need an NQN} port=${2:?nvme_connect_new: need a port} before t0 f
	shift 2
	NVME_CONNECT_S= NVME_CTRL= NVME_NS_DEVS=() NVME_ERR=
	if ! [ -d "$GUEST_LIB_SYS/module/nvme_rdma" ]; then
		timeout -k 5 60 modprobe nvme-rdma || {
			NVME_ERR="modprobe nvme-rdma failed"
			echo "nvme_connect_new: $NVME_ERR" >&2
			return 1
		}
	fi
	nvme_ctrls "$nqn"
	before=" ${NVME_CTRLS[*]} "
	f=${OUT:-/tmp}/.nvme-connect.log
	t0=$EPOCHREALTIME
	if ! timeout -k 5 90 nvme connect -t rdma -a "$RXE_IP" -s "$port" -n "$nqn" "$@" > "$f" 2>&1; then
		NVME_ERR="nvme connect -t rdma -a $RXE_IP -s $port -n $nqn failed: $(tail -n 1 "$f"); dmesg: $(dmesg | tail -n 3 | tr '\n' ' ')"
		echo "nvme_connect_new: $NVME_ERR" >&2
		rm -f "$f"
		return 1
	fi
	rm -f "$f"
	nvme_wait_ctrl "$nqn" "$before" || return 1
	NVME_CONNECT_S=$(since "$t0")
}

# nvme_connect <nqn> [port] [nvme-connect options...]: nvme_connect_new (port default 4420),
# then print the subsystem's namespace devices, one per line, by NSID (for $(...) and
# mapfile).
nvme_connect() {
	local nqn=${1:?nvme_connect: need an NQN} port=${2:-$NVMET_DEFAULT_PORT}
	shift 2 || shift $#
	nvme_connect_new "$nqn" "$port" "$@" > /dev/null || return 1
	printf '%s\n' "${NVME_NS_DEVS[@]}"
}

# wait_for_nvme_ns <nqn> [timeout_s]: wait (default 30 s) until the Linux host shows a
# namespace of that subsystem; print its /dev/nvmeXnY, one line per namespace, by NSID.
wait_for_nvme_ns() {
	local nqn=${1:?wait_for_nvme_ns: need an NQN} deadline=$((${EPOCHREALTIME%.*} + ${2:-30}))
	until nvme_ns_devs "$nqn"; do
		if [ "${EPOCHREALTIME%.*}" -ge $deadline ]; then
			echo "wait_for_nvme_ns: no namespace of $nqn appeared within ${2:-30} s" >&2
			return 1
		fi
		nap 0.2
	done
	printf '%s\n' "${NVME_NS_DEVS[@]}"
}

# nvme_disconnect <nqn> [timeout_s]: disconnect the Linux host's controllers of that
# subsystem and wait (default 30 s) until they are gone.
nvme_disconnect() {
	local deadline
	nvme_ctrls "$1" || return 0
	timeout -k 5 60 nvme disconnect -n "$1" > /dev/null 2>&1
	deadline=$((${EPOCHREALTIME%.*} + ${2:-30}))
	while nvme_ctrls "$1"; do
		if [ "${EPOCHREALTIME%.*}" -ge $deadline ]; then
			echo "nvme_disconnect: controllers of $1 still present ${2:-30} s after nvme disconnect: ${NVME_CTRLS[*]}" >&2
			return 1
		fi
		nap 0.1
	done
}

_nvme_ctrls_present() { compgen -G "$GUEST_LIB_SYS/class/nvme/nvme*" > /dev/null; }

# nvme_disconnect_all: disconnect every fabrics controller of the Linux host and wait until
# they are gone (30 s at most).
nvme_disconnect_all() {
	_nvme_ctrls_present || return 0
	timeout -k 5 60 nvme disconnect-all > /dev/null 2>&1
	wait_for 30 eval '! _nvme_ctrls_present' || {
		echo "nvme_disconnect_all: controllers still present: $(ls "$GUEST_LIB_SYS"/class/nvme/ | tr '\n' ' ')" >&2
		return 1
	}
}

# fio_verify_run <name> <seconds> <fio options and jobs...>: fio with crc32c headers on
# every block written, read back and checked by each job (--verify_fatal); JSON in
# $OUT/fio-<name>.json, log in $OUT/fio-<name>.log. Fails when fio fails, a job reports an
# error, or a job read nothing back (then nothing was verified); prints each job's rates.
fio_verify_run() {
	local name=$1 secs=$2
	shift 2
	timeout -k 10 "$secs" fio --output-format=json --output="$OUT/fio-$name.json" \
		--ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 \
		--verify_state_save=0 --randrepeat=1 --group_reporting=0 "$@" \
		> "$OUT/fio-$name.log" 2>&1 || {
		echo "fio $name failed: $(grep -E 'verify|error|bad' "$OUT/fio-$name.log" | head -n 3 | tr '\n' ' ')" >&2
		return 1
	}
	python3 - "$OUT/fio-$name.json" << 'PY'
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
bad = [j["jobname"] for j in jobs if j["error"] != 0]
if bad:
    sys.exit("jobs with errors: %s" % bad)
for j in jobs:
    w, r = j["write"], j["read"]
    print("%-9s write %6.1f MiB %7.0f IOPS   verify-read %6.1f MiB %7.0f IOPS" % (
        j["jobname"], w["io_bytes"] / 1048576, w["iops"], r["io_bytes"] / 1048576, r["iops"]))
    if r["io_bytes"] == 0:
        sys.exit("%s read nothing back: nothing was verified" % j["jobname"])
PY
}

# ---- gonvmf serve ----
GONVMF_BIN=${GONVMF_BIN:-${GONVMF_BUILD:-}/bin/gonvmf}

# need_gonvmf: the suite cannot run without the gonvmf binary ($GONVMF_BIN, which
# integration/run-tests.sh builds): a failed check, and the suite ends.
need_gonvmf() {
	[ -x "$GONVMF_BIN" ] && return 0
	fail gonvmf-binary "no executable $GONVMF_BIN (integration/run-tests.sh builds it)"
	finish
}

# need_scratch: the same for the scratch disk (vm.sh run --disk; "# vm: --disk" in a suite).
need_scratch() {
	[ -n "${SCRATCH:-}" ] && return 0
	fail scratch "no scratch disk (run with --disk)"
	finish
}

GONVMF_PID=

# gonvmf_listening <address> <port>: a userspace RDMA CM id (gonvmf's) listens there.
gonvmf_listening() {
	rdma resource show cm_id 2> /dev/null | grep -w LISTEN | grep -v '\[' | grep -q "src-addr $1:$2 "
}

# gonvmf_start <name> <config> [address [port]]: `$GONVMF_BIN serve --config <config>` in
# the background, output in $GONVMF_LOG_DIR/<name>.log (GONVMF_LOG; the directory defaults
# to $OUT, the results share), and wait (60 s) until it listens on <address>:<port>
# (default $RXE_IP:4420). Sets GONVMF_PID. On failure sets GONVMF_ERR, prints it and
# returns 1 with nothing left running. One gonvmf at a time; register
# `on_exit gonvmf_stop` before connecting hosts to it (so that they disconnect first).
# The results share is 9p: each log line gonvmf writes there waits for the VM's host, in
# serve's log goroutine (the thread that logged, a poll group's on connect and disconnect,
# before 461dcf4). A script that times connections points GONVMF_LOG_DIR at the guest's
# tmpfs and copies the log out itself.
gonvmf_start() {
	local name=${1:?gonvmf_start: need a name} cfg=${2:?gonvmf_start: need a configuration} addr=${3:-$RXE_IP} port=${4:-$NVMET_DEFAULT_PORT} deadline
	GONVMF_ERR= GONVMF_LOG=${GONVMF_LOG_DIR:-${OUT:-/tmp}}/$name.log
	if [ -n "$GONVMF_PID" ]; then
		GONVMF_ERR="gonvmf (pid $GONVMF_PID) is running already"
	elif [ ! -x "$GONVMF_BIN" ]; then
		GONVMF_ERR="no gonvmf binary at '$GONVMF_BIN' (integration/run-tests.sh builds it)"
	fi
	if [ -n "$GONVMF_ERR" ]; then
		echo "gonvmf_start: $GONVMF_ERR" >&2
		return 1
	fi
	"$GONVMF_BIN" serve --config "$cfg" > "$GONVMF_LOG" 2>&1 &
	GONVMF_PID=$!
	GUEST_LIB_BG+=("$GONVMF_PID")
	deadline=$((${EPOCHREALTIME%.*} + 60))
	until gonvmf_listening "$addr" "$port"; do
		if ! kill -0 "$GONVMF_PID" 2> /dev/null; then
			wait "$GONVMF_PID"
			GONVMF_ERR="gonvmf serve exited with status $? before listening: $(grep -v '^\s*$' "$GONVMF_LOG" | tail -n 1)"
			GONVMF_PID=
			echo "gonvmf_start: $GONVMF_ERR" >&2
			return 1
		fi
		if [ "${EPOCHREALTIME%.*}" -ge $deadline ]; then
			GONVMF_ERR="gonvmf serve (pid $GONVMF_PID) shows no RDMA listener on $addr:$port after 60 s: $(grep -v '^\s*$' "$GONVMF_LOG" | tail -n 1)"
			echo "gonvmf_start: $GONVMF_ERR" >&2
			gonvmf_stop 5 > /dev/null 2>&1
			return 1
		fi
		nap 0.2
	done
}

# gonvmf_stop [timeout_s]: SIGTERM the gonvmf gonvmf_start started and wait (default 60 s)
# for it; returns its exit status (0 after an orderly shutdown). One that does not exit in
# time is killed (status 1, with a message). Nothing running: 0.
gonvmf_stop() {
	[ -n "$GONVMF_PID" ] || return 0
	local pid=$GONVMF_PID rc deadline=$((${EPOCHREALTIME%.*} + ${1:-60}))
	GONVMF_PID=
	kill -TERM "$pid" 2> /dev/null
	while kill -0 "$pid" 2> /dev/null; do
		if [ "${EPOCHREALTIME%.*}" -ge $deadline ]; then
			echo "gonvmf_stop: gonvmf (pid $pid) still running ${1:-60} s after SIGTERM; killing it" >&2
			kill -KILL "$pid" 2> /dev/null
			wait "$pid" 2> /dev/null
			return 1
		fi
		nap 0.1
	done
	wait "$pid"
	rc=$?
	[ $rc = 0 ] || echo "gonvmf_stop: gonvmf exited $rc after SIGTERM: $(tail -n 2 "$GONVMF_LOG" 2> /dev/null | tr '\n' ' ')" >&2
	return $rc
}

# fio_read <json> <python expression of j (the first job) and r (its reads)>: prints it
# (nothing when the file holds no job). fio ended by a signal writes a line about it before
# its JSON.
fio_read() {
	python3 -c 'import json,sys
t = open(sys.argv[1]).read()
j = json.loads(t[t.index("{"):])["jobs"][0]
r = j["read"]
print(eval(sys.argv[2]))' "$1" "$2" 2> /dev/null
}

# host_no_timeouts <name>: saves dmesg as $OUT/dmesg-<name>.txt and passes the check
# host-no-timeouts if the Linux host logged no I/O timeout, error recovery, reconnect or
# controller reset (keep-alive lines, and the host's note of the shutdown timeout the
# controller's RTD3E sets, aside); else fails it with the first two such lines (all in
# $OUT/host-errors.txt).
host_no_timeouts() {
	dmesg > "$OUT/dmesg-$1.txt"
	if grep -E -i "timeout|error recovery|reconnect|resetting controller" "$OUT/dmesg-$1.txt" |
		grep -v -i -E "keep.alive|shutdown timeout set to" > "$OUT/host-errors.txt"; then
		fail host-no-timeouts "the Linux host saw: $(head -n 2 "$OUT/host-errors.txt" | tr '\n' ' ')"
	else
		pass host-no-timeouts
	fi
}

# fio_summary <fio json>: one line per job and direction with I/O:
#   <job> <read|write>: iops=N MiB/s=N lat_p50_us=N lat_p99_us=N
# (needs fio's --lat_percentiles=1 for completion+submission latency percentiles; otherwise
# the completion latency percentiles are used).
fio_summary() {
	python3 - "$1" << 'PY'
import json, sys
try:
    jobs = json.load(open(sys.argv[1]))["jobs"]
except (OSError, ValueError, KeyError) as e:
    sys.exit("fio_summary: cannot read %s: %s" % (sys.argv[1], e))
for j in jobs:
    for d in ("read", "write"):
        s = j.get(d, {})
        if not s.get("io_bytes"):
            continue
        lat = s.get("lat_ns", {}).get("percentile") or s.get("clat_ns", {}).get("percentile") or {}
        us = lambda k: "%.0f" % (lat[k] / 1000.0) if k in lat else "n/a"
        print("%s %s: iops=%.0f MiB/s=%.1f lat_p50_us=%s lat_p99_us=%s" % (
            j["jobname"], d, s["iops"], s["bw_bytes"] / 1048576.0, us("50.000000"), us("99.000000")))
PY
}
