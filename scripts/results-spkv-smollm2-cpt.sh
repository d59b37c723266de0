#!/usr/bin/env bash
# SP-KV continued pretraining of SmolLM2-135M-Instruct (docs/results/spkv/smollm2_cpt): the whole model and its
# utility gates trained together by next-token loss (configs/spkv/smollm2-spkv.json: soft gates, the density
# regulariser, then threshold-aware hard gating over the last quarter), and its dense twin on the same batches
# (configs/spkv/smollm2-dense-twin.json), as long as two CPU cores allow (32 steps of 2048 tokens each, about 40 min
# per run on one core). Then NLL vs density with SP-KV's chunked protocol on the held-out tail of WikiText-2
# that neither run saw: SP-KV over τ, and on the twin H2O, Expected Attention and StreamingLLM, ΔNLL against the
# twin (the paper's protocol, Table 2). The trained models (F32, ~540 MB each) stay in runs/. Resumable: a finished
# run or cell is skipped, an interrupted run continues from its checkpoint. RUNS="spkv" or "dense-twin" trains one;
# THREADS (default all cores) for the NLL cells.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
OUT=docs/results/spkv/smollm2_cpt
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$M" ] || bash scripts/get-model.sh
mkdir -p runs "$OUT"
for r in ${RUNS:-spkv dense-twin}; do
  R=runs/smollm2-$r
  [ -f "$R/final.gguf" ] && continue
  if [ -f "$R/checkpoint.pt" ]; then args=--resume; else args=; fi
  $K train spkv --config "configs/spkv/smollm2-$r.json" $args
done
[ -n "${TRAIN_ONLY:-}" ] && exit 0
cp runs/smollm2-spkv/log.jsonl "$OUT/train_log_spkv.jsonl"
cp runs/smollm2-dense-twin/log.jsonl "$OUT/train_log_dense_twin.jsonl"
SP=runs/smollm2-spkv/final.gguf
TW=runs/smollm2-dense-twin/final.gguf
NLL="--task nll --corpus runs/smollm2-dense-twin/heldout_wiki.test.raw --length 1024 --samples ${SAMPLES:-6} --threads ${THREADS:-0}"
$K eval sweep $NLL -m "$SP" --policies spkv --thresholds ${THRESHOLDS:-0.1,0.5,0.9} --out "$OUT/nll_spkv"
$K eval sweep $NLL -m "$TW" --policies h2o,expected_attention,streaming_llm --ratios ${RATIOS:-0.75,0.9} --out "$OUT/nll_twin"
# Density during training (Figure 5): the batch density and mean utility per step.
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
with open(f"{out}/train_log_spkv.jsonl") as f, open(f"{out}/density_steps.dat", "w") as d:
    for line in f:
        j = json.loads(line)
        if "loss" in j:
            d.write(f'{j["step"]} {j["density"]} {j["mean_u"]} {j["tahg_alpha"]} {j["lm_loss"]}\n')
PY
cat > "$OUT/density_trajectory.gp" <<'GP'
set terminal pngcairo size 900,450 noenhanced
set output 'density_trajectory.png'
set title 'SP-KV continued pretraining of SmolLM2-135M-Instruct: gates during training'
set xlabel 'step (2048 tokens each)'
set ylabel 'fraction'
set yrange [0:1.05]
set grid
set key center right
plot 'density_steps.dat' using 1:2 with linespoints lw 2 title 'batch density (u >= tau)', \
     'density_steps.dat' using 1:3 with linespoints lw 2 title 'mean utility', \
     'density_steps.dat' using 1:4 with lines lw 2 dt 2 title 'TAHG alpha'
GP
command -v gnuplot >/dev/null && (cd "$OUT" && gnuplot density_trajectory.gp)
true
