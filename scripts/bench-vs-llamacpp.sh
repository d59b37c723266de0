#!/usr/bin/env bash
# kvsieve bench against llama.cpp on the same GGUF files: prefill pp512 and decode tg128 at depth 0 and 4096,
# the same thread count, the two engines alternating test by test (the machine's noise hits both alike).
#
#   LLAMACPP_DIR=/path/to/llama.cpp bash scripts/bench-vs-llamacpp.sh MODEL.gguf [MODEL.gguf ...]
#
# LLAMACPP_DIR: a llama.cpp source tree built with CMake into build/ (docs/benchmarks.md names the commit and the
# commands). Env: THREADS (2), REPS (3), DEPTHS ("0 4096"), LLAMACPP_COMMIT (printed when LLAMACPP_DIR is not a git
# checkout, e.g. the tree vendored in a llama-cpp-python sdist). Prints one markdown table row per model and test.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMACPP_DIR:?set LLAMACPP_DIR to a llama.cpp tree built into build/ (see docs/benchmarks.md)}"
THREADS=${THREADS:-2}; REPS=${REPS:-3}; DEPTHS=${DEPTHS:-"0 4096"}
BIN="$LLAMACPP_DIR/build/bin"
[ -x "$BIN/llama-bench" ] || { echo "error: $BIN/llama-bench not found: build llama.cpp first" >&2; exit 1; }
[ -x build/bin/kvsieve ] || { echo "error: build/bin/kvsieve not found: run scripts/build.sh" >&2; exit 1; }
DB=build/llamacpp_depth_bench
if [ ! -x "$DB" ] || [ tools/llamacpp_depth_bench.cpp -nt "$DB" ]; then
  g++ -O2 -std=c++17 tools/llamacpp_depth_bench.cpp -I"$LLAMACPP_DIR/include" -I"$LLAMACPP_DIR/ggml/include" \
      -L"$BIN" -lllama -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$BIN" -o "$DB"
fi
isa="no AVX2"
grep -q -w avx2 /proc/cpuinfo && isa="AVX2 (no AVX-512)"
grep -q -w avx512f /proc/cpuinfo && isa="AVX-512"
grep -q -w avx512_vnni /proc/cpuinfo && isa="AVX-512 with VNNI"
echo "# $(date -u +%FT%TZ) CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $isa;" \
     "kvsieve $(git rev-parse --short HEAD), llama.cpp $(git -C "$LLAMACPP_DIR" rev-parse --short HEAD 2>/dev/null || echo "${LLAMACPP_COMMIT:-?}");" \
     "threads $THREADS, reps $REPS" >&2
echo "| model | test | kvsieve t/s | llama.cpp t/s | ratio |"
echo "|---|---|---|---|---|"
for model in "$@"; do
  name=$(basename "$model" .gguf)
  for depth in $DEPTHS; do
    for test in pp tg; do
      if [ $test = pp ]; then kargs=(-p 512 -n 0); largs=(512 0); label="pp512"; else kargs=(-p 0 -n 128); largs=(0 128); label="tg128"; fi
      [ "$depth" -gt 0 ] && label="$label @ d$depth"
      # kvsieve fills the depth with synthetic entries (untimed, like llama.cpp's fill; the timed work does not
      # depend on the cached values)
      k=$(build/bin/kvsieve bench -m "$model" "${kargs[@]}" -d "$depth" --fill random -r "$REPS" -t "$THREADS" 2>/dev/null \
          | awk -F'|' '/^\| (pp|tg)[0-9]/ {gsub(/ /, "", $3); print $3}')
      # llama.cpp: llama-bench itself at depth 0, the depth tool (same method) beyond.
      if [ "$depth" -eq 0 ]; then
        lout=$("$BIN/llama-bench" -m "$model" -p "${largs[0]}" -n "${largs[1]}" -t "$THREADS" -r "$REPS" -o jsonl 2>/dev/null)
      else
        lout=$("$DB" "$model" "${largs[@]}" "$THREADS" "$REPS" "$depth")
      fi
      l=$(printf '%s\n' "$lout" | python3 -c 'import sys, json
r = json.loads(sys.stdin.readline())
print("%.2f±%.2f" % (r["avg_ts"], r["stddev_ts"]))')
      ratio=$(python3 -c "print('%.2f' % (float('${k%%±*}') / float('${l%%±*}')))")
      echo "| $name | $label | $k | $l | $ratio× |"
    done
  done
done
