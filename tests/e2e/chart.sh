#!/usr/bin/env bash
# e2e of HAMi's chart contract and of the admission webhook, against the REAL kube-apiserver and
# kube-scheduler (v1.38.0-beta.0, built by build.sh): what HAMi v2.10.0's chart renders for the scheduler
# (tests/e2e/chart-v2.10.0: the extender's command line, the device config, the kube-scheduler configuration,
# the MutatingWebhookConfiguration) runs with our binary as `scheduler`, serving /filter, /bind and /webhook
# over TLS. Pods are created with kubectl without a schedulerName: the webhook makes them ours, kube-scheduler
# sends them through our extender, simulated device plugins allocate them; the pods the webhook must refuse
# are refused with the reason kubectl prints; another scheduler's pod is left alone.
#
#   tests/e2e/chart.sh [PATH/TO/hami-scheduler]   # default: ${BUILD_DIR:-build}/hami-scheduler
#
# Ends with "e2e chart: N passed, M failed"; exit 0 only if every check passed. Bounded by
# HAMI_E2E_CHART_TIMEOUT seconds (default 300 with cached control-plane binaries, else 1800). On a failure the
# work dir is kept (HAMI_E2E_KEEP_WORK=1 keeps it always). No kubelet runs: pods are bound and allocated
# (annotations, bind-phase) but no container starts.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
CHART="$E2E_DIR/chart-v2.10.0"

source "$E2E_DIR/suite.sh"
bounded_reexec chart CHART "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
HAMI="$(cd "$(dirname "$HAMI")" && pwd)/$(basename "$HAMI")"

if ! BIN="$(bash "$E2E_DIR/build.sh")"; then bad "build (see the messages above)"; finish; fi
export HAMI_E2E_BIN="$BIN"
KUBECTL="${HAMI_E2E_KUBECTL:-$BIN/kubectl}"
[ -x "$KUBECTL" ] || { bad "no kubectl at $KUBECTL (set HAMI_E2E_KUBECTL)"; finish; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-chart.XXXXXX")"
SERVE_PID=""
PLUGINS_PID=""
cleanup() {
  end_suite_run "$WORK" "$PLUGINS_PID" "$SERVE_PID"
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

PORT="$(free_port)" && METRICS_PORT="$(free_port "$PORT")" || { bad "no free loopback port"; finish; }
mkdir -p "$WORK/logs" "$WORK/tls" "$WORK/bin"

# ------------------------------------------------------------------ the chart's objects, on this machine
# Only what README.md in the fixture lists changes: the port, the mounted files' paths, the CA bundle.
# The rendering with devices.ascend.enabled (its managedResources add the Ascend chips' resources).
sed "s#https://127.0.0.1:443#https://127.0.0.1:$PORT#" "$CHART/kube-scheduler-config-ascend.yaml" > "$WORK/kube-scheduler-config.yaml"
grep -q "urlPrefix: \"https://127.0.0.1:$PORT\"" "$WORK/kube-scheduler-config.yaml" ||
  { bad "the fixture's kube-scheduler configuration has no urlPrefix https://127.0.0.1:443"; finish; }
if ! HAMI_E2E_RESERVED_PORTS="$PORT $METRICS_PORT" bash "$E2E_DIR/start.sh" "$WORK" \
    --scheduler-config "$WORK/kube-scheduler-config.yaml" > "$WORK/logs/start.log" 2>&1; then
  tail -n 40 "$WORK/logs/start.log"; bad "start the control plane with the chart's kube-scheduler configuration"; finish
fi
ok "kube-scheduler runs the chart's configuration (extender https://127.0.0.1:$PORT, leader election on)"
# shellcheck disable=SC1091
. "$WORK/env"
K() { timeout 30 "$KUBECTL" --kubeconfig "$HAMI_E2E_KUBECONFIG" --request-timeout=20s "$@"; }
dump_logs() {
  for f in kube-scheduler scheduler sim-device-plugins; do
    log "---- last 30 lines of $f.log ----"; tail -n 30 "$WORK/logs/$f.log" 2>/dev/null
  done
}

# The serving certificate, signed by the harness CA (the chart's cert Job makes a CA and a cert the same way).
PKI="$WORK/pki"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$WORK/tls/tls.key" 2>>"$WORK/logs/openssl.log" &&
  openssl req -new -key "$WORK/tls/tls.key" -subj "/CN=hami-scheduler.kube-system.svc" -out "$WORK/tls/tls.csr" 2>>"$WORK/logs/openssl.log" &&
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:hami-scheduler.kube-system.svc" > "$WORK/tls/tls.ext" &&
  openssl x509 -req -in "$WORK/tls/tls.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 1 -sha256 \
    -extfile "$WORK/tls/tls.ext" -out "$WORK/tls/tls.crt" 2>>"$WORK/logs/openssl.log" ||
  { bad "serving certificate (see $WORK/logs/openssl.log)"; finish; }
cp "$CHART/device-config.yaml" "$WORK/device-config.yaml"

# The image's entry point: the same binary under HAMi's name.
ln -s "$HAMI" "$WORK/bin/scheduler"
ARGS=()
while IFS= read -r word; do
  [ -n "$word" ] || continue
  word="${word//0.0.0.0:443/127.0.0.1:$PORT}"
  word="${word//=:9395/=127.0.0.1:$METRICS_PORT}"
  word="${word//\/tls\//$WORK/tls/}"
  word="${word//=\/device-config.yaml/=$WORK/device-config.yaml}"
  ARGS+=("$word")
done < "$CHART/scheduler-args.txt"
[ "${ARGS[0]}" = scheduler ] || { bad "the fixture's command does not start with 'scheduler'"; finish; }
# The chart with devices.ascend.enabled adds this flag (scheduler-args-every-vendor.txt); its device config
# carries the vnpus: section either way.
ARGS+=(--enable-ascend=true)
printf '%q ' "${ARGS[@]}" > "$WORK/logs/scheduler.cmdline"
(cd "$WORK/bin" && POD_NAME=hami-scheduler-0 POD_NAMESPACE=kube-system HAMI_NODELOCK_EXPIRE=5m \
  exec ./scheduler "${ARGS[@]:1}" --kubeconfig "$HAMI_E2E_KUBECONFIG" --health-check-interval 2s \
  > "$WORK/logs/scheduler.log" 2>&1 < /dev/null) &
SERVE_PID=$!
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" \
  --node gpu-a=nvidia:2x16384:10:NVIDIA-Tesla-T4 --node npu-c=Ascend910C:4x65536:4:Ascend910C \
  --allocate-delay 20ms --register-interval 5s \
  --device-config-file "$WORK/device-config.yaml" > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!

EXT="https://127.0.0.1:$PORT"
if wait_for 60 curl -fsS --max-time 3 --cacert "$PKI/ca.crt" "$EXT/readyz"; then
  ok "'scheduler' with the chart's flags serves TLS on $EXT and is ready"
else
  bad "'scheduler' with the chart's flags not ready over TLS within 60s"; dump_logs; finish
fi
if grep -q "hygon: pods get their devices under hami.io/hcu-devices-to-allocate" "$WORK/logs/scheduler.log"; then
  ok "HAMi's device config with Hygon: the start-up warning names the to-allocate key and the override"
else
  bad "no start-up warning about Hygon's to-allocate key: $(grep -i hygon "$WORK/logs/scheduler.log" | head -n 3)"
fi
metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics"; }
# --leader-elect=true (the chart's): we lead while the co-located kube-scheduler, on this host, holds the Lease.
leading() { [[ "$(curl -fsS --max-time 3 --cacert "$PKI/ca.crt" "$EXT/readyz")" == "ok (leader)" ]]; }
if wait_for 60 leading; then
  ok "--leader-elect: leader while kube-scheduler holds Lease kube-system/hami-scheduler ($(K get lease hami-scheduler -n kube-system -o 'jsonpath={.spec.holderIdentity}'))"
else
  bad "not the leader within 60s: $(curl -sS --max-time 3 --cacert "$PKI/ca.crt" "$EXT/readyz" 2>&1)"; dump_logs; finish
fi
registered() { metrics | has -x 'hami_scheduler_nodes 2'; }
wait_for 60 registered || { bad "nodes gpu-a and npu-c not registered within 60s"; dump_logs; finish; }

CA_BUNDLE="$(base64 -w0 < "$PKI/ca.crt")"
sed -e "s#https://127.0.0.1:443/webhook#https://127.0.0.1:$PORT/webhook#" -e "s#@CA_BUNDLE@#$CA_BUNDLE#" \
  "$CHART/webhook.yaml" > "$WORK/webhook.yaml"
out="$(K apply -f "$WORK/webhook.yaml" 2>&1)" || { bad "apply the chart's MutatingWebhookConfiguration: $out"; finish; }
ok "the chart's MutatingWebhookConfiguration is applied ($EXT/webhook, the harness CA as caBundle)"

# ------------------------------------------------------------------ pods, as users write them
# new_pod NAME LIMITS-JSON [SPEC-EXTRA-JSON] [NAMESPACE] [CONTAINER-SECURITY-CONTEXT-JSON]: kubectl create;
# prints what kubectl printed.
new_pod() {
  local extra="${3:-}" ns="${4:-default}" sc="${5:-}"
  K create -f - 2>&1 <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1", "namespace": "$ns"},
 "spec": {${extra:+$extra, }"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
          ${sc:+"securityContext": $sc, }"resources": {"limits": $2}}]}}
EOF
}
jp() { K get pod "$1" -n "${3:-default}" -o "jsonpath=$2" 2>/dev/null; }
bound_and_allocated() { [ -n "$(jp "$1" '{.spec.nodeName}')" ] && [ "$(jp "$1" '{.metadata.annotations.hami\.io/bind-phase}')" = success ]; }

# A webhook the API server does not call yet (its configuration is picked up asynchronously) or cannot reach
# fails open (failurePolicy Ignore): a probe pod is created until the webhook mutated it.
webhook_answers() {
  K delete pod probe --wait=false >/dev/null 2>&1
  new_pod probe '{"nvidia.com/gpumem": "1000"}' >/dev/null
  [ "$(jp probe '{.spec.schedulerName}')" = hami-scheduler ]
}
if ! wait_for 30 webhook_answers; then
  bad "the probe pod was not mutated (schedulerName '$(jp probe '{.spec.schedulerName}')'): the API server did not reach the webhook"
  grep -i webhook "$WORK/logs/kube-apiserver.log" | tail -n 3; dump_logs; finish
fi

out="$(new_pod mem-only '{"nvidia.com/gpumem": "3000"}')"
if [ "$(jp mem-only '{.spec.schedulerName}')" = hami-scheduler ] &&
   [ "$(jp mem-only '{.spec.containers[0].resources.limits.nvidia\.com/gpu}')" = 1 ]; then
  ok "a memory-only pod gets nvidia.com/gpu: 1 and schedulerName hami-scheduler from the webhook"
else
  bad "mem-only after the webhook: $out schedulerName='$(jp mem-only '{.spec.schedulerName}')' limits=$(jp mem-only '{.spec.containers[0].resources.limits}')"
fi
if wait_for 60 bound_and_allocated mem-only; then
  ok "the real kube-scheduler bound mem-only through our extender: node $(jp mem-only '{.spec.nodeName}'), $(jp mem-only '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')"
else
  bad "mem-only not bound and allocated within 60s (nodeName '$(jp mem-only '{.spec.nodeName}')')"; dump_logs
fi
new_pod whole-card '{"nvidia.com/gpu": "1"}' '"schedulerName": "default-scheduler"' >/dev/null
if [ "$(jp whole-card '{.spec.schedulerName}')" = hami-scheduler ] &&
   [ "$(jp whole-card '{.spec.containers[0].resources.limits.nvidia\.com/gpucores}')" = 100 ]; then
  ok "--force-overwrite-default-scheduler=true: a default-scheduler pod asking nvidia.com/gpu: 1 is ours, exclusive (gpucores 100)"
else
  bad "whole-card: schedulerName='$(jp whole-card '{.spec.schedulerName}')' limits=$(jp whole-card '{.spec.containers[0].resources.limits}')"
fi

# refused NAME WANT LIMITS [EXTRA] [NS] [SECURITY-CONTEXT]: kubectl create must fail and print WANT; the pod
# must not exist.
refused() {
  local name="$1" want="$2" out
  out="$(new_pod "$name" "$3" "${4:-}" "${5:-default}" "${6:-}")"
  if [ -z "$(jp "$name" '{.metadata.name}' "${5:-default}")" ] && [[ "$out" == *"$want"* ]]; then
    ok "$name refused: $(printf '%s' "$out" | tail -n 1)"
  else
    bad "$name: want a refusal naming '$want', kubectl printed: $out"
  fi
}
# Ascend 910C (superPod): one whole NPU becomes its module's pair, with the card's memory written in.
new_pod npu-one '{"huawei.com/Ascend910C": "1"}' >/dev/null
if [ "$(jp npu-one '{.spec.schedulerName}')" = hami-scheduler ] &&
   [ "$(jp npu-one '{.spec.containers[0].resources.limits.huawei\.com/Ascend910C}')" = 2 ] &&
   [ "$(jp npu-one '{.spec.containers[0].resources.requests.huawei\.com/Ascend910C-memory}')" = 65536 ]; then
  ok "the webhook makes a 910C pod asking for one NPU ask for its module (2) with 65536 MiB each"
else
  bad "npu-one after the webhook: schedulerName='$(jp npu-one '{.spec.schedulerName}')' limits=$(jp npu-one '{.spec.containers[0].resources.limits}') requests=$(jp npu-one '{.spec.containers[0].resources.requests}')"
fi
if wait_for 60 bound_and_allocated npu-one; then
  ok "the real kube-scheduler bound npu-one through our extender: $(jp npu-one '{.metadata.annotations.hami\.io/Ascend910C-devices-allocated}')"
else
  bad "npu-one not bound and allocated within 60s (nodeName '$(jp npu-one '{.spec.nodeName}')')"; dump_logs
fi
refused npu-cores "huawei.com/Ascend910C-core is only supported in hami-core" '{"huawei.com/Ascend910C": "2", "huawei.com/Ascend910C-core": "10"}'
refused npu-odd "Ascend910C device request must be 1 or 2*n, got 3" '{"huawei.com/Ascend910C": "3"}'
refused privileged "container app is privileged" '{"nvidia.com/gpu": "1"}' "" default '{"privileged": true}'
refused mem-16gi "nvidia.com/gpumem" '{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"}'
K create namespace team-q >/dev/null 2>&1
K create -n team-q -f - >/dev/null 2>&1 <<EOF
{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-memory"},
 "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}}}
EOF
quota_seen() { metrics | has '^hami_resource_quota_limit{[^}]*namespace="team-q"'; }
if wait_for 30 quota_seen; then
  refused over-quota "exceeding resource quota" '{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5000"}' "" team-q
else
  bad "the ResourceQuota in team-q did not reach the scheduler's cache within 30s"
fi

new_pod theirs '{"nvidia.com/gpumem": "3000"}' '"schedulerName": "volcano"' >/dev/null
if [ "$(jp theirs '{.spec.schedulerName}')" = volcano ] && [ -z "$(jp theirs '{.spec.containers[0].resources.limits.nvidia\.com/gpu}')" ]; then
  ok "a pod of another scheduler (volcano) is left as it was"
else
  bad "theirs was changed: schedulerName='$(jp theirs '{.spec.schedulerName}')' limits=$(jp theirs '{.spec.containers[0].resources.limits}')"
fi
counts="$(metrics | grep '^hami_scheduler_admission_requests_total')"
if printf '%s\n' "$counts" | has -x 'hami_scheduler_admission_requests_total{result="denied"} 5' &&
   printf '%s\n' "$counts" | has -x 'hami_scheduler_admission_requests_total{result="patched"} 4'; then
  ok "/metrics counts the webhook's answers: $(printf '%s' "$counts" | tr '\n' ' ')"
else
  bad "admission counters: $counts"
fi
# docs/DECISIONS.md, "The webhook refuses": a pod created with allocation annotations (naming mem-only's card,
# phase success) is refused by the webhook, whichever scheduler it names, with HAMi's words.
card="$(jp mem-only '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')"
node="$(jp mem-only '{.spec.nodeName}')"
out="$(K create -f - 2>&1 <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "forged", "namespace": "default",
 "annotations": {"hami.io/vgpu-node": "$node", "hami.io/bind-phase": "success",
                 "hami.io/vgpu-devices-allocated": "$card", "team": "a"}},
 "spec": {"schedulerName": "volcano", "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}
EOF
)"
if ! K get pod forged >/dev/null 2>&1 &&
   [[ "$out" == *"annotation hami.io/bind-phase is written by the scheduler and cannot be set when creating a pod"* ]]; then
  ok "the webhook refuses a pod created with allocation annotations, and kubectl prints why"
else
  bad "forged: $(jp forged '{.metadata.name} {.metadata.annotations}'), kubectl printed: $out"
fi
# docs/DECISIONS.md, "Fail closed": a running pod whose allocation annotation stops reading (a hand edit)
# closes its node to NVIDIA pods, with an event on the node; mended, the node opens.
K annotate pod mem-only --overwrite "hami.io/vgpu-devices-allocated=GPU-x,NVIDIA,lots,0:;" >/dev/null
blocked() { metrics | has -x 'hami_scheduler_unreadable_allocations 1'; }
node_event() {
  K get events -A --field-selector "involvedObject.name=$node,reason=UnreadableAllocation" -o name 2>/dev/null | has .
}
if wait_for 20 blocked && wait_for 20 node_event; then
  ok "an unreadable allocation on mem-only closes node $node (hami_scheduler_unreadable_allocations 1, an UnreadableAllocation event)"
else
  bad "no block for mem-only's unreadable allocation: $(metrics | grep unreadable_allocations)"
fi
K annotate pod mem-only --overwrite "hami.io/vgpu-devices-allocated=$card" >/dev/null
open_again() { metrics | has -x 'hami_scheduler_unreadable_allocations 0'; }
if wait_for 20 open_again; then ok "mended, node $node opens again"; else bad "node $node still blocked after the annotation was mended"; fi
if grep -q "admission: denied pod default/privileged: container app is privileged" "$WORK/logs/scheduler.log"; then
  ok "every denial is logged with its reason"
else
  bad "no log line for the privileged pod's denial"
fi

RC=""
kill -TERM "$SERVE_PID" 2>/dev/null
for _ in $(seq 1 100); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.2; done
if ! kill -0 "$SERVE_PID" 2>/dev/null; then wait "$SERVE_PID"; RC=$?; fi
if [ "$RC" = 0 ]; then ok "'scheduler' exits 0 on SIGTERM"; SERVE_PID=""; else bad "'scheduler' after SIGTERM: ${RC:-still running}"; fi
finish
