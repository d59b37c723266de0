#!/usr/bin/env bash
# WG-KV on SmolLM2-135M-Instruct, RULER-style (docs/results/wgkv/smollm2/ruler_{2k,4k}); after
# scripts/results-wgkv-smollm2.sh (the gates and its held-out calibration text). Query-agnostic tasks on the frozen
# model against the static layouts of the paper's Fig. 7 at about the same cache size: local attention (4 sinks + a
# window) and retrieval heads (DuoAttention-style: the heads with the most long-range attention mass on a
# calibration text keep everything, the others 4 sinks + 256 window; `eval retrieval-heads`), and the composition
# with Quest's read-time selection (Fig. 9: wgkv+quest against quest alone). Resumable (finished cells are skipped);
# THREADS (default all cores) and SAMPLES (default 10 per task and length).
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
OUT=docs/results/wgkv/smollm2
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$M" ] || bash scripts/get-model.sh
CAL=$(ls runs/wgkv-smollm2/*/heldout_tinystories_val_sample.txt | head -1)
T="--threads ${THREADS:-0}"
for n in 9 18; do  # 10% and 20% of SmolLM2's 90 KV heads
  [ -f "$OUT/retrieval_heads_$n/policy.txt" ] ||
    $K eval retrieval-heads -q $T -m "$M" --corpus "$CAL" --length 1024 --samples 4 --window 256 --sinks 4 \
      --global-heads $n --out "$OUT/retrieval_heads_$n"
done
W="wgkv:model=models/wgkv/smollm2-135m-lambda"
RULER="--task ruler --corpus data/corpora/wiki.test.raw --tasks niah_single_1,niah_multikey_1,vt --samples ${SAMPLES:-10} --format raw"
# 2k: local windows 512 / 256 keep 25% / 13% of the cache, as WG-KV λ 0.04 / 0.16 do.
P="full;${W}0.04;${W}0.08;${W}0.16;streaming_llm:window=512,sinks=4;streaming_llm:window=256,sinks=4"
for n in 9 18; do P="$P;$(cat "$OUT/retrieval_heads_$n/policy.txt")"; done
P="$P;quest:budget=512;${W}0.04+quest:budget=512"
# Quest reading the 4 sink tokens at every step besides its pages (SmolLM2's decode steps lose the sink otherwise).
P="$P;full:sinks=4+quest:budget=512;${W}0.04,sinks=4+quest:budget=512"
$K eval sweep $RULER $T --lengths 2048 -m "$M" --policies "$P" --out "$OUT/ruler_2k"
# 4k: the window that keeps 25% of the cache is 1024 tokens; the same rows as at 2k otherwise.
P="full;${W}0.04;${W}0.08;${W}0.16;streaming_llm:window=1024,sinks=4;streaming_llm:window=256,sinks=4"
P="$P;$(cat "$OUT/retrieval_heads_18/policy.txt")"
P="$P;quest:budget=1024;${W}0.04+quest:budget=1024;full:sinks=4+quest:budget=1024;${W}0.04,sinks=4+quest:budget=1024"
$K eval sweep $RULER $T --lengths 4096 -m "$M" --policies "$P" --out "$OUT/ruler_4k"
