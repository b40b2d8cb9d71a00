#!/bin/bash
# Stage 2 of the guest boot: PID 1 on the overlay of the host's root filesystem.
#
# Mounts the pseudo filesystems, a fresh tmpfs on /tmp and /run, the results share (9p tag
# gonvmf-out) on /out, reads the run description vm.sh wrote to /out/.vm/env.sh, brings up
# Soft-RoCE (rxe0 on dummy0) and the optional scratch disk, runs the guest script under a
# watchdog with its output in /out/guest.log, records the outcome in /out/.vm/status
# ("exit N", "timeout SEC" or "setup-failed REASON"), saves dmesg and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
export HOME=/root LANG=C.UTF-8 TERM=${TERM:-vt100}
CTL=/out/.vm
LOG=/out/guest.log

say() { echo "gonvmf-vm: $*" | tee -a "$LOG"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }

poweroff_now() {
	sync
	umount /scratch 2>/dev/null
	umount /out 2>/dev/null
	echo "GONVMF-VM-POWEROFF uptime=$(uptime_s)"
	echo o > /proc/sysrq-trigger
	sleep 5
	busybox poweroff -f
	sleep 30
}

# set_status <status line>: the one result vm.sh reads back.
set_status() {
	echo "$*" > "$CTL/status.tmp" && mv "$CTL/status.tmp" "$CTL/status"
}

setup_failed() {
	say "setup failed: $*"
	set_status "setup-failed $*"
	dmesg > /out/dmesg.txt 2>&1
	poweroff_now
}

mkdir -p /dev/pts /dev/shm
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mkdir -p /out
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none gonvmf-out /out; then
	echo "gonvmf-vm: cannot mount the results share (9p tag gonvmf-out)"
	poweroff_now
fi
if ! . "$CTL/env.sh"; then
	echo "gonvmf-vm: cannot read $CTL/env.sh"
	poweroff_now
fi
: > "$LOG"
say "stage 2 at uptime $(uptime_s) s, kernel $(uname -r)"

# The host's /tmp is hidden under a fresh tmpfs (host files there would be a stale, shared
# view). Paths vm.sh needs from under the host's /tmp (repo, build dir, script) are bound back.
mkdir -p /.host-tmp && mount --bind /tmp /.host-tmp
mount -t tmpfs -o mode=1777 tmpfs /tmp
for p in "${VM_TMP_PATHS[@]}"; do
	[ -e "/.host-tmp/${p#/tmp/}" ] || continue
	mkdir -p "$p" && mount --bind "/.host-tmp/${p#/tmp/}" "$p"
done
mount -t tmpfs -o mode=0755 tmpfs /run

# One modprobe for every module the setup needs: each process start is slow under TCG.
mods=(configfs)
[ "$VM_DISK" = 1 ] && mods+=(ext4)
[ "$VM_RXE" = 1 ] && mods+=(rdma_rxe ib_uverbs rdma_ucm dummy)
mkdir -p /etc/modprobe.d && echo "options dummy numdummies=0" > /etc/modprobe.d/gonvmf-vm.conf
timeout 120 modprobe -a "${mods[@]}" || setup_failed "modprobe -a ${mods[*]} failed"
mount -t configfs configfs /sys/kernel/config || setup_failed "cannot mount configfs"
hostname gonvmf-vm
ip link set lo up
ulimit -l unlimited # RDMA memory registration pins pages
ulimit -n 65536

if [ "$VM_DISK" = 1 ]; then
	for _ in $(seq 50); do [ -b /dev/vda ] && break; sleep 0.2; done
	mkdir -p /scratch
	mount -t ext4 /dev/vda /scratch || setup_failed "cannot mount the scratch disk /dev/vda on /scratch"
	export SCRATCH=/scratch
	say "scratch disk: $(df -h --output=size,fstype /scratch | tail -1 | xargs) on /scratch"
fi

rxe_up() {
	ip link add dummy0 type dummy &&
		ip link set dummy0 mtu "$RXE_MTU" up &&
		ip addr add "$RXE_IP/24" dev dummy0 &&
		rdma link add "$RXE_DEV" type rxe netdev dummy0 || return 1
	for _ in $(seq 150); do
		if grep -q ACTIVE "/sys/class/infiniband/$RXE_DEV/ports/1/state" 2> /dev/null && [ -c /dev/infiniband/rdma_cm ]; then
			return 0
		fi
		sleep 0.2
	done
	return 1
}
if [ "$VM_RXE" = 1 ]; then
	export RXE_IP RXE_DEV RXE_NETDEV=dummy0 RXE_MTU
	rxe_up > /out/.vm/rxe.log 2>&1 || setup_failed "Soft-RoCE did not come up ($(tail -3 /out/.vm/rxe.log | tr '\n' ' '))"
	say "$RXE_DEV on dummy0 ($RXE_IP, netdev MTU $RXE_MTU, active_mtu $(ibv_devinfo -d "$RXE_DEV" | awk '/active_mtu/ { print $2 }')) at uptime $(uptime_s) s"
fi

cd "$VM_CWD" 2>/dev/null || cd "$SRC" || cd /
if [ "$VM_MODE" = shell ]; then
	say "interactive shell; exit (or Ctrl-D) powers the guest off"
	PS1='gonvmf-vm:\w# ' setsid -c bash --norc -i < /dev/ttyS0 > /dev/ttyS0 2>&1
	set_status "exit $?"
	poweroff_now
fi

# Run the script under a watchdog that fires before vm.sh's hard limit, so a hung script
# still leaves a ps listing and dmesg behind. timeout(1) runs it in a process group of its
# own and signals the whole group (background servers included). The output goes through a
# process substitution, not a pipeline: a background process the script leaves behind keeps
# tee's input open, and waiting for tee would hang the guest.
limit=$(awk -v d="$VM_DEADLINE" -v u="$(uptime_s)" 'BEGIN { r = d - u; print (r < 1 ? 1 : int(r)) }')
# GONVMF_VM_GUEST_WATCHDOG=0 leaves a hung script to vm.sh's hard limit (tests the harness).
[ "$VM_DEADLINE" = 0 ] || [ "${GONVMF_VM_GUEST_WATCHDOG:-1}" = 0 ] && VM_DEADLINE=0 limit=0
say "running: ${VM_CMD[*]} (watchdog ${limit} s)"
timeout -k 5 "$limit" "${VM_CMD[@]}" < /dev/null > >(tee -a "$LOG") 2>&1 &
group=$!
wait $group
rc=$?
left=$(pgrep -d, -g $group)
if [ -n "$left" ]; then
	say "processes the script left running (now killed):"
	ps -o pid,stat,etime,args -p "$left" 2>&1 | tee -a "$LOG"
	kill -TERM -- -$group 2> /dev/null
	sleep 1
	kill -KILL -- -$group 2> /dev/null
fi
sleep 0.3 # let tee drain
if [ "$VM_DEADLINE" != 0 ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } &&
	awk -v d="$VM_DEADLINE" -v u="$(uptime_s)" 'BEGIN { exit !(u >= d - 1) }'; then
	say "TIMEOUT: the script ran past the time limit and was killed at uptime $(uptime_s) s"
	{
		echo "--- processes at the timeout"
		ps -N -p 2 --ppid 2 -o pid,ppid,stat,wchan:32,etime,args # no kernel threads
		echo "--- last kernel messages"
		dmesg | tail -40
	} 2>&1 | tee -a "$LOG"
	set_status "timeout $limit"
else
	say "script exited with status $rc at uptime $(uptime_s) s"
	set_status "exit $rc"
fi
dmesg > /out/dmesg.txt 2>&1
poweroff_now
