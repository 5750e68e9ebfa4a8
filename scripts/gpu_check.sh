#!/usr/bin/env bash
# On the GPU test machine: configure and build for sm_90, run every CTest test labelled "gpu",
# then compute-sanitizer over the kernel test binaries. Logs go to $OUT (or the build dir).
# Usage (repo root, .devdeps/ from ../shared/gpu/prepare-deps.sh alongside): scripts/gpu_check.sh
# Env: BUILD_DIR (default build-gpu), JOBS (default 16), CUDA_ARCHS (default 90),
# SANITIZER_TOOLS (default "memcheck initcheck"; "" for none), SANITIZE_TESTS (kernel test names,
# default all), CTEST=0 (no ctest run: only the sanitizer), TANDEM_TREE (the commit the log names: the
# device copy's git names another; every scripts/gpu_*_run.sh prints it too).
# VOLTA=1: no build here; the same tests and sanitizer runs from .volta/volta.tar.gz (made by
# scripts/volta_build.sh: CUDA 11.8, compute_70 PTX only, carried along), unpacked into build-volta.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
volta=${VOLTA:-0}
build=${BUILD_DIR:-build-gpu}
[[ $volta == 1 ]] && build=build-volta
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

if [[ $volta == 1 ]]; then
  [[ -f .volta/volta.tar.gz ]] || { echo "gpu_check: VOLTA=1 needs .volta/volta.tar.gz (scripts/volta_build.sh; carry .volta)" >&2; exit 2; }
  mkdir -p "$build" && tar -C "$build" -xzf .volta/volta.tar.gz
  # The CTest files and the tests' data paths name the tree the pack was built in: make it this one.
  src=$(cat "$build/source-root.txt")
  if [[ "$src" != "$root" ]]; then
    [[ -e "$src" ]] && { echo "gpu_check: $src exists and is not this tree ($root)" >&2; exit 2; }
    mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
  fi
  # libcudart 11.8 from the pack; the PTX is JIT-compiled once per module and kept in the cache.
  export LD_LIBRARY_PATH=$root/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} CUDA_MODULE_LOADING=LAZY \
    TANDEM_EXPECT_KERNEL_ARCH=70 \
    CUDA_CACHE_MAXSIZE=4294967296
fi

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
  # The device machine's copy of the tree has no history of its own (git there names another
  # commit): the caller records which tree this is, e.g. TANDEM_TREE=$(git rev-parse --short HEAD).
  echo "tree: ${TANDEM_TREE:-unrecorded (set TANDEM_TREE)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  if [[ $volta == 1 ]]; then echo "volta: compute_70 PTX built with CUDA 11.8 (scripts/volta_build.sh), JIT-run"
  else nvcc --version 2>&1 | tail -2; fi
} >"$logs/machine.txt"
cat "$logs/machine.txt"

if [[ $volta != 1 ]]; then
  step configure configure.log \
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs"
  # -k 0: a target that fails to build must not hide the GPU tests that did build.
  [[ -f "$build/build.ninja" ]] && step build build.log cmake --build "$build" -j "$jobs" -- -k 0
fi
[[ -f "$build/CTestTestfile.cmake" && ${CTEST:-1} != 0 ]] &&
  step "ctest -L gpu" ctest.log ctest --test-dir "$build" -L gpu --output-on-failure --timeout 600

# Tests skip without a usable GPU (driver, visibility) and the multi-GPU ones on one GPU. The
# kernel_arch tests need one GPU and nothing else: if they skipped, the GPU was not usable.
if [[ -f "$logs/ctest.log" ]]; then
  grep -E "tests passed|Total Test time" "$logs/ctest.log" | sed 's/^/  /' >"$logs/ctest-counts.txt"
  skipped=$(grep -c "\*\*\*Skipped" "$logs/ctest.log" || true)
  if grep -qE "kernel_arch\.is_at_most_the_device_arch .*Skipped" "$logs/ctest.log"; then
    summary+=("$(printf '%-44s %-5s' "gpu tests skipped: $skipped" FAIL)         (no usable GPU) ctest.log")
    failed=1
  elif [[ "$skipped" -gt 0 ]]; then
    summary+=("$(printf '%-44s %-5s' "gpu tests skipped: $skipped" note)         (multi-GPU cases on $(nvidia-smi -L | wc -l) GPU(s)?) ctest.log")
  fi
fi

# compute-sanitizer over every kernel test binary, SANITIZER_JOBS (default 4) binaries at a time
# (the tool is CPU-bound); the big.* benchmark cases are left out because memcheck slows
# memory-bound kernels by orders of magnitude.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
# sanitize BIN: each tool over BIN, a status line each ("tool name rc seconds") in sanitizer-status.txt.
sanitize() {
  local bin=$1 name tool t0 rc
  name=$(basename "$bin")
  for tool in ${SANITIZER_TOOLS-memcheck initcheck}; do
    t0=$SECONDS
    "$sanitizer" --tool "$tool" --error-exitcode 1 "$bin" --gtest_filter='-big/*:big.*' \
      >"$logs/sanitizer-$tool-$name.log" 2>&1
    rc=$?
    echo "$tool $name $rc $((SECONDS - t0))" >>"$logs/sanitizer-status.txt"
  done
}
if [[ -n "$sanitizer" ]]; then
  echo "=== compute-sanitizer (${SANITIZER_TOOLS-memcheck initcheck}) over $build/tests/kernels/*_test"
  : >"$logs/sanitizer-status.txt"
  bins=("$build"/tests/kernels/*_test)
  if [[ -n "${SANITIZE_TESTS:-}" ]]; then
    bins=()
    for t in $SANITIZE_TESTS; do bins+=("$build/tests/kernels/$t"); done
  fi
  for bin in "${bins[@]}"; do
    [[ -x "$bin" ]] || continue
    sanitize "$bin" &
    while (($(jobs -rp | wc -l) >= ${SANITIZER_JOBS:-4})); do wait -n; done
  done
  wait
  while read -r tool name rc secs; do
    summary+=("$(printf '%-44s %-5s %5ss  %s' "$tool $name" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$secs" \
      "sanitizer-$tool-$name.log")")
    [[ $rc -eq 0 ]] || failed=1
  done <"$logs/sanitizer-status.txt"
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
