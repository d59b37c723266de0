#!/usr/bin/env python3
"""The table of docs/results/kv_quant/stacks.md from the cells scripts/results-kv-quant.sh writes.

Usage: python3 scripts/kv_quant_table.py DIR [--plot PREFIX] > DIR/stacks.md

--plot PREFIX also writes, per RULER length N, PREFIX_Nk.dat and PREFIX_Nk.gp (and PREFIX_Nk.png where gnuplot is
installed): each stack with sizes as a point at (× smaller, % of the full F16 RULER score), one series per method,
labelled by its cache type ("*": NLL above +1%), with the 95% and 8× lines of the question.

DIR holds sweep directories ruler_<N>k_<type>[_spkv]/ and nll_2k_<type>[_spkv]/, each with one folder per cell
(config.yaml: policy, kv_type, kv_rotate; metrics.json: score or nll, compression_ratio, kv_bytes_per_token,
kv_bytes_vs_full_f16). One row per stack (policy × cache type × rotation): per RULER length, the score, its share of
the full F16 cache's at that length with the paired difference to it (per example, 95% interval), the KV bytes per
position and how many times smaller than a full F16 cache of the same positions the stack's pages are (the cell's
kv_bytes_vs_full_f16, inverted; a stack whose reference did not run at a length shows its score and sizes there
without a share, and does not qualify there); then NLL (nats per token) and its change against the full F16 cache's. A stack
meets both bounds at a RULER length when its score there is ≥ 95% of the full F16 score at that length and its NLL is
at most 1% above the full F16 NLL; "meets both" says so per length it ran. The lines under the table name the
smallest stack meeting both at the shortest length, and, where longer lengths ran, the smallest among the stacks
meeting both at every length (by its size at the longest). Exits 2 with a message when DIR holds no finished cells or no full F16
cell.

The `_spkv` directories run SP-KV's gated model (its own weights file, F32), so their full-cache cells are labelled
GATED_FULL, and SP-KV's rows and those are compared with that model's full F16 cell when it exists (the same weights
without the gates), with the file's full F16 cell otherwise; the line under the table says which.
"""
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys


def read_yaml(path):
    """The top-level 'key: value' lines of a cell's config.yaml (strings unquoted)."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^([a-z_]+): (.*)$", line.rstrip("\n"))
            if m:
                v = m.group(2)
                out[m.group(1)] = v[1:-1] if len(v) >= 2 and v[0] == '"' and v[-1] == '"' else v
    return out


def label(policy):
    """A short name of a policy spec for the table."""
    rules = [
        (r"^full$", lambda m: "full"),
        (r"^full:sinks=([0-9]+),window=([0-9]+)$", lambda m: f"full, s = {m.group(1)}, w = {m.group(2)}"),
        (r"kvzap:model=[^,]*-(linear|mlp)\b.*?tau=(-?[0-9.]+)", lambda m: f"KVzap-{m.group(1).upper() if m.group(1) == 'mlp' else 'Linear'} τ {m.group(2)}"),
        (r"wgkv:model=[^,]*lambda([0-9.]*[0-9])(-len([0-9]+))?(.*?sinks=([0-9]+))?",  # -lenL: trained on L-token rows
         lambda m: f"WG-KV λ {m.group(1)}" + (f", {m.group(3)}-token rows" if m.group(3) else "")
         + (f", s = {m.group(5)}" if m.group(5) else "")),
        (r"kvpop(_mlp)?:model=[^,]*-(mlstm|mlp)\b.*?capacity=([0-9]+)", lambda m: f"KVpop-{'mLSTM' if m.group(2) == 'mlstm' else 'MLP'} B = {m.group(3)}"),
        (r"^spkv.*?tau=([0-9.]+)", lambda m: f"SP-KV τ {m.group(1)}"),
    ]
    for pat, f in rules:
        m = re.search(pat, policy)
        if m:
            return f(m)
    return policy


GATED_FULL = "full (SP-KV's gated model, F32)"


def reference(key, ruler, nll, lengths):
    """The full F16 row a stack is compared with: the gated model's for SP-KV's rows and that model's full-cache rows
    where it has RULER cells at every length or an NLL cell, the file's full F16 cache otherwise."""
    gated = (GATED_FULL, "f16", "—")
    ours = key[0].startswith("SP-KV") or key[0] == GATED_FULL
    if ours and (all((gated, n) in ruler for n in lengths) or gated in nll):
        return gated
    return ("full", "f16", "—")


def per_example(path):
    """A RULER cell's score (0-100) per example, keyed (task, length, index), from its predictions.csv; {} if absent
    (a directory whose predictions are packed: scripts/pack-predictions.sh --unpack restores them)."""
    if not os.path.isfile(path):
        return {}
    with open(path, newline="") as f:
        return {(r["task"], r["length"], r["index"]): 100 * float(r["score"]) for r in csv.DictReader(f)}


def paired(cell, ref):
    """Mean and 95% half-width (normal approximation) of the per-example score differences cell − ref over the
    examples both have; None when they share fewer than two."""
    keys = cell.keys() & ref.keys()
    if len(keys) < 2:
        return None
    d = [cell[k] - ref[k] for k in keys]
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return mean, 1.96 * math.sqrt(var / len(d))


def cells(root):
    """Every finished cell under root: (kind, length or None, key, metrics), key = (label, kv_type, rotation)."""
    for d in sorted(os.listdir(root)):
        m = re.match(r"^(ruler)_([0-9]+)k_|^(nll)_2k_", d)
        if not m or not os.path.isdir(os.path.join(root, d)):
            continue
        kind = m.group(1) or m.group(3)
        length = int(m.group(2)) if m.group(2) else None
        for c in sorted(os.listdir(os.path.join(root, d))):
            cell = os.path.join(root, d, c)
            if not os.path.isfile(os.path.join(cell, "metrics.json")):
                continue
            cfg = read_yaml(os.path.join(cell, "config.yaml"))
            with open(os.path.join(cell, "metrics.json")) as f:
                met = json.load(f)
            if kind == "ruler":
                met = dict(met, per_example=per_example(os.path.join(cell, "predictions.csv")))
            kv = cfg.get("kv_type", "f16")
            # RULER cells written before they recorded kv_rotate: the directory's _norot suffix tells
            rot = cfg.get("kv_rotate", "off" if re.search(r"_norot(_spkv)?$", d) else "auto")
            rot = rot if kv not in ("f16", "bf16", "f32") else "—"
            name = label(cfg.get("policy", met.get("policy", "?")))
            if d.endswith("_spkv") and name == "full":
                name = GATED_FULL
            yield kind, length, (name, kv, rot), met


def smallest(qualified, at):
    """The (key, × smaller at the last length of at) of the smallest stack meeting both bounds at every length of
    at, None if none does."""
    fits = [(k, good[at[-1]]) for k, good in qualified if all(n in good for n in at)]
    return max(fits, key=lambda t: t[1]) if fits else None


def share_text(share):
    """A RULER share as a whole percent, with one decimal where rounding would put it on the 95% line (94.8%)."""
    if 0.945 <= share < 0.95:
        return f"{100 * share:.1f}%"
    return f"{100 * share:.0f}%"


def family(name):
    """The method of a stack label, the plot's series ("KVzap-Linear τ -4" → "KVzap-Linear")."""
    for f in ("KVzap-Linear", "KVzap-MLP", "WG-KV", "KVpop", "SP-KV"):
        if name.startswith(f):
            return f
    return "full cache"


PLOT_TYPES = [("f16", "F16"), ("q8_0", "Q8_0"), ("q8_0/q4_0", "Q8_0 keys, Q4_0 values"), ("q4_0@admission",
                                                                                      "Q4_0 at admission")]
PLOT_COLORS = {"full cache": "#332288", "KVpop": "#88CCEE", "KVzap-Linear": "#117733", "KVzap-MLP": "#AA4499",
               "SP-KV": "#999933", "WG-KV": "#CC6677"}


def point_type(kv, rot):
    """gnuplot point type of a cache type: filled circle, square, triangle, diamond; the open shape with the rotation
    off; a cross for another type."""
    filled = {t: p for (t, _), p in zip(PLOT_TYPES, (7, 5, 9, 13))}
    if kv not in filled:
        return 2
    return filled[kv] - 1 if rot == "off" else filled[kv]


def write_plot(prefix, n, points):
    """PREFIX_Nk.dat / .gp (/ .png with gnuplot) of points [(label, kv, rot, × smaller, share %, nll ok)]: one
    series (colour) per method, the cache type as the point's shape, the operating point (τ, λ, B) as its label."""
    series = sorted({family(p[0]) for p in points}, key=lambda f: (f != "full cache", f))
    with open(f"{prefix}_{n}k.dat", "w") as f:
        f.write("# × smaller, % of the full F16 RULER score, label, gnuplot point type\n")
        for s in series:
            f.write(f"# {s}\n")
            for name, kv, rot, x, y, ok in points:
                if family(name) != s:
                    continue
                if name == GATED_FULL:
                    tag = "SP-KV's model"
                elif s == "full cache":
                    tag = name[len("full"):].strip(", ").replace(" = ", "").replace(", ", " ")
                else:
                    tag = name[len(s):].strip().lstrip("-").replace("mLSTM ", "")
                f.write(f'{x:.3f} {y:.1f} "{tag}{"" if ok else "*"}" {point_type(kv, rot)}\n')
            f.write("\n\n")
    base = os.path.basename(prefix)
    xmax = max(12, max(p[3] for p in points) * 1.15)
    plots = [f"'{base}_{n}k.dat' index {i} using 1:2:4 with points pt variable ps 1.5 lc rgb '{PLOT_COLORS[s]}' "
             f"notitle, '' index {i} using 1:2:3 with labels offset 0.8,0.5 left font ',8' tc rgb '{PLOT_COLORS[s]}' "
             f"notitle, NaN with points pt 7 ps 1.5 lc rgb '{PLOT_COLORS[s]}' title '{s}'" for i, s in enumerate(series)]
    plots += [f"NaN with points pt {point_type(t, 'auto')} ps 1.5 lc rgb 'black' title '{name}'" for t, name in PLOT_TYPES]
    plots += [f"NaN with points pt {point_type('q8_0/q4_0', 'off')} ps 1.5 lc rgb 'black' title 'open: rotation off'"]
    with open(f"{prefix}_{n}k.gp", "w") as f:
        f.write(f"set terminal pngcairo size 1100,650 noenhanced\nset output '{base}_{n}k.png'\n"
                f"set title 'Quantized KV pages x learned compression, RULER {n}k, SmolLM2-135M-Instruct "
                f"(* NLL above +1%)'\nset xlabel 'x smaller than the full F16 cache (KV bytes per position)'\n"
                f"set ylabel 'RULER score, % of the full F16 cache'\nset grid\nset key outside right\n"
                f"set xrange [0:{xmax:.1f}]\nset yrange [30:120]\n"
                f"set arrow from graph 0, first 95 to graph 1, first 95 nohead dt 2 lc rgb '#888888'\n"
                f"set arrow from 8, graph 0 to 8, graph 1 nohead dt 2 lc rgb '#888888'\nplot " + ", \\\n  ".join(plots)
                + "\n")
    if shutil.which("gnuplot"):
        subprocess.run(["gnuplot", os.path.basename(f"{prefix}_{n}k.gp")], cwd=os.path.dirname(prefix) or ".",
                       check=False)


def main():
    args = sys.argv[1:]
    prefix = None
    if len(args) == 3 and args[1] == "--plot":
        prefix = args[2]
        args = args[:1]
    if len(args) != 1 or not os.path.isdir(args[0]):
        sys.exit("usage: kv_quant_table.py DIR [--plot PREFIX] (DIR: a directory of results-kv-quant.sh sweeps)")
    sys.argv[1:] = args
    ruler, nll = {}, {}
    lengths = set()
    for kind, length, key, met in cells(sys.argv[1]):
        if kind == "ruler":
            ruler[(key, length)] = met
            lengths.add(length)
        else:
            nll[key] = met
    lengths = sorted(lengths)
    ref = ("full", "f16", "—")
    if not lengths or any((ref, n) not in ruler for n in lengths):
        print("error: kv_quant_table: no finished full F16 RULER cell at every length in " + sys.argv[1], file=sys.stderr)
        sys.exit(2)
    keys = sorted({k for k, _ in ruler} | set(nll), key=lambda k: (k[0] != "full", k[0], k[1], k[2]))
    gated_ref = False
    head = ["stack", "K/V", "rotation"]
    for n in lengths:
        head += [f"RULER {n}k", "of full F16", "Δ ± paired 95% CI", f"KV bytes / position ({n}k)", f"× smaller ({n}k)"]
    head += ["NLL 2k", "Δ NLL", "meets both"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    qualified = []  # (key, {length: × smaller} over the lengths where it meets both bounds)
    points = {n: [] for n in lengths}  # the plot's (label, kv, rotation, × smaller, share %, NLL within +1%)
    for k in keys:
        row = [k[0], k[1], k[2]]
        ok = True  # NLL within the bound
        ran = {}  # length: × smaller, the lengths whose RULER cell has sizes
        meets = {}  # length: whether the RULER share there is ≥ 95%
        r = reference(k, ruler, nll, lengths)
        gated_ref = gated_ref or r != ref
        for n in lengths:
            m = ruler.get((k, n))
            if m is None:
                row += ["—"] * 5
                continue
            if (r, n) in ruler:  # its reference ran at this length
                share = m["score"] / ruler[(r, n)]["score"] if ruler[(r, n)]["score"] else 0.0
                p = paired(m["per_example"], ruler[(r, n)]["per_example"])
                row += [f"{m['score']:.1f}", share_text(share), "—" if p is None else f"{p[0]:+.1f} ± {p[1]:.1f}"]
                meets[n] = share >= 0.95
            else:  # the score and sizes without a share: nothing to compare with yet
                row += [f"{m['score']:.1f}", "—", "—"]
            if "kv_bytes_vs_full_f16" in m:
                x = 1 / m["kv_bytes_vs_full_f16"]
                row += [f"{m['kv_bytes_per_token']:.0f}", f"{x:.1f}×"]
                ran[n] = x
            else:
                row += ["—", "—"]
        m = nll.get(k)
        if m is not None and r in nll:
            d = m["nll"] / nll[r]["nll"] - 1
            row += [f"{m['nll']:.4f}", f"{100 * d:+.2f}%"]
            ok = ok and d <= 0.01
        else:
            row += ["—", "—"]
            ok = False
        for n in ran:
            if (r, n) not in ruler:
                continue
            r_score = ruler[(r, n)]["score"]
            points[n].append((k[0], k[1], k[2], ran[n], 100 * ruler[(k, n)]["score"] / r_score if r_score else 0, ok))
        checked = [n for n in sorted(ran) if n in meets]
        row.append(", ".join(f"{n}k {'yes' if ok and meets[n] else 'no'}" for n in checked) if checked else "no")
        if ok and checked:
            qualified.append((k, {n: ran[n] for n in checked if meets[n]}))
        print("| " + " | ".join(row) + " |")
    print()
    if prefix:
        for n in lengths:
            if points[n]:
                write_plot(prefix, n, points[n])
    if gated_ref:
        print(f"SP-KV's rows and its gated model's full-cache rows are compared with that model's own full F16 cache "
              f"({GATED_FULL}, f16), the other rows with the model file's.\n")
    short, longest = lengths[0], lengths[-1]
    best = smallest(qualified, [short])
    if best:
        print(f"Smallest stack at ≥ 95% of the full F16 cache's RULER score at {short}k and ≤ +1% NLL: "
              f"**{best[0][0]}, {best[0][1]} (rotation {best[0][2]})**, {best[1]:.1f}× smaller than the full F16 cache.")
    else:
        print(f"No stack here keeps ≥ 95% of the full F16 cache's RULER score at {short}k with ≤ +1% NLL.")
    if longest != short:
        names = " and ".join(f"{n}k" for n in lengths)
        best = smallest(qualified, lengths)
        if best:
            print(f"\nSmallest stack that qualifies at {names} (of those run at every length): **{best[0][0]}, "
                  f"{best[0][1]} (rotation {best[0][2]})**, {best[1]:.1f}× smaller than the full F16 cache at {longest}k.")
        else:
            print(f"\nNo stack run at {names} qualifies at every length.")


if __name__ == "__main__":
    main()
