#!/usr/bin/env python3
"""Regenerates tests/data/kvzap/: random KVzap checkpoints for the tiny Qwen3 model and kvpress's decisions.

For each of a linear and an MLP KVzap surrogate (kvpress KVzapModel, random weights, saved with
save_pretrained: config.json + model.safetensors, the layout of the published nvidia/KVzap-* checkpoints),
runs kvpress DMSPress(KVzapPress, threshold=tau, sliding_window_size=16) on the tiny Qwen3 model exported to
Hugging Face format (see make_kvpress_fixtures.py) and records, per layer, the predicted score of every token
per KV head and the (head, token) pairs kvpress evicts. tau is the median predicted score, so about half of
the entries beyond the window go.

Not run in CI. Regenerate with the venv of make_kvpress_fixtures.py:
    /tmp/kvp/bin/python tools/make_kvzap_fixtures.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_kvpress_fixtures as base  # noqa: E402
from kvpress.presses.dms_press import DMSPress  # noqa: E402
from kvpress.presses.kvzap_press import KVzapConfig, KVzapModel, KVzapPress  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

OUT = os.path.join(base.DATA, "kvzap")
WINDOW = 16


def main():
    hf_dir = os.path.join("/tmp", "kvsieve-tiny-qwen3-hf")
    base.export_hf(hf_dir)
    golden = json.load(open(base.GOLDEN))
    ids = torch.tensor([golden["prompt_tokens"]])
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    # Attention inputs of every layer (after input_layernorm), for the threshold.
    hidden = {}
    hooks = [layer.self_attn.register_forward_hook(
        lambda m, a, kw, out, i=i: hidden.__setitem__(i, kw["hidden_states"].detach()), with_kwargs=True)
        for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    os.makedirs(OUT, exist_ok=True)
    for kind, hidden_dim in (("linear", None), ("mlp", 32)):
        torch.manual_seed(7 if kind == "linear" else 8)
        kv = KVzapModel(KVzapConfig(input_dim=256, output_dim=2, n_modules=2, hidden_dim=hidden_dim))
        with torch.no_grad():
            for p in kv.parameters():
                p.normal_(0.0, 0.3)
        kv.eval()
        ckpt = os.path.join(OUT, f"tiny-qwen3-{kind}")
        kv.save_pretrained(ckpt)
        with torch.no_grad():
            all_scores = torch.cat([kv.layers[i](hidden[i][0]).flatten() for i in range(2)])
        tau = float(all_scores.median())
        press = KVzapPress(model_type=kind)
        press.kvzap_model = kv
        press.post_init_from_model = lambda model: None
        dms = DMSPress(press=press, threshold=tau, sliding_window_size=WINDOW)
        layers = []
        original = press.score

        def recording(module, hidden_states, keys, values, attentions, kwargs, _orig=original):
            s = _orig(module, hidden_states, keys, values, attentions, kwargs)
            layers.append({"layer": int(module.layer_idx), "scores": s[0].float().tolist()})
            return s

        press.score = recording
        for layer in model.model.layers:
            layer.self_attn.masked_key_indices = None
        with torch.no_grad(), dms(model):
            model(ids)
        for rec in layers:
            mk = model.model.layers[rec["layer"]].self_attn.masked_key_indices
            rec["evicted"] = [] if mk is None else sorted([int(h), int(t)] for h, t in zip(mk[1].tolist(), mk[2].tolist()))
        fixture = {
            "description": f"kvpress DMSPress(KVzapPress) with the {kind} checkpoint in tiny-qwen3-{kind}/: predicted "
                           "log-scores [Hkv][n] per layer and the evicted (head, token) pairs",
            "generator": "tools/make_kvzap_fixtures.py, torch " + torch.__version__,
            "tau": tau, "window": WINDOW, "prompt_tokens": golden["prompt_tokens"],
            "layers": sorted(layers, key=lambda x: x["layer"]),
        }
        with open(os.path.join(OUT, f"tiny-qwen3-{kind}.json"), "w") as f:
            json.dump(fixture, f)
        n_ev = sum(len(r["evicted"]) for r in layers)
        print(f"{kind}: tau={tau:.4f}, evicted {n_ev} entries")


if __name__ == "__main__":
    sys.exit(main())
