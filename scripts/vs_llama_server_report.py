#!/usr/bin/env python3
"""The table and the plot of scripts/bench-vs-llama-server.sh: reads every <server>-C<C>[-poisson].json in a folder
(bench_conversations.py's output plus the server's VmHWM), prints one markdown row per server, C and arrival order,
and draws conversations-held.png with gnuplot: follow-ups that found their conversation still cached (left) and the
follow-ups' median time to first token (right, log scale) against the number of conversations C, one line per server
and cache. Standard library and gnuplot only; without gnuplot the table is printed and the plot skipped with a note.

  python3 scripts/vs_llama_server_report.py docs/results/serving/vs-llama-server
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The order of the rows and lines, and the words the page uses for each configuration.
LABELS = [
    ("kvsieve-full", "kvsieve, full F16 cache"),
    ("kvsieve-kvzap-q8q4", "kvsieve, KVzap τ=-3 on Q8_0/Q4_0 pages"),
    ("kvsieve-snapkv", "kvsieve, SnapKV ratio 0.5, F16"),
    ("llama-f16", "llama-server, F16 cache"),
    ("llama-q8q4", "llama-server, -ctk q8_0 -ctv q4_0"),
]


def load(folder):
    """[(name, C, arrivals, summary)] of every result file, in LABELS order, then C, then arrivals."""
    rows = []
    for path in glob.glob(os.path.join(folder, "*-C*.json")):
        m = re.match(r"(.+)-C(\d+)(-poisson)?\.json$", os.path.basename(path))
        if not m:
            continue
        with open(path, encoding="utf-8") as f:
            s = json.load(f)["summary"]
        rows.append((m.group(1), int(m.group(2)), "poisson" if m.group(3) else "round-robin", s))
    order = {name: i for i, (name, _) in enumerate(LABELS)}
    rows.sort(key=lambda r: (r[2] != "round-robin", order.get(r[0], len(order)), r[1]))
    return rows


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def table(rows):
    words = dict(LABELS)
    out = ["| server and cache | arrivals | C | first right % [95% CI] | follow-ups right % [95% CI] | follow-ups held | "
           "follow-up TTFT p50 / p99 s | first TTFT p50 s | generated tok/s | errors | wall s | VmHWM MiB |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, c, arrivals, s in rows:
        f, u = s["first"], s["followup"]
        out.append("| %s | %s | %d | %.1f [%s, %s] | %.1f [%s, %s] | %d / %d | %s / %s | %s | %s | %d | %.0f | %.0f |" % (
            words.get(name, name), arrivals, c, f["accuracy"], *f["accuracy_ci95"], u["accuracy"],
            *u["accuracy_ci95"], u["held"], u["n"], fmt(u["ttft_p50_s"]), fmt(u["ttft_p99_s"]), fmt(f["ttft_p50_s"]),
            fmt(s.get("generated_tok_per_s"), "%.1f"), s["errors"], s["wall_s"], s["server_vmhwm_mib"]))
    return "\n".join(out)


def plot(rows, png):
    """Draws the round-robin rows with gnuplot into png; False (and a note on stderr) without gnuplot."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        print("note: gnuplot not found, no plot drawn", file=sys.stderr)
        return False
    words = dict(LABELS)
    series = {}
    for name, c, arrivals, s in rows:
        if arrivals == "round-robin":
            u = s["followup"]
            series.setdefault(name, []).append((c, 100.0 * u["held"] / u["n"], u["ttft_p50_s"]))
    with tempfile.TemporaryDirectory() as tmp:
        plots_held, plots_ttft = [], []
        for i, (name, pts) in enumerate(series.items()):
            dat = os.path.join(tmp, "%d.dat" % i)
            with open(dat, "w", encoding="utf-8") as f:
                for c, held, ttft in sorted(pts):
                    f.write("%d %.3f %s\n" % (c, held, "NaN" if ttft is None else "%.4f" % ttft))
            title = words.get(name, name)
            plots_held.append("'%s' using 1:2 with linespoints lw 2 pt 7 title '%s'" % (dat, title))
            plots_ttft.append("'%s' using 1:3 with linespoints lw 2 pt 7 title '%s'" % (dat, title))
        script = "\n".join([
            "set terminal pngcairo noenhanced size 1400,560 font 'sans,11'",
            "set output '%s'" % png,
            "set multiplot layout 1,2 title 'Conversations that come back: kvsieve serve and llama-server, same KV memory'",
            "set logscale x 2", "set grid", "set key bottom left", "set xlabel 'conversations C'",
            "set ylabel 'follow-ups answered from the cache %'", "set yrange [0:105]",
            "plot " + ", ".join(plots_held),
            "set logscale y", "set autoscale y", "set key top left", "set ylabel 'follow-up time to first token, p50 (s)'",
            "plot " + ", ".join(plots_ttft),
            "unset multiplot", ""])
        p = subprocess.run([gnuplot], input=script, text=True, capture_output=True)
        if p.returncode != 0:
            sys.exit("error: gnuplot failed: " + p.stderr.strip())
    return True


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: %s RESULTS_FOLDER" % sys.argv[0])
    rows = load(sys.argv[1])
    if not rows:
        sys.exit("error: no <server>-C<C>.json results in " + sys.argv[1])
    print(table(rows))
    if plot(rows, os.path.join(sys.argv[1], "conversations-held.png")):
        print("\nplot: " + os.path.join(sys.argv[1], "conversations-held.png"), file=sys.stderr)


if __name__ == "__main__":
    main()
