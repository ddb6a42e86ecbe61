#!/usr/bin/env bash
# The main job: `hami-scheduler demo --json` must place every sample pod (every vendor, Ascend's chips too;
# shared and whole cards, two containers, an init container) and refuse only the one that cannot fit, with a reason.
# Usage: tests/integration/demo_test.sh [path/to/hami-scheduler]; prints `demo: N passed, M failed`.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$repo/build/hami-scheduler}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; [ -n "${3:-}" ] && echo "     $3"; fi; }

timeout 120 "$bin" demo --json --kubeconfig-out "$tmp/kubeconfig" >"$tmp/out.json" 2>"$tmp/live.txt"
rc=$?
check "demo --json exits 0" '[ $rc = 0 ]' "rc=$rc $(tail -5 "$tmp/live.txt")"
check "the summary: 27 pods, 26 scheduled, 1 unschedulable, 0 failed" \
  'python3 - "$tmp/out.json" <<"PY"
import json, sys
s = json.load(open(sys.argv[1]))
assert (s["pods"], s["scheduled"], s["unschedulable"], s["failed"]) == (27, 26, 1, 0), s
by = {o["pod"].split("/")[1]: o for o in s["outcomes"]}
vendors = {"mlu-slice": "MLU", "mthreads-slice": "Mthreads", "dcu-slice": "DCU", "shared-gpu-1": "NVIDIA",
           "npu-vnpu": "Ascend910B3", "npu-pair": "Ascend910B3", "xpu-pair": "kunlun", "vxpu-quarter": "XPU",
           "iluvatar-slice": "MR-V100", "neuron-core": "AWSNeuron", "neuron-four": "AWSNeuron",
           "amd-quarter": "AMD", "amd-whole": "AMD", "va-pair": "Vastai", "biren-slot": "Biren",
           "gcu-whole": "GCU", "drs-three": "Enflame", "metax-whole": "Metax-GPU", "sgpu-quarter": "Metax-SGPU"}
for pod, vendor in vendors.items():
    assert by[pod]["state"] == "scheduled" and vendor in by[pod]["devices"], by[pod]
# a remote-GPU pod runs on a client (any node but the lupine server) with both cards of the server, whole
remote = by["remote-gpu-whole-server"]
assert remote["state"] == "scheduled" and remote["node"] != "lupine-server-1", remote
assert remote["devices"]["RemoteGPU"].count("lupine-server-1/") == 2 and ",40960,100" in remote["devices"]["RemoteGPU"], remote
# two containers and an init container: one device list per container, init first
assert by["two-containers"]["devices"]["NVIDIA"].count(";") == 2, by["two-containers"]
assert by["init-then-serve"]["devices"]["NVIDIA"].count(";") == 2, by["init-then-serve"]
# two NPUs of one ring (chips 0-3 or 4-7 of the demo node)
rings = {int(d.split(",")[0].rsplit("-", 1)[1]) // 4 for d in by["npu-pair"]["devices"]["Ascend910B3"].split(":") if "," in d}
assert len(rings) == 1, by["npu-pair"]
# two whole XPUs of one wing (cards 0-3 or 4-7), and a vXPU of a quarter card
wings = {int(d.split(",")[0].rsplit("-", 1)[1]) // 4 for d in by["xpu-pair"]["devices"]["kunlun"].split(":") if "," in d}
assert len(wings) == 1, by["xpu-pair"]
assert ",XPU,24576,25" in by["vxpu-quarter"]["devices"]["XPU"], by["vxpu-quarter"]
# AMD: a quarter of the 304 compute units of an MI300X is 76, a whole card all of them; Vastai and Biren book
# no memory and no cores (shared by count), two Vastai devices for the pair
assert ",AMD-Instinct-MI300X,16384,76:" in by["amd-quarter"]["devices"]["AMD"], by["amd-quarter"]
assert ",AMD-Instinct-MI300X,196608,304:" in by["amd-whole"]["devices"]["AMD"], by["amd-whole"]
assert by["va-pair"]["devices"]["Vastai"].count(",Vastai,0,0:") == 2, by["va-pair"]
assert ",Biren,0,0:" in by["biren-slot"]["devices"]["Biren"], by["biren-slot"]
# Enflame: a whole GCU (placeholder 100/100), and the 3g.20gb DRS profile: 20 GB and half the cores
assert ",GCU,100,100:" in by["gcu-whole"]["devices"]["GCU"], by["gcu-whole"]
assert ",Enflame,20480,50:" in by["drs-three"]["devices"]["Enflame"], by["drs-three"]
# MetaX: a whole card (placeholder 65536 MiB), and an sGPU of 16 GiB and a quarter of the compute
assert ",Metax-GPU,65536,100:" in by["metax-whole"]["devices"]["Metax-GPU"], by["metax-whole"]
assert ",Metax-SGPU,16384,25:" in by["sgpu-quarter"]["devices"]["Metax-SGPU"], by["sgpu-quarter"]
assert by["too-big"]["state"] == "unschedulable" and "CardInsufficientMemory" in by["too-big"]["reason"], by["too-big"]
PY' "$(cat "$tmp/out.json")"
check "the live table went to stderr and shows allocations" 'grep -q "allocated" "$tmp/live.txt"'
check "the kubeconfig for kubectl was written" '[ -s "$tmp/kubeconfig" ]'
"$bin" demo --bogus >"$tmp/bad.out" 2>&1
rc=$?
check "an unknown flag exits 2 naming it" '[ $rc = 2 ] && grep -q "bogus" "$tmp/bad.out"' "rc=$rc $(cat "$tmp/bad.out")"

echo "demo: $passed passed, $failed failed"
[ "$failed" = 0 ]
