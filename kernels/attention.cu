// Attention kernels over the paged KV cache. Decode: one thread block per (token, head, split),
// each warp walking keys with an online softmax, lanes holding head_dim/32 dims; partial results of
// the splits are merged by a second kernel. Prefill helpers feed cuBLAS GEMMs (see attention.h).
#include "kernels/attention.h"

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace {

constexpr int k_warps = 4;
constexpr int k_max_split = 32;

template <int N>
__device__ __forceinline__ void load_row(const uint16_t* p, float (&o)[N]) {
  if constexpr (N == 8) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  } else if constexpr (N == 4) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    const uint32_t w[2] = {q.x, q.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = fp16_to_float(p[i]);
  }
}

template <int N>
__device__ __forceinline__ void load_row(const float* p, float (&o)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] = p[i];
}

template <class T>
__global__ void store_kv_kernel(const float* __restrict__ k, const float* __restrict__ v, T* kc, T* vc,
                                const int32_t* __restrict__ slots, int row_elems) {
  const int t = blockIdx.y;
  const int64_t dst = static_cast<int64_t>(slots[t]) * row_elems;
  const int64_t src = static_cast<int64_t>(t) * row_elems;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row_elems; i += gridDim.x * blockDim.x) {
    if constexpr (sizeof(T) == 2) {
      kc[dst + i] = float_to_fp16(k[src + i]);
      vc[dst + i] = float_to_fp16(v[src + i]);
    } else {
      kc[dst + i] = k[src + i];
      vc[dst + i] = v[src + i];
    }
  }
}

// Grid (n_tok * n_head, n_split), k_warps warps. Split s covers keys [s * chunk, (s+1) * chunk).
template <int DPL, class T>
__global__ void __launch_bounds__(32 * k_warps)
    paged_attention_kernel(paged_attention_args a, int n_split, int chunk, float* part) {
  constexpr int D = 32 * DPL;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
  const int kvh = h / (a.n_head / a.n_head_kv);
  const int pos = a.tok_pos[t];
  if (pos < 0) return;
  const int n_kv = pos + 1;
  const int begin = blockIdx.y * chunk;
  const int end = min(begin + chunk, n_kv);
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.tok_table[t]) * a.max_blocks;
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);

  float q[DPL], acc[DPL];
  const float* qrow = a.q + (static_cast<int64_t>(t) * a.n_head + h) * D + lane * DPL;
#pragma unroll
  for (int i = 0; i < DPL; ++i) q[i] = qrow[i] * a.scale, acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = begin + warp; j < end; j += k_warps) {
    const int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
    const int64_t off = (slot * a.n_head_kv + kvh) * D + lane * DPL;
    float kv[DPL];
    load_row(kc + off, kv);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) s = fmaf(q[i], kv[i], s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 while m is -inf
    const float p = expf(s - m_new);
    load_row(vc + off, kv);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] = fmaf(p, kv[i], acc[i] * corr);
    m = m_new;
  }

  // Merge the warps: each rescales to the block's max.
  __shared__ float s_m[k_warps], s_l[k_warps];
  __shared__ float s_acc[k_warps][D];
  if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
  for (int i = 0; i < DPL; ++i) s_acc[warp][lane * DPL + i] = acc[i];
  __syncthreads();
  float mb = -INFINITY;
#pragma unroll
  for (int w = 0; w < k_warps; ++w) mb = fmaxf(mb, s_m[w]);
  float lb = 0.f, f[k_warps];
#pragma unroll
  for (int w = 0; w < k_warps; ++w) {
    f[w] = s_l[w] > 0.f ? expf(s_m[w] - mb) : 0.f;
    lb += s_l[w] * f[w];
  }
  const int64_t head = static_cast<int64_t>(t) * a.n_head + h;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) o += s_acc[w][d] * f[w];
    if (n_split == 1) {
      a.out[head * D + d] = o / lb;
    } else {
      part[(head * n_split + blockIdx.y) * (D + 2) + d] = o;
    }
  }
  if (n_split > 1 && threadIdx.x == 0) {
    float* pm = part + (head * n_split + blockIdx.y) * (D + 2) + D;
    pm[0] = mb, pm[1] = lb;
  }
}

// One block per (token, head): out = sum_s O_s e^{m_s - M} / sum_s l_s e^{m_s - M}.
__global__ void combine_splits_kernel(const float* __restrict__ part, const int32_t* __restrict__ tok_pos,
                                      int n_head, int head_dim, int n_split, int chunk, float* out) {
  const int64_t head = blockIdx.x;
  const int pos = tok_pos[head / n_head];
  if (pos < 0) return;
  const int used = min(n_split, (pos + chunk) / chunk);  // splits that saw keys
  const float* p = part + head * n_split * (head_dim + 2);
  float M = -INFINITY;
  for (int s = 0; s < used; ++s) M = fmaxf(M, p[s * (head_dim + 2) + head_dim]);
  float L = 0.f;
  for (int s = 0; s < used; ++s) {
    const float* ps = p + s * (head_dim + 2);
    if (ps[head_dim + 1] > 0.f) L += ps[head_dim + 1] * expf(ps[head_dim] - M);
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.f;
    for (int s = 0; s < used; ++s) {
      const float* ps = p + s * (head_dim + 2);
      if (ps[head_dim + 1] > 0.f) o += ps[d] * expf(ps[head_dim] - M);
    }
    out[head * head_dim + d] = o / L;
  }
}

template <int DPL, class T>
cudaError_t launch_paged(const paged_attention_args& a, int n_split, int chunk, float* work, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.n_tok * a.n_head), static_cast<unsigned>(n_split));
  paged_attention_kernel<DPL, T><<<grid, 32 * k_warps, 0, stream>>>(a, n_split, chunk, work);
  if (n_split > 1)
    combine_splits_kernel<<<static_cast<unsigned>(a.n_tok * a.n_head), 128, 0, stream>>>(
        work, a.tok_pos, a.n_head, a.head_dim, n_split, chunk, a.out);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_paged_t(const paged_attention_args& a, int n_split, int chunk, float* work, cudaStream_t stream) {
  switch (a.head_dim) {
    case 32: return launch_paged<1, T>(a, n_split, chunk, work, stream);
    case 64: return launch_paged<2, T>(a, n_split, chunk, work, stream);
    case 128: return launch_paged<4, T>(a, n_split, chunk, work, stream);
    case 256: return launch_paged<8, T>(a, n_split, chunk, work, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <class T>
__global__ void gather_kv_kernel(const T* __restrict__ cache, const int32_t* __restrict__ table, int block_size,
                                 int n_kv, int n_head_kv, int head_dim, uint16_t* __restrict__ out) {
  const int j = blockIdx.x, h = blockIdx.y;
  const int64_t slot = static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
  const T* src = cache + (slot * n_head_kv + h) * head_dim;
  uint16_t* dst = out + (static_cast<int64_t>(h) * n_kv + j) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    if constexpr (sizeof(T) == 2)
      dst[d] = src[d];
    else
      dst[d] = float_to_fp16(src[d]);
  }
}

__global__ void heads_to_f16_kernel(const float* __restrict__ x, int n_tok, int n_head, int head_dim,
                                    uint16_t* __restrict__ out) {
  const int t = blockIdx.x, h = blockIdx.y;
  const float* src = x + (static_cast<int64_t>(t) * n_head + h) * head_dim;
  uint16_t* dst = out + (static_cast<int64_t>(h) * n_tok + t) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) dst[d] = float_to_fp16(src[d]);
}

__global__ void causal_softmax_kernel(const float* __restrict__ s, int n_q, int n_kv, int pos0,
                                      uint16_t* __restrict__ p) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const int limit = min(n_kv, pos0 + static_cast<int>(r % n_q) + 1);  // keys 0..limit-1
  const float* row = s + r * n_kv;
  uint16_t* prow = p + r * n_kv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < limit; j += blockDim.x) mx = fmaxf(mx, row[j]);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < n_warps; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < limit; j += blockDim.x) sum += expf(row[j] - mx);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < n_warps; ++w) sum += red[w];
  const float inv = 1.f / sum;
  for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
    prow[j] = float_to_fp16(j < limit ? expf(row[j] - mx) * inv : 0.f);
}

}  // namespace

cudaError_t launch_store_kv(const float* k, const float* v, void* k_cache, void* v_cache, ggml_type cache_type,
                            const int32_t* slots, int n_tok, int row_elems, cudaStream_t stream) {
  if (n_tok < 0 || n_tok > 65535 || row_elems <= 0) return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((row_elems + 255) / 256), static_cast<unsigned>(n_tok));
  if (cache_type == ggml_type::f16)
    store_kv_kernel<uint16_t><<<grid, 256, 0, stream>>>(k, v, static_cast<uint16_t*>(k_cache),
                                                         static_cast<uint16_t*>(v_cache), slots, row_elems);
  else if (cache_type == ggml_type::f32)
    store_kv_kernel<float><<<grid, 256, 0, stream>>>(k, v, static_cast<float*>(k_cache),
                                                      static_cast<float*>(v_cache), slots, row_elems);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

size_t paged_attention_work_floats(int n_tok, int n_head, int head_dim, int n_split) {
  return static_cast<size_t>(n_tok) * n_head * n_split * (head_dim + 2);
}

cudaError_t launch_paged_attention(const paged_attention_args& a, float* work, size_t work_floats,
                                   cudaStream_t stream) {
  if (a.n_tok < 0 || a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.block_size <= 0 ||
      a.max_kv < 0)
    return cudaErrorInvalidValue;
  if (a.n_tok == 0 || a.max_kv == 0) return cudaSuccess;
  if (static_cast<int64_t>(a.n_tok) * a.n_head > 0x7fffffff) return cudaErrorInvalidValue;
  // Enough blocks to fill a large GPU: split long caches when there are few (token, head) pairs.
  int n_split = 1;
  const int64_t pairs = static_cast<int64_t>(a.n_tok) * a.n_head;
  if (pairs < 1024) {
    n_split = static_cast<int>((a.max_kv + 127) / 128);
    const int64_t want_blocks = 2048 / pairs + 1;
    if (n_split > want_blocks) n_split = static_cast<int>(want_blocks);
    if (n_split > k_max_split) n_split = k_max_split;
    while (n_split > 1 && (!work || paged_attention_work_floats(a.n_tok, a.n_head, a.head_dim, n_split) > work_floats))
      --n_split;
  }
  const int chunk = (a.max_kv + n_split - 1) / n_split;
  if (a.cache_type == ggml_type::f16) return launch_paged_t<uint16_t>(a, n_split, chunk, work, stream);
  if (a.cache_type == ggml_type::f32) return launch_paged_t<float>(a, n_split, chunk, work, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_gather_kv_f16(const void* cache, ggml_type cache_type, const int32_t* block_table,
                                 int block_size, int n_kv, int n_head_kv, int head_dim, uint16_t* out,
                                 cudaStream_t stream) {
  if (n_kv < 0 || n_head_kv <= 0 || n_head_kv > 65535 || head_dim <= 0 || block_size <= 0)
    return cudaErrorInvalidValue;
  if (n_kv == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n_kv), static_cast<unsigned>(n_head_kv));
  const int threads = head_dim < 128 ? 64 : 128;
  if (cache_type == ggml_type::f16)
    gather_kv_kernel<uint16_t><<<grid, threads, 0, stream>>>(static_cast<const uint16_t*>(cache), block_table,
                                                             block_size, n_kv, n_head_kv, head_dim, out);
  else if (cache_type == ggml_type::f32)
    gather_kv_kernel<float><<<grid, threads, 0, stream>>>(static_cast<const float*>(cache), block_table,
                                                          block_size, n_kv, n_head_kv, head_dim, out);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_heads_to_f16(const float* x, int n_tok, int n_head, int head_dim, uint16_t* out,
                                cudaStream_t stream) {
  if (n_tok < 0 || n_head <= 0 || n_head > 65535 || head_dim <= 0) return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  const int threads = head_dim < 128 ? 64 : 128;
  heads_to_f16_kernel<<<dim3(static_cast<unsigned>(n_tok), static_cast<unsigned>(n_head)), threads, 0, stream>>>(
      x, n_tok, n_head, head_dim, out);
  return cudaGetLastError();
}

cudaError_t launch_causal_softmax(const float* s, int n_rows, int n_q, int n_kv, int pos0, uint16_t* p,
                                  cudaStream_t stream) {
  if (n_rows < 0 || n_q <= 0 || n_kv <= 0 || pos0 < 0) return cudaErrorInvalidValue;
  if (n_rows == 0) return cudaSuccess;
  causal_softmax_kernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(s, n_q, n_kv, pos0, p);
  return cudaGetLastError();
}

}  // namespace tandem
