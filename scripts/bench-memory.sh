#!/usr/bin/env bash
# Peak resident memory of kvsieve against llama.cpp on the same GGUF file, in one run, 2 threads:
#   - `kvsieve --help` (and `llama-completion --help` beside it);
#   - one generation (-n 16, greedy) from a prompt of 512 and of 8192 tokens, each with the full cache (F16 keys
#     and values) and with the learned cache (kvsieve: KVzap policy, Q8_0 keys, Q4_0 values; llama.cpp: its full
#     cache with -ctk q8_0 -ctv q4_0), llama.cpp with flash attention on; both engines get the same -c per row;
#     kvsieve also with --prefill-chunk 512 (llama.cpp's micro-batch) and, for the learned cache, with
#     --compress-during-prefill as well (the cache bounded while the prompt is read);
#   - an idle server (`kvsieve serve`, `llama-server`), read once GET /health answers.
# A generation's figure is the peak resident set of the process (`/usr/bin/time -f %M`, KiB); a server's is VmHWM
# (and VmRSS) from /proc/PID/status. The mapped model's pages count as resident once touched, in both engines.
#
#   LLAMACPP_BIN=/tmp/llamacpp/build/bin bash scripts/bench-memory.sh MODEL.gguf
#
# LLAMACPP_BIN: the folder holding llama.cpp's llama-completion (or a llama-cli that still takes -no-cnv) and
# llama-server. Env: THREADS (2), PROMPTS (prompt lengths in tokens, "512 8192"), SERVE_CTX (-c of both servers,
# 4096: positions per sequence for kvsieve, whose pool grows on demand; the cells of llama-server's cache), KVZAP
# (the learned predictor, models/kvzap/smollm2-135m-linear), TEXT (the document the prompts are cut from, repeated
# as needed: data/1933-treasure-coast-hurricane.txt), LLAMACPP_VERSION (added to the header, e.g. the
# llama-cpp-python sdist it came from). The prompt files are written to a temporary folder and removed at the end.
# Prints a markdown table (kvsieve MiB, llama.cpp MiB, kvsieve / llama.cpp) after a header line.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: LLAMACPP_BIN=DIR bash scripts/bench-memory.sh MODEL.gguf}
: "${LLAMACPP_BIN:?set LLAMACPP_BIN to the folder of the built llama.cpp binaries (llama-completion, llama-server)}"
THREADS=${THREADS:-2}; PROMPTS=${PROMPTS:-"512 8192"}; SERVE_CTX=${SERVE_CTX:-4096}
KVZAP=${KVZAP:-models/kvzap/smollm2-135m-linear}; TEXT=${TEXT:-data/1933-treasure-coast-hurricane.txt}
KS=build/bin/kvsieve
LEARNED=(--policy "kvzap:model=$KVZAP,tau=-3,sinks=4" --cache-type-k q8_0 --cache-type-v q4_0)
[ -x "$KS" ] || { echo "error: $KS not found: run scripts/build.sh" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time (GNU time) not found" >&2; exit 1; }
if [ -x "$LLAMACPP_BIN/llama-completion" ]; then LC="$LLAMACPP_BIN/llama-completion"; else LC="$LLAMACPP_BIN/llama-cli"; fi
LS="$LLAMACPP_BIN/llama-server"
if [ ! -x "$LC" ] || [ ! -x "$LS" ]; then
  echo "error: llama-completion/llama-cli or llama-server missing in $LLAMACPP_BIN" >&2; exit 1
fi

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

# a prompt of exactly N tokens (kvsieve's tokenizer; llama.cpp's gives the same ids for this vocabulary): the
# longest prefix of the text, repeated, whose token count is at most N (binary search over characters)
make_prompt() {
  python3 - "$KS" "$MODEL" "$TEXT" "$1" "$2" <<'EOF'
import subprocess, sys
ks, model, text, n, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
doc = open(text, encoding="utf-8").read().strip()
def ntok(s):
    r = subprocess.run([ks, "tokenize", "-m", model, "-p", s], capture_output=True, text=True, check=True)
    return len(r.stdout.split())
full = doc
while ntok(full) <= n:
    full += "\n\n" + doc
lo, hi = 1, len(full)          # ntok(full[:lo]) <= n < ntok(full[:hi])
while hi - lo > 1:
    mid = (lo + hi) // 2
    if ntok(full[:mid]) <= n: lo = mid
    else: hi = mid
p = full[:lo].rstrip()
open(out, "w", encoding="utf-8").write(p)
print(ntok(p))
EOF
}

# peak resident set of a command in MiB (its output goes to LOG)
peak() {
  local log=$1; shift
  /usr/bin/time -f %M -o "$tmp/rss" "$@" >"$log" 2>&1 </dev/null || { echo "error: failed: $* (see $log)" >&2; tail -5 "$log" >&2; exit 1; }
  awk '{ printf "%.1f", $1 / 1024 }' "$tmp/rss"
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start a server, wait for GET /health, write "VmHWM VmRSS" in MiB to OUT, stop it
idle_server() {
  local port=$1 log=$2 out=$3; shift 3
  "$@" >"$log" 2>&1 </dev/null &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "error: server exited: $* (see $log)" >&2; tail -5 "$log" >&2; exit 1; }
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "error: no /health after 120 s: $*" >&2; exit 1; }
  sleep 1
  awk '/^VmHWM:/ { h = $2 } /^VmRSS:/ { r = $2 } END { printf "%.1f %.1f\n", h / 1024, r / 1024 }' "/proc/$pid/status" >"$out"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

ratio() { python3 -c "print('%.2f×' % ($1 / $2))"; }
row() { echo "| $1 | $2 | $3 | $(ratio "$2" "$3") |"; }

isa="no AVX2"
grep -q -w avx2 /proc/cpuinfo && isa="AVX2 (no AVX-512)"
grep -q -w avx512f /proc/cpuinfo && isa="AVX-512"
grep -q -w avx512_vnni /proc/cpuinfo && isa="AVX-512 with VNNI"
lver=$("$LC" --version 2>&1 | awk '/^version:/ { $1 = ""; sub(/^ /, ""); print; exit }')
echo "# $(date -u +%FT%TZ) CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $isa;" \
     "kvsieve $(git rev-parse --short HEAD), llama.cpp ${lver:-?}${LLAMACPP_VERSION:+ ($LLAMACPP_VERSION)};" \
     "model $(basename "$MODEL"), threads $THREADS"
echo
echo "| what | kvsieve MiB | llama.cpp MiB | ratio |"
echo "|---|---|---|---|"
k=$(peak "$tmp/help.log" "$KS" --help); l=$(peak "$tmp/lhelp.log" "$LC" --help)
row "\`--help\` (llama.cpp: \`$(basename "$LC") --help\`)" "$k" "$l"
for n in $PROMPTS; do
  got=$(make_prompt "$n" "$tmp/prompt-$n.txt")
  [ "$got" = "$n" ] || echo "note: the $n-token prompt has $got tokens" >&2
  ctx=$(( (n + 16 + 255) / 256 * 256 ))   # prompt and answer, rounded up to llama.cpp's 256-token padding
  common=(-m "$MODEL" -f "$tmp/prompt-$n.txt" -n 16 --temp 0 -t "$THREADS" -c "$ctx")
  k=$(peak "$tmp/k-full-$n.log" "$KS" generate "${common[@]}")
  l=$(peak "$tmp/l-full-$n.log" "$LC" "${common[@]}" -no-cnv -fa on)
  row "generate, $n-token prompt, -c $ctx, full cache (F16 K/V)" "$k" "$l"
  k=$(peak "$tmp/k-full-c-$n.log" "$KS" generate "${common[@]}" --prefill-chunk 512)
  row "generate, $n-token prompt, -c $ctx, full cache, kvsieve --prefill-chunk 512 (llama.cpp's micro-batch)" "$k" "$l"
  k=$(peak "$tmp/k-learned-$n.log" "$KS" generate "${common[@]}" "${LEARNED[@]}")
  l=$(peak "$tmp/l-q-$n.log" "$LC" "${common[@]}" -no-cnv -fa on -ctk q8_0 -ctv q4_0)
  row "generate, $n-token prompt, -c $ctx, kvsieve KVzap τ=-3 + Q8_0/Q4_0 vs llama.cpp -ctk q8_0 -ctv q4_0" "$k" "$l"
  k=$(peak "$tmp/k-learned-c-$n.log" "$KS" generate "${common[@]}" "${LEARNED[@]}" --prefill-chunk 512)
  row "the same, kvsieve --prefill-chunk 512" "$k" "$l"
  k=$(peak "$tmp/k-learned-d-$n.log" "$KS" generate "${common[@]}" "${LEARNED[@]}" --prefill-chunk 512 \
    --compress-during-prefill)
  row "the same, kvsieve --prefill-chunk 512 --compress-during-prefill" "$k" "$l"
done
p=$(free_port); idle_server "$p" "$tmp/k-serve.log" "$tmp/k-serve" "$KS" serve -m "$MODEL" --port "$p" -t "$THREADS" -c "$SERVE_CTX"
p=$(free_port); idle_server "$p" "$tmp/l-serve.log" "$tmp/l-serve" "$LS" -m "$MODEL" --port "$p" -t "$THREADS" -c "$SERVE_CTX"
read -r kh kr <"$tmp/k-serve"; read -r lh lr <"$tmp/l-serve"
row "idle server, -c $SERVE_CTX, VmHWM" "$kh" "$lh"
row "idle server, -c $SERVE_CTX, VmRSS" "$kr" "$lr"
