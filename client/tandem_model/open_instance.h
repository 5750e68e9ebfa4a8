// The model-opening step that run, perplexity and logits share: KV type by name, context, threads
// and backend choice, with failures reported through fail().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/model_instance.h"

namespace tandem {

struct open_args {
  std::string model;
  std::string kv_type;  // "f16", "q8_0", "f32"
  uint32_t n_ctx = 0;   // 0: the model's training context
  unsigned threads = 0;
  int gpu = -1;  // -1: the CPU reference backend
  std::string gpus;    // several GPUs (a layer or tensor split); see instance_options
  std::string ratios;
  std::string split;   // with gpus: layer (default) or tensor
  uint32_t n_batch = 512;  // most tokens in one forward pass (the memory plan counts them)
};

std::unique_ptr<model_instance> open_instance(const open_args& a);

// --gpu N, --gpus LIST, --ratios R and --split MODE, the same for every command that opens a model.
void add_device_options(CLI::App* cmd, open_args& a);

}  // namespace tandem
