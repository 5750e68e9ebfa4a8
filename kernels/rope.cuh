// The RoPE rotation of one pair, shared by every kernel that rotates or tabulates (layer_ops.cu,
// attention.cu): the angle pos * theta^(-2i/rope_dim) in double precision, as the CPU's
// rope_rotations computes it, then its cosine and sine as floats.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem {

__device__ __forceinline__ float2 rope_rotation(int32_t pos, int i, int rope_dim, float theta) {
  const double freq = pow(static_cast<double>(theta), -2.0 * i / rope_dim);
  const double angle = static_cast<double>(pos) * freq;
  return make_float2(static_cast<float>(cos(angle)), static_cast<float>(sin(angle)));
}

}  // namespace tandem
