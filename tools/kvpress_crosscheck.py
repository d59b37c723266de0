#!/usr/bin/env python3
"""Compares kvsieve's kept positions with NVIDIA kvpress's, head by head, on exported RULER contexts.

Given examples exported by `kvsieve eval ruler --export-jsonl` (a .jsonl file, or a directory of them) and a kvsieve
build, this
  1. runs kvpress presses (SnapKV, StreamingLLM, TOVA, KNorm, Expected Attention) at one compression ratio on each
     example's context ids, with the model loaded by transformers (by default from the same GGUF, dequantized to
     float32, eager attention), recording per layer every KV head's scores and kept indices (top-k, k = int(n (1 -
     ratio)), as kvpress's ScorerPress keeps),
  2. runs `kvsieve eval kept` on the same contexts with the same presets (NAME:ratio=R for the kept sets, and
     NAME:ratio=0 for every position's score), F32 KV cache,
  3. prints per press: heads compared, the fraction of heads whose kept sets are identical, the mean Jaccard overlap
     of the kept sets, and the score agreement (Spearman's rank correlation of the two implementations' scores of a
     head's positions; median and 10th percentile over heads; StreamingLLM's 0/1 marks are no ranking and get none).

With --query-aware both prefill each example's context_ids followed by its question_ids (`eval ruler --query-aware`:
the question, the end of the chat turn and the answer prefix lie inside the compressed prompt, so SnapKV's
observation window is the question's end), kvsieve through `eval kept --query-aware`. With --generate N, kvpress then
also answers each example greedily (N new tokens at most) from its own compressed cache, the first token from the
prefill's logits as `eval ruler --query-aware` does, and the answers are printed beside kvsieve's: what the press's
kept entries do to the model in kvpress's hands.

Not run in CI (the query-aware kept sets of SnapKV on one exported example are tests/data/kvpress/
smollm2_snapkv_query_aware.json, checked by the SmolLM2.SnapKVQueryAwareKeptMatchesKvpress test). The two forwards differ in weights only by what the GGUF holds (Q4_1 for SmolLM2: kvsieve's Q4_1
kernels against transformers' dequantized float32), so near-ties of the scores may rank differently.

    python3 -m venv /tmp/kvp && /tmp/kvp/bin/pip install kvpress transformers gguf
    build/bin/kvsieve eval ruler -m models/SmolLM2-135M-Instruct.Q4_1.gguf --corpus data/corpora/wiki.test.raw \
        --tasks niah_single_2,niah_multikey_1,vt,fwe --lengths 1024 --samples 1 --format chat --export-jsonl /tmp/ex.jsonl
    /tmp/kvp/bin/python tools/kvpress_crosscheck.py /tmp/ex.jsonl --ratio 0.5
    /tmp/kvp/bin/python tools/kvpress_crosscheck.py /tmp/ex.jsonl --ratio 0.75 --presses snapkv --query-aware --generate 32
"""
import argparse
import glob
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from kvpress import ExpectedAttentionPress, KnormPress, SnapKVPress, StreamingLLMPress, TOVAPress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESSES = {  # kvsieve preset → kvpress press class (both at their defaults besides the ratio)
    "snapkv": SnapKVPress,
    "streaming_llm": StreamingLLMPress,
    "tova": TOVAPress,
    "knorm": KnormPress,
    "expected_attention": ExpectedAttentionPress,
}


def read_examples(path):
    files = sorted(glob.glob(os.path.join(path, "*.jsonl"))) if os.path.isdir(path) else [path]
    examples = []
    for f in files:
        with open(f) as fh:
            examples += [json.loads(line) for line in fh if line.strip()]
    if not examples:
        sys.exit(f"error: no exported examples in {path}")
    return examples


def prompt_ids(ex, query_aware):
    """The ids both implementations prefill: the context, or the context followed by the question."""
    return ex["context_ids"] + (ex["question_ids"] if query_aware else [])


def kvpress_decisions(model, press_cls, ratio, ids, generate=0, eog=()):
    """Per layer: scores [Hkv][n] (float64) and kept index sets, from kvpress's own score(); with generate > 0 also
    the greedy answer (token ids) decoded from the compressed cache, the first token from the prefill's logits."""
    press = press_cls(compression_ratio=ratio)
    layers = {}
    original = press.score

    def recording_score(module, hidden_states, keys, values, attentions, kwargs):
        s = original(module, hidden_states, keys, values, attentions, kwargs)
        n = keys.shape[2]
        k = int(n * (1 - ratio))
        kept = s[0].topk(k, dim=-1).indices
        layers[int(module.layer_idx)] = (s[0].double().cpu().numpy(), [set(row) for row in kept.tolist()])
        return s

    press.score = recording_score
    with torch.no_grad():
        with press(model):
            out = model(torch.tensor([ids]), use_cache=True)
        answer = []
        cache, n = out.past_key_values, len(ids)
        logits = out.logits[0, -1]
        for t in range(generate):
            nxt = int(logits.argmax())
            if nxt in eog:
                break
            answer.append(nxt)
            if t + 1 == generate:
                break
            o = model(torch.tensor([[nxt]]), past_key_values=cache, position_ids=torch.tensor([[n + t]]),
                      use_cache=True)
            cache, logits = o.past_key_values, o.logits[0, -1]
    return (layers, answer) if generate else layers


def kvsieve_decisions(kvsieve, gguf, examples_file, specs, threads, query_aware=False):
    """{(index, spec): [(layer, head, positions, scores)]} from `kvsieve eval kept`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kept.jsonl")
        cmd = [kvsieve, "eval", "kept", "-m", gguf, "--examples", examples_file, "--policies", ";".join(specs),
               "--out", out, "--kv-type", "f32", "-t", str(threads)] + (["--query-aware"] if query_aware else [])
        subprocess.run(cmd, check=True)
        got = {}
        with open(out) as f:
            for line in f:
                j = json.loads(line)
                got[(j["index"], j["policy"])] = [(h["layer"], h["head"], h["positions"], h["scores"]) for h in j["heads"]]
        return got


def spearman(a, b):
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    d = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / d) if d > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("examples", help="eval ruler --export-jsonl output: a .jsonl file or a directory of them")
    ap.add_argument("--kvsieve", default=os.path.join(ROOT, "build", "bin", "kvsieve"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--hf-model", default="", help="a Hugging Face model directory to run kvpress on instead of the GGUF")
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--presses", default=",".join(PRESSES), help="comma-separated kvsieve presets")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--query-aware", action="store_true",
                    help="compress context_ids + question_ids (eval ruler --query-aware) instead of context_ids")
    ap.add_argument("--generate", type=int, default=0,
                    help="also print kvpress's greedy answers (at most N tokens) from its compressed caches")
    args = ap.parse_args()
    names = [p for p in args.presses.split(",") if p]
    for p in names:
        if p not in PRESSES:
            sys.exit(f"error: press '{p}' is not one of {', '.join(PRESSES)}")
    examples = read_examples(args.examples)
    with tempfile.TemporaryDirectory() as tmp:
        ex_file = os.path.join(tmp, "examples.jsonl")
        with open(ex_file, "w") as f:
            for i, ex in enumerate(examples):
                f.write(json.dumps({"index": i, "context_ids": ex["context_ids"],
                                    "question_ids": ex.get("question_ids", [])}) + "\n")
        specs = [f"{p}:ratio={args.ratio}" for p in names] + [f"{p}:ratio=0" for p in names if p != "streaming_llm"]
        mine = kvsieve_decisions(args.kvsieve, args.model, ex_file, specs, args.threads, args.query_aware)
    if args.hf_model:
        model = AutoModelForCausalLM.from_pretrained(args.hf_model, dtype=torch.float32, attn_implementation="eager")
    else:
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(args.model)),
                                                     gguf_file=os.path.basename(args.model), dtype=torch.float32,
                                                     attn_implementation="eager")
    model.eval()
    eog = model.generation_config.eos_token_id
    eog = set(eog if isinstance(eog, list) else [eog])
    tokenizer = None
    if args.generate:
        from transformers import AutoTokenizer
        tokenizer = (AutoTokenizer.from_pretrained(args.hf_model) if args.hf_model else
                     AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(args.model)),
                                                   gguf_file=os.path.basename(args.model)))
    rows, answers = [], []
    for p in names:
        same = total = 0
        jaccard, rho = [], []
        for i, ex in enumerate(examples):
            theirs = kvpress_decisions(model, PRESSES[p], args.ratio, prompt_ids(ex, args.query_aware),
                                       args.generate, eog)
            if args.generate:
                theirs, answer = theirs
                answers.append((p, i, ex.get("task", ""), ex.get("answers", []), tokenizer.decode(answer)))
            kept = mine[(i, f"{p}:ratio={args.ratio}")]
            scores = mine.get((i, f"{p}:ratio=0"))
            for k, (layer, head, positions, _) in enumerate(kept):
                their_scores, their_kept = theirs[layer]
                a, b = set(positions), their_kept[head]
                total += 1
                same += a == b
                jaccard.append(len(a & b) / max(1, len(a | b)))
                if scores is not None:
                    rho.append(spearman(np.array(scores[k][3], dtype=np.float64), their_scores[head]))
        rows.append((p, total, same / total, float(np.mean(jaccard)),
                     (float(np.nanmedian(rho)), float(np.nanpercentile(rho, 10))) if rho else None))
    versions = ", ".join(f"{k} {importlib.metadata.version(k)}" for k in ("kvpress", "transformers", "torch"))
    lengths = sorted({len(prompt_ids(ex, args.query_aware)) for ex in examples})
    what = "prompts (context + question, query-aware)" if args.query_aware else "contexts"
    print(f"kvsieve vs kvpress, compression ratio {args.ratio}, {len(examples)} {what} of {lengths[0]}–{lengths[-1]} "
          f"tokens, {os.path.basename(args.model)} ({versions})\n")
    print("| press | heads | identical kept sets | mean Jaccard | score Spearman ρ, median (10th percentile) |")
    print("|---|---|---|---|---|")
    for p, total, frac, jac, r in rows:
        rs = f"{r[0]:.4f} ({r[1]:.4f})" if r else "— (0/1 marks)"
        print(f"| {p} | {total} | {100 * frac:.1f}% | {jac:.4f} | {rs} |")
    if answers:
        print("\nkvpress's own greedy answers from its compressed caches:\n")
        print("| press | example | task | answers | kvpress's answer |")
        print("|---|---|---|---|---|")
        for p, i, task, want, got in answers:
            print(f"| {p} | {i} | {task} | {', '.join(want)} | {json.dumps(got)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
