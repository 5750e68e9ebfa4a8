// Causal flash attention for prefill on sm_80+: each warp keeps its rows' scores, probabilities and
// output in mma.sync registers (P never goes through shared memory), and each K or V tile's copy
// (cp.async for f16 caches) runs while the other tile is in use. Launched by launch_flash_attention.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/arch.h"
#include "kernels/cp_async.cuh"
#include "kernels/flash_attention_tiles.cuh"
#include "kernels/mma_sync.cuh"

namespace tandem {
namespace {

using namespace flash;

constexpr int k_warps = 4;
constexpr int k_threads = 32 * k_warps;

// A block of 4 warps, each with MT row tiles of 16 (token, head) rows of one KV head. Two row
// tiles a warp halve the shared-memory reads of K and V per FLOP (each B fragment serves both);
// head size 256 keeps one (its 16 × 256 fp32 O already takes 128 registers a lane). Keys per tile
// keep O and S together within the register budget of min_blocks blocks per SM.
template <int D, int MT>
struct mma_layout {
  static constexpr int WR = 16 * MT;       // rows a warp
  static constexpr int R = k_warps * WR;   // rows a block
  static constexpr int BN = MT * D >= 256 ? 32 : 64;  // keys a tile
  static constexpr int NT = BN / 8;        // 8-key column tiles of S
  static constexpr int LDH = D + 8;        // halves a shared row: 16 bytes of padding keep ldmatrix conflict-free
  static constexpr int stage = BN * LDH;   // halves of one K or V tile; two stages of each
  static constexpr int k_off = R * LDH * 2;
  static constexpr int v_off = k_off + 2 * stage * 2;
  static constexpr int bytes = v_off + 2 * stage * 2;
  static constexpr int acc_regs = MT * (D + BN) / 2;  // fp32 O and S a lane
  static constexpr int min_blocks = acc_regs >= 128 ? 2 : 3;
};

// Keys kv0..kv0+BN-1 of kv head kvh into dst ([key][LDH] fp16), through the block table, by
// cp.async (f16 caches: the caller commits the group) or through registers (f32, Q8_0: converted
// on the way); keys from n_kv on are zeros (masked, and a zero V row keeps 0 · garbage out of O).
template <int D, int MT, class T>
__device__ __forceinline__ void load_tile(const params& p, const void* cache, const int32_t* table, int kvh,
                                          int kv0, int n_kv, uint16_t* dst) {
  using L = mma_layout<D, MT>;
  constexpr int C = D / 8, iters = L::BN * C / k_threads;
  static_assert(L::BN * C % k_threads == 0, "a tile's 16-byte chunks split evenly over the threads");
  if constexpr (std::is_same<T, uint16_t>::value) {
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const int i = threadIdx.x + it * k_threads, key = kv0 + i / C, col = (i % C) * 8;
      const int64_t row = cache_row(p, table, min(key, n_kv - 1), kvh);
      cp_async16(dst + (i / C) * L::LDH + col, static_cast<const uint16_t*>(cache) + row * D + col,
                 key < n_kv ? 16 : 0);
    }
  } else {
    uint4 v[iters];
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const int i = threadIdx.x + it * k_threads, key = kv0 + i / C;
      v[it] = load_cache8<D, T>(cache, cache_row(p, table, min(key, n_kv - 1), kvh), (i % C) * 8);
      if (key >= n_kv) v[it] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const int i = threadIdx.x + it * k_threads;
      *reinterpret_cast<uint4*>(dst + (i / C) * L::LDH + (i % C) * 8) = v[it];
    }
  }
}

// The block's R rows of q, scaled into log2 units and rounded to fp16; rows past the run are zeros.
template <int D, int MT>
__device__ void load_q(const params& p, const flash_run& run, int kvh, int grp, int u0, uint16_t* qs) {
  using L = mma_layout<D, MT>;
  constexpr int C = D / 4;  // float4 chunks a row
  const int n_units = run.n * grp;
  for (int i = threadIdx.x; i < L::R * C; i += k_threads) {
    const int r = i / C, col = (i % C) * 4, u = u0 + r;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (u < n_units) x = *reinterpret_cast<const float4*>(p.q + unit_row(p, run, kvh, grp, u) * D + col);
    const float s = p.qscale;
    *reinterpret_cast<uint2*>(qs + r * L::LDH + col) =
        make_uint2(pack_half2(x.x * s, x.y * s), pack_half2(x.z * s, x.w * s));
  }
}

// 2^x by the SFU alone (exp2f adds a denormal-range fix-up that scores never need); 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// S (the warp's WR rows × BN keys) = Q · Kᵀ, in mma accumulator layout.
template <int D, int MT>
__device__ __forceinline__ void tile_scores(const uint16_t* qw, const uint16_t* ks, float (&s)[MT][mma_layout<D, MT>::NT][4]) {
  using L = mma_layout<D, MT>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < L::NT; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], qw + (mt * 16 + lane % 16) * L::LDH + kk * 16 + (lane / 16) * 8);
#pragma unroll
    for (int n2 = 0; n2 < L::BN / 16; ++n2) {
      // Kᵀ's fragments are K's rows as they lie: matrices (keys 0-7, d 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
      uint32_t b[4];
      ldmatrix_x4(b, ks + (n2 * 16 + lane % 8 + (lane / 16) * 8) * L::LDH + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(s[mt][2 * n2], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
        mma16816(s[mt][2 * n2 + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
      }
    }
  }
}

// Online softmax over the tile: lane (g, t) holds rows g and g + 8 of each row tile (h = 0, 1),
// keys 8n + 2t and 8n + 2t + 1; the four lanes of a row share its max by shuffles, and each keeps
// its own part of the row's sum l until the end. Keys past a row's last (its position) are masked
// where the tile reaches past the warp's first row's. O shrinks by each row's correction, skipped
// when no row of the warp found a new max (most tiles, once a row has seen a few hundred keys).
template <int D, int MT>
__device__ __forceinline__ void tile_softmax(float (&s)[MT][mma_layout<D, MT>::NT][4], float (&o)[MT][D / 8][4],
                                             float (&m)[MT][2], float (&l)[MT][2], int kv0,
                                             const int (&last)[MT][2], bool diagonal) {
  using L = mma_layout<D, MT>;
  const int t = threadIdx.x % 4;
  float corr[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if (diagonal) {
#pragma unroll
      for (int n = 0; n < L::NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (kv0 + n * 8 + 2 * t + (e & 1) > last[mt][e >> 1]) s[mt][n][e] = -INFINITY;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < L::NT; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // Key 0 is in every row's first tile, so m_new is finite; exp2f(-inf) = 0 on that tile.
      const float m_new = fmaxf(m[mt][h], mx);
      corr[mt][h] = fast_exp2(m[mt][h] - m_new);
      m[mt][h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < L::NT; ++n) {
        s[mt][n][2 * h] = fast_exp2(s[mt][n][2 * h] - m_new);
        s[mt][n][2 * h + 1] = fast_exp2(s[mt][n][2 * h + 1] - m_new);
        sum += s[mt][n][2 * h] + s[mt][n][2 * h + 1];
      }
      l[mt][h] = l[mt][h] * corr[mt][h] + sum;
    }
  }
  bool grew = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) grew |= corr[mt][0] != 1.f || corr[mt][1] != 1.f;
  if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int f = 0; f < D / 8; ++f)
        o[mt][f][0] *= corr[mt][0], o[mt][f][1] *= corr[mt][0], o[mt][f][2] *= corr[mt][1], o[mt][f][3] *= corr[mt][1];
  }
}

// O += P · V: P's A fragments come straight from S's accumulators (rounded to fp16), V's B
// fragments by transposing loads of its rows.
template <int D, int MT>
__device__ __forceinline__ void tile_accumulate(const float (&s)[MT][mma_layout<D, MT>::NT][4], const uint16_t* vs,
                                                float (&o)[MT][D / 8][4]) {
  using L = mma_layout<D, MT>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k2 = 0; k2 < L::BN / 16; ++k2) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      a[mt][0] = pack_half2(s[mt][2 * k2][0], s[mt][2 * k2][1]);
      a[mt][1] = pack_half2(s[mt][2 * k2][2], s[mt][2 * k2][3]);
      a[mt][2] = pack_half2(s[mt][2 * k2 + 1][0], s[mt][2 * k2 + 1][1]);
      a[mt][3] = pack_half2(s[mt][2 * k2 + 1][2], s[mt][2 * k2 + 1][3]);
    }
#pragma unroll
    for (int d2 = 0; d2 < D / 16; ++d2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vs + (k2 * 16 + lane % 16) * L::LDH + d2 * 16 + (lane / 16) * 8);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(o[mt][2 * d2], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
        mma16816(o[mt][2 * d2 + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
      }
    }
  }
}

// out = O / l for the warp's rows that belong to the run (u = wu0 + 16 mt + 8 h + g).
template <int D, int MT>
__device__ __forceinline__ void write_out(const params& p, const flash_run& run, int kvh, int grp, int wu0,
                                          const float (&o)[MT][D / 8][4], float (&l)[MT][2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, n_units = run.n * grp;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 1);
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 2);
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int u = wu0 + mt * 16 + h * 8 + g;
      if (u >= n_units) continue;
      const float inv = 1.f / l[mt][h];
      float* dst = p.out + unit_row(p, run, kvh, grp, u) * D + 2 * t;
#pragma unroll
      for (int f = 0; f < D / 8; ++f)
        *reinterpret_cast<float2*>(dst + f * 8) = make_float2(o[mt][f][2 * h] * inv, o[mt][f][2 * h + 1] * inv);
    }
}

template <int D, int MT, class T>
__global__ void __launch_bounds__(k_threads, mma_layout<D, MT>::min_blocks) flash_mma_kernel(const params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = mma_layout<D, MT>;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* qs = reinterpret_cast<uint16_t*>(smem);
  auto* ks = reinterpret_cast<uint16_t*>(smem + L::k_off);
  auto* vs = reinterpret_cast<uint16_t*>(smem + L::v_off);
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;

  flash_run run;
  int tile;
  find_tile(p.runs, run, tile);
  const int kvh = blockIdx.y, grp = p.n_head / p.n_head_kv, n_units = run.n * grp, u0 = tile * L::R;
  if (tile < 0 || u0 >= n_units) return;  // uniform over the block
  // The block's keys end at its last row's position; each row masks past its own.
  const int n_kv = run.pos0 + (min(u0 + L::R, n_units) - 1) / grp + 1;
  const int32_t* table = p.tables + static_cast<int64_t>(run.table) * p.max_blocks;
  const int wu0 = u0 + warp * L::WR;
  int last[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) last[mt][h] = run.pos0 + min(wu0 + mt * 16 + h * 8 + g, n_units - 1) / grp;
  const int warp_first = run.pos0 + min(wu0, n_units - 1) / grp;
  const int warp_last = wu0 < n_units ? run.pos0 + min(wu0 + L::WR - 1, n_units - 1) / grp : -1;

  // Tiles 0 and 1 go out now, tile j + 2 once tile j is read: one cp.async group a tile (empty
  // past the end, so that waiting for all but the newest always means tile j).
  auto load_kv = [&](int kv0, int st) {
    if (kv0 < n_kv) {
      load_tile<D, MT, T>(p, p.k_cache, table, kvh, kv0, n_kv, ks + st * L::stage);
      load_tile<D, MT, T>(p, p.v_cache, table, kvh, kv0, n_kv, vs + st * L::stage);
    }
    cp_async_commit();
  };
  load_kv(0, 0);
  load_q<D, MT>(p, run, kvh, grp, u0, qs);
  load_kv(L::BN, 1);
  float o[MT][D / 8][4], m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int f = 0; f < D / 8; ++f) o[mt][f][0] = o[mt][f][1] = o[mt][f][2] = o[mt][f][3] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
  }
  for (int kv0 = 0, st = 0; kv0 < n_kv; kv0 += L::BN, st ^= 1) {
    cp_async_wait<1>();
    __syncthreads();  // this tile's K and V (and Q) in place
    // Warps whose rows all end before this tile skip it (the block's last tiles, on the diagonal).
    if (kv0 <= warp_last) {
      float s[MT][L::NT][4];
      tile_scores<D, MT>(qs + warp * L::WR * L::LDH, ks + st * L::stage, s);
      tile_softmax<D, MT>(s, o, m, l, kv0, last, kv0 + L::BN - 1 > warp_first);
      tile_accumulate<D, MT>(s, vs + st * L::stage, o);
    }
    __syncthreads();  // every warp is done with this stage
    load_kv(kv0 + 2 * L::BN, st);
  }
  write_out<D, MT>(p, run, kvh, grp, wu0, o, l);
#endif
}

template <int D, int MT, class T>
cudaError_t launch_dmt(const params& p, int tiles, int n_head_kv, cudaStream_t stream) {
  constexpr int bytes = mma_layout<D, MT>::bytes;
  const cudaError_t e = allow_dynamic_smem_once<flash_mma_kernel<D, MT, T>>(bytes);
  if (e != cudaSuccess) return e;
  flash_mma_kernel<D, MT, T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(n_head_kv)), k_threads, bytes,
                               stream>>>(p);
  return cudaGetLastError();
}

template <int MT, class T>
cudaError_t launch_mt(const params& p, int head_dim, int tiles, int n_head_kv, cudaStream_t stream) {
  switch (head_dim) {
    case 32: return launch_dmt<32, MT, T>(p, tiles, n_head_kv, stream);
    case 64: return launch_dmt<64, MT, T>(p, tiles, n_head_kv, stream);
    case 128: return launch_dmt<128, MT, T>(p, tiles, n_head_kv, stream);
    case 256:
      if constexpr (MT == 1) return launch_dmt<256, MT, T>(p, tiles, n_head_kv, stream);
      return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

template <class T>
cudaError_t launch_t(const params& p, int head_dim, flash_kernel k, int tiles, int n_head_kv, cudaStream_t stream) {
  if (k == flash_kernel::mma64) return launch_mt<1, T>(p, head_dim, tiles, n_head_kv, stream);
  if (k == flash_kernel::mma128) return launch_mt<2, T>(p, head_dim, tiles, n_head_kv, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

int flash_mma_rows(int head_dim, flash_kernel k) {
  const bool sized = head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
  if (!sized) return 0;
  if (k == flash_kernel::mma64) return mma_layout<64, 1>::R;
  if (k == flash_kernel::mma128 && head_dim <= 128) return mma_layout<64, 2>::R;
  return 0;
}

cudaError_t launch_flash_mma(const params& p, int head_dim, ggml_type type, flash_kernel k, int tiles, int n_head_kv,
                             cudaStream_t stream) {
  if (type == ggml_type::f16) return launch_t<uint16_t>(p, head_dim, k, tiles, n_head_kv, stream);
  if (type == ggml_type::f32) return launch_t<float>(p, head_dim, k, tiles, n_head_kv, stream);
  if (type == ggml_type::q8_0) return launch_t<q8_row>(p, head_dim, k, tiles, n_head_kv, stream);
  return cudaErrorInvalidValue;
}

}  // namespace tandem
