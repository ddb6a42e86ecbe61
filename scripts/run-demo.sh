#!/usr/bin/env bash
# The README's main-job command: installs dependencies, builds, and runs `hami-scheduler demo`: the embedded
# API server, simulated nodes of every vendor with their device plugins, the real scheduler extender over
# loopback HTTP and a kube-scheduler stand-in, then a stream of sample pods, a live table and a summary.
# Extra arguments go to the demo (`--keep` keeps it running for kubectl, `--json` prints the summary as JSON).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --build-only
./scripts/check-toolchains.sh --build-only
./scripts/build.sh -DHAMI_BUILD_TESTS=OFF -DHAMI_BUILD_BENCH=OFF >/dev/null
exec "${BUILD_DIR:-build}/hami-scheduler" demo "$@"
