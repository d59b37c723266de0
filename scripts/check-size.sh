#!/usr/bin/env bash
# Fails when the tracked files of the repository add up to more than LIMIT_MIB (default 60 MiB, under the 64 MiB
# beyond which a working tree cannot be copied to the GPU machines; CONTRIBUTING.md says what may be committed). Prints the
# total and the ten largest files.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MIB=${1:-60}
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "check-size: not a git checkout, skipped" >&2; exit 0; }
total=$(git ls-files -z | du -b --files0-from=- | awk '{s += $1} END {print s + 0}')
mib=$(awk -v b="$total" 'BEGIN {printf "%.1f", b / 1048576}')
echo "tracked files: $mib MiB (limit $LIMIT_MIB MiB)" >&2
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "error: the tracked tree is $mib MiB, over $LIMIT_MIB MiB; the largest files:" >&2
  git ls-files -z | du -b --files0-from=- | sort -rn | head -10 >&2 || true
  exit 1
fi
