// Host launchers for mixture-of-experts FFNs (routing: kernels/moe_route.h): the decode mat-vec
// over each token's selected experts, prefill's grouping of (token, slot) rows by expert and the
// grouped GEMM over those groups, and the weighted combine. All pointers are device pointers;
// nothing reads device data on the host, so every launch is CUDA-graph capturable (fixed grids).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

constexpr int k_moe_max_experts = 512;  // routing and grouping
constexpr int k_moe_max_k = 16;         // experts per token
constexpr int k_moe_matvec_max_tokens = 8;

// ---- Decode mat-vec over the selected experts ---------------------------------------------
// F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K (as launch_matvec).
bool gpu_can_moe_matvec(ggml_type t);

// Workspace of launch_moe_matvec: the int8 copy of x (matvec_x_parts layout, kernels/matvec.h)
// for up to n_x_rows rows of n_in values: n_tok rows when x_stride == 0, else n_tok * k. Bigger
// serves smaller. 0 for bad sizes. F32/F16 need none.
size_t moe_matvec_work_bytes(int64_t n_in, int n_x_rows);

// One matrix set of a fused launch (gate and up: same type, shape, x and ids).
struct moe_matvec_output {
  const void* w = nullptr;  // expert e's matrix at w + e * expert_stride_bytes
  float* y = nullptr;       // [n_tok * k][n_out]
};
constexpr int k_moe_max_outputs = 2;

// For each (token t, slot j), pair p = t * k + j, expert e = ids[p] (read on the device):
// y[p * n_out + o] = sum_i W_e[o][i] * x_p[i]. W_e: n_out rows of n_in elements of type t in GGUF
// layout (as launch_matvec), starting at w + e * expert_stride_bytes; only the selected experts'
// rows are read. x_p = x + t * n_in when x_stride == 0 (gate/up: slots share the token's row),
// else x + p * x_stride (down: x_stride >= n_in, a multiple of 4). Requirements: n_in % 32 == 0
// and a multiple of the type's block size; 1 <= k <= k_moe_max_k; 0 <= n_tok <=
// k_moe_matvec_max_tokens; n_expert >= 1; w, x, work 16-byte aligned, expert_stride_bytes a
// multiple of 16; work of moe_matvec_work_bytes(n_in, x rows) bytes (unless F32/F16), not shared
// with a launch that may run at the same time. A pair whose id is outside [0, n_expert) reads no
// weights and gets NaN rows. Quantized types read x as the mat-vec's int8 copy (same rounding as
// launch_matvec; the test's tolerance derivation applies). Grid over (pair, row group): the
// k experts run in parallel, not in turn. Errors as launch_matvec.
cudaError_t launch_moe_matvec(ggml_type t, const void* w, size_t expert_stride_bytes, int n_expert, int64_t n_in,
                              int64_t n_out, const float* x, int64_t x_stride, int n_tok, int k, const int32_t* ids,
                              float* y, void* work, cudaStream_t stream);

// launch_moe_matvec for 1..k_moe_max_outputs matrix sets sharing type, shapes, x and ids in one
// launch (gate and up: x quantized once). With x_quantized, work already holds x's int8 copy for
// (n_in, x rows) in matvec_x_parts layout (from launch_moe_swiglu_q8, launch_swiglu_q8 or
// launch_rms_norm_q8) and x (floats) is not read by quantized types. ids_settled: the launch
// that wrote ids is two or more back on the stream (the one just before waits on it before it
// lets this one in: the down projection after gate and up), so the first weight rows are
// fetched before this launch waits on its predecessor.
cudaError_t launch_moe_matvec_multi(ggml_type t, const moe_matvec_output* outs, int n_outs,
                                    size_t expert_stride_bytes, int n_expert, int64_t n_in, int64_t n_out,
                                    const float* x, int64_t x_stride, bool x_quantized, int n_tok, int k,
                                    const int32_t* ids, void* work, cudaStream_t stream, bool ids_settled = false);

// out = silu(gate) * up over n_rows rows of n values (any n_rows, n % 32 == 0; out may alias
// gate) and the mat-vec's int8 copy of out into work (matvec_x_parts(work, n, n_rows)), for the
// down projection's launch_moe_matvec_multi(..., x_stride = n, x_quantized = true). For flat
// SwiGLU without the copy (prefill), launch_swiglu in kernels/layer_ops.h serves.
cudaError_t launch_moe_swiglu_q8(const float* gate, const float* up, float* out, int n_rows, int n, void* work,
                                 cudaStream_t stream);

// launch_moe_matvec_multi of gate and up (gate_up[0], gate_up[1]: one type and shape) from x's
// int8 copy, then launch_moe_swiglu_q8 of the products, with the same bits: h = silu(gate) · up
// into gate_up[0].y (n_tok * k rows of n_out) and h's int8 copy into h_work
// (matvec_x_parts(h_work, n_out, n_tok * k)), for the down projection's
// launch_moe_matvec_multi(..., x_stride = n_out, x_quantized = true). One launch where its units
// (32 rows of a pair: n_tok * k * n_out / 32) fit the blocks resident at once; past that, a second
// wave would double the critical path, so the two launches run (TANDEM_MOE_SWIGLU_ANY_WAVES=1:
// one launch anyway) and gate_up[1].y takes up's products: it is scratch of n_tok * k rows either
// way. x_work holds x's copy for (n_in, n_tok) in matvec_x_parts layout (launch_rms_norm_q8's or
// the like), one row a token; h_work must not overlap it. Requirements as
// launch_moe_matvec_multi's with x_stride 0, and a type gpu_can_moe_matvec_swiglu takes (those
// of int8 x).
bool gpu_can_moe_matvec_swiglu(ggml_type t, int64_t n_out);  // and n_out % 32 == 0
cudaError_t launch_moe_matvec_swiglu(ggml_type t, const moe_matvec_output* gate_up, size_t expert_stride_bytes,
                                     int n_expert, int64_t n_in, int64_t n_out, const void* x_work, int n_tok, int k,
                                     const int32_t* ids, void* h_work, cudaStream_t stream);

// The shared expert's term of launch_moe_combine: y (n_tok rows of n_embd) scaled by
// sigmoid(g_t), the gate logit g_t = gate_logits[t], or where gate_logits is null gate_row · x[t]
// (the float32 gate row and the tokens' normed inputs, n_embd floats each), computed in the launch.
struct moe_shared_term {
  const float* y = nullptr;
  const float* gate_logits = nullptr;
  const float* gate_row = nullptr;
  const float* x = nullptr;
};

// Decode's down projection with the combine in the launch: out[t * n_out + o] += sum_j
// weights[t * k + j] * (W_{ids[t * k + j]} h_{t k + j})[o], j in order, then with shared +=
// sigmoid(gate_logits[t]) * shared->y[t * n_out + o] (the product rounded, then added), as
// launch_moe_matvec_multi (x_stride n_in, x_quantized) then launch_moe_combine would add them,
// the mat-vec's row sums in another lane order (so not the same bits). One warp owns every pair
// of its rows, so each row is written once and no y rows or second launch are needed. x_work:
// h's int8 copy, n_tok * k rows of n_in (matvec_x_parts layout, launch_moe_swiglu_q8's).
// k == k_moe_down_combine_k; a type gpu_can_moe_down_combine takes; shared, if given, with
// gate_logits (no gate row); ids_settled as launch_moe_matvec_multi's. Other requirements as
// launch_moe_matvec_multi's. An id outside [0, n_expert) makes its token's rows NaN.
constexpr int k_moe_down_combine_k = 8;
bool gpu_can_moe_down_combine(ggml_type t, int64_t n_in, int64_t n_out, int k);
cudaError_t launch_moe_down_combine(ggml_type t, const void* w, size_t expert_stride_bytes, int n_expert,
                                    int64_t n_in, int64_t n_out, const void* x_work, int n_tok, int k,
                                    const int32_t* ids, const float* weights, float* out,
                                    const moe_shared_term* shared, cudaStream_t stream, bool ids_settled = false);

// out[t * n_embd + i] (+)= sum_j weights[t * k + j] * y[(t * k + j) * n_embd + i], j in order
// (deterministic), then with shared += sigmoid(g_t) * shared->y[t * n_embd + i] (the product
// rounded, then added). add: accumulate into out (the residual), else overwrite. Neither y may
// alias out. 1 <= k <= k_moe_max_k, n_tok >= 0, n_embd >= 0.
cudaError_t launch_moe_combine(const float* y, const float* weights, int n_tok, int k, int64_t n_embd, float* out,
                               bool add, cudaStream_t stream, const moe_shared_term* shared = nullptr);

// The next layer's input norm folded into a decode step's combine: after out is written, xn =
// RMSNorm(out) * w and xn's int8 copy for the mat-vec (matvec_x_parts(work, n_embd, n_tok)), with
// the bits launch_rms_norm_q8 (kernels/layer_ops.h) gives on the same out: one block per token
// holds its row the way that kernel's wide rows do. Fits (moe_combine_norm_fits) n_tok up to
// k_matvec_max_tokens and n_embd of 1024..8192, a multiple of 32; pointers 16-byte aligned.
struct moe_next_norm {
  const float* w = nullptr;
  float eps = 0.f;
  float* xn = nullptr;
  void* work = nullptr;
};
bool moe_combine_norm_fits(int n_tok, int64_t n_embd);
cudaError_t launch_moe_combine_norm(const float* y, const float* weights, int n_tok, int k, int64_t n_embd, float* out,
                                    bool add, cudaStream_t stream, const moe_shared_term* shared,
                                    const moe_next_norm& norm);

// ---- Prefill: grouping by expert and the grouped GEMM --------------------------------------
// Grouped rows per GEMM row tile; launch_moe_group's tile_offsets count tiles of this many.
constexpr int k_moe_gemm_rows = 64;

// Workspace of launch_moe_group (per-tile histograms); 0 for bad sizes.
size_t moe_group_work_bytes(int n_tok, int k, int n_expert);

// Counting sort of the n_tok * k (token, slot) pairs by expert, on the device. counts, offsets
// and tile_offsets have n_expert + 1 int32 entries; entry n_expert is a bucket for pairs whose id
// is outside [0, n_expert) (none when the ids come from launch_moe_route), placed after every
// expert so that perm is always a permutation of 0 .. n_tok * k - 1:
//   counts[e]       = pairs with ids == e;
//   offsets[e]      = sum of counts below e (offsets[n_expert] = pairs with a valid id);
//   perm[offsets[e] + i] = the pair index (t * k + j) of expert e's i-th pair, by ascending pair
//                     index (so by token);
//   tile_offsets[e] = sum over e' < e of ceil(counts[e'] / k_moe_gemm_rows) (tile_offsets[n_expert]
//                     = the row tiles the grouped GEMM works on).
// 1 <= n_expert <= k_moe_max_experts, 1 <= k <= k_moe_max_k, n_tok >= 0; work of
// moe_group_work_bytes bytes, 16-byte aligned. Deterministic (no order depends on atomics).
cudaError_t launch_moe_group(const int32_t* ids, int n_tok, int k, int n_expert, int32_t* counts, int32_t* offsets,
                             int32_t* perm, int32_t* tile_offsets, void* work, cudaStream_t stream);

// Where a grouped GEMM takes row r's x (r in grouped order, pair p = perm[r]) and puts its y.
enum class moe_rows : int {
  by_token = 0,  // row p / k of the matrix (x of gate/up: the token's hidden state)
  by_pair = 1,   // row p ((token, slot) order, as the decode path and launch_moe_combine use)
  grouped = 2,   // row r itself (gate/up outputs feeding the down projection in grouped order)
};

// F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K.
bool gpu_can_moe_gemm(ggml_type t);

// Workspace of launch_moe_gemm: x converted to fp16, n_x_rows rows of n_in (n_tok for by_token
// x, else n_tok * k). 0 for bad sizes.
size_t moe_gemm_work_bytes(int64_t n_in, int64_t n_x_rows);

// Row tiles' upper bound for a grid sized on the host: floor(n_pairs / k_moe_gemm_rows) + min(n_expert, n_pairs).
int64_t moe_gemm_max_row_tiles(int64_t n_pairs, int n_expert);

// fp16 operands of the grouped GEMMs that the caller holds or wants: x16, x already as fp16
// (n_x_rows rows of n_in, rounded as launch_to_f16 rounds; then x and work are not read and may
// be null), and h16 (launch_moe_gemm_swiglu only), where h goes as fp16 instead of as floats
// into gate_up[0].y (the down projection's x16). Both 16-byte aligned; h16 may alias
// gate_up[1].y; n_tok * k * n_out % 4 == 0 with h16.
struct moe_gemm_f16 {
  const uint16_t* x16 = nullptr;
  uint16_t* h16 = nullptr;
};

// For each expert e and each of its grouped rows r (offsets[e] <= r < offsets[e + 1]):
// Y_m[row_y(r)] = W_{m,e} · X[row_x(r)] for each matrix set m of outs (1 or 2: gate and up in
// one launch, sharing the fp16 x). Experts with no rows cost nothing but an early exit; no
// expert is computed densely. x: n_x_rows rows of n_in floats (row stride n_in), converted once
// to fp16 into work; weights dequantized from their GGUF blocks to fp16 tile by tile inside the
// kernel; WMMA 16x16x16 fp16 tensor-core products with fp32 accumulation (sm_70+). Rows of y
// not in any group are not written. counts/offsets/perm/tile_offsets from launch_moe_group for
// the same ids (n_tok, k, n_expert). n_in % 32 == 0 and a multiple of the type's block size;
// n_out >= 1; expert_stride_bytes a multiple of 16; x, work 16-byte aligned, w 16-byte aligned;
// work of moe_gemm_work_bytes(n_in, n_x_rows); y_rows by_pair or grouped (by_token is refused);
// n_tok * k row tiles' bound (moe_gemm_max_row_tiles) <= 65535. |x| and |w| beyond fp16's 65504
// become infinite. Errors as launch_matvec.
cudaError_t launch_moe_gemm(ggml_type t, const moe_matvec_output* outs, int n_outs, size_t expert_stride_bytes,
                            int n_expert, int64_t n_in, int64_t n_out, const float* x, moe_rows x_rows,
                            moe_rows y_rows, int n_tok, int k, const int32_t* offsets, const int32_t* perm,
                            const int32_t* tile_offsets, void* work, cudaStream_t stream,
                            const moe_gemm_f16& f16 = {});

// launch_moe_gemm of gate and up (gate_up[0], gate_up[1]: one type and shape, sharing x), then
// SwiGLU: gate_up[0].y[row_y(r)][o] = silu(G) · U with launch_swiglu's float arithmetic
// (g / (1 + expf(-g)) · u) on the products launch_moe_gemm would store, so the result is bitwise
// launch_moe_gemm(gate_up, 2, ...) followed by launch_swiglu(g, u, g, ...). Q4_K and Q6_K on
// sm_80+ (the fragment blocks, kernels/qgemm_frag.h; not under TANDEM_MOE_GEMM_WMMA=1 or
// TANDEM_QGEMM_WMMA=1) do it in one launch that writes h only, never gate_up[1].y; elsewhere
// gate and up are stored and launch_swiglu follows, with gate_up[1].y as the up products'
// scratch: it must hold n_tok * k rows of n_out and is left unspecified. Rows of h not in any
// group are unspecified. With f16.h16, h is written there as fp16 (the fused launch rounds it
// in its epilogue; elsewhere launch_to_f16's rounding follows the SwiGLU) and gate_up[0].y is
// then scratch where the launch is not fused. Requirements and errors as launch_moe_gemm's.
cudaError_t launch_moe_gemm_swiglu(ggml_type t, const moe_matvec_output* gate_up, size_t expert_stride_bytes,
                                   int n_expert, int64_t n_in, int64_t n_out, const float* x, moe_rows x_rows,
                                   moe_rows y_rows, int n_tok, int k, const int32_t* offsets, const int32_t* perm,
                                   const int32_t* tile_offsets, void* work, cudaStream_t stream,
                                   const moe_gemm_f16& f16 = {});

}  // namespace tandem
