#!/usr/bin/env bash
# Keeps the tracked tree small (CONTRIBUTING.md): packs the per-cell predictions of a results directory into one
# archive, DIR/predictions.tar.xz, holding DIR/<cell>/predictions.csv of every finished cell (xz -9, reproducible:
# sorted names, no owners or dates; about a tenth of the files' size), and writes DIR/.gitignore so that the
# unpacked files are not committed beside it. --unpack restores predictions.csv in each cell that lacks it (eval
# leaderboard reads them; scripts/results-smollm2.sh does this before it writes a page).
# Usage: bash scripts/pack-predictions.sh [--unpack] DIR...
set -euo pipefail
unpack=0
if [ "${1:-}" = --unpack ]; then
  unpack=1
  shift
fi
[ $# -gt 0 ] || { echo "usage: bash scripts/pack-predictions.sh [--unpack] DIR..." >&2; exit 2; }
for dir in "$@"; do
  [ -d "$dir" ] || { echo "error: '$dir' is not a directory" >&2; exit 1; }
  archive=$dir/predictions.tar.xz
  if [ $unpack = 1 ]; then
    [ -f "$archive" ] && tar -xJf "$archive" -C "$dir" --skip-old-files
    continue
  fi
  cells=()
  for m in "$dir"/*/metrics.json; do
    [ -f "$m" ] || continue
    cell=$(basename "$(dirname "$m")")
    [ -f "$dir/$cell/predictions.csv" ] && cells+=("$cell/predictions.csv")
  done
  [ ${#cells[@]} -gt 0 ] || { echo "error: '$dir' has no finished cell with predictions.csv" >&2; exit 1; }
  printf '%s\n' "${cells[@]}" | tar -cf - -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    -T - | xz -9 > "$archive.tmp"
  mv "$archive.tmp" "$archive"
  printf '# The cells'"'"' predictions.csv are committed packed in predictions.tar.xz (scripts/pack-predictions.sh).\n*/predictions.csv\n' \
    > "$dir/.gitignore"
  echo "$archive: ${#cells[@]} cells, $(stat -c %s "$archive") bytes" >&2
done
