// Preset shapes. The Qwen numbers come from the Hugging Face config.json of each model
// (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// intermediate_size, vocab_size, max_position_embeddings, rope_theta, rms_norm_eps,
// tie_word_embeddings). "tiny", "llama-tiny" and "qwen3.5-tiny" are our own small shapes for tests.
// Qwen3.5-27B: its config.json text_config (linear_* fields for the DeltaNet layers,
// full_attention_interval 4, partial_rotary_factor 0.25 of head_dim 256, mrope_section [11, 11, 10]).
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

// The hybrid (qwen35) fields on top of a shape: DeltaNet key/value heads and sizes, conv kernel,
// the attention interval, rotary dims and RoPE sections.
hparams hybrid(hparams hp, uint32_t k_heads, uint32_t v_heads, uint32_t k_dim, uint32_t v_dim, uint32_t rope_dim,
               std::array<uint32_t, 4> sections) {
  hp.full_attn_interval = 4;
  hp.ssm_conv_kernel = 4;
  hp.ssm_groups = k_heads;
  hp.ssm_dt_rank = v_heads;
  hp.ssm_state = k_dim;
  hp.ssm_inner = v_heads * v_dim;
  hp.rope_dim = rope_dim;
  hp.rope_sections = sections;
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
    {"qwen3.5-tiny", "qwen35", "test model: qwen35, 4 layers (3 DeltaNet + 1 attention), 256 wide, vocab 512",
     hybrid(shape(512, 4096, 256, 4, 512, 4, 2, 64, 1e-6f, 1e7f, false), 2, 4, 32, 32, 16, {3, 3, 2, 0})},
    {"qwen3.5-27b", "qwen35", "shape of Qwen3.5-27B (48 DeltaNet + 16 gated-attention layers)",
     hybrid(shape(248320, 262144, 5120, 64, 17408, 24, 4, 256, 1e-6f, 1e7f, false), 16, 48, 128, 128, 64,
            {11, 11, 10, 0})},
};

}  // namespace

const model_preset* find_preset(std::string_view name) {
  for (const auto& p : k_presets)
    if (p.name == name) return &p;
  return nullptr;
}

const std::vector<model_preset>& all_presets() { return k_presets; }

}  // namespace tandem
