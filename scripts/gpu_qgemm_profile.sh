#!/usr/bin/env bash
# On the GPU machine: where the decode-batch GEMM's blocks stall (issues 22 and 23 share them).
# Nsight Compute's occupancy, warp-state and scheduler sections for one dense launch
# (kernels_qgemm_test's bandwidth table, Q4_K 4096 x 4096 first) and one grouped launch (the MoE
# prefill benchmark: Qwen3-30B-A3B's experts, 2048 tokens), then the lines that say most.
# Env: BUILD_DIR (build-gpu; kernels_qgemm_test and kernels_moe_test built there), OUT_DIR (where
# the full reports go, default /tmp), SKIP (dense launches to skip first, 20: past the warm-up).
# Usage (repo root, .devdeps/ alongside): bash scripts/gpu_qgemm_profile.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu} out=${OUT_DIR:-/tmp}
if [[ -d .devdeps ]]; then
  export LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
export PATH=/usr/local/cuda/bin:$PATH
command -v ncu >/dev/null || { echo "gpu_qgemm_profile: no ncu on PATH" >&2; exit 1; }
sections=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats
  --section LaunchStats)
profile() {  # name, kernel regex, launches to skip, binary, gtest filter
  timeout 150 ncu --kernel-name "regex:$2" --launch-skip "$3" --launch-count 1 "${sections[@]}" \
    "$build/tests/kernels/$4" --gtest_filter="$5" >"$out/ncu_$1.txt" 2>&1
  echo "== $1 (ncu exit $?; full report $out/ncu_$1.txt)"
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit (Registers|Shared Mem)|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Stall" \
    "$out/ncu_$1.txt" | cut -c1-140
}
profile dense qgemm_kernel "${SKIP:-20}" kernels_qgemm_test 'big.*'
profile grouped qgemm_grouped 3 kernels_moe_test 'big.moe_prefill*'
