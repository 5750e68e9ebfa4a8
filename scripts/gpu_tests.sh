#!/usr/bin/env bash
# The start of every GPU-machine script here: the library path for .devdeps, the GPUs, then each
# GPU test binary in BIN (env TESTS: which ones, default the *_test files there; "" for none),
# benchmarks (big.*) left out, a line each and the failures' lines. Sourced, so the caller keeps
# the environment: BIN=DIR source scripts/gpu_tests.sh
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the shared machines
[[ -d .devdeps ]] && export LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
for t in ${TESTS-$(cd "${BIN:?}" && ls | grep -E '_test$')}; do
  printf '%-30s ' "$t"; "$BIN/$t" --gtest_brief=1 --gtest_filter=-big.* >"/tmp/$t.log" 2>&1 && echo ok || {
    echo FAILED; grep -E "FAILED|Failure" "/tmp/$t.log" | head -20; }
done
