#!/usr/bin/env python3
"""Creates a burst of GPU pods on a real kube-apiserver and times them until every one is bound and allocated.

Used by tests/e2e/bench.sh (see there). Watches the namespace's pods first, then creates PODS pods as fast
as the API server takes them (CONCURRENCY connections; kubectl would send them one by one at client-go's
default 5 requests/s, so creating 1,000 pods would take 200 s by itself), and ends when every pod has
spec.nodeName and hami.io/bind-phase=success, or at the deadline. Then it checks the allocations against
the cards' capacity (no card over-committed) and prints one JSON object on stdout.

Also a paced stream for tests/e2e/failover.sh: --rate R creates R pods per second instead of a burst, and
--times FILE writes each pod's created/bound/allocated times (Unix seconds) and node as JSON.
"""
import argparse
import http.client
import json
import queue
import ssl
import sys
import threading
import time
import urllib.parse

ALLOCATED = "hami.io/vgpu-devices-allocated"
PHASE = "hami.io/bind-phase"


def connection(args):
    url = urllib.parse.urlparse(args.server)
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.load_cert_chain(args.cert, args.key)
    return http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=60)


def pod_object(args, i):
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(args.memory), "nvidia.com/gpucores": str(args.cores)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{args.prefix}-{i:05d}", "namespace": args.namespace},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": limits},
            }],
        },
    }


class Tracker:
    """Pod states from the watch; `done` gets the time each pod first showed bound and allocated."""

    def __init__(self, expected):
        self.expected = expected
        self.lock = threading.Lock()
        self.all_done = threading.Event()
        self.done = {}
        self.bound = {}
        self.pods = {}
        self.error = None

    def update(self, pod):
        meta = pod.get("metadata", {})
        name = meta.get("name", "")
        ann = meta.get("annotations") or {}
        with self.lock:
            self.pods[name] = pod
            if name not in self.bound and pod.get("spec", {}).get("nodeName"):
                self.bound[name] = time.time()
            if name not in self.done and pod.get("spec", {}).get("nodeName") and ann.get(PHASE) == "success":
                self.done[name] = time.time()
                if len(self.done) >= self.expected:
                    self.all_done.set()


def watch(args, tracker, ready):
    """List, then watch; a watch the API server ends (its own timeout) is started again from a new list."""
    try:
        base = f"/api/v1/namespaces/{args.namespace}/pods"
        while not tracker.all_done.is_set():
            conn = connection(args)
            conn.request("GET", base)
            listed = json.loads(conn.getresponse().read())
            for pod in listed.get("items", []):
                tracker.update(pod)
            rv = listed["metadata"]["resourceVersion"]
            conn.request("GET", f"{base}?watch=1&resourceVersion={rv}&timeoutSeconds={int(args.deadline) + 60}")
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch answered {resp.status}: {resp.read()[:200]!r}")
            ready.set()
            while not tracker.all_done.is_set():
                line = resp.readline()
                if not line:
                    break
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    tracker.update(event["object"])
            conn.close()
    except Exception as e:  # reported in the summary: the run is invalid
        tracker.error = f"watch: {e}"
        ready.set()
        tracker.all_done.set()


def create(args, work, errors, created, t0):
    conn = connection(args)
    path = f"/api/v1/namespaces/{args.namespace}/pods"
    while True:
        try:
            i = work.get_nowait()
        except queue.Empty:
            return
        if args.rate > 0:  # pod i leaves at t0 + i / rate
            time.sleep(max(0.0, t0 + i / args.rate - time.time()))
        body = json.dumps(pod_object(args, i))
        for attempt in range(5):
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                text = resp.read()
                if resp.status in (200, 201):
                    created[i] = time.time()
                    break
                if resp.status != 429 and resp.status < 500:
                    errors.append(f"create {i}: {resp.status} {text[:200]!r}")
                    break
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = connection(args)
            time.sleep(0.2 * (attempt + 1))
        else:
            errors.append(f"create {i}: gave up after 5 attempts")


def over_commits(args, pods):
    """Cards whose allocations exceed split, memory or cores (every card of the bench is alike)."""
    use = {}
    for pod in pods.values():
        value = (pod.get("metadata", {}).get("annotations") or {}).get(ALLOCATED, "")
        for container in value.split(";"):
            for device in filter(None, container.split(":")):
                uuid, _type, mem, cores = device.split(",")[:4]
                n, m, c = use.get(uuid, (0, 0, 0))
                use[uuid] = (n + 1, m + int(mem), c + int(cores))
    return {u: v for u, v in use.items() if v[0] > args.split or v[1] > args.card_memory or v[2] > 100}


def read_metrics(path):
    """{(name, labels-text): value} of a Prometheus text file."""
    out = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        key, _, value = line.rpartition(" ")
        name, _, labels = key.partition("{")
        out[(name, labels.rstrip("}"))] = float(value)
    return out


def requests_per_pod(before_file, after_file, pods):
    """The extender's requests between two /metrics scrapes per pod, by client, verb and resource, and the
    time they waited for the client-side rate limit: '3.05 (scheduler: patch nodes 1.02, ...) throttled 0.0 s'."""
    before, after = read_metrics(before_file), read_metrics(after_file)
    pods = max(1, int(pods))
    by_client, total = {}, 0.0
    for (name, labels), value in after.items():
        if name != "hami_kube_requests_total":
            continue
        n = value - before.get((name, labels), 0.0)
        if n <= 0:
            continue
        fields = dict(part.split("=", 1) for part in labels.split(","))
        client, verb, resource = (fields[k].strip('"') for k in ("client", "verb", "resource"))
        by_client.setdefault(client, []).append((n / pods, f"{verb} {resource}"))
        total += n
    parts = []
    for client, items in sorted(by_client.items()):
        items.sort(reverse=True)
        parts.append(f"{client}: " + ", ".join(f"{what} {v:.2f}" for v, what in items))
    waited = sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == "hami_kube_rate_limiter_wait_seconds_total")
    return f"{total / pods:.2f} ({'; '.join(parts)}); throttled {waited:.1f} s"


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "requests-per-pod":
        print(requests_per_pod(*sys.argv[2:]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--namespace", default="default")
    p.add_argument("--prefix", default="bench")
    p.add_argument("--pods", type=int, required=True)
    p.add_argument("--memory", type=int, default=3000, help="nvidia.com/gpumem per pod (MiB)")
    p.add_argument("--cores", type=int, default=30, help="nvidia.com/gpucores per pod")
    p.add_argument("--split", type=int, default=10, help="tasks per card (for the over-commit check)")
    p.add_argument("--card-memory", type=int, default=16384, help="MiB per card (for the over-commit check)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--deadline", type=float, default=300, help="seconds from the first create")
    p.add_argument("--rate", type=float, default=0, help="pods created per second (0: all at once)")
    p.add_argument("--times", help="write every pod's created/bound/allocated times and node here (JSON)")
    args = p.parse_args()

    tracker = Tracker(args.pods)
    ready = threading.Event()
    threading.Thread(target=watch, args=(args, tracker, ready), daemon=True).start()
    if not ready.wait(30):
        print(json.dumps({"error": "watch not established within 30 s"}))
        return 1
    work = queue.Queue()
    for i in range(args.pods):
        work.put(i)
    errors = []
    created_at = {}
    t0 = time.time()
    creators = [threading.Thread(target=create, args=(args, work, errors, created_at, t0), daemon=True)
                for _ in range(args.concurrency)]
    for t in creators:
        t.start()
    for t in creators:
        t.join()
    created = time.time() - t0
    tracker.all_done.wait(max(0.0, args.deadline - (time.time() - t0)))
    with tracker.lock:
        done = dict(tracker.done)
        bound = dict(tracker.bound)
        pods = dict(tracker.pods)
    if args.times:
        with open(args.times, "w") as f:
            json.dump({f"{args.prefix}-{i:05d}": {
                "created": created_at.get(i),
                "bound": bound.get(f"{args.prefix}-{i:05d}"),
                "allocated": done.get(f"{args.prefix}-{i:05d}"),
                "node": pods.get(f"{args.prefix}-{i:05d}", {}).get("spec", {}).get("nodeName"),
            } for i in range(args.pods)}, f)
    last = max(done.values()) - t0 if done else None
    latencies = sorted(t - t0 for t in done.values())
    summary = {
        "pods": args.pods,
        "created_s": round(created, 3),
        "allocated": len(done),
        "all_allocated_s": round(last, 3) if last is not None and len(done) == args.pods else None,
        "pods_per_s": round(len(done) / last, 2) if last else 0,
        "p50_s": round(latencies[len(latencies) // 2], 3) if latencies else None,
        "first_s": round(latencies[0], 3) if latencies else None,
        "over_committed_cards": len(over_commits(args, pods)),
        "nodes_used": len({pod.get("spec", {}).get("nodeName") for name, pod in pods.items() if name in done}),
        "errors": errors[:5] + ([tracker.error] if tracker.error else []),
    }
    print(json.dumps(summary))
    return 0 if not summary["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
