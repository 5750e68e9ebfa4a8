// Host launcher for mixture-of-experts routing: softmax over each token's router logits, then its
// top k experts and their weights. Device pointers; graph capturable (fixed grid).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/moe.h"

namespace tandem {

// Per token t: p = softmax(logits[t * n_expert ...]) in float32 (max subtracted), then the k
// largest: ids[t * k + j], weights[t * k + j] for j = 0..k-1 in descending order, ties to the
// lower expert id. With renorm the k weights are divided by their sum (so they sum to 1).
// Selection compares logits (softmax is monotone), so equal logits tie exactly on CPU and GPU
// whatever exp's last-bit rounding; distinct logits whose weights round equal keep logit order.
// NaN logits are never selected unless fewer than k are not NaN (then the lowest ids come).
// 1 <= n_expert <= k_moe_max_experts, 1 <= k <= min(n_expert, k_moe_max_k), n_tok >= 0; else
// cudaErrorInvalidValue. Deterministic (one warp per token, fixed reduction order).
cudaError_t launch_moe_route(const float* logits, int n_tok, int n_expert, int k, bool renorm, int32_t* ids,
                             float* weights, cudaStream_t stream);

// Decode's FFN norm and float32 router in one launch: xn = RMSNorm(x) * norm_w for each of n_tok
// rows of n_embd (the bits launch_rms_norm_q8 gives, and with work xn's int8 copy in
// matvec_x_parts(work, n_embd, n_tok) as it writes it), and logits[t * n_expert + e] = router
// row e · xn[t] in float32 (block sums, not the mat-vec's order). Fits (moe_router_norm_fits)
// 1..k_matvec_max_tokens tokens and n_embd of 1024..8192, a multiple of 32; pointers 16-byte
// aligned; 1 <= n_expert <= k_moe_max_experts. xn must not alias x.
bool moe_router_norm_fits(int n_tok, int64_t n_embd);
cudaError_t launch_moe_router_norm(const float* x, const float* norm_w, float eps, const float* router, int n_expert,
                                   int64_t n_embd, int n_tok, float* logits, float* xn, void* work,
                                   cudaStream_t stream);

}  // namespace tandem
