// Mixture-of-experts routing (kernels/moe_route.h): softmax and top-k with deterministic ties,
// one warp per token.
#include "kernels/moe_route.h"

#include <cmath>
#include <cstdint>

#include "kernels/moe_route.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

constexpr int k_route_warps = 4;

// One warp per token (route_warp, kernels/moe_route.cuh). PL: the fewest powers of two of
// logits a lane that hold n_expert, so 128 experts take 4 a lane, not the 16 that 512 need. (The
// form before the sorted lanes, a scan of the lane's PL logits and a butterfly of (value, id)
// pairs every round, left the 35B shape's tg128 2.4% slower on an H200: docs/PERFORMANCE.md.)
template <int PL>
__global__ void __launch_bounds__(32 * k_route_warps)
    moe_route_kernel(const float* __restrict__ logits, int n_tok, int n_expert, int k, bool renorm,
                     int32_t* __restrict__ ids, float* __restrict__ weights) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x * k_route_warps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= n_tok) return;
  const float* row = logits + static_cast<int64_t>(t) * n_expert;
  int my_id;
  float my_w;
  route_warp<PL>([row](int e) { return row[e]; }, n_expert, k, renorm, my_id, my_w);
  if (lane < k) {
    ids[static_cast<int64_t>(t) * k + lane] = my_id;
    weights[static_cast<int64_t>(t) * k + lane] = my_w;
  }
}

}  // namespace

cudaError_t launch_moe_route(const float* logits, int n_tok, int n_expert, int k, bool renorm, int32_t* ids,
                             float* weights, cudaStream_t stream) {
  if (n_tok < 0 || n_expert < 1 || n_expert > k_moe_max_experts || k < 1 || k > k_moe_max_k || k > n_expert)
    return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!logits || !ids || !weights) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>((n_tok + k_route_warps - 1) / k_route_warps);
  const auto launch = [&](auto kernel) {
    return launch_pdl(kernel, dim3(grid), dim3(32 * k_route_warps), stream, logits, n_tok, n_expert, k, renorm, ids,
                      weights);
  };
  static_assert(k_moe_max_experts == 16 * 32, "the largest kernel below holds k_moe_max_experts");
  if (n_expert <= 32) return launch(moe_route_kernel<1>);
  if (n_expert <= 64) return launch(moe_route_kernel<2>);
  if (n_expert <= 128) return launch(moe_route_kernel<4>);
  if (n_expert <= 256) return launch(moe_route_kernel<8>);
  return launch(moe_route_kernel<16>);
}

}  // namespace tandem
