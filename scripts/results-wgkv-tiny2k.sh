#!/usr/bin/env bash
# WG-KV on kvsieve-tiny-2k, the model frozen (docs/results/wgkv/tiny2k). Resumable: a finished run or cell is
# skipped, an interrupted run continues from its checkpoint, so run it again to go on.
#  1. the λ sweep (0.01 … 2.56, ×2 steps; configs/wgkv/tiny2k-wgkv.json with λ and the run directory replaced):
#     one set of gates per λ, copied to tests/data/models/wgkv/tiny2k-lambda<λ>/ with the training log;
#  2. NLL vs density, SP-KV's chunked protocol, on the held-out tail of WikiText-2 no run trained on: WG-KV at
#     τ ∈ {0.05, 0.1, 0.3, 0.5} for every λ (and with 4 sinks at τ = 0.1), and on the same frozen model H2O, Expected Attention, StreamingLLM and KVzap-MLP (4 sinks);
#  3. the Pareto table and plots (held-out distillation loss and ΔNLL against density).
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
OUT=docs/results/wgkv/tiny2k
M=tests/data/models/kvsieve-tiny-2k.gguf
LAMBDAS=${LAMBDAS:-0.01 0.02 0.04 0.08 0.16 0.32 0.64 1.28 2.56}
mkdir -p runs/wgkv-tiny2k "$OUT"
for lam in $LAMBDAS; do
  G=tests/data/models/wgkv/tiny2k-lambda$lam
  [ -f "$G/model.safetensors" ] && continue
  R=runs/wgkv-tiny2k/l$lam
  python3 - "$lam" "$R" <<'PY'
import json, sys
lam, run = sys.argv[1], sys.argv[2]
c = json.load(open("configs/wgkv/tiny2k-wgkv.json"))
c["out"] = "../../" + run
c["output"] = "../../tests/data/models/wgkv/tiny2k-lambda" + lam
c["wgkv"]["lambda"] = float(lam)
json.dump(c, open(f"configs/wgkv/.tiny2k-l{lam}.json", "w"), indent=2)
PY
  if [ -f "$R/checkpoint.pt" ]; then args=--resume; else args=; fi
  $K train wgkv --config "configs/wgkv/.tiny2k-l$lam.json" $args
  cp "$R/log.jsonl" "$G/train_log.jsonl"
done
CORPUS=runs/wgkv-tiny2k/l$(echo $LAMBDAS | cut -d' ' -f1)/heldout_wiki.test.raw
[ -f "$CORPUS" ] || CORPUS=$(ls runs/wgkv-tiny2k/*/heldout_wiki.test.raw | head -1)
NLL="--task nll --corpus $CORPUS --length 1024 --samples ${SAMPLES:-8}"
for lam in $LAMBDAS; do
  $K eval sweep $NLL -m "$M" --policies "wgkv:model=tests/data/models/wgkv/tiny2k-lambda$lam,window=128" \
    --thresholds ${THRESHOLDS:-0.05,0.1,0.3,0.5} --out "$OUT/nll_wgkv_l$lam"
  # The same gates with 4 sink tokens kept at inference (the baselines keep 4; the paper's WG-KV keeps none).
  $K eval sweep $NLL -m "$M" --policies "wgkv:model=tests/data/models/wgkv/tiny2k-lambda$lam,window=128,sinks=4" \
    --thresholds 0.1 --out "$OUT/nll_wgkv_sinks4_l$lam"
done
$K eval sweep $NLL -m "$M" --policies h2o,expected_attention,streaming_llm --ratios 0.5,0.75,0.9 --out "$OUT/nll_baselines"
$K eval sweep $NLL -m "$M" --policies "kvzap:model=tests/data/models/kvzap/kvsieve-tiny-2k-mlp,sinks=4" --thresholds -7,-6,-5,-4,-3 \
  --out "$OUT/nll_kvzap"
python3 scripts/wgkv_pareto.py "$OUT" tests/data/models/wgkv/tiny2k-lambda $LAMBDAS
command -v gnuplot >/dev/null && (cd "$OUT" && gnuplot pareto.gp)
true
