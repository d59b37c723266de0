#!/usr/bin/env bash
# SmolLM2-135M-Instruct: NLL vs density (docs/results/smollm2/nll_2k), SP-KV's chunked protocol (App. A.2: chunks of
# 16 tokens, compression after each; the heuristics keep 4 sinks and a 128-token window), 2048-token windows of the
# held-out tail of WikiText-2 (the last 5% in whole lines, the part the project's trainers hold out with
# holdout_fraction 0.05), the layout of SP-KV's Table 2 (density, ΔNLL vs full). Every baseline at compression
# ratios 0.25 / 0.5 / 0.75 / 0.9, the KVzap surrogates fitted on SmolLM2 over a threshold sweep, and WG-KV's write
# gates (λ 0.04 and 0.16, their own 256-token window); then the leaderboard page of the cells. KVzip and KVzip+
# are not here: they score a context by replaying it whole, which the chunked protocol has no point for.
# Resumable: finished cells are skipped. SAMPLES (default 4 windows), THREADS (default all cores), RATIOS and TAUS.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
bash scripts/need-checkpoint.sh models/kvzap/smollm2-135m-mlp models/kvzap/smollm2-135m-linear \
  models/wgkv/smollm2-135m-lambda0.04 models/wgkv/smollm2-135m-lambda0.16
OUT=docs/results/smollm2
[ -f "$M" ] || bash scripts/get-model.sh
mkdir -p runs
TAIL=runs/wiki.test.heldout.raw
[ -f "$TAIL" ] || python3 - data/corpora/wiki.test.raw "$TAIL" <<'PY'
import sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
cut = len(b) - int(0.05 * len(b))  # the trainers' split (train/data.cpp): the first newline after 95% of the bytes
nl = b.find(b"\n", cut)
open(dst, "wb").write(b[nl + 1:] if nl >= 0 else b"")
PY
NLL="--task nll --corpus $TAIL --length 2048 --samples ${SAMPLES:-4} --threads ${THREADS:-0}"
$K eval sweep $NLL -m "$M" --ratios "${RATIOS:-0.25,0.5,0.75,0.9}" --out "$OUT/nll_2k_baselines" \
  --policies streaming_llm,h2o,tova,snapkv,pyramidkv,knorm,expected_attention,adakv_expected_attention_e2,random
$K eval sweep $NLL -m "$M" --thresholds "${TAUS:--5,-4,-3,-2,-1}" --out "$OUT/nll_2k_kvzap" \
  --policies "kvzap:model=models/kvzap/smollm2-135m-mlp,sinks=4;kvzap:model=models/kvzap/smollm2-135m-linear,sinks=4"
$K eval sweep $NLL -m "$M" --out "$OUT/nll_2k_wgkv" \
  --policies "wgkv:model=models/wgkv/smollm2-135m-lambda0.04;wgkv:model=models/wgkv/smollm2-135m-lambda0.16"
$K eval leaderboard "$OUT/nll_2k_baselines" "$OUT/nll_2k_kvzap" "$OUT/nll_2k_wgkv" --out "$OUT/nll_2k" > /dev/null
