#!/usr/bin/env bash
# Decode speed and KV bytes of KVpop on SmolLM2-135M-Instruct (docs/results/kvpop/smollm2/speed.md): the cache first
# filled to a 3072-token depth with held-out WikiText-2 (prefill in chunks of 256, the rule after each, so the
# scorers see every token), then 64 decode steps, for the full cache and for the fixed budget B = 768 (75%) of
# KVpop, KVpop_mlp, StreamingLLM and H2O. One process per policy, one after another, nothing else running; one
# warm-up and three timed repetitions each. Needs the scorers of scripts/results-kvpop.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
bash scripts/need-checkpoint.sh models/kvpop/smollm2-135m-mlstm models/kvpop/smollm2-135m-mlp
OUT=docs/results/kvpop/smollm2/speed
TEXT=${TEXT:-data/corpora/wiki.test.raw}
B=${B:-768}
mkdir -p "$OUT"
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
declare -A POL=([full]=full [kvpop]="kvpop:model=models/kvpop/smollm2-135m-mlstm,capacity=$B"
                [kvpop_mlp]="kvpop_mlp:model=models/kvpop/smollm2-135m-mlp,capacity=$B"
                [streaming_llm]="streaming_llm:window=$((B - 4)),sinks=4" [h2o]="h2o:capacity=$B")
for name in full kvpop kvpop_mlp streaming_llm h2o; do
  f="$OUT/$name.txt"
  [ -s "$f" ] || $K bench -m "$M" --text "$TEXT" -p 0 -n 64 -d 3072 -r 3 --prefill-chunk 256 \
    --policy "${POL[$name]}" --stats-json "$OUT/$name.json" > "$f" 2> "$f.err"
done
python3 - "$OUT" "$cpu" <<'PY'
import json, os, re, sys
out, cpu = sys.argv[1], sys.argv[2]
rows = []
for name in ["full", "kvpop", "kvpop_mlp", "streaming_llm", "h2o"]:
    txt = open(f"{out}/{name}.txt").read()
    m = re.search(r"\| tg64 @ d3072 \| ([0-9.]+) ± ([0-9.]+) \|", txt)
    st = json.load(open(f"{out}/{name}.json"))
    rows.append((name, float(m.group(1)), float(m.group(2)), st))
full = rows[0][1]
lines = [f"Machine: {cpu}, 2 threads; SmolLM2-135M-Instruct Q4_1; F16 KV cache; depth 3072 filled by a chunked prefill "
         "(256) of WikiText-2, then 64 decode steps; one warm-up and three timed repetitions; "
         "`bash scripts/bench-kvpop-smollm2.sh`.", "",
         "| policy | decode tokens/s | vs full | KV MiB at the end | scorer state MiB |", "|---|---:|---:|---:|---:|"]
for name, tps, sd, st in rows:
    lines.append(f"| `{st['policy']}` | {tps:.1f} ± {sd:.1f} | {tps / full:.2f}× | {st['kv_bytes_final'] / 1048576:.2f} | "
                 f"{st.get('scorer_state_bytes', 0) / 1048576:.2f} |")
open(f"{os.path.dirname(out)}/speed.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
