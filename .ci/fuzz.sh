#!/usr/bin/env bash
# Runs every fuzz target of the project for a bounded time each (default
# 20 s; FUZZTIME overrides) and fails on any crasher. A crasher is written
# by go test under the package's testdata/fuzz/<Target>/: commit it with
# the fix, and it stays a regression test of plain `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20s}
# package target, one per line: go test -fuzz takes one target at a time.
targets=$(grep -rlE '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' --include='*_test.go' . |
  while read -r file; do
    pkg=./$(dirname "${file#./}")
    grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed "s|^func |$pkg |"
  done | sort)
n=0
while read -r pkg target; do
  [ -n "$pkg" ] || continue
  n=$((n + 1))
  printf '%-26s %-28s ' "$pkg" "$target"
  log=$(mktemp /tmp/enclave-fuzz.XXXXXX)
  before=$(git status --porcelain --untracked-files=all -- "$pkg/testdata/fuzz" 2>/dev/null)
  if ! go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime=5s -parallel 2 >"$log" 2>&1; then
    after=$(git status --porcelain --untracked-files=all -- "$pkg/testdata/fuzz" 2>/dev/null)
    # Go before 1.27 has a race in its fuzzing coordinator (go.dev/issue/75804):
    # when -fuzztime ends it may report "context deadline exceeded" and fail the
    # target having found nothing. A real crasher always writes its input, so a
    # failure that wrote none and says only that is the race, not a finding.
    if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" &&
      ! grep -qE 'Failing input written|panic:|--- FAIL: .*/' "$log"; then
      echo "ok (fuzz coordinator's deadline race at the end of -fuzztime, no input written)"
      rm -f "$log"
      continue
    fi
    echo "FAIL"; tail -40 "$log"
    echo "$after"
    exit 1
  fi
  { grep -oE 'execs: [0-9]+' "$log" || echo ok; } | tail -1
  rm -f "$log"
done <<<"$targets"
echo "fuzz targets run: $n, each for $fuzztime"
