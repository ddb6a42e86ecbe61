#!/usr/bin/env python3
"""A Cluster Autoscaler-shaped /filter against a running hami-scheduler on the real control plane.

Posts Nodes (nodeCacheCapable: false) holding the cluster's real nodes and a template node that does not
exist (a copy of REAL_NODE under another name, as the autoscaler builds one for a node group), for a pod that
does not exist either and that fits no real node. Checks that the answer lists the template alone, says why
for each real node, echoes every posted node for a pod without devices, counts the requests, and writes
nothing: no event names the pod, and the pod ledger's holders are the same before and after.

  ca_check.py KUBECTL KUBECONFIG EXTENDER_URL METRICS_URL REAL_NODE MEMORY_MIB

Prints one line per check ("ok: ..." or "FAIL: ..."); the exit status is the number of failures.
"""
import json
import subprocess
import sys
import urllib.request

kubectl, kubeconfig, ext, metrics, real_node, memory = sys.argv[1:7]
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what)
    failures += 0 if cond else 1


def k(*args):
    return subprocess.run([kubectl, "--kubeconfig", kubeconfig, *args], check=True, capture_output=True,
                          text=True).stdout


def post(path, body):
    req = urllib.request.Request(ext + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def counter(name):
    for line in get(metrics + "/metrics").splitlines():
        if line.split(" ")[0] == name:
            return float(line.split(" ")[1])
    return 0.0


nodes = json.loads(k("get", "nodes", "-o", "json"))["items"]
template = json.loads(json.dumps(next(n for n in nodes if n["metadata"]["name"] == real_node)))
template["metadata"] = {"name": "template-node-for-gpu-pool-4711",
                        "labels": dict(template["metadata"].get("labels", {}),
                                       **{"kubernetes.io/hostname": "template-node-for-gpu-pool-4711"}),
                        "annotations": template["metadata"].get("annotations", {})}
posted = nodes + [template]
real_names = [n["metadata"]["name"] for n in nodes]


def pod(name, limits):
    return {"metadata": {"namespace": "default", "name": name, "uid": "6f1c5a52-1f0e-4e4c-9a39-0d5c3c9b2a11"},
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "app", "resources": {"limits": limits}}]}}


def overview():
    o = json.loads(get(metrics + "/api/overview"))
    return o["pods"], o["podsRefused"]


holders_before = overview()
asked_before = counter("hami_scheduler_filter_template_requests_total")

wants = pod("ca-wants-a-new-node", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory})
answer = post("/filter", {"Pod": wants, "Nodes": {"items": posted}})
passed = [n["metadata"]["name"] for n in (answer.get("Nodes") or {}).get("items") or []]
check(answer.get("Error") == "", f"the template request is answered without error ({answer.get('Error')!r})")
check(passed == ["template-node-for-gpu-pool-4711"],
      f"only the template node fits a {memory} MiB pod: {passed}")
reasons = dict(answer.get("FailedNodes") or {}, **(answer.get("FailedAndUnresolvableNodes") or {}))
check(sorted(reasons) == sorted(real_names), f"each real node says why: {reasons}")
check(passed and answer["Nodes"]["items"][0] == template, "the template comes back as it was posted")

plain = post("/filter", {"Pod": pod("ca-plain", {"cpu": "1"}), "Nodes": {"items": posted}})
echoed = [n["metadata"]["name"] for n in (plain.get("Nodes") or {}).get("items") or []]
check(echoed == real_names + ["template-node-for-gpu-pool-4711"],
      f"a pod without devices gets every posted node back: {echoed}")

asked = counter("hami_scheduler_filter_template_requests_total") - asked_before
check(asked == 2, f"hami_scheduler_filter_template_requests_total counted both requests ({asked:g})")
events = k("get", "events", "-n", "default", "--field-selector", "involvedObject.name=ca-wants-a-new-node",
           "-o", "name").split()
check(not events, f"no event names the hypothetical pod ({events})")
holders_after = overview()
check(holders_after == holders_before,
      f"the ledger's pods and refused pods are the same ({holders_before} -> {holders_after})")
check(not subprocess.run([kubectl, "--kubeconfig", kubeconfig, "get", "node",
                          "template-node-for-gpu-pool-4711"], capture_output=True).returncode == 0,
      "the template node was not created")
sys.exit(failures)
