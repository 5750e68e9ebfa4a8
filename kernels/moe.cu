// Mixture-of-experts kernels besides the decode mat-vec (moe_matvec.cu), the grouped GEMM
// (moe_gemm.cu) and routing (moe_route.cu): the SwiGLU + int8 copy, the weighted combine and the
// device-side grouping of pairs by expert.
#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/matvec.h"
#include "kernels/matvec_x.cuh"
#include "kernels/norm_rows.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// ---- SwiGLU, combine ---------------------------------------------------------------------

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
  return norm::wide_decode_rows(n_tok, n_embd, k_matvec_max_tokens);
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
