// The expert of a grouped GEMM's row tile (launch_moe_group's tile_offsets), shared by the
// grouped GEMM kernels (kernels/moe_gemm.cu, kernels/qgemm.cu).
#pragma once

#include <cstdint>

namespace tandem {

// The last e with tiles[e] <= tile (experts without rows have tiles[e] == tiles[e + 1] and are
// never found). Requires tile < tiles[n_expert].
__device__ __forceinline__ int expert_of_tile(const int32_t* tiles, int n_expert, int tile) {
  int lo = 0, hi = n_expert;  // tiles[lo] <= tile < tiles[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (__ldg(tiles + mid) <= tile) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace tandem
