#!/usr/bin/env python3
"""The kubelet's part and a witness for tests/e2e/preempt.sh.

Polls every pod (kubectl, every 0.2 s) until the file STOP exists:
- ends every pod GRACE seconds after it was first seen terminating (no kubelet runs here: without this, a
  victim kube-scheduler deletes would terminate for ever; its deletionTimestamp is when its grace period ends,
  not when it began), so that a victim holds its card while it terminates;
- sums, per card, the memory of every pod on a node (terminating ones included) from the allocation our
  scheduler wrote (hami.io/vgpu-devices-allocated: "UUID,NVIDIA,MiB,cores:" per device, ";" per container)
  and records any card holding more than CARD_MIB;
- records the name of every pod it saw terminating.

Writes OUT (JSON) at the end: {"polls": N, "overcommit": [...], "terminated": [...]}.

  preempt_watch.py KUBECTL KUBECONFIG CARD_MIB GRACE STOP OUT
"""
import json
import os
import subprocess
import sys
import time


def pods(kubectl, kubeconfig):
    """Every pod, or None when this poll failed (the next one tries again)."""
    try:
        out = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "--request-timeout=10s", "get", "pods",
                              "-A", "-o", "json"], capture_output=True, text=True, timeout=20)
        return json.loads(out.stdout)["items"] if out.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError, KeyError):
        return None


def card_use(items):
    use = {}
    for p in items:
        if not p.get("spec", {}).get("nodeName"):
            continue
        allocated = (p["metadata"].get("annotations") or {}).get("hami.io/vgpu-devices-allocated", "")
        for container in allocated.split(";"):
            for device in container.split(":"):
                fields = device.split(",")
                if len(fields) >= 3 and fields[0]:
                    use.setdefault(fields[0], []).append((p["metadata"]["name"], int(fields[2])))
    return use


def main():
    kubectl, kubeconfig, card_mib, grace, stop, out_path = sys.argv[1:7]
    card_mib, grace = int(card_mib), float(grace)
    polls, overcommit, terminated, ended = 0, [], set(), set()
    first_seen = {}  # (namespace, name, uid) -> monotonic time it was first seen terminating
    while not os.path.exists(stop):
        items = pods(kubectl, kubeconfig)
        if items is None:
            time.sleep(0.2)
            continue
        polls += 1
        now = time.monotonic()
        for card, holders in card_use(items).items():
            total = sum(mib for _, mib in holders)
            if total > card_mib:
                overcommit.append({"card": card, "mib": total, "pods": sorted(n for n, _ in holders)})
        for p in items:
            md = p["metadata"]
            if not md.get("deletionTimestamp"):
                continue
            terminated.add(md["name"])
            key = (md["namespace"], md["name"], md["uid"])
            since = first_seen.setdefault(key, now)
            if now - since >= grace and key not in ended:
                try:
                    done = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "--request-timeout=10s", "delete",
                                           "pod", md["name"], "-n", md["namespace"], "--grace-period=0", "--force",
                                           "--wait=false"], capture_output=True, timeout=20)
                    if done.returncode == 0:
                        ended.add(key)  # else tried again at the next poll
                except subprocess.TimeoutExpired:
                    pass
        time.sleep(0.2)
    with open(out_path, "w") as f:
        json.dump({"polls": polls, "overcommit": overcommit, "terminated": sorted(terminated)}, f)


if __name__ == "__main__":
    main()
