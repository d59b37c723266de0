#!/usr/bin/env bash
# Runs test_openai_client.py with the official `openai` Python client (installed from PyPI into a virtual
# environment under the build folder, once) against `kvsieve serve` started here on a free loopback port.
# Usage: run_openai_tests.sh KVSIEVE_BINARY MODEL.gguf VENV_DIR
set -euo pipefail
BIN=$1 MODEL=$2 VENV=$3
HERE=$(cd "$(dirname "$0")" && pwd)
[ -f "$MODEL" ] || { echo "$MODEL is missing: run 'bash scripts/get-model.sh' first" >&2; exit 1; }
if ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "openai>=1.40,<3"
fi
LOG=$(mktemp)
"$BIN" serve -m "$MODEL" --port 0 --slots 4 -c 2048 -t 2 2>"$LOG" &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; rm -f "$LOG"; }
trap cleanup EXIT
PORT=""
for _ in $(seq 1 300); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$LOG" | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$LOG" >&2; echo "the server exited before listening" >&2; exit 1; }
  sleep 0.1
done
[ -n "$PORT" ] || { cat "$LOG" >&2; echo "the server did not start listening" >&2; exit 1; }
"$VENV/bin/python" "$HERE/test_openai_client.py" "http://127.0.0.1:$PORT"
# A clean stop: SIGTERM ends the server with status 0.
kill -TERM "$PID"
wait "$PID"
echo "server stopped cleanly"
