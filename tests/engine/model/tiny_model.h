// Builds tiny random-weight GGUF models in memory for tests (gguf_writer + expected_tensors), so
// every engine test runs on a real bound model without files on disk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "gguf/gguf_reader.h"
#include "model/model_desc.h"

namespace tandem::test {

struct tiny_model_options {
  std::string arch = "qwen3";
  hparams hp = default_hparams();
  ggml_type matrix_type = ggml_type::f32;  // every 2-D weight, the embedding included
  uint64_t seed = 1;
  std::string skip_tensor;        // leave this tensor out (to test the error)
  std::string misshape_tensor;    // give this tensor one extra row
  bool write_tokens = false;      // add tokenizer.ggml.tokens of n_vocab entries

  static hparams default_hparams();
  static hparams qwen35_hparams();  // arch "qwen35": 3 DeltaNet layers + 1 attention layer
  static hparams qwen3moe_hparams();   // arch "qwen3moe": 8 experts of 32, top-2
  static hparams qwen35moe_hparams();  // arch "qwen35moe": qwen35's layers, 8 experts top-2, shared 64
};

struct tiny_model {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf_file> file;
  model_desc desc;
};

result<std::vector<uint8_t>> tiny_model_bytes(const tiny_model_options& opt);
// Builds and binds; the error is bind_model's when the options break the model.
result<std::unique_ptr<tiny_model>> make_tiny_model(const tiny_model_options& opt);

// Uniform in [lo, hi), reproducible from the seed on every platform.
std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi);

}  // namespace tandem::test
