#!/usr/bin/env python3
"""Writes the tiny random-weight test models tiny-{llama,qwen2,qwen3}-f32.gguf into a folder.

The build runs it into its copy of tests/data/models/ and checks every file against the SHA-256 in
tests/data/models/tiny-models.sha256 (tests/CMakeLists.txt), so the same bytes come out on every machine.

Usage: python3 tests/data/make_tiny_models.py OUT_DIR [NAME...]   (NAME: tiny-llama-f32 ...; default all three)

Recipe (the same for the three files unless stated):
- Shape: vocabulary 512, hidden size 256, 2 blocks, 8 query heads, 2 KV heads, head dimension 32, FFN 512,
  context length 2048; every tensor F32 (general.file_type 0).
- Weights: one NumPy stream per file, numpy.random.default_rng(SEED) with SEED 101 (llama), 202 (qwen2),
  303 (qwen3), drawn tensor by tensor in the order of the file. A tensor whose GGUF shape is ne = [n0, n1] is drawn
  as a NumPy array of shape (n1, n0) (row-major, the reverse of ne) in float64 and then cast to float32:
    matrices                                 rng.normal(0, 0.02, shape)
    norm weights (attention, FFN, output,
      Qwen3's per-head q/k norms)            1 + 0.1 * rng.standard_normal(shape)
    Qwen2's q/k/v biases                     0.1 * rng.standard_normal(shape)
- llama: RoPE on adjacent pairs, llama.rope.dimension_count 32, freq_base 1e4, RMS-norm eps 1e-5, its own
  output.weight, llama.vocab_size 512.
  qwen2: freq_base 1e6, eps 1e-6, q/k/v biases, its own output.weight.
  qwen3: freq_base 1e6, eps 1e-6, attn_q_norm/attn_k_norm [32], output tied to token_embd (no output.weight),
  qwen3.attention.key_length = value_length = 32.
- Metadata, in this order: general.architecture, general.name (tiny-ARCH-random), general.description (names the
  seed), ARCH.{context_length, embedding_length, block_count, feed_forward_length, attention.head_count,
  attention.head_count_kv, rope.freq_base, attention.layer_norm_rms_epsilon}, general.file_type, the
  architecture's own keys above, then every tokenizer.ggml.* key of tests/data/models/stories260K.gguf (the
  llama2.c tok512 vocabulary), copied byte for byte in that file's order.
- Layout: GGUF version 3, alignment 32 (no general.alignment key), header and every tensor zero-padded to it.
"""
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(HERE, "models", "stories260K.gguf")
ALIGN = 32

# GGUF metadata value types.
T_UINT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 6, 8, 9
SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

VOCAB, HIDDEN, BLOCKS, HEADS, KV_HEADS, HEAD_DIM, FFN, CONTEXT = 512, 256, 2, 8, 2, 32, 512, 2048

MODELS = {
    "tiny-llama-f32": dict(arch="llama", seed=101, freq_base=1e4, eps=1e-5, bias=False, qk_norm=False, tied=False,
                           extra=[("llama.vocab_size", T_UINT32, VOCAB),
                                  ("llama.rope.dimension_count", T_UINT32, HEAD_DIM)]),
    "tiny-qwen2-f32": dict(arch="qwen2", seed=202, freq_base=1e6, eps=1e-6, bias=True, qk_norm=False, tied=False,
                           extra=[]),
    "tiny-qwen3-f32": dict(arch="qwen3", seed=303, freq_base=1e6, eps=1e-6, bias=False, qk_norm=True, tied=True,
                           extra=[("qwen3.attention.key_length", T_UINT32, HEAD_DIM),
                                  ("qwen3.attention.value_length", T_UINT32, HEAD_DIM)]),
}


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def tokenizer_entries(path):
    """The raw bytes (key, type, value) of every tokenizer.ggml.* metadata entry of a GGUF file, in file order."""
    d = open(path, "rb").read()
    if d[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    off = 24
    n_kv = struct.unpack_from("<Q", d, 16)[0]

    def skip_value(t):
        nonlocal off
        if t == T_STRING:
            off += 8 + struct.unpack_from("<Q", d, off)[0]
        elif t == T_ARRAY:
            et, n = struct.unpack_from("<IQ", d, off)
            off += 12
            if et in SCALAR_SIZE:
                off += n * SCALAR_SIZE[et]
            else:
                for _ in range(n):
                    skip_value(et)
        else:
            off += SCALAR_SIZE[t]

    out = []
    for _ in range(n_kv):
        start = off
        n = struct.unpack_from("<Q", d, off)[0]
        key = d[off + 8:off + 8 + n].decode()
        off += 8 + n
        t = struct.unpack_from("<I", d, off)[0]
        off += 4
        skip_value(t)
        if key.startswith("tokenizer.ggml."):
            out.append(d[start:off])
    return out


def metadata_entry(key, t, value):
    b = gguf_string(key) + struct.pack("<I", t)
    if t == T_STRING:
        return b + gguf_string(value)
    return b + struct.pack({T_UINT32: "<I", T_FLOAT32: "<f"}[t], value)


def tensors(m):
    """(name, ne, kind) in file order; kind w (matrix), norm or bias."""
    kv_dim = KV_HEADS * HEAD_DIM
    out = [("token_embd.weight", [HIDDEN, VOCAB], "w"), ("output_norm.weight", [HIDDEN], "norm")]
    if not m["tied"]:
        out.append(("output.weight", [HIDDEN, VOCAB], "w"))
    for i in range(BLOCKS):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", [HIDDEN], "norm"), (p + "attn_q.weight", [HIDDEN, HEADS * HEAD_DIM], "w"),
                (p + "attn_k.weight", [HIDDEN, kv_dim], "w"), (p + "attn_v.weight", [HIDDEN, kv_dim], "w")]
        if m["bias"]:
            out += [(p + "attn_q.bias", [HEADS * HEAD_DIM], "bias"), (p + "attn_k.bias", [kv_dim], "bias"),
                    (p + "attn_v.bias", [kv_dim], "bias")]
        if m["qk_norm"]:
            out += [(p + "attn_q_norm.weight", [HEAD_DIM], "norm"), (p + "attn_k_norm.weight", [HEAD_DIM], "norm")]
        out += [(p + "attn_output.weight", [HEADS * HEAD_DIM, HIDDEN], "w"), (p + "ffn_norm.weight", [HIDDEN], "norm"),
                (p + "ffn_gate.weight", [HIDDEN, FFN], "w"), (p + "ffn_up.weight", [HIDDEN, FFN], "w"),
                (p + "ffn_down.weight", [FFN, HIDDEN], "w")]
    return out


def draw(rng, kind, ne):
    shape = tuple(reversed(ne))
    if kind == "w":
        x = rng.normal(0, 0.02, shape)
    elif kind == "norm":
        x = 1 + 0.1 * rng.standard_normal(shape)
    else:
        x = 0.1 * rng.standard_normal(shape)
    return x.astype(np.float32)


def pad(n):
    return (ALIGN - n % ALIGN) % ALIGN


def model_bytes(name, tokenizer):
    m = MODELS[name]
    a = m["arch"]
    kv = [("general.architecture", T_STRING, a), ("general.name", T_STRING, f"tiny-{a}-random"),
          ("general.description", T_STRING,
           f"random weights (numpy default_rng seed {m['seed']}) for architecture parity tests; "
           "tokenizer = stories260K (llama2.c tok512)"),
          (f"{a}.context_length", T_UINT32, CONTEXT), (f"{a}.embedding_length", T_UINT32, HIDDEN),
          (f"{a}.block_count", T_UINT32, BLOCKS), (f"{a}.feed_forward_length", T_UINT32, FFN),
          (f"{a}.attention.head_count", T_UINT32, HEADS), (f"{a}.attention.head_count_kv", T_UINT32, KV_HEADS),
          (f"{a}.rope.freq_base", T_FLOAT32, m["freq_base"]),
          (f"{a}.attention.layer_norm_rms_epsilon", T_FLOAT32, m["eps"]),
          ("general.file_type", T_UINT32, 0)] + m["extra"]
    rng = np.random.default_rng(m["seed"])
    infos, data, offset = [], [], 0
    for tname, ne, kind in tensors(m):
        b = draw(rng, kind, ne).astype("<f4").tobytes()
        infos.append(gguf_string(tname) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                     + struct.pack("<IQ", 0, offset))
        data.append(b + bytes(pad(len(b))))
        offset += len(b) + pad(len(b))
    header = (b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kv) + len(tokenizer))
              + b"".join(metadata_entry(*e) for e in kv) + b"".join(tokenizer) + b"".join(infos))
    return header + bytes(pad(len(header))) + b"".join(data)


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit(f"make_tiny_models: unknown model {n} (known: {', '.join(MODELS)})")
    tokenizer = tokenizer_entries(STORIES)
    os.makedirs(out_dir, exist_ok=True)
    for n in names:
        path = os.path.join(out_dir, n + ".gguf")
        with open(path + ".tmp", "wb") as f:
            f.write(model_bytes(n, tokenizer))
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
