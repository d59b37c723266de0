#!/usr/bin/env bash
# WG-KV composed with Quest's read-time selection on SmolLM2-135M-Instruct (docs/results/wgkv/smollm2/speed_quest.md;
# the WG-KV paper's Fig. 9): decode tokens/s and KV bytes read per token at a depth of 8192 tokens of held-out
# WikiText-2 (prefilled for real, so the gates see real keys), for the full cache, Quest alone, WG-KV alone and
# WG-KV + Quest at the same Quest budget. One warm-up and 3 timed repetitions of 64 steps each, the policies one
# after another, nothing else running. Needs the λ 0.04 gates of scripts/results-wgkv-smollm2.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=docs/results/wgkv/smollm2
TEXT=${TEXT:-$(ls runs/wgkv-smollm2/*/heldout_wiki.test.raw | head -1)}
G=models/wgkv/smollm2-135m-lambda${LAMBDA:-0.04}
DEPTH=${DEPTH:-8192}
B=${BUDGET:-512}
mkdir -p "$OUT/speed_quest"
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
isa=$(grep -q avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2)
for P in full "quest:read_budget=$B" "wgkv:model=$G" "wgkv:model=$G+quest:read_budget=$B"; do
  f="$OUT/speed_quest/$(echo "$P" | tr ':=,/+' '_____').txt"
  echo "$P" > "${f%.txt}.spec"
  [ -s "$f" ] || $K bench -m "$M" --text "$TEXT" -p 0 -n 64 -d "$DEPTH" -r 3 -t 2 --policy "$P" > "$f" 2> "$f.err"
done
python3 - "$OUT" "$cpu ($isa)" "$DEPTH" <<'PY'
import glob, os, re, sys
out, cpu, depth = sys.argv[1:]
rows = []
for f in sorted(glob.glob(f"{out}/speed_quest/*.txt")):
    txt = open(f).read()
    pol = re.search(r"KV cache: policy (\S+)", txt)
    tps = re.search(r"\| tg\d+ @ d\d+ \| ([0-9.]+) ± ([0-9.]+) \|", txt)
    kept = re.search(r"at depth \d+: ([0-9.]+) MiB kept \(full F16: ([0-9.]+) MiB\)", txt)
    kv = re.search(r"KV ([0-9.]+) MB\)", txt)
    spec = open(f[:-4] + ".spec").read().strip()
    rows.append((spec, float(tps.group(1)), float(tps.group(2)), kept, kv))
base = next((r[1] for r in rows if r[0] == "full"), None)
rows.sort(key=lambda r: (r[0] != "full", "wgkv" in r[0], "quest" in r[0]))
lines = [f"Machine: {cpu}, 2 threads; SmolLM2-135M-Instruct Q4_1, F16 KV cache filled by prefilling {depth} tokens of "
         "held-out WikiText-2; 64 decode steps, one warm-up and 3 timed repetitions; `bash scripts/bench-quest-wgkv-smollm2.sh`.",
         "", "| policy | decode t/s | vs full | KV kept / full F16 (MiB) | KV bytes read per token (MB) |", "|---|---:|---:|---:|---:|"]
for spec, t, sd, kept, kv in rows:
    k = f"{kept.group(1)} / {kept.group(2)}" if kept else ""
    lines.append(f"| `{spec}` | {t:.2f} ± {sd:.2f} | {t / base:.2f}× | {k} | {kv.group(1) if kv else ''} |")
open(f"{out}/speed_quest.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
