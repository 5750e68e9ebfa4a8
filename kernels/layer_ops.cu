// Small per-layer kernels of the forward pass: RMSNorm, RoPE, SwiGLU, adds, embedding lookup,
// conversions, row gather and argmax. All are memory-light next to the mat-vecs; they aim at
// being simple and exactly as the CPU reference computes them (same formulas, float32).
#include "kernels/layer_ops.h"

#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "kernels/matvec.h"
#include "kernels/matvec_x.cuh"
#include "kernels/norm_rows.cuh"
#include "kernels/pdl.cuh"
#include "kernels/quant_blocks.cuh"
#include "kernels/rope.cuh"

namespace tandem {
namespace {

constexpr int k_threads = 256;
constexpr int64_t k_max_grid = 65535;

unsigned grid_for(int64_t items) {
  const int64_t b = (items + k_threads - 1) / k_threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < k_max_grid ? b : k_max_grid));
}

using norm::block_sum;

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

// Wide rows (n % 4 == 0, n <= 4 * k_norm_threads * k_norm_chunks): each thread keeps its float4
// chunks c = k * k_norm_threads + tid in registers, so the row is read once with all loads in
// flight (a single block per token row is latency-bound otherwise). With Q8 it also writes the
// mat-vec's int8 copy of out: 8 lanes hold one 32-value block, quantized as quantize_x_warp does.
// The tail is norm::wide_tail, which the decode combine's folded norm shares (kernels/moe.cu).
constexpr int k_norm_threads = norm::k_threads;
constexpr int k_norm_chunks = norm::k_chunks;

template <bool Q8>
__global__ void __launch_bounds__(k_norm_threads)
    rms_norm_wide_kernel(const float* x, const float* __restrict__ w, float* out, int n, float eps, int8_t* qx,
                         float2* ds) {
  __shared__ float shared[32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * n;
  const auto* x4 = reinterpret_cast<const float4*>(x + row);
  const auto* w4 = reinterpret_cast<const float4*>(w);
  const int n4 = n / 4;
  float4 v[k_norm_chunks], wv[k_norm_chunks];
  // The weights are constant: fetched while the previous kernel finishes.
#pragma unroll
  for (int k = 0; k < k_norm_chunks; ++k) {
    const int c = k * k_norm_threads + threadIdx.x;
    wv[k] = c < n4 ? w4[c] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  pdl_wait();
  pdl_trigger();
#pragma unroll
  for (int k = 0; k < k_norm_chunks; ++k) {
    const int c = k * k_norm_threads + threadIdx.x;
    v[k] = c < n4 ? x4[c] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  norm::wide_tail<Q8>(v, wv, n, eps, out + row, Q8 ? qx + row : nullptr, Q8 ? ds + row / 32 : nullptr, shared);
}

bool wide_norm(const float* x, const float* w, const float* out, int n) {
  const auto a16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return n >= 1024 && n % 32 == 0 && n <= 4 * k_norm_threads * k_norm_chunks && a16(x) && a16(w) && a16(out);
}

// rms_norm_kernel that also quantizes its output for the mat-vec (rows wide_norm refuses): a
// warp's 32 consecutive outputs are one int8 block (n % 32 == 0, blockDim a multiple of 32).
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
  const float2 cs = rope_rotation(pos[t], i, rope_dim, theta);
  const float c = cs.x, s = cs.y;
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  float* row = x + static_cast<int64_t>(t) * n_heads * head_dim;
  for (int h = 0; h < n_heads; ++h) {
    float* v = row + static_cast<int64_t>(h) * head_dim;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

// One thread per (token, pair), rope_kernel's arithmetic.
__global__ void rope_table_kernel(const int32_t* __restrict__ pos, int n_tok, int rope_dim, float theta, float* rot) {
  const int half = rope_dim / 2;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(n_tok) * half) return;
  const int t = static_cast<int>(item / half), i = static_cast<int>(item % half);
  reinterpret_cast<float2*>(rot + static_cast<int64_t>(t) * rope_dim)[i] = rope_rotation(pos[t], i, rope_dim, theta);
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

// One block per row; ties go to the lowest index, as a sequential scan would pick. Each thread
// scans its elements in increasing index order (four 16-byte loads in flight per step when the
// row allows), keeping the first of its largest.
__device__ __forceinline__ void argmax_take(float e, int64_t i, float& v, int64_t& idx) {
  if (e > v) v = e, idx = i;
}
__device__ __forceinline__ void argmax_take4(const float4& e, int64_t i, float& v, int64_t& idx) {
  argmax_take(e.x, i, v, idx);
  argmax_take(e.y, i + 1, v, idx);
  argmax_take(e.z, i + 2, v, idx);
  argmax_take(e.w, i + 3, v, idx);
}

__global__ void argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* out) {
  __shared__ float best_v[32];
  __shared__ int64_t best_i[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  float v = -FLT_MAX;
  int64_t idx = n;
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const auto* r4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = n / 4, bd = blockDim.x;
    int64_t c = threadIdx.x;
    for (; c + 3 * bd < n4; c += 4 * bd) {
      float4 e[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) e[u] = r4[c + u * bd];
#pragma unroll
      for (int u = 0; u < 4; ++u) argmax_take4(e[u], 4 * (c + u * bd), v, idx);
    }
    for (; c < n4; c += bd) argmax_take4(r4[c], 4 * c, v, idx);
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) argmax_take(row[i], i, v, idx);
  }
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
  if (wide_norm(x, w, out, n))
    return launch_pdl(rms_norm_wide_kernel<false>, dim3(static_cast<unsigned>(n_rows)), dim3(k_norm_threads), stream,
                      x, w, out, n, eps, nullptr, nullptr);
  const int threads = n >= 1024 ? 256 : (n >= 256 ? 128 : 32);
  rms_norm_kernel<<<static_cast<unsigned>(n_rows), threads, 0, stream>>>(x, w, out, n, eps);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_q8(const float* x, const float* w, float* out, int n_rows, int n, float eps,
                               void* matvec_work, cudaStream_t stream) {
  if (n_rows <= 0 || n_rows > k_matvec_max_tokens || n <= 0 || n % 32 != 0 || matvec_work == nullptr)
    return cudaErrorInvalidValue;
  const matvec_qx q = matvec_x_parts(matvec_work, n, n_rows);
  if (wide_norm(x, w, out, n))
    return launch_pdl(rms_norm_wide_kernel<true>, dim3(static_cast<unsigned>(n_rows)), dim3(k_norm_threads), stream,
                      x, w, out, n, eps, q.q, q.ds);
  const int threads = n >= 1024 ? 256 : (n >= 256 ? 128 : 32);
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

cudaError_t launch_rope_table(const int32_t* pos, int n_tok, int rope_dim, float theta, float* rot,
                              cudaStream_t stream) {
  if (n_tok < 0 || rope_dim <= 0 || rope_dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t items = static_cast<int64_t>(n_tok) * (rope_dim / 2);
  if (items == 0) return cudaSuccess;
  rope_table_kernel<<<static_cast<unsigned>((items + k_threads - 1) / k_threads), k_threads, 0, stream>>>(
      pos, n_tok, rope_dim, theta, rot);
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
