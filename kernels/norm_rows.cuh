// Row RMSNorm pieces shared by the norm kernels (kernels/layer_ops.cu) and the decode combine that
// folds the next layer's input norm in (kernels/moe.cu), so both give the same bits: the block
// sum, the wide rows' register layout and tail, and the 8-lane int8 quantization of float4s.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::norm {

// Wide rows (n % 4 == 0, n <= 4 * k_threads * k_chunks): each thread keeps float4 chunks
// c = k * k_threads + threadIdx.x in registers, so a row is read once with all loads in flight.
constexpr int k_threads = 256;
constexpr int k_chunks = 8;

// Whether n_rows rows of n values take the wide form in a decode launch that folds a norm in (the
// MoE combine's, the router's): n of 1024..8192, a multiple of 32 (whole int8 blocks), and
// 1..max_rows rows.
inline bool wide_decode_rows(int n_rows, int64_t n, int max_rows) {
  return n_rows >= 1 && n_rows <= max_rows && n >= 1024 && n % 32 == 0 && n <= 4 * k_threads * k_chunks;
}

// The sum of v over the block, in warp order (every thread gets the same bits). shared: 32 floats.
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

// The mat-vec's int8 copy of a 32-value block that 8 lanes hold as float4s, quantized as
// quantize_x_warp (kernels/matvec_x.cuh) does: q4 the lane's 4 bytes, ds the block's scale pair.
__device__ __forceinline__ void quantize_x_quad(const float4& o, bool valid, int8_t* q4, float2* ds) {
  float amax = fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w)));
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float d = amax / 127.f;
  const float v[4] = {o.x, o.y, o.z, o.w};
  int q[4], sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) q[i] = amax > 0.f ? static_cast<int>(rintf(v[i] / d)) : 0, sum += q[i];
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (!valid) return;
  *reinterpret_cast<char4*>(q4) = make_char4(static_cast<signed char>(q[0]), static_cast<signed char>(q[1]),
                                             static_cast<signed char>(q[2]), static_cast<signed char>(q[3]));
  if (threadIdx.x % 8 == 0) *ds = make_float2(d, d * static_cast<float>(sum));
}

// A thread's share of a wide row's sum of squares (v: zeros past n / 4).
__device__ __forceinline__ float wide_squares(const float4 (&v)[k_chunks]) {
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < k_chunks; ++k) {
    ss = fmaf(v[k].x, v[k].x, ss);
    ss = fmaf(v[k].y, v[k].y, ss);
    ss = fmaf(v[k].z, v[k].z, ss);
    ss = fmaf(v[k].w, v[k].w, ss);
  }
  return ss;
}

__device__ __forceinline__ float rms_scale(float ss, int n, float eps) {
  return 1.f / sqrtf(ss / static_cast<float>(n) + eps);
}

// Chunk k of the normed row: v * inv * w.
__device__ __forceinline__ float4 normed(const float4& v, const float4& w, float inv) {
  return make_float4(v.x * inv * w.x, v.y * inv * w.y, v.z * inv * w.z, v.w * inv * w.w);
}

// out = v * inv * wv for the chunks of this thread, and with Q8 their int8 copy. Every thread
// of the block calls it (the quantization's shuffles).
template <bool Q8>
__device__ __forceinline__ void wide_out(const float4 (&v)[k_chunks], const float4 (&wv)[k_chunks], int n4, float inv,
                                         float* out, int8_t* qx, float2* ds) {
#pragma unroll
  for (int k = 0; k < k_chunks; ++k) {
    if (k * k_threads >= n4) break;  // the same for the whole block
    const int c = k * k_threads + threadIdx.x;
    const bool valid = c < n4;
    const float4 o = normed(v[k], wv[k], inv);
    if (valid) reinterpret_cast<float4*>(out)[c] = o;
    if (Q8) quantize_x_quad(o, valid, qx + 4 * c, ds + (4 * c) / 32);
  }
}

// A wide row held as v (zeros past n / 4) and its weights wv: out = v / sqrt(mean(v^2) + eps) * w,
// and with Q8 its int8 copy (qx, ds: the row's own). Every thread of the block calls it.
template <bool Q8>
__device__ __forceinline__ void wide_tail(const float4 (&v)[k_chunks], const float4 (&wv)[k_chunks], int n, float eps,
                                          float* out, int8_t* qx, float2* ds, float* shared) {
  wide_out<Q8>(v, wv, n / 4, rms_scale(block_sum(wide_squares(v), shared), n, eps), out, qx, ds);
}

}  // namespace tandem::norm
