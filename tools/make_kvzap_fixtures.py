#!/usr/bin/env python3
"""Regenerates tests/data/kvzap/: random KVzap checkpoints for the tiny Qwen3 model and kvpress's decisions.

For each of a linear and an MLP KVzap surrogate (kvpress KVzapModel, random weights, saved with
save_pretrained: config.json + model.safetensors, the layout of the published nvidia/KVzap-* checkpoints),
runs kvpress DMSPress(KVzapPress, threshold=tau, sliding_window_size=16) on the tiny Qwen3 model exported to
Hugging Face format (see make_kvpress_fixtures.py) and records, per layer, the predicted score of every token
per KV head and the (head, token) pairs kvpress evicts. tau is the median predicted score, so about half of
the entries beyond the window go.

The budget rules (kvpress's leaderboard presses kvzap_mlp_head = KVzapPress(compression_ratio) and
kvzap_mlp_layer = AdaKVPress(KVzapPress(compression_ratio))) are recorded in tiny-qwen3-{kind}-budget.json: at
RATIO the kept token indices per KV head (per-head top-k of the predicted scores, k = compute_n_kept) and the
(head, token) pairs AdaKV evicts across the heads of a layer (alpha_safeguard 0.2; AdaKV needs sdpa attention).

Not run in CI. Regenerate with the venv of make_kvpress_fixtures.py:
    /tmp/kvp/bin/python tools/make_kvzap_fixtures.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_kvpress_fixtures as base  # noqa: E402
from kvpress.presses.adakv_press import AdaKVPress  # noqa: E402
from kvpress.presses.dms_press import DMSPress  # noqa: E402
from kvpress.utils import compute_n_kept  # noqa: E402
from kvpress.presses.kvzap_press import KVzapConfig, KVzapModel, KVzapPress  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

OUT = os.path.join(base.DATA, "kvzap")
WINDOW = 16
RATIO = 0.5


def budget_fixture(kind, kv, hf_dir, ids, golden):
    """kvzap rule=head and rule=layer at RATIO: kvpress's kept / evicted sets on the tiny Qwen3 model."""
    def press():
        p = KVzapPress(model_type=kind, compression_ratio=RATIO)
        p.kvzap_model = kv
        p.post_init_from_model = lambda model: None
        return p

    head = press()
    head_layers = []
    original = head.score

    def recording(module, hidden_states, keys, values, attentions, kwargs, _orig=original):
        s = _orig(module, hidden_states, keys, values, attentions, kwargs)
        k = compute_n_kept(keys.shape[2], RATIO)
        kept = s[0].topk(k, dim=-1).indices.sort(dim=-1).values
        head_layers.append({"layer": int(module.layer_idx), "kept": kept.tolist()})
        return s

    head.score = recording
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad(), head(model):
        model(ids)
    sdpa = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    for layer in sdpa.model.layers:
        layer.self_attn.masked_key_indices = None
    with torch.no_grad(), AdaKVPress(press=press())(sdpa):
        sdpa(ids)
    layer_layers = []
    for i, layer in enumerate(sdpa.model.layers):
        mk = layer.self_attn.masked_key_indices
        layer_layers.append({"layer": i, "evicted": sorted([int(h), int(t)] for h, t in zip(mk[1].tolist(), mk[2].tolist()))})
    fixture = {
        "description": f"kvpress KVzapPress(compression_ratio={RATIO}) kept token indices [Hkv][k] per layer (rule=head) "
                       f"and AdaKVPress(KVzapPress) evicted (head, token) pairs per layer (rule=layer, alpha_safeguard "
                       f"0.2) with the {kind} checkpoint in tiny-qwen3-{kind}/",
        "generator": "tools/make_kvzap_fixtures.py, torch " + torch.__version__,
        "ratio": RATIO, "prompt_tokens": golden["prompt_tokens"],
        "head": sorted(head_layers, key=lambda x: x["layer"]), "layer": layer_layers,
    }
    with open(os.path.join(OUT, f"tiny-qwen3-{kind}-budget.json"), "w") as f:
        json.dump(fixture, f)


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
        budget_fixture(kind, kv, hf_dir, ids, golden)


if __name__ == "__main__":
    sys.exit(main())
