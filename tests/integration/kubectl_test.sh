#!/usr/bin/env bash
# Real kubectl against `hami-scheduler sim-apiserver`: discovery, get -o json, create, apply (create, change,
# no-op), annotate, label, patch (strategic, JSON, --subresource=status), delete, paging, selectors, and a
# background `get pods -w` that must see the changes. Every kubectl call has a timeout, and so does the script.
#
# Usage: tests/integration/kubectl_test.sh [path/to/hami-scheduler]
#   (or HAMI_SCHEDULER=...; KUBECTL=... picks another kubectl; default: build/hami-scheduler and kubectl)
# Prints `kubectl: N passed, M failed` and exits non-zero if anything failed (77 when there is no kubectl).
set -u

repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-${HAMI_SCHEDULER:-$repo/build/hami-scheduler}}
kubectl_bin=${KUBECTL:-kubectl}
budget=${KUBECTL_TEST_BUDGET:-180}  # seconds for the whole script

tmp=$(mktemp -d)
passed=0
failed=0
server_pid=""
watch_pid=""
watchdog_pid=""
sleep_pid=""

cleanup() {
  [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null
  touch "$tmp/done" 2>/dev/null
  [ -n "$sleep_pid" ] && kill "$sleep_pid" 2>/dev/null
  [ -n "$watchdog_pid" ] && kill "$watchdog_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -x "$bin" ]; then
  echo "kubectl_test: $bin is not executable (build it, or pass the binary as the first argument)" >&2
  echo "kubectl: 0 passed, 1 failed"
  exit 1
fi
if ! command -v "$kubectl_bin" >/dev/null; then
  echo "kubectl_test: SKIPPED: $kubectl_bin not found" >&2
  echo "kubectl: 0 passed, 0 failed"
  exit 77  # ctest SKIP_RETURN_CODE
fi

# Kill the whole script if it runs past its budget.
# The sleep's output goes to /dev/null and it is killed by pid: a leftover sleep holding the output pipe
# would keep ctest waiting for the whole budget.
sleep "$budget" >/dev/null 2>&1 &
sleep_pid=$!
(wait_for=$sleep_pid; while kill -0 "$wait_for" 2>/dev/null; do sleep 1; done
 if kill -0 $$ 2>/dev/null && [ ! -e "$tmp/done" ]; then
   echo "kubectl_test: over the ${budget}s budget, aborting" >&2; kill -TERM $$; fi) >/dev/null 2>&1 &
watchdog_pid=$!

# Isolate kubectl from the user's config and discovery cache.
export HOME=$tmp/home KUBECONFIG=$tmp/kubeconfig KUBECACHEDIR=$tmp/cache
mkdir -p "$HOME"

pass() {
  passed=$((passed + 1))
  echo "ok   - $1"
}
fail() {
  failed=$((failed + 1))
  echo "FAIL - $1"
  [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/       | /' | head -20
}

k() { timeout 20 "$kubectl_bin" --request-timeout=10s "$@" 2>&1; }

# expect NAME SUBSTRING COMMAND...: the command succeeds and prints SUBSTRING.
expect() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$("$@")
  rc=$?
  if [ $rc -eq 0 ] && [[ "$out" == *"$want"* ]]; then pass "$name"; else fail "$name (rc=$rc, want '$want')" "$out"; fi
}

# expect_fail NAME SUBSTRING COMMAND...: the command fails and prints SUBSTRING.
expect_fail() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$("$@")
  rc=$?
  if [ $rc -ne 0 ] && [[ "$out" == *"$want"* ]]; then pass "$name"; else fail "$name (rc=$rc, want failure with '$want')" "$out"; fi
}

# eventually NAME SUBSTRING FILE: FILE contains SUBSTRING within 10 s.
eventually() {
  local name=$1 want=$2 file=$3
  for _ in $(seq 1 100); do
    if grep -qF -- "$want" "$file" 2>/dev/null; then
      pass "$name"
      return
    fi
    sleep 0.1
  done
  fail "$name (never saw '$want')" "$(cat "$file" 2>/dev/null)"
}

# ---- Start the server on a free loopback port with the example cluster.
"$bin" sim-apiserver --listen 127.0.0.1:0 --cluster "$repo/examples/cluster.yaml" \
  --kubeconfig-out "$KUBECONFIG" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  grep -q '^kubeconfig: ' "$tmp/server.log" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q '^kubeconfig: ' "$tmp/server.log"; then
  fail "sim-apiserver starts and writes a kubeconfig" "$(cat "$tmp/server.log")"
  echo "kubectl: $passed passed, $failed failed"
  exit 1
fi
pass "sim-apiserver starts: $(grep -o 'http://[^ ]*' "$tmp/server.log")"

cat >"$tmp/web.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: main
    image: nginx:1.27
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "4000"}
EOF
cat >"$tmp/applied.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: applied
  labels: {app: applied}
spec:
  containers:
  - name: main
    image: busybox:1.36
EOF
sed 's/busybox:1.36/busybox:1.37/; s/app: applied}/app: applied, rev: "2"}/' "$tmp/applied.yaml" >"$tmp/applied-v2.yaml"
cat >"$tmp/lease.yaml" <<'EOF'
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: hami-scheduler
  namespace: kube-system
spec:
  holderIdentity: host-a_1234
  leaseDurationSeconds: 15
EOF

# ---- Discovery and reads.
expect "kubectl version reports the server" "Server Version: v1.32" k version
expect "api-resources lists pods/binding's kinds and leases" "leases" k api-resources
expect "get nodes -o json" '"name": "gpu-a100-1"' k get nodes -o json
expect "get nodes -o json is a List of every node" "dcu-k100-1 gpu-a100-1 gpu-v100-1 mlu-370-1 mthreads-s4000-1" \
  k get nodes -o 'jsonpath={.items[*].metadata.name}'
expect "get pods -A (server-side table)" "training-0" k get pods -A
expect "get pods -A --chunk-size=1 pages through every pod" "notebook" k get pods -A --chunk-size=1 -o name
expect "field selector spec.nodeName" "pod/training-0" k get pods --field-selector spec.nodeName=gpu-a100-1 -o name
expect "describe pod" "Node:" k describe pod training-0

# ---- A watch in the background sees what follows.
timeout 60 "$kubectl_bin" get pods -w --output-watch-events >"$tmp/watch.log" 2>&1 &
watch_pid=$!
eventually "get pods -w lists the current pods first" "training-0" "$tmp/watch.log"

# ---- Writes.
expect "create -f" "pod/web created" k create -f "$tmp/web.yaml"
expect_fail "create -f again is AlreadyExists" "AlreadyExists" k create -f "$tmp/web.yaml"
expect "apply -f creates" "pod/applied created" k apply -f "$tmp/applied.yaml"
expect "apply -f with a change configures" "pod/applied configured" k apply -f "$tmp/applied-v2.yaml"
expect "apply changed the image" "busybox:1.37" k get pod applied -o 'jsonpath={.spec.containers[0].image}'
expect "apply bumped generation" "2" k get pod applied -o 'jsonpath={.metadata.generation}'
expect "apply added the label" "2" k get pod applied -o 'jsonpath={.metadata.labels.rev}'
expect "apply again is unchanged" "pod/applied unchanged" k apply -f "$tmp/applied-v2.yaml"
expect "annotate" "pod/web annotated" k annotate pod web hami.io/note=hello
expect "annotation stored" "hello" k get pod web -o 'jsonpath={.metadata.annotations.hami\.io/note}'
expect "label" "pod/web labeled" k label pod web tier=gpu
expect "label selector finds it" "pod/web" k get pods -l 'tier in (gpu),app=web' -o name
expect "label --overwrite" "pod/web labeled" k label pod web tier=cpu --overwrite
expect "label removal" "pod/web unlabeled" k label pod web tier-
expect "patch (strategic merge)" "pod/web patched" k patch pod web -p '{"metadata":{"labels":{"patched":"yes"}}}'
expect "patch --type=json with a test op" "pod/web patched" k patch pod web --type=json \
  -p '[{"op":"test","path":"/metadata/labels/patched","value":"yes"},{"op":"add","path":"/metadata/annotations/hami.io~1bind-phase","value":"allocating"}]'
expect_fail "patch --type=json with a failing test op" "test failed" k patch pod web --type=json \
  -p '[{"op":"test","path":"/metadata/labels/patched","value":"no"}]'
expect "patch --subresource=status" "pod/web patched" k patch pod web --subresource=status --type=merge \
  -p '{"status":{"phase":"Running"}}'
expect "status changed" "Running" k get pod web -o 'jsonpath={.status.phase}'
expect "patch node --subresource=status" "node/gpu-a100-1 patched" k patch node gpu-a100-1 --subresource=status \
  -p '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}'
expect "node is Ready in the table" "Ready" k get node gpu-a100-1
expect "cordon" "node/gpu-a100-1 cordoned" k cordon gpu-a100-1
expect "cordoned node shows SchedulingDisabled" "Ready,SchedulingDisabled" k get node gpu-a100-1
expect "uncordon" "node/gpu-a100-1 uncordoned" k uncordon gpu-a100-1
expect "taint" "node/gpu-a100-1 tainted" k taint nodes gpu-a100-1 hami.io/broken=yes:NoSchedule
expect "second taint" "node/gpu-a100-1 tainted" k taint nodes gpu-a100-1 other=x:NoExecute
expect "untaint" "node/gpu-a100-1 untainted" k taint nodes gpu-a100-1 hami.io/broken-
expect "untaint removed only that taint" "other" k get node gpu-a100-1 -o 'jsonpath={.spec.taints[*].key}'
expect_fail "untaint removed it" "not found" k taint nodes gpu-a100-1 hami.io/broken-
expect "create namespace (a protobuf body)" "namespace/team-x created" k create namespace team-x
expect "create quota (a protobuf body)" "resourcequota/gpu created" k create quota gpu -n team-x --hard=limits.nvidia.com/gpumem=20000
expect "get quota" "limits.nvidia.com/gpumem: 0/20k" k get quota -n team-x
expect "delete namespace" 'namespace "team-x" deleted' k delete namespace team-x
expect "create a Lease (coordination.k8s.io)" "lease.coordination.k8s.io/hami-scheduler created" k create -f "$tmp/lease.yaml"
expect "get lease" "host-a_1234" k get lease -n kube-system hami-scheduler
expect "delete" 'pod "web" deleted' k delete pod web
expect_fail "get after delete is NotFound" "NotFound" k get pod web
expect "delete -f" 'pod "applied" deleted' k delete -f "$tmp/applied.yaml"

# ---- What the watch saw.
eventually "watch saw web ADDED" "ADDED      web" "$tmp/watch.log"
eventually "watch saw web MODIFIED" "MODIFIED   web" "$tmp/watch.log"
eventually "watch saw web Running" "Running" "$tmp/watch.log"
eventually "watch saw web DELETED" "DELETED    web" "$tmp/watch.log"
eventually "watch saw applied DELETED" "DELETED    applied" "$tmp/watch.log"
kill "$watch_pid" 2>/dev/null
wait "$watch_pid" 2>/dev/null
watch_pid=""

# ---- SIGTERM stops the server cleanly.
kill -TERM "$server_pid"
rc=""
for _ in $(seq 1 50); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait "$server_pid"
    rc=$?
    break
  fi
  sleep 0.1
done
if [ "$rc" = "0" ]; then pass "SIGTERM stops sim-apiserver with status 0"; else fail "SIGTERM stops sim-apiserver (rc=$rc)" "$(cat "$tmp/server.log")"; fi
server_pid=""

echo "kubectl: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
