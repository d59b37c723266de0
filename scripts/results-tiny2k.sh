#!/usr/bin/env bash
# Reproduces docs/results/tiny2k_* : the RULER-style table of the classic policies and of KVzap on
# tests/data/models/kvsieve-tiny-2k.gguf, at 1k and 2k tokens. About 25 minutes on 2 cores. Sweeps are resumable: rerun
# to finish an interrupted one.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
M=tests/data/models/kvsieve-tiny-2k.gguf
CORPUS=data/corpora/wiki.test.raw
TASKS=${TASKS:-niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue,niah_multiquery,vt,qa}
SAMPLES=${SAMPLES:-6}
$K eval sweep --task ruler -m $M --corpus $CORPUS --tasks $TASKS --lengths 1024,2048 --samples $SAMPLES \
  --policies streaming_llm,h2o,tova,snapkv,knorm,random --ratios 0.5,0.75,0.9 --out docs/results/tiny2k_ruler \
  --query-aware
$K eval sweep --task ruler -m $M --corpus $CORPUS --tasks $TASKS --lengths 1024,2048 --samples $SAMPLES \
  --policies "kvzap:model=tests/data/models/kvzap/kvsieve-tiny-2k-linear,sinks=4;kvzap:model=tests/data/models/kvzap/kvsieve-tiny-2k-mlp,sinks=4" \
  --thresholds "${TAUS:--5,-4,-3}" --out docs/results/tiny2k_kvzap --query-aware
