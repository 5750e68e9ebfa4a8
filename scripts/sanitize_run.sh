#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer (gcc): a
# CPU-only build in its own folder, then ctest, each sanitizer report a failure (UBSan does not
# recover). Not part of CI: the build and run take about 45 minutes on two cores.
# Left out, as artifacts of the instrumented build rather than findings: libtandem_client_install_test
# (it links an outside program against the instrumented library without the ASan runtime) and the
# SmolLM2 quant ladder and soak (their time limits assume an uninstrumented build).
# Env: BUILD_DIR (default build-sanitize), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-sanitize}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CUDA=OFF -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$build" -j "${JOBS:-$(nproc)}"
if [ -z "${TANDEM_SMOLLM2_GGUF:-}" ]; then
  TANDEM_SMOLLM2_GGUF=$(bash scripts/fetch_model.sh) || TANDEM_SMOLLM2_GGUF=
  export TANDEM_SMOLLM2_GGUF
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
ctest --test-dir "$build" --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900 \
  -E "^(libtandem_client_install_test|smollm2_quant_ladder|smollm2_soak)$"
