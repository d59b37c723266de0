#!/usr/bin/env bash
# Installs the tools only the tests use, from PyPI, into virtual environments under build/ (each once):
# schemathesis into build/schemathesis-venv (the server's OpenAPI conformance test, CTest Serve.OpenApiConformance;
# the test is skipped without it) and lm-evaluation-harness with its api extra only (no torch) into
# build/lm-eval-venv (CTest Serve.LmEvalHarness, skipped without it). scripts/test.sh runs it; the demo does not
# need it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$(cd "$(dirname "$0")/.." && pwd)/build/schemathesis-venv"
if ! "$VENV/bin/schemathesis" --version >/dev/null 2>&1; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "schemathesis>=4.32,<5"
fi
LM_VENV="$(cd "$(dirname "$0")/.." && pwd)/build/lm-eval-venv"
if ! "$LM_VENV/bin/lm_eval" --help >/dev/null 2>&1; then
  mkdir -p "$(dirname "$LM_VENV")"
  python3 -m venv "$LM_VENV"
  "$LM_VENV/bin/pip" install -q --disable-pip-version-check "lm-eval[api]>=0.4.13,<0.5"
fi
