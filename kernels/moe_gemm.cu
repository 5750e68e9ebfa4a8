// Prefill's grouped expert GEMM: for each expert's group of (token, slot) rows (launch_moe_group),
// Y = X · W_eᵀ on WMMA fp16 tensor cores (sm_70+), weight tiles dequantized from their GGUF blocks
// inside the kernel; the tile schedule is read on the device (no host sync). Quantized experts
// whose n_in is a multiple of 128 (every Qwen MoE) take the decode-batch GEMM's pipelined blocks
// (launch_qgemm_grouped); the kernel here serves the rest (f32 / f16 experts, other widths).
// launch_moe_gemm_swiglu: gate and up with SwiGLU in the fragment blocks' epilogue where they
// serve, else the two products and launch_swiglu.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "kernels/layer_ops.h"
#include "kernels/moe.h"
#include "kernels/moe_tiles.cuh"
#include "kernels/quant_blocks.cuh"
#include "kernels/pdl.cuh"
#include "kernels/qgemm.h"
#include "kernels/qgemm_frag.h"

namespace tandem {
namespace {

using namespace nvcuda;

// A block computes BM grouped rows × BN outputs, K in steps of BK: eight warps as 2 (rows) × 4
// (outputs), each 32 × 32 (2 × 2 fragments). BN = 128 against BM = 64 because weights are the
// cheap operand (0.56 bytes per Q4_K weight against 2 per fp16 x value): each x tile is re-read
// n_out / BN times.
constexpr int BM = k_moe_gemm_rows, BN = 128, BK = 32;
constexpr int k_threads = 256;
constexpr int LDH = BK + 8;  // halves per A / B shared row (pad against bank conflicts)
constexpr int LDC = BN + 4;  // floats per C staging row
static_assert(BM == 64 && BK == 32, "the load mappings below assume 64 x 32 A tiles");

struct smem_t {
  union {
    struct {
      __half a[BM * LDH];  // x rows, row-major
      __half b[BN * LDH];  // weight rows = Bᵀ: B (K x N) col-major with ld LDH
    } ab;
    float c[BM * LDC];
  };
  int src[BM];  // x row of each tile row (-1: past the group)
  int dst[BM];  // y row
};

struct gemm_params {
  const uint8_t* w[k_moe_max_outputs];
  float* y[k_moe_max_outputs];
  int64_t stride, n_in, n_out, row_bytes;
  const __half* x16;
  int x_rows, y_rows, k, n_expert;
  const int32_t* offsets;
  const int32_t* perm;
  const int32_t* tiles;
};

// Each tile row's x and y rows from perm (moe_rows mappings); -1 past the group's end.
__device__ void tile_rows(const gemm_params& p, int r0, int r_end, smem_t& sm) {
  for (int i = threadIdx.x; i < BM; i += k_threads) {
    const int r = r0 + i;
    if (r >= r_end) {
      sm.src[i] = sm.dst[i] = -1;
      continue;
    }
    const int pair = __ldg(p.perm + r);
    sm.src[i] = p.x_rows == 0 ? pair / p.k : p.x_rows == 1 ? pair : r;
    sm.dst[i] = p.y_rows == 1 ? pair : r;
  }
}

// The 4 × 8 halves of x this thread stages: row tid / 4, halves 8 (tid % 4) ..
__device__ __forceinline__ uint4 load_a(const gemm_params& p, const smem_t& sm, int64_t k0) {
  const int row = threadIdx.x / 4, part = threadIdx.x % 4;
  const int src = sm.src[row];
  if (src < 0) return make_uint4(0, 0, 0, 0);
  return __ldg(reinterpret_cast<const uint4*>(p.x16 + static_cast<int64_t>(src) * p.n_in + k0 + 8 * part));
}

// Weight chunks c = tid + 256 j (j < 4): row c / 8 of the tile, columns 4 (c % 8) ..; rows past
// n_out repeat the last row (their outputs are not stored).
template <class T>
__device__ __forceinline__ void stage_b(const uint8_t* wbase, const gemm_params& p, int64_t n0, int64_t k0,
                                        smem_t& sm) {
#pragma unroll
  for (int j = 0; j < BN * BK / 4 / k_threads; ++j) {
    const int c = threadIdx.x + k_threads * j, n = c / 8, q = c % 8;
    const uint8_t* row = wbase + min(n0 + n, p.n_out - 1) * p.row_bytes;
    float v[4];
    row_src<T>::load4(row, k0 + 4 * q, v);
    const __half2 h0 = __floats2half2_rn(v[0], v[1]), h1 = __floats2half2_rn(v[2], v[3]);
    uint2 u;
    u.x = *reinterpret_cast<const uint32_t*>(&h0);
    u.y = *reinterpret_cast<const uint32_t*>(&h1);
    *reinterpret_cast<uint2*>(sm.ab.b + n * LDH + 4 * q) = u;
  }
}

// Grid: (output tiles, row tiles' upper bound, matrix sets). Blocks past tiles[n_expert] exit.
template <class T>
__global__ void __launch_bounds__(k_threads) moe_gemm_kernel(gemm_params p) {
  __shared__ __align__(32) smem_t sm;
  pdl_wait();
  const int tile = blockIdx.y;
  if (tile >= __ldg(p.tiles + p.n_expert)) return;
  const int e = expert_of_tile(p.tiles, p.n_expert, tile);
  const int r0 = __ldg(p.offsets + e) + (tile - __ldg(p.tiles + e)) * BM, r_end = __ldg(p.offsets + e + 1);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int m = blockIdx.z;
  const uint8_t* wbase = (m == 0 ? p.w[0] : p.w[1]) + e * p.stride;
  float* y = m == 0 ? p.y[0] : p.y[1];
  tile_rows(p, r0, r_end, sm);
  __syncthreads();

  const int warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  uint4 a = load_a(p, sm, 0);
  for (int64_t k0 = 0; k0 < p.n_in; k0 += BK) {
    __syncthreads();  // the previous step's fragments are loaded
    *reinterpret_cast<uint4*>(sm.ab.a + (threadIdx.x / 4) * LDH + 8 * (threadIdx.x % 4)) = a;
    stage_b<T>(wbase, p, n0, k0, sm);
    __syncthreads();
    if (k0 + BK < p.n_in) a = load_a(p, sm, k0 + BK);  // in flight during the products
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], sm.ab.a + (wm * 32 + 16 * i) * LDH + kk, LDH);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], sm.ab.b + (wn * 32 + 16 * j) * LDH + kk, LDH);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
  }
  pdl_trigger();
  __syncthreads();  // C overwrites A and B
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(sm.c + (wm * 32 + 16 * i) * LDC + wn * 32 + 16 * j, acc[i][j], LDC, wmma::mem_row_major);
  __syncthreads();
  for (int i = threadIdx.x; i < BM * BN; i += k_threads) {
    const int r = i / BN, c = i % BN;
    const int dst = sm.dst[r];
    if (dst >= 0 && n0 + c < p.n_out) y[static_cast<int64_t>(dst) * p.n_out + n0 + c] = sm.c[r * LDC + c];
  }
}

// x (floats) to fp16, four at a time (n % 4 == 0, 16-byte aligned).
__global__ void __launch_bounds__(256) to_f16_kernel(const float* __restrict__ x, __half* __restrict__ out,
                                                     int64_t n4) {
  pdl_wait();
  pdl_trigger();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(x) + i);
    const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<const uint32_t*>(&a);
    u.y = *reinterpret_cast<const uint32_t*>(&b);
    reinterpret_cast<uint2*>(out)[i] = u;
  }
}

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

template <class T>
cudaError_t launch_t(const gemm_params& p, dim3 grid, cudaStream_t s) {
  return launch_pdl(moe_gemm_kernel<T>, grid, dim3(k_threads), s, p);
}

cudaError_t launch_of(ggml_type t, const gemm_params& p, dim3 grid, cudaStream_t s) {
  switch (t) {
    case ggml_type::f32: return launch_t<f32_w>(p, grid, s);
    case ggml_type::f16: return launch_t<f16_w>(p, grid, s);
    case ggml_type::q4_0: return launch_t<block_q4_0>(p, grid, s);
    case ggml_type::q4_1: return launch_t<block_q4_1>(p, grid, s);
    case ggml_type::q5_0: return launch_t<block_q5_0>(p, grid, s);
    case ggml_type::q5_1: return launch_t<block_q5_1>(p, grid, s);
    case ggml_type::q8_0: return launch_t<block_q8_0>(p, grid, s);
    case ggml_type::q4_k: return launch_t<block_q4_k>(p, grid, s);
    case ggml_type::q5_k: return launch_t<block_q5_k>(p, grid, s);
    case ggml_type::q6_k: return launch_t<block_q6_k>(p, grid, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool gpu_can_moe_gemm(ggml_type t) { return row_src_reads(t); }

size_t moe_gemm_work_bytes(int64_t n_in, int64_t n_x_rows) {
  if (n_in <= 0 || n_x_rows <= 0) return 0;
  return static_cast<size_t>(n_in * n_x_rows) * sizeof(__half);
}

int64_t moe_gemm_max_row_tiles(int64_t n_pairs, int n_expert) {
  if (n_pairs <= 0 || n_expert <= 0) return 0;
  return n_pairs / BM + std::min<int64_t>(n_expert, n_pairs);
}

namespace {

// One call's arguments (launch_moe_gemm's).
struct gemm_call {
  ggml_type t;
  const moe_matvec_output* outs;
  int n_outs;
  size_t stride;
  int n_expert;
  int64_t n_in, n_out;
  const float* x;
  moe_rows x_rows, y_rows;
  int n_tok, k;
  const int32_t *offsets, *perm, *tiles;
  void* work;
  moe_gemm_f16 f16;
  int64_t n_pairs() const { return int64_t{n_tok} * k; }
  int64_t n_x_rows() const { return x_rows == moe_rows::by_token ? n_tok : n_pairs(); }
  unsigned row_tiles() const { return static_cast<unsigned>(moe_gemm_max_row_tiles(n_pairs(), n_expert)); }
  const uint16_t* x16() const { return f16.x16 ? f16.x16 : static_cast<const uint16_t*>(work); }
};

cudaError_t check(const gemm_call& c) {
  if (!gpu_can_moe_gemm(c.t) || !c.outs || c.n_outs < 1 || c.n_outs > k_moe_max_outputs || c.n_expert < 1 ||
      c.n_expert > k_moe_max_experts || c.n_in <= 0 || c.n_in % 32 != 0 || c.n_in % type_info(c.t).block_size != 0 ||
      c.n_out < 1 || c.n_tok < 0 || c.k < 1 || c.k > k_moe_max_k || c.n_pairs() > 0x7fffffff ||
      c.y_rows == moe_rows::by_token || !c.offsets || !c.tiles ||
      (c.n_tok > 0 && (!c.perm || (!c.f16.x16 && (!c.work || !c.x)))) ||
      (c.f16.h16 && (c.n_pairs() * c.n_out) % 4 != 0))
    return cudaErrorInvalidValue;
  for (int i = 0; i < c.n_outs; ++i) {
    if (!c.outs[i].w || !c.outs[i].y) return cudaErrorInvalidValue;
    if (!aligned(c.outs[i].w, 16)) return cudaErrorMisalignedAddress;
  }
  if (c.stride % 16 != 0 || !aligned(c.x, 16) || !aligned(c.work, 16) || !aligned(c.f16.x16, 16) ||
      !aligned(c.f16.h16, 16))
    return cudaErrorMisalignedAddress;
  if (moe_gemm_max_row_tiles(c.n_pairs(), c.n_expert) > 65535 || (c.n_out + BN - 1) / BN > 0x7fffffff)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

// n floats (n % 4 == 0) to fp16.
cudaError_t to_f16(const float* x, void* out, int64_t n, cudaStream_t s) {
  const int64_t n4 = n / 4;
  return launch_pdl(to_f16_kernel, dim3(static_cast<unsigned>(std::min<int64_t>((n4 + 255) / 256, 65535))), dim3(256),
                    s, x, static_cast<__half*>(out), n4);
}

// x to fp16 into work, the operand of every path, unless the caller gave it (f16.x16).
cudaError_t convert_x(const gemm_call& c, cudaStream_t s) {
  return c.f16.x16 ? cudaSuccess : to_f16(c.x, c.work, c.n_in * c.n_x_rows(), s);
}

// TANDEM_MOE_GEMM_WMMA=1 keeps every type on the kernel here: the before/after of the
// pipelined blocks in one run (docs/PERFORMANCE.md).
bool wmma_only() {
  static const bool v = [] {
    const char* e = std::getenv("TANDEM_MOE_GEMM_WMMA");
    return e && e[0] == '1';
  }();
  return v;
}

static_assert(k_moe_gemm_rows == k_qgemm_max_tokens && k_moe_max_outputs <= k_qgemm_max_sets &&
                  int(moe_rows::by_token) == int(qgemm_rows::by_token) &&
                  int(moe_rows::by_pair) == int(qgemm_rows::by_pair) &&
                  int(moe_rows::grouped) == int(qgemm_rows::grouped),
              "launch_qgemm_grouped's tiles, sets and rows are launch_moe_gemm's");

// The products of every set, stored (x already converted).
cudaError_t launch_sets(const gemm_call& c, cudaStream_t s) {
  if (!wmma_only() && gpu_can_qgemm_grouped(c.t, c.n_in)) {
    const void* w[k_moe_max_outputs];
    float* y[k_moe_max_outputs];
    for (int i = 0; i < c.n_outs; ++i) w[i] = c.outs[i].w, y[i] = c.outs[i].y;
    return launch_qgemm_grouped(c.t, w, y, c.n_outs, c.stride, c.n_expert, c.n_in, c.n_out, c.x16(),
                                static_cast<qgemm_rows>(c.x_rows), static_cast<qgemm_rows>(c.y_rows), c.k, c.offsets,
                                c.perm, c.tiles, c.row_tiles(), s);
  }
  gemm_params p{};
  for (int i = 0; i < c.n_outs; ++i) p.w[i] = static_cast<const uint8_t*>(c.outs[i].w), p.y[i] = c.outs[i].y;
  p.stride = static_cast<int64_t>(c.stride), p.n_in = c.n_in, p.n_out = c.n_out;
  p.row_bytes = static_cast<int64_t>(*row_bytes(c.t, static_cast<uint64_t>(c.n_in)));
  p.x16 = reinterpret_cast<const __half*>(c.x16());
  p.x_rows = static_cast<int>(c.x_rows), p.y_rows = static_cast<int>(c.y_rows), p.k = c.k, p.n_expert = c.n_expert;
  p.offsets = c.offsets, p.perm = c.perm, p.tiles = c.tiles;
  const dim3 grid(static_cast<unsigned>((c.n_out + BN - 1) / BN), c.row_tiles(), static_cast<unsigned>(c.n_outs));
  return launch_of(c.t, p, grid, s);
}

// Where launch_qgemm_grouped would take the fragment blocks, which have the fused form.
bool fuses_swiglu(const gemm_call& c) {
  return !wmma_only() && gpu_can_qgemm_grouped(c.t, c.n_in) && qgemm_frag_serves(c.t);
}

cudaError_t launch_fused_swiglu(const gemm_call& c, cudaStream_t s) {
  qgemm_frag_grouped_args a{};
  for (int i = 0; i < 2; ++i) a.w[i] = c.outs[i].w, a.y[i] = c.outs[i].y;
  a.n_sets = 2, a.swiglu = true;
  a.expert_stride = static_cast<int64_t>(c.stride), a.n_in = c.n_in, a.n_out = c.n_out;
  a.row_bytes = static_cast<int64_t>(*row_bytes(c.t, static_cast<uint64_t>(c.n_in)));
  a.x16 = c.x16(), a.x_rows = static_cast<qgemm_rows>(c.x_rows), a.y_rows = static_cast<qgemm_rows>(c.y_rows);
  a.k = c.k, a.n_expert = c.n_expert;
  a.offsets = c.offsets, a.perm = c.perm, a.tiles = c.tiles, a.row_tiles = c.row_tiles();
  a.y16 = c.f16.h16;
  return launch_qgemm_frag_grouped(c.t, a, s);
}

}  // namespace

cudaError_t launch_moe_gemm(ggml_type t, const moe_matvec_output* outs, int n_outs, size_t expert_stride_bytes,
                            int n_expert, int64_t n_in, int64_t n_out, const float* x, moe_rows x_rows,
                            moe_rows y_rows, int n_tok, int k, const int32_t* offsets, const int32_t* perm,
                            const int32_t* tile_offsets, void* work, cudaStream_t stream, const moe_gemm_f16& f16) {
  const gemm_call c{t, outs, n_outs, expert_stride_bytes, n_expert, n_in, n_out, x,
                    x_rows, y_rows, n_tok, k, offsets, perm, tile_offsets, work, f16};
  cudaError_t e = check(c);
  if (e == cudaSuccess && f16.h16) e = cudaErrorInvalidValue;  // no SwiGLU here
  if (e != cudaSuccess || c.n_pairs() == 0) return e;
  e = convert_x(c, stream);
  return e != cudaSuccess ? e : launch_sets(c, stream);
}

cudaError_t launch_moe_gemm_swiglu(ggml_type t, const moe_matvec_output* gate_up, size_t expert_stride_bytes,
                                   int n_expert, int64_t n_in, int64_t n_out, const float* x, moe_rows x_rows,
                                   moe_rows y_rows, int n_tok, int k, const int32_t* offsets, const int32_t* perm,
                                   const int32_t* tile_offsets, void* work, cudaStream_t stream,
                                   const moe_gemm_f16& f16) {
  const gemm_call c{t, gate_up, 2, expert_stride_bytes, n_expert, n_in, n_out, x,
                    x_rows, y_rows, n_tok, k, offsets, perm, tile_offsets, work, f16};
  cudaError_t e = check(c);
  if (e == cudaSuccess && gate_up[0].y == gate_up[1].y) e = cudaErrorInvalidValue;
  if (e != cudaSuccess || c.n_pairs() == 0) return e;
  e = convert_x(c, stream);
  if (e != cudaSuccess) return e;
  if (fuses_swiglu(c)) return launch_fused_swiglu(c, stream);
  e = launch_sets(c, stream);
  float *g = gate_up[0].y, *u = gate_up[1].y;
  if (e == cudaSuccess) e = launch_swiglu(g, u, g, c.n_pairs() * n_out, stream);
  return e != cudaSuccess || !f16.h16 ? e : to_f16(g, f16.h16, c.n_pairs() * n_out, stream);
}

}  // namespace tandem
