#!/usr/bin/env bash
# Fails when a tracked file names a path in a folder beside the repository (a dot-dot path into a "shared" sibling
# folder): a clone must hold everything its code, configs, tests and docs read. Corpora live in data/corpora/, test
# fixtures and goldens in tests/data/, the design in docs/design.md. Prints FILE:LINE: TEXT of every offending line.
# Skipped (exit 77) when ROOT is not a git checkout. Usage: bash scripts/check-standalone.sh [ROOT]
set -euo pipefail
ROOT=${1:-"$(dirname "$0")/.."}
cd "$ROOT"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "check-standalone: not a git checkout, skipped" >&2; exit 77; }
# The pattern is spelled as a regular expression so that this file does not match itself.
pattern='\.\./shared'
if git grep -n -I -e "$pattern" -- . >&2; then
  echo "error: the lines above point outside the repository; name the in-repository copy instead (data/corpora/," \
       "tests/data/, docs/design.md)" >&2
  exit 1
fi
# Binary files are listed by name only.
if bin=$(git grep -l -e "$pattern" -- . | grep -v -x -F -f <(git grep -l -I -e "$pattern" -- . || true)); then
  printf '%s: binary file names a path outside the repository\n' $bin >&2
  exit 1
fi
echo "check-standalone: no tracked file points outside the repository" >&2
