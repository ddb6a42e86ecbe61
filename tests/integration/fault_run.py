#!/usr/bin/env python3
"""Helper of fault_run_test.sh: creates the run's pods and checks its invariants from the API server's state.

  fault_run.py create API FIRST LAST       small pods run-FIRST..run-LAST (each fits on any free slot)
  fault_run.py create-fixed API            pods that never fit, and pods left half-scheduled by an "earlier
                                           process" (allocation annotations, no nodeName, another scheduler)
  fault_run.py wait API SECONDS N          until the run has settled (or SECONDS passed); then checks
  fault_run.py events API                  the warning events, most frequent first
Requests are retried: the API server injects faults while pods are created.
"""
import json
import sys
import time
import urllib.error
import urllib.request

NODES = 8            # must match fault_run_test.sh
DEVICES = 4          # per node
SPLIT = 10           # pods per device
MEMORY = 16384       # MiB per device
MIB = [1000, 1200, 1400]  # small pods: any 10 fit on one device

ALLOC_KEYS = ["hami.io/vgpu-devices-allocated", "hami.io/vgpu-devices-to-allocate"]
ALL_KEYS = ["hami.io/vgpu-node", "hami.io/vgpu-time", "hami.io/bind-phase", "hami.io/bind-time"] + ALLOC_KEYS


def call(api, method, path, body=None, attempts=40):
    data = json.dumps(body).encode() if body is not None else None
    last = None
    for _ in range(attempts):
        req = urllib.request.Request(api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 409 and method == "POST":
                return None  # created by an attempt whose answer was lost
            if e.code < 500 and e.code != 429:
                raise
            last = e
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            last = e
        time.sleep(0.05)
    raise RuntimeError(f"{method} {path}: {last}")


def pod(name, mib, scheduler="hami-scheduler", annotations=None):
    meta = {"name": name, "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x", "resources": {
                "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)}}}]}}


def create(api, first, last):
    for i in range(first, last + 1):
        call(api, "POST", "/api/v1/namespaces/default/pods", pod(f"run-{i}", MIB[i % len(MIB)]))


def create_fixed(api):
    for i in range(3):  # larger than any device
        call(api, "POST", "/api/v1/namespaces/default/pods", pod(f"huge-{i}", MEMORY + 1000))
    now = str(int(time.time()))
    for i in range(3):  # what a killed process leaves: a decision, no binding, nobody to retry it
        dev = f"NVIDIA-fault-{i + 1}-0,NVIDIA,8000,0:;"
        call(api, "POST", "/api/v1/namespaces/default/pods", pod(
            f"left-{i}", 8000, scheduler="nobody",
            annotations={"hami.io/vgpu-node": f"fault-{i + 1}", "hami.io/vgpu-time": now,
                         "hami.io/bind-phase": "allocating", "hami.io/bind-time": now,
                         ALLOC_KEYS[0]: dev, ALLOC_KEYS[1]: dev}))


def state(api):
    pods = call(api, "GET", "/api/v1/pods")["items"]
    nodes = call(api, "GET", "/api/v1/nodes")["items"]
    return pods, nodes


def problems_of(pods, nodes, expected):
    problems = []
    per_device = {}
    names = set()
    for p in pods:
        name = p["metadata"]["name"]
        names.add(name)
        ann = p["metadata"].get("annotations") or {}
        node = (p.get("spec") or {}).get("nodeName") or ""
        if name.startswith("run-"):
            if not node:
                problems.append(f"{name}: not bound")
            elif ann.get("hami.io/bind-phase") != "success":
                problems.append(f"{name}: bound to {node}, bind-phase {ann.get('hami.io/bind-phase')!r}")
            elif ann.get("hami.io/vgpu-node") != node:
                problems.append(f"{name}: bound to {node}, hami.io/vgpu-node {ann.get('hami.io/vgpu-node')!r}")
        if not node:
            left = [k for k in ALL_KEYS if k in ann]
            labels = p["metadata"].get("labels") or {}
            if "hami.io/vgpu-node" in labels:
                left.append("label hami.io/vgpu-node")
            if left and not name.startswith("run-"):
                problems.append(f"{name}: unbound with {', '.join(left)}")
            continue
        for entry in (ann.get(ALLOC_KEYS[0]) or "").replace(";", ":").split(":"):
            if not entry:
                continue
            uuid, _vendor, mem, _cores = entry.split(",")
            used = per_device.setdefault(uuid, [0, 0])
            used[0] += int(mem)
            used[1] += 1
    for uuid, (mem, count) in sorted(per_device.items()):
        if mem > MEMORY or count > SPLIT:
            problems.append(f"device {uuid} over-committed: {mem} MiB of {MEMORY}, {count} pods of {SPLIT}")
    by_name = {p["metadata"]["name"]: p for p in pods}
    for n in nodes:
        ann = n["metadata"].get("annotations") or {}
        if "hami.io/mutex.lock" in ann:
            value = ann["hami.io/mutex.lock"]
            owner = by_name.get(value.split(",")[-1])
            seen = "owner gone" if owner is None else "owner on {!r}, bind-phase {!r}".format(
                (owner.get("spec") or {}).get("nodeName"),
                (owner["metadata"].get("annotations") or {}).get("hami.io/bind-phase"))
            problems.append(f"node {n['metadata']['name']}: lock left: {value} ({seen})")
    missing = [f"run-{i}" for i in range(1, expected + 1) if f"run-{i}" not in names]
    if missing:
        problems.append(f"pods missing: {', '.join(missing[:5])}")
    return problems, per_device


def wait(api, seconds, expected):
    deadline = time.time() + seconds
    while True:
        pods, nodes = state(api)
        problems, per_device = problems_of(pods, nodes, expected)
        if not problems or time.time() >= deadline:
            break
        time.sleep(0.5)
    bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
    print(f"pods: {len(pods)}, bound: {bound}, devices used: {len(per_device)}, "
          f"fullest device: {max((c for _, c in per_device.values()), default=0)} pods")
    for p in problems[:20]:
        print("PROBLEM " + p)
    return 0 if not problems else 1


def events(api):
    """The reasons of the failures, most frequent first (printed when the run did not settle)."""
    counts = {}
    for e in call(api, "GET", "/api/v1/events")["items"]:
        if e.get("type") == "Warning":
            msg = e.get("message", "")
            for word in msg.split():
                if word.startswith("run-") or word.startswith("default/run-"):
                    msg = msg.replace(word, "<pod>")
            key = (e.get("reason"), msg[:160])
            counts[key] = counts.get(key, 0) + e.get("count", 1)
    for (reason, msg), n in sorted(counts.items(), key=lambda kv: -kv[1])[:12]:
        print(f"{n:5} {reason}: {msg}")


def main():
    cmd, api = sys.argv[1], sys.argv[2].rstrip("/")
    if cmd == "create":
        create(api, int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "create-fixed":
        create_fixed(api)
    elif cmd == "events":
        events(api)
    elif cmd == "wait":
        sys.exit(wait(api, float(sys.argv[3]), int(sys.argv[4])))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
