#!/usr/bin/env bash
# Builds tandem and runs every test (the README's test command). GPU tests skip without a GPU.
# Env: BUILD_DIR (default build), TANDEM_CUDA (AUTO|ON|OFF), TANDEM_CUDA_ARCHS (default: native with a
# GPU, else 90 so a GPU-less machine still compile-checks the kernels quickly), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# The default model (SmolLM2) feeds the tokenizer and model-quality tests; they skip without it.
if [ -z "${TANDEM_SMOLLM2_GGUF:-}" ]; then
  TANDEM_SMOLLM2_GGUF=$(bash scripts/fetch_model.sh) || TANDEM_SMOLLM2_GGUF=
  export TANDEM_SMOLLM2_GGUF
fi
build=${BUILD_DIR:-build}
archs=${TANDEM_CUDA_ARCHS:-}
if [ -z "$archs" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then archs=native; else archs=90; fi
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA="${TANDEM_CUDA:-AUTO}" \
  -DCMAKE_CUDA_ARCHITECTURES="$archs"
cmake --build "$build" -j "${JOBS:-$(nproc)}"
# The full output goes to $build/ctest.log; the screen gets it without ctest's list of the tests that
# did not run (a line per skipped test, over a hundred without a GPU): test_summary.py ends the run
# instead with one line per skip reason, saying what would enable those tests, then the pass/fail
# line. The JUnit file holds each test's output, so the reasons.
junit="$(cd "$build" && pwd)/ctest-junit.xml"
set +e
ctest --test-dir "$build" --output-on-failure -j "${JOBS:-$(nproc)}" --output-junit "$junit" \
    2>&1 | tee "$build/ctest.log" | awk '
  /^The following tests did not run:/ { listing = 1; next }
  listing && /^[ \t]+[0-9]+ - / { next }
  { listing = 0; print; fflush() }'
rc=${PIPESTATUS[0]}
set -e
python3 scripts/test_summary.py "$junit" "$build/ctest.log"
exit "$rc"
