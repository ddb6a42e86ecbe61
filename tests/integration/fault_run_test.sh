#!/usr/bin/env bash
# The fault run: `hami-scheduler serve` as a process under `sim-kube-scheduler`, against `sim-apiserver`
# injecting random API faults (500s, 409s on writes, answers lost after the work was done) and
# `sim-device-plugins` on 8 nodes of 4 GPUs (10 pods each). 280 pods arrive in four batches; serve is
# killed with SIGKILL after each of the first three and started again. Then the faults stop and every
# invariant is checked from the API server's state (tests/integration/fault_run.py): every pod that fits is
# bound and allocated, no device is over-committed, no node lock is left, no unbound pod keeps allocation
# annotations (including those a "killed process" left, once --reservation-timeout has passed), and no serve
# process ever exited on its own.
#
# Usage: tests/integration/fault_run_test.sh [path/to/hami-scheduler]
# Prints `fault run: N passed, M failed`; exit status non-zero if anything failed. Bounded by `timeout`.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$repo/build/hami-scheduler}
if [ -z "${FAULT_RUN_BOUNDED:-}" ]; then
  FAULT_RUN_BOUNDED=1 exec timeout --kill-after=5 110 bash "$0" "$@"
fi
helper="python3 $repo/tests/integration/fault_run.py"
tmp=$(mktemp -d)
echo "work dir: $tmp"
passed=0
failed=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ "$failed" != 0 ] || [ -n "${FAULT_RUN_KEEP:-}" ]; then
    for f in "$tmp"/*.log; do echo "--- $f (last 15 lines)"; tail -15 "$f"; done
  fi
  [ -n "${FAULT_RUN_KEEP_DIR:-}" ] && cp -r "$tmp" "$FAULT_RUN_KEEP_DIR"
  rm -rf "$tmp"
}
trap cleanup EXIT
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; }
check() { if eval "$2"; then pass "$1"; else fail "$1" "${3:-}"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { local i; for ((i = 0; i < $2 * 10; i++)); do eval "$1" && return 0; sleep 0.1; done; return 1; }

"$bin" sim-apiserver --listen 127.0.0.1:0 --kubeconfig-out "$tmp/kubeconfig" --fault-error-rate 0.03 \
  --fault-conflict-rate 0.03 --fault-drop-rate 0.02 --fault-seed 8 --fault-paused >"$tmp/apiserver.log" 2>&1 &
apiserver_pid=$!
pids+=($apiserver_pid)
check "sim-apiserver wrote its kubeconfig" 'wait_for "[ -s $tmp/kubeconfig ]" 20' "$(tail -5 "$tmp/apiserver.log")"
api=$(sed -n 's/^ *server: *//p' "$tmp/kubeconfig" | head -1)

node_flags=()
for i in 1 2 3 4 5 6 7 8; do node_flags+=(--node "fault-$i=nvidia:4x16384:10:NVIDIA-T4"); done
"$bin" sim-device-plugins --kubeconfig "$tmp/kubeconfig" "${node_flags[@]}" --allocate-delay 10ms \
  --register-interval 1s >"$tmp/plugins.log" 2>&1 &
plugins_pid=$!
pids+=($plugins_pid)
registered() { [ "$(curl -s "$api/api/v1/nodes" | grep -o 'hami.io/node-nvidia-register' | wc -l)" -ge 8 ]; }
check "8 device plugins registered" 'wait_for registered 20' "$(tail -5 "$tmp/plugins.log")"

http_port=$(free_port)
metrics_port=$(free_port)
serve_n=0
start_serve() {
  serve_n=$((serve_n + 1))
  "$bin" serve --http_bind=127.0.0.1:$http_port --metrics-bind-address=127.0.0.1:$metrics_port \
    --kubeconfig "$tmp/kubeconfig" --health-check-interval=1s --node-lock-retry-timeout=2s \
    --reservation-timeout=6s --kube-qps=500 --kube-burst=1000 >"$tmp/serve-$serve_n.log" 2>&1 &
  serve_pid=$!
  pids+=($serve_pid)
}
start_serve
check "serve is ready" 'wait_for "curl -sf http://127.0.0.1:$http_port/readyz >/dev/null" 20' \
  "$(tail -5 "$tmp/serve-1.log")"
"$bin" sim-kube-scheduler --kubeconfig "$tmp/kubeconfig" --extender "http://127.0.0.1:$http_port" \
  --http-timeout 5s --max-backoff 1s >"$tmp/kube-scheduler.log" 2>&1 &
scheduler_pid=$!
pids+=($scheduler_pid)

$helper create-fixed "$api"
kill -USR1 "$apiserver_pid"  # the faults begin
total=280
kills=0
for batch in 1 2 3 4; do
  first=$(((batch - 1) * 70 + 1))
  $helper create "$api" "$first" $((batch * 70)) || fail "creating pods $first.." "see above"
  if [ "$batch" -lt 4 ]; then
    sleep 1.5  # in the middle of filtering and binding the batch
    if kill -0 "$serve_pid" 2>/dev/null; then
      kill -KILL "$serve_pid"
      wait "$serve_pid" 2>/dev/null
      kills=$((kills + 1))
    else
      fail "serve $serve_n was running until killed" "$(tail -5 "$tmp/serve-$serve_n.log")"
    fi
    start_serve
  fi
done
check "serve was killed 3 times" '[ $kills = 3 ]'
sleep 2
kill -USR1 "$apiserver_pid"  # the faults end; the run settles
check "the API server injected faults" 'wait_for "grep -q \"random faults off\" $tmp/apiserver.log" 5'
grep "random faults off" "$tmp/apiserver.log"
$helper wait "$api" 60 "$total" >"$tmp/verdict.out" 2>&1
rc=$?
cat "$tmp/verdict.out"
[ $rc = 0 ] || $helper events "$api"
check "every invariant holds (all fitting pods bound and allocated, no over-commit, no lock left, no \
allocation on unbound pods)" '[ $rc = 0 ]'
check "the last serve never exited on its own" 'kill -0 $serve_pid 2>/dev/null' "$(tail -5 "$tmp/serve-$serve_n.log")"
check "neither did the other processes" \
  'kill -0 $apiserver_pid && kill -0 $plugins_pid && kill -0 $scheduler_pid 2>/dev/null'
curl -s "http://127.0.0.1:$metrics_port/metrics" >"$tmp/metrics"
grep -E '^hami_scheduler_(reservations_expired|abandoned_locks_released|bind_results)_total' "$tmp/metrics"
echo "fault run: $passed passed, $failed failed"
[ "$failed" = 0 ]
