#!/usr/bin/env bash
# Installs the tools only the tests use, from PyPI, into virtual environments under build/ (each once):
# schemathesis into build/schemathesis-venv (the server's OpenAPI conformance test, CTest Serve.OpenApiConformance;
# the test is skipped without it). scripts/test.sh runs it; the demo does not need it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$(cd "$(dirname "$0")/.." && pwd)/build/schemathesis-venv"
if ! "$VENV/bin/schemathesis" --version >/dev/null 2>&1; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "schemathesis>=4.32,<5"
fi
