// Package vm holds the Go-side checks of the VM harness: tests that run inside the qemu
// guest (integration/run-tests.sh go-tests) and verify what the harness promises to every
// Go test that needs RDMA — an active Soft-RoCE device on $RXE_IP, the rdma_cm character
// device, unlimited locked memory, a writable $OUT. The harness itself is shell: vm.sh boots
// the guest, guest-init.sh sets it up, guest-lib.sh has the helpers for guest scripts.
// Tests that need no guest check the shell side where a mistake would pass silently: the
// guest library's helpers, vm.sh's kernel selection, the suites' "# vm:" header lines,
// run-tests.sh's deadline and failure report (run-tests-lib.sh).
// See integration/README.md.
package vm
