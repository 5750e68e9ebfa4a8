// Host launchers that expand ggml-typed tensors on the GPU into float32 or fp16 arrays
// (reference checks, and the fp16 weights a cuBLAS prefill GEMM reads).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

// F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
bool gpu_can_dequantize(ggml_type t);

// Enqueues on `stream` the expansion of n elements at device pointer `src` (ggml blocks of type
// t, laid out as in a GGUF file) into `dst`. n must be a multiple of t's block size. For block
// types src must be 2-byte aligned and dst 16-byte aligned (float) or 8-byte aligned (fp16),
// which any row of a cudaMalloc'd buffer is. Returns cudaErrorInvalidValue for an unsupported
// type or a bad n, cudaErrorMisalignedAddress for misaligned pointers, else the launch status.
cudaError_t launch_dequantize(ggml_type t, const void* src, float* dst, int64_t n, cudaStream_t stream);

// As above, writing IEEE fp16 (raw bits; round to nearest even from the float value).
cudaError_t launch_dequantize_f16(ggml_type t, const void* src, uint16_t* dst, int64_t n,
                                  cudaStream_t stream);

}  // namespace tandem
