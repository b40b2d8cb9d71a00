#!/bin/bash
# Run every go test -fuzz target in the module for a fixed time each (default 30s).
# usage: integration/fuzz.sh [fuzztime]     e.g. integration/fuzz.sh 5s
# Exits non-zero on the first target that finds a failure; the failing input is left in
# the package's testdata/fuzz/<FuzzName>/ directory by the go tool, ready to commit.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-${FUZZTIME:-30s}}
total=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  cat "$dir"/*_test.go 2>/dev/null | grep -q -E '^func Fuzz[A-Za-z0-9_]+\(' || continue
  for name in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "=== fuzz $pkg $name ($T)"
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$T" "$pkg" 2>&1 | tail -3
    total=$((total + 1))
  done
done
echo "fuzzed $total targets for $T each: no failures"
