// A batch as the CUDA backend uploads it: one array of integers (tokens, positions, cache slots,
// block tables, for hybrid models the DeltaNet runs, and for decode steps the RoPE rotations) built
// on the host per step, plus the runs of tokens that take the flash-attention prefill kernel. Plain host code,
// testable without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/batch.h"
#include "backend/kv_cache.h"
#include "model/arch_spec.h"

namespace tandem {

constexpr int k_flash_attention_min = 16;  // a run this long takes the flash-attention prefill kernel
constexpr int k_block_bucket = 32;        // block-table width rounding (graph reuse)
constexpr int k_kv_bucket = 256;          // attention split sizing rounding (graph reuse)

// A stretch of consecutive batch tokens of one sequence at consecutive positions.
struct token_run {
  int t0 = 0, n = 0, table = 0, pos0 = 0;
};

struct batch_plan {
  int n_tok = 0, n_out = 0, n_tables = 0, max_blocks = 0, paged_max_kv = 0;
  bool any_paged = false;
  std::vector<token_run> runs;  // those that take the flash-attention prefill kernel
  // tokens | pos | paged pos (-1: in a run) | slots | tok table | out idx | tables
  // [| DeltaNet runs: hybrid models, 4 ints per run (first token, tokens, state slot = sequence
  //    id, first position), the dn_runs table of kernels/delta_net.h]
  // [| RoPE rotations: decode steps, rope_dim floats per token stored bitwise, float2-aligned]
  std::vector<int32_t> ints;
  size_t off_tokens = 0, off_pos = 0, off_paged = 0, off_slots = 0, off_table = 0, off_out = 0, off_tables = 0;
  size_t off_dn_runs = 0;  // valid when n_dn_runs > 0
  int n_dn_runs = 0;       // 0 unless hp.hybrid(): one run per sequence of the batch
  int dn_max_tokens = 0;   // the longest DeltaNet run (dn_runs::max_tokens: sizes the conv's grid)
  size_t off_rot = 0;  // 0: no rotations (steps of more than k_qgemm_max_tokens tokens)
};

// Fills p for batch b over cache (whose sequences already hold b's positions). Block tables are
// max_blocks wide (rounded up to k_block_bucket) and paged_max_kv is rounded up to k_kv_bucket,
// so that consecutive decode steps share a CUDA graph. Hybrid models (hp.hybrid()) need each
// sequence's tokens as consecutive rows (validate_batch checks it): one DeltaNet run each.
void plan_batch(const batch& b, const kv_cache& cache, const hparams& hp, batch_plan& p);

}  // namespace tandem
