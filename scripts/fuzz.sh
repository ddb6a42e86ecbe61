#!/usr/bin/env bash
# Runs every libFuzzer target in tests/fuzz for a bounded time (default 300 s each; the test command uses 20),
# each seeded from a temporary copy of its committed corpus (the tree is never written). A crash or a broken
# property stops that target; its input is kept in build-asan/fuzz-artifacts/<target>/ and the script fails.
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]   (FUZZ_NO_BUILD=1: use the existing build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
shift || true
BUILD=${ASAN_BUILD_DIR:-build-asan}
if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then ./scripts/build-asan.sh; fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run_one() {
  local t=$1 log="$work/$1.log" artifacts="$BUILD/fuzz-artifacts/$1/"
  mkdir -p "$work/$t.corpus" "$artifacts"
  cp tests/fuzz/corpus/"$t"/* "$work/$t.corpus/"
  if "$BUILD/tests/fuzz/$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "$work/$t.corpus" >"$log" 2>&1; then
    local runs
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz: $t: ok, ${runs:-?} inputs in ${seconds}s, corpus $(ls "$work/$t.corpus" | wc -l) entries"
  else
    echo "fuzz: $t: FAILED (input kept in $artifacts); the end of its log:"
    tail -40 "$log"
    return 1
  fi
}

# As many targets at once as there are cores: 11 targets x 20 s take about two minutes on two cores.
jobs=${FUZZ_JOBS:-$(nproc)}
for t in "${targets[@]}"; do
  [ -x "$BUILD/tests/fuzz/$t" ] || { echo "fuzz: $t: not built in $BUILD/tests/fuzz"; exit 1; }
done
for t in "${targets[@]}"; do
  ( set +e; run_one "$t" >"$work/$t.out" 2>&1; echo $? >"$work/$t.rc" ) &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
done
wait
failed=0
for t in "${targets[@]}"; do
  cat "$work/$t.out"
  [ "$(cat "$work/$t.rc")" = 0 ] || failed=$((failed + 1))
done
passed=$(( ${#targets[@]} - failed ))
echo "fuzz: $passed of ${#targets[@]} targets passed"
[ "$failed" -eq 0 ]
