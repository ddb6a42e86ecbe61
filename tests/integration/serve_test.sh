#!/usr/bin/env bash
# `hami-scheduler serve` as a process, the way a Deployment runs it: against `hami-scheduler sim-apiserver`
# loaded with examples/cluster.yaml. /healthz, /readyz once synced, /metrics (text format 0.0.4, HAMi's
# names), /filter with HAMi's flags, a bad flag (exit 2), and SIGTERM: drains and exits 0.
#
# Usage: tests/integration/serve_test.sh [path/to/hami-scheduler]
# Prints `serve: N passed, M failed`; exit status non-zero if anything failed. Bounded by `timeout`.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$repo/build/hami-scheduler}
if [ -z "${SERVE_TEST_BOUNDED:-}" ]; then
  SERVE_TEST_BOUNDED=1 exec timeout --kill-after=5 120 bash "$0" "$@"
fi
tmp=$(mktemp -d)
passed=0
failed=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; }
check() { if eval "$2"; then pass "$1"; else fail "$1" "${3:-}"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits up to $2 seconds for command $1 to succeed.
wait_for() { local i; for ((i = 0; i < $2 * 10; i++)); do eval "$1" && return 0; sleep 0.1; done; return 1; }

"$bin" sim-apiserver --listen 127.0.0.1:0 --cluster "$repo/examples/cluster.yaml" \
  --kubeconfig-out "$tmp/kubeconfig" >"$tmp/apiserver.log" 2>&1 &
pids+=($!)
check "sim-apiserver wrote its kubeconfig" 'wait_for "[ -s $tmp/kubeconfig ]" 20' "$(tail -5 "$tmp/apiserver.log")"

http_port=$(free_port)
metrics_port=$(free_port)
"$bin" -kube-burst=ten >"$tmp/bad.out" 2>&1
rc=$?
check "a bad flag value exits 2 naming the flag" '[ $rc = 2 ] && grep -q -- "kube-burst" "$tmp/bad.out"' "rc=$rc $(cat "$tmp/bad.out")"

# HAMi's flag spelling (single dash, underscores) is accepted as is.
"$bin" -http_bind=127.0.0.1:$http_port --metrics-bind-address=127.0.0.1:$metrics_port \
  --kubeconfig "$tmp/kubeconfig" --scheduler-name=hami-scheduler --health-check-interval=1s \
  >"$tmp/serve.log" 2>&1 &
serve_pid=$!
pids+=($serve_pid)
base=http://127.0.0.1:$http_port
check "/healthz answers 200" 'wait_for "curl -sf $base/healthz >/dev/null" 20' "$(tail -5 "$tmp/serve.log")"
check "/readyz turns 200 once synced" 'wait_for "curl -sf $base/readyz >/dev/null" 20' "$(tail -5 "$tmp/serve.log")"
curl -s -D "$tmp/metrics.h" "http://127.0.0.1:$metrics_port/metrics" >"$tmp/metrics"
check "/metrics on the metrics address is Prometheus text 0.0.4" \
  'grep -qi "content-type: text/plain; version=0.0.4" "$tmp/metrics.h"'
check "/metrics has HAMi's device gauges" \
  'grep -q "^hami_gpu_memory_limit_bytes{zone=\"vGPU\",node=\"gpu-a100-1\"" "$tmp/metrics"' "$(head -c 600 "$tmp/metrics")"

cat >"$tmp/pod.json" <<'JSON'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"default"},
 "spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"3000"}}}]}}
JSON
apiserver=$(sed -n 's/^ *server: *//p' "$tmp/kubeconfig" | head -1)
curl -s -X POST -H 'Content-Type: application/json' --data-binary @"$tmp/pod.json" \
  "$apiserver/api/v1/namespaces/default/pods" >"$tmp/pod.created"
filter() {
  python3 -c "import json,sys; print(json.dumps({'Pod': json.load(open(sys.argv[1])), 'NodeNames': sys.argv[2:]}))" \
    "$@" | curl -s -X POST -H 'Content-Type: application/json' --data-binary @- "$base/filter"
}
filter "$tmp/pod.created" gpu-a100-1 gpu-v100-1 mlu-370-1 >"$tmp/filter.out"
check "/filter chooses one node" \
  'python3 -c "import json,sys; r=json.load(open(\"$tmp/filter.out\")); sys.exit(0 if r[\"Error\"]==\"\" and len(r[\"NodeNames\"])==1 else 1)"' \
  "$(cat "$tmp/filter.out")"
bind() { # POD-JSON FILTER-OUT: binds the pod to the node the filter chose
  python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['metadata']; r=json.load(open(sys.argv[2]))
print(json.dumps({'PodName': p['name'], 'PodNamespace': 'default', 'PodUID': p.get('uid', ''), 'Node': r['NodeNames'][0]}))" \
    "$@" | curl -s -X POST -H 'Content-Type: application/json' --data-binary @- "$base/bind"
}
bind "$tmp/pod.created" "$tmp/filter.out" >"$tmp/bind.out"
check "/bind binds it, and the Binding wrote its allocation on the pod" \
  'grep -q "\"Error\":\"\"" "$tmp/bind.out" && curl -s "$apiserver/api/v1/namespaces/default/pods/p1" | grep "hami.io/vgpu-devices-to-allocate" >/dev/null' \
  "$(cat "$tmp/bind.out")"
sed 's/"p1"/"gone"/' "$tmp/pod.json" >"$tmp/gone.json"
filter "$tmp/gone.json" gpu-a100-1 >"$tmp/gone.out"
check "a pod the API server does not know: the filter reserves nothing and its Error names it" \
  'grep -q "pod default/gone does not exist" "$tmp/gone.out"' "$(cat "$tmp/gone.out")"
echo '{"NodeNames":["gpu-a100-1"]}' >"$tmp/gone-filter.out"
bind "$tmp/gone.json" "$tmp/gone-filter.out" >"$tmp/gone-bind.out"
check "... and the bind's Error names it" \
  'grep -q "default/gone" "$tmp/gone-bind.out" && grep -q "not found" "$tmp/gone-bind.out"' "$(cat "$tmp/gone-bind.out")"
head -c 1100000 /dev/zero | tr '\0' ' ' >"$tmp/big.json"
curl -s -X POST -H 'Content-Type: application/json' --data-binary @"$tmp/big.json" "$base/filter" >"$tmp/big.out"
check "a body over 1 MiB is an Error in a 200 answer" 'grep -q "1 MiB" "$tmp/big.out"' "$(cat "$tmp/big.out")"

kill -TERM "$serve_pid"
wait "$serve_pid"
rc=$?
check "SIGTERM drains and exits 0" '[ $rc = 0 ] && grep -q "stopped cleanly" "$tmp/serve.log"' "rc=$rc $(tail -5 "$tmp/serve.log")"

echo "serve: $passed passed, $failed failed"
[ "$failed" = 0 ]
