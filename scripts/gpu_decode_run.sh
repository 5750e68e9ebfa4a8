#!/usr/bin/env bash
# On a GPU machine, in one call: the GPU test binaries in BIN, the output head's kernel timings
# (int8, float and int8-plus-residual x), then decode benches of random Qwen3-8B-shaped models of
# each type with f16 and q8_0 KV (the first type also with each head path) and of one larger
# shape; the models are made on the CPU while the tests run.
# Usage (repo root): BIN=DIR_WITH_BINARIES bash scripts/gpu_decode_run.sh
# Env: TYPES (default "Q4_K_M Q6_K Q8_0"), BIG (default qwen3-32b, its Q4_K_M; "" for none),
# BENCH_ARGS (default "-p 512 -n 128 -r 2"), TESTS (as in gpu_tests.sh).
set -uo pipefail
bin=${BIN:?BIN=directory holding tandem-model and test binaries}
types=${TYPES:-Q4_K_M Q6_K Q8_0} big=${BIG-qwen3-32b} args=${BENCH_ARGS:--p 512 -n 128 -r 2}
# The library path first: the makes below start before gpu_tests.sh (which also sets it) runs.
[[ -d .devdeps ]] && export LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
declare -A made
for t in $types; do
  "$bin/tandem-model" make --preset qwen3-8b --type "$t" --row-pool 256 -o "/tmp/tandem-8b-$t.gguf" -q &
  made[8b-$t]=$!
done
if [[ -n "$big" ]]; then
  "$bin/tandem-model" make --preset "$big" --type Q4_K_M --row-pool 256 -o /tmp/tandem-big.gguf -q &
  made[big]=$!
fi
source "$(dirname "${BASH_SOURCE[0]}")/gpu_tests.sh"  # environment, GPUs, the GPU test binaries
"$bin/kernels_matvec_test" --gtest_filter=big.head_bandwidth 2>&1 | grep "^head"
echo "$(date -u +%FT%TZ) (the device's git HEAD is the session's base commit, not the tree's)"
bench() { "$bin/tandem-model" bench -m "$@" 2>&1 | grep -E "^ceilings|^\| [^ ]+\.gguf" | sed -E 's/ +/ /g'; }
first=1
for t in $types; do
  wait "${made[8b-$t]}" || { echo "make $t failed"; continue; }
  m=/tmp/tandem-8b-$t.gguf
  bench "$m" $args --kv f16
  bench "$m" $args --kv q8_0 | grep tg
  if ((first)); then
    echo "head as floats:"; TANDEM_CUDA_HEAD_FLOAT=1 bench "$m" $args | grep tg
    echo "head on one int8 copy:"; TANDEM_CUDA_HEAD_INT8=1 bench "$m" $args | grep tg
    first=0
  fi
  rm -f "$m"
done
if [[ -n "$big" ]] && wait "${made[big]}"; then
  bench /tmp/tandem-big.gguf $args --kv f16
  rm -f /tmp/tandem-big.gguf
fi
date -u +%FT%TZ
