// Mixture-of-experts kernels besides the grouped GEMM (moe_gemm.cu) and routing (moe_route.cu):
// the decode mat-vec over each token's selected experts (the mat-vec's per-type pieces,
// matvec_types.cuh), the fused SwiGLU + int8 copy, the weighted combine and the device-side
// grouping of pairs by expert.
#include "kernels/moe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/matvec.h"
#include "kernels/matvec_types.cuh"
#include "kernels/matvec_x.cuh"
#include "kernels/norm_rows.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

using namespace mv;

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// ---- x's int8 copy, SwiGLU, combine ---------------------------------------------------------

// One warp per 32-value block of n_rows rows of n_in values at x + r * stride, written compact
// (row r at r * n_in, matvec_x_parts layout).
__global__ void __launch_bounds__(256) moe_quantize_x_kernel(const float* x, int64_t stride, int64_t n_in,
                                                             int64_t n_blocks, int8_t* qx, float2* ds) {
  pdl_wait();
  pdl_trigger();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (b >= n_blocks) return;
  const int64_t per_row = n_in / 32, r = b / per_row, j = b % per_row;
  quantize_x_warp(x[r * stride + 32 * j + threadIdx.x % 32], qx + 32 * b, ds + b);
}

// total % 32 == 0, so every warp's 32 values are one block of one row.
__global__ void __launch_bounds__(256) moe_swiglu_q8_kernel(const float* gate, const float* up, float* out,
                                                            int64_t total, int8_t* qx, float2* ds) {
  pdl_wait();
  pdl_trigger();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const float g = gate[i];
    const float v = g / (1.f + expf(-g)) * up[i];
    out[i] = v;
    quantize_x_warp(v, qx + (i & ~int64_t(31)), ds + i / 32);
  }
}

// The shared expert's gate logit of token t: gate_row · x[t], each thread's strided partial sum
// (float4s for V = 4, their loads issued four at a time: one dependent load a step made this
// dot cost more than the combine itself), then the warps' sums in warp order, so every block of
// the token gets the same bits. Called by all threads of the block; red holds 32 floats.
template <int V>
__device__ __forceinline__ float shared_gate_dot(const float* __restrict__ row, const float* __restrict__ x, int64_t n, float* red) {
  using vec = std::conditional_t<V == 4, float4, float>;
  const auto* r = reinterpret_cast<const vec*>(row);
  const auto* xv = reinterpret_cast<const vec*>(x);
  float a = 0.f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n / V; i += blockDim.x) {
    const vec p = r[i], q = xv[i];
    if constexpr (V == 4) {
      a = fmaf(p.x, q.x, a), a = fmaf(p.y, q.y, a), a = fmaf(p.z, q.z, a), a = fmaf(p.w, q.w, a);
    } else {
      a = fmaf(p, q, a);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  __syncthreads();  // the previous token's reads of red are done
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = a;
  __syncthreads();
  float s = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) s += red[w];
  return s;
}

// out[t][i] (+)= sum_j w[t * k + j] * y[t * k + j][i], j in slot order with one fmaf each, for V
// consecutive i a thread (V = 4 when n_embd allows float4 rows): the k loads (k <= KM) are all
// issued before the sums, which a loop over a runtime k would have serialized. Shared (1: the gate
// logits given, 2: computed from the gate row): then out[t][i] += sigmoid(logit_t) * sh.y[t][i],
// after the routed sum, the product rounded first (the bits of a separate pass).
template <int V, int Shared, int KM>
__global__ void __launch_bounds__(256) moe_combine_kernel(const float* __restrict__ y, const float* __restrict__ w,
                                                          int n_tok, int k, int64_t n_embd, float* out, bool add,
                                                          moe_shared_term sh) {
  using vec = std::conditional_t<V == 4, float4, float>;
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (Shared != 2 && i >= n_embd) return;  // (the gate's dot product needs every thread)
  for (int t = blockIdx.y; t < n_tok; t += gridDim.y) {
    // The slots' loads (and x's and the shared row's) go out before the gate's dot product, so
    // their latency and the dot's overlap (a decode token's combine is two blocks' latency).
    const bool mine = i < n_embd;
    const float* wt = w + static_cast<int64_t>(t) * k;
    const float* yt = y + static_cast<int64_t>(t) * k * n_embd + i;
    float* o = out + static_cast<int64_t>(t) * n_embd + i;
    vec yv[KM], ov{}, sv{};
    float wv[KM];
    if (mine) {
#pragma unroll
      for (int j = 0; j < KM; ++j)
        if (j < k) yv[j] = *reinterpret_cast<const vec*>(yt + j * n_embd), wv[j] = wt[j];
      if (add) ov = *reinterpret_cast<const vec*>(o);
      if constexpr (Shared != 0) sv = *reinterpret_cast<const vec*>(sh.y + static_cast<int64_t>(t) * n_embd + i);
    }
    float gate = 0.f;
    if constexpr (Shared != 0) {
      const float logit = Shared == 1 ? sh.gate_logits[t]
                                      : shared_gate_dot<V>(sh.gate_row, sh.x + static_cast<int64_t>(t) * n_embd, n_embd, red);
      gate = 1.f / (1.f + expf(-logit));
    }
    if (!mine) continue;
    float s[V] = {};
#pragma unroll
    for (int j = 0; j < KM; ++j) {
      if (j >= k) break;
      const float* yj = reinterpret_cast<const float*>(&yv[j]);
#pragma unroll
      for (int e = 0; e < V; ++e) s[e] = fmaf(wv[j], yj[e], s[e]);
    }
    const float* of = reinterpret_cast<const float*>(&ov);
    const float* ys = reinterpret_cast<const float*>(&sv);
    float r[V];
#pragma unroll
    for (int e = 0; e < V; ++e) r[e] = add ? of[e] + s[e] : s[e];
    if constexpr (Shared != 0) {
#pragma unroll
      for (int e = 0; e < V; ++e) r[e] += __fmul_rn(gate, ys[e]);  // not contracted into an fma
    }
#pragma unroll
    for (int e = 0; e < V; ++e) o[e] = r[e];
  }
}

// The combine of one token a block (grid: n_tok), float4 chunk c = kk * 256 + thread of its row
// as rms_norm_wide_kernel holds them, each summed as moe_combine_kernel sums it (the same bits);
// then the next layer's norm of the row from those registers (norm::wide_tail).
template <int Shared, int KM>
__global__ void __launch_bounds__(norm::k_threads)
    moe_combine_norm_kernel(const float* __restrict__ y, const float* __restrict__ w, int k, int64_t n_embd,
                            float* out, bool add, moe_shared_term sh, const float* __restrict__ norm_w, float eps,
                            float* xn, int8_t* qx, float2* ds) {
  __shared__ float red[32];
  const int t = blockIdx.x, n4 = static_cast<int>(n_embd / 4);
  const auto* w4 = reinterpret_cast<const float4*>(norm_w);
  float4 wn[norm::k_chunks], v[norm::k_chunks];
  // The norm's weights are constant: fetched while the previous kernel finishes.
#pragma unroll
  for (int kk = 0; kk < norm::k_chunks; ++kk) {
    const int c = kk * norm::k_threads + threadIdx.x;
    wn[kk] = c < n4 ? w4[c] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  pdl_wait();
  pdl_trigger();
  float gate = 0.f;
  if constexpr (Shared != 0) {
    const float logit = Shared == 1 ? sh.gate_logits[t]
                                    : shared_gate_dot<4>(sh.gate_row, sh.x + static_cast<int64_t>(t) * n_embd, n_embd, red);
    gate = 1.f / (1.f + expf(-logit));
  }
  const float* wt = w + static_cast<int64_t>(t) * k;
  float wv[KM];
#pragma unroll
  for (int j = 0; j < KM; ++j) wv[j] = j < k ? wt[j] : 0.f;
  auto* o4 = reinterpret_cast<float4*>(out + static_cast<int64_t>(t) * n_embd);
#pragma unroll
  for (int kk = 0; kk < norm::k_chunks; ++kk) {
    const int c = kk * norm::k_threads + threadIdx.x;
    v[kk] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c >= n4) continue;
    const float4* yt = reinterpret_cast<const float4*>(y + static_cast<int64_t>(t) * k * n_embd) + c;
    float4 yv[KM];
#pragma unroll
    for (int j = 0; j < KM; ++j)
      if (j < k) yv[j] = yt[static_cast<int64_t>(j) * n4];
    float s[4] = {};
#pragma unroll
    for (int j = 0; j < KM; ++j) {
      if (j >= k) break;
      const float* yj = reinterpret_cast<const float*>(&yv[j]);
#pragma unroll
      for (int e = 0; e < 4; ++e) s[e] = fmaf(wv[j], yj[e], s[e]);
    }
    float r[4];
    const float4 ov = add ? o4[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    const float* of = reinterpret_cast<const float*>(&ov);
#pragma unroll
    for (int e = 0; e < 4; ++e) r[e] = add ? of[e] + s[e] : s[e];
    if constexpr (Shared != 0) {
      const float4 sv = reinterpret_cast<const float4*>(sh.y + static_cast<int64_t>(t) * n_embd)[c];
      const float* ys = reinterpret_cast<const float*>(&sv);
#pragma unroll
      for (int e = 0; e < 4; ++e) r[e] += __fmul_rn(gate, ys[e]);  // not contracted into an fma
    }
    v[kk] = make_float4(r[0], r[1], r[2], r[3]);
    o4[c] = v[kk];
  }
  const int64_t row = static_cast<int64_t>(t) * n_embd;
  norm::wide_tail<true>(v, wn, static_cast<int>(n_embd), eps, xn + row, qx + row, ds + row / 32, red);
}

// The combine's launch: float4 rows where n_embd and the pointers allow.
template <int Shared>
cudaError_t launch_combine(const float* y, const float* w, int n_tok, int k, int64_t n_embd, float* out, bool add,
                           const moe_shared_term& sh, cudaStream_t stream) {
  const bool v4 = n_embd % 4 == 0 && aligned(y, 16) && aligned(out, 16) && (Shared == 0 || aligned(sh.y, 16)) &&
                  (Shared != 2 || (aligned(sh.gate_row, 16) && aligned(sh.x, 16)));
  const int64_t per_block = 256 * (v4 ? 4 : 1);
  const dim3 grid(static_cast<unsigned>((n_embd + per_block - 1) / per_block),
                  static_cast<unsigned>(std::min(n_tok, 65535)));
  // KM: the slots' loads held at once (registers: k <= 8, as Qwen's models have, takes half).
  const auto kernel = v4 ? (k <= 8 ? moe_combine_kernel<4, Shared, 8> : moe_combine_kernel<4, Shared, k_moe_max_k>)
                         : (k <= 8 ? moe_combine_kernel<1, Shared, 8> : moe_combine_kernel<1, Shared, k_moe_max_k>);
  return launch_pdl(kernel, grid, dim3(256), stream, y, w, n_tok, k, n_embd, out, add, sh);
}

// ---- Decode mat-vec -----------------------------------------------------------------------

// Row group g of a launch: pair p = t * k + j, matrix set m and rows [r0, r0 + R * NS) of n_out
// (NS sub-warps of SW lanes, R rows each). Groups run pair-major.
struct mv_params {
  const uint8_t* w[k_moe_max_outputs];
  float* y[k_moe_max_outputs];
  int n_mats, n_expert, k, n_blocks;
  int64_t stride, n_out, row_bytes, groups_per_mat, n_groups;
  const int32_t* ids;
  x_view xs;         // x floats (xf) and its int8 copy (qx, ds), rows n_in apart in the copy
  int64_t x_stride;  // floats between pair rows of xf; 0: rows by token, n_in apart
};

// The weight rows, their matrix's end, x and output of a group (for one sub-warp).
template <int R>
struct mv_group {
  const uint8_t* wrow[R];
  const uint8_t* wend;
  x_view xv;
  float* y;      // the pair's output row (row 0 of the matrix set's n_out)
  int64_t row0;  // this sub-warp's first row
  bool valid;    // the pair's id is an expert
};

template <int R, int NS>
__device__ __forceinline__ mv_group<R> setup_group(const mv_params& p, int64_t g, int sub) {
  const int64_t pm = g / p.groups_per_mat, rg = g % p.groups_per_mat;
  const int pair = static_cast<int>(pm / p.n_mats), m = static_cast<int>(pm % p.n_mats);
  const int e = __ldg(p.ids + pair);
  mv_group<R> s;
  s.valid = e >= 0 && e < p.n_expert;
  // Constant indices into the parameter arrays (a runtime index would copy them to local memory).
  const uint8_t* base = (m == 0 ? p.w[0] : p.w[1]) + (s.valid ? e : 0) * p.stride;
  s.wend = base + p.n_out * p.row_bytes;
  s.row0 = rg * R * NS + static_cast<int64_t>(sub) * R;
#pragma unroll
  for (int r = 0; r < R; ++r) s.wrow[r] = base + min(s.row0 + r, p.n_out - 1) * p.row_bytes;
  const int64_t xr = p.x_stride == 0 ? pair / p.k : pair;
  s.xv = p.xs;
  s.xv.xf = p.xs.xf + xr * (p.x_stride == 0 ? p.xs.n_in : p.x_stride);
  if (p.xs.qx) s.xv.qx = p.xs.qx + xr * p.xs.n_in, s.xv.ds = p.xs.ds + xr * (p.xs.n_in / 32);
  s.y = (m == 0 ? p.y[0] : p.y[1]) + static_cast<int64_t>(pair) * p.n_out;
  return s;
}

template <class Q, int R>
__device__ __forceinline__ void load_rows(const mv_group<R>& s, int pc, int n_pieces, typename Q::raw (&w)[R]) {
  if (pc >= n_pieces || !s.valid) return;
  const int b = pc / Q::ppb, kk = pc % Q::ppb;
#pragma unroll
  for (int r = 0; r < R; ++r) w[r] = Q::load(s.wrow[r] + static_cast<int64_t>(b) * sizeof(typename Q::block), kk, s.wend);
}

constexpr int k_mv_warps = 4;  // independent warps (walkers) per block

// Each warp walks row groups g = its global warp index, + all warps, ...; its NS = 32 / SW
// sub-warps take R rows each, their SW lanes pieces sl, sl + SW, ... of every row (short rows,
// the down projection's, would leave most of a 32-lane warp idle). As in matvec_kernel, the
// weights of a lane's next pieces (the next group's at a row's end) are loaded before the current
// ones are used. The ids come from the previous kernel: no weight load before pdl_wait.
template <class Q, int R, int SW>
__global__ void __launch_bounds__(32 * k_mv_warps) moe_matvec_kernel(mv_params p) {
  constexpr int NS = 32 / SW;
  using W = typename Q::raw;
  const int lane = threadIdx.x % 32, sub = lane / SW, sl = lane % SW;
  const int n_pieces = p.n_blocks * Q::ppb, n_iter = (n_pieces + SW - 1) / SW;
  const int64_t step = static_cast<int64_t>(gridDim.x) * k_mv_warps;
  int64_t g = static_cast<int64_t>(blockIdx.x) * k_mv_warps + threadIdx.x / 32;
  pdl_wait();
  if (g >= p.n_groups) return;
  mv_group<R> s = setup_group<R, NS>(p, g, sub);
  W cur[R];
  load_rows<Q, R>(s, sl, n_pieces, cur);
  for (; g < p.n_groups; g += step) {
    if (g + step >= p.n_groups) pdl_trigger();
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    const mv_group<R> c = s;
    for (int i = 0; i < n_iter; ++i) {
      const int pc = sl + i * SW;
      W nxt[R];
      if (i + 1 < n_iter) {
        load_rows<Q, R>(c, pc + SW, n_pieces, nxt);
      } else if (g + step < p.n_groups) {
        s = setup_group<R, NS>(p, g + step, sub);
        load_rows<Q, R>(s, sl, n_pieces, nxt);
      }
      if (pc < n_pieces && c.valid) {
        const int b = pc / Q::ppb, kk = pc % Q::ppb;
        const typename Q::xpiece xp = Q::load_x(c.xv, 0, b, kk);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += Q::dot(Q::decode(cur[r], kk), xp);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) cur[r] = nxt[r];
    }
    // Butterfly within the SW lanes of a sub-warp; lane sl == r writes row r.
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[r];
#pragma unroll
      for (int o = SW / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (sl == r) mine = v;
    }
    if (sl < R && c.row0 + sl < p.n_out) c.y[c.row0 + sl] = c.valid ? mine : __int_as_float(0x7fc00000);
  }
}

// Blocks of a kernel resident on the current device at once, cached per device and kernel.
template <class Q, int R, int SW>
cudaError_t resident_blocks(int& out) {
  constexpr int k_max_devices = 64;
  static std::atomic<int> cache[k_max_devices];
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  std::atomic<int>* slot = dev >= 0 && dev < k_max_devices ? &cache[dev] : nullptr;
  int v = slot ? slot->load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    int per_sm = 0, sms = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_matvec_kernel<Q, R, SW>, 32 * k_mv_warps, 0);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    v = std::max(1, per_sm) * std::max(1, sms);
    if (slot) slot->store(v, std::memory_order_relaxed);
  }
  out = v;
  return cudaSuccess;
}

template <class Q, int R, int SW>
cudaError_t launch_mv(mv_params p, int n_pairs, cudaStream_t s) {
  constexpr int NS = 32 / SW;
  p.groups_per_mat = (p.n_out + R * NS - 1) / (R * NS);
  p.n_groups = p.groups_per_mat * p.n_mats * n_pairs;
  if (p.n_groups == 0) return cudaSuccess;
  int resident = 0;
  const cudaError_t e = resident_blocks<Q, R, SW>(resident);
  if (e != cudaSuccess) return e;
  const int64_t blocks = std::min<int64_t>((p.n_groups + k_mv_warps - 1) / k_mv_warps, resident);
  return launch_pdl(moe_matvec_kernel<Q, R, SW>, dim3(static_cast<unsigned>(blocks)), dim3(32 * k_mv_warps), s, p);
}

// Rows per sub-warp: matvec's one-token choices (measured there on an H200).
template <class Q>
constexpr int rows_of() {
  using std::is_same_v;
  if constexpr (is_same_v<Q, mq_q4_k> || is_same_v<Q, mq_q5_k> || is_same_v<Q, mq_f16>) return 4;
  if constexpr (is_same_v<Q, mq_q5_1>) return 1;
  return 2;
}

// Sub-warp width: the fewest lanes (8, 16 or 32) that take every piece of a row in one pass.
template <class Q>
cudaError_t launch_mv_type(mv_params p, int64_t n_in, int n_pairs, cudaStream_t s) {
  p.n_blocks = static_cast<int>(n_in / Q::qk);
  p.row_bytes = static_cast<int64_t>(p.n_blocks) * sizeof(typename Q::block);
  const int64_t pieces = static_cast<int64_t>(p.n_blocks) * Q::ppb;
  constexpr int R = rows_of<Q>();
  if (pieces <= 8) return launch_mv<Q, R, 8>(p, n_pairs, s);
  if (pieces <= 16) return launch_mv<Q, R, 16>(p, n_pairs, s);
  return launch_mv<Q, R, 32>(p, n_pairs, s);
}

cudaError_t launch_mv_of(ggml_type t, const mv_params& p, int64_t n_in, int n_pairs, cudaStream_t s) {
  switch (t) {
    case ggml_type::f32: return launch_mv_type<mq_f32>(p, n_in, n_pairs, s);
    case ggml_type::f16: return launch_mv_type<mq_f16>(p, n_in, n_pairs, s);
    case ggml_type::q4_0: return launch_mv_type<mq_q4_0>(p, n_in, n_pairs, s);
    case ggml_type::q4_1: return launch_mv_type<mq_q4_1>(p, n_in, n_pairs, s);
    case ggml_type::q5_0: return launch_mv_type<mq_q5_0>(p, n_in, n_pairs, s);
    case ggml_type::q5_1: return launch_mv_type<mq_q5_1>(p, n_in, n_pairs, s);
    case ggml_type::q8_0: return launch_mv_type<mq_q8_0>(p, n_in, n_pairs, s);
    case ggml_type::q4_k: return launch_mv_type<mq_q4_k>(p, n_in, n_pairs, s);
    case ggml_type::q5_k: return launch_mv_type<mq_q5_k>(p, n_in, n_pairs, s);
    case ggml_type::q6_k: return launch_mv_type<mq_q6_k>(p, n_in, n_pairs, s);
    default: return cudaErrorInvalidValue;
  }
}

bool reads_int8_x(ggml_type t) { return t != ggml_type::f32 && t != ggml_type::f16; }

// ---- Grouping -----------------------------------------------------------------------------

constexpr int k_group_tile = 256;  // pairs per histogram/scatter block (= its threads)
constexpr int k_scan_threads = 1024;
static_assert(k_moe_max_experts + 1 <= k_scan_threads, "one scan thread per bucket");

// Bucket of a pair: its expert, or n_expert for an id outside [0, n_expert).
__device__ __forceinline__ int bucket_of(int id, int n_expert) { return id >= 0 && id < n_expert ? id : n_expert; }

// hist[tile][b] = the tile's pairs in bucket b.
__global__ void __launch_bounds__(k_group_tile) moe_hist_kernel(const int32_t* __restrict__ ids, int n_pairs,
                                                                int n_expert, int32_t* __restrict__ hist) {
  pdl_wait();
  __shared__ int h[k_moe_max_experts + 1];
  for (int b = threadIdx.x; b <= n_expert; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const int p = blockIdx.x * k_group_tile + threadIdx.x;
  if (p < n_pairs) atomicAdd(&h[bucket_of(ids[p], n_expert)], 1);  // counts: order-independent
  __syncthreads();
  for (int b = threadIdx.x; b <= n_expert; b += blockDim.x) hist[static_cast<int64_t>(blockIdx.x) * (n_expert + 1) + b] = h[b];
}

// Inclusive Hillis-Steele scan of one value per thread over the block; returns the exclusive sum.
__device__ int block_exclusive_scan(int v, int* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int o = 1; o < k_scan_threads; o <<= 1) {
    const int add = threadIdx.x >= o ? sh[threadIdx.x - o] : 0;
    __syncthreads();
    sh[threadIdx.x] += add;
    __syncthreads();
  }
  const int r = sh[threadIdx.x] - v;
  __syncthreads();
  return r;
}

// One block: counts, offsets, tile_offsets, and hist turned into each tile's first perm slot
// per bucket (bucket offset + the earlier tiles' pairs in it).
__global__ void __launch_bounds__(k_scan_threads)
    moe_scan_kernel(int n_tiles, int n_expert, int32_t* hist, int32_t* counts, int32_t* offsets, int32_t* tiles) {
  pdl_wait();
  __shared__ int sh[k_scan_threads];
  const int b = threadIdx.x;
  const bool mine = b <= n_expert;
  // The column's loads go out eight at a time (one dependent load a tile took ~10 us at 64 tiles).
  constexpr int batch = 8;
  const int64_t col = n_expert + 1;
  int c = 0;
  if (mine)
    for (int i0 = 0; i0 < n_tiles; i0 += batch) {
      int v[batch];
#pragma unroll
      for (int j = 0; j < batch; ++j) v[j] = i0 + j < n_tiles ? hist[(i0 + j) * col + b] : 0;
#pragma unroll
      for (int j = 0; j < batch; ++j) c += v[j];
    }
  const int off = block_exclusive_scan(mine ? c : 0, sh);
  // The invalid bucket (b == n_expert) has no GEMM tiles.
  const int nt = mine && b < n_expert ? (c + k_moe_gemm_rows - 1) / k_moe_gemm_rows : 0;
  const int toff = block_exclusive_scan(nt, sh);
  if (!mine) return;
  counts[b] = c, offsets[b] = off, tiles[b] = toff;
  int run = off;
  for (int i0 = 0; i0 < n_tiles; i0 += batch) {
    int v[batch];
#pragma unroll
    for (int j = 0; j < batch; ++j) v[j] = i0 + j < n_tiles ? hist[(i0 + j) * col + b] : 0;
#pragma unroll
    for (int j = 0; j < batch; ++j) {
      if (i0 + j < n_tiles) hist[(i0 + j) * col + b] = run;
      run += v[j];
    }
  }
}

// Each pair's rank among the tile's earlier pairs of its bucket: perm stays ordered by pair.
__global__ void __launch_bounds__(k_group_tile) moe_scatter_kernel(const int32_t* __restrict__ ids, int n_pairs,
                                                                   int n_expert, const int32_t* __restrict__ base,
                                                                   int32_t* __restrict__ perm) {
  pdl_wait();
  __shared__ int bk[k_group_tile];
  const int p = blockIdx.x * k_group_tile + threadIdx.x;
  const int b = p < n_pairs ? bucket_of(ids[p], n_expert) : -1;
  bk[threadIdx.x] = b;
  __syncthreads();
  if (p >= n_pairs) return;
  int rank = 0;
  for (int i = 0; i < static_cast<int>(threadIdx.x); ++i) rank += bk[i] == b;
  perm[base[static_cast<int64_t>(blockIdx.x) * (n_expert + 1) + b] + rank] = p;
}

}  // namespace

bool gpu_can_moe_matvec(ggml_type t) { return gpu_can_matvec(t); }

size_t moe_matvec_work_bytes(int64_t n_in, int n_x_rows) { return matvec_work_bytes(n_in, n_x_rows); }

cudaError_t launch_moe_matvec_multi(ggml_type t, const moe_matvec_output* outs, int n_outs,
                                    size_t expert_stride_bytes, int n_expert, int64_t n_in, int64_t n_out,
                                    const float* x, int64_t x_stride, bool x_quantized, int n_tok, int k,
                                    const int32_t* ids, void* work, cudaStream_t stream) {
  if (!gpu_can_moe_matvec(t) || n_outs < 1 || n_outs > k_moe_max_outputs || n_expert < 1 || n_in <= 0 ||
      n_in % 32 != 0 || n_out < 0 || n_tok < 0 || n_tok > k_moe_matvec_max_tokens || k < 1 || k > k_moe_max_k ||
      (x_stride != 0 && x_stride < n_in) || x_stride % 4 != 0 || ids == nullptr ||
      n_in % type_info(t).block_size != 0 || n_in / type_info(t).block_size > (1 << 24))
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i].w == nullptr || outs[i].y == nullptr) return cudaErrorInvalidValue;
    if (!aligned(outs[i].w, 16)) return cudaErrorMisalignedAddress;
  }
  if (expert_stride_bytes % 16 != 0) return cudaErrorMisalignedAddress;
  const bool int8 = reads_int8_x(t);
  if ((!int8 || !x_quantized) && !aligned(x, 16)) return cudaErrorMisalignedAddress;
  if (int8 && work == nullptr) return cudaErrorInvalidValue;
  if (int8 && !aligned(work, 16)) return cudaErrorMisalignedAddress;
  if (n_tok == 0 || n_out == 0) return cudaSuccess;
  const int n_pairs = n_tok * k, n_x_rows = x_stride == 0 ? n_tok : n_pairs;
  mv_params p{};
  for (int i = 0; i < n_outs; ++i) p.w[i] = static_cast<const uint8_t*>(outs[i].w), p.y[i] = outs[i].y;
  p.n_mats = n_outs, p.n_expert = n_expert, p.k = k;
  p.stride = static_cast<int64_t>(expert_stride_bytes), p.n_out = n_out;
  p.ids = ids;
  p.xs = {x, nullptr, nullptr, n_in};
  p.x_stride = x_stride;
  if (int8) {
    const matvec_qx qx = matvec_x_parts(work, n_in, n_x_rows);
    p.xs.qx = qx.q, p.xs.ds = qx.ds;
    if (!x_quantized) {
      const int64_t n_xb = n_in / 32 * n_x_rows;
      const cudaError_t q = launch_pdl(moe_quantize_x_kernel, dim3(static_cast<unsigned>((n_xb + 7) / 8)), dim3(256),
                                       stream, x, x_stride == 0 ? n_in : x_stride, n_in, n_xb, qx.q, qx.ds);
      if (q != cudaSuccess) return q;
    }
  }
  return launch_mv_of(t, p, n_in, n_pairs, stream);
}

cudaError_t launch_moe_matvec(ggml_type t, const void* w, size_t expert_stride_bytes, int n_expert, int64_t n_in,
                              int64_t n_out, const float* x, int64_t x_stride, int n_tok, int k, const int32_t* ids,
                              float* y, void* work, cudaStream_t stream) {
  const moe_matvec_output o{w, y};
  return launch_moe_matvec_multi(t, &o, 1, expert_stride_bytes, n_expert, n_in, n_out, x, x_stride, false, n_tok, k,
                                 ids, work, stream);
}

cudaError_t launch_moe_swiglu_q8(const float* gate, const float* up, float* out, int n_rows, int n, void* work,
                                 cudaStream_t stream) {
  if (n_rows < 0 || n <= 0 || n % 32 != 0 || work == nullptr) return cudaErrorInvalidValue;
  if (!aligned(work, 16)) return cudaErrorMisalignedAddress;
  if (n_rows == 0) return cudaSuccess;
  const int64_t total = int64_t{n_rows} * n;
  const matvec_qx q = matvec_x_parts(work, n, n_rows);
  const auto grid = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535));
  return launch_pdl(moe_swiglu_q8_kernel, dim3(grid), dim3(256), stream, gate, up, out, total, q.q, q.ds);
}

cudaError_t launch_moe_combine(const float* y, const float* weights, int n_tok, int k, int64_t n_embd, float* out,
                               bool add, cudaStream_t stream, const moe_shared_term* shared) {
  if (n_tok < 0 || k < 1 || k > k_moe_max_k || n_embd < 0) return cudaErrorInvalidValue;
  if (shared && (!shared->y || (!shared->gate_logits && (!shared->gate_row || !shared->x))))
    return cudaErrorInvalidValue;
  if (n_tok == 0 || n_embd == 0) return cudaSuccess;
  if (!shared) return launch_combine<0>(y, weights, n_tok, k, n_embd, out, add, moe_shared_term{}, stream);
  if (shared->gate_logits) return launch_combine<1>(y, weights, n_tok, k, n_embd, out, add, *shared, stream);
  return launch_combine<2>(y, weights, n_tok, k, n_embd, out, add, *shared, stream);
}

bool moe_combine_norm_fits(int n_tok, int64_t n_embd) {
  return n_tok >= 1 && n_tok <= k_matvec_max_tokens && n_embd >= 1024 && n_embd % 32 == 0 &&
         n_embd <= 4 * norm::k_threads * norm::k_chunks;
}

cudaError_t launch_moe_combine_norm(const float* y, const float* weights, int n_tok, int k, int64_t n_embd, float* out,
                                    bool add, cudaStream_t stream, const moe_shared_term* shared,
                                    const moe_next_norm& norm) {
  if (!moe_combine_norm_fits(n_tok, n_embd) || k < 1 || k > k_moe_max_k || !norm.w || !norm.xn || !norm.work ||
      !(norm.eps >= 0.f))
    return cudaErrorInvalidValue;
  if (shared && (!shared->y || (!shared->gate_logits && (!shared->gate_row || !shared->x))))
    return cudaErrorInvalidValue;
  const bool a16 = aligned(y, 16) && aligned(out, 16) && aligned(norm.w, 16) && aligned(norm.xn, 16) &&
                   aligned(norm.work, 16) && (!shared || aligned(shared->y, 16)) &&
                   (!shared || shared->gate_logits || (aligned(shared->gate_row, 16) && aligned(shared->x, 16)));
  if (!a16) return cudaErrorMisalignedAddress;
  const matvec_qx q = matvec_x_parts(norm.work, n_embd, n_tok);
  const moe_shared_term sh = shared ? *shared : moe_shared_term{};
  const auto go = [&](auto kernel) {
    return launch_pdl(kernel, dim3(static_cast<unsigned>(n_tok)), dim3(norm::k_threads), stream, y, weights, k, n_embd,
                      out, add, sh, norm.w, norm.eps, norm.xn, q.q, q.ds);
  };
  const int mode = !shared ? 0 : shared->gate_logits ? 1 : 2;
  if (k <= 8) {
    return mode == 0 ? go(moe_combine_norm_kernel<0, 8>)
           : mode == 1 ? go(moe_combine_norm_kernel<1, 8>) : go(moe_combine_norm_kernel<2, 8>);
  }
  return mode == 0 ? go(moe_combine_norm_kernel<0, k_moe_max_k>)
         : mode == 1 ? go(moe_combine_norm_kernel<1, k_moe_max_k>) : go(moe_combine_norm_kernel<2, k_moe_max_k>);
}

size_t moe_group_work_bytes(int n_tok, int k, int n_expert) {
  if (n_tok < 0 || k < 1 || k > k_moe_max_k || n_expert < 1 || n_expert > k_moe_max_experts) return 0;
  const int64_t tiles = (int64_t{n_tok} * k + k_group_tile - 1) / k_group_tile;
  return static_cast<size_t>(std::max<int64_t>(tiles, 1) * (n_expert + 1)) * sizeof(int32_t);
}

cudaError_t launch_moe_group(const int32_t* ids, int n_tok, int k, int n_expert, int32_t* counts, int32_t* offsets,
                             int32_t* perm, int32_t* tile_offsets, void* work, cudaStream_t stream) {
  if (n_tok < 0 || k < 1 || k > k_moe_max_k || n_expert < 1 || n_expert > k_moe_max_experts ||
      int64_t{n_tok} * k > 0x7fffffff || !counts || !offsets || !tile_offsets || !work)
    return cudaErrorInvalidValue;
  if (!aligned(work, 16)) return cudaErrorMisalignedAddress;
  const int n_pairs = n_tok * k;
  if (n_pairs > 0 && (!ids || !perm)) return cudaErrorInvalidValue;
  const int n_tiles = (n_pairs + k_group_tile - 1) / k_group_tile;
  auto* hist = static_cast<int32_t*>(work);
  cudaError_t e = cudaSuccess;
  if (n_tiles > 0)
    e = launch_pdl(moe_hist_kernel, dim3(n_tiles), dim3(k_group_tile), stream, ids, n_pairs, n_expert, hist);
  if (e == cudaSuccess)
    e = launch_pdl(moe_scan_kernel, dim3(1), dim3(k_scan_threads), stream, n_tiles, n_expert, hist, counts, offsets,
                   tile_offsets);
  if (e == cudaSuccess && n_tiles > 0)
    e = launch_pdl(moe_scatter_kernel, dim3(n_tiles), dim3(k_group_tile), stream, ids, n_pairs, n_expert,
                   static_cast<const int32_t*>(hist), perm);
  return e;
}

}  // namespace tandem
