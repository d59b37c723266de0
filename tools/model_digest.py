#!/usr/bin/env python3
"""The digest of a GGUF model's tensors, as kvsieve computes it (src/io/model_digest.h), written independently in
Python: what a trained predictor's config.json records as "model_digest" so kvsieve finds it for that model.

    python3 tools/model_digest.py MODEL.gguf            # prints sha256:<64 hex digits>

For every tensor in file order: its name (u64 length, bytes), ggml type (u32), ne[0..3] (i64, 1 past n_dims), and
its data: all bytes up to 64 KiB, else the first and last 16 KiB and 32 slices of 512 bytes at evenly spaced offsets
between them. Only the standard library is used.
"""
import hashlib
import struct
import sys

# ggml type id -> (elements per block, bytes per block), for the types GGUF models carry.
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84),
         11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292), 20: (32, 18), 30: (1, 2)}


def read_gguf_tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert data[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == b"general.alignment":
            alignment = v
    tensors = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        ne = [take("q") for _ in range(nd)] + [1] * (4 - nd)
        ttype, offset = take("I"), take("Q")
        tensors.append((name, ttype, ne, offset))
    start = (pos + alignment - 1) // alignment * alignment
    out = []
    for name, ttype, ne, offset in tensors:
        per, size = BLOCK[ttype]
        n = ne[0] * ne[1] * ne[2] * ne[3]
        nbytes = n // per * size
        out.append((name, ttype, ne, data[start + offset:start + offset + nbytes]))
    return out


def model_digest(path):
    whole, end, slice_, slices = 64 << 10, 16 << 10, 512, 32
    h = hashlib.sha256()
    for name, ttype, ne, d in read_gguf_tensors(path):
        h.update(struct.pack("<Q", len(name)) + name + struct.pack("<I", ttype) + struct.pack("<4q", *ne))
        if len(d) <= whole:
            h.update(d)
            continue
        h.update(d[:end])
        span = len(d) - 2 * end - slice_
        for i in range(slices):
            o = end + span * i // (slices - 1)
            h.update(d[o:o + slice_])
        h.update(d[len(d) - end:])
    return "sha256:" + h.hexdigest()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: model_digest.py MODEL.gguf")
    print(model_digest(sys.argv[1]))
