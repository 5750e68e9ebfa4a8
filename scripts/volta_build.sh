#!/usr/bin/env bash
# Builds every GPU-labelled test and tandem-model with Debian bookworm's CUDA 11.8 for compute_70 PTX
# only (build-volta/), then packs what the GPU machine needs into .volta/volta.tar.gz. An H200's
# driver JIT-compiles that PTX, so every __CUDA_ARCH__ < 800 branch and the host's pre-Ampere choices
# (kernels/arch.h) run there: VOLTA=1 bash scripts/gpu_check.sh, with .volta carried. docs/volta.md.
# Usage: scripts/volta_build.sh   Env: JOBS (default: cores), CUBLAS13 (cuBLAS 13 library file to link,
# default /usr/local/cuda/lib64/libcublas.so.13: the GPU machine's own, since 11.8's 500 MB cannot travel);
# ARCHS=70 ALL=1 BUILD_DIR=build-v100: every target with sm_70 code, as a V100 build would be
# (docs/volta.md), no pack.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-volta}
cublas=${CUBLAS13:-/usr/local/cuda/lib64/libcublas.so.13}
[[ -f "$cublas" ]] || { echo "volta_build: $cublas not found (CUDA 13's cuBLAS; set CUBLAS13)" >&2; exit 2; }
cublas_dir=$(dirname "$(readlink -f "$cublas")")
tandem_cublas=$cublas
# A whole V100-style build links the toolkit's own cuBLAS (11.8's, by full path as below).
[[ "${ALL:-0}" == 1 ]] && tandem_cublas=/usr/lib/x86_64-linux-gnu/libcublas.so
saved_path=$PATH
# shellcheck source=scripts/cuda118.sh
source scripts/cuda118.sh || exit 2
PATH=$PATH:$saved_path  # 11.8's nvcc first; ccache, cmake, ninja and python from wherever they are

# -nostdinc lists (see cuda118.sh) for both compilers: g++ builds the .cpp files, g++-11 nvcc's host side.
cuda118_includes g++
cxx_flags="${host_includes[*]}"
cuda118_includes g++-11
cuda_flags=""
for f in "${host_includes[@]}"; do
  if [[ "$f" == -nostdinc ]]; then cuda_flags+=" -Xcompiler=-nostdinc"; else cuda_flags+=" $f"; fi
done

# The 11.8 runtime by full path: some images link CUDA 13's libraries into /usr/local/lib, where
# FindCUDAToolkit would look first.
debian_lib=/usr/lib/x86_64-linux-gnu
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$cuda118_bin/nvcc" -DCMAKE_CUDA_HOST_COMPILER=g++-11 \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-70-virtual}" -DTANDEM_CUBLAS="$tandem_cublas" -DCUDAToolkit_INCLUDE_DIR=/usr/include \
  -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_CUDA_FLAGS="$cuda_flags" \
  -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared -DCUDA_cudart_LIBRARY="$debian_lib/libcudart.so" \
  -DCUDA_CUDART="$debian_lib/libcudart.so" -DCUDA_cudart_static_LIBRARY="$debian_lib/libcudart_static.a" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$cublas_dir" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$cublas_dir"

# The GPU-labelled tests, read from the tests' CMakeLists (tandem_add_test(NAME ... LABELS gpu)).
mapfile -t targets < <(python3 - <<'PY'
import pathlib, re
for f in sorted(pathlib.Path("tests").rglob("CMakeLists.txt")):
    for name, args in re.findall(r"tandem_add_test\((\w+)([^)]*)\)", f.read_text()):
        labels = re.search(r"LABELS\s+([^\n)]*)", args)
        if labels and "gpu" in labels.group(1).split():
            print(name)
PY
)
if [[ "${ALL:-0}" == 1 ]]; then
  cmake --build "$build" -j "${JOBS:-$(nproc)}"
  echo "volta_build: every target of $build built (ARCHS ${ARCHS:-70-virtual})"
  exit 0
fi
echo "volta_build: ${#targets[@]} GPU test targets and tandem-model"
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" tandem-model
# Every binary must take the 11.8 runtime: one linked to CUDA 13's would mix the two.
bad=$(cd "$build" && for t in "${targets[@]}" tandem-model; do
  f=$(find . -type f -name "$t" -perm -u+x | head -1)
  readelf -d "$f" | grep -q 'libcudart.so.11.0' || echo "$f"
done)
[[ -z "$bad" ]] || { echo "volta_build: not linked to libcudart.so.11.0: $bad" >&2; exit 1; }

# The pack: test binaries and CTest files at their build-tree paths, libcudart 11.8, and the root the
# absolute paths in them point to (gpu_check.sh links it to wherever the tree lands).
mkdir -p .volta "$build/lib"
cp -L "$debian_lib/libcudart.so.11.0" "$build/lib/"
echo "$root" >"$build/source-root.txt"
(cd "$build" && find . \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) -print
 for t in "${targets[@]}"; do find . -type f -name "$t" -perm -u+x; done
 find . -type f -name tandem-model -perm -u+x; echo ./lib/libcudart.so.11.0; echo ./source-root.txt) |
  sort -u >.volta/files.txt
tar -C "$build" -czf .volta/volta.tar.gz -T .volta/files.txt
echo "volta_build: .volta/volta.tar.gz $(du -m .volta/volta.tar.gz | cut -f1) MiB, $(wc -l <.volta/files.txt) files"
