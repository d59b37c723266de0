#!/usr/bin/env python3
"""Teacher top-k retention recall per KV head of the KVpop scorers (KVpop Fig. 7), from their training logs.

    python3 scripts/kvpop_recall.py OUT SCORER_DIR...

Reads the last evaluation of each SCORER_DIR/train_log.jsonl (`kvsieve train kvpop`): the fraction of the teacher's
top-k (future attention, eq. 3) the scorer's own top-k keeps at the end of each held-out window, per layer and head,
and the same for keeping the k most recent entries. Writes OUT/recall.md (the table and the training curve's last
points), OUT/recall_<name>.dat (one [L][Hkv] matrix per scorer and one for recency) and OUT/recall.gp, rendered to
OUT/recall.png when gnuplot is installed.
"""
import json
import os
import subprocess
import sys


def last_eval(path):
    ev = None
    for line in open(path):
        j = json.loads(line)
        if "eval" in j:
            ev = (j["step"], j["eval"])
    return ev


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, dirs = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    rows, mats = [], []
    recent = None
    for d in dirs:
        name = os.path.basename(os.path.normpath(d))
        cfg = json.load(open(os.path.join(d, "config.json")))
        step, ev = last_eval(os.path.join(d, "train_log.jsonl"))
        rows.append((name, cfg, step, ev))
        mats.append((name, ev["recall_heads"]))
        recent = ev["recall_recent_heads"]
    mats.append(("recent", recent))
    md = ["# KVpop: teacher top-k retention recall per head", "",
          "At the end of each held-out window, the fraction of the teacher's k kept entries (the running top-k of the",
          "future-attention target, KVpop eqs. 2–3 and 5) that a scorer's own static priorities also keep (KVpop",
          "Fig. 7), averaged over heads; `recent` keeps the k most recent eligible entries (StreamingLLM's choice).", "",
          "| scorer | kind | readout | s / w / k | steps | pair accuracy | recall | recall of `recent` |",
          "|---|---|---|---|---:|---:|---:|---:|"]
    for name, cfg, step, ev in rows:
        readout = ("delayed" if cfg.get("delayed", True) else "immediate") if cfg["kind"] == "mlstm" else "at write"
        md.append(f"| `{name}` | {cfg['kind']} | {readout} | {cfg['sinks']} / {cfg['window']} / {cfg['budget_k']} | {step} | "
                  f"{ev['pair_acc']:.3f} | {ev['recall']:.3f} | {ev['recall_recent']:.3f} |")
    md += ["", "![recall per head](recall.png)", ""]
    open(os.path.join(out, "recall.md"), "w").write("\n".join(md))
    for name, m in mats:
        with open(os.path.join(out, f"recall_{name}.dat"), "w") as f:
            for row in m:
                f.write(" ".join(f"{x:.4f}" for x in row) + "\n")
    L, H = len(recent), len(recent[0])
    n = len(mats)
    gp = [f"set terminal pngcairo size {300 * n + 100},{max(300, 18 * L + 160)} noenhanced", "set output 'recall.png'",
          f"set multiplot layout 1,{n} title 'teacher top-k retention recall per (layer, KV head)'",
          "set cbrange [0:1]", "set palette rgb 33,13,10", "set xlabel 'KV head'", "set ylabel 'layer'",
          f"set xrange [-0.5:{H - 0.5}]", f"set yrange [{L - 0.5}:-0.5]", "set xtics 1", f"set ytics {2 if L > 16 else 1}"]
    for name, _ in mats:
        gp += [f"set title '{name}'", f"plot 'recall_{name}.dat' matrix with image notitle"]
    gp.append("unset multiplot")
    open(os.path.join(out, "recall.gp"), "w").write("\n".join(gp) + "\n")
    try:
        subprocess.run(["gnuplot", "recall.gp"], cwd=out, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"gnuplot: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
