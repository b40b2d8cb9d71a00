#!/bin/bash
# 45-reservations: NVMe reservations between two Linux hosts (two `nvme connect` with their
# own --hostnqn/--hostid to one subsystem; nvme_core multipath=N gives each its own
# /dev/nvmeXn1) with nvme-cli: resv-register, resv-acquire (Write Exclusive), resv-report
# --eds, a write from the host that does not hold the reservation fails with Reservation
# Conflict while its read succeeds, preempt to Exclusive Access, release, clear, and a
# reservation with Persist Through Power Loss surviving a restart of gonvmf. Then the same
# script against the Linux kernel target of this guest's kernel (6.1: no reservations in
# nvmet, which reservations reached only in 6.13), recording what it does instead.
# vm: --timeout 900 --disk 1G
. "$SRC/integration/vm/guest-lib.sh"

GONVMF=$GONVMF_BIN
NQN=nqn.2024-01.io.gonvmf:resv
PORT=4420  # host A connects here
PORTB=4421 # host B here: nvme-cli 2.3 refuses a second connection to the same address,
# port and subsystem as "already connected" whatever the host NQN, even with -D
HOSTA=nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa
IDA=aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa
HOSTB=nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-2222-4222-8222-bbbbbbbbbbbb
IDB=bbbbbbbb-2222-4222-8222-bbbbbbbbbbbb
KA=0xa1 KB=0xb2
CFG=$SCRATCH/resv.yaml
IMG=$SCRATCH/resv.img

need_gonvmf
need_scratch

# One block device per controller: without native multipath the two hosts' paths are
# two disks, so each host's I/O goes where the test sends it.
require timeout 60 modprobe nvme_core multipath=N
require grep -qx N /sys/module/nvme_core/parameters/multipath

fallocate -l 64M "$IMG"
cat > "$CFG" << EOF
listeners:
  - address: $RXE_IP
    port: $PORT
  - address: $RXE_IP
    port: $PORTB
subsystems:
  - nqn: $NQN
    hosts: [$HOSTA, $HOSTB]
    namespaces:
      - {nsid: 1, backend: file, path: $IMG}
EOF
cp "$CFG" "$OUT/resv.yaml"

# connect_host <port> <hostnqn> <hostid>: connect; DEV is the new controller's namespace disk.
connect_host() {
	local d
	nvme_connect_new "$NQN" "$1" --hostnqn="$2" --hostid="$3" || return 1
	for d in /sys/class/nvme/"$NVME_CTRL"/nvme*n1; do DEV=/dev/${d##*/}; done
	[ -b "$DEV" ] || {
		echo "no namespace disk of $NVME_CTRL: $(ls /sys/class/nvme/"$NVME_CTRL")" >&2
		return 1
	}
}

# nv <name> <nvme args...>: run nvme-cli, output in $OUT/<prefix>-<name>.txt.
nv() {
	local name=$1
	shift
	timeout -k 5 60 nvme "$@" > "$OUT/$P-$name.txt" 2>&1
}

# io <name> <dev> read|write: one 4 KiB nvme read/write at LBA 0.
io() {
	local f=$SCRATCH/io.bin
	head -c 4096 /dev/urandom > "$f"
	if [ "$3" = write ]; then
		nv "$1" write "$2" --start-block=0 --block-count=7 --data-size=4096 --data="$f"
	else
		nv "$1" read "$2" --start-block=0 --block-count=7 --data-size=4096 --data="$SCRATCH/rd.bin"
	fi
}

# conflict <name>: the command's output names Reservation Conflict.
conflict() { grep -qi 'reservation.conflict' "$OUT/$P-$1.txt"; }

# report <name> <dev> <python condition on r>: resv-report --eds -o json, checked.
report() {
	nv "$1" resv-report "$2" -n 1 --eds -o json || return 1
	python3 - "$OUT/$P-$1.txt" "$3" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
regs = r.get("regctlext", [])
holders = [x["rkey"] for x in regs if x["rcsts"] & 1]
ok = eval(sys.argv[2], {}, {"r": r, "regs": regs, "holders": holders})
print(f"rtype={r['rtype']} regctl={r['regctl']} ptpls={r.get('ptpls')} holders={holders} keys={[x['rkey'] for x in regs]} -> {ok}")
sys.exit(0 if ok else 1)
PY
}

# The scenario both targets run. A=host A's disk, B=host B's disk.
scenario() {
	check "$P-register-a" nv register-a resv-register "$A" -n 1 --nrkey=$KA --rrega=0
	check "$P-register-b" nv register-b resv-register "$B" -n 1 --nrkey=$KB --rrega=0
	check "$P-acquire-we" nv acquire-a resv-acquire "$A" -n 1 --crkey=$KA --rtype=1 --racqa=0
	check "$P-report-we" report report-we "$B" 'r["rtype"] == 1 and r["regctl"] == 2 and holders == [0xa1]'
	if io write-b-we "$B" write; then
		fail "$P-nonholder-write-conflict" "host B's write under A's Write Exclusive reservation succeeded"
	elif conflict write-b-we; then
		pass "$P-nonholder-write-conflict" "$(tail -n 1 "$OUT/$P-write-b-we.txt")"
	else
		fail "$P-nonholder-write-conflict" "failed without Reservation Conflict: $(tail -n 1 "$OUT/$P-write-b-we.txt")"
	fi
	check "$P-nonholder-read" io read-b-we "$B" read
	check "$P-holder-write" io write-a-we "$A" write
	if dd if=/dev/zero of="$B" bs=4k count=1 oflag=direct 2> "$OUT/$P-dd-b.txt"; then
		fail "$P-nonholder-dd" "a block-layer write from host B succeeded"
	else
		pass "$P-nonholder-dd" "$(head -n 1 "$OUT/$P-dd-b.txt")"
	fi
	# B preempts A (Exclusive Access): A loses its registration, its reads and writes fail.
	check "$P-preempt" nv preempt-b resv-acquire "$B" -n 1 --crkey=$KB --prkey=$KA --rtype=2 --racqa=1
	check "$P-report-ea" report report-ea "$A" 'r["rtype"] == 2 and r["regctl"] == 1 and holders == [0xb2]'
	io write-a-ea "$A" write
	check "$P-preempted-write-conflict" conflict write-a-ea
	io read-a-ea "$A" read
	check "$P-preempted-read-conflict" conflict read-a-ea
	check "$P-release" nv release-b resv-release "$B" -n 1 --crkey=$KB --rtype=2 --rrela=0
	check "$P-write-after-release" io write-a-free "$A" write
	check "$P-clear" nv clear-b resv-release "$B" -n 1 --crkey=$KB --rrela=1
	check "$P-report-clear" report report-clear "$A" 'r["rtype"] == 0 and r["regctl"] == 0'
}

# ---- gonvmf ----
P=gonvmf
on_exit gonvmf_stop
on_exit nvme_disconnect_all
check gonvmf-check "$GONVMF" check -q --config "$CFG"
require gonvmf_start gonvmf-1 "$CFG" "$RXE_IP" "$PORT"
sleep 1
require connect_host $PORT "$HOSTA" "$IDA"
A=$DEV
require connect_host $PORTB "$HOSTB" "$IDB"
B=$DEV
log "gonvmf: host A $A, host B $B"
check gonvmf-oncs-reservations bash -c "nvme id-ctrl $A -o json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[\"oncs\"] & 32 else 1)'"
check gonvmf-rescap bash -c "nvme id-ns $A -n 1 -o json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[\"rescap\"] == 0xff else 1)'"
scenario

# Persist Through Power Loss: A registers with CPTPL=3 and takes Write Exclusive; after a
# restart of gonvmf, B sees the same registration and reservation and cannot write.
check gonvmf-ptpl-register nv ptpl-register resv-register "$A" -n 1 --nrkey=$KA --rrega=0 --cptpl=3
check gonvmf-ptpl-acquire nv ptpl-acquire resv-acquire "$A" -n 1 --crkey=$KA --rtype=1 --racqa=0
cp "$SCRATCH/resv.state.json" "$OUT/resv.state.json" 2> /dev/null
check gonvmf-state-file grep -q '"key": "0xa1"' "$SCRATCH/resv.state.json"
require nvme_disconnect_all
check gonvmf-stop gonvmf_stop
require gonvmf_start gonvmf-2 "$CFG" "$RXE_IP" "$PORT"
sleep 1
require connect_host $PORTB "$HOSTB" "$IDB"
B=$DEV
check gonvmf-ptpl-report report ptpl-report "$B" 'r["rtype"] == 1 and r["regctl"] == 1 and holders == [0xa1] and r["ptpls"] == 1'
io ptpl-write-b "$B" write
check gonvmf-ptpl-nonholder-write-conflict conflict ptpl-write-b
require connect_host $PORT "$HOSTA" "$IDA"
A=$DEV
check gonvmf-ptpl-clear nv ptpl-clear resv-release "$A" -n 1 --crkey=$KA --rrela=1
nvme_disconnect_all
check gonvmf-stop-final gonvmf_stop

# ---- the Linux kernel target, same script ----
P=nvmet
on_exit nvmet_teardown
require nvmet_setup "$NQN" "$IMG" "$PORT"
nvmet_port() { # the subsystem on a second port too
	local p=/sys/kernel/config/nvmet/ports/$1
	mkdir "$p" && echo rdma > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
		echo "$RXE_IP" > "$p/addr_traddr" && echo "$1" > "$p/addr_trsvcid" &&
		ln -s "/sys/kernel/config/nvmet/subsystems/$NQN" "$p/subsystems/$NQN"
}
require nvmet_port $PORTB
sleep 1
require connect_host $PORT "$HOSTA" "$IDA"
A=$DEV
require connect_host $PORTB "$HOSTB" "$IDB"
B=$DEV
log "nvmet ($(uname -r)): host A $A, host B $B"
if nvme id-ctrl "$A" -o json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["oncs"] & 32 else 1)'; then
	scenario
else
	# No reservations: the commands are refused and nothing fences host B's writes.
	nv register-a resv-register "$A" -n 1 --nrkey=$KA --rrega=0
	if grep -qi 'invalid.*opcode' "$OUT/$P-register-a.txt"; then
		pass nvmet-no-reservations "$(uname -r): ONCS lacks reservations, resv-register fails: $(tail -n 1 "$OUT/$P-register-a.txt")"
	else
		fail nvmet-no-reservations "resv-register on a target without ONCS reservations: $(tail -n 1 "$OUT/$P-register-a.txt")"
	fi
	check nvmet-unfenced-write io write-b "$B" write
fi
finish
