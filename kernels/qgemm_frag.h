// The decode-batch GEMM's fragment blocks (sm_80+, Q4_K and Q6_K weights): the fast path of
// launch_qgemm and launch_qgemm_grouped, with their pieces and results (kernels/qgemm.h); only
// kernels/qgemm.cu calls it, and kernels/moe_gemm.cu for the grouped launch's fused SwiGLU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/qgemm.h"
#include "quant/ggml_type.h"

namespace tandem {

// One launch: rows of 64 outputs (grid x) by pieces of k_blocks 256-column blocks of n_in (grid y).
struct qgemm_frag_args {
  const void* w;
  int64_t n_in, n_out, row_bytes;
  const uint16_t* x16;
  int n_tok;          // 1..64
  int64_t k_blocks;   // 256-column blocks per piece
  int pieces;
  float* out;         // y (one piece) or the pieces' partial sums [piece][token][n_out]
  bool add;           // one piece: y += W·x
};

// Whether the fragment blocks serve type t on the current device (compute capability 8+ kernels,
// and TANDEM_QGEMM_WMMA unset: that keeps every launch on the WMMA blocks, to compare them).
bool qgemm_frag_serves(ggml_type t);

cudaError_t launch_qgemm_frag(ggml_type t, const qgemm_frag_args& a, cudaStream_t stream);

// Weight rows a block of that launch holds on the current device: 64 or 128, or 256 (16 warps:
// Q6_K at 49-64 tokens where their grid fills the GPU); 0 for other types.
int qgemm_frag_block_rows(ggml_type t, int64_t n_out, int n_tok, int pieces);

// launch_qgemm_grouped's launch (its arguments, checked there): row tiles of 64 token rows
// against tiles of 128 weight rows. With swiglu (n_sets 2: gate, up; launch_moe_gemm_swiglu in
// kernels/moe_gemm.cu) a block takes 64 rows of each set and writes only
// y[0] = silu(gate) * up, with launch_swiglu's float arithmetic on the same products, or with
// y16 that h rounded to fp16 (to nearest, as launch_to_f16) into y16 instead.
struct qgemm_frag_grouped_args {
  const void* w[k_qgemm_max_sets];
  float* y[k_qgemm_max_sets];
  int n_sets;
  int64_t expert_stride, n_in, n_out, row_bytes;
  const uint16_t* x16;
  qgemm_rows x_rows, y_rows;
  int k, n_expert;
  const int32_t *offsets, *perm, *tiles;
  unsigned row_tiles;
  bool swiglu;
  uint16_t* y16 = nullptr;  // swiglu only
};

cudaError_t launch_qgemm_frag_grouped(ggml_type t, const qgemm_frag_grouped_args& a, cudaStream_t stream);

}  // namespace tandem
