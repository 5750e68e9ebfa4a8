// A model description from an architecture, hyperparameters and a per-tensor type rule, without a
// file: tensors carry shapes, types and byte sizes but no data. Enough to plan memory for a model
// that is not on disk (a Qwen3-32B-shaped Q4_K_M description instead of a 20 GB file).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string_view>

#include "core/result.h"
#include "model/model_desc.h"

namespace tandem {

struct shape_model {
  std::deque<gguf_tensor> tensors;  // stable addresses: the description points into it
  model_desc desc;
};

// The type each expected tensor gets (e.g. llama.cpp's Q4_K_M mixture).
using tensor_type_rule = std::function<ggml_type(const tensor_spec&)>;

// Errors: an unknown architecture, or a type whose block does not divide a tensor's rows.
result<std::unique_ptr<shape_model>> make_shape_model(std::string_view arch, const hparams& hp,
                                                      const tensor_type_rule& type_of);

}  // namespace tandem
