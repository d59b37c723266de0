#!/usr/bin/env bash
# The .deb a packager would ship: builds it with CPack (component engine: bin/kvsieve, the shipped predictors, the
# docs), installs it (dpkg -i when run as root and no kvsieve package is installed yet, as in CI; else dpkg -x into
# a scratch folder), runs the installed kvsieve generate on SmolLM2 with a learned preset that gives no model=, so
# that the predictor must come from the installed share/kvsieve/models, and removes it: after dpkg -r no file of
# the package is left. Exit 77 (skipped) without the downloaded model or dpkg-deb.
#   bash tests/package_test.sh BUILD_DIR MODEL.gguf
set -euo pipefail
build=$(cd "$1" && pwd); model=$2
[ -f "$model" ] || { echo "skipped: no model at $model (scripts/get-model.sh)"; exit 77; }
command -v dpkg-deb >/dev/null || { echo "skipped: dpkg-deb not found"; exit 77; }
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
(cd "$build" && cpack -G DEB -B "$scratch/pkg" >"$scratch/cpack.log" 2>&1) || { cat "$scratch/cpack.log"; exit 1; }
deb=$(ls "$scratch"/pkg/kvsieve*.deb | head -n 1)
echo "package: $(basename "$deb") ($(stat -c %s "$deb") bytes)"
listing=$(dpkg-deb -c "$deb")
grep -q './usr/bin/kvsieve$' <<<"$listing" || { echo "FAIL: the package has no /usr/bin/kvsieve"; exit 1; }
grep -q 'share/kvsieve/models/wgkv/.*/model.safetensors' <<<"$listing" || { echo "FAIL: no WG-KV gates"; exit 1; }
if grep -q 'kvsieve-train\|libtorch' <<<"$listing"; then echo "FAIL: the package carries the trainers"; exit 1; fi

system=0
if [ "$(id -u)" = 0 ] && ! dpkg -s kvsieve >/dev/null 2>&1; then system=1; fi
if [ $system = 1 ]; then
  # A failed dpkg -i leaves the files unpacked: remove them before failing.
  dpkg -i "$deb" >/dev/null || { dpkg -r kvsieve >/dev/null 2>&1 || true; echo "FAIL: dpkg -i did not install"; exit 1; }
  root=""
else
  dpkg -x "$deb" "$scratch/root"
  root="$scratch/root"
fi
bin="$root/usr/bin/kvsieve"
# Only the installed folder may provide the predictor: no search path from the environment, no user's folder.
out=$(env -u KVSIEVE_PREDICTOR_PATH XDG_DATA_HOME="$scratch/no-user-predictors" "$bin" generate -m "$model" --policy wgkv --chat -p "What is the capital of France?" \
  -n 8 --temp 0 2>&1) || { echo "$out"; echo "FAIL: the installed kvsieve did not run"; [ $system = 1 ] && dpkg -r kvsieve >/dev/null; exit 1; }
echo "$out" | tail -n 3
if [ $system = 1 ]; then
  files=$(dpkg -L kvsieve | grep -v '/$' || true)
  dpkg -r kvsieve >/dev/null
  left=0
  for f in $files; do [ -f "$f" ] && { echo "left after removal: $f"; left=1; }; done
  [ $left = 0 ] || { echo "FAIL: files left after dpkg -r"; exit 1; }
  [ ! -e /usr/share/kvsieve ] || { echo "FAIL: /usr/share/kvsieve left after dpkg -r"; exit 1; }
  echo "installed with dpkg -i, ran, removed with dpkg -r: nothing left"
else
  echo "unpacked with dpkg -x (not root, or a kvsieve package is already installed), ran"
fi
