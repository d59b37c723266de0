#!/usr/bin/env python3
"""Regenerates tests/data/kvpress/smollm2_ruler_chat_prompt.json: kvpress's prompt ids for one kvsieve RULER example.

kvsieve's `eval ruler --format chat` builds the prompt the way NVIDIA kvpress's pipeline does
(KVPressTextGenerationPipeline.preprocess: chat template around the context, split at a separator, question + the
rest of the template + answer prefix, both tokenized without added special tokens). This script
  1. exports one example from kvsieve's own generator (`kvsieve eval ruler --export-jsonl`, niah_single_1 at 1024
     tokens, seed 0, on SmolLM2-135M-Instruct),
  2. loads SmolLM2-135M-Instruct's Hugging Face tokenizer (only the tokenizer files of the hub repository
     HuggingFaceTB/SmolLM2-135M-Instruct; offline, or with --from-gguf, transformers builds it from the GGUF's
     vocabulary, merges and chat template instead, and the fixture says so),
  3. runs kvpress's own preprocess() on the example's context, question and answer prefix, and
  4. writes the context ids and question ids with the text and the versions used.
tests/test_ruler_prompt.cpp (SmolLM2.RulerChatPromptIdsMatchKvpress) asserts that kvsieve's chat format gives the
same ids.

Not run in CI. To regenerate (needs network for PyPI; kvpress pulls in torch):
    python3 -m venv /tmp/kvp && /tmp/kvp/bin/pip install kvpress transformers gguf
    bash scripts/get-model.sh smollm2-135m && cmake --build build --target kvsieve_cli
    /tmp/kvp/bin/python tools/make_kvpress_prompt_fixture.py [--from-gguf]   # --from-gguf: offline, skip the hub
"""
import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
HF_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
OUT = os.path.join(ROOT, "tests", "data", "kvpress", "smollm2_ruler_chat_prompt.json")
TASK, LENGTH, SEED = "niah_single_1", 1024, 0


def export_example(kvsieve):
    """The example as kvsieve generates it (its context, question without answer prefix, answer prefix)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "examples.jsonl")
        cmd = [kvsieve, "eval", "ruler", "-m", GGUF, "--corpus", os.path.join(ROOT, "tests", "data", "text", "english.md"),
               "--tasks", TASK, "--lengths", str(LENGTH), "--samples", "1", "--seed", str(SEED), "--format", "chat",
               "--export-jsonl", path]
        subprocess.run(cmd, check=True)
        with open(path) as f:
            return json.loads(f.readline())


def load_tokenizer(from_gguf):
    """SmolLM2's tokenizer and a sentence saying where it came from."""
    from transformers import AutoTokenizer
    if not from_gguf:
        try:
            return AutoTokenizer.from_pretrained(HF_REPO), f"Hugging Face tokenizer files of {HF_REPO}"
        except Exception as e:  # offline: the hub cannot be reached
            print(f"cannot load {HF_REPO} ({type(e).__name__}); building the tokenizer from the GGUF", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(os.path.dirname(GGUF), gguf_file=os.path.basename(GGUF))
    return tok, ("transformers' tokenizer built from models/SmolLM2-135M-Instruct.Q4_1.gguf (its vocabulary, merges, "
                 "special tokens and chat template; the hub was not reachable)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvsieve", default=os.path.join(ROOT, "build", "bin", "kvsieve"))
    ap.add_argument("--from-gguf", action="store_true", help="build the tokenizer from the GGUF, not the hub")
    args = ap.parse_args()
    from kvpress.pipeline import KVPressTextGenerationPipeline

    ex = export_example(args.kvsieve)
    tok, tok_source = load_tokenizer(args.from_gguf)
    assert tok.chat_template, "the tokenizer has no chat template"
    # kvpress's own preprocessing; it reads nothing of the pipeline but its tokenizer.
    holder = types.SimpleNamespace(tokenizer=tok)
    out = KVPressTextGenerationPipeline.preprocess(holder, context=ex["context"], questions=[ex["question"]],
                                                   answer_prefix=ex["answer_prefix"], max_context_length=int(1e10))
    context_ids = out["context_ids"][0].tolist()
    question_ids = out["questions_ids"][0][0].tolist()
    versions = {p: importlib.metadata.version(p) for p in ("kvpress", "transformers", "tokenizers", "torch")}
    fixture = {
        "description": f"kvpress KVPressTextGenerationPipeline.preprocess of kvsieve's RULER example {TASK}@{LENGTH} "
                       f"(seed {SEED}) with SmolLM2-135M-Instruct's tokenizer: context ids and question ids",
        "generator": "tools/make_kvpress_prompt_fixture.py" + (" --from-gguf" if args.from_gguf else "") + " with "
                     + ", ".join(f"{k} {v}" for k, v in versions.items()),
        "tokenizer": tok_source,
        "task": TASK, "length": LENGTH, "seed": SEED,
        "context": ex["context"], "question": ex["question"], "answer_prefix": ex["answer_prefix"],
        "context_ids": context_ids, "question_ids": question_ids,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(fixture, f, ensure_ascii=False)
        f.write("\n")
    same = ex["context_ids"] == context_ids and ex["question_ids"] == question_ids
    print(f"{OUT}: {len(context_ids)} context ids, {len(question_ids)} question ids; kvsieve's export "
          f"{'matches' if same else 'DIFFERS'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
