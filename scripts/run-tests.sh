#!/usr/bin/env bash
# The README's test command: installs dependencies, builds everything, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
./scripts/install-deps.sh
t_deps=$(date +%s)
./scripts/build.sh -DHAMI_BUILD_TESTS=ON -DHAMI_BUILD_BENCH=ON
t_build=$(date +%s)
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 300 -j "$(nproc)"
t_test=$(date +%s)
echo "time: deps $((t_deps - start))s, build $((t_build - t_deps))s, tests $((t_test - t_build))s"
