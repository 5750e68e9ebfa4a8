// Device helpers both delta rule forms share (kernels/delta_net.cu, delta_net_chunked.cu): the
// gate nonlinearities as the CPU's delta_net_gates computes them, and a warp's sum.
#pragma once

#include <cuda_runtime.h>

namespace tandem::dn {

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
// PyTorch's softplus threshold (20), as the CPU reference: above it log1p(exp(x)) == x in float.
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace tandem::dn
