#!/usr/bin/env bash
# Quantized KV pages stacked with learned compression on SmolLM2-135M-Instruct (docs/results/kv_quant/stacks.md):
# for each cache type of TYPES, query-agnostic RULER at each length of LENGTHS (default 2048 4096; the tasks and
# corpus of the leaderboard, SAMPLES per task, default 10; FORMAT, default chat: kvpress's prompts, as the chat-format
# leaderboard pages) and NLL at 2048 tokens (SP-KV's chunked protocol on the held-out tail of WikiText-2, NLL_SAMPLES
# windows, default 4, as docs/results/smollm2/nll_2k) for every stack of STACKS: the full cache and each learned
# method at its operating point. Every cell records its KV bytes per position and against a full F16 cache of the
# same positions, and scripts/kv_quant_table.py writes the table that names the smallest stack at ≥ 95% of the full
# F16 cache's RULER score and ≤ +1% NLL. Resumable: finished cells are skipped, a RULER sweep resumes from its
# partial files.
#
# TYPES: space-separated, each K[/V][@admission][:off]: the keys' and values' element types (one for both), quantized
# at write (default) or at admission, rotated as --kv-rotate auto (a quantized half with the head size a multiple of
# 64: on for SmolLM2) unless ":off". Default: f16 q8_0 q8_0:off q8_0/q4_0 q8_0/q4_0:off q4_0@admission
# q4_0@admission:off. STACKS: space-separated names of full full_window kvzap kvzap_mlp wgkv kvpop spkv (default all;
# full: the full cache, every sweep's reference anyway; full_window: the full cache with 4 sinks and a 128-token
# window, whose sinks and window stay F16 when quantizing at admission; kvzap: KVzap-Linear at each τ of KVZAP_TAUS,
# default "-4 -3", the NLL page's last τ within +1% and its RULER operating point; kvzap_mlp: the MLP surrogate at
# the same τ; wgkv: WG-KV's gates of each λ of WGKV_LAMBDAS, default 0.04, the WG-KV page's operating point; 0.02
# keeps more entries, 0.04-len4096 names the gates trained on 4096-token rows; WGKV_SINKS=N adds N sink tokens, as
# KVzap's stacks keep); a learned checkpoint missing from this checkout is left out with the command that rebuilds it
# (TRAIN=1: rebuild it first, as scripts/results-smollm2.sh PART=learned does). LENGTHS= (empty): the NLL cells only.
# SHARDS=N runs each RULER sweep as N one-thread processes.
# Outputs: docs/results/kv_quant/ruler_<L/1024>k_<type>/ and nll_2k_<type>/ (type with '/' → '-', '@' → '_',
# ':off' → '_norot'), SP-KV's cells in the same names with _spkv (its gated model's own full cell).
set -euo pipefail
cd "$(dirname "$0")/.."
K=${KVSIEVE:-build/bin/kvsieve}
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
CORPUS=${CORPUS:-data/corpora/wiki.test.raw}
OUT=${RESULTS:-docs/results/kv_quant}
TYPES=${TYPES:-"f16 q8_0 q8_0:off q8_0/q4_0 q8_0/q4_0:off q4_0@admission q4_0@admission:off"}
STACKS=${STACKS:-"full full_window kvzap kvzap_mlp wgkv kvpop spkv"}
KVZAP_TAUS=${KVZAP_TAUS:-"-4 -3"}
WGKV_LAMBDAS=${WGKV_LAMBDAS:-0.04}
WGKV_SINKS=${WGKV_SINKS:+,sinks=$WGKV_SINKS}
LENGTHS=${LENGTHS-"2048 4096"}
SHARDS=${SHARDS:-1}
TASKS=${TASKS:-niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multiquery,niah_multivalue,fwe}
[ -f "$M" ] || bash scripts/get-model.sh
THREADS=${THREADS:-0}  # NLL sweeps (one process)
RTHREADS=$THREADS     # RULER sweeps: one thread per shard process
[ "$SHARDS" -gt 1 ] && RTHREADS=1
mkdir -p runs "$OUT"
TAIL=runs/wiki.test.heldout.raw
[ -f "$TAIL" ] || python3 - "$CORPUS" "$TAIL" <<'PY'
import sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
cut = len(b) - int(0.05 * len(b))  # the trainers' split (train/data.cpp): the first newline after 95% of the bytes
nl = b.find(b"\n", cut)
open(dst, "wb").write(b[nl + 1:] if nl >= 0 else b"")
PY
# The learned stacks at the operating points of their results pages (as scripts/results-smollm2.sh PART=learned).
have() {  # DIR: whether the checkpoint is here (TRAIN=1: rebuilt first, scripts/need-checkpoint.sh --train)
  KVSIEVE=$K bash scripts/need-checkpoint.sh ${TRAIN:+--train} "$1" && return 0
  echo "(left out of the kv_quant stacks)" >&2
  return 1
}
POLICIES=
SPKV=0
for s in $STACKS; do
  case "$s" in
    full) POLICIES="$POLICIES;full" ;;
    full_window) POLICIES="$POLICIES;full:sinks=4,window=128" ;;  # its sinks and window stay F16 at admission
    kvzap) for tau in $KVZAP_TAUS; do POLICIES="$POLICIES;kvzap:model=models/kvzap/smollm2-135m-linear,tau=$tau,sinks=4"; done ;;
    kvzap_mlp)
      if have models/kvzap/smollm2-135m-mlp; then
        for tau in $KVZAP_TAUS; do POLICIES="$POLICIES;kvzap:model=models/kvzap/smollm2-135m-mlp,tau=$tau,sinks=4"; done
      fi ;;
    wgkv)
      for lam in $WGKV_LAMBDAS; do
        if have models/wgkv/smollm2-135m-lambda$lam; then POLICIES="$POLICIES;wgkv:model=models/wgkv/smollm2-135m-lambda$lam$WGKV_SINKS"; fi
      done ;;
    kvpop) have models/kvpop/smollm2-135m-mlstm && POLICIES="$POLICIES;kvpop:model=models/kvpop/smollm2-135m-mlstm,capacity=768" ;;
    spkv) SPKV=1 ;;
    *) echo "error: STACKS takes full full_window kvzap kvzap_mlp wgkv kvpop spkv, got '$s'" >&2; exit 2 ;;
  esac
done
POLICIES=${POLICIES#;}
SPKV_MODEL=runs/smollm2-spkv-frozen/final.gguf
if [ $SPKV = 1 ] && [ ! -f "$SPKV_MODEL" ]; then
  if [ -n "${TRAIN:-}" ]; then SAMPLES=3 BASELINES= DENSITY_SAMPLES=2 HYBRID= bash scripts/results-spkv-smollm2.sh; fi
  [ -f "$SPKV_MODEL" ] || { echo "SP-KV left out: $SPKV_MODEL is not here; rebuild it with: bash scripts/results-spkv-smollm2.sh" >&2; SPKV=0; }
fi
sweep() {
  if [ "$SHARDS" -le 1 ]; then $K eval sweep "$@"; return; fi
  local pids=() k
  for ((k = 0; k < SHARDS; k++)); do OMP_WAIT_POLICY=passive $K eval sweep "$@" --shard "$k/$SHARDS" & pids+=($!); done
  for k in "${pids[@]}"; do wait "$k"; done
}
for t in $TYPES; do
  rot=auto
  spec=$t
  case "$t" in *:off) rot=off; spec=${t%:off} ;; esac
  at=write
  case "$spec" in *@admission) at=admission; spec=${spec%@admission} ;; esac
  kt=${spec%%/*}
  vt=${spec#*/}
  name=$(echo "$spec" | tr '/' '-')
  [ $at = admission ] && name=${name}_admission
  [ $rot = off ] && name=${name}_norot
  KV="--cache-type-k $kt --cache-type-v $vt --kv-quant-at $at --kv-rotate $rot"
  for L in $LENGTHS; do
    R="--task ruler --corpus $CORPUS --tasks $TASKS --lengths $L --samples ${SAMPLES:-10} --format ${FORMAT:-chat}
      --threads $RTHREADS $KV"
    [ -n "$POLICIES" ] && sweep $R -m "$M" --policies "$POLICIES" --out "$OUT/ruler_$((L / 1024))k_$name"
    [ $SPKV = 1 ] && sweep $R -m "$SPKV_MODEL" --policies spkv --thresholds "${SPKV_TAU:-0.5}" \
      --out "$OUT/ruler_$((L / 1024))k_${name}_spkv"
  done
  N="--task nll --corpus $TAIL --length 2048 --samples ${NLL_SAMPLES:-4} --threads $THREADS $KV"
  [ -n "$POLICIES" ] && $K eval sweep $N -m "$M" --policies "$POLICIES" --out "$OUT/nll_2k_$name"
  [ $SPKV = 1 ] && $K eval sweep $N -m "$SPKV_MODEL" --policies spkv --thresholds "${SPKV_TAU:-0.5}" \
    --out "$OUT/nll_2k_${name}_spkv"
done
for d in "$OUT"/ruler_*/; do [ -d "$d" ] && bash scripts/pack-predictions.sh --unpack "$d"; done  # the paired intervals read them
python3 scripts/kv_quant_table.py "$OUT" --plot "$OUT/stacks" > "$OUT/stacks.md"  # and stacks_<N>k.png per length
echo "wrote $OUT/stacks.md" >&2
