// Host launchers for the decode mat-vec: y = W·x (or y += W·x) for a few tokens, straight from
// the weight's GGUF blocks (no dequantized copy), float activations and float32 accumulation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

// Most tokens one launch handles; more tokens go through the GEMM path (dequantize + cuBLAS).
constexpr int k_matvec_max_tokens = 8;

// F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
bool gpu_can_matvec(ggml_type t);

// W: n_out rows of n_in elements of type t (GGUF layout, row r at w + r * row_bytes), 16-byte
// aligned. x: n_tok rows of n_in floats (16-byte aligned, n_in a multiple of 4).
// y[t * n_out + o] = sum_i W[o][i] * x[t * n_in + i]. n_in must be a multiple of the type's
// block size (and of 32 for F32/F16). Returns cudaErrorInvalidValue for an unsupported type or
// bad sizes, cudaErrorMisalignedAddress for misaligned pointers, else the launch status.
cudaError_t launch_matvec(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x,
                          int n_tok, float* y, cudaStream_t stream);

// One matrix of a fused mat-vec launch.
struct matvec_output {
  const void* w = nullptr;
  int64_t n_out = 0;
  float* y = nullptr;
};
constexpr int k_matvec_max_outputs = 3;

// Several matrices of one type and n_in applied to the same x in one launch (Q/K/V, gate/up):
// outs[i].y = W_i·x, laid out as launch_matvec's y. With add, y += W·x instead (the residual
// add folded into the mat-vec; the same float addition as a separate add kernel). Same
// requirements and errors as launch_matvec; at most k_matvec_max_outputs outputs.
cudaError_t launch_matvec_multi(ggml_type t, int64_t n_in, const matvec_output* outs, int n_outs, const float* x,
                                int n_tok, bool add, cudaStream_t stream);

}  // namespace tandem
