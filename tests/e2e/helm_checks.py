#!/usr/bin/env python3
"""Checks on charts/hami-scheduler's renderings, for tests/e2e/helm.sh: prints one line per check,
"PASS: ..." or "FAIL: ...", and exits 1 if any failed.

  helm_checks.py CASE RENDERED.yaml [MORE...]

CASE: default | low-port | operator | acquire | no-webhook | cert-manager | monitoring | checksum (see helm.sh).
"""
import json
import sys

import yaml

failed = 0


def check(ok, what):
    global failed
    print(("PASS: " if ok else "FAIL: ") + what)
    failed += 0 if ok else 1


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    if len(found) != 1:
        raise SystemExit(f"FAIL: want one {kind} {name or ''}, the rendering has {len(found)}")
    return found[0]


def containers(docs):
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def flags(docs):
    return containers(docs)["vgpu-scheduler-extender"]["command"]


def scheduler_config(docs, name="hami-scheduler"):
    return yaml.safe_load(one(docs, "ConfigMap", name)["data"]["config.yaml"])


def device_config(docs, name="hami-scheduler-device"):
    return yaml.safe_load(one(docs, "ConfigMap", name)["data"]["device-config.yaml"])


def default_case(docs):
    f = flags(docs)
    check(f[:2] == ["hami-scheduler", "serve"], "the extender runs `hami-scheduler serve`")
    for want in ["--http_bind=127.0.0.1:8080", "--webhook-bind=0.0.0.0:8443", "--webhook-cert-file=/tls/tls.crt",
                 "--leader-elect=true", "--leader-elect-resource-name=hami-scheduler",
                 "--leader-elect-resource-namespace=kube-system", "--device-config-file=/device-config.yaml"]:
        check(want in f, f"extender flag {want}")
    cfg = scheduler_config(docs)
    check(cfg["leaderElection"]["leaderElect"] is True and cfg["leaderElection"]["resourceName"] == "hami-scheduler",
          "kube-scheduler elects a leader on Lease kube-system/hami-scheduler (the one the extender follows)")
    ext = cfg["extenders"][0]
    check(ext["urlPrefix"] == "http://127.0.0.1:8080" and ext["bindVerb"] == "bind" and ext["nodeCacheCapable"],
          "kube-scheduler calls the extender on the pod's loopback")
    check("--filter-mode=one-node" in f and ext.get("prioritizeVerb") == "prioritize" and ext.get("weight") == 1,
          "one-node filter mode by default, prioritizeVerb registered (called only in all-fitting mode), weight 1")
    names = {r["name"] for r in ext["managedResources"]}
    check({"nvidia.com/gpu", "nvidia.com/gpumem", "cambricon.com/vmlu", "hygon.com/dcunum", "mthreads.com/vgpu"} <= names,
          "managedResources lists every vendor's resources")
    check({"amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores", "vastaitech.com/va", "birentech.com/gpu"} <= names,
          "managedResources lists the AMD, Vastai and Biren resources")
    dev = device_config(docs)
    check((dev["amd"]["resourceCountName"], dev["amd"]["resourceMemoryName"], dev["amd"]["resourceCoreName"],
           dev["vastai"]["resourceCountName"], dev["biren"]["resourceCountName"]) ==
          ("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores", "vastaitech.com/va", "birentech.com/gpu"),
          "the device config's amd, vastai and biren sections as HAMi's chart renders them")
    check(ENFLAME <= names, "managedResources lists the Enflame resources (devices.enflame.enabled by default)")
    check(dev["enflame"] == {"resourceNameGCU": "enflame.com/gcu", "resourceNameDRSGCU": "enflame.com/drs-gcu",
                             "resourceNameGCUMemory": "enflame.com/gcu-memory",
                             "resourceNameGCUCore": "enflame.com/gcu-core"},
          "the device config's enflame section as HAMi's chart renders it")
    check(METAX <= names, "managedResources lists the MetaX resources (devices.metax.enabled by default)")
    check(dev["metax"] == {"resourceCountName": "metax-tech.com/gpu", "resourceVCountName": "metax-tech.com/sgpu",
                           "resourceVMemoryName": "metax-tech.com/vmemory",
                           "resourceVCoreName": "metax-tech.com/vcore", "sgpuTopologyAware": False},
          "the device config's metax section as HAMi's chart renders it (sgpuTopologyAware a YAML bool)")
    svc = one(docs, "Service", "hami-scheduler")
    check(svc["spec"]["selector"].get("hami.io/scheduler-role") == "leader", "the Service selects the leader's pod")
    check(one(docs, "Service", "hami-scheduler-metrics")["spec"]["selector"].get("hami.io/scheduler-role") is None,
          "the metrics Service selects every replica")
    role = one(docs, "Role", "hami-scheduler-leases")
    check([r.get("resourceNames") for r in role["rules"] if "update" in r["verbs"]] ==
          [["hami-scheduler", "hami-scheduler-extender"]], "RBAC: get/update only the two election Leases, by name")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    check(pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, "seccomp RuntimeDefault")
    extender = [c for c in pod["containers"] if c["name"] != "kube-scheduler"][0]
    check(extender["resources"].get("limits", {}).get("memory") == "1Gi",
          "the extender has a memory limit that fits the request body budget")
    cr = one(docs, "ClusterRole", "hami-scheduler")
    check(any("pods" in r["resources"] and "patch" in r["verbs"] for r in cr["rules"]), "RBAC: pod labels and annotations")
    hook = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    check(hook["clientConfig"]["service"] == {"name": "hami-scheduler", "namespace": "kube-system", "path": "/webhook",
                                              "port": 443}, "the webhook goes to the leader's Service")
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
    check(set(jobs) == {"hami-scheduler-admission-create", "hami-scheduler-admission-patch"},
          "self-signed certificate Jobs (create before install, patch after)")
    ann = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    check({"checksum/hami-scheduler-config", "checksum/hami-scheduler-device-config"} <= set(ann), "checksum annotations")
    extender = containers(docs)["vgpu-scheduler-extender"]
    check(extender["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, "readiness on /readyz")
    sc = extender["securityContext"]
    check(sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"] and
          sc["readOnlyRootFilesystem"], "the extender runs as non-root with no capability, read-only")
    check(one(docs, "Service", "hami-scheduler")["spec"]["ports"][0]["targetPort"] == 8443,
          "the Service's port 443 reaches the webhook on 8443")


ASCEND_CHIPS = ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910B4-1", "Ascend310P",
                "Ascend910C"]


ENFLAME = {"enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core", "enflame.com/gcu"}


def no_enflame_case(docs):
    """devices.enflame.enabled=false: its resources unmanaged and its section off."""
    names = {r["name"] for r in scheduler_config(docs)["extenders"][0]["managedResources"]}
    check(not (ENFLAME & names), "Enflame disabled: none of its resources is managed")
    check(device_config(docs)["enflame"] == {"enabled": False}, "Enflame disabled: its section says enabled: false")


METAX = {"metax-tech.com/gpu", "metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore"}


def no_metax_case(docs):
    """devices.metax.enabled=false: its resources unmanaged and its section off."""
    names = {r["name"] for r in scheduler_config(docs)["extenders"][0]["managedResources"]}
    check(not (METAX & names), "MetaX disabled: none of its resources is managed")
    check(device_config(docs)["metax"] == {"enabled": False}, "MetaX disabled: its section says enabled: false")


def ascend_case(docs):
    """devices.ascend.enabled: the flag, the vnpus section, every chip's resources managed."""
    check("--enable-ascend=true" in flags(docs), "Ascend enabled: the extender runs with --enable-ascend=true")
    vnpus = device_config(docs).get("vnpus")
    check(vnpus == {"hamiVnpuCore": True, "runtimeClassName": "ascend", "overwriteEnv": False},
          f"the device config's vnpus section carries the values (the chips built in): {vnpus}")
    names = {r["name"] for r in scheduler_config(docs)["extenders"][0]["managedResources"]}
    want = {f"huawei.com/{c}{s}" for c in ASCEND_CHIPS for s in ("", "-memory", "-core")}
    check(want <= names, f"managedResources lists the 21 Ascend resources (missing: {sorted(want - names)})")
    default_names = {"nvidia.com/gpu", "hygon.com/dcunum"}
    check(default_names <= names, "and still every other vendor's")


def ascend_chips_case(docs):
    """devices.ascend.vnpus: the operator's chips become vnpus.configs."""
    configs = device_config(docs).get("vnpus", {}).get("configs", [])
    check([c.get("commonWord") for c in configs] == ["MyNpu"] and configs[0].get("memoryAllocatable") == 4096,
          f"devices.ascend.vnpus becomes vnpus.configs: {configs}")


def iluvatar_case(docs):
    """devices.iluvatar.enabled: the flag, the iluvatars list of HAMi's four chips, their resources managed;
    Kunlunxin's (devices.kunlun.enabled) and AWS Neuron's resources are managed by default."""
    check("--enable-iluvatar=true" in flags(docs), "Iluvatar enabled: the extender runs with --enable-iluvatar=true")
    chips = device_config(docs).get("iluvatars", [])
    check([c.get("commonWord") for c in chips] == ["MR-V100", "MR-V50", "BI-V150", "BI-V100"] and
          chips[0].get("resourceMemoryName") == "iluvatar.ai/MR-V100.vMem",
          f"the device config lists HAMi's four Iluvatar chips: {chips}")
    names = {r["name"] for r in scheduler_config(docs)["extenders"][0]["managedResources"]}
    want = {f"iluvatar.ai/{c}{s}" for c in ("MR-V100", "MR-V50", "BI-V150", "BI-V100")
            for s in ("-vgpu", ".vMem", ".vCore")}
    want |= {"kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"}
    want |= {"aws.amazon.com/neuron", "aws.amazon.com/neuroncore"}
    check(want <= names, f"managedResources lists the Iluvatar, Kunlunxin and AWS Neuron resources "
                         f"(missing: {sorted(want - names)})")
    neuron = device_config(docs).get("awsneuron")
    check(neuron == {"resourceCountName": "aws.amazon.com/neuron", "resourceCoreName": "aws.amazon.com/neuroncore"},
          f"the device config's awsneuron section: {neuron}")


def all_fitting_case(docs):
    ext = scheduler_config(docs)["extenders"][0]
    check("--filter-mode=all-fitting" in flags(docs) and ext.get("prioritizeVerb") == "prioritize" and
          ext.get("weight") == 5, "scheduler.filterMode all-fitting and kubeScheduler.extenderWeight 5 -> the flag "
                                  "and kube-scheduler's extender weight")


def low_port_case(docs):
    sc = containers(docs)["vgpu-scheduler-extender"]["securityContext"]
    check("--webhook-bind=0.0.0.0:443" in flags(docs) and sc["runAsUser"] == 0 and
          sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
          "httpTargetPort 443 (HAMi's): root with only CAP_NET_BIND_SERVICE")


def operator_case(docs):
    # What HAMi v2.10.0's chart gives the scheduler from tests/e2e/chart-v2.10.0/values-operator.yaml.
    f = flags(docs)
    for want in ["--scheduler-name=gpu-scheduler", "--metrics-bind-address=:9500", "--node-scheduler-policy=spread",
                 "--gpu-scheduler-policy=binpack", "--force-overwrite-default-scheduler=false", "--leader-elect=true",
                 "--leader-elect-resource-name=gpu-scheduler", "--enable-ascend=true", "--node-label-selector=gpu=on",
                 "--legacy-metrics=true", "--debug", "-v=4"]:
        check(want in f, f"HAMi values -> extender flag {want}")
    # HAMi's chart sets nodeLockExpire as an env var its scheduler overwrites; here it takes effect.
    check("--node-lock-timeout=10m" in f, "scheduler.nodeLockExpire -> --node-lock-timeout=10m")
    dev = device_config(docs)
    nv = dev["nvidia"]
    check((nv["resourceCountName"], nv["resourceMemoryName"], nv["resourceCoreName"], nv["overwriteEnv"],
           nv["runtimeClassName"]) == ("nvidia.com/vgpu", "nvidia.com/vgpu-memory", "nvidia.com/vgpu-cores", True, "nvidia"),
          "HAMi values -> the NVIDIA device config (resource names, overwriteEnv, devicePlugin.runtimeClassName)")
    check(dev["cambricon"]["resourceCountName"] == "cambricon.com/smlu" and dev["hygon"]["resourceCountName"] == "hygon.com/dcu",
          "HAMi values -> the Cambricon and Hygon resource names")
    cfg = scheduler_config(docs)
    names = {r["name"] for r in cfg["extenders"][0]["managedResources"]}
    check(cfg["profiles"][0]["schedulerName"] == "gpu-scheduler" and cfg["leaderElection"]["resourceName"] == "gpu-scheduler",
          "HAMi values -> kube-scheduler's profile and Lease gpu-scheduler")
    check({"nvidia.com/vgpu", "nvidia.com/vgpu-memory", "nvidia.com/vgpu-cores", "cambricon.com/smlu", "hygon.com/dcu"} <= names,
          "HAMi values -> managedResources with the renamed resources")
    dep = one(docs, "Deployment")
    spec = dep["spec"]["template"]["spec"]
    c = containers(docs)
    check(dep["spec"]["replicas"] == 2, "scheduler.replicas: 2 with leaderElect")
    check(c["kube-scheduler"]["image"] == "registry.example.com/kube-scheduler:v1.36.3" and
          c["vgpu-scheduler-extender"]["image"] == "registry.example.com/platform/hami-scheduler:0.1.0",
          "global.imageRegistry and the images' repositories and tags")
    check(c["kube-scheduler"]["command"] == ["kube-scheduler", "--config=/config/config.yaml", "-v=4"],
          "kubeScheduler.extraNewArgs")
    check(spec["imagePullSecrets"] == [{"name": "site-pull"}] and spec["tolerations"][0]["key"] ==
          "node-role.kubernetes.io/control-plane", "imagePullSecrets and tolerations")
    check(dep["metadata"]["labels"].get("team") == "gpu-platform", "global.labels")
    hook = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    ns_expr = hook["namespaceSelector"]["matchExpressions"]
    check(hook["failurePolicy"] == "Fail" and {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                               "values": ["kube-system", "monitoring"]} in ns_expr,
          "admissionWebhook.failurePolicy and whitelistNamespaces")
    svc = one(docs, "Service", "hami-scheduler")["spec"]
    ports = {p["name"]: p for p in svc["ports"]}
    check(svc["type"] == "ClusterIP" and ports["http"]["port"] == 443 and ports["monitor"]["port"] == 31993 and
          "nodePort" not in ports["http"], "scheduler.service (type, ports)")
    check(ports["monitor"]["targetPort"] == "metrics", "the monitor port reaches the metrics port that was moved to :9500")


def acquire_case(docs):
    f = flags(docs)
    check("kube-scheduler" not in containers(docs), "kubeScheduler.enabled=false: no sidecar")
    check("--leader-elect-mode=acquire" in f and "--leader-elect-resource-name=hami-scheduler-extender" in f,
          "no sidecar to follow: the extender acquires Lease hami-scheduler-extender itself")
    check("--http_bind=0.0.0.0:8080" in f, "the extender listens for an external kube-scheduler")
    ext = one(docs, "Service", "hami-scheduler-extender")["spec"]
    check(ext["type"] == "ClusterIP" and ext["ports"][0]["targetPort"] == "extender" and
          ext["selector"].get("hami.io/scheduler-role") == "leader",
          "the extender's own Service: ClusterIP (never a NodePort), the leader only")
    ports = {p["name"] for p in one(docs, "Service", "hami-scheduler")["spec"]["ports"]}
    check("extender" not in ports, "the NodePort Service does not expose the extender")
    check(not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-scheduler"],
          "no kube-scheduler configuration")


def no_webhook_case(docs):
    f = flags(docs)
    check(not [d for d in docs if d["kind"] in ("MutatingWebhookConfiguration", "Job")], "no webhook, no certificate Jobs")
    check(not any(x.startswith("--webhook-") for x in f), "no webhook listener")
    sc = containers(docs)["vgpu-scheduler-extender"]["securityContext"]["capabilities"]
    check(sc == {"drop": ["ALL"]}, "no capability at all without the webhook's :443")


def cert_manager_case(docs):
    cert = one(docs, "Certificate")
    check(cert["spec"]["secretName"] == "hami-scheduler-tls" and
          "hami-scheduler.kube-system.svc" in cert["spec"]["dnsNames"], "cert-manager Certificate for the Service")
    check(one(docs, "Issuer")["spec"] == {"selfSigned": {}}, "a self-signed Issuer")
    hook = one(docs, "MutatingWebhookConfiguration")
    check(hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kube-system/hami-scheduler-serving-cert",
          "cert-manager injects the CA into the webhook")
    check(not [d for d in docs if d["kind"] == "Job"], "no certificate Jobs with cert-manager")


def monitoring_case(docs, dashboard_path):
    sm = one(docs, "ServiceMonitor")
    check(sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "hami-scheduler-metrics" and
          sm["spec"]["endpoints"][0]["port"] == "metrics", "ServiceMonitor on every replica's metrics")
    cm = one(docs, "ConfigMap", "hami-scheduler-dashboard")
    check(cm["metadata"]["labels"].get("grafana_dashboard") == "1", "the dashboard ConfigMap has the sidecar's label")
    check(json.loads(cm["data"]["hami-scheduler.json"]) == json.load(open(dashboard_path)),
          "the dashboard in the ConfigMap is files/hami-scheduler.json, as JSON")


def checksum_case(before, after):
    a = one(before, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    b = one(after, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    check(a["checksum/hami-scheduler-device-config"] != b["checksum/hami-scheduler-device-config"] and
          a["checksum/hami-scheduler-config"] == b["checksum/hami-scheduler-config"],
          "a device-config change changes its checksum only (the pods roll)")


CASES = {
    "default": default_case,
    "low-port": low_port_case,
    "all-fitting": all_fitting_case,
    "ascend": ascend_case,
    "iluvatar": iluvatar_case,
    "ascend-chips": ascend_chips_case,
    "operator": operator_case,
    "acquire": acquire_case,
    "no-webhook": no_webhook_case,
    "cert-manager": cert_manager_case,
    "no-enflame": no_enflame_case,
    "no-metax": no_metax_case,
    "monitoring": lambda docs, dashboard: monitoring_case(docs, dashboard),
    "checksum": lambda docs, after: checksum_case(docs, load(after)),
}


def main():
    case, paths = sys.argv[1], sys.argv[2:]
    if case not in CASES:
        raise SystemExit(f"unknown case {case} (want one of {', '.join(CASES)})")
    CASES[case](load(paths[0]), *paths[1:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
