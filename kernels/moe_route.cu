// Mixture-of-experts routing (kernels/moe_route.h): softmax and top-k with deterministic ties,
// one warp per token.
#include "kernels/moe_route.h"

#include <cmath>
#include <cstdint>

#include "kernels/pdl.cuh"

namespace tandem {
namespace {

constexpr int k_route_warps = 4;

// a before b in the selection: larger logit, or the same and a lower id.
__device__ __forceinline__ bool ranks_before(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

// One warp per token. Lane l holds the logits of experts l, l + 32, ... (PL of them, NaN as
// -inf; PL the fewest powers of two that hold n_expert, so 128 experts scan 4 a lane, not the
// 16 that 512 need). Each of the k rounds takes the warp's best untaken (logit, id) by a
// butterfly of (value, id) pairs: every lane ends with the same winner, so the order is fixed and
// the result deterministic.
template <int PL>
__global__ void __launch_bounds__(32 * k_route_warps)
    moe_route_kernel(const float* __restrict__ logits, int n_tok, int n_expert, int k, bool renorm,
                     int32_t* __restrict__ ids, float* __restrict__ weights) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x * k_route_warps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= n_tok) return;
  const float* row = logits + static_cast<int64_t>(t) * n_expert;
  float v[PL];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    const float x = e < n_expert ? row[e] : -INFINITY;
    v[i] = isnan(x) ? -INFINITY : x;
    mx = fmaxf(mx, v[i]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  // All logits -inf (or NaN): every weight is taken as equal (exp(0) each) rather than NaN.
  const float shift = mx == -INFINITY ? 0.f : mx;
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < PL; ++i)
    if (lane + 32 * i < n_expert) sum += mx == -INFINITY ? 1.f : expf(v[i] - shift);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);

  uint32_t taken = 0;
  int my_id = 0;
  float my_w = 0.f;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < PL; ++i) {
      const int e = lane + 32 * i;
      if (e < n_expert && !(taken >> i & 1u) && ranks_before(v[i], e, bv, bi)) bv = v[i], bi = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ranks_before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    if (lane == j) my_id = bi, my_w = (mx == -INFINITY ? 1.f : expf(bv - shift)) / sum;
  }
  float norm = 1.f;
  if (renorm) {
    float s = 0.f;
    for (int j = 0; j < k; ++j) s += __shfl_sync(0xffffffffu, my_w, j);  // in slot order
    norm = s;
  }
  if (lane < k) {
    ids[static_cast<int64_t>(t) * k + lane] = my_id;
    weights[static_cast<int64_t>(t) * k + lane] = renorm ? my_w / norm : my_w;
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
