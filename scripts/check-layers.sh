#!/usr/bin/env bash
# The layering, checked: every `#include "<folder>/..."` in a folder may only point at the folders below it.
#
#   core/                    the pure decision engine: includes core/ only
#   backends/, config/, k8s/ core/ and themselves (none knows another of the three); config/ also reads the
#                            extender's settings into its own (extender/options.h, plain data on core/)
#   extender/                core/, k8s/ and itself (the extender's services and their HTTP adapter)
#   sim/                     core/, k8s/ and itself: three components that never include one another,
#     sim/apiserver/           the embedded API server (and sim/tls/, its throwaway certificates)
#     sim/device_plugins/      the simulated device plugins
#     sim/scheduler/           the kube-scheduler stand-in
#     sim/tls/                 certificates made in memory (the API server's, `sim-apiserver`'s, the tests')
#   cmd/                     everything above (it composes)
#   bench/, tests/           anything
#
# A folder's rule is the most specific one listed for it (sim/apiserver/ before sim/). An include is
# allowed when its first folder is listed (`sim` allows every sim/ include), or its first two are
# (`sim/tls` allows sim/tls/ only), or the file itself is (`extender/options.h`).
#
#   scripts/check-layers.sh [ROOT]   # prints each upward (or sideways) include; exit 1 if there is one
set -uo pipefail

ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
declare -A ALLOWED=(
  [core]="core"
  [backends]="core backends"
  [config]="core config extender/options.h"
  [k8s]="core k8s"
  [extender]="core k8s extender"
  [sim]="core k8s sim"
  [sim/apiserver]="core k8s sim/apiserver sim/tls"
  [sim/device_plugins]="core k8s sim/device_plugins"
  [sim/scheduler]="core k8s sim/scheduler"
  [sim/tls]="core k8s sim/tls"
  [cmd]="core backends config k8s extender sim cmd"
)

# The rule for a file: the longest folder of ALLOWED its path starts with.
rule_for() {
  local dir="$1"
  while [ -n "$dir" ] && [ "$dir" != "." ]; do
    if [ -n "${ALLOWED[$dir]+set}" ]; then
      echo "$dir"
      return
    fi
    dir="$(dirname "$dir")"
  done
}

# `#include "<folder>/[<subfolder>/]<file>"`: 1 the whole path, 2 the folder, 4 the subfolder.
include_pattern='^[[:space:]]*#[[:space:]]*include[[:space:]]*"(([a-z0-9_]+)/(([a-z0-9_]+)/)?[^"]*)"'
violations=0
checked=0
for folder in "${!ALLOWED[@]}"; do
  [[ "$folder" == */* ]] && continue  # subfolders are walked with their top folder
  [ -d "$ROOT/$folder" ] || continue
  while IFS= read -r -d '' file; do
    checked=$((checked + 1))
    relative="${file#"$ROOT"/}"
    rule="$(rule_for "$(dirname "$relative")")"
    line_no=0
    while IFS= read -r line; do
      line_no=$((line_no + 1))
      [[ "$line" =~ $include_pattern ]] || continue
      target="${BASH_REMATCH[2]}"
      [ -d "$ROOT/$target" ] || continue  # not one of ours
      [[ " ${ALLOWED[$rule]} " == *" $target "* ]] && continue
      [[ " ${ALLOWED[$rule]} " == *" ${BASH_REMATCH[1]} "* ]] && continue
      sub="${BASH_REMATCH[4]}"
      [ -n "$sub" ] && [[ " ${ALLOWED[$rule]} " == *" $target/$sub "* ]] && continue
      echo "$relative:$line_no: includes $target/${sub:+$sub/} (${rule}/ may include only: ${ALLOWED[$rule]})"
      violations=$((violations + 1))
    done < "$file"
  done < <(find "$ROOT/$folder" -type f \( -name '*.h' -o -name '*.cc' \) -print0)
done
if [ "$violations" -gt 0 ]; then
  echo "check-layers: $violations include(s) against the layering in $checked files"
  exit 1
fi
echo "check-layers: $checked files, every include points down"
