#!/usr/bin/env bash
# Installs the dependencies, builds and runs every test with CTest: once with the libtorch training stack
# (build/), once without it (build-notrain/: the engine alone must build and pass).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
(cd build && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2)
cmake -S . -B build-notrain -DCMAKE_BUILD_TYPE=Release -DKVSIEVE_BUILD_TRAIN=OFF -DKVSIEVE_BUILD_BENCH=OFF >/dev/null
cmake --build build-notrain -j "$(nproc)"
(cd build-notrain && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2)
