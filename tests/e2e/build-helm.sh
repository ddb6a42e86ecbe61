#!/usr/bin/env bash
# Builds the helm CLI from its Go module (tests/e2e/helm/go.mod pins the version) for the chart's tests, and
# caches it like the control plane (tests/e2e/build.sh): ~/.cache/hami-e2e/helm-<version>-<key>/helm. Prints
# the binary's path on stdout; a cached build is reused. About 2 minutes on 2 cores when cold.
#
#   HELM="$(bash tests/e2e/build-helm.sh)"
#
# Environment: GO (default: go on PATH, else /usr/local/go/bin/go), HAMI_E2E_CACHE, HAMI_E2E_BUILD_JOBS.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/helm" && pwd)"
cd "$DIR"
log() { printf '[e2e build-helm] %s\n' "$*" >&2; }
die() { printf '[e2e build-helm] ERROR: %s\n' "$*" >&2; exit 1; }

GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[ -x "$GO" ] || die "go not found (set GO=/path/to/go)"
export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -buildvcs=false" CGO_ENABLED=0

VERSION="$(awk '$1=="helm.sh/helm/v3" && $2 ~ /^v/ {print $2; exit}' go.mod)"
[ -n "$VERSION" ] || die "cannot read the helm.sh/helm/v3 version from $DIR/go.mod"
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION"
KEY="$( { cat go.mod go.sum; echo "$LDFLAGS|$("$GO" env GOVERSION GOOS GOARCH)"; } | sha256sum | cut -c1-12)"
CACHE_ROOT="${HAMI_E2E_CACHE:-$HOME/.cache/hami-e2e}"
ENTRY="$CACHE_ROOT/helm-$VERSION-$KEY"
if [ -x "$ENTRY/helm" ]; then
  echo "$ENTRY/helm"
  exit 0
fi
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock-helm"
flock -w "${HAMI_E2E_LOCK_WAIT:-3600}" 9 || die "timed out waiting for $CACHE_ROOT/.lock-helm"
if [ ! -x "$ENTRY/helm" ]; then
  t0=$(date +%s)
  log "building helm $VERSION with $("$GO" env GOVERSION) into $ENTRY"
  "$GO" mod download >&2 || die "go mod download failed"
  mkdir -p "$ENTRY"
  "$GO" build -p "${HAMI_E2E_BUILD_JOBS:-2}" -trimpath -ldflags="$LDFLAGS" -o "$ENTRY/helm.tmp" helm.sh/helm/v3/cmd/helm >&2 ||
    die "go build helm failed"
  mv "$ENTRY/helm.tmp" "$ENTRY/helm"
  log "built in $(( $(date +%s) - t0 ))s"
fi
echo "$ENTRY/helm"
