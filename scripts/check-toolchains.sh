#!/usr/bin/env bash
# Checks, right after scripts/install-deps.sh, that every toolchain the test command is about to use works on
# this machine: each check compiles and links a two-line program (or asks a version) and, when one fails, names
# the Debian package or the tool that is missing. A missing piece fails here, in seconds, instead of 20 minutes
# later in the middle of a build or by a suite quietly not running.
# Usage: scripts/check-toolchains.sh [--build-only]   (--build-only: the product build only, as install-deps.sh)
# Environment: CXX (default c++), ASAN_CXX (default clang++-16), GO (default go on PATH, else /usr/local/go/bin/go).
set -uo pipefail
cd "$(dirname "$0")/.."

mode=${1:-all}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

ok() { echo "toolchain: ok: $*"; }
fail() {
  echo "toolchain: MISSING: $*"
  failures=$((failures + 1))
}
# Compiles and links $work/probe.cc with the given command; on failure prints the compiler's last lines.
link_probe() { # command...
  if "$@" -o "$work/probe" "$work/probe.cc" >"$work/log" 2>&1 && "$work/probe" >/dev/null 2>>"$work/log"; then
    return 0
  fi
  sed "s/^/    /" "$work/log" | tail -5
  return 1
}

cat >"$work/probe.cc" <<'EOF'
#include <span>
int main(int argc, char**) { int v[2] = {argc, 0}; return std::span(v).size() == 2 ? 0 : 1; }
EOF
cxx=${CXX:-c++}
if link_probe "$cxx" -std=c++20; then
  ok "$cxx builds C++20"
else
  fail "$cxx cannot build and run a C++20 program (packages g++ and build-essential, scripts/install-deps.sh)"
fi

if [ "$mode" != --build-only ]; then
  clang=${ASAN_CXX:-clang++-16}
  if ! command -v "$clang" >/dev/null 2>&1; then
    fail "$clang not found (package clang-16)"
  else
    if link_probe "$clang" -std=c++20 -fsanitize=address,undefined -fno-sanitize-recover=undefined; then
      ok "$clang links ASan + UBSan"
    else
      fail "$clang cannot link -fsanitize=address,undefined: clang's sanitizer runtimes are in package libclang-rt-16-dev"
    fi
    cat >"$work/probe.cc" <<'EOF'
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
EOF
    # A libFuzzer binary runs its input files and exits; the probe itself is the one input.
    if "$clang" -fsanitize=fuzzer,address -o "$work/fuzz" "$work/probe.cc" >"$work/log" 2>&1 &&
      "$work/fuzz" "$work/probe.cc" >>"$work/log" 2>&1; then
      ok "$clang links libFuzzer"
    else
      sed "s/^/    /" "$work/log" | tail -5
      fail "$clang cannot link -fsanitize=fuzzer: libFuzzer is in packages libfuzzer-16-dev and libclang-rt-16-dev"
    fi
  fi

  # The e2e suites build the Kubernetes control plane and helm from Go modules. helm (tests/e2e/helm/go.mod) is
  # built by the machine's Go (GOTOOLCHAIN=local): its `go` line is the least Go on the machine. The control plane
  # (tests/e2e/go.mod) needs a newer Go than Debian machines have (k8s.io/kubernetes v1.38: go 1.27.0), so
  # tests/e2e/build.sh runs the toolchain its go.mod's `toolchain` line names (GOTOOLCHAIN=go1.27.3): the go
  # command fetches it from the module proxy once (about 76 MB, 10 s, kept in the module cache) and runs it. It is
  # fetched and asked its version here, so a proxy that cannot serve it fails now and not in the middle of the run.
  need=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' tests/e2e/helm/go.mod | sort -V | tail -1)
  go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  if [ ! -x "$go" ]; then
    fail "no Go toolchain (go on PATH or /usr/local/go/bin/go); the e2e suites need Go >= $need (Debian 12's golang-go is 1.19, too old: install Go $need or newer in /usr/local/go)"
  else
    have=$("$go" env GOVERSION 2>/dev/null | sed 's/^go//')
    if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
      fail "$go is Go ${have:-?}; the e2e suites need Go >= $need (tests/e2e/helm/go.mod)"
    else
      ok "$go is Go $have (>= $need)"
      toolchain=$(sed -n 's/^toolchain \(go[0-9][0-9.]*\)$/\1/p' tests/e2e/go.mod | head -1)
      plane=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' tests/e2e/go.mod | head -1)
      if [ -n "$toolchain" ]; then
        got=$(cd tests/e2e && GOTOOLCHAIN=$toolchain "$go" env GOVERSION 2>"$work/log")
        if [ "$got" = "$toolchain" ]; then
          ok "GOTOOLCHAIN=$toolchain $go runs $got (tests/e2e/go.mod: go $plane, toolchain $toolchain)"
        else
          sed "s/^/    /" "$work/log" | tail -5
          fail "GOTOOLCHAIN=$toolchain $go did not run $toolchain (the control plane's go.mod needs it): the go command fetches it from the Go module proxy (GOPROXY) as golang.org/toolchain"
        fi
      elif [ -n "$plane" ] && [ "$(printf '%s\n%s\n' "$plane" "$have" | sort -V | head -1)" != "$plane" ]; then
        fail "$go is Go $have; the control plane needs Go >= $plane (tests/e2e/go.mod)"
      fi
    fi
  fi

  if python3 -c 'import yaml' >/dev/null 2>&1; then
    ok "$(command -v python3) imports yaml"
  else
    fail "$(command -v python3 || echo python3) cannot import yaml (the chart's checks read manifests with it: package python3-yaml for /usr/bin/python3)"
  fi
fi

if [ "$failures" -gt 0 ]; then
  echo "toolchain: $failures check(s) failed; nothing was built"
  exit 1
fi
