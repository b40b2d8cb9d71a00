#!/bin/sh
# Runs every fuzz target of package nvmeproto for a fixed time each (go test -fuzz takes one
# target per run). Usage: nvmeproto/fuzz.sh [fuzztime, default 30s]
#
# Minimization is capped at 100 runs per input (-fuzzminimizetime 100x): minimizing every
# new-coverage 1-4 KiB input (Connect data, Identify, discovery entries) otherwise eats the
# whole budget (a few hundred execs in 30 s instead of 200-300 thousand). -parallel
# defaults to 1 so the run does not take every core of a shared machine (FUZZ_PARALLEL).
#
# A failing input is written by go test to testdata/fuzz/<FuzzName>/ and the script exits
# non-zero. Go 1.26 can also fail a target with a bare "context deadline exceeded" at the
# fuzztime boundary when the machine is loaded (golang/go#75804, fixed in Go 1.27): that
# outcome, with no new failing input written, is reported as a flake and does not fail.
set -eu
cd "$(dirname "$0")"
fuzztime=${1:-30s}
parallel=${FUZZ_PARALLEL:-1}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for t in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' ./*_test.go | sed 's/^func //' | sort); do
	before=$(ls "testdata/fuzz/$t" 2>/dev/null | sort)
	if go test -run '^$' -fuzz "^$t\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x -parallel "$parallel" . >"$log" 2>&1; then
		echo "ok    $t: $(grep 'execs:' "$log" | tail -n 1)"
		continue
	fi
	after=$(ls "testdata/fuzz/$t" 2>/dev/null | sort)
	if [ "$before" = "$after" ] && grep -q 'context deadline exceeded' "$log"; then
		echo "flake $t: context deadline exceeded, no failing input (golang/go#75804): $(grep 'execs:' "$log" | tail -n 1)"
		continue
	fi
	echo "FAIL  $t"
	cat "$log"
	status=1
done
exit $status
