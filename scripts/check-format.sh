#!/usr/bin/env bash
# Fails when a tracked C++ file (src/, tests/, bench/, fuzz/, tools/; not the fixtures of tests/data) differs from
# what clang-format 14 makes of it with the repository's .clang-format, and prints the first differences. Other
# clang-format versions lay some constructs out differently, so the check skips (exit 77) without version 14.
# Usage: bash scripts/check-format.sh [ROOT]   (ROOT: the repository, by default). To fix: the same with --fix.
set -euo pipefail
FIX=0
[ "${1:-}" = --fix ] && { FIX=1; shift; }
ROOT=${1:-"$(dirname "$0")/.."}
cd "$ROOT"
CF=
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null && "$c" --version | grep -q 'version 14\.'; then CF=$c; break; fi
done
[ -n "$CF" ] || { echo "check-format: clang-format 14 not found, skipped (bash scripts/install-deps.sh installs it)"; exit 77; }
[ -f .clang-format ] || { echo "error: check-format: no .clang-format in $PWD" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' | grep -v '^tests/data/')
[ ${#files[@]} -gt 0 ] || { echo "error: check-format: no tracked C++ files in $PWD" >&2; exit 2; }
if [ $FIX = 1 ]; then "$CF" -i "${files[@]}"; exit 0; fi
if ! "$CF" --dry-run -Werror "${files[@]}" 2>/tmp/check-format.$$; then
  head -40 /tmp/check-format.$$
  echo "error: $(grep -c 'error:' /tmp/check-format.$$) lines differ from clang-format's layout; run bash scripts/check-format.sh --fix" >&2
  rm -f /tmp/check-format.$$
  exit 1
fi
rm -f /tmp/check-format.$$
echo "check-format: ${#files[@]} files follow .clang-format"
