#!/usr/bin/env bash
# e2e of device-aware preemption on the REAL kube-scheduler (docs/DECISIONS.md "Preemption"): kube-scheduler
# asks our /preempt which pods must go for a pod's devices, evicts them, nominates the pod, and we hold the
# freed card for it until it is bound.
#
# Two nodes with one card of 16000 MiB each: on gpu-1 a low-priority pod holding 10000 MiB, on gpu-2 two of
# 8000 MiB (evicting one there is not enough for 10000).
#   never    a pod of high priority with preemptionPolicy: Never evicts nothing and stays pending;
#   evict    a pod of high priority asking 10000 MiB ends bound on gpu-1 with exactly gpu-1's pod evicted;
#            the pending pod of the same priority never takes the freed card (the nomination holds it);
#   budget   on gpu-2, one pod a PodDisruptionBudget protects and one it does not: a pod asking 8000 MiB
#            evicts the unprotected one (which, but for the budget, would be given back first: same priority,
#            card and size, the smaller name).
# Throughout, a watcher (preempt_watch.py) ends pods 3 s after their deletion, as a kubelet would, and checks
# that no card's pods (terminating ones included) ever hold more than the card has.
#
#   tests/e2e/preempt.sh [PATH/TO/hami-scheduler]
#
# Needs kube-scheduler >= v1.38 (kubernetes PR #135486: the extender is asked for victims where kube-scheduler's
# own dry run found none). Ends with "e2e preempt: N passed, M failed". HAMI_E2E_KEEP_WORK=1 keeps the work dir.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec preempt PREEMPT "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
BIN="$(bash "$E2E_DIR/build.sh")" || { bad "build (see the messages above)"; finish; }
export HAMI_E2E_BIN="$BIN"
KUBECTL="$BIN/kubectl"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-preempt.XXXXXX")"
SERVE_PID=""
PLUGINS_PID=""
WATCH_PID=""
cleanup() {
  touch "$WORK/stop-watch"
  [ -z "$WATCH_PID" ] || wait "$WATCH_PID" 2>/dev/null
  end_suite_run "$WORK" "$PLUGINS_PID" "$SERVE_PID"
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

start_for_extender "$WORK" || finish
grep -q 'preemptVerb: preempt' "$WORK/kube-scheduler-config.yaml" &&
  ok "deploy/kube-scheduler-config.yaml names preemptVerb" || bad "deploy/kube-scheduler-config.yaml lacks preemptVerb"
log "kube-scheduler $(K version -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])' 2>/dev/null) (the API server's; both are built from one release)"

"$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$EXT_PORT" \
  --metrics-bind-address "127.0.0.1:$METRICS_PORT" --health-check-interval 1s \
  --device-config-file "$ROOT/deploy/device-config.yaml" --log-level debug > "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
SERVE_PID=$!
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" \
  --node gpu-1=nvidia:1x16000:10:NVIDIA-Tesla-T4 --node gpu-2=nvidia:1x16000:10:NVIDIA-Tesla-T4 \
  --allocate-delay 20ms --register-interval 5s --device-config-file "$ROOT/deploy/device-config.yaml" \
  > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!
metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics"; }
counter() { metrics | awk -v m="$1" '$1 == m { print $2; found = 1 } END { if (!found) print 0 }'; }
nodes_ready() {
  [ "$(K get node gpu-1 -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" = 10 ] &&
    [ "$(K get node gpu-2 -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" = 10 ]
}
if wait_for 60 curl -fsS --max-time 3 "$EXT/readyz" && wait_for 60 nodes_ready; then
  ok "serve ready, gpu-1 and gpu-2 registered with one card each"
else
  bad "serve or the nodes not ready within 60s"; dump_logs; finish
fi

python3 "$E2E_DIR/preempt_watch.py" "$KUBECTL" "$HAMI_E2E_KUBECONFIG" 16000 3 "$WORK/stop-watch" \
  "$WORK/watch.json" > "$WORK/logs/watch.log" 2>&1 &
WATCH_PID=$!

K create -f - >/dev/null <<'EOF' || bad "create the PriorityClasses"
{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "low"}, "value": 10},
 {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
 {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high-never"},
  "value": 1000, "preemptionPolicy": "Never"}]}
EOF

# pod NAME CLASS MEMORY [NODE] [APP-LABEL]
pod() {
  local selector='{}' labels='{}'
  [ -z "${4:-}" ] || selector="{\"kubernetes.io/hostname\": \"$4\"}"
  [ -z "${5:-}" ] || labels="{\"app\": \"$5\"}"
  K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$1", "namespace": "default", "labels": $labels},
 "spec": {"schedulerName": "hami-scheduler", "priorityClassName": "$2", "nodeSelector": $selector,
          "terminationGracePeriodSeconds": 30,
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "$3"}}}]}}
EOF
}
jp() { K get pod "$1" -o "jsonpath=$2" 2>/dev/null; }
bound() { [ -n "$(jp "$1" '{.spec.nodeName}')" ] && [ "$(jp "$1" '{.metadata.annotations.hami\.io/bind-phase}')" = success ]; }
gone() { ! K get pod "$1" >/dev/null 2>&1; }
uid() { jp "$1" '{.metadata.uid}'; }
untouched() { # NAME UID: the same pod, not terminating
  [ "$(uid "$1")" = "$2" ] && [ -z "$(jp "$1" '{.metadata.deletionTimestamp}')" ]
}

# The budget of the budget case, made before any pod: no controller-manager runs here, so its
# status.disruptionsAllowed stays 0, as for a budget spent.
K create -f - >/dev/null <<'EOF' || bad "create the PodDisruptionBudget"
{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded", "namespace": "default"},
 "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}
EOF

pod low-1 low 10000 gpu-1
pod low-2a low 8000 gpu-2 free
pod low-2b low 8000 gpu-2 guarded
if wait_for 60 bound low-1 && wait_for 60 bound low-2a && wait_for 60 bound low-2b; then
  ok "three low-priority pods hold 10000 MiB on gpu-1 and 2 x 8000 MiB on gpu-2"
else
  bad "the low-priority pods were not bound within 60s"; dump_logs; finish
fi
U1="$(uid low-1)"; U2A="$(uid low-2a)"; U2B="$(uid low-2b)"

# --- never: preemptionPolicy Never evicts nothing. kube-scheduler's refusal says it decided so.
never_refused() {
  K get events --field-selector involvedObject.name=polite,reason=FailedScheduling \
    -o 'jsonpath={.items[*].message}' | grep -q 'preemptionPolicy=Never'
}
pod polite high-never 10000
wait_for 60 never_refused || bad "never: no FailedScheduling event for polite saying preemptionPolicy=Never"
if [ -z "$(jp polite '{.spec.nodeName}')" ] && [ -z "$(jp polite '{.status.nominatedNodeName}')" ] &&
    untouched low-1 "$U1" && untouched low-2a "$U2A" && untouched low-2b "$U2B"; then
  ok "never: a pod with preemptionPolicy Never was refused, not nominated, and no pod was evicted for it"
else
  bad "never: polite node '$(jp polite '{.spec.nodeName}')' nominated '$(jp polite '{.status.nominatedNodeName}')'"
  dump_logs
fi

# --- evict: the high-priority pod gets gpu-1's card; polite (equal priority, pending) never takes it.
pod urgent high 10000
T0=$(date +%s)
if wait_for 120 bound urgent; then
  ok "evict: urgent bound with its devices allocated after $(( $(date +%s) - T0 ))s"
else
  bad "evict: urgent not bound within 120s (nominated '$(jp urgent '{.status.nominatedNodeName}')')"; dump_logs
fi
[ "$(jp urgent '{.spec.nodeName}')" = gpu-1 ] && ok "evict: urgent is on gpu-1" ||
  bad "evict: urgent is on '$(jp urgent '{.spec.nodeName}')', not gpu-1"
alloc="$(jp urgent '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')"
[[ "$alloc" == *",NVIDIA,10000,"* ]] && ok "evict: urgent's allocation: $alloc" || bad "evict: urgent's allocation '$alloc'"
wait_for 30 gone low-1 && ok "evict: low-1 was evicted (and ended by the watcher)" || bad "evict: low-1 still exists"
untouched low-2a "$U2A" && untouched low-2b "$U2B" && ok "evict: gpu-2's two pods were never touched" ||
  bad "evict: a pod on gpu-2 was touched"
[ -z "$(jp polite '{.spec.nodeName}')" ] && ok "evict: polite (same priority) did not take the freed card" ||
  bad "evict: polite took a card on $(jp polite '{.spec.nodeName}')"
victims_named="$(counter 'hami_scheduler_preempt_answers_total{result="victims"}')"
[ "${victims_named%.*}" -ge 1 ] 2>/dev/null && ok "evict: /preempt named victims ($victims_named answers)" ||
  bad "evict: /preempt never named a victim (kube-scheduler older than v1.38 does not ask for device-only shortfalls)"
K delete pod polite --grace-period=0 --force --wait=false >/dev/null 2>&1
wait_for 30 gone polite

# --- budget: the PodDisruptionBudget protects low-2b; with low-2a free to go, it is spared. Without the
# budget low-2a (same priority, card and size, the smaller name) would be given back first and low-2b evicted.
pod urgent-2 high 8000
if wait_for 120 bound urgent-2; then
  ok "budget: urgent-2 bound on $(jp urgent-2 '{.spec.nodeName}')"
else
  bad "budget: urgent-2 not bound within 120s"; dump_logs
fi
wait_for 30 gone low-2a && ok "budget: the unprotected low-2a was evicted" || bad "budget: low-2a still exists"
untouched low-2b "$U2B" && ok "budget: low-2b, which the PodDisruptionBudget protects, was spared" ||
  bad "budget: low-2b was evicted"

touch "$WORK/stop-watch"
wait "$WATCH_PID"
WATCH_PID=""
python3 - "$WORK/watch.json" <<'EOF' && ok "watch: $(cat "$WORK/watch.summary")" || { bad "watch: $(cat "$WORK/watch.summary" 2>/dev/null)"; dump_logs; }
import json, os, sys
w = json.load(open(sys.argv[1]))
summary = os.path.join(os.path.dirname(sys.argv[1]), "watch.summary")
# polite is deleted at once (grace 0): the watcher may or may not have seen it terminating.
ok = w["polls"] > 20 and not w["overcommit"] and {"low-1", "low-2a"} <= set(w["terminated"]) <= {"low-1", "low-2a", "polite"}
with open(summary, "w") as f:
    f.write(f'{w["polls"]} polls; no card ever held more than it has: {not w["overcommit"]} '
            f'{w["overcommit"][:3]}; pods seen terminating: {w["terminated"]}')
sys.exit(0 if ok else 1)
EOF
finish
