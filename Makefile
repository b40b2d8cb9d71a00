# gonvmf — common tasks. `make test` is the README's test command; `make demo` the main job.
GO       ?= go
FUZZTIME ?= 30s
BUILD    ?= $(CURDIR)/build
export GONVMF_BUILD := $(BUILD)

.PHONY: all setup build check vet unit fuzz vm-test test demo bench clean

all: build

# Debian packages for the VM harness, the Linux host tools and the rdma-core headers;
# installed only when something is missing (integration/vm/setup-host.sh is idempotent).
setup:
	@integration/vm/vm.sh check >/dev/null 2>&1 && [ -f /usr/include/infiniband/verbs.h ] || integration/vm/setup-host.sh

build:
	$(GO) build -o $(BUILD)/bin/gonvmf ./cmd/gonvmf

# Formatting and static checks, with and without the cgo RDMA binding.
check vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags nordma ./...
	CGO_ENABLED=0 $(GO) build ./...

# Unit tests: everything that runs without the VM (RDMA tests skip here with a message).
unit:
	$(GO) test -race -count=1 ./...

# Every fuzz target for $(FUZZTIME).
fuzz:
	integration/fuzz.sh $(FUZZTIME)

# Tests inside the Soft-RoCE qemu guest (builds the guest image on first use).
vm-test: setup
	integration/run-tests.sh --keep-going

# All tests: static checks, unit tests, fuzzing, then the VM suites.
test: setup check unit fuzz vm-test

# The main job: boot the guest, serve a file-backed namespace with gonvmf, connect the Linux
# host over Soft-RoCE, run a short fio and print the result.
demo: setup
	integration/demo.sh

# gonvmf against the Linux kernel target in the same guest: report + plot.
bench: setup
	integration/bench/run.sh

clean:
	rm -rf $(BUILD)
