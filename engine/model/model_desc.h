// model_desc: an architecture, its hyperparameters and every weight bound to a tensor of an open
// GGUF file (views into the mapping, no copies). Binding checks each tensor's shape and type.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "gguf/gguf_reader.h"
#include "model/arch_spec.h"

namespace tandem {

// The weights of one transformer block. Optional ones are nullptr when the arch lacks them.
struct layer_weights {
  const gguf_tensor* attn_norm = nullptr;
  const gguf_tensor* wq = nullptr;
  const gguf_tensor* wk = nullptr;
  const gguf_tensor* wv = nullptr;
  const gguf_tensor* bq = nullptr;  // qkv_bias
  const gguf_tensor* bk = nullptr;
  const gguf_tensor* bv = nullptr;
  const gguf_tensor* q_norm = nullptr;  // qk_norm
  const gguf_tensor* k_norm = nullptr;
  const gguf_tensor* wo = nullptr;
  const gguf_tensor* ffn_norm = nullptr;
  const gguf_tensor* ffn_gate = nullptr;
  const gguf_tensor* ffn_up = nullptr;
  const gguf_tensor* ffn_down = nullptr;
};

struct model_desc {
  const arch_spec* arch = nullptr;
  hparams hp;
  const gguf_tensor* token_embd = nullptr;
  const gguf_tensor* output_norm = nullptr;
  const gguf_tensor* output = nullptr;  // == token_embd when hp.tied_output
  std::vector<layer_weights> layers;
};

// Reads general.architecture and the hyperparameters, then binds every expected tensor. Errors
// name the tensor: missing, wrong shape (expected vs found), or a type the engine cannot compute
// with. The file must outlive the returned description.
result<model_desc> bind_model(const gguf_file& file);

// The layer_weights member a per-layer tensor name ("attn_q.weight", ...) fills, or nullptr.
const gguf_tensor** layer_slot(layer_weights& w, std::string_view suffix);

// A GGUF file together with its bound description, kept at a stable address.
struct loaded_model {
  std::unique_ptr<gguf_file> file;
  model_desc desc;
};
result<loaded_model> load_model(const std::string& path);

}  // namespace tandem
