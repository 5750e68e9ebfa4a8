#!/usr/bin/env bash
# On the GPU machine, in one call: build for sm_90, then the qwen35 checks and figures. Steps (env
# STEPS, default "build test ref bench"): build; test: every CTest test labelled gpu; ref: the
# transformers reference check (tests/reference/qwen35_tiny, the first of convert_reference_test's directories) on the CPU and the GPU (REGEN=1 makes
# a new reference with scripts/qwen35_reference.py in $OUT/qwen35_tiny first); bench: random
# Qwen3.5-27B-shaped models (TYPES, default "Q6_K Q4_K_M") with f16 and q8_0 KV (BENCH_ARGS).
# Usage (repo root, .devdeps/ alongside): bash scripts/gpu_qwen35_run.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu} steps=${STEPS:-build test ref bench} out=${OUT:-/tmp/qwen35-out}
types=${TYPES:-Q6_K Q4_K_M} args=${BENCH_ARGS:--p 512,2048,16384 -n 128 -r 2}
mkdir -p "$out"
source scripts/gpu_env.sh
export PYTHONUNBUFFERED=1
has() { [[ " $steps " == *" $1 "* ]]; }
tm=$build/client/tandem_model/tandem-model
date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

if has build; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    >/tmp/q35-configure.log 2>&1 || { tail -20 /tmp/q35-configure.log; exit 1; }
  cmake --build "$build" -j 16 -- -k 0 >/tmp/q35-build.log 2>&1 || { grep -E "error|FAILED" /tmp/q35-build.log | head -30; }
  echo "build done at $SECONDS s"
fi
if has bench || has profile; then  # made on the CPU while the tests run
  for t in $types; do "$tm" make --preset qwen3.5-27b --type "$t" --row-pool 256 -o "/tmp/q35-27b-$t.gguf" -q & done
fi
if has test; then
  ctest --test-dir "$build" -L gpu --timeout 300 -j 2 >"$out/ctest.log" 2>&1
  grep -E "tests passed|Failed|\*\*\*|Not Run" "$out/ctest.log" | head -30
  echo "tests done at $SECONDS s"
fi
if has ref; then  # the checked-in reference; REGEN=1 first writes a new one to $OUT/qwen35_tiny
  root=$PWD/tests/reference
  if [[ -n "${REGEN:-}" ]]; then
    root=$out
    python3 scripts/qwen35_reference.py "$root/qwen35_tiny" --seed "${REF_SEED:-0}" 2>&1 | grep -v "^\[transformers\]" | tail -3
  fi
  for t in convert_reference_test convert_reference_gpu_test; do
    TANDEM_REFERENCE_ROOT=$root "$build/tests/engine/convert/$t" --gtest_filter='*/0' 2>&1 | grep -E "max \||OK|FAILED|Failure|continuation token|position" | head -12
  done
fi
if has bench; then
  wait
  for t in $types; do
    m=/tmp/q35-27b-$t.gguf
    [[ -f $m ]] || { echo "make $t failed"; continue; }
    for kv in f16 q8_0; do
      "$tm" bench -m "$m" $args --kv $kv 2>&1 | grep -E "^ceilings|^decode reads|^\| [^ ]+\.gguf" | sed -E 's/ +/ /g'
    done
    rm -f "$m"
  done
fi
if has profile; then  # per launch group of a decode step (no graphs), the first type
  wait
  t=${types%% *}
  "$tm" bench -m "/tmp/q35-27b-$t.gguf" -n 64 -r 1 --no-ceilings --profile 2>&1 | grep -vE "^\| q35|^ *$" | head -60
fi
date -u +%FT%TZ
