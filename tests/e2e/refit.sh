#!/usr/bin/env bash
# e2e of POST /refit (the NVIDIA device plugin's NUMA refit, docs/DECISIONS.md "NUMA refit") and its caller
# authentication on the REAL kube-apiserver and kube-scheduler: the tokens are real bound service-account
# tokens (`kubectl create token --bound-object-kind Pod`), reviewed by the API server's TokenReview.
#
# Node gpu-1 has two cards of 16000 MiB, gpu-2 one. The device plugin's service account is
# hami-system/hami-device-plugin; stand-in plugin pods plugin-1 (on gpu-1) and plugin-2 (on gpu-2) are bound to
# their nodes, and other-1 (on gpu-1) runs as another account of the namespace. The simulated device plugins
# register the cards but take 10 minutes to set a pod up, so a scheduled pod stays "allocating" (its to-allocate
# entry waiting, the node lock held) while /refit is asked.
#   (a) a pod of 10000 MiB scheduled through kube-scheduler is moved by /refit (plugin-1's token) to the card
#       it does not hold: both allocation annotations name the new card, and the ledger follows at once: a
#       pod of 10000 MiB pinned to the card left is admitted by our filter, one pinned to the card taken is not;
#   (b) a forged token, a token of another service account, plugin-2's token (bound to a pod on gpu-2), and
#       plugin-1's token replayed for a pod on gpu-2: each refused, the pods' annotations unchanged.
#
#   tests/e2e/refit.sh [PATH/TO/hami-scheduler]
#
# Ends with "e2e refit: N passed, M failed". HAMI_E2E_KEEP_WORK=1 keeps the work dir.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec refit REFIT "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
BIN="$(bash "$E2E_DIR/build.sh")" || { bad "build (see the messages above)"; finish; }
export HAMI_E2E_BIN="$BIN"
KUBECTL="$BIN/kubectl"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-refit.XXXXXX")"
SERVE_PID=""
PLUGINS_PID=""
cleanup() { end_suite_run "$WORK" "$PLUGINS_PID" "$SERVE_PID"; }
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

start_for_extender "$WORK" || finish
"$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$EXT_PORT" \
  --metrics-bind-address "127.0.0.1:$METRICS_PORT" --health-check-interval 1s \
  --device-plugin-namespace hami-system --device-plugin-service-account hami-device-plugin \
  --device-config-file "$ROOT/deploy/device-config.yaml" --log-level debug > "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
SERVE_PID=$!
wait_for 60 curl -fsS --max-time 3 "$EXT/readyz" || { bad "serve not ready within 60s"; dump_logs; finish; }
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" \
  --node gpu-1=nvidia:2x16000:10:NVIDIA-Tesla-T4 --node gpu-2=nvidia:1x16000:10:NVIDIA-Tesla-T4 \
  --allocate-delay 10m --register-interval 5s --device-config-file "$ROOT/deploy/device-config.yaml" \
  > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!
nodes_ready() {
  [ "$(K get node gpu-1 -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" = 20 ] &&
    [ "$(K get node gpu-2 -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" = 10 ]
}
wait_for 60 nodes_ready && ok "serve ready; gpu-1 registered with two cards, gpu-2 with one" ||
  { bad "the nodes were not registered within 60s"; dump_logs; finish; }

jp() { K get pod "$1" -n "${3:-default}" -o "jsonpath=$2" 2>/dev/null; }
ann() { jp "$1" "{.metadata.annotations.hami\.io/vgpu-devices-$2}" "${3:-default}"; }
# The device plugin's namespace and account, another account, and a stand-in plugin pod on each node.
K create namespace hami-system >/dev/null && K create serviceaccount hami-device-plugin -n hami-system >/dev/null &&
  K create serviceaccount other -n hami-system >/dev/null || bad "create the device plugin's namespace and accounts"
stand_in() { # NAME NODE [SA]: a pod of the device plugin's account (or SA), bound to NODE (no kubelet runs it)
  K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1", "namespace": "hami-system"},
 "spec": {"serviceAccountName": "${3:-hami-device-plugin}", "nodeName": "$2",
          "containers": [{"name": "plugin", "image": "registry.k8s.io/pause:3.10"}]}}
EOF
}
stand_in plugin-1 gpu-1 && stand_in plugin-2 gpu-2 && stand_in other-1 gpu-1 other ||
  bad "create the stand-in plugin pods"
token() { # SA POD: a token of SA bound to pod POD of hami-system
  K create token "$1" -n hami-system --duration=1h --bound-object-kind Pod --bound-object-name "$2" \
    --bound-object-uid "$(jp "$2" '{.metadata.uid}' hami-system)" 2>>"$WORK/logs/tokens.log"
}
TOKEN_1="$(token hami-device-plugin plugin-1)" && TOKEN_2="$(token hami-device-plugin plugin-2)" &&
  TOKEN_OTHER="$(token other other-1)" && ok "bound tokens made for plugin-1, plugin-2 and the other account" ||
  { bad "kubectl create token: $(tail -n 3 "$WORK/logs/tokens.log")"; finish; }

gpu_pod() { # NAME NODE MEMORY [UUID]: a pod of ours for NODE asking one card (that card when UUID is given)
  local pin='{}'
  [ -z "${4:-}" ] || pin="{\"nvidia.com/use-gpuuuid\": \"$4\"}"
  K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1", "namespace": "default", "annotations": $pin},
 "spec": {"schedulerName": "hami-scheduler", "nodeSelector": {"kubernetes.io/hostname": "$2"},
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "$3"}}}]}}
EOF
}
allocating() { [ -n "$(jp "$1" '{.spec.nodeName}')" ] && [ -n "$(ann "$1" to-allocate)" ]; }
gpu_pod work gpu-1 10000 && gpu_pod far gpu-2 4000 || bad "create the GPU pods"
wait_for 60 allocating work && wait_for 60 allocating far && ok "work bound to gpu-1 and far to gpu-2, both allocating" ||
  { bad "work and far not bound within 60s"; dump_logs; finish; }

# The two cards of gpu-1: the one work holds and the other.
CARDS="$(K get node gpu-1 -o 'jsonpath={.metadata.annotations.hami\.io/node-nvidia-register}' |
  python3 -c 'import json,sys; print(" ".join(d["id"] for d in json.load(sys.stdin)))')"
HELD="$(ann work allocated | cut -d, -f1)"
FREE=""
for c in $CARDS; do [ "$c" = "$HELD" ] || FREE="$c"; done
[ -n "$HELD" ] && [ -n "$FREE" ] && ok "work holds $HELD; $FREE is free" || { bad "cards '$CARDS', held '$HELD'"; finish; }

# refit TOKEN POD NODE UUID: /refit as the device plugin calls it; prints "<status> <body>".
refit() {
  local uid
  uid="$(jp "$2" '{.metadata.uid}')"
  curl -sS --max-time 5 -o "$WORK/refit.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -H "Authorization: Bearer $1" -d "{\"podUID\": \"$uid\", \"podNamespace\": \"default\", \"podName\": \"$2\",
      \"nodeName\": \"$3\", \"containerIndex\": 0, \"containerName\": \"app\", \"deviceType\": \"NVIDIA\",
      \"allowedDeviceUUIDs\": [\"$4\"]}" "$EXT/refit"
  printf ' %s' "$(cat "$WORK/refit.json")"
}
BEFORE_WORK="$(ann work allocated)|$(ann work to-allocate)"
BEFORE_FAR="$(ann far allocated)|$(ann far to-allocate)"
unchanged() { [ "$(ann work allocated)|$(ann work to-allocate)" = "$BEFORE_WORK" ] &&
  [ "$(ann far allocated)|$(ann far to-allocate)" = "$BEFORE_FAR" ]; }

# (b) first: every refusal leaves both pods as they are.
refused() { # WHY EXPECTED-STATUS WORDS TOKEN POD NODE UUID
  local answer
  answer="$(refit "$4" "$5" "$6" "$7")"
  if [[ "$answer" == "$2 "*'"succeeded":false'*"$3"* ]] && unchanged; then
    ok "$1: refused ($answer)"
  else
    bad "$1: answered '$answer'"
  fi
}
refused "a forged token" 401 "the token is not valid" "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln" work gpu-1 "$FREE"
refused "another service account's token" 403 "is not the device plugin's service account" "$TOKEN_OTHER" work gpu-1 "$FREE"
refused "a token bound to the plugin pod on gpu-2, for gpu-1" 403 "does not run on node gpu-1" "$TOKEN_2" work gpu-1 "$FREE"
refused "plugin-1's token replayed for a pod on gpu-2" 403 "does not run on node gpu-2" "$TOKEN_1" far gpu-2 "$HELD"
refused "plugin-1's token naming gpu-1 for a pod on gpu-2" 200 "with that uid is not on node gpu-1" "$TOKEN_1" far gpu-1 "$FREE"
refused "no token" 401 "want an Authorization: Bearer" "" work gpu-1 "$FREE"

# (a) the device plugin's own refit moves work to the free card.
ANSWER="$(refit "$TOKEN_1" work gpu-1 "$FREE")"
if [[ "$ANSWER" == "200 "*'"succeeded":true'*"\"containerDevices\":\"$FREE,NVIDIA,10000,"* ]]; then
  ok "plugin-1's refit moved work to $FREE ($ANSWER)"
else
  bad "plugin-1's refit answered '$ANSWER'"; dump_logs
fi
[[ "$(ann work allocated)" == "$FREE,NVIDIA,10000,"*";" && "$(ann work to-allocate)" == "$FREE,NVIDIA,10000,"*";" ]] &&
  ok "both of work's allocation annotations name $FREE" ||
  bad "work's annotations: allocated '$(ann work allocated)', to-allocate '$(ann work to-allocate)'"
K get events -n default --field-selector involvedObject.name=work -o 'jsonpath={.items[*].reason}' | has NumaRefitSucceeded &&
  ok "an event on work says so" || bad "no NumaRefitSucceeded event on work"
# Asked again with the card it has now: succeeds without a write.
RV="$(jp work '{.metadata.resourceVersion}')"
ANSWER="$(refit "$TOKEN_1" work gpu-1 "$FREE")"
[[ "$ANSWER" == "200 "*'"succeeded":true'* ]] && [ "$(jp work '{.metadata.resourceVersion}')" = "$RV" ] &&
  ok "a refit onto the card it holds succeeds and writes nothing" || bad "the repeated refit answered '$ANSWER'"

# The ledger follows: 10000 MiB more fit on the card left (they did not before), not on the card taken.
filtered() { # POD REASON: our filter's event on POD
  K get events -n default --field-selector "involvedObject.name=$1,reason=$2" -o name | has .
}
gpu_pod on-left gpu-1 10000 "$HELD" && gpu_pod on-taken gpu-1 10000 "$FREE" || bad "create the pinned pods"
wait_for 60 filtered on-left FilteringSucceed && ok "a pod of 10000 MiB pinned to $HELD (left) fits" ||
  bad "on-left: no FilteringSucceed ($(K get events -n default --field-selector involvedObject.name=on-left -o 'jsonpath={.items[*].message}'))"
wait_for 60 filtered on-taken FilteringFailed && ok "a pod of 10000 MiB pinned to $FREE (taken) does not fit" ||
  bad "on-taken: no FilteringFailed"
! filtered on-taken FilteringSucceed || bad "on-taken was admitted by the filter"

METRICS="$(curl -fsS --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics")"
echo "$METRICS" | has '^hami_scheduler_refit_total{result="moved"} 1$' &&
  echo "$METRICS" | has '^hami_scheduler_refit_total{result="forbidden"} 3$' &&
  ok "hami_scheduler_refit_total counts them" || bad "refit metrics: $(echo "$METRICS" | grep refit_total)"
finish
