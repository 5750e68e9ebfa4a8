// Host launchers for the decode mat-vec: y = W·x (or y += W·x) for a few tokens, straight from
// the weight's GGUF blocks (no dequantized copy). Quantized weights dot an int8 copy of x
// (q8_1-style blocks of 32 with a float scale) made once per launch; F32/F16 use float x.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

// Most tokens one launch handles; more tokens go through the GEMM path (dequantize + cuBLAS).
constexpr int k_matvec_max_tokens = 8;

// F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
bool gpu_can_matvec(ggml_type t);

// Device workspace a launch over n_in inputs and n_tok tokens needs (the int8 copy of x and its
// block scales), whatever the type; 0 for bad sizes. A workspace sized for larger n_in or
// n_tok serves smaller launches too.
size_t matvec_work_bytes(int64_t n_in, int n_tok);

// W: n_out rows of n_in elements of type t (GGUF layout, row r at w + r * row_bytes), 16-byte
// aligned. x: n_tok rows of n_in floats (16-byte aligned). n_in must be a multiple of 32 and of
// the type's block size. y[t * n_out + o] = sum_i W[o][i] * x[t * n_in + i]. work: 16-byte
// aligned, matvec_work_bytes(n_in, n_tok) bytes (may be null for F32/F16); not to be shared
// by launches that may run at the same time. Returns cudaErrorInvalidValue for an unsupported
// type, bad sizes or a missing workspace, cudaErrorMisalignedAddress for misaligned pointers,
// else the launch status.
cudaError_t launch_matvec(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x, int n_tok,
                          float* y, void* work, cudaStream_t stream);

// launch_matvec with x read as floats by every type (no int8 rounding of x; no workspace): for
// the output head, whose argmax the int8 copy's error on activations with outliers (1-4%) can
// flip. Weights stay in their GGUF type; same requirements and errors as launch_matvec.
cudaError_t launch_matvec_float_x(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x, int n_tok,
                                  float* y, cudaStream_t stream);

// launch_matvec with x read as two int8 copies: x's and that of what x's rounded away (each
// value's error falls from about d / 2 to d / 500, d a block's largest |x| / 127: about 1e-4 of
// sum |w x| on activations with outliers, where one copy errs by 1-2%), summed in the kernel.
// For the output head: faster than float x (on an H200, one token of a 151936 x 4096 head: Q6_K
// 237 us against 283, Q8_0 165 against 460; one int8 copy 177 and 160). n_tok <= k_matvec_max_tokens / 2; work: matvec_work_bytes(n_in, 2 * n_tok) bytes, 16-byte
// aligned. F32/F16 weights read x as floats (launch_matvec). Errors as launch_matvec.
cudaError_t launch_matvec_fine_x(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x, int n_tok,
                                 float* y, void* work, cudaStream_t stream);
// One matrix of a fused mat-vec launch.
struct matvec_output {
  const void* w = nullptr;
  int64_t n_out = 0;
  float* y = nullptr;
};
constexpr int k_matvec_max_outputs = 3;

// Several matrices of one type and n_in applied to the same x in one launch (Q/K/V, gate/up):
// outs[i].y = W_i·x, laid out as launch_matvec's y; x is quantized once for all of them. With
// add, y += W·x instead (the residual add folded into the mat-vec). Same requirements and
// errors as launch_matvec; at most k_matvec_max_outputs outputs.
cudaError_t launch_matvec_multi(ggml_type t, int64_t n_in, const matvec_output* outs, int n_outs, const float* x,
                                int n_tok, bool add, void* work, cudaStream_t stream);

// Where a workspace of matvec_work_bytes(n_in, n_tok) holds the int8 copy of x for a launch over
// (n_in, n_tok): q, n_tok rows of n_in int8 values; ds, per 32-value block (token-major) the
// float pair (d, d * sum q) with q = rint(v / d), d = amax / 127. Producer kernels
// (launch_rms_norm_q8, launch_swiglu_q8) write it so that the mat-vec skips its own pass.
struct matvec_qx {
  int8_t* q;
  float2* ds;
};
matvec_qx matvec_x_parts(void* work, int64_t n_in, int n_tok);

// One matrix of a mixed-type launch.
struct matvec_job {
  ggml_type type = ggml_type::f32;
  const void* w = nullptr;
  int64_t n_out = 0;
  float* y = nullptr;
};

// Up to k_matvec_max_outputs matrices with the same n_in, of any supported types, applied to the
// same x (Q/K/V where V has its own type): x is quantized once, or not at all with x_quantized
// (work already holds it for (n_in, n_tok), see matvec_x_parts), then jobs of one type run as
// one launch. x (floats) is read by F32/F16 jobs. Otherwise as launch_matvec_multi.
cudaError_t launch_matvec_jobs(int64_t n_in, const matvec_job* jobs, int n_jobs, const float* x, bool x_quantized,
                               int n_tok, bool add, void* work, cudaStream_t stream);

// Benchmarks only: overrides of the launch choices (0 / false: the built-in ones). Not
// thread-safe; production code never calls it.
struct matvec_tuning {
  int rows_per_block = 0;       // weight rows per thread-block pass: 1, 2 or 4
  bool block_per_group = false; // one thread block per group of rows instead of persistent ones
  bool no_pdl = false;           // no programmatic dependent launch after the x quantization
  bool wide_short_rows = false;  // Q6_K rows of <= 64 pieces keep 128-thread groups (as before)
  bool narrow_f32_rows = false;  // one token's F32 rows of >= 512 pieces keep 128-thread groups
};
void matvec_set_tuning(const matvec_tuning& t);

}  // namespace tandem
