// The grouped fragment GEMMs' products on sm_90a (kernels/qgemm_frag.cu): each warpgroup's 64
// weight rows against a stage's token rows in one wgmma a k16 step. x is read by the tensor cores
// from shared memory once for the warpgroup's 4 warps, where mma.sync had every warp load it into
// registers (256 bytes of shared memory a product: the grouped GEMMs' bound on an H200). The A
// fragments are the mma.sync form's (kernels/frag_decoders.cuh); each landed stage of x is
// rearranged so that wgmma's B steps hold the same columns.
#pragma once

#include <cstdint>

#include "kernels/frag_decoders.cuh"
#include "kernels/wgmma.cuh"

namespace tandem::frag_wg {

// Whether a kernel built with the wgmma form asked for (Wg) has it in this compilation pass.
template <bool Wg>
constexpr bool on = Wg && TANDEM_WGMMA;

constexpr int k_row = 512;  // bytes of a token row of a landed stage: 256 fp16 columns

// Where 16-byte chunk c of token row r lands (cp.async): XOR by r's low bits, so that the 8 rows
// to_canonical reads one chunk of at a time lie in 8 bank groups.
__device__ __forceinline__ int land_slot(int c, int r) { return c ^ (r & 7); }

// wgmma's layout of 64 token rows (K-major, no swizzle): 8 x 8 "core matrices" of 8 rows of 16
// bytes; k16 step L's two cores along k (h 0, 1) are chunks 2L + h, each 8 groups of 8 rows.
__device__ __forceinline__ int canonical(int step, int h, int r) {
  return ((2 * step + h) * 8 + r / 8) * 128 + (r % 8) * 16;
}
constexpr uint32_t k_lbo = 8 * 128, k_sbo = 128;

// Rewrites a landed stage of x (64 token rows) in place into the canonical layout of the steps D's
// decoder feeds. Step L = 2 (gi G + i) + m gives lane t's A pairs (cols col(t, gi, i) + 4m + 0-1 at
// k 2t, 2t + 1 and + 2-3 at k 2t + 8, 2t + 9), so its B cores hold the same columns: a 4 x 4
// transpose of 32-bit pairs over the four lanes' 8-column runs. Called by all 256 threads; ends
// with the barrier after which wgmma may read the stage.
template <class D>
__device__ __forceinline__ void to_canonical(uint8_t* xs) {
  static_assert(D::groups * D::G == 8, "eight runs of each lane a stage");
  const int tid = static_cast<int>(threadIdx.x), uc = tid / 8 % 8, gi = uc / D::G, i = uc % D::G;
  uint4 v[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 8 * (tid / 64) + tid % 8 + 32 * h;
#pragma unroll
    for (int t = 0; t < 4; ++t)
      v[h][t] = *reinterpret_cast<const uint4*>(xs + r * k_row + 16 * land_slot(D::col(t, gi, i) / 8, r));
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 8 * (tid / 64) + tid % 8 + 32 * h;
    *reinterpret_cast<uint4*>(xs + canonical(2 * uc, 0, r)) = make_uint4(v[h][0].x, v[h][1].x, v[h][2].x, v[h][3].x);
    *reinterpret_cast<uint4*>(xs + canonical(2 * uc, 1, r)) = make_uint4(v[h][0].y, v[h][1].y, v[h][2].y, v[h][3].y);
    *reinterpret_cast<uint4*>(xs + canonical(2 * uc + 1, 0, r)) =
        make_uint4(v[h][0].z, v[h][1].z, v[h][2].z, v[h][3].z);
    *reinterpret_cast<uint4*>(xs + canonical(2 * uc + 1, 1, r)) =
        make_uint4(v[h][0].w, v[h][1].w, v[h][2].w, v[h][3].w);
  }
  wg::proxy_fence();
  __syncthreads();
}

template <int R, int C>
__device__ __forceinline__ void keep_all(uint32_t (&r)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < C; ++j) wg::keep(r[i][j]);
}

// One stage's products of this warp's rows (blocks at blk_a, blk_b) against the first N token rows
// of the canonical stage xs, into acc's first N / 8 tiles. Group gi's fragments are decoded while
// group gi - 1's wgmmas run (two register sets); all have finished when it returns, so the stage
// may be refilled after the next barrier.
template <class D, int N>
__device__ __forceinline__ void stage_products(const uint8_t* blk_a, const uint8_t* blk_b, const uint8_t* xs, int t,
                                               float (&acc)[8][4]) {
  auto& d = *reinterpret_cast<float(*)[N / 8][4]>(&acc);
  const typename D::scales sa = D::prepare(blk_a, t), sb = D::prepare(blk_b, t);
  uint32_t fa[2][D::G][4], fb[2][D::G][4];
#pragma unroll
  for (int gi = 0; gi < D::groups; ++gi) {
    const int p = gi & 1;
    D::decode(blk_a, t, gi, sa, fa[p]);
    D::decode(blk_b, t, gi, sb, fb[p]);
    wg::fence();
#pragma unroll
    for (int i = 0; i < D::G; ++i)
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint32_t a[4] = {fa[p][i][2 * m], fb[p][i][2 * m], fa[p][i][2 * m + 1], fb[p][i][2 * m + 1]};
        wg::mma<N>(d, a, wg::desc(xs + 2 * (2 * (gi * D::G + i) + m) * k_lbo, k_lbo, k_sbo));
      }
    wg::commit();
    if (gi > 0) {
      wg::wait<1>();
      keep_all(fa[p ^ 1]), keep_all(fb[p ^ 1]);
    }
  }
  wg::wait<0>();
  keep_all(fa[(D::groups - 1) & 1]), keep_all(fb[(D::groups - 1) & 1]);
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) wg::keep(acc[j][e]);
}

}  // namespace tandem::frag_wg
