#!/bin/bash
# Install the Debian 12 packages the VM harness needs on the host, those of the ceph build
# and its single-node test cluster, and the tools `make test` itself runs (.ci/run calls this
# on a fresh machine before `make test`).
#
# The guest boots Debian's kernel but runs the host's own userland (the host's / is its
# read-only root over virtio-9p), so every tool a guest script uses is installed here.
# Idempotent and quiet: prints one line, or apt's errors. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
	qemu-system-x86 busybox-static kmod cpio xz-utils zstd util-linux # the VM and its image
	rdma-core ibverbs-utils rdmacm-utils ibverbs-providers perftest # Soft-RoCE userland
	libibverbs-dev librdmacm-dev gcc libc6-dev                      # cgo builds of rdmacm
	nvme-cli fio e2fsprogs iproute2 procps                          # Linux host, load, disks
	python3 bc gnuplot-nox curl                                     # result summaries and plots; metrics scrapes
	strace                                                          # the bench sampler's system-call test
	librbd-dev librados-dev                                         # the ceph build (rbd backend)
	ceph-mon ceph-mgr ceph-osd ceph-common python3-rados uuid-runtime # its test cluster (integration/ceph)
	make git ca-certificates                                        # make test itself; git ls-files (make check); Go's module downloads over HTTPS
)

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "setup-host.sh: run as root (or install sudo)" >&2; exit 1; }
	SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 "${PACKAGES[@]}" >/dev/null

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup-host.sh: still missing after apt-get install: ${missing[*]}" >&2
	exit 1
fi
echo "setup-host.sh: ${#PACKAGES[@]} packages installed"
