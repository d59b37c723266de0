#!/usr/bin/env bash
# Speed of WG-KV on SmolLM2-135M-Instruct (docs/results/wgkv/smollm2/speed.md): prefill of 2k/4k/8k-token prompts of
# held-out WikiText-2 with the dense cache and with WG-KV's sparse prefill (the same kernel as SP-KV's gated prefill,
# at the densities the λ sweep's gates give), then decode tokens/s and KV bytes at a 4k-token depth. One run each
# (one warm-up, one timed repetition), nothing else running. Needs the gates of scripts/results-wgkv-smollm2.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=docs/results/wgkv/smollm2
TEXT=${TEXT:-$(ls runs/wgkv-smollm2/*/heldout_wiki.test.raw | head -1)}
LAMBDAS=${LAMBDAS:-0.01 0.04 0.16}
LENGTHS=${LENGTHS:-2048 4096 8192}
mkdir -p "$OUT/speed"
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
run() {  # name, bench arguments...
  local f="$OUT/speed/$1.txt"; shift
  [ -s "$f" ] || $K bench -m "$M" --text "$TEXT" -r 1 "$@" > "$f" 2> "$f.err"
}
for n in $LENGTHS; do
  run "pp${n}_full" -p "$n" -n 0 --policy full
  for lam in $LAMBDAS; do run "pp${n}_wgkv_l$lam" -p "$n" -n 0 --policy "wgkv:model=models/wgkv/smollm2-135m-lambda$lam"; done
done
run tg32_d4096_full -p 0 -n 32 -d 4096 --policy full
for lam in $LAMBDAS; do run "tg32_d4096_wgkv_l$lam" -p 0 -n 32 -d 4096 --policy "wgkv:model=models/wgkv/smollm2-135m-lambda$lam"; done
python3 - "$OUT" "$cpu" <<'PY'
import glob, os, re, sys
out, cpu = sys.argv[1], sys.argv[2]
rows = {}
for f in sorted(glob.glob(f"{out}/speed/*.txt")):
    name = os.path.basename(f)[:-4]
    txt, err = open(f).read(), open(f + ".err").read() if os.path.exists(f + ".err") else ""
    m = re.search(r"\| (pp\d+|tg\d+ @ d\d+) \| ([0-9.]+) ± [0-9.]+ \|", txt)
    d = re.search(r"after the prefill test: density ([0-9.]+), ([0-9.]+) MiB kept \(full F16: ([0-9.]+) MiB\)", err)
    k = re.search(r"at depth \d+: ([0-9.]+) MiB kept \(full F16: ([0-9.]+) MiB\)", txt)
    rows[name] = (float(m.group(2)) if m else None, d, k)
lines = [f"Machine: {cpu}, 2 threads; F16 KV cache; one timed run after a warm-up; `bash scripts/bench-wgkv-smollm2.sh`.", "",
         "| prompt | policy | prefill tokens/s | speed-up vs dense | density after prefill | KV kept / full F16 (MiB) |",
         "|---|---|---|---|---|---|"]
for n in sorted({int(re.match(r"pp(\d+)", k).group(1)) for k in rows if k.startswith("pp")}):
    base = rows.get(f"pp{n}_full", (None,))[0]
    for k in sorted(k for k in rows if k.startswith(f"pp{n}_")):
        tps, d, _ = rows[k]
        pol = "dense (full)" if k.endswith("_full") else "WG-KV λ " + k.split("_l")[-1] + ", sparse prefill"
        sp = f"{tps / base:.2f}×" if tps and base else ""
        dens = f"{float(d.group(1)):.3f}" if d else ""
        kv = f"{float(d.group(2)):.1f} / {float(d.group(3)):.1f}" if d else ""
        lines.append(f"| {n} | {pol} | {tps:.1f} | {sp} | {dens} | {kv} |")
lines += ["", "| decode at depth 4096 | tokens/s | speed-up | KV kept / full F16 (MiB) |", "|---|---|---|---|"]
base = rows.get("tg32_d4096_full", (None,))[0]
for k in sorted(k for k in rows if k.startswith("tg32")):
    tps, _, kv = rows[k]
    pol = "full" if k.endswith("_full") else "WG-KV λ " + k.split("_l")[-1]
    lines.append(f"| {pol} | {tps:.2f} | {tps / base:.2f}× | {kv.group(1)} / {kv.group(2)} |" if kv and base else f"| {pol} | {tps} | | |")
open(f"{out}/speed.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
