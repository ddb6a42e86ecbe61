#!/usr/bin/env bash
# Starts a throw-away control plane on loopback: etcd, kube-apiserver and
# (optionally) kube-scheduler, from the binaries build.sh caches.
#
#   tests/e2e/start.sh WORKDIR [--scheduler] [--scheduler-config FILE]
#   tests/e2e/stop.sh  WORKDIR
#
# WORKDIR (created if missing, must be empty of a running plane) receives:
#   pki/                CA, apiserver serving cert (127.0.0.1, localhost),
#                       admin client cert (CN=admin, O=system:masters),
#                       service-account signing key pair
#   tokens.csv          static token file (--token-auth-file)
#   kubeconfig          admin kubeconfig (client certificate)
#   kubeconfig-token    kubeconfig that authenticates with the static token
#   env                 sourceable: HAMI_E2E_APISERVER, HAMI_E2E_KUBECONFIG, ports...
#   logs/<component>.log, pids/<component>.pid, etcd-data/
#
# --scheduler starts kube-scheduler with a generated minimal
# KubeSchedulerConfiguration; --scheduler-config FILE starts it with FILE
# instead. With --config, kube-scheduler ignores --kubeconfig, so FILE's
# clientConnection.kubeconfig must point at the admin kubeconfig: write it as
# @HAMI_E2E_KUBECONFIG@ (and @HAMI_E2E_WORKDIR@ for the work dir) and start.sh
# substitutes it; if FILE sets no kubeconfig at all, start.sh adds it.
# The scheduler serves /healthz on 127.0.0.1:<free port>
# (HAMI_E2E_SCHEDULER_PORT=0 turns its serving off; the health wait is skipped).
#
# Environment:
#   HAMI_E2E_BIN        directory holding the binaries (default: run build.sh,
#                       which reuses its cache)
#   HAMI_E2E_TIMEOUT    seconds each component may take to become ready (default 120)
#   HAMI_E2E_RESERVED_PORTS  ports the caller uses itself (space-separated); not handed out here
#   HAMI_E2E_APISERVER_ARGS / HAMI_E2E_SCHEDULER_ARGS  extra flags, word-split
#
# Every wait has a deadline; on failure the component's log tail is printed,
# everything started so far is stopped, and the exit status is non-zero.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf '[e2e start] %s\n' "$*" >&2; }

usage() { sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

WORK=""
WITH_SCHED=0
SCHED_CONFIG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scheduler) WITH_SCHED=1 ;;
    --scheduler-config) WITH_SCHED=1; SCHED_CONFIG="${2:?--scheduler-config needs a file}"; shift ;;
    --scheduler-config=*) WITH_SCHED=1; SCHED_CONFIG="${1#*=}" ;;
    -h|--help) usage ;;
    -*) log "unknown option $1"; usage ;;
    *) [ -z "$WORK" ] || usage; WORK="$1" ;;
  esac
  shift
done
[ -n "$WORK" ] || usage
if [ -n "$SCHED_CONFIG" ]; then
  [ -r "$SCHED_CONFIG" ] || { log "cannot read scheduler config $SCHED_CONFIG"; exit 2; }
  SCHED_CONFIG="$(cd "$(dirname "$SCHED_CONFIG")" && pwd)/$(basename "$SCHED_CONFIG")"
fi
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
TIMEOUT="${HAMI_E2E_TIMEOUT:-120}"

for tool in openssl curl ss; do
  command -v "$tool" >/dev/null || { log "missing '$tool' (Debian: apt-get install -y openssl curl iproute2)"; exit 1; }
done

for c in etcd kube-apiserver kube-scheduler; do
  if [ -s "$WORK/pids/$c.pid" ] && kill -0 "$(cat "$WORK/pids/$c.pid")" 2>/dev/null; then
    log "$c from an earlier start is still running in $WORK (pid $(cat "$WORK/pids/$c.pid")); run stop.sh $WORK first"
    exit 1
  fi
done

BIN="${HAMI_E2E_BIN:-}"
if [ -z "$BIN" ]; then
  BIN="$(bash "$E2E_DIR/build.sh")" || { log "build.sh failed"; exit 1; }
fi
for c in etcd kube-apiserver kube-scheduler; do
  [ -x "$BIN/$c" ] || { log "no $BIN/$c (run tests/e2e/build.sh)"; exit 1; }
done

rm -rf "$WORK/pki" "$WORK/etcd-data" "$WORK/logs" "$WORK/pids"
mkdir -p "$WORK/pki" "$WORK/logs" "$WORK/pids" "$WORK/etcd-data"
chmod 700 "$WORK/etcd-data"
PKI="$WORK/pki"

failed() { # component: print why and the log tail, stop everything, exit 1
  local c="$1"; shift
  log "FAILED: $c: $*"
  if [ -f "$WORK/logs/$c.log" ]; then
    log "---- last 40 lines of $WORK/logs/$c.log ----"
    tail -n 40 "$WORK/logs/$c.log" >&2 || true
    log "---- end of $c log ----"
  fi
  bash "$E2E_DIR/stop.sh" "$WORK" >&2 || true
  exit 1
}
trap 'failed start.sh "interrupted"' INT TERM

# ---------------------------------------------------------------- ports
declare -A TAKEN=()
# Ports the caller has already handed out (e.g. extender.sh's for our extender), space-separated.
for p in ${HAMI_E2E_RESERVED_PORTS:-}; do TAKEN[$p]=1; done
free_port() { # sets $1 to a loopback TCP port nobody listens on (and that we did not hand out)
  local p i
  for i in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12000 ))
    [ -z "${TAKEN[$p]:-}" ] || continue
    # Assigned here, not echoed: TAKEN must be updated in this shell, not in a $(...) subshell.
    if [ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ]; then TAKEN[$p]=1; printf -v "$1" '%s' "$p"; return 0; fi
  done
  log "no free port found"; return 1
}
free_port ETCD_CLIENT_PORT
free_port ETCD_PEER_PORT
free_port APISERVER_PORT
if [ -n "${HAMI_E2E_SCHEDULER_PORT:-}" ]; then SCHED_PORT=$HAMI_E2E_SCHEDULER_PORT; else free_port SCHED_PORT; fi
APISERVER="https://127.0.0.1:$APISERVER_PORT"

# ---------------------------------------------------------------- certificates
t0=$(date +%s)
ossl() { openssl "$@" 2>>"$WORK/logs/openssl.log" || failed openssl "openssl $1 failed (see $WORK/logs/openssl.log)"; }
newkey() { ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1"; chmod 600 "$1"; }
sign() { # name subject extfile-contents
  local n="$1" subj="$2" ext="$3"
  newkey "$PKI/$n.key"
  ossl req -new -key "$PKI/$n.key" -subj "$subj" -out "$PKI/$n.csr"
  printf '%s\n' "$ext" > "$PKI/$n.ext"
  ossl x509 -req -in "$PKI/$n.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 7 -sha256 -extfile "$PKI/$n.ext" -out "$PKI/$n.crt"
}
newkey "$PKI/ca.key"
ossl req -new -key "$PKI/ca.key" -subj "/CN=hami-e2e-ca" -out "$PKI/ca.csr"
printf '%s\n' "basicConstraints=critical,CA:TRUE" "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
  "subjectKeyIdentifier=hash" > "$PKI/ca.ext"
ossl x509 -req -in "$PKI/ca.csr" -signkey "$PKI/ca.key" -days 7 -sha256 -extfile "$PKI/ca.ext" -out "$PKI/ca.crt"
sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
sign admin "/O=system:masters/CN=admin" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
# Front-proxy (request-header) CA and client: lets the aggregation layer and
# delegated authentication (kube-scheduler's secure port) work without errors.
newkey "$PKI/front-proxy-ca.key"
ossl req -new -key "$PKI/front-proxy-ca.key" -subj "/CN=hami-e2e-front-proxy-ca" -out "$PKI/front-proxy-ca.csr"
ossl x509 -req -in "$PKI/front-proxy-ca.csr" -signkey "$PKI/front-proxy-ca.key" -days 7 -sha256 \
  -extfile "$PKI/ca.ext" -out "$PKI/front-proxy-ca.crt"
newkey "$PKI/front-proxy-client.key"
ossl req -new -key "$PKI/front-proxy-client.key" -subj "/CN=front-proxy-client" -out "$PKI/front-proxy-client.csr"
printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=clientAuth" > "$PKI/front-proxy-client.ext"
ossl x509 -req -in "$PKI/front-proxy-client.csr" -CA "$PKI/front-proxy-ca.crt" -CAkey "$PKI/front-proxy-ca.key" \
  -CAcreateserial -days 7 -sha256 -extfile "$PKI/front-proxy-client.ext" -out "$PKI/front-proxy-client.crt"
newkey "$PKI/sa.key"
ossl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
TOKEN="$(openssl rand -hex 24)"
# token,user,uid,"group1,group2"
printf '%s,token-admin,hami-e2e-token-admin,"system:masters"\n' "$TOKEN" > "$WORK/tokens.csv"
chmod 600 "$WORK/tokens.csv"
log "certificates, keys and token generated in $(( $(date +%s) - t0 ))s"

# ---------------------------------------------------------------- kubeconfigs
write_kubeconfig() { # file user-yaml
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hami-e2e
  cluster:
    server: $APISERVER
    certificate-authority: $PKI/ca.crt
users:
- name: hami-e2e-user
  user:
$2
contexts:
- name: hami-e2e
  context:
    cluster: hami-e2e
    user: hami-e2e-user
    namespace: default
current-context: hami-e2e
EOF
  chmod 600 "$1"
}
write_kubeconfig "$WORK/kubeconfig" "    client-certificate: $PKI/admin.crt
    client-key: $PKI/admin.key"
write_kubeconfig "$WORK/kubeconfig-token" "    token: $TOKEN"

# ---------------------------------------------------------------- helpers
launch() { # component args... (stdout+stderr to logs/<component>.log)
  local c="$1"; shift
  log "starting $c"
  printf '%q ' "$BIN/$c" "$@" > "$WORK/logs/$c.cmdline"
  nohup "$BIN/$c" "$@" > "$WORK/logs/$c.log" 2>&1 < /dev/null &
  echo $! > "$WORK/pids/$c.pid"
}
wait_ready() { # component description command...
  local c="$1" what="$2"; shift 2
  local pid deadline t0
  pid="$(cat "$WORK/pids/$c.pid")"
  t0=$(date +%s); deadline=$(( t0 + TIMEOUT ))
  until "$@" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || failed "$c" "exited before $what (pid $pid)"
    [ "$(date +%s)" -lt "$deadline" ] || failed "$c" "not $what within ${TIMEOUT}s"
    sleep 0.5
  done
  log "$c $what after $(( $(date +%s) - t0 ))s"
}
CURL_ADMIN=(curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key")
body_is_ok() { [ "$("$@")" = ok ]; }

# ---------------------------------------------------------------- etcd
launch etcd \
  --name=hami-e2e \
  --data-dir="$WORK/etcd-data" \
  --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="hami-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster-state=new \
  --unsafe-no-fsync \
  --quota-backend-bytes=$((1024 * 1024 * 1024)) \
  --log-level=warn
etcd_healthy() { curl -fsS --max-time 3 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep '"health":"true"' > /dev/null; }
wait_ready etcd "healthy" etcd_healthy

# ---------------------------------------------------------------- kube-apiserver
# Admission plugins that only work together with kube-controller-manager (not
# run here) are disabled:
#  - ServiceAccount rejects pods until the "default" ServiceAccount exists,
#    which the service-account controller creates;
#  - TaintNodesByCondition puts node.kubernetes.io/not-ready:NoSchedule on every
#    new Node, which only the node-lifecycle controller removes, so no pod
#    would ever be scheduled on a Node created by a test.
# shellcheck disable=SC2086
launch kube-apiserver \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="$APISERVER_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --authorization-mode=RBAC \
  --anonymous-auth=true \
  --client-ca-file="$PKI/ca.crt" \
  --tls-cert-file="$PKI/apiserver.crt" \
  --tls-private-key-file="$PKI/apiserver.key" \
  --token-auth-file="$WORK/tokens.csv" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
  --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --allow-privileged=true \
  --profiling=false \
  --endpoint-reconciler-type=none \
  ${HAMI_E2E_APISERVER_ARGS:-}
wait_ready kube-apiserver "ready (/readyz)" body_is_ok "${CURL_ADMIN[@]}" "$APISERVER/readyz"
wait_ready kube-apiserver "serving namespace default" "${CURL_ADMIN[@]}" "$APISERVER/api/v1/namespaces/default"

# ---------------------------------------------------------------- kube-scheduler
if [ "$WITH_SCHED" = 1 ]; then
  CFG="$WORK/scheduler-config.yaml"
  if [ -n "$SCHED_CONFIG" ]; then
    sed -e "s#@HAMI_E2E_KUBECONFIG@#$WORK/kubeconfig#g" -e "s#@HAMI_E2E_WORKDIR@#$WORK#g" "$SCHED_CONFIG" > "$CFG"
    if ! grep -Eq '^[[:space:]]*kubeconfig:' "$CFG"; then
      if grep -Eq '^clientConnection:' "$CFG"; then
        sed -i "s#^clientConnection:.*#clientConnection:\n  kubeconfig: $WORK/kubeconfig#" "$CFG"
      else
        printf 'clientConnection:\n  kubeconfig: %s\n' "$WORK/kubeconfig" >> "$CFG"
      fi
    fi
  else
    cat > "$CFG" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $WORK/kubeconfig
leaderElection:
  leaderElect: false
EOF
  fi
  # shellcheck disable=SC2086
  launch kube-scheduler \
    --config="$CFG" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHED_PORT" \
    --authentication-kubeconfig="$WORK/kubeconfig" \
    --authorization-kubeconfig="$WORK/kubeconfig" \
    ${HAMI_E2E_SCHEDULER_ARGS:-}
  if [ "$SCHED_PORT" != 0 ]; then
    wait_ready kube-scheduler "healthy (/healthz)" body_is_ok curl -fsS --max-time 3 -k "https://127.0.0.1:$SCHED_PORT/healthz"
  else
    sleep 2
    kill -0 "$(cat "$WORK/pids/kube-scheduler.pid")" 2>/dev/null || failed kube-scheduler "exited right after start"
  fi
fi

# ---------------------------------------------------------------- env
cat > "$WORK/env" <<EOF
HAMI_E2E_WORKDIR=$WORK
HAMI_E2E_BIN=$BIN
HAMI_E2E_APISERVER=$APISERVER
HAMI_E2E_KUBECONFIG=$WORK/kubeconfig
HAMI_E2E_TOKEN_KUBECONFIG=$WORK/kubeconfig-token
HAMI_E2E_TOKEN=$TOKEN
HAMI_E2E_CA=$PKI/ca.crt
HAMI_E2E_ETCD=http://127.0.0.1:$ETCD_CLIENT_PORT
HAMI_E2E_SCHEDULER_PORT=$( [ "$WITH_SCHED" = 1 ] && echo "$SCHED_PORT" || echo "" )
EOF
chmod 600 "$WORK/env"
trap - INT TERM
log "control plane up: apiserver $APISERVER, etcd :$ETCD_CLIENT_PORT$( [ "$WITH_SCHED" = 1 ] && echo ", scheduler :$SCHED_PORT" ); kubeconfig $WORK/kubeconfig; stop with: $E2E_DIR/stop.sh $WORK"
