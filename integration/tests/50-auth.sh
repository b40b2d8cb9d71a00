#!/bin/bash
# 50-auth: in-band authentication (DH-HMAC-CHAP) on the 6.12 kernel, whose host and target
# have it (6.1 has neither):
#   - the Go initiator (gonvmf identify / perf --verify) authenticates against the Linux
#     target configured through configfs (dhchap_key, dhchap_ctrl_key, dhchap_hash,
#     dhchap_dhgroup), uni- and bidirectionally, and with a secret whose key length is not
#     its transformation hash's (the two transformations agree); a wrong controller key
#     fails;
#   - nvme-cli's `nvme connect --dhchap-secret` (and --dhchap-ctrl-secret) to gonvmf serve
#     succeeds with the right keys and fails with a wrong one; fio verify runs over the
#     authenticated connection; rewriting the host's key file and the Linux host's sysfs
#     dhchap_secret re-authenticates the live connection with the new key; gonvmf's own
#     initiator authenticates to gonvmf too;
#   - gonvmf ctl host key set rotates the host's key on the running target: the connected
#     host keeps working, a new nvme connect with the old key is refused and one with the
#     new key succeeds; listings and the log never show the key; ctl save round-trips it.
# vm: --kernel 6.12 --timeout 1500 --disk 1G
. "$SRC/integration/vm/guest-lib.sh"

G=$GONVMF_BUILD/bin/gonvmf
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5b2f7c1e-8a4d-4e6f-9b3a-2c1d0e9f8a7b
KNQN=nqn.2024-01.io.gonvmf:k-auth
GNQN=nqn.2024-01.io.gonvmf:g-auth
GOPEN=nqn.2024-01.io.gonvmf:g-open
GPORT=4430
SOCK=/run/gonvmf-auth/ctl.sock
export GONVMF_LOG_LEVEL=warn

need_gonvmf
case $(uname -r) in
6.1.*) skip kernel "$(uname -r) has no NVMe in-band authentication: run on 6.12 (# vm: --kernel 6.12)"; finish ;;
esac
timeout 60 modprobe nvme-rdma || fail modprobe "nvme-rdma"

# expect_fail NAME PATTERN CMD...: CMD must exit non-zero with PATTERN in its output.
expect_fail() {
	local name=$1 pat=$2 rc=0 start
	shift 2
	start=$(date +%s)
	timeout -k 5 180 "$@" > "$OUT/$name.txt" 2>&1 || rc=$?
	if [ $rc != 0 ] && [ $rc != 124 ] && grep -q -- "$pat" "$OUT/$name.txt"; then
		pass "$name" "exit $rc after $(($(date +%s) - start)) s: $(grep -m1 -- "$pat" "$OUT/$name.txt" | cut -c1-200)"
	else
		fail "$name" "exit $rc, want non-zero and '$pat': $(tail -n 2 "$OUT/$name.txt" | tr '\n' ' ' | cut -c1-300)"
	fi
}

key() { nvme gen-dhchap-key --hmac="$1" --key-length="$2" --nqn="$3"; }
HKEY=$(key 1 32 "$HOSTNQN")     # the host's secret (SHA-256 transformation)
CKEY=$(key 3 64 "$KNQN")        # the Linux target's controller secret
GCKEY=$(key 2 48 "$GNQN")       # gonvmf's controller secret
WRONG=$(key 1 32 "$HOSTNQN")
for k in HKEY CKEY GCKEY WRONG; do
	[ -n "${!k}" ] || { fail gen-dhchap-key "nvme gen-dhchap-key printed nothing for $k"; finish; }
done

# ---------------------------------------------------------------- Linux kernel target
log "Linux target with DH-HMAC-CHAP for $HOSTNQN"
fallocate -l 64M "$SCRATCH/k-auth.img"
H=$NVMET_CFG/hosts/$HOSTNQN
# k_teardown: the allowed host link first (nvmet_teardown cannot remove a subsystem that has one).
k_teardown() {
	rm -f "$NVMET_CFG/subsystems/$KNQN/allowed_hosts/$HOSTNQN"
	nvmet_teardown && { [ ! -d "$H" ] || rmdir "$H"; }
}
on_exit k_teardown
# Buffered: the 6.12 target's O_DIRECT file path oopsed once under this suite's perf run
# (NULL dereference in __iomap_dio_rw from nvmet_file_execute_io, in ib-comp-wq), and
# this suite is about authentication, not the kernel target's file I/O.
NVMET_BUFFERED_IO=1 check nvmet-setup nvmet_setup "$KNQN" "$SCRATCH/k-auth.img" || finish
mkdir -p "$H"
echo 0 > "$NVMET_CFG/subsystems/$KNQN/attr_allow_any_host"
ln -s "$H" "$NVMET_CFG/subsystems/$KNQN/allowed_hosts/$HOSTNQN"
echo "$HKEY" > "$H/dhchap_key"
echo "hmac(sha256)" > "$H/dhchap_hash"
echo null > "$H/dhchap_dhgroup"
sleep 1

check k-identify sh -c "'$G' identify -a '$RXE_IP' -n '$KNQN' --hostnqn '$HOSTNQN' -S '$HKEY' > '$OUT/k-identify.txt' && grep -q '^Namespace 1:' '$OUT/k-identify.txt'"
expect_fail k-no-secret "give a DH-HMAC-CHAP secret" "$G" identify -a "$RXE_IP" -n "$KNQN" --hostnqn "$HOSTNQN"
# A secret whose key length is not its transformation hash's (SHA-512 over a 32-byte key):
# later kernels take them, and so does gonvmf; the two transformations must agree.
MIXED=$(echo "$HKEY" | sed 's/^DHHC-1:01:/DHHC-1:03:/')
if echo "$MIXED" > "$H/dhchap_key" 2> "$OUT/k-mixed-key.err"; then
	check k-identify-mixed-secret sh -c "'$G' identify -a '$RXE_IP' -n '$KNQN' --hostnqn '$HOSTNQN' -S '$MIXED' > '$OUT/k-identify-mixed.txt' && grep -q '^Namespace 1:' '$OUT/k-identify-mixed.txt'"
else
	fail k-identify-mixed-secret "the Linux target refused the secret: $(tr '\n' ' ' < "$OUT/k-mixed-key.err")"
fi
echo "$HKEY" > "$H/dhchap_key"

log "bidirectional, sha512, ffdhe3072"
echo "$CKEY" > "$H/dhchap_ctrl_key"
echo "hmac(sha512)" > "$H/dhchap_hash"
echo ffdhe3072 > "$H/dhchap_dhgroup"
check k-identify-bidi sh -c "'$G' identify -a '$RXE_IP' -n '$KNQN' --hostnqn '$HOSTNQN' -S '$HKEY' -C '$CKEY' > '$OUT/k-identify-bidi.txt'"
check k-perf-verify timeout -k 5 300 "$G" perf --progress=false -a "$RXE_IP" -n "$KNQN" --hostnqn "$HOSTNQN" \
	-S "$HKEY" -C "$CKEY" --rw randrw -o 4k -q 8 -j 2 --verify --size 16m -T 3s
expect_fail k-wrong-ctrl-key "controller's response does not match" \
	"$G" identify -a "$RXE_IP" -n "$KNQN" --hostnqn "$HOSTNQN" -S "$HKEY" -C "$(key 3 64 "$KNQN")"
check nvmet-teardown k_teardown

# ---------------------------------------------------------------- gonvmf serve
log "gonvmf serve with DH-HMAC-CHAP on $RXE_IP:$GPORT"
KEYS=/tmp/gonvmf-keys
mkdir -m 700 -p "$KEYS"
(umask 077 && echo "$HKEY" > "$KEYS/host.key")
fallocate -l 128M "$SCRATCH/g-auth.img"
(umask 077 && cat > "$OUT/gonvmf.yaml") << EOF
listeners:
  - address: $RXE_IP
    port: $GPORT
subsystems:
  - nqn: $GNQN
    hosts: [$HOSTNQN]
    auth_required: true
    namespaces:
      - nsid: 1
        backend: file
        path: $SCRATCH/g-auth.img
        size: 128MiB
  - nqn: $GOPEN
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: null
        size: 1GiB
hosts:
  - nqn: $HOSTNQN
    dhchap_secret: file:$KEYS/host.key
    dhchap_ctrl_secret: "$GCKEY"
    dhchap_dhgroups: [ffdhe2048, null]
control: {socket: $SOCK}
EOF
check g-check "$G" check --config "$OUT/gonvmf.yaml" --quiet
GONVMF_LOG_LEVEL=info bg_start gonvmf-serve "$G" serve --config "$OUT/gonvmf.yaml"
if ! wait_for 60 "$G" discover -a "$RXE_IP" -s "$GPORT" --connect-timeout 3s; then
	fail gonvmf-serve "gonvmf serve did not come up: $(tail -n 3 "$OUT/gonvmf-serve.log" | tr '\n' ' ' | cut -c1-300)"
	finish
fi
pass gonvmf-serve

# g_connect NAME [nvme connect options]: the Linux host connects to $GNQN; sets dev to the
# namespace's block device. (Not run in $(...): pass/fail must count in this shell.)
g_connect() {
	local name=$1 t0
	shift
	t0=$(date +%s.%N)
	dev=$(nvme_connect "$GNQN" "$GPORT" --hostnqn "$HOSTNQN" "$@" 2> "$OUT/$name.err" | head -n 1)
	if [ -b "$dev" ]; then
		pass "$name" "$dev in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
		return 0
	fi
	fail "$name" "$(tail -n 2 "$OUT/$name.err" | tr '\n' ' ' | cut -c1-300)"
	return 1
}

# fio_verify NAME DEV: 16 MiB of crc32c-verified random writes, read back.
fio_verify() {
	[ -b "$2" ] || {
		fail "$1" "$2 is not a block device"
		return 1
	}
	check "$1" timeout -k 5 300 fio --name=verify --filename="$2" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
		--iodepth=16 --size=16M --verify=crc32c --verify_fatal=1 --do_verify=1 --output="$OUT/$1.txt"
}

if g_connect g-connect --dhchap-secret "$HKEY"; then
	fio_verify g-fio-verify "$dev"
	check g-authenticated-logged grep -q 'msg="queue authenticated".* qid=0 ' "$OUT/gonvmf-serve.log"
	check g-disconnect nvme_disconnect_all
fi
if g_connect g-connect-bidi --dhchap-secret "$HKEY" --dhchap-ctrl-secret "$GCKEY"; then
	fio_verify g-fio-verify-bidi "$dev"
	check g-disconnect-bidi nvme_disconnect_all
fi
expect_fail g-wrong-key "" nvme connect -t rdma -a "$RXE_IP" -s "$GPORT" -n "$GNQN" --hostnqn "$HOSTNQN" --dhchap-secret "$WRONG"
check g-wrong-key-logged grep -q "msg=\"authentication failed\".*host=$HOSTNQN.*explanation=\"authentication failed\"" "$OUT/gonvmf-serve.log"
nvme_disconnect_all
expect_fail g-wrong-ctrl-key "" nvme connect -t rdma -a "$RXE_IP" -s "$GPORT" -n "$GNQN" --hostnqn "$HOSTNQN" \
	--dhchap-secret "$HKEY" --dhchap-ctrl-secret "$(key 2 48 "$GNQN")"
nvme_disconnect_all
expect_fail g-no-secret "" nvme connect -t rdma -a "$RXE_IP" -s "$GPORT" -n "$GNQN" --hostnqn "$HOSTNQN"
nvme_disconnect_all
log "key rotation: the key file is rewritten, the Linux host re-authenticates with the new key"
HKEY2=$(key 1 32 "$HOSTNQN")
if g_connect g-connect-rotate --dhchap-secret "$HKEY"; then
	ctrl=
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2> /dev/null)" = "$GNQN" ] && ctrl=${c##*/}
	done
	before=$(grep -c 'msg="queue authenticated"' "$OUT/gonvmf-serve.log")
	(umask 077 && echo "$HKEY2" > "$KEYS/host.key")
	echo "$HKEY2" > "/sys/class/nvme/$ctrl/dhchap_secret"
	# the admin queue and every I/O queue authenticate again
	want=$((before + $(cat "/sys/class/nvme/$ctrl/queue_count")))
	if wait_for 60 sh -c "[ \$(grep -c 'msg=\"queue authenticated\"' '$OUT/gonvmf-serve.log') -ge $want ]"; then
		pass g-reauth "$ctrl: $(($(grep -c 'msg="queue authenticated"' "$OUT/gonvmf-serve.log") - before)) queues re-authenticated with the rotated key"
	else
		fail g-reauth "$ctrl: $(($(grep -c 'msg="queue authenticated"' "$OUT/gonvmf-serve.log") - before)) of $((want - before)) queues re-authenticated: $(dmesg | grep -i auth | tail -n 3 | tr '\n' ' ')"
	fi
	check g-io-after-reauth timeout -k 5 120 dd if="$dev" of=/dev/null bs=1M count=8 iflag=direct
	check g-disconnect-rotate nvme_disconnect_all
	expect_fail g-old-key-after-rotation "" nvme connect -t rdma -a "$RXE_IP" -s "$GPORT" -n "$GNQN" --hostnqn "$HOSTNQN" --dhchap-secret "$HKEY"
	nvme_disconnect_all
fi
OTHER=nqn.2014-08.org.nvmexpress:uuid:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d
expect_fail g-required "not allowed" "$G" identify -a "$RXE_IP" -s "$GPORT" -n "$GNQN" --hostnqn "$OTHER" -S "$HKEY2"
check g-open-without-auth sh -c "'$G' identify -a '$RXE_IP' -s $GPORT -n '$GOPEN' --hostnqn '$OTHER' > '$OUT/g-open.txt'"
check g-gonvmf-initiator sh -c "'$G' identify -a '$RXE_IP' -s $GPORT -n '$GNQN' --hostnqn '$HOSTNQN' -S '$HKEY2' -C '$GCKEY' > '$OUT/g-identify.txt' && grep -q '^Namespace 1: 128 MiB' '$OUT/g-identify.txt'"
check g-gonvmf-perf-verify timeout -k 5 300 "$G" perf --progress=false -a "$RXE_IP" -s "$GPORT" -n "$GNQN" --hostnqn "$HOSTNQN" \
	-S "$HKEY2" --rw randrw -o 4k -q 8 -j 2 --verify --size 16m -T 3s

log "key rotation through gonvmf ctl: the file: secret replaced by a new inline one"
ctl() { "$G" ctl --socket "$SOCK" "$@"; }
HKEY3=$(key 1 32 "$HOSTNQN")
B64=$(echo "$HKEY3" | cut -d: -f3)
if g_connect g-ctl-connected --dhchap-secret "$HKEY2"; then
	rotate() { echo "$HKEY3" | ctl host key set "$HOSTNQN" --dhchap-secret - > "$OUT/g-ctl-rotate.txt" 2>&1; }
	check g-ctl-rotate rotate
	ctl host key ls > "$OUT/g-ctl-key-ls.txt" 2>&1
	ctl ctrl ls > "$OUT/g-ctl-ctrl-ls.txt" 2>&1
	if grep -q "DHHC-1:01:<32-byte key>:" "$OUT/g-ctl-key-ls.txt" && ! grep -qF "$B64" "$OUT/g-ctl-key-ls.txt" "$OUT/g-ctl-rotate.txt"; then
		pass g-ctl-ls-redacted "$(grep "$HOSTNQN" "$OUT/g-ctl-key-ls.txt" | tr -s ' ' | cut -c1-200)"
	else
		fail g-ctl-ls-redacted "$(cat "$OUT/g-ctl-key-ls.txt" | tr '\n' ' ' | cut -c1-300)"
	fi
	check g-ctl-connected-keeps-working timeout -k 5 120 dd if="$dev" of=/dev/null bs=1M count=8 iflag=direct
	check g-ctl-disconnect nvme_disconnect_all
fi
expect_fail g-ctl-old-key-refused "" nvme connect -t rdma -a "$RXE_IP" -s "$GPORT" -n "$GNQN" --hostnqn "$HOSTNQN" --dhchap-secret "$HKEY2"
nvme_disconnect_all
if g_connect g-ctl-new-key --dhchap-secret "$HKEY3"; then
	check g-ctl-new-key-io timeout -k 5 120 dd if="$dev" of=/dev/null bs=1M count=8 iflag=direct
	check g-ctl-new-key-disconnect nvme_disconnect_all
fi
if ctl save -o "$OUT/g-saved.yaml" 2> /dev/null && grep -qF "$HKEY3" "$OUT/g-saved.yaml" &&
	"$G" check --static --quiet --config "$OUT/g-saved.yaml" > "$OUT/g-saved-check.txt" 2>&1; then
	pass g-ctl-save "the saved configuration holds the rotated key and passes gonvmf check"
else
	fail g-ctl-save "$(tail -n 3 "$OUT/g-saved-check.txt" 2> /dev/null | tr '\n' ' ' | cut -c1-300)"
fi
if grep -qF "$B64" "$OUT/gonvmf-serve.log"; then fail g-ctl-key-not-logged "the key is in gonvmf's log"; else pass g-ctl-key-not-logged; fi
grep -h 'authentication failed\|queue authenticated\|host keys' "$OUT/gonvmf-serve.log" | cut -c1-400 > "$OUT/g-auth-log.txt"

finish
