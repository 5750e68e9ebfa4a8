// One warp's routing of one token (softmax, then the top k with ties to the lower id), shared by
// the routing kernel (kernels/moe_route.cu) and the decode expert launches that route for
// themselves (kernels/moe_matvec.cu).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace tandem {

// Orderable key of a logit: a larger logit has a larger key and equal logits equal keys (-0 as
// +0, NaN as -inf); 0, below every logit's key, marks an empty entry.
__device__ __forceinline__ uint32_t logit_key(float x) {
  const uint32_t u = __float_as_uint(isnan(x) ? -INFINITY : (x == 0.f ? 0.f : x));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_logit(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The warp's largest (Max) or smallest value: one instruction on sm_80+, a butterfly before.
// Routing takes the largest head key, then the smallest id among the lanes that offer it.
template <bool Max>
__device__ __forceinline__ uint32_t warp_extreme(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return Max ? __reduce_max_sync(0xffffffffu, v) : __reduce_min_sync(0xffffffffu, v);
#else
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? max(v, w) : min(v, w);
  }
  return v;
#endif
}

// The whole warp routes one token whose logit of expert e is logit(e). Lane l holds the logits of
// experts l, l + 32, ... (PL of them: PL * 32 >= n_expert), sorted once in its registers by
// (logit desc, id asc). Each of the k rounds then takes the warp's largest head key and, among
// the lanes offering it, the lowest id: the lane that owns it drops its head. The order is the
// rule's (ties to the lower id) and the same on every lane, so the result is deterministic. The
// softmax's max and sum are taken before the sort (lane order, then the butterfly). On return
// lane j < k holds slot j: its expert id and weight (renormalised over the k when renorm).
template <int PL, class Logit>
__device__ __forceinline__ void route_warp(Logit logit, int n_expert, int k, bool renorm, int& my_id, float& my_w) {
  const int lane = threadIdx.x % 32;
  uint32_t key[PL];
  int id[PL];
  float mx = -INFINITY, sum = 0.f;
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    const float x = e < n_expert ? logit(e) : -INFINITY;
    key[i] = e < n_expert ? logit_key(x) : 0u;
    id[i] = e;
    mx = fmaxf(mx, isnan(x) ? -INFINITY : x);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  // All logits -inf (or NaN): every weight is taken as equal (exp(0) each) rather than NaN.
  const float shift = mx == -INFINITY ? 0.f : mx;
#pragma unroll
  for (int i = 0; i < PL; ++i)
    if (lane + 32 * i < n_expert) sum += mx == -INFINITY ? 1.f : expf(key_logit(key[i]) - shift);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);

  // Odd-even transposition sort: ids rise with i, so equal keys keep the lower id first.
#pragma unroll
  for (int pass = 0; pass < PL; ++pass)
#pragma unroll
    for (int i = pass % 2; i + 1 < PL; i += 2)
      if (key[i + 1] > key[i]) {
        const uint32_t tk = key[i];
        const int ti = id[i];
        key[i] = key[i + 1], id[i] = id[i + 1], key[i + 1] = tk, id[i + 1] = ti;
      }

  my_id = 0;
  my_w = 0.f;
  for (int j = 0; j < k; ++j) {
    const uint32_t best = warp_extreme<true>(key[0]);
    const uint32_t win = warp_extreme<false>(key[0] == best ? static_cast<uint32_t>(id[0]) : 0xffffffffu);
    if (static_cast<uint32_t>(id[0]) == win) {
#pragma unroll
      for (int i = 0; i + 1 < PL; ++i) key[i] = key[i + 1], id[i] = id[i + 1];
      key[PL - 1] = 0u;
    }
    if (lane == j) my_id = static_cast<int>(win), my_w = (mx == -INFINITY ? 1.f : expf(key_logit(best) - shift)) / sum;
  }
  if (renorm) {
    float s = 0.f;
    for (int j = 0; j < k; ++j) s += __shfl_sync(0xffffffffu, my_w, j);  // in slot order
    my_w /= s;
  }
}

}  // namespace tandem
