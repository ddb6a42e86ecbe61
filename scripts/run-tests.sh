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
# The real control plane (etcd, kube-apiserver, kube-scheduler built from the Kubernetes Go modules and cached
# in ~/.cache/hami-e2e; the first build takes about 5 minutes).
if command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ]; then
  export PATH=$PATH:/usr/local/go/bin
  timeout 2400 bash tests/e2e/smoke.sh
  timeout 600 bash tests/e2e/run-conformance.sh "${BUILD_DIR:-build}/tests/integration_tests"
else
  echo "e2e: SKIPPED: no Go toolchain (>= 1.24) to build the Kubernetes control plane"
fi
t_e2e=$(date +%s)
echo "time: deps $((t_deps - start))s, build $((t_build - t_deps))s, tests $((t_test - t_build))s, e2e $((t_e2e - t_test))s"
