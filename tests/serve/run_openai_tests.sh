#!/usr/bin/env bash
# Runs test_openai_client.py with the official `openai` Python client (installed from PyPI into a virtual
# environment, once) against `kvsieve serve` on a free loopback port.
# Usage: run_openai_tests.sh KVSIEVE_BINARY MODEL.gguf VENV_DIR
set -euo pipefail
BIN=$1 MODEL=$2 VENV=$3
HERE=$(cd "$(dirname "$0")" && pwd)
if ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "openai>=1.40,<3"
fi
SAVED=$(mktemp -d)
trap 'rm -rf "$SAVED"' EXIT
bash "$HERE/with_server.sh" "$BIN" "$MODEL" "--alias m --slots 4 -c 2048 -t 2 --max-body-mb 1 --metrics --cache-dir $SAVED" "$VENV/bin/python" \
  "$HERE/test_openai_client.py"
