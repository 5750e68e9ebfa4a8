#!/usr/bin/env bash
# Sourced by the Volta scripts: makes Debian bookworm's CUDA 11.8 toolkit (the last one a V100
# build can be checked with here; CUDA 13 has no sm_70) and g++-11 ready, and sets
#   PATH            with the 11.8 nvcc first and without /usr/local/cuda/bin (else the 11.8 nvcc
#                   wrapper runs CUDA 13's ptxas, which rejects sm_70);
#   cuda118_bin     the toolkit's bin directory;
#   host_includes   -nostdinc plus COMPILER's search list minus /usr/local/include, when some image
#                   symlinked CUDA 13's headers there (g++ would find them before Debian's 11.8 ones);
#                   empty otherwise. cuda118_includes COMPILER recomputes it for another compiler.
# Installs what is missing (as root or with sudo) unless CUDA118_NO_INSTALL=1.

cuda118_bin=/usr/lib/nvidia-cuda-toolkit/bin

cuda118_as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# Adds contrib and non-free to every Debian entry, in deb822 (.sources) or one-line (.list) form.
cuda118_enable_nonfree() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    cuda118_as_root sed -i -E '/^Components:/{/non-free([[:space:]]|$)/!s/$/ non-free/}' "$f"
    cuda118_as_root sed -i -E '/^Components:/{/contrib/!s/$/ contrib/}' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    cuda118_as_root sed -i -E '/^deb(-src)?[[:space:]].*debian/{/non-free([[:space:]]|$)/!s/$/ non-free/}' "$f"
    cuda118_as_root sed -i -E '/^deb(-src)?[[:space:]].*debian/{/contrib/!s/$/ contrib/}' "$f"
  done
}

# cuda118_includes COMPILER: sets host_includes for COMPILER (see above).
cuda118_includes() {
  host_includes=()
  if [[ -e /usr/local/include/crt || -e /usr/local/include/cuda_runtime.h ]]; then
    host_includes=(-nostdinc)
    local dir
    while read -r dir; do
      [[ "$dir" == /usr/local/include ]] || host_includes+=(-isystem "$dir")
    done < <("$1" -xc++ -E -v /dev/null 2>&1 | sed -n '/<...> search starts here/,/End of search/{/^ /s/^ //p}')
  fi
}

if [[ ! -x "$cuda118_bin/nvcc" ]] || ! command -v g++-11 >/dev/null; then
  if [[ "${CUDA118_NO_INSTALL:-0}" == 1 ]]; then
    echo "cuda118: $cuda118_bin/nvcc or g++-11 missing (install nvidia-cuda-toolkit g++-11)" >&2
    return 2 2>/dev/null || exit 2
  fi
  cuda118_t0=$SECONDS
  cuda118_enable_nonfree
  cuda118_as_root apt-get update -qq
  cuda118_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    nvidia-cuda-toolkit g++-11 >/dev/null
  echo "cuda118: toolkit install took $((SECONDS - cuda118_t0)) s"
fi
export PATH=$cuda118_bin:/usr/bin:/bin
cuda118_includes g++-11
