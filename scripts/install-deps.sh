#!/usr/bin/env bash
# Installs kvsieve's build dependencies from Debian 12 packages (needs root or sudo); extra package names given as
# arguments are installed too (scripts/fuzz.sh asks for clang and its fuzzer runtime). Then schemathesis from PyPI
# into build/schemathesis-venv (the server's OpenAPI conformance test).
set -euo pipefail
PKGS=(build-essential cmake pkg-config libopenblas-openmp-dev libpcre2-dev nlohmann-json3-dev libcli11-dev libboost-dev
      libgtest-dev libbenchmark-dev libtorch-dev libjemalloc-dev ccache clang-format gnuplot-nox python3 python3-pip python3-venv nginx-light "$@")
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# schemathesis (PyPI) for the server's OpenAPI conformance test (CTest Serve.OpenApiConformance), in a virtual
# environment under build/ (installed once; the test is skipped without it).
VENV="$(cd "$(dirname "$0")/.." && pwd)/build/schemathesis-venv"
if ! "$VENV/bin/schemathesis" --version >/dev/null 2>&1; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "schemathesis>=4.32,<5"
fi
