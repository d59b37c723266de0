#!/usr/bin/env bash
# kvsieve bench against llama.cpp on the same GGUF files: prefill pp512 and decode tg128 at depth 0 and 4096,
# the same thread count and KV cache types, the two engines alternating test by test (the machine's noise hits both
# alike).
#
#   LLAMACPP_DIR=/path/to/llama.cpp [LLAMACPP_BUILD=DIR] bash scripts/bench-vs-llamacpp.sh MODEL.gguf [MODEL.gguf ...]
#
# LLAMACPP_DIR: a llama.cpp source tree of the current API (e.g. the tree vendored in the newest llama-cpp-python sdist
# on PyPI) with its libraries built by CMake into LLAMACPP_BUILD (default $LLAMACPP_DIR/build); docs/benchmarks.md
# names the commit and the commands. llama.cpp runs through tools/llamacpp_depth_bench.cpp (llama-bench's method,
# the cache filled to the depth untimed) with flash attention on, as its users run it. Env: THREADS (2), REPS (3),
# DEPTHS ("0 4096"), CACHE_TYPES (space-separated KV types, "K/V" or one type for both: "f16 q8_0 q4_0"; default
# "f16"), LLAMACPP_COMMIT (printed when LLAMACPP_DIR is not a git checkout). Prints one markdown table row per model,
# cache type and test.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMACPP_DIR:?set LLAMACPP_DIR to a llama.cpp source tree whose libraries are built (see docs/benchmarks.md)}"
THREADS=${THREADS:-2}; REPS=${REPS:-3}; DEPTHS=${DEPTHS:-"0 4096"}; CACHE_TYPES=${CACHE_TYPES:-f16}
BIN="${LLAMACPP_BUILD:-$LLAMACPP_DIR/build}/bin"
[ -e "$BIN/libllama.so" ] || { echo "error: $BIN/libllama.so not found: build llama.cpp first" >&2; exit 1; }
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
echo "| model | KV cache (K/V) | test | kvsieve t/s | llama.cpp t/s | ratio |"
echo "|---|---|---|---|---|---|"
for model in "$@"; do
  name=$(basename "$model" .gguf)
  for ct in $CACHE_TYPES; do
  tk=${ct%%/*}; tv=${ct##*/}
  for depth in $DEPTHS; do
    for test in pp tg; do
      if [ $test = pp ]; then kargs=(-p 512 -n 0); largs=(512 0); label="pp512"; else kargs=(-p 0 -n 128); largs=(0 128); label="tg128"; fi
      [ "$depth" -gt 0 ] && label="$label @ d$depth"
      # kvsieve fills the depth with synthetic entries (untimed, like llama.cpp's fill; the timed work does not
      # depend on the cached values)
      k=$(build/bin/kvsieve bench -m "$model" "${kargs[@]}" -d "$depth" --fill random -r "$REPS" -t "$THREADS" \
          --cache-type-k "$tk" --cache-type-v "$tv" 2>/dev/null \
          | awk -F'|' '/^\| (pp|tg)[0-9]/ {gsub(/ /, "", $3); print $3}')
      lout=$("$DB" "$model" "${largs[@]}" "$THREADS" "$REPS" "$depth" "$tk" "$tv" on)
      l=$(printf '%s\n' "$lout" | python3 -c 'import sys, json
r = json.loads(sys.stdin.readline())
print("%.2f±%.2f" % (r["avg_ts"], r["stddev_ts"]))')
      ratio=$(python3 -c "print('%.2f' % (float('${k%%±*}') / float('${l%%±*}')))")
      echo "| $name | $tk/$tv | $label | $k | $l | $ratio× |"
    done
  done
  done
done
