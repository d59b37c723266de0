#!/usr/bin/env bash
# Installs the dependencies, builds and runs every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2
