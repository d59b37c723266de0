#!/usr/bin/env bash
# KVpop results (docs/results/kvpop/<model>). Usage: bash scripts/results-kvpop.sh tiny2k|smollm2
# Resumable: a trained scorer ($SCORERS/<name>-<kind>/: tiny-2k's in tests/data/models/kvpop, where the tests read
# them, SmolLM2's in models/kvpop) or a finished fidelity table is skipped, an interrupted training continues from its
# checkpoint.
#  1. the scorers, scorer-only (the model frozen; configs/kvpop/<model>-kvpop-<kind>.json): the delayed mLSTM (KVpop),
#     the MLP (KVpop_mlp) and, on tiny2k, the mLSTM read at write (Fig. 5's ablation);
#  2. decode-heavy fidelity (`eval fidelity`): prompts from the held-out tail of WikiText-2, the full cache's
#     continuation sampled at temperature 0.7 (greedy ones soon loop) fed to each policy, prompts prefilled in chunks
#     of 256 with the rule after each (so no cache ever holds the whole prompt), at two budgets B per KV head chosen so that B / (prompt + generation) leaves
#     75% and 88% of the entries out (KVpop Table 1's compression ratios): KVpop, KVpop_mlp, StreamingLLM (4 sinks
#     and a window of B − 4), TOVA and H2O at the same B, and at 75% an admission (WG-KV's gates, KVzap's surrogate)
#     in front of the KVpop budget and each admission alone (its memory grows with the sequence: KVpop Fig. 4), and
#     on SmolLM2 the mLSTM at the budget its recurrent state's bytes leave. A table is resumed: the policies already
#     in its fidelity.json are not run again, so adding a policy here costs only that policy.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
MODEL=${1:-tiny2k}
case "$MODEL" in
  tiny2k) M=tests/data/models/kvsieve-tiny-2k.gguf; PROMPT=${PROMPT:-256}; GEN=${GEN:-1792}; KINDS=${KINDS:-"mlstm mlp mlstm-immediate"}
          GATES=tests/data/models/wgkv/tiny2k-lambda0.08; NAME=tiny2k; KVZAP=tests/data/models/kvzap/kvsieve-tiny-2k-mlp; STATE_ENTRIES=
          SCORERS=tests/data/models/kvpop ;;  # the tests read the tiny-2k scorers
  smollm2) M=models/SmolLM2-135M-Instruct.Q4_1.gguf; PROMPT=${PROMPT:-1024}; GEN=${GEN:-2048}; KINDS=${KINDS:-"mlstm mlp mlstm-immediate"}
           GATES=models/wgkv/smollm2-135m-lambda0.04; NAME=smollm2-135m
           # The mLSTM's state per sequence (3.55 MiB: C, n and the pending queries) in KV entries per head (30 layers ×
           # 3 KV heads × K and V × 64 dims × 2 bytes of F16 = 23 040 bytes per position): the budget it pays for.
           STATE_ENTRIES=162; KVZAP=models/kvzap/smollm2-135m-mlp; SCORERS=models/kvpop
           [ -f "$M" ] || bash scripts/get-model.sh ;;
  *) echo "usage: $0 tiny2k|smollm2" >&2; exit 2 ;;
esac
bash scripts/need-checkpoint.sh "$GATES" "$KVZAP"  # the admission policies stacked in front of KVpop
OUT=docs/results/kvpop/$MODEL
mkdir -p "$OUT" runs "$SCORERS"
for kind in $KINDS; do
  S=$SCORERS/$NAME-$kind
  [ -f "$S/model.safetensors" ] && continue
  R=runs/$MODEL-kvpop-$kind
  python3 - "$MODEL" "$kind" "$R" "$S" <<'PY'
import json, sys
model, kind, run, out = sys.argv[1:]
c = json.load(open(f"configs/kvpop/{model}-kvpop-{kind.split('-')[0]}.json"))
c["out"] = "../../" + run
c["output"] = "../../" + out
if kind.endswith("-immediate"):
    c["kvpop"]["delayed"] = False
json.dump(c, open(f"configs/kvpop/.{model}-{kind}.json", "w"), indent=2)
PY
  if [ -f "$R/checkpoint.pt" ]; then args=--resume; else args=; fi
  $K train kvpop --config "configs/kvpop/.$MODEL-$kind.json" $args
  cp "$R/log.jsonl" "$S/train_log.jsonl"
done
#  2b. the fine-tuning modes (configs/kvpop/<model>-kvpop-{distill,streaming_plus}.json, same data and steps):
#     KVpop's full distillation (the model fine-tuned to the dense teacher under its scorer's own evictions, with the
#     scorer) and StreamingLLM+ (fine-tuned under StreamingLLM's mask at the same budget); their models are kept as
#     F16 in $SCORERS/<name>-{distill,streaming_plus}/model.gguf (SmolLM2's are 270 MB and
#     rebuilt by this script) and compared with the frozen model's policies against the same full-cache teachers
#     (`eval fidelity`, POLICY@MODEL), at the two budgets of step 2. They train first: their runs also write the
#     held-out tail the prompts come from.
# FT_MODES= (empty) trains none of them (scripts/need-checkpoint.sh rebuilds a scorer alone that way).
FT_MODES=${FT_MODES-"distill streaming_plus"}
for mode in $FT_MODES; do
  S=$SCORERS/$NAME-$mode
  [ -f "$S/model.gguf" ] && continue
  R=runs/$MODEL-kvpop-$mode
  if [ -f "$R/checkpoint.pt" ]; then args=--resume; else args=; fi
  $K train kvpop --config "configs/kvpop/$MODEL-kvpop-$mode.json" $args
  mkdir -p "$S"
  cp "$R-out/config.json" "$R/log.jsonl" "$S/" && mv "$S/log.jsonl" "$S/train_log.jsonl"
  [ -f "$R-out/model.safetensors" ] && cp "$R-out/model.safetensors" "$S/"
  $K quantize "$R-out/model.gguf" "$S/model.gguf" --type f16
done
[ -n "${TRAIN_ONLY:-}" ] && exit 0
# The prompts come from the held-out tail of WikiText-2 that every KVpop run of this model writes (the same tail:
# the same data section and hold-out fraction), so no scorer or fine-tuned model has trained on them.
CORPUS=$(ls runs/$MODEL-kvpop-*/heldout_wiki.test.raw 2>/dev/null | head -n 1 || true)
[ -n "$CORPUS" ] || { echo "error: no runs/$MODEL-kvpop-*/heldout_wiki.test.raw: run a KVpop training of $MODEL first" >&2; exit 1; }
TOTAL=$((PROMPT + GEN))
# budget PCT: the B per KV head that leaves PCT% of the TOTAL entries out; fidelity POLICIES DIR: one table.
budget() { echo $(( (TOTAL * (100 - $1) + 50) / 100 )); }
fidelity() {
  $K eval fidelity -m "$M" --corpus "$CORPUS" --prompt "$PROMPT" --gen "$GEN" --samples "${SAMPLES:-6}" \
    --every 128 --temp "${TEMP:-0.7}" --prefill-chunk 256 --policies "$1" --out "$2"
}
command -v gnuplot > /dev/null || echo "note: gnuplot is not installed: the fidelity tables get their .gp/.dat but no .png (apt-get install gnuplot-nox)" >&2
# KVzap's admission: its threshold rule at τ = −3 (about 75% of the held-out predictions below it), alone with 4 sinks
# and a 128-token window (the KVzap paper's setting); in front of a budget the sinks and window are the budget's.
ADMIT="kvzap:model=$KVZAP,tau=-3"
for pct in 75 88; do
  B=$(budget $pct)
  D=$OUT/fidelity_$pct
  P="full;kvpop:model=$SCORERS/$NAME-mlstm,budget=$B;kvpop_mlp:model=$SCORERS/$NAME-mlp,budget=$B"
  [ -f $SCORERS/$NAME-mlstm-immediate/model.safetensors ] && P="$P;kvpop:model=$SCORERS/$NAME-mlstm-immediate,budget=$B"
  P="$P;streaming_llm:window=$((B - 4)),sinks=4;tova:budget=$B;h2o:budget=$B"
  if [ "$pct" = 75 ]; then
    P="$P;wgkv:model=$GATES>kvpop:model=$SCORERS/$NAME-mlstm,budget=$B;wgkv:model=$GATES"
    P="$P;$ADMIT>kvpop:model=$SCORERS/$NAME-mlstm,budget=$B;$ADMIT,sinks=4,window=128"
    [ -n "$STATE_ENTRIES" ] && P="$P;kvpop:model=$SCORERS/$NAME-mlstm,budget=$((B - STATE_ENTRIES))"
  fi
  fidelity "$P" "$D"
done
for pct in 75 88; do
  B=$(budget $pct)
  D=$OUT/fidelity_finetuned_$pct
  [ -f "$D/fidelity.json" ] && continue
  [ -f $SCORERS/$NAME-distill/model.gguf ] && [ -f $SCORERS/$NAME-streaming_plus/model.gguf ] || continue
  DM=$SCORERS/$NAME-distill/model.gguf; SM=$SCORERS/$NAME-streaming_plus/model.gguf
  P="full;full@$DM;kvpop:model=$SCORERS/$NAME-mlstm,budget=$B;kvpop:model=$SCORERS/$NAME-distill,budget=$B@$DM"
  P="$P;streaming_llm:window=$((B - 4)),sinks=4;streaming_llm:window=$((B - 4)),sinks=4@$SM"
  fidelity "$P" "$D"
done
#  3. decode-time RULER (`eval sweep --task ruler --decode-preamble`): the context (query-agnostic), then the model
#     generates PREAMBLE tokens of its own as decode steps (where a fixed budget evicts), then the question; KVpop,
#     KVpop_mlp and the baselines at budgets B leaving about 50% and 75% of the entries out at the answer.
[ "$MODEL" = smollm2 ] || exit 0
PRE=${PREAMBLE:-512}
RTASKS=${RULER_TASKS:-niah_single_1}
for B in 768 384; do
  P="full;kvpop:model=$SCORERS/$NAME-mlstm,budget=$B;kvpop_mlp:model=$SCORERS/$NAME-mlp,budget=$B"
  P="$P;streaming_llm:window=$((B - 4)),sinks=4;tova:budget=$B;h2o:budget=$B"
  $K eval sweep --task ruler -m "$M" --corpus data/corpora/wiki.test.raw --tasks "$RTASKS" --lengths 1024 \
    --samples "${RULER_SAMPLES:-8}" --decode-preamble "$PRE" --format raw --policies "$P" --out "$OUT/ruler_decode_$PRE" \
    --quiet
done
