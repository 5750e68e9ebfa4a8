// Programmatic dependent launch (sm_90+) for the decode chain: a kernel launched with
// launch_pdl may start while its predecessor on the stream finishes, so it must call pdl_wait()
// before it reads anything an earlier kernel wrote (or writes anything an earlier one reads).
// Below sm_90 both device calls are no-ops and launch_pdl is an ordinary launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

#include "kernels/arch.h"

namespace tandem {

// Blocks until the grids this one depends on have finished and their writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel on the stream (if launched with launch_pdl) start its launch now.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Whether the current device runs programmatic dependent launches: kernels built for sm_90+
// (kernel_arch(): the device calls above are compiled in); TANDEM_CUDA_PDL=0 in the environment turns them off (to measure or rule
// them out).
inline bool pdl_supported() {
  static const bool off = [] {
    const char* e = std::getenv("TANDEM_CUDA_PDL");
    return e && e[0] == '0' && e[1] == 0;
  }();
  return !off && kernel_arch() >= 90;
}

// Launches kernel<<<grid, block, smem, s>>>(args...) as a programmatic dependent of the previous
// work on s where the device supports it. The kernel must call pdl_wait() first (see above).
template <class... P, class... A>
cudaError_t launch_pdl_shared(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                              A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (pdl_supported()) cfg.attrs = attr, cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...);
}

template <class... P, class... A>
cudaError_t launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t s, A&&... args) {
  return launch_pdl_shared(kernel, grid, block, 0, s, std::forward<A>(args)...);
}

}  // namespace tandem
