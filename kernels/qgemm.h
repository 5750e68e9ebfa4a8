// Host launchers for the decode-batch GEMM: y = W·x for 9..64 tokens (many sequences' next tokens
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
// over fp16 products; the pieces of n_in are summed in a fixed order (deterministic). Each weight
// is the CPU's dequantized value rounded to fp16, except Q4_K and Q6_K on sm_80+ (the fragment
// blocks, kernels/qgemm_frag.h), which round each sub-block's scale and min to fp16 first and
// q * scale - min once (about one fp16 unit further from the CPU's). Requires
// 1 <= n_tok <= k_qgemm_max_tokens, n_in % k_qgemm_k_step == 0 and a multiple of the type's block
// size; work of qgemm_work_bytes bytes (16-byte aligned; may be null when that is 0), not
// shared with a launch that may run at the same time. cudaErrorInvalidValue for an unsupported
// type or bad sizes, cudaErrorMisalignedAddress for misaligned pointers, else the launch status.
cudaError_t launch_qgemm(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const uint16_t* x16, int n_tok,
                         float* y, bool add, void* work, cudaStream_t stream);

// Weight rows one block of launch_qgemm holds for this shape on the current device: 64 for the
// WMMA blocks; 64, 128 or 256 for the fragment blocks (kernels/qgemm_frag.h). What the tests
// check their shapes reach; 0 for unsupported arguments.
int qgemm_block_rows(ggml_type t, int64_t n_in, int64_t n_out, int n_tok);

// ---- The grouped form: prefill's expert GEMM (kernels/moe.h's launch_moe_gemm) ------------
// The same blocks, each on one row tile of up to k_qgemm_max_tokens rows of one expert's group,
// which it finds on the device: the groups' sizes never reach the host.
constexpr int k_qgemm_max_sets = 2;  // matrix sets of one launch (gate and up, sharing x)

// Where a grouped row r (pair p = perm[r]) takes its x and puts its y (as kernels/moe.h's moe_rows).
enum class qgemm_rows : int { by_token = 0, by_pair = 1, grouped = 2 };

// Types as gpu_can_qgemm; n_in a positive multiple of k_qgemm_k_step and of the type's block.
bool gpu_can_qgemm_grouped(ggml_type t, int64_t n_in);

// For each expert e < n_expert and each of its grouped rows r (offsets[e] <= r < offsets[e + 1]),
// for each set m < n_sets: y[m][row_y(r)] = W_{m,e} · x16[row_x(r)], where W_{m,e} (n_out rows of
// n_in, GGUF layout) starts at w[m] + e * expert_stride bytes; row_x: pair / k, pair or r for
// by_token, by_pair, grouped; row_y: pair or r (by_token is refused). Row tile i of the grid
// (i < row_tiles, a host-side bound) is tile i - tile_offsets[e] of the expert e with
// tile_offsets[e] <= i < tile_offsets[e + 1] (tiles of k_qgemm_max_tokens rows); tiles past
// tile_offsets[n_expert] exit at once. fp32 accumulation over fp16 products (weights rounded as
// launch_qgemm's), each output from one block (deterministic). w[m] and x16 16-byte aligned, expert_stride a multiple of 16.
cudaError_t launch_qgemm_grouped(ggml_type t, const void* const* w, float* const* y, int n_sets, size_t expert_stride,
                                 int n_expert, int64_t n_in, int64_t n_out, const uint16_t* x16, qgemm_rows x_rows,
                                 qgemm_rows y_rows, int k, const int32_t* offsets, const int32_t* perm,
                                 const int32_t* tile_offsets, unsigned row_tiles, cudaStream_t stream);

}  // namespace tandem
