// Host launchers for the small per-layer operations of the forward pass (RMSNorm, RoPE, SwiGLU,
// residual and bias adds, embedding lookup, fp16 conversion, row gather, argmax). All pointers are
// device pointers; every launcher enqueues on `stream` and returns the launch status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for n_rows rows of n floats (in place allowed).
cudaError_t launch_rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int n, float eps,
                            cudaStream_t stream);

// Rotates the first rope_dim dims of n_heads vectors of head_dim floats per token (row t of x is
// n_heads * head_dim floats) by pos[t]; neox pairs (i, i + rope_dim/2), else (2i, 2i+1).
// The angle pos * theta^(-2i/rope_dim) is computed in double, as the CPU reference does.
cudaError_t launch_rope(float* x, const int32_t* pos, int n_tok, int n_heads, int head_dim, int rope_dim,
                        float theta, bool neox, cudaStream_t stream);

// The rotations launch_rope applies, as a table: rot + t * rope_dim holds (cos, sin) of each pair
// of token t, in the layout of the CPU's rope_rotations and of qk_rope_store_args::rot. A prefill
// pass computes it once for all its layers' fused norm + RoPE + store launches.
cudaError_t launch_rope_table(const int32_t* pos, int n_tok, int rope_dim, float theta, float* rot,
                              cudaStream_t stream);

// launch_rms_norm that also writes the int8 copy of out that the decode mat-vec reads
// (matvec_x_parts(matvec_work, n, n_rows)), so a following launch_matvec_jobs with x_quantized
// skips its own pass. n % 32 == 0, 1 <= n_rows <= k_matvec_max_tokens. Starts as a programmatic
// dependent of the previous kernel on sm_90.
cudaError_t launch_rms_norm_q8(const float* x, const float* w, float* out, int n_rows, int n, float eps,
                               void* matvec_work, cudaStream_t stream);

// out = silu(gate) * up (out may alias gate).
cudaError_t launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);

// launch_swiglu over n_rows rows of n values that also writes the mat-vec's int8 copy of out
// (as launch_rms_norm_q8).
cudaError_t launch_swiglu_q8(const float* gate, const float* up, float* out, int n_rows, int n, void* matvec_work,
                             cudaStream_t stream);

// x += y
cudaError_t launch_add(float* x, const float* y, int64_t n, cudaStream_t stream);

// x[t * n + i] += b[i] for t < n_rows
cudaError_t launch_add_bias(float* x, const float* b, int64_t n_rows, int n, cudaStream_t stream);

// out[t] = row ids[t] of a {n, rows} table of type t (GGUF blocks; row r at table + r * row_bytes)
// as floats. n must be a multiple of the type's block size.
cudaError_t launch_get_rows(ggml_type type, const void* table, uint64_t row_bytes, const int32_t* ids,
                            int n_ids, int64_t n, float* out, cudaStream_t stream);

// Float to IEEE fp16 bits (round to nearest even).
cudaError_t launch_to_f16(const float* x, uint16_t* out, int64_t n, cudaStream_t stream);

// dst[i] = src[idx[i]] for rows of n floats.
cudaError_t launch_gather_rows(const float* src, const int32_t* idx, int n_idx, int64_t n, float* dst,
                               cudaStream_t stream);

// out[r] = the index of the largest of row r's n floats (the first one on ties).
cudaError_t launch_argmax(const float* x, int n_rows, int64_t n, int32_t* out, cudaStream_t stream);

}  // namespace tandem
