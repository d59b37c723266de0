#!/usr/bin/env bash
# Packs the large golden fixtures of tests/data into tests/data/golden.tar.xz (the vocabulary GGUFs of
# golden/tokenizers and the logit JSONs of golden/{tiny,stories260K,kquants,kvquant}); CMake unpacks the archive into
# the build tree's test-data/ beside a copy of the rest of tests/data (tests/CMakeLists.txt), where the tests read it.
#   bash scripts/pack-test-data.sh unpack   # restore the files into tests/data to change or add one (git-ignored)
#   bash scripts/pack-test-data.sh pack     # rewrite the archive from them (deterministic: sorted, mtime 0, xz -9)
set -euo pipefail
cd "$(dirname "$0")/../tests/data"
ARCHIVE=golden.tar.xz
members() { find golden/tokenizers -name '*.gguf'; find golden/tiny golden/stories260K golden/kquants golden/kvquant -name '*.json'; }
case "${1:-}" in
  pack)
    members | LC_ALL=C sort > /tmp/kvsieve-pack.$$
    [ -s /tmp/kvsieve-pack.$$ ] || { rm -f /tmp/kvsieve-pack.$$; echo "error: nothing to pack (run 'unpack' first)" >&2; exit 1; }
    tar --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -cf - -T /tmp/kvsieve-pack.$$ | xz -9 -T1 > "$ARCHIVE.tmp"
    rm -f /tmp/kvsieve-pack.$$
    mv "$ARCHIVE.tmp" "$ARCHIVE"
    echo "$(tar -tJf "$ARCHIVE" | wc -l) files in tests/data/$ARCHIVE ($(stat -c %s "$ARCHIVE") bytes)" ;;
  unpack) tar -xJf "$ARCHIVE" && echo "unpacked into tests/data/golden" ;;
  *) echo "usage: bash scripts/pack-test-data.sh pack|unpack" >&2; exit 1 ;;
esac
