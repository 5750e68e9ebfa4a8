// Device side of L2 prefetching (kernels/l2_prefetch.h): ask L2 for a span of bytes and go on
// without waiting for it.
#pragma once

#include <cstdint>

namespace tandem {

// Asks L2 for the 16-byte aligned part of [p, p + bytes) (a few bytes at either end may be left
// out: they come with the caller's own loads). One instruction on sm_90 (the SM's bulk-copy unit
// walks the span), one a 128-byte line before.
__device__ __forceinline__ void l2_prefetch_span(const void* p, int64_t bytes) {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  const uint64_t lo = (a + 15) & ~uint64_t{15}, hi = (a + static_cast<uint64_t>(bytes)) & ~uint64_t{15};
  if (bytes <= 0 || hi <= lo) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"(static_cast<uint32_t>(hi - lo)) : "memory");
#else
  for (uint64_t at = lo & ~uint64_t{127}; at < hi; at += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
#endif
}

}  // namespace tandem
