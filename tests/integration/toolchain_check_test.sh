#!/usr/bin/env bash
# scripts/check-toolchains.sh fails, naming what is missing, on a machine without the sanitizer runtimes or
# without a recent enough Go toolchain (each simulated with a stand-in for the tool), and passes on this one.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
# description, expected exit code, text the output must contain ('' for none), VAR=value... [-- script args]
expect() {
  local what=$1 rc_want=$2 text=$3
  shift 3
  local vars=() rc=0
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  env "${vars[@]}" bash "$ROOT/scripts/check-toolchains.sh" "$@" >"$work/out" 2>&1 || rc=$?
  if [ "$rc" != "$rc_want" ] || { [ -n "$text" ] && ! grep -qF -- "$text" "$work/out"; }; then
    echo "FAIL: $what: exit $rc (wanted $rc_want), output:"
    sed 's/^/  /' "$work/out"
    failed=$((failed + 1))
  else
    echo "ok: $what"
  fi
}

# clang as a machine with clang-16 but not libclang-rt-16-dev has it: a resource directory without runtimes.
mkdir -p "$work/resource/include"
cp -r "$(clang++-16 -print-resource-dir)/include/." "$work/resource/include/"
printf '#!/bin/sh\nexec clang++-16 -resource-dir=%s "$@"\n' "$work/resource" >"$work/clang-without-runtimes"
printf '#!/bin/sh\necho go1.19.8\n' >"$work/old-go"
chmod +x "$work/clang-without-runtimes" "$work/old-go"

expect "this machine has every toolchain" 0 ""
expect "no sanitizer runtimes" 1 "package libclang-rt-16-dev" ASAN_CXX="$work/clang-without-runtimes"
expect "no clang-16" 1 "not found (package clang-16)" ASAN_CXX=clang++-nonexistent
expect "no Go toolchain" 1 "no Go toolchain" GO="$work/no-such-go"
expect "Go too old" 1 "is Go 1.19.8; the e2e suites need Go >= 1.26" GO="$work/old-go"
expect "the product build alone needs no clang or Go" 0 "" ASAN_CXX=clang++-nonexistent GO="$work/no-such-go" \
  -- --build-only
[ "$failed" -eq 0 ]
