#!/usr/bin/env bash
# e2e of the container image: built from the Dockerfile around the binary the test command built
# (scripts/build-image.sh --prebuilt), then run as a user would: `version` and `demo --json` inside it, the
# capabilities its Dockerfile promises (`hami-scheduler` starts with every capability dropped; the `scheduler`
# copy, HAMi's entry point, binds port 443 as user 65532 and cannot start without CAP_NET_BIND_SERVICE in
# its bounding set), and `scheduler` from the image as the extender of the real kube-scheduler on the e2e
# control plane (host network), scheduling and binding a GPU pod as the binary does; `podman stop` ends it
# with exit code 0.
#
#   tests/e2e/image.sh [PATH/TO/hami-scheduler]   # default: ${BUILD_DIR:-build}/hami-scheduler
#
# Ends with "e2e image: N passed, M failed". HAMI_E2E_KEEP_WORK=1 keeps the work dir.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec image IMAGE "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI"; finish; }
command -v podman >/dev/null 2>&1 || { bad "no podman (scripts/install-deps.sh installs it)"; finish; }
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/scripts/podman/containers.conf}"
IMAGE=hami-scheduler:e2e
NAME="hami-e2e-image-$$"
P() { timeout 120 podman "$@"; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-image.XXXXXX")"
PLUGINS_PID=""
cleanup() {
  P rm -f -t 5 "$NAME" >/dev/null 2>&1
  stop_pid "$PLUGINS_PID"
  bash "$E2E_DIR/stop.sh" "$WORK" >/dev/null 2>&1
  if [ "$FAIL" = 0 ] && [ "${HAMI_E2E_KEEP_WORK:-0}" != 1 ]; then rm -rf "$WORK"; else log "work dir kept: $WORK"; fi
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM
mkdir -p "$WORK/logs"

t0=$(date +%s)
if out="$(bash "$ROOT/scripts/build-image.sh" --prebuilt "$HAMI" --tag "$IMAGE" 2>&1)"; then
  ok "scripts/build-image.sh built the image from the Dockerfile in $(( $(date +%s) - t0 ))s: $(printf '%s\n' "$out" | tail -n 1)"
else
  printf '%s\n' "$out" | tail -n 30
  bad "scripts/build-image.sh --prebuilt $HAMI"; finish
fi

# The binary inside, as its own user, with no capability and no network.
version="$(P run --rm --network none --cap-drop=all "$IMAGE" version 2>&1)"
[ "$version" = "$("$HAMI" version 2>&1)" ] && ok "version in the image, every capability dropped: $version" ||
  bad "version in the image: '$version' (the binary says '$("$HAMI" version 2>&1)')"
demo="$(P run --rm --network none --cap-drop=all "$IMAGE" demo --json 2>/dev/null)"
if printf '%s' "$demo" | python3 -c 'import json, sys
d = json.load(sys.stdin)
assert d["pods"] > 0 and d["scheduled"] > 0 and d["failed"] == 0, d
print(d["scheduled"], "of", d["pods"])' > "$WORK/demo.txt" 2>&1; then
  ok "demo --json in the image: $(cat "$WORK/demo.txt") pods scheduled"
else
  bad "demo --json in the image: $(head -c 400 "$WORK/demo.txt")"
fi
user="$(P run --rm --network none --entrypoint id "$IMAGE" -u 2>&1)"
[ "$user" = 65532 ] && ok "the image runs as user 65532" || bad "the image runs as user '$user'"
if P run --rm --network none --cap-drop=all --entrypoint /usr/local/bin/scheduler "$IMAGE" version >/dev/null 2>&1; then
  bad "the scheduler copy started without CAP_NET_BIND_SERVICE: its file capability is missing"
else
  ok "the scheduler copy carries its file capability (it cannot start with every capability dropped)"
fi

# ------------------------------------------------------------------ the image as the real kube-scheduler's extender
if [ -n "$(ss -Htln '( sport = :443 )' 2>/dev/null)" ]; then bad "port 443 is taken on this machine"; finish; fi
BIN="$(bash "$E2E_DIR/build.sh")" || { bad "build the control plane (see the messages above)"; finish; }
export HAMI_E2E_BIN="$BIN"
METRICS_PORT="$(free_port 443)" || { bad "no free loopback port"; finish; }
extender_scheduler_config "$WORK/kube-scheduler-config.yaml" "http://127.0.0.1:443" ||
  { bad "deploy/kube-scheduler-config.yaml has no urlPrefix to point at port 443"; finish; }
if ! HAMI_E2E_RESERVED_PORTS="443 $METRICS_PORT" bash "$E2E_DIR/start.sh" "$WORK" \
    --scheduler-config "$WORK/kube-scheduler-config.yaml" > "$WORK/logs/start.log" 2>&1; then
  tail -n 40 "$WORK/logs/start.log"; bad "start the control plane"; finish
fi
# shellcheck disable=SC1091
. "$WORK/env"
K() { timeout 30 "$BIN/kubectl" --kubeconfig "$HAMI_E2E_KUBECONFIG" --request-timeout=20s "$@"; }
# What the container reads, readable by its user: the kubeconfig with its certificates inlined.
K config view --raw --flatten > "$WORK/kubeconfig-image" && chmod 644 "$WORK/kubeconfig-image"
P run -d --name "$NAME" --network host \
  -v "$WORK/kubeconfig-image:/etc/hami/kubeconfig:ro" -v "$ROOT/deploy/device-config.yaml:/etc/hami/device-config.yaml:ro" \
  --entrypoint /usr/local/bin/scheduler "$IMAGE" serve --http_bind=0.0.0.0:443 --kubeconfig /etc/hami/kubeconfig \
  --metrics-bind-address "127.0.0.1:$METRICS_PORT" --device-config-file /etc/hami/device-config.yaml \
  --health-check-interval 2s > "$WORK/logs/run.log" 2>&1 || { cat "$WORK/logs/run.log"; bad "podman run the image's scheduler"; finish; }
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" --node gpu-a=nvidia:2x16384:10:NVIDIA-Tesla-T4 \
  --allocate-delay 20ms --device-config-file "$ROOT/deploy/device-config.yaml" \
  > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!
dump_logs() {
  log "---- the container's log ----"; P logs --tail 30 "$NAME" 2>&1
  log "---- kube-scheduler ----"; tail -n 20 "$WORK/logs/kube-scheduler.log"
}
if wait_for 60 curl -fsS --max-time 3 http://127.0.0.1:443/readyz; then
  ok "the image's scheduler serves the extender on port 443 (host network) and is ready"
else
  bad "the image's scheduler not ready on port 443 within 60s"; dump_logs; finish
fi
status="$(P exec "$NAME" cat /proc/1/status 2>&1)"
uid="$(printf '%s\n' "$status" | awk '/^Uid:/ { print $2 }')"
caps="$(printf '%s\n' "$status" | awk '/^CapEff:/ { print $2 }')"
# CAP_NET_BIND_SERVICE is bit 10: 0x400, and nothing else.
[ "$uid" = 65532 ] && [ "$caps" = 0000000000000400 ] &&
  ok "it runs as user 65532 with CAP_NET_BIND_SERVICE alone (CapEff $caps)" ||
  bad "the container's process: uid '$uid', CapEff '$caps'"

K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-pod", "namespace": "default"},
 "spec": {"schedulerName": "hami-scheduler",
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}}}]}}
EOF
jp() { K get pod gpu-pod -o "jsonpath=$1" 2>/dev/null; }
allocated() { [ "$(jp '{.spec.nodeName}')" = gpu-a ] && [ "$(jp '{.metadata.annotations.hami\.io/bind-phase}')" = success ]; }
if wait_for 60 allocated; then
  ok "the real kube-scheduler bound gpu-pod through the image: $(jp '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')"
else
  bad "gpu-pod not bound and allocated within 60s (nodeName '$(jp '{.spec.nodeName}')')"; dump_logs
fi

P stop -t 15 "$NAME" >/dev/null 2>&1
code="$(P inspect --format '{{.State.ExitCode}}' "$NAME" 2>&1)"
[ "$code" = 0 ] && ok "podman stop: the image's scheduler drained and exited 0" || { bad "exit code after podman stop: $code"; dump_logs; }
finish
