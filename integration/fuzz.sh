#!/bin/bash
# Run every `go test -fuzz` target in the module for a fixed time each (default 15s).
# usage: integration/fuzz.sh [fuzztime]          e.g. integration/fuzz.sh 5s
#   env: FUZZ_PARALLEL (workers per target, default 2), FUZZ_PKGS (packages, default ./...)
#
# A real finding makes go test write the failing input to the package's
# testdata/fuzz/<FuzzName>/ (ready to commit as a regression seed) and fails the run.
# Go 1.26 can also end a target with a bare "context deadline exceeded" right at the
# -fuzztime boundary on a loaded machine without having found anything (golang/go#75804,
# fixed in Go 1.27): such a run, with no new input written, is retried once and, if it
# happens again, reported as a flake rather than a failure. Minimization of new-coverage
# inputs is capped (-fuzzminimizetime 100x: a time cap still let the 1–4 KiB targets spend most of 30 s minimizing) so that large structures (4096-byte Identify
# pages) do not spend the whole budget minimizing.
set -uo pipefail
cd "$(dirname "$0")/.."
T=${1:-${FUZZTIME:-15s}}
PAR=${FUZZ_PARALLEL:-2}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pass=0 flaky=0 failed=()

run_one() { # <pkg> <dir> <name>: 0 pass, 1 fail, 2 flake
	local before after
	before=$(ls "$2/testdata/fuzz/$3" 2>/dev/null | sort)
	if go test -run '^$' -fuzz "^$3\$" -fuzztime "$T" -fuzzminimizetime 100x -parallel "$PAR" "$1" > "$log" 2>&1; then
		return 0
	fi
	after=$(ls "$2/testdata/fuzz/$3" 2>/dev/null | sort)
	if [ "$before" = "$after" ] && grep -q 'context deadline exceeded' "$log" &&
		! grep -q -E 'Failing input written|panic:' "$log"; then
		return 2
	fi
	return 1
}

# A package that cannot be listed, or whose tests do not build (go test -list fails), is a
# failure: its fuzz targets would otherwise be left out without a word.
pkgs=$(go list ./${FUZZ_PKGS:-...}) || { failed+=("go list ./${FUZZ_PKGS:-...}"); echo "FAIL  go list ./${FUZZ_PKGS:-...}"; }
for pkg in $pkgs; do
	dir=$(go list -f '{{.Dir}}' "$pkg") || { failed+=("$pkg (go list)"); echo "FAIL  ${pkg#github.com/gonvmf/gonvmf/}: go list failed"; continue; }
	grep -q -E "^func Fuzz[A-Za-z0-9_]+\\(" "$dir"/*_test.go 2>/dev/null || continue
	names=$(go test -list '^Fuzz' "$pkg") || {
		failed+=("$pkg (go test -list)")
		echo "FAIL  ${pkg#github.com/gonvmf/gonvmf/}: go test -list failed (its fuzz targets did not run)"
		continue
	}
	for name in $(grep '^Fuzz' <<< "$names"); do
		rc=0
		run_one "$pkg" "$dir" "$name" || rc=$?
		[ $rc -eq 2 ] && { rc=0; run_one "$pkg" "$dir" "$name" || rc=$?; }
		execs=$(grep 'execs:' "$log" | tail -n 1 | sed 's/^fuzz: //')
		case $rc in
		0) pass=$((pass + 1)); echo "ok    ${pkg#github.com/gonvmf/gonvmf/} $name: $execs" ;;
		2) flaky=$((flaky + 1)); echo "flake ${pkg#github.com/gonvmf/gonvmf/} $name: context deadline exceeded twice, nothing found (golang/go#75804): $execs" ;;
		*) failed+=("$pkg $name"); echo "FAIL  ${pkg#github.com/gonvmf/gonvmf/} $name"; cat "$log" ;;
		esac
	done
done
echo "fuzz: $pass passed, $flaky flaked, ${#failed[@]} failed ($T each)"
[ ${#failed[@]} -eq 0 ] || { printf 'failed: %s\n' "${failed[@]}"; exit 1; }
