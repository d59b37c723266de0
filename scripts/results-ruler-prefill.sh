#!/usr/bin/env bash
# RULER at 2k tokens in kvsieve's chat format on SmolLM2-135M-Instruct: the one-piece prefill (the policy judges the
# context once, at its end: every door's default) against the memory-bounded prefill (`--prefill-chunk 256
# --compress-during-prefill`, the server's 256-token chunks, the policy judging and compressing after each), for the
# demo's KVzap, SnapKV and TOVA. 3 tasks × 8 examples, wiki.test.raw haystack. Writes
# docs/results/smollm2/ruler_2k_prefill/<cell>/ (a cell already there is kept). About 25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=${OUT:-docs/results/smollm2/ruler_2k_prefill}
[ -f "$M" ] || bash scripts/get-model.sh smollm2-135m >/dev/null
common=(-m "$M" --corpus data/corpora/wiki.test.raw --tasks niah_single_1,niah_single_2,niah_multikey_1
        --lengths 2048 --samples 8 --format chat -t 2 -q)
run() {
  local name=$1; shift
  [ -f "$OUT/$name/metrics.json" ] && return 0
  build/bin/kvsieve eval ruler "${common[@]}" --out "$OUT/$name" "$@" | tail -n 1
}
run full --policy full
for p in "kvzap:model=smollm2-135m-linear,tau=-3,sinks=4" "snapkv:ratio=0.5" "tova:ratio=0.5"; do
  n=$(echo "$p" | sed 's/:model=smollm2-135m-linear//; s/[:=,]/_/g')
  run "$n" --policy "$p"
  run "${n}_chunk256_during" --policy "$p" --prefill-chunk 256 --compress-during-prefill
done
