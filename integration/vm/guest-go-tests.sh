#!/bin/bash
# guest-go-tests.sh: the built-in "go-tests" suite of integration/run-tests.sh, run in the guest.
#
# Runs every Go test binary listed in $GONVMF_BUILD/tests/manifest ("<name> <package dir>",
# written by run-tests.sh, which builds them with go test -c) from its package directory with
#   -test.run "${GONVMF_TEST_RUN:-^TestRDMA}" -test.v -test.timeout "${GONVMF_TEST_TIMEOUT:-4m}"
# and GONVMF_REQUIRE_RDMA=1, which turns an RDMA test's "no RDMA here" skip into a failure.
# Each top-level test becomes a RESULT line named <name>/<TestName>; each binary's output is
# in $OUT/<name>.log. A binary that ends without a failed test but with a non-zero status
# (a panic, -test.timeout, a Go fatal error or signal) fails the check <name>, which names
# the tests still running and the crash's first line.
#
# The per-binary -test.timeout must be well below the suite's own limit, so that a hung
# binary ends as a failed check of its own while the later binaries still run. The default
# is 4m. All the binaries together take ~50 s in the guest (90 s on a busy machine), so one
# binary gets ~5 times the whole suite's usual time. run-tests.sh gives the suite a
# --timeout of at least 1200 s (guest watchdog at 1140 s). That leaves room for 4 hung
# binaries before the watchdog kills the suite without naming the culprit.

# One { } block, parsed before it runs: editing this file cannot disturb a running copy.
{
. "$SRC/integration/vm/guest-lib.sh"

export GONVMF_REQUIRE_RDMA=1
run=${GONVMF_TEST_RUN:-^TestRDMA}
manifest=$GONVMF_BUILD/tests/manifest
[ -s "$manifest" ] || {
	fail go-tests "no test binaries listed in $manifest (run-tests.sh builds them)"
	finish
}

while read -r name pkg; do
	bin=$GONVMF_BUILD/tests/$name.test
	if [ ! -x "$bin" ]; then
		fail "$name" "missing test binary $bin"
		continue
	fi
	log "$pkg: $name.test -test.run '$run'"
	(cd "$SRC/$pkg" && "$bin" -test.run "$run" -test.v -test.count=1 -test.timeout "${GONVMF_TEST_TIMEOUT:-4m}") \
		< /dev/null 2>&1 | tee "$OUT/$name.log"
	rc=${PIPESTATUS[0]}
	reported=0
	while read -r verdict test took; do
		reported=$((reported + 1))
		case $verdict in
		PASS) pass "$name/$test" "$took" ;;
		FAIL) fail "$name/$test" "$took; see $name.log" ;;
		SKIP) skip "$name/$test" "$(grep -A3 -- "--- SKIP: $test " "$OUT/$name.log" | sed -n 2p | sed 's/^ *//')" ;;
		esac
	done < <(sed -n -E 's/^--- (PASS|FAIL|SKIP): ([^ ]+) (.*)$/\1 \2 \3/p' "$OUT/$name.log")
	if [ "$rc" != 0 ] && ! grep -q '^--- FAIL' "$OUT/$name.log"; then
		# a panic, -test.timeout, a fatal error or signal: name the tests that were running
		running=$(awk '/^=== (RUN|CONT)/ { r[$3] = 1 } /^ *--- (PASS|FAIL|SKIP):/ { delete r[$3] }
			END { for (t in r) if (t !~ /\//) print t }' "$OUT/$name.log" | tr '\n' ' ')
		running=${running% }
		fail "$name" "test binary exited $rc${running:+ while running $running}: $(grep -m 1 -E '^(panic: |fatal error: |SIG[A-Z]+: )' "$OUT/$name.log" || tail -n 1 "$OUT/$name.log")"
	elif [ "$reported" = 0 ]; then
		skip "$name" "no test matched -test.run '$run'"
	fi
done < "$manifest"
finish
}
