// The decode-batch GEMM (kernels/qgemm.h): a block computes BN weight rows for all of the launch's
// tokens over one piece of n_in, weight tiles dequantized from their GGUF blocks into shared
// memory as fp16 and multiplied on WMMA tensor cores (sm_70+); pieces are summed in order after.
#include "kernels/qgemm.h"

#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <atomic>

#include "kernels/pdl.cuh"
#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace {

using namespace nvcuda;

// Eight warps: 4 (16 weight rows each) x 2 (halves of the tokens); every token (up to 64, in
// 16-token fragments) in one block, so each weight is loaded once per launch. The x tile is re-read by every block from L2: x is
// small (64 x n_in fp16), the weights are what streams from memory.
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
};

struct qgemm_params {
  const uint8_t* w;
  int64_t n_in, n_out, row_bytes;
  const __half* x;
  int n_tok, k_steps;  // K steps of BK per piece
  float* out;          // y (one piece) or the pieces' partial sums [piece][token][n_out]
  bool add;            // one piece: y += W·x
};

// A thread's share of a K step's weight tile: rows warp + 8j (j < BN / 8), columns 4 lane ..,
// as fp16 pairs. One warp reads one row's BK columns, so its loads fall on neighbouring bytes.
// Loads and shared stores are separate phases: a generic-pointer load after a shared store
// might alias it, so interleaving them would serialize every load's latency.
constexpr int k_warps = k_threads / 32, k_w_regs = BN / k_warps;
template <class T>
__device__ __forceinline__ void load_w(const qgemm_params& p, int64_t n0, int64_t k0, uint2 (&r)[k_w_regs]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint8_t* first = p.w + (n0 + warp) * p.row_bytes;
  const int64_t step = k_warps * p.row_bytes, last = p.n_out - 1 - n0 - warp;  // past n_out: never stored
#pragma unroll
  for (int j = 0; j < k_w_regs; ++j) {
    const uint8_t* row = first + (k_warps * j <= last ? j * step : last * p.row_bytes);
    float v[4];
    row_src<T>::load4(row, k0 + 4 * lane, v);
    const __half2 h0 = __floats2half2_rn(v[0], v[1]), h1 = __floats2half2_rn(v[2], v[3]);
    r[j].x = *reinterpret_cast<const uint32_t*>(&h0);
    r[j].y = *reinterpret_cast<const uint32_t*>(&h1);
  }
}

__device__ __forceinline__ void store_w(const uint2 (&r)[k_w_regs], smem_t& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < k_w_regs; ++j)
    *reinterpret_cast<uint2*>(sm.ab.w + (warp + k_warps * j) * LDH + 4 * lane) = r[j];
}

// Tile loaders: raw = what a thread holds between a step's loads and its shared stores (the
// next step's tile is in flight in it during the products). The generic one dequantizes at load
// time through row_src; Q4_K and Q6_K (most of a Q4_K_M model) load whole 16- and 2-byte pieces
// and decode at store time, where byte loads and per-4-weight scale decoding bounded the
// generic form. Every loader yields the CPU's dequantized floats rounded to fp16.
template <class T>
struct generic_loader {
  struct raw {
    uint2 r[k_w_regs];
  };
  static __device__ __forceinline__ void load(const qgemm_params& p, int64_t n0, int64_t k0, raw& r) {
    load_w<T>(p, n0, k0, r.r);
  }
  static __device__ __forceinline__ void store(const raw& r, int64_t, smem_t& sm) { store_w(r.r, sm); }
};

// The weight row of tile row `row` (rows past n_out read the last row; never stored).
__device__ __forceinline__ const uint8_t* tile_row(const qgemm_params& p, int64_t n0, int row) {
  return p.w + min(n0 + row, p.n_out - 1) * p.row_bytes;
}

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Q4_K: a step's 128 columns are two 64-weight groups of one block. Thread i: tile row i / 4,
// group (i % 4) / 2, quant bytes 16 (i % 2) .. +15 of it: their low nibbles are weights l of the
// group's first sub-block, the high nibbles of its second (l = 16 (i % 2) .. +15).
struct q4k_loader {
  struct raw {
    uint4 q, hd;  // 16 quant bytes; the block's d, dmin and 12 scale bytes
  };
  static __device__ __forceinline__ void load(const qgemm_params& p, int64_t n0, int64_t k0, raw& r) {
    const int piece = threadIdx.x % 4, g = static_cast<int>(k0 % 256) / 64 + piece / 2;
    const uint8_t* blk = tile_row(p, n0, threadIdx.x / 4) + (k0 / 256) * sizeof(block_q4_k);
    r.q = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * g + 16 * (piece % 2)));
    r.hd = __ldg(reinterpret_cast<const uint4*>(blk));
  }
  static __device__ __forceinline__ void store(const raw& r, int64_t k0, smem_t& sm) {
    const int piece = threadIdx.x % 4, g = static_cast<int>(k0 % 256) / 64 + piece / 2;
    const uint8_t* sc = reinterpret_cast<const uint8_t*>(&r.hd) + 4;
    float d[2], m[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      int scv, mv;
      k_scale_min(2 * g + s, sc, scv, mv);
      d[s] = __fmul_rn(__half2float(__ushort_as_half(static_cast<uint16_t>(r.hd.x & 0xffffu))), float(scv));
      m[s] = __fmul_rn(__half2float(__ushort_as_half(static_cast<uint16_t>(r.hd.x >> 16))), float(mv));
    }
    const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
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
  struct raw {
    uint32_t ql[8], qh[8];  // 32 bytes each, as 16-bit loads paired
    uint32_t sd;            // the two scales (bytes 0, 1) and d (high 16 bits)
  };
  static __device__ __forceinline__ void load(const qgemm_params& p, int64_t n0, int64_t k0, raw& r) {
    const int quarter = threadIdx.x % 4, h = static_cast<int>(k0 % 256) / 128;
    const uint8_t* blk = tile_row(p, n0, threadIdx.x / 4) + (k0 / 256) * sizeof(block_q6_k);
    const auto* ql = reinterpret_cast<const uint16_t*>(blk + 64 * h + 32 * (quarter & 1));
    const auto* qh = reinterpret_cast<const uint16_t*>(blk + 128 + 32 * h);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      r.ql[i] = uint32_t(__ldg(ql + 2 * i)) | (uint32_t(__ldg(ql + 2 * i + 1)) << 16);
      r.qh[i] = uint32_t(__ldg(qh + 2 * i)) | (uint32_t(__ldg(qh + 2 * i + 1)) << 16);
    }
    const uint16_t scales = __ldg(reinterpret_cast<const uint16_t*>(blk + 192 + 8 * h + 2 * quarter));
    r.sd = uint32_t(scales) | (uint32_t(__ldg(reinterpret_cast<const uint16_t*>(blk + 208))) << 16);
  }
  static __device__ __forceinline__ void store(const raw& r, int64_t, smem_t& sm) {
    const int quarter = threadIdx.x % 4, lo_shift = 4 * (quarter >> 1), hi_shift = 2 * quarter;
    const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(r.sd >> 16)));
    const float ds[2] = {__fmul_rn(d, float(static_cast<int8_t>(r.sd & 0xffu))),
                         __fmul_rn(d, float(static_cast<int8_t>((r.sd >> 8) & 0xffu)))};
    uint32_t out[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {  // weights l = 2i, 2i + 1
      const int w = i / 2, sh = 16 * (i % 2);
      float v[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t ql = (r.ql[w] >> (sh + 8 * j)) & 0xffu, qh = (r.qh[w] >> (sh + 8 * j)) & 0xffu;
        const int q = int(((ql >> lo_shift) & 15u) | (((qh >> hi_shift) & 3u) << 4)) - 32;
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

template <int NT>
__device__ __forceinline__ void load_x(const qgemm_params& p, int64_t k0, uint4 (&r)[x_tile<NT>::regs]) {
#pragma unroll
  for (int j = 0; j < x_tile<NT>::regs; ++j) {
    const int i = threadIdx.x + k_threads * j, t = i / k_x_parts, part = i % k_x_parts;
    r[j] = t < p.n_tok ? __ldg(reinterpret_cast<const uint4*>(p.x + t * p.n_in + k0 + 8 * part))
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

// Grid: (row tiles, pieces of n_in). NT: 16-token fragments (ceil(n_tok / 16)).
template <class L, int NT>
__global__ void __launch_bounds__(k_threads) qgemm_kernel(qgemm_params p) {
  __shared__ __align__(32) smem_t sm;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_steps * BK;
  const int64_t k_end = min(p.n_in, k_begin + static_cast<int64_t>(p.k_steps) * BK);
  // This warp's 16 weight rows and token fragments f0 .. f0 + NH - 1 (those below NT).
  constexpr int NH = (NT + 1) / 2;
  const int warp = threadIdx.x / 32, rw = warp % k_row_warps, f0 = (warp / k_row_warps) * NH;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NH];
#pragma unroll
  for (int i = 0; i < NH; ++i) wmma::fill_fragment(acc[i], 0.f);
  pdl_wait();
  typename L::raw wr;
  uint4 xr[x_tile<NT>::regs];
  L::load(p, n0, k_begin, wr);
  load_x<NT>(p, k_begin, xr);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
    __syncthreads();  // the previous step's fragments are loaded
    L::store(wr, k0, sm);
    store_x<NT>(xr, sm);
    __syncthreads();
    if (k0 + BK < k_end) {  // the next step's tiles are in flight during the products
      L::load(p, n0, k0 + BK, wr);
      load_x<NT>(p, k0 + BK, xr);
    }
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
  pdl_trigger();
  __syncthreads();  // C overwrites the tiles
#pragma unroll
  for (int i = 0; i < NH; ++i)
    if (f0 + i < NT) wmma::store_matrix_sync(sm.c + (f0 + i) * 16 * LDC + rw * 16, acc[i], LDC, wmma::mem_col_major);
  __syncthreads();
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

template <class L>
cudaError_t launch_nt(const qgemm_params& p, dim3 grid, cudaStream_t s) {
  switch ((p.n_tok + 15) / 16) {
    case 1: return launch_pdl(qgemm_kernel<L, 1>, grid, dim3(k_threads), s, p);
    case 2: return launch_pdl(qgemm_kernel<L, 2>, grid, dim3(k_threads), s, p);
    case 3: return launch_pdl(qgemm_kernel<L, 3>, grid, dim3(k_threads), s, p);
    default: return launch_pdl(qgemm_kernel<L, 4>, grid, dim3(k_threads), s, p);
  }
}

cudaError_t launch_of(ggml_type t, const qgemm_params& p, dim3 grid, cudaStream_t s) {
  switch (t) {
    case ggml_type::f32: return launch_nt<generic_loader<f32_w>>(p, grid, s);
    case ggml_type::f16: return launch_nt<generic_loader<f16_w>>(p, grid, s);
    case ggml_type::q4_0: return launch_nt<generic_loader<block_q4_0>>(p, grid, s);
    case ggml_type::q4_1: return launch_nt<generic_loader<block_q4_1>>(p, grid, s);
    case ggml_type::q5_0: return launch_nt<generic_loader<block_q5_0>>(p, grid, s);
    case ggml_type::q5_1: return launch_nt<generic_loader<block_q5_1>>(p, grid, s);
    case ggml_type::q8_0: return launch_nt<generic_loader<block_q8_0>>(p, grid, s);
    case ggml_type::q4_k: return launch_nt<q4k_loader>(p, grid, s);
    case ggml_type::q5_k: return launch_nt<generic_loader<block_q5_k>>(p, grid, s);
    case ggml_type::q6_k: return launch_nt<q6k_loader>(p, grid, s);
    default: return cudaErrorInvalidValue;
  }
}

// Streaming multiprocessors of the current device, cached per device (0 when unknown).
int sm_count() {
  constexpr int k_max_devices = 64;
  static std::atomic<int> cache[k_max_devices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= k_max_devices) return 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0 && cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
    cache[dev].store(v, std::memory_order_relaxed);
  return v;
}

// K steps per piece: enough pieces that about four blocks per SM are in flight (a matrix of few
// rows streams its weights from more SMs), at most 16 pieces.
int steps_per_piece(int64_t n_in, int64_t n_out) {
  const int64_t steps = n_in / BK, tiles = (n_out + BN - 1) / BN;
  const int64_t want = (4 * int64_t(std::max(sm_count(), 1)) + tiles - 1) / tiles;
  const int64_t pieces = std::clamp<int64_t>(want, 1, std::min<int64_t>(steps, 16));
  return static_cast<int>((steps + pieces - 1) / pieces);
}

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

}  // namespace

bool gpu_can_qgemm(ggml_type t) { return row_src_reads(t); }

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

cudaError_t launch_qgemm(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const uint16_t* x16, int n_tok,
                         float* y, bool add, void* work, cudaStream_t stream) {
  if (!gpu_can_qgemm(t) || n_in <= 0 || n_in % BK != 0 || n_in % type_info(t).block_size != 0 || n_out < 1 ||
      n_tok < 1 || n_tok > BT || !w || !x16 || !y || (n_out + BN - 1) / BN > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (!aligned(w, 16) || !aligned(x16, 16) || !aligned(work, 16)) return cudaErrorMisalignedAddress;
  const int per = steps_per_piece(n_in, n_out), pieces = qgemm_splits(n_in, n_out);
  if (pieces > 1 && !work) return cudaErrorInvalidValue;
  qgemm_params p{};
  p.w = static_cast<const uint8_t*>(w);
  p.n_in = n_in, p.n_out = n_out;
  p.row_bytes = static_cast<int64_t>(*row_bytes(t, static_cast<uint64_t>(n_in)));
  p.x = reinterpret_cast<const __half*>(x16);
  p.n_tok = n_tok, p.k_steps = per;
  p.out = pieces > 1 ? static_cast<float*>(work) : y;
  p.add = add;
  const dim3 grid(static_cast<unsigned>((n_out + BN - 1) / BN), static_cast<unsigned>(pieces));
  cudaError_t e = launch_of(t, p, grid, stream);
  if (e != cudaSuccess || pieces == 1) return e;
  const int64_t n = int64_t{n_tok} * n_out;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024));
  return launch_pdl(qgemm_sum_kernel, dim3(blocks), dim3(256), stream, static_cast<const float*>(work), pieces, n,
                    y, add);
}

}  // namespace tandem
