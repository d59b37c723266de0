#!/usr/bin/env python3
"""Regenerates tests/data/kvzip/*.json: kvpress KVzipPress scores and evictions on the tiny Qwen3 model.

Runs KVzipPress(compression_ratio=0.5) with and without kvzip_plus_normalization (and KVzip+ with
chunk_size=64, so the multi-chunk reconstruction prompt is exercised) on the 198-token passage of
tests/data/golden/tiny, with the model exported as in make_kvpress_fixtures.py. The tiny model has no
Hugging Face tokenizer; kvpress only tokenizes its three fixed prompt strings, so the tokenizer is replaced by
a stub returning the ids kvsieve's tokenizer gives them (checked against llama.cpp's on the same vocabulary by
the tokenizer tests). Records, per layer, score_val [Hkv][n] (sinks at max + 1) and the evicted (head, token)
pairs. Not run in CI:
    /tmp/kvp/bin/python tools/make_kvzip_fixtures.py   (after building kvsieve)
"""
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_kvpress_fixtures as base  # noqa: E402
import kvpress.presses.kvzip_press as kz  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

OUT = os.path.join(base.DATA, "kvzip")
KVSIEVE = os.path.join(base.ROOT, "build", "bin", "kvsieve")
STRINGS = ["\n", "\n\nRepeat the previous context exactly.",
           "\n\nRepeat the part of the previous context exactly, starting with"]


class StubTokenizer:
    chat_template = None

    def __init__(self):
        self.ids = {}
        for s in STRINGS:
            out = subprocess.run([KVSIEVE, "tokenize", "-m", base.GGUF, "-p", s, "--no-bos"], check=True,
                                 capture_output=True, text=True).stdout.split()
            self.ids[s] = [int(x) for x in out]

    def encode(self, text, return_tensors=None, add_special_tokens=False):
        if text == "":
            return torch.zeros((1, 0), dtype=torch.long)
        return torch.tensor([self.ids[text]])


def main():
    hf_dir = os.path.join("/tmp", "kvsieve-tiny-qwen3-hf")
    base.export_hf(hf_dir)
    golden = json.load(open(base.GOLDEN))
    ids = torch.tensor([golden["prompt_tokens"]])
    stub = StubTokenizer()
    kz.AutoTokenizer.from_pretrained = staticmethod(lambda *a, **k: stub)
    os.makedirs(OUT, exist_ok=True)
    for name, plus, chunk in (("kvzip", False, 2048), ("kvzip_plus", True, 2048), ("kvzip_plus_chunk64", True, 64)):
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
        press = kz.KVzipPress(compression_ratio=0.5, kvzip_plus_normalization=plus, chunk_size=chunk)
        captured = {}
        original = press.compress_post

        def compress_post(model, _orig=original):
            _orig(model)
            captured["scores"] = press.score_val[:, 0].float().tolist()

        press.compress_post = compress_post
        with torch.no_grad(), press(model):
            model(ids, past_key_values=DynamicCache())  # KVzipPress replays over this cache
        layers = []
        for i, layer in enumerate(model.model.layers):
            mk = layer.self_attn.masked_key_indices
            layers.append({"layer": i, "scores": captured["scores"][i],
                           "evicted": sorted([int(h), int(t)] for h, t in zip(mk[1].tolist(), mk[2].tolist()))})
        fixture = {
            "description": f"kvpress KVzipPress(compression_ratio=0.5, kvzip_plus_normalization={plus}, chunk_size={chunk}) "
                           "score_val [Hkv][n] per layer (sinks at max + 1) and evicted (head, token) pairs",
            "generator": "tools/make_kvzip_fixtures.py, torch " + torch.__version__,
            "ratio": 0.5, "chunk": chunk, "plus": plus, "prompt_tokens": golden["prompt_tokens"],
            "string_ids": stub.ids, "layers": layers,
        }
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(fixture, f)
        print(name, "evicted", sum(len(l["evicted"]) for l in layers))


if __name__ == "__main__":
    sys.exit(main())
