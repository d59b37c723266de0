#!/usr/bin/env bash
# SP-KV's palindrome reversal (App. G) from scratch (docs/results/spkv/palindrome): the same 2-layer model and
# batches with full attention, SP-KV (window 32, gates learned by next-token loss alone) and a sliding window of 32.
# Resumable: interrupted runs continue from their checkpoint, and so do finished ones whose config was given more
# steps (the full and SP-KV runs of FORM=tokens were extended from 3000 to 8000 steps that way).
# FORM=digits (default): the numbers written in the tokenizer's digits (three tokens each with stories260K's);
# FORM=tokens: one token per number (the palindrome_tokens task), docs/results/spkv/palindrome_tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
case "${FORM:-digits}" in
  digits) NAME=palindrome; OUT=docs/results/spkv/palindrome; TITLE='32 two-digit numbers in digits' ;;
  tokens) NAME=palindrome-tokens; OUT=docs/results/spkv/palindrome_tokens; TITLE='32 numbers, one token each' ;;
  *) echo "FORM must be digits or tokens" >&2; exit 2 ;;
esac
# ABLATIONS=1 (FORM=tokens): two more full-attention runs, after the three: full-wsd continues the full run from
# its step-8000 checkpoint with the learning rate decayed linearly to 0.1x over 4000 steps (warmup-stable-decay),
# full-4l is full attention with 4 layers instead of 2, from scratch.
RUNS="full spkv window"
[ "${ABLATIONS:-0}" = 1 ] && [ "$NAME" = palindrome-tokens ] && RUNS="$RUNS full-wsd full-4l"
mkdir -p runs "$OUT"
for n in $RUNS; do
  if [ "$n" = full-wsd ] && [ ! -f "runs/$NAME-$n/checkpoint.pt" ]; then
    # The stable phase is the full run's first 8000 steps: start from its checkpoint (the step is in the file).
    mkdir -p "runs/$NAME-$n"
    cp "runs/$NAME-full/checkpoint.pt" "runs/$NAME-full/log.jsonl" "runs/$NAME-$n/"
  fi
  # A run with a checkpoint continues to its config's steps (a finished one only writes its final model again).
  if [ -f "runs/$NAME-$n/checkpoint.pt" ]; then
    $K train spkv --config "configs/spkv/$NAME-$n.json" --resume
  else
    $K train spkv --config "configs/spkv/$NAME-$n.json"
  fi
done
for n in $RUNS; do cp "runs/$NAME-$n/log.jsonl" "$OUT/train_log_${n//-/_}.jsonl"; done
# Loss of the reversed numbers per step (nats per answer token) and SP-KV's mean utility; then the plot.
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for n in ("full", "spkv", "window", "full_wsd", "full_4l"):
    if not os.path.exists(f"{out}/train_log_{n}.jsonl"):
        continue
    with open(f"{out}/train_log_{n}.jsonl") as f, open(f"{out}/loss_{n}.dat", "w") as d:
        for line in f:
            j = json.loads(line)
            if "loss" in j and not (n == "full_wsd" and j["step"] <= 8000):  # its first 8000 steps are the full run's
                d.write(f'{j["step"]} {j.get("lm_loss", j["loss"])} {j.get("mean_u", "nan")} {j.get("density", "nan")}\n')
    # Teacher-forced accuracy of the reversal at each evaluation.
    with open(f"{out}/train_log_{n}.jsonl") as f, open(f"{out}/acc_{n}.dat", "w") as d:
        for line in f:
            j = json.loads(line)
            acc = {k: v for k, v in j.get("eval", {}).items() if k.startswith("acc_palindrome")}
            if acc and not (n == "full_wsd" and j["step"] <= 8000):
                d.write(f'{j["step"]} {next(iter(acc.values()))}\n')
PY
# The ablations' curves, where their logs exist.
EXTRA_LOSS="" EXTRA_ACC=""
if [ -f "$OUT/loss_full_wsd.dat" ]; then
  EXTRA_LOSS+=", 'loss_full_wsd.dat' using 1:2 with lines lw 2 dt 2 title 'full attention, lr decayed from step 8000'"
  EXTRA_ACC+=", 'acc_full_wsd.dat' using 1:2 with linespoints lw 2 dt 2 title 'full attention, lr decayed from step 8000'"
fi
if [ -f "$OUT/loss_full_4l.dat" ]; then
  EXTRA_LOSS+=", 'loss_full_4l.dat' using 1:2 with lines lw 2 dt 4 lc rgb '#c00000' title 'full attention, 4 layers'"
  EXTRA_ACC+=", 'acc_full_4l.dat' using 1:2 with linespoints lw 2 dt 4 lc rgb '#c00000' title 'full attention, 4 layers'"
fi
cat > "$OUT/palindrome.gp" <<GP
set terminal pngcairo size 900,900 noenhanced
set output 'palindrome.png'
set multiplot layout 3,1 title 'Palindrome reversal (SP-KV App. G): 2 layers (unless named), D 128, $TITLE'
set ylabel 'loss of the reversal (nats/token)'
set grid
set key top right
plot 'loss_full.dat' using 1:2 with lines lw 2 title 'full attention', \
     'loss_spkv.dat' using 1:2 with lines lw 2 title 'SP-KV, window 32', \
     'loss_window.dat' using 1:2 with lines lw 2 title 'sliding window 32'$EXTRA_LOSS
set ylabel 'reversal accuracy (teacher-forced)'
set key bottom right
plot 'acc_full.dat' using 1:2 with linespoints lw 2 title 'full attention', \
     'acc_spkv.dat' using 1:2 with linespoints lw 2 title 'SP-KV, window 32', \
     'acc_window.dat' using 1:2 with linespoints lw 2 title 'sliding window 32'$EXTRA_ACC
set xlabel 'step'
set key top right
set ylabel 'SP-KV utility'
set yrange [0:1.05]
plot 'loss_spkv.dat' using 1:3 with lines lw 2 title 'mean u of keys beyond the window', \
     'loss_spkv.dat' using 1:4 with lines lw 2 title 'density (u >= 0.5)'
unset multiplot
GP
command -v gnuplot >/dev/null && (cd "$OUT" && gnuplot palindrome.gp)
