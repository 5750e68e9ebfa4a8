#!/usr/bin/env bash
# On the GPU machine, in one call: scripts/gpu_check.sh (build, ctest -L gpu, compute-sanitizer),
# then for each type in TYPES a random Qwen3-8B-shaped model made there (6+ GB cannot travel) and
# the CUDA bench on it. Logs and bench tables go to $OUT.
# Usage (repo root, .devdeps carried): bash tests/engine/backend/cuda/gpu_run.sh
# Env: TYPES (default "Q6_K"), BENCH_ARGS (default "-p 512,2048 -n 128 -r 3"), MAKE_ARGS,
# MAKE_TIMEOUT (s, default 150), SKIP_CHECK=1.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
cd "$root"
out=${OUT:-$root/build-gpu/logs}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
if [[ "${SKIP_CHECK:-0}" != 1 ]]; then
  JOBS=${JOBS:-16} bash scripts/gpu_check.sh >"$out/gpu_check.txt" 2>&1
  echo "gpu_check rc=$?"
  sed -n '/=== summary/,$p' "$out/gpu_check.txt"
fi
# gpu_check exports the .devdeps paths only to itself; the tools below need the libraries too.
[[ -d .devdeps ]] && export LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
grep -hE "^\[  (FAILED|SKIPPED) " "$out"/ctest.log 2>/dev/null | sort -u | head -40
tm=$build/client/tandem_model/tandem-model
bench=$tm  # tandem-model bench
commit=${TANDEM_TREE:-unrecorded (set TANDEM_TREE)}  # the device copy's git names another commit
for t in ${TYPES:-Q6_K}; do
  m=/tmp/tandem-qwen3-8b-$t.gguf
  t0=$SECONDS
  # MAKE_ARGS (e.g. "--n-layer 12") shrinks the model when the full one would take too long.
  timeout "${MAKE_TIMEOUT:-150}" "$tm" make --preset qwen3-8b --type "$t" ${MAKE_ARGS:-} -o "$m" -q ||
    { echo "make $t failed or timed out after $((SECONDS - t0)) s"; rm -f "$m"; continue; }
  echo "make $t ${MAKE_ARGS:-}: $((SECONDS - t0)) s"
  {
    echo "tree $commit, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "$bench bench -m $m ${BENCH_ARGS:--p 512,2048 -n 128 -r 3}"
    "$bench" bench -m "$m" ${BENCH_ARGS:--p 512,2048 -n 128 -r 3}
  } 2>&1 | tee "$out/bench-$t.txt"
  rm -f "$m"
done
