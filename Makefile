# gonvmf — common tasks. `make test` is the README's test command; `make demo` the main job.
GO       ?= go
FUZZTIME ?= 15s
BUILD    ?= $(CURDIR)/build
# Build tags of the ceph build (the rbd backend, linked with librbd and librados): `pacific`
# matches Debian 12's Ceph 16.2; drop it (CEPH_TAGS=ceph) against Ceph 17 or later.
CEPH_TAGS ?= ceph,pacific
export GONVMF_BUILD := $(BUILD)

.PHONY: all setup build build-ceph check vet unit bench-guard test-ceph fuzz vm-test test demo bench proto clean

all: build

# Debian packages for the VM harness, the Linux host tools and the rdma-core headers;
# installed only when something is missing (integration/vm/setup-host.sh is idempotent).
setup:
	@integration/vm/vm.sh check >/dev/null 2>&1 && [ -f /usr/include/infiniband/verbs.h ] && \
		[ -f /usr/include/rbd/librbd.h ] && command -v ceph-osd >/dev/null || integration/vm/setup-host.sh

build:
	$(GO) build -o $(BUILD)/bin/gonvmf ./cmd/gonvmf

# gonvmf with the rbd backend (Ceph RBD images as namespaces): needs librbd-dev and librados-dev.
build-ceph:
	$(GO) build -tags $(CEPH_TAGS) -o $(BUILD)/bin/gonvmf ./cmd/gonvmf

# Formatting and static checks, with and without the cgo RDMA binding.
check vet:
	@files=$$(git ls-files '*.go') && [ -n "$$files" ] || { echo "check: git ls-files lists no Go files"; exit 1; }; \
	out=$$(gofmt -l $$files) || { echo "gofmt failed (status $$?):"; echo "$$out"; exit 1; }; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags nordma ./...
	@if [ -f /usr/include/rbd/librbd.h ]; then echo "$(GO) vet -tags $(CEPH_TAGS) ./..."; $(GO) vet -tags $(CEPH_TAGS) ./...; \
	else echo "check: no librbd-dev: the ceph build is not vetted (make setup installs it)"; fi
	CGO_ENABLED=0 $(GO) build ./...

# Unit tests: everything that runs without the VM (RDMA tests skip here with a message).
unit:
	$(GO) test -race -count=1 ./...

# The RDMA engine's regression guard: BenchmarkEngine (fake fabric) at 0 allocations per I/O
# and under a stated ns/op bound (see integration/bench/engine-guard.sh).
bench-guard:
	GO=$(GO) integration/bench/engine-guard.sh

# The tests of the ceph build against a single-node Ceph cluster (integration/ceph/cluster.sh)
# started for them on 127.0.0.1 and stopped after (~5 s to start, ~400 MB of memory).
CEPH_TESTS ?= ./backend/ ./target/ ./cmd/gonvmf/
CEPH_RUN   ?= RBD
test-ceph: setup
	@export GONVMF_CEPH_DIR=$(BUILD)/ceph; trap 'integration/ceph/cluster.sh stop' EXIT; \
	integration/ceph/cluster.sh start >/dev/null && \
	$(GO) test -race -count=1 -tags $(CEPH_TAGS) -run '$(CEPH_RUN)' $(CEPH_TESTS)

# Every fuzz target for $(FUZZTIME).
fuzz:
	integration/fuzz.sh $(FUZZTIME)

# Tests inside the Soft-RoCE qemu guest (builds the guest image on first use).
vm-test: setup
	integration/run-tests.sh --keep-going

# All tests: static checks, unit tests, the engine's allocation and cost guard, the ceph
# build's tests, fuzzing, then the VM suites.
test: setup check unit bench-guard test-ceph fuzz vm-test

# The main job: boot the guest, serve a file-backed namespace with gonvmf, connect the Linux
# host over Soft-RoCE, run a short fio and print the result.
demo: setup
	integration/demo.sh

# gonvmf against the Linux kernel target in the same guest: report + plot.
bench: setup
	integration/bench/run.sh

# Regenerate the control API's Go code from target/control/controlpb/control.proto (needs
# protoc: apt-get install protobuf-compiler; the Go generators come from the module proxy).
proto:
	target/control/controlpb/gen.sh

clean:
	rm -rf $(BUILD)
