// Small per-layer kernels of the forward pass: RMSNorm, RoPE, SwiGLU, adds, embedding lookup,
// conversions, row gather and argmax. All are memory-light next to the mat-vecs; they aim at
// being simple and exactly as the CPU reference computes them (same formulas, float32).
#include "kernels/layer_ops.h"

#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "kernels/matvec.h"
#include "kernels/matvec_x.cuh"
#include "kernels/pdl.cuh"
#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace {

constexpr int k_threads = 256;
constexpr int64_t k_max_grid = 65535;

unsigned grid_for(int64_t items) {
  const int64_t b = (items + k_threads - 1) / k_threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < k_max_grid ? b : k_max_grid));
}

__device__ __forceinline__ float block_sum(float v, float* shared) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.f;
  const int n_warps = blockDim.x / 32;
  for (int i = 0; i < n_warps; ++i) total += shared[i];
  __syncthreads();
  return total;
}

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* out, int n,
                                float eps) {
  __shared__ float shared[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* orow = out + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  ss = block_sum(ss, shared);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
}

// rms_norm_kernel that also quantizes its output for the mat-vec: a warp's 32 consecutive
// outputs are one int8 block (n % 32 == 0, blockDim a multiple of 32).
__global__ void rms_norm_q8_kernel(const float* x, const float* __restrict__ w, float* out, int n, float eps,
                                   int8_t* qx, float2* ds) {
  __shared__ float shared[32];
  pdl_wait();
  pdl_trigger();
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  ss = block_sum(ss, shared);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(n) + eps);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] * inv * w[i];
    out[row + i] = v;
    quantize_x_warp(v, qx + row + (i & ~31), ds + (row + i) / 32);
  }
}

__global__ void swiglu_q8_kernel(const float* gate, const float* up, float* out, int64_t n, int8_t* qx,
                                 float2* ds) {
  pdl_wait();
  pdl_trigger();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    const float v = g / (1.f + expf(-g)) * up[i];
    out[i] = v;
    quantize_x_warp(v, qx + (i & ~int64_t(31)), ds + i / 32);
  }
}

// One thread per (token, rotation pair); it rotates that pair in every head.
__global__ void rope_kernel(float* x, const int32_t* __restrict__ pos, int n_tok, int n_heads, int head_dim,
                            int rope_dim, float theta, bool neox) {
  const int half = rope_dim / 2;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(n_tok) * half) return;
  const int t = static_cast<int>(item / half), i = static_cast<int>(item % half);
  const double freq = pow(static_cast<double>(theta), -2.0 * i / rope_dim);
  const double angle = static_cast<double>(pos[t]) * freq;
  const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sin(angle));
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  float* row = x + static_cast<int64_t>(t) * n_heads * head_dim;
  for (int h = 0; h < n_heads; ++h) {
    float* v = row + static_cast<int64_t>(h) * head_dim;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

__global__ void swiglu_kernel(const float* gate, const float* __restrict__ up, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    out[i] = g / (1.f + expf(-g)) * up[i];
  }
}

__global__ void add_kernel(float* x, const float* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* __restrict__ b, int64_t total, int n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    x[i] += b[i % n];
}

__device__ __forceinline__ void dequant4(const float* row, int c, float (&y)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = row[4 * c + i];
}
__device__ __forceinline__ void dequant4(const uint16_t* row, int c, float (&y)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = fp16_to_float(row[4 * c + i]);
}
struct bf16_row {
  uint16_t v;
};
__device__ __forceinline__ void dequant4(const bf16_row* row, int c, float (&y)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = bf16_to_float(row[4 * c + i].v);
}

// Element type E: a block type (chunk c of 4 weights decoded from block 4c / qk), or a plain
// element (the row pointer itself indexed by chunk).
template <class E, int QK>
__global__ void get_rows_kernel(const uint8_t* __restrict__ table, uint64_t row_bytes,
                                const int32_t* __restrict__ ids, int64_t n, float* __restrict__ out) {
  const int64_t chunks = n / 4;
  const uint8_t* row = table + static_cast<uint64_t>(ids[blockIdx.y]) * row_bytes;
  float* o = out + static_cast<int64_t>(blockIdx.y) * n;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float y[4];
    if constexpr (QK == 1) {
      dequant4(reinterpret_cast<const E*>(row), static_cast<int>(c), y);
    } else {
      constexpr int per_block = QK / 4;
      dequant4(reinterpret_cast<const E*>(row)[c / per_block], static_cast<int>(c % per_block), y);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) o[4 * c + i] = y[i];
  }
}

template <class E, int QK>
cudaError_t launch_rows(const void* table, uint64_t row_bytes, const int32_t* ids, int n_ids, int64_t n,
                        float* out, cudaStream_t stream) {
  if (n % (QK == 1 ? 4 : QK) != 0) return cudaErrorInvalidValue;
  const int64_t chunks = n / 4;
  const dim3 grid(static_cast<unsigned>((chunks + k_threads - 1) / k_threads < 64 ? (chunks + k_threads - 1) / k_threads : 64),
                  static_cast<unsigned>(n_ids));
  get_rows_kernel<E, QK><<<grid, k_threads, 0, stream>>>(static_cast<const uint8_t*>(table), row_bytes, ids, n, out);
  return cudaGetLastError();
}

__global__ void to_f16_kernel(const float* __restrict__ x, uint16_t* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = float_to_fp16(x[i]);
}

__global__ void gather_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ idx, int64_t n,
                                   float* __restrict__ dst) {
  const float* s = src + static_cast<int64_t>(idx[blockIdx.y]) * n;
  float* d = dst + static_cast<int64_t>(blockIdx.y) * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    d[i] = s[i];
}

// One block per row; ties go to the lowest index, as a sequential scan would pick.
__global__ void argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* out) {
  __shared__ float best_v[32];
  __shared__ int64_t best_i[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  float v = -FLT_MAX;
  int64_t idx = n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (row[i] > v) v = row[i], idx = i;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) best_v[warp] = v, best_i[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
      if (best_v[w] > v || (best_v[w] == v && best_i[w] < idx)) v = best_v[w], idx = best_i[w];
    out[blockIdx.x] = static_cast<int32_t>(idx < n ? idx : 0);
  }
}

}  // namespace

cudaError_t launch_rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int n, float eps,
                            cudaStream_t stream) {
  if (n_rows < 0 || n <= 0 || n_rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (n_rows == 0) return cudaSuccess;
  const int threads = n >= 1024 ? 256 : (n >= 256 ? 128 : 32);
  rms_norm_kernel<<<static_cast<unsigned>(n_rows), threads, 0, stream>>>(x, w, out, n, eps);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_q8(const float* x, const float* w, float* out, int n_rows, int n, float eps,
                               void* matvec_work, cudaStream_t stream) {
  if (n_rows <= 0 || n_rows > k_matvec_max_tokens || n <= 0 || n % 32 != 0 || matvec_work == nullptr)
    return cudaErrorInvalidValue;
  const int threads = n >= 1024 ? 256 : (n >= 256 ? 128 : 32);
  const matvec_qx q = matvec_x_parts(matvec_work, n, n_rows);
  return launch_pdl(rms_norm_q8_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(threads), stream, x, w, out, n, eps,
                    q.q, q.ds);
}

cudaError_t launch_swiglu_q8(const float* gate, const float* up, float* out, int n_rows, int n, void* matvec_work,
                             cudaStream_t stream) {
  if (n_rows <= 0 || n_rows > k_matvec_max_tokens || n <= 0 || n % 32 != 0 || matvec_work == nullptr)
    return cudaErrorInvalidValue;
  const int64_t total = int64_t{n_rows} * n;
  const matvec_qx q = matvec_x_parts(matvec_work, n, n_rows);
  return launch_pdl(swiglu_q8_kernel, dim3(grid_for(total)), dim3(k_threads), stream, gate, up, out, total, q.q, q.ds);
}

cudaError_t launch_rope(float* x, const int32_t* pos, int n_tok, int n_heads, int head_dim, int rope_dim,
                        float theta, bool neox, cudaStream_t stream) {
  if (n_tok < 0 || rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > head_dim) return cudaErrorInvalidValue;
  const int64_t items = static_cast<int64_t>(n_tok) * (rope_dim / 2);
  if (items == 0) return cudaSuccess;
  rope_kernel<<<static_cast<unsigned>((items + k_threads - 1) / k_threads), k_threads, 0, stream>>>(
      x, pos, n_tok, n_heads, head_dim, rope_dim, theta, neox);
  return cudaGetLastError();
}

cudaError_t launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  swiglu_kernel<<<grid_for(n), k_threads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t launch_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  add_kernel<<<grid_for(n), k_threads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_add_bias(float* x, const float* b, int64_t n_rows, int n, cudaStream_t stream) {
  if (n_rows < 0 || n <= 0) return cudaErrorInvalidValue;
  if (n_rows == 0) return cudaSuccess;
  add_bias_kernel<<<grid_for(n_rows * n), k_threads, 0, stream>>>(x, b, n_rows * n, n);
  return cudaGetLastError();
}

cudaError_t launch_get_rows(ggml_type type, const void* table, uint64_t row_bytes, const int32_t* ids,
                            int n_ids, int64_t n, float* out, cudaStream_t stream) {
  if (n_ids < 0 || n_ids > 65535 || n <= 0) return cudaErrorInvalidValue;
  if (n_ids == 0) return cudaSuccess;
  switch (type) {
    case ggml_type::f32: return launch_rows<float, 1>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::f16: return launch_rows<uint16_t, 1>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::bf16: return launch_rows<bf16_row, 1>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q4_0: return launch_rows<block_q4_0, 32>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q4_1: return launch_rows<block_q4_1, 32>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q5_0: return launch_rows<block_q5_0, 32>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q5_1: return launch_rows<block_q5_1, 32>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q8_0: return launch_rows<block_q8_0, 32>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q4_k: return launch_rows<block_q4_k, 256>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q5_k: return launch_rows<block_q5_k, 256>(table, row_bytes, ids, n_ids, n, out, stream);
    case ggml_type::q6_k: return launch_rows<block_q6_k, 256>(table, row_bytes, ids, n_ids, n, out, stream);
    default: break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_to_f16(const float* x, uint16_t* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  to_f16_kernel<<<grid_for(n), k_threads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const float* src, const int32_t* idx, int n_idx, int64_t n, float* dst,
                               cudaStream_t stream) {
  if (n_idx < 0 || n_idx > 65535 || n <= 0) return cudaErrorInvalidValue;
  if (n_idx == 0) return cudaSuccess;
  const int64_t bx = (n + k_threads - 1) / k_threads;
  gather_rows_kernel<<<dim3(static_cast<unsigned>(bx < 64 ? bx : 64), static_cast<unsigned>(n_idx)), k_threads, 0,
                       stream>>>(src, idx, n, dst);
  return cudaGetLastError();
}

cudaError_t launch_argmax(const float* x, int n_rows, int64_t n, int32_t* out, cudaStream_t stream) {
  if (n_rows < 0 || n <= 0) return cudaErrorInvalidValue;
  if (n_rows == 0) return cudaSuccess;
  argmax_kernel<<<static_cast<unsigned>(n_rows), 1024, 0, stream>>>(x, n, out);
  return cudaGetLastError();
}

}  // namespace tandem
