#!/usr/bin/env bash
# Writes the SP-KV gates trained on the frozen SmolLM2-135M-Instruct (configs/spkv/smollm2-spkv-frozen.json) into
# models/spkv/smollm2-135m-frozen (model.safetensors + config.json beside its card), training them first unless
# runs/smollm2-spkv-frozen/final.gguf is there (~40 min on 2 cores; an interrupted run resumes). The run is
# deterministic, so the gates are those the card and docs/results/spkv/README.md describe.
set -euo pipefail
cd "$(dirname "$0")/.."
K=${KVSIEVE:-build/bin/kvsieve}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
R=runs/smollm2-spkv-frozen
OUT=models/spkv/smollm2-135m-frozen
[ -f "$M" ] || bash scripts/get-model.sh
if [ ! -f "$R/final.gguf" ]; then
  args=()
  [ -f "$R/checkpoint.pt" ] && args=(--resume)
  $K train spkv --config configs/spkv/smollm2-spkv-frozen.json "${args[@]}"
fi
$K train spkv-gates --from "$R/final.gguf" --base-model "$M" --out "$OUT" \
  --provenance "kvsieve train spkv --config configs/spkv/smollm2-spkv-frozen.json, then kvsieve train spkv-gates --from $R/final.gguf --base-model $M --out $OUT"
