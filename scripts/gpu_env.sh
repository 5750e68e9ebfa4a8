# Sourced by the gpu_*_run.sh scripts, from the repo root on the GPU machine: the Debian -dev
# packages the GPU image lacks (.devdeps/, see ../shared/gpu/prepare-deps.sh), CUDA on PATH, and
# NVLink multicast off in NCCL (the device README says why).
if [[ -d .devdeps ]]; then
  export CMAKE_PREFIX_PATH=$PWD/.devdeps/usr CPATH=$PWD/.devdeps/usr/include \
    LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu \
    PKG_CONFIG_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu/pkgconfig:$PWD/.devdeps/usr/share/pkgconfig \
    LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
