#!/usr/bin/env bash
# The fuzz targets' corpora travel packed in fuzz/corpus.tar.xz (members <target>/<input>, minimised with libFuzzer's
# -merge=1 before packing); fuzz/corpus/ is the unpacked working copy (git-ignored) that fuzz/seeds.sh and
# scripts/fuzz.sh read and extend.
#   bash scripts/fuzz-corpus.sh unpack [DIR]   # the archive into DIR (default fuzz/corpus), replacing what was there
#   bash scripts/fuzz-corpus.sh pack           # fuzz/corpus into the archive (deterministic: sorted, mtime 0, xz -9)
set -euo pipefail
cd "$(dirname "$0")/.."
ARCHIVE=fuzz/corpus.tar.xz
case "${1:-}" in
  unpack)
    dir=${2:-fuzz/corpus}
    rm -rf "$dir" && mkdir -p "$dir"
    tar -xJf "$ARCHIVE" -C "$dir" ;;
  pack)
    [ -d fuzz/corpus ] || { echo "error: no fuzz/corpus to pack (run 'unpack' first)" >&2; exit 1; }
    list=$(mktemp)
    (cd fuzz/corpus && find . -type f | sed 's|^\./||' | LC_ALL=C sort) > "$list"
    tar --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -C fuzz/corpus -cf - -T "$list" | xz -9 -T1 > "$ARCHIVE.tmp"
    rm -f "$list"
    mv "$ARCHIVE.tmp" "$ARCHIVE"
    echo "$(tar -tJf "$ARCHIVE" | wc -l) inputs in $ARCHIVE ($(stat -c %s "$ARCHIVE") bytes)" ;;
  *) echo "usage: bash scripts/fuzz-corpus.sh unpack [DIR] | pack" >&2; exit 1 ;;
esac
