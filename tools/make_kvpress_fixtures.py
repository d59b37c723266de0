#!/usr/bin/env python3
"""Regenerates tests/data/kvpress/*.json: scores and kept indices of kvpress presses on the tiny Qwen3 model.

kvsieve's tests compare its baselines with NVIDIA kvpress on the same model and input. This script
  1. exports the tiny Qwen3 model tiny-qwen3-f32.gguf (not committed: configuring the build writes it into
     build/test-data/models/ with tests/data/make_tiny_models.py) to a Hugging Face directory (config.json +
     model.safetensors),
  2. checks that transformers' logits on the test prompt match llama.cpp's golden logits,
  3. runs each press once on the prompt (eager attention, float32) and records, per layer, the score of every
     token per KV head and the kept token indices (top-k, k = max(1, int(n * (1 - ratio)))); PyramidKV keeps its
     layer budget (PyramidKVPress.get_layer_budget); StreamingLLM's scores are the press's 0/1 marks, not a
     ranking, so its fixture records only the kept indices.

Not run in CI. To regenerate (needs network for PyPI):
    python3 -m venv /tmp/kvp && /tmp/kvp/bin/pip install torch transformers kvpress safetensors gguf numpy
    /tmp/kvp/bin/python tools/make_kvpress_fixtures.py
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
import torch
from gguf import GGUFReader
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, Qwen3Config

import kvpress
from kvpress import (ExpectedAttentionPress, KnormPress, ObservedAttentionPress, PyramidKVPress, SnapKVPress,
                     StreamingLLMPress, TOVAPress)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
GGUF = os.path.join(ROOT, "build", "test-data", "models", "tiny-qwen3-f32.gguf")
GOLDEN = os.path.join(DATA, "golden", "tiny", "tiny-qwen3-f32__tinystories_passage.json")
OUT = os.path.join(DATA, "kvpress")
RATIO = 0.5

NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
}
BLOCK = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def export_hf(path):
    r = GGUFReader(GGUF)
    tensors = {}
    for t in r.tensors:
        name = t.name
        if name in NAMES:
            hf = NAMES[name]
        else:
            _, layer, kind, suffix = name.split(".")
            hf = f"model.layers.{layer}.{BLOCK[kind]}.{suffix}"
        shape = [int(x) for x in reversed(t.shape.tolist())]
        tensors[hf] = torch.from_numpy(np.array(t.data, dtype=np.float32).reshape(shape).copy())
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "model.safetensors"))
    cfg = Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
                      rope_theta=1e6, max_position_embeddings=2048, tie_word_embeddings=True,
                      attention_bias=False, torch_dtype="float32")
    cfg.save_pretrained(path)


def main():
    hf_dir = os.path.join("/tmp", "kvsieve-tiny-qwen3-hf")
    export_hf(hf_dir)
    golden = json.load(open(GOLDEN))
    ids = torch.tensor([golden["prompt_tokens"]])
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(ids).logits[0].numpy()
    ref = np.array([row["values"] for row in golden["logits"]], dtype=np.float64)
    err = float(np.abs(logits - ref).max())
    print(f"transformers vs llama.cpp logits: max |diff| {err:.2e}")
    assert err < 1e-3, "the exported model does not match the GGUF"

    presses = {
        "snapkv": SnapKVPress(compression_ratio=RATIO),
        "tova": TOVAPress(compression_ratio=RATIO),
        "knorm": KnormPress(compression_ratio=RATIO),
        "h2o": ObservedAttentionPress(compression_ratio=RATIO),
        "expected_attention": ExpectedAttentionPress(compression_ratio=RATIO),
        "pyramidkv": PyramidKVPress(compression_ratio=RATIO),
        "streaming_llm": StreamingLLMPress(compression_ratio=RATIO),
    }
    os.makedirs(OUT, exist_ok=True)
    for name, press in presses.items():
        layers = []
        original = press.score

        def recording_score(module, hidden_states, keys, values, attentions, kwargs, _orig=original, _press=press):
            s = _orig(module, hidden_states, keys, values, attentions, kwargs)
            n = keys.shape[2]
            if isinstance(_press, PyramidKVPress):
                k = _press.get_layer_budget(module, n)
            else:
                k = max(1, int(n * (1 - RATIO)))
            kept = s[0].topk(k, dim=-1).indices.sort(dim=-1).values
            rec = {"layer": int(module.layer_idx), "kept": kept.tolist()}
            if not isinstance(_press, StreamingLLMPress):
                rec["scores"] = s[0].float().tolist()
            layers.append(rec)
            return s

        press.score = recording_score
        with torch.no_grad(), press(model):
            model(ids, output_attentions=(name == "h2o"))
        fixture = {
            "description": f"kvpress {type(press).__name__}(compression_ratio={RATIO}) "
                           + ("" if name == "streaming_llm" else "scores [Hkv][n] and ")
                           + "kept token indices per layer on tests/data/models/tiny-qwen3-f32.gguf",
            "generator": f"tools/make_kvpress_fixtures.py with kvpress {importlib.metadata.version('kvpress')}, "
                         f"torch {torch.__version__}, transformers "
                         f"{__import__('transformers').__version__}, float32, eager attention",
            "ratio": RATIO,
            "prompt_tokens": golden["prompt_tokens"],
            "layers": sorted(layers, key=lambda x: x["layer"]),
        }
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(fixture, f)
        print(f"{name}: {len(layers)} layers")


if __name__ == "__main__":
    sys.exit(main())
