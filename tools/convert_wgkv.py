#!/usr/bin/env python3
"""Converts a WG-KV reference checkpoint ({model}-{lambda}.pt, a PyTorch state dict) to a safetensors file that
`--policy wgkv:model=PATH` loads.

Keeps the gate tensors, model.layers.{i}.self_attn.g_predictors.{pre_key_norm.weight, post_key_norm.weight,
conv1.weight, conv1.bias, conv2.weight, conv2.bias}, under exactly those names (any prefix such as "module." or
"base_model.model." is dropped), converted to float32; every other tensor of the state dict is left out. A state
dict nested in a training checkpoint ({"state_dict": ...} or {"model": ...}) is found.

Needs only the Python standard library: the PyTorch zip format (torch.save's, and torch::pickle_save's) is read with
a restricted unpickler that rebuilds tensors from their storages and refuses any other object, so no code in the
file runs.

    python3 tools/convert_wgkv.py GATES.pt OUT.safetensors      (OUT may also be a directory: OUT/model.safetensors)
"""
import json
import os
import pickle
import re
import struct
import sys
import zipfile

GATE = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.g_predictors\."
                  r"(pre_key_norm\.weight|post_key_norm\.weight|conv1\.weight|conv1\.bias|conv2\.weight|conv2\.bias)$")
STORAGES = {"FloatStorage": ("f32", 4), "HalfStorage": ("f16", 2), "BFloat16Storage": ("bf16", 2),
            "DoubleStorage": ("f64", 8)}


class ConvertError(Exception):
    pass


class StorageType:
    def __init__(self, name):
        if name not in STORAGES:
            raise ConvertError(f"tensor storage {name} is not a floating-point type the gates use")
        self.dtype, self.size = STORAGES[name]


class Tensor:
    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset, self.shape, self.stride = storage, offset, tuple(shape), tuple(stride)

    def floats(self):
        """The values in row-major order as float32 (any stride)."""
        st_type, raw = self.storage
        n = len(raw) // st_type.size
        if st_type.dtype == "f32":
            vals = struct.unpack(f"<{n}f", raw)
        elif st_type.dtype == "f64":
            vals = struct.unpack(f"<{n}d", raw)
        elif st_type.dtype == "f16":
            vals = struct.unpack(f"<{n}e", raw)
        else:  # bf16: the upper half of a float32
            halves = struct.unpack(f"<{n}H", raw)
            vals = struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *[h << 16 for h in halves]))
        out = []
        idx = [0] * len(self.shape)
        total = 1
        for s in self.shape:
            total *= s
        for _ in range(total):
            out.append(vals[self.offset + sum(i * s for i, s in zip(idx, self.stride))])
            for a in range(len(idx) - 1, -1, -1):
                idx[a] += 1
                if idx[a] < self.shape[a]:
                    break
                idx[a] = 0
        return out


def rebuild_tensor(storage, offset, shape, stride, *_):
    return Tensor(storage, offset, shape, stride)


def rebuild_parameter(tensor, *_):
    return tensor


class Unpickler(pickle.Unpickler):
    ALLOWED = {("torch._utils", "_rebuild_tensor_v2"): rebuild_tensor,
               ("torch._utils", "_rebuild_parameter"): rebuild_parameter,
               ("collections", "OrderedDict"): dict,
               ("torch.jit._pickle", "restore_type_tag"): lambda value, _tag: value}

    def __init__(self, f, archive):
        super().__init__(f)
        self.archive = archive

    def find_class(self, module, name):
        if module == "torch" and name in STORAGES:
            return StorageType(name)
        if (module, name) in self.ALLOWED:
            return self.ALLOWED[(module, name)]
        raise ConvertError(f"the checkpoint holds an object of type {module}.{name}, which a state dict of gates "
                           "does not (refused: unpickling it could run code)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
            raise ConvertError(f"unknown persistent id {pid!r}")
        st_type, key = pid[1], str(pid[2])
        try:
            return st_type, self.archive(key)
        except KeyError:
            raise ConvertError(f"storage {key} is missing from the archive") from None


def load_pt(path):
    """The state dict of a PyTorch zip checkpoint: {name: Tensor}."""
    if not os.path.isfile(path):
        raise ConvertError(f"'{path}' does not exist")
    if not zipfile.is_zipfile(path):
        raise ConvertError(f"'{path}' is not a PyTorch checkpoint (torch.save's zip format)")
    with zipfile.ZipFile(path) as z:
        pkls = [n for n in z.namelist() if n.endswith("/data.pkl")]
        if len(pkls) != 1:
            raise ConvertError(f"'{path}' is a zip file but not a PyTorch checkpoint (no single */data.pkl)")
        root = pkls[0][: -len("data.pkl")]
        try:
            obj = Unpickler(z.open(pkls[0]), lambda key: z.read(root + "data/" + key)).load()
        except ConvertError:
            raise
        except Exception as e:  # a truncated or corrupt pickle
            raise ConvertError(f"'{path}': cannot read the state dict ({e})") from None
    return obj


def find_gates(obj):
    """{canonical name: Tensor} of the gate tensors of a state dict, or of one nested in a checkpoint dict."""
    if not isinstance(obj, dict):
        raise ConvertError("the checkpoint is not a state dict (a dict of tensors)")
    gates = {}
    for name, t in obj.items():
        m = GATE.search(str(name)) if isinstance(t, Tensor) else None
        if m:
            canon = f"model.layers.{m.group(1)}.self_attn.g_predictors.{m.group(2)}"
            if canon in gates:
                raise ConvertError(f"two tensors of the checkpoint map to {canon}")
            gates[canon] = t
    if gates:
        return gates
    for key in ("state_dict", "model", "g_predictors"):
        if isinstance(obj.get(key), dict):
            return find_gates(obj[key])
    raise ConvertError("the checkpoint holds no WG-KV gates (tensors named ...layers.<i>.self_attn.g_predictors.*)")


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        vals = t.floats()
        blob = struct.pack(f"<{len(vals)}f", *vals)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    src, dst = argv[1], argv[2]
    try:
        gates = find_gates(load_pt(src))
        layers = sorted({int(GATE.search(n).group(1)) for n in gates})
        if layers != list(range(len(layers))):
            raise ConvertError(f"the gates cover layers {layers}, not 0 … {len(layers) - 1}")
        for l in layers:
            for part in ("pre_key_norm.weight", "post_key_norm.weight", "conv1.weight", "conv1.bias",
                         "conv2.weight", "conv2.bias"):
                if f"model.layers.{l}.self_attn.g_predictors.{part}" not in gates:
                    raise ConvertError(f"layer {l} has no {part}")
        if os.path.isdir(dst):
            dst = os.path.join(dst, "model.safetensors")
        write_safetensors(dst, gates)
    except (ConvertError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    c1 = gates["model.layers.0.self_attn.g_predictors.conv1.weight"].shape
    c2 = gates["model.layers.0.self_attn.g_predictors.conv2.weight"].shape
    print(f"wrote {dst}: {len(layers)} layers, {c2[0]} KV heads, head size {c1[1] // 2}, {c1[0] // c2[0]} hidden "
          f"units per head ({len(gates)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
