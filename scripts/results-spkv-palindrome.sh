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
# LONG=1 (FORM=tokens, after the ablations): full-4l-long continues the 4-layer run from its step-5000 checkpoint
# with the learning rate back at 2e-3 to step 12000, then decayed to 0.1x by step 15000 (a long run: it resumes);
# full-4l-tail continues that from step 15000 at its final rate, 2e-4, constant to step 18500.
RUNS="full spkv window"
[ "${ABLATIONS:-0}" = 1 ] && [ "$NAME" = palindrome-tokens ] && RUNS="$RUNS full-wsd full-4l"
[ "${LONG:-0}" = 1 ] && [ "$NAME" = palindrome-tokens ] && RUNS="$RUNS full-4l-long full-4l-tail"
mkdir -p runs "$OUT"
for n in $RUNS; do
  from=""
  [ "$n" = full-wsd ] && from=full        # the stable phase is the full run's first 8000 steps
  [ "$n" = full-4l-long ] && from=full-4l  # the 4-layer run's 5000 steps
  [ "$n" = full-4l-tail ] && from=full-4l-long  # and its continuation to 15000
  if [ -n "$from" ] && [ ! -f "runs/$NAME-$n/checkpoint.pt" ]; then
    # Start from that run's checkpoint (the step is in the file) and log.
    mkdir -p "runs/$NAME-$n"
    cp "runs/$NAME-$from/checkpoint.pt" "runs/$NAME-$from/log.jsonl" "runs/$NAME-$n/"
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
first = {"full_wsd": 8000, "full_4l_long": 5000, "full_4l_tail": 15000}  # steps whose lines are the run it continued
for n in ("full", "spkv", "window", "full_wsd", "full_4l", "full_4l_long", "full_4l_tail"):
    if not os.path.exists(f"{out}/train_log_{n}.jsonl"):
        continue
    with open(f"{out}/train_log_{n}.jsonl") as f, open(f"{out}/loss_{n}.dat", "w") as d:
        for line in f:
            j = json.loads(line)
            if "loss" in j and j["step"] > first.get(n, -1):
                d.write(f'{j["step"]} {j.get("lm_loss", j["loss"])} {j.get("mean_u", "nan")} {j.get("density", "nan")}\n')
    # Teacher-forced accuracy of the reversal at each evaluation.
    with open(f"{out}/train_log_{n}.jsonl") as f, open(f"{out}/acc_{n}.dat", "w") as d:
        for line in f:
            j = json.loads(line)
            acc = [v for k, v in j.get("eval", {}).items() if k in ("acc_palindrome", "acc_palindrome_tokens")]
            if acc and j["step"] > first.get(n, -1):
                d.write(f'{j["step"]} {acc[0]}\n')
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
if [ -f "$OUT/loss_full_4l_long.dat" ]; then
  EXTRA_LOSS+=", 'loss_full_4l_long.dat' using 1:2 with lines lw 2 dt 1 lc rgb '#c00000' title 'full attention, 4 layers, continued'"
  EXTRA_ACC+=", 'acc_full_4l_long.dat' using 1:2 with linespoints lw 2 dt 1 lc rgb '#c00000' title 'full attention, 4 layers, continued'"
fi
if [ -f "$OUT/loss_full_4l_tail.dat" ]; then
  EXTRA_LOSS+=", 'loss_full_4l_tail.dat' using 1:2 with lines lw 2 dt 1 lc rgb '#600000' title 'full attention, 4 layers, lr 2e-4 from step 15000'"
  EXTRA_ACC+=", 'acc_full_4l_tail.dat' using 1:2 with linespoints lw 2 dt 1 lc rgb '#600000' title 'full attention, 4 layers, lr 2e-4 from step 15000'"
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
# Where each model's reversal goes wrong (FORM=tokens): its final checkpoint on 256 held-out rows, accuracy per
# answer index and by whether the answer's cue (the number just written) occurs once or more in the list
# (`train spkv --eval-only`, from a copy of the run's config with more samples; nothing in the runs is written).
[ "$NAME" = palindrome-tokens ] || exit 0
: > "$OUT/breakdown.jsonl"
# Every run trained here (full-wsd aside: it stopped on its plateau before its last step).
for n in full spkv window full-4l full-4l-long full-4l-tail; do
  [ -f "runs/$NAME-$n/checkpoint.pt" ] || continue
  tmp="configs/spkv/.eval-$NAME-$n.json"
  python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["eval"].update(samples=256, text_windows=0); json.dump(c, open(sys.argv[2], "w"))' \
    "configs/spkv/$NAME-$n.json" "$tmp"
  $K train spkv --config "$tmp" --eval-only -q |
    python3 -c 'import json, sys; j = json.load(sys.stdin); j["run"] = sys.argv[1]; print(json.dumps(j))' "$n" \
    >> "$OUT/breakdown.jsonl"
  rm -f "$tmp"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/breakdown.jsonl")]
p = "acc_palindrome_tokens"
with open(f"{out}/breakdown.md", "w") as md, open(f"{out}/by_index.dat", "w") as d:
    md.write("| run | step | accuracy | cue once in the list | cue repeated | own number once | own number repeated "
             "| answer indices at ≥ 0.95 |\n|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        e = r["eval"]
        by = e[p + "_by_index"]
        md.write(f'| {r["run"]} | {r["step"]} | {e[p]:.3f} | {e[p + "_unique_cue"]:.3f} | '
                 f'{e[p + "_repeated_cue"]:.3f} | {e[p + "_unique_number"]:.3f} | {e[p + "_repeated_number"]:.3f} | '
                 f'{sum(a >= 0.95 for a in by)} of {len(by)} |\n')
        d.write(f'# {r["run"]}\n' + "".join(f"{k} {a}\n" for k, a in enumerate(by)) + "\n\n")
with open(f"{out}/by_index.gp", "w") as g:
    g.write("set terminal pngcairo size 900,420 noenhanced\nset output 'by_index.png'\n"
            "set title 'Palindrome reversal: accuracy per answer index, 256 held-out rows (index 32 is EOS)'\n"
            "set xlabel 'answer index k (the list number 31 - k)'\nset ylabel 'accuracy (teacher-forced)'\n"
            "set yrange [0:1.05]\nset grid\nset key outside right\n")
    g.write("plot " + ", \\\n     ".join(f"'by_index.dat' index {i} using 1:2 with linespoints lw 2 title '{r['run']}'"
                                         for i, r in enumerate(rows)) + "\n")
PY
if command -v gnuplot >/dev/null; then (cd "$OUT" && gnuplot by_index.gp); fi
