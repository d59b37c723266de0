#!/usr/bin/env python3
"""Regenerates tests/data/kvpress/smollm2_snapkv_query_aware.json: kvpress's SnapKV on a query-aware RULER prompt.

The query-aware protocol (`kvsieve eval ruler --query-aware`) compresses the whole prompt: the context, then the
question, the end of the chat turn and the answer prefix, so SnapKV's observation window (its last 64 tokens) is the
question's end. This script takes one example exported by kvsieve in the chat format, runs kvpress's SnapKVPress on
its context_ids + question_ids with the GGUF loaded by transformers (dequantized to float32, eager attention), and
records per layer every KV head's kept positions (top-k, k = int(n (1 - ratio)), as kvpress's ScorerPress keeps),
packed as a hexadecimal bit mask (position i is bit i % 4 of hex digit i // 4), and the greedy answer kvpress then
decodes from its own compressed cache (the first token from the prefill's logits, as eval ruler does).

Not run in CI; the fixture is checked by SmolLM2.SnapKVQueryAwareKeptMatchesKvpress (tests/test_kept_positions.cpp).

    python3 -m venv /tmp/kvp && /tmp/kvp/bin/pip install kvpress transformers gguf
    build/bin/kvsieve eval ruler -m models/SmolLM2-135M-Instruct.Q4_1.gguf --corpus data/corpora/wiki.test.raw \
        --tasks niah_single_1 --lengths 512 --samples 1 --seed 31 --format chat --export-jsonl /tmp/qa/ex.jsonl
    /tmp/kvp/bin/python tools/make_kvpress_query_aware_fixture.py /tmp/qa/ex.jsonl
"""
import argparse
import importlib.metadata
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvpress import SnapKVPress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "kvpress", "smollm2_snapkv_query_aware.json")


def hex_mask(positions, n):
    digits = [0] * ((n + 3) // 4)
    for p in positions:
        digits[p // 4] |= 1 << (p % 4)
    return "".join("0123456789abcdef"[d] for d in digits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("example", help="eval ruler --export-jsonl output (its first line is used)")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--ratio", type=float, default=0.75)
    ap.add_argument("--generate", type=int, default=24)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    with open(args.example) as f:
        ex = json.loads(f.readline())
    if ex.get("format") != "chat":
        sys.exit("error: the example must be exported in the chat format (--format chat)")
    ids = ex["context_ids"] + ex["question_ids"]
    model_dir, gguf = os.path.dirname(os.path.abspath(args.model)), os.path.basename(args.model)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=gguf, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf)
    press = SnapKVPress(compression_ratio=args.ratio)
    layers = {}
    original = press.score

    def recording_score(module, hidden_states, keys, values, attentions, kwargs):
        s = original(module, hidden_states, keys, values, attentions, kwargs)
        n = keys.shape[2]
        k = int(n * (1 - args.ratio))
        kept = s[0].topk(k, dim=-1).indices.sort(dim=-1).values
        layers[int(module.layer_idx)] = [hex_mask(row, n) for row in kept.tolist()]
        return s

    press.score = recording_score
    eog = model.generation_config.eos_token_id
    eog = set(eog if isinstance(eog, list) else [eog])
    answer = []
    with torch.no_grad():
        with press(model):
            out = model(torch.tensor([ids]), use_cache=True)
        cache, logits = out.past_key_values, out.logits[0, -1]
        for t in range(args.generate):
            nxt = int(logits.argmax())
            if nxt in eog:
                break
            answer.append(nxt)
            o = model(torch.tensor([[nxt]]), past_key_values=cache, position_ids=torch.tensor([[len(ids) + t]]),
                      use_cache=True)
            cache, logits = o.past_key_values, o.logits[0, -1]
    versions = ", ".join(f"{k} {importlib.metadata.version(k)}" for k in ("kvpress", "transformers", "torch"))
    fixture = {
        "description": f"kvpress SnapKVPress(compression_ratio={args.ratio}) kept positions per layer and KV head "
                       "(hex bit masks) on a query-aware RULER prompt (context_ids + question_ids) of "
                       f"{gguf}, and kvpress's greedy answer from its compressed cache",
        "generator": f"tools/make_kvpress_query_aware_fixture.py with {versions}, float32 (dequantized GGUF), "
                     "eager attention",
        "task": ex["task"], "length": ex["length"], "seed": ex["seed"], "answers": ex["answers"],
        "ratio": args.ratio,
        "context_ids": ex["context_ids"], "question_ids": ex["question_ids"],
        "kept_hex": [layers[l] for l in sorted(layers)],
        "kvpress_answer_ids": answer, "kvpress_answer": tokenizer.decode(answer),
    }
    with open(args.out, "w") as f:
        json.dump(fixture, f)
    print(f"wrote {args.out}: {len(ids)} tokens, {len(layers)} layers, kvpress's answer {fixture['kvpress_answer']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
