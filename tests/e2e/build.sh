#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-scheduler (and a matching kubectl) of the Kubernetes release pinned
# in tests/e2e/go.mod, from their Go modules, into a cache OUTSIDE the repo:
#
#   ${HAMI_E2E_CACHE:-$HOME/.cache/hami-e2e}/<k8s version>-<key>/bin/{etcd,kube-apiserver,kube-scheduler,kubectl}
#
# <key> hashes go.mod, go.sum, cmd/*/main.go, this script's build flags and the
# Go version, so any change rebuilds and an unchanged tree reuses the binaries.
# A fresh clone on the same machine (CI) finds the same key and skips the build.
#
# Progress goes to stderr; the only line on stdout is the bin directory, so
#   BIN=$(tests/e2e/build.sh)
# works. Exits non-zero with a message naming the failing step.
#
# Environment:
#   HAMI_E2E_CACHE       cache root (default $HOME/.cache/hami-e2e)
#   HAMI_E2E_BUILD_JOBS  go build -p (default 2: the machine has 2 cores; the
#                        kube-apiserver link peaks at about 2 GiB resident, the
#                        compile at about 1 GiB per job)
#   HAMI_E2E_FORCE=1     rebuild even if the cached binaries exist
#   HAMI_E2E_KEEP=N      keep the N most recent cache entries (default 2)
#   HAMI_E2E_GOTOOLCHAIN GOTOOLCHAIN for every go command (default: go.mod's `toolchain` line, go1.27.3)
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$E2E_DIR"

log() { printf '[e2e build] %s\n' "$*" >&2; }
die() { printf '[e2e build] ERROR: %s\n' "$*" >&2; exit 1; }

GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[ -x "$GO" ] || die "go not found (set GO=/path/to/go); any Go >= 1.21 runs the toolchain go.mod names"

# k8s.io/kubernetes v1.38 needs Go 1.27 (go.mod: go 1.27.0). The Go on the machine (1.26 on Debian 12 here)
# runs the toolchain named by go.mod's `toolchain` line instead: GOTOOLCHAIN=go1.27.3 makes the go command
# fetch golang.org/toolchain@v0.0.1-go1.27.3.<os>-<arch> from the module proxy once (about 76 MB, kept in the
# module cache, verified with the checksum database like any module) and run every command with it.
# Nothing else is ever downloaded as a toolchain; HAMI_E2E_GOTOOLCHAIN=local forces the machine's own Go.
TOOLCHAIN="$(awk '$1=="toolchain" {print $2; exit}' go.mod)"
export GOTOOLCHAIN="${HAMI_E2E_GOTOOLCHAIN:-${TOOLCHAIN:-local}}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -buildvcs=false"
export CGO_ENABLED=0              # static binaries, no C toolchain needed
JOBS="${HAMI_E2E_BUILD_JOBS:-2}"

K8S_VERSION="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' go.mod)"
[ -n "$K8S_VERSION" ] || die "cannot read the k8s.io/kubernetes version from $E2E_DIR/go.mod"
ETCD_VERSION="$(awk '$1=="go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' go.mod)"
K8S_MINOR="${K8S_VERSION#v}"; K8S_MAJOR="${K8S_MINOR%%.*}"; K8S_MINOR="${K8S_MINOR#*.}"; K8S_MINOR="${K8S_MINOR%%.*}"
# A pre-release (v1.38.0-beta.0) reports minor "38+", as upstream's hack/lib/version.sh stamps it.
case "$K8S_VERSION" in v*.*.*-*) K8S_MINOR="$K8S_MINOR+" ;; esac

# Version stamping as upstream's hack/lib/version.sh does, so /version and the
# emulation/compatibility version logic see the real release, not v0.0.0-master.
VPKG=k8s.io/component-base/version
LDFLAGS="-s -w -X $VPKG.gitVersion=$K8S_VERSION -X $VPKG.gitMajor=$K8S_MAJOR -X $VPKG.gitMinor=$K8S_MINOR"
LDFLAGS="$LDFLAGS -X $VPKG.gitTreeState=clean -X $VPKG.buildDate=1970-01-01T00:00:00Z"
LDFLAGS="$LDFLAGS -X $VPKG.gitCommit=hami-e2e-module-build"

GOVERSION="$("$GO" env GOVERSION)" ||
  die "'GOTOOLCHAIN=$GOTOOLCHAIN $GO env GOVERSION' failed: is $GO a working Go >= 1.21, and is the module proxy reachable for the toolchain?"
KEY="$( { cat go.mod go.sum cmd/*/main.go; echo "$LDFLAGS|$GOVERSION|$("$GO" env GOOS GOARCH)|$CGO_ENABLED"; } | sha256sum | cut -c1-12)"
CACHE_ROOT="${HAMI_E2E_CACHE:-$HOME/.cache/hami-e2e}"
ENTRY="$CACHE_ROOT/$K8S_VERSION-$KEY"
BIN="$ENTRY/bin"
COMPONENTS=(etcd kube-apiserver kube-scheduler kubectl)

have_all() {
  local c
  for c in "${COMPONENTS[@]}"; do [ -x "$BIN/$c" ] || return 1; done
}

if [ "${HAMI_E2E_CHECK_ONLY:-0}" = 1 ]; then  # only answer "is it cached?"
  if have_all; then echo "$BIN"; exit 0; fi
  exit 1
fi

mkdir -p "$CACHE_ROOT"
# One build per cache root at a time (a second caller waits, then reuses).
exec 9>"$CACHE_ROOT/.lock"
if ! flock -w "${HAMI_E2E_LOCK_WAIT:-3600}" 9; then die "timed out waiting for $CACHE_ROOT/.lock"; fi

if [ "${HAMI_E2E_FORCE:-0}" != 1 ] && have_all; then
  log "cached: $BIN (k8s $K8S_VERSION, etcd $ETCD_VERSION, key $KEY) - build skipped"
  touch "$ENTRY"
  echo "$BIN"
  exit 0
fi

log "building k8s $K8S_VERSION + etcd $ETCD_VERSION with $GOVERSION, go build -p $JOBS, into $BIN"
log "machine: $(nproc) cores, $(awk '/MemAvailable/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) memory available"
TOTAL_START=$(date +%s)

step() { # name, command...
  local name="$1"; shift
  local t0=$(date +%s) rc=0
  log "step $name ..."
  "$@" >&2 || rc=$?
  local t1=$(date +%s)
  if [ "$rc" -ne 0 ]; then
    die "step '$name' failed (exit $rc) after $((t1 - t0))s; see the go output above"
  fi
  log "step $name done in $((t1 - t0))s"
}

step "go mod download" "$GO" mod download
step "go mod verify"   "$GO" mod verify

STAGE="$ENTRY/bin.tmp.$$"
rm -rf "$STAGE"; mkdir -p "$STAGE"
trap 'rm -rf "$STAGE"' EXIT
for c in "${COMPONENTS[@]}"; do
  step "build $c" "$GO" build -p "$JOBS" -trimpath -ldflags="$LDFLAGS" -o "$STAGE/$c" "./cmd/$c"
done

rm -rf "$BIN"
mv "$STAGE" "$BIN"
trap - EXIT
{
  echo "k8s.io/kubernetes $K8S_VERSION"
  echo "go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  echo "go $GOVERSION"
  echo "key $KEY"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(( $(date +%s) - TOTAL_START ))s with -p $JOBS"
} > "$ENTRY/BUILD_INFO"
log "all built in $(( $(date +%s) - TOTAL_START ))s: $(du -sh "$BIN" | cut -f1) in $BIN"

# Drop older entries so the cache does not grow without bound.
KEEP="${HAMI_E2E_KEEP:-2}"
ls -1dt "$CACHE_ROOT"/v*-* 2>/dev/null | tail -n +"$((KEEP + 1))" | while read -r old; do
  [ "$old" = "$ENTRY" ] && continue
  log "removing old cache entry $old"; rm -rf "$old"
done

echo "$BIN"
