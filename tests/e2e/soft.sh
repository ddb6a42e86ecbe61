#!/usr/bin/env bash
# e2e of kube-scheduler's soft constraints on the REAL kube-scheduler (docs/DECISIONS.md "Filter modes"): with
# --filter-mode=all-fitting our /filter lets every fitting node through and /prioritize adds the device
# policy's score, so kube-scheduler weighs preferred node affinity and ScheduleAnyway spreads too; with the
# default one-node mode it hears one node and scores nothing (HAMi's behaviour).
#
# Three nodes with one card of 16000 MiB each, labelled topology.kubernetes.io/zone a, b and c; a pod holds 8000
# MiB on gpu-1 (zone a), so binpack alone always chooses gpu-1.
#   one-node     a pod preferring zone c (weight 100) lands on gpu-1: binpack decided alone;
#   all-fitting  serve restarted in all-fitting mode: the same pod lands on gpu-3 (zone c); four pods of one
#                ReplicaSet's template (required zone a or b, ScheduleAnyway spread over the zone) end 2 + 2 on
#                gpu-1 and gpu-2, where binpack alone puts all four on gpu-1.
#   autoscaler   a /filter shaped as Cluster Autoscaler's (tests/e2e/ca_check.py): Nodes posted whole with a
#                template node that does not exist, for a pod that fits only there; answered from the
#                template's own annotations, nothing written.
# Every pod is allocated (hami.io/bind-phase success), and a watcher (preempt_watch.py) checks that no card's
# pods ever hold more than the card. No controller-manager runs here: the ReplicaSet's pods are created from
# its template as its controller would.
#
#   tests/e2e/soft.sh [PATH/TO/hami-scheduler]
#
# Ends with "e2e soft: N passed, M failed". HAMI_E2E_KEEP_WORK=1 keeps the work dir.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec soft SOFT "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
BIN="$(bash "$E2E_DIR/build.sh")" || { bad "build (see the messages above)"; finish; }
export HAMI_E2E_BIN="$BIN"
KUBECTL="$BIN/kubectl"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-soft.XXXXXX")"
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
grep -q 'prioritizeVerb: prioritize' "$WORK/kube-scheduler-config.yaml" &&
  ok "deploy/kube-scheduler-config.yaml names prioritizeVerb" || bad "deploy/kube-scheduler-config.yaml lacks prioritizeVerb"

serve() { # MODE: (re)starts serve in that filter mode and waits until it is ready
  if [ -n "$SERVE_PID" ]; then
    kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null
  fi
  "$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$EXT_PORT" \
    --metrics-bind-address "127.0.0.1:$METRICS_PORT" --health-check-interval 1s --filter-mode "$1" \
    --device-config-file "$ROOT/deploy/device-config.yaml" --log-level debug >> "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
  SERVE_PID=$!
  wait_for 60 curl -fsS --max-time 3 "$EXT/readyz"
}
serve one-node || { bad "serve not ready within 60s"; dump_logs; finish; }
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" \
  --node gpu-1=nvidia:1x16000:10:NVIDIA-Tesla-T4 --node gpu-2=nvidia:1x16000:10:NVIDIA-Tesla-T4 \
  --node gpu-3=nvidia:1x16000:10:NVIDIA-Tesla-T4 \
  --allocate-delay 20ms --register-interval 5s --device-config-file "$ROOT/deploy/device-config.yaml" \
  > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!
metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics"; }
counter() { metrics | awk -v m="$1" '$1 == m { print $2; found = 1 } END { if (!found) print 0 }'; }
nodes_ready() {
  local n
  for n in gpu-1 gpu-2 gpu-3; do
    [ "$(K get node "$n" -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" = 10 ] || return 1
  done
}
if wait_for 60 nodes_ready; then
  ok "serve ready (one-node mode), gpu-1, gpu-2 and gpu-3 registered with one card each"
else
  bad "the nodes were not registered within 60s"; dump_logs; finish
fi
K label node gpu-1 topology.kubernetes.io/zone=a >/dev/null &&
  K label node gpu-2 topology.kubernetes.io/zone=b >/dev/null &&
  K label node gpu-3 topology.kubernetes.io/zone=c >/dev/null || bad "label the nodes' zones"

python3 "$E2E_DIR/preempt_watch.py" "$KUBECTL" "$HAMI_E2E_KUBECONFIG" 16000 1 "$WORK/stop-watch" \
  "$WORK/watch.json" > "$WORK/logs/watch.log" 2>&1 &
WATCH_PID=$!

jp() { K get pod "$1" -o "jsonpath=$2" 2>/dev/null; }
bound() { [ -n "$(jp "$1" '{.spec.nodeName}')" ] && [ "$(jp "$1" '{.metadata.annotations.hami\.io/bind-phase}')" = success ]; }
gone() { ! K get pod "$1" >/dev/null 2>&1; }
# pod NAME MEMORY AFFINITY [LABELS] [SPREAD]: AFFINITY and SPREAD are JSON for spec.affinity and
# spec.topologySpreadConstraints.
pod() {
  local labels="${4:-}" spread="${5:-}"
  [ -n "$labels" ] || labels='{}'
  [ -n "$spread" ] || spread='[]'
  K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$1", "namespace": "default", "labels": $labels},
 "spec": {"schedulerName": "hami-scheduler", "affinity": $3, "topologySpreadConstraints": $spread,
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "$2"}}}]}}
EOF
}
ON_GPU1='{"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
  {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-1"]}]}]}}}'
PREFER_C='{"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference":
  {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["c"]}]}}]}}'

pod half 8000 "$ON_GPU1"
wait_for 60 bound half && ok "half holds 8000 MiB of gpu-1's card" || { bad "half not bound within 60s"; dump_logs; finish; }

# prefers_c_lands MODE NODE WHY: a pod preferring zone c is bound and allocated on NODE.
prefers_c_lands() {
  pod prefers-c 4000 "$PREFER_C"
  if wait_for 60 bound prefers-c; then
    [ "$(jp prefers-c '{.spec.nodeName}')" = "$2" ] &&
      ok "$1: the pod preferring zone c is on $2, $3; allocated $(jp prefers-c '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')" ||
      bad "$1: the pod preferring zone c is on '$(jp prefers-c '{.spec.nodeName}')', not $2"
  else
    bad "$1: prefers-c not bound within 60s"; dump_logs
  fi
}

# --- one-node: binpack decides alone; the preference is never weighed.
prefers_c_lands one-node gpu-1 "where binpack alone put it"
[ "$(counter hami_scheduler_prioritize_total)" = 0 ] && ok "one-node: /prioritize was never called" ||
  bad "one-node: /prioritize was called $(counter hami_scheduler_prioritize_total) times"
K delete pod prefers-c --grace-period=0 --force >/dev/null 2>&1
wait_for 30 gone prefers-c || bad "one-node: prefers-c not gone"

# --- all-fitting: kube-scheduler weighs its soft constraints with our score.
if serve all-fitting; then
  ok "serve restarted in all-fitting mode"
else
  bad "serve not ready in all-fitting mode within 60s"; dump_logs; finish
fi
prefers_c_lands all-fitting gpu-3 "the zone c node"

# A ReplicaSet's four pods: each needs zone a or b, and spreads over the zone when it can (ScheduleAnyway).
IN_AB='{"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
  {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]}]}}}'
SPREAD='[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
  "labelSelector": {"matchLabels": {"app": "spread"}}}]'
for i in 1 2 3 4; do
  pod "spread-$i" 2000 "$IN_AB" '{"app": "spread"}' "$SPREAD" || bad "create spread-$i"
done
all_bound() { local i; for i in 1 2 3 4; do bound "spread-$i" || return 1; done; }
if wait_for 90 all_bound; then
  placed="$(for i in 1 2 3 4; do jp "spread-$i" '{.spec.nodeName}'; echo; done | sort | uniq -c | awk '{ printf "%s%s=%s", sep, $2, $1; sep=" " }')"
  [ "$placed" = "gpu-1=2 gpu-2=2" ] && ok "all-fitting: the four spread pods ended 2 + 2 ($placed), every one allocated" ||
    bad "all-fitting: the four spread pods ended $placed, not gpu-1=2 gpu-2=2"
else
  bad "all-fitting: the spread pods were not all bound within 90s"; dump_logs
fi
prioritized="$(counter hami_scheduler_prioritize_total)"
[ "${prioritized%.*}" -ge 5 ] 2>/dev/null && ok "all-fitting: kube-scheduler asked /prioritize $prioritized times" ||
  bad "all-fitting: /prioritize answered $prioritized times (want one per pod, 5)"
refused="$(counter 'hami_scheduler_bind_placements_total{result="no_longer_fits"}')"
log "all-fitting: binds refused because the pod no longer fitted: $refused"

# --- Cluster Autoscaler's template nodes: a /filter posting whole Node objects, one of them a node that does
# not exist, for a pod no real node can take (gpu-1 holds 12000 MiB, gpu-2 4000, gpu-3 4000).
while IFS= read -r line; do
  case "$line" in ok:*) ok "autoscaler: ${line#ok: }" ;; *) bad "autoscaler: ${line#FAIL: }" ;; esac
done < <(python3 "$E2E_DIR/ca_check.py" "$KUBECTL" "$HAMI_E2E_KUBECONFIG" "$EXT" \
  "http://127.0.0.1:$METRICS_PORT" gpu-1 14000 2>&1)

touch "$WORK/stop-watch"
wait "$WATCH_PID"
WATCH_PID=""
python3 - "$WORK/watch.json" <<'EOF' && ok "watch: $(cat "$WORK/watch.summary")" || { bad "watch: $(cat "$WORK/watch.summary" 2>/dev/null)"; dump_logs; }
import json, os, sys
w = json.load(open(sys.argv[1]))
summary = os.path.join(os.path.dirname(sys.argv[1]), "watch.summary")
ok = w["polls"] >= 3 and not w["overcommit"]  # the last poll sees every pod placed
with open(summary, "w") as f:
    f.write(f'{w["polls"]} polls; no card ever held more than it has: {not w["overcommit"]} {w["overcommit"][:3]}')
sys.exit(0 if ok else 1)
EOF
finish
