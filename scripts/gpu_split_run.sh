#!/usr/bin/env bash
# On a two-GPU machine, in one call: the GPU test binaries (layer and tensor split parity among
# them), then a random Qwen3-8B-shaped model and `tandem-model bench` on one GPU, layer-split and
# tensor-split over two at ratios 1:1, 1:1.75 and 1:2 (with 16 GiB / 32 GiB caps for the plan),
# and the tensor split at 1:1 with NCCL_P2P_DISABLE=1 (NCCL through host memory).
# Usage (repo root): BIN=DIR_WITH_BINARIES bash scripts/gpu_split_run.sh
# Env: TYPE (default Q4_K_M), MAKE_ARGS, BENCH_ARGS (default "-p 512 -n 128 -r 2"), TESTS (test binaries in
# BIN to run first, default the CUDA backend and kernel tests found there).
set -uo pipefail
bin=${BIN:?BIN=directory holding tandem-model and test binaries}
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the shared machines
[[ -d .devdeps ]] && export LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
for t in ${TESTS:-$(cd "$bin" && ls | grep -E '_test$')}; do
  printf '%-28s ' "$t"; "$bin/$t" --gtest_brief=1 >"/tmp/$t.log" 2>&1 && echo ok || { echo FAILED; grep -E "FAILED|Failure" "/tmp/$t.log" | head -20; }
done
m=/tmp/tandem-qwen3-8b-${TYPE:-Q4_K_M}.gguf
t0=$SECONDS
# MAKE_ARGS (e.g. "--n-layer 12") shrinks the model when the full one would take too long to make.
"$bin/tandem-model" make --preset qwen3-8b --type "${TYPE:-Q4_K_M}" ${MAKE_ARGS:-} -o "$m" -q || exit 1
echo "make ${TYPE:-Q4_K_M} ${MAKE_ARGS:-}: $((SECONDS - t0)) s; commit $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%FT%TZ)"
args=${BENCH_ARGS:--p 512 -n 128 -r 2}
echo "== one GPU"; "$bin/tandem-model" bench -m "$m" $args | tail -n +1
for split in layer tensor; do
  for r in 1,1 1,1.75 1,2; do
    echo "== $split split over 0=16GiB,1=32GiB at $r"
    "$bin/tandem-model" bench -m "$m" $args --no-ceilings --devices 0=16GiB,1=32GiB --split $split --ratios $r |
      grep -E "^split|^\| [^m-]"
  done
done
echo "== tensor split at 1,1 with NCCL_P2P_DISABLE=1"
NCCL_P2P_DISABLE=1 "$bin/tandem-model" bench -m "$m" $args --no-ceilings --devices 0=16GiB,1=32GiB --split tensor \
  --ratios 1,1 | grep -E "^split|^\| [^m-]"
