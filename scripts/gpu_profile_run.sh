#!/usr/bin/env bash
# On a GPU machine, in one call: the GPU test binaries in BIN, then for each preset shape a random
# model (written in seconds with --row-pool) and `tandem-model bench --profile` on one GPU: decode
# t/s and microseconds per token by launch group (norms, each mat-vec group, attention, head).
# Usage (repo root): BIN=DIR_WITH_BINARIES bash scripts/gpu_profile_run.sh
# Env: PRESETS (default "qwen3-8b qwen3-32b"), TYPE (default Q4_K_M), BENCH_ARGS (default
# "-p 512 -n 128 -r 2"), TESTS (test binaries in BIN to run first, default the *_test files there;
# "" for none), DEVICE (default 0).
set -uo pipefail
bin=${BIN:?BIN=directory holding tandem-model and test binaries}
source "$(dirname "${BASH_SOURCE[0]}")/gpu_tests.sh"  # environment, GPUs, the GPU test binaries
type=${TYPE:-Q4_K_M} args=${BENCH_ARGS:--p 512 -n 128 -r 2}
for preset in ${PRESETS:-qwen3-8b qwen3-32b}; do
  m=/tmp/tandem-$preset-$type.gguf
  t0=$SECONDS
  "$bin/tandem-model" make --preset "$preset" --type "$type" --row-pool 256 -o "$m" -q || exit 1
  echo "== $preset $type (made in $((SECONDS - t0)) s); tree ${TANDEM_TREE:-unrecorded (set TANDEM_TREE)}, $(date -u +%FT%TZ)"
  "$bin/tandem-model" bench -m "$m" $args --device "${DEVICE:-0}" --profile 2>&1 | grep -vE "^\| model |^\|-|^upload"
  rm -f "$m"
done
