// Active bytes and parameters per token: dense matrices whole, routed experts at k / n_expert.
#include "plan/active_weights.h"

namespace tandem {

active_weights active_per_token(const model_desc& d, uint32_t layer_begin, uint32_t layer_end, bool head) {
  active_weights a;
  if (head && d.output) {
    a.bytes += d.output->n_bytes;
    a.params += d.output->n_elements;
  }
  const auto& hp = d.hp;
  for (uint32_t il = layer_begin; il < layer_end && il < d.layers.size(); ++il) {
    const layer_weights& l = d.layers[il];
    // The matrices of every kind of layer (not the DeltaNet conv kernel: K taps per channel, no
    // matrix product), the router and the shared expert.
    for (const gguf_tensor* t : {l.wq, l.wk, l.wv, l.wo, l.dn_qkv, l.dn_gate, l.dn_beta, l.dn_alpha,
                                 l.dn_out, l.ffn_gate, l.ffn_up, l.ffn_down, l.ffn_gate_inp, l.ffn_gate_shexp,
                                 l.ffn_up_shexp, l.ffn_down_shexp}) {
      if (!t || t->n_dims < 2) continue;
      a.bytes += t->n_bytes;
      a.params += t->n_elements;
    }
    if (!hp.moe()) continue;
    // A token reads k experts' rows of each expert tensor: k / n_expert of it (every expert has
    // the same rows and row size).
    for (const gguf_tensor* t : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps}) {
      if (!t) continue;
      const uint64_t b = t->n_bytes / hp.n_expert * hp.n_expert_used;
      a.bytes += b;
      a.expert_bytes += b;
      a.params += t->n_elements / hp.n_expert * hp.n_expert_used;
    }
  }
  return a;
}

active_weights active_per_token(const model_desc& d) { return active_per_token(d, 0, d.hp.n_layer, true); }

uint64_t routed_expert_bytes(const model_desc& d) {
  uint64_t n = 0;
  for (const auto& l : d.layers)
    for (const gguf_tensor* t : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps})
      if (t) n += t->n_bytes;
  return n;
}

}  // namespace tandem
