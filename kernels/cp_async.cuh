// Asynchronous global-to-shared copies (sm_80+) for the GEMM blocks' stages: below sm_80 the
// calls compile to nothing, and the kernels that run there stage through registers instead.
#pragma once

#include <cstdint>

namespace tandem {

// 16 bytes from src to shared dst (both 16-byte aligned); only the first n (0..16) are read, the
// rest of dst is zero-filled.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(n));
#endif
}

// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of this thread's groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace tandem
