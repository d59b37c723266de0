#!/usr/bin/env bash
# SP-KV on kvsieve-tiny-2k (docs/results/spkv/tiny2k). Resumable: a finished run or cell is skipped, an
# interrupted run continues from its checkpoint, so run it again to go on.
#  1. continued pretraining with SP-KV and its dense twin on the same batches (configs/spkv/tiny2k-*.json);
#  2. NLL vs density, SP-KV's chunked protocol (App. A.2), on the held-out tail of WikiText-2 that neither run saw:
#     SP-KV at τ 0.1–0.9, and on the dense twin H2O, Expected Attention, StreamingLLM and KVzap-Linear (4 sinks);
#  3. RULER-style tasks at 1k, query-agnostic: the twin with its full cache, SP-KV with its full cache and at τ 0.5;
#  4. Table 4's variants: hard-gated training and the frozen-LM ablation, NLL at τ 0.5;
#  5. the per-head density map and the hybrid layouts (eval density).
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
OUT=docs/results/spkv/tiny2k
mkdir -p runs "$OUT"
train() {  # config, run directory
  [ -f "runs/$2/final.gguf" ] && return 0
  if [ -f "runs/$2/checkpoint.pt" ]; then $K train spkv --config "$1" --resume; else $K train spkv --config "$1"; fi
}
train configs/spkv/tiny2k-spkv.json tiny2k-spkv
train configs/spkv/tiny2k-dense-twin.json tiny2k-dense-twin
cp runs/tiny2k-spkv/log.jsonl "$OUT/train_log_spkv.jsonl"
cp runs/tiny2k-dense-twin/log.jsonl "$OUT/train_log_dense_twin.jsonl"
SP=runs/tiny2k-spkv/final.gguf
TW=runs/tiny2k-dense-twin/final.gguf
CORPUS=runs/tiny2k-dense-twin/heldout_wiki.test.raw
NLL="--task nll --corpus $CORPUS --length 1024 --samples 8"

$K eval sweep $NLL -m "$SP" --policies spkv --thresholds 0.1,0.3,0.5,0.7,0.9 --out "$OUT/nll_spkv"
$K eval sweep $NLL -m "$TW" --policies h2o,expected_attention,streaming_llm --ratios 0.75,0.9,0.95 --out "$OUT/nll_twin"
[ -f runs/tiny2k-twin-kvzap/model.safetensors ] ||
  $K train kvzap --model "$TW" --corpus data/corpora/tinystories_val_sample.txt data/corpora/kjv_bible.txt \
    --prompts 24 --out runs/tiny2k-twin-kvzap
$K eval sweep $NLL -m "$TW" --policies "kvzap:model=runs/tiny2k-twin-kvzap,sinks=4" --thresholds -8,-7,-6,-5,-4,-3,-2,-1 \
  --out "$OUT/nll_twin_kvzap"

RULER="--task ruler --corpus data/corpora/wiki.test.raw --tasks niah_single_1,niah_multikey_1,vt --lengths 1024 --samples 25"
$K eval sweep $RULER -m "$TW" --policies streaming_llm --ratios 0.9 --out "$OUT/ruler_twin"
$K eval sweep $RULER -m "$SP" --policies spkv --thresholds 0.5 --out "$OUT/ruler_spkv"

# Table 4's rows: hard-gated training (Bernoulli + straight-through) and the frozen-LM ablation (gates only).
for v in hard frozen-lm; do
  train "configs/spkv/tiny2k-spkv-$v.json" "tiny2k-spkv-$v"
  cp "runs/tiny2k-spkv-$v/log.jsonl" "$OUT/train_log_spkv_$v.jsonl"
  $K eval sweep $NLL -m "runs/tiny2k-spkv-$v/final.gguf" --policies spkv --thresholds 0.5 --out "$OUT/nll_spkv_$v"
done

[ -f "$OUT/density/hybrid.md" ] ||
  $K eval density -m "$SP" --policy spkv:tau=0.5 --corpus "$CORPUS" --length 1024 --samples 8 --out "$OUT/density"

# Density during training (the paper's Figure 5): the batch density per logged step and each head's density at
# each evaluation (hard gates at τ on the held-out windows).
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
evals = []
with open(f"{out}/train_log_spkv.jsonl") as f, open(f"{out}/density_steps.dat", "w") as d:
    for line in f:
        j = json.loads(line)
        if "loss" in j:
            d.write(f'{j["step"]} {j["density"]} {j["mean_u"]} {j["tahg_alpha"]}\n')
        if "eval" in j and "head_density" in j["eval"]:
            evals.append((j["step"], j["eval"]["head_density"]))
heads = [(l, h) for l in range(len(evals[0][1])) for h in range(len(evals[0][1][0]))]
with open(f"{out}/density_heads.dat", "w") as d:
    for step, hd in evals:
        d.write(f"{step} " + " ".join(str(hd[l][h]) for l, h in heads) + "\n")
with open(f"{out}/density_trajectory.gp", "w") as g:
    g.write("set terminal pngcairo size 900,500 noenhanced\nset output 'density_trajectory.png'\n"
            "set title 'SP-KV on kvsieve-tiny-2k: density during training'\nset xlabel 'step'\n"
            "set ylabel 'density'\nset yrange [0:1.05]\nset grid\nset key outside right\n"
            "plot 'density_steps.dat' using 1:2 with lines lw 2 lc rgb 'black' title 'batch (u >= tau)', "
            "'density_steps.dat' using 1:4 with lines dt 2 lc rgb 'gray' title 'TAHG alpha'")
    for i, (l, h) in enumerate(heads):
        g.write(f", 'density_heads.dat' using 1:{i + 2} with linespoints title 'layer {l} head {h}'")
    g.write("\n")
PY
command -v gnuplot >/dev/null && (cd "$OUT" && gnuplot density_trajectory.gp)
