#!/usr/bin/env bash
# How many concurrent ~4k-token conversations one 512 MiB KV pool holds, and at what throughput, with the full
# cache and with compressing policies: for each policy, `kvsieve serve` (SmolLM2-135M-Instruct, 32 slots, no
# waiting: a request the pool cannot hold gets 503) and scripts/loadtest.py with N clients sending one request each
# (a ~3.9k-token prompt and 128 generated tokens) at once. Writes docs/results/serving/<name>.json and prints a table.
#
# `capacity`: how many ~4k-token conversations one pool of POOL_MB MiB holds by its page bytes alone, for the KV
# element types and a learned policy stacked on quantized pages. One server per row (1 slot, --max-conversations
# 1000, a --cache-dir, `-t $THREADS`, default 1): one conversation (the load test's 3,905-token prompt, 128 greedy
# tokens) kept under the id c0 and saved (POST /v1/cache/save); then its saved sequence restored under new ids c1,
# c2, ... (POST /v1/cache/restore: the pages the sequence holds, without running it again) until one no longer fits
# beside the kept ones (the server drops a kept conversation for it, kvsieve_conversations_dropped_total, or answers
# 503) or MAX_CONVERSATIONS (default 100) are held. The count is the most conversations the pool held at once
# (kvsieve_conversations_kept): decided by the pages each one holds, not by timing. Writes
# docs/results/serving/capacity-<name>.json (the first conversation's usage, then per restore: status, kept count and
# bytes) and prints a table.
# Usage: bash scripts/bench-serve.sh [CLIENTS]   (about 15 minutes on 2 cores)
#        bash scripts/bench-serve.sh capacity [POOL_MB]   (POOL_MB default 512)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=docs/results/serving
mkdir -p "$OUT"
[ -f "$MODEL" ] || bash scripts/get-model.sh smollm2-135m

# Starts `kvsieve serve -m $MODEL` with the options given, logging to $log; sets pid and port (exits with the log
# when it does not listen within 10 s).
start_server() {
  log=$(mktemp)
  build/bin/kvsieve serve -m "$MODEL" --port 0 "$@" 2>"$log" &
  pid=$!
  port=""
  for _ in $(seq 1 100); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$log"; exit 1; }
}
stop_server() {
  kill -TERM "$pid"
  wait "$pid" || true
  rm -f "$log"
}

if [ "${1:-}" = capacity ]; then
  POOL_MB=${2:-512} THREADS=${THREADS:-1} MAX_CONVERSATIONS=${MAX_CONVERSATIONS:-100}
  bash scripts/need-checkpoint.sh models/kvzap/smollm2-135m-linear
  # name|policy|K and V element type (the server names a predictor by its registered name: KVzap-Linear of SmolLM2)
  ROWS=(
    "f16|full|f16"
    "q8_0|full|q8_0"
    "q8_0-kvzap|kvzap:model=smollm2-135m-linear,tau=-3,sinks=4|q8_0"
  )
  for entry in "${ROWS[@]}"; do
    IFS='|' read -r name policy kv <<<"$entry"
    saved=$(mktemp -d)
    start_server --cache-dir "$saved" --slots 1 -c 4160 --kv-pool-mb "$POOL_MB" --metrics --max-conversations 1000 -t "$THREADS" \
      --cache-type-k "$kv" --cache-type-v "$kv" --predictor smollm2-135m-linear=models/kvzap/smollm2-135m-linear \
      --policy "$policy"
    echo "== capacity $name: $policy, K/V $kv, pool $POOL_MB MiB" >&2
    python3 - "http://127.0.0.1:$port" "$name" "$policy" "$kv" "$POOL_MB" "$MAX_CONVERSATIONS" \
      "$OUT/capacity-$name.json" <<'PY'
import json, sys, urllib.error, urllib.request
sys.path.insert(0, "scripts")
from loadtest import metrics, prompt_of  # the load test's prompts (3,900 words: 3,905 tokens) and /metrics reader
url, name, policy, kv, pool_mb, most, out = sys.argv[1:8]
most = int(most)


def post(path, body):
    """(status, parsed answer or None) of one POST."""
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=7200) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None


def observe(i, status):
    m = metrics(url)
    run = {"conversation": i, "status": status, "kept": int(m["kvsieve_conversations_kept"]),
           "kept_kv_bytes": int(m["kvsieve_conversations_kv_bytes"]),
           "dropped_total": int(m["kvsieve_conversations_dropped_total"])}
    print("  c%d: %s" % (i, run), file=sys.stderr)
    return run, m


status, answer = post("/v1/completions", {"prompt": prompt_of(3900, 0), "max_tokens": 128, "temperature": 0,
                                          "conversation": "c0"})
assert status == 200, "the first conversation failed with %d" % status
first, m = observe(0, status)
status, saved = post("/v1/cache/save", {"name": "c0", "conversation": "c0"})
assert status == 200, "saving the first conversation failed with %d" % status
runs = [first]
while len(runs) < most:
    status, _ = post("/v1/cache/restore", {"name": "c0", "conversation": "c%d" % len(runs)})
    run, m = observe(len(runs), status)
    runs.append(run)
    if status != 200 or run["dropped_total"] > 0:
        break
held = max(r["kept"] for r in runs)
full = runs[-1]["status"] != 200 or runs[-1]["dropped_total"] > 0
last = max((r for r in runs if r["kept"] == held), key=lambda r: r["conversation"])
s = {"name": name, "policy": policy, "cache_type_k": kv, "cache_type_v": kv, "pool_mib": float(pool_mb),
     "pool_bytes": int(m["kvsieve_kv_pool_pages_capacity"]) * int(m["kvsieve_kv_page_bytes"]),
     "page_bytes": int(m["kvsieve_kv_page_bytes"]), "conversations_held": held, "pool_full": full,
     "kv_bytes_per_conversation": last["kept_kv_bytes"] / max(held, 1), "first_usage": answer["usage"],
     "saved": saved, "runs": runs}
json.dump(s, open(out, "w"), indent=1)
PY
    stop_server
    rm -rf "$saved"
  done
  python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| K/V pages | policy | conversations held at once | KV per kept conversation (MiB) | pool (MiB) |")
print("|---|---|---|---|---|")
for name in ("f16", "q8_0", "q8_0-kvzap"):
    p = os.path.join(out, "capacity-%s.json" % name)
    if not os.path.exists(p):
        continue
    s = json.load(open(p))
    held = ("%d" if s["pool_full"] else "≥ %d") % s["conversations_held"]
    print("| %s/%s | `%s` | %s | %.1f | %.0f |" % (s["cache_type_k"], s["cache_type_v"], s["policy"], held,
                                              s["kv_bytes_per_conversation"] / 2**20, s["pool_bytes"] / 2**20))
PY
  exit 0
fi

CLIENTS=${1:-24}
bash scripts/need-checkpoint.sh models/kvpop/smollm2-135m-mlstm
POLICIES=(
  "full|full"
  "kvpop-1024|kvpop:model=smollm2-135m-mlstm,capacity=1024"
  "streaming-1024|streaming_llm:window=1020,sinks=4"
)
for entry in "${POLICIES[@]}"; do
  name=${entry%%|*} policy=${entry#*|}
  start_server --slots 32 -c 4160 --kv-pool-mb 512 --metrics \
    --predictor smollm2-135m-mlstm=models/kvpop/smollm2-135m-mlstm --policy "$policy"
  echo "== $name: $policy" >&2
  python3 scripts/loadtest.py --url "http://127.0.0.1:$port" --clients "$CLIENTS" --requests "$CLIENTS" \
    --prompt-words 3900 --max-tokens 128 --temperature 0.8 --json "$OUT/$name.json" >&2 || true
  stop_server
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
