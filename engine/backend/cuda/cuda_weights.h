// The model's weights in device memory: matrices kept in their GGUF types (one allocation, each
// tensor 256-byte aligned), norm weights, biases and the DeltaNet vectors as float32. Uploaded
// through pinned staging by several threads (cuda_upload.h).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_upload.h"
#include "model/model_desc.h"

namespace tandem {

// A weight matrix on the device, stored {n_in, n_out} as in the file.
struct device_matrix {
  ggml_type type = ggml_type::f32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  uint64_t row_bytes = 0;
};

struct device_layer {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* q_norm = nullptr;  // nullptr unless qk_norm
  const float* k_norm = nullptr;
  const float* bq = nullptr;      // nullptr unless qkv_bias
  const float* bk = nullptr;
  const float* bv = nullptr;
  device_matrix wq, wk, wv, wo, gate, up, down;  // wq of a hybrid model: [q, gate] rows per head
  // Gated DeltaNet layers (hybrid models; empty elsewhere).
  device_matrix dn_qkv, dn_gate, dn_beta, dn_alpha, dn_out;
  device_matrix dn_ba;  // beta's rows then alpha's, when they lie back to back (else n_out 0)
  const float* dn_conv = nullptr;     // [conv_dim][K], tap 0 oldest
  const float* dn_dt_bias = nullptr;  // [Hv]
  const float* dn_a = nullptr;        // [Hv], = -exp(A_log)
  const float* dn_norm = nullptr;     // [dv]
  // Mixture-of-experts layers (empty elsewhere): the router {n_embd, n_expert}, the routed
  // experts stacked {n_in, n_out, n_expert} (expert e's rows from e * n_out, so n_out here counts
  // all experts' rows), and the shared expert with its gate row {n_embd, 1}.
  device_matrix router, gate_exps, up_exps, down_exps;
  device_matrix shexp_gate, gate_shexp, up_shexp, down_shexp;
};

struct device_weights {
  device_buffer matrices;  // GGUF-typed tensors
  device_buffer vectors;   // float32 norms and biases
  std::vector<device_layer> layers;
  device_matrix token_embd, output;
  const float* output_norm = nullptr;
};

// Which part of the model a device holds: a layer range, plus the token embedding (the first
// stage) and the output norm and head (the last). Layers outside the range stay empty. A tensor
// split also cuts every layer: KV heads [kv_head_begin, kv_head_end) with their query heads
// (rows of Q/K/V, inputs of the output projection) and FFN columns [ffn_begin, ffn_end) (rows
// of gate/up, inputs of down); the defaults keep all of them.
struct weight_range {
  uint32_t layer_begin = 0, layer_end = UINT32_MAX;
  bool embedding = true, head = true;
  uint32_t kv_head_begin = 0, kv_head_end = UINT32_MAX;
  uint64_t ffn_begin = 0, ffn_end = UINT64_MAX;
};

// Checks every tensor type against what the kernels compute with, then uploads `range` (up.device
// is ctx's).
status upload_weights(const model_desc& desc, const cuda_context& ctx, const upload_options& up,
                      const weight_range& range, device_weights& w, cuda_load_stats& stats);

}  // namespace tandem
