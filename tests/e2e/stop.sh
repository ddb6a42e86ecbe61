#!/usr/bin/env bash
# Stops what start.sh started in WORKDIR: kube-scheduler, kube-apiserver, etcd,
# each by the pid start.sh recorded (SIGTERM, then SIGKILL after a deadline).
# Safe to call twice or on a half-started WORKDIR. Keeps WORKDIR (logs, certs)
# unless --clean is given.
#   tests/e2e/stop.sh WORKDIR [--clean]
set -uo pipefail
WORK="${1:?usage: stop.sh WORKDIR [--clean]}"
CLEAN="${2:-}"
GRACE="${HAMI_E2E_STOP_GRACE:-15}"
log() { printf '[e2e stop] %s\n' "$*" >&2; }
[ -d "$WORK" ] || { log "no such work dir $WORK"; exit 0; }

ours() { # pid component: is pid still the process start.sh launched?
  [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' < "/proc/$1/cmdline" | grep "/$2 " > /dev/null
}
for c in kube-scheduler kube-apiserver etcd; do
  f="$WORK/pids/$c.pid"
  [ -s "$f" ] || continue
  pid="$(cat "$f")"
  if ours "$pid" "$c"; then
    kill -TERM "$pid" 2>/dev/null
    deadline=$(( $(date +%s) + GRACE ))
    while ours "$pid" "$c" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
    if ours "$pid" "$c"; then
      log "$c (pid $pid) ignored SIGTERM for ${GRACE}s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null
    fi
    log "stopped $c (pid $pid)"
  fi
  rm -f "$f"
done
if [ "$CLEAN" = --clean ]; then
  rm -rf "$WORK"
  log "removed $WORK"
fi
exit 0
