#!/usr/bin/env bash
# WG-KV on kvsieve-tiny-2k, RULER-style (docs/results/wgkv/tiny2k/ruler_*): after scripts/results-wgkv-tiny2k.sh.
# Query-agnostic tasks at 1k and 2k tokens, on the frozen model, against the static layouts of the paper's Fig. 7:
# local attention (4 sinks + a window, swept) and retrieval heads (the heads with the most long-range attention mass
# on a calibration text keep everything, the others sinks + the window: eval retrieval-heads), and the composition
# with Quest's read-time selection (Fig. 9: wgkv+quest against quest alone). Resumable.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
OUT=docs/results/wgkv/tiny2k
M=tests/data/models/kvsieve-tiny-2k.gguf
CAL=$(ls runs/wgkv-tiny2k/*/heldout_tinystories_val_sample.txt | head -1)
RULER="--task ruler --corpus data/corpora/wiki.test.raw --tasks niah_single_1,niah_multikey_1,vt --lengths 1024,2048 --samples ${SAMPLES:-25}"
for n in 1 2 4; do
  [ -f "$OUT/retrieval_heads_$n/policy.txt" ] ||
    $K eval retrieval-heads -q -m "$M" --corpus "$CAL" --length 1024 --samples 4 --window 128 --sinks 4 \
      --global-heads $n --out "$OUT/retrieval_heads_$n"
done
W="wgkv:model=tests/data/models/wgkv/tiny2k-lambda"
P="full;${W}0.08,window=128;${W}0.32,window=128;${W}1.28,window=128"
P="$P;streaming_llm:window=128,sinks=4;streaming_llm:window=256,sinks=4;streaming_llm:window=512,sinks=4"
for n in 1 2 4; do P="$P;$(cat "$OUT/retrieval_heads_$n/policy.txt")"; done
P="$P;quest:budget=128;${W}0.32,window=128+quest:budget=128"
$K eval sweep $RULER -m "$M" --policies "$P" --out "$OUT/ruler"
