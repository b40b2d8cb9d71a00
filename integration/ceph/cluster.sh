#!/bin/bash
# cluster.sh: a throw-away single-node Ceph cluster for gonvmf's rbd tests, from Debian 12's
# packages (ceph-mon, ceph-mgr, ceph-osd, ceph-common): one mon, one mgr, one OSD whose
# BlueStore lives in a sparse file (or in memory: GONVMF_CEPH_STORE=memstore), cephx on,
# one pool of size 1 for RBD images, every daemon bound to 127.0.0.1 only.
#
#   cluster.sh start     # create and start a fresh cluster in $DIR; prints the env to use it
#   cluster.sh stop      # stop its daemons (by their pid files) and delete $DIR
#   cluster.sh status    # is it up? (exit 0: yes)
#   cluster.sh env       # print the environment lines (CEPH_CONF, GONVMF_CEPH_*) for a running one
#
# $DIR is $GONVMF_CEPH_DIR, default <repo>/build/ceph. After start, $DIR/env holds:
#   CEPH_CONF=$DIR/ceph.conf            the cluster's ceph.conf (client.admin's keyring is set in it)
#   GONVMF_CEPH_POOL=gonvmf             the rbd pool
#   GONVMF_CEPH_USER=gonvmf             a client with 'profile rbd' caps on that pool only
#   GONVMF_CEPH_KEYRING=$DIR/client.gonvmf.keyring   that client's keyring
# Tests read that file (or the same variables from the environment) to find the cluster.
#
# Options (environment): GONVMF_CEPH_PORT (mon's msgr2 port, default 3300),
# GONVMF_CEPH_STORE (bluestore | memstore, default bluestore; see README.md here),
# GONVMF_CEPH_OSD_SIZE (BlueStore file size, sparse, default 8G),
# GONVMF_CEPH_TIMEOUT (seconds to wait for the cluster, default 120),
# GONVMF_CEPH_MGR (0: no mgr; RBD I/O does not need it, a TCG guest starts faster without it).
# The daemons log to $DIR/log; a failed start prints their last lines.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${GONVMF_CEPH_DIR:-${GONVMF_BUILD:-$REPO/build}/ceph}
PORT=${GONVMF_CEPH_PORT:-3300}
STORE=${GONVMF_CEPH_STORE:-bluestore}
OSD_SIZE=${GONVMF_CEPH_OSD_SIZE:-8G}
TIMEOUT=${GONVMF_CEPH_TIMEOUT:-120}
MGR=${GONVMF_CEPH_MGR:-1}
POOL=gonvmf
CLIENT=gonvmf
CONF=$DIR/ceph.conf
# The daemons of the cluster in $DIR: as started (its daemons file), else as configured.
daemons() {
	if [ -f "$DIR/daemons" ]; then
		cat "$DIR/daemons"
	else
		echo mon.a osd.0
		[ "$MGR" = 1 ] && echo mgr.x
	fi
	return 0
}

say() { echo "cluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }

need() {
	local missing=()
	for c in ceph ceph-mon ceph-mgr ceph-osd ceph-authtool monmaptool rados rbd uuidgen; do
		command -v "$c" >/dev/null || missing+=("$c")
	done
	/usr/bin/python3 -c 'import rados' 2>/dev/null || missing+=(python3-rados)
	[ ${#missing[@]} -eq 0 ] ||
		die "missing ${missing[*]}: install Debian's ceph-mon ceph-mgr ceph-osd ceph-common (integration/vm/setup-host.sh does)"
}

# pid of a daemon from its pid file, if it is running.
daemon_pid() {
	local f=$DIR/run/$1.pid p
	[ -f "$f" ] || return 1
	p=$(cat "$f" 2>/dev/null) || return 1
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 1
	# The pid file may be stale and the number reused: check it is a ceph daemon of ours.
	tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$CONF" || return 1
	echo "$p"
}

# mon_commands UUID: register osd.N with UUID (prints N), create the pool, enable rbd on it.
mon_commands() {
	timeout 120 /usr/bin/python3 - "$CONF" "$1" "$POOL" <<'PY'
import json, sys
import rados

conf, uuid, pool = sys.argv[1:4]
c = rados.Rados(conffile=conf, name="client.admin")
c.connect(timeout=60)

def cmd(**kw):
    ret, out, err = c.mon_command(json.dumps(kw), b"", timeout=60)
    if ret != 0:
        sys.exit("%s: %s (%d)" % (kw["prefix"], err, ret))
    return out

print(cmd(prefix="osd new", uuid=uuid).decode().strip(), flush=True)
cmd(prefix="osd pool create", pool=pool, pg_num=8, pgp_num=8, pool_type="replicated")
cmd(prefix="osd pool application enable", pool=pool, app="rbd")
c.shutdown()
PY
}

stop_daemons() {
	local d p pids=()
	for d in $(daemons); do
		if p=$(daemon_pid "$d"); then
			kill "$p" 2>/dev/null && pids+=("$p")
		fi
	done
	for p in "${pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$p" 2>/dev/null && { say "pid $p did not stop in 10 s: killing it"; kill -9 "$p" 2>/dev/null || true; }
	done
	return 0
}

stop() {
	stop_daemons
	# Refuse to delete anything that does not look like our cluster directory.
	if [ -d "$DIR" ]; then
		[ -f "$DIR/ceph.conf" ] || [ -z "$(ls -A "$DIR")" ] ||
			die "$DIR is not a cluster.sh directory (no ceph.conf): not deleting it"
		rm -rf "$DIR"
	fi
}

write_conf() {
	local fsid=$1 asok=$DIR/run/\$name.asok
	# A unix socket path has at most 107 bytes: with a deep $DIR, no admin sockets (the
	# tests do not use them; they are for looking into a daemon with `ceph daemon`).
	[ ${#DIR} -le 80 ] || asok=
	cat >"$CONF" <<EOF
# Written by integration/ceph/cluster.sh: a single-node test cluster, loopback only.
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$PORT
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $DIR/keyring
run dir = $DIR/run
pid file = $DIR/run/\$name.pid
admin socket = $asok
log file = $DIR/log/\$name.log
crash dir = $DIR/crash
log to stderr = false
debug rocksdb = 0/0
debug bluestore = 0/0
debug bluefs = 0/0
debug bdev = 0/0
err to stderr = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
mon osd full ratio = 0.97
mon osd backfillfull ratio = 0.96
mon osd nearfull ratio = 0.95
osd objectstore = $STORE

[mon]
mon data = $DIR/mon
mon cluster log file = $DIR/log/cluster.log
paxos propose interval = 0.05
paxos min wait = 0.01

[mgr]
mgr data = $DIR/mgr

[osd]
osd data = $DIR/osd
osd memory target = 939524096
osd op num shards = 2
osd op num threads per shard = 1
bluestore block path = $DIR/osd.block
bluestore block create = true
bluestore block size = $OSD_SIZE
bluestore fsck on mount = false
bluestore cache autotune = false
bluestore cache size = 134217728
memstore device bytes = 2147483648
osd class load list = rbd lock
osd class default list = rbd lock
EOF
}

keys() {
	local k=$DIR/keyring kc=$DIR/client.$CLIENT.keyring
	{
		ceph-authtool --create-keyring "$k" --gen-key -n mon. --cap mon 'allow *'
		ceph-authtool "$k" --gen-key -n client.admin \
			--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *'
		ceph-authtool "$k" --gen-key -n osd.0 \
			--cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *'
		ceph-authtool "$k" --gen-key -n mgr.x \
			--cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *'
		ceph-authtool --create-keyring "$kc" --gen-key -n "client.$CLIENT" \
			--cap mon 'profile rbd' --cap osd "profile rbd pool=$POOL" --cap mgr "profile rbd pool=$POOL"
		ceph-authtool "$k" --import-keyring "$kc"
	} >/dev/null
	chmod 600 "$k" "$kc"
}

env_lines() {
	echo "CEPH_CONF=$CONF"
	echo "GONVMF_CEPH_POOL=$POOL"
	echo "GONVMF_CEPH_USER=$CLIENT"
	echo "GONVMF_CEPH_KEYRING=$DIR/client.$CLIENT.keyring"
}

# failed: print the daemons' logs, stop them, keep $DIR to look at, exit 1.
failed() {
	logs
	stop_daemons
	die "$* (cluster directory kept: $DIR; 'cluster.sh stop' deletes it)"
}

logs() {
	local f
	for f in "$DIR"/log/*.log; do
		[ -f "$f" ] || continue
		say "--- last lines of $f"
		tail -n 15 "$f" >&2
	done
}

start() {
	need
	local t0 fsid uuid p
	t0=$(date +%s.%N)
	if [ -f "$CONF" ]; then
		say "stopping the cluster left in $DIR"
		stop
	fi
	if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
		die "127.0.0.1:$PORT is in use (another cluster?): stop it, or set GONVMF_CEPH_PORT"
	fi
	mkdir -p "$DIR"/{mon,mgr,osd,run,log,crash}
	rm -f "$DIR/daemons"
	daemons >"$DIR/daemons.tmp" && mv "$DIR/daemons.tmp" "$DIR/daemons"
	fsid=$(uuidgen)
	uuid=$(uuidgen)
	write_conf "$fsid"
	keys
	monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$PORT]" "$DIR/monmap" >/dev/null
	ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" --keyring "$DIR/keyring" 2>"$DIR/log/mkfs-mon.log" ||
		failed "ceph-mon --mkfs failed"
	ceph-mon -c "$CONF" -i a 2>>"$DIR/log/mon-stderr.log" || failed "ceph-mon did not start"
	# The OSD's id and the pool come from the mon: one Python process asks for both through
	# librados (each `ceph` command would start its own interpreter: ~0.4 s here, ~7 s in a
	# TCG guest). The OSD's mkfs asks the mon for its config, so it follows.
	p=$(mon_commands "$uuid" 2>>"$DIR/log/ceph-cli.log") || failed "creating osd.0 and pool $POOL through the mon failed"
	[ "$p" = 0 ] || failed "the mon gave osd.$p, want osd.0"
	(
		ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$uuid" >"$DIR/log/mkfs-osd.log" 2>&1 || exit 1
		ceph-osd -c "$CONF" -i 0 2>>"$DIR/log/osd-stderr.log" || exit 2
	) &
	local osd=$!
	if [ "$MGR" = 1 ]; then
		ceph-mgr -c "$CONF" -i x 2>>"$DIR/log/mgr-stderr.log" || failed "ceph-mgr did not start"
	fi
	wait "$osd" || case $? in
		1) failed "ceph-osd --mkfs failed" ;;
		*) failed "ceph-osd did not start" ;;
		esac
	# Ready when an object can be written and read back (the pool's PGs are active).
	local deadline=$((SECONDS + TIMEOUT))
	until timeout 20 rados -c "$CONF" -p "$POOL" put cluster.sh-probe "$CONF" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || failed "pool $POOL not writable after ${TIMEOUT}s"
		sleep 0.2
	done
	rados -c "$CONF" -p "$POOL" rm cluster.sh-probe
	env_lines >"$DIR/env"
	say "up in $(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)") s ($STORE, mon 127.0.0.1:$PORT, pool $POOL): $DIR"
	env_lines
}

status() {
	local d ok=0
	for d in $(daemons); do
		if daemon_pid "$d" >/dev/null; then echo "$d up"; else echo "$d down"; ok=1; fi
	done
	return $ok
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
env)
	status >/dev/null || die "no cluster running in $DIR: run $0 start"
	env_lines
	;;
*)
	echo "usage: $0 start|stop|status|env   (directory: \$GONVMF_CEPH_DIR, now $DIR)" >&2
	exit 2
	;;
esac
