// Grid-wide synchronisation for persistent kernels whose blocks are all resident at once (a
// cooperative launch): a reusable barrier, and a ticket that elects the last block to finish.
#pragma once

#include <cuda_runtime.h>

namespace tandem {

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#else
  v = *reinterpret_cast<const volatile unsigned*>(p);
#endif
  return v;
}

// A barrier still waiting after this many clock cycles (seconds) means blocks that will never
// arrive (not all resident, or a bug): the kernel traps, an error instead of a hung device.
constexpr long long k_grid_barrier_timeout_cycles = 1ll << 34;

// Every block of the grid waits here until all have arrived; writes before it (any thread of
// any block) are visible after it to reads that do not take the read-only path (__ldcg or plain
// loads, not __ldg). *word: one per kernel that uses it, zero before its first launch; each
// barrier adds 0x80000000 in all (block 0 adds 0x80000000 - (n - 1), the others 1), so its top
// bit flips when the last block arrives and the low bits come back to zero: no reset between
// barriers or launches. Only thread 0 fences and spins; the other warps wait at the block's
// barrier with their loads (prefetches, weights for the next phase) still in flight.
__device__ __forceinline__ void grid_barrier(unsigned* word) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned n = gridDim.x;
    const unsigned add = blockIdx.x == 0 ? 0x80000000u - (n - 1) : 1u;
    __threadfence();
    const unsigned old = atomicAdd(word, add);
    const long long t0 = clock64();
    while (((old ^ ld_acquire_gpu(word)) & 0x80000000u) == 0u) {
      if (clock64() - t0 > k_grid_barrier_timeout_cycles) __trap();
    }
    __threadfence();
  }
  __syncthreads();
}

// True in exactly one block: the last to call it (every block calls it once per launch). The
// writes of all blocks before their call are visible to that block after it (same rule as
// grid_barrier). *word: zero before the first launch; the last block puts it back to zero.
__device__ __forceinline__ bool grid_last_block(unsigned* word) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(word, 1u) == gridDim.x - 1;
    if (last) {
      *word = 0u;
      __threadfence();
    }
  }
  __syncthreads();
  return last;
}

}  // namespace tandem
