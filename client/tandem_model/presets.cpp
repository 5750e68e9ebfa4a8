// Preset shapes. The Qwen numbers come from the Hugging Face config.json of each model
// (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// intermediate_size, vocab_size, max_position_embeddings, rope_theta, rms_norm_eps,
// tie_word_embeddings). "tiny", "llama-tiny" and "qwen3.5-tiny" are our own small shapes for tests.
// Qwen3.5-27B: its config.json text_config (linear_* fields for the DeltaNet layers,
// full_attention_interval 4, partial_rotary_factor 0.25 of head_dim 256, mrope_section [11, 11, 10]).
// Qwen3-30B-A3B: num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768, norm_topk_prob
// true (intermediate_size 6144 is written as feed_forward_length but no layer is dense).
// Qwen3.5-35B-A3B: its text_config (num_experts 256, num_experts_per_tok 8, moe_intermediate_size
// 512, shared_expert_intermediate_size 512, no intermediate_size; DeltaNet 16 key / 32 value heads of
// 128, head_dim 256 x 0.25 rotary). "moe-177b-a6b" is the motivating rig's second model as a shape:
// qwen35moe at hidden 3072, 48 layers, 512 experts x 768 top-10 plus a 768-wide shared expert and
// Qwen3.5-35B-A3B's mixer widths (16/2 heads of 256; DeltaNet 16/32 heads of 128): 177.8e9 weights,
// of which 5.9e9 are read per token besides the embeddings, about 100 GiB at Q4_K_M.
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

// The expert fields on top of a shape: n experts of ff_exp, k per token, renormalised (as both
// Qwen MoE architectures do), and a shared expert of ff_shexp (0: none).
hparams moe(hparams hp, uint32_t n, uint32_t k, uint32_t ff_exp, uint32_t ff_shexp) {
  hp.n_expert = n;
  hp.n_expert_used = k;
  hp.n_ff_exp = ff_exp;
  hp.n_ff_shexp = ff_shexp;
  hp.expert_weights_norm = true;
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
    {"qwen3moe-tiny", "qwen3moe", "test model: qwen3moe, 2 layers, 256 wide, 8 experts x 256 top-2, vocab 512",
     moe(shape(512, 2048, 256, 2, 512, 4, 2, 64, 1e-6f, 1e6f, false), 8, 2, 256, 0)},
    {"qwen3.5moe-tiny", "qwen35moe",
     "test model: qwen35moe, 4 layers (3 DeltaNet + 1 attention), 256 wide, 8 experts x 256 top-2 + shared 512, "
     "vocab 512",
     moe(hybrid(shape(512, 4096, 256, 4, 0, 4, 2, 64, 1e-6f, 1e7f, false), 2, 4, 32, 32, 16, {3, 3, 2, 0}), 8, 2,
         256, 512)},
    {"qwen3-30b-a3b", "qwen3moe", "shape of Qwen3-30B-A3B (128 experts x 768, top-8)",
     moe(shape(151936, 40960, 2048, 48, 6144, 32, 4, 128, 1e-6f, 1e6f, false), 128, 8, 768, 0)},
    {"qwen3.5-35b-a3b", "qwen35moe",
     "shape of Qwen3.5-35B-A3B (30 DeltaNet + 10 gated-attention layers; 256 experts x 512 top-8 + shared 512)",
     moe(hybrid(shape(248320, 262144, 2048, 40, 0, 16, 2, 256, 1e-6f, 1e7f, false), 16, 32, 128, 128, 64,
                {11, 11, 10, 0}),
         256, 8, 512, 512)},
    {"moe-177b-a6b", "qwen35moe",
     "177B-total / 6B-active qwen35moe (48 layers, 3072 wide, 512 experts x 768 top-10 + shared 768; ~100 GiB "
     "at Q4_K_M)",
     moe(hybrid(shape(248320, 262144, 3072, 48, 0, 16, 2, 256, 1e-6f, 1e7f, false), 16, 32, 128, 128, 64,
                {11, 11, 10, 0}),
         512, 10, 768, 768)},
};

}  // namespace

const model_preset* find_preset(std::string_view name) {
  for (const auto& p : k_presets)
    if (p.name == name) return &p;
  return nullptr;
}

const std::vector<model_preset>& all_presets() { return k_presets; }

}  // namespace tandem
