#!/bin/bash
# engine-guard.sh: the RDMA engine's regression guard (make test runs it). Runs
# BenchmarkEngine (target/rdma/bench_test.go: the whole engine on the fake fabric, a host
# keeping fio's queue depths in flight) and fails when any case
#   - allocates: more than 0 allocs/op or 0 B/op (the steady-state I/O path allocates
#     nothing; Go rounds both down: allocs/op shows an allocation per I/O, B/op a 32-byte
#     allocation every 32 I/Os). 20000 ops per case: the runtime's one-time growth of its lock wait entries
#     (sudogs, 112 B, when more of the fake host's goroutines block on a mutex than ever
#     before, as happens on a loaded machine) stays under 1 B/op, which it did not at 3000,
#     or lets a garbage collection run during its I/O (gcs: none may, so GOGC and GOMEMLIMIT
#     cannot reach the I/O path's latency), or
#   - costs more than the bound: ENGINE_GUARD_MAX_NS_4K ns/op for 4 KiB cases (default
#     100000) and ENGINE_GUARD_MAX_NS_128K for 128 KiB cases (default 2000000).
# The time bounds are ~100x what the cases take on an idle 2-core build machine (0.4-3 us
# and 15-60 us per op): loose enough for a machine shared by several builds, tight enough
# to catch a sleep, a timer or a goroutine hand-off per I/O.
#
#   integration/bench/engine-guard.sh [go test flags...]   e.g. -benchtime 20000x
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GO=${GO:-go}
max4k=${ENGINE_GUARD_MAX_NS_4K:-100000}
max128k=${ENGINE_GUARD_MAX_NS_128K:-2000000}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
(cd "$SRC" && $GO test -run '^$' -bench '^BenchmarkEngine$' -benchtime 20000x -count 1 "$@" ./target/rdma/) > "$out" 2>&1 || {
	cat "$out"
	echo "engine-guard: go test -bench failed" >&2
	exit 1
}
grep '^Benchmark' "$out"
awk -v max4k="$max4k" -v max128k="$max128k" '
	/^BenchmarkEngine\// {
		n++
		name = $1; ns = ""; bytes = ""; allocs = ""; gcs = ""
		for (i = 2; i < NF; i++) {
			if ($(i + 1) == "ns/op") ns = $i
			if ($(i + 1) == "B/op") bytes = $i
			if ($(i + 1) == "allocs/op") allocs = $i
			if ($(i + 1) == "gcs") gcs = $i
		}
		max = (name ~ /128k/) ? max128k : max4k
		if (ns == "" || bytes == "" || allocs == "") { printf "engine-guard: %s: no ns/op, B/op or allocs/op\n", name; bad++; next }
		if (allocs + 0 > 0 || bytes + 0 > 0) { printf "engine-guard: %s allocates: %s B/op, %s allocs/op (want 0)\n", name, bytes, allocs; bad++ }
		if (gcs + 0 > 0) { printf "engine-guard: %s: %s garbage collections during its I/O (want 0)\n", name, gcs; bad++ }
		if (ns + 0 > max) { printf "engine-guard: %s takes %s ns/op, over the bound of %d\n", name, ns, max; bad++ }
	}
	END {
		if (n == 0) { print "engine-guard: no BenchmarkEngine results"; exit 1 }
		if (bad) exit 1
		printf "engine-guard: %d cases, 0 allocations, 0 garbage collections, within %d ns/op (4k) and %d ns/op (128k)\n", n, max4k, max128k
	}' "$out"
