#!/usr/bin/env bash
# Builds the sanitizer tree (build-asan/): clang-16 with ASan + UBSan, the unit and integration tests and the
# libFuzzer targets (tests/fuzz), no benchmarks. -O1 and line tables only: faster to build, same reports.
# Usage: scripts/build-asan.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
export BUILD_TYPE=RelWithDebInfo
export CXX=${ASAN_CXX:-clang++-16}
exec ./scripts/build.sh -DHAMI_BUILD_TESTS=ON -DHAMI_BUILD_BENCH=OFF -DHAMI_BUILD_FUZZ=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" "$@"
