// Mixture-of-experts operations of the CPU reference (qwen3moe, qwen35moe): routing as a pure
// function, and the MoE FFN that computes only the experts each token selected. Plain float32; the
// CUDA kernels are held to these (moe_route's selection exactly, the FFN within a tolerance).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/ops.h"

namespace tandem {

class thread_pool;

// Routing of n_tok tokens over n_expert experts from their router logits ([n_tok][n_expert]):
// per token the k experts of largest logit (equivalently of largest softmax probability), ties
// broken by the lower expert id, written to ids_out[t*k .. t*k+k) in that order (descending
// weight; equal weights: lower id first). weights_out gets each selected expert's softmax
// probability (float32 softmax over all n_expert logits, max subtracted), divided by the sum of
// the k selected probabilities when renorm. Selection compares logits rather than probabilities so
// that it does not depend on how exp rounds: GPU and CPU select the same experts for the same
// logits. Requires 1 <= k <= n_expert.
void moe_route(const float* logits, int64_t n_tok, int n_expert, int k, bool renorm, int32_t* ids_out,
               float* weights_out);

// Expert e of a 3-D expert tensor {n_in, n_out, n_expert} seen as one {n_in, n_out} matrix.
weight_view expert_view(const weight_view& stacked, int64_t n_out, int expert);

// One layer's MoE FFN weights as the CPU backend holds them.
struct moe_weights {
  weight_view router;                        // ffn_gate_inp {n_embd, n_expert}
  weight_view gate_exps, up_exps, down_exps;  // 3-D, viewed as n_expert·n_out rows
  int n_expert = 0, n_used = 0;
  int64_t n_ff_exp = 0;
  bool renorm = true;
  // Shared expert (n_ff_shexp > 0): out += sigmoid(shexp_gate · x) · down(silu(gate x) * up x).
  std::vector<float> shexp_gate;  // ffn_gate_inp_shexp {n_embd}
  weight_view gate_shexp, up_shexp, down_shexp;
  int64_t n_ff_shexp = 0;
};

// Scratch the FFN reuses between calls (sized on demand).
struct moe_scratch {
  std::vector<float> logits, weights, xs, gate, up, ys;
  std::vector<int32_t> ids;
};

// out[t] = sum over token t's selected experts e of w_e · down_e(silu(gate_e x) * up_e x)
//          (+ the gated shared expert), for the T rows of x ([T][n_embd]); out is [T][n_embd],
// overwritten. Tokens are grouped by expert so each expert's rows are read once per call.
void moe_ffn(thread_pool& pool, const moe_weights& w, const float* x, int64_t T, int64_t n_embd, float* out,
             moe_scratch& s);

}  // namespace tandem
