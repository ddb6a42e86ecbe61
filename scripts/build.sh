#!/usr/bin/env bash
# Configures and builds hami-scheduler (and its tests and benchmarks) into build/ with ccache.
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-2G}
# Paths relative to the checkout, so that every clone (CI's fresh one included) shares the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@"
elif [ $# -gt 0 ]; then
  cmake "$BUILD_DIR" "$@"
fi
# Two cores: two jobs. Linking test binaries is memory-hungry but 24 GiB is plenty.
ninja -C "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
