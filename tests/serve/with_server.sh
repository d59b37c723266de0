#!/usr/bin/env bash
# Starts `kvsieve serve` on a free loopback port, runs a command with the server's base URL as its last argument,
# then stops the server with SIGTERM and requires a clean exit (status 0).
# Usage: with_server.sh KVSIEVE_BINARY MODEL.gguf "SERVER OPTIONS" COMMAND [ARGS...]
set -euo pipefail
BIN=$1 MODEL=$2 OPTS=$3
shift 3
[ -f "$MODEL" ] || { echo "$MODEL is missing: run 'bash scripts/get-model.sh' first" >&2; exit 1; }
LOG=$(mktemp)
# shellcheck disable=SC2086
"$BIN" serve -m "$MODEL" --port 0 $OPTS 2>"$LOG" &
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
"$@" "http://127.0.0.1:$PORT"
kill -TERM "$PID"
wait "$PID"
echo "server stopped cleanly"
