#!/usr/bin/env bash
# Installs every build and test dependency of hami-scheduler on Debian 12 (bookworm), by exact package name.
# Boost is pinned to 1.81: libboost-all-dev / libboost-dev are 1.74 and conflict with it.
# Usage: scripts/install-deps.sh [--build-only]   (--build-only: without the sanitizer and fuzzing compiler)
set -euo pipefail

PACKAGES=(
  build-essential g++ cmake ninja-build ccache pkg-config git
  libboost1.81-dev libboost-json1.81-dev libboost-container1.81-dev libboost-system1.81-dev
  libyaml-cpp-dev libcxxopts-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libssl-dev
  openssl curl iproute2 procps python3
)
# The sanitizer build and the libFuzzer targets (scripts/build-asan.sh, scripts/fuzz.sh): clang-16 only
# recommends its sanitizer runtimes (libclang-rt-16-dev) and --no-install-recommends below skips them, so they
# are named here; the chart's test reads rendered manifests with PyYAML (tests/e2e/helm.sh).
# scripts/check-toolchains.sh proves each toolchain works right after this script.
# The container image is built and run with podman (runc: crun refuses this kernel's hybrid cgroup layout)
# from a base image mmdebstrap makes, no registry needed (scripts/build-image.sh). The /ui/ page is loaded in
# headless Chromium (tests/e2e/ui.sh).
if [ "${1:-}" != "--build-only" ]; then
  PACKAGES+=(clang-16 libclang-rt-16-dev libfuzzer-16-dev python3-yaml podman runc mmdebstrap chromium)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
