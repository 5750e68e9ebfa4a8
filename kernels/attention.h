// Host launchers for attention over the paged KV cache: storing new K/V rows and a split-K kernel
// for decode (any batch, CUDA cores). Prefill runs take flash_attention.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

// Writes n_tok rows of row_elems floats from k and v into slot slots[t] of the layer's caches
// (layout [slot][row_elems], element type f16 or f32; or q8_0: row_elems % 32 == 0, each row
// row_elems / 32 blocks of 34 bytes, the same bytes as quantize_kv_row(q8_0) on the CPU).
cudaError_t launch_store_kv(const float* k, const float* v, void* k_cache, void* v_cache, ggml_type cache_type,
                            const int32_t* slots, int n_tok, int row_elems, cudaStream_t stream);

// The decode step between the Q/K/V mat-vecs and attention, in one launch: per token, each q and
// k head is RMS-normed over head_dim (when q_norm / k_norm are given; as launch_rms_norm) and
// rotated by pos[t] (as launch_rope), written back in place, and k and v are stored into the
// cache as launch_store_kv does. One warp per (token, head) row. head_dim 32..256, a multiple of
// 32; rope_dim even, <= head_dim. Starts as a programmatic dependent of the previous kernel on
// sm_90.
struct qk_rope_store_args {
  float* q = nullptr;  // [n_tok][n_head][head_dim]
  float* k = nullptr;  // [n_tok][n_head_kv][head_dim]
  const float* v = nullptr;
  const float* q_norm = nullptr;  // [head_dim] or null: no per-head norm
  const float* k_norm = nullptr;
  float eps = 0.f;
  const int32_t* pos = nullptr;  // per token
  int n_tok = 0, n_head = 0, n_head_kv = 0, head_dim = 0, rope_dim = 0;
  float theta = 10000.f;
  bool neox = false;
  void* k_cache = nullptr;  // this layer's caches, as launch_store_kv
  void* v_cache = nullptr;
  ggml_type cache_type = ggml_type::f16;
  const int32_t* slots = nullptr;
  // Optional: token t's rotations at rot + t * rope_dim, (cos, sin) per pair as the CPU's
  // rope_rotations gives them. Null: the kernel computes them in double precision, which costs
  // the decode step microseconds per layer.
  const float* rot = nullptr;
};
cudaError_t launch_qk_rope_store(const qk_rope_store_args& a, cudaStream_t stream);
// The head shapes launch_qk_rope_store takes (others: cudaErrorInvalidValue).
inline bool qk_rope_store_fits(int head_dim, int rope_dim) {
  return head_dim >= 32 && head_dim <= 256 && head_dim % 32 == 0 && rope_dim > 0 && rope_dim % 2 == 0 &&
         rope_dim <= head_dim;
}

struct paged_attention_args {
  const float* q = nullptr;         // [n_tok][n_head][head_dim]
  const void* k_cache = nullptr;    // this layer: [slot][n_head_kv][head_dim]
  const void* v_cache = nullptr;
  ggml_type cache_type = ggml_type::f16;  // f16, f32 or q8_0 (rows of head_dim/32 blocks)
  float* out = nullptr;             // [n_tok][n_head][head_dim]
  const int32_t* block_tables = nullptr;  // [n_tables][max_blocks] block ids
  const int32_t* tok_table = nullptr;     // per token: its sequence's table row
  const int32_t* tok_pos = nullptr;       // per token: position; it sees keys 0..pos; < 0: skip
  int n_tok = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int block_size = 0, max_blocks = 0;
  int max_kv = 0;                   // largest pos + 1 over the tokens (sizes the split)
  float scale = 1.f;
  // Optional: also write out's int8 copy for the decode mat-vec (matvec_x_parts of its workspace
  // for n_in = n_head * head_dim and n_tok), so the next mat-vec skips its quantization. Only
  // valid when no token is skipped (every tok_pos >= 0).
  int8_t* out_q = nullptr;
  float2* out_ds = nullptr;
  // Grouped blocks (GQA): one block takes up to four query heads of a KV head, so each K/V row
  // it loads serves them all. -1: the launcher's choice (deep caches, past 8192 keys); 0 or 1
  // forces it (tests).
  int grouped = -1;
  // Tensor-core blocks (sm_80+, f16 caches; kernels/attention_deep.cu): all query heads of a KV
  // head (up to 16) a block as the rows of one mma tile, K/V tiles streamed through shared memory.
  // -1: the launcher's choice (GQA models on deep caches, past 8192 keys, as grouped); 1 takes
  // them where supported, 0 never (tests).
  int deep = -1;
};

// Splits of one (token, head)'s keys the decode kernel takes at most (a deep cache is cut into
// runs of about 256 keys; short ones keep 64-key splits, at most 32), and the most split
// partials one launch keeps over all its (token, head) pairs (1024 pairs x 32 splits: what the
// workspace held before deep caches were split further).
constexpr int k_paged_max_splits = 128;
constexpr int k_paged_split_slots = 32768;

// Floats of workspace that lets the decode kernel split each head's keys n_split ways: split
// arrival counters, then the partials.
size_t paged_attention_work_floats(int n_tok, int n_head, int head_dim, int n_split);

// The workspace that lets every launch of up to n_tok tokens take all the splits it would pick:
// min(n_tok * n_head * k_paged_max_splits, k_paged_split_slots) partials. Grows with n_tok, so
// a workspace sized for one step serves every smaller one.
size_t paged_attention_step_work_floats(int n_tok, int n_head, int head_dim);

// The splits launch_paged_attention takes for these sizes and a workspace of work_floats (0: no
// workspace, so 1). Exposed for tests and for sizing.
int paged_attention_splits(int n_tok, int n_head, int head_dim, int max_kv, size_t work_floats);

// out = softmax(scale · q·Kᵀ) · V per token and head (GQA: head h reads kv head h / (n_head /
// n_head_kv)). head_dim must be 32, 64, 128 or 256. `work` (may be null) holds split partials;
// the launcher takes paged_attention_splits(...) splits, as many as fit in work_floats. One
// launch: the last split of a head to finish merges the partials. work must be zeroed
// (cudaMemset) before its first use; every launch leaves its counters zero again, so a workspace
// is not to be shared by launches that may run at the same time.
cudaError_t launch_paged_attention(const paged_attention_args& a, float* work, size_t work_floats,
                                   cudaStream_t stream);

}  // namespace tandem
