// The decode-batch GEMM's fragment blocks (kernels/qgemm_frag.h): each warp decodes its 16 weight
// rows from the raw GGUF bytes in shared memory straight into mma.sync A fragments, in a column
// order that x's fragments follow, so no fp16 weight tile is written and read back.
#include "kernels/qgemm_frag.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "kernels/arch.h"
#include "kernels/cp_async.cuh"
#include "kernels/device_attribute.h"
#include "kernels/frag_decoders.cuh"
#include "kernels/mma_sync.cuh"
#include "kernels/moe_tiles.cuh"
#include "kernels/pdl.cuh"
#include "kernels/qgemm_frag_wg.cuh"

namespace tandem {
namespace {

using frag::q4k_frag;
using frag::q6k_frag;

// W warps of 16 rows, every token in each warp. A stage holds one 256-column block of the 16 W
// rows (the GGUF bytes, each address's value mod 16 kept) and the same 256 columns of x as fp16;
// all S stages are copied with cp.async at the start, then each is refilled once read; one
// barrier a stage. x is read from L2 once per block, so 25 tokens and more (four 8-token tiles)
// take 8 warps (128 rows) a block, halving those reads; Q6_K at 49-64 tokens takes 16 (256 rows,
// the decoder's tall_from). The WMMA blocks this replaces issued 8-11 instructions a weight
// (dequantize, store the fp16 tile, reload it as fragments, two barriers a 128-column step) and
// streamed 0.35-0.65 TB/s.
constexpr int KB = 256;
template <int NT8>
constexpr int warps_for() {
  return NT8 >= 4 ? 8 : 4;
}
// x rows in a stage: 256 halves (512 bytes), 16-byte chunk c of token row r stored at chunk
// x_slot(c, r), so that the 16-byte loads of one quarter-warp (2 token rows x 4 column runs of
// either decoder) fall in 8 distinct bank groups.
constexpr int k_x_row = 2 * KB;
__device__ __forceinline__ int x_slot(int c, int r) { return c ^ ((c >> 3) & 3) ^ ((r & 1) << 2); }

// A launch's geometry for weight type T, W warps and NT8 8-token tiles: rows a block (BN), bytes
// of a stage row (P: the 256 columns start anywhere in a 16-byte chunk) and of a stage, and
// stages: as many (2..4) as fit 40 KiB, two at least (106-127 KiB a block at 57-64 tokens), so
// that up to 24 tokens shared memory leaves room for more blocks an SM than registers do (3-4,
// tests/kernels/occupancy_budget.txt) and a 4096-input matrix (two stages a piece) has all its
// loads in flight at once. A 16-warp block is alone on its SM: as many as fit 216 KiB.
// Shared memory one SM offers its blocks, per architecture (the device pass; the host pass does
// not use it). Two blocks of more than half of it cannot share an SM, and asking ptxas for two
// would only cap a thread's registers at 128 and spill.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870)
constexpr int k_sm_smem = 164 * 1024;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int k_sm_smem = 100 * 1024;
#else
constexpr int k_sm_smem = 228 * 1024;
#endif

template <class T, int W, int NT8>
struct frag_geom {
  static constexpr int warps = W, threads = 32 * W, BN = 16 * W;
  static constexpr int span = sizeof(T), C = (15 + span + 15) / 16, P = 16 * C, w_bytes = BN * P;
  static constexpr int stage = w_bytes + NT8 * 8 * k_x_row, budget = W == 16 ? 221184 : 40960;
  static constexpr int S = budget / stage >= 4 ? 4 : budget / stage >= 3 ? 3 : 2;
  static constexpr int smem = S * stage;
  // Registers for two 8-warp blocks (when their shared memory fits an SM, 1 KiB reserved each)
  // or one 16-warp block an SM (0: ptxas decides).
  static constexpr int min_blocks = W == 16 ? 1 : W == 8 ? (2 * (smem + 1024) <= k_sm_smem ? 2 : 1) : 0;
};

// A thread's share of each stage's copy, its rows worked out once (per 16-byte chunk, that
// arithmetic outweighed a short piece's products). Weight chunk i of the tile (thread + threads
// j) is row i / C, chunk i % C of it, so a warp's copies are contiguous; rows past n_out repeat
// the last, bytes past the matrix's end are never read. Thread i copies x's column chunk
// i % 32 of token rows i / 32, + W, ..: x row rows[r] (a grouped tile's gathered rows; -1:
// zeros) or r (zeros from n_tok). Pair (the fused SwiGLU): each half of the threads fills its
// half of the tile, rows n0 .. n0 + BN / 2 - 1 of its own matrix w (gate for the first half, up
// for the second), so that a thread holds one matrix pointer as in the unfused blocks. Wg: x lands
// where frag_wg::to_canonical reads it.
template <class G, int NT8, bool Pair = false, bool Wg = false>
struct stage_copy {
  static constexpr int copiers = Pair ? G::threads / 2 : G::threads, rows_per_mat = Pair ? G::BN / 2 : G::BN;
  static constexpr int J = (rows_per_mat * G::C + copiers - 1) / copiers, x_rows = (8 * NT8 + G::warps - 1) / G::warps;
  const uint8_t *w, *w_end;
  int64_t row_bytes, n_in;
  const uint16_t* x;
  const int* rows;
  int n_tok, tok0, ch;
  int row[J];  // weight row of chunk j (-1: none)

  __device__ __forceinline__ stage_copy(const uint8_t* w_, int64_t n_out, int64_t row_bytes_, int64_t n0,
                                        const uint16_t* x_, int64_t n_in_, int n_tok_, const int* rows_)
      : w(w_), w_end(w_ + n_out * row_bytes_), row_bytes(row_bytes_), n_in(n_in_), x(x_), rows(rows_),
        n_tok(n_tok_), tok0(threadIdx.x / 32), ch(threadIdx.x % 32) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = first() + copiers * j;
      row[j] = i < rows_per_mat * G::C ? static_cast<int>(min(n0 + i / G::C, n_out - 1)) : -1;
    }
  }
  // This thread's first chunk within its matrix's rows.
  static __device__ __forceinline__ int first() { return Pair ? threadIdx.x % copiers : threadIdx.x; }
  // Weight bytes of 256-column block kb into stage st.
  __device__ __forceinline__ void weights(int64_t kb, uint8_t* st) const {
    if (Pair && threadIdx.x >= copiers) st += rows_per_mat * G::P;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      if (row[j] < 0) break;
      const int i = first() + copiers * j, c = i % G::C;
      const uint8_t* a = w + row[j] * row_bytes + kb * G::span;
      const auto* chunk = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(a) & ~uintptr_t{15}) + 16 * c;
      if (chunk < a + G::span)
        cp_async16(st + i / G::C * G::P + 16 * c, chunk, static_cast<int>(min(int64_t{16}, w_end - chunk)));
    }
  }
  // x's columns of block kb, behind the weights of stage st.
  __device__ __forceinline__ void tokens(int64_t kb, uint8_t* st) const {
    uint8_t* xs = st + G::w_bytes;
#pragma unroll
    for (int i = 0; i < x_rows; ++i) {
      const int tok = tok0 + G::warps * i;
      if (tok >= 8 * NT8) break;
      const int r = rows ? rows[tok] : tok < n_tok ? tok : -1;
      const uint16_t* src = x + max(r, 0) * n_in + kb * KB + 8 * ch;
      const int slot = frag_wg::on<Wg> ? frag_wg::land_slot(ch, tok) : x_slot(ch, tok);
      cp_async16(xs + tok * k_x_row + 16 * slot, src, r >= 0 ? 16 : 0);
    }
  }
};

// One stage's products for this thread's rows g and g + 8 of its warp (blocks at blk_a, blk_b)
// against x's first N token tiles: lane (g, t) holds A rows g, g + 8 and B token g of each
// 8-token tile. (N < NT8: a grouped row tile whose last token rows are empty: an expert's last
// tile is often a few rows. A runtime bound in this loop instead cost 20-60% on an H200.)
template <class D, int NT8, int N = NT8>
__device__ __forceinline__ void block_products(const uint8_t* blk_a, const uint8_t* blk_b, const uint8_t* xs,
                                               int g, int t, float (&acc)[NT8][4]) {
  static_assert(N >= 1 && N <= NT8, "token tiles");
  const typename D::scales sa = D::prepare(blk_a, t), sb = D::prepare(blk_b, t);
#pragma unroll
  for (int gi = 0; gi < D::groups; ++gi) {
    uint32_t wa[D::G][4], wb[D::G][4];
    D::decode(blk_a, t, gi, sa, wa);
    D::decode(blk_b, t, gi, sb, wb);
#pragma unroll
    for (int i = 0; i < D::G; ++i) {
      const uint8_t* xp = xs + g * k_x_row + 16 * x_slot(D::col(t, gi, i) / 8, g);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const uint4 xv = *reinterpret_cast<const uint4*>(xp + j * 8 * k_x_row);
        mma16816(acc[j], wa[i][0], wb[i][0], wa[i][1], wb[i][1], xv.x, xv.y);
        mma16816(acc[j], wa[i][2], wb[i][2], wa[i][3], wb[i][3], xv.z, xv.w);
      }
    }
  }
}

// The K loop over blocks kb0 .. kb0 + nkb - 1, from the S stages already copied (each its own
// cp.async group): acc of this thread's rows ra, ra + 8 (row pointers base_a, base_b). Skip
// (64-token blocks): only the 8-token tiles below nt, in one of three unrolled forms. Wg (with
// Skip): each landed stage is rearranged for wgmma, then multiplied by it (kernels/qgemm_frag_wg.cuh).
template <class D, int NT8, class G, bool Pair, bool Skip = false, bool Wg = false>
__device__ __forceinline__ void k_loop(const stage_copy<G, NT8, Pair, Wg>& copy, uint8_t* dyn, int64_t kb0, int nkb, int ra,
                                       uintptr_t base_a, uintptr_t base_b, float (&acc)[NT8][4], int nt = NT8) {
  // Wg's stages land where only the wgmma products read them: no other form may take them.
  static_assert(!Wg || (Skip && NT8 == 8), "the wgmma form serves the 64-token grouped blocks only");
  constexpr int S = G::S;
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const auto stage = [&](int s) { return dyn + (s % S) * G::stage; };
  for (int s = 0; s < nkb; ++s) {
    cp_async_wait<S - 1>();
    __syncthreads();  // stage s has landed for every thread; stage s - 1 is read by all
    if (s > 0 && s + S - 1 < nkb) {  // into stage s - 1's slot
      copy.weights(kb0 + s + S - 1, stage(s + S - 1));
      copy.tokens(kb0 + s + S - 1, stage(s + S - 1));
    }
    cp_async_commit();
    const uint8_t* st = stage(s);
    const auto kbytes = static_cast<uintptr_t>((kb0 + s) * G::span);
    const uint8_t* blk_a = st + ra * G::P + ((base_a + kbytes) & 15u);
    const uint8_t* blk_b = st + (ra + 8) * G::P + ((base_b + kbytes) & 15u);
    if constexpr (frag_wg::on<Wg> && Skip && NT8 == 8) {
      uint8_t* xs = stage(s) + G::w_bytes;
      frag_wg::to_canonical<D>(xs);
      if (nt > 4) frag_wg::stage_products<D, 64>(blk_a, blk_b, xs, t, acc);
      else if (nt > 2) frag_wg::stage_products<D, 32>(blk_a, blk_b, xs, t, acc);
      else frag_wg::stage_products<D, 16>(blk_a, blk_b, xs, t, acc);
    } else if constexpr (Skip && NT8 == 8) {
      if (nt > 4) block_products<D, 8>(blk_a, blk_b, st + G::w_bytes, g, t, acc);
      else if (nt > 2) block_products<D, 8, 4>(blk_a, blk_b, st + G::w_bytes, g, t, acc);
      else block_products<D, 8, 2>(blk_a, blk_b, st + G::w_bytes, g, t, acc);
    } else {
      block_products<D, NT8>(blk_a, blk_b, st + G::w_bytes, g, t, acc);
    }
  }
  cp_async_wait<0>();
}

// This thread's output (row, token row) pairs: (ra or ra + 8, 8j + 2t + (e & 1)) for e < 4.
template <int NT8, class F>
__device__ __forceinline__ void for_outputs(int ra, const float (&acc)[NT8][4], F&& f) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < NT8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) f(e < 2 ? ra : ra + 8, 8 * j + 2 * t + (e & 1), acc[j][e]);
}

// Grid: (tiles of BN rows, pieces of n_in); W warps; NT8: 8-token tiles (ceil(n_tok / 8)).
template <class D, int W, int NT8>
__global__ void __launch_bounds__(frag_geom<typename D::type, W, NT8>::threads,
                                  frag_geom<typename D::type, W, NT8>::min_blocks)
    qgemm_frag_kernel(qgemm_frag_args p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using G = frag_geom<typename D::type, W, NT8>;
  extern __shared__ __align__(128) uint8_t dyn[];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * G::BN, kb0 = static_cast<int64_t>(blockIdx.y) * p.k_blocks;
  const int nkb = static_cast<int>(min(p.k_blocks, p.n_in / KB - kb0));
  const auto* w = static_cast<const uint8_t*>(p.w);
  const stage_copy<G, NT8> copy(w, p.n_out, p.row_bytes, n0, p.x16, p.n_in, p.n_tok, nullptr);
  // Weights are never written by an earlier kernel: their stages go ahead of pdl_wait.
  for (int s = 0; s < G::S; ++s)
    if (s < nkb) copy.weights(kb0 + s, dyn + s * G::stage);
  pdl_wait();
  for (int s = 0; s < G::S; ++s) {
    if (s < nkb) copy.tokens(kb0 + s, dyn + s * G::stage);
    cp_async_commit();
  }
  const int ra = threadIdx.x / 32 * 16 + threadIdx.x % 32 / 4;
  const auto base_a = reinterpret_cast<uintptr_t>(w + min(n0 + ra, p.n_out - 1) * p.row_bytes);
  const auto base_b = reinterpret_cast<uintptr_t>(w + min(n0 + ra + 8, p.n_out - 1) * p.row_bytes);
  float acc[NT8][4] = {};
  k_loop<D, NT8>(copy, dyn, kb0, nkb, ra, base_a, base_b, acc);
  pdl_trigger();
  const bool pieces = gridDim.y > 1;
  float* out = p.out + (pieces ? static_cast<int64_t>(blockIdx.y) * p.n_tok * p.n_out : 0);
  for_outputs<NT8>(ra, acc, [&](int r, int tok, float v) {
    const int64_t row = n0 + r;
    if (tok >= p.n_tok || row >= p.n_out) return;
    float& y = out[static_cast<int64_t>(tok) * p.n_out + row];
    y = !pieces && p.add ? y + v : v;
  });
#endif
}

// The fused SwiGLU's epilogue (8 warps): warps 4-7 hold up's products at the (row, token)
// positions where warps 0-3 hold gate's, lane for lane; they pass them through shared memory
// (every stage has been read), and warps 0-3 turn theirs into h with the expression of
// launch_swiglu (kernels/layer_ops.cu), so h has the bits of the unfused GEMM then launch_swiglu
// (tests/kernels/moe_test.cpp compares them). Returns whether this thread holds h.
template <int NT8>
__device__ __forceinline__ bool swiglu_combine(float (&acc)[NT8][4], uint8_t* dyn) {
  constexpr int half = 128;  // threads of each matrix
  float* up = reinterpret_cast<float*>(dyn);
  const int l = threadIdx.x % half;
  __syncthreads();
  if (threadIdx.x >= half) {
#pragma unroll
    for (int j = 0; j < NT8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) up[(4 * j + e) * half + l] = acc[j][e];
  }
  __syncthreads();
  if (threadIdx.x >= half) return false;
#pragma unroll
  for (int j = 0; j < NT8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float g = acc[j][e];
      acc[j][e] = g / (1.f + expf(-g)) * up[(4 * j + e) * half + l];
    }
  return true;
}

// Row tile `tile` (< tiles[n_expert]) of a grouped launch: the x and y rows of its 64 token rows
// into src and dst (-1 past its expert's rows), then a barrier. Returns the expert; live: its
// token rows (1..64).
__device__ __forceinline__ int tile_rows(const qgemm_frag_grouped_args& g, int tile, int* src, int* dst, int& live) {
  const int e = expert_of_tile(g.tiles, g.n_expert, tile);
  const int r0 = __ldg(g.offsets + e) + (tile - __ldg(g.tiles + e)) * 64, r_end = __ldg(g.offsets + e + 1);
  if (threadIdx.x < 64) {
    const int r = r0 + threadIdx.x;
    const int pair = r < r_end ? __ldg(g.perm + r) : -1;
    src[threadIdx.x] = pair < 0 ? -1 : g.x_rows == qgemm_rows::by_token ? pair / g.k : g.x_rows == qgemm_rows::by_pair ? pair : r;
    dst[threadIdx.x] = pair < 0 ? -1 : g.y_rows == qgemm_rows::by_pair ? pair : r;
  }
  live = min(64, r_end - r0);
  __syncthreads();
  return e;
}

// This block's row tile (blockIdx.y) of a grouped launch, once the groups the kernel before wrote
// are visible: -1 past tiles[n_expert] (the whole block then has nothing to do), else tile_rows.
__device__ __forceinline__ int block_row_tile(const qgemm_frag_grouped_args& g, int* src, int* dst, int& live) {
  pdl_wait();
  const int tile = blockIdx.y;
  if (tile >= __ldg(g.tiles + g.n_expert)) return -1;
  return tile_rows(g, tile, src, dst, live);
}

// Grouped (launch_qgemm_grouped): grid (tiles of BN rows, row tiles' upper bound, matrix sets);
// a block's 64 token rows are one row tile of one expert, found on the device, and its
// weights that expert's matrix; blocks past tiles[n_expert] exit. Swiglu: grid (tiles of BN / 2
// rows, row tiles); warps 0-3 take gate's rows, warps 4-7 the same rows of up, each output's
// products in the unfused blocks' order. The 8-token tiles past the row tile's last row are
// skipped (Qwen3-30B's fused gate+up+SwiGLU 621 -> 602 us, Qwen3.5-35B pp2048 +1.8%, one H200).
// Wg: the products by wgmma where the pass has it (warps 0-3 and 4-7 are its two warpgroups).
template <class D, bool Swiglu, bool Wg>
__global__ void __launch_bounds__(frag_geom<typename D::type, 8, 8>::threads, frag_geom<typename D::type, 8, 8>::min_blocks)
    qgemm_frag_grouped_kernel(qgemm_frag_grouped_args g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using G = frag_geom<typename D::type, 8, 8>;
  using copy_t = stage_copy<G, 8, Swiglu, Wg>;
  static_assert(G::threads == 256 && 128 * 8 * 4 * sizeof(float) <= G::smem, "swiglu_combine's exchange");
  extern __shared__ __align__(128) uint8_t dyn[];
  __shared__ int src[64], dst[64];
  int live;
  const int e = block_row_tile(g, src, dst, live);
  if (e < 0) return;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * copy_t::rows_per_mat, nkb = g.n_in / KB;
  // This thread's matrix: with Swiglu, gate for warps 0-3 and up for 4-7, which copy and
  // multiply its rows (tile rows ra, ra + 8 are rows rm, rm + 8 of it).
  // (Constant indices: a runtime one copies the parameter arrays to a stack frame, which cost the
  // down projection's grouped GEMM 9%: 397 -> 360 us on an H200.)
  static_assert(k_qgemm_max_sets == 2, "the sets below");
  const bool second = Swiglu ? threadIdx.x >= copy_t::copiers : blockIdx.z != 0;
  const void* wv = second ? g.w[1] : g.w[0];
  const auto* w = static_cast<const uint8_t*>(wv) + e * g.expert_stride;
  const copy_t copy(w, g.n_out, g.row_bytes, n0, g.x16, g.n_in, 64, src);
  for (int s = 0; s < G::S; ++s) {
    if (s < nkb) copy.weights(s, dyn + s * G::stage), copy.tokens(s, dyn + s * G::stage);
    cp_async_commit();
  }
  const int ra = threadIdx.x / 32 * 16 + threadIdx.x % 32 / 4, rm = ra % copy_t::rows_per_mat;
  const auto base_a = reinterpret_cast<uintptr_t>(w + min(n0 + rm, g.n_out - 1) * g.row_bytes);
  const auto base_b = reinterpret_cast<uintptr_t>(w + min(n0 + rm + 8, g.n_out - 1) * g.row_bytes);
  float acc[8][4] = {};
  k_loop<D, 8, G, Swiglu, true, Wg>(copy, dyn, 0, static_cast<int>(nkb), ra, base_a, base_b, acc, (live + 7) / 8);
  pdl_trigger();
  if constexpr (Swiglu) {
    if (!swiglu_combine<8>(acc, dyn)) return;
  }
  float* y = !Swiglu && blockIdx.z != 0 ? g.y[1] : g.y[0];
  for_outputs<8>(ra, acc, [&](int r, int tok, float v) {
    const int d = dst[tok];
    if (d < 0 || n0 + r >= g.n_out) return;
    const int64_t at = static_cast<int64_t>(d) * g.n_out + n0 + r;
    if (Swiglu && g.y16)
      g.y16[at] = __half_as_ushort(__float2half_rn(v));
    else
      y[at] = v;
  });
#endif
}

// Short K (n_in <= 1024; launch_grouped_items). A one-tile block above copies its two stages,
// multiplies, stores and exits, and at one Q6_K block an SM (224 registers, 127 KiB) nothing
// covers the copies' latency nor the prologue's (the expert's search, the rows): 465 us for
// Qwen3.5-35B's 2048-token down projection on an H200, 12% occupancy. Here a block takes `items`
// consecutive 128-row column tiles of one row tile: x's whole K (nkb stages of 64 token rows,
// x_slot's layout) is copied once and stays, only the weights stream, through a ring of slots
// that runs on across items so the next tile's weights land while this one multiplies, and each
// item's outputs are stored from registers as it ends. Token tiles past the row tile's last row
// are skipped. Every output's products are the one-tile blocks' (same blocks, same mma order),
// so its bits are too.
template <class D>
struct items_geom {
  using G = frag_geom<typename D::type, 8, 8>;
  static constexpr int x_stage = 64 * k_x_row, max_nkb = 4;
  // Weight slots: Q4_K 2, so that two blocks (104 KiB at nkb 2, 128 registers) share an SM; Q6_K
  // is one block an SM by registers anyway: 3 (154 KiB at nkb 2, 218 KiB at 4).
  static constexpr int slots = std::is_same<D, q6k_frag>::value ? 3 : 2;
  static constexpr int min_blocks = 2 * (2 * x_stage + slots * G::w_bytes + 1024) <= k_sm_smem ? 2 : 1;
  static constexpr int smem(int nkb) { return nkb * x_stage + slots * G::w_bytes; }
};

// Weight bytes of 256-column block kb of rows n0 .. n0 + BN - 1 into st, as stage_copy::weights
// (the rows worked out at each call: they change with the item).
template <class G>
__device__ __forceinline__ void copy_weight_stage(const uint8_t* w, int64_t n_out, int64_t row_bytes, int64_t n0,
                                                  int kb, uint8_t* st) {
  constexpr int chunks = G::BN * G::C, J = (chunks + G::threads - 1) / G::threads;
  const uint8_t* w_end = w + n_out * row_bytes;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int i = threadIdx.x + G::threads * j, c = i % G::C;
    if (i >= chunks) break;
    const uint8_t* a = w + min(n0 + i / G::C, n_out - 1) * row_bytes + kb * G::span;
    const auto* chunk = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(a) & ~uintptr_t{15}) + 16 * c;
    if (chunk < a + G::span)
      cp_async16(st + i / G::C * G::P + 16 * c, chunk, static_cast<int>(min(int64_t{16}, w_end - chunk)));
  }
}

// x's columns of block kb for the 64 token rows src (-1: zeros) into xs, as stage_copy::tokens
// (256 threads: 8 rows each; Wg: where frag_wg::to_canonical reads them).
template <bool Wg>
__device__ __forceinline__ void copy_x_stage(const uint16_t* x, int64_t n_in, const int* src, int kb, uint8_t* xs) {
  const int ch = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int tok = threadIdx.x / 32 + 8 * i, r = src[tok];
    const int slot = frag_wg::on<Wg> ? frag_wg::land_slot(ch, tok) : x_slot(ch, tok);
    cp_async16(xs + tok * k_x_row + 16 * slot, x + max(r, 0) * n_in + kb * KB + 8 * ch, r >= 0 ? 16 : 0);
  }
}

// One step's products: weight slot st (rows n0 .., 256-column block kb) against x's block xs,
// for the nt 8-token tiles that hold rows (one of three unrolled forms; Wg: by wgmma, xs canonical).
template <class D, class G, bool Wg>
__device__ __forceinline__ void item_products(const uint8_t* st, const uint8_t* xs, const uint8_t* w, int64_t n_out,
                                              int64_t row_bytes, int64_t n0, int kb, int ra, int nt,
                                              float (&acc)[8][4]) {
  const auto kbytes = static_cast<uintptr_t>(kb * G::span);
  const auto base_a = reinterpret_cast<uintptr_t>(w + min(n0 + ra, n_out - 1) * row_bytes);
  const auto base_b = reinterpret_cast<uintptr_t>(w + min(n0 + ra + 8, n_out - 1) * row_bytes);
  const uint8_t* blk_a = st + ra * G::P + ((base_a + kbytes) & 15u);
  const uint8_t* blk_b = st + (ra + 8) * G::P + ((base_b + kbytes) & 15u);
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  if constexpr (frag_wg::on<Wg>) {
    if (nt > 4) frag_wg::stage_products<D, 64>(blk_a, blk_b, xs, t, acc);
    else if (nt > 2) frag_wg::stage_products<D, 32>(blk_a, blk_b, xs, t, acc);
    else frag_wg::stage_products<D, 16>(blk_a, blk_b, xs, t, acc);
    return;
  }
  if (nt > 4) block_products<D, 8>(blk_a, blk_b, xs, g, t, acc);
  else if (nt > 2) block_products<D, 8, 4>(blk_a, blk_b, xs, g, t, acc);
  else block_products<D, 8, 2>(blk_a, blk_b, xs, g, t, acc);
}

// Grid: (groups of `items` column tiles, row tiles' upper bound, matrix sets); 8 warps. Step q
// of a block is 256-column block q % nkb of its item q / nkb, through weight slot q % S; its
// copies are one cp.async group (item 0's also x's block q), so k_loop's ring order holds.
// (An overload of the one-tile kernel's name, so that scripts/check_occupancy.py's family, 256
// threads, covers it.) Wg: the products by wgmma where the pass has it, each x block rearranged
// for it once it has landed.
template <class D, bool Wg>
__global__ void __launch_bounds__(256, items_geom<D>::min_blocks)
    qgemm_frag_grouped_kernel(qgemm_frag_grouped_args g, int items) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using I = items_geom<D>;
  using G = typename I::G;
  constexpr int S = I::slots;
  static_assert(G::threads == 256, "copy_x_stage's rows");
  extern __shared__ __align__(128) uint8_t dyn[];
  __shared__ int src[64], dst[64];
  int live;
  const int e = block_row_tile(g, src, dst, live);
  if (e < 0) return;
  const int nkb = static_cast<int>(g.n_in / KB), nt = (live + 7) / 8;
  const int64_t item0 = static_cast<int64_t>(blockIdx.x) * items;
  const int steps = static_cast<int>(min(int64_t{items}, (g.n_out + G::BN - 1) / G::BN - item0)) * nkb;
  const void* wv = blockIdx.z != 0 ? g.w[1] : g.w[0];  // constant indices: see the kernel above
  const auto* w = static_cast<const uint8_t*>(wv) + e * g.expert_stride;
  uint8_t* const slots = dyn + nkb * I::x_stage;
  const auto copy = [&](int q) {
    const int it = q / nkb, kb = q - it * nkb;
    copy_weight_stage<G>(w, g.n_out, g.row_bytes, (item0 + it) * G::BN, kb, slots + q % S * G::w_bytes);
    if (q < nkb) copy_x_stage<Wg>(g.x16, g.n_in, src, q, dyn + q * I::x_stage);
  };
  for (int q = 0; q < S; ++q) {
    if (q < steps) copy(q);
    cp_async_commit();
  }
  const int ra = threadIdx.x / 32 * 16 + threadIdx.x % 32 / 4;
  float* y = blockIdx.z != 0 ? g.y[1] : g.y[0];
  float acc[8][4] = {};
  int kb = 0;
  int64_t n0 = item0 * G::BN;
  for (int q = 0; q < steps; ++q) {
    cp_async_wait<S - 1>();
    __syncthreads();  // step q has landed for every thread; step q - 1's slot is read by all
    if (q > 0 && q + S - 1 < steps) copy(q + S - 1);
    cp_async_commit();
    if (q + 1 == steps) pdl_trigger();
    if constexpr (frag_wg::on<Wg>) {
      if (q < nkb) frag_wg::to_canonical<D>(dyn + q * I::x_stage);
    }
    item_products<D, G, Wg>(slots + q % S * G::w_bytes, dyn + kb * I::x_stage, w, g.n_out, g.row_bytes, n0, kb, ra, nt,
                        acc);
    if (++kb < nkb) continue;
    for_outputs<8>(ra, acc, [&](int r, int tok, float v) {
      const int d = dst[tok];
      if (d >= 0 && n0 + r < g.n_out) y[static_cast<int64_t>(d) * g.n_out + n0 + r] = v;
    });
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
    kb = 0, n0 += G::BN;
  }
  cp_async_wait<0>();
#endif
}

// Whether 16-warp blocks serve this launch: from the decoder's tall_from, where the device has
// their shared memory and their grid fills three quarters of the SMs (one block each; fewer
// blocks would leave more of the GPU idle than the 128-row ones); TANDEM_QGEMM_FRAG_TALL=0 keeps
// the 128-row blocks, to compare them.
template <class D, int NT8>
bool tall_for(int64_t n_out, int pieces) {
  static const bool off = [] {
    const char* e = std::getenv("TANDEM_QGEMM_FRAG_TALL");
    return e && e[0] == '0' && e[1] == 0;
  }();
  if constexpr (NT8 < D::tall_from) {
    return false;
  } else {
    const int64_t blocks = (n_out + 255) / 256 * pieces;
    return !off && 4 * blocks >= 3 * int64_t{device_attribute<cudaDevAttrMultiProcessorCount>()} &&
           frag_geom<typename D::type, 16, NT8>::smem <= device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  }
}

template <class D, int W, int NT8>
cudaError_t launch_tiles(const qgemm_frag_args& a, cudaStream_t s) {
  using G = frag_geom<typename D::type, W, NT8>;
  constexpr auto kernel = qgemm_frag_kernel<D, W, NT8>;
  const cudaError_t e = allow_dynamic_smem_once<kernel>(G::smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((a.n_out + G::BN - 1) / G::BN), static_cast<unsigned>(a.pieces));
  return launch_pdl_shared(kernel, grid, dim3(G::threads), G::smem, s, a);
}

// f(std::integral_constant<int, NT8>{}) for n_tok's 8-token tiles.
template <class F>
auto by_tiles(int n_tok, F&& f) {
  switch ((n_tok + 7) / 8) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// f(decoder{}) for Q4_K and Q6_K, else none.
template <class R, class F>
R by_type(ggml_type t, R none, F&& f) {
  switch (t) {
    case ggml_type::q4_k: return f(q4k_frag{});
    case ggml_type::q6_k: return f(q6k_frag{});
    default: return none;
  }
}

template <class D>
cudaError_t launch_type(const qgemm_frag_args& a, cudaStream_t s) {
  return by_tiles(a.n_tok, [&](auto nt8) {
    constexpr int NT8 = decltype(nt8)::value;
    if constexpr (NT8 >= D::tall_from) {
      if (tall_for<D, NT8>(a.n_out, a.pieces)) return launch_tiles<D, 16, NT8>(a, s);
    }
    return launch_tiles<D, warps_for<NT8>(), NT8>(a, s);
  });
}

template <class D, bool Swiglu, bool Wg>
cudaError_t launch_grouped(const qgemm_frag_grouped_args& a, cudaStream_t s) {
  using G = frag_geom<typename D::type, 8, 8>;
  constexpr auto kernel = qgemm_frag_grouped_kernel<D, Swiglu, Wg>;
  constexpr int rows = Swiglu ? G::BN / 2 : G::BN;
  const cudaError_t e = allow_dynamic_smem_once<kernel>(G::smem);
  if (e != cudaSuccess) return e;
  const unsigned sets = Swiglu ? 1u : static_cast<unsigned>(a.n_sets);
  const dim3 grid(static_cast<unsigned>((a.n_out + rows - 1) / rows), a.row_tiles, sets);
  return launch_pdl_shared(kernel, grid, dim3(G::threads), G::smem, s, a);
}

// Column tiles a short-K block takes (the items overload of qgemm_frag_grouped_kernel), 0 for the one-tile blocks:
// TANDEM_QGEMM_GROUPED_ITEMS=N takes N (0: the one-tile blocks, to compare), read at every
// launch so that one run can time both; unset, the tiles split evenly into blocks of at most 4.
// Qwen3.5-35B's down projection (16 tiles) on an H200, us at 0 / 4 / 8 / 16 items: Q4_K 307 /
// 253 / 261 / 325, Q6_K 470 / 362 / 362 / 367 (16: too few blocks for the waves to even out).
int grouped_items(int64_t tiles) {
  const char* e = std::getenv("TANDEM_QGEMM_GROUPED_ITEMS");
  if (e && *e) return static_cast<int>(std::min<int64_t>(std::max(0, std::atoi(e)), tiles));
  const int64_t blocks = (tiles + 3) / 4;
  return static_cast<int>((tiles + blocks - 1) / blocks);
}

template <class D, bool Wg>
cudaError_t launch_grouped_items(const qgemm_frag_grouped_args& a, int items, cudaStream_t s) {
  using I = items_geom<D>;
  constexpr void (*kernel)(qgemm_frag_grouped_args, int) = qgemm_frag_grouped_kernel<D, Wg>;
  // The most any launch asks, where the device has it (launch_grouped_type checks this one's).
  const cudaError_t e = allow_dynamic_smem_once<kernel>(std::min(I::smem(I::max_nkb), kernel_smem_optin()));
  if (e != cudaSuccess) return e;
  const int64_t tiles = (a.n_out + I::G::BN - 1) / I::G::BN;
  const dim3 grid(static_cast<unsigned>((tiles + items - 1) / items), a.row_tiles, static_cast<unsigned>(a.n_sets));
  return launch_pdl_shared(kernel, grid, dim3(I::G::threads), I::smem(static_cast<int>(a.n_in / KB)), s, a, items);
}

// Short K without SwiGLU takes the item blocks where their shared memory fits the device and
// leaves as many blocks an SM as the one-tile kernel is built for: Q4_K at 768 inputs (x resident,
// 136 KiB) would be one block an SM against two, and took Qwen3-30B's down projection from 360
// to 418 us on an H200; Q6_K is one block an SM either way.
template <class D, bool Wg>
cudaError_t launch_grouped_form(const qgemm_frag_grouped_args& a, cudaStream_t s) {
  if (a.swiglu) return launch_grouped<D, true, Wg>(a, s);
  using I = items_geom<D>;
  const int64_t nkb = a.n_in / KB;
  const int per_sm = device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
  if (nkb >= 1 && nkb <= I::max_nkb && I::smem(static_cast<int>(nkb)) <= kernel_smem_optin() &&
      per_sm / (I::smem(static_cast<int>(nkb)) + 1024) >= I::G::min_blocks) {
    const int items = grouped_items((a.n_out + I::G::BN - 1) / I::G::BN);
    if (items > 0) return launch_grouped_items<D, Wg>(a, items, s);
  }
  return launch_grouped<D, false, Wg>(a, s);
}

// The grouped GEMMs' products by wgmma on sm_90 (where the build has its sm_90a code; without
// it these kernels run their mma.sync form): TANDEM_QGEMM_WGMMA=0 keeps mma.sync, to compare,
// read at every launch so that one run can time both.
template <class D>
cudaError_t launch_grouped_type(const qgemm_frag_grouped_args& a, cudaStream_t s) {
  const char* e = std::getenv("TANDEM_QGEMM_WGMMA");
  const bool off = e && e[0] == '0' && e[1] == 0;
  return !off && kernel_arch() >= 90 ? launch_grouped_form<D, true>(a, s) : launch_grouped_form<D, false>(a, s);
}

}  // namespace

bool qgemm_frag_serves(ggml_type t) {
  static const bool wmma = [] {
    const char* e = std::getenv("TANDEM_QGEMM_WMMA");
    return e && e[0] == '1' && e[1] == 0;
  }();
  return !wmma && kernel_arch() >= 80 && (t == ggml_type::q4_k || t == ggml_type::q6_k);
}

cudaError_t launch_qgemm_frag(ggml_type t, const qgemm_frag_args& a, cudaStream_t stream) {
  if (a.n_tok < 1 || a.n_tok > 64 || a.n_in % KB != 0 || a.k_blocks < 1) return cudaErrorInvalidValue;
  return by_type(t, cudaErrorInvalidValue, [&](auto d) { return launch_type<decltype(d)>(a, stream); });
}

int qgemm_frag_block_rows(ggml_type t, int64_t n_out, int n_tok, int pieces) {
  return by_type(t, 0, [&](auto d) {
    using D = decltype(d);
    return by_tiles(n_tok, [&](auto nt8) {
      constexpr int NT8 = decltype(nt8)::value;
      return tall_for<D, NT8>(n_out, pieces) ? 256 : 16 * warps_for<NT8>();
    });
  });
}

cudaError_t launch_qgemm_frag_grouped(ggml_type t, const qgemm_frag_grouped_args& a, cudaStream_t stream) {
  if (a.n_in % KB != 0 || a.n_sets < 1 || a.n_sets > k_qgemm_max_sets || (a.swiglu && a.n_sets != 2))
    return cudaErrorInvalidValue;
  if (a.row_tiles == 0) return cudaSuccess;
  return by_type(t, cudaErrorInvalidValue, [&](auto d) { return launch_grouped_type<decltype(d)>(a, stream); });
}

}  // namespace tandem
