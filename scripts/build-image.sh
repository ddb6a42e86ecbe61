#!/usr/bin/env bash
# Builds the hami-scheduler container image from the Dockerfile with podman (docker when podman is absent),
# without a registry: the Debian base images the Dockerfile starts from (debian:12, debian:12-slim) are made
# here by mmdebstrap (minbase bookworm) when the engine does not have them. Prints the image's name and size.
#
#   scripts/build-image.sh [--prebuilt BINARY] [--tag NAME]
#
#   (default)           the Dockerfile's full build: compile in the build stage (release)
#   --prebuilt BINARY   the runtime stage around a binary built already (stripped into the build context),
#                       as the README's test command does: minutes, not a second compile
#   --tag NAME          the image's name (default hami-scheduler:<version>)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PREBUILT=""
TAG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) PREBUILT="${2:?--prebuilt wants the path of a hami-scheduler binary}"; shift 2 ;;
    --tag) TAG="${2:?--tag wants an image name}"; shift 2 ;;
    *) echo "build-image: unknown argument '$1' (want --prebuilt BINARY, --tag NAME)" >&2; exit 2 ;;
  esac
done
if [ -n "$PREBUILT" ] && [ ! -x "$PREBUILT" ]; then
  echo "build-image: --prebuilt $PREBUILT is not an executable file" >&2
  exit 2
fi
VERSION="$(sed -n 's/^project(hami-scheduler VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
TAG="${TAG:-hami-scheduler:${VERSION:-dev}}"

if command -v podman >/dev/null 2>&1; then
  ENGINE=podman
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/scripts/podman/containers.conf}"
  # Only what is on this machine: a short name never goes to a registry.
  PULL=(--pull=never)
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  ENGINE=docker
  PULL=()
else
  echo "build-image: neither podman nor a running docker engine (scripts/install-deps.sh installs podman)" >&2
  exit 1
fi

# The base images, made locally when missing: both names are one minbase bookworm (the Dockerfile's -slim
# stage installs what it needs on top).
has_image() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }
if ! has_image docker.io/library/debian:12 || ! has_image docker.io/library/debian:12-slim; then
  command -v mmdebstrap >/dev/null 2>&1 ||
    { echo "build-image: no debian:12 image and no mmdebstrap to make one (scripts/install-deps.sh)" >&2; exit 1; }
  echo "build-image: making the debian:12 base image with mmdebstrap (minbase bookworm)"
  # As Debian's slim images: no manuals, translations or documentation (dpkg keeps excluding them for what
  # the Dockerfile installs on top), the licences kept.
  mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm - | "$ENGINE" import - docker.io/library/debian:12 >/dev/null
  "$ENGINE" tag docker.io/library/debian:12 docker.io/library/debian:12-slim
fi

ARGS=("${PULL[@]}" --network host -t "$TAG" -f "$ROOT/Dockerfile")
if [ -n "$PREBUILT" ]; then
  CONTEXT="$(mktemp -d "${TMPDIR:-/tmp}/hami-image.XXXXXX")"
  trap 'rm -rf "$CONTEXT"' EXIT
  mkdir "$CONTEXT/prebuilt" "$CONTEXT/scripts"
  strip -o "$CONTEXT/prebuilt/hami-scheduler" "$PREBUILT"
  cp scripts/install-deps.sh scripts/check-toolchains.sh "$CONTEXT/scripts/"  # the build stage names them
  "$ENGINE" build "${ARGS[@]}" --build-arg BINARY=prebuilt "$CONTEXT"
else
  "$ENGINE" build "${ARGS[@]}" "$ROOT"
fi
SIZE="$("$ENGINE" image inspect --format '{{.Size}}' "$TAG")"
echo "image: $TAG ($(( SIZE / 1000000 )) MB)"
