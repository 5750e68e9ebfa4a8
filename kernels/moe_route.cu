// Mixture-of-experts routing (kernels/moe_route.h): softmax and top-k with deterministic ties,
// one warp per token; and decode's FFN norm with the float32 router in one launch.
#include "kernels/moe_route.h"

#include <cmath>
#include <cstdint>

#include "kernels/matvec.h"
#include "kernels/norm_rows.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

constexpr int k_route_warps = 4;

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

// One warp per token. Lane l holds the logits of experts l, l + 32, ... (PL of them; PL the
// fewest powers of two that hold n_expert, so 128 experts take 4 a lane, not the 16 that 512
// need), sorted once in its registers by (logit desc, id asc). Each of the k rounds then takes
// the warp's largest head key and, among the lanes offering it, the lowest id: the lane that owns
// it drops its head. The order is the rule's (ties to the lower id) and the same on every lane,
// so the result is deterministic. The softmax's max and sum are taken as before the sort (lane
// order, then the butterfly), so the weights keep their bits. (The form before, a scan of the
// lane's PL logits and a butterfly of (value, id) pairs every round, left the 35B shape's tg128
// 2.4% slower on an H200: docs/PERFORMANCE.md.)
template <int PL>
__global__ void __launch_bounds__(32 * k_route_warps)
    moe_route_kernel(const float* __restrict__ logits, int n_tok, int n_expert, int k, bool renorm,
                     int32_t* __restrict__ ids, float* __restrict__ weights) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x * k_route_warps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= n_tok) return;
  const float* row = logits + static_cast<int64_t>(t) * n_expert;
  uint32_t key[PL];
  int id[PL];
  float mx = -INFINITY, sum = 0.f;
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    const float x = e < n_expert ? row[e] : -INFINITY;
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

  int my_id = 0;
  float my_w = 0.f;
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

// Block e: router row e. Every block norms each token's row as rms_norm_wide_kernel holds and
// norms it (the same bits) and dots the normed chunks with its row; block 0 also writes them
// (xn, and with Q8 the int8 copy). The norm and router weights are constant: fetched before the
// wait, while the previous kernel finishes.
template <bool Q8>
__global__ void __launch_bounds__(norm::k_threads)
    moe_router_norm_kernel(const float* x, const float* __restrict__ norm_w, float eps, const float* __restrict__ router,
                           int n_expert, int n, int n_tok, float* logits, float* xn, int8_t* qx, float2* ds) {
  __shared__ float red[32];
  const int e = blockIdx.x, n4 = n / 4;
  const auto* w4 = reinterpret_cast<const float4*>(norm_w);
  const auto* r4 = reinterpret_cast<const float4*>(router + static_cast<int64_t>(e) * n);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 wn[norm::k_chunks], wr[norm::k_chunks];
#pragma unroll
  for (int k = 0; k < norm::k_chunks; ++k) {
    const int c = k * norm::k_threads + threadIdx.x;
    wn[k] = c < n4 ? w4[c] : zero;
    wr[k] = c < n4 ? r4[c] : zero;
  }
  pdl_wait();
  pdl_trigger();
  for (int t = 0; t < n_tok; ++t) {
    const int64_t row = static_cast<int64_t>(t) * n;
    const auto* x4 = reinterpret_cast<const float4*>(x + row);
    float4 v[norm::k_chunks];
#pragma unroll
    for (int k = 0; k < norm::k_chunks; ++k) {
      const int c = k * norm::k_threads + threadIdx.x;
      v[k] = c < n4 ? x4[c] : zero;
    }
    const float inv = norm::rms_scale(norm::block_sum(norm::wide_squares(v), red), n, eps);
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < norm::k_chunks; ++k) {
      const float4 o = norm::normed(v[k], wn[k], inv);
      dot = fmaf(o.x, wr[k].x, dot), dot = fmaf(o.y, wr[k].y, dot);
      dot = fmaf(o.z, wr[k].z, dot), dot = fmaf(o.w, wr[k].w, dot);
    }
    dot = norm::block_sum(dot, red);
    if (threadIdx.x == 0) logits[static_cast<int64_t>(t) * n_expert + e] = dot;
    if (e == 0) norm::wide_out<Q8>(v, wn, n4, inv, xn + row, Q8 ? qx + row : nullptr, Q8 ? ds + row / 32 : nullptr);
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

bool moe_router_norm_fits(int n_tok, int64_t n_embd) {
  return norm::wide_decode_rows(n_tok, n_embd, k_matvec_max_tokens);
}

cudaError_t launch_moe_router_norm(const float* x, const float* norm_w, float eps, const float* router, int n_expert,
                                   int64_t n_embd, int n_tok, float* logits, float* xn, void* work,
                                   cudaStream_t stream) {
  if (!moe_router_norm_fits(n_tok, n_embd) || n_expert < 1 || n_expert > k_moe_max_experts || !x || !norm_w ||
      !router || !logits || !xn || !(eps >= 0.f))
    return cudaErrorInvalidValue;
  const auto a16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!a16(x) || !a16(norm_w) || !a16(router) || !a16(xn) || (work && !a16(work))) return cudaErrorMisalignedAddress;
  const int n = static_cast<int>(n_embd);
  if (!work)
    return launch_pdl(moe_router_norm_kernel<false>, dim3(n_expert), dim3(norm::k_threads), stream, x, norm_w, eps,
                      router, n_expert, n, n_tok, logits, xn, nullptr, nullptr);
  const matvec_qx q = matvec_x_parts(work, n_embd, n_tok);
  return launch_pdl(moe_router_norm_kernel<true>, dim3(n_expert), dim3(norm::k_threads), stream, x, norm_w, eps, router,
                    n_expert, n, n_tok, logits, xn, q.q, q.ds);
}

}  // namespace tandem
