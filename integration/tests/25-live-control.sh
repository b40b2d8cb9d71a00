#!/bin/bash
# 25-live-control: gonvmf ctl changes a running gonvmf while the Linux host uses it. fio
# write+verify runs on namespace 1 while namespace 2 is added (the host gets the device
# without reconnecting), resized (the host sees the new size), reopened (it keeps device and
# data) and removed; fio ends with 0 errors. A host denied mid-I/O is disconnected and
# refused when it reconnects. A subsystem added at run time is in nvme discover and
# connectable, and so is a listener. SIGHUP applies an edit of the configuration file. gonvmf ctl save's output, restarted from, serves the same
# subsystems and data. The Prometheus metrics (scraped with curl) show namespace 2 while it
# exists, and count fio's reads and writes on namespace 1 to within 1 %.
# vm: --timeout 1500 --disk 2G
. "$SRC/integration/vm/guest-lib.sh"

NQN=nqn.2024-01.io.gonvmf:live
NQN_DENY=nqn.2024-01.io.gonvmf:live-deny
NQN_NEW=nqn.2024-01.io.gonvmf:live-new
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6f1d2c3b-4a59-4e68-8b7c-9d0e1f2a3b4c
OTHER=nqn.2014-08.org.nvmexpress:uuid:00000000-1111-2222-3333-444444444444
PORT=4420
CFG=$SCRATCH/live.yaml
SOCK=/run/gonvmf-live/ctl.sock
METRICS_PORT=9469

need_gonvmf
need_scratch

cat > "$CFG" << EOF
listeners:
  - {address: $RXE_IP, port: $PORT}
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: file, path: $SCRATCH/ns1.img, size: 256MiB}
  - nqn: $NQN_DENY
    hosts: [$HOSTNQN, $OTHER]
    namespaces:
      - {nsid: 1, backend: null, size: 1GiB}
transport: {buffer_pool_size: 32MiB}
control: {socket: $SOCK}
metrics: {address: 127.0.0.1:$METRICS_PORT}
EOF
cp "$CFG" "$OUT/live.yaml"

ctl() { "$GONVMF_BIN" ctl --socket "$SOCK" "$@"; }
# size_is <dev> <bytes>: the block device exists and has that size.
size_is() { [ -b "$1" ] && [ "$(blockdev --getsize64 "$1")" = "$2" ]; }
# ns_dev <nqn> <nsid>: the host's block device of that namespace (empty if none).
ns_dev() {
	local b n
	for b in /sys/block/nvme*; do # a namespace head is named by instance, not by NSID
		[ -e "$b" ] || continue
		case ${b##*/} in nvme*c*) continue ;; esac
		read -r n < "$b/device/subsysnqn" 2> /dev/null && [ "$n" = "$1" ] && read -r n < "$b/nsid" && [ "$n" = "$2" ] && echo "/dev/${b##*/}"
	done
}
has_ns() { [ -n "$(ns_dev "$1" "$2")" ]; }
no_ns() { [ -z "$(ns_dev "$1" "$2")" ]; }
scrape() { curl -sf --max-time 20 "http://127.0.0.1:$METRICS_PORT/metrics"; }
# ns_metric <name> <nsid> <op>: a namespace counter of $NQN from a scrape on stdin.
ns_metric() { grep -F "$1{nsid=\"$2\",op=\"$3\",subsystem=\"$NQN\"}" | awk '{print $2}'; }

on_exit gonvmf_stop
on_exit nvme_disconnect_all
check gonvmf-start gonvmf_start gonvmf-1 "$CFG" "$RXE_IP" $PORT || finish
wait_for 20 test -S "$SOCK"
if [ "$(stat -c %a "$SOCK")" = 600 ]; then pass control-socket "$SOCK mode 600"; else fail control-socket "mode $(stat -c %a "$SOCK")"; fi
if wait_for 20 scrape > /dev/null && [ "$(scrape | ns_metric gonvmf_namespace_commands_total 1 write)" = 0 ]; then
	pass metrics-up "http://127.0.0.1:$METRICS_PORT/metrics serves namespace 1"
else
	fail metrics-up "$(scrape 2>&1 | grep gonvmf_namespace_commands_total | head -n 2)"
fi
sleep 1

# ---- namespaces come and go under fio ----
nvme_connect_new "$NQN" $PORT --hostnqn=$HOSTNQN || { fail connect "$NVME_ERR"; finish; }
CTRL=$NVME_CTRL
NS1=${NVME_NS_DEVS[0]}
read -r CNTLID < /sys/class/nvme/$CTRL/cntlid
pass connect "$CTRL ($NS1), cntlid $CNTLID"

log "fio write+verify on $NS1 while namespace 2 is added, resized and removed"
bg_start fio-ns1 timeout -k 10 600 fio --name=live --filename="$NS1" --ioengine=libaio --direct=1 \
	--rw=randwrite --bs=4k --iodepth=8 --size=64M --verify=crc32c --verify_backlog=512 --verify_fatal=1 \
	--time_based --runtime=60 --output-format=json --output="$OUT/fio-ns1.json"
FIO=$BG_PID
T_CHANGES=$EPOCHREALTIME
sleep 3

if ctl ns add "$NQN" --nsid 2 --backend file --path "$SCRATCH/ns2.img" --size 64MiB > "$OUT/ns-add.txt" 2>&1 &&
	wait_for 60 has_ns "$NQN" 2; then
	NS2=$(ns_dev "$NQN" 2)
	pass ns-add "$(cat "$OUT/ns-add.txt"); host: $NS2, $(blockdev --getsize64 "$NS2") bytes"
else
	fail ns-add "$(tail -n 1 "$OUT/ns-add.txt"); dmesg: $(dmesg | tail -n 2 | tr '\n' ' ')"
fi
check ns2-write-read sh -c "dd if=/dev/urandom of=$OUT/pat bs=4096 count=16 status=none &&
	dd if=$OUT/pat of=${NS2:-/nonexistent} bs=4096 count=16 oflag=direct status=none &&
	dd if=${NS2:-/nonexistent} bs=4096 count=16 iflag=direct status=none | cmp - $OUT/pat"
w=$(scrape | ns_metric gonvmf_namespace_commands_total 2 write)
[ "${w:-0}" -ge 16 ] 2> /dev/null && pass metrics-ns-added "namespace 2 in the metrics: $w writes" ||
	fail metrics-ns-added "namespace 2's writes in the metrics: '${w}'"
if ctl ns resize "$NQN" 2 128MiB > "$OUT/ns-resize.txt" 2>&1 && wait_for 60 size_is "${NS2:-/nonexistent}" $((128 << 20)); then
	pass ns-resize "$(cat "$OUT/ns-resize.txt"); host: $(blockdev --getsize64 "$NS2") bytes"
else
	fail ns-resize "$(tail -n 1 "$OUT/ns-resize.txt"); host size $(blockdev --getsize64 "${NS2:-/nonexistent}" 2>&1)"
fi
check ns2-data-after-resize sh -c "dd if=${NS2:-/nonexistent} bs=4096 count=16 iflag=direct status=none | cmp - $OUT/pat"
# A reopen (what clears a failed sync) closes and reopens the backend under the connected
# host: the host keeps the device, its size and its data, and ctl ns ls says ok.
if ctl ns reopen "$NQN" 2 > "$OUT/ns-reopen.txt" 2>&1 && grep -q "had not failed" "$OUT/ns-reopen.txt" && sleep 2 &&
	size_is "${NS2:-/nonexistent}" $((128 << 20)) && dd if="$NS2" bs=4096 count=16 iflag=direct status=none | cmp -s - "$OUT/pat" &&
	ctl ns ls "$NQN" > "$OUT/ns-ls-reopen.txt" 2>&1 && awk '$2 == 2' "$OUT/ns-ls-reopen.txt" | grep -qw ok; then
	pass ns-reopen "$(cat "$OUT/ns-reopen.txt"); host keeps $NS2 and its data"
else
	fail ns-reopen "$(tail -n 1 "$OUT/ns-reopen.txt"); ns ls: $(tr '\n' ' ' < "$OUT/ns-ls-reopen.txt" 2> /dev/null); dmesg: $(dmesg | tail -n 2 | tr '\n' ' ')"
fi
if ctl ns rm "$NQN" 2 > "$OUT/ns-rm.txt" 2>&1 && wait_for 60 no_ns "$NQN" 2; then
	pass ns-rm "the host's namespace 2 is gone"
else
	fail ns-rm "$(tail -n 1 "$OUT/ns-rm.txt")"
fi
scrape > "$OUT/metrics-ns-rm.txt"
if grep -q 'gonvmf_namespace_commands_total{nsid="1"' "$OUT/metrics-ns-rm.txt" && ! grep -q "nsid=\"2\",.*subsystem=\"$NQN\"" "$OUT/metrics-ns-rm.txt"; then
	pass metrics-ns-removed "namespace 2 left the metrics"
else
	fail metrics-ns-removed "$(grep "nsid=\"2\"" "$OUT/metrics-ns-rm.txt" | head -n 2)"
fi
read -r c < /sys/class/nvme/$CTRL/cntlid
read -r st < /sys/class/nvme/$CTRL/state
nvme_ctrls "$NQN"
if [ "$c" = "$CNTLID" ] && [ "$st" = live ] && [ ${#NVME_CTRLS[@]} = 1 ]; then
	pass no-reconnect "$CTRL still live with cntlid $c, the only controller"
else
	fail no-reconnect "$CTRL state $st cntlid $c (was $CNTLID), controllers ${NVME_CTRLS[*]}"
fi
kill -0 $FIO 2> /dev/null && pass fio-ran-throughout "fio still running $(since "$T_CHANGES") s after it started, the changes done" ||
	fail fio-ran-throughout "fio ended before the namespace changes did: make it run longer"
wait $FIO
rc=$?
if [ $rc = 0 ] && python3 - "$OUT/fio-ns1.json" << 'PY'; then
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
w, r = j["write"], j["read"]
print("error=%d write %.1f MiB verified %.1f MiB" % (j["error"], w["io_bytes"] / 1048576, r["io_bytes"] / 1048576))
sys.exit(j["error"] != 0 or w["io_bytes"] == 0 or r["io_bytes"] == 0)
PY
	pass fio-ns1 "0 errors"
else
	fail fio-ns1 "fio exit $rc: $(grep -E 'error|verify' "$OUT/fio-ns1.log" | head -n 2 | tr '\n' ' ')"
fi

# ---- the metrics count what fio did ----
scrape > "$OUT/metrics-before.txt"
if timeout -k 10 300 fio --name=count --filename="$NS1" --ioengine=libaio --direct=1 --rw=randrw --bs=4k --iodepth=8 \
	--offset=192M --size=16M --output-format=json --output="$OUT/fio-count.json" && scrape > "$OUT/metrics-after.txt" &&
	python3 - "$OUT/fio-count.json" "$OUT/metrics-before.txt" "$OUT/metrics-after.txt" "$NQN" > "$OUT/metrics-count.txt" 2>&1 << 'PY'; then
import json, re, sys
fio = json.load(open(sys.argv[1]))["jobs"][0]
nqn = sys.argv[4]
def parse(path):
    m = {}
    for line in open(path):
        r = re.match(r'^(\w+)\{([^}]*)\} (\S+)$', line.strip())
        if r:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', r.group(2)))
            if labels.get("subsystem") == nqn and labels.get("nsid") == "1":
                key = (r.group(1), labels.get("op", ""), labels.get("status", ""), labels.get("le", ""))
                m[key] = float(r.group(3))
    return m
before, after = parse(sys.argv[2]), parse(sys.argv[3])
d = lambda *k: after.get(k, 0) - before.get(k, 0)
bad = []
for op in ("read", "write"):
    want = fio[op]["total_ios"]
    cmds = d("gonvmf_namespace_commands_total", op, "", "")
    nbytes = d("gonvmf_namespace_bytes_total", op, "", "")
    timed = d("gonvmf_namespace_command_duration_seconds_count", op, "", "")
    inf = d("gonvmf_namespace_command_duration_seconds_bucket", op, "", "+Inf")
    print("%s: fio %d I/Os, %d bytes; metrics %d commands, %d bytes, %d timed, %d in +Inf" % (op, want, fio[op]["io_bytes"], cmds, nbytes, timed, inf))
    if want == 0 or abs(cmds - want) > 0.01 * want:
        bad.append("%s commands %d vs fio %d" % (op, cmds, want))
    if abs(nbytes - fio[op]["io_bytes"]) > 0.01 * fio[op]["io_bytes"]:
        bad.append("%s bytes %d vs fio %d" % (op, nbytes, fio[op]["io_bytes"]))
    if timed != cmds or inf != cmds:
        bad.append("%s latency histogram counts %d (+Inf %d), commands %d" % (op, timed, inf, cmds))
errs = sum(v for k, v in after.items() if k[0] == "gonvmf_namespace_errors_total") - sum(v for k, v in before.items() if k[0] == "gonvmf_namespace_errors_total")
if errs:
    bad.append("%d errors" % errs)
print("; ".join(bad) or "within 1 %")
sys.exit(1 if bad else 0)
PY
	pass metrics-match-fio "$(paste -sd ' ' "$OUT/metrics-count.txt")"
else
	fail metrics-match-fio "$(paste -sd ' ' "$OUT/metrics-count.txt" 2> /dev/null)"
fi

# Data to check after the restart from the saved configuration.
check fio-ns1-write timeout -k 10 300 fio --name=keep --filename="$NS1" --ioengine=libaio --direct=1 --rw=write \
	--bs=64k --iodepth=8 --offset=128M --size=32M --verify=crc32c --verify_fatal=1 --output="$OUT/fio-keep-write.txt"

# ---- a host denied mid-I/O ----
log "deny $HOSTNQN on $NQN_DENY while it reads"
nvme_connect_new "$NQN_DENY" $PORT --hostnqn=$HOSTNQN --ctrl-loss-tmo=5 --reconnect-delay=1 || fail deny-connect "$NVME_ERR"
DCTRL=$NVME_CTRL
bg_start fio-deny timeout -k 10 300 fio --name=deny --filename="${NVME_NS_DEVS[0]}" --ioengine=libaio --direct=1 \
	--rw=randread --bs=4k --iodepth=8 --time_based --runtime=120
DFIO=$BG_PID
T_CHANGES=$EPOCHREALTIME
sleep 3
check host-deny ctl host deny "$NQN_DENY" "$HOSTNQN"
gone() { ! [ -e /sys/class/nvme/$DCTRL ] || ! grep -qx live /sys/class/nvme/$DCTRL/state; }
if wait_for 60 gone && wait_for 60 grep -q "host is not allowed to access the subsystem" "$GONVMF_LOG"; then
	pass deny-disconnects "$DCTRL left the live state; its reconnect was refused: $(grep -m1 'connect refused' "$GONVMF_LOG" | grep -o 'reason="[^"]*"')"
else
	fail deny-disconnects "$DCTRL state $(cat /sys/class/nvme/$DCTRL/state 2> /dev/null)"
fi
wait $DFIO && fail deny-fio "fio on the denied host finished without errors" || pass deny-fio "fio on the denied host failed"
if timeout -k 5 60 nvme connect -t rdma -a "$RXE_IP" -s $PORT -n "$NQN_DENY" --hostnqn=$HOSTNQN > "$OUT/deny-reconnect.txt" 2>&1; then
	fail deny-refused "nvme connect succeeded after the deny"
else
	pass deny-refused "$(tail -n 1 "$OUT/deny-reconnect.txt")"
fi
nvme_disconnect "$NQN_DENY" > /dev/null 2>&1
read -r st < /sys/class/nvme/$CTRL/state
[ "$st" = live ] && pass other-host-unaffected "$CTRL live" || fail other-host-unaffected "$CTRL $st"

# ---- a subsystem added at run time ----
check subsystem-add ctl subsystem add "$NQN_NEW" --allow-any-host --ns "nsid=1,backend=file,path=$SCRATCH/new.img,size=64MiB"
if timeout -k 5 90 nvme discover -t rdma -a "$RXE_IP" -s $PORT --hostnqn=$HOSTNQN > "$OUT/discover.txt" 2>&1 &&
	grep -q "subnqn: *$NQN_NEW\$" "$OUT/discover.txt"; then
	pass discover-new "$NQN_NEW is in the discovery log"
else
	fail discover-new "$(grep subnqn "$OUT/discover.txt" | tr '\n' ' ')"
fi
if nvme_connect_new "$NQN_NEW" $PORT --hostnqn=$HOSTNQN; then
	NEWDEV=${NVME_NS_DEVS[0]}
	check new-fio timeout -k 10 300 fio --name=new --filename="$NEWDEV" --ioengine=libaio --direct=1 --rw=randwrite \
		--bs=16k --iodepth=8 --size=16M --verify=crc32c --verify_fatal=1 --output="$OUT/fio-new.txt"
else
	fail connect-new "$NVME_ERR"
fi

# ---- a listener added and removed at run time ----
disc_on() { timeout -k 5 60 nvme discover -t rdma -a "$RXE_IP" -s "$1" --hostnqn=$HOSTNQN > "$OUT/discover-$1.txt" 2>&1 && grep -q "subnqn: *$NQN\$" "$OUT/discover-$1.txt"; }
if ctl listener add "$RXE_IP" 4421 > "$OUT/listener-add.txt" 2>&1 && disc_on 4421 && grep -q "trsvcid: *4421" "$OUT/discover-4421.txt"; then
	pass listener-add "$(cat "$OUT/listener-add.txt"); nvme discover on port 4421 lists $NQN"
else
	fail listener-add "$(tail -n 1 "$OUT/listener-add.txt"); $(tail -n 1 "$OUT/discover-4421.txt" 2> /dev/null)"
fi
if ctl listener rm "$RXE_IP" 4421 > "$OUT/listener-rm.txt" 2>&1 && ! disc_on 4421 && disc_on $PORT && ! grep -q "trsvcid: *4421" "$OUT/discover-$PORT.txt"; then
	pass listener-rm "port 4421 refuses nvme discover; port $PORT's log no longer lists it"
else
	fail listener-rm "$(tail -n 1 "$OUT/listener-rm.txt")"
fi

# ---- SIGHUP applies an edit of the file ----
sed -i "s|      - {nsid: 1, backend: null, size: 1GiB}|&\n  - nqn: $NQN_NEW\n    allow_any_host: true\n    namespaces:\n      - {nsid: 1, backend: file, path: $SCRATCH/new.img, size: 64MiB}\n      - {nsid: 3, backend: memory, size: 32MiB}|" "$CFG"
sed -i "s|    hosts: \[$HOSTNQN, $OTHER\]|    hosts: [$OTHER]|" "$CFG"
cp "$CFG" "$OUT/live-reloaded.yaml"
kill -HUP "$GONVMF_PID"
if wait_for 60 has_ns "$NQN_NEW" 3 && grep -q "reload: 1 change applied" "$GONVMF_LOG"; then
	pass sighup-reload "namespace 3 of $NQN_NEW appeared on the host"
else
	fail sighup-reload "$(grep -E 'reload' "$GONVMF_LOG" | tail -n 3 | tr '\n' ' ')"
fi
echo "transport: {buffer_pool_size: 64MiB}" >> "$CFG"
kill -HUP "$GONVMF_PID"
if wait_for 30 grep -q "reload refused: nothing changed" "$GONVMF_LOG" || wait_for 5 grep -q "reload failed" "$GONVMF_LOG"; then
	pass sighup-invalid "$(grep -E 'invalid configuration|reload failed' "$GONVMF_LOG" | tail -n 1 | cut -c1-200)"
else
	fail sighup-invalid "no refusal logged"
fi

ctl subsystem ls > "$OUT/ctl-subsystem-ls.txt" 2>&1
ctl ns ls > "$OUT/ctl-ns-ls.txt" 2>&1
ctl ctrl ls > "$OUT/ctl-ctrl-ls.txt" 2>&1
ctl stats > "$OUT/ctl-stats.txt" 2>&1
ctl listener ls > "$OUT/ctl-listener-ls.txt" 2>&1
cat "$OUT/ctl-ctrl-ls.txt" "$OUT/ctl-stats.txt"
grep -q "$HOSTNQN" "$OUT/ctl-ctrl-ls.txt" && grep -q "$RXE_IP" "$OUT/ctl-ctrl-ls.txt" &&
	pass ctrl-ls "controllers listed with host and address" || fail ctrl-ls "$(head -n 3 "$OUT/ctl-ctrl-ls.txt")"

# ---- save, restart from it ----
check ctl-save ctl save -o "$OUT/saved.yaml"
check saved-check "$GONVMF_BIN" check -q --config "$OUT/saved.yaml"
check disconnect nvme_disconnect_all
check gonvmf-stop gonvmf_stop
check gonvmf-restart gonvmf_start gonvmf-2 "$OUT/saved.yaml" "$RXE_IP" $PORT || finish
sleep 1
ctl save > "$OUT/saved-again.yaml" 2>&1
if diff <(grep -v '^#' "$OUT/saved.yaml") <(grep -v '^#' "$OUT/saved-again.yaml") > "$OUT/saved.diff"; then
	pass restart-same-config "the restarted target's running configuration is the saved one"
else
	fail restart-same-config "$(head -n 4 "$OUT/saved.diff" | tr '\n' ' ')"
fi
if nvme_connect_new "$NQN" $PORT --hostnqn=$HOSTNQN; then
	check fio-ns1-verify-after-restart timeout -k 10 300 fio --name=keep --filename="${NVME_NS_DEVS[0]}" --ioengine=libaio \
		--direct=1 --rw=write --bs=64k --iodepth=8 --offset=128M --size=32M --verify=crc32c --verify_fatal=1 \
		--verify_only=1 --output="$OUT/fio-keep-verify.txt"
else
	fail connect-after-restart "$NVME_ERR"
fi
if nvme_connect_new "$NQN_NEW" $PORT --hostnqn=$HOSTNQN && [ ${#NVME_NS_DEVS[@]} = 2 ]; then
	check new-fio-verify-after-restart timeout -k 10 300 fio --name=new --filename="${NVME_NS_DEVS[0]}" --ioengine=libaio \
		--direct=1 --rw=randwrite --bs=16k --iodepth=8 --size=16M --verify=crc32c --verify_fatal=1 --verify_only=1 \
		--output="$OUT/fio-new-verify.txt"
else
	fail connect-new-after-restart "${NVME_ERR:-namespaces ${NVME_NS_DEVS[*]}}"
fi
check disconnect-final nvme_disconnect_all
check gonvmf-stop-final gonvmf_stop
grep -E 'level=(WARN|ERROR)' "$OUT"/gonvmf-*.log | grep -v 'connect refused\|invalid configuration\|reload refused\|controller failed' | head -n 20
finish
