#!/usr/bin/env bash
# The README's main-job command: installs dependencies, builds, and runs the scheduler's decision engine on the
# sample cluster in examples/ (all four vendors), printing each decision and the per-device usage.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh -DHAMI_BUILD_TESTS=OFF -DHAMI_BUILD_BENCH=OFF >/dev/null
exec "${BUILD_DIR:-build}/hami-scheduler" simulate --cluster examples/cluster.yaml --pods examples/pods.yaml -o table "$@"
