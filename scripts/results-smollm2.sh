#!/usr/bin/env bash
# SmolLM2-135M-Instruct RULER-style leaderboard (docs/results/smollm2): query-agnostic tasks (the context is prefilled
# and compressed, then the question is fed), SAMPLES per task (default 25) at LENGTH tokens (default 1024; 2048 and
# 4096 for the longer tables), the tasks the model answers above chance with the full cache. Every baseline at
# compression ratios RATIOS (default 0.25,0.5,0.75,0.9) in ruler_<L>k/, the KVzap surrogates fitted on SmolLM2 over
# a threshold sweep in ruler_<L>k_kvzap/, then the leaderboard page leaderboard_<L>k/. A sweep runs its cells
# together (one prefill per example for all of them) and resumes from each cell's partial file, so run it again
# to continue. PART=together runs both in one sweep into ruler_<L>k/ (one prefill per example for all cells, one
# full-cache cell; the 4k table). PART=baselines or PART=kvzap runs one half (the two can run at once, one per core;
# each has its own full-cache cell); THREADS (default all cores). SHARDS=N runs each sweep as N processes of one thread that
# share its examples (eval sweep --shard K/N; about N times faster on N cores, where one process with N threads
# gains far less); the last to finish writes the cells. FORMAT=chat (default raw) builds the prompts as kvpress does
# (eval ruler --format chat: the context inside SmolLM2's chat template, then the question after the end of the user
# turn) into ruler_<L>k_chat/, ruler_<L>k_chat_kvzap/ and leaderboard_<L>k_chat/, so that its table reads beside
# kvpress's; FORMAT=raw keeps the plain-text prompts of the existing tables (their directories as before).
# RESULTS (default docs/results/smollm2) moves every output directory; BASELINES overrides the baselines swept.
# CELLS_PER_PASS=N (default 0: all) runs a sweep's unfinished cells N at a time, in the order of the cells (full,
# then each baseline over its ratios): each group shares a prefill per example and is written when it finishes, so
# a run cut short leaves whole cells (CELLS_PER_PASS=37 with the default baselines: full and the nine heuristics
# first, then KVzip and KVzip+, which replay the context).
# KVZAP_KINDS (default "linear mlp") names the KVzap surrogates PART=kvzap trains when missing and sweeps
# (KVZAP_KINDS=linear: only the committed one, nothing trained).
# PART=learned: the other learned methods at the operating points of their results pages, on the same prompts:
# WG-KV's write gates (docs/results/wgkv; λ WGKV_LAMBDAS, default "0.04 0.08 0.16", τ 0.1, window 256) and KVpop's
# scorers on the frozen model (docs/results/kvpop; mLSTM and MLP at capacity B = KVPOP_BUDGETS per KV head, default
# "768 384", the budgets of its decode-time RULER table) in one sweep into ruler_<L>k<_chat>_learned/ (its own
# full-cache cell), and SP-KV's gates trained on the frozen model (docs/results/spkv/smollm2; τ SPKV_TAUS, default
# 0.5) on their own weights (the gated model, F32) into ruler_<L>k<_chat>_spkv/ (whose full cell is that model's).
# A checkpoint missing from this checkout is left out with the command that rebuilds it (scripts/need-checkpoint.sh);
# TRAIN=1 rebuilds it first (WG-KV 15-23 min per λ, KVpop 25-40 min per scorer on one core; SP-KV ~40 min on two).
# PART=all (the default) runs baselines, kvzap and learned, then the page over every directory of this length and
# format with a finished full cell; PART=board writes only that page.
set -euo pipefail
cd "$(dirname "$0")/.."
K=${KVSIEVE:-build/bin/kvsieve}
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
CORPUS=${CORPUS:-data/corpora/wiki.test.raw}
[ -f "$M" ] || bash scripts/get-model.sh
L=${LENGTH:-1024}
FORMAT=${FORMAT:-raw}
case "$FORMAT" in
  raw) SUFFIX= ;;
  chat) SUFFIX=_chat ;;
  *) echo "error: FORMAT must be raw or chat, got '$FORMAT'" >&2; exit 2 ;;
esac
RESULTS=${RESULTS:-docs/results/smollm2}
OUT=$RESULTS/ruler_$((L / 1024))k$SUFFIX
BOARD=$RESULTS/leaderboard_$((L / 1024))k$SUFFIX
TASKS=${TASKS:-niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multiquery,niah_multivalue,fwe}
SHARDS=${SHARDS:-1}
[ "$SHARDS" -gt 1 ] && THREADS=1
RULER_ARGS="--task ruler --corpus $CORPUS --tasks $TASKS --lengths $L --samples ${SAMPLES:-25} --threads ${THREADS:-0} --format $FORMAT --cells-per-pass ${CELLS_PER_PASS:-0}"
RULER="$RULER_ARGS -m $M"
PART=${PART:-all}
# One sweep; as SHARDS background processes when SHARDS > 1 (the script fails if one of them does).
sweep() {
  if [ "$SHARDS" -le 1 ]; then
    $K eval sweep "$@"
    return
  fi
  local pids=() k
  for ((k = 0; k < SHARDS; k++)); do
    OMP_WAIT_POLICY=passive $K eval sweep "$@" --shard "$k/$SHARDS" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k"; done
}
BASELINES=${BASELINES:-"snapkv,tova,h2o,streaming_llm,knorm,expected_attention,adakv_expected_attention_e2,pyramidkv,random,kvzip,kvzip_plus"}
KVZAP_KINDS=${KVZAP_KINDS:-linear mlp}
KVZAP=
for kind in $KVZAP_KINDS; do
  case "$kind" in
    linear|mlp) KVZAP="${KVZAP:+$KVZAP;}kvzap:model=models/kvzap/smollm2-135m-$kind,sinks=4" ;;
    *) echo "error: KVZAP_KINDS takes linear and mlp, got '$kind'" >&2; exit 2 ;;
  esac
done
if [ "$PART" = all ] || [ "$PART" = baselines ]; then
  sweep $RULER --ratios "${RATIOS:-0.25,0.5,0.75,0.9}" --out "$OUT" --policies "$BASELINES"
fi
if [ "$PART" = together ]; then
  # The baselines over the ratios and the KVzap surrogates over tau in one sweep (one prefill per example for all
  # 53 cells, one full cell for both); the 4k table is made this way.
  sweep $RULER --ratios "${RATIOS:-0.25,0.5,0.75,0.9}" --out "$OUT" --policies "$BASELINES" \
    --thresholds "${TAUS:--4.5,-3,-1,1}" --threshold-policies "$KVZAP"
fi
if [ "$PART" = all ] || [ "$PART" = kvzap ]; then
  # The KVzap surrogates fitted on SmolLM2, then their tau sweep.
  for kind in $KVZAP_KINDS; do KVSIEVE=$K MODEL=$M bash scripts/train-kvzap-smollm2.sh "$kind"; done
  sweep $RULER --thresholds "${TAUS:--4.5,-3,-1,1}" --out "${OUT}_kvzap" --policies "$KVZAP"
fi
if [ "$PART" = all ] || [ "$PART" = learned ]; then
  # have DIR: whether the checkpoint DIR is in this checkout. With TRAIN=1 a missing one is rebuilt first (by the
  # command scripts/need-checkpoint.sh names, with the checkpoints that command needs); otherwise it is left out of
  # the sweep and that command is printed.
  have() {
    KVSIEVE=$K bash scripts/need-checkpoint.sh ${TRAIN:+--train} "$1" && return 0
    echo "(left out of ${OUT}_learned)" >&2
    return 1
  }
  LEARNED=
  for lam in ${WGKV_LAMBDAS:-0.04 0.08 0.16}; do
    G=models/wgkv/smollm2-135m-lambda$lam
    if have "$G"; then LEARNED="$LEARNED;wgkv:model=$G"; fi
  done
  for kind in mlstm mlp; do
    S=models/kvpop/smollm2-135m-$kind
    have "$S" || continue
    preset=kvpop
    [ "$kind" = mlp ] && preset=kvpop_mlp
    for b in ${KVPOP_BUDGETS:-768 384}; do LEARNED="$LEARNED;$preset:model=$S,capacity=$b"; done
  done
  if [ -n "$LEARNED" ]; then sweep $RULER --out "${OUT}_learned" --policies "full$LEARNED"; fi
  # SP-KV's gates are part of the gated model's weights (F32; scripts/results-spkv-smollm2.sh trains them), so its
  # cells run on that model, with a full cell of their own.
  SPKV_MODEL=runs/smollm2-spkv-frozen/final.gguf
  if [ ! -f "$SPKV_MODEL" ] && [ -n "${TRAIN:-}" ]; then
    SAMPLES=3 BASELINES= DENSITY_SAMPLES=2 HYBRID= bash scripts/results-spkv-smollm2.sh
  fi
  if [ -f "$SPKV_MODEL" ]; then
    sweep $RULER_ARGS -m "$SPKV_MODEL" --policies spkv --thresholds "${SPKV_TAUS:-0.5}" --out "${OUT}_spkv"
  else
    echo "SP-KV left out: its model $SPKV_MODEL is not in this checkout; rebuild it with:" \
      "bash scripts/results-spkv-smollm2.sh (left out of ${OUT}_spkv)" >&2
  fi
fi
# EXCLUDE: tasks at chance with the full cache at this length, left out of the page's values (niah_multikey_2 at 4k).
if [ "$PART" = together ] && [ -f "$OUT/full/metrics.json" ]; then
  $K eval leaderboard "$OUT" --out "$BOARD" \
    ${EXCLUDE:+--exclude-tasks "$EXCLUDE"} > /dev/null
fi
if [ "$PART" = all ] || [ "$PART" = board ]; then
  # The page over every directory of this length and format whose full-cache cell is finished.
  DIRS=()
  for d in "$OUT" "${OUT}_kvzap" "${OUT}_learned" "${OUT}_spkv"; do
    [ -f "$d/full/metrics.json" ] && DIRS+=("$d")
  done
  # Cells whose predictions are committed packed (scripts/pack-predictions.sh) get them back first.
  [ ${#DIRS[@]} -gt 0 ] && bash scripts/pack-predictions.sh --unpack "${DIRS[@]}" &&
    $K eval leaderboard "${DIRS[@]}" --out "$BOARD" > /dev/null
fi
