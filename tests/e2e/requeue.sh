#!/usr/bin/env bash
# e2e of the requeue on the REAL kube-scheduler (docs/DECISIONS.md "Requeue"): a pod our filter refused is
# scheduled within seconds of the devices it needs being freed, not at kube-scheduler's 5-minute flush.
# One node with one card (16384 MiB). Each trial: pod A holds the card, pod B asks the same and is refused;
# once B's last refusal is older than kube-scheduler's 10 s maximum backoff, the card is freed and the time
# until B has spec.nodeName is measured. The cases:
#   deleted   A is deleted
#   finished  A's status phase becomes Succeeded
#   quota     no A: B is refused by its namespace's ResourceQuota, which is then raised
#   expired   A is a pod no scheduler handles, whose devices our filter reserved when asked directly; the
#             reservation expires (--reservation-timeout 20s); timed from the release serve logs
# Then: a burst of 100 pending pods released by one delete sends a bounded number of nudges, and a pod refused
# only for a reason no capacity lifts (a GPU type the node lacks) is never nudged.
#
#   tests/e2e/requeue.sh [PATH/TO/hami-scheduler] [--trials N] [--cap SECONDS] [--within SECONDS]
#
# --trials: per case (default 1); --cap: how long a trial waits for B (default 30); --within: every trial
# must bind B within this many seconds (default 2; 0 only measures, e.g. for a binary without the requeue,
# whose trials then show the cap). Ends with "e2e requeue: N passed, M failed"; times are logged as
# "time CASE: ..." lines. HAMI_E2E_KEEP_WORK=1 keeps the work dir.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec requeue REQUEUE "$@"

HAMI="$ROOT/${BUILD_DIR:-build}/hami-scheduler"
TRIALS=1
CAP=30
WITHIN=2
while [ $# -gt 0 ]; do
  case "$1" in
    --trials) TRIALS="$2"; shift 2 ;;
    --cap) CAP="$2"; shift 2 ;;
    --within) WITHIN="$2"; shift 2 ;;
    -*) bad "unknown option $1 (want --trials N, --cap SECONDS, --within SECONDS)"; finish ;;
    *) HAMI="$1"; shift ;;
  esac
done
[[ "$TRIALS" =~ ^[1-9][0-9]?$ && "$CAP" =~ ^[1-9][0-9]*$ && "$WITHIN" =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  { bad "--trials wants 1-99, --cap and --within a number of seconds"; finish; }
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }

BIN="$(bash "$E2E_DIR/build.sh")" || { bad "build (see the messages above)"; finish; }
export HAMI_E2E_BIN="$BIN"
KUBECTL="$BIN/kubectl"
[ -x "$KUBECTL" ] || KUBECTL="$(command -v kubectl || true)"
[ -x "$KUBECTL" ] || { bad "no kubectl"; finish; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-requeue.XXXXXX")"
SERVE_PID=""
PLUGINS_PID=""
cleanup() {
  end_suite_run "$WORK" "$PLUGINS_PID" "$SERVE_PID"
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

start_for_extender "$WORK" || finish

"$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$EXT_PORT" \
  --metrics-bind-address "127.0.0.1:$METRICS_PORT" --health-check-interval 1s --reservation-timeout 20s \
  --device-config-file "$ROOT/deploy/device-config.yaml" -v 4 > "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
SERVE_PID=$!
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" --node gpu-a=nvidia:1x16384:10:NVIDIA-Tesla-T4 \
  --allocate-delay 20ms --register-interval 5s --device-config-file "$ROOT/deploy/device-config.yaml" \
  > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!
metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics"; }
counter() { metrics | awk -v m="$1" '$1 == m { print $2; found = 1 } END { if (!found) print 0 }'; }
node_ready() { [ "$(K get node gpu-a -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" = 10 ]; }
if wait_for 60 curl -fsS --max-time 3 "$EXT/readyz" && wait_for 60 node_ready; then
  ok "serve ready, node gpu-a registered with one card"
else
  bad "serve or the node not ready within 60s"; dump_logs; finish
fi

# pod NAME NAMESPACE MEMORY [SCHEDULER] [ANNOTATIONS-JSON]
pod() {
  local annotations="${5:-}"
  [ -n "$annotations" ] || annotations='{}'
  K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$1", "namespace": "$2", "annotations": $annotations},
 "spec": {"schedulerName": "${4:-hami-scheduler}",
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "$3"}}}]}}
EOF
}
jp() { K get pod "$1" -n "${3:-default}" -o "jsonpath=$2" 2>/dev/null; }
bound() { [ -n "$(jp "$1" '{.spec.nodeName}' "${2:-default}")" ] && [ "$(jp "$1" '{.metadata.annotations.hami\.io/bind-phase}' "${2:-default}")" = success ]; }
gone() { ! K get pod "$1" -n "${2:-default}" >/dev/null 2>&1; }
UNSCHED='hami_scheduler_filter_decisions_total{result="unschedulable"}'
# quiet_refusals: returns once our filter refused nothing for 11 s (kube-scheduler's backoff is at most 10 s,
# so every pod it holds has its last attempt behind it and waits for an event), at most 60 s.
quiet_refusals() {
  local last now still=0 deadline=$(( $(date +%s) + 60 ))
  last="$(counter "$UNSCHED")"
  while [ "$still" -lt 11 ] && [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 1
    now="$(counter "$UNSCHED")"
    if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; last="$now"; fi
  done
  [ "$still" -ge 11 ]
}
# refused_once NAME [NS]: our filter has refused the pod (kube-scheduler's event says so).
refused_once() { K get events -n "${2:-default}" --field-selector "involvedObject.name=$1,reason=FailedScheduling" -o name | grep -q .; }
# bound_at NAME NS UNTIL: prints when (epoch seconds) the pod was first seen with spec.nodeName, polling
# every 50 ms until the epoch UNTIL; nothing when it was not. The time is taken once the read answered: an
# upper bound (a read takes some 50 ms).
bound_at() {
  local t node
  while :; do
    node="$(jp "$1" '{.spec.nodeName}' "$2")"
    t="$(date +%s.%N)"
    [ -z "$node" ] || { echo "$t"; return; }
    awk -v t="$t" -v u="$3" 'BEGIN { exit !(t > u) }' && return
    sleep 0.05
  done
}
# record CASE NAME T0 T1: the trial's time from T0 (the card freed) to T1 (bound; empty: not within the cap).
record() {
  local took
  if [ -n "$4" ]; then took="$(awk -v t="$4" -v t0="$3" 'BEGIN { printf "%.2f", t - t0 }')"; else took=">$CAP"; fi
  TIMES["$1"]+="$took "
  if [ "$WITHIN" = 0 ]; then
    ok "$1 trial: $2 scheduled after ${took}s (measured only)"
  elif [ -n "$4" ] && awk -v x="$took" -v w="$WITHIN" 'BEGIN { exit !(x <= w) }'; then
    ok "$1 trial: $2 scheduled ${took}s after the card was freed (within ${WITHIN}s)"
  else
    bad "$1 trial: $2 scheduled after ${took}s (want within ${WITHIN}s)"; dump_logs
  fi
}
# measure CASE NAME NS: from T0, set just before the card was freed.
measure() {
  record "$1" "$2" "$T0" "$(bound_at "$2" "$3" "$(awk -v t="$T0" -v c="$CAP" 'BEGIN { printf "%.3f", t + c }')")"
}
declare -A TIMES=()
# clear_pods NAMESPACE NAME...: deleted at once (no kubelet here to end them), and gone.
clear_pods() {
  local ns="$1" p
  shift
  K delete pod "$@" -n "$ns" --grace-period=0 --force --wait=false >/dev/null 2>&1
  for p in "$@"; do wait_for 30 gone "$p" "$ns"; done
}

# A pod refused only for what no capacity lifts: never nudged, whatever is freed below.
pod wrong-type default 1000 "" '{"nvidia.com/use-gputype": "A100"}'

for i in $(seq 1 "$TRIALS"); do
  for case in deleted finished; do
    pod "a-$case-$i" default 16000
    wait_for 60 bound "a-$case-$i" || { bad "$case: holder a-$case-$i not bound within 60s"; dump_logs; continue; }
    pod "b-$case-$i" default 16000
    wait_for 30 refused_once "b-$case-$i" || bad "$case: b-$case-$i was not refused"
    quiet_refusals || log "refusals did not stop for 11 s"
    T0="$(date +%s.%N)"
    if [ "$case" = deleted ]; then
      K delete pod "a-$case-$i" --grace-period=0 --force --wait=false >/dev/null 2>&1
    else
      K patch pod "a-$case-$i" --subresource=status --type=merge -p '{"status":{"phase":"Succeeded"}}' >/dev/null
    fi
    measure "$case" "b-$case-$i" default
    clear_pods default "a-$case-$i" "b-$case-$i"
  done

  ns="quota-$i"
  K create namespace "$ns" >/dev/null
  K create -n "$ns" -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-memory"},
 "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}}}
EOF
  wait_for 30 bash -c "curl -fsS --max-time 5 http://127.0.0.1:$METRICS_PORT/metrics | grep -q 'hami_resource_quota_limit{[^}]*namespace=\"$ns\"'"
  pod b "$ns" 5000
  wait_for 30 refused_once b "$ns" || bad "quota: b in $ns was not refused"
  quiet_refusals || log "refusals did not stop for 11 s"
  T0="$(date +%s.%N)"
  K patch resourcequota gpu-memory -n "$ns" --type=merge -p '{"spec":{"hard":{"limits.nvidia.com/gpumem":"8000"}}}' >/dev/null
  measure quota b "$ns"
  clear_pods "$ns" b  # (no controller-manager here: the namespace itself would never finish deleting)

  # Our filter reserves the card for a pod no scheduler handles (asked directly, as a kube-scheduler that
  # then gave up would have), so B is refused until the reservation expires.
  pod "x-$i" default 16000 nobody
  args="$(K get pod "x-$i" -o json | python3 -c 'import json,sys; print(json.dumps({"Pod": json.load(sys.stdin), "NodeNames": ["gpu-a"]}))')"
  answer="$(curl -fsS --max-time 10 -H 'Content-Type: application/json' -d "$args" "$EXT/filter")"
  [[ "$answer" == *'"NodeNames":["gpu-a"]'* ]] || bad "expired: the direct filter of x-$i answered $answer"
  pod "b-expired-$i" default 16000
  wait_for 30 refused_once "b-expired-$i" || bad "expired: b-expired-$i was not refused"
  quiet_refusals || log "refusals did not stop for 11 s"
  # Timed from the sweep's release of the reservation, as serve logs it (the sweep runs every second here).
  t1="$(bound_at "b-expired-$i" default "$(( $(date +%s) + 30 + CAP ))")"
  freed="$(sed -n "s/^\[\([0-9-]* [0-9:.]*\)\] \[warning\] pod default\/x-$i: not bound .*reservation freed.*/\1/p" \
    "$WORK/logs/hami-serve.log" | head -n 1)"
  if [ -n "$freed" ]; then
    record expired "b-expired-$i" "$(date -d "$freed" +%s.%N)" "$t1"
  else
    bad "expired: serve logged no expiry of x-$i's reservation"
  fi
  clear_pods default "x-$i" "b-expired-$i"
done

# A burst: 100 pods wait for the one card; freeing it nudges the pods it can take, not the queue.
pod holder default 16000
if wait_for 60 bound holder; then
  {
    echo '{"apiVersion": "v1", "kind": "List", "items": ['
    for n in $(seq 1 100); do
      [ "$n" = 1 ] || echo ','
      echo "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"burst-$n\", \"labels\": {\"burst\": \"1\"}},"
      echo " \"spec\": {\"schedulerName\": \"hami-scheduler\", \"containers\": [{\"name\": \"app\", \"image\": \"registry.k8s.io/pause:3.10\","
      echo "  \"resources\": {\"limits\": {\"nvidia.com/gpu\": \"1\", \"nvidia.com/gpumem\": \"16000\"}}}]}}"
    done
    echo ']}'
  } > "$WORK/burst.json"
  K create -f "$WORK/burst.json" >/dev/null
  refused_all() { [ "$(K get events --field-selector reason=FailedScheduling -o name | grep -c burst-)" -ge 100 ]; }
  wait_for 120 refused_all || log "not every burst pod was refused within 120s"
  quiet_refusals || log "refusals did not stop for 11 s"
  nudges_before="$(counter hami_scheduler_requeue_nudges_total)"
  K delete pod holder --grace-period=0 --force --wait=false >/dev/null 2>&1
  one_bound() { [ "$(K get pods -l burst=1 -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c gpu-a)" -ge 1 ]; }
  if wait_for 30 one_bound; then
    sleep 3
    nudges=$(( $(counter hami_scheduler_requeue_nudges_total) - nudges_before ))
    scheduled="$(K get pods -l burst=1 -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c gpu-a)"
    if [ "$nudges" -le 2 ] && [ "$scheduled" = 1 ]; then
      ok "burst: deleting the holder sent $nudges nudge(s) for 100 waiting pods; $scheduled scheduled"
    else
      bad "burst: $nudges nudges, $scheduled scheduled (want at most 2 nudges, 1 scheduled)"
    fi
  else
    [ "$WITHIN" = 0 ] && ok "burst: no pod of the burst scheduled within 30s (measured only)" ||
      bad "burst: no pod of the burst scheduled within 30s of the delete"
  fi
  K delete pods -l burst=1 --grace-period=0 --force --wait=false >/dev/null 2>&1
else
  bad "burst: holder not bound within 60s"
fi

if [ -z "$(jp wrong-type '{.metadata.annotations.hami\.io/requeue}')" ] && [ -z "$(jp wrong-type '{.spec.nodeName}')" ]; then
  ok "wrong-type (a GPU type the node lacks) was never nudged"
else
  bad "wrong-type was nudged or scheduled: $(jp wrong-type '{.metadata.annotations}')"
fi
for case in deleted finished quota expired; do log "time $case: ${TIMES[$case]:-none}"; done

# SIGTERM: serve drains and exits 0 (its requeue loop among what it stops).
if curl -fsS --max-time 5 "$EXT/healthz" >/dev/null; then
  kill -TERM "$SERVE_PID"
  for _ in $(seq 1 75); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$SERVE_PID" 2>/dev/null; then
    bad "serve still running 15s after SIGTERM"; dump_logs
  else
    wait "$SERVE_PID"
    rc=$?
    [ "$rc" = 0 ] && ok "serve exited 0 on SIGTERM" || bad "serve exited $rc on SIGTERM"
  fi
else
  bad "serve does not answer /healthz at the end"; dump_logs
fi
finish
