#!/usr/bin/env bash
# e2e test of hami-scheduler as the extender of the REAL kube-scheduler (v1.38.0-beta.0, built by build.sh):
#   start etcd + kube-apiserver + kube-scheduler with a copy of deploy/kube-scheduler-config.yaml whose
#   urlPrefix points at our port -> apply deploy/hami-scheduler.yaml (RBAC, ConfigMaps...) -> run
#   `hami-scheduler serve` as a real process under the deploy ServiceAccount's token (so the RBAC is what it
#   runs with, and --enable-ascend) and `hami-scheduler sim-device-plugins` for two NVIDIA nodes, a Hygon
#   node, a node of eight Ascend 910B3 NPUs in two rings, one of four 910C NPUs, one of eight whole
#   Kunlunxin XPUs (from capacity), one of eight vXPU cards, one of three Iluvatar MR-V100 GPUs
#   (--enable-iluvatar), one of eight AWS Neuron devices (from capacity), one of two AMD MI300X GPUs, one of
#   four Vastai devices, one of two Biren GPUs, one of two whole Enflame GCUs (from capacity), one of two
#   Enflame DRS cards of six slices, one of two whole MetaX GPUs (from capacity) and one of two MetaX sGPU
#   cards -> create pods
#   with kubectl and check placement, annotations, events and metrics -> SIGTERM both, expect exit 0.
#
#   tests/e2e/extender.sh [PATH/TO/hami-scheduler]   # default: ${BUILD_DIR:-build}/hami-scheduler
#
# Ends with "e2e extender: N passed, M failed"; exit 0 only if every check passed. The whole run is cut at
# HAMI_E2E_EXTENDER_TIMEOUT seconds (default 300 when the control plane binaries are cached, else 1800);
# each wait inside has its own deadline; an EXIT trap stops everything. On a failure the work dir (logs of
# every process) is kept and its path printed. HAMI_E2E_KEEP_WORK=1 keeps it on success too.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"

# The whole run is bounded by timeout(1).
source "$E2E_DIR/suite.sh"
bounded_reexec extender EXTENDER "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"

[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }

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

# ------------------------------------------------------------------ processes and cleanup
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-extender.XXXXXX")"
SERVE_PID=""
PLUGINS_PID=""
cleanup() {
  stop_pid "$PLUGINS_PID"
  stop_pid "$SERVE_PID"
  bash "$E2E_DIR/stop.sh" "$WORK" >/dev/null 2>&1
  if [ "$FAIL" = 0 ] && [ "${HAMI_E2E_KEEP_WORK:-0}" != 1 ]; then
    rm -rf "$WORK"
  else
    log "work dir kept: $WORK (logs in $WORK/logs)"
  fi
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

EXT_PORT="$(free_port)" && METRICS_PORT="$(free_port "$EXT_PORT")" && WEBHOOK_PORT="$(free_port "$EXT_PORT" "$METRICS_PORT")" ||
  { bad "no free loopback port"; finish; }
EXT="http://127.0.0.1:$EXT_PORT"

# ------------------------------------------------------------------ control plane with our extender
mkdir -p "$WORK/logs"
SCHED_CONFIG="$WORK/kube-scheduler-config.yaml"
if ! extender_scheduler_config "$SCHED_CONFIG" "$EXT"; then
  bad "deploy/kube-scheduler-config.yaml has no 'urlPrefix: http://127.0.0.1:8080' line to point at port $EXT_PORT"
  finish
fi
t0=$(date +%s)
# start.sh picks the control plane's ports around ours.
if ! HAMI_E2E_RESERVED_PORTS="$EXT_PORT $METRICS_PORT $WEBHOOK_PORT" bash "$E2E_DIR/start.sh" "$WORK" --scheduler-config "$SCHED_CONFIG" > "$WORK/logs/start.log" 2>&1; then
  tail -n 40 "$WORK/logs/start.log"
  bad "start control plane with deploy/kube-scheduler-config.yaml (extender $EXT)"
  finish
fi
ok "control plane started with deploy/kube-scheduler-config.yaml in $(( $(date +%s) - t0 ))s (extender $EXT)"
# shellcheck disable=SC1091
. "$WORK/env"
K() { timeout 30 "$KUBECTL" --kubeconfig "$HAMI_E2E_KUBECONFIG" --request-timeout=20s "$@"; }
dump_logs() {
  for f in kube-scheduler hami-serve sim-device-plugins; do
    log "---- last 30 lines of $f.log ----"; tail -n 30 "$WORK/logs/$f.log" 2>/dev/null
  done
}

# ------------------------------------------------------------------ deploy/ against the real API server
out="$(K apply --dry-run=server -f "$ROOT/deploy/hami-scheduler.yaml" 2>&1)"
if [ $? = 0 ]; then
  ok "deploy/hami-scheduler.yaml passes server-side validation ($(printf '%s\n' "$out" | wc -l) objects)"
else
  bad "kubectl apply --dry-run=server -f deploy/hami-scheduler.yaml: $out"
fi
# Applied for real: no controller-manager runs, so the Deployment makes no pods, but the ServiceAccount and
# the RBAC objects exist and `serve` below runs with that ServiceAccount's token.
out="$(K apply -f "$ROOT/deploy/hami-scheduler.yaml" 2>&1)" || bad "kubectl apply -f deploy/hami-scheduler.yaml: $out"
same_as_file() { # configmap key file
  diff <(K get configmap "$1" -n kube-system -o "jsonpath={.data.${2//./\\.}}"; echo) <(cat "$3"; echo) >/dev/null
}
if same_as_file hami-scheduler-config config.yaml "$ROOT/deploy/kube-scheduler-config.yaml" &&
   same_as_file hami-scheduler-device device-config.yaml "$ROOT/deploy/device-config.yaml"; then
  ok "the ConfigMaps of deploy/hami-scheduler.yaml carry deploy/kube-scheduler-config.yaml and deploy/device-config.yaml"
else
  bad "the ConfigMaps in deploy/hami-scheduler.yaml differ from deploy/kube-scheduler-config.yaml or deploy/device-config.yaml"
fi
# The webhook's certificate the way deploy/ makes it (no cert-manager here).
out="$(K apply --dry-run=server -f "$ROOT/deploy/webhook.yaml" 2>&1)" && K apply -f "$ROOT/deploy/webhook.yaml" >/dev/null 2>&1 ||
  bad "deploy/webhook.yaml: $out"
cert_script() { bash "$ROOT/deploy/webhook-cert.sh" --kubectl "timeout 30 $KUBECTL --kubeconfig $HAMI_E2E_KUBECONFIG" 2>&1; }
secret_ca() { K get secret hami-scheduler-tls -n kube-system -o 'jsonpath={.data.ca\.crt}' | base64 -d; }
bundle() { K get mutatingwebhookconfiguration hami-scheduler -o 'jsonpath={.webhooks[0].clientConfig.caBundle}' | base64 -d; }
out="$(cert_script)"
first_ca="$(secret_ca 2>/dev/null)"
out+="$(cert_script)"  # a renewal: the webhook trusts the new CA and the one before it
for key in tls.crt tls.key ca.crt; do
  K get secret hami-scheduler-tls -n kube-system -o "jsonpath={.data.${key//./\\.}}" | base64 -d > "$WORK/webhook-$key" 2>/dev/null
done
if [ -s "$WORK/webhook-tls.key" ] && [ -n "$first_ca" ] && [ "$first_ca" != "$(cat "$WORK/webhook-ca.crt")" ] &&
   [ "$(bundle 2>/dev/null)" = "$(cat "$WORK/webhook-ca.crt"; echo "$first_ca")" ] &&
   openssl verify -CAfile "$WORK/webhook-ca.crt" "$WORK/webhook-tls.crt" >/dev/null 2>&1; then
  ok "deploy/webhook-cert.sh made Secret hami-scheduler-tls and deploy/webhook.yaml's caBundle; a renewal trusts the new CA and the previous one"
else
  bad "deploy/webhook-cert.sh: $out"
fi
# No Service network here (no kube-proxy): the API server could not reach the webhook through the Service;
# tests/e2e/chart.sh covers the webhook called by the API server (by URL).
K delete mutatingwebhookconfiguration hami-scheduler >/dev/null 2>&1
SA_TOKEN="$(K create token hami-scheduler -n kube-system --duration=1h 2>&1)"
SA_KUBECONFIG="$WORK/kubeconfig-hami-scheduler"
cat > "$SA_KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hami-e2e
  cluster: {server: "$HAMI_E2E_APISERVER", certificate-authority: "$HAMI_E2E_CA"}
users:
- name: hami-scheduler
  user: {token: "$SA_TOKEN"}
contexts:
- name: hami-scheduler
  context: {cluster: hami-e2e, user: hami-scheduler, namespace: kube-system}
current-context: hami-scheduler
EOF
chmod 600 "$SA_KUBECONFIG"
who="$(timeout 30 "$KUBECTL" --kubeconfig "$SA_KUBECONFIG" auth whoami -o 'jsonpath={.status.userInfo.username}' 2>&1)"
if [ "$who" = system:serviceaccount:kube-system:hami-scheduler ]; then
  ok "token of the deploy ServiceAccount authenticates as $who"
else
  bad "ServiceAccount token: $who (serve falls back to the admin kubeconfig)"
  SA_KUBECONFIG="$HAMI_E2E_KUBECONFIG"
fi

# ------------------------------------------------------------------ our processes
"$HAMI" serve --kubeconfig "$SA_KUBECONFIG" --http_bind "127.0.0.1:$EXT_PORT" \
  --metrics-bind-address "127.0.0.1:$METRICS_PORT" --health-check-interval 2s \
  --webhook-bind "127.0.0.1:$WEBHOOK_PORT" --webhook-cert-file "$WORK/webhook-tls.crt" --webhook-key-file "$WORK/webhook-tls.key" \
  --device-config-file "$ROOT/deploy/device-config.yaml" --enable-ascend=true --enable-iluvatar=true > "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
SERVE_PID=$!
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" \
  --node gpu-a=nvidia:2x16384:10:NVIDIA-Tesla-T4 --node gpu-b=nvidia:2x32768:10:NVIDIA-V100 \
  --node dcu-1=hygon:2x65536:4:DCU-K100 --node npu-1=Ascend910B3:8x65536:4:Ascend910B3 \
  --node npu-c=Ascend910C:4x65536:4:Ascend910C --node xpu-w=kunlun:8x98304:100:kunlun \
  --node xpu-v=XPU:8x98304:4:XPU --node ilu-1=MR-V100:3x32768:10:MR-V100 \
  --node neu-1=AWSNeuron:8x1:2:AWSNeuron --node amd-1=amd:2x196608:4:AMD-Instinct-MI300X \
  --node va-1=vastai:4x32768:4:Vastai --node br-1=biren:2x32768:4:Biren \
  --node gcu-1=GCU:2x100:1:GCU --node drs-1=Enflame:2x40960:6:Enflame \
  --node mx-1=Metax-GPU:2x65536:1:Metax-GPU --node sg-1=Metax-SGPU:2x65536:16:Metax-SGPU \
  --allocate-delay 20ms --register-interval 5s \
  --device-config-file "$ROOT/deploy/device-config.yaml" > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!

t0=$(date +%s)
if wait_for 60 curl -fsS --max-time 3 "$EXT/readyz"; then
  ok "hami-scheduler serve ready (/readyz) after $(( $(date +%s) - t0 ))s"
else
  bad "serve not ready within 60s"; dump_logs; finish
fi
metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics"; }
# The webhook listener, by the Service's name, with the certificate deploy/webhook-cert.sh made.
SVC=hami-scheduler.kube-system.svc
review='{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"e2e-1","kind":{"kind":"Pod"},"namespace":"default","operation":"CREATE","object":{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpumem":"100"}}}]}}}}'
answer="$(curl -fsS --max-time 5 --cacert "$WORK/webhook-ca.crt" --resolve "$SVC:$WEBHOOK_PORT:127.0.0.1" \
  -H 'Content-Type: application/json' -d "$review" "https://$SVC:$WEBHOOK_PORT/webhook" 2>&1)"
if [[ "$answer" == *'"uid":"e2e-1","allowed":true'*'"patchType":"JSONPatch"'* ]] &&
   [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -d "$review" "$EXT/webhook")" = 404 ]; then
  ok "--webhook-bind serves /webhook over TLS as $SVC with deploy's certificate; the loopback extender does not serve it"
else
  bad "webhook listener: $answer"
fi
all_nodes_registered() { metrics | has -x 'hami_scheduler_nodes 16'; }
nodes_ready() {
  [ "$(K get nodes -o 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}/{.status.allocatable.pods} {end}')" = \
    "amd-1=True/110 br-1=True/110 dcu-1=True/110 drs-1=True/110 gcu-1=True/110 gpu-a=True/110 gpu-b=True/110 ilu-1=True/110 mx-1=True/110 neu-1=True/110 npu-1=True/110 npu-c=True/110 sg-1=True/110 va-1=True/110 xpu-v=True/110 xpu-w=True/110 " ]
}
if wait_for 60 nodes_ready && wait_for 60 all_nodes_registered; then
  ok "sim-device-plugins created 16 Ready nodes and the scheduler registered their devices after $(( $(date +%s) - t0 ))s"
else
  bad "nodes not created or not registered within 60s: $(K get nodes 2>&1 | tr '\n' ' ') $(metrics 2>&1 | grep '^hami_scheduler_nodes')"
  dump_logs; finish
fi

# ------------------------------------------------------------------ pods
# pod NAME LIMITS-JSON: a pod for hami-scheduler with the given limits and a small cpu/memory request.
pod() {
  K create -f - <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$1", "namespace": "default"},
 "spec": {"schedulerName": "hami-scheduler",
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": $2}}]}}
EOF
}
jp() { K get pod "$1" -n default -o "jsonpath=$2" 2>/dev/null; }
annotation() { jp "$1" "{.metadata.annotations.${2//./\\.}}"; }
bound_and_allocated() { [ -n "$(jp "$1" '{.spec.nodeName}')" ] && [ "$(annotation "$1" hami.io/bind-phase)" = success ]; }

# check_pod NAME NODE ALLOCATED-KEY TO-ALLOCATE-KEY MEMORY
check_pod() {
  local name="$1" node="$2" key="$3" to_key="$4" mem="$5" got allocated
  if ! wait_for 60 bound_and_allocated "$name"; then
    bad "$name: not bound and allocated within 60s (nodeName='$(jp "$name" '{.spec.nodeName}')', bind-phase='$(annotation "$name" hami.io/bind-phase)')"
    K get events -n default --field-selector "involvedObject.name=$name" 2>&1 | tail -n 5
    return
  fi
  got="$(jp "$name" '{.spec.nodeName}')"
  allocated="$(annotation "$name" "$key")"
  local problems=""
  [ "$got" = "$node" ] || problems+=" spec.nodeName=$got (want $node);"
  [ "$(annotation "$name" hami.io/vgpu-node)" = "$node" ] || problems+=" hami.io/vgpu-node='$(annotation "$name" hami.io/vgpu-node)';"
  [[ "$allocated" == *",$mem,"* ]] || problems+=" $key='$allocated' (want $mem MiB);"
  [ "$(annotation "$name" "$to_key")" = ";" ] || problems+=" $to_key='$(annotation "$name" "$to_key")' (want ';');"
  if [ -z "$problems" ]; then
    ok "$name on $node: $key=$allocated, bind-phase success, $to_key ';'"
  else
    bad "$name:$problems"
  fi
}

NV_ALLOC=hami.io/vgpu-devices-allocated
NV_TODO=hami.io/vgpu-devices-to-allocate
# Both NVIDIA nodes are empty: the tie goes to the smaller name (gpu-a).
pod gpu-3000 '{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}' >/dev/null
check_pod gpu-3000 gpu-a "$NV_ALLOC" "$NV_TODO" 3000
# 20000 MiB only fits the 32 GiB cards.
pod gpu-20000 '{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}' >/dev/null
check_pod gpu-20000 gpu-b "$NV_ALLOC" "$NV_TODO" 20000
pod dcu-2000 '{"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "60"}' >/dev/null
# deploy/device-config.yaml sets Hygon's to-allocate key to the one HAMi's DCU plugin reads (the default,
# docs/DECISIONS.md, D2, is hami.io/hcu-devices-to-allocate).
check_pod dcu-2000 dcu-1 hami.io/dcu-devices-allocated hami.io/dcu-devices-to-allocate 2000

# Ascend 910B3 (HAMi's chart chips, --enable-ascend): a 16 GiB vNPU carved by its template, and two whole
# NPUs from one ring (network group) of the node.
pod npu-vnpu '{"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}' >/dev/null
check_pod npu-vnpu npu-1 hami.io/Ascend910B3-devices-allocated hami.io/Ascend910B3-devices-to-allocate 16384
runtime_json="$(annotation npu-vnpu huawei.com/Ascend910B3)"
if [[ "$runtime_json" == '[{"UUID":"'*'","temp":"vir05_1c_16g","memory":16384}]' ]] && [[ "$(annotation npu-vnpu predicate-time)" =~ ^[0-9]+$ ]]; then
  ok "npu-vnpu: huawei.com/Ascend910B3=$runtime_json and predicate-time for the Ascend plugin"
else
  bad "npu-vnpu: huawei.com/Ascend910B3='$runtime_json' predicate-time='$(annotation npu-vnpu predicate-time)'"
fi
pod npu-pair '{"huawei.com/Ascend910B3": "2"}' >/dev/null
check_pod npu-pair npu-1 hami.io/Ascend910B3-devices-allocated hami.io/Ascend910B3-devices-to-allocate 65536
# Both cards in one ring: the NetworkID the plugin published for each chosen UUID.
rings="$(python3 - "$(K get node npu-1 -o 'jsonpath={.metadata.annotations.hami\.io/node-register-Ascend910B3}')" \
  "$(annotation npu-pair huawei.com/Ascend910B3)" <<'PY'
import json, sys
network = {d["id"]: d.get("custominfo", {}).get("NetworkID") for d in json.loads(sys.argv[1])}
print(" ".join(str(network.get(c["UUID"])) for c in json.loads(sys.argv[2])))
PY
)"
read -r ring_a ring_b ring_more <<< "$rings"
if [ -n "$ring_a" ] && [ "$ring_a" != None ] && [ "$ring_a" = "$ring_b" ] && [ -z "$ring_more" ]; then
  ok "npu-pair: both NPUs in one ring (NetworkID $rings)"
else
  bad "npu-pair: NetworkIDs of its NPUs '$rings' (want two equal)"
fi
# A 910C pair takes one whole module (chips 2i and 2i+1).
pod npu-module '{"huawei.com/Ascend910C": "2"}' >/dev/null
check_pod npu-module npu-c hami.io/Ascend910C-devices-allocated hami.io/Ascend910C-devices-to-allocate 65536
module="$(annotation npu-module hami.io/Ascend910C-devices-allocated | tr ':' '\n' | sed -n 's/^Ascend910C-npu-c-\([0-9]\),.*/\1/p' | sort | tr '\n' ' ')"
if [ "$module" = "0 1 " ] || [ "$module" = "2 3 " ]; then
  ok "npu-module: the NPUs of one module ($module)"
else
  bad "npu-module: NPUs '$module' are not one module"
fi
# hami-core soft split on a node that offers it (the Ascend plugin's node annotation): memory and core
# percent as asked, no template in the runtime JSON.
K annotate node npu-1 hami-vnpu-core=true >/dev/null
K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "npu-soft", "namespace": "default", "annotations": {"huawei.com/vnpu-mode": "hami-core"}},
 "spec": {"schedulerName": "hami-scheduler",
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"limits": {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "8192",
                                                   "huawei.com/Ascend910B3-core": "30"}}}]}}
EOF
check_pod npu-soft npu-1 hami.io/Ascend910B3-devices-allocated hami.io/Ascend910B3-devices-to-allocate 8192
soft_json="$(annotation npu-soft huawei.com/Ascend910B3)"
if [[ "$soft_json" == '[{"UUID":"'*'","memory":8192,"core":30}]' ]]; then
  ok "npu-soft: huawei.com/Ascend910B3=$soft_json"
else
  bad "npu-soft: huawei.com/Ascend910B3='$soft_json'"
fi

# Kunlunxin: two whole XPUs from one wing of the interconnect (cards 0-3 or 4-7), the card indexes handed to
# the plugin; a vXPU of 20000 MiB is a quarter card, and a half card does not join the quarter's card.
pod xpu-pair '{"kunlunxin.com/xpu": "2"}' >/dev/null
if wait_for 60 bound_and_allocated xpu-pair; then
  xpu_alloc="$(annotation xpu-pair hami.io/kunlun-allocated)"
  xpu_idx="$(annotation xpu-pair BAIDU_COM_DEVICE_IDX)"
  wings="$(python3 -c 'import sys; print(len({int(i) // 4 for i in sys.argv[1].split(",")}))' "$xpu_idx" 2>/dev/null)"
  if [ "$(jp xpu-pair '{.spec.nodeName}')" = xpu-w ] && [[ "$xpu_alloc" == xpu-w-kunlun-*,kunlun,98304,100:xpu-w-kunlun-*,kunlun,98304,100:\; ]] &&
     [ "$wings" = 1 ] && [ -z "$(annotation xpu-pair hami.io/xpu-devices-to-allocate)" ]; then
    ok "xpu-pair on xpu-w: hami.io/kunlun-allocated=$xpu_alloc, BAIDU_COM_DEVICE_IDX=$xpu_idx (one wing)"
  else
    bad "xpu-pair: node=$(jp xpu-pair '{.spec.nodeName}') allocated='$xpu_alloc' BAIDU_COM_DEVICE_IDX='$xpu_idx'"
  fi
else
  bad "xpu-pair: not bound and allocated within 60s (nodeName='$(jp xpu-pair '{.spec.nodeName}')', bind-phase='$(annotation xpu-pair hami.io/bind-phase)')"
fi
pod vxpu-quarter '{"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "20000"}' >/dev/null
check_pod vxpu-quarter xpu-v hami.io/xpu-devices-allocated hami.io/xpu-devices-to-allocate 24576
pod vxpu-half '{"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "40000"}' >/dev/null
check_pod vxpu-half xpu-v hami.io/xpu-devices-allocated hami.io/xpu-devices-to-allocate 49152
quarter_card="$(annotation vxpu-quarter hami.io/xpu-devices-allocated | cut -d, -f1)"
half_card="$(annotation vxpu-half hami.io/xpu-devices-allocated | cut -d, -f1)"
if [ -n "$quarter_card" ] && [ -n "$half_card" ] && [ "$quarter_card" != "$half_card" ]; then
  ok "vxpu-half on $half_card, not on the quarter's card $quarter_card (one vXPU size per card)"
else
  bad "vxpu-half on '$half_card', the quarter on '$quarter_card'"
fi

# Iluvatar MR-V100: a slice of 16 units of 256 MiB and half the cores; two cards with the cores the webhook
# writes for them (count x 100) are both taken whole.
pod ilu-slice '{"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "16", "iluvatar.ai/MR-V100.vCore": "50"}' >/dev/null
check_pod ilu-slice ilu-1 hami.io/MR-V100-devices-allocated hami.io/MR-V100-devices-to-allocate 4096
pod ilu-two '{"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "200"}' >/dev/null
if wait_for 60 bound_and_allocated ilu-two; then ok "ilu-two bound and allocated"; else bad "ilu-two not bound"; fi
ilu_two="$(annotation ilu-two hami.io/MR-V100-devices-allocated)"
if [ "$(jp ilu-two '{.spec.nodeName}')" = ilu-1 ] && [ "$(tr ':' '\n' <<<"$ilu_two" | grep -c ',MR-V100,32768,100$')" = 2 ]; then
  ok "ilu-two: both cards whole ($ilu_two)"
else
  bad "ilu-two: node=$(jp ilu-two '{.spec.nodeName}') allocated='$ilu_two'"
fi

# AWS Neuron: one NeuronCore (a bit of one device's mask) and four whole devices, an aligned window of idle
# devices; the plugin reads the cores or devices in AWS_NEURON_IDS.
pod neuron-core '{"aws.amazon.com/neuroncore": "1"}' >/dev/null
pod neuron-four '{"aws.amazon.com/neuron": "4"}' >/dev/null
for p in neuron-core neuron-four; do
  wait_for 60 bound_and_allocated "$p" || bad "$p: not bound and allocated within 60s"
done
core_alloc="$(annotation neuron-core hami.io/aws-neuron-devices-allocated)"
core_ids="$(annotation neuron-core AWS_NEURON_IDS)"
four_ids="$(annotation neuron-four AWS_NEURON_IDS)"
if [[ "$core_alloc" =~ ^neu-1-AWSNeuron-[0-7],AWSNeuron,0,1:\;$ ]] && [[ "$core_ids" =~ ^[0-9]+$ ]] &&
   [ "$(annotation neuron-core NEURON_RESOURCE_TYPE)" = aws.amazon.com/neuroncore ] &&
   [[ "$four_ids" =~ ^(0,1,2,3|4,5,6,7)$ ]] && [ "$(jp neuron-four '{.spec.nodeName}')" = neu-1 ]; then
  ok "neuron-core: $core_alloc (core $core_ids); neuron-four: devices $four_ids, an aligned window"
else
  bad "neuron: core '$core_alloc' ids '$core_ids'; four ids '$four_ids' on $(jp neuron-four '{.spec.nodeName}')"
fi
# AMD: a quarter of an MI300X (the plugin publishes its 304 compute units: 25 % are 76), then a whole card
# (all its memory and units) on the other GPU; the allocation names each card by its registered type.
pod amd-quarter '{"amd.com/gpu": "1", "amd.com/gpumem": "16384", "amd.com/gpucores": "25"}' >/dev/null
check_pod amd-quarter amd-1 hami.io/amd-devices-allocated hami.io/amd-devices-to-allocate 16384
pod amd-whole '{"amd.com/gpu": "1"}' >/dev/null
check_pod amd-whole amd-1 hami.io/amd-devices-allocated hami.io/amd-devices-to-allocate 196608
amd_quarter="$(annotation amd-quarter hami.io/amd-devices-allocated)"
amd_whole="$(annotation amd-whole hami.io/amd-devices-allocated)"
if [[ "$amd_quarter" == AMD-amd-1-*,AMD-Instinct-MI300X,16384,76:\; ]] &&
   [[ "$amd_whole" == AMD-amd-1-*,AMD-Instinct-MI300X,196608,304:\; ]] &&
   [ "${amd_quarter%%,*}" != "${amd_whole%%,*}" ]; then
  ok "amd: 25 % of the MI300X's compute units are 76 ($amd_quarter), the whole card all 304 ($amd_whole)"
else
  bad "amd: amd-quarter='$amd_quarter' amd-whole='$amd_whole'"
fi
# Vastai and Biren: devices shared by count, no memory or cores booked (the pod keys carry the vendor key's
# capital).
pod va-pair '{"vastaitech.com/va": "2"}' >/dev/null
check_pod va-pair va-1 hami.io/Vastai-devices-allocated hami.io/Vastai-devices-to-allocate 0
va_alloc="$(annotation va-pair hami.io/Vastai-devices-allocated)"
if [[ "$va_alloc" == Vastai-va-1-*,Vastai,0,0:Vastai-va-1-*,Vastai,0,0:\; ]]; then
  ok "va-pair: two Vastai devices, $va_alloc"
else
  bad "va-pair: hami.io/Vastai-devices-allocated='$va_alloc'"
fi
pod br-one '{"birentech.com/gpu": "1"}' >/dev/null
check_pod br-one br-1 hami.io/Biren-devices-allocated hami.io/Biren-devices-to-allocate 0

# Enflame: a whole GCU (placeholder 100 MiB and 100 cores, a to-allocate list as most vendors'), and a DRS
# partition named in slices: drs-gcu 3 is the card's 3g.20gb profile (20 GB, half the cores of six slices),
# with the keys the DRS plugin reads (no to-allocate list: the simulated plugin answers the allocated one).
pod gcu-one '{"enflame.com/gcu": "1"}' >/dev/null
check_pod gcu-one gcu-1 hami.io/enflame-gcu-devices-allocated hami.io/enflame-gcu-devices-to-allocate 100
pod drs-three '{"enflame.com/drs-gcu": "3"}' >/dev/null
if wait_for 60 bound_and_allocated drs-three; then
  drs_alloc="$(annotation drs-three hami.io/enflame-vgpu-devices-allocated)"
  drs_containers="$(annotation drs-three assigned-containers)"
  drs_index="$(annotation drs-three enflame.com/gcu-assigned-index)"
  if [ "$(jp drs-three '{.spec.nodeName}')" = drs-1 ] && [ "$drs_alloc" = "drs-1-enflame-drs-$drs_index,Enflame,20480,50:;" ] &&
     [ "$(annotation drs-three enflame.com/gcu-assigned)" = false ] &&
     [ "$(annotation drs-three enflame.com/gcu-assigned-minor)" = "$drs_index" ] &&
     [ "$(annotation drs-three enflame.com/gcu-request-size)" = 3 ] &&
     [ "$drs_containers" = '{"app":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}' ] &&
     [ -z "$(annotation drs-three hami.io/enflame-vgpu-devices-to-allocate)" ]; then
    ok "drs-three on drs-1: $drs_alloc (3g.20gb), assigned-containers=$drs_containers"
  else
    bad "drs-three: node=$(jp drs-three '{.spec.nodeName}') allocated='$drs_alloc' index='$drs_index' assigned-containers='$drs_containers' size='$(annotation drs-three enflame.com/gcu-request-size)'"
  fi
else
  bad "drs-three: not bound and allocated within 60s (nodeName='$(jp drs-three '{.spec.nodeName}')', bind-phase='$(annotation drs-three hami.io/bind-phase)')"
fi

# MetaX: a whole card (placeholder 65536 MiB), an sGPU of 16 GiB and a quarter of the compute with the
# plugin's JSON, and an online sGPU, which takes memory only: no compute charged or written.
pod mx-one '{"metax-tech.com/gpu": "1"}' >/dev/null
check_pod mx-one mx-1 hami.io/metax-gpu-devices-allocated hami.io/metax-gpu-devices-to-allocate 65536
pod sg-quarter '{"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "16", "metax-tech.com/vcore": "25"}' >/dev/null
check_pod sg-quarter sg-1 hami.io/metax-sgpu-devices-allocated hami.io/metax-sgpu-devices-to-allocate 16384
sg_json="$(annotation sg-quarter metax-tech.com/gpu-devices-allocated)"
if [[ "$sg_json" == '[[{"uuid":"Metax-SGPU-sg-1-'[01]'","compute":25,"vRam":16384}]]' ]] &&
   [ -n "$(annotation sg-quarter metax-tech.com/predicate-time)" ]; then
  ok "sg-quarter: metax-tech.com/gpu-devices-allocated=$sg_json"
else
  bad "sg-quarter: metax-tech.com/gpu-devices-allocated='$sg_json' predicate-time='$(annotation sg-quarter metax-tech.com/predicate-time)'"
fi
K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "sg-online", "namespace": "default",
              "annotations": {"metax-tech.com/sgpu-app-class": "online"}},
 "spec": {"schedulerName": "hami-scheduler",
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                        "limits": {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "8",
                                                   "metax-tech.com/vcore": "50"}}}]}}
EOF
if wait_for 60 bound_and_allocated sg-online; then
  online_alloc="$(annotation sg-online hami.io/metax-sgpu-devices-allocated)"
  if [ "$(jp sg-online '{.spec.nodeName}')" = sg-1 ] && [[ "$online_alloc" == *",Metax-SGPU,8192,0:;" ]] &&
     [[ "$(annotation sg-online metax-tech.com/gpu-devices-allocated)" != *compute* ]]; then
    ok "sg-online on sg-1: $online_alloc (no compute)"
  else
    bad "sg-online: node=$(jp sg-online '{.spec.nodeName}') allocated='$online_alloc'"
  fi
else
  bad "sg-online: not bound and allocated within 60s (nodeName='$(jp sg-online '{.spec.nodeName}')')"
fi

pod gpu-too-big '{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000000"}' >/dev/null
failed_scheduling() {
  K get events -n default --field-selector involvedObject.name=gpu-too-big,reason=FailedScheduling \
    -o 'jsonpath={range .items[*]}{.source.component}{.reportingComponent}: {.message}{"\n"}{end}' | has CardInsufficientMemory
}
if wait_for 60 failed_scheduling; then
  event="$(K get events -n default --field-selector involvedObject.name=gpu-too-big,reason=FailedScheduling \
    -o 'jsonpath={range .items[*]}{.reportingComponent}{.source.component}: {.message}{"\n"}{end}' | grep CardInsufficientMemory | head -n 1)"
  if [ -z "$(jp gpu-too-big '{.spec.nodeName}')" ] && [ "$(jp gpu-too-big '{.status.phase}')" = Pending ]; then
    ok "gpu-too-big stays Pending with a FailedScheduling event: $event"
  else
    bad "gpu-too-big was placed: nodeName='$(jp gpu-too-big '{.spec.nodeName}')'"
  fi
else
  bad "no FailedScheduling event naming CardInsufficientMemory for gpu-too-big within 60s: $(K get events -n default --field-selector involvedObject.name=gpu-too-big 2>&1 | tail -n 3)"
fi

# Events recorded by serve itself (under the ServiceAccount): the RBAC allows events too.
our_events() { K get events -n default -o 'jsonpath={range .items[*]}{.involvedObject.name}/{.reason} {end}'; }
has_our_events() {
  local e; e="$(our_events)"
  [[ "$e" == *"gpu-3000/FilteringSucceed "* && "$e" == *"gpu-3000/BindingSucceed "* && "$e" == *"gpu-too-big/FilteringFailed "* ]]
}
if wait_for 30 has_our_events; then
  ok "serve recorded FilteringSucceed, BindingSucceed and FilteringFailed events"
else
  bad "events of serve missing: $(our_events 2>&1)"
fi
if grep -Eiq 'forbidden|unauthorized' "$WORK/logs/hami-serve.log"; then
  bad "serve hit permission errors with the deploy ServiceAccount: $(grep -Ei 'forbidden|unauthorized' "$WORK/logs/hami-serve.log" | head -n 3)"
else
  ok "serve logged no permission errors with the deploy ServiceAccount's RBAC"
fi

locks="$(K get nodes -o 'jsonpath={range .items[*]}{.metadata.name}={.metadata.annotations.hami\.io/mutex\.lock} {end}')"
if [ "$locks" = "amd-1= br-1= dcu-1= drs-1= gcu-1= gpu-a= gpu-b= ilu-1= mx-1= neu-1= npu-1= npu-c= sg-1= va-1= xpu-v= xpu-w= " ]; then
  ok "no hami.io/mutex.lock left on the nodes"
else
  bad "node locks left behind: $locks"
fi

allocated_metric() { metrics | grep -E '^hami_gpu_memory_allocated_bytes\{[^}]*node="gpu-a"[^}]*\} 3145728000$'; }
if line="$(allocated_metric)" && [ -n "$line" ]; then
  ok "/metrics: $line"
else
  bad "/metrics has no hami_gpu_memory_allocated_bytes of 3000 MiB on gpu-a: $(metrics 2>&1 | grep '^hami_gpu_memory_allocated_bytes' | head -n 4)"
fi

# HAMi's gauges carry the NPUs as they carry GPUs: npu-vnpu's 16384 MiB on its card.
npu_metric() { metrics | grep -E '^hami_gpu_memory_allocated_bytes\{[^}]*node="npu-1"[^}]*\} 17179869184$'; }
if line="$(npu_metric)" && [ -n "$line" ]; then
  ok "/metrics: $line"
else
  bad "/metrics has no hami_gpu_memory_allocated_bytes of 16384 MiB on npu-1: $(metrics 2>&1 | grep '^hami_gpu_memory_allocated_bytes' | grep npu | head -n 4)"
fi

allocations="$(grep -c ' allocated default/' "$WORK/logs/sim-device-plugins.log")"
if [ "$allocations" = 23 ]; then
  ok "sim-device-plugins logged 23 allocations"
else
  bad "sim-device-plugins logged $allocations allocations (want 23)"
fi

# ------------------------------------------------------------------ graceful stop
RC=""
term_and_wait() { # pid: sets RC to the exit status after SIGTERM, or "timeout" after 20 s
  local pid="$1" deadline=$(( $(date +%s) + 20 ))
  kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || { RC=timeout; return; }
    sleep 0.2
  done
  wait "$pid"
  RC=$?
}
term_and_wait "$SERVE_PID"
if [ "$RC" = 0 ]; then
  ok "serve exits 0 on SIGTERM"; SERVE_PID=""
else
  bad "serve after SIGTERM: exit $RC"; dump_logs
fi
term_and_wait "$PLUGINS_PID"
if [ "$RC" = 0 ]; then
  ok "sim-device-plugins exits 0 on SIGTERM"; PLUGINS_PID=""
else
  bad "sim-device-plugins after SIGTERM: exit $RC"
fi

finish
