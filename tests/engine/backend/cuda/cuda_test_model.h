// The tiny random model the CUDA backend tests share: rows of 256 so that every block type fits,
// head size 64 as the kernels support, 4 query / 2 KV heads, a 96-token vocabulary.
#pragma once

#include <string>

#include "tiny_model.h"

namespace tandem::test {

inline tiny_model_options cuda_tiny_options(const std::string& arch, ggml_type matrix_type, uint64_t seed,
                                            uint32_t n_layer = 0) {
  tiny_model_options opt;
  opt.arch = arch;
  opt.matrix_type = matrix_type;
  opt.seed = seed;
  if (n_layer) opt.hp.n_layer = n_layer;
  opt.hp.n_embd = 256;
  opt.hp.n_ff = 512;
  opt.hp.n_head = 4;
  opt.hp.n_head_kv = 2;
  opt.hp.head_dim = 64;
  opt.hp.rope_dim = 64;
  opt.hp.n_vocab = 96;
  opt.hp.tied_output = arch == "qwen2";
  return opt;
}

}  // namespace tandem::test
