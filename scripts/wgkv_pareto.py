#!/usr/bin/env python3
"""The WG-KV Pareto table of a results folder (docs/results/wgkv/<model>).

    python3 scripts/wgkv_pareto.py OUT GATES_PREFIX LAMBDA...

Reads every NLL sweep cell OUT/nll_*/<cell>/metrics.json (density, NLL) and its sweep's `full` cell, and the last
evaluation of each λ's training log GATES_PREFIX<λ>/train_log.jsonl (held-out distillation loss with the inference
decision, density). Writes OUT/pareto.md (the table), OUT/nll_vs_density.dat and OUT/distill_vs_density.dat (one
block per method, for gnuplot) and OUT/pareto.gp (two plots: ΔNLL and distillation loss against density).
"""
import json
import os
import re
import sys


def family(sweep, cell):
    if sweep.startswith("nll_wgkv_sinks4"):
        return "WG-KV + 4 sinks"
    if sweep.startswith("nll_wgkv"):
        tau = re.search(r"tau_([-0-9.]+)", cell)
        return "WG-KV" + (f" (tau {tau.group(1)})" if tau else "")
    for name, label in (("kvzap", "KVzap"), ("h2o", "H2O"), ("expected_attention", "Expected Attention"),
                        ("streaming_llm", "StreamingLLM"), ("spkv", "SP-KV"), ("local", "Local")):
        if cell.startswith(name):
            return label
    return cell


def training_table(out, prefix, lambdas):
    """OUT/training.md: per λ, the run (steps, tokens, wall time) and its last evaluation."""
    lines = ["| λ | steps | tokens | wall time | density (τ) | held-out distillation MSE (hard / soft gates) | "
             "held-out NLL gated / frozen model |", "|---|---|---|---|---|---|---|"]
    for lam in sorted(lambdas, key=float):
        log = f"{prefix}{lam}/train_log.jsonl"
        if not os.path.exists(log):
            continue
        steps = [json.loads(l) for l in open(log) if '"loss"' in l]
        evals = [json.loads(l)["eval"] for l in open(log) if '"eval"' in l]
        if not steps or not evals:
            continue
        e, last = evals[-1], steps[-1]
        cfg = json.load(open(f"{prefix}{lam}/config.json"))
        nll = [(k[4:], v, e.get("full_" + k)) for k, v in sorted(e.items()) if k.startswith("nll_")]
        nll_txt = "; ".join(f"{name}: {v:.4f} / {f:.4f} ({100 * (v - f) / f:+.2f}%)" for name, v, f in nll if f)
        lines.append(f"| {lam} | {last['step']} | {last['tokens_seen']:,} | {last['elapsed_s'] / 60:.0f} min | "
                     f"{e['density']:.3f} ({cfg['tau']}) | {e['distill']:.5f} / {e['soft_distill']:.5f} | {nll_txt} |")
    with open(os.path.join(out, "training.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(out, prefix, lambdas):
    training_table(out, prefix, lambdas)
    rows = []  # (family, setting, density, nll, delta %, distill)
    for sweep in sorted(os.listdir(out)):
        sd = os.path.join(out, sweep)
        if not (sweep.startswith("nll_") and os.path.isdir(sd)):
            continue
        full = os.path.join(sd, "full", "metrics.json")
        if not os.path.exists(full):
            continue
        base = json.load(open(full))["nll"]
        for cell in sorted(os.listdir(sd)):
            mf = os.path.join(sd, cell, "metrics.json")
            if cell == "full" or not os.path.exists(mf):
                continue
            m = json.load(open(mf))
            setting = cell
            lam = re.search(r"lambda([0-9.]+?)_", cell + "_")
            tau = re.search(r"tau_([-0-9.]+)", cell)
            ratio = re.search(r"ratio_([0-9.]+)", cell)
            if lam:
                setting = f"λ {lam.group(1)}" + (f", τ {tau.group(1)}" if tau else "")
            elif tau:
                setting = f"τ {tau.group(1)}"
            elif ratio:
                setting = f"ratio {ratio.group(1)}"
            distill = None
            # The training's held-out distillation loss was measured at its own τ, without sinks.
            cfgf = f"{prefix}{lam.group(1)}/config.json" if lam else ""
            same_tau = (lam and tau and os.path.exists(cfgf) and not sweep.startswith("nll_wgkv_sinks")
                        and abs(float(tau.group(1)) - json.load(open(cfgf))["tau"]) < 1e-9)
            if same_tau:
                log = f"{prefix}{lam.group(1)}/train_log.jsonl"
                if os.path.exists(log):
                    for line in open(log):
                        j = json.loads(line)
                        if "eval" in j and "distill" in j["eval"]:
                            distill = j["eval"]["distill"]
            rows.append((family(sweep, cell), setting, m["density"], m["nll"], 100 * (m["nll"] - base) / base, distill,
                         base))
    rows.sort(key=lambda r: (r[0], -r[2]))
    with open(os.path.join(out, "pareto.md"), "w") as f:
        f.write("| method | setting | density ρ | NLL (nats/token) | ΔNLL vs full | held-out distillation MSE |\n")
        f.write("|---|---|---|---|---|---|\n")
        for fam, setting, dens, nll, delta, distill, base in rows:
            dd = f"{distill:.5f}" if distill is not None else ""
            f.write(f"| {fam} | {setting} | {dens:.3f} | {nll:.4f} | {delta:+.2f}% | {dd} |\n")
        if rows:
            f.write(f"\nFull cache: {rows[0][6]:.4f} nats/token.\n")
    fams = sorted({r[0] for r in rows})
    with open(os.path.join(out, "nll_vs_density.dat"), "w") as f:
        for fam in fams:
            f.write(f"# {fam}\n")
            for r in sorted((r for r in rows if r[0] == fam), key=lambda r: r[2]):
                f.write(f"{r[2]:.6f} {r[4]:.4f}\n")
            f.write("\n\n")
    with open(os.path.join(out, "distill_vs_density.dat"), "w") as f:
        for r in sorted((r for r in rows if r[5] is not None), key=lambda r: r[2]):
            f.write(f"{r[2]:.6f} {r[5]:.6g}\n")
    with open(os.path.join(out, "pareto.gp"), "w") as g:
        g.write("set terminal pngcairo size 1200,500 noenhanced\nset output 'pareto.png'\nset multiplot layout 1,2\n"
                "set grid\nset xlabel 'density (kept fraction beyond the window)'\nset key top right\n"
                "set title 'NLL increase vs full cache (chunked protocol)'\nset ylabel 'delta NLL (%)'\n")
        g.write("plot " + ", ".join(f"'nll_vs_density.dat' index {i} using 1:2 with linespoints lw 2 title '{fam}'"
                                    for i, fam in enumerate(fams)) + "\n")
        g.write("set title 'WG-KV: held-out distillation loss (gates at tau)'\nset ylabel 'MSE of final hidden states'\n"
                "set logscale y\nplot 'distill_vs_density.dat' using 1:2 with linespoints lw 2 title 'WG-KV (lambda sweep)'\n"
                "unset multiplot\n")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
