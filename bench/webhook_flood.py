#!/usr/bin/env python3
"""Floods /webhook with large AdmissionReviews while measuring what the event loop owes everyone else.

`hami-scheduler serve` runs against `hami-scheduler sim-apiserver` (examples/cluster.yaml) with its own
Lease (--leader-elect-mode=acquire, renewed every 2 s, renew deadline 10 s) and the webhook on a TLS listener
of its own (--webhook-bind, 7 MiB bodies). CLIENTS connections post AdmissionReviews of a pod with ANNOTATIONS
annotation keys (6.4 MiB for the default 520,000) back to back for SECONDS, while one prober each times /healthz (every 100 ms),
/filter of a GPU pod over the cluster's nodes (every 250 ms), and reads the Lease (every 250 ms) to see each
renewal.

Prints one JSON object: per probe p50/p99/max in ms, the longest gap between two renewals the Lease showed,
whether this replica stayed the leader, reviews answered and their latency, and the server's peak RSS.

Usage: bench/webhook_flood.py path/to/hami-scheduler [--clients 24] [--seconds 20] [--annotations 520000]
Everything runs on 127.0.0.1; the script stops every process it started.
"""
import argparse
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def summary(values):
    return {"n": len(values), "p50_ms": percentile(values, 0.5), "p99_ms": percentile(values, 0.99),
            "max_ms": max(values) if values else None}


def request(port, method, path, body=None, timeout=60, tls=False):
    if tls:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout,
                                           context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_for(what, check, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"webhook_flood: {what} did not happen within {seconds} s")


def base36(n):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def review_body(annotations):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "flood", "namespace": "default",
                        "annotations": {"k" + base36(i): "" for i in range(annotations)}},
           "spec": {"containers": [{"name": "c", "image": "x",
                                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}]}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "00000000-0000-0000-0000-000000000000", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                          "resource": {"group": "", "version": "v1", "resource": "pods"},
                          "namespace": "default", "operation": "CREATE", "object": pod}}
    return json.dumps(review).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--annotations", type=int, default=520000)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="webhook-flood-")
    procs = []
    try:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        procs.append(subprocess.Popen(
            [args.binary, "sim-apiserver", "--listen", "127.0.0.1:0", "--cluster",
             os.path.join(REPO, "examples", "cluster.yaml"), "--kubeconfig-out", kubeconfig],
            stdout=open(os.path.join(tmp, "apiserver.log"), "w"), stderr=subprocess.STDOUT))
        wait_for("the API server's kubeconfig", lambda: os.path.getsize(kubeconfig) > 0, 20)
        server = [l.split("server:")[1].strip() for l in open(kubeconfig) if "server:" in l][0]
        api_port = int(server.rsplit(":", 1)[1].strip("/"))
        port, webhook_port = free_port(), free_port()
        cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        serve = subprocess.Popen(
            [args.binary, "serve", "--kubeconfig", kubeconfig, f"--http_bind=127.0.0.1:{port}",
             f"--webhook-bind=127.0.0.1:{webhook_port}", f"--webhook-cert-file={cert}", f"--webhook-key-file={key}",
             f"--metrics-bind-address=127.0.0.1:{free_port()}", "--health-check-interval=15s",
             "--leader-elect", "--leader-elect-mode=acquire", "--leader-elect-identity=flood",
             "--leader-elect-resource-name=hami-scheduler", "--leader-elect-resource-namespace=default"],
            stdout=open(os.path.join(tmp, "serve.log"), "w"), stderr=subprocess.STDOUT)
        procs.append(serve)
        wait_for("/readyz 200 (leading)", lambda: request(port, "GET", "/readyz", timeout=2)[0] == 200, 30)

        nodes = json.loads(request(api_port, "GET", "/api/v1/nodes")[1])["items"]
        node_names = [n["metadata"]["name"] for n in nodes]
        filter_body = json.dumps({"Pod": {"metadata": {"name": "probe", "namespace": "default", "uid": "probe-uid"},
                                          "spec": {"containers": [{"name": "c", "resources": {"limits": {
                                              "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}]}},
                                  "NodeNames": node_names}).encode()
        body = review_body(args.annotations)

        stop = threading.Event()
        results = {"healthz": [], "filter": [], "review": [], "review_errors": 0, "filter_errors": 0,
                   "renewals": [], "not_leader": 0, "rss_kib": 0}
        lock = threading.Lock()

        def timed(name, method, path, data, every, ok):
            tls = path == "/webhook"
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    status, out = request(webhook_port if tls else port, method, path, data, timeout=120, tls=tls)
                    good = ok(status, out)
                except OSError:
                    good = False
                ms = (time.monotonic() - t0) * 1000
                with lock:
                    results[name].append(ms)
                    if not good:
                        results[name + "_errors"] = results.get(name + "_errors", 0) + 1
                if every:
                    time.sleep(max(0, every - ms / 1000))

        def filter_ok(status, out):
            r = json.loads(out)
            return status == 200 and r.get("Error", "") == "" and r.get("NodeNames")

        def lease_poller():
            last = None
            while not stop.is_set():
                try:
                    status, out = request(api_port, "GET",
                                          "/apis/coordination.k8s.io/v1/namespaces/default/leases/hami-scheduler",
                                          timeout=5)
                    spec = json.loads(out).get("spec", {}) if status == 200 else {}
                    renew = spec.get("renewTime")
                    if renew != last:
                        with lock:
                            results["renewals"].append(time.monotonic())
                        last = renew
                    if not str(spec.get("holderIdentity", "")).startswith("flood"):
                        with lock:
                            results["not_leader"] += 1
                except OSError:
                    pass
                try:
                    for line in open(f"/proc/{serve.pid}/status"):
                        if line.startswith("VmRSS:"):
                            results["rss_kib"] = max(results["rss_kib"], int(line.split()[1]))
                except OSError:
                    pass
                time.sleep(0.25)

        threads = [threading.Thread(target=timed, args=("healthz", "GET", "/healthz", None, 0.1,
                                                         lambda s, o: s == 200)),
                   threading.Thread(target=timed, args=("filter", "POST", "/filter", filter_body, 0.25, filter_ok)),
                   threading.Thread(target=lease_poller)]
        threads += [threading.Thread(target=timed, args=("review", "POST", "/webhook", body, 0,
                                                          lambda s, o: s == 200 and b'"uid":"00000000' in o))
                    for _ in range(args.clients)]
        start = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        stop.set()
        for t in threads:
            t.join(timeout=180)
        renewals = [t for t in results["renewals"] if t >= start]
        gaps = [(b - a) * 1000 for a, b in zip(renewals, renewals[1:])]
        print(json.dumps({
            "clients": args.clients, "seconds": args.seconds, "review_bytes": len(body),
            "healthz": summary(results["healthz"]), "filter": summary(results["filter"]),
            "filter_errors": results["filter_errors"],
            "reviews": summary(results["review"]), "review_errors": results["review_errors"],
            "lease_renewals_seen": len(renewals), "lease_longest_gap_ms": max(gaps) if gaps else None,
            "lease_polls_not_leading": results["not_leader"], "peak_rss_mib": results["rss_kib"] // 1024,
        }, indent=1))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
