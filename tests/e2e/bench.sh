#!/usr/bin/env bash
# End-to-end throughput bench: the REAL kube-scheduler v1.38.0-beta.0 with deploy/'s configuration, the real
# kube-apiserver, `hami-scheduler serve` as its extender and `hami-scheduler sim-device-plugins` (8 cards of
# 16 GiB per node, 20 ms allocation delay); a burst of pods is created at once and timed until every pod is
# bound AND allocated (hami.io/bind-phase: success). A bench, not a test: it prints figures, and fails only
# when a case did not finish or over-committed a card.
#
#   tests/e2e/bench.sh [options] [CASE...]
#
# CASE is NAME=PODSxNODES[:POLICY[:CORES]] (POLICY binpack|spread, default binpack; CORES per pod, default 30),
# or one of the presets: 40to1 (40 pods of 20 cores to one node), 200x50-binpack, 200x50-spread, 1000x200.
# Default: all four presets.
#   --qps Q --burst B     serve's --kube-qps/--kube-burst (default 50/100); --qps 5 --burst 10 is upstream's
#   --deadline S          seconds a case may take from the first pod created (default 300)
#   --allocate-delay D    the simulated plugins' time to set a pod's devices up (default 20ms)
#   --serve-args "..."    more flags for serve (word-split), e.g. "--busy-node-threshold 0"
#   --max-nodes N         a case that used more than N nodes fails (the README's test command runs a burst
#                         this way: binpack must leave the nodes empty that strict binpack leaves empty)
#   --trace               kube-scheduler -v=4, serve at debug level, and the API server's audit log (Metadata
#                         level) in the work dir: one pod can be followed through all three
#   --out FILE            append one Markdown table row per case to FILE
#   --hami PATH           the hami-scheduler binary (default ${BUILD_DIR:-build}/hami-scheduler)
#   --keep                keep each case's work dir (logs) even when it passed
#
# Per case it prints: pods/s from the first create to the last pod allocated, time to all allocated, the
# median pod, how many nodes were used, the extender's CPU seconds and peak RSS during the burst, and the
# extender's API requests per pod (by what they were for, from its /metrics), and kube-scheduler's timeouts,
# lock waits and (all-fitting mode) binds refused because the pod no longer fitted the node it chose.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
for arg in "$@"; do
  case "$arg" in -h|--help) sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
done
source "$E2E_DIR/suite.sh"
: "${HAMI_E2E_BENCH_TIMEOUT:=7200}"
export HAMI_E2E_BENCH_TIMEOUT
bounded_reexec bench BENCH "$@"

QPS=50 BURST=100 DEADLINE=300 TRACE=0 OUT="" KEEP=0 DELAY=20ms SERVE_ARGS="" MAX_NODES=""
HAMI="$ROOT/${BUILD_DIR:-build}/hami-scheduler"
CASES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --qps) QPS="$2"; shift ;;
    --burst) BURST="$2"; shift ;;
    --deadline) DEADLINE="$2"; shift ;;
    --allocate-delay) DELAY="$2"; shift ;;
    --serve-args) SERVE_ARGS="$2"; shift ;;
    --max-nodes) MAX_NODES="$2"; shift ;;
    --trace) TRACE=1 ;;
    --out) OUT="$2"; shift ;;
    --hami) HAMI="$2"; shift ;;
    --keep) KEEP=1 ;;
    -*) bad "unknown option $1 (see --help)"; finish ;;
    *) CASES+=("$1") ;;
  esac
  shift
done
[ ${#CASES[@]} -gt 0 ] || CASES=(40to1 200x50-binpack 200x50-spread 1000x200)
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI"; finish; }
BIN="$(bash "$E2E_DIR/build.sh")" || { bad "tests/e2e/build.sh failed"; finish; }
export HAMI_E2E_BIN="$BIN"

SERVE_PID="" PLUGINS_PID="" WORK=""
stop_case() {
  stop_pid "$PLUGINS_PID"; PLUGINS_PID=""
  stop_pid "$SERVE_PID"; SERVE_PID=""
  [ -z "$WORK" ] || bash "$E2E_DIR/stop.sh" "$WORK" >/dev/null 2>&1
}
trap stop_case EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

# cpu_seconds PID: user+system CPU of the process so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
peak_rss_mib() { awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }

run_case() { # NAME PODS NODES POLICY CORES
  local name="$1" pods="$2" nodes="$3" policy="$4" cores="$5"
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-bench-$name.XXXXXX")"
  mkdir -p "$WORK/logs"
  local ext_port metrics_port
  ext_port="$(free_port)" && metrics_port="$(free_port "$ext_port")" || { bad "$name: no free port"; return; }
  local ext="http://127.0.0.1:$ext_port"
  extender_scheduler_config "$WORK/kube-scheduler-config.yaml" "$ext" || { bad "$name: scheduler config"; return; }
  local apiserver_args="" scheduler_args="" serve_log_args=()
  if [ "$TRACE" = 1 ]; then
    printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n' > "$WORK/audit-policy.yaml"
    apiserver_args="--audit-policy-file=$WORK/audit-policy.yaml --audit-log-path=$WORK/logs/audit.log"
    scheduler_args="-v=4"
    serve_log_args=(--log-level debug)
  fi
  if ! HAMI_E2E_RESERVED_PORTS="$ext_port $metrics_port" HAMI_E2E_APISERVER_ARGS="$apiserver_args" \
       HAMI_E2E_SCHEDULER_ARGS="$scheduler_args" \
       bash "$E2E_DIR/start.sh" "$WORK" --scheduler-config "$WORK/kube-scheduler-config.yaml" > "$WORK/logs/start.log" 2>&1; then
    tail -n 20 "$WORK/logs/start.log"; bad "$name: control plane did not start"; return
  fi
  # shellcheck disable=SC1091
  . "$WORK/env"
  "$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$ext_port" \
    --metrics-bind-address "127.0.0.1:$metrics_port" --kube-qps "$QPS" --kube-burst "$BURST" \
    --node-scheduler-policy "$policy" --device-config-file "$ROOT/deploy/device-config.yaml" \
    "${serve_log_args[@]}" $SERVE_ARGS > "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
  SERVE_PID=$!
  local node_args=() i
  for i in $(seq -w 1 "$nodes"); do node_args+=(--node "bench-$i=nvidia:8x16384:10:NVIDIA-Tesla-T4"); done
  "$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" "${node_args[@]}" --allocate-delay "$DELAY" \
    --device-config-file "$ROOT/deploy/device-config.yaml" > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
  PLUGINS_PID=$!
  metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$metrics_port/metrics"; }
  registered() { metrics | has -x "hami_scheduler_nodes $nodes" && curl -fsS --max-time 3 "$ext/readyz"; }
  if ! wait_for 120 registered; then
    bad "$name: serve not ready with $nodes nodes registered within 120 s; work dir kept: $WORK"
    # What serve saw: its node count, readiness and the list/watch requests it made.
    { metrics | grep -E '^hami_scheduler_(nodes|ready) |verb="(list|watch)"'; curl -sS --max-time 3 "$ext/readyz"; } \
      > "$WORK/logs/not-ready.txt" 2>&1
    sed 's/^/  /' "$WORK/logs/not-ready.txt"; tail -n 5 "$WORK/logs/hami-serve.log"
    stop_case; WORK=""; return
  fi
  # As in a cluster that has been up: the first health pass has written every node's handshake (background
  # requests, at most one per node), and the token bucket has filled again.
  handshakes_sent() {
    [ "$(metrics | awk '/^hami_kube_requests_total\{client="background",verb="patch",resource="nodes"\}/ { print $NF }')" -ge "$nodes" ] 2>/dev/null
  }
  wait_for 300 handshakes_sent || log "$name: the first health pass's handshakes were not all sent within 300 s"
  sleep "$(awk -v b="$BURST" -v q="$QPS" 'BEGIN { printf "%.1f", b / q + 1 }')"
  local before_metrics cpu0
  before_metrics="$(metrics)"
  printf '%s\n' "$before_metrics" > "$WORK/metrics-before.txt"
  cpu0="$(cpu_seconds "$SERVE_PID")"
  local result
  result="$(python3 "$E2E_DIR/bench_pods.py" --server "$HAMI_E2E_APISERVER" --ca "$HAMI_E2E_CA" \
    --cert "$WORK/pki/admin.crt" --key "$WORK/pki/admin.key" --pods "$pods" --cores "$cores" \
    --deadline "$DEADLINE" 2>"$WORK/logs/bench_pods.err")"
  local cpu1 rss after_metrics throttled
  cpu1="$(cpu_seconds "$SERVE_PID")"; rss="$(peak_rss_mib "$SERVE_PID")"
  after_metrics="$(metrics)"
  printf '%s\n' "$result" > "$WORK/result.json"
  printf '%s\n' "$after_metrics" > "$WORK/metrics-after.txt"
  local field
  field() { python3 -c 'import json,sys; v=json.load(sys.stdin).get(sys.argv[1]); print("-" if v is None else v)' "$1" <<<"$result"; }
  local allocated all_s rate p50 used over
  allocated="$(field allocated)" all_s="$(field all_allocated_s)" rate="$(field pods_per_s)"
  p50="$(field p50_s)" used="$(field nodes_used)" over="$(field over_committed_cards)"
  # The extender's API requests during the burst per allocated pod, by client, verb and resource
  # (hami_kube_requests_total), e.g. "3.10 (scheduler: patch pods 1.00, patch nodes 1.05, ...; events: ...)".
  local requests
  requests="$(python3 "$E2E_DIR/bench_pods.py" requests-per-pod "$WORK/metrics-before.txt" "$WORK/metrics-after.txt" "$allocated")"
  local timeouts contention
  timeouts="$(grep -c 'context deadline exceeded\|Client.Timeout' "$WORK/logs/kube-scheduler.log")"
  contention="$(grep -c 'lock contention\|waiting for node' "$WORK/logs/kube-scheduler.log")"
  # All-fitting mode: binds refused because the pod no longer fitted the node kube-scheduler chose.
  local refused
  refused="$(awk '$1 == "hami_scheduler_bind_placements_total{result=\"no_longer_fits\"}" { print $2; found = 1 } END { if (!found) print 0 }' "$WORK/metrics-after.txt")"
  local line
  line="| $name | $pods pods / $nodes nodes, $policy, plugin $DELAY${SERVE_ARGS:+, $SERVE_ARGS} | $QPS/$BURST | $allocated/$pods | ${all_s} s | $rate | ${p50} s | $used | $(awk -v a="$cpu1" -v b="$cpu0" 'BEGIN { printf "%.2f", a - b }') s | $rss MiB | $requests | $timeouts / $contention / $refused |"
  log "$line"
  [ -z "$OUT" ] || printf '%s\n' "$line" >> "$OUT"
  if [ -n "$MAX_NODES" ] && ! [ "$used" -le "$MAX_NODES" ] 2>/dev/null; then
    bad "$name: the pods used $used nodes, more than $MAX_NODES; work dir kept: $WORK"
    stop_case
  elif [ "$allocated" = "$pods" ] && [ "$over" = 0 ] && [ "$(field errors)" = "[]" ]; then
    ok "$name: all $pods pods bound and allocated in $all_s s ($rate pods/s), no card over-committed${MAX_NODES:+, $used nodes used (at most $MAX_NODES)}"
    stop_case
    [ "$KEEP" = 1 ] && log "$name: work dir $WORK" || rm -rf "$WORK"
  else
    bad "$name: $allocated of $pods allocated within ${DEADLINE} s, $over cards over-committed, errors $(field errors); work dir kept: $WORK"
    stop_case
  fi
  WORK=""
}

log "| case | burst | kube-qps/burst | allocated | all allocated | pods/s | median pod | nodes used | extender CPU | extender peak RSS | extender requests per pod | kube-scheduler timeouts / lock waits / binds refused |"
for c in "${CASES[@]}"; do
  case "$c" in
    40to1) run_case 40to1 40 1 binpack 20 ;;
    200x50-binpack) run_case 200x50-binpack 200 50 binpack 30 ;;
    200x50-spread) run_case 200x50-spread 200 50 spread 30 ;;
    1000x200) run_case 1000x200 1000 200 binpack 30 ;;
    *=*x*)
      spec="${c#*=}"; IFS=: read -r shape policy cores <<<"$spec"
      run_case "${c%%=*}" "${shape%x*}" "${shape#*x}" "${policy:-binpack}" "${cores:-30}" ;;
    *) bad "unknown case '$c' (see --help)" ;;
  esac
done
finish
