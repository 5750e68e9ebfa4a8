// Host launcher for the decode-batch GEMM: y = W·x for 9..64 tokens (many sequences' next tokens
// in one serving pass) straight from the weight's GGUF blocks, on fp16 tensor cores. Each weight
// is read from memory and dequantized once per launch, where the mat-vec re-reads the weights
// every 8 tokens and the prefill GEMM path writes and reads a whole fp16 copy of them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

constexpr int k_qgemm_max_tokens = 64;
constexpr int k_qgemm_k_step = 128;  // n_in must be a multiple of this

// Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K (F32 and F16 rows take the GEMM path).
bool gpu_can_qgemm(ggml_type t);

// The pieces the n_in dimension is cut into on this device for a matrix of n_out rows (1 when
// the output tiles alone fill the GPU): a function of the shape and the device only, never of
// n_tok, so a token's result does not depend on how many share its launch.
int qgemm_splits(int64_t n_in, int64_t n_out);

// Workspace of a launch: the partial sums of qgemm_splits(n_in, n_out) pieces for n_tok tokens
// (0 when the launch needs none). Bigger serves smaller.
size_t qgemm_work_bytes(int64_t n_in, int64_t n_out, int n_tok);

// W: n_out rows of n_in elements of type t (GGUF layout, row r at w + r * row_bytes), 16-byte
// aligned. x16: n_tok rows of n_in fp16 values (launch_to_f16 of the float rows), 16-byte
// aligned. y[t * n_out + o] = sum_i W[o][i] * x[t][i] (with add: y += that), fp32 accumulation
// over fp16 products; the pieces of n_in are summed in a fixed order (deterministic). Requires
// 1 <= n_tok <= k_qgemm_max_tokens, n_in % k_qgemm_k_step == 0 and a multiple of the type's block
// size; work of qgemm_work_bytes bytes (16-byte aligned; may be null when that is 0), not
// shared with a launch that may run at the same time. cudaErrorInvalidValue for an unsupported
// type or bad sizes, cudaErrorMisalignedAddress for misaligned pointers, else the launch status.
cudaError_t launch_qgemm(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const uint16_t* x16, int n_tok,
                         float* y, bool add, void* work, cudaStream_t stream);

}  // namespace tandem
