#!/usr/bin/env bash
# Runs the client conformance suite (tests/integration/conformance_test.cc, the "Real" cases) against a real
# kube-apiserver started by start.sh: once with the client-certificate kubeconfig and once with the
# bearer-token kubeconfig. The embedded-server half of the suite runs with the other tests in ctest.
# Usage: tests/e2e/run-conformance.sh PATH/TO/integration_tests
set -euo pipefail
E2E_DIR=$(cd "$(dirname "$0")" && pwd)
TESTS=${1:?usage: run-conformance.sh PATH/TO/integration_tests}
WORK=$(mktemp -d /tmp/hami-e2e-conformance.XXXXXX)
cleanup() { bash "$E2E_DIR/stop.sh" "$WORK" --clean >/dev/null 2>&1 || true; }
trap cleanup EXIT
bash "$E2E_DIR/start.sh" "$WORK" >"$WORK.start.log" 2>&1 || { tail -40 "$WORK.start.log"; exit 1; }
# shellcheck disable=SC1091
. "$WORK/env"
passed=0
failed=0
for auth in certificate token; do
  kubeconfig=$HAMI_E2E_KUBECONFIG
  [ "$auth" = token ] && kubeconfig=$HAMI_E2E_TOKEN_KUBECONFIG
  echo "== conformance against kube-apiserver ($auth authentication)"
  if HAMI_E2E_KUBECONFIG=$kubeconfig "$TESTS" --gtest_filter='Servers/Conformance.*/Real' --gtest_brief=1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "e2e conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
