#!/usr/bin/env bash
# On the GPU test machine: configure and build for sm_90, run every CTest test labelled "gpu",
# then compute-sanitizer over the kernel test binaries. Logs go to $OUT (or the build dir).
# Usage (repo root, .devdeps/ from ../shared/gpu/prepare-deps.sh alongside): scripts/gpu_check.sh
# Env: BUILD_DIR (default build-gpu), JOBS (default 16), CUDA_ARCHS (default 90).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-16}
archs=${CUDA_ARCHS:-90}
logs=${OUT:-$root/$build/logs}
mkdir -p "$logs"

# The Debian -dev packages the GPU image lacks (see ../shared/gpu/prepare-deps.sh).
if [[ -d .devdeps ]]; then
  export CMAKE_PREFIX_PATH=$PWD/.devdeps/usr CPATH=$PWD/.devdeps/usr/include \
    LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu \
    PKG_CONFIG_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu/pkgconfig:$PWD/.devdeps/usr/share/pkgconfig \
    LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
else
  echo "gpu_check: no .devdeps/ here; configure may miss msgpack/CLI11/json/utf8proc/systemd" >&2
fi
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the shared machines

summary=()
failed=0
# step NAME LOGFILE CMD...: runs CMD with output to LOGFILE (and the console), records status and time.
step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS rc
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$logs/$log"
  rc=${PIPESTATUS[0]}
  summary+=("$(printf '%-44s %-5s %5ss  %s' "$name" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" $((SECONDS - t0)) "$log")")
  [[ $rc -eq 0 ]] || failed=1
  return "$rc"
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  git -C "$root" rev-parse HEAD 2>/dev/null || echo "commit: unknown"
  git -C "$root" status --short 2>/dev/null | head -50
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
} >"$logs/machine.txt"
cat "$logs/machine.txt"

step configure configure.log \
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs"
# -k 0: a target that fails to build must not hide the GPU tests that did build.
[[ -f "$build/build.ninja" ]] && step build build.log cmake --build "$build" -j "$jobs" -- -k 0
[[ -f "$build/CTestTestfile.cmake" ]] &&
  step "ctest -L gpu" ctest.log ctest --test-dir "$build" -L gpu --output-on-failure --timeout 600

# On this machine a skipped GPU test means the GPU was not usable (driver, visibility): say so.
if [[ -f "$logs/ctest.log" ]]; then
  grep -E "tests passed|Total Test time" "$logs/ctest.log" | sed 's/^/  /' >"$logs/ctest-counts.txt"
  skipped=$(grep -c "(Skipped)" "$logs/ctest.log" || true)
  if [[ "$skipped" -gt 0 ]]; then
    summary+=("$(printf '%-44s %-5s' "gpu tests skipped: $skipped" FAIL)         (no usable GPU?) ctest.log")
    failed=1
  fi
fi

# compute-sanitizer over every kernel test binary; the *large* grid-stride cases are left out
# because memcheck slows memory-bound kernels by orders of magnitude.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [[ -n "$sanitizer" ]]; then
  for bin in "$build"/tests/kernels/*_test; do
    [[ -x "$bin" ]] || continue
    name=$(basename "$bin")
    for tool in memcheck initcheck; do
      step "$tool $name" "sanitizer-$tool-$name.log" \
        "$sanitizer" --tool "$tool" --error-exitcode 1 "$bin" --gtest_filter='-big/*'
    done
  done
else
  summary+=("$(printf '%-44s %-5s' compute-sanitizer skip)         (not found)")
fi

echo
echo "=== summary ($(head -1 "$logs/machine.txt"), logs in $logs)"
{
  printf '%s\n' "${summary[@]}"
  cat "$logs/ctest-counts.txt" 2>/dev/null
} | tee "$logs/summary.txt"
exit $failed
