# shellcheck shell=bash
# run-tests-lib.sh: host-side helpers of integration/run-tests.sh, which sources this file
# once, at its start. There are two parts: the time a suite may take, measured against a
# deadline, and the failure report printed after the summary table. The helpers only read
# and print. The TestRunTestsLib tests (run_tests_lib_test.go) run them on fake results
# directories.
#
# A suite's results directory (vm.sh run --out) holds:
#   results.txt   its RESULT lines (guest-lib.sh: "RESULT FAIL <name>: <reason>")
#   guest.log     guest-init.sh's "gonvmf-vm: ..." lines around the script's own output
#   harness.log   vm.sh's messages, its verdict on the guest last
#   <name>.log    go-tests only: the output of test binary <name> (guest-go-tests.sh),
#                 whose checks are named <name> (the binary crashed) or <name>/<Test>

# RUN_TESTS_SUITE_OVERHEAD: the most time vm.sh spends on a suite beyond its --timeout, in
# seconds. That covers the image check, the scratch disk's mkfs, the 10 s that timeout -k
# gives qemu after its SIGTERM, and the verdict.
RUN_TESTS_SUITE_OVERHEAD=30

# The report's limits. The report is for the tail of a CI log, so it is kept short.
REPORT_MAX_CHECKS=10   # failed checks shown per suite
REPORT_MAX_WIDTH=300   # characters per line; longer lines are cut and end in " ..."
REPORT_MAX_EXCERPTS=2  # go-tests: log excerpts shown per suite (crashed binaries first)
REPORT_CRASH_LINES=15  # a crashed binary's excerpt: the lines up to the crash, and the crash
REPORT_CRASH_HEADER=8  # at most this many of them from the crash's own header block
REPORT_TEST_LINES=5    # a failed Go test's excerpt: its last lines of output
REPORT_GUEST_LINES=5   # a suite without failed checks: the script's last lines

# vm_timeout_of <vm.sh run options...>: prints the --timeout that vm.sh run takes from these
# options. That is the last --timeout given, else $GONVMF_VM_TIMEOUT, else 900 (vm.sh's
# default). 0 means no limit.
vm_timeout_of() {
	local t=${GONVMF_VM_TIMEOUT:-900}
	while [ $# -gt 0 ]; do
		case $1 in
		--timeout) t=${2:-} ;;
		esac
		shift
	done
	echo "$t"
}

# fits_deadline <deadline> <vm.sh --timeout> [now]: returns 0 if a suite with that
# --timeout ends before the deadline even if it runs to its limit; that takes its --timeout
# plus RUN_TESTS_SUITE_OVERHEAD seconds. The deadline and now are unix seconds; now
# defaults to the current time. A deadline of 0 means no deadline. A --timeout of 0 has no
# limit, so it never fits a deadline. Otherwise returns 1 and sets DEADLINE_WHY to the
# reason, e.g. "needs up to 930 s (--timeout 900 + 30), 812 s left".
# shellcheck disable=SC2034 # DEADLINE_WHY is for the caller
fits_deadline() {
	local deadline=$1 timeout=$2 now=${3:-$(date +%s)} need left
	DEADLINE_WHY=
	[ "$deadline" = 0 ] && return 0
	left=$((deadline - now))
	[ $left -lt 0 ] && left=0
	if [ "$timeout" = 0 ]; then
		DEADLINE_WHY="has no --timeout, $left s left"
		return 1
	fi
	need=$((timeout + RUN_TESTS_SUITE_OVERHEAD))
	[ $need -le $left ] && return 0
	DEADLINE_WHY="needs up to $need s (--timeout $timeout + $RUN_TESTS_SUITE_OVERHEAD), $left s left"
	return 1
}

# failure_report <suite> <result> <results dir>: for a suite whose result is not PASS, SKIP,
# "not run" or SKIPPED(...), prints what failed and why, for the tail of a CI log:
#   "<suite> <result>: <dir>"
#   the suite's failed checks, the first REPORT_MAX_CHECKS of them;
#   if the suite recorded no failed check or did not finish (TIMEOUT, ERROR): vm.sh's
#     verdict and the last lines the guest script printed;
#   go-tests: an excerpt of each failing binary's log, at most REPORT_MAX_EXCERPTS of them.
#     A binary that crashed (a panic, -test.timeout, a Go fatal error or signal) is shown
#     at the crash: the lines before it, then the crash's header block (at a timeout, that
#     is Go's list of the tests still running). The goroutine dumps after it are left out.
#     For a failed test, the excerpt is its last lines of output that are not slog records.
#     Those are its t.Error/t.Fatal messages, unless it logged other text after them.
# Each line is cut at REPORT_MAX_WIDTH characters and indented two spaces.
# Prints nothing for the other results.
failure_report() {
	local suite=$1 res=$2 dir=$3 fails n
	case $res in PASS | SKIP | "not run" | SKIPPED*) return 0 ;; esac
	echo "$suite $res: $dir"
	if [ ! -d "$dir" ]; then
		echo "  (no results directory)"
		return 0
	fi
	if [ -f "$dir/results.txt" ]; then
		fails=$(grep -a '^RESULT FAIL ' "$dir/results.txt")
	else
		fails=$(grep -a '^RESULT FAIL ' "$dir/guest.log" 2> /dev/null)
	fi
	n=0
	[ -z "$fails" ] || n=$(printf '%s\n' "$fails" | wc -l)
	if [ "$n" -gt 0 ]; then
		printf '%s\n' "$fails" | head -n "$REPORT_MAX_CHECKS" | sed 's/^RESULT //' | _report_lines '  '
		[ "$n" -le "$REPORT_MAX_CHECKS" ] ||
			echo "  ... and $((n - REPORT_MAX_CHECKS)) more failed checks in $dir/results.txt"
	fi
	if [ "$n" = 0 ] || [ "$res" = TIMEOUT ] || [ "$res" = ERROR ]; then
		_report_verdict "$dir"
	fi
	[ "$suite" = go-tests ] && [ "$n" -gt 0 ] && _report_go "$dir" "$fails"
	return 0
}

# _report_lines <prefix>: stdin to stdout, each line without a trailing CR, cut at
# REPORT_MAX_WIDTH characters, after the prefix.
_report_lines() {
	awk -v p="$1" -v w="$REPORT_MAX_WIDTH" '{
		sub(/\r$/, "")
		if (length($0) > w) $0 = substr($0, 1, w) " ..."
		print p $0
	}'
}

# _report_verdict <dir>: vm.sh's verdict on the guest, then the last lines the guest script
# printed. The verdict is harness.log from its last "vm.sh: <name>: ..." line, 8 lines at
# most (the indented lines after it quote the console); without such a line, the last 3
# lines of harness.log. The script's lines are those of guest.log after guest-init.sh's
# "running:" line, up to guest-init.sh's next line.
_report_verdict() {
	local dir=$1
	if [ -s "$dir/harness.log" ]; then
		awk '{ l[++n] = $0 } /^vm\.sh: [^ ]+: / { v = n }
			END {
				if (v) { s = v; e = v + 7 } else { s = n - 2; e = n }
				for (i = (s < 1 ? 1 : s); i <= e && i <= n; i++) print l[i]
			}' "$dir/harness.log" | _report_lines '  '
	fi
	[ -s "$dir/guest.log" ] || return 0
	awk -v max="$REPORT_GUEST_LINES" '
		/^gonvmf-vm: running: / { on = 1; next }
		on && /^gonvmf-vm: / { exit }
		on { l[++n] = $0 }
		END {
			if (n == 0) exit
			print "--- the last lines of guest.log:"
			for (i = (n > max ? n - max + 1 : 1); i <= n; i++) print l[i]
		}' "$dir/guest.log" | _report_lines '  '
}

# _report_go <dir> <RESULT FAIL lines>: the go-tests excerpts (see failure_report).
_report_go() {
	local dir=$1 fails=$2 line name bin shown=0
	local -a crashed=() tests=()
	while IFS= read -r line; do
		line=${line#RESULT FAIL }
		name=${line%%: *}
		case $name in
		*/*) tests+=("$name") ;;
		*) [[ ${line#*: } == "test binary exited"* ]] && crashed+=("$name") ;;
		esac
	done <<< "$fails"
	for bin in "${crashed[@]}"; do
		[ $shown -lt "$REPORT_MAX_EXCERPTS" ] || break
		[ -s "$dir/$bin.log" ] || continue
		echo "  --- $bin.log at the crash:"
		_go_crash_excerpt "$dir/$bin.log" | _report_lines '  | '
		shown=$((shown + 1))
	done
	for name in "${tests[@]}"; do
		[ $shown -lt "$REPORT_MAX_EXCERPTS" ] || break
		bin=${name%%/*}
		[ -s "$dir/$bin.log" ] || continue
		echo "  --- ${name#*/} in $bin.log, its last lines:"
		_go_test_excerpt "$dir/$bin.log" "${name#*/}" | _report_lines '  | '
		shown=$((shown + 1))
	done
}

# _go_crash_excerpt <log>: the lines of a Go test binary's log up to its crash. The crash
# is the first line that begins "panic: ", "fatal error: " or "SIG...: ". Its header block
# runs to the first empty line, with at most REPORT_CRASH_HEADER lines of it shown, and the
# lines before it fill the excerpt up to REPORT_CRASH_LINES. A log with no such line gives
# its last REPORT_CRASH_LINES lines.
_go_crash_excerpt() {
	awk -v max="$REPORT_CRASH_LINES" -v hdr="$REPORT_CRASH_HEADER" '
		{ l[NR] = $0 }
		!p && /^(panic: |fatal error: |SIG[A-Z]+: )/ { p = NR; next }
		p && !e && $0 == "" { e = NR - 1 }
		END {
			if (!p) { s = NR - max + 1; e = NR }
			else {
				if (!e) e = NR
				if (e - p + 1 > hdr) e = p + hdr - 1
				s = e - max + 1
			}
			for (i = (s < 1 ? 1 : s); i <= e; i++) print l[i]
		}' "$1"
}

# _go_test_excerpt <log> <TestName>: the last REPORT_TEST_LINES lines of output of that
# top-level test (its subtests included) before its "--- FAIL: <TestName> " line. The
# output is attributed by go test -v's "=== RUN/CONT/NAME" lines. slog records (lines with
# "level=... msg=") are left out unless the test printed nothing else.
_go_test_excerpt() {
	awk -v t="$2" -v max="$REPORT_TEST_LINES" '
		/^=== / { if ($2 == "RUN" || $2 == "CONT" || $2 == "NAME") { cur = $3; sub(/\/.*/, "", cur) } next }
		index($0, "--- FAIL: " t " ") == 1 { exit }
		/^ *--- (PASS|FAIL|SKIP): / { next }
		cur == t { a[++na] = $0; if ($0 !~ / level=[A-Z]+ msg=/) m[++nm] = $0 }
		END {
			if (nm > 0) { for (i = (nm > max ? nm - max + 1 : 1); i <= nm; i++) print m[i] }
			else { for (i = (na > max ? na - max + 1 : 1); i <= na; i++) print a[i] }
		}' "$1"
}
