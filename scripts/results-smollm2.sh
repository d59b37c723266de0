#!/usr/bin/env bash
# SmolLM2-135M-Instruct leaderboard cells (docs/results/smollm2). Resumable: finished cells are skipped, so run it
# again to continue. Query-agnostic RULER-style tasks at 1k tokens (the tasks the model answers above chance with
# the full cache), every baseline at compression ratios 0.5 and 0.75, the KVzap surrogates fitted on SmolLM2 over a
# threshold sweep, then the leaderboard page.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
CORPUS=${CORPUS:-../shared/data/wiki.test.raw}
[ -f "$M" ] || bash scripts/get-model.sh
TASKS=${TASKS:-niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multiquery,niah_multivalue,fwe}
SAMPLES=${SAMPLES:-8}
$K eval sweep --task ruler -m "$M" --corpus "$CORPUS" --tasks "$TASKS" --lengths 1024 --samples "$SAMPLES" \
  --policies "snapkv,tova,h2o,streaming_llm,knorm,expected_attention,adakv_expected_attention_e2,pyramidkv,random,kvzip_plus" \
  --ratios "${RATIOS:-0.5,0.75}" --out docs/results/smollm2/ruler_1k
# KVzap surrogates fitted on SmolLM2 (KVzap §4: prompts of 750-1250 tokens, ~500 positions each, targets the KVzip+
# scores maxed over the repeated-context rows, eq. 3) from three corpora, then their tau sweep on the same cells.
for kind in linear mlp; do
  S=models/kvzap/smollm2-135m-$kind
  [ -f "$S/model.safetensors" ] && continue
  $K train kvzap --model "$M" --corpus ../shared/data/wiki.test.raw --corpus ../shared/data/kjv_bible.txt \
    --corpus ../shared/data/tinystories_val_sample.txt --prompts "${KVZAP_PROMPTS:-80}" --seed 1 --out "$S" \
    $([ "$kind" = mlp ] && echo --mlp)
done
$K eval sweep --task ruler -m "$M" --corpus "$CORPUS" --tasks "$TASKS" --lengths 1024 --samples "$SAMPLES" \
  --policies "kvzap:model=models/kvzap/smollm2-135m-mlp,sinks=4;kvzap:model=models/kvzap/smollm2-135m-linear,sinks=4" \
  --thresholds "${TAUS:--4.5,-3,-1,1}" --out docs/results/smollm2/ruler_1k
$K eval leaderboard docs/results/smollm2/ruler_1k --out docs/results/smollm2
