#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with AddressSanitizer and UndefinedBehaviorSanitizer) into
# build-fuzz/ and runs each one on its corpus in fuzz/corpus/<target>/ (unpacked from fuzz/corpus.tar.xz when absent,
# seeds from fuzz/seeds.sh; inputs that reach new code are merged in afterwards, each corpus is minimised with
# -merge=1 and the archive rewritten: commit fuzz/corpus.tar.xz). Usage: bash scripts/fuzz.sh [RUNS] [TARGET...]   RUNS: executions per target (default 1000000).
# A finding stops the run with the crashing input written to build-fuzz/findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-1000000}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(gguf safetensors tokenizer policy_spec chat_template api_request cache_file request_path)
bash scripts/install-deps.sh clang libclang-rt-14-dev libomp-dev
source scripts/ccache-env.sh
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSIEVE_FUZZ=ON \
  -DKVSIEVE_BUILD_TESTS=OFF -DKVSIEVE_BUILD_BENCH=OFF -DKVSIEVE_BUILD_TRAIN=OFF "${CCACHE_CMAKE_ARGS[@]}" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target $(printf 'fuzz_%s ' "${TARGETS[@]}") >/dev/null
mkdir -p build-fuzz/findings
[ -d fuzz/corpus/gguf ] || [ ! -f fuzz/corpus.tar.xz ] || bash scripts/fuzz-corpus.sh unpack
[ -d fuzz/corpus/gguf ] || bash fuzz/seeds.sh
for t in "${TARGETS[@]}"; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  echo "== fuzz_$t: $RUNS runs" >&2
  # New inputs go to the work folder; then only those that reach new code are merged into fuzz/corpus/<target>.
  ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "build-fuzz/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" -runs="$RUNS" \
    -max_len=65536 -rss_limit_mb=4096 -artifact_prefix=build-fuzz/findings/ -print_final_stats=1 \
    >"build-fuzz/fuzz_$t.log" 2>&1 || { tail -40 "build-fuzz/fuzz_$t.log" >&2; echo "fuzz_$t: FINDING (see build-fuzz/findings/)" >&2; exit 1; }
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done" "build-fuzz/fuzz_$t.log" >&2
  ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "build-fuzz/fuzz/fuzz_$t" -merge=1 "fuzz/corpus/$t" "$work" \
    >>"build-fuzz/fuzz_$t.log" 2>&1
  # Minimise: keep only the inputs that together reach the same code.
  rm -rf "build-fuzz/min/$t" && mkdir -p "build-fuzz/min/$t"
  ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "build-fuzz/fuzz/fuzz_$t" -merge=1 "build-fuzz/min/$t" "fuzz/corpus/$t" \
    >>"build-fuzz/fuzz_$t.log" 2>&1
  rm -rf "fuzz/corpus/$t" && mv "build-fuzz/min/$t" "fuzz/corpus/$t"
done
bash scripts/fuzz-corpus.sh pack
