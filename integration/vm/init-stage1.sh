#!/bin/sh
# Stage 1 of the guest boot: /init of the initramfs, busybox only.
#
# Loads the virtio and 9p modules packed into the initramfs, mounts the host's / (9p tag
# gonvmf-root, read-only) as the lower layer of an overlayfs whose upper layer is a guest
# tmpfs, binds the cached Debian kernel's modules (gonvmf.kmods=<host path>) onto
# /usr/lib/modules/<KVER>, and hands over to stage 2 (gonvmf.init=<host path>, run by bash).
# Anything that goes wrong powers the guest off with a line vm.sh can show: a guest that
# dropped to a shell here would only sit until the timeout.
export PATH=/bin
fail() {
	echo "gonvmf-vm stage1: $*"
	echo "GONVMF-VM-STAGE1-FAILED"
	poweroff -f
	sleep 30
}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r ko; do
	insmod "/lib/modules/$ko" || echo "gonvmf-vm stage1: insmod $ko failed"
done < /modules.list
KVER=$(cat /KVER)
KMODS=
STAGE2=
for w in $(cat /proc/cmdline); do
	case "$w" in
	gonvmf.kmods=*) KMODS=${w#gonvmf.kmods=} ;;
	gonvmf.init=*) STAGE2=${w#gonvmf.init=} ;;
	esac
done
[ -n "$KMODS" ] && [ -n "$STAGE2" ] || fail "kernel command line lacks gonvmf.kmods= or gonvmf.init="

# cache=mmap: cache=loose boots no faster and serves stale data after a host-side rewrite.
ok=
for _ in 1 2 3 4 5 6 7 8 9 10; do
	if mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=mmap gonvmf-root /ro 2>/dev/null; then
		ok=1
		break
	fi
	sleep 0.2
done
[ -n "$ok" ] || fail "cannot mount the host root (9p tag gonvmf-root)"
mount -t tmpfs -o mode=0755,size=75% tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
	fail "cannot mount the overlay root"
[ -d "/newroot$KMODS" ] || fail "kernel modules not found at $KMODS (run: integration/vm/vm.sh image)"
[ -f "/newroot$STAGE2" ] || fail "stage 2 not found at $STAGE2"
mkdir -p "/newroot/usr/lib/modules/$KVER"
mount --bind "/newroot$KMODS" "/newroot/usr/lib/modules/$KVER" || fail "cannot bind the kernel modules"
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
# Run a private copy: bash reads a script as it goes, and the host's copy may be edited
# while this guest runs.
cp "/newroot$STAGE2" /newroot/.gonvmf-stage2 || fail "cannot copy stage 2"
exec switch_root /newroot /bin/bash /.gonvmf-stage2
