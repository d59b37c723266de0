#!/usr/bin/env bash
# SP-KV gates on SmolLM2-135M-Instruct with the model frozen (docs/results/spkv/smollm2): the gates alone trained
# by next-token loss plus the density regulariser (configs/spkv/smollm2-spkv-frozen.json; ~26 s per 2048-token
# step on 2 cores), then NLL vs density on held-out WikiText-2 (SP-KV's chunked protocol) against baselines on
# the same frozen model, and the per-head density map. Resumable: finished runs and cells are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
OUT=docs/results/spkv/smollm2
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$M" ] || bash scripts/get-model.sh
mkdir -p runs "$OUT"
R=runs/smollm2-spkv-frozen
if [ ! -f "$R/final.gguf" ]; then
  if [ -f "$R/checkpoint.pt" ]; then args=--resume; else args=; fi
  $K train spkv --config configs/spkv/smollm2-spkv-frozen.json $args
fi
cp "$R/log.jsonl" "$OUT/train_log.jsonl"
NLL="--task nll --corpus $R/heldout_wiki.test.raw --length 1024 --samples ${SAMPLES:-6}"
$K eval sweep $NLL -m "$R/final.gguf" --policies spkv --thresholds ${THRESHOLDS:-0.5} --out "$OUT/nll_spkv"
# Baselines on the same weights (the gates are ignored by every other policy); BASELINES= skips them.
BASELINES=${BASELINES-streaming_llm,h2o}
[ -z "$BASELINES" ] ||
  $K eval sweep $NLL -m "$R/final.gguf" --policies "$BASELINES" --ratios ${RATIOS:-0.9} --out "$OUT/nll_baselines"
[ -f "$OUT/density/hybrid.md" ] ||
  $K eval density -m "$R/final.gguf" --policy spkv:tau=0.5 --corpus "$R/heldout_wiki.test.raw" --length 1024 \
    --samples ${DENSITY_SAMPLES:-4} --out "$OUT/density" ${HYBRID---no-hybrid}
# The same with 4 sink tokens on every head (static local heads without sinks lose the attention sinks a model
# trained with full attention relies on).
[ -z "${HYBRID-x}" ] && [ ! -f "$OUT/density_sinks4/hybrid.md" ] &&
  $K eval density -m "$R/final.gguf" --policy spkv:tau=0.5,sinks=4 --corpus "$R/heldout_wiki.test.raw" \
    --length 1024 --samples ${DENSITY_SAMPLES:-4} --out "$OUT/density_sinks4"
true
