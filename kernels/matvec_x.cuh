// The int8 copy of x that the quantized decode mat-vecs read (blocks of 32 values: q = rint(v / d)
// with d = amax / 127, and per block (d, d * sum q)), made by one warp per block. Shared by the
// mat-vec's own quantization pass and the producers that write it directly (RMSNorm, SwiGLU).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem {

// Lane i holds value i of a 32-value block; writes q32[lane] and, from lane 0, *ds. Returns the
// lane's value as the copy holds it (d q).
__device__ __forceinline__ float quantize_x_warp(float v, int8_t* q32, float2* ds) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.f;
  const int q = amax > 0.f ? static_cast<int>(rintf(v / d)) : 0;
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  q32[threadIdx.x % 32] = static_cast<int8_t>(q);
  if (threadIdx.x % 32 == 0) *ds = make_float2(d, d * static_cast<float>(sum));
  return d * static_cast<float>(q);
}

}  // namespace tandem
