#!/usr/bin/env bash
# The engine without libtorch, built with clang, AddressSanitizer and UndefinedBehaviorSanitizer into build-san/:
# runs the test suite under both sanitizers (all but the slow end-to-end, SmolLM2 and thread-count tests: below) (the
# engine must also build and pass without the training stack), then a short run of every libFuzzer target on its committed corpus (fuzz/corpus.tar.xz, unpacked into
# build-san/fuzz-corpus/<target>/; new inputs go to a scratch folder, the corpus is not changed). Any sanitizer report fails the run.
# Usage: bash scripts/sanitize.sh [SECONDS_PER_FUZZ_TARGET]   (default 20; 0 skips the fuzz smoke run)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}
bash scripts/install-deps.sh clang libclang-rt-14-dev libomp-dev
source scripts/ccache-env.sh
# -O1 with line tables only (-g1, set by KVSIEVE_FUZZ): what the sanitizers' reports need, and a build that takes
# less time than -O2 -g.
CC=clang CXX=clang++ cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DKVSIEVE_FUZZ=ON \
  -DKVSIEVE_BUILD_TRAIN=OFF -DKVSIEVE_BUILD_BENCH=OFF "${CCACHE_CMAKE_ARGS[@]}" >/dev/null
cmake --build build-san -j "$(nproc)"
bash scripts/get-model.sh smollm2-135m >/dev/null  # the server's tests run SmolLM2
# Leaks are reported too (detect_leaks is on by default on x86-64 Linux; the OpenMP runtime's own thread memory is
# suppressed, tests/lsan.supp); halt at the first UBSan report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_stack_use_after_return=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Under the sanitizers: every test but the slow end-to-end ones (CTest label slow: the command-line runs, which call
# the same code as the unit tests through the binary, and the server's client suites), the SmolLM2 ones (label model:
# the small models' kernels on a 135M model, minutes under ASan) and the thread-count invariance (the same forward
# at 1 and 2 threads); then the hostile-client suite, the server's own probes. Those all run in the optimised
# build, as does the .deb's test (it packages the binary it tests).
(cd build-san && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2 -LE 'slow|model' \
  -E '^(SmolLM2|Package|ThreadInvariance)\.')
(cd build-san && OMP_WAIT_POLICY=passive ctest --output-on-failure -R '^Serve\.HostileClients$')
[ "$SECONDS_PER_TARGET" -gt 0 ] || exit 0
bash scripts/fuzz-corpus.sh unpack build-san/fuzz-corpus
for src in fuzz/fuzz_*.cpp; do
  t=$(basename "$src" .cpp)
  t=${t#fuzz_}
  scratch=build-san/fuzz-scratch/$t
  mkdir -p "$scratch" build-san/findings
  echo "== fuzz_$t: ${SECONDS_PER_TARGET}s on its committed corpus" >&2
  ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "build-san/fuzz/fuzz_$t" "$scratch" "build-san/fuzz-corpus/$t" \
    -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -rss_limit_mb=4096 -artifact_prefix=build-san/findings/ \
    -print_final_stats=1 >"build-san/fuzz_$t.log" 2>&1 \
    || { tail -40 "build-san/fuzz_$t.log" >&2; echo "fuzz_$t: FINDING (input in build-san/findings/)" >&2; exit 1; }
  grep -E "^stat::number_of_executed_units" "build-san/fuzz_$t.log" >&2
done
