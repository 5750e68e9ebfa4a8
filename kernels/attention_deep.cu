// Decode attention on deep f16 caches with tensor cores (sm_80+): a block per (token, KV head,
// split) puts the token's query heads of that KV head into the rows of one 16-row mma tile, and
// streams the split's K/V rows into shared memory by cp.async while its warps work on the tile
// before. Scores and the weighted sum of V take mma.sync; the CUDA-core kernels spent their time
// on shuffles and FMAs a key, not on memory (kernels/attention.cu).
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/arch.h"
#include "kernels/attention_decode.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/flash_attention_tiles.cuh"
#include "kernels/mma_sync.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

// Tiles of 32 keys, 8 a warp; rows padded by 16 bytes so ldmatrix's eight row addresses hit
// different banks; two stages (four blocks an SM then hold ~140 KiB of copies in flight, several
// times what keeps an H200's HBM busy).
template <int D>
struct deep_shape {
  static constexpr int TK = 32, WK = TK / k_warps, LDH = D + 8, S = 2;
  static constexpr int TILE = TK * LDH;           // halves of one K or V tile
  static constexpr int STAGE = 2 * TILE;          // K, then V
  static constexpr int Q_OFF = S * STAGE;         // halves: q's hi rows, then its lo rows
  static constexpr int SMEM = (Q_OFF + 2 * 16 * LDH) * 2;  // bytes
  static constexpr int CH = D / 8;                // 16-byte chunks a row
  static constexpr int IT = 2 * TK * CH / (32 * k_warps);  // chunks a thread copies a tile (K and V)
  static_assert(TK * CH % (32 * k_warps) == 0, "a tile's chunks split evenly over the threads");
};

// A value as the sum of two fp16 values (hi + lo, about 22 significant bits): the products
// below take both, so q and p lose little more than fp32 arithmetic would to the tensor cores'
// fp16 operands (K and V are fp16 in the cache already). The kernel is bound by its K/V bytes, so
// the doubled products cost nothing measurable. Values are scaled first so that lo stays clear
// of fp16's subnormals (below 2^-14 it keeps fewer bits).
__device__ __forceinline__ void split_half2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 f = __half22float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = flash::pack_half2(a - f.x, b - f.y);
}

// P's scale in the products (O comes out 2^12 times too large, and is scaled back at the end):
// p <= 1, so p · 2^12 stays below fp16's 65504 and its lo half is normal down to p ~ 2^-15.
constexpr float k_p_scale = 4096.f, k_p_unscale = 1.f / 4096.f;

// Keys [j0, j0 + TK) of the split (past `end`: zeros) into one stage, K then V, by cp.async; a
// key's K and V chunks share its table lookup.
template <int D>
__device__ __forceinline__ void stage_tile(const paged_attention_args& a, const int32_t* table, int kvh, int j0,
                                           int end, uint16_t* stage) {
  using P = deep_shape<D>;
#pragma unroll
  for (int it = 0; it < P::IT / 2; ++it) {
    const int c = threadIdx.x + it * 32 * k_warps, r = c / P::CH, col = c % P::CH * 8, j = j0 + r;
    const int jj = min(j, end - 1);  // a valid address; nothing is read past the end
    const int64_t off = kv_row(a, table, jj, kvh) * D + col;
    uint16_t* dst = stage + r * P::LDH + col;
    cp_async16(dst, static_cast<const uint16_t*>(a.k_cache) + off, j < end ? 16 : 0);
    cp_async16(dst + P::TILE, static_cast<const uint16_t*>(a.v_cache) + off, j < end ? 16 : 0);
  }
  cp_async_commit();
}

// The group's query rows into shared memory as fp16 hi and lo rows (16 each, LDH apart): row r =
// head h0 + r (r < hg.g; the other rows are zeros), in log2 units times 2^e, e chosen from the
// rows' largest value so that it lands near 2^14: fp16 neither overflows nor loses lo's bits.
// Returns 2^-e, which scores are multiplied by. s_red: block_reduce's k_warps floats.
template <int D>
__device__ __forceinline__ float stage_q(const paged_attention_args& a, const head_group& hg, uint16_t* qs,
                                         float* s_red) {
  using P = deep_shape<D>;
  constexpr int per = 16 * D / 2 / (32 * k_warps);  // float pairs a thread
  static_assert(16 * D / 2 % (32 * k_warps) == 0, "q's pairs split evenly over the threads");
  const float s = a.scale * 1.4426950408889634f;
  float2 v[per];
  float mx = 0.f;
#pragma unroll
  for (int k = 0; k < per; ++k) {
    const int i = threadIdx.x + k * 32 * k_warps, r = i / (D / 2), col = i % (D / 2) * 2;
    v[k] = make_float2(0.f, 0.f);
    if (r < hg.g)
      v[k] = *reinterpret_cast<const float2*>(a.q + (static_cast<int64_t>(hg.t) * a.n_head + hg.h0 + r) * D + col);
    mx = fmaxf(mx, fmaxf(fabsf(v[k].x), fabsf(v[k].y)) * s);
  }
  const float top = block_reduce<true>(mx, s_red);
  int e = 0;
  if (top > 0.f && top < INFINITY) frexpf(top, &e);  // top < 2^e
  e = max(-100, min(100, 14 - e));
  const float up = ldexpf(1.f, e);
#pragma unroll
  for (int k = 0; k < per; ++k) {
    const int i = threadIdx.x + k * 32 * k_warps, r = i / (D / 2), col = i % (D / 2) * 2;
    uint32_t hi, lo;
    split_half2(v[k].x * s * up, v[k].y * s * up, hi, lo);
    *reinterpret_cast<uint32_t*>(qs + r * P::LDH + col) = hi;
    *reinterpret_cast<uint32_t*>(qs + (16 + r) * P::LDH + col) = lo;
  }
  return ldexpf(1.f, -e);
}

// One warp's 8 keys of a staged tile: S = Q Kᵀ, the online softmax (log2 units) with keys from
// n_live on masked, O += P V. m, l: rows g and g + 8; l is this lane's part of the row sum.
template <int D>
__device__ __forceinline__ void attend_tile(const uint16_t* qs, float q_unscale, const uint16_t* ks,
                                            const uint16_t* vs, int n_live, float (&o)[D / 8][4], float (&m)[2],
                                            float (&l)[2]) {
  constexpr int LDH = deep_shape<D>::LDH;
  const int lane = threadIdx.x % 32, t = lane % 4;
  float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int k2 = 0; k2 < D / 32; ++k2) {
    // Kᵀ's B fragments are K's rows as they lie: x4 gives dims k2*32 + 0-7, 8-15, 16-23, 24-31.
    uint32_t b[4];
    ldmatrix_x4(b, ks + (lane % 8) * LDH + k2 * 32 + (lane / 8) * 8);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kk = 2 * k2 + h;
#pragma unroll
      for (int part = 0; part < 2; ++part) {  // q's hi rows, then its lo rows
        uint32_t a[4];
        ldmatrix_x4(a, qs + (part * 16 + lane % 16) * LDH + kk * 16 + (lane / 16) * 8);
        mma16816(s, a[0], a[1], a[2], a[3], b[2 * h], b[2 * h + 1]);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] *= q_unscale;
  if (2 * t >= n_live) s[0] = s[2] = -INFINITY;
  if (2 * t + 1 >= n_live) s[1] = s[3] = -INFINITY;
  float corr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = fmaxf(s[2 * h], s[2 * h + 1]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[h], mx);  // finite: key 0 of the warp's tile is live
    corr[h] = exp2f(m[h] - m_new);
    m[h] = m_new;
    s[2 * h] = exp2f(s[2 * h] - m_new), s[2 * h + 1] = exp2f(s[2 * h + 1] - m_new);
    l[h] = l[h] * corr[h] + s[2 * h] + s[2 * h + 1];
  }
  if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
    for (int f = 0; f < D / 8; ++f) o[f][0] *= corr[0], o[f][1] *= corr[0], o[f][2] *= corr[1], o[f][3] *= corr[1];
  }
  // P (16 rows × 8 keys) is S's accumulator tile: as A of m16n8k8, in hi and lo halves.
  uint32_t ph[2], pl[2];
  split_half2(s[0] * k_p_scale, s[1] * k_p_scale, ph[0], pl[0]);
  split_half2(s[2] * k_p_scale, s[3] * k_p_scale, ph[1], pl[1]);
#pragma unroll
  for (int n4 = 0; n4 < D / 32; ++n4) {
    uint32_t b[4];  // V's B fragments for dims n4*32 + 0-7, 8-15, 16-23, 24-31: transposing loads
    ldmatrix_x4_trans(b, vs + (lane % 8) * LDH + n4 * 32 + (lane / 8) * 8);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      mma1688(o[n4 * 4 + i], ph[0], ph[1], b[i]);
      mma1688(o[n4 * 4 + i], pl[0], pl[1], b[i]);
    }
  }
}

// Grid (n_tok * n_head_kv * n_sub, n_split), k_warps warps, deep_shape<D>::SMEM bytes of dynamic
// shared memory; splits, partials and the merge as paged_attention_kernel (kernels/attention.cu),
// through finish_group, which takes each warp's rows in the CUDA-core kernels' layout.
// Blocks an SM: four where O fits 128 registers with room; head size 256's O alone takes 128.
template <int D, int GM>
__global__ void __launch_bounds__(32 * k_warps, D == 256 ? 2 : 4)
    paged_deep_kernel(paged_attention_args a, int n_split, int chunk, float* part) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using P = deep_shape<D>;
  constexpr int DPL = D / 32;
  extern __shared__ __align__(16) uint16_t s_tiles[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const head_group hg = group_of<GM>(a, blockIdx.x);
  split_keys sk;
  if (!split_of(a, hg, n_split, chunk, sk)) return;
  const int begin = sk.begin, end = sk.end, n_tiles = (end - begin + P::TK - 1) / P::TK;
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.tok_table[hg.t]) * a.max_blocks;

  pdl_wait();  // q and the newest key come from the previous kernel
  pdl_trigger();
#pragma unroll
  for (int i = 0; i < P::S - 1; ++i) {
    if (i < n_tiles)
      stage_tile<D>(a, table, hg.kvh, begin + i * P::TK, end, s_tiles + i * P::STAGE);
    else
      cp_async_commit();  // empty groups keep the wait count below uniform
  }
  __shared__ float s_red[k_warps];
  const float q_unscale = stage_q<D>(a, hg, s_tiles + P::Q_OFF, s_red);  // read after the loop's first barrier
  float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int f = 0; f < D / 8; ++f) o[f][0] = o[f][1] = o[f][2] = o[f][3] = 0.f;
  for (int i = 0; i < n_tiles; ++i) {
    // The stage refilled here was read in the previous iteration, which ended with a barrier.
    const int nx = i + P::S - 1;
    if (nx < n_tiles)
      stage_tile<D>(a, table, hg.kvh, begin + nx * P::TK, end, s_tiles + nx % P::S * P::STAGE);
    else
      cp_async_commit();
    cp_async_wait<P::S - 1>();  // tile i's group has landed (this thread's), the barrier: everyone's
    __syncthreads();
    const int j0 = begin + i * P::TK + warp * P::WK;
    if (j0 < end) {
      const uint16_t* st = s_tiles + i % P::S * P::STAGE + warp * P::WK * P::LDH;
      attend_tile<D>(s_tiles + P::Q_OFF, q_unscale, st, st + P::TILE, end - j0, o, m, l);
    }
    __syncthreads();
  }
  // Each warp's rows to finish_group's layout (lane: dims lane*DPL.. of each head), through the
  // stages, free now; m back to natural-log units.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  float* s_o = reinterpret_cast<float*>(s_tiles) + warp * (GM * D + 2 * GM);  // rows, then (m, l) per row
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    if (r >= GM) continue;
#pragma unroll
    for (int f = 0; f < D / 8; ++f)
      *reinterpret_cast<float2*>(s_o + r * D + f * 8 + 2 * t) =
          make_float2(o[f][2 * h] * k_p_unscale, o[f][2 * h + 1] * k_p_unscale);
    if (t == 0) s_o[GM * D + 2 * r] = m[h] * 0.6931471805599453f, s_o[GM * D + 2 * r + 1] = l[h];
  }
  __syncwarp();
  float acc[GM][DPL], mg[GM], lg[GM];
#pragma unroll
  for (int r = 0; r < GM; ++r) {
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[r][i] = s_o[r * D + lane * DPL + i];
    mg[r] = s_o[GM * D + 2 * r], lg[r] = s_o[GM * D + 2 * r + 1];
  }
  finish_group<DPL, GM>(a, hg, sk.used, n_split, sk.pos, chunk, part, mg, lg, acc);
#endif
}

template <int D, int GM>
cudaError_t launch_deep(const paged_attention_args& a, int n_split, int chunk, float* work, cudaStream_t stream) {
  constexpr auto kernel = paged_deep_kernel<D, GM>;
  constexpr int smem = deep_shape<D>::SMEM;
  static_assert(k_warps * (GM * D + 2 * GM) * 4 <= smem, "the warps' rows fit in the stages");
  if (const cudaError_t e = allow_dynamic_smem_once<kernel>(smem); e != cudaSuccess) return e;
  float* part = n_split > 1 ? work + k_split_counters : nullptr;
  const int G = a.n_head / a.n_head_kv, n_sub = (G + GM - 1) / GM;
  const dim3 grid(static_cast<unsigned>(a.n_tok * a.n_head_kv * n_sub), static_cast<unsigned>(n_split));
  return launch_pdl_shared(kernel, grid, dim3(32 * k_warps), smem, stream, a, n_split, chunk, part);
}

// GM: the query heads a block takes, at most 16 (one mma row tile) and 8 at head size 256 (the
// merge's buffers); ratios past that take several blocks of a KV head.
template <int D>
cudaError_t launch_deep_g(const paged_attention_args& a, int n_split, int chunk, float* work, cudaStream_t stream) {
  const int G = a.n_head / a.n_head_kv;
  if (G <= 4) return launch_deep<D, 4>(a, n_split, chunk, work, stream);
  if (G <= 8 || D == 256) return launch_deep<D, 8>(a, n_split, chunk, work, stream);
  if constexpr (D < 256) return launch_deep<D, 16>(a, n_split, chunk, work, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

bool paged_deep_supported(const paged_attention_args& a) {
  const bool dim = a.head_dim == 32 || a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256;
  return dim && a.cache_type == ggml_type::f16;
}

cudaError_t launch_paged_deep(const paged_attention_args& a, int n_split, int chunk, float* work,
                              cudaStream_t stream) {
  if (!paged_deep_supported(a)) return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 32: return launch_deep_g<32>(a, n_split, chunk, work, stream);
    case 64: return launch_deep_g<64>(a, n_split, chunk, work, stream);
    case 128: return launch_deep_g<128>(a, n_split, chunk, work, stream);
    default: return launch_deep_g<256>(a, n_split, chunk, work, stream);
  }
}

}  // namespace tandem
