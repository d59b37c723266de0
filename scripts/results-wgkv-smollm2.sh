#!/usr/bin/env bash
# WG-KV on SmolLM2-135M-Instruct, the model frozen (docs/results/wgkv/smollm2). Resumable: a finished run or cell
# is skipped, an interrupted run continues from its checkpoint.
#  1. the λ sweep (LAMBDAS, by default the paper's grid 0.01 … 2.56; ~30 s per 2048-token step on one core, 30
#     steps, ~17 min per λ): configs/wgkv/smollm2-wgkv.json with λ and the run directory replaced; the gates (F16) go to
#     models/wgkv/smollm2-135m-lambda<λ>/ with the training log. TRAIN_LENGTH=L (default 1024) trains on L-token rows
#     instead, max(2048, L) tokens per step and the same 61,440 tokens in all (fewer steps), into
#     models/wgkv/smollm2-135m-lambda<λ>-len<L>/; TRAIN_THREADS=N trains with N threads (default: the config's one);
#  2. NLL vs density, SP-KV's chunked protocol, on the held-out tail of WikiText-2: WG-KV at τ 0.05, 0.1 and 0.3 for
#     every λ (Fig. 8d's λ × τ front; THRESHOLDS), and
#     on the same model H2O, Expected Attention and StreamingLLM with 4 sinks and the same 256-token window;
#  3. the Pareto table and plots.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
OUT=docs/results/wgkv/smollm2
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$M" ] || bash scripts/get-model.sh
LAMBDAS=${LAMBDAS:-0.16 0.04 0.01 0.08 0.02 0.32 0.64 1.28 2.56}
TRAIN_LENGTH=${TRAIN_LENGTH:-1024}
SUFFIX=
[ "$TRAIN_LENGTH" = 1024 ] || SUFFIX=-len$TRAIN_LENGTH
if [ -n "$SUFFIX" ] && [ -z "${TRAIN_ONLY:-}" ]; then
  echo "error: TRAIN_LENGTH=$TRAIN_LENGTH trains gates only (add TRAIN_ONLY=1); the NLL cells and the Pareto table are the 1024-token gates'" >&2
  exit 2
fi
mkdir -p runs/wgkv-smollm2 "$OUT"
for lam in $LAMBDAS; do
  G=models/wgkv/smollm2-135m-lambda$lam$SUFFIX
  [ -f "$G/model.safetensors" ] && continue
  R=runs/wgkv-smollm2/l$lam$SUFFIX
  python3 - "$lam" "$R" "$G" "$TRAIN_LENGTH" "${TRAIN_THREADS:-}" <<'PY'
import json, sys
lam, run, out, length, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
c = json.load(open("configs/wgkv/smollm2-wgkv.json"))
c["out"] = "../../" + run
c["output"] = "../../" + out
c["wgkv"]["lambda"] = float(lam)
c["data"]["lengths"] = [length]
tokens = c["data"]["tokens_per_batch"] * c["optim"]["steps"]
c["data"]["tokens_per_batch"] = max(c["data"]["tokens_per_batch"], length)
c["optim"]["steps"] = tokens // c["data"]["tokens_per_batch"]
if threads:
    c["threads"] = int(threads)
json.dump(c, open(f"configs/wgkv/.smollm2-{run.split('/')[-1]}.json", "w"), indent=2)
PY
  if [ -f "$R/checkpoint.pt" ]; then args=--resume; else args=; fi
  $K train wgkv --config "configs/wgkv/.smollm2-${R##*/}.json" $args
  cp "$R/log.jsonl" "$G/train_log.jsonl"
done
[ -n "${TRAIN_ONLY:-}" ] && exit 0
CORPUS=$(ls runs/wgkv-smollm2/*/heldout_wiki.test.raw | head -1)
NLL="--task nll --corpus $CORPUS --length 1024 --samples ${SAMPLES:-4} --window 256"
for lam in $LAMBDAS; do
  # The full-cache cell does not depend on λ: one computed on the same corpus and protocol is reused.
  F=$(ls -d "$OUT"/nll_wgkv_l*/full 2>/dev/null | head -1)
  if [ -n "$F" ] && [ ! -d "$OUT/nll_wgkv_l$lam/full" ] && grep -q "corpus: \"$CORPUS\"" "$F/config.yaml"; then
    mkdir -p "$OUT/nll_wgkv_l$lam" && cp -r "$F" "$OUT/nll_wgkv_l$lam/full"
  fi
  $K eval sweep $NLL -m "$M" --policies "wgkv:model=models/wgkv/smollm2-135m-lambda$lam" \
    --thresholds ${THRESHOLDS:-0.05,0.1,0.3} --out "$OUT/nll_wgkv_l$lam"
done
$K eval sweep $NLL -m "$M" --policies h2o,expected_attention,streaming_llm --ratios ${RATIOS:-0.5,0.75} \
  --out "$OUT/nll_baselines"
python3 scripts/wgkv_pareto.py "$OUT" models/wgkv/smollm2-135m-lambda $LAMBDAS
command -v gnuplot >/dev/null && (cd "$OUT" && gnuplot pareto.gp)
true
# RULER-style tasks at 2k and 4k: scripts/results-wgkv-smollm2-ruler.sh.
