#!/usr/bin/env bash
# Volta guard: compile-checks every kernels/*.cu for sm_70 with Debian bookworm's CUDA 11.8,
# because CUDA 13 (our main toolkit) can no longer build for V100. Run from anywhere, as root or with sudo.
# Usage: scripts/check_sm70.sh [--no-install]   (--no-install: fail instead of installing the toolkit)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
install=1
[[ "${1:-}" == "--no-install" ]] && install=0

[[ $install -eq 0 ]] && export CUDA118_NO_INSTALL=1
# shellcheck source=scripts/cuda118.sh
source "$root/scripts/cuda118.sh" || exit 2
nvcc --version | tail -1
[[ ${#host_includes[@]} -gt 0 ]] && echo "check_sm70: ignoring CUDA headers in /usr/local/include"

shopt -s nullglob
sources=("$root"/kernels/*.cu)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "check_sm70: no kernels/*.cu found under $root" >&2
  exit 1
fi

# nvcc takes -isystem itself but hands -nostdinc to the host compiler.
nvcc_includes=()
for f in "${host_includes[@]}"; do
  if [[ "$f" == -nostdinc ]]; then nvcc_includes+=(-Xcompiler -nostdinc); else nvcc_includes+=("$f"); fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS
failed=0
for src in "${sources[@]}"; do
  name=$(basename "$src" .cu)
  if nvcc -ccbin g++-11 -std=c++17 -arch=sm_70 -O2 -Xcompiler -Wall,-Wextra \
      "${nvcc_includes[@]}" -I "$root" -I "$root/engine" -c "$src" -o "$tmp/$name.o"; then
    echo "ok    $name.cu (sm_70)"
  else
    echo "FAIL  $name.cu (sm_70)"
    failed=1
  fi
done
echo "check_sm70: compiled ${#sources[@]} file(s) in $((SECONDS - t0)) s"
exit $failed
