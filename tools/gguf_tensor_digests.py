#!/usr/bin/env python3
"""Per-tensor digests of GGUF files: for each tensor its GGUF type id, byte count and the 64-bit FNV-1a hash of
its data, as JSON {file name: {tensor name: {"type", "nbytes", "fnv1a64" (16 hex digits)}}}. Made the reference
digests of llama.cpp's llama-quantize outputs in tests/data/models/ (see tests/data/README.md), so that the
quantized files themselves need not be committed: the tests quantize with kvsieve and compare digests.
Usage: python3 tools/gguf_tensor_digests.py FILE.gguf... > digests.json"""
import json
import os
import struct
import sys

# Bytes per block and elements per block of the GGUF tensor types these files use (F32, F16, Q8_0).
BLOCK = {0: (4, 1), 1: (2, 1), 8: (34, 32)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def tensors(path):
    d = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, d, off)[0]
        off += struct.calcsize(fmt)
        return v

    def string():
        nonlocal off
        n = take("<Q")
        off += n
        return d[off - n:off].decode()

    def value(t):
        nonlocal off
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        off += SCALAR[t]
        return d[off - SCALAR[t]:off]

    if d[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    off = 4
    take("<I")
    n_tensors, n_kv = take("<Q"), take("<Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("<I"))
    align = struct.unpack("<I", kv["general.alignment"])[0] if "general.alignment" in kv else 32
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        infos.append((name, dims, take("<I"), take("<Q")))
    base = (off + align - 1) // align * align
    out = {}
    for name, dims, t, o in infos:
        if t not in BLOCK:
            sys.exit(f"{path}: tensor {name} has type {t}, which this tool does not size")
        n = 1
        for x in dims:
            n *= x
        nbytes = n // BLOCK[t][1] * BLOCK[t][0]
        out[name] = {"type": t, "nbytes": nbytes, "fnv1a64": fnv1a64(d[base + o:base + o + nbytes])}
    return out


if __name__ == "__main__":
    json.dump({os.path.basename(p): tensors(p) for p in sys.argv[1:]}, sys.stdout, indent=1, sort_keys=True)
    print()
