#!/bin/bash
# 60-ha-failover: high availability with ANA. Two `gonvmf serve` processes (A on port 4420,
# B on 4421) serve the same subsystem from the same file (shared: true) with disjoint
# controller ID ranges; A reports ANA group 1 optimized, B inaccessible. The Linux host
# connects to both: native multipath makes one /dev/nvmeXnY over two controllers, and
# nvme list-subsys shows both paths with their ANA states. Then, with fio writing and
# verifying (crc32c) through the multipath device:
#   1. failover: kill -9 A mid-fio, set B optimized (rewrite its file, SIGHUP); fio ends with
#      0 I/O errors and 0 verify errors; A restarts inaccessible and the host re-adds its path;
#   2. planned switchover, both alive, with gonvmf ctl ana set: A to optimized (the host
#      moves its I/O there), B to change, B to inaccessible; no I/O fails.
# The same two steps then run against the Linux target (two nvmet ports with ANA group 1;
# "killing" A is unlinking the subsystem from its port, which drops its controllers), and
# $OUT/failover.txt compares the failover times: from the host's last I/O completion before
# A died to its first completion after (fio's per-I/O latency log, on the guest's clock).
# GONVMF_HA_FIO_SIZE (default 16M) sets how much each fio run writes and verifies.
# vm: --timeout 1800 --disk 2G
. "$SRC/integration/vm/guest-lib.sh"

NQN=nqn.2024-01.io.gonvmf:ha
KNQN=nqn.2024-01.io.gonvmf:ha-kernel
PA=4420
PB=4421
IMG=$SCRATCH/ha.img
KIMG=$SCRATCH/ha-kernel.img
CFG_A=$SCRATCH/ha-a.yaml
CFG_B=$SCRATCH/ha-b.yaml
FIO_SIZE=${GONVMF_HA_FIO_SIZE:-16M}
PID_A= PID_B=
STARTS=0

need_gonvmf
need_scratch
timeout -k 5 60 modprobe nvme-rdma || fail modprobe nvme-rdma

# ha_config <file> <port> <state of group 1> <cntlid_min> <cntlid_max> <control socket>: one
# target's configuration. Both targets' files differ only in the listener, its state, the
# controller ID range and the control socket: same NQN, namespace and backing file, so the
# same serial, model, UUID, NGUID and EUI-64. Written with builtins only (no process started: under TCG a fork
# costs tens of milliseconds, and a switchover is timed); the target reads it only at
# start and on SIGHUP, which comes after.
ha_config() {
	printf '%s\n' "listeners:" "  - address: $RXE_IP" "    port: $2" "    ana_states: {1: $3}" \
		"subsystems:" "  - nqn: $NQN" "    cntlid_min: $4" "    cntlid_max: $5" "    allow_any_host: true" \
		"    namespaces:" "      - {nsid: 1, backend: file, path: $IMG, size: 256MiB, shared: true}" \
		"transport: {buffer_pool_size: 16MiB, poll_groups: 1, max_io_queues: 2}" "control: {socket: $6}" > "$1"
}
SOCK_A=$SCRATCH/ctl-a/gonvmf.sock
SOCK_B=$SCRATCH/ctl-b/gonvmf.sock
config_a() { ha_config "$CFG_A" $PA "$1" 1 32767 "$SOCK_A"; }
config_b() { ha_config "$CFG_B" $PB "$1" 32768 65519 "$SOCK_B"; }
# ctl <A|B> <ctl arguments...>: gonvmf ctl on that target's control socket.
ctl() {
	local sock=$SOCK_A
	[ "$1" = B ] && sock=$SOCK_B
	shift
	"$GONVMF_BIN" ctl --socket "$sock" "$@"
}

# ha_start <A|B>: start that target (its log is $OUT/gonvmf-<a|b>-N.log); sets PID_A/PID_B.
ha_start() {
	local cfg=$CFG_A port=$PA
	[ "$1" = B ] && cfg=$CFG_B port=$PB
	STARTS=$((STARTS + 1))
	GONVMF_PID=
	gonvmf_start "gonvmf-${1,,}-$STARTS" "$cfg" "$RXE_IP" $port || return 1
	printf -v "PID_$1" %s "$GONVMF_PID"
	printf -v "LOG_$1" %s "$GONVMF_LOG"
	GONVMF_PID=
}
# ha_stop <A|B>: SIGTERM and wait (guest-lib's gonvmf_stop on that process).
ha_stop() {
	local v=PID_$1
	GONVMF_PID=${!v}
	printf -v "PID_$1" %s ""
	gonvmf_stop
}
# reloads <log>: sets N to the number of SIGHUP reloads the target finished (applied or
# not) and BAD to the number refused or failed (builtins only).
reloads() {
	local l
	N=0 BAD=0
	while IFS= read -r l; do
		case $l in
		*'msg="reload: '*' applied"'*) N=$((N + 1)) ;;
		*'msg="reload refused'* | *'msg="reload failed"'*) N=$((N + 1)) BAD=$((BAD + 1)) ;;
		esac
	done < "$1"
}
# ha_set <A|B> <state>: rewrite the target's file with the new state of group 1 and SIGHUP
# it (T_HUP: when); wait (30 s) until it logged the reload.
ha_set() {
	local pid=PID_$1 log=LOG_$1 n bad deadline=$((${EPOCHREALTIME%.*} + 30))
	"config_${1,,}" "$2"
	reloads "${!log}"
	n=$N bad=$BAD
	T_HUP=$EPOCHREALTIME
	kill -HUP "${!pid}" || return 1
	while reloads "${!log}"; [ "$N" -le $n ]; do
		[ "${EPOCHREALTIME%.*}" -lt $deadline ] || return 1
		nap 0.02
	done
	[ "$BAD" = "$bad" ] || {
		echo "ha_set $1 $2: the reload was refused: $(grep -E 'reload (refused|failed)' "${!log}" | tail -n 1)" >&2
		return 1
	}
}
on_exit ha_stop A
on_exit ha_stop B
on_exit nvmet_teardown
on_exit nvme_disconnect_all

# path_state <ctrl>: sets STATE to the host's ANA state of that controller's path to
# namespace 1 and CSTATE to the controller's state.
path_state() {
	STATE=none CSTATE=none
	local f
	for f in /sys/class/nvme/"$1"/nvme*c*n1/ana_state; do read -r STATE < "$f" 2> /dev/null; done
	read -r CSTATE < "/sys/class/nvme/$1/state" 2> /dev/null
}
# wait_path <ctrl> <state> [sec]: until that path is live in that ANA state.
wait_path() {
	local deadline=$((${EPOCHREALTIME%.*} + ${3:-60}))
	while path_state "$1"; [ "$CSTATE" != live ] || [ "$STATE" != "$2" ]; do
		[ "${EPOCHREALTIME%.*}" -lt $deadline ] || {
			echo "wait_path: $1 is $CSTATE/$STATE after ${3:-60} s, want live/$2" >&2
			return 1
		}
		nap 0.2
	done
}
# head_writes <dev>: sets WRITES to the writes the paths of the multipath device (nvmeXnY:
# its paths are nvmeXcYnY) completed; the 6.1 kernel keeps no I/O statistics on the head.
head_writes() {
	local n=${1#/dev/} f s
	WRITES=0
	for f in /sys/block/"${n%n*}"c*n"${n##*n}"/stat; do
		read -r -a s < "$f" 2> /dev/null || continue
		WRITES=$((WRITES + s[4]))
	done
}
# wait_writes <dev> <more> [sec]: until the device completed <more> writes beyond now.
wait_writes() {
	local want deadline=$((${EPOCHREALTIME%.*} + ${3:-120}))
	head_writes "$1"
	want=$((WRITES + $2))
	while head_writes "$1"; [ "$WRITES" -lt $want ]; do
		[ "${EPOCHREALTIME%.*}" -lt $deadline ] || return 1
		nap 0.1
	done
}
# ctrl_writes <ctrl>: the target's count of write commands (SMART Host Write Commands) as
# reported through that controller.
ctrl_writes() {
	nvme smart-log "/dev/$1" -o json 2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["host_write_commands"])' 2> /dev/null || echo 0
}

# fio_start <name> <dev>: fio writing and verifying (crc32c, verify_backlog) in the
# background, every I/O's completion time (epoch ms) in $OUT/<name>_lat.1.log.
fio_start() {
	fio --name="$1" --filename="$2" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
		--size="$FIO_SIZE" --verify=crc32c --verify_backlog=512 --verify_fatal=1 --verify_state_save=0 \
		--write_lat_log="$OUT/$1" --log_avg_msec=0 --log_unix_epoch=1 \
		--output-format=json --output="$OUT/$1.json" > "$OUT/$1.log" 2>&1 &
	FIO_PID=$!
}
# fio_done <name>: wait for it (call it directly, not in $(...): only this shell can wait
# for fio); 0 when fio exited 0 with no I/O or verify error and verified everything it
# wrote. FIO_RES is the summary or why not.
fio_done() {
	local rc=0
	wait "$FIO_PID" || rc=$?
	if [ $rc != 0 ]; then
		FIO_RES="fio $1 exited $rc: $(grep -E 'verify|error|bad|fail' "$OUT/$1.log" | head -n 3 | tr '\n' ' ')"
		return 1
	fi
	FIO_RES=$(python3 - "$OUT/$1.json" 2>&1 << 'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
w, r = j["write"], j["read"]
print("error=%d writes=%d verify-reads=%d" % (j["error"], w["total_ios"], r["total_ios"]))
if j["error"] or w.get("total_ios", 0) == 0 or r.get("total_ios", 0) < w["total_ios"]:
    sys.exit("fio reported an error or did not verify everything it wrote")
PY
	)
}
# gap <name> <event epoch time> <switch epoch time>: the failover time from fio's latency
# log: the longest pause between two completions from the host's last completion at or
# before the event (A dies) to its first one after the switch (B told to become
# optimized): "gap_ms=N". Also: the time from the switch to the first completion after it
# (the target's and the host's share, without fencing A and deciding), that fencing and
# deciding time, and the longest gap between completions in the 10 s before the event
# (what TCG alone causes).
gap() {
	python3 - "$OUT/$1_lat.1.log" "$2" "$3" << 'PY'
import sys
t = sorted(int(l.split(",")[0]) for l in open(sys.argv[1]))
ev, sw = float(sys.argv[2]) * 1000, float(sys.argv[3]) * 1000
before = [x for x in t if x <= ev]
after = [x for x in t if x > sw]
if not before or not after:
    sys.exit("no completions on both sides of the failover (%d before, %d after)" % (len(before), len(after)))
win = [x for x in t if before[-1] <= x <= after[0]]
w = [x for x in before if x >= ev - 10000]
base = max([b - a for a, b in zip(w, w[1:])] or [0])
print("gap_ms=%d switch_to_io_ms=%d fence_and_switch_ms=%d baseline_max_gap_ms=%d completions_before=%d after=%d" % (
    max(b - a for a, b in zip(win, win[1:])), after[0] - sw, sw - ev, base, len(before), len(after)))
PY
}
# stall <name> <event epoch time>: the longest gap between completions from 1 s before the
# event to 30 s after (a switchover with both targets alive may pause I/O, not fail it).
stall() {
	python3 - "$OUT/$1_lat.1.log" "$2" << 'PY'
import sys
t = sorted(int(l.split(",")[0]) for l in open(sys.argv[1]))
ev = float(sys.argv[2]) * 1000
w = [x for x in t if ev - 1000 <= x <= ev + 30000]
if not any(x > ev for x in w):
    sys.exit("no completions after the switch: fio ended before it")
print("stall_ms=%d completions_in_window=%d" % (max([b - a for a, b in zip(w, w[1:])] or [0]), len(w)))
PY
}
RESULTS=$OUT/failover.txt
record() { echo "$*" | tee -a "$RESULTS"; }

# =============================== gonvmf ===============================
log "two gonvmf targets: A $RXE_IP:$PA optimized, B $RXE_IP:$PB inaccessible, one file"
config_a optimized
config_b inaccessible
cp "$CFG_A" "$OUT/ha-a.yaml"
cp "$CFG_B" "$OUT/ha-b.yaml"
check gonvmf-check-a "$GONVMF_BIN" check -q --config "$CFG_A"
check gonvmf-check-b "$GONVMF_BIN" check -q --config "$CFG_B"
check start-a ha_start A || finish
check start-b ha_start B || finish
nap 1 # TCG: give the servers a head start

# -c 1: reconnect every second, so a restarted target's path comes back quickly.
nvme_connect_new "$NQN" $PA -c 1 || {
	fail connect-a "$NVME_ERR"
	finish
}
CA=$NVME_CTRL
nvme_connect_new "$NQN" $PB -c 1 || {
	fail connect-b "$NVME_ERR"
	finish
}
CB=$NVME_CTRL
nvme_ctrls "$NQN"
nvme_ns_devs "$NQN"
DEV=${NVME_NS_DEVS[0]}
if [ ${#NVME_CTRLS[@]} = 2 ] && [ ${#NVME_NS_DEVS[@]} = 1 ] && [[ $DEV != *c* ]]; then
	pass multipath "one device $DEV over controllers ${NVME_CTRLS[*]}"
else
	fail multipath "controllers '${NVME_CTRLS[*]}', devices '${NVME_NS_DEVS[*]}': want 2 controllers, 1 multipath device"
	finish
fi
read -r IDA < "/sys/class/nvme/$CA/cntlid"
read -r IDB < "/sys/class/nvme/$CB/cntlid"
if [ "$IDA" -ge 1 ] && [ "$IDA" -le 32767 ] && [ "$IDB" -ge 32768 ] && [ "$IDB" -le 65519 ]; then
	pass cntlid-ranges "A $IDA, B $IDB"
else
	fail cntlid-ranges "A $IDA (want 1..32767), B $IDB (want 32768..65519)"
fi
nvme list-subsys "$DEV" > "$OUT/list-subsys-1.txt" 2>&1
cat "$OUT/list-subsys-1.txt"
if grep -q "$CA rdma traddr=$RXE_IP,trsvcid=$PA live optimized" "$OUT/list-subsys-1.txt" &&
	grep -q "$CB rdma traddr=$RXE_IP,trsvcid=$PB live inaccessible" "$OUT/list-subsys-1.txt"; then
	pass list-subsys "A optimized, B inaccessible"
else
	fail list-subsys "$(tr '\n' ' ' < "$OUT/list-subsys-1.txt")"
fi
nvme id-ctrl "/dev/$CA" > "$OUT/id-ctrl-a.txt" 2>&1
nvme id-ctrl "/dev/$CB" > "$OUT/id-ctrl-b.txt" 2>&1
want_id='^(sn|mn|cmic|oaes|anatt|anacap|anagrpmax|nanagrpid|mnan) '
if grep -qE '^cmic +: 0xb$' "$OUT/id-ctrl-a.txt" && grep -qE '^anacap +: 31$' "$OUT/id-ctrl-a.txt" &&
	grep -qE '^mnan +: 1024$' "$OUT/id-ctrl-a.txt" &&
	[ "$(grep -E "$want_id" "$OUT/id-ctrl-a.txt")" = "$(grep -E "$want_id" "$OUT/id-ctrl-b.txt")" ]; then
	pass id-ctrl-ana "$(grep -E "$want_id" "$OUT/id-ctrl-a.txt" | tr -s ' ' | tr '\n' ';')"
else
	fail id-ctrl-ana "A: $(grep -E "$want_id" "$OUT/id-ctrl-a.txt" | tr -s ' ' | tr '\n' ';') B: $(grep -E "$want_id" "$OUT/id-ctrl-b.txt" | tr -s ' ' | tr '\n' ';')"
fi
if nvme ana-log "/dev/$CB" > "$OUT/ana-log-b.txt" 2>&1 && grep -q inaccessible "$OUT/ana-log-b.txt" &&
	nvme ana-log "/dev/$CA" > "$OUT/ana-log-a.txt" 2>&1 && grep -q optimized "$OUT/ana-log-a.txt"; then
	pass nvme-ana-log "A: $(grep -iE 'state|nsid' "$OUT/ana-log-a.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-120)"
else
	fail nvme-ana-log "$(tail -n 3 "$OUT/ana-log-a.txt" "$OUT/ana-log-b.txt" | tr '\n' ' ')"
fi

# ---- 1. failover: kill -9 A under fio ----
log "fio verify through $DEV; kill -9 A once it has served writes; B optimized"
fio_start g-failover "$DEV"
wait_writes "$DEV" 300 || fail g-failover-start "fio completed no writes in 120 s"
WA=$(ctrl_writes "$CA")
if ! kill -0 "$FIO_PID" 2> /dev/null; then
	fail g-failover "fio finished before the failover; raise GONVMF_HA_FIO_SIZE ($FIO_SIZE)"
fi
T_KILL=$EPOCHREALTIME
kill -9 "$PID_A"
wait "$PID_A" 2> /dev/null # fenced: nothing of A's can reach the file any more
PID_A=
ha_set B optimized || fail g-set-b-optimized "B did not log the reload"
log "A killed after $WA writes; B told optimized $(since "$T_KILL") s later"
if fio_done g-failover; then
	pass g-failover-fio "$FIO_RES"
else
	fail g-failover-fio "$FIO_RES"
fi
WB=$(ctrl_writes "$CB")
if [ "$WA" -gt 0 ] && [ "$WB" -gt 0 ]; then
	pass g-failover-paths "writes served: A $WA before the kill, B $WB"
else
	fail g-failover-paths "writes served: A $WA, B $WB; want both > 0"
fi
if G_FO=$(gap g-failover "$T_KILL" "$T_HUP"); then
	pass g-failover-time "$G_FO"
else
	fail g-failover-time "$G_FO"
fi

log "A restarts inaccessible; the host reconnects its path"
config_a inaccessible
check restart-a-inaccessible ha_start A
if wait_path "$CA" inaccessible 90 && wait_path "$CB" optimized 5; then
	pass path-a-readded "$CA live inaccessible, $CB live optimized"
else
	fail path-a-readded "$CA $CSTATE/$STATE; dmesg: $(dmesg | grep "$CA" | tail -n 2 | tr '\n' ' ')"
fi
nvme list-subsys "$DEV" > "$OUT/list-subsys-2.txt" 2>&1
cat "$OUT/list-subsys-2.txt"

# ---- 2. planned switchover with both alive: A optimized, B change, B inaccessible ----
log "planned switchover under fio with gonvmf ctl ana set: A optimized, B change, B inaccessible"
WA0=$(ctrl_writes "$CA")
fio_start g-switchover "$DEV"
wait_writes "$DEV" 300 || fail g-switchover-start "fio completed no writes in 120 s"
kill -0 "$FIO_PID" 2> /dev/null || fail g-switchover "fio finished before the switchover; raise GONVMF_HA_FIO_SIZE ($FIO_SIZE)"
T_SW=$EPOCHREALTIME
ctl A ana set "$RXE_IP" $PA 1 optimized > /dev/null && ctl B ana set "$RXE_IP" $PB 1 change > /dev/null &&
	ctl B ana set "$RXE_IP" $PB 1 inaccessible > /dev/null || fail g-switchover-set "gonvmf ctl ana set failed"
log "switched in $(since "$T_SW") s"
if fio_done g-switchover; then
	pass g-switchover-fio "$FIO_RES"
else
	fail g-switchover-fio "$FIO_RES"
fi
WA1=$(ctrl_writes "$CA")
if wait_path "$CA" optimized 10 && wait_path "$CB" inaccessible 10 && [ "$WA1" -gt "$WA0" ]; then
	pass g-switchover-paths "A optimized and served $((WA1 - WA0)) writes, B inaccessible"
else
	fail g-switchover-paths "A $CSTATE/$STATE served $((WA1 - WA0)) writes"
fi
G_SW=$(stall g-switchover "$T_SW") && pass g-switchover-time "$G_SW" || fail g-switchover-time "$G_SW"
if ctl A ana ls > "$OUT/ana-ls-a.txt" 2>&1 && ctl B ana ls > "$OUT/ana-ls-b.txt" 2>&1 &&
	grep -qE "^rdma +$RXE_IP +$PA +1 +optimized" "$OUT/ana-ls-a.txt" && grep -qE "^rdma +$RXE_IP +$PB +1 +inaccessible" "$OUT/ana-ls-b.txt"; then
	pass ctl-ana-ls "A: $(grep -E " 1 +" "$OUT/ana-ls-a.txt" | tr -s ' '); B: $(grep -E " 1 +" "$OUT/ana-ls-b.txt" | tr -s ' ')"
else
	fail ctl-ana-ls "$(cat "$OUT/ana-ls-a.txt" "$OUT/ana-ls-b.txt" | tr '\n' ';')"
fi

check nvme-disconnect nvme_disconnect "$NQN"
check gonvmf-stop-a ha_stop A
check gonvmf-stop-b ha_stop B

# =============================== Linux target ===============================
# knvmet_port <id> <trsvcid> <state of group 1>: an nvmet rdma port with the subsystem.
knvmet_port() {
	local p=$NVMET_CFG/ports/$1
	mkdir -p "$p" && echo rdma > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
		echo "$RXE_IP" > "$p/addr_traddr" && echo "$2" > "$p/addr_trsvcid" &&
		echo "$3" > "$p/ana_groups/1/ana_state" && ln -s "$NVMET_CFG/subsystems/$KNQN" "$p/subsystems/$KNQN"
}
knvmet_setup() {
	local s=$NVMET_CFG/subsystems/$KNQN
	timeout 60 modprobe -a nvmet nvmet-rdma &&
		fallocate -l 256M "$KIMG" &&
		mkdir "$s" && echo 1 > "$s/attr_allow_any_host" &&
		mkdir "$s/namespaces/1" && echo -n "$KIMG" > "$s/namespaces/1/device_path" &&
		echo 1 > "$s/namespaces/1/enable" &&
		knvmet_port 1 $PA optimized && knvmet_port 2 $PB inaccessible
}
log "the Linux target: two nvmet ports with ANA group 1 (port 1 optimized, port 2 inaccessible)"
if check nvmet-setup knvmet_setup; then
	nap 1
	nvme_connect_new "$KNQN" $PA -c 1 && KA=$NVME_CTRL &&
		nvme_connect_new "$KNQN" $PB -c 1 && KB=$NVME_CTRL || fail k-connect "$NVME_ERR"
	nvme_ns_devs "$KNQN"
	KDEV=${NVME_NS_DEVS[0]}
	nvme list-subsys "$KDEV" > "$OUT/k-list-subsys-1.txt" 2>&1
	cat "$OUT/k-list-subsys-1.txt"

	log "kernel: fio; port 1 \"dies\" (subsystem unlinked: its controllers dropped); port 2 optimized"
	fio_start k-failover "$KDEV"
	wait_writes "$KDEV" 300 || fail k-failover-start "fio completed no writes in 120 s"
	kill -0 "$FIO_PID" 2> /dev/null || fail k-failover "fio finished before the failover"
	T_KILL=$EPOCHREALTIME
	rm "$NVMET_CFG/ports/1/subsystems/$KNQN"
	T_HUP=$EPOCHREALTIME
	echo optimized > "$NVMET_CFG/ports/2/ana_groups/1/ana_state"
	if fio_done k-failover; then pass k-failover-fio "$FIO_RES"; else fail k-failover-fio "$FIO_RES"; fi
	if K_FO=$(gap k-failover "$T_KILL" "$T_HUP"); then pass k-failover-time "$K_FO"; else fail k-failover-time "$K_FO"; fi

	echo inaccessible > "$NVMET_CFG/ports/1/ana_groups/1/ana_state"
	ln -s "$NVMET_CFG/subsystems/$KNQN" "$NVMET_CFG/ports/1/subsystems/$KNQN"
	wait_path "$KA" inaccessible 90 || fail k-path-readded "$KA $CSTATE/$STATE"
	log "kernel: planned switchover under fio"
	fio_start k-switchover "$KDEV"
	wait_writes "$KDEV" 300 || fail k-switchover-start "fio completed no writes in 120 s"
	T_SW=$EPOCHREALTIME
	echo optimized > "$NVMET_CFG/ports/1/ana_groups/1/ana_state"
	echo change > "$NVMET_CFG/ports/2/ana_groups/1/ana_state"
	echo inaccessible > "$NVMET_CFG/ports/2/ana_groups/1/ana_state"
	if fio_done k-switchover; then pass k-switchover-fio "$FIO_RES"; else fail k-switchover-fio "$FIO_RES"; fi
	K_SW=$(stall k-switchover "$T_SW") && pass k-switchover-time "$K_SW" || fail k-switchover-time "$K_SW"
	nvme_disconnect "$KNQN"
fi

record "failover (kill A, B optimized): host's last completion before -> first after"
record "  gonvmf:       ${G_FO:-n/a}"
record "  Linux target: ${K_FO:-n/a}"
record "planned switchover (both alive): longest completion gap"
record "  gonvmf:       ${G_SW:-n/a}"
record "  Linux target: ${K_SW:-n/a}"
finish
