#!/usr/bin/env bash
# Configures and builds kvsieve in build/ (Release), through ccache (scripts/ccache-env.sh) when it is installed.
#   bash scripts/build.sh              every target: bin/kvsieve, bin/kvsieve-train, the tests, benchmarks, tools
#   bash scripts/build.sh TARGET...    only those (CMake target names: kvsieve_cli is bin/kvsieve, kvsieve_train_cli
#                                      bin/kvsieve-train), as scripts/demo.sh builds only what it runs
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${CCACHE_CMAKE_ARGS[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$(nproc)" "${targets[@]}"
