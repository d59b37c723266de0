#!/usr/bin/env bash
# Installs kvsieve's build dependencies from Debian 12 packages (needs root or sudo): everything, or with --engine
# first only what bin/kvsieve needs (scripts/demo.sh); extra package names given as
# arguments are installed too (scripts/fuzz.sh asks for clang and its fuzzer runtime), without recommended packages.
# The test-only tools from PyPI are scripts/install-test-tools.sh's.
set -euo pipefail
# The engine (bin/kvsieve): what scripts/demo.sh needs.
ENGINE=(build-essential cmake pkg-config libopenblas-openmp-dev libpcre2-dev nlohmann-json3-dev libcli11-dev
        libboost-dev xz-utils ccache python3 python3-pip)
# The rest of the tree: tests (python3-numpy writes the tiny test models, tests/data/make_tiny_models.py),
# benchmarks, the trainers (bin/kvsieve-train: libtorch, jemalloc), plots and tooling.
DEV=(libgtest-dev libbenchmark-dev libtorch-dev libjemalloc-dev clang-format gnuplot-nox python3-numpy python3-venv nginx-light)
PKGS=("${ENGINE[@]}")
if [ "${1:-}" = "--engine" ]; then
  shift
else
  PKGS+=("${DEV[@]}")
fi
PKGS+=("$@")
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
