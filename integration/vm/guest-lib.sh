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
# A file on a filesystem without O_DIRECT (tmpfs, the 9p root) falls back to buffered I/O.
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

# nvme_connect <nqn> [port] [nvme-connect options...]: connect the Linux host over rdma to
# $RXE_IP:<port> (default 4420) and print the namespace device(s) (see wait_for_nvme_ns).
nvme_connect() {
	local nqn=${1:?nvme_connect: need an NQN} port=${2:-$NVMET_DEFAULT_PORT}
	shift 2 || shift $#
	timeout -k 5 60 modprobe nvme-rdma || {
		echo "nvme_connect: modprobe nvme-rdma failed" >&2
		return 1
	}
	timeout -k 5 90 nvme connect -t rdma -a "$RXE_IP" -s "$port" -n "$nqn" "$@" > /dev/null || {
		echo "nvme_connect: nvme connect -t rdma -a $RXE_IP -s $port -n $nqn failed: $(dmesg | tail -n 3 | tr '\n' ' ')" >&2
		return 1
	}
	wait_for_nvme_ns "$nqn"
}

# wait_for_nvme_ns <nqn> [timeout_s]: wait (default 30 s) until the Linux host shows a
# namespace of that subsystem; print its /dev/nvmeXnY, one line per namespace, by NSID.
wait_for_nvme_ns() {
	local nqn=${1:?wait_for_nvme_ns: need an NQN} deadline=$(($(date +%s) + ${2:-30})) b found
	while :; do
		found=$(for b in /sys/block/nvme*; do
			[ -e "$b" ] || continue
			case ${b##*/} in nvme*c*) continue ;; esac # multipath's hidden per-controller paths
			# the head's device is the subsystem, a plain namespace's its controller
			[ "$(cat "$b/device/subsysnqn" 2> /dev/null)" = "$nqn" ] || continue
			[ -b "/dev/${b##*/}" ] || continue
			echo "$(cat "$b/nsid" 2> /dev/null || echo 0) /dev/${b##*/}"
		done | sort -n | cut -d' ' -f2)
		if [ -n "$found" ]; then
			echo "$found"
			return 0
		fi
		if [ "$(date +%s)" -ge $deadline ]; then
			echo "wait_for_nvme_ns: no namespace of $nqn appeared within ${2:-30} s" >&2
			return 1
		fi
		sleep 0.2
	done
}

_nvme_ctrls_present() { compgen -G '/sys/class/nvme/nvme*' > /dev/null; }

# nvme_disconnect_all: disconnect every fabrics controller of the Linux host and wait until
# they are gone (30 s at most).
nvme_disconnect_all() {
	_nvme_ctrls_present || return 0
	timeout -k 5 60 nvme disconnect-all > /dev/null 2>&1
	wait_for 30 eval '! _nvme_ctrls_present' || {
		echo "nvme_disconnect_all: controllers still present: $(ls /sys/class/nvme/ | tr '\n' ' ')" >&2
		return 1
	}
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
