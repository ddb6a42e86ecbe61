#!/usr/bin/env bash
# The layering, checked: every `#include "<folder>/..."` in a folder may only point at the folders below it.
#
#   core/                    the pure decision engine: includes core/ only
#   backends/, config/, k8s/ core/ and themselves (none knows another of the three)
#   extender/                core/, k8s/ and itself (the extender's services and their HTTP adapter)
#   sim/                     core/, k8s/ and itself (the embedded API server, simulated plugins, stand-ins)
#   cmd/                     everything above (it composes)
#   bench/, tests/           anything
#
#   scripts/check-layers.sh [ROOT]   # prints each upward (or sideways) include; exit 1 if there is one
set -uo pipefail

ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
declare -A ALLOWED=(
  [core]="core"
  [backends]="core backends"
  [config]="core config"
  [k8s]="core k8s"
  [extender]="core k8s extender"
  [sim]="core k8s sim"
  [cmd]="core backends config k8s extender sim cmd"
)

violations=0
checked=0
for folder in "${!ALLOWED[@]}"; do
  [ -d "$ROOT/$folder" ] || continue
  while IFS= read -r -d '' file; do
    checked=$((checked + 1))
    line_no=0
    while IFS= read -r line; do
      line_no=$((line_no + 1))
      [[ "$line" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([a-z0-9_]+)/ ]] || continue
      target="${BASH_REMATCH[1]}"
      [ -d "$ROOT/$target" ] || continue  # not one of ours
      if [[ " ${ALLOWED[$folder]} " != *" $target "* ]]; then
        echo "${file#"$ROOT"/}:$line_no: includes $target/ (${folder}/ may include only: ${ALLOWED[$folder]})"
        violations=$((violations + 1))
      fi
    done < "$file"
  done < <(find "$ROOT/$folder" -type f \( -name '*.h' -o -name '*.cc' \) -print0)
done
if [ "$violations" -gt 0 ]; then
  echo "check-layers: $violations include(s) against the layering in $checked files"
  exit 1
fi
echo "check-layers: $checked files, every include points down"
