#!/usr/bin/env bash
# On the GPU machine, in one call: build for sm_90, the scheduler's and the decode-batch GEMM's gpu
# tests and the GEMM's bandwidth table, then on a random Qwen3-8B-shaped model `tandem-model bench`
# of 1..64 sequences decoding together and tandemd serving it on GPU 0 to `tandem loadgen` at 1, 4,
# 16 and 64 clients (issue 23's figures), and a summary of tandemd's per-pass trace
# (TANDEM_SCHEDULER_TRACE, scripts/step_trace_summary.py). Env: STEPS (default "build test bench";
# "serve" alone skips the engine's bench and serves only; "profile" adds bench --profile's launch
# groups at 1, 16 and 64 sequences), PRESET
# (qwen3-8b), TYPE (Q4_K_M), PARALLEL (64), CONTEXT (tokens per sequence, 1024), CLIENTS
# ("1 4 16 64"), TOKENS (128), CHUNK (prefill-chunk, 2048 as tandemd's default) or CHUNKS (several, a tandemd each),
# DURATION (seconds of steady load a client count instead of R = max(8, 2C) requests), BUILD_DIR
# (build-gpu), TANDEM_TREE (the commit the log names).
# Usage (repo root, .devdeps/ alongside): bash scripts/gpu_serving_run.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu} steps=${STEPS:-build test bench}
has() { [[ " $steps " == *" $1 "* ]]; }
if has build; then STEPS=build BUILD_DIR=$build bash scripts/gpu_long_run.sh || exit 1; fi
if [[ -d .devdeps ]]; then
  export LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
tm=$build/client/tandem_model/tandem-model td=$build/daemon/tandemd tc=$build/client/tandem/tandem
if has test; then
  "$build/tests/engine/runtime/runtime_scheduler_cuda_test" >/tmp/scheduler-cuda.log 2>&1; echo "scheduler cuda test: exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|request" /tmp/scheduler-cuda.log | head -20
  "$build/tests/kernels/kernels_qgemm_test" --gtest_brief=1 --gtest_filter=-big.* 2>&1 | tail -15
  "$build/tests/kernels/kernels_qgemm_test" --gtest_filter=big.* 2>&1 | grep -vE "^\[|^$"
fi
has bench || has serve || exit 0
m=/tmp/serve-${TYPE:-Q4_K_M}.gguf sock=/tmp/tandem-serve.sock
"$tm" make --preset "${PRESET:-qwen3-8b}" --type "${TYPE:-Q4_K_M}" --row-pool 256 -o "$m" -q || exit 1
has bench && "$tm" bench -m "$m" -p 16 -n 64 -b 1,8,9,16,32,64 -r 2 --no-ceilings 2>&1 | grep -E "^\| [^ ]+\.gguf" | sed -E 's/ +/ /g'
if has profile; then  # where a step's time goes, by launch group (graphs off), at 1, 16 and 64 sequences
  for b in 1 16 64; do
    echo "== profile b$b"
    "$tm" bench -m "$m" -p 16 -n 32 -b "$b" -r 1 --no-ceilings --profile 2>&1 | grep -E "^\| [a-z]" | sed -E 's/ +/ /g' | head -12
  done
fi
echo "== tandemd on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), tree ${TANDEM_TREE:-unrecorded (set TANDEM_TREE)}, $(date -u +%FT%TZ)"
# One tandemd per prefill chunk size (CHUNKS), each serving the load generator at every client count.
for chunk in ${CHUNKS:-${CHUNK:-2048}}; do
  echo "# prefill chunk $chunk"
  TANDEM_SCHEDULER_TRACE=/tmp/tandem-serve-$chunk.trace "$td" --socket "$sock" --config /dev/null --gpu 0 --parallel "${PARALLEL:-64}" --context "${CONTEXT:-1024}" \
    --prefill-chunk "$chunk" --queue-depth 1024 --max-connections-per-user 1024 --model "m=$m" >/tmp/tandemd-serve.log 2>&1 &
  pid=$!
  for _ in $(seq 600); do "$tc" --socket "$sock" --json models 2>/dev/null | grep -q '"resident"' && break; sleep 0.2; done
  for c in ${CLIENTS:-1 4 16 64}; do
    r=$((c < 8 ? 8 : 2 * c))
    if [[ -n ${DURATION:-} ]]; then  # steady state: requests keep starting for DURATION seconds
      echo "# clients $c for ${DURATION} s"
      "$tc" --socket "$sock" --json loadgen -c "$c" --duration "$DURATION" -n "${TOKENS:-128}" --raw
    else
      echo "# clients $c requests $r"
      "$tc" --socket "$sock" --json loadgen -c "$c" -r "$r" -n "${TOKENS:-128}" --raw
    fi
  done
  kill "$pid"; wait "$pid"
  tail -3 /tmp/tandemd-serve.log
  # Where the passes' time went over this tandemd's runs (the loadgen tails above are in these).
  python3 scripts/step_trace_summary.py /tmp/tandem-serve-"$chunk".trace*
done
rm -f "$m"
