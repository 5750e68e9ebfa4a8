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

// Every tensor the description binds, each once (a tied output head is token_embd).
std::vector<const gguf_tensor*> model_tensors(const model_desc& d);
// Their file bytes.
uint64_t model_tensor_bytes(const model_desc& d);

// A GGUF file together with its bound description, kept at a stable address.
struct loaded_model {
  std::unique_ptr<gguf_file> file;
  model_desc desc;
};
result<loaded_model> load_model(const std::string& path);

}  // namespace tandem
