#!/usr/bin/env bash
# Volta guard: compile-checks every kernels/*.cu for sm_70 with Debian bookworm's CUDA 11.8,
# because CUDA 13 (our main toolkit) can no longer build for V100. Run from anywhere, as root or with sudo.
# Usage: scripts/check_sm70.sh [--no-install]   (--no-install: fail instead of installing the toolkit)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
toolkit_bin=/usr/lib/nvidia-cuda-toolkit/bin
install=1
[[ "${1:-}" == "--no-install" ]] && install=0

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# Adds contrib and non-free to every Debian entry, in deb822 (.sources) or one-line (.list) form.
enable_nonfree() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    as_root sed -i -E '/^Components:/{/non-free([[:space:]]|$)/!s/$/ non-free/}' "$f"
    as_root sed -i -E '/^Components:/{/contrib/!s/$/ contrib/}' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    as_root sed -i -E '/^deb(-src)?[[:space:]].*debian/{/non-free([[:space:]]|$)/!s/$/ non-free/}' "$f"
    as_root sed -i -E '/^deb(-src)?[[:space:]].*debian/{/contrib/!s/$/ contrib/}' "$f"
  done
}

if [[ ! -x "$toolkit_bin/nvcc" ]] || ! command -v g++-11 >/dev/null; then
  if [[ $install -eq 0 ]]; then
    echo "check_sm70: $toolkit_bin/nvcc or g++-11 missing (install nvidia-cuda-toolkit g++-11)" >&2
    exit 2
  fi
  t0=$SECONDS
  enable_nonfree
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    nvidia-cuda-toolkit g++-11 >/dev/null
  echo "check_sm70: toolkit install took $((SECONDS - t0)) s"
fi

# A PATH without /usr/local/cuda/bin: otherwise the 11.8 nvcc wrapper runs CUDA 13's ptxas,
# which rejects sm_70.
export PATH=$toolkit_bin:/usr/bin:/bin
nvcc --version | tail -1

shopt -s nullglob
sources=("$root"/kernels/*.cu)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "check_sm70: no kernels/*.cu found under $root" >&2
  exit 1
fi

# Some images symlink CUDA 13's headers into /usr/local/include, which g++ searches before
# /usr/include (where Debian's 11.8 headers live). Then drop that directory: -nostdinc and
# g++-11's own search list minus /usr/local/include, in the same order.
host_includes=()
if [[ -e /usr/local/include/crt || -e /usr/local/include/cuda_runtime.h ]]; then
  host_includes=(-Xcompiler -nostdinc)
  while read -r dir; do
    [[ "$dir" == /usr/local/include ]] || host_includes+=(-isystem "$dir")
  done < <(g++-11 -xc++ -E -v /dev/null 2>&1 | sed -n '/<...> search starts here/,/End of search/{/^ /s/^ //p}')
  echo "check_sm70: ignoring CUDA headers in /usr/local/include"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS
failed=0
for src in "${sources[@]}"; do
  name=$(basename "$src" .cu)
  if nvcc -ccbin g++-11 -std=c++17 -arch=sm_70 -O2 -Xcompiler -Wall,-Wextra \
      "${host_includes[@]}" -I "$root" -I "$root/engine" -c "$src" -o "$tmp/$name.o"; then
    echo "ok    $name.cu (sm_70)"
  else
    echo "FAIL  $name.cu (sm_70)"
    failed=1
  fi
done
echo "check_sm70: compiled ${#sources[@]} file(s) in $((SECONDS - t0)) s"
exit $failed
