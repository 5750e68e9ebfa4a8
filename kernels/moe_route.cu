// Mixture-of-experts routing (kernels/moe_route.h): softmax and top-k with deterministic ties,
// one warp per token; and decode's router mat-vec fused with that selection in one launch.
#include "kernels/moe_route.h"

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/pdl.cuh"

namespace tandem {
namespace {

constexpr int k_route_warps = 4;
constexpr int k_route_per_lane = k_moe_max_experts / 32;

// a before b in the selection: larger logit, or the same and a lower id.
__device__ __forceinline__ bool ranks_before(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

// One warp routes one token: row holds its n_expert logits, ids and weights its k slots. Lane l
// holds the logits of experts l, l + 32, ... (NaN as -inf). Each of the k rounds takes the warp's
// best untaken (logit, id) by a butterfly of (value, id) pairs: every lane ends with the same
// winner, so the order is fixed and the result deterministic. L2: read the logits through L2
// (ld.cg), for the fused kernel, whose other blocks wrote them earlier in the same launch (plain
// loads keep moe_route_kernel at 54 registers against 72).
template <bool L2>
__device__ __forceinline__ void route_token(const float* row, int n_expert, int k, bool renorm,
                                            int32_t* __restrict__ ids, float* __restrict__ weights) {
  const int lane = threadIdx.x % 32;
  float v[k_route_per_lane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < k_route_per_lane; ++i) {
    const int e = lane + 32 * i;
    const float x = e < n_expert ? (L2 ? __ldcg(row + e) : row[e]) : -INFINITY;
    v[i] = isnan(x) ? -INFINITY : x;
    mx = fmaxf(mx, v[i]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  // All logits -inf (or NaN): every weight is taken as equal (exp(0) each) rather than NaN.
  const float shift = mx == -INFINITY ? 0.f : mx;
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < k_route_per_lane; ++i)
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
    for (int i = 0; i < k_route_per_lane; ++i) {
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
    ids[lane] = my_id;
    weights[lane] = renorm ? my_w / norm : my_w;
  }
}

__global__ void __launch_bounds__(32 * k_route_warps)
    moe_route_kernel(const float* __restrict__ logits, int n_tok, int n_expert, int k, bool renorm,
                     int32_t* __restrict__ ids, float* __restrict__ weights) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x * k_route_warps + threadIdx.x / 32;
  if (t >= n_tok) return;
  const int64_t tk = static_cast<int64_t>(t) * k;
  route_token<false>(logits + static_cast<int64_t>(t) * n_expert, n_expert, k, renorm, ids + tk, weights + tk);
}

// ---- Router mat-vec fused with the selection (decode) ---------------------------------------

// One warp per token in the selection, so the last block routes every token at once.
constexpr int k_rr_warps = k_moe_matvec_max_tokens;
constexpr int k_rr_threads = 32 * k_rr_warps;
// float4s of router rows each thread loads before pdl_wait, over all its block's rows: the
// block's share of the weights is in flight while the previous kernel finishes.
constexpr int k_rr_prefetch = 8;
constexpr size_t k_rr_logits_offset = 16;  // the counter, then the logits

struct rr_params {
  const float4* router;  // n_expert rows of n4 float4
  const float4* gate;    // row n_expert, or null
  const float4* x;       // n_tok rows of n4 float4
  int n_tok, n4, n_expert, k;
  bool renorm;
  int32_t* ids;
  float* weights;
  float* gate_logit;
  float* logits;  // written and read back in the same launch: never through the read-only path
  unsigned* counter;
};

__device__ __forceinline__ float dot4(float acc, float4 w, float4 x) {
  acc = fmaf(w.x, x.x, acc);
  acc = fmaf(w.y, x.y, acc);
  acc = fmaf(w.z, x.z, acc);
  return fmaf(w.w, x.w, acc);
}

// acc[r][t] += w[r] · x[t][j] for the block's R rows and NT token slots. Slots past n_tok re-read
// the last token (valid memory, no branch between the loads) and are dropped later; j past the
// row loads nothing (zeros), so every thread's loads issue together.
template <int NT, int R>
__device__ __forceinline__ void rr_step(float (&acc)[R][NT], const float4 (&w)[R], const rr_params& p, int j) {
  float4 xv[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t)
    xv[t] = j < p.n4 ? __ldg(p.x + static_cast<int64_t>(min(t, p.n_tok - 1)) * p.n4 + j) : make_float4(0, 0, 0, 0);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = dot4(acc[r][t], w[r], xv[t]);
}

// The block's R rows dotted with every token: thread i takes float4s i, i + k_rr_threads, ...
// of each row (the same for every R and NT, so a logit's summation order depends on n_embd only).
template <int NT, int R>
__device__ __forceinline__ void rr_dots(float (&acc)[R][NT], const rr_params& p) {
  const float4* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int e = blockIdx.x * R + r;
    rows[r] = e < p.n_expert ? p.router + static_cast<int64_t>(e) * p.n4 : e == p.n_expert ? p.gate : nullptr;
  }
  constexpr int PF = k_rr_prefetch / R;
  float4 pre[PF][R];
#pragma unroll
  for (int q = 0; q < PF; ++q)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = threadIdx.x + q * k_rr_threads;
      pre[q][r] = rows[r] && j < p.n4 ? __ldg(rows[r] + j) : make_float4(0, 0, 0, 0);
    }
  pdl_wait();  // x is the previous kernel's output
  pdl_trigger();
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
#pragma unroll
  for (int q = 0; q < PF; ++q) rr_step<NT, R>(acc, pre[q], p, threadIdx.x + q * k_rr_threads);
  for (int j = threadIdx.x + PF * k_rr_threads; j < p.n4; j += k_rr_threads) {  // rows past the prefetch
    float4 w[R];
#pragma unroll
    for (int r = 0; r < R; ++r) w[r] = rows[r] ? __ldg(rows[r] + j) : make_float4(0, 0, 0, 0);
    rr_step<NT, R>(acc, w, p, j);
  }
}

// Block b: rows b * R .. b * R + R - 1 of [router; gate] dotted with the tokens, reduced in a
// fixed order (lanes by butterfly, then warps in turn), written to logits / gate_logit. The last
// block to finish (a counter in the workspace) then routes every token with route_token and
// puts the counter back to 0 for the next launch.
template <int NT, int R>
__global__ void __launch_bounds__(k_rr_threads) moe_router_route_kernel(rr_params p) {
  float acc[R][NT];
  rr_dots<NT, R>(acc, p);
  __shared__ float part[k_rr_warps][R * NT];
  __shared__ bool is_last;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) part[warp][r * NT + t] = v;
    }
  __syncthreads();
  if (threadIdx.x < R * NT) {
    const int t = threadIdx.x % NT, e = blockIdx.x * R + threadIdx.x / NT;
    if (t < p.n_tok && (e < p.n_expert || (e == p.n_expert && p.gate))) {
      float s = 0.f;
      for (int w = 0; w < k_rr_warps; ++w) s += part[w][threadIdx.x];
      if (e < p.n_expert)
        p.logits[static_cast<int64_t>(t) * p.n_expert + e] = s;
      else
        p.gate_logit[t] = s;
      __threadfence();  // the logit is visible to the last block before this block counts itself done
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    is_last = atomicAdd(p.counter, 1u) == gridDim.x - 1;
    __threadfence();
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  if (warp < p.n_tok) {
    const int64_t tk = static_cast<int64_t>(warp) * p.k;
    route_token<true>(p.logits + static_cast<int64_t>(warp) * p.n_expert, p.n_expert, p.k, p.renorm, p.ids + tk,
                p.weights + tk);
  }
  if (threadIdx.x == 0) *p.counter = 0;  // every block has counted: graph replays start from 0
}

// Token slots NT and rows per block R by batch: more rows per block for more tokens, so each
// block's x reads (all tokens, from L2) serve more weight rows.
template <int NT, int R>
cudaError_t launch_rr(const rr_params& p, cudaStream_t stream) {
  const int rows = p.n_expert + (p.gate ? 1 : 0);
  return launch_pdl(moe_router_route_kernel<NT, R>, dim3(static_cast<unsigned>((rows + R - 1) / R)),
                    dim3(k_rr_threads), stream, p);
}

bool misaligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; }

bool route_sizes_ok(int n_expert, int k) {
  return n_expert >= 1 && n_expert <= k_moe_max_experts && k >= 1 && k <= k_moe_max_k && k <= n_expert;
}

}  // namespace

cudaError_t launch_moe_route(const float* logits, int n_tok, int n_expert, int k, bool renorm, int32_t* ids,
                             float* weights, cudaStream_t stream) {
  if (n_tok < 0 || !route_sizes_ok(n_expert, k)) return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!logits || !ids || !weights) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>((n_tok + k_route_warps - 1) / k_route_warps);
  return launch_pdl(moe_route_kernel, dim3(grid), dim3(32 * k_route_warps), stream, logits, n_tok, n_expert, k,
                    renorm, ids, weights);
}

size_t moe_router_route_work_bytes(int n_tok, int n_expert) {
  if (n_tok < 0 || n_tok > k_moe_matvec_max_tokens || n_expert < 1 || n_expert > k_moe_max_experts) return 0;
  return k_rr_logits_offset + static_cast<size_t>(n_tok) * static_cast<size_t>(n_expert) * sizeof(float);
}

cudaError_t launch_moe_router_route(const float* router, const float* shexp_gate, const float* xn, int n_tok,
                                    int64_t n_embd, int n_expert, int k, bool renorm, int32_t* ids, float* weights,
                                    float* gate_logit, float* logits_out, void* work, cudaStream_t stream) {
  if (n_tok < 0 || n_tok > k_moe_matvec_max_tokens || n_embd <= 0 || n_embd % 4 != 0 ||
      n_embd / 4 > INT_MAX - k_rr_threads || !route_sizes_ok(n_expert, k))
    return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!router || !xn || !ids || !weights || !work || (shexp_gate && !gate_logit)) return cudaErrorInvalidValue;
  if (misaligned16(router) || misaligned16(xn) || (shexp_gate && misaligned16(shexp_gate)) ||
      reinterpret_cast<uintptr_t>(work) % 4 != 0)
    return cudaErrorMisalignedAddress;
  rr_params p;
  p.router = reinterpret_cast<const float4*>(router);
  p.gate = reinterpret_cast<const float4*>(shexp_gate);
  p.x = reinterpret_cast<const float4*>(xn);
  p.n_tok = n_tok, p.n4 = static_cast<int>(n_embd / 4), p.n_expert = n_expert, p.k = k, p.renorm = renorm;
  p.ids = ids, p.weights = weights, p.gate_logit = gate_logit;
  p.counter = static_cast<unsigned*>(work);
  p.logits = logits_out ? logits_out : reinterpret_cast<float*>(static_cast<char*>(work) + k_rr_logits_offset);
  if (n_tok == 1) return launch_rr<1, 1>(p, stream);
  if (n_tok == 2) return launch_rr<2, 1>(p, stream);
  if (n_tok <= 4) return launch_rr<4, 2>(p, stream);
  return launch_rr<8, 4>(p, stream);
}

}  // namespace tandem
