#!/usr/bin/env bash
# On the GPU machine, in one call: build for sm_90, the attention kernels' gpu tests, then the
# long-prompt figures of a random Qwen3-8B-shaped model (issue 21). Env: STEPS (default "build test
# bench"), TYPES (default Q4_K_M), PRESET (default qwen3-8b), VARIANTS: ';'-separated environment
# settings each bench line is also run under (e.g. "TANDEM_FLASH_KERNEL=wmma"), BENCH (';'-separated
# bench argument lists), TARGETS (build only these CMake targets; tandem-model and the tests' own
# are needed), TESTS (test binaries run, by name; default the attention kernels').
# Usage (repo root, .devdeps/ alongside): bash scripts/gpu_long_run.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu} steps=${STEPS:-build test bench} preset=${PRESET:-qwen3-8b}
types=${TYPES:-Q4_K_M} variants=${VARIANTS:-} targets=${TARGETS:-}
tests=${TESTS:-kernels_attention_test kernels_flash_attention_test kernels_forward_kernels_test}
bench=${BENCH:--p 2048,16384 -n 128 -r 2;-p 0 -n 128 -d 16384 -r 2 --no-ceilings --kv f16;-p 0 -n 128 -d 16384 -r 2 --no-ceilings --kv q8_0}
source scripts/gpu_env.sh
has() { [[ " $steps " == *" $1 "* ]]; }
tm=$build/client/tandem_model/tandem-model
date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if has build; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    >/tmp/long-configure.log 2>&1 || { tail -20 /tmp/long-configure.log; exit 1; }
  cmake --build "$build" -j 16 ${targets:+--target $targets} -- -k 0 >/tmp/long-build.log 2>&1 ||
    { grep -E "error|FAILED" /tmp/long-build.log | head -30; }
  echo "build done at $SECONDS s"
fi
if has bench; then
  for t in $types; do "$tm" make --preset "$preset" --type "$t" --row-pool 256 -o "/tmp/long-$t.gguf" -q & done
fi
if has test; then
  for k in $tests; do
    bin=$(find "$build/tests" -type f -name "$k" | head -1)
    [[ -n $bin ]] || { echo "$k: not built"; continue; }
    echo "# $k"
    "$bin" >"${OUT:-/tmp}/$k.log" 2>&1
    grep -E "^\[  (PASSED|FAILED) |Failure|CUDA error|Segmentation" "${OUT:-/tmp}/$k.log" | head -12
  done
  echo "tests done at $SECONDS s"
fi
if has bench; then
  wait
  for t in $types; do
    m=/tmp/long-$t.gguf
    [[ -f $m ]] || { echo "make $t failed"; continue; }
    IFS=';' read -ra lines <<<"$bench"
    IFS=';' read -ra envs <<<"${variants:-}"
    for args in "${lines[@]}"; do
      for e in "" "${envs[@]}"; do
        echo "# ${e:-default}: bench $args"
        env $e "$tm" bench -m "$m" $args 2>&1 | grep -E "^ceilings|^\| [^ ]+\.gguf" | sed -E 's/ +/ /g'
      done
    done
    rm -f "$m"
  done
fi
date -u +%FT%TZ
