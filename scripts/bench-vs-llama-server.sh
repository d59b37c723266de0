#!/usr/bin/env bash
# kvsieve serve against llama-server on the same machine, the same model file and the same memory for the KV cache:
# the conversations of scripts/bench_conversations.py (C conversations, each a ~2.5k-token document with three hidden
# facts and a question, then two follow-ups per conversation in round-robin or Poisson order, 4 requests in flight)
# against
#   - kvsieve serve --kv-pool-mb $POOL_MB, conversations kept by id (`conversation`), with the full F16 cache, the
#     demo's learned cache (KVzap τ=-3 on Q8_0-key / Q4_0-value pages) and a heuristic (SnapKV, ratio 0.5, F16);
#     --queue, so that a request the pool cannot hold yet waits for others to finish, as llama-server's do (without
#     it the request fails with 503 at once);
#   - llama-server with as many KV cells as the same bytes hold (-c), F16 and its smallest cache (-ctk q8_0
#     -ctv q4_0), flash attention on, its prompt cache on (cache_prompt, slot reuse) as its users run it, as many
#     slots (-np) as fit a whole conversation (3,584 cells each), and no host-memory prompt cache (--cache-ram 0: it
#     would keep evicted prompts outside the KV bytes compared here).
# Same threads for both. For each server and C, writes $OUT/<server>-C<C>.json (-poisson.json for Poisson arrivals:
# bench_conversations.py's summary and every turn, plus the server's peak resident memory, VmHWM), then prints the
# markdown table and draws $OUT/conversations-held.png (scripts/vs_llama_server_report.py); a result already there
# is kept (delete it to run again), so an interrupted run resumes where it stopped.
#
#   LLAMACPP_BIN=/tmp/llamacpp/build/bin bash scripts/bench-vs-llama-server.sh
#
# Env: LLAMACPP_BIN (folder of llama-server, built from the llama.cpp vendored in the newest llama-cpp-python sdist:
# docs/benchmarks.md), POOL_MB (256), CONVERSATIONS ("4 8 16 32 64"), ARRIVALS (round-robin, or poisson),
# RATE (Poisson arrivals per second, 0.5), SERVERS (which of kvsieve-full kvsieve-kvzap-q8q4 kvsieve-snapkv
# llama-f16 llama-q8q4 to run; all), THREADS (2), OUT (docs/results/serving/vs-llama-server),
# CORPUS (data/corpora/wiki.test.raw).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMACPP_BIN:?set LLAMACPP_BIN to the folder holding llama-server}"
POOL_MB=${POOL_MB:-256}; CONVERSATIONS=${CONVERSATIONS:-"4 8 16 32 64"}; THREADS=${THREADS:-2}
ARRIVALS=${ARRIVALS:-round-robin}; RATE=${RATE:-0.5}
SERVERS=${SERVERS:-"kvsieve-full kvsieve-kvzap-q8q4 kvsieve-snapkv llama-f16 llama-q8q4"}
case $ARRIVALS in round-robin) SUFFIX="" ;; poisson) SUFFIX="-poisson" ;;
  *) echo "error: ARRIVALS must be round-robin or poisson, not '$ARRIVALS'" >&2; exit 1 ;; esac
OUT=${OUT:-docs/results/serving/vs-llama-server}; CORPUS=${CORPUS:-data/corpora/wiki.test.raw}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
KS=build/bin/kvsieve
[ -x "$KS" ] || { echo "error: $KS not found: run scripts/build.sh" >&2; exit 1; }
[ -x "$LLAMACPP_BIN/llama-server" ] || { echo "error: no llama-server in $LLAMACPP_BIN" >&2; exit 1; }
[ -f "$MODEL" ] || bash scripts/get-model.sh smollm2-135m >/dev/null
mkdir -p "$OUT"

# KV bytes per cell of SmolLM2-135M (30 layers, 3 KV heads of 64): F16 2 B per element for K and V; Q8_0 34 B and
# Q4_0 18 B per block of 32 elements.
cells() { python3 -c "
n = 30 * 3 * 64
per = {'f16': 2 * n * 2, 'q8_0/q4_0': n * 34 / 32 + n * 18 / 32}['$1']
print(int($POOL_MB * 1048576 // per))"; }
PER_CONV=3584

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; }
trap cleanup EXIT

# run NAME KIND C -- server command...: starts it on $port, waits for /health, runs the conversations, adds VmHWM
run() {
  local name=$1 kind=$2 c=$3; shift 4
  case " $SERVERS " in *" $name "*) ;; *) return 0 ;; esac
  local out="$OUT/$name-C$c$SUFFIX.json"
  [ -f "$out" ] && { echo "kept: $out" >&2; return 0; }
  local log; log=$(mktemp)
  "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "error: server exited: $*" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  echo "== $name, $c conversations: $*" >&2
  python3 scripts/bench_conversations.py --url "http://127.0.0.1:$port" --server "$kind" --conversations "$c" \
    --corpus "$CORPUS" --concurrency 4 --arrivals "$ARRIVALS" --rate "$RATE" --label "$name" --out "$out.tmp" >/dev/null
  local hwm; hwm=$(awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  python3 - "$out.tmp" "$out" "$hwm" "$*" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import json, sys
tmp, out, hwm, cmd, commit = sys.argv[1:6]
r = json.load(open(tmp))
r["summary"]["server_vmhwm_mib"] = float(hwm)
r["summary"]["command"] = cmd
r["summary"]["kvsieve_commit"] = commit
json.dump(r, open(out, "w"), indent=1)
PY
  rm -f "$out.tmp" "$log"
}

for c in $CONVERSATIONS; do
  common=(-m "$MODEL" -t "$THREADS")
  port=$(free_port)
  run kvsieve-full kvsieve "$c" -- "$KS" serve "${common[@]}" --port "$port" --slots 4 --kv-pool-mb "$POOL_MB" \
    --max-conversations 1024 --queue -c 8192 --policy full
  port=$(free_port)
  run kvsieve-kvzap-q8q4 kvsieve "$c" -- "$KS" serve "${common[@]}" --port "$port" --slots 4 --kv-pool-mb "$POOL_MB" \
    --max-conversations 1024 --queue -c 8192 --policy kvzap:model=smollm2-135m-linear,tau=-3,sinks=4 --cache-type-k q8_0 --cache-type-v q4_0
  port=$(free_port)
  run kvsieve-snapkv kvsieve "$c" -- "$KS" serve "${common[@]}" --port "$port" --slots 4 --kv-pool-mb "$POOL_MB" \
    --max-conversations 1024 --queue -c 8192 --policy snapkv:ratio=0.5
  n=$(cells f16); np=$(( n / PER_CONV )); [ "$np" -ge 1 ] || np=1
  port=$(free_port)
  run llama-f16 llama "$c" -- "$LLAMACPP_BIN/llama-server" "${common[@]}" --port "$port" -c "$n" -np "$np" -fa on \
    --cache-ram 0
  n=$(cells q8_0/q4_0); np=$(( n / PER_CONV )); [ "$np" -ge 1 ] || np=1
  port=$(free_port)
  run llama-q8q4 llama "$c" -- "$LLAMACPP_BIN/llama-server" "${common[@]}" --port "$port" -c "$n" -np "$np" -fa on \
    -ctk q8_0 -ctv q4_0 --cache-ram 0
done

python3 scripts/vs_llama_server_report.py "$OUT"
