#!/usr/bin/env bash
# SmolLM2-135M-Instruct leaderboard cells (docs/results/smollm2). Resumable: finished cells are skipped, so run it
# again to continue. Query-agnostic RULER-style tasks at 1k tokens (the tasks the model answers above chance with
# the full cache), every baseline at compression ratios 0.5 and 0.75, then the leaderboard page.
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
$K eval leaderboard docs/results/smollm2/ruler_1k --out docs/results/smollm2
