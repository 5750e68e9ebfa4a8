// Preset shapes. The Qwen numbers come from the Hugging Face config.json of each model
// (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// intermediate_size, vocab_size, max_position_embeddings, rope_theta, rms_norm_eps,
// tie_word_embeddings). "tiny" and "llama-tiny" are our own small shapes for tests.
#include "presets.h"

namespace tandem {
namespace {

hparams shape(uint32_t vocab, uint32_t ctx, uint32_t embd, uint32_t layers, uint32_t ff,
              uint32_t heads, uint32_t kv_heads, uint32_t head_dim, float eps, float theta,
              bool tied) {
  hparams hp;
  hp.n_vocab = vocab;
  hp.n_ctx_train = ctx;
  hp.n_embd = embd;
  hp.n_layer = layers;
  hp.n_ff = ff;
  hp.n_head = heads;
  hp.n_head_kv = kv_heads;
  hp.head_dim = head_dim;
  hp.rope_dim = head_dim;
  hp.rms_eps = eps;
  hp.rope_theta = theta;
  hp.tied_output = tied;
  return hp;
}

const std::vector<model_preset> k_presets = {
    {"tiny", "qwen3", "test model: qwen3, 2 layers, 256 wide, vocab 512",
     shape(512, 2048, 256, 2, 512, 4, 2, 64, 1e-6f, 1e6f, false)},
    {"llama-tiny", "llama", "test model: llama, 2 layers, 256 wide, vocab 512",
     shape(512, 2048, 256, 2, 768, 4, 2, 64, 1e-5f, 1e4f, false)},
    {"qwen2-0.5b", "qwen2", "shape of Qwen2-0.5B (tied embeddings, q/k/v biases)",
     shape(151936, 131072, 896, 24, 4864, 14, 2, 64, 1e-6f, 1e6f, true)},
    {"qwen3-0.6b", "qwen3", "shape of Qwen3-0.6B (tied embeddings)",
     shape(151936, 40960, 1024, 28, 3072, 16, 8, 128, 1e-6f, 1e6f, true)},
    {"qwen3-8b", "qwen3", "shape of Qwen3-8B",
     shape(151936, 40960, 4096, 36, 12288, 32, 8, 128, 1e-6f, 1e6f, false)},
    {"qwen3-32b", "qwen3", "shape of Qwen3-32B",
     shape(151936, 40960, 5120, 64, 25600, 64, 8, 128, 1e-6f, 1e6f, false)},
};

}  // namespace

const model_preset* find_preset(std::string_view name) {
  for (const auto& p : k_presets)
    if (p.name == name) return &p;
  return nullptr;
}

const std::vector<model_preset>& all_presets() { return k_presets; }

}  // namespace tandem
