// Decode attention on deep caches: a block per (token, KV head, split) takes the query heads of
// its KV head and streams its keys' K/V rows into shared memory with cp.async, several tiles in
// flight, so the memory system stays busy while the warps compute on the tile that has arrived.
#include <cstdint>
#include <type_traits>

#include "kernels/arch.h"
#include "kernels/attention_decode.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

// One 16-byte granule from global to shared memory: asynchronous on sm_80+, through registers
// below (cp_async16 compiles to nothing there), so the kernel is correct on every target; the
// launcher only picks it where the copies are asynchronous.
__device__ __forceinline__ void stage16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  cp_async16(dst, src, 16);
#else
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}

// The shape of a block's staging: TK keys a tile, S tiles in flight, each K and V row in a slot of
// SB bytes. Q8_0 rows (34 bytes a block of 32) start anywhere on a 2-byte boundary, so their slot
// holds the 16-byte granules that cover the row, and the row's offset in the first one is kept.
template <int DPL, class T, int GM>
struct deep_shape {
  static constexpr bool q8 = std::is_same_v<T, q8_row>;
  static constexpr int RB = q8 ? DPL * 34 : 32 * DPL * static_cast<int>(sizeof(T));  // row bytes
  static constexpr bool aligned = RB % 16 == 0 && !q8;
  static constexpr int SB = aligned ? RB : (RB + 15) / 16 * 16 + 16;
  static constexpr int CH = SB / 16;
  // Keys a warp takes at once: fewer when GM heads' queries and sums already take the registers.
  static constexpr int KK = GM * DPL > 16 ? 2 : k_keys;
  // About 4 KiB of K a tile (a power of two of keys, at least a run for every warp, at most 64):
  // f16 at head_dim 128 takes 16 keys a tile, 42 KiB a block with the merge's buffers, so the
  // block's 128 registers, not shared memory, bound it to 4 blocks an SM (12 tiles in flight).
  static constexpr int tk_for(int keys) { return keys >= 64 ? 64 : keys >= 32 ? 32 : keys >= 16 ? 16 : 8; }
  static constexpr int TK = tk_for(4096 / SB) < k_warps * KK ? k_warps * KK : tk_for(4096 / SB);
  static constexpr int STAGE = 2 * TK * SB;
  // Stages: up to four, as many as keep a block within 96 KiB with the merge's static buffers
  // (bounded above by finish_group's), so that it fits the 99 KiB of sm_86/sm_89 (f32 rows at
  // head_dim 256 take two or three).
  static constexpr int STATIC_MAX = (k_warps * GM * 32 * DPL + GM * k_max_split) * 4 + 1024;
  static constexpr int bytes_for(int s) { return s * STAGE + (aligned ? 0 : s * 2 * TK * 4); }
  static constexpr int S = bytes_for(4) + STATIC_MAX <= 96 * 1024 ? 4 : bytes_for(3) + STATIC_MAX <= 96 * 1024 ? 3 : 2;
  static constexpr int SMEM = bytes_for(S);  // the stages, then (Q8_0) their rows' int offsets
  static_assert(SMEM + STATIC_MAX <= 96 * 1024, "a block fits the smallest opt-in shared memory of sm_80+");
};

// The granules a thread copies for one tile: IT of them, granule idx = threadIdx.x + it * 128 of
// the tile (K slots, then V slots; consecutive threads take consecutive granules of a row), each
// the start of its key's row in the cache, or null past the split's end.
template <class P>
struct tile_rows {
  static constexpr int IT = (2 * P::TK * P::CH + 32 * k_warps - 1) / (32 * k_warps);
  const uint8_t* src[IT];
};

// Looks up the rows of keys [j0, min(j0 + TK, end)) in the block table: IT independent loads in
// one unrolled batch, a tile ahead of their copies. (Qwen3-8B Q4_K_M tg128 at depth 16384, f16,
// H200: a loop with each lookup feeding its copy, 257.7 t/s; this, 266.4, on another lease; the
// batch made just before its copies, 267.5 on that lease: the lookahead itself gains nothing
// measurable.)
template <class P>
__device__ __forceinline__ void gather_rows(const paged_attention_args& a, const int32_t* table, int kvh, int j0,
                                            int end, tile_rows<P>& t) {
#pragma unroll
  for (int it = 0; it < tile_rows<P>::IT; ++it) {
    const int idx = threadIdx.x + it * 32 * k_warps;
    const int side = idx / (P::TK * P::CH), j = j0 + idx / P::CH % P::TK;
    t.src[it] = nullptr;
    if (idx >= 2 * P::TK * P::CH || j >= end) continue;
    const int64_t row = (static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size) *
                            a.n_head_kv + kvh;
    t.src[it] = static_cast<const uint8_t*>(side ? a.v_cache : a.k_cache) + row * P::RB;
  }
}

// Issues the tile's copies into one stage and commits them as this thread's group.
template <class P>
__device__ __forceinline__ void stage_tile(const tile_rows<P>& t, uint8_t* stage, int* offs) {
#pragma unroll
  for (int it = 0; it < tile_rows<P>::IT; ++it) {
    const uint8_t* src = t.src[it];
    if (!src) continue;
    const int idx = threadIdx.x + it * 32 * k_warps, sr = idx / P::CH, c = idx % P::CH;  // sr: side * TK + r
    uint8_t* dst = stage + sr * P::SB;
    if constexpr (P::aligned) {
      stage16(dst + c * 16, src + c * 16);
    } else {
      const int off = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 15);
      if (c == 0) offs[sr] = off;
      if (c * 16 < off + P::RB) stage16(dst + c * 16, src - off + c * 16);
    }
  }
  cp_async_commit();
}

// Grid (n_tok * n_head_kv * n_sub, n_split), k_warps warps, P::SMEM bytes of dynamic shared
// memory; splits, partials and the merge as paged_attention_kernel (kernels/attention.cu). Each
// warp takes runs of KK keys of the tile that has arrived, as that kernel does from global memory.
template <int DPL, class T, int GM>
__global__ void __launch_bounds__(32 * k_warps)
    paged_deep_kernel(paged_attention_args a, int n_split, int chunk, float* part) {
  using P = deep_shape<DPL, T, GM>;
  constexpr int KK = P::KK, TK = P::TK, S = P::S;
  extern __shared__ __align__(16) uint8_t s_tiles[];
  int* s_offs = reinterpret_cast<int*>(s_tiles + S * P::STAGE);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const head_group hg = group_of<GM>(a, blockIdx.x);
  const int kvh = hg.kvh;
  split_keys sk;
  if (!split_of(a, hg, n_split, chunk, sk)) return;
  const int begin = sk.begin, end = sk.end;
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.tok_table[hg.t]) * a.max_blocks;
  const int n_tiles = (end - begin + TK - 1) / TK;

  pdl_wait();  // q and the newest key come from the previous kernel
  pdl_trigger();
  tile_rows<P> rows;
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < n_tiles) gather_rows<P>(a, table, kvh, begin + i * TK, end, rows);
    if (i < n_tiles)
      stage_tile<P>(rows, s_tiles + i * P::STAGE, s_offs + i * 2 * TK);
    else
      cp_async_commit();  // empty groups keep the wait count below uniform
  }
  if (S - 1 < n_tiles) gather_rows<P>(a, table, kvh, begin + (S - 1) * TK, end, rows);
  float q[GM][DPL], acc[GM][DPL], m[GM], l[GM];
  start_group<DPL, GM>(a, hg, lane, q, acc, m, l);
  for (int i = 0; i < n_tiles; ++i) {
    // The stage refilled here was read in the previous iteration, which ended with a barrier.
    const int nx = i + S - 1;
    if (nx < n_tiles)
      stage_tile<P>(rows, s_tiles + nx % S * P::STAGE, s_offs + nx % S * 2 * TK);
    else
      cp_async_commit();
    if (nx + 1 < n_tiles) gather_rows<P>(a, table, kvh, begin + (nx + 1) * TK, end, rows);
    cp_async_wait<S - 1>();  // tile i's group has landed (this thread's), the barrier: everyone's
    __syncthreads();
    const uint8_t* sk = s_tiles + i % S * P::STAGE;
    const int* so = s_offs + i % S * 2 * TK;
    const int j0 = begin + i * TK;
    for (int u0 = warp * KK; u0 < TK && j0 + u0 < end; u0 += k_warps * KK) {
      float kr[KK][DPL], vr[KK][DPL];
#pragma unroll
      for (int u = 0; u < KK; ++u) {
        const int r = min(u0 + u, end - j0 - 1);  // keys past the end read a staged row, masked
        const uint8_t* kp = sk + r * P::SB, *vp = sk + (TK + r) * P::SB;
        if constexpr (!P::aligned) kp += so[r], vp += so[TK + r];
        load_kv<DPL, T>(kp, 0, lane, kr[u]);
        load_kv<DPL, T>(vp, 0, lane, vr[u]);
      }
      attend_run<DPL, GM, KK>(q, kr, vr, end - j0 - u0, lane, m, l, acc);
    }
    __syncthreads();
  }
  finish_group<DPL, GM>(a, hg, sk.used, n_split, sk.pos, chunk, part, m, l, acc);
}

template <int DPL, class T, int GM>
cudaError_t launch_deep(const paged_attention_args& a, int n_split, int chunk, float* work, cudaStream_t stream) {
  constexpr auto kernel = paged_deep_kernel<DPL, T, GM>;
  constexpr int smem = deep_shape<DPL, T, GM>::SMEM;
  if (const cudaError_t e = allow_dynamic_smem_once<kernel>(smem); e != cudaSuccess) return e;
  float* part = n_split > 1 ? work + k_split_counters : nullptr;
  const int G = a.n_head / a.n_head_kv, n_sub = (G + GM - 1) / GM;
  const dim3 grid(static_cast<unsigned>(a.n_tok * a.n_head_kv * n_sub), static_cast<unsigned>(n_split));
  return launch_pdl_shared(kernel, grid, dim3(32 * k_warps), smem, stream, a, n_split, chunk, part);
}

// GM: all query heads of a KV head in one block up to eight (ratio 2 or 3 takes the four-head
// kernel with idle slots: the block's cost is its K/V bytes), past eight in blocks of up to eight.
template <int DPL, class T>
cudaError_t launch_deep_g(const paged_attention_args& a, int n_split, int chunk, float* work, cudaStream_t stream) {
  const int G = a.n_head / a.n_head_kv;
  if (G == 1) return launch_deep<DPL, T, 1>(a, n_split, chunk, work, stream);
  if (G <= 4) return launch_deep<DPL, T, 4>(a, n_split, chunk, work, stream);
  return launch_deep<DPL, T, 8>(a, n_split, chunk, work, stream);
}

template <class T>
cudaError_t launch_deep_t(const paged_attention_args& a, int n_split, int chunk, float* work, cudaStream_t stream) {
  switch (a.head_dim) {
    case 32: return launch_deep_g<1, T>(a, n_split, chunk, work, stream);
    case 64: return launch_deep_g<2, T>(a, n_split, chunk, work, stream);
    case 128: return launch_deep_g<4, T>(a, n_split, chunk, work, stream);
    case 256: return launch_deep_g<8, T>(a, n_split, chunk, work, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool paged_deep_supported(const paged_attention_args& a) {
  const bool dim = a.head_dim == 32 || a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256;
  const bool type = a.cache_type == ggml_type::f16 || a.cache_type == ggml_type::f32 ||
                    a.cache_type == ggml_type::q8_0;
  return dim && type;
}

cudaError_t launch_paged_deep(const paged_attention_args& a, int n_split, int chunk, float* work,
                              cudaStream_t stream) {
  if (a.cache_type == ggml_type::f16) return launch_deep_t<uint16_t>(a, n_split, chunk, work, stream);
  if (a.cache_type == ggml_type::f32) return launch_deep_t<float>(a, n_split, chunk, work, stream);
  if (a.cache_type == ggml_type::q8_0) return launch_deep_t<q8_row>(a, n_split, chunk, work, stream);
  return cudaErrorInvalidValue;
}

}  // namespace tandem
