#!/usr/bin/env python3
"""Writes the seed corpora (tests/fuzz/corpus/<target>/) from the protocol's examples and the unit tests'
vectors. Re-run after adding a seed; files are named by content hash so re-running is idempotent."""
import hashlib
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent

V100 = ('[{"id":"GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec","count":10,"devmem":32768,"devcore":100,'
        '"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true},'
        '{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","index":1,"count":10,"devmem":32768,"devcore":100,'
        '"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}]')
MIG = ('[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","mode":"mig","health":true,'
       '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,'
       '"placements":[{"start":6,"size":1}]}]}]')
GO = ('[{"index":1,"ID":"id-1","Count":1,"devmem":1024,"devcore":10,"type":"type","health":true,'
      '"instanceCount":3,"multiprocessorCount":80},{"id":"id-2","count":1}]\n')
DCU = "DCU-0001,4,16384,100,DCU-K100,0,true:DCU-0002,4,16384,100,DCU-K100,0,true:"
P4 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true:"
P4_9 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:"
MLU = ("MLU-45013011-2257-0000-0000-000000000000,10,23308,0,MLU-MLU370-X4,0,false:"
       "MLU-54043011-2257-0000-0000-000000000000,10,23308,0,MLU-MLU370-X4,0,false:")
SCORES = '[{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{"GPU-0":100}}]'
POD = ('{"metadata":{"name":"p","namespace":"ns","uid":"u1"},"spec":{"containers":[{"name":"c",'
       '"resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"3000"}}}]}}')


def http(method, target, body="", headers=""):
    return (f"{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n{body}")


SEEDS = {
    "fuzz_device_manifest": [V100, MIG, GO, "null", "[]", '[{"id":"a","count":4294967296}]',
                             '[{"id":"a"},{"id":"b","devmem":1.5}]'],
    "fuzz_legacy_devices": [DCU, P4, P4_9, MLU, ":", "::", ",:", "GPU-x,10,7680,100,T,0,true,-1,m:"],
    "fuzz_pair_scores": [SCORES, "null", "[]", '[{"uuid":"GPU-0","score":null}]',
                         '[{"UUID":"gpu-0","Score":{"GPU-0":-5,"GPU-1":2147483647}}]'],
    "fuzz_node_discovery": [
        f"0\n{V100}\n{SCORES}\nReported 2024-01-23 04:30:04.434037031 +0000 UTC\n2\n\n",
        f"0\n{MIG}\n\nRequesting_2026-11-30 23:59:00\n0\n\n",
        f"1\n\n\n\n4\n64\n400",
        f"2\n\n\n\n2\n32\n200",
        f"3\n{DCU}\n\nRequesting_2024.01.10 04:06:57\n\n\n",
    ],
    "fuzz_pod_devices": ["GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;", ";", ";;", "",
                         "UUID1,Type1,1000,30:UUID2,Type1,1000,30:;UUID1,Type1,1000,30:;",
                         ";GPU-abc,NVIDIA,1000,30:;", "uuid,type,100:;", ";uuid,NVIDIA,lots,0:;"],
    "fuzz_mig_allocations": [
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-x","profile":"1g.10gb",'
        '"placement":{"start":6,"size":1}}]',
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-x","profile":"1g.10gb",'
        '"placement":{"start":6,"size":1},"migUUID":"MIG-1","gpuInstanceId":0,"computeInstanceId":0}]',
        "[]", "null"],
    "fuzz_stamps": ["Requesting_2024-01-24 04:30:04", "Requesting", "Requesting_2024.01.10 04:06:57",
                    "Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895",
                    "2026-08-21T06:20:39Z,default,gpu-pod", "2026-08-21T14:20:39+08:00,ns,p",
                    "2026-08-21T06:20:39.123456Z", "2026-11-30T23:58:00Z,kube-system,web-0.a",
                    "lock-values,default,pod-gpu", "2026-08-21T06:20:39Z,default"],
    "fuzz_quantity": ["1", "1.5", "100m", "16Gi", "2e3", "+5", "-1", "0.001", "1E18", "9223372036854775807",
                      "-9223372036854775808", "8Ei", "123456789n", "1.5Ki", "3u"],
    "fuzz_extender": [
        '{"Pod":' + POD + ',"Nodes":null,"NodeNames":["n1","n2"]}',
        '{"pod":' + POD + ',"nodenames":["n3"]}',
        '{"Pod":' + POD + ',"Nodes":{"metadata":{},"items":[{"metadata":{"name":"t1"},'
        '"status":{"allocatable":{"nvidia.com/gpu":"4"}}}]}}',
        '{"PodName":"p","PodNamespace":"ns","PodUID":"uid","Node":"node-b"}',
        '{"podname":"p","node":"n"}', '{"Pod":null}', '{"Pod":'],
    "fuzz_http_request": [
        http("POST", "/filter", '{"Pod":{}}'),
        http("POST", "/bind?x=1", '{"PodName":"p","Node":"n"}') + "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /healthz HTTP/1.0\r\n\r\n",
        "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /filter HTTP/1.1\r\nHost: t\r\n\r\n",
        "HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /boom HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n",
        "POST /filter HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        "4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nX-Trailer: v\r\n\r\n",
        "POST /filter HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        "POST /filter HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n{\"a\"",
        # A declared length far beyond the body limit, then EOF: no answer (the body never comes).
        "POST /filter HTTP/1.1\r\nHost: t\r\nContent-Length: 5124095576030431000\r\n\r\n{\"a\"",
        # Connection: close in a trailer frames nothing: the next request is still answered.
        "POST /filter HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        "2\r\n{}\r\n0\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
        http("POST", "/filter", "x" * 1100),
        "POST /filter HTTP/1.1\r\nHost: t\r\n" + "X-Big: " + "y" * 2100 + "\r\n\r\n",
        "GARBAGE\r\n\r\n",
    ],
    "fuzz_admission": [
        '{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},'
        '"namespace":"ns","operation":"CREATE","object":{"metadata":{"generateName":"p-"},"spec":{"containers":['
        '{"name":"a","env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"},{"name":"X","valueFrom":{}}],'
        '"resources":{"limits":{"nvidia.com/gpumem":"3000"}}},{"name":"b"}],'
        '"initContainers":[{"name":"i","resources":{"requests":{"nvidia.com/gpu":1}}}]}}}}',
        '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE",'
        '"object":{"metadata":{"name":"m"},"spec":{"schedulerName":"default-scheduler","containers":[{"name":"a",'
        '"resources":{"limits":{"mthreads.com/vgpu":"2"}}}]}}}}',
        '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE",'
        '"object":{"metadata":{"name":"q","annotations":{"a~b/c":"1"}},"spec":{"nodeName":"n","containers":['
        '{"name":"a","securityContext":{"privileged":true},"resources":{"limits":{"nvidia.com/gpu":"1",'
        '"nvidia.com/gpumem":"16Gi","hygon.com/dcunum":"1"}}}]}}}}',
        '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}', '{"kind":'],
    "fuzz_yaml": ["a: 1\nb: [x, 'y', \"z\"]\nc: {d: null, e: true, f: 1.5e3}\n", "---\n- 1\n---\n- 2\n",
                  "k: &x [1, 2]\nl: *x\n", '{"json": ["is", "yaml", 1, -2.5, null]}', "? [a]\n: b\n",
                  "s: ~\nt: +12\nu: 0x1F\nv: 1e400\nw: \"\\u00e9\\t\"\n"],
}
FILES = {
    "fuzz_yaml": ["examples/cluster.yaml", "examples/pods.yaml", "examples/inspect-pod.yaml",
                  "examples/inspect-node.json"],
}

for target, seeds in SEEDS.items():
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    blobs = [s.encode() for s in seeds] + [(ROOT / f).read_bytes() for f in FILES.get(target, [])]
    for blob in blobs:
        (out / hashlib.sha1(blob).hexdigest()[:16]).write_bytes(blob)
