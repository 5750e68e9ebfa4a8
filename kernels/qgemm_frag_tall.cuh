// kernels/qgemm_frag.cu includes this inside its anonymous namespace, after the grouped kernel: the
// fused gate+up+SwiGLU grouped GEMM with warps of 32 rows (two 16-row tiles), so that each 16-byte
// load of x from shared memory feeds four m16n8k16 products instead of two.
//
// Why: a 16-row warp reads 256 bytes of x a product, and at 128 bytes a cycle an SM that is two
// cycles a product against one at the tensor cores' peak (ncu on an H200: shared memory 67% busy,
// stalls on its loads). Here a block is 256 rows (128 of gate, then the same 128 of up) and 64
// token rows, 8 warps, one block an SM (three 72 KiB stages for Q4_K); each output's products are
// the 16-row kernel's, in its order, so the bits are too. Opt-in (TANDEM_QGEMM_GROUPED_TALL=1): not
// yet run on a GPU.
#pragma once

// Geometry of the 32-row warps: 8 warps, 256 rows; the stage ring is as many (2..3) 256-row
// stages as fit 216 KiB.
template <class T>
struct tall_geom {
  static constexpr int warps = 8, threads = 256, BN = 256;
  static constexpr int span = sizeof(T), C = (15 + span + 15) / 16, P = 16 * C, w_bytes = BN * P;
  static constexpr int stage = w_bytes + 64 * k_x_row, budget = 221184;
  static constexpr int S = budget / stage >= 3 ? 3 : 2;
  static constexpr int smem = S * stage;
};

// block_products for the warp's two row tiles (rows g, g + 8 at blk[0], blk[1]; g + 16, g + 24 at
// blk[2], blk[3]): one x load, four products.
template <class D, int N>
__device__ __forceinline__ void block_products_tall(const uint8_t* const (&blk)[4], const uint8_t* xs, int g, int t,
                                                    float (&acc)[2][8][4]) {
  static_assert(N >= 1 && N <= 8, "token tiles");
  typename D::scales s[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) s[r] = D::prepare(blk[r], t);
#pragma unroll
  for (int gi = 0; gi < D::groups; ++gi) {
    uint32_t w[4][D::G][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) D::decode(blk[r], t, gi, s[r], w[r]);
#pragma unroll
    for (int i = 0; i < D::G; ++i) {
      const uint8_t* xp = xs + g * k_x_row + 16 * x_slot(D::col(t, gi, i) / 8, g);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const uint4 xv = *reinterpret_cast<const uint4*>(xp + j * 8 * k_x_row);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const uint32_t(&a)[D::G][4] = w[2 * m];
          const uint32_t(&b)[D::G][4] = w[2 * m + 1];
          mma16816(acc[m][j], a[i][0], b[i][0], a[i][1], b[i][1], xv.x, xv.y);
          mma16816(acc[m][j], a[i][2], b[i][2], a[i][3], b[i][3], xv.z, xv.w);
        }
      }
    }
  }
}

// The fused SwiGLU's epilogue for 32-row warps: as swiglu_combine, both row tiles.
__device__ __forceinline__ bool swiglu_combine_tall(float (&acc)[2][8][4], uint8_t* dyn) {
  constexpr int half = 128;
  float* up = reinterpret_cast<float*>(dyn);
  const int l = threadIdx.x % half;
  __syncthreads();
  if (threadIdx.x >= half) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) up[((8 * m + j) * 4 + e) * half + l] = acc[m][j][e];
  }
  __syncthreads();
  if (threadIdx.x >= half) return false;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float gv = acc[m][j][e];
        acc[m][j][e] = gv / (1.f + expf(-gv)) * up[((8 * m + j) * 4 + e) * half + l];
      }
  return true;
}

// Grid: (tiles of 128 rows of each matrix, row tiles' upper bound); warps 0-3 take gate's rows
// 32w .., warps 4-7 the same rows of up.
template <class D>
__global__ void __launch_bounds__(256, 1) qgemm_frag_grouped_tall_kernel(qgemm_frag_grouped_args g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using G = tall_geom<typename D::type>;
  using copy_t = stage_copy<G, 8, true>;
  constexpr int S = G::S;
  static_assert(2 * 8 * 4 * 128 * sizeof(float) <= G::smem, "swiglu_combine_tall's exchange");
  extern __shared__ __align__(128) uint8_t dyn[];
  __shared__ int src[64], dst[64];
  int live;
  const int e = block_row_tile(g, src, dst, live);
  if (e < 0) return;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * copy_t::rows_per_mat;
  const int nkb = static_cast<int>(g.n_in / KB), nt = (live + 7) / 8;
  const bool second = threadIdx.x >= copy_t::copiers;  // constant indices: see the kernel above
  const void* wv = second ? g.w[1] : g.w[0];
  const auto* w = static_cast<const uint8_t*>(wv) + e * g.expert_stride;
  const copy_t copy(w, g.n_out, g.row_bytes, n0, g.x16, g.n_in, 64, src);
  const auto stage = [&](int s) { return dyn + (s % S) * G::stage; };
  for (int s = 0; s < S; ++s) {
    if (s < nkb) copy.weights(s, stage(s)), copy.tokens(s, stage(s));
    cp_async_commit();
  }
  const int gl = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int ra = threadIdx.x / 32 * 32 + gl, rm = ra % copy_t::rows_per_mat;  // rows ra + 8q, q < 4
  uintptr_t base[4];
#pragma unroll
  for (int q = 0; q < 4; ++q)
    base[q] = reinterpret_cast<uintptr_t>(w + min(n0 + rm + 8 * q, g.n_out - 1) * g.row_bytes);
  float acc[2][8][4] = {};
  for (int s = 0; s < nkb; ++s) {
    cp_async_wait<S - 1>();
    __syncthreads();  // stage s has landed for every thread; stage s - 1 is read by all
    if (s > 0 && s + S - 1 < nkb) copy.weights(s + S - 1, stage(s + S - 1)), copy.tokens(s + S - 1, stage(s + S - 1));
    cp_async_commit();
    const uint8_t* st = stage(s);
    const auto kbytes = static_cast<uintptr_t>(s * G::span);
    const uint8_t* blk[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) blk[q] = st + (ra + 8 * q) * G::P + ((base[q] + kbytes) & 15u);
    if (nt > 4) block_products_tall<D, 8>(blk, st + G::w_bytes, gl, t, acc);
    else if (nt > 2) block_products_tall<D, 4>(blk, st + G::w_bytes, gl, t, acc);
    else block_products_tall<D, 2>(blk, st + G::w_bytes, gl, t, acc);
  }
  cp_async_wait<0>();
  pdl_trigger();
  if (!swiglu_combine_tall(acc, dyn)) return;
#pragma unroll
  for (int m = 0; m < 2; ++m)
    for_outputs<8>(ra + 16 * m, acc[m], [&](int r, int tok, float v) {
      const int d = dst[tok];
      if (d < 0 || n0 + r >= g.n_out) return;
      const int64_t at = static_cast<int64_t>(d) * g.n_out + n0 + r;
      if (g.y16)
        g.y16[at] = __half_as_ushort(__float2half_rn(v));
      else
        g.y[0][at] = v;
    });
#endif
}
