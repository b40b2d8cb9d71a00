// Package bench holds the tests of the benchmark harness: integration/bench/run.sh boots one
// Soft-RoCE guest and measures gonvmf against the Linux kernel target (guest-bench.sh), and
// report.py turns the raw results into report.md, summary.json and the plot. The harness is
// shell and Python; the Go tests here check the report generator on synthetic raw results
// (medians, spreads, the orientation of every ratio, gonvmf being unavailable, CPU windows
// that miss fio's interval) on any machine with python3, without the VM.
// See integration/bench/README.md.
package bench
