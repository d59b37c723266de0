#!/usr/bin/env bash
# Checks that trained checkpoints a script needs are present. Only the operating points that README, a test or a
# results page's example needs are committed (CONTRIBUTING.md); for each missing one this names the command that
# rebuilds it (resumable) and exits 1. With --train it runs that command first (after rebuilding the checkpoints
# that one needs: KVpop's scorers are trained behind WG-KV λ 0.04 and KVzap-MLP admission) and checks again.
# Usage: bash scripts/need-checkpoint.sh [--train] DIR...
set -euo pipefail
cd "$(dirname "$0")/.."
train=0
if [ "${1:-}" = --train ]; then
  train=1
  shift
fi
here() { [ -f "$1/model.safetensors" ] || [ -f "$1/model.gguf" ]; }
# rebuild DIR: the command that rebuilds DIR (empty when no script here does), and in `needs` the checkpoints that
# command reads.
rebuild() {
  needs=
  case "$1" in
    models/kvzap/smollm2-135m-linear | models/kvzap/smollm2-135m-mlp)
      echo "bash scripts/train-kvzap-smollm2.sh ${1##*smollm2-135m-}" ;;
    tests/data/models/kvzap/kvsieve-tiny-2k-*) echo "bash scripts/results-tiny2k.sh" ;;
    models/wgkv/smollm2-135m-lambda*-len*)  # trained on longer rows
      lam=${1##*lambda}
      echo "LAMBDAS=${lam%-len*} TRAIN_LENGTH=${1##*-len} TRAIN_THREADS=2 TRAIN_ONLY=1 bash scripts/results-wgkv-smollm2.sh" ;;
    models/wgkv/smollm2-135m-lambda*) echo "LAMBDAS=${1##*lambda} TRAIN_ONLY=1 bash scripts/results-wgkv-smollm2.sh" ;;
    tests/data/models/wgkv/tiny2k-lambda*) echo "bash scripts/results-wgkv-tiny2k.sh" ;;
    models/kvpop/smollm2-135m-mlstm | models/kvpop/smollm2-135m-mlp)
      needs="models/wgkv/smollm2-135m-lambda0.04 models/kvzap/smollm2-135m-mlp"
      echo "KINDS=${1##*smollm2-135m-} FT_MODES= TRAIN_ONLY=1 bash scripts/results-kvpop.sh smollm2" ;;
    tests/data/models/kvpop/tiny2k-*) echo "bash scripts/results-kvpop.sh tiny2k" ;;
  esac
}
missing=0
for dir in "$@"; do
  here "$dir" && continue
  how=$(rebuild "$dir")
  if [ $train = 1 ] && [ -n "$how" ]; then
    rebuild "$dir" >/dev/null  # sets needs
    # shellcheck disable=SC2086  # a list of folders
    if [ -z "$needs" ] || bash "$0" --train $needs; then
      echo "rebuilding $dir: $how" >&2
      bash -c "$how" || echo "error: '$how' failed" >&2
    fi
    here "$dir" && continue
  fi
  echo "error: the checkpoint $dir is not in this checkout; rebuild it with: ${how:-the results script that made it (docs/results/)}" >&2
  missing=1
done
exit $missing
