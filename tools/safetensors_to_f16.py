#!/usr/bin/env python3
"""Rewrites a .safetensors file with every F32 tensor stored as F16 (IEEE binary16, round to nearest even), the
compact form in which kvsieve ships trained predictors; kvsieve reads F16 back into float32 (src/io/safetensors.h).
Other dtypes, the tensor order and __metadata__ are kept. Standard library only.

    python3 tools/safetensors_to_f16.py IN.safetensors OUT.safetensors

Prints the largest absolute rounding error and the count of values that overflow F16 (an error: none may).
"""
import json
import math
import struct
import sys


def main(src, dst):
    with open(src, "rb") as f:
        raw = f.read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    meta = header.pop("__metadata__", None)
    out_header, chunks, off, worst = {}, [], 0, 0.0
    if meta is not None:
        out_header["__metadata__"] = meta
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        data = raw[base + b:base + e]
        dtype = t["dtype"]
        if dtype == "F32":
            vals = struct.unpack("<%df" % (len(data) // 4), data)
            data = struct.pack("<%de" % len(vals), *vals)  # raises OverflowError past F16's range
            back = struct.unpack("<%de" % len(vals), data)
            worst = max([worst] + [abs(a - c) for a, c in zip(vals, back) if math.isfinite(a)])
            dtype = "F16"
        out_header[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [off, off + len(data)]}
        chunks.append(data)
        off += len(data)
    hjson = json.dumps(out_header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson + b"".join(chunks))
    print(f"{src} -> {dst}: {len(raw)} -> {8 + len(hjson) + off} bytes, max |rounding error| {worst:.3g}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: safetensors_to_f16.py IN.safetensors OUT.safetensors")
    main(sys.argv[1], sys.argv[2])
