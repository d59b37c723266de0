#!/usr/bin/env bash
# How many concurrent ~4k-token conversations one 512 MiB KV pool holds, and at what throughput, with the full
# cache and with compressing policies: for each policy, `kvsieve serve` (SmolLM2-135M-Instruct, 32 slots, no
# waiting: a request the pool cannot hold gets 503) and scripts/loadtest.py with N clients sending one request each
# (a ~3.9k-token prompt and 128 generated tokens) at once. Writes docs/results/serving/<name>.json and prints a table.
# Usage: bash scripts/bench-serve.sh [CLIENTS]   (about 15 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${1:-24}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=docs/results/serving
mkdir -p "$OUT"
[ -f "$MODEL" ] || bash scripts/get-model.sh smollm2-135m
bash scripts/need-checkpoint.sh models/kvpop/smollm2-135m-mlstm
POLICIES=(
  "full|full"
  "kvpop-1024|kvpop:model=smollm2-135m-mlstm,capacity=1024"
  "streaming-1024|streaming_llm:window=1020,sinks=4"
)
for entry in "${POLICIES[@]}"; do
  name=${entry%%|*} policy=${entry#*|}
  log=$(mktemp)
  build/bin/kvsieve serve -m "$MODEL" --port 0 --slots 32 -c 4160 --kv-pool-mb 512 --metrics \
    --predictor smollm2-135m-mlstm=models/kvpop/smollm2-135m-mlstm --policy "$policy" 2>"$log" &
  pid=$!
  port=""
  for _ in $(seq 1 100); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$log"; exit 1; }
  echo "== $name: $policy" >&2
  python3 scripts/loadtest.py --url "http://127.0.0.1:$port" --clients "$CLIENTS" --requests "$CLIENTS" \
    --prompt-words 3900 --max-tokens 128 --temperature 0.8 --json "$OUT/$name.json" >&2 || true
  kill -TERM "$pid"
  wait "$pid" || true
  rm -f "$log"
done
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
print("| policy | conversations held at once | refused (503) | peak KV MiB | compression ratio | generated tok/s (all) | TTFT p50 s | latency p50 s |")
print("|---|---|---|---|---|---|---|---|")
for name in ("full", "kvpop-1024", "streaming-1024"):
    p = os.path.join(out, name + ".json")
    if not os.path.exists(p):
        continue
    s = json.load(open(p))
    print(f"| {name} | {s['ok']} | {s['refused_503']} | {s['peak_kv_mib']:.0f} | {s.get('compression_ratio_mean', 0):.2f} | "
          f"{s['tokens_per_s']:.1f} | {s['ttft_p50_s']:.1f} | {s['latency_p50_s']:.1f} |")
PY
