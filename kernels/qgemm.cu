// The decode-batch GEMM (kernels/qgemm.h): a block computes BN weight rows for all of the launch's
// tokens over one piece of n_in; the GGUF blocks stream into shared memory ahead of use, are
// dequantized there into fp16 tiles and multiplied on WMMA tensor cores (sm_70+); pieces are
// summed in order after. Q4_K and Q6_K weights on sm_80+ take the fragment blocks instead
// (kernels/qgemm_frag.h), which decode straight into mma.sync fragments.
#include "kernels/qgemm.h"

#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>

#include "kernels/arch.h"
#include "kernels/cp_async.cuh"
#include "kernels/device_attribute.h"
#include "kernels/pdl.cuh"
#include "kernels/qgemm_frag.h"
#include "kernels/moe_tiles.cuh"
#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace {

using namespace nvcuda;

// Eight warps: 4 (16 weight rows each) x 2 (halves of the tokens); every token (up to 64, in
// 16-token fragments) in one block, so each weight is loaded once per launch. The x tile is
// re-read by every block from L2: x is small (64 x n_in fp16), the weights are what streams
// from memory.
constexpr int BN = 64, BK = k_qgemm_k_step, BT = k_qgemm_max_tokens;
constexpr int k_threads = 256, k_row_warps = 4;
constexpr int LDH = BK + 8;  // halves per shared row (pad against bank conflicts)
constexpr int LDC = BN + 4;  // floats per C staging row
static_assert(BN == 16 * k_row_warps && BK == 4 * 32 && (16 * BK / 8) % k_threads == 0,
              "the load mappings below assume these");

struct smem_t {
  union {
    struct {
      __half w[BN * LDH];  // weight rows, row-major: A
      __half x[BT * LDH];  // token rows = B (K x tokens) col-major with ld LDH
    } ab;
    float c[BT * LDC];  // [token][row]
  };
  int src[BT];  // grouped launches: the x row of each token row of the tile (-1: none, zeros)
  int dst[BT];  // and its y row (-1: not stored)
};

struct qgemm_params {
  const uint8_t* w;
  int64_t n_in, n_out, row_bytes;
  const __half* x;
  int n_tok, k_steps;  // K steps of BK per piece
  float* out;          // y (one piece) or the pieces' partial sums [piece][token][n_out]
  bool add;            // one piece: y += W·x
};

// A grouped launch (launch_qgemm_grouped): blockIdx.y is a row tile of the expert groups,
// blockIdx.z the matrix set; each block finds its expert, weights and rows on the device.
struct grouped_params {
  qgemm_params base;  // n_in, n_out, row_bytes, x; k_steps = n_in / BK
  const uint8_t* w[k_qgemm_max_sets];
  float* y[k_qgemm_max_sets];
  int64_t expert_stride;
  const int32_t *offsets, *perm, *tiles;
  int n_expert, k;
  qgemm_rows x_rows, y_rows;
};

// The weight matrix a grouped block reads: its first byte, rows and row pitch. (The helpers below
// take it or qgemm_params, whose fields of these names a dense launch keeps in parameter space.)
struct wview {
  const uint8_t* w;
  int64_t n_out, row_bytes;
};

// The weight rows stream through a ring of S shared-memory stages of raw GGUF bytes, one stage
// per KS columns (whole blocks of every type), copied S - 1 stages ahead with cp.async (sm_80+),
// so that several stages' bytes are in flight while the tensor cores work: one stage of
// register prefetch alone kept too few bytes in flight to cover memory latency (0.3-0.5 TB/s).
// Below sm_80 there is one stage; a thread holds its share of the next one in registers until
// the current one is decoded. Each K step decodes its BK columns from the stage into the fp16 tile.
constexpr int KS = 2 * BK;

// Columns per block and bytes per block of a weight type.
template <class T>
struct wtype {
  static constexpr int qk = block_traits<T>::qk, bytes = sizeof(T);
};

// A stage's geometry for type T: a row's KS columns start anywhere in a 16-byte chunk, so a
// stage row holds C chunks (pitch P bytes); as many stages (2..4) as fit about 80 KiB.
template <class T>
struct stage_geom {
  static constexpr int span = KS / wtype<T>::qk * wtype<T>::bytes;  // bytes of KS columns
  static constexpr int C = (15 + span + 15) / 16, P = 16 * C, bytes = BN * P;
  static constexpr int S = bytes * 4 <= 81920 ? 4 : bytes * 3 <= 81920 ? 3 : 2;
  static constexpr int per_thread = (BN * C + k_threads - 1) / k_threads;  // chunks a thread copies
};

template <class T>
__host__ __device__ constexpr int64_t col_bytes(int64_t cols) {
  return cols / wtype<T>::qk * wtype<T>::bytes;
}

// The weight row of tile row `row` (rows past n_out read the last row; never stored).
template <class W>
__device__ __forceinline__ const uint8_t* tile_row(const W& p, int64_t n0, int row) {
  return p.w + min(n0 + row, p.n_out - 1) * p.row_bytes;
}

// Where tile row `row`'s column ks lies in a stage: the copy keeps each byte's address mod 16,
// so every piece of a block keeps its alignment.
template <class T, class W>
__device__ __forceinline__ const uint8_t* stage_row(const W& p, int64_t n0, const uint8_t* stage, int row,
                                                    int64_t ks) {
  const auto a = reinterpret_cast<uintptr_t>(tile_row(p, n0, row)) + static_cast<uintptr_t>(col_bytes<T>(ks));
  return stage + row * stage_geom<T>::P + (a & 15u);
}

// One stage's copy: columns [ks, min(ks + KS, k_end)) of the BN tile rows. Chunk i of a thread is
// item tid + k_threads i: tile row item / C, 16-byte chunk item % C from the row's slab start
// rounded down to 16. Bytes past the matrix's end are never read (zeros instead).
template <class T>
struct stage_fill {
  using G = stage_geom<T>;
  uint4 r[G::per_thread];  // below sm_80: the chunks between begin() and end()

  template <class W>
  __device__ __forceinline__ void begin(const W& p, int64_t n0, int64_t ks, int64_t k_end, uint8_t* stage) {
    const int64_t span = col_bytes<T>(min(k_end - ks, int64_t{KS}));
    const uint8_t* w_end = p.w + p.n_out * p.row_bytes;
#pragma unroll
    for (int j = 0; j < G::per_thread; ++j) {
      const int item = threadIdx.x + k_threads * j, row = item / G::C, c = item % G::C;
      if (row >= BN) break;
      const uint8_t* a = tile_row(p, n0, row) + col_bytes<T>(ks);
      const uint8_t* chunk = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(a) & ~uintptr_t{15}) + 16 * c;
      const int n = chunk >= a + span ? 0 : static_cast<int>(min(int64_t{16}, static_cast<int64_t>(w_end - chunk)));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
      if (n > 0) cp_async16(stage + row * G::P + 16 * c, chunk, n);
#else
      if (n == 16) {
        r[j] = __ldg(reinterpret_cast<const uint4*>(chunk));
      } else {  // the matrix's last bytes (or nothing)
        uint8_t b[16] = {};
        for (int i = 0; i < n; ++i) b[i] = chunk[i];
        r[j] = *reinterpret_cast<const uint4*>(b);
      }
#endif
    }
  }

  __device__ __forceinline__ void end(uint8_t* stage) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800
#pragma unroll
    for (int j = 0; j < G::per_thread; ++j) {
      const int item = threadIdx.x + k_threads * j, row = item / G::C, c = item % G::C;
      if (row >= BN) break;
      *reinterpret_cast<uint4*>(stage + row * G::P + 16 * c) = r[j];
    }
#endif
  }
};

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Tile decoders: columns col .. col + BK - 1 of a stage starting at column ks into the fp16 tile.
// The generic one goes four weights at a time through row_src: warp w takes rows w + 8j, lane l
// columns 4l ..; Q4_K and Q6_K (most of a Q4_K_M model) read whole 16- and 2-byte pieces, where
// byte loads and per-4-weight scale decoding bounded the generic form. Every decoder yields the
// CPU's dequantized floats rounded to fp16.
constexpr int k_warps = k_threads / 32;
template <class T>
struct generic_loader {
  using type = T;
  static constexpr int nt1_blocks = 0;  // blocks per SM one-fragment launches are compiled for (0: ptxas decides)
  template <class W>
  static __device__ __forceinline__ void decode(const W& p, int64_t n0, const uint8_t* stage, int64_t ks,
                                                int col, smem_t& sm) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < BN / k_warps; ++j) {
      const int row = warp + k_warps * j;
      float v[4];
      row_src<T>::load4(stage_row<T>(p, n0, stage, row, ks), col + 4 * lane, v);
      *reinterpret_cast<uint2*>(sm.ab.w + row * LDH + 4 * lane) = make_uint2(pack_half2(v[0], v[1]), pack_half2(v[2], v[3]));
    }
  }
};

// Q4_K: a step's 128 columns are two 64-weight groups of one block. Thread i: tile row i / 4,
// group (i % 4) / 2, quant bytes 16 (i % 2) .. +15 of it: their low nibbles are weights l of the
// group's first sub-block, the high nibbles of its second (l = 16 (i % 2) .. +15).
struct q4k_loader {
  using type = block_q4_k;
  static constexpr int nt1_blocks = 0;
  template <class W>
  static __device__ __forceinline__ void decode(const W& p, int64_t n0, const uint8_t* stage, int64_t ks,
                                                int col, smem_t& sm) {
    const int piece = threadIdx.x % 4, g = col / 64 + piece / 2;
    const uint8_t* blk = stage_row<type>(p, n0, stage, threadIdx.x / 4, ks);
    const uint4 q4 = *reinterpret_cast<const uint4*>(blk + 16 + 32 * g + 16 * (piece % 2));
    const uint32_t dm = *reinterpret_cast<const uint32_t*>(blk);  // d, dmin
    const uint8_t* sc = blk + 4;
    float d[2], m[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      int scv, mv;
      k_scale_min(2 * g + s, sc, scv, mv);
      d[s] = __fmul_rn(__half2float(__ushort_as_half(static_cast<uint16_t>(dm & 0xffffu))), float(scv));
      m[s] = __fmul_rn(__half2float(__ushort_as_half(static_cast<uint16_t>(dm >> 16))), float(mv));
    }
    const uint32_t q[4] = {q4.x, q4.y, q4.z, q4.w};
    uint32_t lo[8], hi[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t b0 = (q[i / 2] >> (16 * (i % 2))) & 0xffu, b1 = (q[i / 2] >> (16 * (i % 2) + 8)) & 0xffu;
      lo[i] = pack_half2(__fadd_rn(__fmul_rn(d[0], float(b0 & 15u)), -m[0]),
                         __fadd_rn(__fmul_rn(d[0], float(b1 & 15u)), -m[0]));
      hi[i] = pack_half2(__fadd_rn(__fmul_rn(d[1], float(b0 >> 4)), -m[1]),
                         __fadd_rn(__fmul_rn(d[1], float(b1 >> 4)), -m[1]));
    }
    __half* row = sm.ab.w + (threadIdx.x / 4) * LDH + 64 * (piece / 2) + 16 * (piece % 2);
    auto* a = reinterpret_cast<uint4*>(row);
    auto* b = reinterpret_cast<uint4*>(row + 32);
    a[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]), a[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
    b[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]), b[1] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
  }
};

// Q6_K: a step's 128 columns are one half h of a block. Thread i: tile row i / 4, quarter
// r = i % 4 (weights 128h + 32r + l, l < 32): low bits from ql[64h + 32(r & 1) + l] (nibble
// r >> 1), high bits from qh[32h + l] (bits 2r, 2r + 1), scales[8h + 2r + l / 16]. Blocks of 210
// bytes keep only 2-byte alignment: 16-bit loads.
struct q6k_loader {
  using type = block_q6_k;
  // Three blocks' registers (80) for one fragment, as the occupancy budget records: left free,
  // ptxas takes 98 since the K loop moved into k_loop, two blocks per SM.
  static constexpr int nt1_blocks = 3;
  template <class W>
  static __device__ __forceinline__ void decode(const W& p, int64_t n0, const uint8_t* stage, int64_t ks,
                                                int col, smem_t& sm) {
    const int quarter = threadIdx.x % 4, h = col / 128;
    const uint8_t* blk = stage_row<type>(p, n0, stage, threadIdx.x / 4, ks);
    const auto* qlp = reinterpret_cast<const uint16_t*>(blk + 64 * h + 32 * (quarter & 1));
    const auto* qhp = reinterpret_cast<const uint16_t*>(blk + 128 + 32 * h);
    const uint32_t scales = *reinterpret_cast<const uint16_t*>(blk + 192 + 8 * h + 2 * quarter);
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk + 208)));
    const float ds[2] = {__fmul_rn(d, float(static_cast<int8_t>(scales & 0xffu))),
                         __fmul_rn(d, float(static_cast<int8_t>((scales >> 8) & 0xffu)))};
    const int lo_shift = 4 * (quarter >> 1), hi_shift = 2 * quarter;
    uint32_t out[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {  // weights l = 2i, 2i + 1
      const uint32_t ql = qlp[i], qh = qhp[i];
      float v[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int q = int((((ql >> (8 * j)) >> lo_shift) & 15u) | ((((qh >> (8 * j)) >> hi_shift) & 3u) << 4)) - 32;
        v[j] = __fmul_rn(ds[i / 8], float(q));
      }
      out[i] = pack_half2(v[0], v[1]);
    }
    auto* dst = reinterpret_cast<uint4*>(sm.ab.w + (threadIdx.x / 4) * LDH + 32 * quarter);
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = make_uint4(out[4 * i], out[4 * i + 1], out[4 * i + 2], out[4 * i + 3]);
  }
};

// NT * 16 token rows of BK halves, 16 bytes a load (chunk i = tid + k_threads j: row i / parts);
// rows past n_tok are zeros.
constexpr int k_x_parts = BK / 8;
template <int NT>
struct x_tile {
  static constexpr int regs = NT * 16 * k_x_parts / k_threads;
};

// Gathered (grouped launches): token row t is x row sm.src[t]; else x row t for t < n_tok.
template <int NT, bool Gathered>
__device__ __forceinline__ void load_x(const qgemm_params& p, const smem_t& sm, int64_t k0,
                                       uint4 (&r)[x_tile<NT>::regs]) {
#pragma unroll
  for (int j = 0; j < x_tile<NT>::regs; ++j) {
    const int i = threadIdx.x + k_threads * j, t = i / k_x_parts, part = i % k_x_parts;
    const int src = Gathered ? sm.src[t] : t < p.n_tok ? t : -1;
    r[j] = src >= 0 ? __ldg(reinterpret_cast<const uint4*>(p.x + src * p.n_in + k0 + 8 * part))
                    : make_uint4(0, 0, 0, 0);
  }
}

template <int NT>
__device__ __forceinline__ void store_x(const uint4 (&r)[x_tile<NT>::regs], smem_t& sm) {
#pragma unroll
  for (int j = 0; j < x_tile<NT>::regs; ++j) {
    const int i = threadIdx.x + k_threads * j;
    *reinterpret_cast<uint4*>(sm.ab.x + (i / k_x_parts) * LDH + 8 * (i % k_x_parts)) = r[j];
  }
}

// Stages a block streams weights through: below sm_80 one (the next stage waits in registers
// until the current one is decoded), else stage_geom's S.
template <class T>
__host__ __device__ constexpr int stages_for(bool cp_async) {
  return cp_async ? stage_geom<T>::S : 1;
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr bool k_cp_async = true;
#else
constexpr bool k_cp_async = false;
#endif

// Dynamic shared memory of a launch: the tiles, then the stages.
template <class T>
constexpr size_t smem_bytes(bool cp_async) {
  return sizeof(smem_t) + size_t(stages_for<T>(cp_async)) * stage_geom<T>::bytes;
}

template <int S>
__device__ __forceinline__ void wait_stage() {
  cp_async_wait<S >= 2 ? S - 2 : 0>();
}

// The products of one K step: this warp's 16 weight rows against its token fragments.
template <int NT, int NH>
__device__ __forceinline__ void step_products(const smem_t& sm, int rw, int f0,
                                              wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[NH]) {
#pragma unroll
  for (int kk = 0; kk < BK; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, sm.ab.w + rw * 16 * LDH + kk, LDH);
#pragma unroll
    for (int i = 0; i < NH; ++i) {
      if (f0 + i >= NT) break;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, sm.ab.x + (f0 + i) * 16 * LDH + kk, LDH);
      wmma::mma_sync(acc[i], fa, fb, acc[i]);
    }
  }
}

// The first stages of a block's weights, ahead of the K loop (S - 1 of them; one below sm_80).
template <class T, int S, class W>
__device__ __forceinline__ void prefetch_stages(const W& wv, int64_t n0, int64_t k_begin, int64_t k_end,
                                                int64_t supers, uint8_t* stages, stage_fill<T>& fill) {
  for (int s = 0; s < max(S - 1, 1); ++s) {
    if (s < supers) {
      uint8_t* st = stages + (s % S) * stage_geom<T>::bytes;
      fill.begin(wv, n0, k_begin + s * KS, k_end, st);
      fill.end(st);
    }
    cp_async_commit();
  }
}

// The K loop of a block from its prefetched stages: acc (this warp's 16 weight rows against its
// token fragments f0 ..) over [k_begin, k_end) of tile rows n0 .. and the tile's x rows.
// A super-step is one stage (KS columns, two K steps; the piece's last may be one).
template <class L, int NT, int NH, bool Gathered, class W>
__device__ __forceinline__ void k_loop(const qgemm_params& p, const W& wv, int64_t n0, int64_t k_begin,
                                       int64_t k_end, smem_t& sm, uint8_t* stages, stage_fill<typename L::type>& fill,
                                       int rw, int f0, wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[NH]) {
  using T = typename L::type;
  constexpr int S = stages_for<T>(k_cp_async);
  const auto stage = [&](int64_t s) { return stages + (s % S) * stage_geom<T>::bytes; };
  const int64_t steps = (k_end - k_begin) / BK, supers = (steps + 1) / 2;
  uint4 xr[x_tile<NT>::regs];
  load_x<NT, Gathered>(p, sm, k_begin, xr);
  bool refill = false;
  for (int64_t j = 0; j < steps; ++j) {
    const int64_t s = j / 2, ks = k_begin + s * KS;
    const int half = static_cast<int>(j % 2);
    if (half == 0) wait_stage<S>();
    __syncthreads();  // the stage has landed; the previous step's fragments are loaded
    L::decode(wv, n0, stage(s), ks, half * BK, sm);
    store_x<NT>(xr, sm);
    __syncthreads();
    // The stage S - 1 ahead (with one stage: the next, in registers until this one is decoded).
    const int64_t next = S > 1 ? s + S - 1 : s + 1;
    if (half == 0) {
      refill = next < supers;
      if (refill) fill.begin(wv, n0, k_begin + next * KS, k_end, stage(next));
      cp_async_commit();
    }
    if (j + 1 < steps) load_x<NT, Gathered>(p, sm, k_begin + (j + 1) * BK, xr);
    if (refill && half == 1) fill.end(stage(next)), refill = false;  // (a last one-step stage refills none)
    step_products<NT, NH>(sm, rw, f0, acc);
  }
  cp_async_wait<0>();
}

// This warp's fragments into sm.c ([token][row]) once every warp is done with the tiles.
template <int NT, int NH>
__device__ __forceinline__ void stage_results(smem_t& sm, int rw, int f0,
                                              const wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[NH]) {
  __syncthreads();  // C overwrites the tiles
#pragma unroll
  for (int i = 0; i < NH; ++i)
    if (f0 + i < NT) wmma::store_matrix_sync(sm.c + (f0 + i) * 16 * LDC + rw * 16, acc[i], LDC, wmma::mem_col_major);
  __syncthreads();
}

// Grid: (row tiles, pieces of n_in). NT: 16-token fragments (ceil(n_tok / 16)).
template <class L, int NT>
__global__ void __launch_bounds__(k_threads, NT == 1 ? L::nt1_blocks : 0) qgemm_kernel(qgemm_params p) {
  using T = typename L::type;
  constexpr int S = stages_for<T>(k_cp_async);
  extern __shared__ __align__(128) uint8_t dyn[];
  smem_t& sm = *reinterpret_cast<smem_t*>(dyn);
  uint8_t* stages = dyn + sizeof(smem_t);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_steps * BK;
  const int64_t k_end = min(p.n_in, k_begin + static_cast<int64_t>(p.k_steps) * BK);
  constexpr int NH = (NT + 1) / 2;
  const int warp = threadIdx.x / 32, rw = warp % k_row_warps, f0 = (warp / k_row_warps) * NH;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NH];
#pragma unroll
  for (int i = 0; i < NH; ++i) wmma::fill_fragment(acc[i], 0.f);
  // Weights are never written by an earlier kernel: their first stages go ahead of pdl_wait.
  stage_fill<T> fill;
  prefetch_stages<T, S>(p, n0, k_begin, k_end, ((k_end - k_begin) / BK + 1) / 2, stages, fill);
  pdl_wait();
  k_loop<L, NT, NH, false>(p, p, n0, k_begin, k_end, sm, stages, fill, rw, f0, acc);
  pdl_trigger();
  stage_results<NT, NH>(sm, rw, f0, acc);
  const bool pieces = gridDim.y > 1;
  float* out = p.out + (pieces ? static_cast<int64_t>(blockIdx.y) * p.n_tok * p.n_out : 0);
  for (int i = threadIdx.x; i < p.n_tok * BN; i += k_threads) {
    const int t = i / BN, r = i % BN;
    if (n0 + r >= p.n_out) continue;
    float& y = out[static_cast<int64_t>(t) * p.n_out + n0 + r];
    const float v = sm.c[t * LDC + r];
    y = !pieces && p.add ? y + v : v;
  }
}

// Grid: (output tiles, row tiles' upper bound, matrix sets); blocks past tiles[n_expert] exit.
// Every row tile holds up to BT rows of one expert; its weights are that expert's matrix.
// Blocks per SM a grouped kernel is compiled for (registers capped to fit them): three where
// their shared memory fits three (an SM's 228 KiB, 1 KiB reserved per block: Q4_0, Q4_K), else
// two (at most 128 registers, as the dense kernels get). Three blocks of 80 registers (with some
// spills) against two of 128 measured 1,294 / 687 us against 1,667 / 985 us for a Qwen3-30B-A3B
// layer's Q4_K gate+up / down at 2048 tokens (kernels_moe_test big.moe_prefill_tflops).
template <class T>
constexpr int grouped_min_blocks() {
  return k_cp_async && 3 * (smem_bytes<T>(true) + 1024) <= 228 * 1024 ? 3 : 2;
}

template <class L>
__global__ void __launch_bounds__(k_threads, grouped_min_blocks<typename L::type>())
    qgemm_grouped_kernel(grouped_params g) {
  using T = typename L::type;
  constexpr int S = stages_for<T>(k_cp_async), NT = BT / 16, NH = NT / 2;
  extern __shared__ __align__(128) uint8_t dyn[];
  smem_t& sm = *reinterpret_cast<smem_t*>(dyn);
  uint8_t* stages = dyn + sizeof(smem_t);
  const qgemm_params& p = g.base;
  pdl_wait();  // the groups come from the kernel before
  const int tile = blockIdx.y;
  if (tile >= __ldg(g.tiles + g.n_expert)) return;
  const int e = expert_of_tile(g.tiles, g.n_expert, tile);
  const int r0 = __ldg(g.offsets + e) + (tile - __ldg(g.tiles + e)) * BT, r_end = __ldg(g.offsets + e + 1);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const wview wv{g.w[blockIdx.z] + e * g.expert_stride, p.n_out, p.row_bytes};
  stage_fill<T> fill;
  prefetch_stages<T, S>(wv, n0, 0, p.n_in, (p.n_in / BK + 1) / 2, stages, fill);
  for (int i = threadIdx.x; i < BT; i += k_threads) {
    const int r = r0 + i;
    const int pair = r < r_end ? __ldg(g.perm + r) : -1;
    sm.src[i] = pair < 0 ? -1 : g.x_rows == qgemm_rows::by_token ? pair / g.k : g.x_rows == qgemm_rows::by_pair ? pair : r;
    sm.dst[i] = pair < 0 ? -1 : g.y_rows == qgemm_rows::by_pair ? pair : r;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, rw = warp % k_row_warps, f0 = (warp / k_row_warps) * NH;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NH];
#pragma unroll
  for (int i = 0; i < NH; ++i) wmma::fill_fragment(acc[i], 0.f);
  k_loop<L, NT, NH, true>(p, wv, n0, 0, p.n_in, sm, stages, fill, rw, f0, acc);
  pdl_trigger();
  stage_results<NT, NH>(sm, rw, f0, acc);
  float* y = g.y[blockIdx.z];
  for (int i = threadIdx.x; i < BT * BN; i += k_threads) {
    const int t = i / BN, r = i % BN, d = sm.dst[t];
    if (d >= 0 && n0 + r < p.n_out) y[static_cast<int64_t>(d) * p.n_out + n0 + r] = sm.c[t * LDC + r];
  }
}

// y[i] (+)= sum over pieces s = 0, 1, .. of part[s * n + i], in that order.
__global__ void __launch_bounds__(256) qgemm_sum_kernel(const float* __restrict__ part, int pieces, int64_t n,
                                                        float* __restrict__ y, bool add) {
  pdl_wait();
  pdl_trigger();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float s = add ? y[i] : 0.f;
    for (int k = 0; k < pieces; ++k) s += __ldg(part + k * n + i);
    y[i] = s;
  }
}

// Whether the kernels copy with cp.async (built for compute capability 8+: kernel_arch()).
bool device_cp_async() { return kernel_arch() >= 80; }

// Launches kernel K (weights of loader L's type) with its stages' shared memory.
template <class L, class P, void (*K)(P)>
cudaError_t launch_with_stages(const P& p, dim3 grid, cudaStream_t s) {
  const size_t bytes = smem_bytes<typename L::type>(device_cp_async());
  const cudaError_t e = allow_dynamic_smem_once<K>(static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  return launch_pdl_shared(K, grid, dim3(k_threads), bytes, s, p);
}

// A dense launch: the instantiation for the launch's 16-token fragments.
template <class L>
struct dense_launch {
  static cudaError_t go(const qgemm_params& p, dim3 grid, cudaStream_t s) {
    switch ((p.n_tok + 15) / 16) {
      case 1: return launch_with_stages<L, qgemm_params, qgemm_kernel<L, 1>>(p, grid, s);
      case 2: return launch_with_stages<L, qgemm_params, qgemm_kernel<L, 2>>(p, grid, s);
      case 3: return launch_with_stages<L, qgemm_params, qgemm_kernel<L, 3>>(p, grid, s);
      default: return launch_with_stages<L, qgemm_params, qgemm_kernel<L, 4>>(p, grid, s);
    }
  }
};

template <class L>
struct grouped_launch {
  static cudaError_t go(const grouped_params& g, dim3 grid, cudaStream_t s) {
    return launch_with_stages<L, grouped_params, qgemm_grouped_kernel<L>>(g, grid, s);
  }
};

// The loader of each type, for launch F (dense_launch or grouped_launch).
template <template <class> class F, class P>
cudaError_t launch_of(ggml_type t, const P& p, dim3 grid, cudaStream_t s) {
  switch (t) {
    case ggml_type::q4_0: return F<generic_loader<block_q4_0>>::go(p, grid, s);
    case ggml_type::q4_1: return F<generic_loader<block_q4_1>>::go(p, grid, s);
    case ggml_type::q5_0: return F<generic_loader<block_q5_0>>::go(p, grid, s);
    case ggml_type::q5_1: return F<generic_loader<block_q5_1>>::go(p, grid, s);
    case ggml_type::q8_0: return F<generic_loader<block_q8_0>>::go(p, grid, s);
    case ggml_type::q4_k: return F<q4k_loader>::go(p, grid, s);
    case ggml_type::q5_k: return F<generic_loader<block_q5_k>>::go(p, grid, s);
    case ggml_type::q6_k: return F<q6k_loader>::go(p, grid, s);
    default: return cudaErrorInvalidValue;
  }
}

// K steps per piece: enough pieces that about four blocks per SM are in flight (a matrix of few
// rows streams its weights from more SMs), at most 16 pieces; an even count, so that every
// piece's stages start on whole blocks (256 columns: a K-quant block).
int steps_per_piece(int64_t n_in, int64_t n_out) {
  const int64_t steps = n_in / BK, tiles = (n_out + BN - 1) / BN;
  const int64_t sms = std::max(device_attribute<cudaDevAttrMultiProcessorCount>(), 1);
  const int64_t want = (4 * sms + tiles - 1) / tiles;
  const int64_t pieces = std::clamp<int64_t>(want, 1, std::min<int64_t>(steps, 16));
  const int64_t per = (steps + pieces - 1) / pieces;
  return static_cast<int>(per + per % 2);
}

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

}  // namespace

// f32 and f16 rows (rare: a small model's tied head) take the GEMM path: a stage of 256 such
// columns would not fit sm_70's shared memory beside the tiles.
bool gpu_can_qgemm(ggml_type t) { return row_src_reads(t) && t != ggml_type::f32 && t != ggml_type::f16; }

int qgemm_splits(int64_t n_in, int64_t n_out) {
  if (n_in < BK || n_out < 1) return 1;
  const int64_t steps = n_in / BK, per = steps_per_piece(n_in, n_out);
  return static_cast<int>((steps + per - 1) / per);
}

size_t qgemm_work_bytes(int64_t n_in, int64_t n_out, int n_tok) {
  const int pieces = qgemm_splits(n_in, n_out);
  if (pieces <= 1 || n_tok <= 0) return 0;
  return static_cast<size_t>(pieces) * static_cast<size_t>(n_tok) * static_cast<size_t>(n_out) * sizeof(float);
}

int qgemm_block_rows(ggml_type t, int64_t n_in, int64_t n_out, int n_tok) {
  if (!gpu_can_qgemm(t) || n_in < BK || n_in % BK != 0 || n_out < 1 || n_tok < 1 || n_tok > BT) return 0;
  return qgemm_frag_serves(t) ? qgemm_frag_block_rows(t, n_out, n_tok, qgemm_splits(n_in, n_out)) : BN;
}

cudaError_t launch_qgemm(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const uint16_t* x16, int n_tok,
                         float* y, bool add, void* work, cudaStream_t stream) {
  if (!gpu_can_qgemm(t) || n_in <= 0 || n_in % BK != 0 || n_in % type_info(t).block_size != 0 || n_out < 1 ||
      n_tok < 1 || n_tok > BT || !w || !x16 || !y || (n_out + BN - 1) / BN > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (!aligned(w, 16) || !aligned(x16, 16) || !aligned(work, 16)) return cudaErrorMisalignedAddress;
  const int per = steps_per_piece(n_in, n_out), pieces = qgemm_splits(n_in, n_out);
  if (pieces > 1 && !work) return cudaErrorInvalidValue;
  const auto rb = static_cast<int64_t>(*row_bytes(t, static_cast<uint64_t>(n_in)));
  float* out = pieces > 1 ? static_cast<float*>(work) : y;
  cudaError_t e = cudaSuccess;
  if (qgemm_frag_serves(t)) {  // per is even: whole 256-column blocks a piece
    e = launch_qgemm_frag(t, {w, n_in, n_out, rb, x16, n_tok, per / 2, pieces, out, add}, stream);
  } else {
    qgemm_params p{};
    p.w = static_cast<const uint8_t*>(w);
    p.n_in = n_in, p.n_out = n_out, p.row_bytes = rb;
    p.x = reinterpret_cast<const __half*>(x16);
    p.n_tok = n_tok, p.k_steps = per;
    p.out = out, p.add = add;
    const dim3 grid(static_cast<unsigned>((n_out + BN - 1) / BN), static_cast<unsigned>(pieces));
    e = launch_of<dense_launch>(t, p, grid, stream);
  }
  if (e != cudaSuccess || pieces == 1) return e;
  const int64_t n = int64_t{n_tok} * n_out;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024));
  return launch_pdl(qgemm_sum_kernel, dim3(blocks), dim3(256), stream, static_cast<const float*>(work), pieces, n,
                    y, add);
}

bool gpu_can_qgemm_grouped(ggml_type t, int64_t n_in) {
  return gpu_can_qgemm(t) && n_in >= BK && n_in % BK == 0 && n_in % type_info(t).block_size == 0;
}

cudaError_t launch_qgemm_grouped(ggml_type t, const void* const* w, float* const* y, int n_sets, size_t expert_stride,
                                 int n_expert, int64_t n_in, int64_t n_out, const uint16_t* x16, qgemm_rows x_rows,
                                 qgemm_rows y_rows, int k, const int32_t* offsets, const int32_t* perm,
                                 const int32_t* tile_offsets, unsigned row_tiles, cudaStream_t stream) {
  if (!gpu_can_qgemm_grouped(t, n_in) || n_sets < 1 || n_sets > k_qgemm_max_sets || n_expert < 1 || k < 1 ||
      n_out < 1 || (n_out + BN - 1) / BN > 0x7fffffff || row_tiles > 65535 || y_rows == qgemm_rows::by_token ||
      !x16 || !offsets || !perm || !tile_offsets)
    return cudaErrorInvalidValue;
  if (row_tiles == 0) return cudaSuccess;
  if (!aligned(x16, 16) || expert_stride % 16 != 0) return cudaErrorMisalignedAddress;
  for (int i = 0; i < n_sets; ++i) {
    if (!w[i] || !y[i]) return cudaErrorInvalidValue;
    if (!aligned(w[i], 16)) return cudaErrorMisalignedAddress;
  }
  const auto rb = static_cast<int64_t>(*row_bytes(t, static_cast<uint64_t>(n_in)));
  if (qgemm_frag_serves(t)) {
    qgemm_frag_grouped_args a{};
    for (int i = 0; i < n_sets; ++i) a.w[i] = w[i], a.y[i] = y[i];
    a.n_sets = n_sets, a.expert_stride = static_cast<int64_t>(expert_stride), a.n_in = n_in, a.n_out = n_out;
    a.row_bytes = rb, a.x16 = x16, a.x_rows = x_rows, a.y_rows = y_rows, a.k = k, a.n_expert = n_expert;
    a.offsets = offsets, a.perm = perm, a.tiles = tile_offsets, a.row_tiles = row_tiles;
    return launch_qgemm_frag_grouped(t, a, stream);
  }
  grouped_params g{};
  for (int i = 0; i < n_sets; ++i) g.w[i] = static_cast<const uint8_t*>(w[i]), g.y[i] = y[i];
  g.base.n_in = n_in, g.base.n_out = n_out, g.base.row_bytes = rb;
  g.base.x = reinterpret_cast<const __half*>(x16);
  g.base.n_tok = BT, g.base.k_steps = static_cast<int>(n_in / BK);
  g.expert_stride = static_cast<int64_t>(expert_stride);
  g.offsets = offsets, g.perm = perm, g.tiles = tile_offsets;
  g.n_expert = n_expert, g.k = k, g.x_rows = x_rows, g.y_rows = y_rows;
  const dim3 grid(static_cast<unsigned>((n_out + BN - 1) / BN), row_tiles, static_cast<unsigned>(n_sets));
  return launch_of<grouped_launch>(t, g, grid, stream);
}

}  // namespace tandem
