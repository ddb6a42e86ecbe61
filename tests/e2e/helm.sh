#!/usr/bin/env bash
# e2e of the Helm chart charts/hami-scheduler: helm built from its Go module (build-helm.sh), then
#  - `helm lint --strict`;
#  - `helm template` in every shape (default; an operator's HAMi values file, tests/e2e/chart-v2.10.0/
#    values-operator.yaml; without the kube-scheduler sidecar; without the webhook; cert-manager; ServiceMonitor
#    and Grafana dashboard; remote GPUs on; a config change) with the rendered objects checked (helm_checks.py);
#  - the renderings accepted by the REAL kube-apiserver (`kubectl apply --dry-run=server`; cert-manager's and the
#    Prometheus operator's kinds are left out, their CRDs are not installed), then the default one applied;
#  - the extender's command line as the operator's values render it, loaded by our binary (--print-config):
#    the settings HAMi's chart gives from those values.
#
#   tests/e2e/helm.sh [PATH/TO/hami-scheduler]   # default: ${BUILD_DIR:-build}/hami-scheduler
#
# Ends with "e2e helm: N passed, M failed". Bounded by HAMI_E2E_HELM_TIMEOUT seconds.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
CHART="$ROOT/charts/hami-scheduler"
source "$E2E_DIR/suite.sh"
bounded_reexec helm HELM "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
if ! HELM="$(bash "$E2E_DIR/build-helm.sh")"; then bad "build helm (see the messages above)"; finish; fi
if ! BIN="$(bash "$E2E_DIR/build.sh")"; then bad "build the control plane (see the messages above)"; finish; fi
export HAMI_E2E_BIN="$BIN"
KUBECTL="$BIN/kubectl"
# The cluster version the renderings are made for (--kube-version; the chart picks kube-scheduler's image tag
# from it and helm_checks.py expects v1.36.3). It need not be the control plane's release (go.mod): the
# renderings are also accepted and applied by that newer kube-apiserver below.
KUBE_VERSION=1.36.3

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-helm.XXXXXX")"
SCHED=""
cleanup() {
  stop_pid "$SCHED"
  bash "$E2E_DIR/stop.sh" "$WORK" >/dev/null 2>&1
  if [ "$FAIL" = 0 ] && [ "${HAMI_E2E_KEEP_WORK:-0}" != 1 ]; then rm -rf "$WORK"; else log "work dir kept: $WORK"; fi
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM
mkdir -p "$WORK/logs"

if "$HELM" lint --strict "$CHART" --kube-version "$KUBE_VERSION" > "$WORK/logs/lint.log" 2>&1; then
  ok "helm lint --strict ($("$HELM" version --template '{{.Version}}'))"
else
  cat "$WORK/logs/lint.log"; bad "helm lint --strict"
fi

render() { # NAME ARGS...: renders into $WORK/NAME.yaml
  local name="$1"; shift
  if "$HELM" template hami "$CHART" --namespace kube-system --kube-version "$KUBE_VERSION" "$@" \
       > "$WORK/$name.yaml" 2> "$WORK/logs/render-$name.log"; then
    return 0
  fi
  cat "$WORK/logs/render-$name.log"; bad "helm template ($name)"; return 1
}
checks() { # CASE FILES...: helm_checks.py's lines become checks
  local line
  while IFS= read -r line; do
    case "$line" in PASS:*) ok "${line#PASS: }" ;; *) bad "${line#FAIL: }" ;; esac
  done < <(python3 "$E2E_DIR/helm_checks.py" "$@" 2>&1)
}
render default && checks default "$WORK/default.yaml"
render operator -f "$E2E_DIR/chart-v2.10.0/values-operator.yaml" && checks operator "$WORK/operator.yaml"
render low-port --set scheduler.service.httpTargetPort=443 && checks low-port "$WORK/low-port.yaml"
render all-fitting --set scheduler.filterMode=all-fitting --set scheduler.kubeScheduler.extenderWeight=5 &&
  checks all-fitting "$WORK/all-fitting.yaml"
if "$HELM" template hami "$CHART" --kube-version "$KUBE_VERSION" --set scheduler.filterMode=best \
     > /dev/null 2> "$WORK/logs/render-bad-mode.log"; then
  bad "scheduler.filterMode=best rendered; the chart should refuse it"
else
  grep -q 'scheduler.filterMode "best": expected one-node or all-fitting' "$WORK/logs/render-bad-mode.log" &&
    ok "scheduler.filterMode=best is refused, naming the value and what is expected" ||
    bad "scheduler.filterMode=best refused without the expected message: $(cat "$WORK/logs/render-bad-mode.log")"
fi
render acquire --set scheduler.kubeScheduler.enabled=false && checks acquire "$WORK/acquire.yaml"
render no-webhook --set scheduler.admissionWebhook.enabled=false && checks no-webhook "$WORK/no-webhook.yaml"
render cert-manager --set scheduler.certManager.enabled=true && checks cert-manager "$WORK/cert-manager.yaml"
render no-enflame --set devices.enflame.enabled=false && checks no-enflame "$WORK/no-enflame.yaml"
render no-metax --set devices.metax.enabled=false && checks no-metax "$WORK/no-metax.yaml"
render monitoring --set prometheus.enabled=true --set grafanaDashboard.enabled=true \
  --api-versions monitoring.coreos.com/v1/ServiceMonitor && checks monitoring "$WORK/monitoring.yaml" "$CHART/files/hami-scheduler.json"
render ascend --set devices.ascend.enabled=true --set devices.ascend.hamiVnpuCore=true \
  --set devices.ascend.runtimeClassName=ascend && checks ascend "$WORK/ascend.yaml"
render ascend-chips --set devices.ascend.enabled=true --set 'devices.ascend.vnpus[0].commonWord=MyNpu' \
  --set 'devices.ascend.vnpus[0].resourceName=example.com/npu' \
  --set 'devices.ascend.vnpus[0].resourceMemoryName=example.com/npu-memory' \
  --set 'devices.ascend.vnpus[0].memoryAllocatable=4096' && checks ascend-chips "$WORK/ascend-chips.yaml"
# Both device configs load in our binary with --enable-ascend and build their chips.
for name in ascend ascend-chips; do
  python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-device"):
        print(d["data"]["device-config.yaml"])' "$WORK/$name.yaml" > "$WORK/$name-device-config.yaml"
  if "$HAMI" config --enable-ascend=true --device-config-file "$WORK/$name-device-config.yaml" \
       > "$WORK/$name-config.yaml" 2> "$WORK/logs/$name-config.log" && ! grep -qi 'ascend\|vnpus' "$WORK/logs/$name-config.log"; then
    ok "our binary loads the $name rendering's device config with --enable-ascend, without a warning about it"
  else
    cat "$WORK/logs/$name-config.log"; bad "our binary and the $name rendering's device config"
  fi
done
render iluvatar --set devices.iluvatar.enabled=true && checks iluvatar "$WORK/iluvatar.yaml"
python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-device"):
        print(d["data"]["device-config.yaml"])' "$WORK/iluvatar.yaml" > "$WORK/iluvatar-device-config.yaml"
if "$HAMI" config --enable-iluvatar=true --device-config-file "$WORK/iluvatar-device-config.yaml" --print-config \
     > "$WORK/iluvatar-config.yaml" 2> "$WORK/logs/iluvatar-config.log" && ! grep -qi 'iluvatar\|kunlun' "$WORK/logs/iluvatar-config.log" &&
   [ "$(grep -c 'commonWord:' "$WORK/iluvatar-config.yaml")" -ge 4 ]; then
  ok "our binary loads the iluvatar rendering's device config with --enable-iluvatar, without a warning about it"
else
  cat "$WORK/logs/iluvatar-config.log"; bad "our binary and the iluvatar rendering's device config"
fi
# Remote GPUs: off by default; on, the device config's remotegpu section loads in our binary and both
# resources are the extender's managedResources.
! grep -q 'remote-gpu' "$WORK/default.yaml" && ok "remote GPUs: off in the default rendering" ||
  bad "remote GPUs: the default rendering mentions remote-gpu"
if render remotegpu --set devices.remotegpu.enabled=true --set devices.remotegpu.libImage=example.com/hami:v1; then
  python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-device"):
        print(d["data"]["device-config.yaml"])' "$WORK/remotegpu.yaml" > "$WORK/remotegpu-device-config.yaml"
  if "$HAMI" config --device-config-file "$WORK/remotegpu-device-config.yaml" --print-config \
       > "$WORK/remotegpu-config.yaml" 2> "$WORK/logs/remotegpu-config.log" &&
     ! grep -qi 'remotegpu' "$WORK/logs/remotegpu-config.log" &&
     grep -q 'libImage: "example.com/hami:v1"' "$WORK/remotegpu-device-config.yaml"; then
    ok "remote GPUs: our binary loads the rendering's remotegpu section (enabled, libImage) without a warning"
  else
    cat "$WORK/logs/remotegpu-config.log"; bad "remote GPUs: our binary and the rendering's device config"
  fi
  [ "$(grep -c 'name: "nvidia.com/remote-gpu\(-memory\)\?", ignoredByScheduler: true' "$WORK/remotegpu.yaml")" = 2 ] &&
    ok "remote GPUs: both resources are the extender's managedResources" ||
    bad "remote GPUs: managedResources lack nvidia.com/remote-gpu or -memory"
fi
render changed --set devices.nvidia.gpuCorePolicy=force && checks checksum "$WORK/default.yaml" "$WORK/changed.yaml"

# ------------------------------------------------------------------ the operator's command line, loaded by us
python3 - "$WORK/operator.yaml" "$WORK" <<'PYEOF' > "$WORK/operator-args.txt" || bad "extract the operator rendering's command line"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
work = sys.argv[2]
for d in docs:
    if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-device"):
        open(f"{work}/device-config.yaml", "w").write(d["data"]["device-config.yaml"])
    if d["kind"] == "Deployment":
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "vgpu-scheduler-extender":
                args = c["command"]
# The files the pod mounts are the work dir's.
print("\n".join(a.replace("/device-config.yaml", f"{work}/device-config.yaml") for a in args))
PYEOF
mapfile -t ARGS < "$WORK/operator-args.txt"
touch "$WORK/tls.crt" "$WORK/tls.key"
ARGS=("${ARGS[@]//\/tls\//$WORK/}")
if [ "${ARGS[0]:-}" = hami-scheduler ] && "$HAMI" "${ARGS[@]:1}" --print-config > "$WORK/operator-config.yaml" 2> "$WORK/logs/print-config.log"; then
  ok "our binary loads the operator rendering's command line"
  cat > "$WORK/operator-check.py" <<'PYEOF'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
s = cfg["scheduler"]
want = {"schedulerName": "gpu-scheduler", "metricsBindAddress": ":9500", "nodeSchedulerPolicy": "spread",
        "gpuSchedulerPolicy": "binpack", "forceOverwriteDefaultScheduler": False, "leaderElect": True,
        "leaderElectResourceName": "gpu-scheduler", "leaderElectResourceNamespace": "kube-system",
        "leaderElectMode": "follow", "nodeLockTimeout": "10m", "legacyMetrics": True, "logLevel": "trace"}
got = {k: s.get(k) for k in want}
print(("PASS: " if got == want else "FAIL: ") + f"the effective settings are HAMi's from those values: {got}"
      + ("" if got == want else f" (want {want})"))
sel = s.get("nodeLabelSelector")
print(("PASS: " if sel in ({"gpu": "on"}, "gpu=on") else "FAIL: ") + f"nodeLabelSelector {sel}")
nv = cfg.get("nvidia", {})
ok = nv.get("resourceCountName") == "nvidia.com/vgpu" and nv.get("resourceMemoryName") == "nvidia.com/vgpu-memory"
print(("PASS: " if ok else "FAIL: ") + f"the NVIDIA resource names from the values: {nv.get('resourceCountName')}, {nv.get('resourceMemoryName')}")
PYEOF
  # Not a pipe into `while`: that would run in a subshell and lose the counts.
  while IFS= read -r line; do
    case "$line" in PASS:*) ok "${line#PASS: }" ;; *) bad "${line#FAIL: }" ;; esac
  done < <(python3 "$WORK/operator-check.py" "$WORK/operator-config.yaml" 2>&1)
else
  cat "$WORK/logs/print-config.log"; bad "our binary refuses the operator rendering's flags: ${ARGS[*]}"
fi

# ------------------------------------------------------------------ the real API server
if ! bash "$E2E_DIR/start.sh" "$WORK" > "$WORK/logs/start.log" 2>&1; then
  tail -n 40 "$WORK/logs/start.log"; bad "start the control plane"; finish
fi
# shellcheck disable=SC1091
. "$WORK/env"
K() { timeout 60 "$KUBECTL" --kubeconfig "$HAMI_E2E_KUBECONFIG" --request-timeout=30s "$@"; }
# Only what the API server knows: cert-manager's and the Prometheus operator's kinds need their CRDs.
without_crd_kinds() {
  python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] not in ("Issuer", "Certificate", "ServiceMonitor")]
print(yaml.safe_dump_all(docs))' "$1"
}
for name in default operator acquire no-webhook cert-manager monitoring; do
  [ -s "$WORK/$name.yaml" ] || continue
  without_crd_kinds "$WORK/$name.yaml" > "$WORK/$name-core.yaml"
  if K apply --dry-run=server -f "$WORK/$name-core.yaml" > "$WORK/logs/dry-run-$name.log" 2>&1; then
    ok "the real kube-apiserver accepts the $name rendering ($(grep -c . "$WORK/logs/dry-run-$name.log") objects, --dry-run=server)"
  else
    tail -n 20 "$WORK/logs/dry-run-$name.log"; bad "kube-apiserver refuses the $name rendering"
  fi
done
if K apply -f "$WORK/default.yaml" > "$WORK/logs/apply.log" 2>&1; then
  ok "the default rendering applied ($(grep -c . "$WORK/logs/apply.log") objects)"
else
  tail -n 20 "$WORK/logs/apply.log"; bad "apply the default rendering"
fi
if K -n kube-system get deployment/hami-scheduler service/hami-scheduler service/hami-scheduler-metrics \
     configmap/hami-scheduler configmap/hami-scheduler-device role/hami-scheduler-leases > /dev/null 2>&1 &&
   K get mutatingwebhookconfiguration/hami-scheduler-webhook clusterrole/hami-scheduler > /dev/null 2>&1; then
  ok "the objects are there: Deployment, leader and metrics Services, ConfigMaps, RBAC, webhook"
else
  bad "objects of the default rendering are missing"
fi
# The kube-scheduler configuration the chart renders is one the real kube-scheduler loads.
python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-scheduler":
        print(d["data"]["config.yaml"])' "$WORK/default.yaml" > "$WORK/kube-scheduler-config.yaml"
printf 'clientConnection:\n  kubeconfig: %s\n' "$HAMI_E2E_KUBECONFIG" >> "$WORK/kube-scheduler-config.yaml"
"$BIN/kube-scheduler" --config="$WORK/kube-scheduler-config.yaml" --bind-address=127.0.0.1 --secure-port=0 \
  > "$WORK/logs/kube-scheduler.log" 2>&1 &
SCHED=$!
took_lease() { K -n kube-system get lease hami-scheduler -o jsonpath='{.spec.holderIdentity}' | has .; }
if wait_for 60 took_lease; then ok "the real kube-scheduler runs the chart's configuration (it holds Lease kube-system/hami-scheduler)"
else tail -n 20 "$WORK/logs/kube-scheduler.log"; bad "kube-scheduler with the chart's configuration"; fi
stop_pid "$SCHED"; SCHED=""
finish
