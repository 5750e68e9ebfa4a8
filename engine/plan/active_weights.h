// What one token reads and multiplies of a model's weights: every dense matrix whole, and of a
// mixture-of-experts layer the router, the shared expert and k of the n_expert routed experts. The
// decode roofline (bytes per token) and prefill's active FLOPs both come from here, so a backend's
// figure and bench's are the same sum.
#pragma once

#include <cstdint>

#include "model/model_desc.h"

namespace tandem {

struct active_weights {
  // File bytes of the weight matrices one decode token reads: each layer matrix (routed-expert
  // tensors at n_expert_used / n_expert of their bytes: k experts' rows) and the output head.
  // Norm and bias vectors, and the one embedding row, are negligible and not counted.
  uint64_t bytes = 0;
  uint64_t expert_bytes = 0;  // the routed experts' part of `bytes`
  // Matrix weights a token multiplies with (2 FLOPs each): the same tensors (2-D and the experts'
  // active share), the output head included.
  uint64_t params = 0;
};

// Over layers [layer_begin, layer_end), plus the output head when `head`.
active_weights active_per_token(const model_desc& d, uint32_t layer_begin, uint32_t layer_end, bool head);
// The whole model.
active_weights active_per_token(const model_desc& d);

// File bytes of every routed-expert tensor (the part of a MoE model a token mostly does not read).
uint64_t routed_expert_bytes(const model_desc& d);

}  // namespace tandem
