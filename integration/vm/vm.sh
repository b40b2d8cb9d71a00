#!/bin/bash
# vm.sh: run gonvmf's RDMA tests inside a qemu guest with Soft-RoCE.
#
# The build machines' kernels have no RDMA, NVMe or configfs, so everything RDMA runs in a
# guest booting Debian's stock kernel under TCG. The guest's root is the host's / over
# read-only virtio-9p under a tmpfs overlay: it runs the host's binaries at the same paths
# (host-built cgo binaries included) and cannot modify the host. Results come back through
# a second, writable 9p share mounted on /out. See integration/README.md.
#
#   vm.sh image [--kernel K]    build or refresh the cached kernel + initramfs
#   vm.sh run [opts] SCRIPT [ARGS...]
#                               boot, bring up rxe0, run SCRIPT (a bash script or an
#                               executable) in the guest; exit with its status
#   vm.sh shell [opts]          interactive guest on this terminal
#   vm.sh kernels               the kernel names --kernel takes
#   vm.sh check                 check the host prerequisites
#   vm.sh clean [--all]         delete the results (--all: the cached image too)
#
# Exit status of run: the guest script's status; 124 if it did not finish within --timeout;
# 125 if the harness or the guest failed before or around the script (the message says
# which); 2 for a usage error.
# A boot lost before the script began (the kernel died under TCG) is booted again, up to
# $GONVMF_VM_BOOT_RETRIES times (2): it ran nothing, so it is no result.
#
# --kernel K (or GONVMF_VM_KERNEL=K) boots another Debian kernel than the default one
# (the package linux-image-amd64 depends on, or GONVMF_VM_KPKG): K is a name from the
# KERNELS table below (e.g. 6.12), or an exact package name, optionally with "@<suite>"
# for a suite the host's apt sources lack (e.g. linux-image-...@bookworm-backports). Such a
# suite is used through a private apt state under $GONVMF_VM_DIR/apt/ for the download
# only: the host's apt configuration is not changed. A named kernel's exact package is used
# when apt has it; when its suite no longer does (backports keeps few uploads), the package
# that suite's linux-image-amd64 depends on, if it is of the same series (linux-image-<K>.*).

# The whole script is one { } block, parsed before it runs: editing this file cannot
# disturb a vm.sh that is already running.
{
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
VM_DIR=${GONVMF_VM_DIR:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache/gonvmf-vm}
BUILD_DIR=${GONVMF_BUILD:-$SRC/build}
RXE_IP=10.99.0.1
# Modules stage 1 needs before the root filesystem exists (their dependencies come along).
INITRAMFS_MODULES="virtio_pci virtio_blk 9pnet_virtio 9p overlay"
# Modules the harness and the guest helpers load; the image build checks they exist.
GUEST_MODULES="configfs dummy rdma_rxe ib_uverbs rdma_ucm nvme_rdma nvmet nvmet_rdma null_blk brd ext4"

# Named kernels: <name> <package>[@<apt suite>]. 6.12 has NVMe in-band authentication
# (CONFIG_NVME_HOST_AUTH, CONFIG_NVME_TARGET_AUTH) and NVMe/TCP TLS, which 6.1 lacks. The
# package is the one the project has verified; without it in apt, the suite's
# linux-image-amd64 dependency of the same series stands in (resolve_kernel_fallback).
KERNELS=(
	"6.12 linux-image-6.12.95+deb12-amd64@bookworm-backports"
)

EXIT_TIMEOUT=124
EXIT_HARNESS=125

msg() { echo "vm.sh: $*" >&2; }
die() {
	msg "$*"
	exit $EXIT_HARNESS
}
usage_error() {
	msg "$*"
	msg "usage: vm.sh image [--kernel K] | run [--kernel K] [--timeout SEC] [--mem MiB] [--cpus N] [--disk SIZE] [--out DIR] [--quiet] [--no-rxe] SCRIPT [ARGS...] | shell [opts] | kernels | check | clean [--all]"
	exit 2
}
now() { date +%s.%N; }

# What vm.sh run/shell cleans up, however it ends. These are globals because the EXIT trap
# may run after cmd_run's locals are gone.
VM_DISK=""  # the guest's scratch disk, from the moment its name is chosen until removed
VM_OUT=""   # the guest's results directory
# vm_exit: the EXIT trap of run and shell: removes the scratch disk.
# shellcheck disable=SC2317 # run by a trap
vm_exit() { [ -z "$VM_DISK" ] || rm -f "$VM_DISK"; }
# vm_interrupted: the SIGINT, SIGTERM and SIGHUP trap of run and shell. It stops qemu
# (timeout passes the signal on to it) and waits for it, then exits 130, and vm_exit
# removes the disk. bash runs it only after a foreground command (mkfs, the shell's qemu)
# has ended.
# shellcheck disable=SC2317 # run by a trap
vm_interrupted() {
	local p
	for p in $(jobs -p); do kill -TERM "$p" 2> /dev/null || true; done
	wait
	msg "interrupted; partial results in $VM_OUT"
	exit 130
}
# rm_stale_disks: removes the scratch disks whose vm.sh is gone: a SIGKILL runs no trap.
# A disk's name holds its vm.sh's pid. The pid must be of this pid namespace, so don't
# share $VM_DIR with containers.
rm_stale_disks() {
	local f
	for f in "$VM_DIR"/disks/*.img; do
		[[ $f =~ \.pid([0-9]+)\.[0-9]+\.img$ ]] || continue
		[ -d "/proc/${BASH_REMATCH[1]}" ] || rm -f "$f"
	done
}
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- host prerequisites ----

# check_host <image|run>: every missing command, with its Debian package, in one message.
check_host() {
	local missing=() c
	local need=(
		"apt-get:apt" "apt-cache:apt" "dpkg-deb:dpkg" "depmod:kmod" "modprobe:kmod"
		"cpio:cpio" "gzip:gzip" "python3:python3" "flock:util-linux" "xz:xz-utils" "zstd:zstd"
	)
	if [ "$1" = run ]; then
		need=(
			"qemu-system-x86_64:qemu-system-x86" "timeout:coreutils" "flock:util-linux"
			"truncate:coreutils" "mkfs.ext4:e2fsprogs"
			# what the guest runs, from the host's userland
			"bash:bash" "setsid:util-linux" "ip:iproute2" "rdma:iproute2" "ibv_devinfo:ibverbs-utils"
			"rping:rdmacm-utils" "nvme:nvme-cli" "fio:fio" "ps:procps" "python3:python3" "curl:curl"
		)
	fi
	for c in "${need[@]}"; do
		command -v "${c%%:*}" > /dev/null 2>&1 || missing+=("${c%%:*} (${c#*:})")
	done
	if [ "$1" = image ]; then
		if [ ! -x /bin/busybox ] || ldd /bin/busybox > /dev/null 2>&1; then
			missing+=("static /bin/busybox (busybox-static)")
		fi
	else
		[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] ||
			missing+=("the rxe verbs provider (ibverbs-providers)")
	fi
	if [ ${#missing[@]} -gt 0 ]; then
		msg "missing on the host: ${missing[*]}"
		die "install them with: integration/vm/setup-host.sh (Debian 12, root)"
	fi
}

# ---- the cached image ----
#
# An image root holds images/, current and kernel-pin: $VM_DIR for the default kernel,
# $VM_DIR/kernels/<name> for a kernel chosen with --kernel (select_kernel sets IMG_ROOT).
# <root>/images/<package>_<version>/ holds manifest (what was built from what), kernel/ (the
# unpacked Debian kernel package with depmod output), vmlinux (the uncompressed kernel: qemu
# boots it through its PVH entry, 2-3 s faster than the bzImage under TCG) and
# initramfs-<inputs hash>.cpio.gz. <root>/current points at the one in use. Images and
# initramfs files are never changed in place: a rebuild adds new ones and moves the link, so it
# never waits for running guests (qemu reads the kernel and initramfs at start-up; a guest
# reads its modules from its image directory all along). Locks: running guests hold
# $VM_DIR/lock shared; builders hold $VM_DIR/build.lock; old images are deleted only when
# `vm.sh image` or `vm.sh clean` gets both exclusively (no guest running, no build).

# select_kernel <K>: sets KSEL (the name), IMG_ROOT, KSEL_PKG (the package, empty: the
# default), KSEL_SUITE (an apt suite outside the host's sources, or empty) and KSEL_NAMED
# (1: K is a name from KERNELS, which may fall back to another package of its series).
select_kernel() {
	local k=${1:-} e
	KSEL=$k KSEL_PKG="" KSEL_SUITE="" KSEL_NAMED=0 IMG_ROOT=$VM_DIR
	case $k in
	"" | default) KSEL="" ; return 0 ;;
	*/* | *[[:space:]]* | .*) usage_error "--kernel '$k' is not a kernel name (see: vm.sh kernels)" ;;
	esac
	for e in "${KERNELS[@]}"; do
		if [ "${e%% *}" = "$k" ]; then
			KSEL_PKG=${e#* } KSEL_NAMED=1
			break
		fi
	done
	if [ -z "$KSEL_PKG" ]; then
		case $k in
		linux-image-*) KSEL_PKG=$k ;;
		*) usage_error "unknown kernel '$k': use one of: $(printf '%s ' "${KERNELS[@]%% *}")or a linux-image-... package name" ;;
		esac
	fi
	case $KSEL_PKG in *@*) KSEL_SUITE=${KSEL_PKG#*@} KSEL_PKG=${KSEL_PKG%%@*} ;; esac
	IMG_ROOT=$VM_DIR/kernels/$k
}

# host_debian_mirror: the URI the host's apt sources use for Debian's main archive.
host_debian_mirror() {
	{
		cat /etc/apt/sources.list 2> /dev/null
		cat /etc/apt/sources.list.d/*.list 2> /dev/null
	} | awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($(i+1) == "bookworm") { print $i; exit } break } }'
	awk 'tolower($1) == "uris:" { u = $2 } tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == "bookworm") { print u; exit } }' \
		/etc/apt/sources.list.d/*.sources 2> /dev/null
}

# kapt <apt-get|apt-cache> ARGS...: apt for the selected kernel's package: the host's own
# configuration, or, for a suite the host lacks, a private one (sources, lists and cache
# under $VM_DIR/apt/<suite>; the host's keyring) created and updated on first use.
kapt() {
	local tool=$1
	shift
	if [ -z "$KSEL_SUITE" ]; then
		"$tool" "$@"
		return
	fi
	local d=$VM_DIR/apt/$KSEL_SUITE
	local opts=(-o "Dir::Etc::SourceList=$d/sources.list" -o "Dir::Etc::SourceParts=$d/sources.list.d"
		-o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o "Dir::Etc::Preferences=$d/preferences"
		-o "Dir::Etc::PreferencesParts=$d/preferences.d")
	[ "$(id -u)" = 0 ] && opts+=(-o APT::Sandbox::User=root)
	"$tool" "${opts[@]}" "$@"
}

# kapt_update: (re)creates the private apt state of $KSEL_SUITE and downloads its lists.
kapt_update() {
	[ -n "$KSEL_SUITE" ] || return 0
	local d=$VM_DIR/apt/$KSEL_SUITE mirror
	mirror=$(host_debian_mirror | head -n 1)
	[ -n "$mirror" ] || {
		msg "cannot find the Debian mirror in the host's apt sources (a 'bookworm' suite) to fetch $KSEL_SUITE from"
		return 1
	}
	mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/sources.list.d" "$d/preferences.d"
	: > "$d/preferences"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $KSEL_SUITE main" > "$d/sources.list"
	msg "apt-get update for $KSEL_SUITE (private lists in $d, for the kernel download only)"
	kapt apt-get -q=2 update || {
		msg "apt-get update of $KSEL_SUITE from $mirror failed"
		return 1
	}
}

# resolve_kernel: sets KPKG/KPKG_VERSION to the kernel package to use: the selected one
# (--kernel), $GONVMF_VM_KPKG, or the package linux-image-amd64 depends on (the lab's pin).
# Empty if apt cannot tell. apt-cache takes 1-2 s per call here, so the answer is kept in
# <root>/kernel-pin until the package lists change.
resolve_kernel() {
	local key pin=$IMG_ROOT/kernel-pin
	mkdir -p "$IMG_ROOT"
	key=$(kernel_pin_key)
	if [ -f "$pin" ] && [ "$(sed -n 1p "$pin")" = "$key" ]; then
		KPKG=$(sed -n 2p "$pin")
		KPKG_VERSION=$(sed -n 3p "$pin")
		[ -n "$KPKG_VERSION" ] && return 0
	fi
	resolve_kernel_apt
	# a private suite's lists may have been updated just now: the answer is theirs
	[ -n "$KSEL_SUITE" ] && key=$(kernel_pin_key)
	[ -n "$KPKG_VERSION" ] && printf '%s\n%s\n%s\n' "$key" "$KPKG" "$KPKG_VERSION" > "$pin"
	return 0
}

# kernel_pin_key: what the kernel-pin answer depends on: the selection and the package lists.
kernel_pin_key() {
	local lists=/var/lib/apt/lists
	[ -n "$KSEL_SUITE" ] && lists=$VM_DIR/apt/$KSEL_SUITE/lists
	{
		echo "${GONVMF_VM_KPKG:-} $KSEL_PKG $KSEL_SUITE"
		stat -c '%n %Y %s' "$lists"/*Packages* 2> /dev/null || true
	} | sha256sum | cut -c1-32
}

resolve_kernel_apt() {
	KPKG=$KSEL_PKG
	[ -n "$KPKG" ] || KPKG=${GONVMF_VM_KPKG:-}
	if [ -z "$KPKG" ]; then
		KPKG=$(apt-cache depends linux-image-amd64 2> /dev/null |
			awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
	fi
	KPKG_VERSION=
	if [ -n "$KPKG" ]; then
		local try
		for try in 1 2; do
			# a private suite's lists are fetched on first use, and again if they lack KPKG
			if [ -n "$KSEL_SUITE" ] && { [ $try = 2 ] || ! ls "$VM_DIR/apt/$KSEL_SUITE/lists/"*Packages* > /dev/null 2>&1; }; then
				kapt_update || break
			fi
			KPKG_VERSION=$(kapt apt-cache policy "$KPKG" 2> /dev/null | awk '/Candidate:/ { print $2; exit }') || true
			[ "$KPKG_VERSION" = "(none)" ] && KPKG_VERSION=
			if [ -n "$KPKG_VERSION" ] || [ -z "$KSEL_SUITE" ]; then break; fi
		done
	fi
	[ -n "$KPKG_VERSION" ] || [ "$KSEL_NAMED" != 1 ] || resolve_kernel_fallback
	return 0
}

# resolve_kernel_fallback: for a named kernel whose exact package apt does not have (after
# a fresh update of a private suite's lists): sets KPKG/KPKG_VERSION to the package that
# linux-image-amd64 of the same apt sources depends on, if its name is linux-image-<KSEL>.*
# (another upload of the same kernel series), and says so; else leaves them as they are.
resolve_kernel_fallback() {
	local pkg ver
	pkg=$(kapt apt-cache depends linux-image-amd64 2> /dev/null |
		awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
	case $pkg in
	linux-image-"$KSEL".*) ;;
	*)
		msg "kernel $KSEL: apt${KSEL_SUITE:+ ($KSEL_SUITE)} has neither the pinned $KSEL_PKG nor a linux-image-amd64 of the $KSEL series (it depends on '${pkg:-nothing}')"
		return 0
		;;
	esac
	ver=$(kapt apt-cache policy "$pkg" 2> /dev/null | awk '/Candidate:/ { print $2; exit }') || true
	[ -n "$ver" ] && [ "$ver" != "(none)" ] || return 0
	msg "kernel $KSEL: the pinned $KSEL_PKG is not in apt${KSEL_SUITE:+ ($KSEL_SUITE)}; using $pkg $ver instead (what linux-image-amd64 there depends on)"
	KPKG=$pkg KPKG_VERSION=$ver
}

# initramfs_name: the initramfs file name for the current stage 1, busybox and module list.
initramfs_name() {
	echo "initramfs-$({
		cat "$HERE/init-stage1.sh" /bin/busybox
		echo "$INITRAMFS_MODULES"
	} | sha256sum | cut -c1-16).cpio.gz"
}

current_image() { readlink -e "$IMG_ROOT/current" 2> /dev/null || true; }
manifest_get() { sed -n "s/^$2=//p" "$1/manifest" 2> /dev/null; }

# image_state <image dir>: prints "ok", "initramfs" (only the initramfs is missing) or "kernel".
image_state() {
	local img=$1
	[ -n "$img" ] && [ -f "$img/manifest" ] && [ -f "$img/vmlinux" ] || {
		echo kernel
		return
	}
	resolve_kernel
	if [ -z "$KPKG_VERSION" ]; then
		msg "cannot resolve the kernel package from apt (no package lists? run integration/vm/setup-host.sh, or check the network for a --kernel from another suite); using the cached $(manifest_get "$img" KPKG) $(manifest_get "$img" KPKG_VERSION)"
	elif [ "$KPKG" != "$(manifest_get "$img" KPKG)" ] || [ "$KPKG_VERSION" != "$(manifest_get "$img" KPKG_VERSION)" ]; then
		msg "kernel package changed: cached $(manifest_get "$img" KPKG) $(manifest_get "$img" KPKG_VERSION), now $KPKG $KPKG_VERSION"
		echo kernel
		return
	fi
	[ -f "$img/$(initramfs_name)" ] || {
		echo initramfs
		return
	}
	echo ok
}

# build_initramfs <image dir>: busybox-static, the stage-1 modules and init. Every failed
# step returns 1 before the file gets its final name (callers run it on the left of ||,
# where set -e is off): an initramfs short of a module or a tool is never cached.
build_initramfs() {
	local img=$1 kver name ir m ko b
	kver=$(manifest_get "$img" KVER)
	[ -n "$kver" ] || {
		msg "no KVER in $img/manifest"
		return 1
	}
	name=$(initramfs_name)
	ir=$img/initramfs.d
	rm -rf "$ir" &&
		mkdir -p "$ir"/{bin,dev,proc,sys,ro,rw,newroot,lib/modules} &&
		cp /bin/busybox "$ir/bin/busybox" || return 1
	for m in sh mount insmod mkdir cat cp sleep poweroff switch_root; do ln -s busybox "$ir/bin/$m" || return 1; done
	: > "$ir/modules.list" || return 1
	# pipefail: a failed modprobe (first stage) or copy (last stage) fails the pipeline
	for m in $INITRAMFS_MODULES; do
		modprobe -d "$img/kernel" -S "$kver" --show-depends "$m" || return 1
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r ko; do
		# busybox insmod takes plain .ko files; newer Debian kernels ship .ko.xz
		b=$(basename "$ko")
		case $ko in
		*.ko.xz) b=${b%.xz}; xz -dc "$ko" > "$ir/lib/modules/$b" ;;
		*.ko.zst) b=${b%.zst}; zstd -q -dc "$ko" > "$ir/lib/modules/$b" ;;
		*) cp "$ko" "$ir/lib/modules/" ;;
		esac && echo "$b" >> "$ir/modules.list" || return 1
	done || {
		msg "collecting the initramfs modules ($INITRAMFS_MODULES) of $kver failed"
		return 1
	}
	[ -s "$ir/modules.list" ] || {
		msg "no initramfs modules found for $kver"
		return 1
	}
	cp "$HERE/init-stage1.sh" "$ir/init" && chmod 755 "$ir/init" &&
		echo "$kver" > "$ir/KVER" || return 1
	(cd "$ir" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$img/$name.tmp" || {
		rm -f "$img/$name.tmp"
		return 1
	}
	mv "$img/$name.tmp" "$img/$name" && rm -rf "$ir"
}

# build_image: download the pinned kernel package, unpack it, depmod, extract vmlinux, check
# the modules the harness needs, build the initramfs, then point <root>/current at it.
build_image() {
	resolve_kernel
	[ -n "$KPKG" ] && [ -n "$KPKG_VERSION" ] ||
		die "cannot resolve the kernel package ${KSEL_PKG:-(apt-cache depends linux-image-amd64 gave '${KPKG}')}${KSEL_SUITE:+ in $KSEL_SUITE}: run integration/vm/setup-host.sh (it runs apt-get update)"
	local img=$IMG_ROOT/images/${KPKG}_$KPKG_VERSION t0 deb kver m
	local new=$img.new
	t0=$(now)
	if [ ! -f "$img/manifest" ]; then # an older image may be back in use: keep it
		msg "building the guest image from $KPKG $KPKG_VERSION in $VM_DIR"
		rm -rf "$new"
		mkdir -p "$new/dl"
		# An exact name=version: a glob would make apt download every kernel (1.7 GB).
		local sandbox=()
		[ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
		(cd "$new/dl" && kapt apt-get download -q=2 "${sandbox[@]}" "$KPKG=$KPKG_VERSION") ||
			die "apt-get download $KPKG=$KPKG_VERSION failed (stale package lists? run integration/vm/setup-host.sh)"
		deb=$(ls "$new"/dl/*.deb)
		dpkg-deb -x "$deb" "$new/kernel" || die "dpkg-deb -x $deb failed"
		rm -rf "$new/dl"
		kver=$(cd "$new/kernel/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | head -1)
		[ -n "$kver" ] || die "$KPKG has no /boot/vmlinuz-*"
		depmod -b "$new/kernel" "$kver" || die "depmod for $kver failed"
		for m in $GUEST_MODULES; do
			modprobe -d "$new/kernel" -S "$kver" --show-depends "$m" > /dev/null 2>&1 ||
				die "kernel $kver has no module $m, which the harness needs (pin another kernel with GONVMF_VM_KPKG=linux-image-...)"
		done
		# The Debian bzImage carries an XZ (6.1) or zstd (6.12) payload; boot the uncompressed
		# ELF if it can be had.
		python3 - "$new/kernel/boot/vmlinuz-$kver" "$new/vmlinux" << 'PY' || cp "$new/kernel/boot/vmlinuz-$kver" "$new/vmlinux"
import lzma, subprocess, sys
data = open(sys.argv[1], 'rb').read()
i = data.find(b'\xfd7zXZ\x00')
if i >= 0:
    elf = lzma.LZMADecompressor().decompress(data[i:])
else:
    i = data.find(b'\x28\xb5\x2f\xfd')
    if i < 0:
        sys.exit("no XZ or zstd payload in the bzImage; booting the bzImage instead")
    # the payload is followed by other bytes: zstd decodes the frame, then complains
    elf = subprocess.run(['zstd', '-q', '-dc'], input=data[i:], capture_output=True).stdout
if elf[:4] != b'\x7fELF':
    sys.exit("the kernel payload is not an ELF kernel; booting the bzImage instead")
open(sys.argv[2], 'wb').write(elf)
PY
		cat > "$new/manifest" << EOF
KPKG=$KPKG
KPKG_VERSION=$KPKG_VERSION
KVER=$kver
BUILT=$(date -u +%Y-%m-%dT%H:%M:%SZ)
EOF
		rm -rf "$img"
		mv "$new" "$img"
	fi
	[ -f "$img/$(initramfs_name)" ] || build_initramfs "$img" || die "building the initramfs failed"
	ln -sfn "images/${img##*/}" "$IMG_ROOT/current.tmp" && mv -T "$IMG_ROOT/current.tmp" "$IMG_ROOT/current"
	msg "image ready in $(elapsed "$t0") s: kernel $(manifest_get "$img" KVER) ($(du -sh "$img" | cut -f1) in $img)"
}

# ensure_image: sets IMG (the image directory) and INITRD, building what is missing.
ensure_image() {
	mkdir -p "$IMG_ROOT/images"
	local state
	state=$(image_state "$(current_image)")
	if [ "$state" != ok ]; then
		exec 8> "$VM_DIR/build.lock"
		flock -x -w 1800 8 || die "timed out waiting for another build of the image ($VM_DIR/build.lock)"
		state=$(image_state "$(current_image)") # someone else may have built it meanwhile
		case $state in
		kernel) build_image ;;
		initramfs)
			msg "building a new initramfs (stage 1 or busybox changed)"
			build_initramfs "$(current_image)" || die "building the initramfs failed"
			;;
		esac
		exec 8>&-
	fi
	IMG=$(current_image)
	INITRD=$IMG/$(initramfs_name)
	[ -f "$IMG/vmlinux" ] && [ -f "$INITRD" ] || die "the image in $IMG is incomplete; run: integration/vm/vm.sh clean --all"
}

# gc_images: delete images and initramfs files that are not current, in every image root,
# if no guest is running and no build is under way; otherwise leave them for the next time.
gc_images() {
	local cur d f root
	exec 7> "$VM_DIR/lock" 8> "$VM_DIR/build.lock"
	if flock -x -n 7 && flock -x -n 8; then
		for root in "$VM_DIR" "$VM_DIR"/kernels/*; do
			[ -d "$root/images" ] || continue
			cur=$(readlink -e "$root/current" 2> /dev/null || true)
			for d in "$root"/images/*; do
				[ -e "$d" ] && [ "$d" != "$cur" ] && rm -rf "$d"
			done
			[ -n "$cur" ] || continue
			for f in "$cur"/initramfs-*.cpio.gz; do
				[ -e "$f" ] && [ "$f" != "$cur/$(initramfs_name)" ] && rm -f "$f"
			done
		done
		# the layout before images/
		[ -d "$VM_DIR/image" ] && rm -rf "$VM_DIR/image" "$VM_DIR/image.new" "$VM_DIR/image.old"
	fi
	exec 7>&- 8>&-
}

cmd_image() {
	local k=${GONVMF_VM_KERNEL:-}
	while [ $# -gt 0 ]; do
		case $1 in
		--kernel) k=${2?--kernel needs a name (see: vm.sh kernels)}; shift 2 ;;
		*) usage_error "image takes only --kernel" ;;
		esac
	done
	select_kernel "$k"
	check_host image
	local t0
	t0=$(now)
	ensure_image
	gc_images
	msg "image${KSEL:+ ($KSEL)}: $(manifest_get "$IMG" KPKG) $(manifest_get "$IMG" KPKG_VERSION) (kernel $(manifest_get "$IMG" KVER), built $(manifest_get "$IMG" BUILT)); checked in $(elapsed "$t0") s"
	if [ -n "$KSEL_PKG" ] && [ "$(manifest_get "$IMG" KPKG)" != "$KSEL_PKG" ]; then
		msg "image ($KSEL): NOT the pinned $KSEL_PKG, which apt${KSEL_SUITE:+ ($KSEL_SUITE)} does not have: $(manifest_get "$IMG" KPKG) stands in for it"
	fi
}

# ---- running a guest ----

cmd_run() {
	local mode=$1
	shift
	local timeout=${GONVMF_VM_TIMEOUT:-900} mem=${GONVMF_VM_MEM:-4096} cpus=${GONVMF_VM_CPUS:-2}
	local disk="" out="" quiet=0 rxe=1 k=${GONVMF_VM_KERNEL:-}
	[ "$mode" = shell ] && timeout=0
	while [ $# -gt 0 ]; do
		case $1 in
		--kernel) k=${2?--kernel needs a name (see: vm.sh kernels)}; shift 2 ;;
		--timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
		--mem) mem=${2:?--mem needs MiB}; shift 2 ;;
		--cpus) cpus=${2:?--cpus needs a count}; shift 2 ;;
		--disk) disk=${2:?--disk needs a size, e.g. 2G}; shift 2 ;;
		--out) out=${2:?--out needs a directory}; shift 2 ;;
		-q | --quiet) quiet=1; shift ;;
		--no-rxe) rxe=0; shift ;;
		--) shift; break ;;
		-*) usage_error "unknown option $1" ;;
		*) break ;;
		esac
	done
	[[ $timeout =~ ^[0-9]+$ ]] || usage_error "--timeout must be whole seconds (0: none), got '$timeout'"
	[[ $mem =~ ^[0-9]+$ ]] && [ "$mem" -ge 512 ] || usage_error "--mem must be MiB >= 512, got '$mem'"
	[[ $cpus =~ ^[0-9]+$ ]] && [ "$cpus" -ge 1 ] || usage_error "--cpus must be >= 1, got '$cpus'"
	[ -z "$disk" ] || [[ $disk =~ ^[0-9]+[KMGT]?$ ]] || usage_error "--disk must be a size like 512M or 2G, got '$disk'"
	select_kernel "$k"

	local script="" name=shell
	if [ "$mode" = run ]; then
		[ $# -ge 1 ] || usage_error "run needs a guest script"
		[ -f "$1" ] || usage_error "no such guest script: $1"
		script=$(readlink -f "$1")
		shift
		name=$(basename "$script")
		name=${name%.sh}
	fi
	local mtu=${GONVMF_VM_MTU:-9000}
	[[ $mtu =~ ^[0-9]+$ ]] || usage_error "GONVMF_VM_MTU must be a number, got '$mtu'"
	local retries=${GONVMF_VM_BOOT_RETRIES:-2} boot=1 boots
	[[ $retries =~ ^[0-9]$ ]] || usage_error "GONVMF_VM_BOOT_RETRIES must be a number from 0 to 9, got '$retries'"
	boots=$((1 + retries))
	case "$VM_DIR$SRC" in *[[:space:]]*) die "GONVMF_VM_DIR ($VM_DIR) and the repo path ($SRC) must not contain spaces (they go on the guest kernel command line)" ;; esac

	check_host run
	# Held (shared) by qemu for the guest's lifetime: keeps gc_images off this image.
	exec 9> "$VM_DIR/lock"
	flock -s -w 120 9 || die "timed out waiting for $VM_DIR/lock (vm.sh clean running?)"
	ensure_image

	if [ -z "$out" ]; then
		out=$VM_DIR/out/$(date +%Y%m%d-%H%M%S)-$name
		local n=1 base=$out
		while [ -e "$out" ]; do out=$base-$((n++)); done
	fi
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	rm -rf "$out/.vm" "$out/console.log" "$out"/console.boot*.log "$out/guest.log" "$out/dmesg.txt" "$out/results.txt"
	mkdir -p "$out/.vm"

	# Paths under the host's /tmp are hidden in the guest (fresh tmpfs) unless bound back.
	local tmp_paths=() p
	for p in "$SRC" "$BUILD_DIR" "${script%/*}" "$PWD"; do
		case $p in /tmp/*) tmp_paths+=("$p") ;; esac
	done

	# The guest's run description; GONVMF_* variables of this environment go along.
	local deadline=0 grace
	if [ "$timeout" -gt 0 ]; then
		# time for the guest to kill the script, record ps and dmesg and power off, even on
		# a busy host (2-3x slower)
		grace=$((timeout / 5))
		[ $grace -lt 10 ] && grace=10
		[ $grace -gt 60 ] && grace=60
		deadline=$((timeout - grace))
		[ $deadline -lt 1 ] && deadline=1
	fi
	{
		local v
		for v in $(compgen -e | grep '^GONVMF_' || true); do
			printf 'export %s=%q\n' "$v" "${!v}"
		done
		printf 'export GONVMF_GUEST=1 OUT=/out SRC=%q GONVMF_BUILD=%q\n' "$SRC" "$BUILD_DIR"
		printf 'RXE_IP=%q RXE_DEV=rxe0 RXE_MTU=%q\n' "$RXE_IP" "$mtu"
		printf 'VM_MODE=%q VM_RXE=%q VM_DISK=%q VM_DEADLINE=%q VM_CWD=%q\n' \
			"$mode" "$rxe" "$([ -n "$disk" ] && echo 1 || echo 0)" "$deadline" "$PWD"
		local cmd=()
		if [ -n "$script" ]; then
			if [ -x "$script" ]; then cmd=("$script" "$@"); else cmd=(bash "$script" "$@"); fi
		fi
		printf 'VM_CMD=('
		[ ${#cmd[@]} -eq 0 ] || printf '%q ' "${cmd[@]}"
		printf ')\nVM_TMP_PATHS=('
		[ ${#tmp_paths[@]} -eq 0 ] || printf '%q ' "${tmp_paths[@]}"
		printf ')\n'
	} > "$out/.vm/env.sh"

	# Both traps are set before the scratch disk exists, and its name is set before the
	# file is created. So a signal or an exit at any point leaves no disk behind, and no
	# qemu either.
	VM_OUT=$out
	trap vm_exit EXIT
	trap vm_interrupted INT TERM HUP
	local kver qout=${out//,/,,} # qemu option values escape a comma by doubling it
	kver=$(manifest_get "$IMG" KVER)
	local console=(-chardev "stdio,id=con,signal=off,logfile=$qout/console.log" -serial chardev:con -monitor none)
	[ "$mode" = shell ] && console=(-chardev "stdio,id=con,mux=on,signal=off,logfile=$qout/console.log" -serial chardev:con -mon chardev=con)
	[ "$mode" = run ] || boots=1
	local t0 qpid qrc wall status drive qemu
	while :; do
		drive=()
		if [ -n "$disk" ]; then
			mkdir -p "$VM_DIR/disks" || die "cannot create $VM_DIR/disks"
			rm_stale_disks
			# a name of its own (pid, time): guests running at the same time never share a disk
			VM_DISK=$VM_DIR/disks/$name.pid$$.${EPOCHREALTIME/./}.img
			if ! (set -C && : > "$VM_DISK") 2> /dev/null; then
				local taken=$VM_DISK
				VM_DISK="" # not created here: not ours to remove
				die "cannot create the scratch disk file $taken (exists, or $VM_DIR/disks is not writable)"
			fi
			truncate -s "$disk" "$VM_DISK" &&
				mkfs.ext4 -F -q -m 0 -L scratch -E lazy_itable_init=0,lazy_journal_init=0 "$VM_DISK" ||
				die "cannot create the $disk scratch disk $VM_DISK"
			drive=(-drive "file=${VM_DISK//,/,,},if=virtio,format=raw")
		fi
		# shellcheck disable=SC2054 # qemu option values contain commas
		qemu=(
			qemu-system-x86_64 -name gonvmf-vm
			-accel tcg,thread=multi,tb-size=512 -cpu max -m "$mem" -smp "$cpus"
			-display none -no-reboot -nic none "${console[@]}"
			-kernel "$IMG/vmlinux" -initrd "$INITRD"
			-append "console=ttyS0 panic=-1 quiet gonvmf.kmods=$IMG/kernel/lib/modules/$kver gonvmf.init=$HERE/guest-init.sh ${GONVMF_VM_APPEND:-}"
			-virtfs local,path=/,mount_tag=gonvmf-root,security_model=none,readonly=on,multidevs=remap
			-virtfs "local,path=$qout,mount_tag=gonvmf-out,security_model=none,multidevs=remap"
			"${drive[@]}"
		)
		printf '%q ' "${qemu[@]}" > "$out/.vm/qemu-cmdline"

		qrc=0
		t0=$(now)
		local nth=""
		[ "$boot" -gt 1 ] && nth=", boot $boot of $boots"
		[ "$mode" = run ] && msg "booting ${KSEL:+kernel $kver }for $name (timeout ${timeout} s, ${mem} MiB, $cpus vCPUs$nth); results in $out"
		if [ "$mode" = shell ]; then
			# --foreground: qemu must stay in the terminal's process group to use it
			timeout --foreground -k 10 "$timeout" "${qemu[@]}" 2> "$out/.vm/qemu.log" || qrc=$?
		else
			# The console goes to our stdout as it happens (and always to console.log).
			if [ "$quiet" = 1 ]; then exec 8> /dev/null; else exec 8>&1; fi
			# in the background, so that a signal's trap (vm_interrupted) runs at once
			timeout -k 10 "$timeout" "${qemu[@]}" < /dev/null >&8 2> "$out/.vm/qemu.log" &
			qpid=$!
			wait $qpid || qrc=$?
		fi
		[ -z "$VM_DISK" ] || rm -f "$VM_DISK"
		VM_DISK=""
		wall=$(elapsed "$t0")
		# A guest whose kernel died before stage 2 began (no guest.log, no status, stage 1
		# did not report a failure, not killed by the timeout) ran nothing of the script:
		# TCG occasionally loses a boot this way (6.12 oopses on an int3 of a static-key
		# patch another vCPU has not seen). Boot again, keeping the lost boot's console.
		if [ "$boot" -lt "$boots" ] && [ "$qrc" != 124 ] && [ "$qrc" != 137 ] &&
			[ ! -e "$out/.vm/status" ] && [ ! -e "$out/guest.log" ] &&
			! grep -aq GONVMF-VM-STAGE1-FAILED "$out/console.log" 2> /dev/null; then
			mv "$out/console.log" "$out/console.boot$boot.log" 2> /dev/null || true
			mv "$out/.vm/qemu.log" "$out/.vm/qemu.boot$boot.log" 2> /dev/null || true
			msg "$name: the guest died after $wall s before its script began (qemu status $qrc): a lost boot, not a result; booting again ($((boot + 1)) of $boots); its console is in $out/console.boot$boot.log:"
			{
				grep -a -m 3 -E 'Kernel panic|BUG:|Oops' "$out/console.boot$boot.log" || tail -n 3 "$out/console.boot$boot.log"
			} 2> /dev/null | tr -d '\r' | sed 's/^/    /' >&2
			boot=$((boot + 1))
			continue
		fi
		break
	done
	echo "$wall" > "$out/.vm/wall-seconds"
	status=$(cat "$out/.vm/status" 2> /dev/null || true)

	if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
		msg "$name: TIMEOUT: the guest did not power off within $timeout s and was killed after $wall s; console kept in $out/console.log"
		echo "timeout-killed $timeout" > "$out/.vm/status"
		exit $EXIT_TIMEOUT
	fi
	case $status in
	"exit "*)
		local rc=${status#exit }
		if [ "$rc" = 0 ]; then
			msg "$name: passed in $wall s; results in $out"
		else
			msg "$name: FAILED with status $rc after $wall s; results in $out (guest.log)"
		fi
		exit "$rc"
		;;
	"timeout "*)
		msg "$name: TIMEOUT: the script ran past the $timeout s limit and was killed in the guest after $wall s; processes and dmesg at the end of $out/guest.log"
		exit $EXIT_TIMEOUT
		;;
	"setup-failed "*)
		msg "$name: guest setup failed: ${status#setup-failed }; see $out/guest.log and dmesg.txt"
		exit $EXIT_HARNESS
		;;
	*)
		msg "$name: the guest stopped after $wall s without reporting a result (qemu status $qrc); from $out/console.log:"
		{
			grep -a -m 5 -E 'Kernel panic|BUG:|Oops|gonvmf-vm stage1' "$out/console.log"
			echo ...
			tail -n 10 "$out/console.log"
		} 2> /dev/null | tr -d '\r' | sed 's/^/    /' >&2
		[ -s "$out/.vm/qemu.log" ] && sed 's/^/    qemu: /' "$out/.vm/qemu.log" >&2
		exit $EXIT_HARNESS
		;;
	esac
}

cmd_clean() {
	mkdir -p "$VM_DIR"
	exec 9> "$VM_DIR/lock"
	flock -x -w 60 9 || die "guests are running with $VM_DIR; try again when they finish"
	case ${1:-} in
	"") rm -rf "$VM_DIR/out" "$VM_DIR/disks" ;;
	--all) rm -rf "$VM_DIR/out" "$VM_DIR/disks" "$VM_DIR/images" "$VM_DIR/current" "$VM_DIR/kernel-pin" \
		"$VM_DIR/kernels" "$VM_DIR/apt" \
		"$VM_DIR/image" "$VM_DIR/image.new" "$VM_DIR/image.old" ;;
	*) usage_error "clean takes only --all" ;;
	esac
}

case ${1:-} in
image) shift; cmd_image "$@" ;;
run) shift; cmd_run run "$@" ;;
shell) shift; cmd_run shell "$@" ;;
check)
	check_host image
	check_host run
	msg "host prerequisites present"
	;;
clean) shift; cmd_clean "$@" ;;
kernels) printf '%s\n' "${KERNELS[@]}" | sed 's/^/vm.sh: --kernel /' ;;
-h | --help | help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' ;;
*) usage_error "unknown command '${1:-}'" ;;
esac
exit
}
