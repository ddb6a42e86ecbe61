#!/usr/bin/env bash
# e2e of the /ui/ page in a real browser: Debian's chromium, headless, loads the page (every asset from the
# binary) from the metrics listener, runs its script, and leaves its DOM and a screenshot; ui_check.py reads
# the DOM against the scheduler's own /api/overview (the ledger's numbers).
#   demo   `demo --keep` on the embedded cluster: 17 nodes of every vendor, too-big refused. The page's totals
#          equal the ledger's, too-big shows its reasons and, asked why, the card that came closest; a node
#          lock annotation holding markup (<img src=x onerror=...>) shows as text, and no script of it runs.
#   serve  `serve` as the real kube-scheduler's extender on the real control plane: a card whose type is
#          markup, a pod holding 12000 MiB of it, a pod asking 8000 MiB refused by kube-scheduler through
#          our /filter. The page shows both pods, the refusal down to the card, the type as text.
# Besides: the page's headers (Content-Security-Policy without inline script, nosniff), the ETag of the
# view's generation answered 304 while nothing changed, nothing of it on the extender's own port.
# Screenshots: BUILD_DIR/ui-screenshots/{demo,serve}.png.
#
#   tests/e2e/ui.sh [PATH/TO/hami-scheduler]
#
# Ends with "e2e ui: N passed, M failed". HAMI_E2E_KEEP_WORK=1 keeps the work dir.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec ui UI "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
command -v chromium >/dev/null || { bad "no chromium (scripts/install-deps.sh installs it)"; finish; }
SHOTS="$(dirname "$HAMI")/ui-screenshots"
mkdir -p "$SHOTS"
BIN="$(bash "$E2E_DIR/build.sh")" || { bad "build (see the messages above)"; finish; }
export HAMI_E2E_BIN="$BIN"
KUBECTL="$BIN/kubectl"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-ui.XXXXXX")"
mkdir -p "$WORK/logs"
DEMO_PID=""
SERVE_PID=""
PLUGINS_PID=""
cleanup() { end_suite_run "$WORK" "$DEMO_PID" "$PLUGINS_PID" "$SERVE_PID"; }
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM

# The markup a name or a device plugin's free text could carry: as markup it would retitle the page.
MARKUP='<img src=x onerror=document.title=1>'

# chrome NAME ARGS...: headless Chromium with its own profile and no network of its own (flags as the machine's
# notes give them: without them it keeps calling Google's hosts).
chrome() {
  local name="$1"
  shift
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-extensions \
    --user-data-dir="$WORK/chrome-$name" --window-size=1400,2200 --virtual-time-budget=10000 "$@" \
    2>> "$WORK/logs/chromium-$name.log"
}

# page NAME URL CHECKS...: the page's DOM and screenshot at URL, checked by ui_check.py with CHECKS.
page() {
  local name="$1" url="$2" base
  shift 2
  base="${url%%/ui/*}"
  chrome "$name" --dump-dom "$url" > "$WORK/$name.html" || { bad "$name: chromium could not load $url"; return; }
  curl -fsS --max-time 10 "$base/api/overview" > "$WORK/$name-overview.json" || { bad "$name: /api/overview"; return; }
  local line
  while IFS= read -r line; do
    case "$line" in
      ok:*) ok "$name: ${line#ok: }" ;;
      *) bad "$name: ${line#bad: }" ;;
    esac
  done < <(python3 "$E2E_DIR/ui_check.py" "$WORK/$name.html" "$WORK/$name-overview.json" "$@" 2>&1)
  if chrome "$name-shot" --screenshot="$SHOTS/$name.png" "$url" >/dev/null && [ -s "$SHOTS/$name.png" ]; then
    ok "$name: screenshot $SHOTS/$name.png ($(stat -c %s "$SHOTS/$name.png") bytes)"
  else
    bad "$name: no screenshot"
  fi
}

# etag URL: the ETag URL answers with.
etag() { curl -fsS -D - -o /dev/null "$1" | tr -d '\r' | awk 'tolower($1) == "etag:" { print $2 }'; }

# headers BASE: the page's answers carry the policy; the view's ETag is answered 304 while it holds.
headers() {
  local name="$1" base="$2" tag
  curl -fsS -D "$WORK/$name-headers" -o /dev/null "$base/ui/" || { bad "$name: GET /ui/"; return; }
  has -i "^content-security-policy: .*script-src 'self';" "$WORK/$name-headers" &&
    ! has -i "unsafe-inline" "$WORK/$name-headers" && has -i "^x-content-type-options: nosniff" "$WORK/$name-headers" &&
    ok "$name: /ui/ is served with a Content-Security-Policy that allows no inline script, and nosniff" ||
    bad "$name: /ui/'s headers: $(tr -d '\r' < "$WORK/$name-headers" | head -c 600)"
  [ "$(curl -fsS -o /dev/null -w '%{content_type}' "$base/ui/app.js")" = "text/javascript; charset=utf-8" ] &&
    ok "$name: /ui/app.js is text/javascript, from the binary" || bad "$name: /ui/app.js's type"
  # A cluster still settling may move on between the two requests: three tries.
  local code try
  for try in 1 2 3; do
    tag="$(etag "$base/api/overview")"
    code="$(curl -sS -o "$WORK/$name-304" -w '%{http_code}' -H "If-None-Match: $tag" "$base/api/overview")"
    [ "$code" != 304 ] || break
  done
  [ -n "$tag" ] && [ "$code" = 304 ] && [ ! -s "$WORK/$name-304" ] &&
    ok "$name: /api/overview with its own ETag $tag: 304, nothing sent" ||
    bad "$name: /api/overview with ETag '$tag' answered $code ($(head -c 200 "$WORK/$name-304"))"
}

# --- demo: the embedded cluster.
"$HAMI" demo --keep --ui-listen 127.0.0.1:0 --kubeconfig-out "$WORK/demo.kubeconfig" \
  > "$WORK/demo.out" 2> "$WORK/logs/demo.log" < /dev/null &
DEMO_PID=$!
demo_page() { grep -o 'open http://127.0.0.1:[0-9]*/ui/' "$WORK/demo.out" | head -1 | cut -d' ' -f2; }
if wait_for 120 has -q 'open http://127.0.0.1:[0-9]*/ui/' "$WORK/demo.out"; then
  DEMO="$(demo_page)"
  ok "demo --keep prints the page's address: $DEMO"
else
  bad "demo --keep printed no page address within 120s"; tail -n 20 "$WORK/demo.out" "$WORK/logs/demo.log"; finish
fi
DEMO_BASE="${DEMO%/ui/}"
DK() { timeout 30 "$KUBECTL" --kubeconfig "$WORK/demo.kubeconfig" --request-timeout=20s "$@"; }
before="$(etag "$DEMO_BASE/api/overview")"
DK annotate node gpu-t4-1 --overwrite "hami.io/mutex.lock=$MARKUP" >/dev/null ||
  bad "demo: annotate gpu-t4-1 with markup in its lock"
markup_seen() { curl -fsS "$DEMO_BASE/api/nodes" | has -F 'onerror=document.title=1'; }
wait_for 30 markup_seen || bad "demo: the scheduler did not see gpu-t4-1's new lock annotation"
# The lock changed what /api/nodes shows: the tag taken before it goes stale (200 and a new tag) once the kept
# answer is older than its second.
stale() { [ "$(curl -sS -o /dev/null -w '%{http_code}' -H "If-None-Match: $before" "$DEMO_BASE/api/overview")" = 200 ]; }
wait_for 5 stale
code="$(curl -sS -o /dev/null -w '%{http_code}' -H "If-None-Match: $before" "$DEMO_BASE/api/overview")"
after="$(etag "$DEMO_BASE/api/overview")"
[ -n "$before" ] && [ "$code" = 200 ] && [ "$after" != "$before" ] &&
  ok "demo: a node lock set moved the view's generation: $before -> $after, the old tag answered 200" ||
  bad "demo: after the lock changed, the old tag $before answered $code, the tag now '$after'"
same_tags() {
  local e t
  t="$(etag "$DEMO_BASE/api/overview")"
  for e in nodes pods quotas capacity; do [ "$(etag "$DEMO_BASE/api/$e")" = "$t" ] || return 1; done
}
wait_for 10 same_tags && ok "demo: every /api/ view answers at the one generation once it settled" ||
  bad "demo: the /api/ views' tags never agree"
headers demo "$DEMO_BASE"
held="$(DK get pods -o json | python3 -c 'import json, sys
print(sum(1 for p in json.load(sys.stdin)["items"] if p["spec"].get("nodeName")))')"
[ "$held" = "$(curl -fsS "$DEMO_BASE/api/overview" | python3 -c 'import json, sys; print(json.load(sys.stdin)["pods"])')" ] &&
  ok "demo: the ledger holds the $held pods the cluster has bound" || bad "demo: $held pods bound, the ledger says otherwise"
fits="$(curl -fsS "$DEMO_BASE/api/capacity" | python3 -c 'import json, sys
print(" ".join("--shape %s %d" % (s["shape"], s["fits"]) for s in json.load(sys.stdin)["shapes"]))')"
[ -n "$fits" ] && ok "demo: /api/capacity counts its shapes: $fits" || bad "demo: /api/capacity has no shape"
# shellcheck disable=SC2086
page demo "$DEMO#explain=default/too-big" $fits \
  --refused default/too-big CardInsufficientMemory \
  --explained default/too-big "gpu-a100-1  4/4 CardInsufficientMemory; app needs 100000 MiB on one card: the closest, GPU-a100a-" \
  --text "unreadable: $MARKUP"
stop_pid "$DEMO_PID"
DEMO_PID=""
[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$DEMO_BASE/ui/")" = 000 ] &&
  ok "demo stopped: the page is gone with it" || bad "demo: the page still answers after the demo stopped"

# --- serve on the real control plane, as kube-scheduler's extender.
start_for_extender "$WORK" || finish
"$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$EXT_PORT" \
  --metrics-bind-address "127.0.0.1:$METRICS_PORT" --health-check-interval 1s \
  --device-config-file "$ROOT/deploy/device-config.yaml" --log-level debug > "$WORK/logs/hami-serve.log" 2>&1 < /dev/null &
SERVE_PID=$!
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" --node "gpu-1=nvidia:1x16000:10:$MARKUP" \
  --allocate-delay 20ms --register-interval 5s --device-config-file "$ROOT/deploy/device-config.yaml" \
  > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!
SERVE_BASE="http://127.0.0.1:$METRICS_PORT"
registered() { [ "$(K get node gpu-1 -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" = 10 ]; }
if wait_for 60 curl -fsS --max-time 3 "$EXT/readyz" && wait_for 60 registered; then
  ok "serve ready, gpu-1 registered with one card whose type is markup"
else
  bad "serve or gpu-1 not ready within 60s"; dump_logs; finish
fi
pod() {
  K create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1", "namespace": "default"},
 "spec": {"schedulerName": "hami-scheduler",
          "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "$2"}}}]}}
EOF
}
bound() { [ "$(K get pod "$1" -o 'jsonpath={.metadata.annotations.hami\.io/bind-phase}')" = success ]; }
pod holder 12000 && wait_for 60 bound holder && ok "holder holds 12000 MiB of gpu-1's card" ||
  { bad "holder not bound within 60s"; dump_logs; finish; }
pod wants 8000 || bad "create wants"
refused() { curl -fsS "$SERVE_BASE/api/pods" | has '"name":"wants","at"'; }
wait_for 60 refused && ok "kube-scheduler asked, our filter refused wants; /api/pods lists it" ||
  { bad "wants not refused within 60s"; dump_logs; }
[ "$(curl -s -o /dev/null -w '%{http_code}' "$EXT/ui/")" = 404 ] &&
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$EXT/api/pods")" = 404 ] &&
  ok "serve: neither the page nor /api/ on the extender's port" || bad "serve: the page or /api/ answers on the extender's port"
headers serve "$SERVE_BASE"
page serve "$SERVE_BASE/ui/#explain=default/wants" \
  --refused default/wants "1/1 CardInsufficientMemory" \
  --explained default/wants "needs 8000 MiB on one card" \
  --text "$MARKUP"
finish
