// The q8_0 KV cache's block fit on the GPU, bit for bit the CPU's quantize_kv_row (a value stored
// from the GPU must read back exactly as the CPU would have stored it). Included only by attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace kvq {

// quantize_kv_row's fit (quant/quantize.cpp, naive_symmetric_scale): the value v of largest
// magnitude (the first on ties: the CPU scans with a strict >) gives scale = v / -128, rounded
// to the stored fp16 d; levels are round(x / d) clamped to -128..127. Every float operation is
// spelled with a _rn intrinsic so that it rounds exactly as the CPU's does.

__device__ __forceinline__ int round_int_exact(float v) {  // quant_impl.h's round_int
  const uint32_t u = __float_as_uint(__fadd_rn(v, 12582912.0f));
  return static_cast<int>(u & 0x007fffffu) - 0x00400000;
}

// The stored fp16 scale for a block whose value of largest magnitude is vmax (amax = |vmax|).
__device__ __forceinline__ uint16_t q8_scale(float amax, float vmax) {
  return float_to_fp16(amax >= 1e-30f ? __fdiv_rn(vmax, -128.f) : 0.f);  // below: k_quant_search's `tiny`
}

__device__ __forceinline__ int q8_level(float x, float id) {
  return min(max(round_int_exact(__fmul_rn(x, id)), -128), 127);
}

__device__ __forceinline__ float q8_inverse(uint16_t d16) {
  const float d = fp16_to_float(d16);
  return d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
}

// Quantizes the warp's 32 values (lane i holds x) into the block at dst.
__device__ __forceinline__ void quantize_q8_0_warp(float x, uint8_t* dst) {
  const int lane = threadIdx.x % 32;
  float a = fabsf(x);
  int idx = lane;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float a2 = __shfl_xor_sync(0xffffffffu, a, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
    if (a2 > a || (a2 == a && i2 < idx)) a = a2, idx = i2;
  }
  const uint16_t d16 = q8_scale(a, __shfl_sync(0xffffffffu, x, idx));
  dst[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(q8_level(x, q8_inverse(d16))));
  if (lane == 0) *reinterpret_cast<uint16_t*>(dst) = d16;
}

// The same by one thread with the block in registers, for batches with thousands of blocks.
__device__ __forceinline__ void quantize_q8_0_thread(const float* __restrict__ src, uint8_t* dst) {
  float x[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 v = reinterpret_cast<const float4*>(src)[i];
    x[4 * i] = v.x, x[4 * i + 1] = v.y, x[4 * i + 2] = v.z, x[4 * i + 3] = v.w;
  }
  float amax = 0.f, vmax = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float a = fabsf(x[i]);
    if (a > amax) amax = a, vmax = x[i];
  }
  const uint16_t d16 = q8_scale(amax, vmax);
  const float id = q8_inverse(d16);
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);  // blocks are 2-byte aligned
  out[0] = d16;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    out[1 + i] = static_cast<uint16_t>((q8_level(x[2 * i], id) & 0xff) | ((q8_level(x[2 * i + 1], id) & 0xff) << 8));
}

}  // namespace kvq
}  // namespace tandem
