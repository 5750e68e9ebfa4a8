// Host launchers for mixture-of-experts routing: softmax over each token's router logits, then its
// top k experts and their weights; for decode also the router mat-vec fused in. Device pointers;
// graph capturable (fixed grids).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
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

// Workspace bytes of launch_moe_router_route: a completion counter then the logits (when
// logits_out is null); 0 for bad sizes. The counter sits first, so a workspace sized for more
// tokens or experts serves smaller launches.
size_t moe_router_route_work_bytes(int n_tok, int n_expert);

// Decode routing in one launch: logits[t][e] = router[e] · xn[t] (router: n_expert rows of n_embd
// float32, row-major; xn: n_tok rows of n_embd), then launch_moe_route's selection and weights on
// those logits (the same device code: ties, NaN and renorm rules identical); when shexp_gate (one
// row of n_embd) is not null also gate_logit[t] = shexp_gate · xn[t]. Each dot product sums in a
// fixed order that depends on n_embd only (not on n_tok or the other rows): deterministic, and
// a token's logits are the same whatever the batch (the order differs from launch_matvec's).
// logits_out (nullable, n_tok * n_expert floats) receives the logits. work:
// moe_router_route_work_bytes(n_tok, n_expert) bytes, zeroed once before its first use (each
// launch leaves its counter at 0 again, graph replays included), not shared with a launch that
// may run at the same time. Requirements: 0 <= n_tok <= k_moe_matvec_max_tokens, n_embd > 0 and
// a multiple of 4, n_expert and k as launch_moe_route, gate_logit not null when shexp_gate is
// not, else cudaErrorInvalidValue (null pointers too); router, shexp_gate and xn 16-byte aligned,
// work 4-byte aligned, else cudaErrorMisalignedAddress. n_tok == 0 launches nothing. The router
// and gate rows are read before the launch waits on its predecessor (programmatic dependent
// launch), so the kernels just before it on the stream must not write them.
cudaError_t launch_moe_router_route(const float* router, const float* shexp_gate, const float* xn, int n_tok,
                                    int64_t n_embd, int n_expert, int k, bool renorm, int32_t* ids, float* weights,
                                    float* gate_logit, float* logits_out, void* work, cudaStream_t stream);

}  // namespace tandem
