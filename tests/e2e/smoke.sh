#!/usr/bin/env bash
# e2e smoke test of the harness: build (cached) -> start etcd, kube-apiserver,
# kube-scheduler on loopback -> check /version, token auth, create a Node and a
# Pod with kubectl, see them listed, see the scheduler bind the Pod -> stop.
#
#   tests/e2e/smoke.sh            # ends with "e2e smoke: N passed, M failed"
#
# Bounded in time: the whole run is cut at HAMI_E2E_SMOKE_TIMEOUT seconds
# (default 1800 when the build is not cached yet, else 300); each wait inside
# has its own deadline. Exit 0 only if every check passed.
#
# Environment: HAMI_E2E_CACHE, HAMI_E2E_BUILD_JOBS (see build.sh);
#   HAMI_E2E_KUBECTL  kubectl to use (default: the one build.sh built, which
#                     matches the server; /usr/bin/kubectl works too)
#   HAMI_E2E_KEEP_WORK=1  keep the work dir (logs, certs) even on success
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The whole run is bounded by timeout(1).
source "$E2E_DIR/suite.sh"
bounded_reexec smoke SMOKE "$@"


# ------------------------------------------------------------------ build
t0=$(date +%s)
if ! BIN="$(bash "$E2E_DIR/build.sh")"; then
  bad "build (see the messages above)"
  finish
fi
ok "build/cache lookup in $(( $(date +%s) - t0 ))s: $BIN"
export HAMI_E2E_BIN="$BIN"
KUBECTL="${HAMI_E2E_KUBECTL:-}"
if [ -z "$KUBECTL" ]; then
  if [ -x "$BIN/kubectl" ]; then KUBECTL="$BIN/kubectl"; else KUBECTL="$(command -v kubectl || true)"; fi
fi
[ -x "$KUBECTL" ] || { bad "no kubectl (set HAMI_E2E_KUBECTL)"; finish; }
K8S_VERSION="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$E2E_DIR/go.mod")"

# ------------------------------------------------------------------ start
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-smoke.XXXXXX")"
cleanup() {
  bash "$E2E_DIR/stop.sh" "$WORK" >/dev/null 2>&1
  if [ "$FAIL" = 0 ] && [ "${HAMI_E2E_KEEP_WORK:-0}" != 1 ]; then
    rm -rf "$WORK"
  else
    log "work dir kept: $WORK (logs in $WORK/logs)"
  fi
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

t0=$(date +%s)
if ! bash "$E2E_DIR/start.sh" "$WORK" --scheduler; then
  bad "start control plane (see the log tail above)"
  finish
fi
ok "control plane started in $(( $(date +%s) - t0 ))s"
# shellcheck disable=SC1091
. "$WORK/env"
K() { timeout 30 "$KUBECTL" --kubeconfig "$HAMI_E2E_KUBECONFIG" --request-timeout=20s "$@"; }
KT() { timeout 30 "$KUBECTL" --kubeconfig "$HAMI_E2E_TOKEN_KUBECONFIG" --request-timeout=20s "$@"; }
dump_logs() {
  for c in kube-apiserver kube-scheduler; do
    log "---- last 25 lines of $c.log ----"; tail -n 25 "$WORK/logs/$c.log"
  done
}

# ------------------------------------------------------------------ checks
v="$(K get --raw /version 2>&1)"
if printf '%s' "$v" | has "\"gitVersion\": *\"$K8S_VERSION\""; then
  ok "kubectl get --raw /version reports $K8S_VERSION"
else
  bad "kubectl get --raw /version: $v"
fi

who="$(KT auth whoami -o 'jsonpath={.status.userInfo.username}' 2>&1)"
if [ "$who" = token-admin ]; then
  ok "static token authenticates as token-admin"
else
  bad "token kubeconfig: $who"
fi

NODE=hami-e2e-node-1
out="$(K create -f - 2>&1 <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE
  labels:
    kubernetes.io/hostname: $NODE
    hami.io/e2e: "true"
status:
  capacity: {cpu: "8", memory: 16Gi, pods: "110"}
  allocatable: {cpu: "8", memory: 16Gi, pods: "110"}
  conditions:
  - type: Ready
    status: "True"
    reason: KubeletReady
    message: fake node for the hami e2e harness
EOF
)" || true
# Status given on create is kept for Nodes; patch it through the status
# subresource should a server version drop it.
if [ "$(K get node "$NODE" -o 'jsonpath={.status.allocatable.pods}' 2>/dev/null)" != 110 ]; then
  K patch node "$NODE" --subresource=status --type=merge \
    -p '{"status":{"capacity":{"cpu":"8","memory":"16Gi","pods":"110"},"allocatable":{"cpu":"8","memory":"16Gi","pods":"110"}}}' >/dev/null 2>&1 || true
fi
if K get nodes -o name 2>/dev/null | has -x "node/$NODE"; then
  ok "Node $NODE created and listed"
else
  bad "Node $NODE not listed: $out"
fi

out="$(K create -f - 2>&1 <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: hami-e2e-pod-1
  namespace: default
spec:
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: 100m, memory: 64Mi}
EOF
)" || true
if K get pods -n default -o name 2>/dev/null | has -x pod/hami-e2e-pod-1; then
  ok "Pod hami-e2e-pod-1 created and listed"
else
  bad "Pod not listed: $out"
fi

# No kubelet runs, so the pod stays Pending, but kube-scheduler must bind it.
deadline=$(( $(date +%s) + 60 ))
node=""
while [ "$(date +%s)" -lt "$deadline" ]; do
  node="$(K get pod hami-e2e-pod-1 -n default -o 'jsonpath={.spec.nodeName}' 2>/dev/null)"
  [ -n "$node" ] && break
  sleep 1
done
if [ "$node" = "$NODE" ]; then
  ok "kube-scheduler bound the Pod to $NODE"
else
  bad "Pod not bound within 60s (nodeName='$node'); $(K get events -n default 2>&1 | tail -n 5)"
  dump_logs
fi

finish
