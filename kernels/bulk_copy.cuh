// Bulk copies from global into shared memory that complete on an mbarrier (sm_90+: one thread
// issues a whole stage, the copy engine moves it while every thread goes on). Below sm_90 the
// calls compile to nothing: callers copy with ordinary loads there (see has_bulk_copy).
#pragma once

#include <cstdint>

namespace tandem {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool has_bulk_copy = true;
#else
constexpr bool has_bulk_copy = false;
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread: the barrier expects one arrival, then `bytes` from the copies issued on it.
__device__ __forceinline__ void bar_init_expect(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)));
  asm volatile("fence.proxy.async.shared::cta;");  // the copy engine sees the initialised barrier
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}

// bytes (a multiple of 16) from src to dst, both 16-byte aligned, counted on bar.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#endif
}

// Every thread that reads the copies: until the barrier's first phase completes.
__device__ __forceinline__ void bar_wait_first(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(smem_addr(bar))
                 : "memory");
#endif
}

}  // namespace tandem
