#!/usr/bin/env bash
# On a two-GPU machine, in one call: the GPU test binaries (layer and tensor split parity among
# them), then a random model of a preset shape and `tandem-model bench` on one GPU (capped at
# 32 GiB), layer-split and tensor-split over two at ratios 1:1, 1:1.75 and 1:2 (16 GiB / 32 GiB caps
# for the plan), the tensor split at 1:1 over each exchange transport (peer, host, nccl), and the
# peak memory of the tensor split at 1:1 against its plan.
# Usage (repo root): BIN=DIR_WITH_BINARIES bash scripts/gpu_split_run.sh
# Env: PRESET (default qwen3-8b; qwen3-32b for the shape that does not fit 16 GiB alone), TYPE
# (default Q4_K_M), MAKE_ARGS (e.g. "--n-layer 12", or "--row-pool 256" to write the model in
# seconds: throughput does not depend on the values), BENCH_ARGS (default "-p 512 -n 128 -r 2"),
# TESTS (test binaries in BIN to run first, default the *_test files there; "" for none).
set -uo pipefail
bin=${BIN:?BIN=directory holding tandem-model and test binaries}
source "$(dirname "${BASH_SOURCE[0]}")/gpu_tests.sh"  # environment, GPUs, the GPU test binaries
preset=${PRESET:-qwen3-8b} type=${TYPE:-Q4_K_M}
m=/tmp/tandem-$preset-$type.gguf
t0=$SECONDS
"$bin/tandem-model" make --preset "$preset" --type "$type" ${MAKE_ARGS:-} -o "$m" -q || exit 1
echo "make $preset $type ${MAKE_ARGS:-}: $((SECONDS - t0)) s; tree ${TANDEM_TREE:-unrecorded (set TANDEM_TREE)}, $(date -u +%FT%TZ)"
args=${BENCH_ARGS:--p 512 -n 128 -r 2}
pair="--no-ceilings --devices 0=16GiB,1=32GiB"
# The split line, result rows and errors: not the table's header ("| model") or rule ("|---").
rows() { grep -E "^split|^ceil|^\||rror" | grep -vE "^\| model |^\|-"; }
echo "== 16 GiB alone (refused when the plan does not fit)"; "$bin/tandem-model" bench -m "$m" $args --devices 0=16GiB --split none 2>&1 | rows
echo "== one GPU, 32 GiB cap"; "$bin/tandem-model" bench -m "$m" $args --devices 0=32GiB --split none 2>&1 | rows
for split in layer tensor; do
  for r in 1,1 1,1.75 1,2; do
    echo "== $split split at $r"; "$bin/tandem-model" bench -m "$m" $args $pair --split $split --ratios $r 2>&1 | rows
  done
done
for x in host nccl; do
  echo "== tensor split at 1,1, TANDEM_CUDA_EXCHANGE=$x"
  TANDEM_CUDA_EXCHANGE=$x "$bin/tandem-model" bench -m "$m" $args $pair --split tensor --ratios 1,1 2>&1 | rows
done
echo "== peak memory of the tensor split at 1,1 (nvidia-smi every 50 ms) against the plan"
# bench sizes its cache and batch for its largest test: the largest number in BENCH_ARGS.
ctx=$(echo "$args" | tr ' ,' '\n\n' | grep -E '^[0-9]+$' | sort -n | tail -1)
(while true; do nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits; sleep 0.05; done) >/tmp/mem.txt &
sampler=$!
"$bin/tandem-model" bench -m "$m" $args $pair --split tensor --ratios 1,1 >/dev/null 2>&1
kill $sampler
for d in 0 1; do echo "device $d peak $(grep "^$d," /tmp/mem.txt | cut -d, -f2 | sort -n | tail -1) MiB"; done
"$bin/tandem-model" plan --model "$m" --devices 0=16GiB,1=32GiB --split tensor --ratios 1,1 --ctx "$ctx" --batch "$ctx" |
  grep -E "^[01] |fits"
