#!/usr/bin/env bash
# Installs the dependencies, builds, and generates a story with the bundled stories260K model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/bin/kvsieve generate -m models/stories260K.gguf -p "Once upon a time" -n 300 --temp 0.8 --seed 42 \
  --policy tova:budget=96
