# Sourced by the e2e suites (smoke.sh, extender.sh): re-executes the calling script once under timeout(1), so
# that the whole run is bounded, process group and all, and prints a closing line for it if the inner run could
# not; then gives the suite its reporting helpers.
#
#   source "$E2E_DIR/suite.sh"; bounded_reexec smoke SMOKE "$@"
#
# NAME names the suite in messages ("e2e NAME: ..."); VAR picks the variables HAMI_E2E_<VAR>_TIMEOUT (the
# limit in seconds; default 300 with cached binaries, 1800 when build.sh must build them),
# HAMI_E2E_<VAR>_BOUNDED (set inside the bounded run) and HAMI_E2E_<VAR>_DONE (a file the inner run creates
# once it has printed its own closing line). Returns at once inside the bounded run, where the suite's
# helpers below (log, ok, bad, finish) then report under NAME.
bounded_reexec() {
  local name=$1 var=$2
  shift 2
  local bounded_var="HAMI_E2E_${var}_BOUNDED" done_var="HAMI_E2E_${var}_DONE" limit_var="HAMI_E2E_${var}_TIMEOUT"
  E2E_SUITE=$name
  E2E_SUITE_DONE_VAR=$done_var
  [ -z "${!bounded_var:-}" ] || return 0
  export "$bounded_var"=1
  local limit="${!limit_var:-}"
  if [ -z "$limit" ]; then
    # A cached build makes a run take well under a minute.
    if HAMI_E2E_CHECK_ONLY=1 bash "$E2E_DIR/build.sh" >/dev/null 2>&1; then limit=300; else limit=1800; fi
  fi
  local done_file
  done_file="$(mktemp "${TMPDIR:-/tmp}/hami-e2e-$name-done.XXXXXX")"
  rm -f "$done_file"
  export "$done_var"="$done_file"
  timeout --kill-after=30 "$limit" bash "$0" "$@"
  local rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "[e2e $name] timed out after ${limit}s ($limit_var)"
  fi
  if [ ! -e "$done_file" ]; then
    echo "e2e $name: 0 passed, 1 failed"
    [ "$rc" != 0 ] || rc=1
  fi
  rm -f "$done_file"
  exit "$rc"
}

# The suite's reporting: `ok`/`bad` count checks, `finish` prints the closing line `e2e NAME: P passed, F failed`,
# marks it printed for the bounded wrapper, and exits 0 only if every check passed (and there was one).
PASS=0
FAIL=0
T_START=$(date +%s)
log() { printf '[e2e %s] %s\n' "$E2E_SUITE" "$*"; }
ok() { PASS=$((PASS + 1)); log "PASS: $*"; }
bad() { FAIL=$((FAIL + 1)); log "FAIL: $*"; }
finish() {
  log "total $(( $(date +%s) - T_START ))s"
  echo "e2e $E2E_SUITE: $PASS passed, $FAIL failed"
  local done_file="${!E2E_SUITE_DONE_VAR:-}"
  [ -z "$done_file" ] || : > "$done_file"
  [ "$FAIL" = 0 ] && [ "$PASS" -gt 0 ]
  exit $?
}

# --- Process and wait helpers shared by the suites that run our own processes (extender.sh, bench.sh).

# stop_pid PID: SIGTERM, SIGKILL after 10 s.
stop_pid() {
  local pid="$1" i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
}

# end_suite_run WORK PID...: stops the processes (stop_pid), then the control plane started in WORK, and
# removes WORK when every check passed (HAMI_E2E_KEEP_WORK=1 keeps it): a suite's EXIT trap.
end_suite_run() {
  local work="$1" pid
  shift
  for pid in "$@"; do stop_pid "$pid"; done
  bash "$E2E_DIR/stop.sh" "$work" >/dev/null 2>&1
  if [ "$FAIL" = 0 ] && [ "${HAMI_E2E_KEEP_WORK:-0}" != 1 ]; then rm -rf "$work"; else log "work dir kept: $work"; fi
}

# free_port [EXCLUDED...]: prints a loopback TCP port nobody listens on and not among EXCLUDED.
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12000 ))
    [[ " $* " != *" $p "* ]] || continue
    if [ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ]; then echo "$p"; return 0; fi
  done
  return 1
}

# has PATTERN...: `grep -q` that reads its input to the end. The suites run with pipefail, and `grep -q` stops
# reading at the first match: a producer still writing (curl with a large /metrics) then dies of SIGPIPE and
# the whole pipeline fails although the line was there.
has() { grep "$@" > /dev/null; }

# wait_for SECONDS COMMAND...: true once COMMAND succeeds, false at the deadline.
wait_for() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

# extender_scheduler_config OUT URL: deploy/kube-scheduler-config.yaml with its urlPrefix pointing at URL.
extender_scheduler_config() {
  local out="$1" url="$2"
  sed "s#urlPrefix: http://127.0.0.1:8080#urlPrefix: $url#" "$E2E_DIR/../../deploy/kube-scheduler-config.yaml" > "$out"
  grep -q "urlPrefix: $url\$" "$out"
}

# start_for_extender WORK: the control plane, its kube-scheduler configured as deploy/ ships it
# (WORK/kube-scheduler-config.yaml) with the extender on a free loopback port. Sets EXT_PORT, METRICS_PORT
# (free for serve's metrics), EXT and what WORK/env exports (HAMI_E2E_KUBECONFIG, ...); defines K (kubectl at
# $KUBECTL with timeouts) and dump_logs (the end of WORK/logs' kube-scheduler, serve and plugin logs). False,
# with the reason said, when any of it fails.
start_for_extender() {
  local work="$1"
  E2E_LOGS="$work/logs"  # dump_logs' (called after this returns)
  EXT_PORT="$(free_port)" && METRICS_PORT="$(free_port "$EXT_PORT")" || { bad "no free loopback port"; return 1; }
  EXT="http://127.0.0.1:$EXT_PORT"
  mkdir -p "$work/logs"
  extender_scheduler_config "$work/kube-scheduler-config.yaml" "$EXT" ||
    { bad "deploy/kube-scheduler-config.yaml has no urlPrefix to point at $EXT"; return 1; }
  if ! HAMI_E2E_RESERVED_PORTS="$EXT_PORT $METRICS_PORT" bash "$E2E_DIR/start.sh" "$work" \
      --scheduler-config "$work/kube-scheduler-config.yaml" > "$work/logs/start.log" 2>&1; then
    tail -n 40 "$work/logs/start.log"; bad "start the control plane"; return 1
  fi
  # shellcheck disable=SC1091
  . "$work/env"
  K() { timeout 30 "$KUBECTL" --kubeconfig "$HAMI_E2E_KUBECONFIG" --request-timeout=20s "$@"; }
  dump_logs() {
    local f
    for f in kube-scheduler hami-serve sim-device-plugins; do
      log "---- last 40 lines of $f.log ----"; tail -n 40 "$E2E_LOGS/$f.log" 2>/dev/null
    done
  }
}
