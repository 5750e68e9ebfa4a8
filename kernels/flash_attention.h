// Host launcher for causal flash attention over the paged KV cache (prefill): runs of one
// sequence's consecutive tokens attend to their cache keys without an n² score buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

// Tokens t0..t0+n-1 of the batch, one sequence at positions pos0..pos0+n-1 whose block table is
// row `table`; token t0+i sees keys 0..pos0+i (already stored in the cache).
struct flash_run {
  int t0 = 0, n = 0, table = 0, pos0 = 0;
};

// Which blocks compute a launch. best: the mma.sync blocks on sm_80+ (32 rows a warp up to head
// size 128, 16 at 256), the WMMA blocks below sm_80; TANDEM_FLASH_KERNEL=wmma|mma64|mma128
// overrides best, to measure. The others ask for one kind (tests): mma64 and mma128 are the
// mma.sync blocks of 64 and 128 rows (16 and 32 a warp; mma128 up to head size 128), sm_80+ only.
enum class flash_kernel { best, wmma, mma64, mma128 };

struct flash_attention_args {
  const float* q = nullptr;         // [n_tok][n_head][head_dim]
  const void* k_cache = nullptr;    // this layer: [slot][n_head_kv][head_dim]
  const void* v_cache = nullptr;
  ggml_type cache_type = ggml_type::f16;  // f16, f32 or q8_0 (rows of head_dim/32 blocks)
  float* out = nullptr;             // [n_tok][n_head][head_dim]; only the runs' rows are written
  const int32_t* block_tables = nullptr;  // device: [n_tables][max_blocks] block ids
  const flash_run* runs = nullptr;  // host array of n_runs runs (copied into the launches)
  int n_runs = 0;
  int n_tok = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int block_size = 0, max_blocks = 0;
  float scale = 1.f;
  flash_kernel kernel = flash_kernel::best;
};

// out = softmax(scale · q·Kᵀ, causal) · V for every token of every run and every head (GQA: head
// h reads kv head h / (n_head / n_head_kv)). head_dim 32, 64, 128 or 256. fp16 tensor cores with
// fp32 accumulation and an fp32 online softmax; K, V and q are rounded to fp16 on the way in.
// Runs go 32 to a launch; nothing is allocated. A kernel kind this device or head size lacks:
// cudaErrorInvalidValue.
cudaError_t launch_flash_attention(const flash_attention_args& a, cudaStream_t stream);

}  // namespace tandem
