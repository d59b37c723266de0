#!/usr/bin/env bash
# Configures and builds kvsieve in build/ (Release), through ccache (scripts/ccache-env.sh) when it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${CCACHE_CMAKE_ARGS[@]}" >/dev/null
cmake --build build -j "$(nproc)"
