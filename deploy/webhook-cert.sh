#!/usr/bin/env bash
# The admission webhook's certificate, without cert-manager: makes a CA and a serving certificate for the
# Service hami-scheduler.<namespace>.svc, stores them in Secret hami-scheduler-tls (tls.crt, tls.key,
# ca.crt; the Deployment mounts it at /tls), and writes the CA into the caBundle of
# MutatingWebhookConfiguration hami-scheduler when it exists (apply deploy/webhook.yaml before or after; run
# this again after applying it anew). Run it again before the certificate expires: the webhook trusts the new CA
# and the previous one until the next run, so pods are admitted while the kubelet updates the mounted Secret
# (up to a minute); hami-scheduler re-reads the files when they change, no restart needed. --namespace is
# where the Deployment runs: deploy/ uses kube-system (webhook.yaml's service.namespace must say the same).
#
#   deploy/webhook-cert.sh [--namespace kube-system] [--days 365] [--kubectl "kubectl --context x"]
#
# Needs openssl and kubectl. Nothing is written outside a temporary directory, which is removed.
set -euo pipefail

NAMESPACE=kube-system
DAYS=365
KUBECTL=kubectl
SERVICE=hami-scheduler
SECRET=hami-scheduler-tls
WEBHOOK=hami-scheduler
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace) NAMESPACE="${2:?--namespace needs a value}"; shift ;;
    --days) DAYS="${2:?--days needs a value}"; shift ;;
    --kubectl) KUBECTL="${2:?--kubectl needs a value}"; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "webhook-cert.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$NAMESPACE" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || { echo "webhook-cert.sh: '$NAMESPACE' is not a namespace name" >&2; exit 2; }
[[ "$DAYS" =~ ^[1-9][0-9]*$ ]] || { echo "webhook-cert.sh: --days '$DAYS' is not a positive number" >&2; exit 2; }
command -v openssl >/dev/null || { echo "webhook-cert.sh: needs openssl" >&2; exit 1; }
read -r -a K <<< "$KUBECTL"

DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
HOST="$SERVICE.$NAMESPACE.svc"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$DIR/ca.key" 2>/dev/null
openssl req -x509 -new -key "$DIR/ca.key" -subj "/CN=hami-scheduler-webhook-ca" -days "$DAYS" -sha256 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$DIR/ca.crt"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$DIR/tls.key" 2>/dev/null
openssl req -new -key "$DIR/tls.key" -subj "/CN=$HOST" -out "$DIR/tls.csr"
printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=serverAuth" "subjectAltName=DNS:$HOST,DNS:$HOST.cluster.local,DNS:$SERVICE.$NAMESPACE,DNS:$SERVICE" \
  > "$DIR/tls.ext"
openssl x509 -req -in "$DIR/tls.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" -CAcreateserial -days "$DAYS" \
  -sha256 -extfile "$DIR/tls.ext" -out "$DIR/tls.crt" 2>/dev/null

# The webhook first trusts the new CA and the one the Secret holds now (the certificate being served until
# the kubelet updates the volume), then the Secret changes.
"${K[@]}" -n "$NAMESPACE" get secret "$SECRET" -o 'jsonpath={.data.ca\.crt}' 2>/dev/null | base64 -d > "$DIR/old-ca.crt" 2>/dev/null || :
cat "$DIR/ca.crt" "$DIR/old-ca.crt" > "$DIR/bundle.crt"
if "${K[@]}" get mutatingwebhookconfiguration "$WEBHOOK" >/dev/null 2>&1; then
  bundle="$(base64 < "$DIR/bundle.crt" | tr -d '\n')"
  "${K[@]}" patch mutatingwebhookconfiguration "$WEBHOOK" --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$bundle\"}]" >/dev/null
  echo "webhook-cert.sh: MutatingWebhookConfiguration $WEBHOOK trusts the new CA (and the previous one, if any)"
else
  echo "webhook-cert.sh: no MutatingWebhookConfiguration $WEBHOOK yet: apply deploy/webhook.yaml, then run this again"
fi
"${K[@]}" -n "$NAMESPACE" create secret generic "$SECRET" --from-file=tls.crt="$DIR/tls.crt" \
  --from-file=tls.key="$DIR/tls.key" --from-file=ca.crt="$DIR/ca.crt" --dry-run=client -o yaml |
  "${K[@]}" apply -f - >/dev/null
echo "webhook-cert.sh: Secret $NAMESPACE/$SECRET holds a certificate for $HOST (valid $DAYS days)"
