#!/usr/bin/env bash
# e2e of remote GPUs (lupine, docs/DECISIONS.md "Remote GPUs") on the REAL kube-scheduler: two lupine servers
# (nodes labelled hami.io/lupine-server whose NVIDIA plugin registers their cards: lupine-a with two cards at
# 10.0.0.5, port label 15000; lupine-b with one at 10.0.0.6, default port) and one GPU-less client, cpu-1.
#   1. a pod asking one remote GPU is bound on cpu-1 (never on a server) with every card of the smaller server,
#      lupine-b, and its endpoint, hami.io/lupine-server: 10.0.0.6:14833; the webhook's LUPINE_SERVER reads it
#      (the pod is created through our admission review, as the API server would send it);
#   2. a second one takes lupine-a whole (10.0.0.5:15000): lupine-b is in use;
#   3. a third stays Pending (every server in use), and is bound once the first is deleted.
#
#   tests/e2e/remotegpu.sh [PATH/TO/hami-scheduler]
#
# Ends with "e2e remotegpu: N passed, M failed". HAMI_E2E_KEEP_WORK=1 keeps the work dir.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec remotegpu REMOTEGPU "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
BIN="$(bash "$E2E_DIR/build.sh")" || { bad "build (see the messages above)"; finish; }
export HAMI_E2E_BIN="$BIN"
KUBECTL="$BIN/kubectl"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-remotegpu.XXXXXX")"
SERVE_PID=""
PLUGINS_PID=""
cleanup() { end_suite_run "$WORK" "$PLUGINS_PID" "$SERVE_PID"; }
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

start_for_extender "$WORK" || finish
grep -q 'nvidia.com/remote-gpu, ignoredByScheduler: true' "$WORK/kube-scheduler-config.yaml" &&
  ok "deploy/kube-scheduler-config.yaml manages nvidia.com/remote-gpu" ||
  bad "deploy/kube-scheduler-config.yaml does not manage nvidia.com/remote-gpu"
# Remote GPUs are built only where the device config turns them on.
cp "$ROOT/deploy/device-config.yaml" "$WORK/device-config.yaml"
printf 'remotegpu:\n  enabled: true\n' >> "$WORK/device-config.yaml"

"$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$EXT_PORT" \
  --metrics-bind-address "127.0.0.1:$METRICS_PORT" --health-check-interval 1s \
  --device-config-file "$WORK/device-config.yaml" --log-level debug >> "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
SERVE_PID=$!
wait_for 60 curl -fsS --max-time 3 "$EXT/readyz" || { bad "serve not ready within 60s"; dump_logs; finish; }
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" \
  --node lupine-a=remotegpu:2x40000:10:NVIDIA-A100-SXM4-40GB --node lupine-b=remotegpu:1x40000:10:NVIDIA-A100-SXM4-40GB \
  --allocate-delay 20ms --register-interval 5s --device-config-file "$WORK/device-config.yaml" \
  > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!

jp() { K get "$1" "$2" -o "jsonpath=$3" 2>/dev/null; }
registered() { [ -n "$(jp node "$1" '{.metadata.annotations.hami\.io/node-nvidia-register}')" ]; }
wait_for 60 registered lupine-a && wait_for 60 registered lupine-b &&
  ok "the servers' plugins registered their cards" || { bad "the servers did not register within 60s"; dump_logs; finish; }
K label node lupine-a hami.io/lupine-server=15000 --overwrite >/dev/null || bad "label lupine-a's port"
# What kubelet reports: each server's InternalIP (its endpoint's host).
address() {
  K patch node "$1" --subresource=status --type=merge \
    -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$2\"}]}}" >/dev/null
}
address lupine-a 10.0.0.5 && address lupine-b 10.0.0.6 || bad "set the servers' InternalIP"
# The GPU-less client: a Ready node with room for pods, as kubelet registers it; no device plugin.
K create -f - >/dev/null <<'EOF' || bad "create cpu-1"
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1", "labels": {"kubernetes.io/hostname": "cpu-1"}}}
EOF
K patch node cpu-1 --subresource=status --type=merge -p '{"status": {
  "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
  "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
  "addresses": [{"type": "InternalIP", "address": "10.0.1.1"}],
  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e"}]}}' >/dev/null ||
  bad "set cpu-1's status"

# pod NAME: created as the webhook admits it (the review's patch applied), asking one remote GPU.
pod() {
  local object review patched
  object="{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"$1\", \"namespace\": \"default\"},
    \"spec\": {\"schedulerName\": \"hami-scheduler\", \"containers\": [{\"name\": \"app\", \"image\": \"registry.k8s.io/pause:3.10\",
      \"resources\": {\"limits\": {\"nvidia.com/remote-gpu\": \"1\", \"nvidia.com/remote-gpu-memory\": \"20000\"}}}]}}"
  review="{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\",
    \"request\": {\"uid\": \"e2e-$1\", \"operation\": \"CREATE\", \"namespace\": \"default\", \"name\": \"$1\",
                \"kind\": {\"group\": \"\", \"version\": \"v1\", \"kind\": \"Pod\"}, \"object\": $object}}"
  patched="$(curl -fsS --max-time 10 -H 'Content-Type: application/json' -d "$review" "$EXT/webhook" |
    python3 -c '
import base64, json, sys
answer = json.load(sys.stdin)["response"]
pod = json.loads(sys.argv[1])
assert answer["allowed"], answer
for op in json.loads(base64.b64decode(answer.get("patch", "W10="))):
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
    target = pod
    for p in parts[:-1]:
        target = target[int(p)] if isinstance(target, list) else target.setdefault(p, {})
    last = parts[-1]
    if isinstance(target, list):
        if last == "-": target.append(op["value"])
        else: target.insert(int(last), op["value"]) if op["op"] == "add" else target.__setitem__(int(last), op["value"])
    elif op["op"] == "remove": target.pop(last, None)
    else: target[last] = op["value"]
print(json.dumps(pod))' "$object")" || { bad "$1: the webhook did not admit it"; return 1; }
  printf '%s' "$patched" > "$WORK/$1.json"
  K create -f "$WORK/$1.json" >/dev/null
}
bound() { [ -n "$(jp pod "$1" '{.spec.nodeName}')" ]; }
endpoint() { jp pod "$1" '{.metadata.annotations.hami\.io/lupine-server}'; }
cards() { jp pod "$1" '{.metadata.annotations.hami\.io/remote-gpu-devices-allocated}'; }

pod first || { dump_logs; finish; }
server_env="$(jp pod first '{.spec.containers[0].env[?(@.name=="LUPINE_SERVER")].valueFrom.fieldRef.fieldPath}')"
[ "$server_env" = "metadata.annotations['hami.io/lupine-server']" ] &&
  ok "webhook: LUPINE_SERVER reads the endpoint annotation ($server_env)" || bad "webhook: LUPINE_SERVER is '$server_env'"
if wait_for 60 bound first; then
  [ "$(jp pod first '{.spec.nodeName}')" = cpu-1 ] && [ "$(endpoint first)" = 10.0.0.6:14833 ] &&
    [[ "$(cards first)" == lupine-b/* ]] &&
    ok "first: bound by kube-scheduler on cpu-1, lupine-b whole ($(cards first)), endpoint $(endpoint first)" ||
    bad "first: on '$(jp pod first '{.spec.nodeName}')', endpoint '$(endpoint first)', cards '$(cards first)'"
else
  bad "first not bound within 60s"; dump_logs; finish
fi

pod second || { dump_logs; finish; }
if wait_for 60 bound second; then
  n_cards="$(cards second | grep -o 'lupine-a/' | wc -l)"
  [ "$(jp pod second '{.spec.nodeName}')" = cpu-1 ] && [ "$(endpoint second)" = 10.0.0.5:15000 ] &&
    [[ "$(cards second)" == lupine-a/* ]] && [ "$n_cards" = 2 ] &&
    ok "second: lupine-b in use, so lupine-a whole ($(cards second)), endpoint $(endpoint second)" ||
    bad "second: on '$(jp pod second '{.spec.nodeName}')', endpoint '$(endpoint second)', cards '$(cards second)'"
else
  bad "second not bound within 60s"; dump_logs
fi

pod third || { dump_logs; finish; }
# Pending while every server is in use: kube-scheduler tried it and our filter refused it.
refused() { [ -n "$(jp pod third '{.status.conditions[?(@.type=="PodScheduled")].message}')" ]; }
if wait_for 30 refused && ! bound third; then
  ok "third: Pending while both servers are in use ($(jp pod third '{.status.conditions[?(@.type=="PodScheduled")].message}' | cut -c1-120))"
else
  bad "third: bound on '$(jp pod third '{.spec.nodeName}')' or never tried"
fi
K delete pod first --grace-period=0 --force >/dev/null 2>&1
if wait_for 90 bound third; then
  [ "$(endpoint third)" = 10.0.0.6:14833 ] && ok "third: bound once first was deleted, on lupine-b again" ||
    bad "third: endpoint '$(endpoint third)'"
else
  bad "third not bound within 90s of first's deletion"; dump_logs
fi
finish
