#!/usr/bin/env bash
# Fits KVzap's SmolLM2-135M-Instruct surrogate KIND (linear or mlp) into models/kvzap/smollm2-135m-KIND unless it is
# here (KVzap §4: prompts of 750-1250 tokens, ~500 positions each, targets the KVzip+ scores maxed over the
# repeated-context rows, eq. 3) from three corpora (data/corpora). KVZAP_PROMPTS (default 80) prompts, seed 1.
# Usage: bash scripts/train-kvzap-smollm2.sh linear|mlp
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  linear | mlp) ;;
  *) echo "usage: bash scripts/train-kvzap-smollm2.sh linear|mlp" >&2; exit 2 ;;
esac
K=${KVSIEVE:-build/bin/kvsieve}
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
S=models/kvzap/smollm2-135m-$1
[ -f "$S/model.safetensors" ] && exit 0
[ -f "$M" ] || bash scripts/get-model.sh
kind=()
[ "$1" = mlp ] && kind=(--mlp)
$K train kvzap --model "$M" --corpus data/corpora/wiki.test.raw --corpus data/corpora/kjv_bible.txt \
  --corpus data/corpora/tinystories_val_sample.txt --prompts "${KVZAP_PROMPTS:-80}" --seed 1 --out "$S" "${kind[@]}"
