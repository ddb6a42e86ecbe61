#!/usr/bin/env bash
# e2e failover, against the REAL kube-apiserver and kube-scheduler (v1.38.0-beta.0, built by build.sh):
# two kube-scheduler + hami-scheduler pairs, as two replicas of HAMi's chart run them. Each pair has a host
# name of its own (a UTS namespace, unshare --uts): kube-scheduler's Lease holder identity is
# "<host name>_<uuid>", and our --leader-elect follows that Lease (HAMi's way), so the extender next to the
# leading kube-scheduler is the one that answers. Simulated device plugins publish the cards; a paced stream
# of GPU pods is created; mid-stream the leading pair is killed (SIGKILL, both processes). Checked: the other
# pair takes over within the lease duration (+ its retry period), every pod ends bound and allocated, no card
# is over-committed, no node lock is left, the hami.io/scheduler-role labels follow the leader, and the
# follower answered nothing before. Printed: the failover time (the Lease's expiry to the first pod bound by
# the new leader) and pods/s before and after.
#
#   tests/e2e/failover.sh [PATH/TO/hami-scheduler]   # default: ${BUILD_DIR:-build}/hami-scheduler
#
# Ends with "e2e failover: N passed, M failed"; exit 0 only if every check passed. Needs root (or
# CAP_SYS_ADMIN) for unshare --uts. Bounded by HAMI_E2E_FAILOVER_TIMEOUT seconds (default 300 with cached
# control-plane binaries). Environment: FAILOVER_PODS (default 90), FAILOVER_RATE (pods/s, default 3),
# FAILOVER_KILL_AFTER (pods bound before the kill, default 20). On a failure the work dir is kept.
set -uo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
source "$E2E_DIR/suite.sh"
bounded_reexec failover FAILOVER "$@"

HAMI="${1:-$ROOT/${BUILD_DIR:-build}/hami-scheduler}"
[ -x "$HAMI" ] || { bad "no hami-scheduler binary at $HAMI (build it, or pass its path)"; finish; }
HAMI="$(cd "$(dirname "$HAMI")" && pwd)/$(basename "$HAMI")"
PODS="${FAILOVER_PODS:-90}" RATE="${FAILOVER_RATE:-3}" KILL_AFTER="${FAILOVER_KILL_AFTER:-20}"
LEASE_DURATION=15  # kube-scheduler's defaults: 15 s lease, 10 s renew deadline, 2 s retry period
RETRY_PERIOD=2
NODES=4 CARDS=8

unshare --uts true 2>/dev/null || { bad "unshare --uts failed: each pair needs a host name of its own (run as root)"; finish; }
if ! BIN="$(bash "$E2E_DIR/build.sh")"; then bad "build (see the messages above)"; finish; fi
export HAMI_E2E_BIN="$BIN"
KUBECTL="${HAMI_E2E_KUBECTL:-$BIN/kubectl}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-e2e-failover.XXXXXX")"
declare -A SERVE_PID=() SCHED_PID=() EXT_PORT=() METRICS_PORT=() SCHED_PORT=() ACQ_PID=() ACQ_METRICS=()
PLUGINS_PID="" STREAM_PID=""
cleanup() {
  [ -z "$STREAM_PID" ] || kill "$STREAM_PID" 2>/dev/null
  stop_pid "$PLUGINS_PID"
  local p
  for p in a b; do stop_pid "${SCHED_PID[$p]:-}"; stop_pid "${SERVE_PID[$p]:-}"; stop_pid "${ACQ_PID[$p]:-}"; done
  bash "$E2E_DIR/stop.sh" "$WORK" >/dev/null 2>&1
  if [ "$FAIL" = 0 ] && [ "${HAMI_E2E_KEEP_WORK:-0}" != 1 ]; then rm -rf "$WORK"; else log "work dir kept: $WORK"; fi
}
trap cleanup EXIT
trap 'bad "interrupted or timed out"; finish' INT TERM
mkdir -p "$WORK/logs"

used=""
for p in a b; do
  for v in EXT_PORT METRICS_PORT SCHED_PORT; do
    port="$(free_port $used)" || { bad "no free loopback port"; finish; }
    used="$used $port"
    declare -n ref="$v"; ref[$p]=$port; unset -n ref
  done
done
if ! HAMI_E2E_RESERVED_PORTS="$used" bash "$E2E_DIR/start.sh" "$WORK" > "$WORK/logs/start.log" 2>&1; then
  tail -n 40 "$WORK/logs/start.log"; bad "start the control plane"; finish
fi
# shellcheck disable=SC1091
. "$WORK/env"
K() { timeout 30 "$KUBECTL" --kubeconfig "$HAMI_E2E_KUBECONFIG" --request-timeout=20s "$@"; }
dump_logs() {
  local f
  for f in kube-scheduler-a kube-scheduler-b serve-a serve-b sim-device-plugins; do
    log "---- last 25 lines of $f.log ----"; tail -n 25 "$WORK/logs/$f.log" 2>/dev/null
  done
}
metric() { # PAIR NAME: the value of an unlabelled metric of that pair's extender
  curl -fsS --max-time 3 "http://127.0.0.1:${METRICS_PORT[$1]}/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}

# The scheduler pods the leader labels (as the chart's Deployment would run them; no kubelet here, so
# they are bound to a node that does not exist and never start).
for p in a b; do
  K apply -f - >/dev/null <<EOF || bad "create scheduler pod hami-scheduler-$p"
apiVersion: v1
kind: Pod
metadata:
  name: hami-scheduler-$p
  namespace: kube-system
  labels: {app.kubernetes.io/component: hami-scheduler}
spec:
  nodeName: control-plane-$p
  containers: [{name: scheduler, image: registry.k8s.io/pause:3.10}]
EOF
done

in_uts() { # HOST OUT CMD...: CMD in a UTS namespace whose host name is HOST, output to OUT; prints its pid
  local host="$1" out="$2"; shift 2
  unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@" > "$out" 2>&1 < /dev/null &
  echo $!
}
for p in a b; do
  cfg="$WORK/kube-scheduler-$p.yaml"
  extender_scheduler_config "$cfg" "http://127.0.0.1:${EXT_PORT[$p]}" || { bad "scheduler config $p"; finish; }
  python3 - "$cfg" "$HAMI_E2E_KUBECONFIG" <<'PYEOF' || { bad "scheduler config $p: leader election"; finish; }
import sys
path, kubeconfig = sys.argv[1:]
text = open(path).read().replace("leaderElection:\n  leaderElect: false\n", "")
text += ("clientConnection:\n  kubeconfig: %s\nleaderElection:\n  leaderElect: true\n  resourceName: hami-scheduler\n"
         "  resourceNamespace: kube-system\n  leaseDuration: 15s\n  renewDeadline: 10s\n  retryPeriod: 2s\n") % kubeconfig
open(path, "w").write(text)
PYEOF
  SCHED_PID[$p]="$(in_uts "pair-$p" "$WORK/logs/kube-scheduler-$p.log" "$BIN/kube-scheduler" --config="$cfg" \
    --bind-address=127.0.0.1 --secure-port="${SCHED_PORT[$p]}" \
    --authentication-kubeconfig="$HAMI_E2E_KUBECONFIG" --authorization-kubeconfig="$HAMI_E2E_KUBECONFIG")"
  SERVE_PID[$p]="$(POD_NAME="hami-scheduler-$p" POD_NAMESPACE=kube-system in_uts "pair-$p" "$WORK/logs/serve-$p.log" \
    "$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:${EXT_PORT[$p]}" \
    --metrics-bind-address "127.0.0.1:${METRICS_PORT[$p]}" --kube-qps 50 --kube-burst 100 \
    --leader-elect=true --leader-elect-resource-name=hami-scheduler --leader-elect-resource-namespace=kube-system \
    --device-config-file "$ROOT/deploy/device-config.yaml")"
done
node_args=()
for i in $(seq 1 "$NODES"); do node_args+=(--node "gpu-$i=nvidia:${CARDS}x16384:10:NVIDIA-Tesla-T4"); done
"$HAMI" sim-device-plugins --kubeconfig "$HAMI_E2E_KUBECONFIG" "${node_args[@]}" --allocate-delay 20ms \
  --device-config-file "$ROOT/deploy/device-config.yaml" > "$WORK/logs/sim-device-plugins.log" 2>&1 < /dev/null &
PLUGINS_PID=$!

holder() { K get lease -n kube-system hami-scheduler -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
holder_pair() { local h; h="$(holder)"; case "$h" in pair-a_*) echo a ;; pair-b_*) echo b ;; esac; }
leads() { [ "$(metric "$1" hami_scheduler_leader)" = 1 ]; }
follows() { [ "$(metric "$1" hami_scheduler_leader)" = 0 ]; }
role() { K get pod -n kube-system "hami-scheduler-$1" -o jsonpath='{.metadata.labels.hami\.io/scheduler-role}'; }
readyz() { curl -fsS --max-time 3 "http://127.0.0.1:${EXT_PORT[$1]}/readyz"; }
# The leader's ledger has every node (a follower exports no ledger gauges: a dashboard summing replicas
# counts each card once).
ready_with_nodes() { [ "$(metric "$1" hami_scheduler_nodes)" = "$NODES" ] && readyz "$1"; }

held() { [ -n "$(holder)" ]; }
if ! wait_for 90 held; then
  bad "no kube-scheduler took Lease kube-system/hami-scheduler within 90 s"; dump_logs; finish
fi
OLD="$(holder_pair)"
[ -n "$OLD" ] || { bad "the Lease holder $(holder) is neither pair-a_ nor pair-b_"; dump_logs; finish; }
NEW=$([ "$OLD" = a ] && echo b || echo a)
if wait_for 60 ready_with_nodes "$OLD" && wait_for 60 readyz "$NEW" && wait_for 30 leads "$OLD" && follows "$NEW"; then
  ok "kube-scheduler of pair-$OLD holds the Lease ($(holder)); its extender leads, pair-$NEW's follows (both ready, $NODES nodes)"
else
  bad "pair-$OLD's extender does not lead or pair-$NEW's does not follow"; dump_logs; finish
fi
labels_follow() { [ "$(role "$1")" = leader ] && [ "$(role "$2")" = follower ]; }
if wait_for 30 labels_follow "$OLD" "$NEW"; then ok "hami.io/scheduler-role: hami-scheduler-$OLD leader, hami-scheduler-$NEW follower"
else bad "scheduler-role labels: $OLD=$(role "$OLD") $NEW=$(role "$NEW")"; fi
readyz_new="$(curl -sS --max-time 3 "http://127.0.0.1:${EXT_PORT[$NEW]}/readyz")"
case "$readyz_new" in "ok (follower: Lease kube-system/hami-scheduler is held by pair-${OLD}_"*) ok "the follower's /readyz: $readyz_new" ;;
  *) bad "the follower's /readyz says: $readyz_new" ;; esac

# ------------------------------------------------------------------ the stream, and the kill mid-stream
python3 "$E2E_DIR/bench_pods.py" --server "$HAMI_E2E_APISERVER" --ca "$HAMI_E2E_CA" --cert "$WORK/pki/admin.crt" \
  --key "$WORK/pki/admin.key" --pods "$PODS" --rate "$RATE" --concurrency 4 --prefix stream --deadline 180 \
  --times "$WORK/times.json" > "$WORK/stream.json" 2> "$WORK/logs/stream.err" &
STREAM_PID=$!
bound_count() { K get pods -n default -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' 2>/dev/null | grep -c . ; }
enough_bound() { [ "$(bound_count)" -ge "$KILL_AFTER" ]; }
if ! wait_for 90 enough_bound; then
  bad "$KILL_AFTER pods were not bound within 90 s before the kill"; dump_logs; finish
fi
binds() { curl -fsS --max-time 3 "http://127.0.0.1:${METRICS_PORT[$1]}/metrics" | awk '$1 == "hami_scheduler_bind_results_total{result=\"success\"}" { print $2 }'; }
new_binds_before="$(binds "$NEW")"
if [ "$new_binds_before" = 0 ]; then ok "the follower bound nothing while pair-$OLD led ($(binds "$OLD") binds by the leader)"
else bad "the follower answered $new_binds_before binds while it followed"; fi
renew_before="$(K get lease -n kube-system hami-scheduler -o jsonpath='{.spec.renewTime}')"
kill -KILL "${SCHED_PID[$OLD]}" "${SERVE_PID[$OLD]}"
t_kill="$(date +%s.%N)"
SCHED_PID[$OLD]="" SERVE_PID[$OLD]=""
# The last renewal the killed kube-scheduler wrote (it may have renewed between the read above and the kill).
renew_last="$(K get lease -n kube-system hami-scheduler -o jsonpath='{.spec.renewTime}')"
[ -n "$renew_last" ] || renew_last="$renew_before"
log "killed pair-$OLD (kube-scheduler and extender) after $(bound_count) pods bound; its last renewal $renew_last"
took_over() { [ "$(holder_pair)" = "$NEW" ]; }
if wait_for 40 took_over; then
  t_holder="$(date +%s.%N)"
  acquired_at="$(K get lease -n kube-system hami-scheduler -o jsonpath='{.spec.acquireTime}')"
  ok "pair-$NEW's kube-scheduler took the Lease ($(holder)) $(awk -v a="$t_holder" -v b="$t_kill" 'BEGIN { printf "%.1f", a - b }') s after the kill"
else
  bad "pair-$NEW did not take the Lease within 40 s of the kill (holder: $(holder))"; dump_logs; finish
fi
if wait_for 20 leads "$NEW"; then ok "pair-$NEW's extender leads"; else bad "pair-$NEW's extender does not lead"; fi
if wait_for 30 labels_follow "$NEW" "$OLD"; then ok "the labels followed: hami-scheduler-$NEW leader, hami-scheduler-$OLD follower"
else bad "scheduler-role labels after the failover: $NEW=$(role "$NEW") $OLD=$(role "$OLD")"; fi

if wait "$STREAM_PID"; then STREAM_OK=1; else STREAM_OK=0; fi
STREAM_PID=""
summary="$(cat "$WORK/stream.json")"
log "stream: $summary"
field() { python3 -c 'import json,sys; v=json.load(sys.stdin).get(sys.argv[1]); print("-" if v is None else v)' "$1" <<<"$summary"; }
if [ "$STREAM_OK" = 1 ] && [ "$(field allocated)" = "$PODS" ]; then
  ok "every pod of the stream ($PODS, $RATE/s) ended bound and allocated"
else
  bad "$(field allocated) of $PODS pods bound and allocated; errors: $(field errors)"; dump_logs
fi
if [ "$(field over_committed_cards)" = 0 ]; then ok "no card over-committed (split 10, 16384 MiB, 100 cores)"
else bad "$(field over_committed_cards) cards over-committed"; fi

locks_left() { K get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.annotations.hami\.io/mutex\.lock}{"\n"}{end}' | grep -v '=$'; }
no_locks() { local nodes; nodes="$(K get nodes -o name)" && [ -n "$nodes" ] && [ -z "$(locks_left)" ]; }
if wait_for 40 no_locks; then
  ok "no node lock left"
else
  bad "node locks left: $(locks_left | tr '\n' ' ')"
fi

# The figures: when the Lease expired (the killed holder's last renewal + the lease duration), the first pod
# bound after the kill (only the new leader binds then), pods/s bound before the kill and after the new
# leader's first bind.
figures="$(python3 - "$WORK/times.json" "$t_kill" "$renew_last" "$LEASE_DURATION" "${acquired_at:-}" <<'PYEOF'
import datetime, json, sys
times, t_kill, renew, lease = json.load(open(sys.argv[1])), float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
stamp = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
expiry = stamp(renew) + lease
acquired = stamp(sys.argv[5]) if sys.argv[5] else None
bound = sorted(t["bound"] for t in times.values() if t["bound"])
# A Binding the killed leader had sent may show up to a moment after the kill; the new leader cannot bind
# before the Lease expires (>= 13 s later).
before = [b for b in bound if b <= t_kill + 1]
after = [b for b in bound if b > t_kill + 1]
if not after or len(before) < 2:
    print("error no pods bound after the kill" if not after else "error fewer than 2 pods bound before the kill")
    sys.exit()
first_new = after[0]
rate_before = (len(before) - 1) / (before[-1] - before[0]) if before[-1] > before[0] else 0
rate_after = (len(after) - 1) / (after[-1] - first_new) if after[-1] > first_new else 0
print(f"ok {first_new - expiry:.2f} {first_new - t_kill:.2f} {expiry - t_kill:.2f} {rate_before:.2f} {rate_after:.2f} "
      f"{len(before)} {len(after)} {first_new - acquired if acquired else float('nan'):.2f}")
PYEOF
)"
read -r status gap since_kill expiry_after_kill rate_before rate_after n_before n_after after_acquire <<<"$figures"
if [ "$status" = ok ]; then
  log "FIGURES: lease expiry -> first pod bound by the new leader ${gap} s (the new kube-scheduler's acquireTime -> that bind ${after_acquire} s); kill -> first bind ${since_kill} s (the Lease expired ${expiry_after_kill} s after the kill); pods/s bound: ${rate_before} before the kill ($n_before pods), ${rate_after} after the first new bind ($n_after pods)"
  printf '%s\n' "$figures" > "${FAILOVER_FIGURES:-/dev/null}"
  # Within the lease duration: the new leader's first bind comes within its retry period (jittered 1.2x) and
  # a few scheduling cycles of the expiry (kube-scheduler retries its pods with a backoff of its own).
  if awk -v g="$gap" -v r="$RETRY_PERIOD" 'BEGIN { exit !(g >= 0 && g <= r * 1.2 + 8) }' &&
     awk -v s="$since_kill" -v l="$LEASE_DURATION" -v r="$RETRY_PERIOD" 'BEGIN { exit !(s <= l + r * 1.2 + 8) }'; then
    ok "the new leader bound its first pod ${gap} s after the Lease expired (${since_kill} s after the kill; lease ${LEASE_DURATION} s)"
  else
    bad "the new leader's first bind came ${gap} s after the Lease expired (${since_kill} s after the kill)"
  fi
else
  bad "failover figures: ${figures#error }"
fi
log "pair-$NEW's extender bound $(binds "$NEW") pods, all after it became the leader"

# ------------------------------------------------------------------ our own Lease (--leader-elect-mode=acquire)
# Two extenders without a kube-scheduler to follow take Lease kube-system/hami-extender themselves (short
# timings: 4 s lease, 3 s renew deadline, 1 s retry period). The real API server must accept what we write
# (MicroTime stamps, the compare-and-swap); SIGTERM on the leader releases the Lease, so the other takes over
# within its retry period instead of the lease duration.
for p in a b; do
  ext="$(free_port $used)" && used="$used $ext" && ACQ_METRICS[$p]="$(free_port $used)" && used="$used ${ACQ_METRICS[$p]}" ||
    { bad "no free loopback port"; finish; }
  "$HAMI" serve --kubeconfig "$HAMI_E2E_KUBECONFIG" --http_bind "127.0.0.1:$ext"     --metrics-bind-address "127.0.0.1:${ACQ_METRICS[$p]}" --device-config-file "$ROOT/deploy/device-config.yaml"     --leader-elect --leader-elect-mode=acquire --leader-elect-identity="acquire-$p"     --leader-elect-resource-name=hami-extender --leader-elect-resource-namespace=kube-system     --leader-elect-lease-duration=4s --leader-elect-renew-deadline=3s --leader-elect-retry-period=1s     > "$WORK/logs/acquire-$p.log" 2>&1 < /dev/null &
  ACQ_PID[$p]=$!
done
acq_holder() { K get lease -n kube-system hami-extender -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
acq_leads() { curl -fsS --max-time 3 "http://127.0.0.1:${ACQ_METRICS[$1]}/metrics" | has -x 'hami_scheduler_leader 1'; }
acq_follows() { curl -fsS --max-time 3 "http://127.0.0.1:${ACQ_METRICS[$1]}/metrics" | has -x 'hami_scheduler_leader 0'; }
acq_one_leads() { case "$(acq_holder)" in acquire-a_*|acquire-b_*) ;; *) return 1 ;; esac; }
if wait_for 30 acq_one_leads; then
  first="$(acq_holder)"; first="${first#acquire-}"; first="${first%%_*}"
  second=$([ "$first" = a ] && echo b || echo a)
  acq_renew_time() { K get lease -n kube-system hami-extender -o jsonpath='{.spec.renewTime}'; }
  renew1="$(acq_renew_time)"
  renewed() { [ "$(acq_renew_time)" != "$renew1" ]; }
  if wait_for 10 renewed && renew2="$(acq_renew_time)" && wait_for 10 acq_leads "$first" && acq_follows "$second"; then
    ok "acquire mode: acquire-$first created and renews Lease kube-system/hami-extender ($renew1 -> $renew2), acquire-$second follows"
  else
    bad "acquire mode: leader $first / follower $second / renewals $renew1 -> $renew2"
  fi
  kill -TERM "${ACQ_PID[$first]}"
  t_term="$(date +%s.%N)"
  acq_second_holds() { case "$(acq_holder)" in "acquire-${second}_"*) ;; *) return 1 ;; esac; }
  if wait "${ACQ_PID[$first]}" && wait_for 10 acq_second_holds && wait_for 5 acq_leads "$second"; then
    handover="$(awk -v a="$(date +%s.%N)" -v b="$t_term" 'BEGIN { printf "%.1f", a - b }')"
    # An expiry would take the lease duration (4 s) + the retry period; a release, one retry period.
    if awk -v h="$handover" 'BEGIN { exit !(h < 4) }'; then
      ok "SIGTERM: acquire-$first exited 0 releasing the Lease; acquire-$second took over $handover s after the signal (lease 4 s)"
    else
      bad "acquire-$second took over $handover s after the SIGTERM: the Lease expired rather than being released"
    fi
  else
    bad "SIGTERM on acquire-$first: the Lease was not handed over (holder: $(acq_holder))"; tail -n 5 "$WORK/logs/acquire-$first.log"
  fi
  grep -q "leader election: released Lease kube-system/hami-extender" "$WORK/logs/acquire-$first.log" ||
    bad "acquire-$first did not log its release"
  ACQ_PID[$first]=""
else
  bad "acquire mode: no extender took Lease kube-system/hami-extender within 30 s"; tail -n 5 "$WORK/logs/acquire-a.log"
fi
for p in a b; do stop_pid "${ACQ_PID[$p]:-}"; done
finish
