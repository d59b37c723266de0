#!/usr/bin/env bash
# Runs schemathesis (PyPI; scripts/install-deps.sh installs it into build/schemathesis-venv) against `kvsieve serve`
# on a free loopback port with the tiny test model: requests generated from docs/openapi.json as the server serves
# it (GET /openapi.json), a bounded number per operation, each answer checked for no 5xx and for a status, content
# type and body the document describes. Exits 77 (CTest: skipped) when schemathesis is not installed.
# Usage: run_schemathesis.sh KVSIEVE_BINARY MODEL.gguf VENV_DIR [MAX_EXAMPLES]
set -euo pipefail
BIN=$1 MODEL=$2 VENV=$3 MAX_EXAMPLES=${4:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
ST="$VENV/bin/schemathesis"
[ -x "$ST" ] || ST=$(command -v schemathesis || true)
if [ -z "$ST" ]; then
  echo "SKIPPED: schemathesis is not installed (bash scripts/install-deps.sh installs it into build/schemathesis-venv)"
  exit 77
fi
KEY=schemathesis-key-0123456789
SAVED=$(mktemp -d)
REPORT=$(mktemp -d)
trap 'rm -rf "$SAVED" "$REPORT"' EXIT
run() {
  # The stateful phase may chain a save into a restore; the seed keeps runs reproducible.
  (cd "$REPORT" && "$ST" run "$1/openapi.json" -H "Authorization: Bearer $KEY" \
     --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
     --max-examples "$MAX_EXAMPLES" --workers 1 --seed 1 --generation-database none --request-timeout 60 --no-color)
}
export -f run
export ST KEY MAX_EXAMPLES REPORT
bash "$HERE/with_server.sh" "$BIN" "$MODEL" \
  "--slots 2 -c 256 -t 1 --metrics --chat-template chatml --api-key $KEY --cache-dir $SAVED --max-body-mb 1" \
  bash -c 'run "$0"'
