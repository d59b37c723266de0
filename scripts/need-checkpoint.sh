#!/usr/bin/env bash
# Checks that trained checkpoints a script needs are present. Only the operating points that README, a test or a
# results page's example needs are committed (CONTRIBUTING.md); for each missing one this names the command that
# rebuilds it (resumable) and exits 1.   Usage: bash scripts/need-checkpoint.sh DIR...
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
for dir in "$@"; do
  [ -f "$dir/model.safetensors" ] || [ -f "$dir/model.gguf" ] && continue
  case "$dir" in
    models/kvzap/smollm2-135m-*) how="PART=kvzap bash scripts/results-smollm2.sh (trains the SmolLM2 surrogates first)" ;;
    tests/data/models/kvzap/kvsieve-tiny-2k-*) how="bash scripts/results-tiny2k.sh" ;;
    models/wgkv/smollm2-135m-lambda*) how="LAMBDAS=${dir##*lambda} TRAIN_ONLY=1 bash scripts/results-wgkv-smollm2.sh" ;;
    tests/data/models/wgkv/tiny2k-lambda*) how="bash scripts/results-wgkv-tiny2k.sh" ;;
    models/kvpop/smollm2-135m-*) how="bash scripts/results-kvpop.sh smollm2 (trains the missing scorers first)" ;;
    tests/data/models/kvpop/tiny2k-*) how="bash scripts/results-kvpop.sh tiny2k (trains the missing scorers first)" ;;
    *) how="the results script that made it (docs/results/)" ;;
  esac
  echo "error: the checkpoint $dir is not in this checkout; rebuild it with: $how" >&2
  missing=1
done
exit $missing
