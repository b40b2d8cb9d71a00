#!/bin/bash
# run-tests.sh: the VM part of the project's tests. Each suite boots its own guest.
#
#   integration/run-tests.sh [options] [NAME...]
#
# Setup: checks the host, builds or refreshes the guest image (integration/vm/vm.sh image),
# builds $GONVMF_BUILD/bin/gonvmf (if cmd/gonvmf exists), the suites' helpers
# (integration/cmd/NAME → $GONVMF_BUILD/bin/NAME) and, for the go-tests suite and any suite
# that runs one ($GONVMF_BUILD/tests/ in its script, e.g. 30-initiator), one test binary per
# package with a `func TestRDMA...` in a _test.go file.
# Suites: every integration/tests/*.sh, sorted by name, then the built-in go-tests suite
# (the TestRDMA* tests of those packages, all in one guest, with GONVMF_REQUIRE_RDMA=1).
# A NAME selects the suites whose name contains it (e.g. "smoke", "00-lab-smoke", "go-tests").
# A suite may set its own vm.sh run options in a header line such as
#   # vm: --timeout 600 --disk 2G
# including the guest kernel (`# vm: --kernel 6.12`; see vm.sh kernels). The setup builds
# the image of every kernel the selected suites ask for. GONVMF_VM_KERNEL=<name> runs the
# suites without a --kernel of their own on that kernel instead of the default one.
#
# Options:
#   -k, --keep-going   run the remaining suites after a failure (default: stop)
#   --timeout SEC      per-suite time limit for suites without their own (default 900)
#   --deadline-min N   a deadline N minutes after the start (see Deadline)
#   --out DIR          results (default $GONVMF_VM_DIR/out/tests-<time>); one directory per suite
#   --no-build         use the binaries already in $GONVMF_BUILD
#   -v, --verbose      stream the guests' consoles
#   -l, --list         list the suites and exit
#
# Deadline: GONVMF_TESTS_DEADLINE=<unix seconds>, or --deadline-min (the earlier of the two
# wins). A suite starts only if it would end before the deadline even if it ran to its
# vm.sh --timeout; vm.sh may take 30 s more than that (RUN_TESTS_SUITE_OVERHEAD). A suite
# that would not end in time is SKIPPED(deadline), and the ones after it are still
# considered. A run killed from outside prints no summary, and this avoids that. .ci/run
# sets the deadline 10 minutes before the CI's time is up.
#
# Output: a line per suite as it ends; then the summary table (also in <out>/summary.txt);
# then, for each suite that did not pass, its failed checks and why
# (vm/run-tests-lib.sh: failure_report; also in <out>/failures.txt); then a line on the
# suites the deadline left out, if any. The end of the output says what failed and why.
# Exit status: 0 if every selected suite passed (or was skipped: no TestRDMA tests for
# go-tests), 1 if a suite failed or the deadline left one out, 2 if the setup failed or
# the options are wrong, 130 if interrupted.

# One { } block, parsed before it runs: editing this file cannot disturb a running copy.
{
set -uo pipefail

INTEG=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$INTEG/.." && pwd)
VM=$INTEG/vm/vm.sh
export GONVMF_VM_DIR=${GONVMF_VM_DIR:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache/gonvmf-vm}
export GONVMF_BUILD=${GONVMF_BUILD:-$SRC/build}

# shellcheck source-path=SCRIPTDIR source=vm/run-tests-lib.sh
. "$INTEG/vm/run-tests-lib.sh"

keep_going=0 timeout=900 out="" build=1 verbose=0 list=0 deadline_min=""
names=()
while [ $# -gt 0 ]; do
	case $1 in
	-k | --keep-going) keep_going=1; shift ;;
	--timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
	--deadline-min) deadline_min=${2:?--deadline-min needs minutes}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--no-build) build=0; shift ;;
	-v | --verbose) verbose=1; shift ;;
	-l | --list) list=1; shift ;;
	-h | --help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "run-tests.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) names+=("$1"); shift ;;
	esac
done
[[ $timeout =~ ^[0-9]+$ ]] || { echo "run-tests.sh: --timeout must be whole seconds" >&2; exit 2; }
# deadline: unix seconds, 0 for none
deadline=${GONVMF_TESTS_DEADLINE:-0}
[[ $deadline =~ ^[0-9]+$ ]] || {
	echo "run-tests.sh: GONVMF_TESTS_DEADLINE='$deadline' is not a time in unix seconds (e.g. \$((\$(date +%s) + 3600)) for an hour from now); unset it for no deadline" >&2
	exit 2
}
if [ -n "$deadline_min" ]; then
	[[ $deadline_min =~ ^[0-9]+$ ]] || { echo "run-tests.sh: --deadline-min must be whole minutes, got '$deadline_min'" >&2; exit 2; }
	d=$(($(date +%s) + deadline_min * 60))
	[ "$deadline" != 0 ] && [ "$deadline" -lt $d ] || deadline=$d
fi

say() { echo "run-tests: $*"; }
setup_failed() {
	echo "run-tests: SETUP FAILED: $*" >&2
	exit 2
}

# ---- which suites ----
all=()
while IFS= read -r f; do all+=("$(basename "$f" .sh)"); done < <(ls "$INTEG"/tests/*.sh 2> /dev/null | LC_ALL=C sort)
all+=(go-tests)
if [ $list = 1 ]; then
	printf '%s\n' "${all[@]}"
	exit 0
fi
selected=()
if [ ${#names[@]} -eq 0 ]; then
	selected=("${all[@]}")
else
	for s in "${all[@]}"; do
		for n in "${names[@]}"; do
			if [[ $s == *"$n"* ]]; then
				selected+=("$s")
				break
			fi
		done
	done
	for n in "${names[@]}"; do
		printf '%s\n' "${all[@]}" | grep -qF -- "$n" ||
			{ echo "run-tests.sh: no suite matches '$n'; suites: ${all[*]}" >&2; exit 2; }
	done
fi
# wants_go_tests: the TestRDMA test binaries are built (go-tests runs them all; a suite
# naming $GONVMF_BUILD/tests/ in its script runs some itself).
wants_go_tests=0
for s in "${selected[@]}"; do
	# shellcheck disable=SC2016 # the literal text $GONVMF_BUILD/tests/
	if [ "$s" = go-tests ] || grep -qF -- '$GONVMF_BUILD/tests/' "$INTEG/tests/$s.sh" 2> /dev/null; then
		wants_go_tests=1
	fi
done

# ---- setup ----
t_setup=$(date +%s)
"$VM" check || setup_failed "host prerequisites missing (see above)"
"$VM" image || setup_failed "the guest image could not be built (see above)"
# suite_header <script>: the suite's "# vm: ..." options
suite_header() { head -n 30 "$1" | sed -n 's/^# vm: *//p' | head -n 1; }
kernels=()
for s in "${selected[@]}"; do
	[ "$s" = go-tests ] && continue
	k=$(suite_header "$INTEG/tests/$s.sh" | sed -n 's/.*--kernel[ =]\([^ ]*\).*/\1/p')
	[ -n "$k" ] && [[ " ${kernels[*]} " != *" $k "* ]] && kernels+=("$k")
done
for k in "${kernels[@]}"; do
	"$VM" image --kernel "$k" || setup_failed "the guest image of kernel $k could not be built (see above)"
done

command -v go > /dev/null || PATH=$PATH:/usr/local/go/bin
gobuild() { # <go command...>: run from the repo root, show the output on failure
	local log
	log=$(cd "$SRC" && "$@" 2>&1) || setup_failed "$* failed:
$log"
}
if [ $build = 1 ] && ls "$SRC"/cmd/gonvmf/*.go > /dev/null 2>&1; then
	command -v go > /dev/null || setup_failed "go is not installed (needed to build cmd/gonvmf)"
	say "go build -o $GONVMF_BUILD/bin/gonvmf ./cmd/gonvmf"
	gobuild go build -o "$GONVMF_BUILD/bin/gonvmf" ./cmd/gonvmf
	# Suites with rbd in their name serve Ceph RBD images: they need the ceph build.
	for s in "${selected[@]}"; do
		case $s in *rbd*)
			[ -f /usr/include/rbd/librbd.h ] ||
				setup_failed "suite $s needs the ceph build: install librbd-dev and librados-dev (integration/vm/setup-host.sh)"
			say "go build -tags ${CEPH_TAGS:-ceph,pacific} -o $GONVMF_BUILD/bin/gonvmf-ceph ./cmd/gonvmf"
			gobuild go build -tags "${CEPH_TAGS:-ceph,pacific}" -o "$GONVMF_BUILD/bin/gonvmf-ceph" ./cmd/gonvmf
			break
			;;
		esac
	done
fi
# Test helpers the suites run (integration/cmd/NAME → $GONVMF_BUILD/bin/NAME).
if [ $build = 1 ]; then
	for d in "$SRC"/integration/cmd/*/; do
		[ -d "$d" ] && ls "$d"*.go > /dev/null 2>&1 || continue
		name=$(basename "$d")
		say "go build -o $GONVMF_BUILD/bin/$name ./integration/cmd/$name"
		gobuild go build -o "$GONVMF_BUILD/bin/$name" "./integration/cmd/$name"
	done
fi
rdma_pkgs=()
if [ $wants_go_tests = 1 ]; then
	while IFS= read -r d; do
		rdma_pkgs+=("${d#"$SRC"}")
	done < <(find "$SRC" \( -path "$SRC/build" -o -path "$SRC/.git" -o -name testdata -o -name vendor \) -prune \
		-o -name '*_test.go' -print0 | xargs -0 -r grep -l -E '^func TestRDMA' | xargs -r -n1 dirname | LC_ALL=C sort -u)
	if [ $build = 1 ]; then
		mkdir -p "$GONVMF_BUILD/tests" || setup_failed "cannot create $GONVMF_BUILD/tests"
		rm -f "$GONVMF_BUILD"/tests/*.test "$GONVMF_BUILD/tests/manifest"
		[ ${#rdma_pkgs[@]} -eq 0 ] || command -v go > /dev/null ||
			setup_failed "go is not installed (needed to build the TestRDMA test binaries)"
		for p in "${rdma_pkgs[@]}"; do
			p=${p#/}
			name=${p:-root}
			name=${name//\//_}
			say "go test -c -o $GONVMF_BUILD/tests/$name.test ./$p"
			gobuild go test -c -o "$GONVMF_BUILD/tests/$name.test" "./$p"
			echo "$name ${p:-.}" >> "$GONVMF_BUILD/tests/manifest"
		done
	fi
fi
say "setup done in $(($(date +%s) - t_setup)) s"

# ---- run ----
out=${out:-$GONVMF_VM_DIR/out/tests-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" || setup_failed "cannot create $out"
out=$(cd "$out" && pwd)

declare -A result wall checks
interrupted=0
vm_pid=
late=() # "<suite>: <why>" for each suite the deadline left out
trap 'interrupted=1; [ -n "$vm_pid" ] && kill -TERM "$vm_pid" 2>/dev/null' INT TERM

# suite_opts <script> <default vm.sh options...>: sets SUITE_OPTS to the vm.sh run options
# of a suite. Its own "# vm: ..." header line comes after the defaults, and so wins.
suite_opts() {
	local script=$1 header
	shift
	SUITE_OPTS=("$@")
	header=$(suite_header "$script")
	# shellcheck disable=SC2206 # header options are plain words
	[ -n "$header" ] && SUITE_OPTS+=($header)
	[ $verbose = 1 ] || SUITE_OPTS+=(--quiet)
}

run_suite() { # <name> <guest script> <vm.sh options...>
	local name=$1 script=$2 dir=$out/$1 t0 rc opts=()
	shift 2
	opts=("$@")
	say "== $name"
	t0=$(date +%s)
	local attempt
	for attempt in 1 2; do
		mkdir -p "$dir"
		"$VM" run --out "$dir" "${opts[@]}" "$script" 2> >(tee "$dir/harness.log" >&2) &
		vm_pid=$!
		# a signal that came before vm_pid was set found nothing to stop
		[ $interrupted = 1 ] && kill -TERM "$vm_pid" 2> /dev/null
		wait $vm_pid
		rc=$?
		# a signal interrupts wait before vm.sh is done
		while kill -0 $vm_pid 2> /dev/null; do
			wait $vm_pid
			rc=$?
		done
		vm_pid=
		# qemu (TCG) has crashed at start-up on these machines (a segmentation fault
		# 1.5 s in) before the guest printed anything: nothing of the suite ran, so it
		# runs once more; the first attempt's files are kept next to it. A guest that
		# printed anything, a timeout (124) or a usage error (2) is not retried; nor is
		# a suite that would not end before the deadline.
		case $rc in 0 | 2 | 124) break ;; esac
		if [ $interrupted = 1 ] || [ $attempt = 2 ] || [ -s "$dir/console.log" ]; then
			break
		fi
		if ! fits_deadline "$deadline" "$(vm_timeout_of "${opts[@]}")"; then
			say "$name: qemu stopped before the guest printed anything; not run once more: the deadline is near (it $DEADLINE_WHY)"
			break
		fi
		say "$name: qemu stopped before the guest printed anything (see $dir.attempt1/harness.log); running it once more"
		rm -rf "$dir.attempt1"
		mv "$dir" "$dir.attempt1"
	done
	wall[$name]=$(($(date +%s) - t0))
	local p f
	p=$(grep -c '^RESULT PASS' "$dir/results.txt" 2> /dev/null)
	f=$(grep -c '^RESULT FAIL' "$dir/results.txt" 2> /dev/null)
	checks[$name]="${p:-0}/$((${p:-0} + ${f:-0}))"
	case $rc in
	0) result[$name]=PASS ;;
	124) result[$name]=TIMEOUT ;;
	125) result[$name]=ERROR ;;
	*) result[$name]="FAIL($rc)" ;;
	esac
	if [ "$rc" != 0 ]; then
		grep -h '^RESULT FAIL' "$dir/results.txt" 2> /dev/null | sed 's/^/    /'
		echo "    --- last lines of $dir/guest.log:"
		tail -n 25 "$dir/guest.log" 2> /dev/null | sed 's/^/    /'
	fi
	return "$rc"
}

[ "$deadline" = 0 ] || say "deadline $(date -d "@$deadline" '+%F %T %Z'), $((deadline - $(date +%s))) s from now"
failed=0
for s in "${selected[@]}"; do
	if [ $interrupted = 1 ] || { [ $failed = 1 ] && [ $keep_going = 0 ]; }; then
		result[$s]="not run"
		continue
	fi
	if [ "$s" = go-tests ]; then
		if [ ! -s "$GONVMF_BUILD/tests/manifest" ]; then
			result[$s]=SKIP
			say "== go-tests: SKIP (no package has a func TestRDMA... test)"
			continue
		fi
		script=$INTEG/vm/guest-go-tests.sh
		suite_opts "$script" --timeout "$((timeout > 1200 ? timeout : 1200))" --disk 1G
	else
		script=$INTEG/tests/$s.sh
		suite_opts "$script" --timeout "$timeout"
	fi
	if ! fits_deadline "$deadline" "$(vm_timeout_of "${SUITE_OPTS[@]}")"; then
		result[$s]="SKIPPED(deadline)"
		late+=("$s: $DEADLINE_WHY")
		say "== $s: SKIPPED(deadline): it $DEADLINE_WHY"
		continue
	fi
	run_suite "$s" "$script" "${SUITE_OPTS[@]}" || failed=1
done

{
	rw=10 # the RESULT column: wider only for a longer result
	for s in "${selected[@]}"; do [ "${#result[$s]}" -le "$rw" ] || rw=${#result[$s]}; done
	printf "\n%-28s %-${rw}s %7s %8s  %s\n" SUITE RESULT CHECKS WALL RESULTS
	for s in "${selected[@]}"; do
		w=${wall[$s]:-}
		printf "%-28s %-${rw}s %7s %8s  %s\n" "$s" "${result[$s]}" "${checks[$s]:--}" "${w:+${w}s}" \
			"$([ -d "$out/$s" ] && echo "$out/$s")"
	done
} | tee "$out/summary.txt"
report=$(for s in "${selected[@]}"; do failure_report "$s" "${result[$s]}" "$out/$s"; done)
if [ -n "$report" ]; then
	printf "\nWHAT FAILED (all of it is in each suite's results directory):\n%s\n" "$report" | tee "$out/failures.txt"
fi
[ $interrupted = 1 ] && { say "interrupted"; exit 130; }
if [ ${#late[@]} -gt 0 ]; then
	say "DEADLINE: ${#late[@]} suite(s) not run, as they might have run past the deadline ($(date -d "@$deadline" '+%F %T %Z'), from GONVMF_TESTS_DEADLINE or --deadline-min):"
	printf '    %s\n' "${late[@]}"
	exit 1
fi
exit $failed
}
